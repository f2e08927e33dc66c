//! Text trace formats, read and written as streams, and conversion between them and the native
//! format. The user names a text format; only the native format is recognised, by its magic.
//!
//! - `mqsim`: MQSim_CXL's `*.trace` lines `time dev addr size type` (the DiskSim ASCII layout
//!   of MQSim's `ASCII_Trace_Definition.h`): time in ns, non-decreasing; `dev` a device number
//!   MQSim ignores (written 0, read and dropped); `addr` a byte address, parsed as MQSim's
//!   `strtoull(.., 0)` does (decimal, `0x` hex, leading-zero octal); `size` in 512-byte
//!   sectors, checked to be a whole number above 0 and then ignored: MQSim_CXL forces every line to one
//!   64 B access (`num_sec` = 8 only selects the 4 KiB page), and so does the importer, at the
//!   64 B block holding the address; `type`
//!   1 read, 0 write. No CPU. Written the other way, an access becomes one line per 64 B block
//!   it touches (size field 8, as MQSim_CXL's trace translator writes).
//! - `lackey`: Valgrind `--tool=lackey --trace-mem=yes` output: `I  addr,size` instruction
//!   fetches, ` L addr,size` loads, ` S` stores, ` M` modifies (load then store), hex addresses
//!   and decimal sizes; `==pid==` lines are Valgrind's messages. A data access's time is the
//!   number of `I` lines since the previous one. One thread, so CPU 0.
//! - `csv`: an optional `# tiersim time_unit=.. addr_kind=.. page_size=..` line, the header
//!   `time,cpu,op,addr,size,file`, then one access per row (`op` R or W; `addr` decimal or 0x
//!   hex; `file` 1 for a page-cache page, 0 for anonymous memory). Files with the older header
//!   `time,cpu,op,addr,size` (no `file` column) read as anonymous memory.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use tiersim_core::{Access, Error, Op, Result};

use crate::format::{
    check_page_size, AddrKind, TimeUnit, TraceHeader, TraceMeta, TraceReader, TraceStats, TraceWriter, MAGIC,
};
use crate::AccessSource;

/// What one MQSim_CXL trace line is, whatever its size field says.
pub const MQSIM_ACCESS: u64 = 64;

/// The formats `tiersim trace convert` reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Native,
    Mqsim,
    Lackey,
    Csv,
}

impl Format {
    pub const NAMES: &'static [&'static str] = &["native", "mqsim", "lackey", "csv"];

    pub fn parse(name: &str) -> Result<Format> {
        match name {
            "native" => Ok(Format::Native),
            "mqsim" => Ok(Format::Mqsim),
            "lackey" => Ok(Format::Lackey),
            "csv" => Ok(Format::Csv),
            _ => Err(Error::arg(
                "format",
                format!("unknown trace format `{name}`; valid formats: {}", Format::NAMES.join(", ")),
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Format::Native => "native",
            Format::Mqsim => "mqsim",
            Format::Lackey => "lackey",
            Format::Csv => "csv",
        }
    }
}

/// What a text format does not say about itself.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TextOptions {
    /// Address kind recorded for MQSim, lackey and header-less CSV input.
    pub addr_kind: AddrKind,
    pub page_size: u32,
    /// Time unit of header-less CSV input.
    pub csv_time_unit: TimeUnit,
    /// Writing an instruction trace as MQSim (which needs ns): ns per instruction.
    pub ns_per_instruction: f64,
}

impl Default for TextOptions {
    fn default() -> Self {
        TextOptions {
            addr_kind: AddrKind::Virtual,
            page_size: 4096,
            csv_time_unit: TimeUnit::Instructions,
            ns_per_instruction: 0.5,
        }
    }
}

/// Whether `path` starts with the native magic.
pub fn is_native(path: &Path) -> Result<bool> {
    let mut f = crate::format::open_trace_file(path)?;
    let mut m = [0u8; 8];
    let mut got = 0;
    while got < m.len() {
        match f.read(&mut m[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) => return Err(Error::io(path, e)),
        }
    }
    Ok(got == m.len() && m == MAGIC)
}

