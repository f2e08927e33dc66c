//! CXL-attached flash (reference seed 004: Yang et al., "Overcoming the Memory Wall with
//! CXL-Enabled SSDs", USENIX ATC 2023, and its simulator MQSim_CXL, see
//! reference/cxl_flash_mqsim.md). A request crosses a CXL link (round-trip latency plus one FCFS
//! pipe per direction), then the controller accepts requests in order and serves each line:
//!
//! - hit in the device DRAM cache: a DRAM access (channels with queues, `dram::ChannelGroup`);
//! - hit under miss: the line is being read from flash; the request merges into its MSHR row
//!   and completes when the data arrives (from the fill buffer, no DRAM read on the way);
//! - miss: a flash read of the line's mapping unit (`flash`, `ftl`) into a new MSHR row; when it
//!   arrives the line is filled into the cache, evicting a victim that is written back to flash
//!   if dirty. The prefetcher may add reads of other lines.
//!
//! Back-pressure: a request that needs an MSHR row (or an entry in a full row, or write-buffer
//! room for the eviction it may cause) when none is free waits, and the requests behind it wait
//! too (in-order acceptance, as MQSim_CXL stops its host feed); the wait is part of their latency
//! (MQSim_CXL drops it, its B12). Writes that miss are acknowledged once their data sits in the
//! MSHR row (`write_ack = "accept"`) or when the fill completes (`"fill"`, MQSim_CXL's behaviour).
//!
//! Timing is computed when a request arrives, in arrival order: MSHR rows retire (fill, evict,
//! write back) when a later request arrives after their data is ready. (In compat mode a flash
//! read's completion is fixed later, when its die gets the channel: compat.rs, tsu.rs.) Link and DRAM bandwidth
//! used by data arriving later (fills, responses to misses) is charged when it arrives, so that
//! it delays requests behind it but a miss's own response does not queue on the link.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use tiersim_core::{Error, Ns, Op, ParamKind, ParamSpec, Params, PluginInfo, Result};

use crate::dram::{channel_specs, ChannelGroup};
use crate::pipe::{completion, ns_from_ps, ps_from_ns, Pipe, Ps};
use crate::{Device, DeviceRequest};

/// The constant lists a plugin registry of this device contributes: `NAMES` (for the
/// parameter's choices), and `PARAM_COUNT` / `PARAMS`, every plugin's parameters in registry
/// order (they join the device's flat parameter list).
macro_rules! registry_lists {
    ($reg:ident) => {
        pub const NAMES: [&str; $reg.len()] = {
            let mut names = [""; $reg.len()];
            let mut i = 0;
            while i < $reg.len() {
                names[i] = $reg[i].info.name;
                i += 1;
            }
            names
        };

        pub const PARAM_COUNT: usize = {
            let mut n = 0;
            let mut i = 0;
            while i < $reg.len() {
                n += $reg[i].info.params.len();
                i += 1;
            }
            n
        };

        pub const PARAMS: [tiersim_core::ParamSpec; PARAM_COUNT] = {
            let mut out = [super::PLACEHOLDER; PARAM_COUNT];
            let mut k = 0;
            let mut i = 0;
            while i < $reg.len() {
                let p = $reg[i].info.params;
                let mut j = 0;
                while j < p.len() {
                    out[k] = p[j];
                    k += 1;
                    j += 1;
                }
                i += 1;
            }
            out
        };
    };
}

pub mod cache;
pub mod flash;
pub mod ftl;
pub mod lpn_map;
pub mod metrics;
pub mod mshr;
pub mod prefetch;
pub mod replacement;

mod compat;
mod request;
mod summary;
mod tsu;

use cache::{Cache, PinOutcome};
use compat::{
    MqsimDram, MQSIM_PROGRAM_COMMAND_NS, MQSIM_PROGRAM_PLANE_NS, MQSIM_READ_COMMAND_NS, MQSIM_READ_PLANE_NS,
    MQSIM_READ_RB_DELAY_NS,
};
use flash::{Flash, Geometry, Timing};
use ftl::Ftl;
use metrics::{Class, Latency};
use mshr::Mshr;

/// Filler for the constant arrays the parameter lists are assembled in.
pub(crate) const PLACEHOLDER: ParamSpec = ParamSpec::new("", ParamKind::Bool, "false", "");

