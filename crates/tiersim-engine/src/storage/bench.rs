//! `tiersim filebench`: closed-loop threads doing file I/O through the kernel path of
//! `iopath.rs` and the page cache of `pagecache.rs` onto a storage device (an SSD, or PMEM as a
//! block device or through DAX), with the DRAM holding the page cache and user buffers modelled
//! line by line. Workloads: the block micro-benchmark of seed 001 (8 KiB reads or writes of a
//! file, sequential or random, read/write calls or mmap), and the storage engine of `kvstore.rs`.
//! Each thread runs its operation as steps executed in global time order, so threads contend on
//! the devices, on blk-mq tags, on pages being read, on the dirty limits and on the log.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rustc_hash::FxHashSet;
use serde_json::json;
use tiersim_core::{Error, Ns, Op, ParamKind, ParamSpec, Params, Result};
use tiersim_devices::characterize::Target;
use tiersim_devices::{DeviceRequest, InterleaveSet};

use super::iopath::{Driver, IoPath, Layers, Tags};
use super::kvstore::{KvOp, KvStore};
use super::pagecache::{PageCache, RaState, PAGE};

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

/// One step of a thread's operation, executed at the thread's clock in global time order.
#[derive(Debug, Clone, Copy)]
enum Step {
    Cpu(Ns, Layer),
    Until(Ns),
    /// One line of a copy at a time, `LINES_IN_FLIGHT` outstanding, so every line is issued at
    /// its own time; `CopyEnd` waits for the last and charges the copy.
    Copy {
        src: Mem,
        dst: Mem,
        bytes: u64,
    },
    CopyEnd,
    /// Buffered read of file pages `[first, first + count)` into the user buffer at `user`.
    ReadPages {
        first: u64,
        count: u64,
        user: u64,
    },
    /// Buffered write of whole pages from the user buffer.
    WritePages {
        first: u64,
        count: u64,
        user: u64,
    },
    /// Loads (or stores) of mmapped file pages.
    MapAccess {
        first: u64,
        count: u64,
        write: bool,
    },
    /// A block request straight to the device (O_DIRECT, or writeback of `pages` pages).
    Block {
        op: Op,
        offset: u64,
        bytes: u64,
        user: u64,
        writeback: u64,
    },
    Throttle,
    /// A DAX mmap fault mapping `dax_fault_bytes` region `.0`.
    DaxFault(u64),
    Kv(KvOp),
    Commit {
        bytes: u64,
    },
    LogWrite {
        bytes: u64,
    },
    LogDone,
    /// The flusher's pass.
    Flush,
    /// End of an application operation (latency accounting).
    OpDone,
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
        let path = IoPath::from_params(
            &Params::resolve(super::iopath::SPECS, path_over.as_ref()).map_err(|e| e.under("iopath"))?,
        )?;
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

    /// The steps of reading or writing `bytes` at file `offset` the configured way.
    fn file_io(&self, t: usize, op: Op, offset: u64, bytes: u64) -> Vec<Step> {
        let user = USER_BASE + t as u64 * (1 << 24);
        let (first, count) = (offset / PAGE, bytes.div_ceil(PAGE));
        let p = &self.path;
        let sys = Step::Cpu(p.syscall, Layer::Syscall);
        match (self.mode, self.api) {
            (CacheMode::Buffered, Api::Syscall) => {
                let body = match op {
                    Op::Read => Step::ReadPages { first, count, user },
                    Op::Write => Step::WritePages { first, count, user },
                };
                vec![sys, Step::Cpu(p.vfs, Layer::Fs), body]
            }
            (CacheMode::Buffered, Api::Mmap) => vec![Step::MapAccess { first, count, write: op == Op::Write }],
            (CacheMode::Direct, _) => {
                vec![sys, Step::Cpu(p.vfs, Layer::Fs), Step::Block { op, offset, bytes, user, writeback: 0 }]
            }
            (CacheMode::Dax, Api::Syscall) => {
                // dax_iomap_rw: one extent lookup, then a copy between PMEM and the user buffer
                // (copy_mc_to_user / copy_from_iter_flushcache, i.e. ntstores).
                let copy = match op {
                    Op::Read => Step::Copy { src: Mem::Pm(offset), dst: Mem::Dram(user), bytes },
                    Op::Write => Step::Copy { src: Mem::Dram(user), dst: Mem::Pm(offset), bytes },
                };
                vec![sys, Step::Cpu(p.vfs + p.fs_map, Layer::Fs), copy, Step::CopyEnd]
            }
            (CacheMode::Dax, Api::Mmap) => {
                let mut v = Vec::new();
                let region = offset / p.dax_fault_bytes;
                if !self.dax_mapped.contains(&region) {
                    v.push(Step::DaxFault(region));
                }
                v.push(match op {
                    Op::Read => Step::Copy { src: Mem::Pm(offset), dst: Mem::Cpu, bytes },
                    Op::Write => Step::Copy { src: Mem::Cpu, dst: Mem::Pm(offset), bytes },
                });
                v.push(Step::CopyEnd);
                v
            }
        }
    }

