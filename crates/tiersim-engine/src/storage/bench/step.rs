//! A thread's operation as steps, and how each step runs: the CPU it charges to which layer, the
//! lines a copy issues, the page cache lookups, block requests, throttling, DAX faults, commit
//! groups and the flusher's pass.

use std::cmp::Reverse;

use tiersim_core::{Ns, Op};

use super::{Bench, Layer, Mem, LINE, LINES_IN_FLIGHT, THROTTLE_PAUSE};
use crate::storage::iopath::Driver;
use crate::storage::kvstore::KvOp;
use crate::storage::pagecache::PAGE;

/// One step of a thread's operation, executed at the thread's clock in global time order.
#[derive(Debug, Clone, Copy)]
pub(super) enum Step {
    Cpu(Ns, Layer),
    Until(Ns),
    /// One line of a copy at a time, `LINES_IN_FLIGHT` outstanding, so every line is issued at
    /// its own time; `CopyEnd` waits for the last and charges the copy.
    Copy {
        src: Mem,
        dst: Mem,
        bytes: u64,
    },
    CopyEnd,
    /// Buffered read of file pages `[first, first + count)` into the user buffer at `user`.
    ReadPages {
        first: u64,
        count: u64,
        user: u64,
    },
    /// Buffered write of whole pages from the user buffer.
    WritePages {
        first: u64,
        count: u64,
        user: u64,
    },
    /// Loads (or stores) of mmapped file pages.
    MapAccess {
        first: u64,
        count: u64,
        write: bool,
    },
    /// A block request straight to the device (O_DIRECT, or writeback of `pages` pages).
    Block {
        op: Op,
        offset: u64,
        bytes: u64,
        user: u64,
        writeback: u64,
    },
    Throttle,
    /// A DAX mmap fault mapping `dax_fault_bytes` region `.0`.
    DaxFault(u64),
    Kv(KvOp),
    Commit {
        bytes: u64,
    },
    LogWrite {
        bytes: u64,
    },
    LogDone,
    /// The flusher's pass.
    Flush,
    /// End of an application operation (latency accounting).
    OpDone,
}

