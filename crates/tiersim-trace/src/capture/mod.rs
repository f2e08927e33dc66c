//! `tiersim capture`: a real program's memory trace, from Valgrind lackey's output streamed
//! through a last-level cache model and a virtual-to-physical mapping into native traces, or
//! from the per-thread record files of the tracing runtime linked into a program built with
//! `-fsanitize=thread` (`instrumented`; runtime/tiersim_trace_rt.c).
//!
//! The workflow is the CXL-flash study's (Yang et al., ATC'23, sec. 3.1, fig. 2): Valgrind
//! instruments every load and store, a cache model keeps only LLC misses and dirty evictions,
//! and page mappings turn virtual into physical addresses. Here the stream is lackey's
//! `--trace-mem=yes` text, read from a pipe as the program runs (never stored); time is the
//! number of guest instructions between recorded accesses (lackey prints one `I` line per
//! instruction), so the platform's `host.frequency` and `host.cpi` turn it into ns. Valgrind runs
//! a program's threads one at a time and lackey does not say which thread made an access;
//! Valgrind's own `--trace-sched=yes` lines (`SCHED[tid]:  acquired lock`, printed in the same
//! stream each time a thread starts running) do, so each access goes to the thread that runs.
//! Threads are numbered in creation order (the main thread is 0), which the LD_PRELOAD shim
//! runtime/tiersim_vg_preload.c announces in the stream (see `Run::sched`); placed on CPUs by
//! `cpu_map`; each has its own instruction clock.
//!
//! Two traces come out: the physical one (v2p `pagemap` or `buddy`) and its virtual twin, record
//! for record the same accesses (same times, sizes and directions; only addresses differ), so the
//! study's virtual-vs-physical comparison (its fig. 3) can be made on any program. With v2p
//! `none` only the virtual trace is written.

pub mod cache;
pub mod instrumented;
pub mod stream;
mod translate;
pub mod v2p;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use rustc_hash::FxHashMap;
use serde::Serialize;
use tiersim_core::params::{ParamKind, ParamSpec, Params};
use tiersim_core::{Access, Error, Op, Result};

use crate::convert::{lackey_line, DataKind, LackeyLine};
use crate::format::{
    check_page_size, share_planes, AddrKind, TimeUnit, TraceMeta, TraceStats, TraceWriter, WriterOptions, MAX_HASH_LOG,
    MIN_HASH_LOG, MIN_PAGE_SIZE,
};
use cache::{Cache, CacheConfig, Outcome};
use translate::{translator, Force, Translator};
use v2p::{BuddyConfig, Pagemap, PAGEMAP_PAGE};

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
    ParamSpec::new(
        "cpu_map",
        ParamKind::Str,
        "",
        "CPU of each thread in creation order (main thread first), e.g. 0-1,16-17; threads past the list wrap around; empty: thread i on CPU i",
    ),
    ParamSpec::new(
        "llc_scope",
        ParamKind::Str,
        "per_cpu",
        "per_cpu: each CPU its own cache of size llc (private, no coherence); shared: one cache for all threads, a dirty line's writeback charged to the thread whose fill evicts it",
    )
    .choices(&["per_cpu", "shared"]),
    ParamSpec::new(
        "instructions_per_access",
        ParamKind::Float,
        "2",
        "instrumented path: instructions counted per traced load or store (its time base; the Valgrind path counts real instructions)",
    )
    .min(0.0)
    .max(1000.0),
    ParamSpec::new(
        "zstd_level",
        ParamKind::Int,
        CAPTURE_LEVEL,
        "zstd level of the traces' frames: negative levels are zstd's fast ones (less CPU a record, larger files, faster reads), 1 to 22 compress more; 0 is refused. The records read back the same at any level",
    )
    .min(ZSTD_MIN_LEVEL as f64)
    .max(22.0),
    ParamSpec::new(
        "zstd_hash_log",
        ParamKind::Int,
        CAPTURE_HASH_LOG,
        "zstd's hashLog for the traces' frames (6 to 30; a small table is cheaper at the fast levels); 0: the level's own",
    )
    .min(0.0)
    .max(MAX_HASH_LOG as f64),
];

