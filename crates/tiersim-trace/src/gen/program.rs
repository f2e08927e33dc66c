//! The machinery shared by the algorithmic generators (hashmap, matmul, minheap, kv, phased,
//! stencil, graph): a virtual address layout that places allocations the way a large `malloc`
//! would, and a driver that runs one state machine per thread a step at a time.
//!
//! A step is a bounded piece of the real algorithm (one inner-loop iteration, one heap
//! operation, one edge) and yields the few loads and stores it makes. The driver interleaves
//! threads round-robin, access by access, like the simple generators, and implements OpenMP-style
//! barriers: a thread that has finished its share of a phase waits until every thread has, then
//! the program moves to its next phase. Only the per-thread queues of one step's accesses are
//! buffered, so traces stream.

use std::collections::VecDeque;

use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tiersim_core::{Access, Error, Op, Result};

use super::{Common, Generator};
use crate::format::TraceMeta;

/// One load or store of a step, before the driver stamps it with a CPU and a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ref {
    pub addr: u64,
    pub size: u16,
    pub op: Op,
}

/// Accesses of one step, in program order.
pub(crate) struct Out<'a>(&'a mut Vec<Ref>);

impl Out<'_> {
    #[inline]
    pub fn read(&mut self, addr: u64, size: u64) {
        self.0.push(Ref { addr, size: size as u16, op: Op::Read });
    }
    #[inline]
    pub fn write(&mut self, addr: u64, size: u64) {
        self.0.push(Ref { addr, size: size as u16, op: Op::Write });
    }
    /// `bytes` at `addr` as accesses of at most `line` bytes, each within one line.
    pub fn span(&mut self, addr: u64, bytes: u64, line: u64, op: Op) {
        let end = addr + bytes;
        let mut a = addr;
        while a < end {
            let next = ((a / line) + 1) * line;
            let n = next.min(end) - a;
            self.0.push(Ref { addr: a, size: n as u16, op });
            a += n;
        }
    }
}

pub(crate) enum Step {
    /// The thread ran one step (its accesses, possibly none, are in the output).
    Ran,
    /// The thread has finished its share of the current phase.
    Wait,
}

/// A multi-threaded program as a state machine.
pub(crate) trait Program {
    /// Run thread `t`'s next step of the current phase.
    fn step(&mut self, t: usize, out: &mut Out<'_>) -> Step;
    /// Every thread is waiting: set up the next phase. `false` ends the program.
    fn barrier(&mut self) -> bool;
}

/// Consecutive barriers without a single access after which the driver gives up: a program
/// that only ever waits would otherwise spin forever.
const MAX_EMPTY_BARRIERS: u32 = 64;

pub(crate) struct Driver<P> {
    prog: P,
    meta: TraceMeta,
    gap: u64,
    accesses: u64,
    queues: Vec<VecDeque<Ref>>,
    waiting: Vec<bool>,
    scratch: Vec<Ref>,
    next_thread: usize,
    produced: u64,
    empty_barriers: u32,
    over: bool,
}

impl<P: Program + 'static> Driver<P> {
    pub fn boxed(prog: P, c: &Common) -> Box<dyn Generator> {
        let threads = c.threads as usize;
        Box::new(Driver {
            prog,
            meta: c.meta(),
            gap: c.gap,
            accesses: c.accesses,
            queues: (0..threads).map(|_| VecDeque::new()).collect(),
            waiting: vec![false; threads],
            scratch: Vec::new(),
            next_thread: 0,
            produced: 0,
            empty_barriers: 0,
            over: false,
        })
    }

    fn take(&mut self, t: usize) -> Option<Ref> {
        if let Some(r) = self.queues[t].pop_front() {
            return Some(r);
        }
        if self.waiting[t] {
            return None;
        }
        loop {
            self.scratch.clear();
            match self.prog.step(t, &mut Out(&mut self.scratch)) {
                Step::Ran if self.scratch.is_empty() => continue,
                Step::Ran => {
                    self.queues[t].extend(self.scratch.drain(..));
                    return self.queues[t].pop_front();
                }
                Step::Wait => {
                    self.waiting[t] = true;
                    return None;
                }
            }
        }
    }
}

impl<P: Program + 'static> Generator for Driver<P> {
    fn meta(&self) -> TraceMeta {
        self.meta
    }

    fn next_access(&mut self) -> Option<Access> {
        if self.over || self.produced >= self.accesses {
            return None;
        }
        let threads = self.queues.len();
        loop {
            for _ in 0..threads {
                let t = self.next_thread;
                self.next_thread = (t + 1) % threads;
                if let Some(r) = self.take(t) {
                    self.produced += 1;
                    self.empty_barriers = 0;
                    return Some(Access {
                        time: self.gap,
                        addr: r.addr,
                        cpu: t as u32,
                        size: r.size,
                        op: r.op,
                        flags: 0,
                    });
                }
            }
            self.empty_barriers += 1;
            if self.empty_barriers > MAX_EMPTY_BARRIERS || !self.prog.barrier() {
                self.over = true;
                return None;
            }
            self.waiting.iter_mut().for_each(|w| *w = false);
            self.next_thread = 0;
        }
    }
}

/// Bytes of a 2 MiB huge page: large arrays start on such a boundary, as glibc's mmap'd
/// allocations do once transparent huge pages are in play, so one array never shares a page
/// with another.
pub(crate) const LARGE_ALIGN: u64 = 2 << 20;

/// Places a program's allocations one after the other from the base address: arrays of at
/// least 2 MiB on 2 MiB boundaries, smaller ones on page boundaries.
pub(crate) struct Layout {
    base: u64,
    next: u64,
    page: u64,
}

impl Layout {
    pub fn new(c: &Common) -> Layout {
        Layout { base: c.base, next: c.base, page: c.page_size as u64 }
    }

    pub fn alloc(&mut self, bytes: u64) -> Result<u64> {
        let align = if bytes >= LARGE_ALIGN { LARGE_ALIGN } else { self.page };
        let start = self.next.checked_next_multiple_of(align);
        let end = start.and_then(|s| s.checked_add(bytes.max(1)));
        match (start, end) {
            (Some(s), Some(e)) => {
                self.next = e;
                Ok(s)
            }
            _ => Err(Error::config(
                "base_addr",
                format!("{:#x} + the workload's arrays run past the end of the 64-bit address space", self.base),
            )),
        }
    }
}

/// Thread `t`'s share `[lo, hi)` of `0..n` under an OpenMP static schedule.
pub(crate) fn chunk(n: u64, t: usize, threads: usize) -> (u64, u64) {
    let (t, threads) = (t as u128, threads as u128);
    ((n as u128 * t / threads) as u64, (n as u128 * (t + 1) / threads) as u64)
}

/// One random stream per thread, all from the one seed (ChaCha streams are independent).
pub(crate) fn thread_rngs(seed: u64, threads: usize) -> Vec<ChaCha8Rng> {
    (0..threads)
        .map(|t| {
            let mut r = ChaCha8Rng::seed_from_u64(seed);
            r.set_stream(t as u64 + 1);
            r
        })
        .collect()
}

/// SplitMix64: a counter-based mixer, for values that must be recomputed at random positions
/// (a graph's edge i) without storing them.
#[inline]
pub(crate) fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
