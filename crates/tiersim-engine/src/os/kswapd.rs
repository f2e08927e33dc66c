//! kswapd as a thread with a clock of its own, one per node (mm/vmscan.c, 6.1: kswapd ->
//! balance_pgdat). A wake-up (wakeup_kswapd) starts it at the waker's time; it then reclaims in
//! batches of `os.reclaim_batch` pages (SWAP_CLUSTER_MAX), each page costing `os.kswapd_page_cost`
//! (isolate, unmap, add to the target's lists), each batch one TLB shootdown (try_to_unmap_flush)
//! and, for demotions, the copy on both devices; all of it at `os.kswapd_cpu_share` of a CPU. It
//! sleeps once the node's free memory reaches the goal of its wake-ups (pgdat_balanced: the high
//! watermark, or a policy's own, such as tiering mode's WMARK_PROMO). Until its batches are done
//! the node stays as full as it was, so the allocations and promotions in between see it full,
//! as the kernel's do (numamigrate_isolate_page, mm/migrate.c, only wakes kswapd and fails).

use serde_json::{Map, Value};
use tiersim_core::{Ns, Result};

use super::reclaim::{Reclaimer, Vmscan};
use super::{Memory, Metrics};

/// kswapd's work over the measured part of the run.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct KswapdStats {
    pub(crate) wakeups: u64,
    pub(crate) pages: u64,
    pub(crate) busy_ps: u64,
}

pub(crate) struct Kswapd {
    /// Per node: the free pages to reach while awake (None: asleep).
    goal: Vec<Option<u64>>,
    /// Per node: the time (ps) up to which its work is done.
    clock_ps: Vec<u64>,
    /// When the earliest batch of an awake kswapd is done (ns; Ns::MAX while all sleep): the
    /// engine catches kswapd up from the access path once simulated time reaches it.
    pub(crate) next_ns: Ns,
    batch: u64,
    page_ps: u64,
    /// Per page reclaim looked at and left (referenced, rotated or in flight): the futile part
    /// of its scanning, charged after the batch, so it delays the next one.
    scan_ps: u64,
    tlb_ps: u64,
    /// Its CPU share in thousandths: a busy CPU shared with the program's threads stretches each
    /// batch (the VM of `tiersim validate linux` runs kswapd on the program's two CPUs).
    share_milli: u64,
    pub(crate) stats: KswapdStats,
}

/// kswapd's costs (ps), from `os.kswapd_page_cost`, `os.kswapd_scan_cost`, `os.tlb_shootdown`
/// and `os.kswapd_cpu_share`.
pub(crate) struct KswapdCosts {
    pub(crate) page_ps: u64,
    pub(crate) scan_ps: u64,
    pub(crate) tlb_ps: u64,
    pub(crate) cpu_share: f64,
}

impl Kswapd {
    pub(crate) fn new(nodes: usize, batch: u64, c: KswapdCosts) -> Kswapd {
        Kswapd {
            goal: vec![None; nodes],
            clock_ps: vec![0; nodes],
            next_ns: Ns::MAX,
            batch,
            page_ps: c.page_ps,
            scan_ps: c.scan_ps,
            tlb_ps: c.tlb_ps,
            share_milli: ((c.cpu_share * 1000.0).round() as u64).max(1),
            stats: KswapdStats::default(),
        }
    }

    /// wakeup_kswapd on `node` at `t`, to reclaim until it has `goal` free pages. A kswapd
    /// already awake takes the larger goal; one asleep starts at `t`.
    pub(crate) fn wake(&mut self, mem: &Memory, node: usize, goal: u64, t: Ns) {
        let free = mem.nodes[node].free();
        if free >= goal {
            return;
        }
        match &mut self.goal[node] {
            Some(g) => *g = (*g).max(goal),
            slot @ None => {
                *slot = Some(goal);
                self.clock_ps[node] = self.clock_ps[node].max(t * 1000);
                self.stats.wakeups += 1;
            }
        }
        self.next_ns = self.next_ns.min(self.due_ps(node, self.want(node, free)) / 1000);
    }

    /// Pages `node`'s next batch takes, with `free` pages free.
    fn want(&self, node: usize, free: u64) -> u64 {
        self.goal[node].map_or(0, |g| g.saturating_sub(free).min(self.batch))
    }

    /// When `node`'s next batch of `want` pages frees them (ps): its fixed cost from its clock.
    fn due_ps(&self, node: usize, want: u64) -> u64 {
        self.clock_ps[node] + self.stretch(want * self.page_ps + self.tlb_ps)
    }

    fn stretch(&self, ps: u64) -> u64 {
        ps * 1000 / self.share_milli
    }
}

/// Every batch the awake kswapds finish by `t`: a batch's pages are freed once its fixed cost (per
/// page and TLB shootdown) has passed; its copies then add to kswapd's clock.
pub(crate) fn run_until(mem: &mut Memory, rc: &Reclaimer, vm: &mut Vmscan, t: Ns) -> Result<()> {
    for n in 0..vm.kswapd.goal.len() {
        while vm.kswapd.goal[n].is_some() {
            let k = &*vm.kswapd;
            let want = k.want(n, mem.nodes[n].free());
            let due_ps = k.due_ps(n, want);
            if want > 0 && due_ps > t * 1000 {
                break;
            }
            let start = due_ps / 1000;
            let scanned_before = vm.lru.stats.pgscan;
            let (done, copied) = if want == 0 { (0, start) } else { rc.reclaim_timed(mem, vm, n, want, start)? };
            let left = (vm.lru.stats.pgscan - scanned_before).saturating_sub(done);
            let k = &mut *vm.kswapd;
            if done == 0 {
                // Balanced, or nothing left to take (kswapd_failures): back to sleep.
                k.goal[n] = None;
                break;
            }
            let busy = k.stretch(done * k.page_ps + k.tlb_ps) + k.stretch((copied - start) * 1000 + left * k.scan_ps);
            k.clock_ps[n] += busy;
            k.stats.pages += done;
            k.stats.busy_ps += busy;
        }
    }
    // From every node still awake, those its batches woke included (a demotion wakes its
    // target's kswapd, which may be a node this loop has passed).
    let k = &mut *vm.kswapd;
    k.next_ns = (0..k.goal.len())
        .filter(|&n| k.goal[n].is_some())
        .map(|n| k.due_ps(n, k.want(n, mem.nodes[n].free())) / 1000)
        .min()
        .unwrap_or(Ns::MAX);
    Ok(())
}

impl Metrics for Kswapd {
    fn reset(&mut self) {
        self.stats = KswapdStats::default();
    }

    fn report(&self, section: &str, into: &mut Map<String, Value>) {
        if section == "tiering" {
            let s = &self.stats;
            into.insert("kswapd_wakeups".into(), s.wakeups.into());
            into.insert("kswapd_pages".into(), s.pages.into());
            into.insert("kswapd_time_ns".into(), (s.busy_ps / 1000).into());
        }
    }
}