/// Open a trace: `format` as named, or `None` for a native file (checked by its magic). The
/// reader can move to another thread (to decode there, ahead of a replay).
pub fn open(path: &Path, format: Option<Format>, opts: &TextOptions) -> Result<Box<dyn AccessSource + Send>> {
    let format = match format {
        Some(f) => f,
        None if is_native(path)? => Format::Native,
        None => {
            return Err(Error::arg(
                path.display().to_string(),
                "not a native tiersim trace (no TIERSIM magic); name its format: mqsim, lackey or csv",
            ))
        }
    };
    check_page_size(opts.page_size).map_err(|m| Error::arg("page_size", m))?;
    Ok(match format {
        Format::Native => Box::new(TraceReader::open(path)?),
        Format::Mqsim => Box::new(TextReader::open(path, Mqsim::default(), opts)?),
        Format::Lackey => Box::new(TextReader::open(path, Lackey::default(), opts)?),
        Format::Csv => Box::new(TextReader::open(path, Csv::default(), opts)?),
    })
}

/// A destination of accesses; `finish` makes the file appear at its path.
pub trait AccessSink {
    fn write(&mut self, a: &Access) -> Result<()>;
    fn finish(self: Box<Self>) -> Result<()>;
}

impl AccessSink for TraceWriter {
    fn write(&mut self, a: &Access) -> Result<()> {
        TraceWriter::write(self, a)
    }
    fn finish(self: Box<Self>) -> Result<()> {
        TraceWriter::finish(*self).map(|_| ())
    }
}

/// Create a writer of `format` for accesses described by `meta`.
pub fn create(path: &Path, format: Format, meta: TraceMeta, opts: &TextOptions) -> Result<Box<dyn AccessSink>> {
    match format {
        Format::Native => Ok(Box::new(TraceWriter::create(path, meta)?)),
        Format::Mqsim => {
            if !(opts.ns_per_instruction > 0.0 && opts.ns_per_instruction.is_finite()) {
                return Err(Error::arg("ns_per_instruction", "must be a positive number"));
            }
            Ok(Box::new(TextWriter::create(path, MqsimOut::new(meta.time_unit, opts.ns_per_instruction))?))
        }
        Format::Lackey => {
            if meta.time_unit != TimeUnit::Instructions {
                return Err(Error::arg(
                    "format",
                    "lackey traces count instructions between accesses; this trace's times are ns",
                ));
            }
            Ok(Box::new(TextWriter::create(path, LackeyOut::default())?))
        }
        Format::Csv => Ok(Box::new(TextWriter::create(path, CsvOut { meta, started: false })?)),
    }
}

/// Copy every access of `src` (read as `src_format`, or native by magic) to `dst` as
/// `dst_format`; returns the statistics of what was written.
pub fn convert(
    src: &Path,
    src_format: Option<Format>,
    dst: &Path,
    dst_format: Format,
    opts: &TextOptions,
) -> Result<TraceStats> {
    let mut r = open(src, src_format, opts)?;
    let h = r.header().clone();
    let meta = TraceMeta { time_unit: h.time_unit, addr_kind: h.addr_kind, page_size: h.page_size };
    copy(r.as_mut(), create(dst, dst_format, meta, opts)?, meta)
}

/// Stream `src` into `sink`, accumulating statistics.
pub fn copy(src: &mut dyn AccessSource, mut sink: Box<dyn AccessSink>, meta: TraceMeta) -> Result<TraceStats> {
    let mut stats = crate::format::StatsBuilder::new(meta.time_unit, meta.page_size);
    crate::for_each_access(src, |a| {
        sink.write(a)?;
        stats.add(a);
        Ok(())
    })?;
    sink.finish()?;
    Ok(stats.finish())
}

// ---------------------------------------------------------------------------------------------
// readers

/// Parses one line of a text format into at most two accesses (lackey's M is two).
trait LineParser {
    fn meta(&self, opts: &TextOptions) -> TraceMeta;
    /// Appends the line's accesses (none for blank or informational lines). Errors are
    /// messages; the reader adds the file and line number.
    fn parse(&mut self, line: &str, out: &mut Vec<Access>) -> std::result::Result<(), String>;
    /// A leading `#` line, before any access (CSV's metadata).
    fn comment(&mut self, _line: &str, _meta: &mut TraceMeta) -> std::result::Result<(), String> {
        Ok(())
    }
}