const BASE: &[ParamSpec] = channel_specs! {
    prefix: "dram_",
    extra: [
        ParamSpec::new("link_latency", ParamKind::Duration, "170ns",
            "round-trip latency of the CXL port, link and device controller (as the cxl device; \
             MQSim_CXL models none)"),
        ParamSpec::new("link_read_bandwidth", ParamKind::Bandwidth, "27GB/s",
            "device-to-host payload bandwidth (PCIe 5.0 x8 after flit overhead, as the cxl device)").min(1e6),
        ParamSpec::new("link_write_bandwidth", ParamKind::Bandwidth, "27GB/s", "host-to-device payload bandwidth").min(1e6),
        ParamSpec::new("link_header", ParamKind::Bytes, "16B",
            "link bytes of a message without data (read request, write completion)").max(4096.0),
        ParamSpec::new("cache_size", ParamKind::Bytes, "64MiB",
            "device DRAM cache; 0 = no cache, every access goes to flash (seed 004 §5: 64 MiB, §4: up to 8 GiB)"),
        ParamSpec::new("cache_line", ParamKind::Bytes, "4KiB",
            "cache line = flash mapping unit (power of two, 512B..64KiB); dirty and valid bits per 1/64 of it, \
             at least 64 B").min(512.0).max(65536.0),
        ParamSpec::new("cache_ways", ParamKind::Int, "16", "associativity; 0 = fully associative (seed 004 §5: 16)")
            .min(0.0).max(4294967295.0),
        ParamSpec::new("cache_index_hash", ParamKind::Bool, "false",
            "index sets by a hash of the line instead of line modulo sets (MQSim_CXL: modulo)"),
        ParamSpec::new("replacement", ParamKind::Str, "cflru", "replacement policy").choices(&replacement::NAMES),
        ParamSpec::new("write_allocate", ParamKind::Bool, "true",
            "a write miss allocates the line; false = the write is merged into the flash unit (read-modify-write) \
             without caching it"),
        ParamSpec::new("write_validate", ParamKind::Bool, "false",
            "a write miss allocates without reading flash, with per-sub-block valid bits; a later read of an \
             invalid part, or the eviction of a partly valid dirty line, reads flash (MQSim_CXL: fetch on write)"),
        ParamSpec::new("write_ack", ParamKind::Str, "accept",
            "when a write that misses completes: `accept` once its data is in the MSHR row, `fill` when the line \
             arrives (MQSim_CXL)").choices(&["accept", "fill"]),
        ParamSpec::new("mshr_rows", ParamKind::Int, "1024",
            "lines in flight from flash at once; 0 = no MSHR: misses never merge (MQSim_CXL: 1024)").min(0.0).max(16777216.0),
        ParamSpec::new("no_mshr_max_inflight", ParamKind::Int, "1048576",
            "with mshr_rows = 0, flash reads in flight at most: a bound on the model's memory, not a hardware \
             figure (arrivals far above the device's rate would otherwise hold a row per access of the trace); \
             past it a miss waits for the earliest read, counted in mshr.stall_rows").min(1.0).max(16777216.0),
        ParamSpec::new("mshr_entries", ParamKind::Int, "65", "requests one row holds, the first miss included (MQSim_CXL: 65)")
            .min(1.0).max(16777216.0),
        ParamSpec::new("write_buffer", ParamKind::Bytes, "4MiB",
            "written-back lines waiting for or in a flash program; a miss waits while it is full \
             (MQSim_CXL: 1024 queued 4 KiB flash operations)").min(1.0),
        ParamSpec::new("prefetcher", ParamKind::Str, "best_offset", "prefetcher (parameters: nl_*, fdp_*, bo_*, mbo_*, leap_*, mlp_*)")
            .choices(&prefetch::NAMES),
        ParamSpec::new("prefetch_max_inflight", ParamKind::Int, "768",
            "prefetch reads in flight at most (they also need a free MSHR row; MQSim_CXL: a 1024-entry queue)")
            .min(0.0).max(16777216.0),
        ParamSpec::new("pollution_filter", ParamKind::Int, "4096",
            "entries of the filter that remembers lines evicted by prefetches (Srinath et al.: 4096)").min(1.0).max(16777216.0),
        ParamSpec::new("flash_channels", ParamKind::Int, "8", "flash channels (seed 004 §5: 8; §4: 32)").min(1.0).max(1024.0),
        ParamSpec::new("flash_ways", ParamKind::Int, "8", "dies per channel (seed 004 §5: 8; §4: 32)").min(1.0).max(1024.0),
        ParamSpec::new("flash_planes", ParamKind::Int, "4", "planes per die (MQSim_CXL: 4)").min(1.0).max(64.0),
        ParamSpec::new("flash_blocks_per_plane", ParamKind::Int, "512", "blocks per plane (MQSim_CXL real-world: 512 = 1 TiB)")
            .min(4.0).max(1048576.0),
        ParamSpec::new("flash_pages_per_block", ParamKind::Int, "512", "pages per block (MQSim_CXL: 512)").min(1.0).max(65536.0),
        ParamSpec::new("flash_page_size", ParamKind::Bytes, "16KiB", "flash page (MQSim_CXL: 16 KiB)").min(512.0).max(1048576.0),
        ParamSpec::new("flash_channel_bandwidth", ParamKind::Bandwidth, "1.2GB/s",
            "channel transfer rate: 1200 MT/s on an 8-bit bus (MQSim_CXL's setting, which its B2 truncated to \
             infinite)").min(1e6),
        ParamSpec::new("flash_read_latency_us", ParamKind::FloatList, "[3]",
            "array read time per page type (LSB, CSB, MSB: page index modulo the list length), in us (ULL: 3)"),
        ParamSpec::new("flash_program_latency_us", ParamKind::FloatList, "[100]",
            "array program time per page type, in us (ULL: 100)"),
        ParamSpec::new("flash_erase_latency", ParamKind::Duration, "1ms", "block erase time (ULL: 1 ms)"),
        ParamSpec::new("flash_endurance", ParamKind::Int, "100000", "P/E cycles a block is rated for (SLC class: 100K)")
            .min(1.0),
        ParamSpec::new("overprovisioning", ParamKind::Float, "0.127",
            "fraction of the physical space hidden from the host (MQSim_CXL: 0.127)").min(0.0).max(0.9),
        ParamSpec::new("gc_threshold", ParamKind::Float, "0.01",
            "GC runs when a plane has at most this fraction of its blocks free, at least 2 (MQSim_CXL: 0.01)")
            .min(0.0).max(0.5),
        ParamSpec::new("hint_mode", ParamKind::Str, "prefetch",
            "what a host hint does: `prefetch` the line, `pin` it (prefetch and protect from eviction), or `off`")
            .choices(&["off", "prefetch", "pin"]),
        ParamSpec::new("hint_pin_share", ParamKind::Float, "0.5", "at most this fraction of a set's ways is pinned")
            .min(0.0).max(1.0),
        ParamSpec::new("hint_pin_full", ParamKind::Str, "refuse",
            "a pin request on a set whose pin quota is full: `refuse` it (pins are then never released), or \
             `replace_oldest`: unpin the set's least recently pinned line and pin this one")
            .choices(&["refuse", "replace_oldest"]),
        ParamSpec::new("seed", ParamKind::Int, "1", "seed of random replacement").min(0.0),
        ParamSpec::new("compat", ParamKind::Str, "none",
            "`mqsim_cxl`: reproduce MQSim_CXL's result-changing behaviours, its bugs included (no link, zero \
             flash transfer time, one 46 ns DRAM server, fetch-on-write acknowledged at fill, latency from \
             acceptance...; docs/cxl_flash.md lists each with its source line); `none`: the corrected model")
            .choices(&["none", "mqsim_cxl"]),
    ],
    channels: "1",
    channel_bandwidth: "25.6GB/s",
    efficiency: "0.85",
    read_latency: "44ns",
    write_latency: "44ns",
    interleave: "4KiB",
    burst: "64B",
    write_cost: "1",
};

