//! `tiersim capture`: a real program's memory trace, from Valgrind lackey's output streamed
//! through a last-level cache model and a virtual-to-physical mapping into native traces.
//!
//! The workflow is the CXL-flash study's (Yang et al., ATC'23, sec. 3.1, fig. 2): Valgrind
//! instruments every load and store, a cache model keeps only LLC misses and dirty evictions,
//! and page mappings turn virtual into physical addresses. Here the stream is lackey's
//! `--trace-mem=yes` text, read from a pipe as the program runs (never stored); time is the
//! number of guest instructions between recorded accesses (lackey prints one `I` line per
//! instruction), so the platform's `host.frequency` and `host.cpi` turn it into ns. Valgrind runs
//! a program's threads one at a time and lackey does not say which thread made an access, so a
//! capture is one CPU.
//!
//! Two traces come out: the physical one (v2p `pagemap` or `buddy`) and its virtual twin, record
//! for record the same accesses (same times, sizes and directions; only addresses differ), so the
//! study's virtual-vs-physical comparison (its fig. 3) can be made on any program. With v2p
//! `none` only the virtual trace is written.

pub mod cache;
pub mod v2p;

use std::collections::VecDeque;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use rustc_hash::FxHashMap;
use serde::Serialize;
use tiersim_core::params::{ParamKind, ParamSpec, Params};
use tiersim_core::{Access, Error, Op, Result};

use crate::convert::{lackey_line, DataKind, LackeyLine};
use crate::format::{check_page_size, AddrKind, TimeUnit, TraceMeta, TraceWriter, V2p, MIN_PAGE_SIZE};
use cache::{Cache, CacheConfig, Outcome};
use v2p::{Buddy, BuddyConfig, Lookup, Pagemap, PAGEMAP_PAGE};

/// The capture's parameters (`tiersim capture --param`, and the CLI's own options).
pub static PARAMS: &[ParamSpec] = &[
    // One Zen 4c CCD's L3 (16 MiB, 16 ways), what one thread of the EPYC 9754 preset sees.
    ParamSpec::new("llc", ParamKind::Bytes, "16MiB", "last-level cache capacity; 0 records every load and store unfiltered")
        .min(0.0),
    ParamSpec::new("llc_ways", ParamKind::Int, "16", "last-level cache associativity").min(1.0).max(64.0),
    ParamSpec::new("line_size", ParamKind::Bytes, "64", "cache line size; every recorded fill and writeback is one line")
        .min(8.0)
        .max(4096.0),
    ParamSpec::new("page_size", ParamKind::Bytes, "4096", "page size of the traces and of the virtual-to-physical mapping")
        .min(MIN_PAGE_SIZE as f64)
        .max((1u64 << 30) as f64),
    ParamSpec::new(
        "v2p",
        ParamKind::Str,
        "auto",
        "physical addresses from /proc/PID/pagemap, a buddy-allocator model, both (auto: pagemap when readable), or none (virtual only)",
    )
    .choices(&["auto", "pagemap", "buddy", "none"]),
    ParamSpec::new("phys_mem", ParamKind::Bytes, "16GiB", "physical memory of the buddy model").min(1.0),
    ParamSpec::new(
        "fragmentation",
        ParamKind::Float,
        "0.3",
        "buddy model: share of frames other tenants hold, at random, when the program starts",
    )
    .min(0.0)
    .max(0.99),
    ParamSpec::new("max_order", ParamKind::Int, "10", "buddy model: largest free block is 2^max_order pages (Linux: 10)")
        .min(0.0)
        .max(30.0),
];

