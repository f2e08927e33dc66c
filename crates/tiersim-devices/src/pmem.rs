//! One Optane DC persistent-memory DIMM in App Direct mode (reference seed 000, "An Empirical
//! Guide to the Behavior and Use of Scalable Persistent Memory"): the iMC sends 64 B requests, the
//! DIMM's controller serves them from 256 B media lines (XPLine) through a 16 KiB write-combining
//! buffer (XPBuffer) in the ADR domain; a partly written line leaving the buffer costs a
//! read-modify-write. Media reads and writes share one server at the per-DIMM rates (6.6 / 2.3
//! GB/s). A socket's 6 DIMMs are an `InterleaveSet` (4 KiB granule) of this device.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rustc_hash::FxHashMap;
use serde_json::json;
use tiersim_core::{Error, Ns, Op, ParamKind, ParamSpec, Params, PluginInfo, Result};

use crate::pipe::{completion, ns_f64, ns_from_ps, ps_from_ns, Pipe, Ps};
use crate::{Device, DeviceRequest};

pub const SPECS: &[ParamSpec] = &[
    ParamSpec::new(
        "xpline",
        ParamKind::Bytes,
        "256B",
        "media access unit (XPLine); smaller requests cost a whole line",
    )
    .min(64.0)
    .max(4096.0),
    ParamSpec::new("host_line", ParamKind::Bytes, "64B", "unit of the iMC's requests to the DIMM (a CPU cache line)")
        .min(1.0)
        .max(4096.0),
    ParamSpec::new(
        "xpbuffer_size",
        ParamKind::Bytes,
        "16KiB",
        "write-combining buffer per DIMM; seed 000 measures the EWR knee at 64 XPLines = 16 KiB",
    )
    .min(64.0)
    .max(16777216.0),
    ParamSpec::new(
        "xpbuffer_policy",
        ParamKind::Str,
        "lru",
        "XPBuffer replacement; the paper does not state it, and its 16 KiB probe gives the same knee under both",
    )
    .choices(&["lru", "fifo"]),
    ParamSpec::new(
        "media_read_bandwidth",
        ParamKind::Bandwidth,
        "6.6GB/s",
        "media read rate of one DIMM (seed 000: 6.6 GB/s peak read per DIMM)",
    )
    .min(1e6),
    ParamSpec::new(
        "media_write_bandwidth",
        ParamKind::Bandwidth,
        "2.3GB/s",
        "media write rate of one DIMM (seed 000: 2.3 GB/s peak write per DIMM, 2.9x below read)",
    )
    .min(1e6),
    ParamSpec::new(
        "read_latency",
        ParamKind::Duration,
        "266ns",
        "idle load-to-use latency of a read that misses the XPBuffer, excluding the media line transfer; \
         266 ns + 256 B at 6.6 GB/s = 305 ns, the published random-read latency (2-3x DRAM, seed 000)",
    ),
    ParamSpec::new(
        "buffer_read_latency",
        ParamKind::Duration,
        "124ns",
        "idle latency of a read served from the XPBuffer: with one miss and three hits per XPLine a \
         sequential 64 B read averages (305 + 3 x 124) / 4 = 169 ns, 1.8x below random as seed 000 reports",
    ),
    ParamSpec::new(
        "store_kind",
        ParamKind::Str,
        "ntstore",
        "how software writes: ntstore bypasses the cache; clwb first loads the line into the CPU \
         cache (an XPBuffer/media read the store's latency does not see) and then writes it back",
    )
    .choices(&["ntstore", "clwb"]),
    ParamSpec::new(
        "ntstore_latency",
        ParamKind::Duration,
        "90ns",
        "idle latency of ntstore + fence: complete once in the iMC's ADR domain, close to DRAM (seed 000)",
    ),
    ParamSpec::new(
        "clwb_latency",
        ParamKind::Duration,
        "62ns",
        "idle latency of store + clwb + fence; below ntstore as seed 000 reports",
    ),
    ParamSpec::new(
        "write_contention_threads",
        ParamKind::Int,
        "4",
        "writer threads one DIMM serves without loss; seed 000: single-DIMM write bandwidth peaks at 1-4 threads",
    )
    .min(1.0)
    .max(4096.0),
    ParamSpec::new(
        "write_contention_penalty",
        ParamKind::Float,
        "0.112",
        "extra media write time per writer thread beyond write_contention_threads (XPBuffer and iMC \
         contention); 0.112 puts 8 writers at 1 / (1 + 4 x 0.112) = 69% of the peak, as seed 000 measures; \
         beyond 8 the seed says only that bandwidth keeps falling, so the linear growth there is a choice",
    )
    .min(0.0)
    .max(100.0),
    ParamSpec::new(
        "contention_window",
        ParamKind::Duration,
        "2us",
        "a CPU counts as a concurrent user of the DIMM while a request of it is outstanding and for \
         this long after its completion",
    )
    .min(1.0),
    ParamSpec::new(
        "remote_read_latency",
        ParamKind::Duration,
        "35ns",
        "added to reads from another socket: seed 000 measures remote random reads at 1.20x local \
         (305 -> 366 ns = 266 ns + the media read slowed by remote_bandwidth_factor, 65 ns, + 35 ns)",
    ),
    ParamSpec::new(
        "remote_buffer_read_latency",
        ParamKind::Duration,
        "123ns",
        "added on top of remote_read_latency to remote reads served from the XPBuffer: seed 000 \
         measures remote sequential reads (three of four XPBuffer hits) at 1.79x local but random ones at \
         1.20x, so remote reads keep little of the buffer's benefit; (366 + 3 x (124 + 35 + 123)) / 4 = \
         303 ns = 1.79 x 169 ns. The seed gives no cause",
    ),
    ParamSpec::new(
        "remote_ntstore_latency",
        ParamKind::Duration,
        "138ns",
        "added to remote ntstores: seed 000 measures 2.53x local (90 -> 228 ns)",
    ),
    ParamSpec::new(
        "remote_clwb_latency",
        ParamKind::Duration,
        "42ns",
        "added to remote store + clwb: seed 000 measures 1.68x local (62 -> 104 ns)",
    ),
    ParamSpec::new(
        "remote_bandwidth_factor",
        ParamKind::Float,
        "0.6",
        "fraction of the media rate a single remote stream gets: seed 000 measures 59.2% (read) and \
         61.7% (write) of local at the best thread count",
    )
    .min(0.01)
    .max(1.0),
    ParamSpec::new(
        "remote_thread_penalty",
        ParamKind::Float,
        "0.05",
        "extra media time per concurrent remote thread beyond the first; seed 000 gives the shape (remote \
         bandwidth falls with threads) and the best remote / local bandwidth on 6 DIMMs, 59.2% read and \
         61.7% write; 0.05 gives 52% and 57% in `tiersim characterize` (0.25 gave 37% and 49%)",
    )
    .min(0.0)
    .max(100.0),
    ParamSpec::new(
        "remote_mix_penalty",
        ParamKind::Float,
        "2.0",
        "media time multiplier for remote requests while remote reads and writes mix on the DIMM; \
         shape from seed 000 (mixed remote traffic is the worst case), value a choice",
    )
    .min(1.0)
    .max(100.0),
    ParamSpec::new(
        "outlier_probability",
        ParamKind::Float,
        "0.0",
        "probability that a write takes outlier_latency longer; seed 000 measures 0.006% (6e-5) on hot \
         spots, cause unknown (wear levelling or thermal); off by default",
    )
    .min(0.0)
    .max(1.0),
    ParamSpec::new(
        "outlier_latency",
        ParamKind::Duration,
        "50us",
        "extra latency of an outlier write: seed 000's outliers exceed 50 us, two orders of magnitude above normal",
    ),
    ParamSpec::new("seed", ParamKind::Int, "1", "seed of the outlier draws").min(0.0),
];

