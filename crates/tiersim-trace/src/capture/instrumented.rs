//! The merge of per-thread record files into the same native traces as the Valgrind path,
//! for tiersim's Valgrind tool (python/tiersim/runtime/tiersim_vg_tool.c), which writes them
//! while Valgrind runs. The tool has already filtered each thread's accesses through the LLC
//! model; here the threads' records are put in the order they were made (their stamps), each
//! thread's gap becomes instructions, and virtual pages get frames from the pagemap entries the
//! tool read, or from the buddy model. The instrumented path's runtime publishes the same
//! records into shared memory instead and `stream.rs` merges them while the program runs, in
//! the same order; this module also gives it the runtime's environment and summary.

use std::collections::{BinaryHeap, HashMap};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use rustc_hash::FxHashMap;
use tiersim_core::{Error, Op, Result};

use tiersim_core::Params;

use super::v2p::{Pagemap, PAGEMAP_PAGE};
use super::{
    finish, pipeline, resolve, settings, CaptureReport, CaptureRequest, LlcReport, Progress, Settings, Totals, PARAMS,
};

/// Bytes of one runtime record: stamp u64, addr u64, gap u32, size u16, op u8, pad u8.
pub const RECORD: usize = 24;
/// Bytes of one pagemap pair the runtime writes: virtual page u64, pagemap entry u64.
const PAGEMAP_PAIR: usize = 16;
const SUMMARY_VERSION: u64 = 1;
/// The op byte of the record that ends a thread's file (the Valgrind tool writes it).
const END_MARK: u8 = 2;

/// The environment the runtime reads (`TIERSIM_*`), for a capture with `params` writing its
/// files into `dir`: the cache geometry and scope, the CPU map, whether to read pagemap.
pub fn runtime_env(params: Option<&toml::Table>, dir: &Path) -> Result<Vec<(String, String)>> {
    let p = Params::resolve(PARAMS, params)?;
    let s = settings(&p, 0)?;
    let (llc, ways, line) = s.cache.map_or((0, 16, 64), |c| (c.size, c.ways, c.line_size));
    let pagemap = matches!(s.v2p.as_str(), "auto" | "pagemap") && s.page_size as u64 == PAGEMAP_PAGE;
    let cpu_map: Vec<String> = s.cpu_map.iter().map(u32::to_string).collect();
    Ok([
        ("TIERSIM_CAPTURE_DIR", dir.display().to_string()),
        ("TIERSIM_LLC", llc.to_string()),
        ("TIERSIM_LLC_WAYS", ways.to_string()),
        ("TIERSIM_LINE_SIZE", line.to_string()),
        ("TIERSIM_LLC_SCOPE", if s.per_cpu { "per_cpu" } else { "shared" }.to_owned()),
        ("TIERSIM_CPU_MAP", cpu_map.join(",")),
        ("TIERSIM_PAGEMAP", (pagemap as u8).to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect())
}

/// One thread's line of the runtime's summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct ThreadSummary {
    pub(super) index: u32,
    pub(super) cpu: u32,
    pub(super) loads: u64,
    pub(super) stores: u64,
    pub(super) bytes: u64,
    pub(super) hits: u64,
    pub(super) misses: u64,
    pub(super) writebacks: u64,
    pub(super) records: u64,
    /// Guest instructions, when the tracer counted them (`time instructions`).
    pub(super) instructions: u64,
}

#[derive(Debug, Default)]
pub(super) struct Summary {
    /// Gaps count guest instructions (the Valgrind tool), not loads and stores (the runtime).
    instruction_gaps: bool,
    /// `instrumented` (the runtime), `valgrind_tool` or `qemu_plugin`.
    tracer: String,
    pub(super) caches: u32,
    pub(super) dirty_at_exit: u64,
    /// `ok` (pagemap.bin holds entries), `hidden` (frame numbers need CAP_SYS_ADMIN),
    /// `unreadable`, or `off` (not asked).
    pagemap: String,
    pub(super) threads: Vec<ThreadSummary>,
}

/// The report's LLC figures and totals from the tracer's summary, as both merges (the record
/// files' and the streaming one) give them.
pub(super) fn summary_totals(
    s: &Settings,
    sum: &Summary,
    instructions: u64,
    input_bytes: u64,
) -> (Option<LlcReport>, Totals) {
    let total = |f: fn(&ThreadSummary) -> u64| sum.threads.iter().map(f).sum::<u64>();
    let llc = s.cache.map(|c| LlcReport {
        scope: if s.per_cpu { "per_cpu" } else { "shared" }.into(),
        caches: sum.caches,
        size: c.size,
        ways: c.ways,
        line_size: c.line_size,
        hits: total(|t| t.hits),
        misses: total(|t| t.misses),
        writebacks: total(|t| t.writebacks),
        dirty_at_exit: sum.dirty_at_exit,
    });
    let n = Totals {
        instructions,
        guest_instrs_reported: None,
        loads: total(|t| t.loads),
        stores: total(|t| t.stores),
        modifies: 0,
        data_bytes: total(|t| t.bytes),
        input_bytes,
        thread_numbering: "created",
    };
    (llc, n)
}

fn parse_summary(path: &Path) -> Result<Summary> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    parse_summary_text(&text, &path.display().to_string())
}

