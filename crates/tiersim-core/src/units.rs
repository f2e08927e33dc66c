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
/// Whole numbers are parsed exactly; fractions go through f64.
pub fn parse_bytes(s: &str) -> Result<Bytes, String> {
    let (v, unit) = split_number(s).ok_or_else(|| format!("expected a size like \"16GiB\", got {s:?}"))?;
    let mult: u64 = match unit {
        "" | "B" => 1,
        "KiB" | "K" => 1 << 10,
        "MiB" | "M" => 1 << 20,
        "GiB" | "G" => 1 << 30,
        "TiB" | "T" => 1 << 40,
        "kB" | "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        _ => return Err(format!("unknown size unit {unit:?} in {s:?}; use B, KiB, MiB, GiB, TiB, kB, MB, GB or TB")),
    };
    let too_large = || format!("size {s:?} is too large");
    let digits: String = s.trim().trim_end_matches(unit).trim().chars().filter(|c| *c != '_').collect();
    if let Ok(whole) = digits.parse::<u64>() {
        return whole.checked_mul(mult).ok_or_else(too_large);
    }
    let bytes = v * mult as f64;
    if bytes >= u64::MAX as f64 {
        return Err(too_large());
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
    let ns = (v * mult).round();
    if ns >= u64::MAX as f64 {
        return Err(format!("duration {s:?} is too large: at most {} ns (584 years)", u64::MAX));
    }
    Ok(ns as u64)
}

/// Parse a bandwidth into bytes per second: `38.4GB/s`, `32GiB/s`, `800MB/s`.
pub fn parse_bandwidth(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let body = t.strip_suffix("/s").ok_or_else(|| format!("expected a bandwidth like \"38.4GB/s\", got {s:?}"))?;
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
    finite(v * mult, s)
}

/// `x` unless the unit's multiplier took it past the largest f64.
fn finite(x: f64, s: &str) -> Result<f64, String> {
    if x.is_finite() {
        Ok(x)
    } else {
        Err(format!("{s:?} is too large to simulate"))
    }
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
    finite(v * mult, s)
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

/// The largest binary unit that represents `b` exactly (`"16GiB"`, `"256B"`), for resolved
/// configs that read back to the same value.
pub fn format_bytes_exact(b: u64) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if b != 0 && b.is_multiple_of(1u64 << shift) {
            return format!("{}{unit}", b >> shift);
        }
    }
    format!("{b}B")
}

/// The largest unit that represents `ns` exactly (`"80us"`, `"110ns"`).
pub fn format_duration_exact(ns: Ns) -> String {
    for (div, unit) in [(1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "us")] {
        if ns != 0 && ns.is_multiple_of(div) {
            return format!("{}{unit}", ns / div);
        }
    }
    format!("{ns}ns")
}

/// A rate with an SI prefix (`"38.4GB/s"`, `"2.25GHz"`) if it parses back to exactly `v`,
/// else the plain number of base units.
pub fn format_rate_exact(v: f64, base: &str, parse: fn(&str) -> Result<f64, String>) -> String {
    let unit = |p: &str| if base == "Hz" { format!("{p}Hz") } else { format!("{p}B/s") };
    for (mult, prefix) in [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")] {
        if v >= mult {
            let text = format!("{}{}", v / mult, unit(prefix));
            if parse(&text) == Ok(v) {
                return text;
            }
        }
    }
    format!("{v}{base}")
}

/// Time in ns to transfer `bytes` at `bytes_per_s`, rounded up so a transfer is never free.
#[inline]
pub fn transfer_ns(bytes: u64, bytes_per_s: f64) -> Ns {
    let t = (bytes as f64) * 1e9 / bytes_per_s;
    (t.ceil() as u64).max(1)
}

/// Parse a CPU list like "0-31,64-95".
pub fn parse_cpu_list(s: &str) -> std::result::Result<Vec<u32>, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.trim(), b.trim()),
            None => (part, part),
        };
        let a: u32 = a.parse().map_err(|_| format!("bad CPU number {a:?} in {s:?}"))?;
        let b: u32 = b.parse().map_err(|_| format!("bad CPU number {b:?} in {s:?}"))?;
        if b < a {
            return Err(format!("empty CPU range {part:?}"));
        }
        out.extend(a..=b);
    }
    Ok(out)
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
        assert_eq!(parse_bytes("18446744073709551615B").unwrap(), u64::MAX);
        assert!(parse_bytes("16777216TiB").unwrap_err().contains("too large"));
    }

    #[test]
    fn durations_and_rates() {
        assert_eq!(parse_duration_ns("100ns").unwrap(), 100);
        assert_eq!(parse_duration_ns("1.5us").unwrap(), 1500);
        assert_eq!(parse_duration_ns("2ms").unwrap(), 2_000_000);
        assert_eq!(parse_duration_ns("7").unwrap(), 7);
        assert!(parse_duration_ns("1e30s").unwrap_err().contains("too large"));
        assert!(parse_duration_ns("nan").is_err() && parse_duration_ns("infns").is_err());
        assert!(parse_bandwidth("1e306TB/s").unwrap_err().contains("too large to simulate"));
        assert!(parse_frequency("1e305GHz").unwrap_err().contains("too large to simulate"));
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

    #[test]
    fn exact_formats_read_back() {
        assert_eq!(format_bytes_exact(16 << 30), "16GiB");
        assert_eq!(format_bytes_exact(256), "256B");
        assert_eq!(format_bytes_exact(0), "0B");
        assert_eq!(format_bytes_exact(1536), "1536B");
        assert_eq!(format_duration_exact(80_000), "80us");
        assert_eq!(format_duration_exact(110), "110ns");
        assert_eq!(format_duration_exact(0), "0ns");
        assert_eq!(format_rate_exact(38.4e9, "B/s", parse_bandwidth), "38.4GB/s");
        assert_eq!(format_rate_exact(2.25e9, "Hz", parse_frequency), "2.25GHz");
        for v in [38.4e9 * 0.85, 1073741824.0, 27e9, 1e-3, 123456789.123] {
            let t = format_rate_exact(v, "B/s", parse_bandwidth);
            assert_eq!(parse_bandwidth(&t), Ok(v), "{t}");
        }
        for b in [1, 4095, 4096, 1 << 20, 3 << 30, u64::MAX / 2] {
            assert_eq!(parse_bytes(&format_bytes_exact(b)), Ok(b));
        }
    }
}