pub const INFO: PluginInfo = PluginInfo {
    name: "pmem",
    summary: "Optane DC PMEM DIMM (App Direct): 256 B XPLines, 16 KiB XPBuffer with RMW, 6.6/2.3 GB/s media, \
              write contention, remote penalties, optional write outliers",
    source: "Yang et al., An Empirical Guide to the Behavior and Use of Scalable Persistent Memory (FAST'20), \
             reference seed 000",
    params: SPECS,
};

pub fn build(p: &Params) -> Result<Box<dyn Device>> {
    Ok(Box::new(Pmem::from_params(p)?))
}

const NIL: u32 = u32::MAX;

/// The XPBuffer: resident XPLines with a dirty mask of host lines each and the time their media
/// fill ends, in recency (LRU) or insertion (FIFO) order on an intrusive list so that hits and
/// evictions are O(1).
#[derive(Debug, Clone)]
struct XpBuffer {
    map: FxHashMap<u64, u32>,
    tag: Vec<u64>,
    dirty: Vec<u64>,
    /// When the line's media read ends (0 for a line allocated by a write, which needs none).
    filled: Vec<Ps>,
    prev: Vec<u32>,
    next: Vec<u32>,
    /// Most recently inserted (or used, for LRU).
    head: u32,
    /// The next victim.
    tail: u32,
    capacity: u32,
    lru: bool,
}