/// Read buffer; a lackey line is about 16 bytes.
const CHUNK: usize = 1 << 20;
/// A line longer than this is not lackey output.
const MAX_LINE: usize = 4096;
/// Pagemap mode holds physical records whose page is not yet present (lackey may print an
/// access before the program has faulted its page in); past this many the oldest page gets a
/// synthetic frame, so memory stays bounded.
const MAX_PENDING: usize = 1 << 20;
/// Frames given to pages pagemap never showed: above any real physical address (x86-64 has
/// at most 52 address bits), so they cannot collide with real frames.
const SYNTHETIC_FRAME_BASE: u64 = 1 << 40;
/// When a pipe read returns less than half the pipe, wait this long so that Valgrind fills it:
/// Valgrind writes one line per write(2), and waking the reader for each costs more than the
/// tool itself.
const PIPE_WAIT: Duration = Duration::from_millis(1);
/// Valgrind message lines kept for the report.
const MAX_MESSAGES: usize = 200;

/// Counters a capture updates as it goes; another thread may read them (a progress display)
/// and ask the capture to stop.
#[derive(Debug, Default)]
pub struct Progress {
    pub input_bytes: AtomicU64,
    pub instructions: AtomicU64,
    pub data_accesses: AtomicU64,
    pub records: AtomicU64,
    cancel: AtomicBool,
}

impl Progress {
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::Relaxed);
    }
    pub fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }
}

/// Where a capture reads from and writes to.
pub struct CaptureRequest<'a> {
    /// The physical trace (or the virtual one with v2p `none`).
    pub out: &'a Path,
    /// The virtual twin of `out`; required unless v2p is `none`.
    pub virt_out: Option<&'a Path>,
    pub params: Option<&'a toml::Table>,
    /// Seeds the buddy model's fragmentation.
    pub seed: u64,
    /// The process whose address space the accesses are in (Valgrind's: the guest runs inside
    /// it), for pagemap.
    pub pid: Option<u32>,
    /// `Some(bytes)` when the input is a pipe of that capacity fed by the running program.
    pub pipe_capacity: Option<usize>,
}

/// What a capture did.
#[derive(Debug, Clone, Serialize)]
pub struct CaptureReport {
    /// Guest instructions (lackey `I` lines).
    pub instructions: u64,
    /// Lackey's own count of guest instructions from its closing summary, when present.
    pub guest_instrs_reported: Option<u64>,
    pub loads: u64,
    pub stores: u64,
    /// Read-modify-write instructions (one load and one store each).
    pub modifies: u64,
    /// Bytes the program's loads and stores moved (a modify counts twice).
    pub data_bytes: u64,
    pub llc: Option<LlcReport>,
    /// Records in each output trace.
    pub records: u64,
    pub reads: u64,
    pub writes: u64,
    pub footprint_pages: u64,
    pub page_size: u32,
    /// `pagemap`, `buddy` or `none`.
    pub v2p: &'static str,
    /// Why auto chose what it chose.
    pub v2p_note: String,
    /// Virtual pages given a frame.
    pub pages_mapped: u64,
    /// Pagemap never showed these pages present; they got synthetic frames from 2^52 up.
    pub pages_unresolved: u64,
    /// Times pagemap showed a page in a new frame (copy-on-write of the zero page or a shared
    /// page): later records use the new frame.
    pub remaps: u64,
    pub out: PathBuf,
    pub virt_out: Option<PathBuf>,
    pub input_bytes: u64,
    /// Valgrind's own message lines (`==pid==` prefix removed), the first ones.
    pub valgrind_messages: Vec<String>,
    /// The resolved parameters, as TOML values.
    pub params: serde_json::Value,
}

#[derive(Debug, Clone, Serialize)]
pub struct LlcReport {
    pub size: u64,
    pub ways: u32,
    pub line_size: u32,
    pub hits: u64,
    pub misses: u64,
    pub writebacks: u64,
    /// Dirty lines left in the cache when the program ended (not written back: the trace is
    /// what reached memory while the program ran).
    pub dirty_at_exit: u64,
}

/// Resolve and check capture parameters (unknown keys, kinds, bounds, cache geometry, page
/// size against v2p) without capturing: lets a front end refuse bad parameters before it starts
/// the program. Returns the resolved values.
pub fn resolve_params(params: Option<&toml::Table>) -> Result<toml::Table> {
    let p = Params::resolve(PARAMS, params)?;
    settings(&p, 0)?;
    Ok(p.to_toml())
}

