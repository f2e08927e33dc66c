//! The controller's request path: a line is served as a hit (device DRAM), a hit under miss
//! (merged into its MSHR row) or a miss (a flash read into a new row, the prefetcher asked);
//! rows retire into cache fills that may evict and write back. Timing is computed at arrival,
//! in arrival order (see the module's head in mod.rs), but for compat mode's flash reads and
//! programs, whose completions come from its event-driven back end (compat.rs, tsu.rs).

use tiersim_core::Op;

use super::cache::{Evicted, PREFETCHED};
use super::compat::{MQSIM_DRAM_EVENT_NS, MQSIM_DRAM_QUEUE, WAITING};
use super::ftl::Location;
use super::metrics::Class;
use super::mshr::{Kind, Row, PENDING};
use super::{count_pin, fib_slot, prefetch, CxlFlash};
use crate::pipe::{ps_from_ns, Ps};

impl CxlFlash {
    /// Mask of the sub-blocks covering bytes `lo..=hi` of a line.
    #[inline]
    fn mask(&self, lo: u64, hi: u64) -> u64 {
        let (a, b) = (lo >> self.sub_shift, hi >> self.sub_shift);
        let width = b - a + 1;
        let ones = if width >= 64 { u64::MAX } else { (1u64 << width) - 1 };
        (ones << a) & self.full_mask
    }

    #[inline]
    fn pollution_slot(&self, line: u64) -> usize {
        fib_slot(line, 17, self.pollution.len())
    }

    /// Whether a request looks for its line's MSHR row to merge into (MQSim_CXL without a cache
    /// has no MSHR: every request goes to flash).
    #[inline]
    fn merges(&self) -> bool {
        self.mshr.merging() && (self.cache.is_some() || self.mq.is_none())
    }

    /// Retire every MSHR row ready by `t`, and charge the link with responses sent by then, in
    /// time order (the rows' own responses with them).
    pub(super) fn retire_until(&mut self, t: Ps) {
        if self.mq.is_some() {
            return self.compat_retire_until(t);
        }
        loop {
            // A row goes first unless a response is due before it (`due` is `Ps::MAX` when no
            // response waits: then any row ready by t).
            let due = self.deferred.due;
            match self.mshr.next_ready() {
                Some(ready) if ready <= t && ready <= due => {
                    let row = self.mshr.pop_ready(t).expect("a row ready by t");
                    for _ in 0..row.resp_count {
                        self.d2h.serve(row.ready, row.resp_bytes);
                    }
                    self.retire(row);
                }
                _ => {
                    if due > t {
                        break;
                    }
                    let Some((when, bytes)) = self.deferred.peek() else { break };
                    self.deferred.pop();
                    self.d2h.serve(when, bytes);
                }
            }
        }
    }

    // Inlined into `retire_until` (with `fill`) as when it was its only caller: since
    // `compat_step` calls it too, the calls cost the default path's random trace about 60
    // instructions a request otherwise.
    #[inline(always)]
    pub(super) fn retire(&mut self, row: Row) {
        let t = row.ready;
        match (row.kind, self.cache.is_some()) {
            (Kind::Fill, true) => self.fill(row),
            (Kind::Fill, false) => {}
            (Kind::Rmw, _) => self.ftl.write(&mut self.flash, row.line, t),
        }
    }

