//! The native tiersim trace format, version 1.
//!
//! A file is a fixed 128-byte header, then the records region (a sequence of zstd frames whose
//! decompressed bytes are fixed-size records, as rows or byte planes: see frame_filter), then an
//! optional trailer of per-CPU access counts, then end of file. Every integer is little-endian.
//!
//! Header (offsets in bytes, see the `H_*` constants):
//!
//! | offset | size | field                                                                 |
//! |-------:|-----:|-----------------------------------------------------------------------|
//! |      0 |    8 | magic `b"TIERSIM\0"`                                                  |
//! |      8 |    2 | version (1)                                                           |
//! |     10 |    2 | record_layout (1: the 24-byte record below)                           |
//! |     12 |    2 | record_size (24)                                                      |
//! |     14 |    1 | time_unit: 0 ns absolute, 1 instructions since the same CPU's last access |
//! |     15 |    1 | addr_kind: 0 virtual, 1 physical                                      |
//! |     16 |    4 | page_size in bytes (power of two, at least 64)                        |
//! |     20 |    4 | flags: bit 0 set when the stats below and the trailer are complete    |
//! |     24 |    8 | records_end: offset where the records region ends (0 if unknown)      |
//! |     32 |    4 | n_cpus: entries in the trailer                                        |
//! |     36 |    1 | frame_filter: 0 none, 1 byte shuffle (see below)                      |
//! |     37 |    1 | v2p: how physical addresses were made: 0 not recorded, 1 pagemap, 2 buddy model |
//! |     38 |    2 | reserved, zero                                                        |
//! |     40 |    8 | accesses                                                              |
//! |     48 |    8 | reads                                                                 |
//! |     56 |    8 | writes                                                                |
//! |     64 |    8 | bytes (sum of access sizes)                                           |
//! |     72 |    8 | footprint_pages (distinct pages of page_size touched)                 |
//! |     80 |    8 | time_first                                                            |
//! |     88 |    8 | time_last                                                             |
//! |     96 |   32 | reserved, zero                                                        |
//!
//! Record, layout 1 (24 bytes, see the `R_*` constants): time u64, addr u64, cpu u32, size u16,
//! op u8 (0 read, 1 write), flags u8 (bit 0: file-backed page; other bits must be 0; traces written
//! before the bit existed hold 0 there, so they read as anonymous memory).
//!
//! Frame filter 1 (byte shuffle, the writer's default) stores each frame's records transposed:
//! for a frame of n records, the decompressed bytes are byte 0 of every record, then byte 1 of
//! every record, ..., then byte 23 of every record (24 planes of n bytes). Neighbouring records
//! share their high bytes, so the planes compress far better and decompress faster than rows.
//! A frame is unshuffled on its own, so with this filter every frame holds whole records. With
//! filter 0 the decompressed bytes of all frames are the records back to back, and a record may
//! straddle frames. Readers reject other filter values.
//!
//! The v2p byte was reserved (zero) before `tiersim capture` existed, so the version stayed 1:
//! older files read as "not recorded", and older readers ignore it. `tiersim capture` writes 1
//! (the frames of /proc/PID/pagemap) or 2 (its buddy-allocator model) into physical traces;
//! every other writer, and every virtual trace, writes 0.
//!
//! For ns traces `time_first`/`time_last` are the first and last timestamps. For instruction
//! traces the record times are per-CPU deltas, so `time_first` is 0 and `time_last` is the
//! largest per-CPU sum of deltas: the trace's length in instructions on its busiest CPU.
//!
//! The writer streams: records are compressed in frames of a bounded number of records, each
//! frame carrying its content size and a checksum, into a temporary file that is renamed over the
//! target only after the trailer and the completed header are written. A file whose header lacks
//! the complete flag (a writer that was interrupted, or another tool) is still readable: its
//! records region runs to end of file and its statistics come from a scan.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::mem::MaybeUninit;
use std::path::{Path, PathBuf};

use rustc_hash::FxHashSet;
use serde::{Deserialize, Serialize};
use tiersim_core::{Access, Error, Op, Result};
use zstd::zstd_safe::{self, CCtx, CParameter, DCtx, DParameter, InBuffer, OutBuffer};

use crate::AccessSource;

pub const MAGIC: [u8; 8] = *b"TIERSIM\0";
pub const VERSION: u16 = 1;
/// Versions this build reads.
pub const SUPPORTED_VERSIONS: &[u16] = &[1];
pub const RECORD_LAYOUT_V1: u16 = 1;
pub const RECORD_SIZE: usize = 24;
pub const HEADER_SIZE: usize = 128;
pub const FLAG_STATS_COMPLETE: u32 = 1;
/// CPUs are numbered below this; it bounds the trailer and the per-CPU tables of consumers.
pub const MAX_CPUS: u32 = 65536;
pub const MIN_PAGE_SIZE: u32 = 64;
/// Magic number opening every zstd frame, as it appears in the file.
pub const ZSTD_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];
pub const DEFAULT_LEVEL: i32 = 3;
pub const DEFAULT_FRAME_RECORDS: usize = 1 << 16;
/// Bounds a frame's decompressed size (24 MiB), which also bounds the decoder's window memory.
pub const MAX_FRAME_RECORDS: usize = 1 << 20;

pub const H_MAGIC: usize = 0;
pub const H_VERSION: usize = 8;
pub const H_RECORD_LAYOUT: usize = 10;
pub const H_RECORD_SIZE: usize = 12;
pub const H_TIME_UNIT: usize = 14;
pub const H_ADDR_KIND: usize = 15;
pub const H_PAGE_SIZE: usize = 16;
pub const H_FLAGS: usize = 20;
pub const H_RECORDS_END: usize = 24;
pub const H_N_CPUS: usize = 32;
pub const H_FRAME_FILTER: usize = 36;
pub const H_V2P: usize = 37;
pub const H_ACCESSES: usize = 40;
pub const H_READS: usize = 48;
pub const H_WRITES: usize = 56;
pub const H_BYTES: usize = 64;
pub const H_FOOTPRINT_PAGES: usize = 72;
pub const H_TIME_FIRST: usize = 80;
pub const H_TIME_LAST: usize = 88;

pub const R_TIME: usize = 0;
pub const R_ADDR: usize = 8;
pub const R_CPU: usize = 16;
pub const R_SIZE: usize = 20;
pub const R_OP: usize = 22;
pub const R_FLAGS: usize = 23;

pub const FRAME_FILTER_NONE: u8 = 0;
pub const FRAME_FILTER_SHUFFLE: u8 = 1;
/// Bounds a frame's decompressed size; a byte-shuffled frame is held whole in memory.
pub const MAX_FRAME_BYTES: usize = MAX_FRAME_RECORDS * RECORD_SIZE;

/// 2^25 bytes: enough for the largest frame a `TraceWriter` makes.
const WINDOW_LOG_MAX: u32 = 25;
const IN_BUF: usize = 4 << 20;
const OUT_BUF: usize = 4 << 20;
/// zstd skippable frames carry 0x184D2A50..=0x184D2A5F; the decoder skips them.
const SKIPPABLE_MAGIC_MASK: u32 = 0xFFFF_FFF0;
const SKIPPABLE_MAGIC: u32 = 0x184D_2A50;

/// What `time` means in a trace's records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TimeUnit {
    /// Absolute timestamps in ns, non-decreasing.
    Ns,
    /// Instructions executed by the same CPU since its previous access.
    Instructions,
}

impl TimeUnit {
    pub fn name(self) -> &'static str {
        match self {
            TimeUnit::Ns => "ns",
            TimeUnit::Instructions => "instructions",
        }
    }
    fn code(self) -> u8 {
        match self {
            TimeUnit::Ns => 0,
            TimeUnit::Instructions => 1,
        }
    }
    fn from_code(c: u8) -> Option<Self> {
        match c {
            0 => Some(TimeUnit::Ns),
            1 => Some(TimeUnit::Instructions),
            _ => None,
        }
    }
}

/// Whether a trace's addresses are virtual or physical.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AddrKind {
    Virtual,
    Physical,
}

impl AddrKind {
    pub fn name(self) -> &'static str {
        match self {
            AddrKind::Virtual => "virtual",
            AddrKind::Physical => "physical",
        }
    }
    fn code(self) -> u8 {
        match self {
            AddrKind::Virtual => 0,
            AddrKind::Physical => 1,
        }
    }
    fn from_code(c: u8) -> Option<Self> {
        match c {
            0 => Some(AddrKind::Virtual),
            1 => Some(AddrKind::Physical),
            _ => None,
        }
    }
}