/// A line pushed out of the XPBuffer with its dirty mask.
struct Victim {
    dirty: u64,
}

impl XpBuffer {
    fn new(capacity: u32, lru: bool) -> Self {
        let mut map = FxHashMap::default();
        map.reserve(capacity as usize);
        XpBuffer {
            map,
            tag: Vec::with_capacity(capacity as usize),
            dirty: Vec::with_capacity(capacity as usize),
            filled: Vec::with_capacity(capacity as usize),
            prev: Vec::with_capacity(capacity as usize),
            next: Vec::with_capacity(capacity as usize),
            head: NIL,
            tail: NIL,
            capacity,
            lru,
        }
    }

    fn unlink(&mut self, s: u32) {
        let (p, n) = (self.prev[s as usize], self.next[s as usize]);
        if p == NIL {
            self.head = n
        } else {
            self.next[p as usize] = n
        }
        if n == NIL {
            self.tail = p
        } else {
            self.prev[n as usize] = p
        }
    }

    fn push_front(&mut self, s: u32) {
        self.prev[s as usize] = NIL;
        self.next[s as usize] = self.head;
        if self.head != NIL {
            self.prev[self.head as usize] = s;
        }
        self.head = s;
        if self.tail == NIL {
            self.tail = s;
        }
    }

    /// The slot holding `line`, refreshed in LRU order.
    #[inline]
    fn lookup(&mut self, line: u64) -> Option<u32> {
        let s = *self.map.get(&line)?;
        if self.lru && self.head != s {
            self.unlink(s);
            self.push_front(s);
        }
        Some(s)
    }

    /// Make `line` resident and clean; returns its slot and the line it displaced, if any.
    #[inline]
    fn insert(&mut self, line: u64) -> (u32, Option<Victim>) {
        if (self.tag.len() as u32) < self.capacity {
            let s = self.tag.len() as u32;
            self.tag.push(line);
            self.dirty.push(0);
            self.filled.push(0);
            self.prev.push(NIL);
            self.next.push(NIL);
            self.push_front(s);
            self.map.insert(line, s);
            return (s, None);
        }
        let s = self.tail;
        self.map.remove(&self.tag[s as usize]);
        let victim = Victim { dirty: self.dirty[s as usize] };
        self.unlink(s);
        self.push_front(s);
        self.tag[s as usize] = line;
        self.dirty[s as usize] = 0;
        self.filled[s as usize] = 0;
        self.map.insert(line, s);
        (s, Some(victim))
    }
}

/// A CPU recently seen by the DIMM, for contention and remote-mixing effects. Each stamp is
/// (the later of the issue and the completion of the CPU's latest request of that kind) + 1, so a
/// CPU counts as a user while a request of it is outstanding and for the window after.
#[derive(Debug, Clone, Copy)]
struct Seen {
    cpu: u32,
    last: Ps,
    wrote: Ps,
    remote_read: Ps,
    remote_write: Ps,
}

/// At most this many CPUs are tracked; beyond it the stalest entry is replaced, which can only
/// undercount heavy sharing (more than 256 threads on one DIMM).
const MAX_TRACKED: usize = 256;

/// Concurrency seen at one request.
#[derive(Debug, Clone, Copy, Default)]
struct Concurrency {
    writers: u32,
    remote_threads: u32,
    remote_mixed: bool,
}

