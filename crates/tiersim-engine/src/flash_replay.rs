//! Device-mode replay: a trace of physical addresses against one cxl_flash device, streamed
//! (never loaded whole), open loop (each access issued at its trace time, so a stalled device
//! shows as latency, which includes the stall) or closed loop (`n` accesses outstanding, the next
//! issued when the earliest completes, trace times ignored). Instruction-count traces (the
//! generators' output) become time at `ns_per_instruction` per CPU.
//!
//! Optional, before the device:
//! - page scattering (`scatter`): each 4 KiB page gets a pseudo-random physical frame at its first
//!   touch, as the kernel's allocator scatters a program's pages (seed 004 §3.2: physical traces
//!   differ from virtual ones); off, addresses reach the device as the trace gives them;
//! - a host LLC filter (`llc_bytes`, LRU, 64 B lines, write-back with write-allocate), so that
//!   raw load/store traces reach the device as last-level-cache misses and dirty write-backs, as
//!   seed 004's traces do;
//! - host hints (seed 004 §5.2, observation 7): a hint file of `time addr [bytes]` lines
//!   delivered at their times, or hints generated from the trace itself like the paper's
//!   insightful kernel: the hottest `top` fraction of lines (by a first pass over the trace) are
//!   hinted with probability `probability`, `lead` accesses before they are used.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rustc_hash::{FxHashMap, FxHashSet};
use serde_json::json;
use tiersim_core::{Access, Error, Ns, Op, Params, Result};
use tiersim_trace::progress::{with_progress, ProgressFn};
use tiersim_trace::{AccessSource, TimeUnit};

use crate::readahead::ReadAhead;
use tiersim_devices::cxl_flash::{self, CxlFlash};
use tiersim_devices::{presets, Device, DeviceRequest};

const HOST_LINE: u64 = 64;

/// Hints generated from the trace: the hottest lines, hinted ahead of use.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HotHints {
    /// Fraction of the touched lines (device lines, by access count) that are hot.
    pub top: f64,
    /// Probability that an access to a hot line is hinted.
    pub probability: f64,
    /// Accesses between a hint and the access it announces.
    pub lead: usize,
    pub seed: u64,
}

#[derive(Debug, Clone, Default)]
pub struct ReplayOptions {
    /// `None`: open loop; `Some(n)`: n accesses outstanding.
    pub closed_loop: Option<u32>,
    /// For instruction-count traces.
    pub ns_per_instruction: f64,
    /// Stop after this many trace accesses (0: all).
    pub limit: u64,
    /// Host LLC in front of the device (0: none).
    pub llc_bytes: u64,
    pub llc_ways: u32,
    pub hint_file: Option<PathBuf>,
    pub hot_hints: Option<HotHints>,
    /// Scatter pages over the device with this seed.
    pub scatter: Option<u64>,
}

const PAGE_SHIFT: u32 = 12;

/// First-touch page frames drawn from a bijection of a counter over the largest power-of-two
/// number of frames that fits the device, so distinct pages never share a frame.
struct Scatter {
    frames_shift: u32,
    mult: u64,
    xor: u64,
    next: u64,
    map: FxHashMap<u64, u64>,
}

impl Scatter {
    fn new(device_bytes: u64, seed: u64) -> Scatter {
        let frames = (device_bytes >> PAGE_SHIFT).max(1);
        let frames_shift = 63 - frames.leading_zeros();
        let mut r = ChaCha8Rng::seed_from_u64(seed);
        Scatter { frames_shift, mult: r.gen::<u64>() | 1, xor: r.gen(), next: 0, map: FxHashMap::default() }
    }

    fn frame(&mut self, vpn: u64) -> u64 {
        let (shift, mult, xor) = (self.frames_shift, self.mult, self.xor);
        let next = &mut self.next;
        *self.map.entry(vpn).or_insert_with(|| {
            let mask = if shift >= 64 { u64::MAX } else { (1u64 << shift) - 1 };
            // An odd multiplier and an xor-shift are both bijections modulo 2^shift.
            let mut x = (*next).wrapping_mul(mult) & mask;
            x ^= (x >> (shift / 2).max(1)) & mask;
            x = (x ^ xor) & mask;
            *next += 1;
            x
        })
    }

