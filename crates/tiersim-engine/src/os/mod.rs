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
