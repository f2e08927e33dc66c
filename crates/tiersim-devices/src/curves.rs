//! Measured bandwidth-latency curves, read as their tools publish them. Each file's format is
//! told by its content, never by its name:
//! - Mess (Esmaili-Dokht et al., arXiv 2405.10170; bsc-mem/Mess-simulator `Standalone/data/`):
//!   one file `bwlat_R.txt` per traffic mix, R = percent reads (the name is where Mess keeps the
//!   mix), rows of "bandwidth MB/s, latency" from the saturated end down to idle. Mess publishes
//!   some systems' latency in CPU cycles: `Units::cycles_ghz` converts. Idle rows may carry a
//!   small negative bandwidth (measurement noise around zero): such rows are clamped to zero, and
//!   the curve's notes say so, because their latency is a valid idle sample.
//! - Intel MLC `--loaded_latency` output, as printed: one table (inject delay, latency ns,
//!   bandwidth MB/s) per run, the mix taken from the run's `-W<n>` traffic type (`-R` or none:
//!   all reads). Several runs may be concatenated in one file.
//! - CSV (comma, tab or semicolon separated) with a header naming a bandwidth column
//!   (`bandwidth_mbs` or `bandwidth_gbs`), a latency column (`latency_ns` or `latency_cycles`)
//!   and optionally the mix (`read_percent`, `read_ratio` in percent, or `read_fraction`),
//!   as `tiersim characterize` writes `bwlat.csv`.

use std::path::{Path, PathBuf};

use tiersim_core::{Error, Result};

/// One measured curve.
#[derive(Debug, Clone, PartialEq)]
pub struct Curve {
    /// Fraction of reads in the load, 0..=1.
    pub read_ratio: f64,
    /// (bandwidth bytes/s, latency ns), in file order.
    pub points: Vec<(f64, f64)>,
    /// Where it was read: the file, and for MLC output the run's traffic type.
    pub source: String,
    /// What the reader did to the rows as published (unit conversion, noise clamped).
    pub notes: Vec<String>,
}

/// Rows below this fraction of the maximum bandwidth count as idle; a negative bandwidth within
/// it is noise around zero.
const IDLE_FRACTION: f64 = 0.02;

/// What every "not a curve" error says was expected.
const EXPECTED: &str = "expected Mess rows (bandwidth MB/s, latency), Intel MLC --loaded_latency output, or CSV \
                        with a header naming bandwidth_mbs|bandwidth_gbs and latency_ns|latency_cycles";

/// The unit and origin of latency in files that do not state them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Units {
    /// Latency in CPU cycles at this clock (GHz), as Mess publishes some systems'; None:
    /// nanoseconds. Applies to Mess rows and to CSV `latency_cycles`.
    pub cycles_ghz: Option<f64>,
    /// Nanoseconds added to every latency (after conversion): the on-chip path from the core to
    /// the port a curve was measured from (Mess's CXL curves start at the CXL host port), so that
    /// the model's latency is from the core like every other device's.
    pub port_ns: f64,
}

impl Units {
    fn convert(&self, value: f64, cycles: bool) -> f64 {
        let ns = if cycles { self.cycles_ghz.map_or(value, |g| value / g) } else { value };
        ns + self.port_ns
    }

    /// What was done to the latency column, for the curve's notes.
    fn notes(&self, cycles: bool) -> Vec<String> {
        let mut out = Vec::new();
        if let (true, Some(g)) = (cycles, self.cycles_ghz) {
            out.push(format!("latency in cycles at {g} GHz, divided by {g}"));
        }
        if self.port_ns != 0.0 {
            out.push(format!("{} ns of on-chip path added to every latency", self.port_ns));
        }
        out
    }
}

/// One data row before checks: (line, bandwidth MB/s, latency ns).
type Row = (u64, f64, f64);

