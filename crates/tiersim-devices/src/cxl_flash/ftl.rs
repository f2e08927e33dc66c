//! Page-level FTL at mapping-unit granularity (MQSim-E: 4 KiB units on 16 KiB pages):
//! log-structured writes, greedy garbage collection and per-block erase counts.
//!
//! - Mapping: logical unit (LPN) -> physical unit (`lpn_map`: sparse chunks while few of their
//!   units are written, dense after). A unit never written reads from a fixed striped location as if written before the
//!   trace, and takes no block (the device starts empty, so a 1 TiB device costs memory only for
//!   what the trace writes).
//! - Writes: written-back units gather in a write buffer (device DRAM) until they fill one page in
//!   every plane of a die; that multi-plane program goes to the next die in channel-first order
//!   (MQSim's CWDP allocation), into each plane's active block. Overwriting invalidates the old
//!   unit. A read of a unit still in the buffer is served from DRAM.
//! - GC (greedy, per plane, as MQSim's GREEDY policy): before a plane opens a block while it has
//!   at most `gc_threshold` of its blocks (at least 2) free, the closed block with the fewest
//!   valid units (ties: the least erased, then the lowest number) is collected: its valid units are read, written to the plane's active block
//!   (single-plane programs, the last page padded) and the block is erased. GC work occupies the
//!   die like host work.
//! - Block state (valid count, erase count) exists only for blocks ever opened; a block's reverse
//!   map (physical unit -> LPN, for GC) grows as its pages are written and is freed on erase.
//!   Deviation from real multi-plane programs: planes keep independent write pointers.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use serde_json::json;

use super::flash::Flash;
use super::lpn_map::LpnMap;
use crate::pipe::Ps;

/// Map value of a unit waiting in the write buffer; other values are physical unit + 1, 0 unmapped.
const BUFFERED: u32 = u32::MAX;
const NONE: u32 = u32::MAX;

/// Where a read of a logical unit goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Location {
    /// Die and page (for the page-type latency) on flash.
    Flash { die: u32, page: u32 },
    /// Still in the write buffer.
    Buffer,
}

#[derive(Debug, Clone)]
struct Block {
    valid: u32,
    erases: u32,
    /// Erased and in the plane's free list.
    free: bool,
    /// LPN + 1 of each unit slot written so far (pages fill in order); 0 = padding.
    lpns: Vec<u32>,
}

#[derive(Debug, Clone)]
struct Plane {
    active: u32,
    write_page: u32,
    /// Blocks 0..fresh have been opened at least once; the others are factory-erased.
    fresh: u32,
    free: Vec<u32>,
    blocks: Vec<Block>,
}

impl Plane {
    fn new() -> Plane {
        Plane { active: NONE, write_page: 0, fresh: 0, free: Vec::new(), blocks: Vec::new() }
    }
}

#[derive(Debug, Clone, Copy, Default)]
pub struct FtlCounts {
    /// Units written back by the host side (cache evictions, write-through).
    pub host_units: u64,
    /// Host units that replaced a unit still in the buffer (never programmed).
    pub buffer_merges: u64,
    pub gc_units: u64,
    pub pad_units: u64,
    pub gc_runs: u64,
    pub gc_stuck: u64,
    /// Writes dropped because no plane had a free block (device full).
    pub dropped_units: u64,
    pub buffer_reads: u64,
}

pub struct Ftl {
    map: LpnMap,
    pub logical_units: u64,
    planes: Vec<Plane>,
    buffer: Vec<u32>,
    next_die: u32,
    gc_free_blocks: u32,
    /// In-flight programs: (completion, units) for write-buffer back-pressure.
    inflight: BinaryHeap<Reverse<(Ps, u32)>>,
    inflight_units: u64,
    pub counts: FtlCounts,
    /// With a power-of-two geometry, where an unwritten unit sits by masks and a shift: (dies
    /// - 1, log2 of dies x planes x units per page, pages per block - 1).
    stripe_masks: Option<(u64, u32, u64)>,
    /// With units per page, pages per block and blocks per plane powers of two, their log2:
    /// `decode` by shifts and masks (each division costs 20-40 cycles on a miss's path).
    decode_shifts: Option<(u32, u32, u32)>,
}