/// A summary's text; `name` says where it came from in errors.
pub(super) fn parse_summary_text(text: &str, name: &str) -> Result<Summary> {
    let path = Path::new(name);
    let mut s = Summary::default();
    let mut version = None;
    for (i, line) in text.lines().enumerate() {
        let bad = |m: String| Error::line(path, i as u64 + 1, m);
        let words: Vec<&str> = line.split_whitespace().collect();
        let num = |w: &str| w.parse::<u64>().map_err(|_| bad(format!("{w:?} is not a whole number")));
        match words.as_slice() {
            ["version", v] => version = Some(num(v)?),
            ["time", "accesses"] => s.instruction_gaps = false,
            ["time", "instructions"] => s.instruction_gaps = true,
            ["tracer", name @ ("instrumented" | "valgrind_tool" | "qemu_plugin")] => s.tracer = (*name).to_owned(),
            ["caches", n] => s.caches = num(n)? as u32,
            ["dirty_at_exit", n] => s.dirty_at_exit = num(n)?,
            ["pagemap", state] => s.pagemap = (*state).to_owned(),
            ["thread", idx, rest @ ..] if rest.len() == 16 || rest.len() == 18 => {
                let mut t = ThreadSummary { index: num(idx)? as u32, ..ThreadSummary::default() };
                for kv in rest.chunks(2) {
                    let v = num(kv[1])?;
                    match kv[0] {
                        "cpu" => t.cpu = v as u32,
                        "loads" => t.loads = v,
                        "stores" => t.stores = v,
                        "bytes" => t.bytes = v,
                        "hits" => t.hits = v,
                        "misses" => t.misses = v,
                        "writebacks" => t.writebacks = v,
                        "records" => t.records = v,
                        "instructions" => t.instructions = v,
                        k => return Err(bad(format!("unknown thread counter {k:?}"))),
                    }
                }
                s.threads.push(t);
            }
            _ => return Err(bad(format!("unexpected line {line:?}: not a tiersim runtime summary"))),
        }
    }
    if version != Some(SUMMARY_VERSION) {
        return Err(Error::Sim(format!(
            "{name}: summary version {version:?}, expected {SUMMARY_VERSION}: rebuild the program with this tiersim's runtime"
        )));
    }
    if s.tracer.is_empty() {
        s.tracer = "instrumented".to_owned();
    }
    s.threads.sort_by_key(|t| t.index);
    Ok(s)
}

/// The last entry the runtime read for each page (a page read as the shared zero page is read
/// again until it is the program's own).
fn read_pagemap(path: &Path) -> Result<FxHashMap<u64, u64>> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    if bytes.len() % PAGEMAP_PAIR != 0 {
        return Err(Error::Sim(format!(
            "{}: {} bytes is not a whole number of {PAGEMAP_PAIR}-byte entries",
            path.display(),
            bytes.len()
        )));
    }
    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
    Ok(bytes.chunks_exact(PAGEMAP_PAIR).map(|c| (word(&c[..8]), word(&c[8..]))).collect())
}

/// Bytes a thread file is read in at a time.
const READ_CHUNK: usize = RECORD << 16;