struct TextReader<P> {
    path: PathBuf,
    input: BufReader<File>,
    parser: P,
    header: TraceHeader,
    line: u64,
    buf: Vec<u8>,
    pending: Vec<Access>,
    done: bool,
}

impl<P: LineParser> TextReader<P> {
    fn open(path: &Path, parser: P, opts: &TextOptions) -> Result<TextReader<P>> {
        let f = crate::format::open_trace_file(path)?;
        let meta = parser.meta(opts);
        let mut r = TextReader {
            path: path.to_owned(),
            input: BufReader::with_capacity(1 << 16, f),
            parser,
            header: TraceHeader::new(&meta),
            line: 0,
            buf: Vec::new(),
            pending: Vec::new(),
            done: false,
        };
        r.read_comments()?;
        Ok(r)
    }

    /// Leading `#` lines set metadata, so the header is right before the first access.
    fn read_comments(&mut self) -> Result<()> {
        loop {
            let peek = self.input.fill_buf().map_err(|e| Error::io(&self.path, e))?;
            if peek.first() != Some(&b'#') {
                return Ok(());
            }
            let Some(text) = self.next_line()? else { return Ok(()) };
            let mut meta = TraceMeta {
                time_unit: self.header.time_unit,
                addr_kind: self.header.addr_kind,
                page_size: self.header.page_size,
            };
            self.parser.comment(&text, &mut meta).map_err(|m| Error::line(&self.path, self.line, m))?;
            self.header = TraceHeader::new(&meta);
        }
    }

    fn next_line(&mut self) -> Result<Option<String>> {
        self.buf.clear();
        let n = self.input.read_until(b'\n', &mut self.buf).map_err(|e| Error::io(&self.path, e))?;
        if n == 0 {
            return Ok(None);
        }
        self.line += 1;
        while matches!(self.buf.last(), Some(b'\n' | b'\r')) {
            self.buf.pop();
        }
        match std::str::from_utf8(&self.buf) {
            Ok(s) => Ok(Some(s.to_owned())),
            Err(_) => Err(Error::line(&self.path, self.line, "not UTF-8 text")),
        }
    }
}

impl<P: LineParser> AccessSource for TextReader<P> {
    fn header(&self) -> &TraceHeader {
        &self.header
    }

    fn read_batch(&mut self, out: &mut Vec<Access>, max: usize) -> Result<usize> {
        let mut n = 0;
        while n < max {
            if !self.pending.is_empty() {
                out.push(self.pending.remove(0));
                n += 1;
                continue;
            }
            if self.done {
                break;
            }
            let Some(text) = self.next_line()? else {
                self.done = true;
                break;
            };
            if let Err(m) = self.parser.parse(&text, &mut self.pending) {
                self.done = true;
                self.pending.clear();
                return Err(Error::line(&self.path, self.line, m));
            }
        }
        Ok(n)
    }
}

/// MQSim's `strtoull(s, 0)`: 0x hex, leading-zero octal, else decimal.
fn parse_c_uint(s: &str) -> Option<u64> {
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).ok()
    } else if s.len() > 1 && s.starts_with('0') {
        u64::from_str_radix(&s[1..], 8).ok()
    } else {
        s.parse().ok()
    }
}

