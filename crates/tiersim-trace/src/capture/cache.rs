//! The last-level cache filter of `tiersim capture`: set-associative, LRU, write-back and
//! write-allocate. Only line fills (misses) and dirty evictions leave it, which is what the
//! CXL-flash study traced with its modified Cachegrind ("memory accesses caused by LLC misses or
//! replacements", Yang et al., ATC'23, sec. 3.1). Deviations: one level only (no L1/L2 in front,
//! which would not change what misses an inclusive LLC), no prefetcher, and sets indexed by
//! line number modulo the set count rather than a hardware hash.

use tiersim_core::{Error, Result};

/// Geometry of the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheConfig {
    /// Total capacity in bytes: a multiple of `line_size * ways`.
    pub size: u64,
    pub ways: u32,
    /// Bytes per line: a power of two.
    pub line_size: u32,
}

impl CacheConfig {
    pub fn sets(&self) -> u64 {
        self.size / (self.line_size as u64 * self.ways as u64)
    }

    pub fn check(&self) -> Result<()> {
        if !self.line_size.is_power_of_two() {
            return Err(Error::config("line_size", format!("{} bytes is not a power of two", self.line_size)));
        }
        if self.ways == 0 {
            return Err(Error::config("llc_ways", "a cache needs at least one way"));
        }
        let set_bytes = self.line_size as u64 * self.ways as u64;
        if self.size == 0 || !self.size.is_multiple_of(set_bytes) {
            return Err(Error::config(
                "llc",
                format!(
                    "{} bytes is not a positive multiple of line_size x llc_ways = {set_bytes} bytes (one set)",
                    self.size
                ),
            ));
        }
        Ok(())
    }
}

/// What one line access did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Hit,
    /// The line was fetched; `writeback` is the line number of a dirty line it evicted.
    Miss {
        writeback: Option<u64>,
    },
}

/// Counters of a cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    pub writebacks: u64,
}

const INVALID: u64 = u64::MAX;

pub struct Cache {
    cfg: CacheConfig,
    sets: u64,
    ways: usize,
    /// Line numbers held, `ways` per set; INVALID marks an empty way.
    tags: Vec<u64>,
    /// Time of each way's last use (LRU evicts the smallest).
    used: Vec<u64>,
    dirty: Vec<bool>,
    clock: u64,
    stats: CacheStats,
}

impl Cache {
    pub fn new(cfg: CacheConfig) -> Result<Cache> {
        cfg.check()?;
        let n = (cfg.size / cfg.line_size as u64) as usize;
        Ok(Cache {
            cfg,
            sets: cfg.sets(),
            ways: cfg.ways as usize,
            tags: vec![INVALID; n],
            used: vec![0; n],
            dirty: vec![false; n],
            clock: 0,
            stats: CacheStats::default(),
        })
    }

    pub fn config(&self) -> CacheConfig {
        self.cfg
    }

    pub fn stats(&self) -> CacheStats {
        self.stats
    }

    pub fn line_shift(&self) -> u32 {
        self.cfg.line_size.trailing_zeros()
    }

    /// Access line number `line` (address >> line_shift); a write leaves the line dirty.
    #[inline]
    pub fn access(&mut self, line: u64, write: bool) -> Outcome {
        self.clock += 1;
        let base = (line % self.sets) as usize * self.ways;
        let set = base..base + self.ways;
        if let Some(w) = self.tags[set.clone()].iter().position(|&t| t == line) {
            let i = base + w;
            self.used[i] = self.clock;
            self.dirty[i] |= write;
            self.stats.hits += 1;
            return Outcome::Hit;
        }
        self.stats.misses += 1;
        // An empty way if there is one (its `used` is 0), else the least recently used.
        let i =
            base + (0..self.ways).min_by_key(|&w| (self.tags[base + w] != INVALID, self.used[base + w])).unwrap_or(0);
        let writeback = (self.tags[i] != INVALID && self.dirty[i]).then_some(self.tags[i]);
        if writeback.is_some() {
            self.stats.writebacks += 1;
        }
        self.tags[i] = line;
        self.used[i] = self.clock;
        self.dirty[i] = write;
        Outcome::Miss { writeback }
    }

