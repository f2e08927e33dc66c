//! oracle_dynamic: placement that knows the future per epoch. The run is cut into `epochs` equal
//! counts of accesses; at each epoch's start the engine tells the oracle the pages the epoch will
//! use most (as many as the fast tier holds), read ahead in the trace per CPU from where each CPU
//! stands (tiersim-engine's epoch_profile). The oracle moves them into the fast tier, demoting
//! pages the epoch does not need to make room, and places first touches the same way. Charged moves
//! are a migration thread's on a core of its own (their copies load the devices); with
//! `migrations = "free"` moves cost nothing at all: tiersim's own bound, as the tiering papers'
//! "ideal" (what it bounds: docs/model.md). Free moves also use the foresight for where a page
//! goes: to the nodes nearest the socket whose CPUs use it most, not to the slow node under the
//! fast node it leaves as the kernel's demotion (next_demotion_node) sends it. `fast_share` below
//! 1 caps the fast tier's share of the hot set's traffic and leaves the rest in the slow tier, so
//! a family of runs can spread traffic over the tiers when the fast tier's bandwidth binds (Colloid,
//! Vuppalapati & Agarwal SOSP'24: balance loaded latency across tiers, not hits).

use std::collections::{HashMap, HashSet};

use tiersim_core::{Error, NodeId, ParamKind, ParamSpec, Params, PluginInfo, Result};

use crate::{is_top_tier, next_tier_node, EpochProfile, MemOps, MoveMode, PlaceCtx, Policy, PolicyEntry, Topology};

const PARAMS: &[ParamSpec] = &[
    ParamSpec::new("epochs", ParamKind::Int, "32", "equal counts of accesses (simulated issue order) the run is cut into; the fast tier is rearranged before each")
        .min(1.0)
        .max(1e6),
    ParamSpec::new(
        "migrations",
        ParamKind::Str,
        "charged",
        "`charged`: a migration thread on a core of its own moves the pages, so the copies take device bandwidth as any migration's (as kdemoted's); `free`: no copy traffic either (the bound on fast-tier hits)",
    )
    .choices(&["charged", "free"]),
    ParamSpec::new(
        "free_targets",
        ParamKind::Str,
        "users",
        "with free moves, where a page goes: `users`, to the nodes under the socket whose CPUs make most of its (weighted) accesses in the epoch, slow pages it uses moving there too; `kernel`, as charged moves, a demoted page to the next tier under the fast node it leaves (next_demotion_node), a promoted one to the fast node nearest its slow node",
    )
    .choices(&["users", "kernel"]),
    ParamSpec::new(
        "windows",
        ParamKind::Str,
        "per_cpu",
        "how an epoch's accesses are foreseen: `per_cpu`, each CPU's next accesses from its position at the epoch's start, as many as it issued in the epoch before; `trace_order`, the next span of the trace (CPUs running at different speeds issue other accesses)",
    )
    .choices(&["per_cpu", "trace_order"]),
    ParamSpec::new(
        "write_weight",
        ParamKind::Int,
        "4",
        "what a write counts for when an epoch's pages are ranked, a read counting 1: a 64 B write to a DCPMM line not in its XPBuffer costs a 256 B media read and a 256 B media write at 2.3 GB/s, 150 ns of media time against 39 ns for a read at 6.6 GB/s (seed 000), so pages only written in an epoch are not the ones left in the slow tier; 1 ranks by accesses (the bound on each epoch's fast-tier hits)",
    )
    .min(1.0)
    .max(1e6),
    ParamSpec::new(
        "fast_share",
        ParamKind::Float,
        "1.0",
        "share of the epoch's hot-set traffic (weighted accesses of the pages the fast tier would hold) the fast tier takes: the hottest pages up to that share are hot, the rest are left in, or demoted to, the slow tier; below 1 it spreads traffic when the fast tier's channels saturate (the bound is the best over a family of shares: docs/model.md)",
    )
    .min(0.0)
    .max(1.0),
    ParamSpec::new(
        "fast_nodes",
        ParamKind::Str,
        "users",
        "with free moves to users, which fast node a hot page takes: `users`, the one nearest the socket whose CPUs use it most; `balanced`, the same until that node holds its even part of the hot set's (weighted) traffic, then the fast node with the least, so that no fast node's channels queue while another's idle (Colloid's balance of loaded latency, across the fast nodes)",
    )
    .choices(&["users", "balanced"]),
    ParamSpec::new(
        "min_accesses",
        ParamKind::Int,
        "32",
        "with charged migrations, a page already in memory is promoted only if the epoch accesses it this often: a promotion and the demotion that makes room copy 8 KiB, about as much traffic as 32 cache-line misses on each device",
    )
    .min(1.0),
];

