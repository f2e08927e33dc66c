//! The OS model, after Linux 5.x (policies.md 1.1), one part per mechanism, each a struct that
//! owns its state and takes what else it touches as arguments, as mm/ passes `pg_data_t`,
//! `lruvec` and `scan_control`: the LRU lists' aging and victim choice (`lru::Lru`), page
//! migration and exchange (`migrate::Migrator`), reclaim (`reclaim::Reclaimer`, over a
//! `reclaim::Vmscan` of the parts reclaim uses) and kswapd's background reclaim (`kswapd`), first-touch allocation along zonelists
//! (`alloc`), swap and the block device of files (`swap::Swap`), the page cache of system calls
//! and DAX (`filemap::FileIo`), the NUMA hinting scanner (`scan::Scanner`) and hint faults
//! (`fault::HintFaults`). What they all share is `Memory`: the nodes (frames, watermarks and
//! the LRU lists, pg_data_t with its lruvec), the page table (the struct page array), the
//! topology and the policy behind its port. The engine (the sim module) owns the parts and
//! composes them; nothing here knows the engine.

pub(crate) mod alloc;
pub(crate) mod fault;
pub(crate) mod filemap;
pub(crate) mod kswapd;
pub(crate) mod lru;
pub(crate) mod migrate;
pub(crate) mod reclaim;
pub(crate) mod scan;
pub(crate) mod swap;
pub(crate) mod workingset;

use serde_json::{Map, Value};
use tiersim_core::NodeId;
use tiersim_policies::{Policy, Topology};

use crate::node::Node;
use crate::pagetable::PageTable;

/// What every mechanism of the OS model works on.
pub(crate) struct Memory {
    /// The memory nodes: frames, watermarks, LRU lists, devices and traffic counters.
    pub(crate) nodes: Vec<Node>,
    pub(crate) pt: PageTable,
    pub(crate) topo: Topology,
    pub(crate) policy: PolicyPort,
    pub(crate) page_size: u64,
    pub(crate) page_shift: u32,
}

impl Memory {
    /// Free pages of each node, in `out` (one slot per node), as policies are shown them.
    pub(crate) fn free_pages(&self, out: &mut [u64]) {
        for (slot, n) in out.iter_mut().zip(&self.nodes) {
            *slot = n.free();
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum PageEvent {
    Moved(u32, NodeId, NodeId),
    Evicted(u32, NodeId),
}

/// Stands in for the policy while it is parked; it holds nothing, so boxing it allocates nothing.
struct Parked;
impl Policy for Parked {}

/// The placement policy as the OS model reaches it. While one of its hooks runs (`park`), the
/// hook may call back into the OS model (`tiersim_policies::MemOps`); the page events those calls
/// cause queue up and reach the policy, in order, when it returns (`unpark`).
pub(crate) struct PolicyPort {
    pub(crate) policy: Box<dyn Policy>,
    parked: bool,
    queued: Vec<PageEvent>,
}

impl PolicyPort {
    pub(crate) fn new(policy: Box<dyn Policy>) -> PolicyPort {
        PolicyPort { policy, parked: false, queued: Vec::new() }
    }

    pub(crate) fn page_event(&mut self, ev: PageEvent) {
        if self.parked {
            self.queued.push(ev);
            return;
        }
        match ev {
            PageEvent::Moved(p, from, to) => self.policy.on_page_moved(p, from, to),
            PageEvent::Evicted(p, node) => self.policy.on_page_evicted(p, node),
        }
    }

    /// Take the policy out to run one of its hooks.
    pub(crate) fn park(&mut self) -> Box<dyn Policy> {
        self.parked = true;
        std::mem::replace(&mut self.policy, Box::new(Parked))
    }

    /// Put the policy back after its hook and deliver what happened meanwhile.
    pub(crate) fn unpark(&mut self, policy: Box<dyn Policy>) {
        self.policy = policy;
        self.parked = false;
        for ev in std::mem::take(&mut self.queued) {
            self.page_event(ev);
        }
    }
}

/// Counters a part keeps over the measured part of the run. They count from the start and are
/// zeroed when measuring starts (it starts once and never stops, so this is counting only
/// while measuring); each part reports its own into the summary's sections.
pub(crate) trait Metrics {
    fn reset(&mut self);
    /// Add this part's figures to the summary's `section` (a JSON object; keys are sorted).
    fn report(&self, section: &str, into: &mut Map<String, Value>);
}

/// Index ranges of `pages` (page ids or swap slots, in issue order) that are runs of consecutive ids, at
/// most `max` each: the requests a writeback, a swap-out batch, a readahead or a direct transfer
/// issues, one per contiguous extent up to the request size (the block plug's merging).
pub(crate) fn page_runs(pages: &[u32], max: u64) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
    let mut i = 0;
    std::iter::from_fn(move || {
        let start = i;
        if start >= pages.len() {
            return None;
        }
        i += 1;
        while i < pages.len() && pages[i] == pages[i - 1] + 1 && ((i - start) as u64) < max {
            i += 1;
        }
        Some(start..i)
    })
}

#[cfg(test)]
mod tests {
    use super::page_runs;

    #[test]
    fn runs_split_at_gaps_and_at_the_request_size() {
        let pages = [1, 2, 3, 7, 8, 9, 10, 4];
        let runs: Vec<_> = page_runs(&pages, 3).collect();
        assert_eq!(runs, vec![0..3, 3..6, 6..7, 7..8]);
        let runs: Vec<_> = page_runs(&pages, u64::MAX).collect();
        assert_eq!(runs, vec![0..3, 3..7, 7..8]);
        assert_eq!(page_runs(&[], 4).count(), 0);
    }
}