/// Decimal or 0x hex.
fn parse_uint(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// An access size as the record holds it; 0 is refused here, at the line, rather than later by
/// a writer or never by a consumer that reads the text directly (`flash replay`).
fn size_u16(bytes: u64, what: &str) -> std::result::Result<u16, String> {
    if bytes == 0 {
        return Err(format!("{what} is 0; every access moves at least one byte"));
    }
    u16::try_from(bytes).map_err(|_| format!("{what} is {bytes} bytes; at most 65535 are supported"))
}

#[derive(Default)]
struct Mqsim {
    last: u64,
}

impl LineParser for Mqsim {
    fn meta(&self, opts: &TextOptions) -> TraceMeta {
        TraceMeta { time_unit: TimeUnit::Ns, addr_kind: opts.addr_kind, page_size: opts.page_size }
    }

    fn parse(&mut self, line: &str, out: &mut Vec<Access>) -> std::result::Result<(), String> {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.is_empty() {
            return Ok(());
        }
        if f.len() != 5 {
            return Err(format!("expected 5 fields `time dev addr size type`, got {}: {line:?}", f.len()));
        }
        let time: u64 = f[0].parse().map_err(|_| format!("time {:?} is not a whole number of ns", f[0]))?;
        f[1].parse::<u64>().map_err(|_| format!("device {:?} is not a whole number", f[1]))?;
        let addr = parse_c_uint(f[2]).ok_or_else(|| format!("address {:?} is not a number", f[2]))?;
        let sectors = f[3].parse::<u64>().map_err(|_| format!("size {:?} is not a whole number of sectors", f[3]))?;
        if sectors == 0 {
            // The size is ignored (below), but a request of no sectors is no request: MQSim
            // would not issue it.
            return Err("size 0 sectors; a request moves at least one sector (8 for one 4 KiB page)".into());
        }
        let op = match f[4] {
            "1" => Op::Read,
            "0" => Op::Write,
            t => return Err(format!("type {t:?} is neither 1 (read) nor 0 (write)")),
        };
        if time < self.last {
            return Err(format!(
                "time {time} is before the previous line's {}; MQSim needs non-decreasing times",
                self.last
            ));
        }
        self.last = time;
        // MQSim_CXL only keeps the page (`addr / 4096`): the 64 B block holding the address
        // stands for it, so an unaligned address never spills into the next page.
        let addr = addr & !(MQSIM_ACCESS - 1);
        out.push(Access { time, addr, cpu: 0, size: MQSIM_ACCESS as u16, op, flags: 0 });
        Ok(())
    }
}

#[derive(Default)]
struct Lackey {
    instructions: u64,
}

impl LineParser for Lackey {
    fn meta(&self, opts: &TextOptions) -> TraceMeta {
        TraceMeta { time_unit: TimeUnit::Instructions, addr_kind: opts.addr_kind, page_size: opts.page_size }
    }

    fn parse(&mut self, line: &str, out: &mut Vec<Access>) -> std::result::Result<(), String> {
        let (kind, addr, size) = match lackey_line(line.as_bytes())? {
            LackeyLine::Other => return Ok(()),
            LackeyLine::Instr => {
                self.instructions += 1;
                return Ok(());
            }
            LackeyLine::Data { kind, addr, size } => (kind, addr, size),
        };
        let time = self.instructions;
        match kind {
            DataKind::Load => out.push(Access { time, addr, cpu: 0, size, op: Op::Read, flags: 0 }),
            DataKind::Store => out.push(Access { time, addr, cpu: 0, size, op: Op::Write, flags: 0 }),
            // A modify is the load and the store of one instruction: nothing runs between them.
            DataKind::Modify => {
                out.push(Access { time, addr, cpu: 0, size, op: Op::Read, flags: 0 });
                out.push(Access { time: 0, addr, cpu: 0, size, op: Op::Write, flags: 0 });
            }
        }
        self.instructions = 0;
        Ok(())
    }
}

/// A data access line of lackey: ` L` load, ` S` store, ` M` modify (load then store).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataKind {
    Load,
    Store,
    Modify,
}

/// One line of Valgrind lackey output, as `lackey_line` reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LackeyLine {
    /// A blank line or one of Valgrind's `==pid==` messages.
    Other,
    /// `I  addr,size`: one guest instruction.
    Instr,
    Data {
        kind: DataKind,
        addr: u64,
        size: u16,
    },
}

/// Parse one line of lackey output (without its newline). Shared by the text reader and the
/// capture stream, so both accept exactly the same lines; works on bytes because capture
/// parses tens of millions of lines per second without making strings of them.
pub fn lackey_line(line: &[u8]) -> std::result::Result<LackeyLine, String> {
    let show = || String::from_utf8_lossy(line).into_owned();
    if line.starts_with(b"==") || line.iter().all(u8::is_ascii_whitespace) {
        return Ok(LackeyLine::Other);
    }
    let (kind, rest) = if let Some(r) = line.strip_prefix(b"I ") {
        (None, r)
    } else if line.len() >= 3 && line[0] == b' ' && line[2] == b' ' {
        let kind = match line[1] {
            b'L' => DataKind::Load,
            b'S' => DataKind::Store,
            b'M' => DataKind::Modify,
            k => return Err(format!("unknown access kind {:?}; lackey writes I, L, S and M", k as char)),
        };
        (Some(kind), &line[3..])
    } else {
        return Err(format!("expected `I  addr,size` or ` L|S|M addr,size`, got {:?}", show()));
    };
    let rest = rest.trim_ascii();
    let Some(comma) = rest.iter().position(|&b| b == b',') else {
        return Err(format!("expected addr,size, got {:?}", String::from_utf8_lossy(rest)));
    };
    let (a, s) = (&rest[..comma], &rest[comma + 1..]);
    let addr = parse_hex(a).ok_or_else(|| format!("address {:?} is not hexadecimal", String::from_utf8_lossy(a)))?;
    let size = parse_dec(s).ok_or_else(|| format!("size {:?} is not a whole number", String::from_utf8_lossy(s)))?;
    Ok(match kind {
        // Only a data access's size is used (our lackey writer puts 0 on instruction lines).
        None => LackeyLine::Instr,
        Some(kind) => LackeyLine::Data { kind, addr, size: size_u16(size, "size")? },
    })
}