/// A thread's record file, read in order.
struct ThreadFile {
    path: PathBuf,
    f: File,
    buf: Vec<u8>,
    /// Next unread byte of `buf`.
    at: usize,
    /// File offset of `buf[0]`.
    offset: u64,
    /// Its end mark was read.
    ended: bool,
}

/// One decoded runtime record.
#[derive(Debug, Clone, Copy)]
pub(super) struct Rec {
    pub(super) stamp: u64,
    pub(super) addr: u64,
    pub(super) gap: u32,
    pub(super) size: u16,
    pub(super) write: bool,
}

impl ThreadFile {
    fn open(path: PathBuf) -> Result<ThreadFile> {
        let f = File::open(&path).map_err(|e| Error::io(&path, e))?;
        Ok(ThreadFile { path, f, buf: Vec::with_capacity(READ_CHUNK), at: 0, offset: 0, ended: false })
    }

    /// Refill `buf` with the rest of a cut record and the next chunk; false at the end.
    fn refill(&mut self) -> Result<bool> {
        self.offset += self.at as u64;
        self.buf.drain(..self.at);
        self.at = 0;
        let have = self.buf.len();
        self.buf.resize(READ_CHUNK, 0);
        let mut got = have;
        while got < READ_CHUNK {
            match self.f.read(&mut self.buf[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io(&self.path, e)),
            }
        }
        self.buf.truncate(got);
        if got == 0 {
            return Ok(false);
        }
        if got < RECORD {
            return Err(Error::Sim(format!(
                "{}: offset {}: a record cut short ({got} of {RECORD} bytes)",
                self.path.display(),
                self.offset
            )));
        }
        Ok(true)
    }

    fn next(&mut self) -> Result<Option<Rec>> {
        if self.ended || (self.buf.len() - self.at < RECORD && !self.refill()?) {
            return Ok(None);
        }
        let b = &self.buf[self.at..self.at + RECORD];
        if b[22] == END_MARK {
            self.at += RECORD;
            self.ended = true;
            if self.buf.len() > self.at || self.refill()? {
                return Err(Error::Sim(format!(
                    "{}: offset {}: records after the thread's end mark",
                    self.path.display(),
                    self.offset + self.at as u64
                )));
            }
            return Ok(None);
        }
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let rec = Rec {
            stamp: u64_at(0),
            addr: u64_at(8),
            gap: u32::from_le_bytes(b[16..20].try_into().expect("4 bytes")),
            size: u16::from_le_bytes([b[20], b[21]]),
            write: match b[22] {
                0 => false,
                1 => true,
                op => {
                    return Err(Error::Sim(format!(
                        "{}: offset {}: op {op}, expected 0 (read) or 1 (write)",
                        self.path.display(),
                        self.offset + self.at as u64 + 22
                    )))
                }
            },
        };
        self.at += RECORD;
        Ok(Some(rec))
    }
}