/// Threads a capture follows, at most: each has a cache when `llc_scope` is per_cpu.
const MAX_THREADS: usize = 1 << 16;
/// Read buffer; a lackey line is about 16 bytes.
const CHUNK: usize = 1 << 20;
/// A line longer than this is not lackey output.
const MAX_LINE: usize = 4096;
/// Pagemap mode holds physical records whose page is not yet present (lackey may print an
/// access before the program has faulted its page in); past this many the oldest page gets a
/// synthetic frame, so memory stays bounded.
const MAX_PENDING: usize = 1 << 20;
/// Records `Pipeline` makes before it writes them.
const EMIT_BATCH: usize = 256;
/// Frames given to pages pagemap never showed: above any real physical address (x86-64 has
/// at most 52 address bits), so they cannot collide with real frames.
const SYNTHETIC_FRAME_BASE: u64 = 1 << 40;
/// When a pipe read returns less than half the pipe, wait this long so that Valgrind fills it:
/// Valgrind writes one line per write(2), and waking the reader for each costs more than the
/// tool itself.
const PIPE_WAIT: Duration = Duration::from_millis(1);
/// Valgrind message lines kept for the report.
const MAX_MESSAGES: usize = 200;
/// zstd level and hashLog of captured traces by default: level 1 with its own table keeps the
/// files small; the fast levels write a record for less CPU and make the files a third to twice
/// as large (BENCHMARKS.md, "Capture", "zstd's fast levels"), which `--zstd-level` leaves to the user.
const CAPTURE_LEVEL: &str = "1";
const CAPTURE_HASH_LOG: &str = "0";
/// zstd's fastest level (`ZSTD_minCLevel()`, -ZSTD_TARGETLENGTH_MAX).
const ZSTD_MIN_LEVEL: i32 = -(1 << 17);

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
    /// `valgrind` or `instrumented`.
    pub path: &'static str,
    /// Guest instructions (lackey `I` lines); on the instrumented path, the estimate
    /// (`instructions_per_access` per traced load or store).
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
    /// The program's threads in creation order (the main thread first).
    pub threads: Vec<ThreadReport>,
    /// How threads got their numbers: `announced` (the Valgrind path's preload shim named each
    /// thread's creation-order number), `start_order` (Valgrind path without the shim: guessed
    /// from when threads started, see `Run::sched`) or `created` (the instrumented runtime).
    pub thread_numbering: &'static str,
    /// The resolved parameters, as TOML values.
    pub params: serde_json::Value,
    /// CPU time of the traces' compressing threads (both traces), beside the thread that makes
    /// the records.
    pub compress_cpu_s: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ThreadReport {
    pub thread: u32,
    pub cpu: u32,
    /// Instructions it ran (an estimate on the instrumented path).
    pub instructions: u64,
    /// Loads and stores it made (lackey's modifies count once).
    pub accesses: u64,
    /// Records of it in each trace.
    pub records: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct LlcReport {
    /// `shared` or `per_cpu`.
    pub scope: String,
    /// Caches modelled: 1 when shared, one per CPU that ran a thread when per_cpu.
    pub caches: u32,
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
    per_cpu: bool,
    cpu_map: Vec<u32>,
    instructions_per_access: f64,
    page_size: u32,
    v2p: String,
    buddy: BuddyConfig,
    /// The traces' zstd level and hashLog (None: the level's own).
    zstd_level: i32,
    zstd_hash_log: Option<u32>,
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
    let cpu_map = tiersim_core::units::parse_cpu_list(p.str("cpu_map")).map_err(|m| Error::config("cpu_map", m))?;
    let zstd_level = p.int("zstd_level") as i32;
    if zstd_level == 0 {
        return Err(Error::config("zstd_level", "0 would be zstd's default level (3): name the level"));
    }
    let zstd_hash_log = match p.int("zstd_hash_log") as u32 {
        0 => None,
        h if h < MIN_HASH_LOG => {
            return Err(Error::config(
                "zstd_hash_log",
                format!("{h} is outside {MIN_HASH_LOG}..={MAX_HASH_LOG} (0: the level's own)"),
            ))
        }
        h => Some(h),
    };
    Ok(Settings {
        cache,
        per_cpu: p.str("llc_scope") == "per_cpu",
        cpu_map,
        instructions_per_access: p.float("instructions_per_access"),
        page_size,
        v2p,
        buddy,
        zstd_level,
        zstd_hash_log,
    })
}

/// One thread of the program: where it runs and its instruction clock.
#[derive(Debug, Clone, Copy, Default)]
struct Thread {
    cpu: u32,
    /// Instructions since its last record.
    gap: u64,
    instructions: u64,
    accesses: u64,
    records: u64,
}

/// The LLC model: one cache for all threads, or one per CPU.
struct Caches {
    config: Option<CacheConfig>,
    per_cpu: bool,
    /// Keyed by CPU when per_cpu, else the one cache at key 0.
    caches: FxHashMap<u32, Cache>,
}

impl Caches {
    fn get(&mut self, cpu: u32) -> Result<Option<&mut Cache>> {
        let Some(cfg) = self.config else { return Ok(None) };
        let key = if self.per_cpu { cpu } else { 0 };
        Ok(Some(match self.caches.entry(key) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => e.insert(Cache::new(cfg)?),
        }))
    }

    fn report(&self) -> Option<LlcReport> {
        let cfg = self.config?;
        let mut r = LlcReport {
            scope: if self.per_cpu { "per_cpu" } else { "shared" }.into(),
            caches: self.caches.len() as u32,
            size: cfg.size,
            ways: cfg.ways,
            line_size: cfg.line_size,
            hits: 0,
            misses: 0,
            writebacks: 0,
            dirty_at_exit: 0,
        };
        for c in self.caches.values() {
            let st = c.stats();
            r.hits += st.hits;
            r.misses += st.misses;
            r.writebacks += st.writebacks;
            r.dirty_at_exit += c.dirty_lines();
        }
        Some(r)
    }
}