impl Ftl {
    pub fn new(flash: &Flash, logical_units: u64, gc_threshold: f64) -> Ftl {
        let geo = flash.geo;
        let gc_free_blocks = ((gc_threshold * f64::from(geo.blocks_per_plane)).ceil() as u32).max(2);
        Ftl {
            map: LpnMap::new(logical_units),
            logical_units,
            planes: vec![Plane::new(); geo.planes_total() as usize],
            buffer: Vec::new(),
            next_die: 0,
            gc_free_blocks,
            inflight: BinaryHeap::new(),
            inflight_units: 0,
            counts: FtlCounts::default(),
            stripe_masks: [geo.dies(), geo.planes, geo.units_per_page, geo.pages_per_block]
                .iter()
                .all(|n| n.is_power_of_two())
                .then(|| {
                    let shift =
                        geo.dies().trailing_zeros() + geo.planes.trailing_zeros() + geo.units_per_page.trailing_zeros();
                    (u64::from(geo.dies()) - 1, shift, u64::from(geo.pages_per_block) - 1)
                }),
            decode_shifts: [geo.units_per_page, geo.pages_per_block, geo.blocks_per_plane]
                .iter()
                .all(|n| n.is_power_of_two())
                .then(|| {
                    (
                        geo.units_per_page.trailing_zeros(),
                        geo.pages_per_block.trailing_zeros(),
                        geo.blocks_per_plane.trailing_zeros(),
                    )
                }),
        }
    }

    #[inline]
    fn get(&self, lpn: u64) -> u32 {
        self.map.get(lpn)
    }

    #[inline]
    fn set(&mut self, lpn: u64, v: u32) {
        self.map.set(lpn, v);
    }

    /// (plane index, block, page, unit) of a physical unit.
    #[inline]
    fn decode(&self, flash: &Flash, ppa: u64) -> (usize, u32, u32, u32) {
        if let Some((unit_bits, page_bits, block_bits)) = self.decode_shifts {
            let low = |x: u64, bits: u32| (x & ((1u64 << bits) - 1)) as u32;
            let page_all = ppa >> unit_bits;
            let block_all = page_all >> page_bits;
            return (
                (block_all >> block_bits) as usize,
                low(block_all, block_bits),
                low(page_all, page_bits),
                low(ppa, unit_bits),
            );
        }
        let g = &flash.geo;
        let unit = (ppa % u64::from(g.units_per_page)) as u32;
        let page_all = ppa / u64::from(g.units_per_page);
        let page = (page_all % u64::from(g.pages_per_block)) as u32;
        let block_all = page_all / u64::from(g.pages_per_block);
        let block = (block_all % u64::from(g.blocks_per_plane)) as u32;
        let plane = (block_all / u64::from(g.blocks_per_plane)) as usize;
        (plane, block, page, unit)
    }

    fn encode(flash: &Flash, plane: usize, block: u32, page: u32, unit: u32) -> u64 {
        let g = &flash.geo;
        ((plane as u64 * u64::from(g.blocks_per_plane) + u64::from(block)) * u64::from(g.pages_per_block)
            + u64::from(page))
            * u64::from(g.units_per_page)
            + u64::from(unit)
    }

    /// Start fetching `lpn`'s map entry into the CPU cache (for a `locate` or `write` soon).
    #[inline]
    pub fn prefetch(&self, lpn: u64) {
        self.map.prefetch(lpn);
    }

    /// Where unit `lpn` is read from.
    pub fn locate(&self, flash: &Flash, lpn: u64) -> Location {
        let g = &flash.geo;
        match self.get(lpn) {
            0 => {
                // Written before the trace: striped over dies, then planes, then pages.
                if let Some((die_mask, shift, page_mask)) = self.stripe_masks {
                    return Location::Flash { die: (lpn & die_mask) as u32, page: ((lpn >> shift) & page_mask) as u32 };
                }
                let dies = u64::from(g.dies());
                let die = (lpn % dies) as u32;
                let page = (lpn / dies / u64::from(g.planes) / u64::from(g.units_per_page)
                    % u64::from(g.pages_per_block)) as u32;
                Location::Flash { die, page }
            }
            BUFFERED => Location::Buffer,
            v => {
                let (plane, _, page, _) = self.decode(flash, u64::from(v - 1));
                let die = if g.planes.is_power_of_two() {
                    plane as u32 >> g.planes.trailing_zeros()
                } else {
                    plane as u32 / g.planes
                };
                Location::Flash { die, page }
            }
        }
    }