    /// Lines currently dirty (they would be written back if the program ran on).
    pub fn dirty_lines(&self) -> u64 {
        self.dirty.iter().zip(&self.tags).filter(|&(&d, &t)| d && t != INVALID).count() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn cache(size: u64, ways: u32) -> Cache {
        Cache::new(CacheConfig { size, ways, line_size: 64 }).unwrap()
    }

    #[test]
    fn two_way_lru_hand_checked() {
        // 2 sets x 2 ways. Lines 0, 2, 4 map to set 0; 1 to set 1.
        let mut c = cache(256, 2);
        use Outcome::*;
        assert_eq!(c.access(0, false), Miss { writeback: None });
        assert_eq!(c.access(2, true), Miss { writeback: None });
        assert_eq!(c.access(1, true), Miss { writeback: None });
        assert_eq!(c.access(0, false), Hit);
        // Set 0 holds 0 (recent) and 2 (dirty, LRU): 4 evicts 2 and writes it back.
        assert_eq!(c.access(4, false), Miss { writeback: Some(2) });
        // Now 0 is LRU and clean: 2 evicts it without a writeback.
        assert_eq!(c.access(2, false), Miss { writeback: None });
        assert_eq!(c.access(4, true), Hit);
        // 2 was used before 4's hit, so 0 evicts 2 (clean) and the dirty 4 stays.
        assert_eq!(c.access(0, false), Miss { writeback: None });
        assert_eq!(c.access(4, false), Hit);
        assert_eq!(c.access(6, false), Miss { writeback: None });
        assert_eq!(c.stats(), CacheStats { hits: 3, misses: 7, writebacks: 1 });
        // 1 (set 1) and 4 (set 0) are dirty.
        assert_eq!(c.dirty_lines(), 2);
    }

    #[test]
    fn sequential_sweeps_larger_than_the_cache_always_miss() {
        // LRU thrashes on a cyclic sweep one line larger than a set's ways, in every set.
        let mut c = cache(64 * 1024, 8);
        let lines = 64 * 1024 / 64 + 128;
        for pass in 0..3 {
            for l in 0..lines {
                let o = c.access(l, true);
                // After the first pass every line was written, so each miss evicts a dirty line.
                let expect_wb = pass > 0 || l >= 1024;
                assert!(matches!(o, Outcome::Miss { writeback: Some(_) }) == expect_wb, "pass {pass} line {l}: {o:?}");
            }
        }
        assert_eq!(c.stats().hits, 0);
    }

    #[test]
    fn working_set_that_fits_only_misses_once() {
        let mut c = cache(32 * 1024, 4);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        // 128 sets of 4 ways, and exactly 4 distinct lines in each set: 512 cold misses, then hits.
        let lines: Vec<u64> = (0..128u64).flat_map(|s| (0..4).map(move |k| s + 128 * k * 7)).collect();
        for _ in 0..20_000 {
            c.access(lines[rng.gen_range(0..lines.len())], rng.gen_bool(0.3));
        }
        assert_eq!(c.stats().misses, lines.len() as u64);
        assert_eq!(c.stats().writebacks, 0);
    }

    /// LRU against a brute-force model: per set, a recency list.
    #[test]
    fn matches_a_reference_lru_on_random_streams() {
        for seed in 0..20 {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            let ways = rng.gen_range(1..6u32);
            let sets = rng.gen_range(1..9u64);
            let mut c = cache(64 * ways as u64 * sets, ways);
            let mut model: Vec<Vec<(u64, bool)>> = vec![Vec::new(); sets as usize];
            for _ in 0..5000 {
                let line = rng.gen_range(0..sets * ways as u64 * 3);
                let write = rng.gen_bool(0.4);
                let set = &mut model[(line % sets) as usize];
                let expect = match set.iter().position(|&(l, _)| l == line) {
                    Some(p) => {
                        let (l, d) = set.remove(p);
                        set.push((l, d | write));
                        Outcome::Hit
                    }
                    None => {
                        let wb = if set.len() == ways as usize {
                            let (l, d) = set.remove(0);
                            d.then_some(l)
                        } else {
                            None
                        };
                        set.push((line, write));
                        Outcome::Miss { writeback: wb }
                    }
                };
                assert_eq!(c.access(line, write), expect, "seed {seed}");
            }
        }
    }

    #[test]
    fn bad_geometry_is_a_config_error() {
        let e = |size, ways, line_size| Cache::new(CacheConfig { size, ways, line_size }).err().unwrap().to_string();
        assert!(e(1000, 16, 64).contains("`llc`: 1000 bytes is not a positive multiple of line_size x llc_ways = 1024"));
        assert!(e(4096, 0, 64).contains("`llc_ways`"));
        assert!(e(4096, 4, 48).contains("`line_size`: 48 bytes is not a power of two"));
    }
}