const N_SPECS: usize = BASE.len() + replacement::PARAM_COUNT + prefetch::PARAM_COUNT;

const ALL_SPECS: [ParamSpec; N_SPECS] = {
    let mut out = [PLACEHOLDER; N_SPECS];
    let mut k = 0;
    while k < BASE.len() {
        out[k] = BASE[k];
        k += 1;
    }
    let mut j = 0;
    while j < replacement::PARAM_COUNT {
        out[k] = replacement::PARAMS[j];
        k += 1;
        j += 1;
    }
    j = 0;
    while j < prefetch::PARAM_COUNT {
        out[k] = prefetch::PARAMS[j];
        k += 1;
        j += 1;
    }
    out
};

/// The device's parameters: its own, then every replacement policy's and every prefetcher's.
pub const SPECS: &[ParamSpec] = &ALL_SPECS;

pub const INFO: PluginInfo = PluginInfo {
    name: "cxl_flash",
    summary: "CXL-attached flash: link + DRAM cache (ways, replacement, write-back) + MSHRs + prefetcher + \
              channels x ways x planes flash + page-mapping FTL with GC; lifetime",
    source: "Yang et al., Overcoming the Memory Wall with CXL-Enabled SSDs, USENIX ATC 2023 (seed 004) and MQSim_CXL; \
             see reference/cxl_flash_mqsim.md for the reference's bugs fixed here",
    params: SPECS,
};

