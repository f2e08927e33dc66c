//! Page migration and exchange, after mm/migrate.c (migrate_pages; exchange as policies.md 2.8):
//! the copy's reads and writes on both devices, the unmap and TLB-shootdown cost of synchronous
//! moves, PROT_NONE on demotion when the policy asks, ping-pong detection and move counters.

use tiersim_core::{NodeId, Ns, Op};
use tiersim_devices::DeviceRequest;

use super::PageEvent;
use crate::pagetable::PROT_NONE;
use crate::sim::Engine;

impl Engine {
    /// Migrate page `p` (already off its LRU list, flags unchanged: migration keeps PG_active) from node `from` to node `to`, which has a
    /// free frame. The copy reads the page from the source device and writes it to the target
    /// device, both issued at `t` (a streaming copy overlaps the two), so it takes bandwidth from
    /// both; returns when the copy completes. Without `copy` (an oracle's free move) the
    /// devices see nothing and the move completes at `t`.
    pub(crate) fn move_page(&mut self, p: u32, from: usize, to: usize, t: Ns, copy: bool) -> Ns {
        let old = self.pt.entries[p as usize].frame;
        self.nodes[from].release_frame(old);
        let new = self.nodes[to].take_frame();
        let e = &mut self.pt.entries[p as usize];
        e.frame = new;
        e.node = to as u16;
        self.lru_push_head(to, p);
        let size = self.page_size as u32;
        let req = |addr: u64, op| DeviceRequest { now: t, addr, size, op, socket: 0, cpu: 0, remote: false };
        let (read, write) = if copy {
            (
                self.nodes[from].dev.access(&req((old as u64) << self.page_shift, Op::Read)),
                self.nodes[to].dev.access(&req((new as u64) << self.page_shift, Op::Write)),
            )
        } else {
            (t, t)
        };
        self.note_move(p, from, to, t);
        if self.measuring {
            self.tiering.migrations += 1;
            self.tiering.migrated_bytes += self.page_size;
        }
        read.max(write)
    }

    /// What every page move shares, migration or exchange: PROT_NONE for demoted pages if the
    /// policy asks, the policy's notice, ping-pong detection and the per-node move counters.
    pub(crate) fn note_move(&mut self, p: u32, from: usize, to: usize, t: Ns) {
        let t_us = (t / 1000) as u32;
        let demoted = self.nodes[to].spec.tier > self.nodes[from].spec.tier;
        if demoted && self.protect_demoted {
            self.pt.entries[p as usize].flags |= PROT_NONE;
            self.pt.ext_mut(p).scan_us = t_us;
        }
        self.page_event(PageEvent::Moved(p, from as NodeId, to as NodeId));
        let ext = self.pt.ext_mut(p);
        let back = ext.moved_from as usize == to && t_us.wrapping_sub(ext.moved_us) as u64 * 1000 < self.ping_pong_ns;
        ext.moved_from = from as u16;
        ext.moved_us = t_us;
        if self.measuring {
            let st = &mut self.tiering;
            match self.nodes[to].spec.tier.cmp(&self.nodes[from].spec.tier) {
                std::cmp::Ordering::Less => st.promotions += 1,
                std::cmp::Ordering::Greater => st.demotions += 1,
                std::cmp::Ordering::Equal => {}
            }
            st.ping_pong += back as u64;
            let src = &mut self.nodes[from];
            src.epoch.migrated_out += 1;
            let dst = &mut self.nodes[to];
            dst.epoch.migrated_in += 1;
        }
    }

    /// Time (ps) a synchronous move started at `t` and copied by `done` costs the faulting CPU:
    /// per page unmapped, `migrate_overhead` and a TLB shootdown, plus the copy; counted as
    /// migration time.
    pub(crate) fn charge_move(&mut self, pages: u64, t: Ns, done: Ns) -> u64 {
        let ps = pages * (self.migrate_ps + self.tlb_shootdown_ps) + (done - t) * 1000;
        if self.measuring {
            self.tiering.migration_time_ps += ps;
        }
        ps
    }

    /// Swap the frames of pages `a` and `b` (on different nodes) at `t`: both pages are read and
    /// written, all four transfers issued at once; returns when the last completes.
    pub(crate) fn exchange_pages(&mut self, a: u32, b: u32, t: Ns) -> Ns {
        let (ea, eb) = (self.pt.entries[a as usize], self.pt.entries[b as usize]);
        let (na, nb) = (ea.node as usize, eb.node as usize);
        self.lru_unlink(na, a);
        self.lru_unlink(nb, b);
        self.pt.entries[a as usize].frame = eb.frame;
        self.pt.entries[a as usize].node = nb as u16;
        self.pt.entries[b as usize].frame = ea.frame;
        self.pt.entries[b as usize].node = na as u16;
        self.lru_push_head(nb, a);
        self.lru_push_head(na, b);
        let size = self.page_size as u32;
        let req = |frame: u32, op| DeviceRequest {
            now: t,
            addr: (frame as u64) << self.page_shift,
            size,
            op,
            socket: 0,
            cpu: 0,
            remote: false,
        };
        let mut done = t;
        done = done.max(self.nodes[na].dev.access(&req(ea.frame, Op::Read)));
        done = done.max(self.nodes[nb].dev.access(&req(eb.frame, Op::Read)));
        done = done.max(self.nodes[nb].dev.access(&req(eb.frame, Op::Write)));
        done = done.max(self.nodes[na].dev.access(&req(ea.frame, Op::Write)));
        self.note_move(a, na, nb, t);
        self.note_move(b, nb, na, t);
        if self.measuring {
            self.tiering.exchanges += 1;
            self.tiering.exchanged_bytes += 2 * self.page_size;
        }
        done
    }
}
