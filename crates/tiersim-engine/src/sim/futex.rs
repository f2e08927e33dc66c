//! Waits between threads: futex records (`Access::FUTEX`, docs/trace-format.md). A thread that
//! blocked in the kernel on another (pthread_cond_wait, or a mutex whose lock reached the
//! kernel: both futex(FUTEX_WAIT) in glibc) resumes only once the thread that woke it
//! (futex(FUTEX_WAKE): pthread_cond_broadcast/signal, pthread_mutex_unlock with waiters) has
//! reached its wake in simulated time. Without them a replay runs each thread's records as fast
//! as its own accesses allow, and a condition variable's waiters run ahead of the thread they
//! waited for (WiredTiger's group-commit followers ahead of the leader's fdatasync).
//!
//! The rule (docs/model.md "Waits between threads"): a wait record of word `addr` pairs with the
//! latest wake record of the same word *before it in the file*, if that wake is another CPU's;
//! the waiter's record is then served at the later of its own issue time and the wake's issue
//! time. A wait with no such wake (none earlier in the file, a wake beyond
//! `stats.replay_accesses`, or the CPU's own) waits for nothing. Pairing by file order makes the
//! replay deadlock-free: every wait depends only on an earlier record, so the earliest unserved
//! record of the file can always be served. The capture (workloads/_fileio.py) writes a wait
//! record only for a wait during which a wake of its word happened, at the wait's return, so
//! the latest wake before it is the one that woke it. Deviations: the wake's own system call
//! and the waiter's wakeup latency (a few us of scheduler) are not charged; a signal that wakes
//! one waiter is paired like a broadcast with each waiter that returned after it.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;
use tiersim_core::{Access, Error, Result};

use super::issue::IssueOrder;
use super::Engine;

/// A wake record read from the trace.
struct Wake {
    /// The CPU that wakes.
    cpu: usize,
    /// Its issue time (ps) once its CPU has served it.
    at_ps: Option<u64>,
    /// CPUs blocked on it.
    waiters: Vec<usize>,
}

/// The trace's futex records as the feed read them, and the waits they impose.
#[derive(Default)]
pub(super) struct Futexes {
    wakes: Vec<Wake>,
    /// Per futex word, its latest wake read.
    last_wake: FxHashMap<u64, usize>,
    /// Per CPU, its wake records not yet served: (position as `Cpu::done`, wake).
    pending_wakes: Vec<VecDeque<(u64, usize)>>,
    /// Per CPU, its wait records that pair with another CPU's wake, not yet served: (position,
    /// wake).
    pending_waits: Vec<VecDeque<(u64, usize)>>,
    /// CPUs blocked on a wake.
    pub(super) blocked: usize,
    /// CPUs a wake just released, put back in the issue order by `wake_up` once the waking CPU
    /// has its own next time (the order's `set_first` is for the CPU that just issued only).
    pub(super) woken: Vec<(usize, u64)>,
    /// Per CPU blocked, its wait's own issue time (ps), for the time it waited.
    blocked_since: Vec<Option<u64>>,
    pub(super) stats: FutexStats,
}

/// What the summary's `futex` section reports.
#[derive(Default, Debug)]
pub(crate) struct FutexStats {
    pub(crate) wait_records: u64,
    pub(crate) wake_records: u64,
    /// Wait records that paired with another CPU's wake.
    pub(crate) paired: u64,
    /// Measured waits that resumed later than their own issue time, and the time they added.
    pub(crate) delayed: u64,
    pub(crate) wait_ps: u64,
    /// The same time per CPU (grown to the highest CPU that waited).
    pub(crate) wait_ps_per_cpu: Vec<u64>,
}

impl FutexStats {
    pub(crate) fn summary(&self) -> serde_json::Value {
        serde_json::json!({
            "wait_records": self.wait_records,
            "wake_records": self.wake_records,
            "paired_waits": self.paired,
            "delayed_waits": self.delayed,
            "wait_ns": self.wait_ps / 1000,
            "wait_ns_per_cpu": self
                .wait_ps_per_cpu
                .iter()
                .enumerate()
                .filter(|(_, &ps)| ps > 0)
                .map(|(c, &ps)| (c.to_string(), serde_json::Value::from(ps / 1000)))
                .collect::<serde_json::Map<_, _>>(),
        })
    }
}

/// What became of a futex record at the front of its CPU's queue.
pub(super) enum Served {
    /// Served: the CPU's clock, `done` and the counts moved on as for any record.
    Done,
    /// The CPU waits for a wake not yet reached; a wake's CPU puts it back in the issue order.
    Blocked,
}