/// The registry's constructor, used where a device answers each access when it is issued (engine
/// runs, characterisation). Compat mode fixes a flash read's completion only when later requests
/// have arrived (tsu.rs), so it is refused here: it serves `flash replay` in open loop alone.
pub fn build(p: &Params) -> Result<Box<dyn Device>> {
    if p.str("compat") == "mqsim_cxl" {
        return Err(Error::config("compat", COMPAT_OPEN_LOOP_ONLY));
    }
    Ok(Box::new(CxlFlash::from_params(p)?))
}

/// Why compat mode runs only under an open-loop `flash replay`.
pub const COMPAT_OPEN_LOOP_ONLY: &str =
    "compat = \"mqsim_cxl\" works only with `tiersim flash replay` in open loop, as \
    MQSim_CXL replays its traces: a flash read's completion is known only once the requests after it have arrived \
    (its die forms its command when it gets the channel), so a caller that needs each completion at issue (an \
    engine run, a closed-loop replay) would be given a lower bound; use compat = \"none\" there";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HintMode {
    Off,
    Prefetch,
    Pin,
}

/// Device counters (requests and lines).
#[derive(Debug, Clone, Copy, Default)]
struct Counters {
    requests: u64,
    /// Requests and their bytes by direction, indexed by `is_write` (a branch on it would be
    /// mispredicted: reads and writes interleave at random).
    by_op: [u64; 2],
    bytes_by_op: [u64; 2],
    line_hits: u64,
    line_hits_under_miss: u64,
    line_misses: u64,
    /// Write misses allocated without a flash read (write_validate).
    write_validate_allocs: u64,
    flash_reads_demand: u64,
    flash_reads_prefetch: u64,
    /// Demand reads of a line already in flight (no MSHR to merge them).
    flash_reads_duplicate: u64,
    /// Flash reads to complete a partly valid line before it is written back.
    flash_reads_rmw: u64,
    write_buffer_hits: u64,
    evictions_clean: u64,
    evictions_dirty: u64,
    dirty_subblocks_evicted: u64,
    wrapped: u64,
    stall_mshr_rows: u64,
    stall_mshr_rows_ps: Ps,
    stall_mshr_entries: u64,
    stall_mshr_entries_ps: Ps,
    stall_write_buffer: u64,
    stall_write_buffer_ps: Ps,
    /// Requests that waited behind an earlier stalled one, and how long.
    stall_behind: u64,
    stall_behind_ps: Ps,
    prefetch_dropped: u64,
    prefetch_redundant: u64,
    prefetch_unused_evicted: u64,
    hints: u64,
    hint_prefetches: u64,
    hint_pins: u64,
    hint_pins_refused: u64,
    /// Pins that released the set's oldest pin (`hint_pin_full = "replace_oldest"`).
    hint_pins_replaced: u64,
}

/// Deferred responses by time: posted-write acknowledgements (issue time plus a constant, so in
/// order while writes are one size) queue in a FIFO; one that would break its order goes to a
/// heap. The earliest is the earlier of the two heads; `due` keeps its time.
struct Deferred {
    fifo: VecDeque<(Ps, u64)>,
    heap: BinaryHeap<Reverse<(Ps, u64)>>,
    /// Time of the earliest response, `Ps::MAX` when none: the row retirements ask whether a
    /// response comes before each row, and one field answers without looking at both queues
    /// and their emptiness (data-dependent branches on every call).
    due: Ps,
}

impl Default for Deferred {
    fn default() -> Deferred {
        Deferred { fifo: VecDeque::new(), heap: BinaryHeap::new(), due: Ps::MAX }
    }
}

impl Deferred {
    #[inline]
    fn push(&mut self, when: Ps, bytes: u64) {
        match self.fifo.back() {
            Some(&last) if last > (when, bytes) => self.heap.push(Reverse((when, bytes))),
            _ => self.fifo.push_back((when, bytes)),
        }
        self.due = self.due.min(when);
    }

    #[inline]
    fn peek(&self) -> Option<(Ps, u64)> {
        match (self.fifo.front(), self.heap.peek()) {
            (Some(&f), Some(&Reverse(h))) => Some(f.min(h)),
            (f, h) => f.copied().or(h.map(|r| r.0)),
        }
    }

    /// Remove `peek`'s response.
    #[inline]
    fn pop(&mut self) {
        match (self.fifo.front(), self.heap.peek()) {
            (Some(&f), Some(&Reverse(h))) if h < f => {
                self.heap.pop();
            }
            (Some(_), _) => {
                self.fifo.pop_front();
            }
            _ => {
                self.heap.pop();
            }
        }
        self.due = self.peek().map_or(Ps::MAX, |(when, _)| when);
    }
}