impl Curve {
    /// Parse Mess rows (bandwidth MB/s, latency ns); `name` is used in errors.
    pub fn parse(name: &str, read_ratio: f64, text: &str) -> Result<Curve> {
        parse_mess(Path::new(name), read_ratio, text, Units::default())
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
        let (lo, hi) = rising_span(&self.points, |p| p.0);
        let mut pts = self.points[lo..=hi].to_vec();
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

    /// Read percentage, rounded.
    pub fn percent(&self) -> u32 {
        (self.read_ratio * 100.0).round() as u32
    }
}

/// Ends of the rising branch of `rows`: (the first row of maximum bandwidth, the idle end), the
/// idle end being the last row when the file runs down from saturation as Mess writes it, the
/// first when it runs upward.
fn branch_ends<T>(rows: &[T], bw: impl Fn(&T) -> f64) -> (usize, usize) {
    let max = rows.iter().map(&bw).fold(f64::NEG_INFINITY, f64::max);
    let top = rows.iter().position(|r| bw(r) >= max).unwrap_or(0);
    let descending = bw(&rows[0]) >= bw(&rows[rows.len() - 1]);
    (top, if descending { rows.len() - 1 } else { 0 })
}

/// Index range of the rising branch: from the idle end to the row of maximum bandwidth.
fn rising_span<T>(rows: &[T], bw: impl Fn(&T) -> f64) -> (usize, usize) {
    let (top, idle) = branch_ends(rows, bw);
    (top.min(idle), top.max(idle))
}

/// Read percentage of a Mess file name: `bwlat_R` followed by the end, a dot or an underscore
/// (`bwlat_52.txt`, `bwlat_52_v2eb5ef69.txt`).
pub fn ratio_of(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("bwlat_")?;
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || !matches!(rest.as_bytes().get(digits), None | Some(b'.') | Some(b'_')) {
        return None;
    }
    rest[..digits].parse().ok().filter(|r| *r <= 100)
}

fn shown(path: &Path) -> String {
    path.display().to_string()
}

fn line_err(path: &Path, line: u64, msg: impl Into<String>) -> Error {
    Error::line(path, line, msg)
}

/// What a file's content is.
enum Kind {
    Mess,
    /// Mess rows of one column: bandwidth only (Mess publishes cxl/bwlat_0.txt so).
    BandwidthOnly,
    Mlc,
    Csv,
    /// None of the formats: the error to give when the file was asked for by name.
    Other(Error),
}

/// Content lines that are neither blank nor `#` comments, with their line numbers.
fn content_lines(text: &str) -> impl Iterator<Item = (u64, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i as u64 + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
}

fn numbers(line: &str) -> Option<Vec<f64>> {
    line.split(|c: char| c.is_whitespace() || c == ',')
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<f64>().ok())
        .collect()
}

fn is_mlc(text: &str) -> bool {
    text.lines().any(|l| {
        let l = l.trim();
        l.contains("Memory Latency Checker")
            || (l.starts_with("Inject") && l.contains("Latency") && l.contains("Bandwidth"))
    })
}

/// The text of a file, or the error that names the line holding its first byte that is not
/// text (a NUL, or bytes that are not UTF-8).
fn text_of(path: &Path, bytes: &[u8]) -> Result<String> {
    let valid = std::str::from_utf8(bytes).map_or_else(|e| e.valid_up_to(), str::len);
    let bad = bytes[..valid].iter().position(|&b| b == 0).or((valid < bytes.len()).then_some(valid));
    if let Some(at) = bad {
        let line = bytes[..at].iter().filter(|&&b| b == b'\n').count() as u64 + 1;
        return Err(line_err(
            path,
            line,
            format!("binary data (byte 0x{:02x} at offset {at}), not a text curve; {EXPECTED}", bytes[at]),
        ));
    }
    Ok(String::from_utf8_lossy(bytes).into_owned())
}