    fn invalidate(&mut self, flash: &Flash, lpn: u64) {
        let v = self.get(lpn);
        if v != 0 && v != BUFFERED {
            let (plane, block, _, _) = self.decode(flash, u64::from(v - 1));
            let b = &mut self.planes[plane].blocks[block as usize];
            b.valid -= 1;
        }
    }

    /// Units waiting in the buffer or being programmed at `t`.
    pub fn pending(&mut self, t: Ps) -> u64 {
        while let Some(&Reverse((done, units))) = self.inflight.peek() {
            if done > t {
                break;
            }
            self.inflight.pop();
            self.inflight_units -= u64::from(units);
        }
        self.buffer.len() as u64 + self.inflight_units
    }

    /// When the earliest in-flight program completes.
    pub fn next_program_done(&self) -> Option<Ps> {
        self.inflight.peek().map(|Reverse((t, _))| *t)
    }

    /// The host side writes unit `lpn` back at `t`.
    pub fn write(&mut self, flash: &mut Flash, lpn: u64, t: Ps) {
        self.counts.host_units += 1;
        if self.get(lpn) == BUFFERED {
            self.counts.buffer_merges += 1;
            return;
        }
        self.invalidate(flash, lpn);
        self.set(lpn, BUFFERED);
        self.buffer.push(lpn as u32);
        let program_units = (flash.geo.planes * flash.geo.units_per_page) as usize;
        if self.buffer.len() >= program_units {
            self.dispatch(flash, t);
        }
    }

    /// Open a new active block in `plane` (GC first if free blocks run low); false if none is left.
    fn open_block(&mut self, flash: &mut Flash, plane: usize, t: Ps, allow_gc: bool) -> bool {
        let g = flash.geo;
        if allow_gc && self.free_blocks(plane, &g) <= self.gc_free_blocks {
            self.gc(flash, plane, t);
        }
        let p = &mut self.planes[plane];
        let b = if let Some(b) = p.free.pop() {
            p.blocks[b as usize].free = false;
            b
        } else if p.fresh < g.blocks_per_plane {
            p.fresh += 1;
            p.blocks.push(Block { valid: 0, erases: 0, free: false, lpns: Vec::new() });
            p.fresh - 1
        } else {
            return false;
        };
        p.active = b;
        p.write_page = 0;
        true
    }

    fn free_blocks(&self, plane: usize, g: &super::flash::Geometry) -> u32 {
        let p = &self.planes[plane];
        g.blocks_per_plane - p.fresh + p.free.len() as u32
    }

    /// The next page of `plane`'s active block, opening a block if needed.
    fn next_page(&mut self, flash: &mut Flash, plane: usize, t: Ps, allow_gc: bool) -> Option<(u32, u32)> {
        let pages = flash.geo.pages_per_block;
        let p = &self.planes[plane];
        if (p.active == NONE || p.write_page >= pages) && !self.open_block(flash, plane, t, allow_gc) {
            return None;
        }
        let p = &mut self.planes[plane];
        let page = p.write_page;
        p.write_page += 1;
        Some((p.active, page))
    }

    /// Place `lpns` in the page (block, page) of `plane`; the map points at their new units.
    fn place(&mut self, flash: &Flash, plane: usize, block: u32, page: u32, lpns: &[u32]) {
        let upp = flash.geo.units_per_page;
        let first = (page * upp) as usize;
        let b = &mut self.planes[plane].blocks[block as usize];
        b.lpns.resize(first + upp as usize, 0);
        for (u, &lpn) in lpns.iter().enumerate() {
            let ppa = Self::encode(flash, plane, block, page, u as u32);
            let b = &mut self.planes[plane].blocks[block as usize];
            b.lpns[first + u] = lpn + 1;
            b.valid += 1;
            self.set(u64::from(lpn), ppa as u32 + 1);
        }
        self.counts.pad_units += u64::from(upp) - lpns.len() as u64;
    }