    /// Put the line of a completed read into the cache.
    #[inline(always)]
    fn fill(&mut self, row: Row) {
        let t = row.ready;
        let line_bytes = 1u64 << self.line_shift;
        let Some(cache) = self.cache.as_mut() else { return };
        let cached = if self.fills_are_new {
            debug_assert!(cache.lookup(row.line).is_none());
            None
        } else {
            cache.lookup(row.line)
        };
        if let Some(slot) = cached {
            // Already there: a partly valid line (write_validate) completed by this read, or a
            // duplicate read without MSHR.
            let s = slot as usize;
            cache.valid[s] = self.full_mask;
            cache.dirty[s] |= row.dirty;
            return;
        }
        let (slot, evicted) = cache.allocate(row.line);
        if let Some(e) = evicted.filter(|e| e.dirty != 0) {
            // Its write-back reads the FTL map below: fetch the entry during the DRAM booking.
            self.ftl.prefetch(e.line);
        }
        let s = slot as usize;
        cache.valid[s] = self.full_mask;
        cache.dirty[s] = row.dirty;
        let unused_prefetch = row.prefetch && !row.demanded;
        if unused_prefetch {
            cache.flags[s] |= PREFETCHED;
        }
        if row.pin {
            count_pin(&mut self.c, cache.pin(slot, self.pin_max, self.pin_replace));
        }
        if self.mq.is_none() {
            self.dram.serve(t, u64::from(slot) * line_bytes, line_bytes as u32, Op::Write);
        }
        self.prefetcher.on_fill(row.line, row.prefetch);
        if let Some(e) = evicted {
            self.evict(e, slot, t, unused_prefetch);
        }
    }

    fn evict(&mut self, e: Evicted, slot: u32, t: Ps, by_prefetch: bool) {
        self.pf.evictions += 1;
        if let Some(mq) = self.mq.as_mut() {
            if mq.prefetched.remove(&e.line) {
                mq.tag_asserted.remove(&e.line);
            }
        }
        if e.flags & PREFETCHED != 0 {
            self.c.prefetch_unused_evicted += 1;
        }
        if by_prefetch {
            let i = self.pollution_slot(e.line);
            self.pollution[i] = e.line + 1;
        }
        if e.dirty == 0 {
            self.c.evictions_clean += 1;
            return;
        }
        self.c.evictions_dirty += 1;
        self.c.dirty_subblocks_evicted += u64::from(e.dirty.count_ones());
        let line_bytes = 1u64 << self.line_shift;
        // The victim's data leaves the DRAM for the write buffer.
        if self.mq.is_none() {
            self.dram.serve(t, u64::from(slot) * line_bytes, line_bytes as u32, Op::Read);
        }
        if self.mq.is_some() {
            self.mqsim_program(e.line, t, false);
            return;
        }
        let at = if e.valid != self.full_mask {
            // Partly valid: the rest of the unit comes from flash first.
            self.c.flash_reads_rmw += 1;
            self.read_unit(e.line, t).0
        } else {
            t
        };
        self.ftl.write(&mut self.flash, e.line, at);
    }

    /// Read a line's unit from flash (or from the write buffer) at `t`; returns when it is at the
    /// controller, and the die read (None: the write buffer).
    fn read_unit(&mut self, line: u64, t: Ps) -> (Ps, Option<u32>) {
        if self.mq.is_some() {
            // Submitted by `mqsim_read` once the row is allocated; its completion comes later.
            return (PENDING, Some(self.mqsim_place(line).0));
        }
        match self.ftl.locate(&self.flash, line) {
            Location::Buffer => {
                self.ftl.buffer_read();
                self.c.write_buffer_hits += 1;
                let bytes = 1u64 << self.line_shift;
                (self.dram.serve(t, 0, bytes as u32, Op::Read), None)
            }
            Location::Flash { die, page } => (self.flash.read(die, page, 1u64 << self.line_shift, t), Some(die)),
        }
    }

    /// Ask the prefetcher and issue what it proposes. Returns false if compat mode's throttle
    /// refused the trigger (`compat_prefetch_room`).
    fn trigger(&mut self, line: u64, miss: bool, t: Ps) -> bool {
        let room = if self.mq.is_some() {
            match self.compat_prefetch_room(miss) {
                Some(room) => room,
                None => return false,
            }
        } else {
            u64::MAX
        };
        self.proposals.clear();
        let ctx = prefetch::Context { line, miss, lines: self.lines, counters: &self.pf };
        self.prefetcher.on_trigger(&ctx, &mut self.proposals);
        if self.proposals.is_empty() {
            return true;
        }
        let proposals = std::mem::take(&mut self.proposals);
        let mut issued = 0;
        for &l in &proposals {
            if issued == room {
                self.mq.as_mut().expect("a bounded room is compat mode's").truncated += 1;
                continue;
            }
            issued += u64::from(self.prefetch(l, t, false));
        }
        self.proposals = proposals;
        true
    }