/// Accesses in, records out: the threads' instruction clocks, the cache and the two writers.
struct Pipeline {
    caches: Caches,
    page_shift: u32,
    threads: Vec<Thread>,
    cpu_map: Vec<u32>,
    /// The thread whose accesses come in now.
    cur: usize,
    virt: TraceWriter,
    phys: Option<(TraceWriter, Translator)>,
    records: u64,
    /// Records made and not yet written: written in runs, so that the translator and the
    /// writers can fetch ahead the page entries and bitmap words the next records touch.
    batch: Vec<Access>,
}

impl Pipeline {
    /// Start following a new thread; its index.
    fn new_thread(&mut self) -> Result<usize> {
        let i = self.threads.len();
        if i >= MAX_THREADS {
            return Err(Error::Sim(format!("the program started more than {MAX_THREADS} threads")));
        }
        let cpu = if self.cpu_map.is_empty() { i as u32 } else { self.cpu_map[i % self.cpu_map.len()] };
        self.threads.push(Thread { cpu, ..Thread::default() });
        Ok(i)
    }

    /// A record of thread `t`, at its instruction gap.
    fn emit(&mut self, t: usize, op: Op, addr: u64, size: u16) -> Result<()> {
        let th = &mut self.threads[t];
        let a = Access { time: th.gap, addr, cpu: th.cpu, size, op, flags: 0 };
        th.gap = 0;
        th.records += 1;
        self.records += 1;
        self.batch.push(a);
        if self.batch.len() >= EMIT_BATCH {
            self.flush()?;
        }
        Ok(())
    }