    fn addr(&mut self, addr: u64) -> u64 {
        (self.frame(addr >> PAGE_SHIFT) << PAGE_SHIFT) | (addr & ((1 << PAGE_SHIFT) - 1))
    }
}

pub struct ReplayResult {
    pub summary: serde_json::Value,
    /// Latency histogram bins: (class, low ns, high ns, count).
    pub bins: Vec<(&'static str, u64, u64, u64)>,
}

/// A set-associative LRU cache of 64 B host lines with dirty bits (true LRU by stamps).
struct Llc {
    sets: u64,
    ways: usize,
    tags: Vec<u64>,
    stamp: Vec<u64>,
    dirty: Vec<bool>,
    clock: u64,
    hits: u64,
    misses: u64,
    writebacks: u64,
}

impl Llc {
    fn new(bytes: u64, ways: u32) -> Result<Llc> {
        let lines = bytes / HOST_LINE;
        let ways = u64::from(ways.max(1));
        if lines < ways || !lines.is_multiple_of(ways) {
            return Err(Error::arg("llc", format!("{bytes} B is not a whole number of {ways}-way sets of 64 B lines")));
        }
        Ok(Llc {
            sets: lines / ways,
            ways: ways as usize,
            tags: vec![0; lines as usize],
            stamp: vec![0; lines as usize],
            dirty: vec![false; lines as usize],
            clock: 0,
            hits: 0,
            misses: 0,
            writebacks: 0,
        })
    }

    /// Look up a host line; returns (hit, written-back victim line).
    fn access(&mut self, line: u64, write: bool) -> (bool, Option<u64>) {
        self.clock += 1;
        let first = (line % self.sets) as usize * self.ways;
        let set = first..first + self.ways;
        if let Some(i) = set.clone().find(|&i| self.tags[i] == line + 1) {
            self.hits += 1;
            self.stamp[i] = self.clock;
            self.dirty[i] |= write;
            return (true, None);
        }
        self.misses += 1;
        let victim = set.min_by_key(|&i| (self.tags[i] != 0, self.stamp[i])).unwrap_or(first);
        let wb = (self.tags[victim] != 0 && self.dirty[victim]).then(|| self.tags[victim] - 1);
        self.writebacks += u64::from(wb.is_some());
        self.tags[victim] = line + 1;
        self.stamp[victim] = self.clock;
        self.dirty[victim] = write;
        (false, wb)
    }
}

/// Turns trace times into issue times (ns).
struct Clock {
    unit: TimeUnit,
    ns_per_instruction: f64,
    /// Time of every CPU but `cpu`, whose time is `now` (traces run long on one CPU).
    per_cpu: FxHashMap<u32, f64>,
    cpu: u32,
    now: f64,
}

impl Clock {
    fn new(unit: TimeUnit, ns_per_instruction: f64) -> Clock {
        Clock { unit, ns_per_instruction, per_cpu: FxHashMap::default(), cpu: 0, now: 0.0 }
    }

    #[inline]
    fn issue(&mut self, a: &Access) -> Ns {
        match self.unit {
            TimeUnit::Ns => a.time,
            TimeUnit::Instructions => self.after_instructions(a),
        }
    }

    /// `issue` of an instruction-count trace.
    #[inline]
    fn after_instructions(&mut self, a: &Access) -> Ns {
        if a.cpu != self.cpu {
            self.switch_cpu(a.cpu);
        }
        self.now += a.time as f64 * self.ns_per_instruction;
        self.now as Ns
    }

    // Out of line, so that the common case (the same CPU) stays small enough to inline.
    #[inline(never)]
    fn switch_cpu(&mut self, cpu: u32) {
        self.per_cpu.insert(self.cpu, self.now);
        self.now = self.per_cpu.get(&cpu).copied().unwrap_or(0.0);
        self.cpu = cpu;
    }
}

/// Hint file lines: `time addr [bytes]` (ns, byte address, default one line), non-decreasing times.
struct HintFile {
    path: PathBuf,
    lines: std::io::Lines<BufReader<std::fs::File>>,
    line_no: u64,
    next: Option<(Ns, u64, u64)>,
    last: Ns,
}

impl HintFile {
    fn open(path: &Path) -> Result<HintFile> {
        let f = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        let mut h =
            HintFile { path: path.to_owned(), lines: BufReader::new(f).lines(), line_no: 0, next: None, last: 0 };
        h.advance()?;
        Ok(h)
    }