pub struct CxlFlash {
    h2d: Pipe,
    d2h: Pipe,
    link_latency: Ps,
    header: u64,
    link_read_bandwidth: f64,
    /// Responses of requests served later than they were computed, other than those waiting
    /// for an MSHR row (kept in the row): (time, bytes).
    deferred: Deferred,
    /// The MSHR row the last line's response waits for (set by misses and hits under miss).
    resp_row: Option<u32>,
    dram: ChannelGroup,
    cache: Option<Cache>,
    mshr: Mshr,
    flash: Flash,
    ftl: Ftl,
    prefetcher: Box<dyn Prefetcher>,
    prefetcher_name: String,
    proposals: Vec<u64>,
    line_shift: u32,
    sub_shift: u32,
    full_mask: u64,
    /// Lines (mapping units) the host can address.
    lines: u64,
    write_allocate: bool,
    write_validate: bool,
    ack_fill: bool,
    /// A completed read never finds its line cached: with MSHRs a line has one row at most and
    /// is not cached while it has one, unless write_validate cached part of it.
    fills_are_new: bool,
    /// (bytes, `dram.idle` of a write of them): the last posted write's acknowledgement delay.
    posted_memo: (u64, Ps),
    write_buffer_units: u64,
    prefetch_max: u32,
    pollution: Vec<u64>,
    hint_mode: HintMode,
    pin_max: u32,
    pin_replace: bool,
    accept_floor: Ps,
    endurance: u64,
    c: Counters,
    pf: prefetch::Counters,
    lat: Latency,
    first_issue: Option<Ns>,
    last_issue: Ns,
    last_completion: Ns,
    /// `compat = "mqsim_cxl"`: MQSim_CXL's single device-DRAM server and the events it still
    /// has to serve when their flash data arrives.
    mq: Option<MqsimDram>,
}

use prefetch::Prefetcher;

/// Slot of `line` in a table of `n` entries: Fibonacci hashing (the product's bits from `shift`
/// up), so that strided lines spread; a remainder by mask when `n` is a power of two, since a
/// division costs tens of cycles.
#[inline]
fn fib_slot(line: u64, shift: u32, n: usize) -> usize {
    let h = (line.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> shift) as usize;
    if n.is_power_of_two() {
        h & (n - 1)
    } else {
        h % n
    }
}

fn count_pin(c: &mut Counters, outcome: PinOutcome) {
    match outcome {
        PinOutcome::Pinned => c.hint_pins += 1,
        PinOutcome::Replaced => {
            c.hint_pins += 1;
            c.hint_pins_replaced += 1;
        }
        PinOutcome::Refused => c.hint_pins_refused += 1,
    }
}

fn pow2(p: &Params, key: &str) -> Result<u32> {
    let v = p.bytes(key);
    if !v.is_power_of_two() {
        return Err(Error::config(key, format!("{v}B is not a power of two")));
    }
    Ok(v.trailing_zeros())
}

fn latencies_us(p: &Params, key: &str) -> Result<Vec<Ps>> {
    let v = p.floats(key);
    if v.is_empty() || v.len() > 16 {
        return Err(Error::config(key, "give 1 to 16 latencies (one per page type)"));
    }
    v.iter()
        .map(|&us| {
            if us.is_finite() && us > 0.0 && us < 1e9 {
                Ok((us * 1e6).round() as Ps)
            } else {
                Err(Error::config(key, format!("{us} us is not a positive latency below 1e9 us")))
            }
        })
        .collect()
}

fn u32_param(p: &Params, key: &str) -> Result<u32> {
    u32::try_from(p.uint(key)).map_err(|_| Error::config(key, "too large"))
}

/// The device's shape from its parameters: what `from_params` checks first, and all that
/// `logical_bytes` needs.
struct Layout {
    line_shift: u32,
    geo: Geometry,
    /// Lines (mapping units) the host can address.
    logical: u64,
}