impl Bench {
    pub(super) fn run_step(&mut self, t: usize, step: Step) {
        let now = self.threads[t].clock;
        let p = self.path;
        let push = |b: &mut Bench, s: Vec<Step>| {
            for x in s.into_iter().rev() {
                b.threads[t].steps.push_front(x);
            }
        };
        match step {
            Step::Cpu(ns, layer) => {
                self.threads[t].clock += ns;
                self.charge(t, layer, ns);
            }
            Step::Until(at) => {
                if at > now {
                    self.threads[t].clock = at;
                    if self.threads[t].measured && self.is_app(t) {
                        self.layers.device += at - now;
                    }
                }
            }
            Step::Copy { src, dst, bytes } => {
                let th = &mut self.threads[t];
                let k = th.slot;
                if th.slots[k] > now {
                    // Every fill buffer is busy: issue when this one frees.
                    th.clock = th.slots[k];
                    push(self, vec![step]);
                    return;
                }
                if th.copy_start.is_none() {
                    th.copy_start = Some(now);
                    th.copy_end = now;
                }
                // The store is issued with the load rather than when its data arrives: devices
                // serve requests in issue order, and a request issued ahead of the others'
                // clocks would hold them up. Its completion still follows the load's.
                let got = self.mem_access(now, src, 0, Op::Read, t as u32);
                let stored = self.mem_access(now, dst, 0, Op::Write, t as u32).max(got);
                let th = &mut self.threads[t];
                // A load holds its fill buffer until the data is there; a store until accepted.
                th.slots[k] = if src == Mem::Cpu { stored } else { got };
                th.slot = (k + 1) % LINES_IN_FLIGHT;
                th.copy_end = th.copy_end.max(stored);
                if bytes > LINE {
                    let adv = |m: Mem| match m {
                        Mem::Dram(a) => Mem::Dram(a + LINE),
                        Mem::Pm(a) => Mem::Pm(a + LINE),
                        Mem::Cpu => Mem::Cpu,
                    };
                    push(self, vec![Step::Copy { src: adv(src), dst: adv(dst), bytes: bytes - LINE }]);
                }
            }
            Step::CopyEnd => {
                let th = &mut self.threads[t];
                let start = th.copy_start.take().unwrap_or(now);
                let end = th.copy_end.max(now);
                th.clock = end;
                if th.measured && t != self.flusher {
                    self.layers.copy += end - start;
                }
            }
            Step::ReadPages { first, count, user } => {
                let (mut missing, mut marker, mut wait) = (false, false, now);
                for pg in first..first + count {
                    match self.cache.lookup(pg) {
                        Some((_, ready, m)) => {
                            marker |= m;
                            wait = wait.max(ready);
                        }
                        None => missing = true,
                    }
                }
                let lookups = count * p.page_cache_lookup;
                let random = self.random && self.kv.is_none();
                let mut ra = self.threads[t].ra;
                let plan = self.cache.plan_read(&mut ra, first, count, missing, marker, false, random);
                self.threads[t].ra = ra;
                let mut cpu = lookups;
                let mut ready = wait;
                let mut copies = Vec::new();
                for r in plan {
                    let (done, c, s) = self.read_into_cache(now + cpu, t, r.first, r.count, r.sync);
                    cpu += c;
                    copies.extend(s);
                    if r.sync {
                        ready = ready.max(done);
                    }
                }
                // Pages another thread is reading: wait for them too.
                for pg in first..first + count {
                    if let Some(r) = self.cache.ready_at(pg) {
                        ready = ready.max(r);
                    }
                }
                self.charge(t, Layer::PageCache, lookups);
                self.charge(t, Layer::Block, cpu - lookups);
                self.threads[t].clock = now + cpu;
                let mut next = copies;
                next.push(Step::Until(ready));
                if missing && self.driver == Driver::Nvme {
                    next.push(Step::Cpu(p.request_overhead(self.driver).2, Layer::Completion));
                }
                for (i, pg) in (first..first + count).enumerate() {
                    let frame = self.cache.frame(pg).unwrap_or(0);
                    next.push(Step::Copy {
                        src: Mem::Dram(frame * PAGE),
                        dst: Mem::Dram(user + i as u64 * PAGE),
                        bytes: PAGE,
                    });
                }
                next.push(Step::CopyEnd);
                push(self, next);
            }
            Step::WritePages { first, count, user } => {
                let mut next = Vec::new();
                let mut evict_steps = Vec::new();
                let mut cpu = 0;
                let mut wait = now;
                for (i, pg) in (first..first + count).enumerate() {
                    cpu += p.write_page;
                    let frame = match self.cache.lookup(pg) {
                        Some((f, ready, _)) => {
                            wait = wait.max(ready);
                            f
                        }
                        None => {
                            cpu += p.page_alloc;
                            let (f, victim) = self.cache.insert(pg, now);
                            if let Some((vp, vframe, true)) = victim {
                                self.mapped.remove(&vp);
                                let (w, s) = self.submit(now + cpu, t, Op::Write, vp * PAGE, PAGE, vframe * PAGE);
                                self.writeback_pages += 1;
                                wait = wait.max(w);
                                evict_steps.extend(s);
                            } else if let Some((vp, _, false)) = victim {
                                self.mapped.remove(&vp);
                            }
                            f
                        }
                    };
                    self.cache.mark_dirty(pg);
                    next.push(Step::Copy {
                        src: Mem::Dram(user + i as u64 * PAGE),
                        dst: Mem::Dram(frame * PAGE),
                        bytes: PAGE,
                    });
                }
                self.charge(t, Layer::PageCache, cpu);
                self.threads[t].clock = now + cpu;
                next.push(Step::CopyEnd);
                next.insert(0, Step::Until(wait));
                for s in evict_steps.into_iter().rev() {
                    next.insert(0, s);
                }
                next.push(Step::Throttle);
                push(self, next);
            }
            Step::MapAccess { first, count, write } => {
                let mut next = Vec::new();
                for pg in first..first + count {
                    if !self.mapped.contains(&pg) || (write && !self.cache.is_dirty(pg)) {
                        // A fault: minor if the page is cached, else read around it first.
                        if self.cache.lookup(pg).is_none() {
                            let mut ra = self.threads[t].ra;
                            let plan = self.cache.plan_read(&mut ra, pg, 1, true, false, true, false);
                            self.threads[t].ra = ra;
                            let mut cpu = 0;
                            let mut ready = now;
                            for r in plan {
                                let (done, c, s) = self.read_into_cache(now + cpu, t, r.first, r.count, r.sync);
                                cpu += c;
                                ready = ready.max(done);
                                next.extend(s);
                            }
                            self.charge(t, Layer::Block, cpu);
                            self.threads[t].clock = now + cpu;
                            next.push(Step::Until(ready));
                            if self.driver == Driver::Nvme {
                                next.push(Step::Cpu(p.request_overhead(self.driver).2, Layer::Completion));
                            }
                        }
                        next.push(Step::Cpu(p.minor_fault, Layer::Fault));
                        // filemap_map_pages maps the cached neighbours in the aligned window.
                        let w = p.fault_around_pages;
                        for q in (pg / w) * w..(pg / w + 1) * w {
                            if self.cache.contains(q) {
                                self.mapped.insert(q);
                            }
                        }
                        self.mapped.insert(pg);
                        if write {
                            self.cache.mark_dirty(pg);
                            next.push(Step::Throttle);
                        }
                    }
                    let frame = self.cache.frame(pg).unwrap_or(0);
                    next.push(if write {
                        Step::Copy { src: Mem::Cpu, dst: Mem::Dram(frame * PAGE), bytes: PAGE }
                    } else {
                        Step::Copy { src: Mem::Dram(frame * PAGE), dst: Mem::Cpu, bytes: PAGE }
                    });
                }
                next.push(Step::CopyEnd);
                push(self, next);
            }
            Step::Block { op, offset, bytes, user, writeback } => {
                let (blk, drv, cmpl) = p.request_overhead(self.driver);
                let parts = bytes.div_ceil(p.max_request);
                let pre = parts * (p.fs_map + blk + drv);
                self.charge(t, Layer::Fs, parts * p.fs_map);
                self.charge(t, Layer::Block, parts * blk);
                self.charge(t, Layer::Driver, parts * drv);
                let (done, copies) = self.submit(now + pre, t, op, offset, bytes, user);
                if !copies.is_empty() {
                    // The pmem driver's copy: synchronous, no completion interrupt.
                    self.threads[t].clock = now + pre;
                    push(self, copies);
                } else if writeback > 0 {
                    // The flusher does not wait: completions end the pages' writeback.
                    self.threads[t].clock = now + pre;
                    self.wb_inflight.push(Reverse((done, writeback)));
                    self.wb_inflight_pages += writeback;
                } else {
                    self.threads[t].clock = now + pre;
                    push(self, vec![Step::Until(done), Step::Cpu(cmpl, Layer::Completion)]);
                }
            }
            Step::DaxFault(region) => {
                // Another thread may have mapped it since the operation was planned.
                if self.dax_mapped.insert(region) {
                    self.threads[t].clock += p.dax_fault;
                    self.charge(t, Layer::Fault, p.dax_fault);
                }
            }
            Step::Throttle => {
                self.retire_writeback(now);
                let dirty = self.cache.dirty_pages() + self.wb_inflight_pages;
                if dirty > self.bg_pages {
                    self.wake_flusher(now);
                }
                if dirty > self.limit_pages {
                    // balance_dirty_pages: sleep until writeback completes some pages.
                    let until = self.wb_inflight.peek().map_or(now + THROTTLE_PAUSE, |r| r.0 .0.max(now + 1));
                    if self.threads[t].measured && self.is_app(t) {
                        self.layers.wait += until - now;
                    }
                    self.threads[t].clock = until;
                    push(self, vec![Step::Throttle]);
                }
            }
            Step::Flush => {
                self.retire_writeback(now);
                let dirty = self.cache.dirty_pages();
                if dirty == 0 || dirty + self.wb_inflight_pages <= self.bg_pages / 2 && self.wb_inflight_pages > 0 {
                    self.flusher_armed = false;
                    self.threads[t].parked = true;
                    return;
                }
                // Bound the writeback in flight to a batch: wait for completions beyond it.
                if self.wb_inflight_pages >= self.wb_batch {
                    let until = self.wb_inflight.peek().map_or(now + 1, |r| r.0 .0.max(now + 1));
                    self.threads[t].clock = until;
                    push(self, vec![Step::Flush]);
                    return;
                }
                let pages = self.cache.take_dirty(self.wb_batch);
                let mut next = Vec::new();
                let mut i = 0;
                while i < pages.len() {
                    let mut j = i + 1;
                    while j < pages.len()
                        && pages[j].0 == pages[j - 1].0 + 1
                        && (j - i + 1) as u64 * PAGE <= p.max_request
                    {
                        j += 1;
                    }
                    let n = (j - i) as u64;
                    self.writeback_pages += n;
                    next.push(Step::Block {
                        op: Op::Write,
                        offset: pages[i].0 * PAGE,
                        bytes: n * PAGE,
                        user: pages[i].1 * PAGE,
                        writeback: n,
                    });
                    i = j;
                }
                next.push(Step::Flush);
                push(self, next);
            }
            Step::Kv(op) => {
                let steps = self.kv_steps(t, op);
                push(self, steps);
            }
            Step::Commit { bytes } => {
                self.log_commits += 1;
                if self.log_busy {
                    self.log_waiting.push((t, bytes));
                    self.threads[t].parked = true;
                } else {
                    self.log_busy = true;
                    self.log_group = vec![t];
                    self.log_groups += 1;
                    push(self, vec![Step::LogWrite { bytes }, Step::LogDone]);
                }
            }
            Step::LogWrite { bytes } => {
                let steps = self.log_write(t, bytes);
                push(self, steps);
            }
            Step::LogDone => {
                for &m in &self.log_group {
                    if m != t {
                        self.threads[m].clock = now;
                        self.threads[m].parked = false;
                        self.wake.push(m);
                    }
                }
                self.log_group.clear();
                self.log_busy = false;
                if !self.log_waiting.is_empty() {
                    let take = if self.group_commit { self.log_waiting.len() } else { 1 };
                    let group: Vec<(usize, u64)> = self.log_waiting.drain(..take).collect();
                    let leader = group[0].0;
                    let bytes = group.iter().map(|g| g.1).sum();
                    self.log_busy = true;
                    self.log_groups += 1;
                    self.log_group = group.iter().map(|g| g.0).collect();
                    let th = &mut self.threads[leader];
                    th.parked = false;
                    th.clock = th.clock.max(now);
                    th.steps.push_front(Step::LogDone);
                    th.steps.push_front(Step::LogWrite { bytes });
                    self.wake.push(leader);
                }
            }
            Step::OpDone => {
                let th = &self.threads[t];
                if th.measured {
                    self.done_ops += 1;
                    self.latency_sum += u128::from(th.clock - th.op_start);
                    self.last_done = self.last_done.max(th.clock);
                }
            }
        }
    }

    fn retire_writeback(&mut self, now: Ns) {
        while let Some(Reverse((done, n))) = self.wb_inflight.peek().copied() {
            if done > now {
                break;
            }
            self.wb_inflight.pop();
            self.wb_inflight_pages -= n;
        }
    }

    fn wake_flusher(&mut self, now: Ns) {
        if self.flusher_armed {
            return;
        }
        self.flusher_armed = true;
        let f = self.flusher;
        let th = &mut self.threads[f];
        th.parked = false;
        th.clock = th.clock.max(now);
        th.steps.push_back(Step::Flush);
        self.wake.push(f);
    }
}