/// How each frame's decompressed bytes are arranged (header offset 36).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FrameFilter {
    /// Records back to back.
    None,
    /// Byte planes: byte k of every record of the frame, for k in 0..24.
    Shuffle,
}

impl FrameFilter {
    pub fn name(self) -> &'static str {
        match self {
            FrameFilter::None => "none",
            FrameFilter::Shuffle => "shuffle",
        }
    }
    pub fn code(self) -> u8 {
        match self {
            FrameFilter::None => FRAME_FILTER_NONE,
            FrameFilter::Shuffle => FRAME_FILTER_SHUFFLE,
        }
    }
    pub fn from_code(c: u8) -> Option<Self> {
        match c {
            FRAME_FILTER_NONE => Some(FrameFilter::None),
            FRAME_FILTER_SHUFFLE => Some(FrameFilter::Shuffle),
            _ => None,
        }
    }
}

/// How a physical trace's addresses were obtained from the program's virtual ones (header
/// offset 37).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum V2p {
    /// Not recorded: generators, conversions, virtual traces, files from before the field.
    #[default]
    Unrecorded,
    /// Frame numbers read from /proc/PID/pagemap while the program ran.
    Pagemap,
    /// Frames handed out on first touch by a seeded buddy-allocator model.
    Buddy,
}

impl V2p {
    pub fn name(self) -> &'static str {
        match self {
            V2p::Unrecorded => "unrecorded",
            V2p::Pagemap => "pagemap",
            V2p::Buddy => "buddy",
        }
    }
    fn code(self) -> u8 {
        match self {
            V2p::Unrecorded => 0,
            V2p::Pagemap => 1,
            V2p::Buddy => 2,
        }
    }
    fn from_code(c: u8) -> Option<Self> {
        match c {
            0 => Some(V2p::Unrecorded),
            1 => Some(V2p::Pagemap),
            2 => Some(V2p::Buddy),
            _ => None,
        }
    }
}

/// Summary statistics of a trace (see the module doc for what the times mean).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TraceStats {
    pub accesses: u64,
    pub reads: u64,
    pub writes: u64,
    /// Sum of access sizes.
    pub bytes: u64,
    /// Distinct pages of the header's page size touched by any byte of any access.
    pub footprint_pages: u64,
    pub time_first: u64,
    pub time_last: u64,
    /// Accesses per CPU, indexed by CPU number; its length is the highest CPU + 1.
    pub per_cpu: Vec<u64>,
}

/// What a trace file says about itself.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TraceHeader {
    pub version: u16,
    pub record_layout: u16,
    pub time_unit: TimeUnit,
    pub addr_kind: AddrKind,
    pub page_size: u32,
    /// How physical addresses were made (`Unrecorded` unless a capture wrote them).
    pub v2p: V2p,
    /// `None` when the file's statistics are not marked complete.
    pub stats: Option<TraceStats>,
}

impl TraceHeader {
    /// The header of a version-1 trace with this metadata and no statistics yet.
    pub fn new(meta: &TraceMeta) -> TraceHeader {
        TraceHeader {
            version: VERSION,
            record_layout: RECORD_LAYOUT_V1,
            time_unit: meta.time_unit,
            addr_kind: meta.addr_kind,
            page_size: meta.page_size,
            v2p: V2p::Unrecorded,
            stats: None,
        }
    }
}

/// What a writer needs to know before the first record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TraceMeta {
    pub time_unit: TimeUnit,
    pub addr_kind: AddrKind,
    /// Bytes; a power of two, at least 64.
    pub page_size: u32,
}

/// Compression settings of a `TraceWriter`; they do not change what a reader sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriterOptions {
    /// zstd level (1..=22; 3 by default).
    pub level: i32,
    /// Records per zstd frame (1..=MAX_FRAME_RECORDS). Bounds the writer's memory and the
    /// reader's window.
    pub frame_records: usize,
    /// Byte-shuffle each frame (frame filter 1; true by default): smaller files, faster reads.
    pub shuffle: bool,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions { level: DEFAULT_LEVEL, frame_records: DEFAULT_FRAME_RECORDS, shuffle: true }
    }
}

#[inline(always)]
fn le_u16(b: &[u8], at: usize) -> u16 {
    let mut a = [0u8; 2];
    a.copy_from_slice(&b[at..at + 2]);
    u16::from_le_bytes(a)
}

#[inline(always)]
fn le_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

#[inline(always)]
fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect::<Vec<_>>().join(" ")
}

pub(crate) fn check_page_size(page_size: u32) -> std::result::Result<(), String> {
    if !page_size.is_power_of_two() {
        return Err(format!("page_size {page_size} is not a power of two"));
    }
    if page_size < MIN_PAGE_SIZE {
        return Err(format!("page_size {page_size} is below the minimum {MIN_PAGE_SIZE}"));
    }
    Ok(())
}

/// Accumulates `TraceStats` one access at a time (the writer, and `inspect` when it must scan).
pub(crate) struct StatsBuilder {
    time_unit: TimeUnit,
    page_shift: u32,
    stats: TraceStats,
    pages: FxHashSet<u64>,
    /// Per-CPU running instruction counts (instruction traces only).
    instr: Vec<u64>,
}

impl StatsBuilder {
    pub fn new(time_unit: TimeUnit, page_size: u32) -> StatsBuilder {
        StatsBuilder {
            time_unit,
            page_shift: page_size.max(1).trailing_zeros(),
            stats: TraceStats::default(),
            pages: FxHashSet::default(),
            instr: Vec::new(),
        }
    }

    /// `a.cpu` must be below `MAX_CPUS` (the writer and reader both check it).
    #[inline]
    pub fn add(&mut self, a: &Access) {
        let s = &mut self.stats;
        let cpu = a.cpu as usize;
        if cpu >= s.per_cpu.len() {
            s.per_cpu.resize(cpu + 1, 0);
        }
        s.per_cpu[cpu] += 1;
        s.accesses += 1;
        match a.op {
            Op::Read => s.reads += 1,
            Op::Write => s.writes += 1,
        }
        s.bytes = s.bytes.saturating_add(a.size as u64);
        match self.time_unit {
            TimeUnit::Ns => {
                if s.accesses == 1 {
                    s.time_first = a.time;
                }
                s.time_last = a.time;
            }
            TimeUnit::Instructions => {
                if cpu >= self.instr.len() {
                    self.instr.resize(cpu + 1, 0);
                }
                let t = self.instr[cpu].saturating_add(a.time);
                self.instr[cpu] = t;
                s.time_last = s.time_last.max(t);
            }
        }
        let first = a.addr >> self.page_shift;
        let last = a.addr.saturating_add((a.size as u64).max(1) - 1) >> self.page_shift;
        for p in first..=last {
            self.pages.insert(p);
        }
    }

    pub fn finish(mut self) -> TraceStats {
        self.stats.footprint_pages = self.pages.len() as u64;
        self.stats
    }
}

fn encode_header(
    meta: &TraceMeta,
    v2p: V2p,
    filter: FrameFilter,
    flags: u32,
    records_end: u64,
    stats: Option<&TraceStats>,
) -> [u8; HEADER_SIZE] {
    let mut h = [0u8; HEADER_SIZE];
    h[H_MAGIC..H_MAGIC + 8].copy_from_slice(&MAGIC);
    h[H_VERSION..H_VERSION + 2].copy_from_slice(&VERSION.to_le_bytes());
    h[H_RECORD_LAYOUT..H_RECORD_LAYOUT + 2].copy_from_slice(&RECORD_LAYOUT_V1.to_le_bytes());
    h[H_RECORD_SIZE..H_RECORD_SIZE + 2].copy_from_slice(&(RECORD_SIZE as u16).to_le_bytes());
    h[H_TIME_UNIT] = meta.time_unit.code();
    h[H_ADDR_KIND] = meta.addr_kind.code();
    h[H_PAGE_SIZE..H_PAGE_SIZE + 4].copy_from_slice(&meta.page_size.to_le_bytes());
    h[H_FLAGS..H_FLAGS + 4].copy_from_slice(&flags.to_le_bytes());
    h[H_RECORDS_END..H_RECORDS_END + 8].copy_from_slice(&records_end.to_le_bytes());
    h[H_FRAME_FILTER] = filter.code();
    h[H_V2P] = v2p.code();
    if let Some(s) = stats {
        h[H_N_CPUS..H_N_CPUS + 4].copy_from_slice(&(s.per_cpu.len() as u32).to_le_bytes());
        for (at, v) in [
            (H_ACCESSES, s.accesses),
            (H_READS, s.reads),
            (H_WRITES, s.writes),
            (H_BYTES, s.bytes),
            (H_FOOTPRINT_PAGES, s.footprint_pages),
            (H_TIME_FIRST, s.time_first),
            (H_TIME_LAST, s.time_last),
        ] {
            h[at..at + 8].copy_from_slice(&v.to_le_bytes());
        }
    }
    h
}