    /// Program the buffered units on the next die, one page per plane.
    fn dispatch(&mut self, flash: &mut Flash, t: Ps) {
        let g = flash.geo;
        let upp = g.units_per_page as usize;
        let units: Vec<u32> = std::mem::take(&mut self.buffer);
        // Try each die once, starting with the next in turn, for one whose planes all have room.
        for _ in 0..g.dies() {
            let die = self.next_die;
            self.next_die = (self.next_die + 1) % g.dies();
            let first_plane = (die * g.planes) as usize;
            let mut pages = Vec::with_capacity(g.planes as usize);
            for k in 0..g.planes as usize {
                match self.next_page(flash, first_plane + k, t, true) {
                    Some(bp) => pages.push(bp),
                    None => break,
                }
            }
            if pages.len() < g.planes as usize {
                continue;
            }
            let mut page_no = 0;
            for (k, &(block, page)) in pages.iter().enumerate() {
                let chunk = &units[(k * upp).min(units.len())..((k + 1) * upp).min(units.len())];
                self.place(flash, first_plane + k, block, page, chunk);
                page_no = page;
            }
            let done = flash.program(die, page_no, u64::from(g.planes) * g.page_size, t);
            self.inflight.push(Reverse((done, units.len() as u32)));
            self.inflight_units += units.len() as u64;
            return;
        }
        // No die has room: the device is full; the data is lost and counted.
        self.counts.dropped_units += units.len() as u64;
        for lpn in units {
            self.set(u64::from(lpn), 0);
        }
    }

    /// Greedy GC on `plane` until it has more than the threshold of free blocks.
    fn gc(&mut self, flash: &mut Flash, plane: usize, t: Ps) {
        let g = flash.geo;
        let upp = g.units_per_page as usize;
        let die = plane as u32 / g.planes;
        while self.free_blocks(plane, &g) <= self.gc_free_blocks {
            let p = &self.planes[plane];
            let victim = (0..p.fresh)
                .filter(|&b| b != p.active && !p.blocks[b as usize].free)
                .min_by_key(|&b| (p.blocks[b as usize].valid, p.blocks[b as usize].erases, b));
            let Some(victim) = victim else {
                self.counts.gc_stuck += 1;
                return;
            };
            // Moving units that fill every page of a block frees no page: collecting it would
            // only shuffle data (forever, as padding keeps every block short of full).
            if p.blocks[victim as usize].valid.div_ceil(g.units_per_page) >= g.pages_per_block {
                self.counts.gc_stuck += 1;
                return;
            }
            self.counts.gc_runs += 1;
            // Read the pages holding valid units, then write those units to the active block.
            let mut moved: Vec<u32> = Vec::new();
            let mut ready = t;
            for page in 0..g.pages_per_block {
                let mut n = 0;
                for u in 0..upp {
                    let lpn1 = self.planes[plane].blocks[victim as usize]
                        .lpns
                        .get(page as usize * upp + u)
                        .copied()
                        .unwrap_or(0);
                    if lpn1 == 0 {
                        continue;
                    }
                    let ppa = Self::encode(flash, plane, victim, page, u as u32) as u32 + 1;
                    if self.get(u64::from(lpn1 - 1)) == ppa {
                        moved.push(lpn1 - 1);
                        n += 1;
                    }
                }
                if n > 0 {
                    ready = ready.max(flash.read(die, page, n * g.unit, t));
                }
            }
            for lpns in moved.chunks(upp) {
                let Some((block, page)) = self.next_page(flash, plane, t, false) else {
                    self.counts.gc_stuck += 1;
                    return;
                };
                // The victim's units are still valid in it until moved; `place` re-points them.
                let vb = &mut self.planes[plane].blocks[victim as usize];
                vb.valid -= lpns.len() as u32;
                self.place(flash, plane, block, page, lpns);
                flash.program(die, page, g.page_size, ready);
                self.counts.gc_units += lpns.len() as u64;
            }
            flash.erase(die, ready);
            let b = &mut self.planes[plane].blocks[victim as usize];
            b.erases += 1;
            b.valid = 0;
            b.lpns = Vec::new();
            b.free = true;
            self.planes[plane].free.push(victim);
        }
    }

    /// Host units that reached flash (or are being programmed): not merged in the buffer, not
    /// still waiting in it, not dropped.
    pub fn host_units_programmed(&self) -> u64 {
        let c = &self.counts;
        c.host_units.saturating_sub(c.buffer_merges + self.buffer.len() as u64 + c.dropped_units)
    }

    /// Record a read served from the write buffer.
    pub fn buffer_read(&mut self) {
        self.counts.buffer_reads += 1;
    }