    /// Write the records made so far into the virtual trace and through the translator.
    fn flush(&mut self) -> Result<()> {
        let r = self.virt.write_all(&self.batch).and_then(|()| match &mut self.phys {
            Some((w, tr)) => tr.submit_all(&self.batch, w),
            None => Ok(()),
        });
        self.batch.clear();
        r
    }

    /// Every record made so far written or waiting in the translator for its frame; then the
    /// waiting ones whose frames are known now (or, by `force`, all of them) written.
    fn drain(&mut self, force: Force) -> Result<()> {
        self.flush()?;
        match &mut self.phys {
            Some((w, t)) => t.drain(w, force),
            None => Ok(()),
        }
    }

    /// An unfiltered access, cut at page boundaries so that each piece has one frame.
    fn emit_split(&mut self, t: usize, op: Op, addr: u64, size: u16) -> Result<()> {
        let mut at = addr;
        let end = addr.saturating_add(size as u64);
        while at < end {
            let page_end = ((at >> self.page_shift) + 1) << self.page_shift;
            let n = end.min(page_end) - at;
            self.emit(t, op, at, n as u16)?;
            at += n;
        }
        Ok(())
    }

    /// An instruction of the current thread.
    fn instr(&mut self) {
        let t = &mut self.threads[self.cur];
        t.gap += 1;
        t.instructions += 1;
    }

    /// A load, store or modify of the current thread, through its cache.
    fn data(&mut self, kind: DataKind, addr: u64, size: u16) -> Result<()> {
        let t = self.cur;
        self.threads[t].accesses += 1;
        let Some(c) = self.caches.get(self.threads[t].cpu)? else {
            return match kind {
                DataKind::Load => self.emit_split(t, Op::Read, addr, size),
                DataKind::Store => self.emit_split(t, Op::Write, addr, size),
                DataKind::Modify => {
                    self.emit_split(t, Op::Read, addr, size)?;
                    self.emit_split(t, Op::Write, addr, size)
                }
            };
        };
        let shift = c.line_shift();
        let line_size = c.config().line_size as u16;
        let first = addr >> shift;
        let last = addr.saturating_add((size as u64).max(1) - 1) >> shift;
        for line in first..=last {
            let c = self.caches.get(self.threads[t].cpu)?.expect("checked above");
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
                self.emit(t, Op::Read, line << shift, line_size)?;
                if let Some(wb) = writeback {
                    self.emit(t, Op::Write, wb << shift, line_size)?;
                }
            }
        }
        Ok(())
    }

    fn thread_reports(&self) -> Vec<ThreadReport> {
        let r = |(i, t): (usize, &Thread)| ThreadReport {
            thread: i as u32,
            cpu: t.cpu,
            instructions: t.instructions,
            accesses: t.accesses,
            records: t.records,
        };
        self.threads.iter().enumerate().map(r).collect()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sched {
    /// `acquired lock (thread_wrapper(starting new thread))`
    Started,
    /// Any other `acquired lock` line: the thread runs from here on.
    Running,
    /// `release lock in VG_(exit_thread)`: the thread ended and its id is free.
    Exited,
}

/// `--PID--   SCHED[tid]:  acquired lock (who)` and `release lock in VG_(exit_thread)` lines;
/// other scheduler events (releases: `None`) change nothing, since the next thread to run
/// acquires the lock and says so. `None` for a line that is no scheduler line.
fn sched_line(line: &[u8]) -> Option<(u32, Option<Sched>)> {
    let at = line.windows(6).position(|w| w == b"SCHED[")? + 6;
    let rest = &line[at..];
    let close = rest.iter().position(|&b| b == b']')?;
    let tid = std::str::from_utf8(&rest[..close]).ok()?.parse().ok()?;
    let event = &rest[close + 1..];
    if event.windows(16).any(|w| w == b"VG_(exit_thread)") {
        return Some((tid, Some(Sched::Exited)));
    }
    if !event.windows(14).any(|w| w == b"acquired lock ") {
        return Some((tid, None));
    }
    let started = event.windows(19).any(|w| w == b"starting new thread");
    Some((tid, Some(if started { Sched::Started } else { Sched::Running })))
}

/// `**PID** tiersim-thread N`, the preload shim's announcement (a Valgrind client message):
/// N. `None` for another client message.
fn announcement(line: &[u8]) -> Option<usize> {
    const TAG: &[u8] = b"** tiersim-thread ";
    let at = line.windows(TAG.len()).position(|w| w == TAG)? + TAG.len();
    std::str::from_utf8(&line[at..]).ok()?.trim().parse().ok()
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
        // "==1234== text" (or "--1234--" for debug messages): drop the pid.
        let text = text
            .trim_start_matches(['=', '-'])
            .trim_start_matches(|c: char| c.is_ascii_digit())
            .trim_start_matches(['=', '-']);
        let text = text.strip_prefix(' ').unwrap_or(text);
        if let Some(n) = text.trim_start().strip_prefix("guest instrs:") {
            self.guest_instrs = n.trim().replace(',', "").parse().ok();
        }
        if self.messages.len() < MAX_MESSAGES {
            self.messages.push(text.to_owned());
        }
    }
}

