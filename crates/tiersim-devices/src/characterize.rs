//! `tiersim characterize`: Intel Memory Latency Checker-style tests run against a device model
//! (or an interleave set of N of them) instead of hardware: idle latency by pattern, bandwidth vs
//! threads and vs access size, loaded latency vs injected bandwidth, scaling over interleaved
//! devices, and for pmem the effective write ratio vs access size and working set (the XPBuffer
//! probe of seed 000). Closed-loop "threads" issue each access as a stream of 64 B line requests
//! with a bounded number of lines in flight, as a core does, so that effects of where the lines
//! land (the 4 KiB-interleave dip of seed 000) emerge from the device models; block devices get
//! whole accesses. Every run is deterministic (seeded ChaCha addresses).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::json;
use tiersim_core::{Error, Ns, Op, Params, Result};

use crate::{presets, DeviceEntry, DeviceRequest, InterleaveSet};

/// Every test, in the order they run.
pub const TESTS: &[&str] = &[
    "idle_latency",
    "bandwidth_threads",
    "bandwidth_size",
    "ewr_size",
    "ewr_threads",
    "ewr_working_set",
    "loaded_latency",
    "scaling",
    "remote_latency",
    "remote_bandwidth",
    "bwlat",
];

/// Tests that run only when named: `bwlat` sweeps several read ratios to saturation and costs
/// more than all the others together.
pub const ON_REQUEST: &[&str] = &["bwlat"];

/// Read percentages of the `bwlat` test unless the caller names others.
pub const BWLAT_RATIOS: &[u32] = &[0, 25, 50, 75, 100];

/// Tests that apply to pmem only: the EWR (only pmem counts media writes) and the remote-socket
/// tests (only pmem models remote penalties; for other devices the platform adds a fixed hop).
pub const PMEM_ONLY: &[&str] = &["ewr_size", "ewr_threads", "ewr_working_set", "remote_latency", "remote_bandwidth"];

/// Cache lines one core keeps in flight (line fill buffers: 10-12 on Intel server cores).
const LINES_IN_FLIGHT: u64 = 10;
const CACHE_LINE: u64 = 64;
/// Each thread works in its own region of this size.
const REGION: u64 = 1 << 30;
/// Pause between dependent accesses of the idle-latency test, so queued media work drains.
const IDLE_GAP: Ns = 2_000;
const SEED: u64 = 0x0005_eed0;

/// One column of a result table.
#[derive(Debug, Clone, PartialEq)]
pub enum Column {
    Num(Vec<f64>),
    Str(Vec<String>),
}

/// A result table: named columns of equal length.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    pub name: String,
    pub title: String,
    pub columns: Vec<(String, Column)>,
}

impl Table {
    fn new(name: &str, title: impl Into<String>) -> Self {
        Table { name: name.to_owned(), title: title.into(), columns: Vec::new() }
    }

    fn num(mut self, name: &str, v: Vec<f64>) -> Self {
        self.columns.push((name.to_owned(), Column::Num(v)));
        self
    }

    fn str(mut self, name: &str, v: Vec<String>) -> Self {
        self.columns.push((name.to_owned(), Column::Str(v)));
        self
    }

    /// A numeric column by name.
    pub fn col(&self, name: &str) -> Option<&[f64]> {
        self.columns.iter().find(|(n, _)| n == name).and_then(|(_, c)| match c {
            Column::Num(v) => Some(v.as_slice()),
            Column::Str(_) => None,
        })
    }

    pub fn strs(&self, name: &str) -> Option<&[String]> {
        self.columns.iter().find(|(n, _)| n == name).and_then(|(_, c)| match c {
            Column::Str(v) => Some(v.as_slice()),
            Column::Num(_) => None,
        })
    }

    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "name": self.name,
            "title": self.title,
            "columns": self.columns.iter().map(|(n, c)| match c {
                Column::Num(v) => json!({"name": n, "values": v}),
                Column::Str(v) => json!({"name": n, "values": v}),
            }).collect::<Vec<_>>(),
        })
    }
}