/// Records per block of the writer's shuffle: a block's rows (96 KiB) and its slice of every
/// plane stay in L2 while the 24 planes are walked.
const SHUFFLE_BLOCK: usize = 4096;

/// Rows of whole records into byte planes (frame filter 1).
fn shuffle(rows: &[u8], planes: &mut Vec<u8>) {
    let n = rows.len() / RECORD_SIZE;
    planes.clear();
    planes.resize(n * RECORD_SIZE, 0);
    if n == 0 {
        return;
    }
    for start in (0..n).step_by(SHUFFLE_BLOCK) {
        let end = (start + SHUFFLE_BLOCK).min(n);
        let block = &rows[start * RECORD_SIZE..end * RECORD_SIZE];
        for (k, plane) in planes.chunks_exact_mut(n).enumerate() {
            for (d, r) in plane[start..end].iter_mut().zip(block.chunks_exact(RECORD_SIZE)) {
                *d = r[k];
            }
        }
    }
}

/// The 24 bytes of record `j` of a shuffled frame of `n` records.
#[inline(always)]
fn gather1(planes: &[u8], n: usize, j: usize) -> [u8; RECORD_SIZE] {
    let mut r = [0u8; RECORD_SIZE];
    for (k, b) in r.iter_mut().enumerate() {
        *b = planes[k * n + j];
    }
    r
}

/// Records `first..first + dst.len()` of the shuffled frame `planes` into `dst`, read straight
/// from the planes, checked as `TraceReader::convert` checks rows. Returns whether every record
/// was good; only then is all of `dst` written.
fn unshuffle(
    planes: &[u8],
    first: usize,
    dst: &mut [MaybeUninit<Access>],
    cpu_limit: u32,
    ns: bool,
    prev: &mut u64,
) -> bool {
    // Two copies, so instruction traces pay nothing for the ns ordering check.
    if ns {
        unshuffle_as::<true>(planes, first, dst, cpu_limit, prev)
    } else {
        unshuffle_as::<false>(planes, first, dst, cpu_limit, prev)
    }
}

#[inline(always)]
fn unshuffle_as<const NS: bool>(
    planes: &[u8],
    first: usize,
    dst: &mut [MaybeUninit<Access>],
    cpu_limit: u32,
    prev: &mut u64,
) -> bool {
    let n = planes.len() / RECORD_SIZE;
    let mut done = 0;
    // Only the non-SIMD build keeps this initial value.
    #[cfg_attr(target_arch = "x86_64", allow(unused_assignments))]
    let mut ok = true;
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY (all three calls): SSE2 is part of the x86_64 baseline; `rows` bounds-checks its
        // loads and stores, and `Access` is laid out as a record row (asserted in `sse2`).
        let mut checks = unsafe { sse2::Checks::new(cpu_limit) };
        for chunk in dst.chunks_exact_mut(sse2::BLOCK) {
            unsafe { sse2::rows(planes, n, first + done, chunk, &mut checks) };
            done += sse2::BLOCK;
        }
        ok = unsafe { checks.passed() };
        if NS && ok {
            for slot in &dst[..done] {
                // SAFETY: `rows` wrote every slot in `..done`, and `checks` passed, so each is a
                // valid `Access` (an op byte of 0 or 1 is a valid `Op`: it is repr(u8) with those tags).
                let time = unsafe { slot.assume_init_ref() }.time;
                ok &= time >= *prev;
                *prev = time;
            }
        }
    }
    let mut p = *prev;
    for (j, slot) in dst.iter_mut().enumerate().skip(done) {
        let r = gather1(planes, n, first + j);
        let time = le_u64(&r, R_TIME);
        let cpu = le_u32(&r, R_CPU);
        let size = le_u16(&r, R_SIZE);
        let op = r[R_OP];
        let flags = r[R_FLAGS];
        ok &= (op <= 1) & (flags & !Access::KNOWN_FLAGS == 0) & (size != 0) & (cpu < cpu_limit) & (!NS | (time >= p));
        p = time;
        slot.write(Access { time, addr: le_u64(&r, R_ADDR), cpu, size, op: if op == 1 { Op::Write } else { Op::Read }, flags });
    }
    *prev = p;
    ok
}

/// Transposes records out of byte planes with SSE2 byte interleaves: three rounds (8-, 16-,
/// then 32-bit) turn 8 planes of 16 bytes into 16 little-endian u64 fields, which are then
/// stored as `Access` rows.
#[cfg(target_arch = "x86_64")]
mod sse2 {
    use std::arch::x86_64::*;
    use std::mem::{size_of, MaybeUninit};

    use tiersim_core::{Access, Op};

    /// Records per call of `rows`: one cache line of each plane. The planes of a frame whose
    /// record count is a multiple of 4096 all map to the same L1 sets, so each line must be
    /// used whole before the other planes evict it.
    pub(super) const BLOCK: usize = 64;

    // `Access` is repr(C) and `Op` repr(u8), so an `Access` is a record row: the SIMD path
    // stores record bytes straight into `Access` slots. Checked at compile time.
    const _: () = {
        assert!(size_of::<Access>() == super::RECORD_SIZE);
        assert!(std::mem::offset_of!(Access, time) == super::R_TIME);
        assert!(std::mem::offset_of!(Access, addr) == super::R_ADDR);
        assert!(std::mem::offset_of!(Access, cpu) == super::R_CPU);
        assert!(std::mem::offset_of!(Access, size) == super::R_SIZE);
        assert!(std::mem::offset_of!(Access, op) == super::R_OP);
        assert!(std::mem::offset_of!(Access, flags) == super::R_FLAGS);
        assert!(size_of::<Op>() == 1 && Op::Read as u8 == 0 && Op::Write as u8 == 1);
    };

    /// Field checks accumulated over many records, tested once at the end.
    pub(super) struct Checks {
        /// Largest op byte seen.
        op_max: __m128i,
        /// Flag bits seen, ORed.
        flags_or: __m128i,
        /// Nonzero bytes where a record had size 0.
        size_zero: __m128i,
        /// All ones while every cpu was below the limit.
        cpu_ok: __m128i,
        /// The CPU limit, biased by 2^31 so a signed compare orders u32s.
        limit: __m128i,
    }

    const BIAS: i32 = i32::MIN;

    impl Checks {
        #[inline(always)]
        pub(super) unsafe fn new(cpu_limit: u32) -> Checks {
            Checks {
                op_max: _mm_setzero_si128(),
                flags_or: _mm_setzero_si128(),
                size_zero: _mm_setzero_si128(),
                cpu_ok: _mm_set1_epi32(-1),
                limit: _mm_set1_epi32((cpu_limit as i32) ^ BIAS),
            }
        }

        #[inline(always)]
        pub(super) unsafe fn passed(&self) -> bool {
            let op_ok = _mm_cmpeq_epi8(_mm_min_epu8(self.op_max, _mm_set1_epi8(1)), self.op_max);
            let unknown = _mm_andnot_si128(_mm_set1_epi8(Access::KNOWN_FLAGS as i8), self.flags_or);
            _mm_movemask_epi8(op_ok) == 0xFFFF
                && _mm_movemask_epi8(_mm_cmpeq_epi8(unknown, _mm_setzero_si128())) == 0xFFFF
                && _mm_movemask_epi8(self.size_zero) == 0
                && _mm_movemask_epi8(self.cpu_ok) == 0xFFFF
        }
    }

    #[inline(always)]
    unsafe fn load(planes: &[u8], at: usize) -> __m128i {
        let s = &planes[at..at + 16];
        _mm_loadu_si128(s.as_ptr().cast())
    }

    #[inline(always)]
    unsafe fn planes8(planes: &[u8], n: usize, i: usize, k0: usize) -> [__m128i; 8] {
        std::array::from_fn(|k| load(planes, (k0 + k) * n + i))
    }