pub(crate) const ENTRY: PolicyEntry = PolicyEntry {
    info: PluginInfo {
        name: "oracle_dynamic",
        summary: "before each epoch moves the pages that epoch uses most into the fast tier (per-epoch future access counts); migrations=free bounds each epoch's fast-tier hits",
        source: "tiersim (upper bound for comparison, as the 'ideal' placements of the tiering papers)",
        params: PARAMS,
    },
    build,
};

const UNKNOWN: u64 = u64::MAX;

struct OracleDynamic {
    profile: EpochProfile,
    mode: MoveMode,
    /// Free moves place pages under their users' node (`free_targets = "users"`).
    near_users: bool,
    /// Accesses in an epoch that make a resident page worth promoting (1 with free moves).
    min_accesses: u64,
    /// Share of the hot set's (weighted) accesses the fast tier takes.
    fast_share: f64,
    /// Moves out of the fast tier of hot pages beyond `fast_share`.
    share_demotions: u64,
    /// `fast_nodes = "balanced"`: each hot page's fast node this epoch, and the moves between
    /// fast nodes that balancing made.
    balance: bool,
    fast_target: HashMap<u64, NodeId>,
    balance_moves: u64,
    epoch_length: Option<u64>,
    /// The current epoch's hot pages.
    hot: HashSet<u64>,
    /// Virtual page number of each dense page id seen, UNKNOWN for ids not yet placed.
    vpn_of: Vec<u64>,
    page_of: HashMap<u64, u32>,
    /// The vpn of the allocation in progress: `place` sees the vpn, `on_page_placed` the id.
    placing: u64,
    /// Per dense page id, the node whose CPUs used it most in the last epoch that used it (the
    /// first-touching CPU's node before that); `placing_node` is the allocation's local node.
    home: Vec<NodeId>,
    placing_node: NodeId,
    moves: u64,
}

fn build(p: &Params, topo: &Topology) -> Result<Box<dyn Policy>> {
    let top = topo.nodes.iter().filter(|n| is_top_tier(n.id, topo)).map(|n| n.usable_pages).sum::<u64>() as usize;
    let mode = if p.str("migrations") == "free" { MoveMode::Free } else { MoveMode::Background };
    let balance = p.str("fast_nodes") == "balanced";
    if balance && (mode != MoveMode::Free || p.str("free_targets") != "users") {
        return Err(Error::config(
            "policy_params.fast_nodes",
            "\"balanced\" needs migrations = \"free\" and free_targets = \"users\"",
        ));
    }
    Ok(Box::new(OracleDynamic {
        profile: EpochProfile {
            epochs: p.uint("epochs"),
            top,
            per_cpu: p.str("windows") == "per_cpu",
            write_weight: p.uint("write_weight"),
        },
        mode,
        near_users: mode == MoveMode::Free && p.str("free_targets") == "users",
        min_accesses: if mode == MoveMode::Free { 1 } else { p.uint("min_accesses") },
        fast_share: p.float("fast_share"),
        share_demotions: 0,
        balance,
        fast_target: HashMap::new(),
        balance_moves: 0,
        epoch_length: None,
        hot: HashSet::new(),
        vpn_of: Vec::new(),
        page_of: HashMap::new(),
        placing: UNKNOWN,
        home: Vec::new(),
        placing_node: 0,
        moves: 0,
    }))
}