pub struct Pmem {
    buffer: XpBuffer,
    line_shift: u32,
    host_shift: u32,
    /// Dirty mask of a fully written XPLine.
    full: u64,
    host_line: u64,
    xpline: u64,
    /// Shared media server: reads and writes of one DIMM use the same 3D-XPoint media.
    media_busy_until: Ps,
    media_busy: Ps,
    /// A write request larger than the XPBuffer is a stream its CPU issues line by line (the
    /// pmem block driver's memcpy_flushcache, a DAX copy): where the last such stream's media
    /// work ends (0 if none pending), its CPU, and the media time the buffer holds posted ahead
    /// of a read (`xpbuffer_size` of writes). Reads from other CPUs that went ahead of the
    /// stream's unissued lines are served from `bypass_until` on, one after another.
    stream_until: Ps,
    stream_cpu: u32,
    posted_ahead: Ps,
    bypass_until: Ps,
    bypassing_reads: u64,
    read_service: Ps,
    write_service: Ps,
    read_latency: Ps,
    buffer_read_latency: Ps,
    clwb: bool,
    write_latency: Ps,
    remote_read_latency: Ps,
    remote_buffer_read_latency: Ps,
    remote_write_latency: Ps,
    contention_threads: u32,
    contention_penalty: f64,
    window: Ps,
    remote_factor: f64,
    remote_thread_penalty: f64,
    remote_mix_penalty: f64,
    outlier_probability: f64,
    outlier_latency: Ps,
    rng: ChaCha8Rng,
    seen: Vec<Seen>,
    read_bandwidth: f64,
    // statistics
    reads: u64,
    writes: u64,
    bytes_read: u64,
    bytes_written: u64,
    buffer_read_hits: u64,
    buffer_write_hits: u64,
    media_reads: u64,
    media_writes: u64,
    rmw: u64,
    rfo_reads: u64,
    outliers: u64,
    contended_writes: u64,
}

fn pow2_shift(p: &Params, key: &str) -> Result<u32> {
    let v = p.bytes(key);
    if !v.is_power_of_two() {
        return Err(Error::config(key, format!("{v}B is not a power of two")));
    }
    Ok(v.trailing_zeros())
}

impl Pmem {
    pub fn from_params(p: &Params) -> Result<Self> {
        let line_shift = pow2_shift(p, "xpline")?;
        let host_shift = pow2_shift(p, "host_line")?;
        if host_shift > line_shift {
            return Err(Error::config(
                "host_line",
                format!("{}B is larger than the xpline ({}B)", 1u64 << host_shift, 1u64 << line_shift),
            ));
        }
        let subs = 1u32 << (line_shift - host_shift);
        if subs > 64 {
            return Err(Error::config(
                "host_line",
                format!("an xpline holds {subs} host lines; at most 64 are supported"),
            ));
        }
        let size = p.bytes("xpbuffer_size");
        if !size.is_multiple_of(1u64 << line_shift) {
            return Err(Error::config(
                "xpbuffer_size",
                format!("{size}B is not a whole number of {}B xplines", 1u64 << line_shift),
            ));
        }
        let lines = size >> line_shift;
        if lines == 0 {
            return Err(Error::config("xpbuffer_size", format!("{size}B holds no {}B xpline", 1u64 << line_shift)));
        }
        let xpline = 1u64 << line_shift;
        let clwb = p.str("store_kind") == "clwb";
        let (wl, rwl) =
            if clwb { ("clwb_latency", "remote_clwb_latency") } else { ("ntstore_latency", "remote_ntstore_latency") };
        let seed = p.int("seed").max(0) as u64;
        Ok(Pmem {
            buffer: XpBuffer::new(lines as u32, p.str("xpbuffer_policy") == "lru"),
            line_shift,
            host_shift,
            full: if subs == 64 { u64::MAX } else { (1u64 << subs) - 1 },
            host_line: 1 << host_shift,
            xpline,
            media_busy_until: 0,
            media_busy: 0,
            stream_until: 0,
            stream_cpu: 0,
            posted_ahead: Pipe::new(p.bandwidth("media_write_bandwidth")).service(xpline) * lines,
            bypass_until: 0,
            bypassing_reads: 0,
            read_service: Pipe::new(p.bandwidth("media_read_bandwidth")).service(xpline),
            write_service: Pipe::new(p.bandwidth("media_write_bandwidth")).service(xpline),
            read_latency: ps_from_ns(p.duration("read_latency")),
            buffer_read_latency: ps_from_ns(p.duration("buffer_read_latency")),
            clwb,
            write_latency: ps_from_ns(p.duration(wl)),
            remote_read_latency: ps_from_ns(p.duration("remote_read_latency")),
            remote_buffer_read_latency: ps_from_ns(p.duration("remote_buffer_read_latency")),
            remote_write_latency: ps_from_ns(p.duration(rwl)),
            contention_threads: p.uint("write_contention_threads").min(u64::from(u32::MAX)) as u32,
            contention_penalty: p.float("write_contention_penalty"),
            window: ps_from_ns(p.duration("contention_window")),
            remote_factor: 1.0 / p.float("remote_bandwidth_factor"),
            remote_thread_penalty: p.float("remote_thread_penalty"),
            remote_mix_penalty: p.float("remote_mix_penalty"),
            outlier_probability: p.float("outlier_probability"),
            outlier_latency: ps_from_ns(p.duration("outlier_latency")),
            rng: ChaCha8Rng::seed_from_u64(seed),
            seen: Vec::new(),
            read_bandwidth: p.bandwidth("media_read_bandwidth"),
            reads: 0,
            writes: 0,
            bytes_read: 0,
            bytes_written: 0,
            buffer_read_hits: 0,
            buffer_write_hits: 0,
            media_reads: 0,
            media_writes: 0,
            rmw: 0,
            rfo_reads: 0,
            outliers: 0,
            contended_writes: 0,
        })
    }