    /// The 8- and 16-bit rounds: of 8 planes of 16 records, `c[0..4]` hold bytes 0..4 of
    /// records 0..4, 4..8, 8..12, 12..16 as u32 lanes, and `c[4..8]` bytes 4..8 likewise.
    #[inline(always)]
    unsafe fn rounds8_16(a: &[__m128i; 8]) -> [__m128i; 8] {
        let b0 = _mm_unpacklo_epi8(a[0], a[1]);
        let b1 = _mm_unpackhi_epi8(a[0], a[1]);
        let b2 = _mm_unpacklo_epi8(a[2], a[3]);
        let b3 = _mm_unpackhi_epi8(a[2], a[3]);
        let b4 = _mm_unpacklo_epi8(a[4], a[5]);
        let b5 = _mm_unpackhi_epi8(a[4], a[5]);
        let b6 = _mm_unpacklo_epi8(a[6], a[7]);
        let b7 = _mm_unpackhi_epi8(a[6], a[7]);
        [
            _mm_unpacklo_epi16(b0, b2),
            _mm_unpackhi_epi16(b0, b2),
            _mm_unpacklo_epi16(b1, b3),
            _mm_unpackhi_epi16(b1, b3),
            _mm_unpacklo_epi16(b4, b6),
            _mm_unpackhi_epi16(b4, b6),
            _mm_unpacklo_epi16(b5, b7),
            _mm_unpackhi_epi16(b5, b7),
        ]
    }

    /// The 32-bit round: `d[x]` holds the u64 fields of records 2x and 2x + 1.
    #[inline(always)]
    unsafe fn round32(c: [__m128i; 8]) -> [__m128i; 8] {
        [
            _mm_unpacklo_epi32(c[0], c[4]),
            _mm_unpackhi_epi32(c[0], c[4]),
            _mm_unpacklo_epi32(c[1], c[5]),
            _mm_unpackhi_epi32(c[1], c[5]),
            _mm_unpacklo_epi32(c[2], c[6]),
            _mm_unpackhi_epi32(c[2], c[6]),
            _mm_unpacklo_epi32(c[3], c[7]),
            _mm_unpackhi_epi32(c[3], c[7]),
        ]
    }

    /// Store records `i..i + BLOCK` of a shuffled frame of `n` records as rows into `dst`
    /// (`BLOCK` long), adding their cpu, size and op to `checks`. The layout assertions make
    /// the rows `Access` values, and only `checks` passing makes their op bytes valid.
    #[inline(always)]
    pub(super) unsafe fn rows(planes: &[u8], n: usize, i: usize, dst: &mut [MaybeUninit<Access>], checks: &mut Checks) {
        let dst = &mut dst[..BLOCK];
        let out: *mut __m128i = dst.as_mut_ptr().cast();
        // Times and addresses of the whole block first, plane group by plane group (see BLOCK).
        let mut t = [[_mm_setzero_si128(); 8]; BLOCK / 16];
        let mut a = t;
        for (s, d) in t.iter_mut().enumerate() {
            *d = round32(rounds8_16(&planes8(planes, n, i + 16 * s, 0)));
        }
        for (s, d) in a.iter_mut().enumerate() {
            *d = round32(rounds8_16(&planes8(planes, n, i + 16 * s, 8)));
        }
        let bias = _mm_set1_epi32(BIAS);
        for s in 0..BLOCK / 16 {
            let p = planes8(planes, n, i + 16 * s, 16);
            checks.op_max = _mm_max_epu8(checks.op_max, p[6]);
            checks.flags_or = _mm_or_si128(checks.flags_or, p[7]);
            let size_zero = _mm_cmpeq_epi8(_mm_or_si128(p[4], p[5]), _mm_setzero_si128());
            checks.size_zero = _mm_or_si128(checks.size_zero, size_zero);
            let c = rounds8_16(&p);
            for cpu in &c[..4] {
                let below = _mm_cmpgt_epi32(checks.limit, _mm_xor_si128(*cpu, bias));
                checks.cpu_ok = _mm_and_si128(checks.cpu_ok, below);
            }
            let w = round32(c);
            for x in 0..8 {
                // Records 16s + 2x and 16s + 2x + 1 are 48 bytes: t0 a0 | w0 t1 | a1 w1.
                let (tv, av, wv) = (t[s][x], a[s][x], w[x]);
                let o = out.add((16 * s + 2 * x) / 2 * 3);
                _mm_storeu_si128(o, _mm_unpacklo_epi64(tv, av));
                _mm_storeu_si128(o.add(1), _mm_castpd_si128(_mm_shuffle_pd(_mm_castsi128_pd(wv), _mm_castsi128_pd(tv), 0b10)));
                _mm_storeu_si128(o.add(2), _mm_unpackhi_epi64(av, wv));
            }
        }
    }
}

/// Streams accesses into a trace file. Nothing appears at the target path until `finish`
/// succeeds; dropping an unfinished writer removes its temporary file.
pub struct TraceWriter {
    path: PathBuf,
    tmp_path: PathBuf,
    file: Option<File>,
    meta: TraceMeta,
    v2p: V2p,
    filter: FrameFilter,
    frame_records: usize,
    cctx: CCtx<'static>,
    frame: Vec<u8>,
    /// The frame's byte planes, when shuffling.
    planes: Vec<u8>,
    compressed: Vec<u8>,
    pos: u64,
    stats: StatsBuilder,
    prev_time: u64,
}

impl TraceWriter {
    /// Start a trace at `path` with default compression settings.
    pub fn create(path: &Path, meta: TraceMeta) -> Result<TraceWriter> {
        TraceWriter::create_with(path, meta, WriterOptions::default())
    }

    /// Start a trace at `path` with explicit compression settings.
    pub fn create_with(path: &Path, meta: TraceMeta, opts: WriterOptions) -> Result<TraceWriter> {
        check_page_size(meta.page_size).map_err(|m| Error::arg("page_size", m))?;
        let (lo, hi) = (1, zstd_safe::max_c_level());
        if !(lo..=hi).contains(&opts.level) {
            return Err(Error::arg("level", format!("zstd level {} is outside {lo}..={hi}", opts.level)));
        }
        if !(1..=MAX_FRAME_RECORDS).contains(&opts.frame_records) {
            return Err(Error::arg(
                "frame_records",
                format!("{} records per frame is outside 1..={MAX_FRAME_RECORDS}", opts.frame_records),
            ));
        }
        let name = path
            .file_name()
            .ok_or_else(|| Error::arg("path", format!("{} does not name a file", path.display())))?;
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(".tmp{}", std::process::id()));
        let tmp_path = path.with_file_name(tmp_name);
        let mut file = File::create(&tmp_path).map_err(|e| Error::io(&tmp_path, e))?;
        // A valid but incomplete header from the start: an interrupted file is still readable.
        let filter = if opts.shuffle { FrameFilter::Shuffle } else { FrameFilter::None };
        file.write_all(&encode_header(&meta, V2p::Unrecorded, filter, 0, 0, None)).map_err(|e| Error::io(&tmp_path, e))?;
        let mut cctx = CCtx::create();
        let zerr = |c: usize| Error::arg("level", format!("zstd: {}", zstd_safe::get_error_name(c)));
        cctx.set_parameter(CParameter::CompressionLevel(opts.level)).map_err(zerr)?;
        // Checksums let the reader tell corruption from valid data; they cost little to verify.
        cctx.set_parameter(CParameter::ChecksumFlag(true)).map_err(zerr)?;
        cctx.set_parameter(CParameter::ContentSizeFlag(true)).map_err(zerr)?;
        let frame_bytes = opts.frame_records * RECORD_SIZE;
        Ok(TraceWriter {
            path: path.to_owned(),
            tmp_path,
            file: Some(file),
            meta,
            v2p: V2p::Unrecorded,
            filter,
            frame_records: opts.frame_records,
            cctx,
            frame: Vec::with_capacity(frame_bytes),
            planes: Vec::with_capacity(if opts.shuffle { frame_bytes } else { 0 }),
            compressed: Vec::with_capacity(zstd_safe::compress_bound(frame_bytes)),
            pos: HEADER_SIZE as u64,
            stats: StatsBuilder::new(meta.time_unit, meta.page_size),
            prev_time: 0,
        })
    }

    /// Record in the header how the physical addresses were made (written by `finish`).
    pub fn set_v2p(&mut self, v2p: V2p) {
        self.v2p = v2p;
    }

    fn reject(&self, msg: String) -> Error {
        Error::arg("access", format!("record {} for {}: {msg}", self.stats.stats.accesses, self.path.display()))
    }

    /// Append one access. Rejects size 0, CPUs at or above `MAX_CPUS`, and (for ns traces)
    /// timestamps that go backwards.
    pub fn write(&mut self, a: &Access) -> Result<()> {
        if a.size == 0 {
            return Err(self.reject("size 0; every access moves at least one byte".into()));
        }
        if a.cpu >= MAX_CPUS {
            return Err(self.reject(format!("cpu {} is above the maximum {}", a.cpu, MAX_CPUS - 1)));
        }
        if self.meta.time_unit == TimeUnit::Ns {
            if a.time < self.prev_time {
                return Err(self.reject(format!(
                    "time {} ns is before the previous record's {} ns; ns traces must be sorted by time",
                    a.time, self.prev_time
                )));
            }
            self.prev_time = a.time;
        }
        self.stats.add(a);
        let mut r = [0u8; RECORD_SIZE];
        r[R_TIME..R_TIME + 8].copy_from_slice(&a.time.to_le_bytes());
        r[R_ADDR..R_ADDR + 8].copy_from_slice(&a.addr.to_le_bytes());
        r[R_CPU..R_CPU + 4].copy_from_slice(&a.cpu.to_le_bytes());
        r[R_SIZE..R_SIZE + 2].copy_from_slice(&a.size.to_le_bytes());
        r[R_OP] = a.op.is_write() as u8;
        r[R_FLAGS] = a.flags;
        self.frame.extend_from_slice(&r);
        if self.frame.len() >= self.frame_records * RECORD_SIZE {
            self.flush_frame()?;
        }
        Ok(())
    }

    /// Append a slice of accesses.
    pub fn write_all(&mut self, accesses: &[Access]) -> Result<()> {
        accesses.iter().try_for_each(|a| self.write(a))
    }

    fn flush_frame(&mut self) -> Result<()> {
        if self.frame.is_empty() {
            return Ok(());
        }
        self.compressed.clear();
        let src = match self.filter {
            FrameFilter::None => &self.frame,
            FrameFilter::Shuffle => {
                shuffle(&self.frame, &mut self.planes);
                &self.planes
            }
        };
        self.cctx.compress2(&mut self.compressed, src).map_err(|c| {
            Error::io(&self.tmp_path, std::io::Error::other(format!("zstd: {}", zstd_safe::get_error_name(c))))
        })?;
        let file = self.file.as_mut().ok_or_else(|| Error::Sim("trace writer used after finish".into()))?;
        file.write_all(&self.compressed).map_err(|e| Error::io(&self.tmp_path, e))?;
        self.pos += self.compressed.len() as u64;
        self.frame.clear();
        Ok(())
    }

    /// Write the last frame, the trailer and the complete header, then move the file into place.
    pub fn finish(mut self) -> Result<TraceStats> {
        let r = self.finish_inner();
        if r.is_err() {
            let _ = std::fs::remove_file(&self.tmp_path);
        }
        r
    }

    fn finish_inner(&mut self) -> Result<TraceStats> {
        self.flush_frame()?;
        let stats = std::mem::replace(&mut self.stats, StatsBuilder::new(self.meta.time_unit, self.meta.page_size)).finish();
        let records_end = self.pos;
        let header = encode_header(&self.meta, self.v2p, self.filter, FLAG_STATS_COMPLETE, records_end, Some(&stats));
        let mut file = self.file.take().ok_or_else(|| Error::Sim("trace writer used after finish".into()))?;
        let io = |e| Error::io(&self.tmp_path, e);
        let trailer: Vec<u8> = stats.per_cpu.iter().flat_map(|c| c.to_le_bytes()).collect();
        file.write_all(&trailer).map_err(io)?;
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        file.write_all(&header).map_err(io)?;
        file.sync_all().map_err(io)?;
        drop(file);
        std::fs::rename(&self.tmp_path, &self.path).map_err(|e| Error::io(&self.path, e))?;
        Ok(stats)
    }
}