fn parse_hex(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 16 {
        return None;
    }
    s.iter().try_fold(0u64, |acc, &c| {
        let d = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            b'A'..=b'F' => c - b'A' + 10,
            _ => return None,
        };
        Some(acc << 4 | d as u64)
    })
}

fn parse_dec(s: &[u8]) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    s.iter().try_fold(0u64, |acc, &c| {
        if !c.is_ascii_digit() {
            return None;
        }
        acc.checked_mul(10)?.checked_add((c - b'0') as u64)
    })
}

#[derive(Default)]
struct Csv {
    /// Columns per row once the header is read: 5 (no `file` column) or 6.
    columns: usize,
}

const CSV_HEADER: &str = "time,cpu,op,addr,size,file";
const CSV_HEADER_ANON: &str = "time,cpu,op,addr,size";

impl LineParser for Csv {
    fn meta(&self, opts: &TextOptions) -> TraceMeta {
        TraceMeta { time_unit: opts.csv_time_unit, addr_kind: opts.addr_kind, page_size: opts.page_size }
    }

    fn comment(&mut self, line: &str, meta: &mut TraceMeta) -> std::result::Result<(), String> {
        let Some(rest) = line.strip_prefix("# tiersim") else { return Ok(()) };
        for kv in rest.split_whitespace() {
            let (k, v) = kv.split_once('=').ok_or_else(|| format!("expected key=value, got {kv:?}"))?;
            match (k, v) {
                ("time_unit", "ns") => meta.time_unit = TimeUnit::Ns,
                ("time_unit", "instructions") => meta.time_unit = TimeUnit::Instructions,
                ("addr_kind", "virtual") => meta.addr_kind = AddrKind::Virtual,
                ("addr_kind", "physical") => meta.addr_kind = AddrKind::Physical,
                ("page_size", p) => {
                    let p: u32 = p.parse().map_err(|_| format!("page_size {p:?} is not a whole number"))?;
                    check_page_size(p)?;
                    meta.page_size = p;
                }
                _ => return Err(format!("unknown setting {kv:?}")),
            }
        }
        Ok(())
    }