    /// Record `req`'s CPU and count the CPUs active within the window; returns the CPU's entry.
    fn observe(&mut self, at: Ps, req: &DeviceRequest) -> (usize, Concurrency) {
        let write = req.op.is_write();
        let i = match self.seen.iter().position(|s| s.cpu == req.cpu) {
            Some(i) => i,
            None if self.seen.len() < MAX_TRACKED => {
                self.seen.push(Seen { cpu: req.cpu, last: 0, wrote: 0, remote_read: 0, remote_write: 0 });
                self.seen.len() - 1
            }
            None => {
                let i = self.seen.iter().enumerate().min_by_key(|(_, s)| s.last).map_or(0, |(i, _)| i);
                self.seen[i] = Seen { cpu: req.cpu, last: 0, wrote: 0, remote_read: 0, remote_write: 0 };
                i
            }
        };
        self.stamp(i, req, at);
        if self.seen.len() == 1 && !req.remote {
            return (i, Concurrency { writers: u32::from(write), ..Concurrency::default() });
        }
        let since = at.saturating_add(1).saturating_sub(self.window);
        let mut c = Concurrency::default();
        let (mut rr, mut rw) = (false, false);
        for s in &self.seen {
            c.writers += u32::from(s.wrote > since);
            let (r, w) = (s.remote_read > since, s.remote_write > since);
            c.remote_threads += u32::from(r || w);
            rr |= r;
            rw |= w;
        }
        c.remote_mixed = rr && rw;
        (i, c)
    }

    /// Stamp entry `i` with `req` at time `t` (its issue, then its completion: a CPU whose
    /// requests wait in a backlog stays a user of the DIMM while it waits; counting from issue
    /// times only would let a slowed-down writer drop out of the window and undo its slowdown).
    fn stamp(&mut self, i: usize, req: &DeviceRequest, t: Ps) {
        // `t + 1` so that "seen at time 0" differs from "never seen".
        let stamp = t.saturating_add(1);
        let s = &mut self.seen[i];
        s.last = s.last.max(stamp);
        if req.op.is_write() {
            s.wrote = s.wrote.max(stamp);
        }
        if req.remote {
            if req.op.is_write() {
                s.remote_write = s.remote_write.max(stamp)
            } else {
                s.remote_read = s.remote_read.max(stamp)
            }
        }
    }

    /// Media time multiplier for this request: write contention, and remote-socket losses.
    fn slowdown(&self, req: &DeviceRequest, c: Concurrency) -> f64 {
        let mut f = 1.0;
        if req.op.is_write() && c.writers > self.contention_threads {
            f *= 1.0 + self.contention_penalty * f64::from(c.writers - self.contention_threads);
        }
        if req.remote {
            f *=
                self.remote_factor * (1.0 + self.remote_thread_penalty * f64::from(c.remote_threads.saturating_sub(1)));
            if c.remote_mixed {
                f *= self.remote_mix_penalty;
            }
        }
        f
    }

    /// Occupy the media for `service`; returns (start, end).
    #[inline]
    fn media(&mut self, at: Ps, service: Ps) -> (Ps, Ps) {
        let start = at.max(self.media_busy_until);
        let end = start.saturating_add(service);
        self.media_busy_until = end;
        self.media_busy = self.media_busy.saturating_add(service);
        (start, end)
    }

    #[inline]
    fn scaled(service: Ps, f: f64) -> Ps {
        if f == 1.0 {
            service
        } else {
            ((service as f64) * f).ceil() as Ps
        }
    }