fn sniff(path: &Path, text: &str) -> Kind {
    let Some((line, first)) = content_lines(text).next() else {
        return Kind::Other(line_err(path, 1, format!("empty file; {EXPECTED}")));
    };
    if is_mlc(text) {
        return Kind::Mlc;
    }
    if let Some(cols) = numbers(first) {
        let one_column = content_lines(text).all(|(_, l)| numbers(l).is_some_and(|v| v.len() == 1));
        return if one_column && cols.len() == 1 { Kind::BandwidthOnly } else { Kind::Mess };
    }
    match csv_columns(first) {
        Some(_) => Kind::Csv,
        None => Kind::Other(line_err(path, line, format!("not a curve: `{}`; {EXPECTED}", clip(first)))),
    }
}

/// A line cut for an error message.
fn clip(line: &str) -> String {
    if line.chars().count() > 80 {
        format!("{}...", line.chars().take(80).collect::<String>())
    } else {
        line.to_owned()
    }
}

/// Read every curve in one file, telling its format by its content; a Mess file's mix comes from its
/// name (`bwlat_R...`), MLC output's from each run's traffic type, a CSV's from its mix column.
pub fn read_file(path: &Path, units: Units) -> Result<Vec<Curve>> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let text = text_of(path, &bytes)?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    match sniff(path, &text) {
        Kind::Mess => {
            let r = ratio_of(&name).ok_or_else(|| {
                line_err(
                    path,
                    content_lines(&text).next().map_or(1, |l| l.0),
                    "Mess rows, but the read percentage is not in the file name: Mess names each file \
                     bwlat_R.txt (R = percent reads)",
                )
            })?;
            Ok(vec![parse_mess(path, f64::from(r) / 100.0, &text, units)?])
        }
        Kind::BandwidthOnly => Err(line_err(
            path,
            content_lines(&text).next().map_or(1, |l| l.0),
            "one column (bandwidth only, the latency column is empty); a curve needs bandwidth and latency",
        )),
        Kind::Mlc => parse_mlc(path, &text, units),
        Kind::Csv => parse_csv(path, &text, ratio_of(&name), units),
        Kind::Other(e) => Err(e),
    }
}

fn parse_mess(path: &Path, read_ratio: f64, text: &str, units: Units) -> Result<Curve> {
    let unit = if units.cycles_ghz.is_some() { "cycles" } else { "ns" };
    let mut rows = Vec::new();
    for (line, l) in content_lines(text) {
        match numbers(l).as_deref() {
            Some([bw, lat]) if bw.is_finite() && lat.is_finite() => rows.push((line, *bw, units.convert(*lat, true))),
            _ => {
                return Err(line_err(
                    path,
                    line,
                    format!("expected two numbers (bandwidth MB/s, latency {unit}), got `{}`", clip(l)),
                ))
            }
        }
    }
    finish(path, read_ratio, rows, shown(path), units.notes(true))
}