    fn parse(&mut self, line: &str, out: &mut Vec<Access>) -> std::result::Result<(), String> {
        if line.trim().is_empty() {
            return Ok(());
        }
        if self.columns == 0 {
            self.columns = match line.trim() {
                CSV_HEADER => 6,
                CSV_HEADER_ANON => 5,
                _ => return Err(format!("expected the header `{CSV_HEADER}` (or `{CSV_HEADER_ANON}`), got {line:?}")),
            };
            return Ok(());
        }
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        if f.len() != self.columns {
            let header = if self.columns == 6 { CSV_HEADER } else { CSV_HEADER_ANON };
            return Err(format!("expected {} fields `{header}`, got {}: {line:?}", self.columns, f.len()));
        }
        let time: u64 = f[0].parse().map_err(|_| format!("time {:?} is not a whole number", f[0]))?;
        let cpu: u32 = f[1].parse().map_err(|_| format!("cpu {:?} is not a whole number below 2^32", f[1]))?;
        if cpu >= crate::format::MAX_CPUS {
            return Err(format!("cpu {cpu} is not below {}", crate::format::MAX_CPUS));
        }
        let op = match f[2] {
            "R" | "r" | "read" => Op::Read,
            "W" | "w" | "write" => Op::Write,
            o => return Err(format!("op {o:?} is neither R nor W")),
        };
        let addr = parse_uint(f[3]).ok_or_else(|| format!("address {:?} is not a number", f[3]))?;
        let size: u64 = f[4].parse().map_err(|_| format!("size {:?} is not a whole number", f[4]))?;
        // The `file` column is the record's flags byte, restricted to the combinations that mean
        // something (an older writer wrote only 0 and 1).
        let flags = match f.get(5) {
            None | Some(&"0") => 0,
            Some(&"1") => Access::FILE,
            Some(&"3") => Access::FILE | Access::SYSCALL,
            Some(&"7") => Access::FILE | Access::SYSCALL | Access::DIRECT,
            Some(&"9") => Access::FILE | Access::MAP,
            Some(&"11") => Access::SYNC,
            Some(&"8") => Access::FUTEX,
            Some(&"13") => Access::SIZE,
            Some(v) => {
                return Err(format!(
                    "file {v:?} is not 0 (anonymous), 1 (file page), 3 (file system call), 7 (O_DIRECT call), 8 (futex record), 9 (file mapping record), 11 (file sync record) or 13 (file size record)"
                ))
            }
        };
        if flags == Access::FUTEX && size != 1 {
            return Err(format!(
                "a futex record (file 8: op R a wait that returned, W a wake) of size {size}; futex records have size 1"
            ));
        }
        if flags == Access::SIZE && size != 1 {
            return Err(format!(
                "a file size record (file 13: the address where the file's data ended at open) of size {size}; file size records have size 1"
            ));
        }
        out.push(Access { time, addr, cpu, size: size_u16(size, "size")?, op, flags });
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// writers

trait LineFormatter {
    /// The format has a place for mapping records (`Access::MAP`); the others refuse them.
    const MAPS: bool = false;
    fn line(&mut self, a: &Access, w: &mut dyn Write) -> std::io::Result<std::result::Result<(), String>>;
    fn end(&mut self, _w: &mut dyn Write) -> std::io::Result<()> {
        Ok(())
    }
}

/// Writes beside the target and renames at `finish`, so a failed conversion leaves no partial
/// file at the target path.
struct TextWriter<F> {
    path: PathBuf,
    tmp: PathBuf,
    out: Option<BufWriter<File>>,
    fmt: F,
    count: u64,
}

impl<F: LineFormatter> TextWriter<F> {
    fn create(path: &Path, fmt: F) -> Result<TextWriter<F>> {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let tmp = path.with_file_name(format!(".{name}.tmp"));
        // Errors name the user's file, never the hidden temporary one.
        let f = File::create(&tmp).map_err(|e| Error::io(path, e))?;
        Ok(TextWriter { path: path.to_owned(), tmp, out: Some(BufWriter::with_capacity(1 << 16, f)), fmt, count: 0 })
    }
}

impl<F: LineFormatter> AccessSink for TextWriter<F> {
    fn write(&mut self, a: &Access) -> Result<()> {
        let out = self.out.as_mut().expect("written after finish");
        self.count += 1;
        if a.is_map() && !F::MAPS {
            return Err(Error::Sim(format!(
                "{}: access {}: a file mapping record, file sync record, file size record or futex record (flag bit 3), which this text format cannot hold; convert to native or csv",
                self.path.display(),
                self.count
            )));
        }
        match self.fmt.line(a, out) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(m)) => Err(Error::Sim(format!("{}: access {}: {m}", self.path.display(), self.count))),
            Err(e) => Err(Error::io(&self.path, e)),
        }
    }

    fn finish(mut self: Box<Self>) -> Result<()> {
        let mut out = self.out.take().expect("finished twice");
        self.fmt.end(&mut out).map_err(|e| Error::io(&self.path, e))?;
        out.flush().map_err(|e| Error::io(&self.path, e))?;
        drop(out);
        std::fs::rename(&self.tmp, &self.path).map_err(|e| Error::io(&self.path, e))
    }
}