/// Room on a fast node as the allocator sees it: free frames above its high watermark.
fn has_room(n: NodeId, free: &[u64], topo: &Topology) -> bool {
    let info = &topo.nodes[n as usize];
    free[n as usize] > info.capacity_pages - info.usable_pages
}

impl OracleDynamic {
    /// Make room on fast node `f` by demoting one of its pages the epoch does not need.
    fn evict_from(&mut self, f: NodeId, cold: &mut [Vec<u32>], topo: &Topology, os: &mut dyn MemOps) -> bool {
        while let Some(victim) = cold[f as usize].pop() {
            let Some(to) = self.slow_target(victim, f, topo) else { return false };
            if os.page_node(victim) == Some(f) && os.demote(victim, to, self.mode, false) {
                self.moves += 1;
                return true;
            }
        }
        false
    }

    /// Free moves: record the epoch's users of each page, and move the pages it uses from the slow
    /// tier but not hot (left in the slow tier) to the slow node under their users' node.
    fn rehome(&mut self, near: &[(u64, NodeId)], topo: &Topology, os: &mut dyn MemOps) {
        for &(vpn, node) in near {
            let Some(&page) = self.page_of.get(&vpn) else { continue };
            self.home[page as usize] = node;
            let Some(n) = os.page_node(page).filter(|&n| !is_top_tier(n, topo)) else { continue };
            if self.hot.contains(&vpn) {
                continue;
            }
            if let Some(to) = next_tier_node(node, topo).filter(|&to| to != n) {
                if os.migrate(page, to, self.mode) {
                    self.moves += 1;
                }
            }
        }
    }

    /// `fast_nodes = "balanced"`: a fast node for each of the epoch's hot pages, hottest first:
    /// the one nearest its users while that node's (weighted) traffic stays within an even part
    /// of the hot set's, else the fast node with the least traffic so far; each node takes at
    /// most its usable pages. The weights are the ranking's (a write counts `write_weight` reads,
    /// its DCPMM cost; a DRAM write takes 1.7 reads' channel time): a deviation from balancing
    /// channel time.
    fn balance_targets(&mut self, hottest: &[(u64, u64)], near: &[(u64, NodeId)], topo: &Topology) {
        self.fast_target.clear();
        let fast: Vec<NodeId> = topo.nodes.iter().map(|n| n.id).filter(|&f| is_top_tier(f, topo)).collect();
        if fast.len() < 2 {
            return;
        }
        let even = hottest.iter().map(|&(_, c)| c as f64).sum::<f64>() / fast.len() as f64;
        let mut load = vec![0.0f64; topo.nodes.len()];
        let mut pages = vec![0u64; topo.nodes.len()];
        for &(vpn, count) in hottest {
            let users = match near.binary_search_by_key(&vpn, |&(v, _)| v) {
                Ok(i) => near[i].1,
                Err(_) => match self.page_of.get(&vpn) {
                    Some(&page) => self.home.get(page as usize).copied().unwrap_or(fast[0]),
                    None => continue,
                },
            };
            let Some(&nearest) = topo.zonelists[users as usize].iter().find(|&&f| is_top_tier(f, topo)) else {
                continue;
            };
            let fits = |f: NodeId, load: &[f64], pages: &[u64]| {
                pages[f as usize] < topo.nodes[f as usize].usable_pages && load[f as usize] + count as f64 <= even
            };
            let target = if fits(nearest, &load, &pages) {
                nearest
            } else {
                let open = fast.iter().copied().filter(|&f| pages[f as usize] < topo.nodes[f as usize].usable_pages);
                match open.min_by(|&a, &b| load[a as usize].total_cmp(&load[b as usize])) {
                    Some(f) => f,
                    None => continue,
                }
            };
            load[target as usize] += count as f64;
            pages[target as usize] += 1;
            self.fast_target.insert(vpn, target);
        }
    }