/// Check the rows of one curve and make it: at least 3 rows, positive latency, negative
/// bandwidth only as noise at idle (clamped to zero), and a bandwidth that rises with load.
fn finish(path: &Path, read_ratio: f64, mut rows: Vec<Row>, source: String, mut notes: Vec<String>) -> Result<Curve> {
    let Some(&(first_line, ..)) = rows.first() else {
        return Err(line_err(path, 1, format!("no data rows; {EXPECTED}")));
    };
    if rows.len() < 3 {
        let n = rows.len();
        return Err(line_err(
            path,
            first_line,
            format!("{n} row{}; a curve needs at least 3, from idle up to saturation", if n == 1 { "" } else { "s" }),
        ));
    }
    if let Some(&(line, _, lat)) = rows.iter().find(|r| r.2 <= 0.0) {
        return Err(line_err(path, line, format!("latency {lat} is not positive")));
    }
    let max = rows.iter().map(|r| r.1).fold(f64::NEG_INFINITY, f64::max);
    let min = rows.iter().map(|r| r.1).fold(f64::INFINITY, f64::min);
    if max <= 0.0 || max - min <= 1e-9 * max {
        return Err(line_err(
            path,
            first_line,
            format!(
                "the bandwidth never rises (every row holds {max} MB/s); a \
                 curve runs from idle up to saturation"
            ),
        ));
    }
    let mut clamped = Vec::new();
    for r in &mut rows {
        if r.1 < 0.0 {
            if -r.1 > IDLE_FRACTION * max {
                return Err(line_err(
                    path,
                    r.0,
                    format!(
                        "bandwidth {} MB/s is negative beyond idle noise (more than {:.0} % of the maximum {max} MB/s)",
                        r.1,
                        IDLE_FRACTION * 100.0
                    ),
                ));
            }
            clamped.push(format!("{} ({} MB/s)", r.0, r.1));
            r.1 = 0.0;
        }
    }
    if !clamped.is_empty() {
        notes.push(format!(
            "clamped to 0 MB/s, idle noise kept as idle latency samples: line{} {}",
            if clamped.len() == 1 { "" } else { "s" },
            clamped.join(", ")
        ));
    }
    let (top, idle) = branch_ends(&rows, |r| r.1);
    let (top, bottom) = (rows[top], rows[idle]);
    if top.2 <= bottom.2 {
        return Err(line_err(
            path,
            top.0,
            format!(
                "the bandwidth never rises with load: its maximum {} MB/s has latency {} ns, no more than the \
                 {} ns of the idle end (line {}); a curve's latency climbs as its bandwidth rises",
                top.1, top.2, bottom.2, bottom.0
            ),
        ));
    }
    let points = rows.iter().map(|r| (r.1 * 1e6, r.2)).collect();
    Ok(Curve { read_ratio, points, source, notes })
}

/// Read share of an MLC `-W<n>` traffic type, as the MLC readme lists them (reads and writes as
/// the memory controller sees them).
fn mlc_mix(w: u32) -> Option<f64> {
    Some(match w {
        2 | 7 => 2.0 / 3.0,
        3 | 9 => 0.75,
        5 | 8 => 0.5,
        6 => 0.0,
        19 => 0.9,
        _ => return None,
    })
}

/// The mix of an MLC command line: `-W<n>`, `-R` or neither (all reads); Err: an unknown `-W`.
fn mlc_command_mix(line: &str) -> std::result::Result<(f64, String), String> {
    for arg in line.split_whitespace() {
        if let Some(n) = arg.strip_prefix("-W") {
            let w: u32 = n.parse().map_err(|_| format!("`{arg}` is not a traffic type -W<n>"))?;
            return mlc_mix(w).map(|m| (m, format!("-W{w}"))).ok_or_else(|| {
                format!("traffic type -W{w} has no read share known here; known: -R (all reads), -W2, -W3, -W5, -W6, -W7, -W8, -W9, -W19")
            });
        }
    }
    Ok((1.0, "-R".to_owned()))
}