    fn mem_access(&mut self, now: Ns, m: Mem, off: u64, op: Op, cpu: u32) -> Ns {
        let (set, addr) = match m {
            Mem::Cpu => return now,
            Mem::Dram(a) => (&mut self.dram, a + off),
            Mem::Pm(a) => (&mut self.dev, a + off),
        };
        set.access(&DeviceRequest { now, addr, size: LINE as u32, op, socket: 0, cpu, remote: false })
    }

    /// Submit a block request of `bytes` at `offset` at `at` (split at max_request, each part
    /// with a tag); `buf` is the DRAM address the data moves to or from. NVMe: returns when the
    /// data is there (before the completion's CPU), and no steps. The bio-based pmem driver
    /// copies in the submitter's context: returns `at` and the copy steps the submitter runs.
    fn submit(&mut self, at: Ns, t: usize, op: Op, offset: u64, bytes: u64, buf: u64) -> (Ns, Vec<Step>) {
        let mut done = at;
        let mut steps = Vec::new();
        let mut o = 0;
        while o < bytes {
            let part = (bytes - o).min(self.path.max_request);
            self.block_requests += 1;
            match self.driver {
                Driver::Nvme => {
                    let (tag, start) = self.tags.acquire(at);
                    let req = DeviceRequest {
                        now: start,
                        addr: offset + o,
                        size: part as u32,
                        op,
                        socket: 0,
                        cpu: t as u32,
                        remote: false,
                    };
                    let end = self.dev.access(&req);
                    self.tags.release(tag, end);
                    done = done.max(end);
                }
                Driver::PmemBio => {
                    let (src, dst) = match op {
                        Op::Read => (Mem::Pm(offset + o), Mem::Dram(buf + o)),
                        Op::Write => (Mem::Dram(buf + o), Mem::Pm(offset + o)),
                    };
                    steps.push(Step::Copy { src, dst, bytes: part });
                    steps.push(Step::CopyEnd);
                }
            }
            o += part;
        }
        (done, steps)
    }

    /// Read `[first, first + count)` into the page cache per `plan`; returns when the sync
    /// part's data is there, with the CPU the submitter spent on request overheads.
    fn read_into_cache(&mut self, at: Ns, t: usize, first: u64, count: u64, sync: bool) -> (Ns, Ns, Vec<Step>) {
        let (blk, drv, _) = self.path.request_overhead(self.driver);
        let mut cpu = 0;
        let mut ready = at;
        let mut steps = Vec::new();
        // Contiguous runs of pages not yet cached, each a request (mpage_readahead).
        let mut p = first;
        while p < first + count {
            if self.cache.contains(p) {
                p += 1;
                continue;
            }
            let mut q = p;
            while q < first + count && !self.cache.contains(q) && (q - p + 1) * PAGE <= self.path.max_request {
                q += 1;
            }
            let n = q - p;
            cpu += n * self.path.page_alloc + self.path.fs_map + blk + drv;
            let submit = at + cpu;
            // Frames first, so the request reads into them.
            let mut frames = Vec::with_capacity(n as usize);
            for pg in p..q {
                let (frame, victim) = self.cache.insert(pg, Ns::MAX);
                if let Some((vp, vframe, dirty)) = victim {
                    self.mapped.remove(&vp);
                    if dirty {
                        // Reclaim writes the dirty victim before reusing its frame (pageout).
                        let (w, s) = self.submit(submit, t, Op::Write, vp * PAGE, PAGE, vframe * PAGE);
                        self.writeback_pages += 1;
                        ready = ready.max(w);
                        steps.extend(s);
                    }
                }
                frames.push(frame);
            }
            let (done, s) = self.submit(submit, t, Op::Read, p * PAGE, n * PAGE, frames[0] * PAGE);
            steps.extend(s);
            self.cache.set_ready(p, q, done);
            if sync {
                ready = ready.max(done);
            }
            p = q;
        }
        (ready, cpu, steps)
    }