/// Resolved capture settings.
struct Settings {
    cache: Option<CacheConfig>,
    page_size: u32,
    v2p: String,
    buddy: BuddyConfig,
}

fn settings(p: &Params, seed: u64) -> Result<Settings> {
    let page_size = u32::try_from(p.bytes("page_size")).map_err(|_| Error::config("page_size", "too large"))?;
    check_page_size(page_size).map_err(|m| Error::config("page_size", m))?;
    let llc = p.bytes("llc");
    let line_size = p.bytes("line_size") as u32;
    let cache = if llc == 0 {
        None
    } else {
        let c = CacheConfig { size: llc, ways: p.int("llc_ways") as u32, line_size };
        c.check()?;
        if line_size > page_size {
            return Err(Error::config("line_size", format!("{line_size} bytes is larger than page_size {page_size}")));
        }
        Some(c)
    };
    let v2p = p.str("v2p").to_owned();
    if v2p == "pagemap" && page_size as u64 != PAGEMAP_PAGE {
        return Err(Error::config(
            "page_size",
            format!("pagemap maps 4 KiB pages; page_size {page_size} needs v2p buddy or none"),
        ));
    }
    let phys_mem = p.bytes("phys_mem");
    let frames = phys_mem / page_size as u64;
    if frames == 0 {
        return Err(Error::config("phys_mem", format!("{phys_mem} bytes is less than one page of {page_size} bytes")));
    }
    let buddy =
        BuddyConfig { frames, max_order: p.int("max_order") as u32, fragmentation: p.float("fragmentation"), seed };
    Ok(Settings { cache, page_size, v2p, buddy })
}

/// Where physical frames come from.
enum Source {
    /// pagemap, until its first answer tells whether frame numbers are readable.
    Pagemap { pm: Pagemap, explicit: bool, decided: bool },
    Buddy(Buddy),
}

/// A virtual page's frame, and from which physical record on pagemap is asked again.
#[derive(Debug, Clone, Copy)]
struct Mapping {
    frame: u64,
    recheck_at: u64,
}

/// `recheck_at` of a frame that is the page's own for good: the buddy model's, an exclusively
/// mapped page's, a synthetic one.
const FINAL: u64 = u64::MAX;
/// Records between look-ups of a page pagemap shows as shared (the zero page, file pages): a
/// write makes the kernel copy it to a new frame, which later records must use.
const RECHECK_RECORDS: u64 = 1024;

/// Turns virtual records into physical ones, in order: the buddy model fixes a page's frame at
/// its first record, pagemap gives the frame the page has when its records are translated.
struct Translator {
    source: Source,
    buddy_cfg: BuddyConfig,
    page_shift: u32,
    frames: FxHashMap<u64, Mapping>,
    pending: VecDeque<Access>,
    /// Physical records written: the clock of re-checks.
    written: u64,
    next_synthetic: u64,
    unresolved: u64,
    remaps: u64,
    note: String,
}

impl Translator {
    fn mode(&self) -> V2p {
        match self.source {
            Source::Pagemap { .. } => V2p::Pagemap,
            Source::Buddy(_) => V2p::Buddy,
        }
    }

    fn use_buddy(&mut self, note: String) -> Result<()> {
        self.source = Source::Buddy(Buddy::new(&self.buddy_cfg)?);
        self.note = note;
        Ok(())
    }