    /// Move the epoch's hot pages that sit on another fast node than balancing gave them, where
    /// the target has room or can make it by demoting a page the epoch does not need.
    fn rebalance(&mut self, hottest: &[(u64, u64)], cold: &mut [Vec<u32>], topo: &Topology, os: &mut dyn MemOps) {
        for &(vpn, _) in hottest {
            let (Some(&page), Some(&to)) = (self.page_of.get(&vpn), self.fast_target.get(&vpn)) else { continue };
            if os.page_node(page).filter(|&n| is_top_tier(n, topo) && n != to).is_none() {
                continue;
            }
            if (os.room(to) || (self.evict_from(to, cold, topo, os) && os.room(to))) && os.migrate(page, to, self.mode)
            {
                self.moves += 1;
                self.balance_moves += 1;
            }
        }
    }

    /// Where a page leaving fast node `f` goes: with charged moves the next tier under `f` (the
    /// kernel's next_demotion_node, so the charged oracle differs from a kernel policy only in
    /// what it knows); with free moves to users, the next tier under the node of its users.
    fn slow_target(&self, page: u32, f: NodeId, topo: &Topology) -> Option<NodeId> {
        let from = if self.near_users { self.home.get(page as usize).copied().unwrap_or(f) } else { f };
        next_tier_node(from, topo)
    }
}

impl Policy for OracleDynamic {
    fn place(&mut self, ctx: &PlaceCtx) -> NodeId {
        self.placing = ctx.vpn;
        self.placing_node = ctx.local_node;
        let local = ctx.local_node;
        if !is_top_tier(local, ctx.topo) {
            return local;
        }
        if self.hot.contains(&ctx.vpn) {
            if let Some(&f) = self.fast_target.get(&ctx.vpn).filter(|&&f| has_room(f, ctx.free_pages, ctx.topo)) {
                return f;
            }
            let zonelist = &ctx.topo.zonelists[local as usize];
            let fast = zonelist.iter().copied().filter(|&n| is_top_tier(n, ctx.topo));
            return fast.clone().find(|&n| has_room(n, ctx.free_pages, ctx.topo)).unwrap_or(local);
        }
        next_tier_node(local, ctx.topo).unwrap_or(local)
    }

    fn on_page_placed(&mut self, page: u32, _node: NodeId) {
        let i = page as usize;
        if i >= self.vpn_of.len() {
            self.vpn_of.resize(i + 1, UNKNOWN);
        }
        if self.vpn_of[i] == UNKNOWN && self.placing != UNKNOWN {
            self.vpn_of[i] = self.placing;
            self.page_of.insert(self.placing, page);
            if i >= self.home.len() {
                self.home.resize(i + 1, self.placing_node);
            }
            self.home[i] = self.placing_node;
        }
    }

    fn epoch_profile(&self) -> Option<EpochProfile> {
        Some(self.profile)
    }

    fn set_epoch_length(&mut self, accesses_per_epoch: u64) {
        self.epoch_length = Some(accesses_per_epoch.max(1));
    }

    fn epoch_length(&self) -> Option<u64> {
        self.epoch_length
    }