    fn run_step(&mut self, t: usize, step: Step) {
        let now = self.threads[t].clock;
        let p = self.path;
        let push = |b: &mut Bench, s: Vec<Step>| {
            for x in s.into_iter().rev() {
                b.threads[t].steps.push_front(x);
            }
        };
        match step {
            Step::Cpu(ns, layer) => {
                self.threads[t].clock += ns;
                self.charge(t, layer, ns);
            }
            Step::Until(at) => {
                if at > now {
                    self.threads[t].clock = at;
                    if self.threads[t].measured && self.is_app(t) {
                        self.layers.device += at - now;
                    }
                }
            }
            Step::Copy { src, dst, bytes } => {
                let th = &mut self.threads[t];
                let k = th.slot;
                if th.slots[k] > now {
                    // Every fill buffer is busy: issue when this one frees.
                    th.clock = th.slots[k];
                    push(self, vec![step]);
                    return;
                }
                if th.copy_start.is_none() {
                    th.copy_start = Some(now);
                    th.copy_end = now;
                }
                // The store is issued with the load rather than when its data arrives: devices
                // serve requests in issue order, and a request issued ahead of the others'
                // clocks would hold them up. Its completion still follows the load's.
                let got = self.mem_access(now, src, 0, Op::Read, t as u32);
                let stored = self.mem_access(now, dst, 0, Op::Write, t as u32).max(got);
                let th = &mut self.threads[t];
                // A load holds its fill buffer until the data is there; a store until accepted.
                th.slots[k] = if src == Mem::Cpu { stored } else { got };
                th.slot = (k + 1) % LINES_IN_FLIGHT;
                th.copy_end = th.copy_end.max(stored);
                if bytes > LINE {
                    let adv = |m: Mem| match m {
                        Mem::Dram(a) => Mem::Dram(a + LINE),
                        Mem::Pm(a) => Mem::Pm(a + LINE),
                        Mem::Cpu => Mem::Cpu,
                    };
                    push(self, vec![Step::Copy { src: adv(src), dst: adv(dst), bytes: bytes - LINE }]);
                }
            }
            Step::CopyEnd => {
                let th = &mut self.threads[t];
                let start = th.copy_start.take().unwrap_or(now);
                let end = th.copy_end.max(now);
                th.clock = end;
                if th.measured && t != self.flusher {
                    self.layers.copy += end - start;
                }
            }
            Step::ReadPages { first, count, user } => {
                let (mut missing, mut marker, mut wait) = (false, false, now);
                for pg in first..first + count {
                    match self.cache.lookup(pg) {
                        Some((_, ready, m)) => {
                            marker |= m;
                            wait = wait.max(ready);
                        }
                        None => missing = true,
                    }
                }
                let lookups = count * p.page_cache_lookup;
                let random = self.random && self.kv.is_none();
                let mut ra = self.threads[t].ra;
                let plan = self.cache.plan_read(&mut ra, first, count, missing, marker, false, random);
                self.threads[t].ra = ra;
                let mut cpu = lookups;
                let mut ready = wait;
                let mut copies = Vec::new();
                for r in plan {
                    let (done, c, s) = self.read_into_cache(now + cpu, t, r.first, r.count, r.sync);
                    cpu += c;
                    copies.extend(s);
                    if r.sync {
                        ready = ready.max(done);
                    }
                }
                // Pages another thread is reading: wait for them too.
                for pg in first..first + count {
                    if let Some(r) = self.cache.ready_at(pg) {
                        ready = ready.max(r);
                    }
                }
                self.charge(t, Layer::PageCache, lookups);
                self.charge(t, Layer::Block, cpu - lookups);
                self.threads[t].clock = now + cpu;
                let mut next = copies;
                next.push(Step::Until(ready));
                if missing && self.driver == Driver::Nvme {
                    next.push(Step::Cpu(p.request_overhead(self.driver).2, Layer::Completion));
                }
                for (i, pg) in (first..first + count).enumerate() {
                    let frame = self.cache.frame(pg).unwrap_or(0);
                    next.push(Step::Copy {
                        src: Mem::Dram(frame * PAGE),
                        dst: Mem::Dram(user + i as u64 * PAGE),
                        bytes: PAGE,
                    });
                }
                next.push(Step::CopyEnd);
                push(self, next);
            }
            Step::WritePages { first, count, user } => {
                let mut next = Vec::new();
                let mut evict_steps = Vec::new();
                let mut cpu = 0;
                let mut wait = now;
                for (i, pg) in (first..first + count).enumerate() {
                    cpu += p.write_page;
                    let frame = match self.cache.lookup(pg) {
                        Some((f, ready, _)) => {
                            wait = wait.max(ready);
                            f
                        }
                        None => {
                            cpu += p.page_alloc;
                            let (f, victim) = self.cache.insert(pg, now);
                            if let Some((vp, vframe, true)) = victim {
                                self.mapped.remove(&vp);
                                let (w, s) = self.submit(now + cpu, t, Op::Write, vp * PAGE, PAGE, vframe * PAGE);
                                self.writeback_pages += 1;
                                wait = wait.max(w);
                                evict_steps.extend(s);
                            } else if let Some((vp, _, false)) = victim {
                                self.mapped.remove(&vp);
                            }
                            f
                        }
                    };
                    self.cache.mark_dirty(pg);
                    next.push(Step::Copy {
                        src: Mem::Dram(user + i as u64 * PAGE),
                        dst: Mem::Dram(frame * PAGE),
                        bytes: PAGE,
                    });
                }
                self.charge(t, Layer::PageCache, cpu);
                self.threads[t].clock = now + cpu;
                next.push(Step::CopyEnd);
                next.insert(0, Step::Until(wait));
                for s in evict_steps.into_iter().rev() {
                    next.insert(0, s);
                }
                next.push(Step::Throttle);
                push(self, next);
            }
            Step::MapAccess { first, count, write } => {
                let mut next = Vec::new();
                for pg in first..first + count {
                    if !self.mapped.contains(&pg) || (write && !self.cache.is_dirty(pg)) {
                        // A fault: minor if the page is cached, else read around it first.
                        if self.cache.lookup(pg).is_none() {
                            let mut ra = self.threads[t].ra;
                            let plan = self.cache.plan_read(&mut ra, pg, 1, true, false, true, false);
                            self.threads[t].ra = ra;
                            let mut cpu = 0;
                            let mut ready = now;
                            for r in plan {
                                let (done, c, s) = self.read_into_cache(now + cpu, t, r.first, r.count, r.sync);
                                cpu += c;
                                ready = ready.max(done);
                                next.extend(s);
                            }
                            self.charge(t, Layer::Block, cpu);
                            self.threads[t].clock = now + cpu;
                            next.push(Step::Until(ready));
                            if self.driver == Driver::Nvme {
                                next.push(Step::Cpu(p.request_overhead(self.driver).2, Layer::Completion));
                            }
                        }
                        next.push(Step::Cpu(p.minor_fault, Layer::Fault));
                        // filemap_map_pages maps the cached neighbours in the aligned window.
                        let w = p.fault_around_pages;
                        for q in (pg / w) * w..(pg / w + 1) * w {
                            if self.cache.contains(q) {
                                self.mapped.insert(q);
                            }
                        }
                        self.mapped.insert(pg);
                        if write {
                            self.cache.mark_dirty(pg);
                            next.push(Step::Throttle);
                        }
                    }
                    let frame = self.cache.frame(pg).unwrap_or(0);
                    next.push(if write {
                        Step::Copy { src: Mem::Cpu, dst: Mem::Dram(frame * PAGE), bytes: PAGE }
                    } else {
                        Step::Copy { src: Mem::Dram(frame * PAGE), dst: Mem::Cpu, bytes: PAGE }
                    });
                }
                next.push(Step::CopyEnd);
                push(self, next);
            }
            Step::Block { op, offset, bytes, user, writeback } => {
                let (blk, drv, cmpl) = p.request_overhead(self.driver);
                let parts = bytes.div_ceil(p.max_request);
                let pre = parts * (p.fs_map + blk + drv);
                self.charge(t, Layer::Fs, parts * p.fs_map);
                self.charge(t, Layer::Block, parts * blk);
                self.charge(t, Layer::Driver, parts * drv);
                let (done, copies) = self.submit(now + pre, t, op, offset, bytes, user);
                if !copies.is_empty() {
                    // The pmem driver's copy: synchronous, no completion interrupt.
                    self.threads[t].clock = now + pre;
                    push(self, copies);
                } else if writeback > 0 {
                    // The flusher does not wait: completions end the pages' writeback.
                    self.threads[t].clock = now + pre;
                    self.wb_inflight.push(Reverse((done, writeback)));
                    self.wb_inflight_pages += writeback;
                } else {
                    self.threads[t].clock = now + pre;
                    push(self, vec![Step::Until(done), Step::Cpu(cmpl, Layer::Completion)]);
                }
            }
            Step::DaxFault(region) => {
                // Another thread may have mapped it since the operation was planned.
                if self.dax_mapped.insert(region) {
                    self.threads[t].clock += p.dax_fault;
                    self.charge(t, Layer::Fault, p.dax_fault);
                }
            }
            Step::Throttle => {
                self.retire_writeback(now);
                let dirty = self.cache.dirty_pages() + self.wb_inflight_pages;
                if dirty > self.bg_pages {
                    self.wake_flusher(now);
                }
                if dirty > self.limit_pages {
                    // balance_dirty_pages: sleep until writeback completes some pages.
                    let until = self.wb_inflight.peek().map_or(now + THROTTLE_PAUSE, |r| r.0 .0.max(now + 1));
                    if self.threads[t].measured && self.is_app(t) {
                        self.layers.wait += until - now;
                    }
                    self.threads[t].clock = until;
                    push(self, vec![Step::Throttle]);
                }
            }
            Step::Flush => {
                self.retire_writeback(now);
                let dirty = self.cache.dirty_pages();
                if dirty == 0 || dirty + self.wb_inflight_pages <= self.bg_pages / 2 && self.wb_inflight_pages > 0 {
                    self.flusher_armed = false;
                    self.threads[t].parked = true;
                    return;
                }
                // Bound the writeback in flight to a batch: wait for completions beyond it.
                if self.wb_inflight_pages >= self.wb_batch {
                    let until = self.wb_inflight.peek().map_or(now + 1, |r| r.0 .0.max(now + 1));
                    self.threads[t].clock = until;
                    push(self, vec![Step::Flush]);
                    return;
                }
                let pages = self.cache.take_dirty(self.wb_batch);
                let mut next = Vec::new();
                let mut i = 0;
                while i < pages.len() {
                    let mut j = i + 1;
                    while j < pages.len()
                        && pages[j].0 == pages[j - 1].0 + 1
                        && (j - i + 1) as u64 * PAGE <= p.max_request
                    {
                        j += 1;
                    }
                    let n = (j - i) as u64;
                    self.writeback_pages += n;
                    next.push(Step::Block {
                        op: Op::Write,
                        offset: pages[i].0 * PAGE,
                        bytes: n * PAGE,
                        user: pages[i].1 * PAGE,
                        writeback: n,
                    });
                    i = j;
                }
                next.push(Step::Flush);
                push(self, next);
            }
            Step::Kv(op) => {
                let steps = self.kv_steps(t, op);
                push(self, steps);
            }
            Step::Commit { bytes } => {
                self.log_commits += 1;
                if self.log_busy {
                    self.log_waiting.push((t, bytes));
                    self.threads[t].parked = true;
                } else {
                    self.log_busy = true;
                    self.log_group = vec![t];
                    self.log_groups += 1;
                    push(self, vec![Step::LogWrite { bytes }, Step::LogDone]);
                }
            }
            Step::LogWrite { bytes } => {
                let steps = self.log_write(t, bytes);
                push(self, steps);
            }
            Step::LogDone => {
                for &m in &self.log_group {
                    if m != t {
                        self.threads[m].clock = now;
                        self.threads[m].parked = false;
                        self.wake.push(m);
                    }
                }
                self.log_group.clear();
                self.log_busy = false;
                if !self.log_waiting.is_empty() {
                    let take = if self.group_commit { self.log_waiting.len() } else { 1 };
                    let group: Vec<(usize, u64)> = self.log_waiting.drain(..take).collect();
                    let leader = group[0].0;
                    let bytes = group.iter().map(|g| g.1).sum();
                    self.log_busy = true;
                    self.log_groups += 1;
                    self.log_group = group.iter().map(|g| g.0).collect();
                    let th = &mut self.threads[leader];
                    th.parked = false;
                    th.clock = th.clock.max(now);
                    th.steps.push_front(Step::LogDone);
                    th.steps.push_front(Step::LogWrite { bytes });
                    self.wake.push(leader);
                }
            }
            Step::OpDone => {
                let th = &self.threads[t];
                if th.measured {
                    self.done_ops += 1;
                    self.latency_sum += u128::from(th.clock - th.op_start);
                    self.last_done = self.last_done.max(th.clock);
                }
            }
        }
    }