    /// The frame of virtual page `vpn` for a record (a write when `write`), if it can be known
    /// now.
    fn frame(&mut self, vpn: u64, write: bool) -> Result<Option<u64>> {
        if let Some(m) = self.frames.get(&vpn).copied() {
            let due = self.written >= m.recheck_at || (write && m.recheck_at != FINAL);
            if let (true, Source::Pagemap { pm, .. }) = (due, &mut self.source) {
                let next = match pm.lookup(vpn) {
                    Lookup::Frame { frame, exclusive } => {
                        self.remaps += (frame != m.frame) as u64;
                        Mapping { frame, recheck_at: if exclusive { FINAL } else { self.written + RECHECK_RECORDS } }
                    }
                    // Swapped out or unmapped since: keep the last frame seen.
                    Lookup::Hidden | Lookup::Absent => Mapping { recheck_at: self.written + RECHECK_RECORDS, ..m },
                };
                self.frames.insert(vpn, next);
                return Ok(Some(next.frame));
            }
            return Ok(Some(m.frame));
        }
        let m = match &mut self.source {
            Source::Buddy(b) => match b.alloc() {
                Some(frame) => Mapping { frame, recheck_at: FINAL },
                None => {
                    return Err(Error::config(
                        "phys_mem",
                        format!(
                            "the buddy model's memory is full after {} pages of the program ({} frames held by other tenants); give a larger phys_mem or a lower fragmentation",
                            self.frames.len(),
                            b.held_frames()
                        ),
                    ))
                }
            },
            Source::Pagemap { pm, explicit, decided } => match pm.lookup(vpn) {
                Lookup::Frame { frame, exclusive } => {
                    *decided = true;
                    Mapping { frame, recheck_at: if exclusive { FINAL } else { self.written + RECHECK_RECORDS } }
                }
                Lookup::Hidden if !*decided => {
                    let msg = format!(
                        "{} shows every frame number as 0: reading them needs CAP_SYS_ADMIN (run as root)",
                        pm.path().display()
                    );
                    if *explicit {
                        return Err(Error::Sim(format!("{msg}; or capture with v2p buddy")));
                    }
                    // Nothing physical has been written yet, so the whole trace can switch.
                    self.use_buddy(format!("{msg}, so the buddy model gave the frames"))?;
                    return self.frame(vpn, write);
                }
                Lookup::Hidden | Lookup::Absent => return Ok(None),
            },
        };
        self.frames.insert(vpn, m);
        Ok(Some(m.frame))
    }

    fn write(&mut self, w: &mut TraceWriter, a: &Access, frame: u64) -> Result<()> {
        self.written += 1;
        w.write(&self.physical(a, frame))
    }

    fn physical(&self, a: &Access, frame: u64) -> Access {
        let offset = a.addr & ((1u64 << self.page_shift) - 1);
        Access { addr: frame << self.page_shift | offset, ..*a }
    }

    fn submit(&mut self, a: Access, w: &mut TraceWriter) -> Result<()> {
        if self.pending.is_empty() {
            if let Some(f) = self.frame(a.addr >> self.page_shift, a.op.is_write())? {
                return self.write(w, &a, f);
            }
        }
        self.pending.push_back(a);
        if self.pending.len() > MAX_PENDING {
            self.drain(w, Force::Head)?;
        }
        Ok(())
    }