impl Layout {
    fn of(p: &Params) -> Result<Layout> {
        let line_shift = pow2(p, "cache_line")?;
        let line = 1u64 << line_shift;
        let page_shift = pow2(p, "flash_page_size")?;
        if page_shift < line_shift {
            return Err(Error::config(
                "flash_page_size",
                format!("{}B is smaller than cache_line {line}B (the mapping unit)", 1u64 << page_shift),
            ));
        }
        let geo = Geometry {
            channels: u32_param(p, "flash_channels")?,
            ways: u32_param(p, "flash_ways")?,
            planes: u32_param(p, "flash_planes")?,
            blocks_per_plane: u32_param(p, "flash_blocks_per_plane")?,
            pages_per_block: u32_param(p, "flash_pages_per_block")?,
            page_size: 1 << page_shift,
            unit: line,
            units_per_page: 1 << (page_shift - line_shift),
        };
        let physical = geo.physical_units();
        if physical >= u64::from(u32::MAX) {
            return Err(Error::config(
                "flash_blocks_per_plane",
                format!(
                    "the device has {physical} mapping units; at most 2^32 - 2 are supported (16 TiB of 4 KiB units)"
                ),
            ));
        }
        let op = p.float("overprovisioning");
        let logical = (physical as f64 * (1.0 - op)).floor() as u64;
        if logical == 0 {
            return Err(Error::config("overprovisioning", "leaves no logical space"));
        }
        Ok(Layout { line_shift, geo, logical })
    }
}

/// Bytes the host can address on a device with parameters `p` (`CxlFlash::logical_bytes`),
/// without building it.
pub fn logical_bytes(p: &Params) -> Result<u64> {
    Layout::of(p).map(|l| l.logical << l.line_shift)
}

impl CxlFlash {
    pub fn from_params(p: &Params) -> Result<CxlFlash> {
        let Layout { line_shift, geo, logical } = Layout::of(p)?;
        let line = 1u64 << line_shift;
        let compat = p.str("compat") == "mqsim_cxl";
        let mut read = latencies_us(p, "flash_read_latency_us")?;
        if compat {
            read.iter_mut().for_each(|r| *r += ps_from_ns(MQSIM_READ_RB_DELAY_NS));
        }
        let timing = Timing {
            read,
            program: latencies_us(p, "flash_program_latency_us")?,
            erase: ps_from_ns(p.duration("flash_erase_latency")),
            // ONFI_Channel_NVDDR2's default cycle times: a single-plane read command is
            // t_CS + 6 t_WC + t_WB + t_RR = 290 ns, a program command t_CS + 6 t_WC + t_ADL +
            // t_WPST + t_WPSTH + t_WB = 361 ns.
            read_command: if compat { ps_from_ns(MQSIM_READ_COMMAND_NS) } else { 0 },
            program_command: if compat { ps_from_ns(MQSIM_PROGRAM_COMMAND_NS) } else { 0 },
        };
        // MQSim_CXL's ONFI t_RC truncates to 0 ns above 1000 MT/s (B2): channels move data in no time.
        let channel_bandwidth = if compat { f64::INFINITY } else { p.bandwidth("flash_channel_bandwidth") };
        let tsu = compat.then(|| {
            tsu::Tsu::new(
                geo.channels,
                geo.ways,
                tsu::TsuTiming {
                    read_command: timing.read_command,
                    read_plane: ps_from_ns(MQSIM_READ_PLANE_NS),
                    program_command: timing.program_command,
                    program_plane: ps_from_ns(MQSIM_PROGRAM_PLANE_NS),
                    read: timing.read.clone(),
                    program: timing.program.clone(),
                },
            )
        });
        let flash = Flash::new(geo, timing, channel_bandwidth);
        let ftl = Ftl::new(&flash, logical, p.float("gc_threshold"));

        let cache_size = p.bytes("cache_size");
        if !cache_size.is_multiple_of(line) {
            return Err(Error::config("cache_size", format!("{cache_size}B is not a whole number of {line}B lines")));
        }
        let cache_lines = cache_size / line;
        let cache = if cache_lines == 0 {
            None
        } else {
            let ways = match p.uint("cache_ways") {
                0 => cache_lines,
                w => w,
            };
            if !cache_lines.is_multiple_of(ways) || ways > u64::from(u32::MAX) {
                return Err(Error::config(
                    "cache_ways",
                    format!("{ways} ways do not divide the cache's {cache_lines} lines"),
                ));
            }
            let shape = replacement::Shape { sets: (cache_lines / ways) as usize, ways: ways as u32 };
            let repl = (replacement::find(p.str("replacement"))?.build)(p, shape)?;
            Some(Cache::new(shape, p.bool("cache_index_hash"), repl))
        };
        // MQSim_CXL's write path: a write miss allocates and fetches the line.
        let write_allocate = compat || p.bool("write_allocate");
        let write_validate = !compat && p.bool("write_validate");
        if write_validate && !write_allocate {
            return Err(Error::config("write_validate", "needs write_allocate = true"));
        }
        let prefetcher_name = match p.str("prefetcher") {
            // MQSim_CXL's best-offset and Leap are its own algorithms (B11, B5).
            "best_offset" if compat => "best_offset_mqsim",
            "leap" if compat => "leap_mqsim",
            name => name,
        }
        .to_owned();
        let prefetcher = (prefetch::find(&prefetcher_name)?.build)(p)?;
        let sub_shift = line_shift.saturating_sub(6).max(6);
        let subs = 1u32 << (line_shift - sub_shift);
        let full_mask = if subs == 64 { u64::MAX } else { (1u64 << subs) - 1 };
        let dram = ChannelGroup::from_params(p, "dram_")?;
        let pin_max = cache.as_ref().map_or(0, |c| (p.float("hint_pin_share") * f64::from(c.ways)).floor() as u32);
        Ok(CxlFlash {
            h2d: Pipe::new(p.bandwidth("link_write_bandwidth")),
            d2h: Pipe::new(p.bandwidth("link_read_bandwidth")),
            link_latency: ps_from_ns(p.duration("link_latency")),
            header: p.bytes("link_header"),
            link_read_bandwidth: p.bandwidth("link_read_bandwidth"),
            deferred: Deferred::default(),
            resp_row: None,
            dram,
            cache,
            mshr: Mshr::new(
                u32_param(p, "mshr_rows")?,
                u32_param(p, "mshr_entries")?,
                u32_param(p, "no_mshr_max_inflight")?,
                geo.dies(),
            ),
            flash,
            ftl,
            prefetcher,
            prefetcher_name,
            proposals: Vec::new(),
            line_shift,
            sub_shift,
            full_mask,
            lines: logical,
            write_allocate,
            write_validate,
            ack_fill: compat || p.str("write_ack") == "fill",
            fills_are_new: u32_param(p, "mshr_rows")? > 0 && !write_validate,
            posted_memo: (u64::MAX, 0),
            write_buffer_units: (p.bytes("write_buffer") / line).max(1),
            prefetch_max: u32_param(p, "prefetch_max_inflight")?,
            pollution: vec![0; p.uint("pollution_filter") as usize],
            hint_mode: match p.str("hint_mode") {
                "off" => HintMode::Off,
                "pin" => HintMode::Pin,
                _ => HintMode::Prefetch,
            },
            pin_max,
            pin_replace: p.str("hint_pin_full") == "replace_oldest",
            accept_floor: 0,
            endurance: p.uint("flash_endurance"),
            c: Counters::default(),
            pf: prefetch::Counters::default(),
            lat: Latency::new(),
            first_issue: None,
            last_issue: 0,
            last_completion: 0,
            mq: tsu.map(MqsimDram::new),
        })
    }