    /// Write a displaced line back: a partly written line is first read from the media (RMW).
    /// Returns when the media starts on it (the buffer slot is then free), or `at` for a clean line.
    fn write_back(&mut self, at: Ps, victim: Option<Victim>, write_service: Ps, read_service: Ps) -> Ps {
        match victim {
            Some(v) if v.dirty != 0 => {
                let (start, t) = if v.dirty != self.full {
                    self.rmw += 1;
                    self.media_reads += 1;
                    self.media(at, read_service)
                } else {
                    (at.max(self.media_busy_until), at)
                };
                self.media_writes += 1;
                self.media(t, write_service);
                start
            }
            _ => at,
        }
    }

    /// Mask of host lines `first..=last` (host-line indices inside one XPLine).
    #[inline]
    fn mask(first: u32, last: u32) -> u64 {
        let width = last - first + 1;
        let ones = if width == 64 { u64::MAX } else { (1u64 << width) - 1 };
        ones << first
    }

    /// The XPBuffer's capacity in bytes.
    fn buffer_bytes(&self) -> u64 {
        u64::from(self.buffer.capacity) * self.xpline
    }

    /// Bytes written to the media so far.
    pub fn media_bytes_written(&self) -> u64 {
        self.media_writes * self.xpline
    }

    /// Bytes read from the media so far (demand misses, RMW and clwb line fills).
    pub fn media_bytes_read(&self) -> u64 {
        self.media_reads * self.xpline
    }

    /// Effective write ratio: bytes the iMC wrote / bytes written to the media (seed 000).
    /// Lines still dirty in the XPBuffer are not counted as written; None before any media write.
    pub fn ewr(&self) -> Option<f64> {
        (self.media_writes > 0).then(|| self.bytes_written as f64 / self.media_bytes_written() as f64)
    }
}