impl Drop for TraceWriter {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            let _ = std::fs::remove_file(&self.tmp_path);
        }
    }
}

/// Streams accesses out of a trace file, in batches (`AccessSource`) or one at a time
/// (`Iterator`). After an error it yields nothing more.
pub struct TraceReader {
    path: PathBuf,
    file: File,
    header: TraceHeader,
    /// Records carry CPUs below this.
    cpu_limit: u32,
    region_end: u64,
    /// File offset of the next byte to read into `inbuf`.
    file_pos: u64,
    /// Read-ahead of the records region; `inbuf[in_pos..in_end]` is not yet decompressed. Its
    /// length stays `IN_BUF` so that refills need not zero it.
    inbuf: Vec<u8>,
    in_end: usize,
    in_pos: usize,
    dctx: DCtx<'static>,
    filter: FrameFilter,
    /// Decompressed bytes; `out[out_pos..]` are not yet converted. When shuffled, the byte
    /// planes of the current frame only, and `out_pos` stays 0.
    out: Vec<u8>,
    out_pos: usize,
    /// Shuffled frames: records in the current frame, the next one to convert, and the frame's
    /// file offset.
    frame_records: usize,
    frame_next: usize,
    frame_at: u64,
    /// Offset of `out[0]` in the decompressed record stream.
    out_base: u64,
    in_frame: bool,
    /// (decompressed offset, file offset) where each frame that fed `out` starts.
    frames: Vec<(u64, u64)>,
    records: u64,
    prev_time: u64,
    eof: bool,
    done: bool,
    iter_buf: Vec<Access>,
    iter_pos: usize,
}

struct RawHeader {
    header: TraceHeader,
    filter: FrameFilter,
    flags: u32,
    records_end: u64,
    n_cpus: u32,
}

fn parse_header(path: &Path, h: &[u8], file_len: u64) -> Result<RawHeader> {
    let err = |off: usize, msg: String| Error::trace(path, off as u64, msg);
    let n = h.len().min(8);
    if h[..n] != MAGIC[..n] {
        return Err(err(
            0,
            format!("not a tiersim trace: expected magic \"TIERSIM\\0\" ({}), found {}", hex(&MAGIC), hex(&h[..n])),
        ));
    }
    if h.len() < HEADER_SIZE {
        return Err(Error::trace(
            path,
            h.len() as u64,
            format!("truncated header: the file is {} bytes, a tiersim header is {HEADER_SIZE}", h.len()),
        ));
    }
    let version = le_u16(h, H_VERSION);
    if !SUPPORTED_VERSIONS.contains(&version) {
        let v: Vec<_> = SUPPORTED_VERSIONS.iter().map(|v| v.to_string()).collect();
        return Err(err(H_VERSION, format!("unsupported trace version {version}; this build reads version {}", v.join(", "))));
    }
    let layout = le_u16(h, H_RECORD_LAYOUT);
    if layout != RECORD_LAYOUT_V1 {
        return Err(err(
            H_RECORD_LAYOUT,
            format!("unsupported record layout {layout}; expected {RECORD_LAYOUT_V1} (24-byte records)"),
        ));
    }
    let record_size = le_u16(h, H_RECORD_SIZE);
    if record_size as usize != RECORD_SIZE {
        return Err(err(
            H_RECORD_SIZE,
            format!("record_size {record_size} does not match record layout {layout}, whose records are {RECORD_SIZE} bytes"),
        ));
    }
    let time_unit = TimeUnit::from_code(h[H_TIME_UNIT]).ok_or_else(|| {
        err(H_TIME_UNIT, format!("invalid time_unit {}; expected 0 (ns) or 1 (instructions)", h[H_TIME_UNIT]))
    })?;
    let addr_kind = AddrKind::from_code(h[H_ADDR_KIND]).ok_or_else(|| {
        err(H_ADDR_KIND, format!("invalid addr_kind {}; expected 0 (virtual) or 1 (physical)", h[H_ADDR_KIND]))
    })?;
    let page_size = le_u32(h, H_PAGE_SIZE);
    check_page_size(page_size).map_err(|m| err(H_PAGE_SIZE, m))?;
    let flags = le_u32(h, H_FLAGS);
    if flags & !FLAG_STATS_COMPLETE != 0 {
        return Err(err(H_FLAGS, format!("unknown flags {flags:#x}; this build knows only bit 0 (stats complete)")));
    }
    let filter = FrameFilter::from_code(h[H_FRAME_FILTER]).ok_or_else(|| {
        err(
            H_FRAME_FILTER,
            format!(
                "unknown frame_filter {}; expected {FRAME_FILTER_NONE} (none) or {FRAME_FILTER_SHUFFLE} (byte shuffle)",
                h[H_FRAME_FILTER]
            ),
        )
    })?;
    let v2p = V2p::from_code(h[H_V2P]).ok_or_else(|| {
        err(H_V2P, format!("unknown v2p {}; expected 0 (not recorded), 1 (pagemap) or 2 (buddy model)", h[H_V2P]))
    })?;
    let records_end = le_u64(h, H_RECORDS_END);
    let n_cpus = le_u32(h, H_N_CPUS);
    if n_cpus > MAX_CPUS {
        return Err(err(H_N_CPUS, format!("n_cpus {n_cpus} is above the maximum {MAX_CPUS}")));
    }
    let complete = flags & FLAG_STATS_COMPLETE != 0;
    if records_end == 0 {
        if complete {
            return Err(err(H_RECORDS_END, "records_end is 0 (unknown) but the stats-complete flag is set".into()));
        }
        if n_cpus != 0 {
            return Err(err(H_N_CPUS, format!("n_cpus is {n_cpus} but records_end is 0, so there is no trailer")));
        }
    } else {
        if records_end < HEADER_SIZE as u64 {
            return Err(err(
                H_RECORDS_END,
                format!("records_end {records_end} points inside the {HEADER_SIZE}-byte header"),
            ));
        }
        if records_end > file_len {
            return Err(err(H_RECORDS_END, format!("records_end {records_end} is beyond end of file ({file_len} bytes)")));
        }
        let trailer = file_len - records_end;
        if trailer != n_cpus as u64 * 8 {
            return Err(Error::trace(
                path,
                records_end,
                format!(
                    "expected a trailer of {n_cpus} per-CPU counts ({} bytes) from records_end to end of file, found {trailer} bytes",
                    n_cpus as u64 * 8
                ),
            ));
        }
    }
    let stats = complete.then(|| TraceStats {
        accesses: le_u64(h, H_ACCESSES),
        reads: le_u64(h, H_READS),
        writes: le_u64(h, H_WRITES),
        bytes: le_u64(h, H_BYTES),
        footprint_pages: le_u64(h, H_FOOTPRINT_PAGES),
        time_first: le_u64(h, H_TIME_FIRST),
        time_last: le_u64(h, H_TIME_LAST),
        per_cpu: Vec::new(),
    });
    if let Some(s) = &stats {
        if s.reads.checked_add(s.writes) != Some(s.accesses) {
            return Err(err(
                H_ACCESSES,
                format!("header stats disagree: {} reads + {} writes != {} accesses", s.reads, s.writes, s.accesses),
            ));
        }
    }
    Ok(RawHeader {
        header: TraceHeader { version, record_layout: layout, time_unit, addr_kind, page_size, v2p, stats },
        filter,
        flags,
        records_end,
        n_cpus,
    })
}