impl Futexes {
    /// The futex records of the batch just read, in file order, before its parts join the CPU
    /// queues: `record` is the file position of the batch's first record.
    pub(super) fn read(&mut self, batch: &tiersim_trace::SplitBatch, eng: &Engine, record: u64) -> Result<()> {
        if batch.futex.is_empty() {
            return Ok(());
        }
        let n = eng.cpus.len();
        if self.pending_waits.len() < n {
            self.pending_waits.resize_with(n, VecDeque::new);
            self.pending_wakes.resize_with(n, VecDeque::new);
            self.blocked_since.resize(n, None);
        }
        for &(c, k, i) in &batch.futex {
            let (c, k) = (c as usize, k as usize);
            let a = &batch.per_cpu[c][k];
            if a.size != 1 {
                return Err(Error::Sim(format!(
                    "record #{}: a futex record (flags 0x08) of size {}; futex records have size 1",
                    record + u64::from(i),
                    a.size
                )));
            }
            let pos = eng.cpus[c].done + eng.cpus[c].queue.len() as u64 + k as u64;
            if a.op.is_write() {
                self.stats.wake_records += 1;
                let id = self.wakes.len();
                self.wakes.push(Wake { cpu: c, at_ps: None, waiters: Vec::new() });
                self.last_wake.insert(a.addr, id);
                self.pending_wakes[c].push_back((pos, id));
            } else {
                self.stats.wait_records += 1;
                let Some(&id) = self.last_wake.get(&a.addr) else { continue };
                // The CPU's own wake is behind it in its own order already.
                if self.wakes[id].cpu == c {
                    continue;
                }
                self.stats.paired += 1;
                self.pending_waits[c].push_back((pos, id));
            }
        }
        Ok(())
    }
}

impl Engine {
    /// Serve CPU `c`'s futex record `a`, the front of its queue, at its issue time (or block it).
    pub(super) fn futex(&mut self, fx: &mut Futexes, c: usize, a: Access, order: &mut IssueOrder) -> Served {
        let issue_ps = self.cpus[c].next_issue_ps;
        let pos = self.cpus[c].done;
        let mut end_ps = issue_ps;
        if a.op.is_write() {
            if let Some(&(p, id)) = fx.pending_wakes.get(c).and_then(|q| q.front()) {
                if p == pos {
                    fx.pending_wakes[c].pop_front();
                    fx.wakes[id].at_ps = Some(issue_ps);
                    for w in std::mem::take(&mut fx.wakes[id].waiters) {
                        fx.woken.push((w, issue_ps));
                    }
                }
            }
        } else if let Some(&(p, id)) = fx.pending_waits.get(c).and_then(|q| q.front()) {
            if p == pos && self.open_loop {
                // Open loop: records issue at their own times, so a wait changes nothing.
                fx.pending_waits[c].pop_front();
            } else if p == pos {
                let Some(at_ps) = fx.wakes[id].at_ps else {
                    fx.wakes[id].waiters.push(c);
                    fx.blocked_since[c] = Some(issue_ps);
                    fx.blocked += 1;
                    order.idle(c);
                    return Served::Blocked;
                };
                fx.pending_waits[c].pop_front();
                end_ps = issue_ps.max(at_ps);
                let from = fx.blocked_since[c].take().unwrap_or(issue_ps);
                if self.measuring && end_ps > from {
                    fx.stats.delayed += 1;
                    fx.stats.wait_ps += end_ps - from;
                    let per = &mut fx.stats.wait_ps_per_cpu;
                    if per.len() <= c {
                        per.resize(c + 1, 0);
                    }
                    per[c] += end_ps - from;
                }
            }
        }
        self.retire(c, a, issue_ps, end_ps);
        Served::Done
    }

    /// The CPUs the last wake released resume at the later of their wait's issue and the wake.
    pub(super) fn wake_up(&mut self, fx: &mut Futexes, order: &mut IssueOrder) {
        for (w, at_ps) in std::mem::take(&mut fx.woken) {
            let t = self.cpus[w].next_issue_ps.max(at_ps);
            self.cpus[w].next_issue_ps = t;
            order.set(w, t);
            fx.blocked -= 1;
        }
    }

    /// No wake can come for the CPUs still blocked (defensive: pairing by file order leaves
    /// none): each resumes at its own issue time.
    pub(super) fn release_blocked(&mut self, fx: &mut Futexes, order: &mut IssueOrder) {
        for w in fx.wakes.iter_mut() {
            for c in std::mem::take(&mut w.waiters) {
                if let Some(q) = fx.pending_waits.get_mut(c) {
                    q.pop_front();
                }
                fx.blocked_since[c] = None;
                order.set(c, self.cpus[c].next_issue_ps);
                fx.blocked -= 1;
            }
        }
    }
}
