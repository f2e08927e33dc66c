//! Per-CPU TLBs (`host.tlb_entries`, `host.tlb_miss_latency`): a direct-mapped table of page
//! translations per CPU, indexed by the virtual page's low bits, as QEMU's softmmu TLB is
//! (accel/tcg/cputlb.c, tlb_index; its victim TLB of 8 entries is left out). A miss is a page
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
    /// `entries` per CPU, CPU after CPU.
    table: Vec<Entry>,
    entries: usize,
    pub(crate) miss_ps: u64,
    /// `tlb_lookups = "reads"`: writes pass untranslated.
    pub(crate) reads_only: bool,
    /// Over the measured part of the run.
    pub(crate) misses: u64,
    pub(crate) flushes: u64,
}

impl Tlbs {
    /// None when `entries` is 0 (no TLB model).
    pub(crate) fn new(entries: u64, miss_ps: u64, reads_only: bool, ncpus: usize) -> Result<Option<Tlbs>> {
        if entries == 0 {
            return Ok(None);
        }
        if !entries.is_power_of_two() {
            return Err(Error::config(
                "host.tlb_entries",
                format!("{entries} is not a power of two (the table is direct-mapped on the page number's low bits)"),
            ));
        }
        let entries = entries as usize;
        Ok(Some(Tlbs { table: vec![EMPTY; entries * ncpus], entries, miss_ps, reads_only, misses: 0, flushes: 0 }))
    }

    /// CPU `c`'s lookup of `vpn`, now translated to `frame` on `node`: true on a hit; a miss
    /// fills the entry (the walk's result) and counts when `measuring`.
    #[inline]
    pub(crate) fn hit(&mut self, c: usize, vpn: u64, frame: u32, node: u16, measuring: bool) -> bool {
        let i = c * self.entries + (vpn as usize & (self.entries - 1));
        let want = Entry { vpn, frame, node };
        if self.table[i] == want {
            return true;
        }
        self.table[i] = want;
        self.misses += u64::from(measuring);
        false
    }

    pub(crate) fn flush_all(&mut self, measuring: bool) {
        self.table.fill(EMPTY);
        self.flushes += u64::from(measuring);
    }

    pub(crate) fn summary(&self) -> Value {
        json!({
            "entries_per_cpu": self.entries,
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
        let mut t = Tlbs::new(4, 100_000, false, 2).unwrap().unwrap();
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
        assert!(Tlbs::new(0, 1, false, 1).unwrap().is_none());
        let e = Tlbs::new(48, 1, false, 1).err().unwrap().to_string();
        assert!(e.contains("host.tlb_entries") && e.contains("48"), "{e}");
    }
}
