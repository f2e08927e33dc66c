//! Page migration and exchange, after mm/migrate.c (migrate_pages; exchange as policies.md 2.8):
//! the copy's reads and writes on both devices, the unmap and TLB-shootdown cost of synchronous
//! moves, PROT_NONE on demotion when the policy asks, ping-pong detection and move counters.

use serde_json::{Map, Value};
use tiersim_core::{NodeId, Ns, Op};
use tiersim_devices::DeviceRequest;

use super::{lru, Memory, Metrics, PageEvent};
use crate::pagetable::PROT_NONE;

/// Moves over the measured part of the run.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct MigrateStats {
    pub(crate) promotions: u64,
    pub(crate) demotions: u64,
    pub(crate) migrations: u64,
    pub(crate) migrated_bytes: u64,
    pub(crate) exchanges: u64,
    pub(crate) exchanged_bytes: u64,
    pub(crate) ping_pong: u64,
    pub(crate) migration_time_ps: u64,
    /// Demotions of other software's pages (`occupied`), among `demotions`.
    pub(crate) occupied_demotions: u64,
}

/// The copy engine and its costs.
pub(crate) struct Migrator {
    /// Per page moved synchronously: `os.migrate_overhead` and `os.tlb_shootdown` (ps).
    migrate_ps: u64,
    tlb_shootdown_ps: u64,
    /// A page moved back within this window of its last move counts as ping-pong.
    ping_pong_ns: u64,
    /// Demoted pages are made PROT_NONE so their next access is a hint fault (TPP).
    protect_demoted: bool,
    pub(crate) stats: MigrateStats,
}

impl Migrator {
    pub(crate) fn new(migrate_ps: u64, tlb_shootdown_ps: u64, ping_pong_ns: u64, protect_demoted: bool) -> Migrator {
        Migrator { migrate_ps, tlb_shootdown_ps, ping_pong_ns, protect_demoted, stats: MigrateStats::default() }
    }

    /// Migrate page `p` (already off its LRU list, flags unchanged: migration keeps PG_active) from node `from` to node `to`, which has a
    /// free frame. The copy reads the page from the source device and writes it to the target
    /// device, both issued at `t` (a streaming copy overlaps the two), so it takes bandwidth from
    /// both; returns when the copy completes. Without `copy` (an oracle's free move) the
    /// devices see nothing and the move completes at `t`.
    pub(crate) fn move_page(&mut self, mem: &mut Memory, p: u32, from: usize, to: usize, t: Ns, copy: bool) -> Ns {
        let old = mem.pt.entries[p as usize].frame;
        mem.nodes[from].release_frame(old);
        let new = mem.nodes[to].take_frame();
        let e = &mut mem.pt.entries[p as usize];
        e.frame = new;
        e.node = to as u16;
        lru::add(&mut mem.pt, &mut mem.nodes[to], p);
        let size = mem.page_size as u32;
        let shift = mem.page_shift;
        let req = |addr: u64, op| DeviceRequest { now: t, addr, size, op, socket: 0, cpu: 0, remote: false };
        let (read, write) = if copy {
            (
                mem.nodes[from].dev.access(&req((old as u64) << shift, Op::Read)),
                mem.nodes[to].dev.access(&req((new as u64) << shift, Op::Write)),
            )
        } else {
            (t, t)
        };
        self.note_move(mem, p, from, to, t);
        self.stats.migrations += 1;
        self.stats.migrated_bytes += mem.page_size;
        read.max(write)
    }

    /// Demote one of other software's pages on `from` (`occupied`, of `file` kind) to `to`,
    /// which has a free frame: the same copy on both devices as `move_page`, counted as a
    /// demotion and in both nodes' move counters (the kernel's pgdemote_kswapd counts every
    /// page it demotes), with no policy notice (the trace has no such page).
    pub(crate) fn move_occupied(&mut self, mem: &mut Memory, from: usize, to: usize, file: bool, t: Ns) -> Ns {
        let old = mem.nodes[from].release_occupied(file).expect("reclaim picked an occupied page");
        let new = mem.nodes[to].take_occupied(file);
        let size = mem.page_size as u32;
        let shift = mem.page_shift;
        let req = |addr: u64, op| DeviceRequest { now: t, addr, size, op, socket: 0, cpu: 0, remote: false };
        let read = mem.nodes[from].dev.access(&req((old as u64) << shift, Op::Read));
        let write = mem.nodes[to].dev.access(&req((new as u64) << shift, Op::Write));
        let st = &mut self.stats;
        if mem.nodes[to].spec.tier > mem.nodes[from].spec.tier {
            st.demotions += 1;
        }
        st.migrations += 1;
        st.migrated_bytes += mem.page_size;
        st.occupied_demotions += 1;
        mem.nodes[from].epoch.migrated_out += 1;
        mem.nodes[to].epoch.migrated_in += 1;
        read.max(write)
    }

