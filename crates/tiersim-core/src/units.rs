//! Units and the parsers for the human forms used in config files (`"16GiB"`, `"100ns"`,
//! `"38.4GB/s"`, `"2.25GHz"`). Simulated time is integer nanoseconds everywhere.

/// Simulated time in nanoseconds.
pub type Ns = u64;
/// A size or count of bytes.
pub type Bytes = u64;
/// Dense id of a page touched by the trace (0..pages_touched).
pub type PageId = u32;
/// Index of a memory node in the platform's node list.
pub type NodeId = u16;

fn split_number(s: &str) -> Option<(f64, &str)> {
    let s = s.trim();
    let end = s
        .char_indices()
        .find(|(_, c)| !(c.is_ascii_digit() || *c == '.' || *c == '_' || *c == 'e' || *c == '+'))
        .map(|(i, _)| i)
        .unwrap_or(s.len());
    // `e` inside a unit (e.g. none today) would confuse the split; units here never start with e.
    let (num, unit) = s.split_at(end);
    let num: String = num.chars().filter(|c| *c != '_').collect();
    let v: f64 = num.parse().ok()?;
    if !v.is_finite() || v < 0.0 {
        return None;
    }
    Some((v, unit.trim()))
}

/// Parse a byte size: `4096`, `64B`, `4KiB`, `16GiB`, `1.5TB` (SI and binary prefixes).
pub fn parse_bytes(s: &str) -> Result<Bytes, String> {
    let (v, unit) = split_number(s).ok_or_else(|| format!("expected a size like \"16GiB\", got {s:?}"))?;
    let mult: f64 = match unit {
        "" | "B" => 1.0,
        "KiB" | "K" => 1024.0,
        "MiB" | "M" => 1024.0 * 1024.0,
        "GiB" | "G" => 1024.0 * 1024.0 * 1024.0,
        "TiB" | "T" => 1024.0f64.powi(4),
        "kB" | "KB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "TB" => 1e12,
        _ => return Err(format!("unknown size unit {unit:?} in {s:?}; use B, KiB, MiB, GiB, TiB, kB, MB, GB or TB")),
    };
    let bytes = v * mult;
    if bytes > u64::MAX as f64 {
        return Err(format!("size {s:?} is too large"));
    }
    Ok(bytes.round() as u64)
}

/// Parse a duration into ns: `100ns`, `1.5us`, `2ms`, `1s`. A bare number is ns.
pub fn parse_duration_ns(s: &str) -> Result<Ns, String> {
    let (v, unit) = split_number(s).ok_or_else(|| format!("expected a duration like \"100ns\", got {s:?}"))?;
    let mult = match unit {
        "" | "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        _ => return Err(format!("unknown time unit {unit:?} in {s:?}; use ns, us, ms or s")),
    };
    Ok((v * mult).round() as u64)
}

/// Parse a bandwidth into bytes per second: `38.4GB/s`, `32GiB/s`, `800MB/s`.
pub fn parse_bandwidth(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let body = t
        .strip_suffix("/s")
        .ok_or_else(|| format!("expected a bandwidth like \"38.4GB/s\", got {s:?}"))?;
    let b = parse_bytes_f64(body).map_err(|e| format!("{e} (in bandwidth {s:?})"))?;
    if b <= 0.0 {
        return Err(format!("bandwidth {s:?} must be positive"));
    }
    Ok(b)
}

fn parse_bytes_f64(s: &str) -> Result<f64, String> {
    let (v, unit) = split_number(s).ok_or_else(|| format!("expected a number with a unit, got {s:?}"))?;
    let mult: f64 = match unit {
        "" | "B" => 1.0,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        "kB" | "KB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "TB" => 1e12,
        _ => return Err(format!("unknown unit {unit:?}")),
    };
    Ok(v * mult)
}

/// Parse a frequency into Hz: `2.25GHz`, `800MHz`.
pub fn parse_frequency(s: &str) -> Result<f64, String> {
    let (v, unit) = split_number(s).ok_or_else(|| format!("expected a frequency like \"2.25GHz\", got {s:?}"))?;
    let mult = match unit {
        "Hz" => 1.0,
        "kHz" => 1e3,
        "MHz" => 1e6,
        "GHz" => 1e9,
        _ => return Err(format!("unknown frequency unit {unit:?} in {s:?}; use Hz, kHz, MHz or GHz")),
    };
    if v <= 0.0 {
        return Err(format!("frequency {s:?} must be positive"));
    }
    Ok(v * mult)
}

/// Format bytes with a binary prefix for reports (`1.50 GiB`).
pub fn format_bytes(b: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i < U.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{b} B")
    } else {
        format!("{v:.2} {}", U[i])
    }
}

/// Time in ns to transfer `bytes` at `bytes_per_s`, rounded up so a transfer is never free.
#[inline]
pub fn transfer_ns(bytes: u64, bytes_per_s: f64) -> Ns {
    let t = (bytes as f64) * 1e9 / bytes_per_s;
    (t.ceil() as u64).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("4096").unwrap(), 4096);
        assert_eq!(parse_bytes("4KiB").unwrap(), 4096);
        assert_eq!(parse_bytes("16GiB").unwrap(), 16 << 30);
        assert_eq!(parse_bytes("2 MiB").unwrap(), 2 << 20);
        assert_eq!(parse_bytes("1.5GB").unwrap(), 1_500_000_000);
        assert!(parse_bytes("12 parsecs").unwrap_err().contains("unknown size unit"));
        assert!(parse_bytes("-4KiB").is_err());
        assert!(parse_bytes("").is_err());
    }

    #[test]
    fn durations_and_rates() {
        assert_eq!(parse_duration_ns("100ns").unwrap(), 100);
        assert_eq!(parse_duration_ns("1.5us").unwrap(), 1500);
        assert_eq!(parse_duration_ns("2ms").unwrap(), 2_000_000);
        assert_eq!(parse_duration_ns("7").unwrap(), 7);
        assert!(parse_duration_ns("3 fortnights").is_err());
        assert_eq!(parse_bandwidth("38.4GB/s").unwrap(), 38.4e9);
        assert_eq!(parse_bandwidth("1GiB/s").unwrap(), 1073741824.0);
        assert!(parse_bandwidth("38.4GB").is_err());
        assert_eq!(parse_frequency("2.25GHz").unwrap(), 2.25e9);
        // 64 B at 38.4 GB/s is 1.67 ns: rounded up to 2, never 0.
        assert_eq!(transfer_ns(64, 38.4e9), 2);
        assert_eq!(transfer_ns(0, 38.4e9), 1);
        assert_eq!(transfer_ns(4096, 4.096e9), 1000);
    }
}