    /// Write the pending records whose frames are known, in order.
    fn drain(&mut self, w: &mut TraceWriter, force: Force) -> Result<()> {
        if let (Force::All, Source::Pagemap { decided: false, explicit: false, .. }) = (force, &self.source) {
            if !self.pending.is_empty() && self.written == 0 {
                // pagemap never showed a page (the program ended before it was read), and
                // nothing physical is written yet: the whole trace can take the buddy model.
                self.use_buddy("the program ended before its pagemap could be read, so the buddy model gave the frames".into())?;
            }
        }
        let mut force_head = force == Force::Head;
        while let Some(&a) = self.pending.front() {
            let vpn = a.addr >> self.page_shift;
            let f = match self.frame(vpn, a.op.is_write())? {
                Some(f) => f,
                None if force == Force::All || force_head => {
                    let frame = SYNTHETIC_FRAME_BASE + self.next_synthetic;
                    self.next_synthetic += 1;
                    self.unresolved += 1;
                    self.frames.insert(vpn, Mapping { frame, recheck_at: FINAL });
                    frame
                }
                None => break,
            };
            force_head = false;
            self.write(w, &a, f)?;
            self.pending.pop_front();
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Force {
    None,
    /// Give the oldest pending page a synthetic frame if it still has none.
    Head,
    /// End of input: every pending page gets a frame.
    All,
}

/// Accesses in, records out: the instruction clock, the cache and the two writers.
struct Pipeline {
    cache: Option<Cache>,
    page_shift: u32,
    /// Instructions since the last record.
    gap: u64,
    virt: TraceWriter,
    phys: Option<(TraceWriter, Translator)>,
    records: u64,
}

impl Pipeline {
    fn emit(&mut self, op: Op, addr: u64, size: u16) -> Result<()> {
        let a = Access { time: self.gap, addr, cpu: 0, size, op, flags: 0 };
        self.gap = 0;
        self.records += 1;
        self.virt.write(&a)?;
        if let Some((w, t)) = &mut self.phys {
            t.submit(a, w)?;
        }
        Ok(())
    }

    /// An unfiltered access, cut at page boundaries so that each piece has one frame.
    fn emit_split(&mut self, op: Op, addr: u64, size: u16) -> Result<()> {
        let mut at = addr;
        let end = addr.saturating_add(size as u64);
        while at < end {
            let page_end = ((at >> self.page_shift) + 1) << self.page_shift;
            let n = end.min(page_end) - at;
            self.emit(op, at, n as u16)?;
            at += n;
        }
        Ok(())
    }

    fn data(&mut self, kind: DataKind, addr: u64, size: u16) -> Result<()> {
        let Some(c) = &mut self.cache else {
            return match kind {
                DataKind::Load => self.emit_split(Op::Read, addr, size),
                DataKind::Store => self.emit_split(Op::Write, addr, size),
                DataKind::Modify => {
                    self.emit_split(Op::Read, addr, size)?;
                    self.emit_split(Op::Write, addr, size)
                }
            };
        };
        let shift = c.line_shift();
        let line_size = c.config().line_size as u16;
        let first = addr >> shift;
        let last = addr.saturating_add((size as u64).max(1) - 1) >> shift;
        for line in first..=last {
            let c = self.cache.as_mut().expect("checked above");
            let outcome = match kind {
                DataKind::Load => c.access(line, false),
                DataKind::Store => c.access(line, true),
                // The load brings the line in; the store then hits it.
                DataKind::Modify => {
                    let o = c.access(line, false);
                    c.access(line, true);
                    o
                }
            };
            if let Outcome::Miss { writeback } = outcome {
                self.emit(Op::Read, line << shift, line_size)?;
                if let Some(wb) = writeback {
                    self.emit(Op::Write, wb << shift, line_size)?;
                }
            }
        }
        Ok(())
    }
}

/// Lackey counters.
#[derive(Default)]
struct Counts {
    instructions: u64,
    loads: u64,
    stores: u64,
    modifies: u64,
    data_bytes: u64,
    guest_instrs: Option<u64>,
    messages: Vec<String>,
}

impl Counts {
    fn message(&mut self, line: &[u8]) {
        let text = String::from_utf8_lossy(line);
        // "==1234== text": drop the pid.
        let text = text.trim_start_matches('=').trim_start_matches(|c: char| c.is_ascii_digit()).trim_start_matches('=');
        let text = text.strip_prefix(' ').unwrap_or(text);
        if let Some(n) = text.trim_start().strip_prefix("guest instrs:") {
            self.guest_instrs = n.trim().replace(',', "").parse().ok();
        }
        if self.messages.len() < MAX_MESSAGES {
            self.messages.push(text.to_owned());
        }
    }
}

/// Read `input` (lackey `--trace-mem=yes` output, named `input_name` in errors) to its end,
/// writing the traces of `req`. On error nothing appears at the output paths.
pub fn capture(input: &mut dyn Read, input_name: &Path, req: &CaptureRequest<'_>, progress: &Progress) -> Result<CaptureReport> {
    let params = Params::resolve(PARAMS, req.params)?;
    let s = settings(&params, req.seed)?;
    let physical = s.v2p != "none";
    match (physical, req.virt_out) {
        (false, Some(_)) => return Err(Error::arg("virt_out", "v2p none writes only the virtual trace, to the output path")),
        (true, None) => return Err(Error::arg("virt_out", "a physical capture also writes its virtual twin: give its path")),
        _ => {}
    }
    if req.virt_out == Some(req.out) {
        return Err(Error::arg("virt_out", "the virtual and the physical trace need different paths"));
    }
    let page_shift = s.page_size.trailing_zeros();
    let translator = if physical { Some(translator(&s, req.pid, page_shift)?) } else { None };
    let meta = |addr_kind| TraceMeta { time_unit: TimeUnit::Instructions, addr_kind, page_size: s.page_size };
    let (virt_path, phys) = match (req.virt_out, translator) {
        (Some(vp), Some(t)) => (vp, Some((TraceWriter::create(req.out, meta(AddrKind::Physical))?, t))),
        _ => (req.out, None),
    };
    let mut run = Run {
        p: Pipeline {
            cache: s.cache.map(Cache::new).transpose()?,
            page_shift,
            gap: 0,
            virt: TraceWriter::create(virt_path, meta(AddrKind::Virtual))?,
            phys,
            records: 0,
        },
        c: Counts::default(),
    };
    let input_bytes = run.read_all(input, input_name, req.pipe_capacity, progress)?;
    let Run { p, c } = run;
    let llc = p.cache.as_ref().map(|cache| {
        let (cfg, st) = (cache.config(), cache.stats());
        LlcReport {
            size: cfg.size,
            ways: cfg.ways,
            line_size: cfg.line_size,
            hits: st.hits,
            misses: st.misses,
            writebacks: st.writebacks,
            dirty_at_exit: cache.dirty_lines(),
        }
    });
    let Pipeline { virt, phys, records, .. } = p;
    let (mode, note, pages_mapped, pages_unresolved, remaps) = match &phys {
        Some((_, t)) => (t.mode().name(), t.note.clone(), t.frames.len() as u64, t.unresolved, t.remaps),
        None => ("none", "virtual addresses only".to_owned(), 0, 0, 0),
    };
    let vstats = virt.finish()?;
    if let Some((mut w, t)) = phys {
        w.set_v2p(t.mode());
        if let Err(e) = w.finish() {
            let _ = std::fs::remove_file(virt_path);
            return Err(e);
        }
    }
    Ok(CaptureReport {
        instructions: c.instructions,
        guest_instrs_reported: c.guest_instrs,
        loads: c.loads,
        stores: c.stores,
        modifies: c.modifies,
        data_bytes: c.data_bytes,
        llc,
        records,
        reads: vstats.reads,
        writes: vstats.writes,
        footprint_pages: vstats.footprint_pages,
        page_size: s.page_size,
        v2p: mode,
        v2p_note: note,
        pages_mapped,
        pages_unresolved,
        remaps,
        out: req.out.to_owned(),
        virt_out: req.virt_out.map(Path::to_owned),
        input_bytes,
        valgrind_messages: c.messages,
        params: serde_json::to_value(params.to_toml()).unwrap_or_default(),
    })
}

/// The translator v2p asks for; `auto` takes pagemap when it can be opened.
fn translator(s: &Settings, pid: Option<u32>, page_shift: u32) -> Result<Translator> {
    let explicit = s.v2p == "pagemap";
    let pm = match pid {
        None => Err("no process id was given".to_owned()),
        Some(pid) => Pagemap::open(pid).map_err(|e| format!("/proc/{pid}/pagemap: {e}")),
    };
    let buddy = |note: String| -> Result<(Source, String)> { Ok((Source::Buddy(Buddy::new(&s.buddy)?), note)) };
    let (source, note) = match (s.v2p.as_str(), pm) {
        ("buddy", _) => buddy("asked for".into())?,
        (_, Ok(pm)) if s.page_size as u64 == PAGEMAP_PAGE => {
            (Source::Pagemap { pm, explicit, decided: false }, "frames read from /proc/PID/pagemap".into())
        }
        (_, Ok(_)) => buddy(format!("pagemap maps 4 KiB pages, not {}", s.page_size))?,
        (_, Err(m)) if explicit => return Err(Error::Sim(format!("cannot read pagemap: {m}"))),
        (_, Err(m)) => buddy(format!("{m}, so the buddy model gave the frames"))?,
    };
    Ok(Translator {
        source,
        buddy_cfg: s.buddy,
        page_shift,
        frames: FxHashMap::default(),
        pending: VecDeque::new(),
        written: 0,
        next_synthetic: 0,
        unresolved: 0,
        remaps: 0,
        note,
    })
}

/// A capture in progress: the pipeline and the lackey counters.
struct Run {
    p: Pipeline,
    c: Counts,
}

impl Run {
    fn line(&mut self, line: &[u8]) -> std::result::Result<Result<()>, String> {
        match lackey_line(line)? {
            LackeyLine::Other => {
                if line.starts_with(b"==") {
                    self.c.message(line);
                }
            }
            LackeyLine::Instr => {
                self.p.gap += 1;
                self.c.instructions += 1;
            }
            LackeyLine::Data { kind, addr, size } => {
                let bytes = size as u64;
                match kind {
                    DataKind::Load => self.c.loads += 1,
                    DataKind::Store => self.c.stores += 1,
                    DataKind::Modify => self.c.modifies += 1,
                }
                self.c.data_bytes += if kind == DataKind::Modify { 2 * bytes } else { bytes };
                return Ok(self.p.data(kind, addr, size));
            }
        }
        Ok(Ok(()))
    }

    fn publish(&self, progress: &Progress, input_bytes: u64) {
        progress.input_bytes.store(input_bytes, Ordering::Relaxed);
        progress.instructions.store(self.c.instructions, Ordering::Relaxed);
        progress.data_accesses.store(self.c.loads + self.c.stores + self.c.modifies, Ordering::Relaxed);
        progress.records.store(self.p.records, Ordering::Relaxed);
    }

    /// Feed every line of `input` through the pipeline; returns the bytes read.
    fn read_all(&mut self, input: &mut dyn Read, name: &Path, pipe_capacity: Option<usize>, progress: &Progress) -> Result<u64> {
        let mut buf = vec![0u8; CHUNK];
        let mut filled = 0;
        let mut line_no = 0u64;
        let mut total = 0u64;
        loop {
            if progress.cancelled() {
                return Err(Error::Sim("capture interrupted".into()));
            }
            let n = match input.read(&mut buf[filled..]) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::io(name, e)),
            };
            total += n as u64;
            let eof = n == 0;
            let end = filled + n;
            // Whole lines, and at end of input whatever is left.
            let complete = if eof { end } else { buf[..end].iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1) };
            if complete > 0 {
                let body = &buf[..complete];
                for line in body.strip_suffix(b"\n").unwrap_or(body).split(|&b| b == b'\n') {
                    line_no += 1;
                    let line = line.strip_suffix(b"\r").unwrap_or(line);
                    self.line(line).map_err(|m| Error::line(name, line_no, m))??;
                }
            }
            buf.copy_within(complete..end, 0);
            filled = end - complete;
            if filled > MAX_LINE {
                return Err(Error::line(name, line_no + 1, format!("line longer than {MAX_LINE} bytes: not lackey output")));
            }
            if let Some((w, t)) = &mut self.p.phys {
                t.drain(w, if eof { Force::All } else { Force::None })?;
            }
            self.publish(progress, total);
            if eof {
                // A cancelled capture whose program was killed reads as a normal end of input.
                if progress.cancelled() {
                    return Err(Error::Sim("capture interrupted".into()));
                }
                return Ok(total);
            }
            if let Some(cap) = pipe_capacity {
                if n < cap / 2 {
                    std::thread::sleep(PIPE_WAIT);
                }
            }
        }
    }
}