    /// What every page move shares, migration or exchange: PROT_NONE for demoted pages if the
    /// policy asks, the policy's notice, ping-pong detection and the per-node move counters.
    fn note_move(&mut self, mem: &mut Memory, p: u32, from: usize, to: usize, t: Ns) {
        let t_us = (t / 1000) as u32;
        let demoted = mem.nodes[to].spec.tier > mem.nodes[from].spec.tier;
        if demoted && self.protect_demoted {
            mem.pt.entries[p as usize].flags |= PROT_NONE;
            mem.pt.ext_mut(p).scan_us = t_us;
        }
        mem.policy.page_event(PageEvent::Moved(p, from as NodeId, to as NodeId));
        let ext = mem.pt.ext_mut(p);
        let back = ext.moved_from as usize == to && t_us.wrapping_sub(ext.moved_us) as u64 * 1000 < self.ping_pong_ns;
        ext.moved_from = from as u16;
        ext.moved_us = t_us;
        let st = &mut self.stats;
        match mem.nodes[to].spec.tier.cmp(&mem.nodes[from].spec.tier) {
            std::cmp::Ordering::Less => st.promotions += 1,
            std::cmp::Ordering::Greater => st.demotions += 1,
            std::cmp::Ordering::Equal => {}
        }
        st.ping_pong += back as u64;
        mem.nodes[from].epoch.migrated_out += 1;
        mem.nodes[to].epoch.migrated_in += 1;
    }

    /// Time (ps) a synchronous move started at `t` and copied by `done` costs the faulting CPU:
    /// per page unmapped, `migrate_overhead` and a TLB shootdown, plus the copy; counted as
    /// migration time.
    pub(crate) fn charge_move(&mut self, pages: u64, t: Ns, done: Ns) -> u64 {
        let ps = pages * (self.migrate_ps + self.tlb_shootdown_ps) + (done - t) * 1000;
        self.stats.migration_time_ps += ps;
        ps
    }

    /// Swap the frames of pages `a` and `b` (on different nodes) at `t`: both pages are read and
    /// written, all four transfers issued at once; returns when the last completes.
    pub(crate) fn exchange_pages(&mut self, mem: &mut Memory, a: u32, b: u32, t: Ns) -> Ns {
        let (ea, eb) = (mem.pt.entries[a as usize], mem.pt.entries[b as usize]);
        let (na, nb) = (ea.node as usize, eb.node as usize);
        lru::del(&mut mem.pt, &mut mem.nodes[na], a);
        lru::del(&mut mem.pt, &mut mem.nodes[nb], b);
        mem.pt.entries[a as usize].frame = eb.frame;
        mem.pt.entries[a as usize].node = nb as u16;
        mem.pt.entries[b as usize].frame = ea.frame;
        mem.pt.entries[b as usize].node = na as u16;
        lru::add(&mut mem.pt, &mut mem.nodes[nb], a);
        lru::add(&mut mem.pt, &mut mem.nodes[na], b);
        let size = mem.page_size as u32;
        let shift = mem.page_shift;
        let req = |frame: u32, op| DeviceRequest {
            now: t,
            addr: (frame as u64) << shift,
            size,
            op,
            socket: 0,
            cpu: 0,
            remote: false,
        };
        let mut done = t;
        done = done.max(mem.nodes[na].dev.access(&req(ea.frame, Op::Read)));
        done = done.max(mem.nodes[nb].dev.access(&req(eb.frame, Op::Read)));
        done = done.max(mem.nodes[nb].dev.access(&req(eb.frame, Op::Write)));
        done = done.max(mem.nodes[na].dev.access(&req(ea.frame, Op::Write)));
        self.note_move(mem, a, na, nb, t);
        self.note_move(mem, b, nb, na, t);
        self.stats.exchanges += 1;
        self.stats.exchanged_bytes += 2 * mem.page_size;
        done
    }
}

impl Metrics for Migrator {
    fn reset(&mut self) {
        self.stats = MigrateStats::default();
    }

    fn report(&self, section: &str, into: &mut Map<String, Value>) {
        if section == "tiering" {
            let s = &self.stats;
            for (k, v) in [
                ("promotions", s.promotions),
                ("demotions", s.demotions),
                ("migrations", s.migrations),
                ("migrated_bytes", s.migrated_bytes),
                ("exchanges", s.exchanges),
                ("exchanged_bytes", s.exchanged_bytes),
                ("ping_pong", s.ping_pong),
                ("migration_time_ns", s.migration_time_ps / 1000),
                ("occupied_demotions", s.occupied_demotions),
            ] {
                into.insert(k.into(), v.into());
            }
        }
    }
}