    fn advance(&mut self) -> Result<()> {
        self.next = None;
        for line in self.lines.by_ref() {
            self.line_no += 1;
            let line = line.map_err(|e| Error::io(&self.path, e))?;
            let text = line.split('#').next().unwrap_or("").trim();
            if text.is_empty() {
                continue;
            }
            let f: Vec<&str> = text.split_whitespace().collect();
            let bad = |m: String| Error::line(&self.path, self.line_no, m);
            if f.len() < 2 || f.len() > 3 {
                return Err(bad(format!("expected `time addr [bytes]`, got {text:?}")));
            }
            let num = |s: &str, what: &str| {
                let v = match s.strip_prefix("0x") {
                    Some(h) => u64::from_str_radix(h, 16).ok(),
                    None => s.parse().ok(),
                };
                v.ok_or_else(|| bad(format!("{what} {s:?} is not a whole number")))
            };
            let t = num(f[0], "time")?;
            if t < self.last {
                return Err(bad(format!("time {t} is before the previous hint's {}", self.last)));
            }
            self.last = t;
            let addr = num(f[1], "address")?;
            let bytes = if f.len() == 3 { num(f[2], "size")? } else { 1 };
            self.next = Some((t, addr, bytes));
            return Ok(());
        }
        Ok(())
    }
}

/// Count accesses per device line (first pass for generated hints).
pub fn line_counts(src: &mut dyn AccessSource, line_shift: u32, limit: u64) -> Result<FxHashMap<u64, u32>> {
    let mut counts: FxHashMap<u64, u32> = FxHashMap::default();
    let mut n = 0u64;
    let mut batch = Vec::with_capacity(1 << 14);
    'outer: loop {
        batch.clear();
        if src.read_batch(&mut batch, 1 << 14)? == 0 {
            break;
        }
        for a in &batch {
            if limit > 0 && n >= limit {
                break 'outer;
            }
            n += 1;
            if a.is_map() {
                continue;
            }
            let c = counts.entry(a.addr >> line_shift).or_insert(0);
            *c = c.saturating_add(1);
        }
    }
    Ok(counts)
}

/// The hottest `top` fraction of lines (ties broken by line number, so the set is reproducible).
pub fn hot_set(counts: &FxHashMap<u64, u32>, top: f64) -> FxHashSet<u64> {
    let mut v: Vec<(u32, u64)> = counts.iter().map(|(&l, &c)| (c, l)).collect();
    v.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let k = ((v.len() as f64) * top.clamp(0.0, 1.0)).ceil() as usize;
    v.into_iter().take(k).map(|(_, l)| l).collect()
}

/// Replay `src` against a cxl_flash device built from `params`. `hot` is the hot-line set for
/// generated hints (see `line_counts` / `hot_set`), required when `opts.hot_hints` is set.
/// Accesses a generated hint may lead its use by, at most: the replay holds that many accesses
/// read ahead (32 bytes each, so 32 MiB here), and 2^32 of them asked for 128 GiB up front.
pub const MAX_HINT_LEAD: usize = 1 << 20;

fn check_hot_hints(h: &HotHints) -> Result<()> {
    if !(0.0..=1.0).contains(&h.top) || !(0.0..=1.0).contains(&h.probability) {
        return Err(Error::arg("hints", "top and probability must be in [0, 1]"));
    }
    if h.lead > MAX_HINT_LEAD {
        return Err(Error::arg(
            "hint_lead",
            format!(
                "{} accesses is above the maximum {MAX_HINT_LEAD}: the replay holds that many accesses read ahead",
                h.lead
            ),
        ));
    }
    Ok(())
}

const BATCH: usize = 1 << 14;

/// The trace's accesses in order, up to the limit, with their issue times (file mapping
/// records skipped, pages scattered).
struct Feed {
    /// The current batch, read from `pos` on.
    batch: Vec<Access>,
    pos: usize,
    eof: bool,
    /// Trace accesses read, mapping records included.
    read: u64,
    limit: u64,
}