    /// log2 of the cache line (the flash mapping unit).
    pub fn line_shift(&self) -> u32 {
        self.line_shift
    }

    /// Bytes the host can address.
    pub fn logical_bytes(&self) -> u64 {
        self.lines << self.line_shift
    }

    pub fn latency(&self) -> &Latency {
        &self.lat
    }

    /// Run the device until every request in flight has completed. In compat mode a flash
    /// read's completion depends on the requests after it (its die forms its command only when
    /// it gets the channel), so the latencies of requests still waiting are recorded only then:
    /// call this before `summary` once the last request has been issued. Without compat every
    /// latency is recorded at `access`, and this does nothing.
    pub fn is_compat(&self) -> bool {
        self.mq.is_some()
    }

    pub fn finish(&mut self) {
        if self.mq.is_some() {
            self.compat_retire_until(Ps::MAX);
        }
    }

    /// In compat mode, keep (request time, completion) of every request from now on, in the
    /// order their completions become known (`completions`).
    pub fn log_completions(&mut self) {
        if let Some(mq) = self.mq.as_mut() {
            mq.responses.log = Some(Vec::new());
        }
    }

    pub fn completions(&self) -> &[(Ns, Ns)] {
        self.mq.as_ref().and_then(|mq| mq.responses.log.as_deref()).unwrap_or(&[])
    }

    /// Host hint: the lines of `[addr, addr + size)` will be used soon.
    pub fn hint_at(&mut self, now: Ns, addr: u64, size: u64) {
        let t = ps_from_ns(now).max(self.accept_floor);
        self.retire_until(t);
        let first = addr >> self.line_shift;
        let last = addr.saturating_add(size.max(1) - 1) >> self.line_shift;
        for l in first..=last {
            self.c.hints += 1;
            let line = if l >= self.lines { l % self.lines } else { l };
            match self.hint_mode {
                HintMode::Off => {}
                HintMode::Prefetch => {
                    self.c.hint_prefetches += u64::from(self.prefetch(line, t, false));
                }
                HintMode::Pin => {
                    self.c.hint_prefetches += u64::from(self.prefetch(line, t, true));
                }
            }
        }
    }
}

