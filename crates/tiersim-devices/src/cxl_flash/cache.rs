//! The device DRAM cache's tag store: `sets` x `ways` lines of one flash mapping unit each, with a
//! valid and a dirty bit per sub-block (64 B for 4 KiB lines: at most 64 sub-blocks per line),
//! a flag byte per line and a replacement policy from `replacement::REGISTRY`. Sets are indexed by
//! line modulo sets, or by a hash of the line when `cache_index_hash` is on (MQSim_CXL only has
//! the modulo). Arrays are zero-initialised, so the OS backs them only as lines are used.

use rustc_hash::FxHashMap;

use super::replacement::{Replacement, SetView, Shape, PINNED};

/// Line flag: filled by a prefetch and not yet used by a demand access.
pub const PREFETCHED: u8 = 1;

/// Above this associativity a set is found through a hash map instead of a scan of its tags
/// (a fully associative 8 GiB cache has 2M ways).
const SCAN_WAYS: u32 = 64;

/// What a pin request did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinOutcome {
    /// The line is pinned (or already was).
    Pinned,
    /// The line is pinned and the set's oldest pin was released for it.
    Replaced,
    /// The set's pin quota is full (or zero): the line is not pinned.
    Refused,
}

/// A line pushed out of the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Evicted {
    pub line: u64,
    pub dirty: u64,
    pub valid: u64,
    pub flags: u8,
}

pub struct Cache {
    pub sets: usize,
    pub ways: u32,
    hash: bool,
    /// sets - 1 when sets is a power of two (a mask replaces the division), else 0.
    set_mask: u64,
    /// log2(ways) when ways is a power of two (a shift finds a slot's set), else 0.
    way_shift: u32,
    pow2_ways: bool,
    /// Way of each set's last hit or fill, tried before the scan (accesses repeat lines).
    recent: Vec<u32>,
    /// line + 1 per slot; 0 = empty. Lines fit 32 bits (the device has fewer than 2^32 - 1
    /// units), and 32-bit tags let the set scan compare four ways per SSE2 instruction.
    tags: Vec<u32>,
    pub dirty: Vec<u64>,
    pub valid: Vec<u64>,
    pub flags: Vec<u8>,
    /// Ways in use per set (sets fill way by way and never shrink).
    used: Vec<u32>,
    pinned: Vec<u32>,
    /// Per slot: when its line was last pinned (`pin_clock`), kept only once a pin request may
    /// replace the oldest pin; empty until then.
    pin_seq: Vec<u64>,
    pin_clock: u64,
    map: Option<FxHashMap<u64, u32>>,
    repl: Box<dyn Replacement>,
}

#[inline]
fn mix(x: u64) -> u64 {
    // splitmix64's finalizer: every input bit moves every output bit.
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Bit w set: `tags[w] == key`.
#[cfg(target_arch = "x86_64")]
#[inline]
pub(super) fn matches8(tags: &[u32; 8], key: u32) -> u32 {
    use std::arch::x86_64::{
        __m128i, _mm_castsi128_ps, _mm_cmpeq_epi32, _mm_loadu_si128, _mm_movemask_ps, _mm_set1_epi32,
    };
    // SAFETY: SSE2 is part of x86_64; both loads read 4 u32 inside the 8-element array.
    unsafe {
        let k = _mm_set1_epi32(key as i32);
        let lo = _mm_loadu_si128(tags.as_ptr().cast::<__m128i>());
        let hi = _mm_loadu_si128(tags.as_ptr().add(4).cast::<__m128i>());
        let lo = _mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(lo, k))) as u32;
        let hi = _mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(hi, k))) as u32;
        lo | hi << 4
    }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
pub(super) fn matches8(tags: &[u32; 8], key: u32) -> u32 {
    tags.iter().enumerate().fold(0, |m, (w, &t)| m | u32::from(t == key) << w)
}

impl Cache {
    pub fn new(shape: Shape, hash: bool, repl: Box<dyn Replacement>) -> Cache {
        let slots = shape.sets * shape.ways as usize;
        Cache {
            sets: shape.sets,
            ways: shape.ways,
            hash,
            set_mask: if shape.sets.is_power_of_two() { shape.sets as u64 - 1 } else { 0 },
            way_shift: shape.ways.trailing_zeros(),
            pow2_ways: shape.ways.is_power_of_two(),
            recent: vec![0; shape.sets],
            tags: vec![0; slots],
            dirty: vec![0; slots],
            valid: vec![0; slots],
            flags: vec![0; slots],
            used: vec![0; shape.sets],
            pinned: vec![0; shape.sets],
            pin_seq: Vec::new(),
            pin_clock: 0,
            map: (shape.ways > SCAN_WAYS).then(FxHashMap::default),
            repl,
        }
    }

