//! Binary min-heaps as a discrete-event simulator uses them (the "min-heap" workload of the
//! CXL-flash study, Yang et al., ATC'23, fig. 3c): an array of 32-byte events {time, payload},
//! filled by n random inserts (sift-up), then the "hold" model forever: extract the minimum
//! (sift-down from the root, reading both children per level) and insert an event at that time
//! plus a random delay (sift-up). Each thread owns a heap of footprint / threads bytes (a
//! MultiQueue-style sharded priority queue). Memory: the 8-byte keys, a quarter of the footprint.

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use tiersim_core::params::{ParamKind, ParamSpec, Params};
use tiersim_core::{Error, Result};

use super::program::{thread_rngs, Driver, Layout, Out, Program, Step};
use super::{Common, Generator, ACCESSES, BASE_ADDR, FOOTPRINT, GAP_INSTRUCTIONS, PAGE_SIZE, THREADS};

const ENTRY: u64 = 32;

pub const PARAMS: &[ParamSpec] = &[
    FOOTPRINT,
    ACCESSES,
    THREADS,
    GAP_INSTRUCTIONS,
    BASE_ADDR,
    PAGE_SIZE,
    ParamSpec::new(
        "max_delay",
        ParamKind::Int,
        "1000000",
        "an inserted event's time is the extracted one's plus 0..max_delay",
    )
    .min(1.0),
];

struct Heap {
    at: u64,
    keys: Vec<u64>,
    cap: usize,
    rng: ChaCha8Rng,
}

struct Minheap {
    heaps: Vec<Heap>,
    max_delay: u64,
}

pub fn build(p: &Params, seed: u64) -> Result<Box<dyn Generator>> {
    let c = Common::with_access_size(p, ENTRY)?;
    let cap = c.footprint / c.threads / ENTRY;
    if cap < 2 {
        return Err(Error::config(
            "footprint",
            format!(
                "{} bytes give each of {} threads fewer than 2 heap entries of {ENTRY} bytes",
                c.footprint, c.threads
            ),
        ));
    }
    let mut l = Layout::new(&c);
    let mut heaps = Vec::new();
    for rng in thread_rngs(seed, c.threads as usize) {
        heaps.push(Heap { at: l.alloc(cap * ENTRY)?, keys: Vec::new(), cap: cap as usize, rng });
    }
    Ok(Driver::boxed(Minheap { heaps, max_delay: p.uint("max_delay") }, &c))
}

impl Heap {
    fn addr(&self, i: usize) -> u64 {
        self.at + i as u64 * ENTRY
    }

    /// Insert with a hole moving up: read each parent, move it down while it is larger.
    fn push(&mut self, key: u64, out: &mut Out<'_>) {
        let mut i = self.keys.len();
        self.keys.push(key);
        while i > 0 {
            let parent = (i - 1) / 2;
            out.read(self.addr(parent), ENTRY);
            if self.keys[parent] <= key {
                break;
            }
            self.keys[i] = self.keys[parent];
            out.write(self.addr(i), ENTRY);
            i = parent;
        }
        self.keys[i] = key;
        out.write(self.addr(i), ENTRY);
    }

    /// Extract the root: the last entry moves into the hole and sinks past smaller children.
    fn pop(&mut self, out: &mut Out<'_>) -> u64 {
        out.read(self.addr(0), ENTRY);
        let min = self.keys[0];
        let last = self.keys.len() - 1;
        out.read(self.addr(last), ENTRY);
        let key = self.keys[last];
        self.keys.pop();
        let n = self.keys.len();
        if n == 0 {
            return min;
        }
        let mut i = 0;
        loop {
            let l = 2 * i + 1;
            if l >= n {
                break;
            }
            out.read(self.addr(l), ENTRY);
            let mut c = l;
            if l + 1 < n {
                out.read(self.addr(l + 1), ENTRY);
                if self.keys[l + 1] < self.keys[l] {
                    c = l + 1;
                }
            }
            if self.keys[c] >= key {
                break;
            }
            self.keys[i] = self.keys[c];
            out.write(self.addr(i), ENTRY);
            i = c;
        }
        self.keys[i] = key;
        out.write(self.addr(i), ENTRY);
        min
    }
}

impl Program for Minheap {
    fn step(&mut self, t: usize, out: &mut Out<'_>) -> Step {
        let max_delay = self.max_delay;
        let h = &mut self.heaps[t];
        if h.keys.len() < h.cap {
            let key = h.rng.gen_range(0..max_delay);
            h.push(key, out);
        } else {
            let now = h.pop(out);
            let key = now.saturating_add(h.rng.gen_range(0..max_delay));
            h.push(key, out);
        }
        Step::Ran
    }

    fn barrier(&mut self) -> bool {
        true
    }
}
