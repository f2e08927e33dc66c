//! `tiersim calibrate`: fit the `dram` or `cxl` model to measured bandwidth-latency curves (Mess
//! format, curves.rs). The maxima per read ratio fix the sustained rate and the write cost (and
//! for cxl the link bandwidth); the idle rows fix the idle latency; the rising branches fix the
//! load term of loaded.rs by least squares on relative error. `compare` scores any `bwlat` run
//! against the curves at fixed fractions of each curve's maximum.

use tiersim_core::{Error, Params, Result};

use crate::characterize::Table;
use crate::curves::{fit_maxima, Curve, CurveSet};

/// Fractions of the measured maximum bandwidth at which latency is compared.
pub const FRACTIONS: &[f64] = &[0.1, 0.3, 0.5, 0.7, 0.8, 0.9];

/// Utilisations beyond this are left to the channel queues (the `load_max_util` default).
const MAX_UTIL: f64 = 0.97;

/// A fitted device: parameter overrides on top of the base preset.
#[derive(Debug, Clone)]
pub struct Fit {
    pub device: &'static str,
    pub params: toml::Table,
}

fn ns(v: f64) -> toml::Value {
    toml::Value::String(format!("{}ns", v.round().max(0.0) as u64))
}

fn round(v: f64, digits: i32) -> toml::Value {
    let m = 10f64.powi(digits);
    toml::Value::Float((v * m).round() / m)
}

/// Least squares with non-negativity on the read-only terms: features per point are
/// [u, w u, g, w g] (g = u / (1 - u)); every subset of features is tried and the best fit whose
/// linear and queueing coefficients stay non-negative for all write fractions wins.
fn fit_load(points: &[(f64, f64, f64, f64)]) -> [f64; 4] {
    // points: (u, w, excess ns, weight)
    let feats = |u: f64, w: f64| {
        let g = u / (1.0 - u);
        [u, w * u, g, w * g]
    };
    let mut best = ([0.0; 4], f64::INFINITY);
    for mask in 0u32..16 {
        let idx: Vec<usize> = (0..4).filter(|i| mask & (1 << i) != 0).collect();
        let k = idx.len();
        let mut a = vec![vec![0.0; k + 1]; k];
        for &(u, w, y, wt) in points {
            let f = feats(u, w);
            for (r, &i) in idx.iter().enumerate() {
                for (c, &j) in idx.iter().enumerate() {
                    a[r][c] += wt * f[i] * f[j];
                }
                a[r][k] += wt * f[i] * y;
            }
        }
        let Some(x) = solve(a) else { continue };
        let mut coef = [0.0; 4];
        for (r, &i) in idx.iter().enumerate() {
            coef[i] = x[r];
        }
        let ok = [0.0, 1.0].iter().all(|w| coef[0] + coef[1] * w >= 0.0 && coef[2] + coef[3] * w >= 0.0);
        if !ok {
            continue;
        }
        let sse: f64 = points
            .iter()
            .map(|&(u, w, y, wt)| {
                let f = feats(u, w);
                let m: f64 = (0..4).map(|i| coef[i] * f[i]).sum();
                wt * (m - y) * (m - y)
            })
            .sum();
        if sse < best.1 - 1e-12 {
            best = (coef, sse);
        }
    }
    best.0
}

/// Gaussian elimination on an augmented k x (k+1) matrix; None when singular.
fn solve(mut a: Vec<Vec<f64>>) -> Option<Vec<f64>> {
    let k = a.len();
    for c in 0..k {
        let p = (c..k).max_by(|&i, &j| a[i][c].abs().total_cmp(&a[j][c].abs()))?;
        if a[p][c].abs() < 1e-12 {
            return None;
        }
        a.swap(c, p);
        // The pivot row, read while every other row is written.
        let pivot = a[c].clone();
        for (r, row) in a.iter_mut().enumerate() {
            if r != c {
                let f = row[c] / pivot[c];
                for (x, pv) in row[c..=k].iter_mut().zip(&pivot[c..=k]) {
                    *x -= f * pv;
                }
            }
        }
    }
    Some((0..k).map(|i| a[i][k] / a[i][i]).collect())
}

/// Rising-branch points of every curve as (utilisation, write fraction, excess over `idle`,
/// weight) with utilisation = bandwidth / `max(read_ratio)`.
fn load_points(curves: &[Curve], idle: f64, max: impl Fn(f64) -> f64) -> Vec<(f64, f64, f64, f64)> {
    let mut out = Vec::new();
    for c in curves {
        let m = max(c.read_ratio);
        for (bw, lat) in c.rising() {
            let u = bw / m;
            if u > 0.02 && u <= MAX_UTIL {
                out.push((u, 1.0 - c.read_ratio, lat - idle, 1.0 / (lat * lat)));
            }
        }
    }
    out
}