    fn retire_writeback(&mut self, now: Ns) {
        while let Some(Reverse((done, n))) = self.wb_inflight.peek().copied() {
            if done > now {
                break;
            }
            self.wb_inflight.pop();
            self.wb_inflight_pages -= n;
        }
    }

    fn wake_flusher(&mut self, now: Ns) {
        if self.flusher_armed {
            return;
        }
        self.flusher_armed = true;
        let f = self.flusher;
        let th = &mut self.threads[f];
        th.parked = false;
        th.clock = th.clock.max(now);
        th.steps.push_back(Step::Flush);
        self.wake.push(f);
    }

    /// The steps of one storage-engine operation.
    fn kv_steps(&mut self, t: usize, op: KvOp) -> Vec<Step> {
        let Some(kv) = self.kv.as_mut() else { return Vec::new() };
        let access = kv.access(op);
        let cpu = kv.op_cpu();
        let mut v = Vec::new();
        if let Some(evicted) = access.write_back {
            v.extend(self.file_io(t, Op::Write, evicted, self.block));
        }
        if let Some(leaf) = access.read {
            v.extend(self.file_io(t, Op::Read, leaf, self.block));
        }
        v.push(Step::Cpu(cpu, Layer::Engine));
        if let Some(bytes) = access.log {
            if self.log_mode != LogMode::None {
                v.push(Step::Commit { bytes });
            }
        }
        v
    }