impl Feed {
    /// The next decoded batch into `batch` (at most the limit's remainder); false at the end.
    fn refill(&mut self, src: &mut dyn AccessSource) -> Result<bool> {
        self.batch.clear();
        self.pos = 0;
        if self.eof || (self.limit > 0 && self.read >= self.limit) {
            self.eof = true;
            return Ok(false);
        }
        let want = if self.limit > 0 { (self.limit - self.read).min(BATCH as u64) as usize } else { BATCH };
        if src.read_batch(&mut self.batch, want)? == 0 {
            self.eof = true;
            return Ok(false);
        }
        self.read += self.batch.len() as u64;
        Ok(true)
    }

    #[inline]
    fn next(
        &mut self,
        src: &mut dyn AccessSource,
        scatter: &mut Option<Scatter>,
        clock: &mut Clock,
    ) -> Result<Option<(Access, Ns)>> {
        loop {
            let Some(&a) = self.batch.get(self.pos) else {
                if !self.refill(src)? {
                    return Ok(None);
                }
                continue;
            };
            self.pos += 1;
            // A file mapping record is no device access (the device has no page cache).
            if a.is_map() {
                continue;
            }
            return Ok(Some(scattered(a, scatter, clock)));
        }
    }
}

#[inline]
fn scattered(mut a: Access, scatter: &mut Option<Scatter>, clock: &mut Clock) -> (Access, Ns) {
    if let Some(sc) = scatter.as_mut() {
        a.addr = sc.addr(a.addr);
    }
    let t = clock.issue(&a);
    (a, t)
}

/// The common case (open loop, no LLC, no hints): each decoded batch is walked as a slice and
/// its accesses go straight to the device, with the clock's time unit decided once per batch
/// rather than per access. Returns the device requests issued.
fn replay_open(
    dev: &mut CxlFlash,
    src: &mut dyn AccessSource,
    feed: &mut Feed,
    scatter: &mut Option<Scatter>,
    clock: &mut Clock,
) -> Result<u64> {
    #[inline(always)]
    fn run(dev: &mut CxlFlash, batch: &[Access], mut issue: impl FnMut(&Access) -> (u64, Ns)) -> u64 {
        let mut n = 0;
        for a in batch {
            // A file mapping record is no device access (the device has no page cache).
            if a.is_map() {
                continue;
            }
            let (addr, now) = issue(a);
            dev.access(&DeviceRequest {
                now,
                addr,
                size: u32::from(a.size.max(1)),
                op: a.op,
                socket: 0,
                cpu: a.cpu,
                remote: false,
            });
            n += 1;
        }
        n
    }
    let mut requests = 0;
    while feed.refill(src)? {
        let batch = &feed.batch[..];
        requests += match (clock.unit, scatter.as_mut()) {
            (TimeUnit::Ns, None) => run(dev, batch, |a| (a.addr, a.time)),
            (TimeUnit::Instructions, None) => run(dev, batch, |a| (a.addr, clock.after_instructions(a))),
            (_, Some(sc)) => run(dev, batch, |a| (sc.addr(a.addr), clock.issue(a))),
        };
    }
    Ok(requests)
}

/// Whether a replay takes the fast path (`replay_open`).
fn is_plain_open_loop(opts: &ReplayOptions) -> bool {
    opts.closed_loop.is_none() && opts.llc_bytes == 0 && opts.hint_file.is_none() && opts.hot_hints.is_none()
}

/// The fast path's per-access work done on the decoding thread, over each batch as it is decoded
/// (`ReadAhead::with_stage`): it is a function of the trace alone. Each access up to the limit,
/// mapping records aside, gets its issue time (ns) in `time` and its scattered address; the
/// replay thread then only hands them to the device.
struct Prepare {
    clock: Clock,
    scatter: Option<Scatter>,
    limit: u64,
    /// Trace accesses seen, mapping records included.
    seen: u64,
    /// Pages scattered so far, for the summary (the worker keeps the `Scatter`).
    pages: Arc<AtomicUsize>,
}