fn mean_idle(curves: &[Curve]) -> f64 {
    curves.iter().map(Curve::idle).sum::<f64>() / curves.len() as f64
}

fn put_load(t: &mut toml::Table, coef: [f64; 4]) {
    for (key, v) in ["load_linear_ns", "load_linear_write_ns", "load_queue_ns", "load_queue_write_ns"].iter().zip(coef)
    {
        t.insert((*key).to_owned(), round(v, 3));
    }
}

/// Fit `dram` on top of `base` (its channel count and channel bandwidth are kept).
pub fn fit_dram(curves: &[Curve], base: &Params) -> Result<Fit> {
    let peak = base.uint("channels") as f64 * base.bandwidth("channel_bandwidth");
    let (read_rate, write_cost) = fit_maxima(curves);
    let efficiency = read_rate / peak;
    if efficiency > 1.0 {
        return Err(Error::config(
            "channels",
            format!(
                "the curves sustain {:.1} GB/s of reads, more than the {:.1} GB/s peak of the base \
                 channels: raise channels or channel_bandwidth",
                read_rate / 1e9,
                peak / 1e9
            ),
        ));
    }
    let burst_ns = base.bytes("burst") as f64 / (read_rate / base.uint("channels") as f64) * 1e9;
    let idle = mean_idle(curves);
    let max = |r: f64| read_rate / (r + (1.0 - r) * write_cost);
    let coef = fit_load(&load_points(curves, idle, max));
    let mut t = toml::Table::new();
    t.insert("efficiency".into(), round(efficiency, 4));
    t.insert("write_cost".into(), round(write_cost, 3));
    t.insert("read_latency".into(), ns(idle - burst_ns));
    t.insert("write_latency".into(), ns(idle - burst_ns));
    put_load(&mut t, coef);
    Ok(Fit { device: "dram", params: t })
}

/// Maximum data bandwidth of the cxl model at read fraction `r`: the busiest of the two link
/// directions (`link` bytes/s each, data lines and headers) and the media.
fn cxl_max(r: f64, link: f64, line: f64, header: f64, media: f64, write_cost: f64) -> f64 {
    let up = (r * header + (1.0 - r) * line) / link;
    let down = (r * line + (1.0 - r) * header) / link;
    let med = (r + (1.0 - r) * write_cost) * line / media;
    line / up.max(down).max(med)
}

/// Fit `cxl` on top of `base` (media channels, rate and latency, link line and header kept):
/// link bandwidth and media write cost by grid search on the maxima, then the link latency from
/// the idle rows and the load term.
pub fn fit_cxl(curves: &[Curve], base: &Params) -> Result<Fit> {
    let line = base.bytes("link_line") as f64;
    let header = base.bytes("link_header") as f64;
    let media =
        base.uint("media_channels") as f64 * base.bandwidth("media_channel_bandwidth") * base.float("media_efficiency");
    let top = curves.iter().map(Curve::max_bandwidth).fold(0.0, f64::max);
    let err = |link: f64, wc: f64| -> f64 {
        curves
            .iter()
            .map(|c| (cxl_max(c.read_ratio, link, line, header, media, wc) / c.max_bandwidth()).ln().powi(2))
            .sum()
    };
    let mut best = (top, 1.0, f64::INFINITY);
    for i in 0..=400 {
        let link = top * (0.5 + 2.5 * f64::from(i) / 400.0);
        for j in 0..=300 {
            let wc = 0.5 + 3.5 * f64::from(j) / 300.0;
            let e = err(link, wc);
            if e < best.2 - 1e-15 {
                best = (link, wc, e);
            }
        }
    }
    let (link, write_cost, _) = best;
    let media_burst_ns = base.bytes("media_burst") as f64 / (media / base.uint("media_channels") as f64) * 1e9;
    let path_ns = (header + line) / link * 1e9 + media_burst_ns + base.duration("media_read_latency") as f64;
    let idle = mean_idle(curves);
    if idle <= path_ns {
        return Err(Error::config(
            "media_read_latency",
            format!("the curves' idle latency {idle:.0} ns is below the base media path ({path_ns:.0} ns): lower media_read_latency"),
        ));
    }
    let max = |r: f64| cxl_max(r, link, line, header, media, write_cost);
    let coef = fit_load(&load_points(curves, idle, max));
    let mut t = toml::Table::new();
    let gbs = toml::Value::String(format!("{:.2}GB/s", link / 1e9));
    t.insert("link_read_bandwidth".into(), gbs.clone());
    t.insert("link_write_bandwidth".into(), gbs);
    t.insert("link_latency".into(), ns(idle - path_ns));
    t.insert("media_write_cost".into(), round(write_cost, 3));
    put_load(&mut t, coef);
    Ok(Fit { device: "cxl", params: t })
}