fn parse_mlc(path: &Path, text: &str, units: Units) -> Result<Vec<Curve>> {
    if units.cycles_ghz.is_some() {
        return Err(Error::arg("cycles_ghz", format!("{}: Intel MLC reports latency in ns, not cycles", shown(path))));
    }
    let mut out = Vec::new();
    // The current run's mix: from its command line, else the traffic type line before the table.
    let mut mix: Option<(f64, String)> = None;
    let mut table: Option<(u64, f64, String, Vec<Row>)> = None;
    let end = |t: Option<(u64, f64, String, Vec<Row>)>, out: &mut Vec<Curve>| -> Result<()> {
        if let Some((_, r, what, rows)) = t {
            out.push(finish(path, r, rows, format!("{} (MLC {what})", shown(path)), units.notes(false))?);
        }
        Ok(())
    };
    for (i, raw) in text.lines().enumerate() {
        let line = i as u64 + 1;
        let l = raw.trim();
        if let Some((_, _, _, rows)) = table.as_mut() {
            if l.starts_with("Delay") || l.starts_with("====") {
                continue;
            }
            if let Some(v) = numbers(l).filter(|v| !v.is_empty()) {
                match v.as_slice() {
                    [_, lat, bw] if lat.is_finite() && bw.is_finite() => {
                        rows.push((line, *bw, units.convert(*lat, false)));
                        continue;
                    }
                    _ => {
                        return Err(line_err(
                            path,
                            line,
                            format!(
                                "expected an MLC row (inject delay, latency ns, bandwidth MB/s), got `{}`",
                                clip(l)
                            ),
                        ))
                    }
                }
            }
            end(table.take(), &mut out)?;
        }
        if l.contains("Memory Latency Checker") {
            mix = None;
        } else if let Some(cmd) = l.strip_prefix("Command line parameters:") {
            mix = Some(mlc_command_mix(cmd).map_err(|m| line_err(path, line, m))?);
        } else if l.starts_with("Using Read-only traffic type") && mix.is_none() {
            mix = Some((1.0, "read-only".to_owned()));
        } else if l.starts_with("Inject") && l.contains("Latency") && l.contains("Bandwidth") {
            let (r, what) = mix.clone().ok_or_else(|| {
                line_err(
                    path,
                    line,
                    "an MLC table without its traffic type: expected the run's `Command line parameters:` line \
                     (with -W<n> or -R) or `Using Read-only traffic type` before it",
                )
            })?;
            table = Some((line, r, what, Vec::new()));
        }
    }
    end(table.take(), &mut out)?;
    if out.is_empty() {
        let line = content_lines(text).next().map_or(1, |l| l.0);
        return Err(line_err(
            path,
            line,
            "Intel MLC output without a loaded-latency table (`Inject Latency Bandwidth`): run mlc --loaded_latency",
        ));
    }
    Ok(out)
}

/// Columns of a CSV header: (delimiter, bandwidth column, its MB/s factor, latency column, its
/// cycles flag, mix column with its divisor to a fraction). None: not a curve header.
struct CsvColumns {
    delimiter: u8,
    bandwidth: (usize, f64),
    latency: (usize, bool),
    mix: Option<(usize, f64)>,
}

fn normalise(name: &str) -> String {
    let s: String =
        name.trim().to_ascii_lowercase().chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    s.split('_').filter(|p| !p.is_empty()).collect::<Vec<_>>().join("_")
}

fn csv_columns(header: &str) -> Option<CsvColumns> {
    let delimiter = [b',', b'\t', b';'].into_iter().find(|d| header.as_bytes().contains(d))?;
    let names: Vec<String> = header.split(delimiter as char).map(normalise).collect();
    let find = |want: &[(&str, f64)]| {
        names.iter().enumerate().find_map(|(i, n)| want.iter().find(|(w, _)| n == w).map(|(_, f)| (i, *f)))
    };
    let bandwidth =
        find(&[("bandwidth_mbs", 1.0), ("bandwidth_mb_s", 1.0), ("bandwidth_gbs", 1e3), ("bandwidth_gb_s", 1e3)])?;
    let latency = find(&[("latency_ns", 0.0), ("latency_cycles", 1.0)])?;
    let mix = find(&[("read_percent", 100.0), ("read_ratio", 100.0), ("read_fraction", 1.0)]);
    Some(CsvColumns { delimiter, bandwidth, latency: (latency.0, latency.1 > 0.0), mix })
}