    /// The leader's write of a commit group: `bytes` appended to the log, then made durable.
    fn log_write(&mut self, t: usize, bytes: u64) -> Vec<Step> {
        let kv_log = self.kv.as_ref().map_or(1, |k| k.log_pages());
        let off = self.log_offset;
        self.log_offset = (off + bytes) % (kv_log * PAGE);
        let at = self.log_base + off;
        let p = self.path;
        let user = USER_BASE + t as u64 * (1 << 24);
        match self.log_mode {
            LogMode::Dax => vec![Step::Copy { src: Mem::Dram(user), dst: Mem::Pm(at), bytes }, Step::CopyEnd],
            // pwrite on an fsdax file copies straight to PMEM with ntstores; fdatasync then has
            // no dirty page to write.
            _ if self.mode == CacheMode::Dax => vec![
                Step::Cpu(p.syscall, Layer::Syscall),
                Step::Cpu(p.vfs + p.fs_map, Layer::Fs),
                Step::Copy { src: Mem::Dram(user), dst: Mem::Pm(at), bytes },
                Step::CopyEnd,
                Step::Cpu(p.syscall + p.fsync, Layer::Fs),
            ],
            _ => {
                // pwrite into the page cache, then fdatasync writes the touched log pages.
                let (first, last) = (at / PAGE, (at + bytes - 1) / PAGE);
                let mut v = vec![Step::Cpu(p.syscall, Layer::Syscall), Step::Cpu(p.vfs, Layer::Fs)];
                v.push(Step::Copy { src: Mem::Dram(user), dst: Mem::Dram((1 << 43) + off), bytes });
                v.push(Step::CopyEnd);
                v.push(Step::Cpu(p.syscall + p.fsync, Layer::Fs));
                v.push(Step::Block {
                    op: Op::Write,
                    offset: first * PAGE,
                    bytes: (last - first + 1) * PAGE,
                    user: (1 << 43) + first * PAGE,
                    writeback: 0,
                });
                v
            }
        }
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
