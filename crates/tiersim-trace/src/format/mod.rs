//! The native tiersim trace format, version 2 (version 1 still reads); docs/trace-format.md
//! describes it with the integrity checks of version 2.
//!
//! A file is a fixed 128-byte header, then the records region (a sequence of zstd frames whose
//! decompressed bytes are fixed-size records, as rows or byte planes: see frame_filter), then an
//! optional trailer of per-CPU access counts (version 2: then the end block, `END_MAGIC`), then
//! end of file; in version 2 every zstd frame follows its descriptor (`DESC_MAGIC`). Every integer is little-endian.
//!
//! Header (offsets in bytes, see the `H_*` constants):
//!
//! | offset | size | field                                                                 |
//! |-------:|-----:|-----------------------------------------------------------------------|
//! |      0 |    8 | magic `b"TIERSIM\0"`                                                  |
//! |      8 |    2 | version (2; 1 is still read)                                          |
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
//! |     96 |    4 | v2: CRC-32 of the header with this field zero; v1: reserved, zero     |
//! |    100 |   28 | reserved, zero                                                        |
//!
//! Record, layout 1 (24 bytes, see the `R_*` constants): time u64, addr u64, cpu u32, size u16,
//! op u8 (0 read, 1 write), flags u8 (bit 0: file-backed page; bit 1: a read/write system call of
//! `size` bytes on the file mapped at `addr`, with bit 0 set; bit 2: that call is O_DIRECT, with
//! bits 0 and 1 set; other bits must be 0; traces written
//! before a bit existed hold 0 there, so v1 and v2 files read as before and a build that predates
//! bit 1 rejects a trace that uses it).
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

use rustc_hash::FxHashMap;
use serde::Serialize;
use tiersim_core::{Access, Op};

mod frames;
mod header;
mod reader;
mod writer;

pub use header::*;
pub use reader::{inspect, verify, TraceReader};
pub(crate) use writer::share_planes;
pub use writer::{TraceWriter, WriterOptions};

pub const MAGIC: [u8; 8] = *b"TIERSIM\0";
/// Version this build writes: 2 adds the header checksum, frame descriptors and the end block.
pub const VERSION: u16 = 2;
/// Versions this build reads.
pub const SUPPORTED_VERSIONS: &[u16] = &[1, 2];
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
/// zstd's bounds on its hashLog (`WriterOptions::hash_log`) on 64-bit targets.
pub const MIN_HASH_LOG: u32 = 6;
pub const MAX_HASH_LOG: u32 = 30;
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
/// Version 2: CRC-32 of the header with this field zero. Version 1: reserved, zero.
pub const H_HEADER_CRC: usize = 96;
/// Two reserved bytes after the v2p byte.
pub const H_RESERVED: usize = 38;

/// Version 2 precedes every zstd frame with a descriptor, itself a zstd skippable frame (so
/// zstd tools still read the region): magic, payload size 16, frame sequence number u64 (from
/// 0), records u32, CRC-32 u32 of the sequence number's 8 bytes then the frame's decompressed
/// bytes.
pub const DESC_MAGIC: u32 = 0x184D_2A5E;
pub const DESC_SIZE: usize = 24;
/// Version 2 ends a complete file with this block after the per-CPU counts: magic, frames u64,
/// records u64, CRC-32 u32 of the per-CPU counts and the block's first 24 bytes, reserved u32.
pub const END_MAGIC: [u8; 8] = *b"TSIMEND\0";
pub const END_SIZE: usize = 32;

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

pub(crate) fn le_u16(b: &[u8], at: usize) -> u16 {
    let mut a = [0u8; 2];
    a.copy_from_slice(&b[at..at + 2]);
    u16::from_le_bytes(a)
}

#[inline(always)]
pub(crate) fn le_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

#[inline(always)]
pub(crate) fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