    /// Compat mode's trigger on a demand hit (MQSim_CXL, cxl/Host_Interface_CXL.cpp:316-321):
    /// every hit on a line a prefetch was issued for, until it is evicted, calls the prefetcher;
    /// best-offset runs at each of them, a next-line prefetcher at the first one the throttle lets
    /// through (`tagAssertedLBA`, :131-136).
    fn compat_hit_trigger(&mut self, line: u64, t: Ps) {
        let mq = self.mq.as_ref().expect("compat mode");
        if !mq.prefetched.contains(&line) {
            return;
        }
        self.pf.prefetched_hits += 1;
        if self.prefetcher.trigger_on_every_hit() {
            self.trigger(line, false, t);
            return;
        }
        if !mq.tag_asserted.contains(&line) && self.trigger(line, false, t) {
            self.mq.as_mut().expect("compat mode").tag_asserted.insert(line);
        }
    }

    /// Issue a prefetch read of `line` at `t` unless it is cached or in flight or no row is free.
    pub(super) fn prefetch(&mut self, line: u64, t: Ps, pin: bool) -> bool {
        if line >= self.lines {
            return false;
        }
        let Some(cache) = self.cache.as_mut() else {
            self.c.prefetch_dropped += 1;
            return false;
        };
        if let Some(slot) = cache.lookup(line) {
            if cache.valid[slot as usize] == self.full_mask {
                self.c.prefetch_redundant += 1;
                if pin {
                    count_pin(&mut self.c, cache.pin(slot, self.pin_max, self.pin_replace));
                }
                return false;
            }
        }
        if let Some(r) = self.mshr.find(line) {
            self.c.prefetch_redundant += 1;
            if pin {
                self.mshr.row_mut(r).pin = true;
            }
            return false;
        }
        // Compat mode's prefetch queue is MQSim_CXL's, checked by its throttle (`trigger`).
        if self.mshr.full() || (self.mq.is_none() && self.mshr.prefetch_in_use() >= self.prefetch_max) {
            self.c.prefetch_dropped += 1;
            return false;
        }
        let (ready, die) = self.read_unit(line, t);
        self.c.flash_reads_prefetch += u64::from(die.is_some());
        if let Some(mq) = self.mq.as_mut() {
            mq.prefetched.insert(line);
        }
        self.pf.issued += 1;
        let row = Row {
            line,
            ready,
            kind: Kind::Fill,
            merged: 0,
            prefetch: true,
            demanded: false,
            dirty: 0,
            resp_bytes: 0,
            resp_count: 0,
            pin,
            die,
        };
        let r = self.mshr.alloc(row);
        if self.mq.is_some() {
            self.mqsim_read(line, t, r);
        }
        true
    }