impl Device for CxlFlash {
    fn access(&mut self, req: &DeviceRequest) -> Ns {
        let at = ps_from_ns(req.now);
        let size = u64::from(req.size.max(1));
        let write = req.op.is_write();
        let data = size.div_ceil(64) * 64;
        let (up, down) = if write { (data + self.header, self.header) } else { (self.header, data) };
        // MQSim_CXL delivers requests to the device with no link (CXL_PCIe.cpp calls
        // PCIe_Switch::Deliver_to_device directly).
        let arrive = if self.mq.is_some() { at } else { self.h2d.serve(at, up).1 };
        self.flash.prune(self.accept_floor);
        let behind = self.accept_floor.saturating_sub(arrive);
        if behind > 0 {
            self.c.stall_behind += 1;
            self.c.stall_behind_ps = self.c.stall_behind_ps.saturating_add(behind);
        }
        let mut addr = req.addr;
        let logical = self.logical_bytes();
        if addr >= logical || addr.saturating_add(size) > logical {
            // MQSim_CXL wraps addresses modulo the device's logical range; so do we, and count it.
            self.c.wrapped += 1;
            addr %= logical;
        }
        let last_byte = (addr + size - 1).min(logical - 1);
        let first_line = addr >> self.line_shift;
        let last_line = last_byte >> self.line_shift;
        let line_mask = (1u64 << self.line_shift) - 1;
        let mut done = arrive;
        let mut class = Class::Hit;
        self.resp_row = None;
        if self.mq.is_some() {
            self.compat_open(req.now);
        } else {
            // Should the line miss, its flash read looks up the FTL map after the row
            // retirements below: fetching the entry meanwhile hides a memory access.
            self.ftl.prefetch(first_line);
        }
        for line in first_line..=last_line {
            let lo = if line == first_line { addr & line_mask } else { 0 };
            let hi = if line == last_line { last_byte & line_mask } else { line_mask };
            let (d, c) = self.line_access(arrive, line, lo, hi, req.op);
            done = done.max(d);
            class = class.max(c);
        }
        let (end, start) = if self.mq.is_some() {
            // What waits for flash is recorded when it completes (`compat_record`); until then
            // the completion returned is the latest of the parts known.
            (completion(req.now, done), ns_from_ps(self.accept_floor).max(req.now))
        } else {
            let returned = if class == Class::Hit {
                self.d2h.serve(done, down).1
            } else {
                let row = self.resp_row.filter(|_| first_line == last_line).map(|r| self.mshr.row_mut(r));
                match row {
                    // `|`, not `||`: whether a row already holds a response is as random as the trace.
                    Some(row) if row.ready == done && ((row.resp_count == 0) | (row.resp_bytes == down)) => {
                        row.resp_bytes = down;
                        row.resp_count += 1;
                    }
                    _ => self.deferred.push(done, down),
                }
                done + self.d2h.service(down)
            };
            (completion(req.now, returned.saturating_add(self.link_latency)), req.now)
        };
        self.c.requests += 1;
        self.c.by_op[usize::from(write)] += 1;
        self.c.bytes_by_op[usize::from(write)] += size;
        if self.mq.is_some() {
            self.compat_close(start, class, done);
        } else {
            self.lat.record(end.saturating_sub(start), class);
            self.last_completion = self.last_completion.max(end);
        }
        self.first_issue.get_or_insert(req.now);
        self.last_issue = self.last_issue.max(req.now);
        end
    }

    fn idle_latency(&self, op: Op, size: u32) -> Ns {
        let data = u64::from(size.max(1)).div_ceil(64) * 64;
        let (up, down) = if op.is_write() { (data + self.header, self.header) } else { (self.header, data) };
        ns_from_ps(self.h2d.service(up) + self.dram.idle(op, size) + self.d2h.service(down) + self.link_latency)
    }

    fn peak_bandwidth(&self) -> f64 {
        self.link_read_bandwidth.min(self.dram.peak_bandwidth())
    }

    fn stats(&self) -> serde_json::Value {
        self.summary()
    }

    fn hint(&mut self, now: Ns, addr: u64, size: u64) {
        self.hint_at(now, addr, size);
    }

    fn accepts_hints(&self) -> bool {
        self.hint_mode != HintMode::Off
    }
}
