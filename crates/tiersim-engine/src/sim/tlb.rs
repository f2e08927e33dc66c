//! Per-CPU TLBs (`host.tlb_entries`, `host.tlb_ways`, `host.tlb_miss_latency`): a table of page
//! translations per CPU in sets indexed by the virtual page's low bits, LRU within a set. One way
//! is QEMU's softmmu TLB (accel/tcg/cputlb.c, tlb_index; its victim TLB of 8 entries is left out);
//! a hardware STLB is a few ways (1,536 entries in 12 ways on recent Intel cores). A miss is a page
//! walk: the access waits `tlb_miss_latency` before it issues. An entry remembers the frame it
//! translated to, so a page that moved (migration, swap) misses again; a scan window flushes
//! every CPU's table (x86 flush_tlb_mm_range flushes all beyond 33 pages).

use serde_json::{json, Value};

use tiersim_core::{Error, Result};

use crate::os::Metrics;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    vpn: u64,
    frame: u32,
    node: u16,
}

const EMPTY: Entry = Entry { vpn: u64::MAX, frame: 0, node: 0 };

pub(crate) struct Tlbs {
    /// `entries` per CPU, CPU after CPU; each set's `ways` in recency order, most recent first.
    table: Vec<Entry>,
    entries: usize,
    ways: usize,
    set_mask: usize,
    pub(crate) miss_ps: u64,
    /// `tlb_lookups = "reads"`: writes pass untranslated.
    pub(crate) reads_only: bool,
    /// Over the measured part of the run.
    pub(crate) misses: u64,
    pub(crate) flushes: u64,
}

impl Tlbs {
    /// None when `entries` is 0 (no TLB model).
    pub(crate) fn new(entries: u64, ways: u64, miss_ps: u64, reads_only: bool, ncpus: usize) -> Result<Option<Tlbs>> {
        if entries == 0 {
            return Ok(None);
        }
        let sets = entries / ways.max(1);
        if ways == 0 || !entries.is_multiple_of(ways) || !sets.is_power_of_two() {
            return Err(Error::config(
                "host.tlb_entries",
                format!(
                    "{entries} entries in {ways} ways: expected a power of two sets of tlb_ways (sets are indexed \
                     by the page number's low bits)"
                ),
            ));
        }
        let (entries, ways) = (entries as usize, ways as usize);
        Ok(Some(Tlbs {
            table: vec![EMPTY; entries * ncpus],
            entries,
            ways,
            set_mask: entries / ways - 1,
            miss_ps,
            reads_only,
            misses: 0,
            flushes: 0,
        }))
    }

    /// CPU `c`'s lookup of `vpn`, now translated to `frame` on `node`: true on a hit; a miss
    /// fills the entry (the walk's result) and counts when `measuring`.
    #[inline]
    pub(crate) fn hit(&mut self, c: usize, vpn: u64, frame: u32, node: u16, measuring: bool) -> bool {
        let base = c * self.entries + (vpn as usize & self.set_mask) * self.ways;
        let set = &mut self.table[base..base + self.ways];
        let want = Entry { vpn, frame, node };
        // A stale translation of the page (it moved) is replaced where it is, not duplicated.
        let k = set.iter().position(|e| e.vpn == vpn).unwrap_or(self.ways - 1);
        let hit = set[k] == want;
        set[..=k].rotate_right(1);
        set[0] = want;
        self.misses += u64::from(measuring && !hit);
        hit
    }

    pub(crate) fn flush_all(&mut self, measuring: bool) {
        self.table.fill(EMPTY);
        self.flushes += u64::from(measuring);
    }

    pub(crate) fn summary(&self) -> Value {
        json!({
            "entries_per_cpu": self.entries,
            "ways": self.ways,
            "lookups": if self.reads_only { "reads" } else { "all" },
            "misses": self.misses,
            "miss_time_ns": self.misses * self.miss_ps / 1000,
            "flushes": self.flushes,
        })
    }
}

impl Metrics for Tlbs {
    fn reset(&mut self) {
        self.misses = 0;
        self.flushes = 0;
    }

    /// Its own section of the summary (`summary`), present only with a TLB model.
    fn report(&self, _section: &str, _into: &mut serde_json::Map<String, Value>) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_mapped_conflicts_moves_and_flushes() {
        let mut t = Tlbs::new(4, 1, 100_000, false, 2).unwrap().unwrap();
        assert!(!t.hit(0, 1, 10, 0, true));
        assert!(t.hit(0, 1, 10, 0, true));
        // CPU 1 has its own table.
        assert!(!t.hit(1, 1, 10, 0, true));
        // 5 maps to the same slot as 1 (5 & 3 == 1) and evicts it.
        assert!(!t.hit(0, 5, 11, 0, true));
        assert!(!t.hit(0, 1, 10, 0, true));
        // The page moved to another frame: the old translation does not hit.
        assert!(!t.hit(0, 1, 10, 1, true));
        assert!(t.hit(0, 1, 10, 1, true));
        t.flush_all(true);
        assert!(!t.hit(1, 1, 10, 0, false));
        assert_eq!((t.misses, t.flushes), (5, 1));
        assert_eq!(t.summary()["miss_time_ns"], 500);
    }

    #[test]
    fn off_at_zero_and_only_powers_of_two() {
        assert!(Tlbs::new(0, 1, 1, false, 1).unwrap().is_none());
        let e = Tlbs::new(48, 1, 1, false, 1).err().unwrap().to_string();
        assert!(e.contains("host.tlb_entries") && e.contains("48"), "{e}");
        // 1,536 entries in 12 ways: 128 sets.
        assert!(Tlbs::new(1536, 12, 1, false, 1).unwrap().is_some());
        assert!(Tlbs::new(1536, 1, 1, false, 1).is_err());
    }

    #[test]
    fn ways_keep_the_least_recently_used_out() {
        // 4 entries in 2 ways: 2 sets; pages 0, 2, 4 share set 0.
        let mut t = Tlbs::new(4, 2, 1, false, 1).unwrap().unwrap();
        assert!(!t.hit(0, 0, 1, 0, true));
        assert!(!t.hit(0, 2, 1, 0, true));
        assert!(t.hit(0, 0, 1, 0, true)); // 0 most recent, 2 least
        assert!(!t.hit(0, 4, 1, 0, true)); // evicts 2
        assert!(t.hit(0, 0, 1, 0, true));
        assert!(!t.hit(0, 2, 1, 0, true)); // evicts 4
                                           // Page 0 moved: its stale entry is replaced, not kept beside the new one.
        assert!(!t.hit(0, 0, 7, 0, true));
        assert!(t.hit(0, 2, 1, 0, true));
        assert!(t.hit(0, 0, 7, 0, true));
        assert_eq!(t.misses, 5);
    }
}