/// Read `input` (lackey `--trace-mem=yes` output, with or without Valgrind's `--trace-sched=yes`
/// lines, named `input_name` in errors) to its end, writing the traces of `req`. On error nothing
/// appears at the output paths.
pub fn capture(
    input: &mut dyn Read,
    input_name: &Path,
    req: &CaptureRequest<'_>,
    progress: &Progress,
) -> Result<CaptureReport> {
    let (params, s) = resolve(req)?;
    let pm = match req.pid {
        None => Err("no process id was given".to_owned()),
        Some(pid) => Pagemap::open(pid).map_err(|e| format!("/proc/{pid}/pagemap: {e}")),
    };
    let p = pipeline(req, &s, pm)?;
    let mut run = Run {
        p,
        c: Counts::default(),
        vg_threads: FxHashMap::default(),
        reserved: Default::default(),
        main_started: false,
        announced: false,
        running: 1,
        waiting: Default::default(),
        held: false,
    };
    let input_bytes = run.read_all(input, input_name, req.pipe_capacity, progress)?;
    let Run { p, c, announced, .. } = run;
    let counts = Totals {
        instructions: c.instructions,
        guest_instrs_reported: c.guest_instrs,
        loads: c.loads,
        stores: c.stores,
        modifies: c.modifies,
        data_bytes: c.data_bytes,
        input_bytes,
        thread_numbering: if announced { "announced" } else { "start_order" },
    };
    finish(p, None, req, &params, &s, "valgrind", counts, c.messages)
}

/// What the front end counted, for the report.
struct Totals {
    instructions: u64,
    guest_instrs_reported: Option<u64>,
    loads: u64,
    stores: u64,
    modifies: u64,
    data_bytes: u64,
    input_bytes: u64,
    thread_numbering: &'static str,
}

fn resolve(req: &CaptureRequest<'_>) -> Result<(Params, Settings)> {
    let params = Params::resolve(PARAMS, req.params)?;
    let s = settings(&params, req.seed)?;
    let physical = s.v2p != "none";
    match (physical, req.virt_out) {
        (false, Some(_)) => {
            return Err(Error::arg("virt_out", "v2p none writes only the virtual trace, to the output path"))
        }
        (true, None) => {
            return Err(Error::arg("virt_out", "a physical capture also writes its virtual twin: give its path"))
        }
        _ => {}
    }
    if req.virt_out == Some(req.out) {
        return Err(Error::arg("virt_out", "the virtual and the physical trace need different paths"));
    }
    Ok((params, s))
}