fn parse_csv(path: &Path, text: &str, named_ratio: Option<u32>, units: Units) -> Result<Vec<Curve>> {
    let (header_line, header) = content_lines(text).next().unwrap_or((1, ""));
    let cols =
        csv_columns(header).ok_or_else(|| line_err(path, header_line, format!("not a curve header; {EXPECTED}")))?;
    let (lat_col, cycles) = cols.latency;
    match (cycles, units.cycles_ghz) {
        (true, Some(_)) | (false, None) => {}
        (true, None) => {
            return Err(line_err(path, header_line, "latency_cycles: latency in cycles needs the clock (--cycles-ghz)"))
        }
        (false, Some(_)) => {
            return Err(Error::arg(
                "cycles_ghz",
                format!("{}: its latency column is latency_ns, not cycles", shown(path)),
            ))
        }
    }
    let named = named_ratio.map(|r| f64::from(r) / 100.0);
    if cols.mix.is_none() && named.is_none() {
        return Err(line_err(
            path,
            header_line,
            "no read-mix column (read_percent, read_ratio in percent, or read_fraction) and no bwlat_R file name",
        ));
    }
    let body: String = text.lines().skip(header_line as usize - 1).map(|l| format!("{l}\n")).collect();
    let mut reader = csv::ReaderBuilder::new()
        .delimiter(cols.delimiter)
        .comment(Some(b'#'))
        .trim(csv::Trim::All)
        .flexible(true)
        .from_reader(body.as_bytes());
    let mut groups: Vec<(f64, Vec<Row>)> = Vec::new();
    let width = header.split(cols.delimiter as char).count();
    for rec in reader.records() {
        let rec = rec.map_err(|e| {
            let line = e.position().map_or(header_line, |p| p.line() + header_line - 1);
            line_err(path, line, format!("unreadable CSV row: {e}"))
        })?;
        let line = rec.position().map_or(header_line, |p| p.line() + header_line - 1);
        if rec.iter().all(str::is_empty) {
            continue;
        }
        if rec.len() != width {
            return Err(line_err(path, line, format!("{} fields, the header names {width}", rec.len())));
        }
        let num = |i: usize, what: &str| -> Result<f64> {
            rec[i].parse::<f64>().ok().filter(|v| v.is_finite()).ok_or_else(|| {
                line_err(path, line, format!("expected a number in column {} ({what}), got `{}`", i + 1, clip(&rec[i])))
            })
        };
        let bw = num(cols.bandwidth.0, "bandwidth")? * cols.bandwidth.1;
        let lat = units.convert(num(lat_col, "latency")?, cycles);
        let r = match cols.mix {
            Some((i, div)) => {
                let v = num(i, "read mix")? / div;
                if !(0.0..=1.0).contains(&v) {
                    return Err(line_err(path, line, format!("read mix {} is outside 0..{div}", &rec[i])));
                }
                v
            }
            None => named.unwrap_or(1.0),
        };
        match groups.iter_mut().find(|g| (g.0 - r).abs() < 1e-9) {
            Some(g) => g.1.push((line, bw, lat)),
            None => groups.push((r, vec![(line, bw, lat)])),
        }
    }
    if groups.is_empty() {
        return Err(line_err(path, header_line, format!("a header and no data rows; {EXPECTED}")));
    }
    let notes = units.notes(cycles);
    groups.into_iter().map(|(r, rows)| finish(path, r, rows, shown(path), notes.clone())).collect()
}

/// Curves read from files and directories, with what was passed over.
#[derive(Debug, Clone, Default)]
pub struct CurveSet {
    pub curves: Vec<Curve>,
    /// Files of a directory that hold no curve, each with the reason.
    pub skipped: Vec<String>,
}