impl Device for Pmem {
    fn access(&mut self, req: &DeviceRequest) -> Ns {
        let at = ps_from_ns(req.now);
        let (who, c) = self.observe(at, req);
        let f = self.slowdown(req, c);
        let (read_service, write_service) = (Self::scaled(self.read_service, f), Self::scaled(self.write_service, f));
        let first = req.addr >> self.host_shift;
        let last = req.addr.saturating_add(u64::from(req.size.max(1)) - 1) >> self.host_shift;
        let sub_bits = self.line_shift - self.host_shift;
        let bytes = (last - first + 1).saturating_mul(self.host_line);
        let mut done = at;
        let mut line = first >> sub_bits;
        let last_line = last >> sub_bits;
        let sub_mask = (1u64 << sub_bits) - 1;
        match req.op {
            Op::Read => {
                self.reads += 1;
                self.bytes_read = self.bytes_read.saturating_add(bytes);
                let (extra, hit_extra) =
                    if req.remote { (self.remote_read_latency, self.remote_buffer_read_latency) } else { (0, 0) };
                // Behind another CPU's write stream, a read waits for the writes the module
                // holds posted (at most the XPBuffer's worth), not for the lines the writer has
                // yet to issue: its media reads go between the stream's lines, which end that much
                // later. Deviation: the writer's own completion, returned when it was booked, does
                // not move.
                let mut bypass = (self.stream_until > 0
                    && self.media_busy_until == self.stream_until
                    && req.cpu != self.stream_cpu
                    && at.saturating_add(self.posted_ahead) < self.stream_until)
                    .then(|| (at + self.posted_ahead).max(self.bypass_until));
                if bypass.is_some() {
                    self.bypassing_reads += 1;
                }
                loop {
                    let ready = if let Some(s) = self.buffer.lookup(line) {
                        self.buffer_read_hits += 1;
                        // A fill lands in the buffer read_latency - buffer_read_latency after its
                        // media read; a hit on a line still being filled waits for it (requests
                        // stream in line by line, so the next lines of a miss arrive meanwhile).
                        (at + self.buffer_read_latency + hit_extra)
                            .max(self.buffer.filled[s as usize] + self.read_latency)
                    } else {
                        // The demand read goes first; the line it displaces is written back after.
                        self.media_reads += 1;
                        let end = match bypass.as_mut() {
                            Some(cursor) => {
                                *cursor += read_service;
                                self.media_busy_until = self.media_busy_until.saturating_add(read_service);
                                self.stream_until = self.media_busy_until;
                                self.media_busy = self.media_busy.saturating_add(read_service);
                                self.bypass_until = *cursor;
                                *cursor
                            }
                            None => self.media(at, read_service).1,
                        };
                        let (s, victim) = self.buffer.insert(line);
                        self.buffer.filled[s as usize] = end;
                        self.write_back(end, victim, write_service, read_service);
                        end + self.read_latency
                    };
                    done = done.max(ready + extra);
                    if line >= last_line {
                        break;
                    }
                    line += 1;
                }
            }
            Op::Write => {
                self.writes += 1;
                self.bytes_written = self.bytes_written.saturating_add(bytes);
                if c.writers > self.contention_threads {
                    self.contended_writes += 1;
                }
                // A write completes once in the ADR domain, unless the media it must drain to is
                // backlogged: then it waits until its media work starts (a full write queue).
                let mut drain = at;
                loop {
                    let lo = if line == first >> sub_bits { (first & sub_mask) as u32 } else { 0 };
                    let hi = if line == last_line { (last & sub_mask) as u32 } else { sub_mask as u32 };
                    let slot = match self.buffer.lookup(line) {
                        Some(s) => {
                            self.buffer_write_hits += 1;
                            s
                        }
                        None => {
                            let (s, victim) = self.buffer.insert(line);
                            drain = drain.max(self.write_back(at, victim, write_service, read_service));
                            if self.clwb {
                                // The CPU's read-for-ownership before the store: media bandwidth
                                // the store's own latency does not include (the line is cached).
                                self.rfo_reads += 1;
                                self.media_reads += 1;
                                self.buffer.filled[s as usize] = self.media(at, read_service).1;
                            }
                            s
                        }
                    };
                    let d = &mut self.buffer.dirty[slot as usize];
                    *d |= Self::mask(lo, hi);
                    if *d == self.full {
                        // A complete XPLine goes to the media whole, without a read.
                        *d = 0;
                        self.media_writes += 1;
                        drain = drain.max(self.media(at, write_service).0);
                    }
                    if line >= last_line {
                        break;
                    }
                    line += 1;
                }
                if bytes > self.buffer_bytes() {
                    (self.stream_until, self.stream_cpu) = (self.media_busy_until, req.cpu);
                } else if self.media_busy_until != self.stream_until {
                    self.stream_until = 0;
                }
                let extra = if req.remote { self.remote_write_latency } else { 0 };
                done = drain + self.write_latency + extra;
                if self.outlier_probability > 0.0 && self.rng.gen::<f64>() < self.outlier_probability {
                    self.outliers += 1;
                    done = done.saturating_add(self.outlier_latency);
                }
            }
        }
        self.stamp(who, req, done);
        completion(req.now, done)
    }

    fn idle_latency(&self, op: Op, size: u32) -> Ns {
        let size = u64::from(size.max(1));
        let lines = (size - 1) / self.xpline + 1;
        ns_from_ps(match op {
            Op::Read => self.read_service * lines + self.read_latency,
            // At address 0 every whole XPLine is written to the media as soon as it is complete
            // (after its clwb line fill); the write waits for the last of them to start.
            Op::Write => {
                let whole = size / self.xpline;
                let rfo = if self.clwb { self.read_service } else { 0 };
                let drain = if whole == 0 { 0 } else { whole * rfo + (whole - 1) * self.write_service };
                drain + self.write_latency
            }
        })
    }

    fn peak_bandwidth(&self) -> f64 {
        self.read_bandwidth
    }

    fn stats(&self) -> serde_json::Value {
        let mut out = json!({
            "device": "pmem",
            "reads": self.reads,
            "writes": self.writes,
            "bytes_read": self.bytes_read,
            "bytes_written": self.bytes_written,
            "buffer_read_hits": self.buffer_read_hits,
            "buffer_write_hits": self.buffer_write_hits,
            "media_bytes_read": self.media_bytes_read(),
            "media_bytes_written": self.media_bytes_written(),
            "rmw": self.rmw,
            "rfo_reads": self.rfo_reads,
            "ewr": self.ewr(),
            "contended_writes": self.contended_writes,
            "outliers": self.outliers,
            "media_busy_ns": ns_f64(self.media_busy),
        });
        // Only when it happened: a run without such reads reports what it did before the rule.
        if self.bypassing_reads > 0 {
            out["reads_past_write_streams"] = self.bypassing_reads.into();
        }
        out
    }
}