    /// Serve one line of a request that arrived at the controller at `arrive`; returns when its
    /// data (or write acknowledgement) is ready at the controller (`WAITING` while compat mode's
    /// back end has not fixed it), and how it was served.
    pub(super) fn line_access(&mut self, arrive: Ps, line: u64, lo: u64, hi: u64, op: Op) -> (Ps, Class) {
        let write = op.is_write();
        let mask = self.mask(lo, hi);
        let mut t = arrive.max(self.accept_floor);
        loop {
            self.retire_until(t);
            if let Some(mq) = self.mq.as_ref() {
                // MQSim_CXL stops its host feed while 8 events wait for the device DRAM
                // (DRAM_Model.cpp service_cxl_dram_access, Notify_DRAM_is_full): a request is
                // accepted when it would be at most the 9th in line.
                let room = mq.server.busy_until().saturating_sub(ps_from_ns(MQSIM_DRAM_EVENT_NS * MQSIM_DRAM_QUEUE));
                if room > t {
                    t = room;
                    continue;
                }
                // It also stops the feed while its flash back-end queue is full, for every
                // request, hits included (cxl/CXL_PCIe.cpp:31, `flash_device_avail`, cleared by
                // Notify_CXL_Host_flash_full at cxl/Host_Interface_CXL.cpp:947).
                if mq.backend_full(self.mshr.in_use()) {
                    let next = self.compat_backend_wait(t);
                    self.c.stall_mshr_rows += 1;
                    self.c.stall_mshr_rows_ps = self.c.stall_mshr_rows_ps.saturating_add(next - t);
                    t = next;
                    continue;
                }
            }
            let cached = self.cache.as_ref().and_then(|c| c.lookup(line));
            if let Some(slot) = cached {
                let valid = self.cache.as_ref().map_or(0, |c| c.valid[slot as usize]);
                if write || valid & mask == mask {
                    self.accept_floor = t;
                    return (self.hit(slot, line, lo, hi, op, t), Class::Hit);
                }
            }
            if self.merges() {
                if let Some(r) = self.mshr.find(line) {
                    let row = *self.mshr.row(r);
                    if row.merged < self.mshr.entries {
                        self.accept_floor = t;
                        return (self.hit_under_miss(r, mask, write, hi - lo + 1, t), Class::HitUnderMiss);
                    }
                    let ready = if self.mq.is_some() { self.compat_wait_row(r, t) } else { row.ready };
                    self.c.stall_mshr_entries += 1;
                    self.c.stall_mshr_entries_ps = self.c.stall_mshr_entries_ps.saturating_add(ready - t);
                    t = ready;
                    continue;
                }
            }
            if self.mshr.full() {
                let next = if self.mq.is_some() {
                    self.compat_next_ready(t)
                } else {
                    self.mshr.next_ready().expect("a full MSHR has rows in flight")
                };
                self.c.stall_mshr_rows += 1;
                self.c.stall_mshr_rows_ps = self.c.stall_mshr_rows_ps.saturating_add(next - t);
                t = next;
                if !(self.mshr.merging() && cached.is_none() && self.mq.is_none()) {
                    continue;
                }
                // Retiring rows only fills their own lines and evicts: the line is still neither
                // cached nor in flight (merging keeps one row per line), and at least one row is
                // free now, so the checks above would come out the same.
                self.retire_until(t);
            }
            if self.cache.is_some() && self.ftl.pending(t) >= self.write_buffer_units {
                if let Some(next) = self.ftl.next_program_done() {
                    self.c.stall_write_buffer += 1;
                    self.c.stall_write_buffer_ps = self.c.stall_write_buffer_ps.saturating_add(next - t);
                    t = next;
                    continue;
                }
            }
            self.accept_floor = t;
            return (self.miss(line, mask, op, hi - lo + 1, t, cached), Class::Miss);
        }
    }

    fn hit(&mut self, slot: u32, line: u64, lo: u64, hi: u64, op: Op, t: Ps) -> Ps {
        self.c.line_hits += 1;
        let line_bytes = 1u64 << self.line_shift;
        let done = match self.mq.as_mut() {
            Some(mq) => mq.server.serve(t, 64).1,
            None => self.dram.serve(t, u64::from(slot) * line_bytes + lo, (hi - lo + 1) as u32, op),
        };
        let mask = self.mask(lo, hi);
        let cache = self.cache.as_mut().expect("hits need a cache");
        cache.hit(slot);
        let s = slot as usize;
        if op.is_write() {
            cache.dirty[s] |= mask;
            cache.valid[s] |= mask;
        }
        let first_use = cache.flags[s] & PREFETCHED != 0;
        if first_use {
            cache.flags[s] &= !PREFETCHED;
            self.pf.useful += 1;
        }
        if self.mq.is_some() {
            self.compat_hit_trigger(line, t);
        } else if first_use {
            self.trigger(line, false, t);
        }
        done
    }

    /// The acknowledgement of a write whose `bytes` wait in an MSHR row: as a DRAM write would take.
    #[inline]
    fn posted(&mut self, bytes: u64, t: Ps) -> Ps {
        if self.posted_memo.0 != bytes {
            self.posted_memo = (bytes, self.dram.idle(Op::Write, bytes as u32));
        }
        t + self.posted_memo.1
    }

    /// When a line whose data comes with row `r` (at `data`) is done: a posted write at its
    /// acknowledgement, else with the data, the row then carrying its response.
    #[inline]
    fn row_response(&mut self, r: u32, write: bool, bytes: u64, data: Ps, t: Ps) -> Ps {
        if write && !self.ack_fill {
            self.posted(bytes, t)
        } else {
            self.resp_row = Some(r);
            data
        }
    }