/// The writers and the translator of `req`, with thread 0 (the main thread) started.
fn pipeline(req: &CaptureRequest<'_>, s: &Settings, pm: std::result::Result<Pagemap, String>) -> Result<Pipeline> {
    let physical = s.v2p != "none";
    let page_shift = s.page_size.trailing_zeros();
    let translator = if physical { Some(translator(s, pm, page_shift)?) } else { None };
    let meta = |addr_kind| TraceMeta { time_unit: TimeUnit::Instructions, addr_kind, page_size: s.page_size };
    // Each trace compresses on a thread of its own while this one makes records, at a fast
    // level: capture makes records faster than level 3 compresses them.
    let opts = WriterOptions { background: true, level: s.zstd_level, hash_log: s.zstd_hash_log, ..Default::default() };
    let create = |path, kind| TraceWriter::create_with(path, meta(kind), opts);
    let (virt_path, phys) = match (req.virt_out, translator) {
        (Some(vp), Some(t)) => {
            let mut w = create(req.out, AddrKind::Physical)?;
            // Its records are the virtual trace's at other addresses, and the translator counts
            // their pages.
            w.count_nothing();
            (vp, Some((w, t)))
        }
        _ => (req.out, None),
    };
    let mut virt = create(virt_path, AddrKind::Virtual)?;
    let mut phys = phys;
    if let Some((w, _)) = &mut phys {
        // The translator counts the virtual pages as it maps them.
        virt.count_no_pages();
        // The physical records are the virtual ones (checked by that writer) at other
        // addresses, and their frames share every plane but the addresses'.
        w.trust_records();
        share_planes(&mut virt, w)?;
    }
    let mut p = Pipeline {
        caches: Caches { config: s.cache, per_cpu: s.per_cpu, caches: FxHashMap::default() },
        page_shift,
        threads: Vec::new(),
        cpu_map: s.cpu_map.clone(),
        cur: 0,
        virt,
        phys,
        records: 0,
        batch: Vec::with_capacity(EMIT_BATCH),
    };
    p.new_thread()?;
    Ok(p)
}

/// Close the traces and make the report; `llc` overrides the pipeline's own cache counters
/// (the instrumented path filters in the runtime).
#[allow(clippy::too_many_arguments)]
fn finish(
    mut p: Pipeline,
    llc: Option<LlcReport>,
    req: &CaptureRequest<'_>,
    params: &Params,
    s: &Settings,
    path: &'static str,
    n: Totals,
    messages: Vec<String>,
) -> Result<CaptureReport> {
    p.drain(Force::All)?;
    let llc = llc.or_else(|| p.caches.report());
    let threads = p.thread_reports();
    let virt_path = req.virt_out.unwrap_or(req.out);
    let Pipeline { virt, phys, records, .. } = p;
    let meters: Vec<_> = std::iter::once(virt.thread_cpu()).chain(phys.iter().map(|(w, _)| w.thread_cpu())).collect();
    let (mode, note, pages_mapped, pages_unresolved, remaps) = match &phys {
        Some((_, t)) => (t.mode().name(), t.note.clone(), t.frames.len() as u64, t.unresolved, t.remaps),
        None => ("none", "virtual addresses only".to_owned(), 0, 0, 0),
    };
    let vstats = match &phys {
        Some((_, t)) => virt.finish_with_footprint(t.virt_pages.footprint())?,
        None => virt.finish()?,
    };
    if let Some((mut w, t)) = phys {
        w.set_v2p(t.mode());
        let stats = TraceStats { footprint_pages: t.pages.footprint(), ..vstats.clone() };
        if let Err(e) = w.finish_with(stats) {
            let _ = std::fs::remove_file(virt_path);
            return Err(e);
        }
    }
    Ok(CaptureReport {
        path,
        instructions: n.instructions,
        guest_instrs_reported: n.guest_instrs_reported,
        loads: n.loads,
        stores: n.stores,
        modifies: n.modifies,
        data_bytes: n.data_bytes,
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
        input_bytes: n.input_bytes,
        valgrind_messages: messages,
        threads,
        thread_numbering: n.thread_numbering,
        params: serde_json::to_value(params.to_toml()).unwrap_or_default(),
        compress_cpu_s: meters.iter().map(|m| m.load(Ordering::Relaxed)).sum::<u64>() as f64 / 1e9,
    })
}