/// The model's curve for one read ratio out of a `bwlat` table.
pub fn model_curve(table: &Table, read_percent: f64) -> Option<Curve> {
    let (r, bw, lat) = (table.col("read_ratio")?, table.col("bandwidth_mbs")?, table.col("latency_ns")?);
    let text: String = (0..r.len())
        .filter(|&i| (r[i] - read_percent).abs() < 1e-9)
        .map(|i| format!("{} {}\n", bw[i], lat[i]))
        .collect();
    Curve::parse("model", read_percent / 100.0, &text).ok()
}

/// One compared point.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub fraction: f64,
    pub bandwidth: f64,
    pub measured_ns: f64,
    pub model_ns: f64,
}

impl Point {
    pub fn error(&self) -> f64 {
        self.model_ns / self.measured_ns - 1.0
    }
}

/// A read ratio's comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    pub read_percent: f64,
    pub measured_max: f64,
    pub model_max: f64,
    pub points: Vec<Point>,
}

impl Comparison {
    pub fn max_error(&self) -> f64 {
        self.model_max / self.measured_max - 1.0
    }

    pub fn worst_latency_error(&self) -> f64 {
        self.points.iter().map(|p| p.error().abs()).fold(0.0, f64::max)
    }
}

/// Compare a `bwlat` table with the measured curves at `FRACTIONS` of each curve's maximum;
/// a curve whose read ratio the table lacks is an error naming it.
pub fn compare(table: &Table, curves: &[Curve]) -> Result<Vec<Comparison>> {
    curves
        .iter()
        .map(|c| {
            let pct = (c.read_ratio * 100.0).round();
            let m = model_curve(table, pct).ok_or_else(|| {
                Error::arg("read_ratios", format!("the model run has no {pct} % read curve to compare"))
            })?;
            let measured_max = c.max_bandwidth();
            let points = FRACTIONS
                .iter()
                .map(|&f| {
                    let bw = f * measured_max;
                    Point { fraction: f, bandwidth: bw, measured_ns: c.latency_at(bw), model_ns: m.latency_at(bw) }
                })
                .collect();
            Ok(Comparison { read_percent: pct, measured_max, model_max: m.max_bandwidth(), points })
        })
        .collect()
}