    fn on_epoch(
        &mut self,
        _epoch: usize,
        hottest: &[(u64, u64)],
        near: &[(u64, NodeId)],
        topo: &Topology,
        os: &mut dyn MemOps,
    ) {
        let (hottest, spill) = hottest.split_at(share_prefix(hottest, self.fast_share));
        self.hot = hottest.iter().map(|&(vpn, _)| vpn).collect();
        if self.near_users {
            self.rehome(near, topo, os);
        }
        if self.balance {
            self.balance_targets(hottest, near, topo);
        }
        // Hot pages beyond the fast tier's share leave it, so their traffic goes to the slow tier.
        for &(vpn, _) in spill {
            let Some(&page) = self.page_of.get(&vpn) else { continue };
            let Some(f) = os.page_node(page).filter(|&n| is_top_tier(n, topo)) else { continue };
            if let Some(to) = self.slow_target(page, f, topo) {
                if os.demote(page, to, self.mode, false) {
                    self.moves += 1;
                    self.share_demotions += 1;
                }
            }
        }
        // Fast pages this epoch does not need, per node; the coldest are not known (only the
        // top pages are kept), so they leave in page-id order.
        let mut cold: Vec<Vec<u32>> = vec![Vec::new(); topo.nodes.len()];
        for (page, &vpn) in self.vpn_of.iter().enumerate().rev() {
            if vpn == UNKNOWN || self.hot.contains(&vpn) {
                continue;
            }
            if let Some(n) = os.page_node(page as u32).filter(|&n| is_top_tier(n, topo)) {
                cold[n as usize].push(page as u32);
            }
        }
        if self.balance {
            self.rebalance(hottest, &mut cold, topo, os);
        }
        let mut unplaced = 0u64;
        let min = self.min_accesses;
        for &(vpn, _) in hottest.iter().filter(|&&(_, count)| count >= min) {
            let Some(&page) = self.page_of.get(&vpn) else {
                unplaced += 1;
                continue;
            };
            let Some(n) = os.page_node(page).filter(|&n| !is_top_tier(n, topo)) else { continue };
            // The nearest fast node that has room or can make room by demoting a page the epoch
            // does not need: local DRAM before remote, as first touch would choose; with free
            // moves, local to the page's users.
            let from = if self.near_users { self.home.get(page as usize).copied().unwrap_or(n) } else { n };
            let balanced = self.fast_target.get(&vpn).copied();
            let fast: Vec<NodeId> = balanced
                .into_iter()
                .chain(topo.zonelists[from as usize].iter().copied().filter(|&f| is_top_tier(f, topo)))
                .collect();
            let target =
                fast.into_iter().find(|&f| os.room(f) || (self.evict_from(f, &mut cold, topo, os) && os.room(f)));
            if let Some(f) = target {
                if os.migrate(page, f, self.mode) {
                    self.moves += 1;
                }
            }
        }
        // Hot pages first touched in this epoch find room at first touch: demote as many
        // unneeded pages as they lack (those worth a move), from the fast nodes in turn.
        let fast: Vec<NodeId> = topo.nodes.iter().map(|n| n.id).filter(|&f| is_top_tier(f, topo)).collect();
        let mut lack = unplaced.saturating_sub(fast.iter().map(|&f| os.room_pages(f)).sum());
        while lack > 0 {
            let before = lack;
            for &f in &fast {
                if lack > 0 && self.evict_from(f, &mut cold, topo, os) {
                    lack -= 1;
                }
            }
            if lack == before {
                break;
            }
        }
    }

    fn stats(&self) -> serde_json::Value {
        let mut stats = serde_json::json!({"epoch_moves": self.moves, "share_demotions": self.share_demotions});
        if self.balance {
            stats["balance_moves"] = self.balance_moves.into();
        }
        stats
    }
}