impl Prepare {
    fn apply(&mut self, batch: &mut [Access]) {
        let left = if self.limit == 0 { batch.len() as u64 } else { self.limit.saturating_sub(self.seen) };
        let n = left.min(batch.len() as u64) as usize;
        self.seen += batch.len() as u64;
        for a in &mut batch[..n] {
            if !a.is_map() {
                let (b, issue) = scattered(*a, &mut self.scatter, &mut self.clock);
                *a = Access { time: issue, ..b };
            }
        }
        if let Some(sc) = &self.scatter {
            self.pages.store(sc.map.len(), Ordering::Release);
        }
    }
}

pub fn replay(
    src: &mut dyn AccessSource,
    params: &Params,
    opts: &ReplayOptions,
    hot: Option<&FxHashSet<u64>>,
) -> Result<ReplayResult> {
    replay_source(src, params, opts, hot, None)
}

/// `replay`; with `prepared`, `src`'s accesses went through `Prepare` (whose page count that is).
fn replay_source(
    src: &mut dyn AccessSource,
    params: &Params,
    opts: &ReplayOptions,
    hot: Option<&FxHashSet<u64>>,
    prepared: Option<&AtomicUsize>,
) -> Result<ReplayResult> {
    if let Some(0) = opts.closed_loop {
        return Err(Error::arg("closed_loop", "needs at least 1 outstanding access"));
    }
    if let Some(h) = &opts.hot_hints {
        check_hot_hints(h)?;
    }
    let unit = src.header().time_unit;
    if unit == TimeUnit::Instructions && !(opts.ns_per_instruction > 0.0 && opts.ns_per_instruction.is_finite()) {
        return Err(Error::arg("ns_per_instruction", "must be a positive number for an instruction-count trace"));
    }
    if opts.hot_hints.is_some() && hot.is_none() {
        return Err(Error::arg("hints", "generated hints need the hot-line set of a first pass"));
    }
    let mut dev = CxlFlash::from_params(params)?;
    if opts.closed_loop.is_some() && dev.is_compat() {
        return Err(Error::arg("closed_loop", tiersim_devices::cxl_flash::COMPAT_OPEN_LOOP_ONLY));
    }
    let line_shift = dev.line_shift();
    let mut scatter = opts.scatter.filter(|_| prepared.is_none()).map(|seed| Scatter::new(dev.logical_bytes(), seed));
    let mut llc = if opts.llc_bytes > 0 { Some(Llc::new(opts.llc_bytes, opts.llc_ways)?) } else { None };
    let mut hints = match &opts.hint_file {
        Some(p) => Some(HintFile::open(p)?),
        None => None,
    };
    // Prepared accesses carry their issue times.
    let mut clock = Clock::new(if prepared.is_some() { TimeUnit::Ns } else { unit }, opts.ns_per_instruction);
    let mut rng = ChaCha8Rng::seed_from_u64(opts.hot_hints.map_or(0, |h| h.seed));
    let lead = opts.hot_hints.map_or(0, |h| h.lead);
    // Read-ahead window for generated hints: (access, issue time).
    let mut ahead: VecDeque<(Access, Ns)> = VecDeque::with_capacity(lead + 1);
    let mut outstanding: std::collections::BinaryHeap<std::cmp::Reverse<Ns>> = Default::default();
    let mut last_issue: Ns = 0;
    let mut device_requests = 0u64;
    let mut hints_sent = 0u64;
    let mut feed = Feed { batch: Vec::with_capacity(BATCH), pos: 0, eof: false, read: 0, limit: opts.limit };
    if is_plain_open_loop(opts) {
        // It reads the whole trace: the general loop below then finds the feed at its end.
        device_requests = replay_open(&mut dev, src, &mut feed, &mut scatter, &mut clock)?;
    }

    // Issue one device request at (at least) `t`; returns its issue time.
    let mut issue = |dev: &mut CxlFlash, t: Ns, addr: u64, size: u32, op: Op, cpu: u32| -> Ns {
        let now = match opts.closed_loop {
            None => t,
            Some(n) => {
                let free =
                    if outstanding.len() < n as usize { last_issue } else { outstanding.pop().map_or(0, |r| r.0) };
                free.max(last_issue)
            }
        };
        last_issue = last_issue.max(now);
        let done = dev.access(&DeviceRequest { now, addr, size, op, socket: 0, cpu, remote: false });
        if opts.closed_loop.is_some() {
            outstanding.push(std::cmp::Reverse(done));
        }
        device_requests += 1;
        now
    };

    loop {
        let (a, t) = match (opts.hot_hints, hot) {
            (Some(h), Some(set)) => {
                // Keep `lead` accesses read ahead (at least one).
                while ahead.len() <= lead {
                    let Some((a, t)) = feed.next(src, &mut scatter, &mut clock)? else { break };
                    if set.contains(&(a.addr >> line_shift)) && rng.gen::<f64>() < h.probability {
                        // Announced now, `lead` accesses before its use.
                        let at = ahead.front().map_or(t, |f| f.1);
                        dev.hint(at, a.addr, 1);
                        hints_sent += 1;
                    }
                    ahead.push_back((a, t));
                }
                let Some(next) = ahead.pop_front() else { break };
                next
            }
            _ => match feed.next(src, &mut scatter, &mut clock)? {
                Some(next) => next,
                None => break,
            },
        };
        if let Some(h) = hints.as_mut() {
            while let Some((ht, addr, bytes)) = h.next {
                if ht > t {
                    break;
                }
                dev.hint(ht, addr, bytes);
                hints_sent += 1;
                h.advance()?;
            }
        }
        let size = u32::from(a.size.max(1));
        match llc.as_mut() {
            None => {
                issue(&mut dev, t, a.addr, size, a.op, a.cpu);
            }
            Some(c) => {
                let first = a.addr / HOST_LINE;
                let last = a.addr.saturating_add(u64::from(size) - 1) / HOST_LINE;
                for l in first..=last {
                    let (hit, wb) = c.access(l, a.op.is_write());
                    if let Some(v) = wb {
                        issue(&mut dev, t, v * HOST_LINE, HOST_LINE as u32, Op::Write, a.cpu);
                    }
                    if !hit {
                        // A write miss reads the line for ownership; its data is written back later.
                        issue(&mut dev, t, l * HOST_LINE, HOST_LINE as u32, Op::Read, a.cpu);
                    }
                }
            }
        }
    }
    let trace_accesses = feed.read;
    dev.finish();
    let mut summary = dev.summary();
    let span = dev.span_ns();
    summary["replay"] = json!({
        "mode": match opts.closed_loop { None => "open".to_owned(), Some(n) => format!("closed({n})") },
        "trace_accesses": trace_accesses,
        "device_requests": device_requests,
        "llc": llc.as_ref().map(|c| json!({"bytes": opts.llc_bytes, "ways": c.ways, "hits": c.hits, "misses": c.misses, "writebacks": c.writebacks})),
        "hints_sent": hints_sent,
        "scattered_pages": match prepared {
            Some(pages) => opts.scatter.map(|_| pages.load(Ordering::Acquire)),
            None => scatter.as_ref().map(|s| s.map.len()),
        },
        "simulated_ns": span,
        "requests_per_simulated_s": if span == 0 { 0.0 } else { device_requests as f64 / (span as f64 / 1e9) },
    });
    let bins = dev.latency().bins();
    Ok(ReplayResult { summary, bins })
}