/// What to characterize: a device kind with its parameter table, as `count` devices
/// interleaved at `granule` bytes.
pub struct Target {
    pub name: String,
    pub entry: &'static DeviceEntry,
    pub table: toml::Table,
    pub count: u32,
    pub granule: u64,
}

/// Keys of the `params` table that configure the set rather than the device.
const SET_KEYS: &[&str] = &["count", "granule"];
const MAX_COUNT: i64 = 64;

impl Target {
    /// `name` is a preset (its parameters, then `overrides`) or a device kind (defaults, then
    /// `overrides`). `count` (devices, default 1) and `granule` (interleave bytes, default 4 KiB)
    /// configure the interleave set.
    pub fn resolve(name: &str, overrides: Option<&toml::Table>) -> Result<Target> {
        let (entry, mut table) = match presets::exists(name).then_some(()) {
            Some(()) => {
                let p = presets::get(name)?;
                (crate::find(&p.device)?, p.params)
            }
            None => match crate::find(name) {
                Ok(e) => (e, toml::Table::new()),
                Err(_) => {
                    let presets: Vec<_> = presets::PRESETS.iter().map(|(n, _)| *n).collect();
                    let kinds: Vec<_> = crate::REGISTRY.iter().map(|e| e.info.name).collect();
                    return Err(Error::arg(
                        "device",
                        format!(
                            "`{name}` is neither a preset ({}), a preset file, nor a device kind ({})",
                            presets.join(", "),
                            kinds.join(", ")
                        ),
                    ));
                }
            },
        };
        let mut count = 1;
        let mut granule = 4096;
        if let Some(o) = overrides {
            for (k, v) in o {
                match k.as_str() {
                    "count" => match v.as_integer() {
                        Some(c) if (1..=MAX_COUNT).contains(&c) => count = c as u32,
                        _ => {
                            return Err(Error::config(
                                "count",
                                format!("expected devices in the set, 1..={MAX_COUNT}, got {v}"),
                            ))
                        }
                    },
                    "granule" => {
                        let g = match v {
                            toml::Value::Integer(i) if *i > 0 => *i as u64,
                            toml::Value::String(s) => {
                                tiersim_core::units::parse_bytes(s).map_err(|e| Error::config("granule", e))?
                            }
                            _ => return Err(Error::config("granule", format!("expected a size, got {v}"))),
                        };
                        if !g.is_power_of_two() || g < CACHE_LINE {
                            return Err(Error::config(
                                "granule",
                                format!("{g}B is not a power of two of at least 64B"),
                            ));
                        }
                        granule = g;
                    }
                    _ => {
                        table.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        let t = Target { name: name.to_owned(), entry, table, count, granule };
        // Building once reports what only the device checks (powers of two, ratios).
        (t.entry.build)(&t.params(&[])?)?;
        Ok(t)
    }

    /// The device parameters, defaults filled in.
    pub fn resolved(&self) -> Result<Params> {
        self.params(&[])
    }

    /// The device parameters with `extra` keys set; unknown keys name the valid ones.
    pub fn params(&self, extra: &[(&str, &str)]) -> Result<Params> {
        let mut table = self.table.clone();
        for (k, v) in extra {
            table.insert((*k).to_owned(), toml::Value::String((*v).to_owned()));
        }
        Params::resolve(self.entry.info.params, Some(&table)).map_err(|e| {
            let valid = [self.entry.info.params.iter().map(|p| p.name).collect::<Vec<_>>(), SET_KEYS.to_vec()].concat();
            match e {
                Error::Config { key, msg } if msg.starts_with("unknown parameter") => {
                    Error::config(key, format!("unknown parameter; valid parameters: {}", valid.join(", ")))
                }
                e => e,
            }
        })
    }

    fn is_pmem(&self) -> bool {
        self.entry.info.name == "pmem"
    }

    fn bench(&self, count: u32, extra: &[(&str, &str)]) -> Result<Bench> {
        let set = InterleaveSet::build(self.entry.build, &self.params(extra)?, count, self.granule)?;
        // A block device is handed whole accesses (DMA), memory devices cache lines.
        let unit = if self.entry.info.name == "ssd" { u64::MAX } else { CACHE_LINE };
        Ok(Bench { set, granule: self.granule, count, unit })
    }
}

/// The device set under test, split at interleave boundaries like the memory controller.
struct Bench {
    set: InterleaveSet,
    granule: u64,
    count: u32,
    /// Bytes per request: a cache line for memory (the core fetches and writes back lines, so a
    /// large access reaches the devices as a stream of 64 B requests), the whole access for a
    /// block device.
    unit: u64,
}

impl Bench {
    fn access(&mut self, now: Ns, addr: u64, size: u64, op: Op, cpu: u32, remote: bool) -> Ns {
        let end = addr + size;
        let mut a = addr;
        let mut done = now;
        while a < end {
            let part = ((a | (self.granule - 1)) + 1).min(end) - a;
            let req = DeviceRequest { now, addr: a, size: part as u32, op, socket: 0, cpu, remote };
            done = done.max(self.set.access(&req));
            a += part;
        }
        done
    }

    /// Effective write ratio over the set: host bytes written / media bytes written (NaN before
    /// any media write).
    fn ewr(&self) -> f64 {
        let (host, media) = self.write_bytes();
        if media == 0 {
            f64::NAN
        } else {
            host as f64 / media as f64
        }
    }

    /// (bytes the host wrote, bytes written to media) summed over pmem devices.
    fn write_bytes(&self) -> (u64, u64) {
        let s = self.set.stats();
        let list = match s {
            serde_json::Value::Array(v) => v,
            one => vec![one],
        };
        list.iter().fold((0, 0), |(h, m), d| {
            (h + d["bytes_written"].as_u64().unwrap_or(0), m + d["media_bytes_written"].as_u64().unwrap_or(0))
        })
    }
}

/// One closed-loop thread.
#[derive(Debug, Clone, Copy)]
struct Thread {
    size: u64,
    random: bool,
    /// Out of every `reads + writes` accesses, `reads` read; writes are spread evenly.
    reads: u32,
    writes: u32,
    /// Requests in flight; 0 = the default of the device kind (see `slots`).
    outstanding: u32,
    /// Pause after each completion before the slot issues again.
    think: Ns,
    /// The thread runs on another socket than the devices.
    remote: bool,
    /// Slots start spread over this time instead of all at once, so injectors facing a constant
    /// latency do not stay in lockstep and hit the device in bursts.
    stagger: Ns,
    /// Where a sequential thread starts in its region (bytes), so that streams sit on different
    /// channels rather than all marching over the same one.
    start: u64,
}

impl Thread {
    fn new(size: u64, random: bool, op: &str) -> Self {
        let (reads, writes) = match op {
            "read" => (1, 0),
            "write" => (0, 1),
            _ => (2, 1),
        };
        Thread { size, random, reads, writes, outstanding: 0, think: 0, remote: false, stagger: 0, start: 0 }
    }

    /// Requests in flight: a memory thread keeps its line fill buffers busy whatever the access
    /// size; a block-device thread keeps as many accesses in flight as the same bytes, at least one.
    fn slots(&self, unit: u64) -> u32 {
        if self.outstanding > 0 {
            return self.outstanding;
        }
        if unit == CACHE_LINE {
            return LINES_IN_FLIGHT as u32;
        }
        (LINES_IN_FLIGHT * CACHE_LINE / self.size).max(1) as u32
    }
}

struct RunOut {
    /// Bytes per second over the measured window.
    bandwidth: f64,
    /// Mean latency (ns) of each thread's measured accesses, from the issue of the first request
    /// to the completion of the last.
    latency: Vec<f64>,
}

/// The access a thread is issuing, request by request.
#[derive(Debug, Clone, Copy, Default)]
struct Current {
    addr: u64,
    end: u64,
    write: bool,
    start: Ns,
    done: Ns,
    measured: bool,
}

/// Run `threads` until `total` requests have issued; the first fifth warm up. A thread issues
/// its access in `unit` requests in order, each as soon as one of its slots is free, and starts
/// the next access once the last request of the current one has issued (a core does not wait
/// for a stream of independent lines). Bandwidth is the bytes issued in the measured window over
/// its length (issue rate = completion rate in steady state, and no drain tail).
fn run(bench: &mut Bench, threads: &[Thread], total: u64) -> RunOut {
    let mut rng = ChaCha8Rng::seed_from_u64(SEED);
    let mut heap = BinaryHeap::new();
    let mut cursor = vec![0u64; threads.len()];
    let mut count = vec![0u64; threads.len()];
    let mut cur = vec![Current::default(); threads.len()];
    for (t, th) in threads.iter().enumerate() {
        // Thread t's stream starts on device t mod count, so sequential threads spread over
        // the set instead of marching over one device in lockstep.
        let n = u64::from(bench.count);
        let base_chunk = t as u64 * REGION / bench.granule;
        cursor[t] = ((t as u64 % n + n - base_chunk % n) % n) * bench.granule + th.start;
        let slots = th.slots(bench.unit);
        for s in 0..slots {
            heap.push(Reverse((
                th.stagger * u64::from(s) / u64::from(slots)
                    + th.stagger * t as u64 / threads.len() as u64 / u64::from(slots),
                t,
            )));
        }
    }
    let warmup = total / 5;
    let (mut issued, mut bytes, mut t0, mut t1) = (0u64, 0u64, 0, 0);
    let mut lat = vec![(0.0f64, 0u64); threads.len()];
    while let Some(Reverse((now, t))) = heap.pop() {
        if issued == total {
            break;
        }
        let th = &threads[t];
        let c = &mut cur[t];
        if c.addr == c.end {
            let offset = if th.random {
                rng.gen_range(0..REGION / th.size) * th.size
            } else {
                let o = cursor[t];
                cursor[t] = (o + th.size) % REGION;
                o
            };
            let addr = t as u64 * REGION + offset;
            // Writes spread evenly over each cycle of `reads + writes` accesses.
            let n = u64::from(th.reads + th.writes);
            let k = count[t] % n;
            count[t] += 1;
            let w = u64::from(th.writes);
            let write = (k + 1) * w / n > k * w / n;
            *c = Current { addr, end: addr + th.size, write, start: now, done: now, measured: issued >= warmup };
        }
        let part = bench.unit.min(c.end - c.addr);
        let op = if c.write { Op::Write } else { Op::Read };
        let done = bench.access(now, c.addr, part, op, t as u32, th.remote);
        c.addr += part;
        c.done = c.done.max(done);
        if c.addr == c.end && c.measured {
            lat[t].0 += (c.done - c.start) as f64;
            lat[t].1 += 1;
        }
        issued += 1;
        if issued == warmup + 1 {
            t0 = now;
        }
        if issued > warmup {
            bytes += part;
            t1 = now;
        }
        heap.push(Reverse((done + th.think, t)));
    }
    let span = t1.saturating_sub(t0).max(1) as f64;
    RunOut {
        bandwidth: bytes as f64 / span * 1e9,
        latency: lat.iter().map(|&(s, n)| if n == 0 { 0.0 } else { s / n as f64 }).collect(),
    }
}

/// How much work each test does.
#[derive(Debug, Clone, Copy)]
struct Effort {
    /// Requests per run (lines for memory devices).
    requests: u64,
    threads: &'static [u32],
    sizes: &'static [u64],
    lines: &'static [u64],
    rounds: u64,
    thinks: &'static [Ns],
    /// Offered load of the `bwlat` test as fractions of the set's read peak (closed loop, so
    /// the achieved load is lower near and past saturation); infinity = no pause.
    loads: &'static [f64],
}

const FULL: Effort = Effort {
    requests: 200_000,
    threads: &[1, 2, 3, 4, 6, 8, 12, 16, 24],
    sizes: &[64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 24576, 32768, 49152, 65536],
    lines: &[8, 16, 32, 48, 56, 60, 64, 68, 72, 80, 96, 128, 256, 512, 1024],
    rounds: 16,
    thinks: &[51_200, 25_600, 12_800, 6_400, 3_200, 1_600, 800, 400, 200, 100, 0],
    loads: &[
        0.01,
        0.05,
        0.1,
        0.2,
        0.3,
        0.4,
        0.5,
        0.6,
        0.7,
        0.75,
        0.8,
        0.85,
        0.9,
        0.95,
        1.0,
        1.1,
        1.3,
        1.6,
        2.0,
        f64::INFINITY,
    ],
};

const QUICK: Effort = Effort {
    requests: 20_000,
    threads: &[1, 2, 4, 8, 16],
    sizes: &[64, 256, 1024, 4096, 24576, 65536],
    lines: &[32, 64, 72, 128, 512],
    rounds: 4,
    thinks: &[6_400, 800, 0],
    loads: &[0.01, 0.2, 0.5, 0.8, 1.0, f64::INFINITY],
};

fn gbs(b: f64) -> f64 {
    b / 1e9
}

/// Idle latencies of dependent 64 B accesses, local or from another socket: (pattern, store
/// kind, latency) rows, pmem with both store kinds.
fn idle_rows(t: &Target, e: &Effort, remote: bool) -> Result<(Vec<String>, Vec<String>, Vec<f64>)> {
    let kinds: &[&str] = if t.is_pmem() { &["ntstore", "clwb"] } else { &["-"] };
    let (mut pattern, mut kind, mut latency) = (Vec::new(), Vec::new(), Vec::new());
    for (name, random, op) in [
        ("sequential", false, "read"),
        ("random", true, "read"),
        ("sequential", false, "write"),
        ("random", true, "write"),
    ] {
        for k in if op == "read" { &kinds[..1] } else { kinds } {
            let extra: Vec<(&str, &str)> = if t.is_pmem() { vec![("store_kind", *k)] } else { vec![] };
            let mut b = t.bench(t.count, &extra)?;
            let th = Thread { outstanding: 1, think: IDLE_GAP, remote, ..Thread::new(CACHE_LINE, random, op) };
            let out = run(&mut b, &[th], (e.requests / 10).max(200));
            pattern.push(format!("{name} {op}"));
            kind.push(if op == "read" { "-".to_owned() } else { (*k).to_owned() });
            latency.push(out.latency[0]);
        }
    }
    Ok((pattern, kind, latency))
}

fn idle_latency(t: &Target, e: &Effort) -> Result<Table> {
    let (pattern, kind, latency) = idle_rows(t, e, false)?;
    Ok(Table::new("idle_latency", "Idle latency of dependent 64 B accesses (ns)")
        .str("pattern", pattern)
        .str("store", kind)
        .num("latency_ns", latency))
}

/// `table` with local and remote columns of `unit` and their ratio.
fn local_remote(table: Table, unit: &str, local: Vec<f64>, remote: Vec<f64>) -> Table {
    let ratio = local.iter().zip(&remote).map(|(l, r)| r / l).collect();
    table.num(&format!("local_{unit}"), local).num(&format!("remote_{unit}"), remote).num("ratio", ratio)
}

/// Seed 000's NUMA comparison: the idle latencies again from a thread on the other socket.
fn remote_latency(t: &Target, e: &Effort) -> Result<Table> {
    let (pattern, kind, local) = idle_rows(t, e, false)?;
    let remote = idle_rows(t, e, true)?.2;
    let table = Table::new("remote_latency", "Idle latency of dependent 64 B accesses, local vs remote socket (ns)")
        .str("pattern", pattern)
        .str("store", kind);
    Ok(local_remote(table, "ns", local, remote))
}

/// Bandwidth of sequential 256 B accesses from 1..n threads, read / write / 2:1 mixed, local or
/// from the other socket: (op, threads, GB/s) rows.
fn thread_rows(t: &Target, e: &Effort, remote: bool) -> Result<(Vec<String>, Vec<f64>, Vec<f64>)> {
    let (mut op_col, mut th_col, mut bw) = (Vec::new(), Vec::new(), Vec::new());
    for op in ["read", "write", "mixed"] {
        for &n in e.threads {
            let mut b = t.bench(t.count, &[])?;
            let threads = vec![Thread { remote, ..Thread::new(256, false, op) }; n as usize];
            op_col.push(op.to_owned());
            th_col.push(f64::from(n));
            bw.push(gbs(run(&mut b, &threads, e.requests).bandwidth));
        }
    }
    Ok((op_col, th_col, bw))
}

fn bandwidth_threads(t: &Target, e: &Effort) -> Result<Table> {
    let (op_col, th_col, bw) = thread_rows(t, e, false)?;
    Ok(Table::new("bandwidth_threads", "Bandwidth vs threads, sequential 256 B accesses (mixed = 2 reads : 1 write)")
        .str("op", op_col)
        .num("threads", th_col)
        .num("bandwidth_gbs", bw))
}

/// Seed 000's NUMA bandwidth comparison: the thread sweep from the other socket beside the local one.
fn remote_bandwidth(t: &Target, e: &Effort) -> Result<Table> {
    let (op_col, th_col, local) = thread_rows(t, e, false)?;
    let remote = thread_rows(t, e, true)?.2;
    let table = Table::new(
        "remote_bandwidth",
        "Local vs remote-socket bandwidth vs threads, sequential 256 B accesses (GB/s; ratio = remote / local)",
    )
    .str("op", op_col)
    .num("threads", th_col);
    Ok(local_remote(table, "gbs", local, remote))
}

/// Threads per device that reach the best bandwidth in seed 000's size sweep: many readers,
/// few writers.
const SIZE_READERS_PER_DEVICE: u32 = 4;
const SIZE_WRITERS_PER_DEVICE: u32 = 1;

fn bandwidth_size(t: &Target, e: &Effort) -> Result<Table> {
    let (mut pat, mut op_col, mut size_col, mut bw) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (pname, random) in [("random", true), ("sequential", false)] {
        for op in ["read", "write"] {
            let per = if op == "read" { SIZE_READERS_PER_DEVICE } else { SIZE_WRITERS_PER_DEVICE };
            for &size in e.sizes {
                let mut b = t.bench(t.count, &[])?;
                let threads = vec![Thread::new(size, random, op); (per * t.count) as usize];
                pat.push(pname.to_owned());
                op_col.push(op.to_owned());
                size_col.push(size as f64);
                bw.push(gbs(run(&mut b, &threads, e.requests).bandwidth));
            }
        }
    }
    Ok(Table::new(
        "bandwidth_size",
        format!(
            "Bandwidth vs access size ({SIZE_READERS_PER_DEVICE} readers or {SIZE_WRITERS_PER_DEVICE} writer per device)"
        ),
    )
    .str("pattern", pat)
    .str("op", op_col)
    .num("size", size_col)
    .num("bandwidth_gbs", bw))
}

fn ewr_size(t: &Target, e: &Effort) -> Result<Table> {
    let (mut size_col, mut ewr) = (Vec::new(), Vec::new());
    for &size in e.sizes {
        let mut b = t.bench(t.count, &[])?;
        let th = Thread { outstanding: 1, ..Thread::new(size, true, "write") };
        run(&mut b, &[th], e.requests);
        size_col.push(size as f64);
        ewr.push(b.ewr());
    }
    Ok(Table::new("ewr_size", "Effective write ratio (host bytes / media bytes) vs random write size, one thread")
        .num("size", size_col)
        .num("ewr", ewr))
}

/// EWR of sequential 256 B writes vs writer threads (seed 000: 0.98 with one thread, 0.62 with
/// eight on one DIMM, from XPBuffer contention).
fn ewr_threads(t: &Target, e: &Effort) -> Result<Table> {
    let (mut th_col, mut ewr) = (Vec::new(), Vec::new());
    for &n in e.threads {
        let mut b = t.bench(t.count, &[])?;
        run(&mut b, &vec![Thread::new(256, false, "write"); n as usize], e.requests);
        th_col.push(f64::from(n));
        ewr.push(b.ewr());
    }
    Ok(Table::new("ewr_threads", "EWR vs writer threads, sequential 256 B writes")
        .num("threads", th_col)
        .num("ewr", ewr))
}

/// Seed 000's XPBuffer probe on one device: N consecutive XPLines, write the first half of
/// each, then the second half, for several rounds.
fn ewr_working_set(t: &Target, e: &Effort) -> Result<Table> {
    let line = t.params(&[])?.bytes("xpline");
    let (mut ws, mut ewr) = (Vec::new(), Vec::new());
    for &n in e.lines {
        let mut b = t.bench(1, &[])?;
        let mut now = 0;
        for _ in 0..e.rounds {
            for half in [0, line / 2] {
                for i in 0..n {
                    now = b.access(now, i * line + half, line / 2, Op::Write, 0, false);
                }
            }
        }
        ws.push((n * line) as f64);
        ewr.push(b.ewr());
    }
    Ok(Table::new(
        "ewr_working_set",
        "EWR vs working set on one device (half-XPLine writes, seed 000's XPBuffer probe)",
    )
    .num("working_set", ws)
    .num("ewr", ewr))
}

/// Load threads per device of the loaded-latency test.
const LOAD_THREADS_PER_DEVICE: u32 = 4;

fn loaded_latency(t: &Target, e: &Effort) -> Result<Table> {
    let (mut think, mut bw, mut lat) = (Vec::new(), Vec::new(), Vec::new());
    for &d in e.thinks {
        let mut b = t.bench(t.count, &[])?;
        let probe = Thread { outstanding: 1, ..Thread::new(CACHE_LINE, true, "read") };
        let load = Thread { think: d, ..Thread::new(256, false, "read") };
        let mut threads = vec![probe];
        threads.extend(std::iter::repeat_n(load, (LOAD_THREADS_PER_DEVICE * t.count) as usize));
        let out = run(&mut b, &threads, e.requests);
        think.push(d as f64);
        bw.push(gbs(out.bandwidth));
        lat.push(out.latency[0]);
    }
    Ok(Table::new("loaded_latency", "Loaded latency: random 64 B read latency vs injected sequential read bandwidth")
        .num("delay_ns", think)
        .num("bandwidth_gbs", bw)
        .num("latency_ns", lat))
}

/// Lines in flight across the injectors, in units of the set's idle latency at its read peak:
/// enough to hold it past saturation even when the loaded latency is several times idle.
const BWLAT_DEPTH: f64 = 6.0;
/// Distance in lines between the starts of neighbouring injector streams.
const BWLAT_SPREAD_LINES: u64 = 37;

/// The Mess benchmark's sweep: for each read ratio, sequential 64 B load traffic from enough
/// threads to pass saturation, paced by a pause per request, with a pointer-chase probe (one
/// random dependent read at a time) measuring latency beside it. Bandwidth counts reads and
/// writes, as Mess's uncore counters do.
fn bwlat(t: &Target, e: &Effort, ratios: &[u32]) -> Result<Table> {
    let probe_bench = t.bench(t.count, &[])?;
    let peak = probe_bench.set.peak_bandwidth();
    let idle = probe_bench.set.idle_latency(Op::Read, CACHE_LINE as u32) as f64;
    let per_thread = (LINES_IN_FLIGHT * CACHE_LINE) as f64;
    let n = ((peak * BWLAT_DEPTH * idle * 1e-9) / per_thread).ceil().max(2.0) as usize;
    let (mut ratio_col, mut think_col, mut bw, mut lat) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for &r in ratios {
        if r > 100 {
            return Err(Error::arg("read_ratios", format!("{r} is not a percentage 0..100")));
        }
        for &q in e.loads {
            // Closed loop: a thread with LINES_IN_FLIGHT lines moves per_thread bytes per
            // (latency + pause), so this pause offers q x peak at idle latency.
            let think =
                if q.is_finite() { (n as f64 * per_thread / (q * peak) * 1e9 - idle).max(0.0) as Ns } else { 0 };
            let mut b = t.bench(t.count, &[])?;
            let probe = Thread { outstanding: 1, ..Thread::new(CACHE_LINE, true, "read") };
            let load = Thread {
                think,
                reads: r,
                writes: 100 - r,
                stagger: think + idle as Ns,
                ..Thread::new(CACHE_LINE, false, "read")
            };
            let mut threads = vec![probe];
            // Streams an odd number of lines apart land on every channel phase.
            threads.extend((0..n as u64).map(|i| Thread { start: i * BWLAT_SPREAD_LINES * CACHE_LINE, ..load }));
            let out = run(&mut b, &threads, e.requests);
            ratio_col.push(f64::from(r));
            think_col.push(think as f64);
            bw.push(out.bandwidth / 1e6);
            lat.push(out.latency[0]);
        }
    }
    Ok(Table::new(
        "bwlat",
        format!("Bandwidth-latency curves (Mess-style): pointer-chase latency vs load bandwidth per read ratio, {n} injector threads"),
    )
    .num("read_ratio", ratio_col)
    .num("delay_ns", think_col)
    .num("bandwidth_mbs", bw)
    .num("latency_ns", lat))
}

/// Devices the scaling test goes up to (a socket's 6 Optane DIMMs or DDR channels).
const SCALING_MAX: u32 = 6;

fn scaling(t: &Target, e: &Effort) -> Result<Table> {
    let (mut n_col, mut rd, mut wr) = (Vec::new(), Vec::new(), Vec::new());
    for n in 1..=SCALING_MAX {
        let mut row = Vec::new();
        for (op, per) in [("read", SIZE_READERS_PER_DEVICE), ("write", SIZE_WRITERS_PER_DEVICE)] {
            let mut b = t.bench(n, &[])?;
            let threads = vec![Thread::new(256, false, op); (per * n) as usize];
            row.push(gbs(run(&mut b, &threads, e.requests).bandwidth));
        }
        n_col.push(f64::from(n));
        rd.push(row[0]);
        wr.push(row[1]);
    }
    Ok(Table::new(
        "scaling",
        format!(
            "Sequential 256 B bandwidth vs interleaved devices ({SIZE_READERS_PER_DEVICE} readers or {SIZE_WRITERS_PER_DEVICE} writer per device)"
        ),
    )
    .num("devices", n_col)
    .num("read_gbs", rd)
    .num("write_gbs", wr))
}

/// Run `tests` (all when empty) against `target`; `quick` uses fewer points and accesses;
/// `ratios` are the read percentages of `bwlat` (empty: `BWLAT_RATIOS`).
/// Tests in `PMEM_ONLY` are skipped for other devices.
pub fn characterize(target: &Target, tests: &[String], quick: bool, ratios: &[u32]) -> Result<Vec<Table>> {
    for name in tests {
        if !TESTS.contains(&name.as_str()) {
            return Err(Error::arg("tests", format!("unknown test `{name}`; valid tests: {}", TESTS.join(", "))));
        }
    }
    let e = if quick { &QUICK } else { &FULL };
    let mut out = Vec::new();
    for &name in TESTS {
        let named = tests.iter().any(|t| t == name);
        if (!tests.is_empty() && !named) || (tests.is_empty() && ON_REQUEST.contains(&name)) {
            continue;
        }
        let table = match name {
            "idle_latency" => idle_latency(target, e)?,
            "bandwidth_threads" => bandwidth_threads(target, e)?,
            "bandwidth_size" => bandwidth_size(target, e)?,
            _ if PMEM_ONLY.contains(&name) && !target.is_pmem() => continue,
            "ewr_size" => ewr_size(target, e)?,
            "ewr_threads" => ewr_threads(target, e)?,
            "ewr_working_set" => ewr_working_set(target, e)?,
            "loaded_latency" => loaded_latency(target, e)?,
            "scaling" => scaling(target, e)?,
            "remote_latency" => remote_latency(target, e)?,
            "remote_bandwidth" => remote_bandwidth(target, e)?,
            "bwlat" => bwlat(target, e, if ratios.is_empty() { BWLAT_RATIOS } else { ratios })?,
            _ => continue,
        };
        out.push(table);
    }
    Ok(out)
}

/// The whole answer as JSON: target description and tables.
pub fn to_json(target: &Target, tables: &[Table]) -> serde_json::Value {
    json!({
        "target": target.name,
        "device": target.entry.info.name,
        "count": target.count,
        "granule": target.granule,
        "params": target.params(&[]).map(|p| p.to_toml()).unwrap_or_default(),
        "tables": tables.iter().map(Table::to_json).collect::<Vec<_>>(),
    })
}