/// Read curves from `paths`: a file is read by its content (an error if it is no curve); a
/// directory contributes its `bwlat_R*` files (an error if one is malformed; one of bandwidth
/// only is skipped, as Mess publishes some) and any other file that holds MLC output or a curve
/// CSV (other files, READMEs and plots, are skipped). `only` (percent) keeps those mixes. Two
/// curves of one mix are an error naming both.
pub fn read_paths(paths: &[PathBuf], only: &[u32], units: Units) -> Result<CurveSet> {
    if let Some(g) = units.cycles_ghz {
        if !(g.is_finite() && g > 0.0 && g <= 100.0) {
            return Err(Error::arg("cycles_ghz", format!("expected a clock in GHz, 0 < F <= 100, got {g}")));
        }
    }
    if !(units.port_ns.is_finite() && (0.0..=10_000.0).contains(&units.port_ns)) {
        return Err(Error::arg("port_ns", format!("expected nanoseconds, 0 <= F <= 10000, got {}", units.port_ns)));
    }
    let mut set = CurveSet::default();
    for path in paths {
        if path.is_dir() {
            read_dir_into(path, units, &mut set)?;
        } else {
            set.curves.extend(read_file(path, units)?);
        }
    }
    let shown_all = paths.iter().map(|p| shown(p)).collect::<Vec<_>>().join(", ");
    if !only.is_empty() {
        set.curves.retain(|c| only.contains(&c.percent()));
    }
    if set.curves.is_empty() {
        let want = if only.is_empty() { String::new() } else { format!(" with read ratios {only:?}") };
        let what = if paths.len() == 1 && paths[0].is_dir() { "directory holds" } else { "hold" };
        return Err(Error::Path {
            path: PathBuf::from(shown_all),
            msg: format!("{what} no curves{want} (Mess bwlat_R.txt, Intel MLC output or curve CSV)"),
        });
    }
    set.curves.sort_by(|a, b| a.read_ratio.total_cmp(&b.read_ratio).then(a.source.cmp(&b.source)));
    for w in set.curves.windows(2) {
        if w[0].percent() == w[1].percent() {
            return Err(Error::arg(
                "curves",
                format!(
                    "two curves at {} % reads, {} and {}: pass the files to use (or --ratio)",
                    w[0].percent(),
                    w[0].source,
                    w[1].source
                ),
            ));
        }
    }
    Ok(set)
}

fn read_dir_into(dir: &Path, units: Units, set: &mut CurveSet) -> Result<()> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| Error::Path { path: dir.into(), msg: format!("cannot read the directory: {e}") })?;
    let mut files: Vec<PathBuf> = Vec::new();
    for entry in entries {
        let entry =
            entry.map_err(|e| Error::Path { path: dir.into(), msg: format!("cannot read the directory: {e}") })?;
        if entry.path().is_file() {
            files.push(entry.path());
        }
    }
    // Directory order is the file system's: sorted, so the same directory reads the same.
    files.sort();
    for path in files {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
        let named = ratio_of(&name).is_some();
        let text = match text_of(&path, &bytes) {
            Ok(t) => t,
            Err(e) if named => return Err(e),
            Err(_) => {
                set.skipped.push(format!("{}: binary, not a curve", shown(&path)));
                continue;
            }
        };
        match sniff(&path, &text) {
            Kind::BandwidthOnly => set.skipped.push(format!("{}: bandwidth only, no latency column", shown(&path))),
            Kind::Mlc | Kind::Csv => set.curves.extend(read_file(&path, units)?),
            Kind::Mess if named => set.curves.extend(read_file(&path, units)?),
            Kind::Other(e) if named => return Err(e),
            Kind::Mess | Kind::Other(_) => set.skipped.push(format!("{}: not a curve file", shown(&path))),
        }
    }
    Ok(())
}

/// Every curve in `dir`, ascending in read ratio, latency in ns; `only` (percent) keeps those
/// ratios.
pub fn read_dir(dir: &Path, only: &[u32]) -> Result<Vec<Curve>> {
    read_dir_units(dir, only, Units::default())
}

/// `read_dir` with the latency unit of Mess rows given.
pub fn read_dir_units(dir: &Path, only: &[u32], units: Units) -> Result<Vec<Curve>> {
    if !dir.is_dir() {
        return Err(Error::Path { path: dir.into(), msg: "not a directory of curves".to_owned() });
    }
    Ok(read_paths(&[dir.to_path_buf()], only, units)?.curves)
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