/// Merge the runtime's files in `dir` into the traces of `req`. On error nothing appears at the
/// output paths.
pub fn capture_instrumented(dir: &Path, req: &CaptureRequest<'_>, progress: &Progress) -> Result<CaptureReport> {
    let (params, s) = resolve(req)?;
    let summary_path = dir.join("summary");
    if !summary_path.exists() {
        return Err(Error::Sim(format!(
            "{} is missing: the program did not run the tiersim runtime's exit handler (it was not linked with the runtime, was killed by a signal, or left by _exit)",
            summary_path.display()
        )));
    }
    let sum = parse_summary(&summary_path)?;
    let pm_path = dir.join("pagemap.bin");
    let pm = match sum.pagemap.as_str() {
        "ok" => Ok(Pagemap::snapshot(pm_path.clone(), read_pagemap(&pm_path)?)),
        "hidden" => {
            Err("/proc/self/pagemap showed every frame number as 0: reading them needs CAP_SYS_ADMIN (run as root)"
                .to_owned())
        }
        "unreadable" => Err("the program could not open /proc/self/pagemap".to_owned()),
        // QEMU user mode's guest pages are the QEMU process's, which its plugin cannot name.
        _ if sum.tracer == "qemu_plugin" => Err("QEMU's plugin reads no pagemap".to_owned()),
        _ => Err("the runtime did not read pagemap".to_owned()),
    };
    let mut p = pipeline(req, &s, pm)?;
    // Pipeline threads are the runtime's thread numbers, on the CPUs the runtime placed them.
    let top = sum.threads.iter().map(|t| t.index as usize + 1).max().unwrap_or(1);
    while p.threads.len() < top {
        p.new_thread()?;
    }
    let mut files = HashMap::new();
    let mut input_bytes = 0;
    for t in &sum.threads {
        let th = &mut p.threads[t.index as usize];
        th.cpu = t.cpu;
        th.accesses = t.loads + t.stores;
        th.instructions = if sum.instruction_gaps {
            t.instructions
        } else {
            (th.accesses as f64 * s.instructions_per_access).round() as u64
        };
        let f = ThreadFile::open(dir.join(format!("t{}.bin", t.index)))?;
        input_bytes += f.f.metadata().map_err(|e| Error::io(&f.path, e))?.len();
        files.insert(t.index, f);
    }
    // Earliest stamp first; ties by thread number, so the merge is a function of the files.
    let mut heap = BinaryHeap::new();
    for (&i, f) in files.iter_mut() {
        if let Some(r) = f.next()? {
            heap.push(std::cmp::Reverse((r.stamp, i, r.addr, r.gap, r.size, r.write)));
        }
    }
    let mut frac = vec![0f64; top];
    let filtered = s.cache.is_some();
    let per_gap = if sum.instruction_gaps { 1.0 } else { s.instructions_per_access };
    // A whole number of instructions per gap unit (the default 2, or the tool's 1) needs no
    // fraction carried.
    let whole_per_gap = (per_gap.fract() == 0.0).then_some(per_gap as u64);
    let mut put = |p: &mut super::Pipeline, t: usize, r: &Rec| -> Result<()> {
        p.threads[t].gap = match whole_per_gap {
            Some(k) => r.gap as u64 * k,
            None => {
                // Whole instructions, carrying the fraction, so a thread's total is its loads
                // and stores x instructions_per_access.
                let exact = r.gap as f64 * per_gap + frac[t];
                let whole = exact.floor();
                frac[t] = exact - whole;
                whole as u64
            }
        };
        let op = if r.write { Op::Write } else { Op::Read };
        if filtered {
            p.emit(t, op, r.addr, r.size)?;
        } else {
            p.emit_split(t, op, r.addr, r.size)?;
        }
        if p.records.is_multiple_of(1 << 16) {
            progress.records.store(p.records, Ordering::Relaxed);
            if progress.cancelled() {
                return Err(Error::Sim("capture interrupted".into()));
            }
        }
        Ok(())
    };
    while let Some(std::cmp::Reverse((stamp, i, addr, gap, size, write))) = heap.pop() {
        put(&mut p, i as usize, &Rec { stamp, addr, gap, size, write })?;
        // The thread's records run on while they come before every other thread's next one.
        let f = files.get_mut(&i).expect("every heap entry has its file");
        while let Some(r) = f.next()? {
            let first = heap.peek().is_none_or(|std::cmp::Reverse(top)| (r.stamp, i) < (top.0, top.1));
            if first {
                put(&mut p, i as usize, &r)?;
            } else {
                heap.push(std::cmp::Reverse((r.stamp, i, r.addr, r.gap, r.size, r.write)));
                break;
            }
        }
    }
    p.drain(super::Force::All)?;
    for t in &sum.threads {
        let written = p.threads[t.index as usize].records;
        // An unfiltered record cut at a page boundary is two records.
        if written < t.records || (filtered && written != t.records) {
            return Err(Error::Sim(format!(
                "{}: thread {} has {written} records, the summary says {}",
                dir.display(),
                t.index,
                t.records
            )));
        }
    }
    let instructions = p.threads.iter().map(|t| t.instructions).sum();
    let (llc, n) = summary_totals(&s, &sum, instructions, input_bytes);
    progress.records.store(p.records, Ordering::Relaxed);
    progress.data_accesses.store(n.loads + n.stores, Ordering::Relaxed);
    let tracer = match sum.tracer.as_str() {
        "valgrind_tool" => "valgrind_tool",
        "qemu_plugin" => "qemu_plugin",
        _ => "instrumented",
    };
    finish(p, llc, req, &params, &s, tracer, n, Vec::new())
}