pub(crate) fn hex(b: &[u8]) -> String {
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

/// Pages per bitmap group of `StatsBuilder` (log2), and its 64-bit words.
const GROUP_SHIFT: u32 = 15;
const GROUP_WORDS: usize = 1 << (GROUP_SHIFT - 6);
/// Groups the direct-mapped cache in front of `StatsBuilder::groups` remembers.
const GROUP_CACHE: usize = 256;

/// Accumulates `TraceStats` one access at a time (the writer, and `inspect` when it must scan).
pub(crate) struct StatsBuilder {
    time_unit: TimeUnit,
    page_shift: u32,
    stats: TraceStats,
    /// Pages touched, as a bitmap per aligned group of 2^15 pages (128 MiB of 4 KiB pages): the
    /// groups' map stays small (a few entries for a program's heap, a few hundred for frames
    /// spread over a machine's memory) where a set of every page would miss the cache on each
    /// random record.
    groups: FxHashMap<u64, usize>,
    bits: Vec<Box<[u64; GROUP_WORDS]>>,
    /// Direct-mapped by group: the group held (`u64::MAX` for none) and its index in `bits`, so
    /// that records alternating between a few groups (a program's heap and its stack, frames
    /// spread over a host's memory) mostly skip the map.
    cache_tags: [u64; GROUP_CACHE],
    cache_slots: [u32; GROUP_CACHE],
    /// Per-CPU running instruction counts (instruction traces only).
    instr: Vec<u64>,
    /// Only records and pages are counted (`StatsBuilder::pages`).
    pages_only: bool,
    /// Pages are not counted: the caller knows the footprint (`StatsBuilder::no_pages`).
    no_pages: bool,
}

impl StatsBuilder {
    pub fn new(time_unit: TimeUnit, page_size: u32) -> StatsBuilder {
        StatsBuilder {
            time_unit,
            page_shift: page_size.max(1).trailing_zeros(),
            stats: TraceStats::default(),
            groups: FxHashMap::default(),
            bits: Vec::new(),
            cache_tags: [u64::MAX; GROUP_CACHE],
            cache_slots: [0; GROUP_CACHE],
            instr: Vec::new(),
            pages_only: false,
            no_pages: false,
        }
    }

    /// A builder that counts only records and the pages they touch.
    pub fn pages(page_size: u32) -> StatsBuilder {
        StatsBuilder { pages_only: true, ..StatsBuilder::new(TimeUnit::Instructions, page_size) }
    }

    /// Count everything but the pages: `finish` gives a footprint of 0, for the caller to fill.
    pub fn no_pages(&mut self) {
        self.no_pages = true;
    }

    /// `a.cpu` must be below `MAX_CPUS` (the writer and reader both check it). Inlined into the
    /// writer's loop, where a call per record and trace showed in the capture's profile.
    #[inline(always)]
    pub fn add(&mut self, a: &Access) {
        if self.pages_only {
            self.stats.accesses += 1;
            if !a.is_map() {
                self.mark_pages(a);
            }
            return;
        }
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
        // A mapping record moves no bytes and touches no page.
        let map = a.is_map();
        s.bytes = s.bytes.saturating_add(if map { 0 } else { a.size as u64 });
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
        if !map && !self.no_pages {
            self.mark_pages(a);
        }
    }

    /// `add` of every access of `batch`, in order, with the same result: the counters are
    /// kept in registers over the batch and a CPU's over each run of its records, where `add`
    /// goes through memory once per record and counter.
    pub fn add_all(&mut self, batch: &[Access]) {
        const AHEAD: usize = 16;
        let Some(first) = batch.first() else { return };
        if self.pages_only {
            batch.iter().for_each(|a| self.add(a));
            return;
        }
        let ns = self.time_unit == TimeUnit::Ns;
        if ns && self.stats.accesses == 0 {
            self.stats.time_first = first.time;
        }
        let (mut writes, mut bytes) = (0u64, 0u64);
        let (mut cpu, mut run) = (first.cpu, 0u64);
        let mut t = if ns { 0 } else { self.instr.get(cpu as usize).copied().unwrap_or(0) };
        for a in batch {
            if a.cpu != cpu {
                self.end_run(cpu, run, t);
                (cpu, run) = (a.cpu, 0);
                if !ns {
                    t = self.instr.get(cpu as usize).copied().unwrap_or(0);
                }
            }
            run += 1;
            writes += a.op.is_write() as u64;
            // A mapping record moves no bytes and touches no page.
            bytes += if a.is_map() { 0 } else { a.size as u64 };
            if !ns {
                t = t.saturating_add(a.time);
            }
        }
        self.end_run(cpu, run, t);
        let s = &mut self.stats;
        let n = batch.len() as u64;
        s.accesses += n;
        s.writes += writes;
        s.reads += n - writes;
        s.bytes = s.bytes.saturating_add(bytes);
        if ns {
            s.time_last = batch[batch.len() - 1].time;
        }
        if !self.no_pages {
            for (i, a) in batch.iter().enumerate() {
                // The page bitmap is read at random: fetch the words of the records ahead.
                if let Some(next) = batch.get(i + AHEAD) {
                    self.prefetch(next);
                }
                if !a.is_map() {
                    self.mark_pages(a);
                }
            }
        }
    }

    /// The end of a run of `run` records of `cpu` in `add_all`, its instruction clock now `t`.
    #[inline]
    fn end_run(&mut self, cpu: u32, run: u64, t: u64) {
        let (s, cpu) = (&mut self.stats, cpu as usize);
        if cpu >= s.per_cpu.len() {
            s.per_cpu.resize(cpu + 1, 0);
        }
        s.per_cpu[cpu] += run;
        if self.time_unit == TimeUnit::Instructions {
            if cpu >= self.instr.len() {
                self.instr.resize(cpu + 1, 0);
            }
            self.instr[cpu] = t;
            s.time_last = s.time_last.max(t);
        }
    }

    #[inline]
    fn mark_pages(&mut self, a: &Access) {
        let first = a.addr >> self.page_shift;
        let last = a.addr.saturating_add((a.size as u64).max(1) - 1) >> self.page_shift;
        for p in first..=last {
            self.mark(p);
        }
    }

    /// Start fetching the bitmap word `add(a)` will mark first, if its group exists (a hint:
    /// what is counted does not change).
    #[inline]
    pub fn prefetch(&mut self, a: &Access) {
        let page = a.addr >> self.page_shift;
        if let Some(slot) = self.group(page >> GROUP_SHIFT) {
            let bit = page & ((1 << GROUP_SHIFT) - 1);
            tiersim_core::prefetch(&self.bits[slot][..], (bit >> 6) as usize);
        }
    }

    /// The index in `bits` of `group`, if it has one.
    #[inline]
    fn group(&mut self, group: u64) -> Option<usize> {
        let k = group as usize % GROUP_CACHE;
        if self.cache_tags[k] != group {
            let slot = *self.groups.get(&group)?;
            self.cache_tags[k] = group;
            self.cache_slots[k] = slot as u32;
        }
        Some(self.cache_slots[k] as usize)
    }

    #[inline]
    fn mark(&mut self, page: u64) {
        let group = page >> GROUP_SHIFT;
        let slot = match self.group(group) {
            Some(slot) => slot,
            None => {
                self.groups.insert(group, self.bits.len());
                self.bits.push(Box::new([0; GROUP_WORDS]));
                self.bits.len() - 1
            }
        };
        let bit = page & ((1 << GROUP_SHIFT) - 1);
        self.bits[slot][(bit >> 6) as usize] |= 1 << (bit & 63);
    }

    /// Distinct pages marked so far.
    pub fn footprint(&self) -> u64 {
        self.bits.iter().flat_map(|b| b.iter()).map(|w| w.count_ones() as u64).sum()
    }

    pub fn finish(mut self) -> TraceStats {
        self.stats.footprint_pages = self.footprint();
        self.stats
    }
}

/// CRC-32 of a version-2 frame: its sequence number, then its decompressed bytes.
pub(crate) fn frame_crc(seq: u64, content: &[u8]) -> u32 {
    let mut c = crc32fast::Hasher::new();
    c.update(&seq.to_le_bytes());
    c.update(content);
    c.finalize()
}

/// The version-2 end block (see `END_MAGIC`) after the per-CPU counts `per_cpu`.
pub(crate) fn end_block(per_cpu: &[u8], frames: u64, records: u64) -> [u8; END_SIZE] {
    let mut b = [0u8; END_SIZE];
    b[0..8].copy_from_slice(&END_MAGIC);
    b[8..16].copy_from_slice(&frames.to_le_bytes());
    b[16..24].copy_from_slice(&records.to_le_bytes());
    let mut c = crc32fast::Hasher::new();
    c.update(per_cpu);
    c.update(&b[..24]);
    b[24..28].copy_from_slice(&c.finalize().to_le_bytes());
    b
}

/// Open a trace for reading, refusing anything but a regular file first: opening a FIFO blocks
/// until a writer appears, so `trace inspect FIFO` hung.
pub(crate) fn open_trace_file(path: &std::path::Path) -> tiersim_core::Result<std::fs::File> {
    let meta = std::fs::metadata(path).map_err(|e| tiersim_core::Error::io(path, e))?;
    if !meta.is_file() {
        let what = if meta.is_dir() { "a directory" } else { "not a regular file (a FIFO, socket or device)" };
        return Err(tiersim_core::Error::arg(
            path.display().to_string(),
            format!("{what}; a trace must be a regular file"),
        ));
    }
    std::fs::File::open(path).map_err(|e| tiersim_core::Error::io(path, e))
}

/// The version-1 form of a complete version-2 file: its zstd frames without their descriptors,
/// no end block, no header checksum. For the reader's tests of old files and the integrity
/// benchmark (v1 against v2 decoding); panics on bytes that are not a valid version-2 file.
#[doc(hidden)]
pub fn rewrite_as_v1(b: &[u8]) -> Vec<u8> {
    let end = le_u64(b, H_RECORDS_END) as usize;
    let mut v = b[..HEADER_SIZE].to_vec();
    let mut at = HEADER_SIZE;
    while at < end {
        let n = zstd::zstd_safe::find_frame_compressed_size(&b[at..end]).expect("a valid version-2 file");
        if b[at..at + 4] != DESC_MAGIC.to_le_bytes() {
            v.extend_from_slice(&b[at..at + n]);
        }
        at += n;
    }
    let v1_end = v.len() as u64;
    v.extend_from_slice(&b[end..b.len() - END_SIZE]);
    v[H_VERSION..H_VERSION + 2].copy_from_slice(&1u16.to_le_bytes());
    v[H_RECORDS_END..H_RECORDS_END + 8].copy_from_slice(&v1_end.to_le_bytes());
    v[H_HEADER_CRC..H_HEADER_CRC + 4].fill(0);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `add_all` counts what `add` one record at a time counts: runs of CPUs, mapping records,
    /// saturating instruction clocks, both time units, with and without pages.
    #[test]
    fn add_all_counts_as_add() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut t = 0u64;
        let a: Vec<Access> = (0..5000)
            .map(|i| {
                let r = next();
                t += r % 100;
                Access {
                    time: if i == 4000 { u64::MAX - 5 } else { t },
                    addr: (r >> 8) % (1 << 40),
                    cpu: if r % 7 < 5 { (i / 50) as u32 % 3 } else { (r % 9) as u32 },
                    size: 1 + (r >> 50) as u16 % 8192,
                    op: if r % 3 == 0 { Op::Write } else { Op::Read },
                    flags: if r % 11 == 0 { Access::MAP } else { 0 },
                }
            })
            .collect();
        for unit in [TimeUnit::Instructions, TimeUnit::Ns] {
            for no_pages in [false, true] {
                let new = |np: bool| {
                    let mut b = StatsBuilder::new(unit, 4096);
                    if np {
                        b.no_pages();
                    }
                    b
                };
                let mut one = new(no_pages);
                a.iter().for_each(|r| one.add(r));
                for run in [1, 3, 64, 1000, 5000] {
                    let mut all = new(no_pages);
                    a.chunks(run).for_each(|c| all.add_all(c));
                    assert_eq!(all.stats, one.stats, "{unit:?}, no_pages {no_pages}, runs of {run}");
                    assert_eq!(all.instr, one.instr);
                    assert_eq!(all.footprint(), one.footprint());
                }
            }
        }
        let mut one = StatsBuilder::pages(4096);
        a.iter().for_each(|r| one.add(r));
        let mut all = StatsBuilder::pages(4096);
        all.add_all(&a);
        assert_eq!((&all.stats, all.footprint()), (&one.stats, one.footprint()));
    }
}