impl<F> Drop for TextWriter<F> {
    fn drop(&mut self) {
        if self.out.is_some() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

struct MqsimOut {
    unit: TimeUnit,
    ns_per_instruction: f64,
    /// Per-CPU instruction counts (instruction traces).
    instr: Vec<u64>,
    last: u64,
}

impl MqsimOut {
    fn new(unit: TimeUnit, ns_per_instruction: f64) -> MqsimOut {
        MqsimOut { unit, ns_per_instruction, instr: Vec::new(), last: 0 }
    }
}

impl LineFormatter for MqsimOut {
    fn line(&mut self, a: &Access, w: &mut dyn Write) -> std::io::Result<std::result::Result<(), String>> {
        let time = match self.unit {
            TimeUnit::Ns => {
                if a.time < self.last {
                    return Ok(Err(format!(
                        "time {} ns is before the previous access's {}; MQSim needs non-decreasing times",
                        a.time, self.last
                    )));
                }
                a.time
            }
            TimeUnit::Instructions => {
                let cpu = a.cpu as usize;
                if cpu >= self.instr.len() {
                    self.instr.resize(cpu + 1, 0);
                }
                self.instr[cpu] = self.instr[cpu].saturating_add(a.time);
                // CPUs interleaved in file order can be slightly out of time order: MQSim needs
                // non-decreasing times, so an access never goes before the previous one.
                ((self.instr[cpu] as f64 * self.ns_per_instruction).round() as u64).max(self.last)
            }
        };
        self.last = time;
        let rw = if a.op == Op::Read { 1 } else { 0 };
        // MQSim reads each line as one 64 B access: an access is one line per block it touches.
        let first = a.addr / MQSIM_ACCESS;
        let last = (a.addr + (a.size as u64).max(1) - 1) / MQSIM_ACCESS;
        for block in first..=last {
            writeln!(w, "{time} 0 {} 8 {rw}", block * MQSIM_ACCESS)?;
        }
        Ok(Ok(()))
    }
}

#[derive(Default)]
struct LackeyOut {
    /// A load that may pair with the next access into one ` M` line.
    held: Option<Access>,
}

impl LackeyOut {
    fn emit(a: &Access, kind: char, w: &mut dyn Write) -> std::io::Result<()> {
        for _ in 0..a.time {
            w.write_all(b"I  00000000,0\n")?;
        }
        writeln!(w, " {kind} {:08x},{}", a.addr, a.size)
    }
}

impl LineFormatter for LackeyOut {
    fn line(&mut self, a: &Access, w: &mut dyn Write) -> std::io::Result<std::result::Result<(), String>> {
        if a.cpu != 0 {
            return Ok(Err(format!(
                "cpu {}: lackey traces have one thread (select CPU 0 with `tiersim trace sample`)",
                a.cpu
            )));
        }
        if let Some(h) = self.held.take() {
            if a.op == Op::Write && a.time == 0 && a.addr == h.addr && a.size == h.size {
                Self::emit(&h, 'M', w)?;
                return Ok(Ok(()));
            }
            Self::emit(&h, 'L', w)?;
        }
        if a.op == Op::Read {
            self.held = Some(*a);
        } else {
            Self::emit(a, 'S', w)?;
        }
        Ok(Ok(()))
    }

    fn end(&mut self, w: &mut dyn Write) -> std::io::Result<()> {
        match self.held.take() {
            Some(h) => Self::emit(&h, 'L', w),
            None => Ok(()),
        }
    }
}

struct CsvOut {
    meta: TraceMeta,
    started: bool,
}

impl LineFormatter for CsvOut {
    const MAPS: bool = true;
    fn line(&mut self, a: &Access, w: &mut dyn Write) -> std::io::Result<std::result::Result<(), String>> {
        if !self.started {
            self.started = true;
            self.write_head(w)?;
        }
        let op = if a.op == Op::Read { 'R' } else { 'W' };
        writeln!(w, "{},{},{op},{:#x},{},{}", a.time, a.cpu, a.addr, a.size, a.flags).map(Ok)
    }

    fn end(&mut self, w: &mut dyn Write) -> std::io::Result<()> {
        if !self.started {
            self.started = true;
            self.write_head(w)?;
        }
        Ok(())
    }
}

impl CsvOut {
    fn write_head(&self, w: &mut dyn Write) -> std::io::Result<()> {
        writeln!(
            w,
            "# tiersim time_unit={} addr_kind={} page_size={}\n{CSV_HEADER}",
            self.meta.time_unit.name(),
            self.meta.addr_kind.name(),
            self.meta.page_size
        )
    }
}
