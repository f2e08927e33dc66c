//! The FTL's forward map (logical unit -> u32 value, 0 = unmapped) for devices up to 16 TiB,
//! costing memory for what the trace wrote rather than for the logical space (issue 5: a 1 TiB
//! device under 500 MB; MQSim_CXL allocates the whole map, over 24 GB). Units are grouped in
//! chunks of 1024; a chunk holds only its mapped entries, in unit order, found by the rank of a
//! bitmap (a popcount), and turns dense (every unit, bits all set) once half of it is mapped, so
//! a fully written device costs 4 bytes a unit plus 0.2 bytes of bitmap.

const CHUNK_SHIFT: u32 = 10;
const CHUNK: usize = 1 << CHUNK_SHIFT;
const GROUPS: usize = CHUNK / 64;

/// One chunk: which units are present, and their values in unit order.
#[derive(Debug, Clone)]
struct Chunk {
    bits: [u64; GROUPS],
    /// Entries held by the groups before each group.
    before: [u16; GROUPS],
    vals: Vec<u32>,
}

impl Chunk {
    fn new() -> Chunk {
        Chunk { bits: [0; GROUPS], before: [0; GROUPS], vals: Vec::new() }
    }

    /// Index in `vals` of unit `i` if present, else where it would be inserted (as Err).
    #[inline]
    fn rank(&self, i: usize) -> Result<usize, usize> {
        let (g, b) = (i >> 6, i & 63);
        let word = self.bits[g];
        let at = usize::from(self.before[g]) + (word & ((1u64 << b) - 1)).count_ones() as usize;
        if word >> b & 1 == 1 {
            Ok(at)
        } else {
            Err(at)
        }
    }

    /// Every unit present (unmapped ones as 0): inserts become plain stores.
    fn make_dense(&mut self) {
        let mut vals = vec![0u32; CHUNK];
        let mut k = 0;
        for (i, v) in vals.iter_mut().enumerate() {
            if self.bits[i >> 6] >> (i & 63) & 1 == 1 {
                *v = self.vals[k];
                k += 1;
            }
        }
        self.vals = vals;
        self.bits = [u64::MAX; GROUPS];
        for (g, b) in self.before.iter_mut().enumerate() {
            *b = (g * 64) as u16;
        }
    }
}

#[derive(Debug, Clone)]
pub struct LpnMap {
    /// `None` for chunks never written (a zeroed vector: untouched pages cost no memory).
    chunks: Vec<Option<Box<Chunk>>>,
}

impl LpnMap {
    pub fn new(units: u64) -> LpnMap {
        LpnMap { chunks: vec![None; units.div_ceil(CHUNK as u64) as usize] }
    }

    #[inline]
    pub fn get(&self, unit: u64) -> u32 {
        match &self.chunks[(unit >> CHUNK_SHIFT) as usize] {
            Some(c) => match c.rank(unit as usize & (CHUNK - 1)) {
                Ok(k) => c.vals[k],
                Err(_) => 0,
            },
            None => 0,
        }
    }

    /// Hint the CPU to fetch `unit`'s entry (exactly in a dense chunk, the start of its group
    /// of 64 in a sparse one), so that a `get` some hundred instructions later does not wait
    /// for memory: on an all-miss trace the map is megabytes read at random, and that wait was
    /// a quarter of the replay's time.
    #[inline]
    pub fn prefetch(&self, unit: u64) {
        let Some(c) = &self.chunks[(unit >> CHUNK_SHIFT) as usize] else { return };
        let i = unit as usize & (CHUNK - 1);
        let k = if c.vals.len() == CHUNK { i } else { usize::from(c.before[i >> 6]) };
        tiersim_core::prefetch(&c.vals, k);
    }

    #[inline]
    pub fn set(&mut self, unit: u64, v: u32) {
        let slot = &mut self.chunks[(unit >> CHUNK_SHIFT) as usize];
        if slot.is_none() && v == 0 {
            return;
        }
        let c = slot.get_or_insert_with(|| Box::new(Chunk::new()));
        let i = unit as usize & (CHUNK - 1);
        match c.rank(i) {
            Ok(k) => c.vals[k] = v,
            Err(_) if c.vals.len() >= CHUNK / 2 => {
                c.make_dense();
                c.vals[i] = v;
            }
            Err(k) => {
                c.vals.insert(k, v);
                let g = i >> 6;
                c.bits[g] |= 1 << (i & 63);
                for b in &mut c.before[g + 1..] {
                    *b += 1;
                }
            }
        }
    }

    /// Heap bytes held (the memory target's accounting).
    pub fn bytes(&self) -> u64 {
        let chunks: u64 =
            self.chunks.iter().flatten().map(|c| (std::mem::size_of::<Chunk>() + c.vals.capacity() * 4) as u64).sum();
        (self.chunks.len() * std::mem::size_of::<Option<Box<Chunk>>>()) as u64 + chunks
    }

    /// Chunks allocated, and of them the dense ones.
    pub fn chunk_counts(&self) -> (u64, u64) {
        let mut n = 0;
        let mut dense = 0;
        for c in self.chunks.iter().flatten() {
            n += 1;
            dense += u64::from(c.vals.len() == CHUNK);
        }
        (n, dense)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn sparse_then_dense_keeps_every_value() {
        let mut m = LpnMap::new(3 * CHUNK as u64);
        // Chunk 1, every third unit backwards: inserts land before existing entries.
        for u in (0..CHUNK as u64).rev().step_by(3) {
            m.set(CHUNK as u64 + u, u as u32 + 7);
        }
        assert_eq!(m.chunk_counts(), (1, 0));
        for u in 0..CHUNK as u64 {
            let want = if (CHUNK as u64 - 1 - u).is_multiple_of(3) { u as u32 + 7 } else { 0 };
            assert_eq!(m.get(CHUNK as u64 + u), want, "unit {u}");
        }
        // The rest of the chunk: it turns dense at 512 entries and keeps the old values.
        for u in 0..CHUNK as u64 {
            if m.get(CHUNK as u64 + u) == 0 {
                m.set(CHUNK as u64 + u, 1_000_000 + u as u32);
            }
        }
        assert_eq!(m.chunk_counts(), (1, 1));
        for u in 0..CHUNK as u64 {
            let want = if (CHUNK as u64 - 1 - u).is_multiple_of(3) { u as u32 + 7 } else { 1_000_000 + u as u32 };
            assert_eq!(m.get(CHUNK as u64 + u), want, "unit {u}");
        }
        // Other chunks untouched; clearing an unmapped unit allocates nothing.
        m.set(5, 0);
        assert_eq!(m.get(5), 0);
        assert_eq!(m.chunk_counts(), (1, 1));
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]

        /// Random sets (a few chunks, so some turn dense) read back as a HashMap says.
        #[test]
        fn matches_a_hash_map(ops in proptest::collection::vec((0u64..2600, any::<u32>()), 1..3000)) {
            let units = 2600u64;
            let mut m = LpnMap::new(units);
            let mut reference: HashMap<u64, u32> = HashMap::new();
            for (unit, v) in ops {
                // A quarter of the sets clear a unit.
                let v = if v % 4 == 0 { 0 } else { v };
                m.set(unit, v);
                reference.insert(unit, v);
            }
            for u in 0..units {
                prop_assert_eq!(m.get(u), reference.get(&u).copied().unwrap_or(0), "unit {}", u);
            }
        }
    }
}