    /// (blocks ever opened, total erases, max erases of one block).
    pub fn wear(&self) -> (u64, u64, u32) {
        let mut opened = 0u64;
        let mut total = 0u64;
        let mut max = 0u32;
        for p in &self.planes {
            opened += u64::from(p.fresh);
            for b in &p.blocks {
                total += u64::from(b.erases);
                max = max.max(b.erases);
            }
        }
        (opened, total, max)
    }

    /// Bytes of mapping and block state held (for the memory target).
    pub fn state_bytes(&self) -> u64 {
        let blocks: u64 = self
            .planes
            .iter()
            .map(|p| {
                p.blocks.iter().map(|b| (b.lpns.capacity() * 4 + std::mem::size_of::<Block>()) as u64).sum::<u64>()
            })
            .sum();
        self.map.bytes() + blocks
    }

    pub fn stats(&self) -> serde_json::Value {
        let (opened, erases, max) = self.wear();
        let c = &self.counts;
        json!({
            "host_units": c.host_units,
            "buffer_merges": c.buffer_merges,
            "buffered_units": self.buffer.len(),
            "gc_runs": c.gc_runs,
            "gc_units": c.gc_units,
            "pad_units": c.pad_units,
            "gc_stuck": c.gc_stuck,
            "dropped_units": c.dropped_units,
            "buffer_reads": c.buffer_reads,
            "blocks_opened": opened,
            "erases": erases,
            "max_block_erases": max,
            "mean_block_erases": if opened == 0 { 0.0 } else { erases as f64 / opened as f64 },
            "state_bytes": self.state_bytes(),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use proptest::prelude::*;

    use super::*;
    use crate::cxl_flash::flash::{Geometry, Timing};

    /// 2 dies x 1 plane x 8 blocks x 4 pages of 4 units (16 units a block, 128 a die).
    fn small() -> (Flash, Ftl) {
        let geo = Geometry {
            channels: 1,
            ways: 2,
            planes: 1,
            blocks_per_plane: 8,
            pages_per_block: 4,
            page_size: 16384,
            unit: 4096,
            units_per_page: 4,
        };
        let timing = Timing {
            read: vec![3_000_000],
            program: vec![100_000_000],
            erase: 1_000_000_000,
            read_command: 0,
            program_command: 0,
        };
        let flash = Flash::new(geo, timing, 4e9);
        let ftl = Ftl::new(&flash, 192, 0.0);
        (flash, ftl)
    }

    /// Unwritten units sit where the striping rule puts them, whether the geometry's powers of
    /// two let `locate` use masks (8 x 4 dies) or not (3 x 5).
    #[test]
    fn unwritten_units_are_striped_over_dies_planes_then_pages() {
        for (channels, ways, masks) in [(8, 4, true), (3, 5, false)] {
            let geo = Geometry {
                channels,
                ways,
                planes: 4,
                blocks_per_plane: 8,
                pages_per_block: 16,
                page_size: 16384,
                unit: 4096,
                units_per_page: 4,
            };
            let timing = Timing {
                read: vec![3_000_000],
                program: vec![100_000_000],
                erase: 1_000_000_000,
                read_command: 0,
                program_command: 0,
            };
            let flash = Flash::new(geo, timing, 4e9);
            let ftl = Ftl::new(&flash, geo.physical_units() / 2, 0.0);
            assert_eq!(ftl.stripe_masks.is_some(), masks);
            let dies = u64::from(channels * ways);
            for lpn in (0..ftl.logical_units).step_by(7) {
                let page = (lpn / (dies * 4 * 4) % 16) as u32;
                assert_eq!(ftl.locate(&flash, lpn), Location::Flash { die: (lpn % dies) as u32, page }, "lpn {lpn}");
            }
        }
    }

    /// `decode` inverts `encode` on every physical unit, by shifts (powers of two) or by divisions.
    #[test]
    fn decode_inverts_encode() {
        for (blocks, pages, upp, shifts) in [(8, 16, 4, true), (6, 16, 4, false), (8, 5, 2, false), (8, 16, 3, false)] {
            let geo = Geometry {
                channels: 2,
                ways: 3,
                planes: 2,
                blocks_per_plane: blocks,
                pages_per_block: pages,
                page_size: 16384,
                unit: 4096,
                units_per_page: upp,
            };
            let timing = Timing {
                read: vec![3_000_000],
                program: vec![100_000_000],
                erase: 1_000_000_000,
                read_command: 0,
                program_command: 0,
            };
            let flash = Flash::new(geo, timing, 4e9);
            let ftl = Ftl::new(&flash, geo.physical_units() / 2, 0.0);
            assert_eq!(ftl.decode_shifts.is_some(), shifts);
            let mut ppa = 0;
            for plane in 0..geo.planes_total() as usize {
                for block in 0..blocks {
                    for page in 0..pages {
                        for unit in 0..upp {
                            assert_eq!(Ftl::encode(&flash, plane, block, page, unit), ppa);
                            assert_eq!(ftl.decode(&flash, ppa), (plane, block, page, unit), "ppa {ppa}");
                            ppa += 1;
                        }
                    }
                }
            }
            assert_eq!(ppa, geo.physical_units());
        }
    }

    #[test]
    fn sequential_overwrites_erase_exactly_the_invalid_blocks() {
        let (mut flash, mut ftl) = small();
        // Each round writes units 0..64: 16 programs of 4 units, alternating dies, so 2 blocks
        // per die. Rounds 1-3 open blocks 0-5 of each die; from round 4 every block opened finds
        // only 2 free blocks, and greedy GC erases a block with no valid unit left (the least
        // erased of them): 2 erases per die per round, nothing to move. Rounds 4, 5, 6 erase
        // blocks 0-1, 2-3, 4-5 once; round 7 erases blocks 0-1 again.
        for round in 1..=7u64 {
            for lpn in 0..64 {
                ftl.write(&mut flash, lpn, 0);
            }
            let (_, erases, max) = ftl.wear();
            assert_eq!(erases, 4 * round.saturating_sub(3), "round {round}");
            // Blocks 0-5 are reused in turn: round 7 erases blocks 0 and 1 a second time.
            assert_eq!(max, if round >= 7 { 2 } else { u32::from(round >= 4) }, "round {round}");
        }
        assert_eq!(ftl.counts.gc_units, 0);
        assert_eq!(ftl.counts.gc_runs, 16);
        assert_eq!(flash.ops.programs, 7 * 16);
        assert_eq!(flash.ops.erases, 16);
        // Die time: per die 56 programs of (16 KiB over the channel = 4096 ns + 100 us) and 8
        // erases of 1 ms; die 1's first program also holds its die 4096 ns while the one channel
        // loads die 0's page (after that the dies are out of step and never collide).
        let busy = flash.stats()["die_busy_ns"].as_f64().unwrap();
        assert_eq!(busy, 2.0 * (56.0 * 104_096.0 + 8.0 * 1_000_000.0) + 4096.0);
        // The last round's units are where the map says, on flash.
        assert!(matches!(ftl.locate(&flash, 63), Location::Flash { .. }));
    }

    #[test]
    fn greedy_gc_moves_the_valid_units() {
        let (mut flash, mut ftl) = small();
        // Fill 6 blocks per die with units 0..192 (all logical space), then overwrite only the
        // even units: the GC victims keep half their units valid, which must move. (The first
        // GC finds every block fully valid and gives up: `gc_stuck`.)
        for lpn in 0..192 {
            ftl.write(&mut flash, lpn, 0);
        }
        for _ in 0..3 {
            for lpn in (0..192).step_by(2) {
                ftl.write(&mut flash, lpn, 0);
            }
        }
        assert!(ftl.counts.gc_units > 0);
        assert_eq!(ftl.counts.dropped_units, 0);
        // Every logical unit is still mapped to a unit that holds it.
        for lpn in 0..192u64 {
            let v = ftl.get(lpn);
            assert!(v != 0, "unit {lpn} lost");
            if v != BUFFERED {
                let (plane, block, page, unit) = ftl.decode(&flash, u64::from(v - 1));
                let b = &ftl.planes[plane].blocks[block as usize];
                assert_eq!(b.lpns[(page * 4 + unit) as usize], lpn as u32 + 1);
            }
        }
        // Valid counts agree with the map.
        let valid: u64 = ftl.planes.iter().flat_map(|p| &p.blocks).map(|b| u64::from(b.valid)).sum();
        let buffered = ftl.buffer.len() as u64;
        assert_eq!(valid + buffered, 192);
    }

    #[test]
    fn gc_on_a_device_too_full_to_gain_a_page_gives_up() {
        // 192 logical units on 256 physical with 2 free blocks kept per die: the closed blocks
        // fill up and every victim's valid units need a whole block's pages. GC used to shuffle
        // them forever; it now counts itself stuck and the device drops what it cannot place.
        let (mut flash, mut ftl) = small();
        let mut x = 12345u64;
        for i in 0..2000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ftl.write(&mut flash, (x >> 33) % 192, i as Ps * 1_000_000);
        }
        assert!(ftl.counts.gc_stuck > 0);
        assert!(ftl.counts.gc_runs > 0);
        assert!(ftl.counts.dropped_units > 0);
    }

    /// The FTL's state after `writes` checked against a reference model (a HashMap of the units
    /// written): every written unit is mapped, in the buffer or at a physical unit whose block
    /// records it; unwritten units are unmapped; no physical unit is mapped twice; each block's
    /// valid count is the number of units mapped into it.
    fn check_against_reference(ftl: &Ftl, flash: &Flash, writes: &[u64]) -> std::result::Result<(), TestCaseError> {
        let mut reference: HashMap<u64, u32> = HashMap::new();
        for &lpn in writes {
            *reference.entry(lpn).or_default() += 1;
        }
        prop_assert_eq!(ftl.counts.dropped_units, 0);
        prop_assert_eq!(ftl.counts.host_units, writes.len() as u64);
        let buffered: HashSet<u32> = ftl.buffer.iter().copied().collect();
        prop_assert_eq!(buffered.len(), ftl.buffer.len(), "a unit buffered twice");
        let mut seen: HashSet<u32> = HashSet::new();
        let mut valid: HashMap<(usize, u32), u32> = HashMap::new();
        for lpn in 0..ftl.logical_units {
            let v = ftl.get(lpn);
            prop_assert_eq!(v != 0, reference.contains_key(&lpn), "unit {} mapped {}", lpn, v);
            prop_assert_eq!(v == BUFFERED, buffered.contains(&(lpn as u32)), "unit {}", lpn);
            if v == 0 || v == BUFFERED {
                continue;
            }
            prop_assert!(seen.insert(v), "physical unit {} mapped twice", v - 1);
            let (plane, block, page, unit) = ftl.decode(flash, u64::from(v - 1));
            let b = &ftl.planes[plane].blocks[block as usize];
            prop_assert!(!b.free, "unit {} in a free block", lpn);
            prop_assert_eq!(b.lpns[(page * flash.geo.units_per_page + unit) as usize], lpn as u32 + 1);
            *valid.entry((plane, block)).or_default() += 1;
        }
        for (plane, p) in ftl.planes.iter().enumerate() {
            for (block, b) in p.blocks.iter().enumerate() {
                let want = valid.get(&(plane, block as u32)).copied().unwrap_or(0);
                prop_assert_eq!(b.valid, want, "plane {} block {}", plane, block);
                if b.free {
                    prop_assert!(b.lpns.is_empty(), "an erased block keeps its reverse map");
                }
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]

        /// Random overwrites of the small device's logical space (GC moves valid units).
        #[test]
        fn random_writes_keep_the_map_consistent(writes in proptest::collection::vec(0u64..120, 1..1500)) {
            let (mut flash, mut ftl) = small();
            for (i, &lpn) in writes.iter().enumerate() {
                ftl.write(&mut flash, lpn, i as Ps * 1_000_000);
            }
            check_against_reference(&ftl, &flash, &writes)?;
        }

        /// Writes clustered in a part of the space, on a device with chunks that turn dense.
        #[test]
        fn clustered_writes_keep_the_map_consistent(
            writes in proptest::collection::vec((0u64..4, 0u64..700), 1..4000),
        ) {
            // 4 dies x 2 planes x 16 blocks x 16 pages x 4 units = 8192 units; 6000 logical.
            let geo = Geometry {
                channels: 2, ways: 2, planes: 2, blocks_per_plane: 16, pages_per_block: 16,
                page_size: 16384, unit: 4096, units_per_page: 4,
            };
            let timing = Timing { read: vec![3_000_000], program: vec![100_000_000], erase: 1_000_000_000, read_command: 0, program_command: 0 };
            let mut flash = Flash::new(geo, timing, 4e9);
            let mut ftl = Ftl::new(&flash, 6000, 0.05);
            let writes: Vec<u64> = writes.iter().map(|&(region, off)| region * 1500 + off).collect();
            for (i, &lpn) in writes.iter().enumerate() {
                ftl.write(&mut flash, lpn, i as Ps * 1_000_000);
            }
            check_against_reference(&ftl, &flash, &writes)?;
        }
    }
}