/// Comparisons as JSON for the CLI.
pub fn to_json(cmp: &[Comparison]) -> serde_json::Value {
    serde_json::Value::Array(
        cmp.iter()
            .map(|c| {
                serde_json::json!({
                    "read_percent": c.read_percent,
                    "measured_max_gbs": c.measured_max / 1e9,
                    "model_max_gbs": c.model_max / 1e9,
                    "max_error": c.max_error(),
                    "points": c.points.iter().map(|p| serde_json::json!({
                        "fraction": p.fraction,
                        "bandwidth_gbs": p.bandwidth / 1e9,
                        "measured_ns": p.measured_ns,
                        "model_ns": p.model_ns,
                        "error": p.error(),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect(),
    )
}

/// The measured curves as JSON rows (read percent, MB/s, ns), for overlays.
pub fn curves_json(curves: &[Curve]) -> serde_json::Value {
    serde_json::Value::Array(
        curves
            .iter()
            .map(|c| {
                serde_json::json!({
                    "read_percent": (c.read_ratio * 100.0).round(),
                    "bandwidth_mbs": c.points.iter().map(|p| p.0 / 1e6).collect::<Vec<_>>(),
                    "latency_ns": c.points.iter().map(|p| p.1).collect::<Vec<_>>(),
                })
            })
            .collect(),
    )
}

/// What `tiersim calibrate` produces: a platform file holding the fitted device, the same
/// device as a preset file, the model's `bwlat` run at the curves' read ratios, and its
/// comparison with the curves.
pub struct Calibration {
    pub fit: Fit,
    pub platform_toml: String,
    pub preset_toml: String,
    pub table: Table,
    pub comparisons: Vec<Comparison>,
}

/// Fit `device` (dram or cxl) on top of preset `base` with `overrides` to the curves of `set`
/// (`label`: the paths as given, for the platform's name), run the fitted model's `bwlat` and compare.
pub fn calibrate(
    set: &CurveSet,
    label: &str,
    device: &str,
    base: &str,
    overrides: Option<&toml::Table>,
) -> Result<Calibration> {
    use crate::characterize::{characterize, Target};
    let curves = &set.curves;
    let fit_device = match device {
        "dram" => fit_dram,
        "cxl" => fit_cxl,
        _ => return Err(Error::arg("device", format!("`{device}` cannot be calibrated; valid: dram, cxl"))),
    };
    // The base is a preset named by `--base`: Target names its argument `device`.
    let target = Target::resolve(base, overrides).map_err(|e| match e {
        Error::Arg { arg, msg } if arg == "device" => Error::Arg { arg: "base".to_owned(), msg },
        e => e,
    })?;
    if target.entry.info.name != device {
        return Err(Error::arg("base", format!("`{base}` is a {} preset, not a {device} one", target.entry.info.name)));
    }
    let resolved = target.resolved()?;
    let fit = fit_device(curves, &resolved)?;
    let mut params = overrides.cloned().unwrap_or_default();
    params.extend(fit.params.clone());
    let fitted = Target::resolve(base, Some(&params))?;
    let ratios: Vec<u32> = curves.iter().map(Curve::percent).collect();
    let table = characterize(&fitted, &["bwlat".to_owned()], false, &ratios)?.remove(0);
    let comparisons = compare(&table, curves)?;
    let origin = origin(set, device, base);
    let platform_toml = platform(label, &origin, device, base, params.clone())?;
    // The preset file carries every parameter of the base with the fit on top, so that it reads
    // back without the base.
    let mut full = fitted.resolved()?.to_toml();
    full.extend(params);
    let summary = format!("{device} fitted by tiersim calibrate to {label}");
    let preset_toml = format!("# {origin}\n{}", crate::presets::to_file_text(device, &summary, &origin, &full)?);
    Ok(Calibration { fit, platform_toml, preset_toml, table, comparisons })
}

/// One sentence saying what was fitted to what: the command, the files with their mixes and
/// units, and what the reader did to rows as published.
fn origin(set: &CurveSet, device: &str, base: &str) -> String {
    let files: Vec<String> = set
        .curves
        .iter()
        .map(|c| {
            let notes = if c.notes.is_empty() { String::new() } else { format!("; {}", c.notes.join("; ")) };
            format!("{} ({} % reads{notes})", c.source, c.percent())
        })
        .collect();
    format!("Fitted by tiersim calibrate (device {device} on top of preset {base}) to {}.", files.join(", "))
}

/// A one-socket platform around the fitted device (a CXL device gets a DDR5 socket beside it).
fn platform(label: &str, origin: &str, device: &str, base: &str, params: toml::Table) -> Result<String> {
    let first = label.split_whitespace().next().unwrap_or(label);
    let stem = std::path::Path::new(first)
        .file_stem()
        .map(|s| s.to_string_lossy().replace(|c: char| !c.is_ascii_alphanumeric(), "_"))
        .unwrap_or_default();
    let fitted = toml::toml! { preset = base capacity = "256GiB" };
    let mut fitted = fitted;
    fitted.insert("params".into(), toml::Value::Table(params));
    let mut nodes = Vec::new();
    if device == "dram" {
        fitted.insert("name".into(), "dram0".into());
        fitted.insert("cpus".into(), "0-15".into());
        nodes.push(toml::Value::Table(fitted));
    } else {
        nodes.push(toml::Value::Table(toml::toml! { name = "dram0" preset = "ddr5_4800" capacity = "64GiB" cpus = "0-15" params = { channels = 4 } }));
        fitted.insert("name".into(), "cxl0".into());
        nodes.push(toml::Value::Table(fitted));
    }
    let mut t = toml::toml! {
        summary = "one socket of 16 CPUs with the device fitted by tiersim calibrate"
        [host]
        cpus = 16
        mlp = 8.0
    };
    t.insert("name".into(), format!("calibrated_{stem}").into());
    t.insert("nodes".into(), toml::Value::Array(nodes));
    let text = toml::to_string(&t).map_err(|e| Error::Sim(format!("writing the platform: {e}")))?;
    Ok(format!("# {origin}\n{text}"))
}
