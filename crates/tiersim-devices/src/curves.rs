//! Measured bandwidth-latency curves in the Mess benchmark's format (Esmaili-Dokht et al., arXiv
//! 2405.10170; bsc-mem/Mess-simulator `Standalone/data/`): one file `bwlat_R.txt` per traffic mix,
//! R = percent reads, rows of "bandwidth MB/s, latency ns" from the saturated end down to idle.

use std::path::Path;

use tiersim_core::{Error, Result};

/// One measured curve.
#[derive(Debug, Clone, PartialEq)]
pub struct Curve {
    /// Fraction of reads in the load, 0..=1.
    pub read_ratio: f64,
    /// (bandwidth bytes/s, latency ns), in file order.
    pub points: Vec<(f64, f64)>,
}

/// Rows below this fraction of the maximum bandwidth count as idle.
const IDLE_FRACTION: f64 = 0.02;

impl Curve {
    /// Parse one file's text; `name` is used in errors.
    pub fn parse(name: &str, read_ratio: f64, text: &str) -> Result<Curve> {
        let mut points = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let cols: Vec<&str> =
                line.split(|c: char| c.is_whitespace() || c == ',').filter(|s| !s.is_empty()).collect();
            let num = |s: &str| s.parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0);
            match (cols.len(), cols.first().and_then(|s| num(s)), cols.get(1).and_then(|s| num(s))) {
                (2, Some(bw), Some(lat)) if lat > 0.0 => points.push((bw * 1e6, lat)),
                _ => {
                    return Err(Error::config(
                        format!("{name}:{}", i + 1),
                        format!("expected two non-negative numbers (bandwidth MB/s, latency ns), got `{line}`"),
                    ))
                }
            }
        }
        if points.len() < 3 {
            return Err(Error::config(name, format!("{} rows; a curve needs at least 3", points.len())));
        }
        Ok(Curve { read_ratio, points })
    }

    /// Highest bandwidth on the curve (bytes/s).
    pub fn max_bandwidth(&self) -> f64 {
        self.points.iter().map(|p| p.0).fold(0.0, f64::max)
    }

    /// Unloaded latency: the mean of the rows below 2 % of the maximum, else the lowest row's.
    pub fn idle(&self) -> f64 {
        let cut = self.max_bandwidth() * IDLE_FRACTION;
        let low: Vec<f64> = self.points.iter().filter(|p| p.0 <= cut).map(|p| p.1).collect();
        if low.is_empty() {
            let lowest = self.points.iter().fold(self.points[0], |a, &p| if p.0 < a.0 { p } else { a });
            return lowest.1;
        }
        low.iter().sum::<f64>() / low.len() as f64
    }

    /// The rising branch: the rows from the idle end up to the row of maximum bandwidth (past
    /// it the curve bends back into saturation), ascending in bandwidth, latency made
    /// non-decreasing (measurement noise aside, more load never lowers latency). Files may run
    /// from the saturated end down, as Mess writes them, or upward.
    pub fn rising(&self) -> Vec<(f64, f64)> {
        let max = self.max_bandwidth();
        let top = self.points.iter().position(|p| p.0 >= max).unwrap_or(0);
        let descending = self.points[0].0 >= self.points[self.points.len() - 1].0;
        let mut pts: Vec<(f64, f64)> =
            if descending { self.points[top..].to_vec() } else { self.points[..=top].to_vec() };
        pts.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
        let mut top = 0.0f64;
        for p in &mut pts {
            top = top.max(p.1);
            p.1 = top;
        }
        pts
    }

    /// Latency on the rising branch at `bandwidth` (bytes/s).
    pub fn latency_at(&self, bandwidth: f64) -> f64 {
        crate::loaded::interpolate(&self.rising(), bandwidth)
    }
}

/// Read ratio of a `bwlat_R.txt` file name, in percent.
fn ratio_of(name: &str) -> Option<u32> {
    name.strip_prefix("bwlat_")?.strip_suffix(".txt")?.parse().ok().filter(|r| *r <= 100)
}

/// Every `bwlat_R.txt` in `dir`, ascending in read ratio; `only` (percent) keeps those ratios.
pub fn read_dir(dir: &Path, only: &[u32]) -> Result<Vec<Curve>> {
    let shown = dir.display().to_string();
    let entries =
        std::fs::read_dir(dir).map_err(|e| Error::config(&shown, format!("cannot read the curve directory: {e}")))?;
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::config(&shown, e.to_string()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(r) = ratio_of(&name) else { continue };
        if !only.is_empty() && !only.contains(&r) {
            continue;
        }
        let path = entry.path();
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Error::config(path.display().to_string(), format!("cannot read: {e}")))?;
        out.push(Curve::parse(&path.display().to_string(), f64::from(r) / 100.0, &text)?);
    }
    if out.is_empty() {
        let want = if only.is_empty() { String::new() } else { format!(" with read ratios {only:?}") };
        return Err(Error::config(&shown, format!("no bwlat_R.txt files{want} (R = percent reads, 0..100)")));
    }
    out.sort_by(|a, b| a.read_ratio.total_cmp(&b.read_ratio));
    Ok(out)
}

/// Per-byte channel cost of reads and writes that best explains each curve's maximum
/// (1 / max = r * read_cost + (1 - r) * write_cost, least squares on relative error); returns
/// (read bytes/s, write cost relative to a read). One mix alone: writes cost as much as reads.
pub fn fit_maxima(curves: &[Curve]) -> (f64, f64) {
    // Rows M_i * [r_i, 1 - r_i] . [x, y] = 1.
    let (mut sxx, mut sxy, mut syy, mut sx, mut sy) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for c in curves {
        let m = c.max_bandwidth();
        let (p, q) = (m * c.read_ratio, m * (1.0 - c.read_ratio));
        sxx += p * p;
        sxy += p * q;
        syy += q * q;
        sx += p;
        sy += q;
    }
    let det = sxx * syy - sxy * sxy;
    let spread = curves.iter().map(|c| c.read_ratio).fold(f64::NEG_INFINITY, f64::max)
        - curves.iter().map(|c| c.read_ratio).fold(f64::INFINITY, f64::min);
    if spread >= 0.05 && det.abs() > 1e-12 * sxx * syy {
        let x = (sx * syy - sy * sxy) / det;
        let y = (sy * sxx - sx * sxy) / det;
        if x > 0.0 && y > 0.0 {
            return (1.0 / x, y / x);
        }
    }
    let mean = curves.iter().map(Curve::max_bandwidth).sum::<f64>() / curves.len() as f64;
    (mean, 1.0)
}
