//! `tiersim filebench`: closed-loop threads doing file I/O through the kernel path of
//! `iopath.rs` and the page cache of `pagecache.rs` onto a storage device (an SSD, or PMEM as a
//! block device or through DAX), with the DRAM holding the page cache and user buffers modelled
//! line by line. Workloads: the block micro-benchmark of seed 001 (8 KiB reads or writes of a
//! file, sequential or random, read/write calls or mmap), and the storage engine of `kvstore.rs`.
//! Each thread runs its operation as steps executed in global time order, so threads contend on
//! the devices, on blk-mq tags, on pages being read, on the dirty limits and on the log.
//! This file holds the configuration, the threads and the event loop; `io.rs` turns an operation
//! into steps and submits block requests, `step.rs` runs one step.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rustc_hash::FxHashSet;
use serde_json::json;
use tiersim_core::{Error, Ns, Op, ParamKind, ParamSpec, Params, Result};
use tiersim_devices::characterize::Target;
use tiersim_devices::InterleaveSet;

use super::iopath::{Driver, IoPath, Layers, Tags};
use super::kvstore::KvStore;
use super::pagecache::{PageCache, RaState, PAGE};
use step::Step;

mod io;
mod step;

pub const SPECS: &[ParamSpec] = &[
    ParamSpec::new("device", ParamKind::Str, "optane_ssd", "the file's device: a device preset or kind (ssd or pmem)"),
    ParamSpec::new("count", ParamKind::Int, "1", "devices interleaved at 4 KiB (PMEM modules)").min(1.0).max(64.0),
    ParamSpec::new("dram", ParamKind::Str, "ddr4_2666", "DRAM preset holding the page cache and user buffers"),
    ParamSpec::new("dram_channels", ParamKind::Int, "6", "DRAM channels (a Cascade Lake socket has 6)").min(1.0),
    ParamSpec::new("workload", ParamKind::Str, "read", "read or write blocks of the file, or kv (the storage engine)")
        .choices(&["read", "write", "kv"]),
    ParamSpec::new("pattern", ParamKind::Str, "random", "block order of read/write").choices(&["sequential", "random"]),
    ParamSpec::new("api", ParamKind::Str, "syscall", "pread/pwrite system calls or loads/stores to an mmap of the file")
        .choices(&["syscall", "mmap"]),
    ParamSpec::new("cache", ParamKind::Str, "buffered", "buffered (page cache), direct (O_DIRECT) or dax (fsdax on PMEM)")
        .choices(&["buffered", "direct", "dax"]),
    ParamSpec::new("warm", ParamKind::Bool, "false", "the file is in the page cache before the run (as much as fits); kv: the engine's cache holds the most popular leaves"),
    ParamSpec::new("threads", ParamKind::Int, "8", "application threads, each with its own blocks").min(1.0).max(1024.0),
    ParamSpec::new("block_size", ParamKind::Bytes, "8KiB", "bytes per read/write (seed 001 uses 8 KiB)"),
    ParamSpec::new("file_size", ParamKind::Bytes, "1GiB", "the file (seed 001: 32 GB; scaled with the page cache)"),
    ParamSpec::new("page_cache", ParamKind::Bytes, "2GiB", "memory the page cache may use"),
    ParamSpec::new("read_ahead", ParamKind::Bytes, "128KiB", "read_ahead_kb of the device (Linux default 128)"),
    ParamSpec::new("dirty_background_ratio", ParamKind::Float, "10", "percent of the page cache dirty that wakes the flusher (vm.dirty_background_ratio)")
        .min(0.0)
        .max(100.0),
    ParamSpec::new("dirty_ratio", ParamKind::Float, "20", "percent of the page cache dirty at which writers are throttled (vm.dirty_ratio)")
        .min(0.0)
        .max(100.0),
    ParamSpec::new("writeback_batch", ParamKind::Int, "1024", "pages one flusher pass writes (MAX_WRITEBACK_PAGES)").min(1.0),
    ParamSpec::new("ops", ParamKind::Int, "20000", "measured operations (a fifth more run first as warm-up)").min(1.0),
    ParamSpec::new("seed", ParamKind::Int, "0", "random block and key choice"),
    ParamSpec::new("kv_records", ParamKind::Int, "1000000", "kv: keys in the B-tree").min(1.0),
    ParamSpec::new("kv_record_size", ParamKind::Bytes, "100B", "kv: bytes per record").min(1.0),
    ParamSpec::new("kv_cache", ParamKind::Bytes, "64MiB", "kv: the engine's own DRAM cache of leaf blocks (WiredTiger cache)"),
    ParamSpec::new("kv_mix", ParamKind::Str, "b", "kv: YCSB mix a (50 % updates), b (5 %), c (reads only), or w (updates only)")
        .choices(&["a", "b", "c", "w"]),
    ParamSpec::new("kv_theta", ParamKind::Float, "0.99", "kv: zipfian key popularity (YCSB 0.99)").min(0.0).max(0.999),
    ParamSpec::new("kv_op_cpu", ParamKind::Duration, "2us", "kv: CPU of one operation in the engine (B-tree search, record copy)"),
    ParamSpec::new("kv_log", ParamKind::Str, "fsync", "kv: write-ahead log commit: fsync (pwrite + fdatasync), dax (ntstores to PMEM) or none")
        .choices(&["fsync", "dax", "none"]),
    ParamSpec::new("kv_group_commit", ParamKind::Bool, "true", "kv: commits waiting for the log share its next write"),
];

