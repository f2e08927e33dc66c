//! The OS model, after Linux 5.x (policies.md 1.1), one file per mechanism, each extending the
//! engine (`crate::sim::Engine`): first-touch allocation along zonelists (`alloc`), reclaim and
//! kswapd against watermarks (`reclaim`) over per-node LRU lists (`lru`), swap and the page
//! cache's block device (`swap`), the page cache of
//! read/write system calls and DAX (`filemap`), the NUMA hinting scanner (`scan`), hint faults (`fault`), and
//! page migration and exchange (`migrate`). Here: the page events the policy is told of.

pub(crate) mod alloc;
pub(crate) mod fault;
pub(crate) mod filemap;
pub(crate) mod lru;
pub(crate) mod migrate;
pub(crate) mod reclaim;
pub(crate) mod scan;
pub(crate) mod swap;

use tiersim_core::NodeId;

use crate::sim::Engine;

#[derive(Debug, Clone, Copy)]
pub(crate) enum PageEvent {
    Moved(u32, NodeId, NodeId),
    Evicted(u32, NodeId),
}

impl Engine {
    pub(crate) fn page_event(&mut self, ev: PageEvent) {
        if self.parked {
            self.page_events.push(ev);
            return;
        }
        match ev {
            PageEvent::Moved(p, from, to) => self.policy.on_page_moved(p, from, to),
            PageEvent::Evicted(p, node) => self.policy.on_page_evicted(p, node),
        }
    }
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