impl TraceReader {
    /// Open a trace and check its header (and trailer, if the header says there is one).
    pub fn open(path: &Path) -> Result<TraceReader> {
        let io = |e| Error::io(path, e);
        let mut file = File::open(path).map_err(io)?;
        let file_len = file.metadata().map_err(io)?.len();
        let mut h = Vec::with_capacity(HEADER_SIZE);
        (&mut file).take(HEADER_SIZE as u64).read_to_end(&mut h).map_err(io)?;
        let raw = parse_header(path, &h, file_len)?;
        let mut header = raw.header;
        let region_end = if raw.records_end == 0 { file_len } else { raw.records_end };
        if raw.records_end != 0 && raw.n_cpus > 0 {
            let mut t = vec![0u8; raw.n_cpus as usize * 8];
            file.seek(SeekFrom::Start(raw.records_end)).map_err(io)?;
            file.read_exact(&mut t).map_err(io)?;
            if let Some(s) = header.stats.as_mut() {
                s.per_cpu = t.chunks_exact(8).map(|c| le_u64(c, 0)).collect();
                let sum = s.per_cpu.iter().try_fold(0u64, |acc, &c| acc.checked_add(c));
                if sum != Some(s.accesses) {
                    return Err(Error::trace(
                        path,
                        raw.records_end,
                        format!("trailer per-CPU counts do not sum to the header's {} accesses", s.accesses),
                    ));
                }
            }
        }
        let complete = raw.flags & FLAG_STATS_COMPLETE != 0;
        let mut dctx = DCtx::create();
        dctx.set_parameter(DParameter::WindowLogMax(WINDOW_LOG_MAX))
            .map_err(|c| Error::Sim(format!("zstd: {}", zstd_safe::get_error_name(c))))?;
        let mut r = TraceReader {
            path: path.to_owned(),
            file,
            header,
            cpu_limit: if complete { raw.n_cpus } else { MAX_CPUS },
            region_end,
            file_pos: HEADER_SIZE as u64,
            inbuf: vec![0; IN_BUF],
            in_end: 0,
            in_pos: 0,
            dctx,
            filter: raw.filter,
            // A shuffled frame sizes the buffer itself, from its content size.
            out: Vec::with_capacity(if raw.filter == FrameFilter::None { OUT_BUF } else { 0 }),
            out_pos: 0,
            frame_records: 0,
            frame_next: 0,
            frame_at: HEADER_SIZE as u64,
            out_base: 0,
            in_frame: false,
            frames: Vec::new(),
            records: 0,
            prev_time: 0,
            eof: false,
            done: false,
            iter_buf: Vec::new(),
            iter_pos: 0,
        };
        r.file.seek(SeekFrom::Start(HEADER_SIZE as u64)).map_err(io)?;
        r.refill_input()?;
        let first = &r.inbuf[..r.in_end.min(4)];
        if first != &ZSTD_MAGIC[..first.len()] {
            return Err(Error::trace(
                path,
                HEADER_SIZE as u64,
                format!(
                    "expected the records region to start with a zstd frame (magic {}), found {}",
                    hex(&ZSTD_MAGIC),
                    hex(first)
                ),
            ));
        }
        Ok(r)
    }