    #[inline]
    pub fn set_of(&self, line: u64) -> usize {
        let x = if self.hash { mix(line) } else { line };
        if self.set_mask != 0 || self.sets == 1 {
            (x & self.set_mask) as usize
        } else {
            (x % self.sets as u64) as usize
        }
    }

    #[inline]
    fn set_of_slot(&self, slot: u32) -> usize {
        if self.pow2_ways {
            (slot >> self.way_shift) as usize
        } else {
            slot as usize / self.ways as usize
        }
    }

    #[inline]
    pub fn lookup(&self, line: u64) -> Option<u32> {
        if let Some(m) = &self.map {
            return m.get(&line).copied();
        }
        let set = self.set_of(line);
        let first = set * self.ways as usize;
        debug_assert!(line < u64::from(u32::MAX));
        let key = line as u32 + 1;
        let recent = first + self.recent[set] as usize;
        if self.tags[recent] == key {
            return Some(recent as u32);
        }
        // A line is in its set at most once and unused ways hold 0, so the whole set can be
        // compared eight ways at a time without early exits (which vectorises).
        let tags = &self.tags[first..first + self.ways as usize];
        let mut chunks = tags.chunks_exact(8);
        for (c, chunk) in chunks.by_ref().enumerate() {
            let hits = matches8(chunk.try_into().expect("chunks of 8"), key);
            if hits != 0 {
                return Some((first + c * 8 + hits.trailing_zeros() as usize) as u32);
            }
        }
        let base = tags.len() - chunks.remainder().len();
        chunks.remainder().iter().position(|&t| t == key).map(|w| (first + base + w) as u32)
    }

    #[inline]
    pub fn line_of(&self, slot: u32) -> u64 {
        u64::from(self.tags[slot as usize] - 1)
    }

    #[inline]
    pub fn hit(&mut self, slot: u32) {
        let set = self.set_of_slot(slot);
        self.recent[set] = slot - (set as u32 * self.ways);
        self.repl.hit(set, slot);
    }

    /// Place `line` (not present) in its set; returns its slot, clean and invalid, and the line
    /// it displaced.
    pub fn allocate(&mut self, line: u64) -> (u32, Option<Evicted>) {
        let set = self.set_of(line);
        let first = (set * self.ways as usize) as u32;
        let (slot, evicted) = if self.used[set] < self.ways {
            self.used[set] += 1;
            (first + self.used[set] - 1, None)
        } else {
            let view = SetView { set, first, ways: self.ways, dirty: &self.dirty, flags: &self.flags };
            let s = self.repl.victim(&view);
            let i = s as usize;
            let e = Evicted {
                line: u64::from(self.tags[i] - 1),
                dirty: self.dirty[i],
                valid: self.valid[i],
                flags: self.flags[i],
            };
            if e.flags & PINNED != 0 {
                self.pinned[set] -= 1;
            }
            if let Some(m) = &mut self.map {
                m.remove(&e.line);
            }
            (s, Some(e))
        };
        let i = slot as usize;
        debug_assert!(line < u64::from(u32::MAX));
        self.tags[i] = line as u32 + 1;
        self.dirty[i] = 0;
        self.valid[i] = 0;
        self.flags[i] = 0;
        if let Some(m) = &mut self.map {
            m.insert(line, slot);
        }
        self.recent[set] = slot - first;
        self.repl.insert(set, slot);
        (slot, evicted)
    }

    /// Pin the line in `slot`. A set holds at most `max` pinned lines; when it is full the
    /// request is refused, or with `replace` the set's least recently pinned line is unpinned
    /// (it stays cached, an ordinary line for the replacement policy) and this one pinned.
    /// Pinning a pinned line succeeds and, with `replace`, makes it the most recent pin.
    pub fn pin(&mut self, slot: u32, max: u32, replace: bool) -> PinOutcome {
        let i = slot as usize;
        if replace && self.pin_seq.is_empty() {
            self.pin_seq = vec![0; self.tags.len()];
        }
        let set = self.set_of_slot(slot);
        let mut outcome = PinOutcome::Pinned;
        if self.flags[i] & PINNED == 0 {
            if self.pinned[set] >= max {
                if !replace {
                    return PinOutcome::Refused;
                }
                let first = set * self.ways as usize;
                let Some(oldest) = (first..first + self.ways as usize)
                    .filter(|&s| self.flags[s] & PINNED != 0)
                    .min_by_key(|&s| self.pin_seq[s])
                else {
                    return PinOutcome::Refused;
                };
                self.flags[oldest] &= !PINNED;
                self.pinned[set] -= 1;
                outcome = PinOutcome::Replaced;
            }
            self.pinned[set] += 1;
            self.flags[i] |= PINNED;
        }
        if replace {
            self.pin_clock += 1;
            self.pin_seq[i] = self.pin_clock;
        }
        outcome
    }