/// A capture in progress: the pipeline, the lackey counters and which program thread each
/// Valgrind thread id is now.
struct Run {
    p: Pipeline,
    c: Counts,
    vg_threads: FxHashMap<u32, usize>,
    /// Program threads given to Valgrind ids that were created but have not started yet.
    reserved: std::collections::BTreeMap<u32, usize>,
    /// Whether the main thread's start line was seen (it is thread 0 from the outset).
    main_started: bool,
    /// Whether the preload shim announced the main thread (`tiersim-thread 0`): new threads then
    /// wait for their own announcement instead of the start-order rule.
    announced: bool,
    /// The Valgrind id that runs now.
    running: u32,
    /// Valgrind ids that started but have not announced their number yet, with their lackey
    /// events so far, replayed once the number is known.
    waiting: std::collections::BTreeMap<u32, Vec<Held>>,
    /// Whether `running` is waiting (its events are held).
    held: bool,
}

/// A lackey event of a thread whose number is not known yet.
enum Held {
    Instr,
    Data(DataKind, u64, u16),
}

/// Events a thread may hold before it announces itself; past this it is numbered as a thread
/// the shim did not create (the shim announces within a few hundred instructions of the start).
const MAX_HELD: usize = 1 << 20;

impl Run {
    fn line(&mut self, line: &[u8]) -> std::result::Result<Result<()>, String> {
        // `--trace-sched=yes` also prints `SCHEDSETJMP(line 1211) tid 1, jumped=..` when a
        // thread leaves the scheduler by a signal, with no prefix.
        if line.starts_with(b"SCHED") {
            return Ok(Ok(()));
        }
        if line.starts_with(b"**") {
            return Ok(match announcement(line) {
                Some(n) => self.announce(n),
                None => Ok(()),
            });
        }
        if line.starts_with(b"--") {
            return Ok(match sched_line(line) {
                Some((tid, Some(event))) => self.sched(tid, event),
                Some((_, None)) => Ok(()),
                None => {
                    self.c.message(line);
                    Ok(())
                }
            });
        }
        match lackey_line(line)? {
            LackeyLine::Other => {
                if line.starts_with(b"==") {
                    self.c.message(line);
                }
            }
            LackeyLine::Instr => {
                self.c.instructions += 1;
                if self.held {
                    return Ok(self.hold(Held::Instr));
                }
                self.p.instr();
            }
            LackeyLine::Data { kind, addr, size } => {
                let bytes = size as u64;
                match kind {
                    DataKind::Load => self.c.loads += 1,
                    DataKind::Store => self.c.stores += 1,
                    DataKind::Modify => self.c.modifies += 1,
                }
                self.c.data_bytes += if kind == DataKind::Modify { 2 * bytes } else { bytes };
                if self.held {
                    return Ok(self.hold(Held::Data(kind, addr, size)));
                }
                return Ok(self.p.data(kind, addr, size));
            }
        }
        Ok(Ok(()))
    }