    /// The header as read from the file.
    pub fn header(&self) -> &TraceHeader {
        &self.header
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How the file's frames are arranged (header offset 36).
    pub fn frame_filter(&self) -> FrameFilter {
        self.filter
    }

    fn err(&self, offset: u64, msg: String) -> Error {
        Error::trace(&self.path, offset, msg)
    }

    /// Move unread input to the front of `inbuf` and read more, up to the end of the region.
    /// Returns how many bytes were read.
    fn refill_input(&mut self) -> Result<usize> {
        self.inbuf.copy_within(self.in_pos..self.in_end, 0);
        self.in_end -= self.in_pos;
        self.in_pos = 0;
        let want = ((IN_BUF - self.in_end) as u64).min(self.region_end - self.file_pos) as usize;
        if want == 0 {
            return Ok(0);
        }
        let start = self.in_end;
        self.file.read_exact(&mut self.inbuf[start..start + want]).map_err(|e| Error::io(&self.path, e))?;
        self.in_end += want;
        self.file_pos += want as u64;
        Ok(want)
    }

    fn input_file_offset(&self) -> u64 {
        self.file_pos - (self.in_end - self.in_pos) as u64
    }

    /// Check the start of the next frame, refilling input first unless the frame is whole in it
    /// (zstd decodes a whole frame straight into `out` in one pass, but must go through its own
    /// buffers otherwise). Returns the frame's file offset, or `None` at the end of the region.
    fn next_frame(&mut self) -> Result<Option<u64>> {
        let avail = self.in_end - self.in_pos;
        if self.file_pos < self.region_end
            && (avail < 4 || zstd_safe::find_frame_compressed_size(&self.inbuf[self.in_pos..self.in_end]).is_err())
        {
            self.refill_input()?;
        }
        let rest = &self.inbuf[self.in_pos..self.in_end];
        if rest.is_empty() {
            return Ok(None);
        }
        let at = self.input_file_offset();
        if rest.len() < 4 {
            return Err(self.err(
                self.region_end,
                format!("truncated record stream: {} bytes at the end are too short for a zstd frame", rest.len()),
            ));
        }
        let magic = le_u32(rest, 0);
        if rest[..4] != ZSTD_MAGIC && magic & SKIPPABLE_MAGIC_MASK != SKIPPABLE_MAGIC {
            return Err(self.err(
                at,
                format!("corrupt zstd frame: expected frame magic {}, found {}", hex(&ZSTD_MAGIC), hex(&rest[..4])),
            ));
        }
        Ok(Some(at))
    }

    /// Content size the next frame declares, if any.
    fn next_frame_size(&self) -> Option<u64> {
        zstd_safe::get_frame_content_size(&self.inbuf[self.in_pos..self.in_end]).ok().flatten()
    }

    /// Decompress part of the frame at `frame_at` into the spare capacity of `out` (which must
    /// have some), clearing `in_frame` when the frame ends.
    fn decompress_step(&mut self, frame_at: u64) -> Result<()> {
        if self.in_pos == self.in_end && self.refill_input()? == 0 {
            // Input is exhausted mid-frame: zstd may still hold decoded bytes to flush.
            let before = self.out.len();
            let mut input = InBuffer::around(&[]);
            let mut output = OutBuffer::around_pos(&mut self.out, before);
            let res = self.dctx.decompress_stream(&mut output, &mut input);
            return match res {
                Ok(0) => {
                    self.in_frame = false;
                    Ok(())
                }
                Ok(_) if self.out.len() > before => Ok(()),
                Ok(_) => Err(self.err(
                    self.region_end,
                    format!("truncated record stream: the zstd frame at offset {frame_at} ends early"),
                )),
                Err(c) => Err(self.corrupt(frame_at, c)),
            };
        }
        let mut input = InBuffer::around(&self.inbuf[self.in_pos..self.in_end]);
        let filled = self.out.len();
        let mut output = OutBuffer::around_pos(&mut self.out, filled);
        let res = self.dctx.decompress_stream(&mut output, &mut input);
        self.in_pos += input.pos();
        match res {
            Ok(0) => self.in_frame = false,
            Ok(_) => {}
            Err(c) => return Err(self.corrupt(frame_at, c)),
        }
        Ok(())
    }

    /// Decompress more records into `out` after moving its unconverted tail to the front
    /// (frame filter 0).
    fn fill(&mut self) -> Result<()> {
        let tail = self.out.len() - self.out_pos;
        self.out.copy_within(self.out_pos.., 0);
        self.out.truncate(tail);
        self.out_base += self.out_pos as u64;
        self.out_pos = 0;
        let keep = self.frames.iter().rposition(|&(u, _)| u <= self.out_base).unwrap_or(0);
        self.frames.drain(..keep);

        while !self.eof && self.out.capacity() - self.out.len() >= RECORD_SIZE {
            if !self.in_frame {
                let Some(at) = self.next_frame()? else {
                    self.eof = true;
                    break;
                };
                // Stop before a frame that would not fit whole, so it too decodes in one pass.
                if let Some(size) = self.next_frame_size() {
                    let spare = (self.out.capacity() - self.out.len()) as u64;
                    if size > spare && self.out.len() >= RECORD_SIZE {
                        break;
                    }
                }
                self.in_frame = true;
                self.frames.push((self.out_base + self.out.len() as u64, at));
            }
            let frame_at = self.frames.last().map_or(HEADER_SIZE as u64, |f| f.1);
            self.decompress_step(frame_at)?;
        }
        Ok(())
    }

    /// Decompress the next frame that holds records, whole, into `out` (frame filter 1).
    fn fill_frame(&mut self) -> Result<()> {
        self.out.clear();
        self.frame_records = 0;
        self.frame_next = 0;
        while !self.eof {
            if !self.in_frame {
                let Some(at) = self.next_frame()? else {
                    self.eof = true;
                    break;
                };
                self.frame_at = at;
                if let Some(size) = self.next_frame_size() {
                    if size > MAX_FRAME_BYTES as u64 {
                        return Err(self.frame_too_large(format!("declares {size} bytes")));
                    }
                    self.out.reserve_exact(size as usize);
                }
                self.in_frame = true;
            }
            if self.out.len() == self.out.capacity() {
                // Frames without a content size grow the buffer; one byte over the bound is
                // room enough to tell an oversized frame from one that is exactly at the bound.
                let cap = (self.out.capacity() * 2).clamp(1 << 16, MAX_FRAME_BYTES + 1);
                self.out.reserve_exact(cap - self.out.len());
            }
            self.decompress_step(self.frame_at)?;
            if self.out.len() > MAX_FRAME_BYTES {
                return Err(self.frame_too_large("decompresses to more".into()));
            }
            if !self.in_frame && !self.out.is_empty() {
                break;
            }
        }
        if !self.out.len().is_multiple_of(RECORD_SIZE) {
            return Err(self.err(
                self.frame_at,
                format!(
                    "the byte-shuffled zstd frame at this offset decompresses to {} bytes, not a whole number of {RECORD_SIZE}-byte records",
                    self.out.len()
                ),
            ));
        }
        self.frame_records = self.out.len() / RECORD_SIZE;
        Ok(())
    }

    fn frame_too_large(&self, what: String) -> Error {
        self.err(
            self.frame_at,
            format!(
                "the byte-shuffled zstd frame at this offset {what}; a frame may hold at most {MAX_FRAME_BYTES} bytes ({MAX_FRAME_RECORDS} records)"
            ),
        )
    }

    fn corrupt(&self, frame_at: u64, code: usize) -> Error {
        self.err(frame_at, format!("corrupt zstd frame: {}", zstd_safe::get_error_name(code)))
    }

    /// File offset of the frame that decoded the byte at decompressed offset `u`.
    fn frame_of(&self, u: u64) -> u64 {
        self.frames.iter().rev().find(|&&(s, _)| s <= u).map_or(HEADER_SIZE as u64, |f| f.1)
    }

    /// Check and convert up to `max` whole records from `out`.
    fn convert(&mut self, dst: &mut Vec<Access>, max: usize) -> Result<usize> {
        let n = ((self.out.len() - self.out_pos) / RECORD_SIZE).min(max);
        let bytes = &self.out[self.out_pos..self.out_pos + n * RECORD_SIZE];
        let cpu_limit = self.cpu_limit;
        let ns = self.header.time_unit == TimeUnit::Ns;
        let mut prev = self.prev_time;
        let mut bad = false;
        let start = dst.len();
        dst.reserve(n);
        dst.extend(bytes.chunks_exact(RECORD_SIZE).map(|r| {
            let time = le_u64(r, R_TIME);
            let cpu = le_u32(r, R_CPU);
            let size = le_u16(r, R_SIZE);
            let op = r[R_OP];
            let flags = r[R_FLAGS];
            bad |= (op > 1) | (flags & !Access::KNOWN_FLAGS != 0) | (size == 0) | (cpu >= cpu_limit) | (ns & (time < prev));
            prev = time;
            Access {
                time,
                addr: le_u64(r, R_ADDR),
                cpu,
                size,
                op: if op == 1 { Op::Write } else { Op::Read },
                flags,
            }
        }));
        if bad {
            dst.truncate(start);
            return Err(self.record_error(n));
        }
        if let Some(s) = &self.header.stats {
            if self.records + n as u64 > s.accesses {
                dst.truncate(start);
                return Err(self.err(
                    self.frame_of(self.out_base + self.out_pos as u64),
                    format!("the record stream holds more records than the header's {} accesses", s.accesses),
                ));
            }
        }
        self.prev_time = prev;
        self.out_pos += n * RECORD_SIZE;
        self.records += n as u64;
        Ok(n)
    }

    /// What is wrong with a record, given the previous record's time.
    fn record_problem(&self, time: u64, cpu: u32, size: u16, op: u8, flags: u8, prev: u64) -> Option<String> {
        if op > 1 {
            return Some(format!("invalid op byte {op}; expected 0 (read) or 1 (write)"));
        }
        if flags & !Access::KNOWN_FLAGS != 0 {
            return Some(format!("invalid flags byte {flags:#04x}; only bit 0 (file-backed page) is defined"));
        }
        if size == 0 {
            return Some("size 0; every access moves at least one byte".into());
        }
        if cpu >= self.cpu_limit {
            return Some(if self.cpu_limit == MAX_CPUS {
                format!("cpu {cpu} is above the maximum {}", MAX_CPUS - 1)
            } else {
                format!("cpu {cpu} is not below the header's n_cpus {}", self.cpu_limit)
            });
        }
        if self.header.time_unit == TimeUnit::Ns && time < prev {
            return Some(format!("time {time} ns is before the previous record's {prev} ns; ns traces must be sorted"));
        }
        None
    }

    /// Find and describe the first bad record among the next `n`.
    fn record_error(&self, n: usize) -> Error {
        let mut prev = self.prev_time;
        for i in 0..n {
            let at = self.out_pos + i * RECORD_SIZE;
            let r = &self.out[at..at + RECORD_SIZE];
            let time = le_u64(r, R_TIME);
            if let Some(m) = self.record_problem(time, le_u32(r, R_CPU), le_u16(r, R_SIZE), r[R_OP], r[R_FLAGS], prev) {
                let u = self.out_base + at as u64;
                let index = self.records + i as u64;
                return self.err(
                    self.frame_of(u),
                    format!("record {index} (byte {u} of the decompressed records, in the zstd frame at this offset): {m}"),
                );
            }
            prev = time;
        }
        self.err(self.frame_of(self.out_base), "invalid record".into())
    }

    /// Check and convert up to `max` records of the current shuffled frame.
    fn convert_shuffled(&mut self, dst: &mut Vec<Access>, max: usize) -> Result<usize> {
        let n = (self.frame_records - self.frame_next).min(max);
        let planes = &self.out[..self.frame_records * RECORD_SIZE];
        let start = dst.len();
        dst.reserve(n);
        let mut prev = self.prev_time;
        let ok = unshuffle(
            planes,
            self.frame_next,
            &mut dst.spare_capacity_mut()[..n],
            self.cpu_limit,
            self.header.time_unit == TimeUnit::Ns,
            &mut prev,
        );
        if !ok {
            return Err(self.shuffled_record_error(n));
        }
        if let Some(s) = &self.header.stats {
            if self.records + n as u64 > s.accesses {
                return Err(self.err(
                    self.frame_at,
                    format!("the record stream holds more records than the header's {} accesses", s.accesses),
                ));
            }
        }
        // SAFETY: `unshuffle` returned true, so it initialised all of the `n` spare slots.
        unsafe { dst.set_len(start + n) };
        self.prev_time = prev;
        self.frame_next += n;
        self.records += n as u64;
        Ok(n)
    }

    /// Find and describe the first bad record among the next `n` of the shuffled frame.
    fn shuffled_record_error(&self, n: usize) -> Error {
        let planes = &self.out[..self.frame_records * RECORD_SIZE];
        let mut prev = self.prev_time;
        for j in self.frame_next..self.frame_next + n {
            let r = gather1(planes, self.frame_records, j);
            let time = le_u64(&r, R_TIME);
            if let Some(m) = self.record_problem(time, le_u32(&r, R_CPU), le_u16(&r, R_SIZE), r[R_OP], r[R_FLAGS], prev) {
                let index = self.records + (j - self.frame_next) as u64;
                return self.err(
                    self.frame_at,
                    format!("record {index} (record {j} of the byte-shuffled zstd frame at this offset): {m}"),
                );
            }
            prev = time;
        }
        self.err(self.frame_at, "invalid record".into())
    }

    fn read_inner(&mut self, dst: &mut Vec<Access>, max: usize) -> Result<usize> {
        let mut got = 0;
        if self.iter_pos < self.iter_buf.len() {
            let take = (self.iter_buf.len() - self.iter_pos).min(max);
            dst.extend_from_slice(&self.iter_buf[self.iter_pos..self.iter_pos + take]);
            self.iter_pos += take;
            got += take;
        }
        while got < max && !self.done {
            match self.filter {
                FrameFilter::None => {
                    if self.out.len() - self.out_pos < RECORD_SIZE {
                        if self.eof {
                            return self.finish_stream().map(|()| got);
                        }
                        self.fill()?;
                        continue;
                    }
                    got += self.convert(dst, max - got)?;
                }
                FrameFilter::Shuffle => {
                    if self.frame_next == self.frame_records {
                        if self.eof {
                            return self.finish_stream().map(|()| got);
                        }
                        self.fill_frame()?;
                        continue;
                    }
                    got += self.convert_shuffled(dst, max - got)?;
                }
            }
        }
        Ok(got)
    }

    fn finish_stream(&mut self) -> Result<()> {
        self.done = true;
        // Shuffled frames are checked for whole records as each is decoded.
        let tail = if self.filter == FrameFilter::None { self.out.len() - self.out_pos } else { 0 };
        if tail > 0 {
            return Err(self.err(
                self.region_end,
                format!(
                    "partial record at the end of the record stream: {tail} bytes after record {}; records are {RECORD_SIZE} bytes",
                    self.records
                ),
            ));
        }
        if self.in_frame {
            return Err(self.err(self.region_end, "truncated record stream: the last zstd frame ends early".into()));
        }
        if let Some(s) = &self.header.stats {
            if s.accesses != self.records {
                return Err(self.err(
                    self.region_end,
                    format!("truncated record stream: {} records, but the header says {}", self.records, s.accesses),
                ));
            }
        }
        Ok(())
    }
}

impl AccessSource for TraceReader {
    fn header(&self) -> &TraceHeader {
        &self.header
    }