    /// Lines currently cached.
    pub fn resident(&self) -> u64 {
        self.used.iter().map(|&u| u64::from(u)).sum()
    }
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;
    use rustc_hash::FxHashMap;
    use tiersim_core::Params;

    use super::*;
    use crate::cxl_flash::replacement;

    /// Lookups agree with a map of what was allocated and evicted, for shapes that take every
    /// path of the set scan: power-of-two and other set counts, ways below, at and above the
    /// 8-way chunk (with a remainder), hashed indexing.
    #[test]
    fn lookup_finds_exactly_the_resident_lines() {
        let params = Params::resolve(crate::cxl_flash::SPECS, None).unwrap();
        for (sets, ways, hash) in [(4, 16, false), (3, 12, false), (5, 5, true), (1, 8, false), (2, 70, false)] {
            let shape = replacement::Shape { sets, ways };
            let repl = (replacement::find("lru").unwrap().build)(&params, shape).unwrap();
            let mut cache = Cache::new(shape, hash, repl);
            let mut model: FxHashMap<u64, u32> = FxHashMap::default();
            let mut rng = ChaCha8Rng::seed_from_u64(sets as u64 * 100 + u64::from(ways));
            for _ in 0..20_000 {
                let line = rng.gen_range(0..(sets as u64 * u64::from(ways) * 2));
                assert_eq!(cache.lookup(line), model.get(&line).copied(), "{sets} x {ways}, line {line}");
                match cache.lookup(line) {
                    Some(slot) => cache.hit(slot),
                    None => {
                        let (slot, evicted) = cache.allocate(line);
                        if let Some(e) = evicted {
                            assert_eq!(model.remove(&e.line), Some(slot));
                        }
                        model.insert(line, slot);
                        assert_eq!(cache.line_of(slot), line);
                    }
                }
            }
            assert_eq!(cache.resident(), model.len() as u64);
        }
    }

    /// Random pins and fills with `replace`: a set never holds more than `max` pinned lines, its
    /// count matches its flags, every pin request succeeds, and the pin released is always the
    /// set's least recently pinned line (checked against a list per set in pin order).
    #[test]
    fn replacing_pins_keeps_the_quota_and_releases_the_oldest() {
        let params = Params::resolve(crate::cxl_flash::SPECS, None).unwrap();
        let shape = replacement::Shape { sets: 4, ways: 8 };
        let max = 3;
        let repl = (replacement::find("lru").unwrap().build)(&params, shape).unwrap();
        let mut cache = Cache::new(shape, false, repl);
        let mut order: Vec<Vec<u64>> = vec![Vec::new(); shape.sets];
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for _ in 0..20_000 {
            let line = rng.gen_range(0..96u64);
            let set = cache.set_of(line);
            let slot = match cache.lookup(line) {
                Some(slot) => slot,
                None => {
                    let (slot, evicted) = cache.allocate(line);
                    if let Some(e) = evicted {
                        order[cache.set_of(e.line)].retain(|&l| l != e.line);
                    }
                    slot
                }
            };
            if rng.gen_bool(0.3) {
                let full = !order[set].contains(&line) && order[set].len() == max as usize;
                let outcome = cache.pin(slot, max, true);
                assert_eq!(outcome, if full { PinOutcome::Replaced } else { PinOutcome::Pinned });
                if full {
                    let oldest = order[set].remove(0);
                    let s = cache.lookup(oldest).expect("an unpinned line stays cached");
                    assert_eq!(cache.flags[s as usize] & PINNED, 0);
                }
                order[set].retain(|&l| l != line);
                order[set].push(line);
            }
            for (set, lines) in order.iter().enumerate() {
                let first = set * shape.ways as usize;
                let flagged = (first..first + shape.ways as usize).filter(|&s| cache.flags[s] & PINNED != 0).count();
                assert_eq!(flagged, lines.len());
                assert_eq!(cache.pinned[set] as usize, lines.len());
                assert!(lines.len() <= max as usize);
            }
        }
    }
}