/// How many of the hottest pages (hottest first) take at most `share` of their weighted accesses:
/// all of them at 1, none at 0.
fn share_prefix(hottest: &[(u64, u64)], share: f64) -> usize {
    if share >= 1.0 {
        return hottest.len();
    }
    let limit = share * hottest.iter().map(|&(_, c)| c as f64).sum::<f64>();
    let mut sum = 0.0;
    hottest
        .iter()
        .take_while(|&&(_, c)| {
            sum += c as f64;
            sum <= limit
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{two_socket, FakeOs};

    fn oracle(migrations: &str, usable: u64) -> (Box<dyn Policy>, Topology) {
        oracle_to(migrations, "users", usable)
    }

    fn oracle_to(migrations: &str, targets: &str, usable: u64) -> (Box<dyn Policy>, Topology) {
        let mut topo = two_socket();
        for n in &mut topo.nodes {
            n.usable_pages = usable;
        }
        let t: toml::Table =
            toml::from_str(&format!("epochs = 2\nmigrations = \"{migrations}\"\nfree_targets = \"{targets}\""))
                .unwrap();
        (build(&Params::resolve(PARAMS, Some(&t)).unwrap(), &topo).unwrap(), topo)
    }

    #[test]
    fn asks_for_as_many_pages_per_epoch_as_the_fast_tier_holds() {
        let (p, _) = oracle("charged", 3);
        assert_eq!(p.epoch_profile(), Some(EpochProfile { epochs: 2, top: 6, per_cpu: true, write_weight: 4 }));
    }

    #[test]
    fn each_epoch_brings_its_hot_pages_into_the_fast_tier() {
        let (mut p, topo) = oracle("free", 2);
        // Epoch 0 uses pages 10 and 11 most, epoch 1 pages 12 and 13.
        p.set_epoch_length(100);
        let mut os = FakeOs::new(&[1000, 1000, 1000, 1000]);
        p.on_epoch(0, &[(10, 9), (11, 8)], &[], &topo, &mut os);
        assert!(os.log.is_empty());
        let place = |p: &mut Box<dyn Policy>, os: &mut FakeOs, id: u32, vpn: u64| {
            // Room on dram0 for one page in the topology's terms (free > 1000 - 2).
            let free = [999, 999, 999, 999];
            let node = p.place(&PlaceCtx { topo: &topo, cpu: 0, local_node: 0, vpn, free_pages: &free, file: false });
            p.on_page_placed(id, node);
            os.node.insert(id, node);
            os.free[node as usize] -= 1;
            node
        };
        // First touches: hot pages of epoch 0 to the fast tier, cold ones to the local slow node.
        assert_eq!(place(&mut p, &mut os, 0, 10), 0);
        assert_eq!(place(&mut p, &mut os, 1, 12), 2);
        assert_eq!(place(&mut p, &mut os, 2, 13), 2);
        // dram0 now has no room (free 7 is not > high 6 + 1), dram1 has.
        os.free = vec![7, 100, 98, 100];
        p.on_epoch(1, &[(12, 5), (13, 5)], &[], &topo, &mut os);
        // Page 12 takes dram0, the nearest, by demoting page 0, which epoch 1 does not use (free
        // 7 -> 8 > 7: room); page 13 then finds dram0 full with no such page left and goes to
        // dram1, which has room; moves are free.
        assert_eq!(os.log, ["demote 0 -> 2 Free", "migrate 1 -> 0 Free", "migrate 2 -> 1 Free"]);
        assert_eq!(p.stats()["epoch_moves"], 3);
    }

    #[test]
    fn free_moves_send_a_page_to_the_slow_node_under_its_users() {
        for (migrations, targets, log) in [
            // Free: page 0 sat on dram1 (first touched by CPU 4 of socket 1), but epoch 1's only
            // user of it is a CPU of socket 0, so it goes to pmem0; page 1, not hot, moves from
            // pmem1 to pmem0 for the same reason.
            ("free", "users", ["migrate 1 -> 2 Free", "demote 0 -> 2 Free"]),
            // Free moves to the kernel's targets, and charged moves: the kernel's demotion, to
            // pmem1 under dram1; slow pages stay put.
            ("free", "kernel", ["demote 0 -> 3 Free", ""]),
            ("charged", "users", ["demote 0 -> 3 Background", ""]),
        ] {
            let (mut p, topo) = oracle_to(migrations, targets, 1);
            p.set_epoch_length(100);
            let mut os = FakeOs::new(&[1000, 1000, 1000, 1000]);
            p.on_epoch(0, &[(10, 40)], &[], &topo, &mut os);
            for (id, vpn, want) in [(0, 10, 1), (1, 11, 3)] {
                let free = [1000; 4];
                let node =
                    p.place(&PlaceCtx { topo: &topo, cpu: 4, local_node: 1, vpn, free_pages: &free, file: false });
                assert_eq!(node, want);
                p.on_page_placed(id, node);
                os.node.insert(id, node);
            }
            // dram0 and dram1 are full: epoch 1's two hot pages, not yet touched, need a page
            // demoted from each; only dram1 has one the epoch does not need.
            os.free = vec![0, 0, 1000, 1000];
            p.on_epoch(1, &[(20, 40), (21, 40)], &[(10, 0), (11, 0)], &topo, &mut os);
            let want: Vec<&str> = log.into_iter().filter(|l| !l.is_empty()).collect();
            assert_eq!(os.log, want, "{migrations} {targets}");
        }
    }

    #[test]
    fn a_fast_share_keeps_the_hottest_pages_up_to_that_share_of_the_hot_traffic() {
        let hot = [(1, 50), (2, 30), (3, 15), (4, 5)];
        // 50 + 30 = 80 of 100 fit 0.8; 0.79 takes page 1 alone; ties to the share are kept.
        assert_eq!(share_prefix(&hot, 1.0), 4);
        assert_eq!(share_prefix(&hot, 0.95), 3);
        assert_eq!(share_prefix(&hot, 0.8), 2);
        assert_eq!(share_prefix(&hot, 0.79), 1);
        assert_eq!(share_prefix(&hot, 0.0), 0);
        assert_eq!(share_prefix(&[], 0.5), 0);
    }

    #[test]
    fn hot_pages_beyond_the_share_leave_the_fast_tier_and_are_placed_slow() {
        let mut topo = two_socket();
        for n in &mut topo.nodes {
            n.usable_pages = 4;
        }
        let t: toml::Table = toml::from_str("epochs = 2\nmigrations = \"free\"\nfast_share = 0.75").unwrap();
        let mut p = build(&Params::resolve(PARAMS, Some(&t)).unwrap(), &topo).unwrap();
        p.set_epoch_length(100);
        let mut os = FakeOs::new(&[1000, 1000, 1000, 1000]);
        // Epoch 0: pages 10 and 12 take 50 + 25 = 75 % of the hot traffic, page 11 the rest.
        p.on_epoch(0, &[(10, 50), (12, 25), (11, 25)], &[], &topo, &mut os);
        let free = [999; 4];
        let place = |p: &mut Box<dyn Policy>, os: &mut FakeOs, id: u32, vpn: u64| {
            let node = p.place(&PlaceCtx { topo: &topo, cpu: 0, local_node: 0, vpn, free_pages: &free, file: false });
            p.on_page_placed(id, node);
            os.node.insert(id, node);
            node
        };
        assert_eq!(place(&mut p, &mut os, 0, 10), 0);
        assert_eq!(place(&mut p, &mut os, 1, 11), 2);
        assert_eq!(place(&mut p, &mut os, 2, 12), 0);
        // Epoch 1 wants page 10 alone at 75 %: page 12, hot but beyond the share, leaves DRAM.
        p.on_epoch(1, &[(10, 75), (12, 25)], &[], &topo, &mut os);
        assert_eq!(os.log, ["demote 2 -> 2 Free"]);
        assert_eq!(p.stats()["share_demotions"], 1);
    }

    #[test]
    fn balanced_fast_nodes_split_the_hot_traffic_evenly_nearest_users_first() {
        for (fast_nodes, want) in [("users", [0, 0, 0, 0]), ("balanced", [0, 1, 1, 0])] {
            let mut topo = two_socket();
            for n in &mut topo.nodes {
                n.usable_pages = 4;
            }
            let t: toml::Table =
                toml::from_str(&format!("epochs = 2\nmigrations = \"free\"\nfast_nodes = \"{fast_nodes}\"")).unwrap();
            let mut p = build(&Params::resolve(PARAMS, Some(&t)).unwrap(), &topo).unwrap();
            p.set_epoch_length(100);
            let mut os = FakeOs::new(&[1000, 1000, 1000, 1000]);
            // Socket 0's CPUs use all four pages, 100 weighted accesses: 50 per fast node. 10 (40)
            // fits dram0; 11 (30) would take it to 70, so dram1; 12 (20) goes to the least loaded,
            // dram1 (30 against 40); 13 (10) brings dram0 to 50, within its part.
            let hot = [(10, 40), (11, 30), (12, 20), (13, 10)];
            let near = [(10, 0), (11, 0), (12, 0), (13, 0)];
            p.on_epoch(0, &hot, &near, &topo, &mut os);
            let free = [999; 4];
            for (id, vpn) in [(0u32, 10u64), (1, 11), (2, 12), (3, 13)] {
                let node =
                    p.place(&PlaceCtx { topo: &topo, cpu: 0, local_node: 0, vpn, free_pages: &free, file: false });
                assert_eq!(node, want[id as usize], "{fast_nodes} {vpn}");
                p.on_page_placed(id, node);
                // As `users` placed them: every page on dram0.
                os.node.insert(id, 0);
            }
            // The next epoch moves the pages that sit on dram0 against the balance to dram1.
            p.on_epoch(1, &hot, &near, &topo, &mut os);
            let moved: Vec<&str> =
                if fast_nodes == "balanced" { vec!["migrate 1 -> 1 Free", "migrate 2 -> 1 Free"] } else { vec![] };
            assert_eq!(os.log, moved, "{fast_nodes}");
            assert_eq!(p.stats().get("balance_moves").is_some(), fast_nodes == "balanced");
        }
    }

    #[test]
    fn balanced_fast_nodes_need_free_moves_to_users() {
        for (migrations, targets) in [("charged", "users"), ("free", "kernel")] {
            let t: toml::Table = toml::from_str(&format!(
                "migrations = \"{migrations}\"\nfree_targets = \"{targets}\"\nfast_nodes = \"balanced\""
            ))
            .unwrap();
            let err =
                build(&Params::resolve(PARAMS, Some(&t)).unwrap(), &two_socket()).err().expect("refused").to_string();
            assert!(err.contains("fast_nodes") && err.contains("needs migrations = \"free\""), "{err}");
        }
    }

    #[test]
    fn charged_moves_run_in_the_background() {
        let (mut p, topo) = oracle("charged", 5);
        assert_eq!(p.epoch_length(), None);
        p.set_epoch_length(100);
        assert_eq!(p.epoch_length(), Some(100));
        let free = [100; 4];
        let mut os = FakeOs::new(&free);
        p.on_epoch(0, &[], &[], &topo, &mut os);
        let node = p.place(&PlaceCtx { topo: &topo, cpu: 4, local_node: 1, vpn: 7, free_pages: &free, file: false });
        // Not hot in epoch 0: the local socket's slow node.
        assert_eq!(node, 3);
        p.on_page_placed(0, node);
        os.node.insert(0, node);
        // 31 accesses in epoch 1 do not pay for a charged move (min_accesses 32) ...
        p.on_epoch(1, &[(7, 31)], &[], &topo, &mut os);
        assert!(os.log.is_empty());
        // ... 32 in epoch 2 do; the nearest fast node from pmem1 is dram1.
        p.on_epoch(2, &[(7, 32)], &[], &topo, &mut os);
        assert_eq!(os.log, ["migrate 0 -> 1 Background"]);
        // An epoch that uses nothing moves nothing: no hot page lacks room.
        os.log.clear();
        p.on_epoch(3, &[], &[], &topo, &mut os);
        assert!(os.log.is_empty());
    }
}