    fn read_batch(&mut self, out: &mut Vec<Access>, max: usize) -> Result<usize> {
        let r = self.read_inner(out, max);
        if r.is_err() {
            self.done = true;
            self.iter_buf.clear();
            self.iter_pos = 0;
        }
        r
    }
}

impl Iterator for TraceReader {
    type Item = Result<Access>;

    fn next(&mut self) -> Option<Result<Access>> {
        if self.iter_pos == self.iter_buf.len() {
            let mut buf = std::mem::take(&mut self.iter_buf);
            buf.clear();
            self.iter_pos = 0;
            let r = self.read_batch(&mut buf, 4096);
            self.iter_buf = buf;
            match r {
                Ok(0) => return None,
                Ok(_) => {}
                Err(e) => return Some(Err(e)),
            }
        }
        let a = self.iter_buf[self.iter_pos];
        self.iter_pos += 1;
        Some(Ok(a))
    }
}

/// Header and statistics of a trace as JSON (see `crate::inspect`).
pub fn inspect(path: &Path) -> Result<serde_json::Value> {
    let mut r = TraceReader::open(path)?;
    let file_len = std::fs::metadata(path).map_err(|e| Error::io(path, e))?.len();
    let h = r.header().clone();
    let (stats, source) = match h.stats.clone() {
        Some(s) => (s, "header"),
        None => {
            let mut b = StatsBuilder::new(h.time_unit, h.page_size);
            crate::for_each_access(&mut r, |a| {
                b.add(a);
                Ok(())
            })?;
            (b.finish(), "scan")
        }
    };
    let bytes_per_access = (stats.accesses > 0).then(|| file_len as f64 / stats.accesses as f64);
    Ok(serde_json::json!({
        "path": path.display().to_string(),
        "version": h.version,
        "record_layout": h.record_layout,
        "frame_filter": r.frame_filter(),
        "time_unit": h.time_unit,
        "addr_kind": h.addr_kind,
        "v2p": h.v2p,
        "page_size": h.page_size,
        "stats_source": source,
        "accesses": stats.accesses,
        "reads": stats.reads,
        "writes": stats.writes,
        "bytes": stats.bytes,
        "footprint_pages": stats.footprint_pages,
        "footprint_bytes": stats.footprint_pages.saturating_mul(h.page_size as u64),
        "time_first": stats.time_first,
        "time_last": stats.time_last,
        "time_span": stats.time_last.saturating_sub(stats.time_first),
        "per_cpu": stats.per_cpu,
        "compressed_bytes": file_len,
        "bytes_per_access": bytes_per_access,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shuffle_then_unshuffle_round_trips() {
        for n in [0usize, 1, 15, 64, 65, 200, SHUFFLE_BLOCK + 3] {
            let rows: Vec<u8> = (0..n)
                .flat_map(|i| {
                    let mut r = [0u8; RECORD_SIZE];
                    r[R_TIME..R_TIME + 8].copy_from_slice(&(i as u64 * 0x0101_0101_0101).to_le_bytes());
                    r[R_ADDR..R_ADDR + 8].copy_from_slice(&(u64::MAX - i as u64).to_le_bytes());
                    r[R_CPU..R_CPU + 4].copy_from_slice(&(i as u32 % 65536).to_le_bytes());
                    r[R_SIZE..R_SIZE + 2].copy_from_slice(&(1 + i as u16).to_le_bytes());
                    r[R_OP] = (i % 2) as u8;
                    r[R_FLAGS] = (i % 3 == 0) as u8;
                    r
                })
                .collect();
            let mut planes = Vec::new();
            shuffle(&rows, &mut planes);
            assert_eq!(planes.len(), rows.len());
            for first in [0, n.min(1), n / 2] {
                let mut dst: Vec<Access> = Vec::with_capacity(n - first);
                let mut prev = 0;
                assert!(unshuffle(&planes, first, &mut dst.spare_capacity_mut()[..n - first], MAX_CPUS, true, &mut prev));
                // SAFETY: `unshuffle` returned true, so it wrote all `n - first` slots.
                unsafe { dst.set_len(n - first) };
                for (j, a) in dst.iter().enumerate() {
                    let r = &rows[(first + j) * RECORD_SIZE..][..RECORD_SIZE];
                    assert_eq!((a.time, a.addr, a.cpu, a.size), (le_u64(r, 0), le_u64(r, 8), le_u32(r, 16), le_u16(r, 20)));
                    assert_eq!(a.op.is_write(), r[R_OP] == 1);
                    assert_eq!(a.flags, r[R_FLAGS]);
                }
            }
            // A flag bit this build does not know fails the SIMD checks and the scalar tail alike.
            if n > 0 {
                for bad in [n - 1, 0] {
                    let mut rows = rows.clone();
                    rows[bad * RECORD_SIZE + R_FLAGS] = 0x80;
                    shuffle(&rows, &mut planes);
                    let mut dst: Vec<Access> = Vec::with_capacity(n);
                    let mut prev = 0;
                    assert!(!unshuffle(&planes, 0, &mut dst.spare_capacity_mut()[..n], MAX_CPUS, true, &mut prev), "n {n}, record {bad}");
                }
            }
        }
    }
}