/// Where the accesses come from.
pub enum Input<'a> {
    /// A trace file: native (recognised by its magic) or the named text format.
    File { path: &'a Path, format: Option<tiersim_trace::convert::Format> },
    /// A generator run in memory.
    Generator { name: &'a str, params: Option<&'a toml::Table>, seed: u64 },
}

impl Input<'_> {
    fn open(&self) -> Result<Box<dyn AccessSource>> {
        match self {
            Input::File { path, format } => {
                // Decoded (zstd frames, byte planes, or text) on a thread of its own, as the
                // engine's traces are: the replay's core only simulates.
                let reader =
                    tiersim_trace::convert::open(path, *format, &tiersim_trace::convert::TextOptions::default())?;
                Ok(Box::new(ReadAhead::new(reader)?))
            }
            Input::Generator { name, params, seed } => {
                let g = tiersim_trace::open_generator(name, *params, *seed)?;
                Ok(Box::new(tiersim_trace::GeneratorSource::new(g)))
            }
        }
    }

    /// `open` for the fast path, with each access `Prepare`d on the decoding thread, and the
    /// count of pages scattered; None for a generator (it runs on the replay's own thread).
    fn open_prepared(&self, params: &Params, opts: &ReplayOptions) -> Result<Option<(ReadAhead, Arc<AtomicUsize>)>> {
        let Input::File { path, format } = self else { return Ok(None) };
        let reader = tiersim_trace::convert::open(path, *format, &tiersim_trace::convert::TextOptions::default())?;
        let scatter = match opts.scatter {
            Some(seed) => Some(Scatter::new(cxl_flash::logical_bytes(params)?, seed)),
            None => None,
        };
        let pages = Arc::new(AtomicUsize::new(0));
        let clock = Clock::new(reader.header().time_unit, opts.ns_per_instruction);
        let mut prepare = Prepare { clock, scatter, limit: opts.limit, seen: 0, pages: pages.clone() };
        Ok(Some((ReadAhead::with_stage(reader, move |batch| prepare.apply(batch))?, pages)))
    }
}