    /// A scheduler line of Valgrind thread `tid`: a thread start gives it its program thread,
    /// any lock acquisition makes it the running one, an exit frees its id.
    ///
    /// Program threads are numbered in creation order. With the preload shim
    /// (runtime/tiersim_vg_preload.c) each new thread says its number as it starts
    /// (`announce`); until then its events are held. Without it (a static binary, a stored log)
    /// the number is guessed from start order: Valgrind only says when a thread starts, and a
    /// thread created later may start first; but Valgrind gives a new thread the lowest free id,
    /// so when thread `tid` starts, every lower id that no running thread holds was taken by a
    /// thread created before it that has not started yet: those get the next numbers first.
    /// (Wrong when a thread ends between another's creation and its start, freeing a lower id:
    /// then the two threads created around it swap numbers.)
    fn sched(&mut self, tid: u32, event: Sched) -> Result<()> {
        if event == Sched::Exited {
            self.vg_threads.remove(&tid);
            if self.waiting.contains_key(&tid) {
                self.unannounced(tid)?;
            }
            return Ok(());
        }
        self.running = tid;
        self.held = self.waiting.contains_key(&tid);
        if self.held {
            return Ok(());
        }
        if event == Sched::Started || !self.vg_threads.contains_key(&tid) {
            let t = if !self.main_started {
                0
            } else if self.announced {
                self.waiting.insert(tid, Vec::new());
                self.held = true;
                return Ok(());
            } else {
                for lower in 2..tid {
                    if !self.vg_threads.contains_key(&lower) && !self.reserved.contains_key(&lower) {
                        let t = self.p.new_thread()?;
                        self.reserved.insert(lower, t);
                    }
                }
                match self.reserved.remove(&tid) {
                    Some(t) => t,
                    None => self.p.new_thread()?,
                }
            };
            self.main_started = true;
            self.vg_threads.insert(tid, t);
        }
        self.p.cur = self.vg_threads[&tid];
        Ok(())
    }

    /// `tiersim-thread n` from the running thread: it is program thread `n`. The main thread's
    /// announcement (0) turns on waiting for announcements.
    fn announce(&mut self, n: usize) -> Result<()> {
        if n == 0 {
            self.announced = true;
            return Ok(());
        }
        while self.p.threads.len() <= n {
            self.p.new_thread()?;
        }
        self.assign(self.running, n)
    }

    /// Valgrind thread `tid` is program thread `t`: replay what it held.
    fn assign(&mut self, tid: u32, t: usize) -> Result<()> {
        self.vg_threads.insert(tid, t);
        let held = self.waiting.remove(&tid).unwrap_or_default();
        let back = self.p.cur;
        self.p.cur = t;
        for e in held {
            match e {
                Held::Instr => self.p.instr(),
                Held::Data(kind, addr, size) => self.p.data(kind, addr, size)?,
            }
        }
        if tid == self.running {
            self.held = false;
        } else {
            self.p.cur = back;
        }
        Ok(())
    }

    /// A waiting thread that ended, or held too much, without announcing itself (not created
    /// through the shim's pthread_create: a raw clone, libc's own helper threads): the next
    /// free number.
    fn unannounced(&mut self, tid: u32) -> Result<()> {
        let t = self.p.new_thread()?;
        self.assign(tid, t)
    }

    fn hold(&mut self, e: Held) -> Result<()> {
        let held = self.waiting.get_mut(&self.running).expect("held means waiting");
        held.push(e);
        if held.len() >= MAX_HELD {
            self.unannounced(self.running)?;
        }
        Ok(())
    }

    /// At end of input: threads still waiting get numbers, in Valgrind id order.
    fn flush_waiting(&mut self) -> Result<()> {
        while let Some(&tid) = self.waiting.keys().next() {
            self.unannounced(tid)?;
        }
        Ok(())
    }

    fn publish(&self, progress: &Progress, input_bytes: u64) {
        progress.input_bytes.store(input_bytes, Ordering::Relaxed);
        progress.instructions.store(self.c.instructions, Ordering::Relaxed);
        progress.data_accesses.store(self.c.loads + self.c.stores + self.c.modifies, Ordering::Relaxed);
        progress.records.store(self.p.records, Ordering::Relaxed);
    }

    /// Feed every line of `input` through the pipeline; returns the bytes read.
    fn read_all(
        &mut self,
        input: &mut dyn Read,
        name: &Path,
        pipe_capacity: Option<usize>,
        progress: &Progress,
    ) -> Result<u64> {
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
                return Err(Error::line(
                    name,
                    line_no + 1,
                    format!("line longer than {MAX_LINE} bytes: not lackey output"),
                ));
            }
            if eof {
                self.flush_waiting()?;
            }
            self.p.drain(if eof { Force::All } else { Force::None })?;
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