    fn hit_under_miss(&mut self, r: u32, mask: u64, write: bool, bytes: u64, t: Ps) -> Ps {
        self.c.line_hits_under_miss += 1;
        let row = self.mshr.row_mut(r);
        row.merged += 1;
        // A mask, not a branch (reads and writes interleave at random).
        row.dirty |= mask & 0u64.wrapping_sub(u64::from(write));
        let first_use = row.prefetch && !row.demanded;
        row.demanded = true;
        let (ready, line, merged) = (row.ready, row.line, row.merged);
        if first_use {
            self.pf.useful += 1;
            self.pf.late += 1;
            // MQSim_CXL's request to a line whose prefetch is in flight opens an MSHR row and
            // triggers nothing (cxl/Host_Interface_CXL.cpp:395-397).
            if self.mq.is_none() {
                self.trigger(line, false, t);
            }
        }
        if self.mq.is_some() {
            return self.compat_wait_for(r, merged, t);
        }
        self.row_response(r, write, bytes, ready.max(t), t)
    }

    fn miss(&mut self, line: u64, mask: u64, op: Op, bytes: u64, t: Ps, cached: Option<u32>) -> Ps {
        let write = op.is_write();
        self.c.line_misses += 1;
        if write && self.write_validate && cached.is_none() {
            if let Some(cache) = self.cache.as_mut() {
                // Allocate without reading flash: only the written part is valid.
                self.c.write_validate_allocs += 1;
                let (slot, evicted) = cache.allocate(line);
                let s = slot as usize;
                cache.valid[s] = mask;
                cache.dirty[s] = mask;
                let line_bytes = 1u64 << self.line_shift;
                let done = self.dram.serve(t, u64::from(slot) * line_bytes, bytes as u32, Op::Write);
                self.prefetcher.on_fill(line, false);
                if let Some(e) = evicted {
                    self.evict(e, slot, t, false);
                }
                return done;
            }
        }
        if self.mq.is_some() && self.cache.is_none() && write {
            // Without a cache MQSim_CXL sends each write to flash as its own program, with no
            // read, acknowledged when the program is done (request_serviced's no-cache branch).
            self.c.evictions_dirty += 1;
            self.mqsim_program(line, t, true);
            return WAITING;
        }
        let kind = if (!self.write_allocate || self.cache.is_none()) && write { Kind::Rmw } else { Kind::Fill };
        // A request that merges has just found no row for its line.
        if !self.merges() && self.mshr.find(line).is_some() {
            self.c.flash_reads_duplicate += 1;
        }
        let slot = self.pollution_slot(line);
        if self.pollution[slot] == line + 1 {
            self.pollution[slot] = 0;
            self.pf.pollution_misses += 1;
        }
        self.pf.demand_misses += 1;
        let (ready, die) = self.read_unit(line, t);
        self.c.flash_reads_demand += u64::from(die.is_some());
        let row = Row {
            line,
            ready,
            kind,
            merged: 1,
            prefetch: false,
            demanded: true,
            dirty: if write { mask } else { 0 },
            resp_bytes: 0,
            resp_count: 0,
            pin: false,
            die,
        };
        let r = self.mshr.alloc(row);
        if self.mq.is_some() {
            // MQSim_CXL opens the row and runs the prefetcher, whose reads go to the back end
            // first, then sends the demand read (cxl/Host_Interface_CXL.cpp:389,401, then
            // `Consume_pcie_message`, Host_Interface_CXL.h:212).
            if self.cache.is_some() {
                self.trigger(line, true, t);
            }
            self.mqsim_read(line, t, r);
        } else if kind == Kind::Fill {
            self.trigger(line, true, t);
        }
        if self.mq.is_some() {
            // Without a cache a read completes with its flash read, no DRAM event.
            return self.compat_wait_for(r, u32::from(self.cache.is_some()), t);
        }
        self.row_response(r, write, bytes, ready, t)
    }
}