/// Lines a core keeps in flight while copying (line fill buffers).
const LINES_IN_FLIGHT: usize = 10;
const LINE: u64 = 64;
/// User buffers live above the page cache's frames in DRAM.
const USER_BASE: u64 = 1 << 44;
/// Retry interval of a writer throttled with no writeback in flight to wait for.
const THROTTLE_PAUSE: Ns = 10_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mem {
    /// DRAM byte address.
    Dram(u64),
    /// PMEM byte address (the file offset on fsdax).
    Pm(u64),
    /// Registers: a load with no destination or a store with no source.
    Cpu,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layer {
    Syscall,
    Fs,
    PageCache,
    Block,
    Driver,
    Completion,
    Fault,
    Engine,
}

struct Thread {
    clock: Ns,
    steps: VecDeque<Step>,
    ra: RaState,
    cursor: u64,
    op_start: Ns,
    measured: bool,
    parked: bool,
    slots: [Ns; LINES_IN_FLIGHT],
    slot: usize,
    copy_start: Option<Ns>,
    copy_end: Ns,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    Syscall,
    Mmap,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CacheMode {
    Buffered,
    Direct,
    Dax,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LogMode {
    Fsync,
    Dax,
    None,
}

/// Results of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchOut {
    pub ops: u64,
    pub elapsed_ns: Ns,
    pub bytes: u64,
    pub bandwidth_gbs: f64,
    pub ops_per_s: f64,
    pub mean_latency_ns: f64,
    /// Mean time per measured operation in each layer.
    pub layers: Vec<(&'static str, f64)>,
    pub stats: serde_json::Value,
}

impl BenchOut {
    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "ops": self.ops,
            "elapsed_ns": self.elapsed_ns,
            "bytes": self.bytes,
            "bandwidth_gbs": self.bandwidth_gbs,
            "ops_per_s": self.ops_per_s,
            "mean_latency_ns": self.mean_latency_ns,
            "layers_ns": self.layers.iter().map(|(n, v)| (n.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
            "stats": self.stats,
        })
    }
}

pub struct Bench {
    path: IoPath,
    dev: InterleaveSet,
    dram: InterleaveSet,
    driver: Driver,
    tags: Tags,
    cache: PageCache,
    mapped: FxHashSet<u64>,
    dax_mapped: FxHashSet<u64>,
    api: Api,
    mode: CacheMode,
    workload: String,
    random: bool,
    block: u64,
    file_pages: u64,
    threads: Vec<Thread>,
    flusher: usize,
    flusher_armed: bool,
    /// Threads unparked by another thread, to put back in the event queue.
    wake: Vec<usize>,
    /// The time each thread is queued at in the event heap, if it is.
    queued: Vec<Option<Ns>>,
    bg_pages: u64,
    limit_pages: u64,
    wb_batch: u64,
    wb_inflight: BinaryHeap<Reverse<(Ns, u64)>>,
    wb_inflight_pages: u64,
    rng: ChaCha8Rng,
    kv: Option<KvStore>,
    log_mode: LogMode,
    group_commit: bool,
    log_busy: bool,
    log_group: Vec<usize>,
    log_waiting: Vec<(usize, u64)>,
    log_offset: u64,
    log_base: u64,
    log_commits: u64,
    log_groups: u64,
    // measurement
    total_ops: u64,
    warmup: u64,
    started: u64,
    done_ops: u64,
    measure_start: Option<Ns>,
    last_done: Ns,
    measured_bytes: u64,
    latency_sum: u128,
    layers: Layers,
    writeback_pages: u64,
    block_requests: u64,
}

fn split_subtable(t: &toml::Table, key: &str) -> Result<Option<toml::Table>> {
    match t.get(key) {
        None => Ok(None),
        Some(toml::Value::Table(s)) => Ok(Some(s.clone())),
        Some(v) => Err(Error::config(key, format!("expected a table, got {v}"))),
    }
}

impl Bench {
    /// Build from a table of `SPECS` keys plus optional sub-tables `device_params` (overrides of
    /// the device preset) and `iopath` (overrides of the kernel path costs).
    pub fn new(table: &toml::Table) -> Result<Self> {
        let dev_over = split_subtable(table, "device_params")?;
        let path_over = split_subtable(table, "iopath")?;
        let mut top = table.clone();
        top.remove("device_params");
        top.remove("iopath");
        let p = Params::resolve(SPECS, Some(&top))?;
        let path_params = Params::resolve(super::iopath::SPECS, path_over.as_ref()).map_err(|e| e.under("iopath"))?;
        let path = IoPath::from_params(&path_params).map_err(|e| e.under("iopath"))?;
        let target = Target::resolve(p.str("device"), dev_over.as_ref()).map_err(|e| e.under("device_params"))?;
        let kind = target.entry.info.name;
        let driver = match kind {
            "ssd" => Driver::Nvme,
            "pmem" => Driver::PmemBio,
            k => {
                return Err(Error::config(
                    "device",
                    format!("`{k}` is not a storage device; expected an ssd or pmem preset or kind"),
                ))
            }
        };
        let count = p.uint("count") as u32;
        let dev = InterleaveSet::build(target.entry.build, &target.params(&[])?, count, 4096)?;
        let mut channels = toml::Table::new();
        channels.insert("channels".into(), (p.uint("dram_channels") as i64).into());
        let dram_t = Target::resolve(p.str("dram"), Some(&channels)).map_err(|e| e.under("dram"))?;
        if dram_t.entry.info.name != "dram" {
            return Err(Error::config(
                "dram",
                format!("`{}` is a {} preset; expected a dram one", p.str("dram"), dram_t.entry.info.name),
            ));
        }
        let dram = InterleaveSet::build(dram_t.entry.build, &dram_t.params(&[])?, 1, 4096)?;
        let mode = match p.str("cache") {
            "direct" => CacheMode::Direct,
            "dax" => CacheMode::Dax,
            _ => CacheMode::Buffered,
        };
        if mode == CacheMode::Dax && driver != Driver::PmemBio {
            return Err(Error::config("cache", "dax needs a pmem device (fsdax / devdax)"));
        }
        let api = if p.str("api") == "mmap" { Api::Mmap } else { Api::Syscall };
        if api == Api::Mmap && mode == CacheMode::Direct {
            return Err(Error::config(
                "api",
                "mmap of a file goes through the page cache (or DAX); O_DIRECT applies to read/write calls",
            ));
        }
        let block = p.bytes("block_size");
        if block == 0 || block % PAGE != 0 {
            return Err(Error::config("block_size", format!("{block} B is not a positive multiple of 4 KiB")));
        }
        let file_size = p.bytes("file_size");
        if file_size < block {
            return Err(Error::config("file_size", format!("{file_size} B is smaller than one block ({block} B)")));
        }
        let file_pages = file_size / PAGE;
        let cache_pages = (p.bytes("page_cache") / PAGE).max(1);
        let n = p.uint("threads") as usize;
        let workload = p.str("workload").to_owned();
        let kv = if workload == "kv" { Some(KvStore::new(&p, block, file_size)?) } else { None };
        let log_mode = match p.str("kv_log") {
            "dax" if driver != Driver::PmemBio => return Err(Error::config("kv_log", "a dax log needs a pmem device")),
            "dax" => LogMode::Dax,
            "none" => LogMode::None,
            _ => LogMode::Fsync,
        };
        let random = p.str("pattern") == "random";
        let mut threads: Vec<Thread> = (0..=n)
            .map(|t| Thread {
                clock: 0,
                steps: VecDeque::new(),
                ra: RaState::default(),
                // Sequential threads each own an equal slice of the file.
                cursor: (file_pages / n as u64) * t as u64 * PAGE / block * block,
                op_start: 0,
                measured: false,
                parked: false,
                slots: [0; LINES_IN_FLIGHT],
                slot: 0,
                copy_start: None,
                copy_end: 0,
            })
            .collect();
        threads[n].parked = true;
        let total_ops = p.uint("ops");
        let mut b = Bench {
            path,
            tags: Tags::new(path.queue_depth),
            dev,
            dram,
            driver,
            cache: PageCache::new(
                cache_pages,
                (p.bytes("read_ahead") / PAGE).max(1),
                file_pages + kv.as_ref().map_or(0, |k| k.log_pages()),
            ),
            mapped: FxHashSet::default(),
            dax_mapped: FxHashSet::default(),
            api,
            mode,
            workload,
            random,
            block,
            file_pages,
            threads,
            flusher: n,
            flusher_armed: false,
            wake: Vec::new(),
            queued: vec![None; n + 1],
            bg_pages: (cache_pages as f64 * p.float("dirty_background_ratio") / 100.0) as u64,
            limit_pages: ((cache_pages as f64 * p.float("dirty_ratio") / 100.0) as u64).max(1),
            wb_batch: p.uint("writeback_batch"),
            wb_inflight: BinaryHeap::new(),
            wb_inflight_pages: 0,
            rng: ChaCha8Rng::seed_from_u64(p.uint("seed")),
            log_base: file_size,
            kv,
            log_mode,
            group_commit: p.bool("kv_group_commit"),
            log_busy: false,
            log_group: Vec::new(),
            log_waiting: Vec::new(),
            log_offset: 0,
            log_commits: 0,
            log_groups: 0,
            total_ops: total_ops + total_ops / 5,
            warmup: total_ops / 5,
            started: 0,
            done_ops: 0,
            measure_start: None,
            last_done: 0,
            measured_bytes: 0,
            latency_sum: 0,
            layers: Layers::default(),
            writeback_pages: 0,
            block_requests: 0,
        };
        if p.bool("warm") {
            if let Some(kv) = b.kv.as_mut() {
                kv.warm();
            }
        }
        if p.bool("warm") && mode == CacheMode::Buffered {
            for pg in 0..file_pages.min(cache_pages) {
                b.cache.insert(pg, 0);
            }
            b.cache.stats = Default::default();
        }
        Ok(b)
    }

    fn is_app(&self, t: usize) -> bool {
        t != self.flusher
    }

    fn charge(&mut self, t: usize, layer: Layer, ns: Ns) {
        if !self.is_app(t) || !self.threads[t].measured {
            return;
        }
        let l = &mut self.layers;
        match layer {
            Layer::Syscall => l.syscall += ns,
            Layer::Fs => l.fs += ns,
            Layer::PageCache => l.page_cache += ns,
            Layer::Block => l.block += ns,
            Layer::Driver => l.driver += ns,
            Layer::Completion => l.completion += ns,
            Layer::Fault => l.fault += ns,
            // The engine's own CPU counts toward no kernel layer.
            Layer::Engine => {}
        }
    }

    /// Start thread `t`'s next operation; false when all have started.
    fn next_op(&mut self, t: usize) -> bool {
        if self.started == self.total_ops {
            return false;
        }
        self.started += 1;
        let measured = self.started > self.warmup;
        let th = &mut self.threads[t];
        th.op_start = th.clock;
        th.measured = measured;
        if measured && self.measure_start.is_none() {
            self.measure_start = Some(th.clock);
        }
        if let Some(kv) = self.kv.as_mut() {
            let op = kv.next(&mut self.rng);
            self.threads[t].steps.push_back(Step::Kv(op));
        } else {
            let blocks = self.file_pages * PAGE / self.block;
            let offset = if self.random {
                self.rng.gen_range(0..blocks) * self.block
            } else {
                let o = self.threads[t].cursor;
                self.threads[t].cursor = (o + self.block) % (blocks * self.block);
                o
            };
            let op = if self.workload == "write" { Op::Write } else { Op::Read };
            let steps = self.file_io(t, op, offset, self.block);
            self.threads[t].steps.extend(steps);
        }
        self.threads[t].steps.push_back(Step::OpDone);
        if measured {
            self.measured_bytes += if self.kv.is_some() { 0 } else { self.block };
        }
        true
    }

    fn enqueue(&mut self, heap: &mut BinaryHeap<Reverse<(Ns, usize)>>, u: usize) {
        let c = self.threads[u].clock;
        if self.queued[u] != Some(c) {
            self.queued[u] = Some(c);
            heap.push(Reverse((c, u)));
        }
    }

    /// Run to the end; returns the measurements.
    pub fn run(mut self) -> Result<BenchOut> {
        let n = self.flusher;
        let mut heap: BinaryHeap<Reverse<(Ns, usize)>> = BinaryHeap::new();
        for t in 0..n {
            if self.next_op(t) {
                self.enqueue(&mut heap, t);
            }
        }
        while let Some(Reverse((at, t))) = heap.pop() {
            // Entries are stale once the thread was queued again at another time.
            if self.queued[t] != Some(at) {
                continue;
            }
            self.queued[t] = None;
            if self.threads[t].parked {
                continue;
            }
            match self.threads[t].steps.pop_front() {
                Some(step) => self.run_step(t, step),
                None if t != n && self.next_op(t) => {}
                None => continue,
            }
            if !self.threads[t].parked {
                self.enqueue(&mut heap, t);
            }
            // Threads another thread woke (commit groups, the flusher) rejoin the heap.
            while let Some(u) = self.wake.pop() {
                if !self.threads[u].parked {
                    self.enqueue(&mut heap, u);
                }
            }
        }
        let elapsed = self.last_done.saturating_sub(self.measure_start.unwrap_or(0)).max(1);
        let ops = self.done_ops;
        let per = |x: Ns| if ops == 0 { 0.0 } else { x as f64 / ops as f64 };
        let bytes = if self.kv.is_some() { 0 } else { self.measured_bytes };
        let layers = Layers::NAMES.iter().zip(self.layers.values()).map(|(n, v)| (*n, per(v))).collect();
        let c = self.cache.stats;
        let stats = json!({
            "page_cache": {
                "hits": c.hits, "misses": c.misses, "evictions": c.evictions, "dirtied": c.dirtied,
                "written_back": c.written_back, "dirty_at_end": self.cache.dirty_pages(), "resident": self.cache.len(),
            },
            "writeback_pages": self.writeback_pages,
            "block_requests": self.block_requests,
            "log": { "commits": self.log_commits, "groups": self.log_groups },
            "kv": self.kv.as_ref().map(|k| k.stats_json()),
            "device": self.dev.stats(),
        });
        Ok(BenchOut {
            ops,
            elapsed_ns: elapsed,
            bytes,
            bandwidth_gbs: bytes as f64 / elapsed as f64,
            ops_per_s: ops as f64 * 1e9 / elapsed as f64,
            mean_latency_ns: if ops == 0 { 0.0 } else { self.latency_sum as f64 / ops as f64 },
            layers,
            stats,
        })
    }
}