/// The device parameters of a replay: a cxl_flash preset's (or the defaults), then `overrides`.
pub fn resolve_params(preset: Option<&str>, overrides: Option<&toml::Table>) -> Result<Params> {
    let mut table = toml::Table::new();
    if let Some(name) = preset {
        let p = presets::get(name)?;
        if p.device != cxl_flash::INFO.name {
            return Err(Error::arg("preset", format!("{name} is a {} preset, not a cxl_flash one", p.device)));
        }
        table.extend(p.params);
    }
    if let Some(o) = overrides {
        table.extend(o.clone());
    }
    Params::resolve(cxl_flash::SPECS, Some(&table))
}

/// Replay `input` (opened twice when hints are generated from it) against a device with `params`.
pub fn replay_input(input: &Input<'_>, params: &Params, opts: &ReplayOptions) -> Result<ReplayResult> {
    replay_input_observed(input, params, opts, None)
}

/// `replay_input`, reporting the replay pass's progress (accesses read, header total) to
/// `progress`; an error from it stops the replay.
pub fn replay_input_observed(
    input: &Input<'_>,
    params: &Params,
    opts: &ReplayOptions,
    progress: Option<&mut ProgressFn<'_>>,
) -> Result<ReplayResult> {
    let hot = match opts.hot_hints {
        Some(h) => {
            check_hot_hints(&h)?;
            let shift = params.bytes("cache_line").trailing_zeros();
            let mut src = input.open()?;
            let counts = match opts.scatter {
                None => line_counts(src.as_mut(), shift, opts.limit)?,
                Some(seed) => {
                    let mut sc = Scatter::new(cxl_flash::logical_bytes(params)?, seed);
                    let mut mapped = ScatteredSource { inner: src.as_mut(), scatter: &mut sc };
                    line_counts(&mut mapped, shift, opts.limit)?
                }
            };
            Some(hot_set(&counts, h.top))
        }
        None => None,
    };
    if is_plain_open_loop(opts) {
        if let Some((mut src, pages)) = input.open_prepared(params, opts)? {
            return with_progress(&mut src, progress, |src| replay_source(src, params, opts, None, Some(&pages)));
        }
    }
    with_progress(input.open()?.as_mut(), progress, |src| replay(src, params, opts, hot.as_ref()))
}

/// A source whose addresses go through a `Scatter` (the first pass of generated hints).
struct ScatteredSource<'a> {
    inner: &'a mut dyn AccessSource,
    scatter: &'a mut Scatter,
}

impl AccessSource for ScatteredSource<'_> {
    fn header(&self) -> &tiersim_trace::TraceHeader {
        self.inner.header()
    }

    fn read_batch(&mut self, out: &mut Vec<Access>, max: usize) -> Result<usize> {
        let start = out.len();
        let n = self.inner.read_batch(out, max)?;
        for a in &mut out[start..] {
            a.addr = self.scatter.addr(a.addr);
        }
        Ok(n)
    }
}
