//! A chained hash map (the "hash map" workload of the CXL-flash study, Yang et al., ATC'23,
//! fig. 3a): a power-of-two array of 8-byte bucket heads and an arena of 32-byte entries
//! {key, value, next, pad} allocated in insertion order. Phase 1 inserts keys 0..n (threads split
//! the keys); phase 2 runs lookups of uniformly random keys forever, each walking its chain and
//! then reading the value, or with probability `write_ratio` overwriting it.
//! Memory: the chain links, 4 bytes per entry and per bucket: at most a fifth of the footprint.

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use tiersim_core::params::{ParamSpec, Params};
use tiersim_core::{Error, Result};

use super::program::{chunk, thread_rngs, Driver, Layout, Out, Program, Step};
use super::{Common, Generator, ACCESSES, BASE_ADDR, FOOTPRINT, GAP_INSTRUCTIONS, PAGE_SIZE, THREADS};

const BUCKET: u64 = 8;
const ENTRY: u64 = 32;
const NONE: u32 = u32::MAX;

pub const PARAMS: &[ParamSpec] =
    &[FOOTPRINT, ACCESSES, super::write_ratio("0.1"), THREADS, GAP_INSTRUCTIONS, BASE_ADDR, PAGE_SIZE];

struct Hashmap {
    entries: u64,
    bucket_shift: u32,
    buckets_at: u64,
    entries_at: u64,
    head: Vec<u32>,
    next: Vec<u32>,
    write_ratio: f64,
    /// Per thread: the next key to insert and the end of its share (phase 1).
    insert: Vec<(u64, u64)>,
    lookup_phase: bool,
    rngs: Vec<ChaCha8Rng>,
}

/// (entries, buckets): one bucket per entry at most, a power of two, filling the footprint.
pub fn sizes(footprint: u64) -> (u64, u64) {
    let entries = footprint / (ENTRY + BUCKET);
    let buckets = if entries == 0 { 0 } else { 1u64 << (63 - entries.leading_zeros()) };
    (entries, buckets)
}

pub fn build(p: &Params, seed: u64) -> Result<Box<dyn Generator>> {
    let c = Common::with_access_size(p, ENTRY)?;
    let (entries, buckets) = sizes(c.footprint);
    if entries < c.threads || entries >= NONE as u64 {
        return Err(Error::config(
            "footprint",
            format!("{} bytes give {entries} entries; need one per thread and fewer than 2^32", c.footprint),
        ));
    }
    let mut l = Layout::new(&c);
    let buckets_at = l.alloc(buckets * BUCKET)?;
    let entries_at = l.alloc(entries * ENTRY)?;
    let threads = c.threads as usize;
    let prog = Hashmap {
        entries,
        bucket_shift: 64 - buckets.trailing_zeros(),
        buckets_at,
        entries_at,
        head: vec![NONE; buckets as usize],
        next: vec![NONE; entries as usize],
        write_ratio: p.float("write_ratio"),
        insert: (0..threads).map(|t| chunk(entries, t, threads)).collect(),
        lookup_phase: false,
        rngs: thread_rngs(seed, threads),
    };
    Ok(Driver::boxed(prog, &c))
}

impl Hashmap {
    /// Fibonacci hashing: the top bits of key * 2^64/phi.
    fn bucket(&self, key: u64) -> usize {
        if self.bucket_shift == 64 {
            return 0;
        }
        (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.bucket_shift) as usize
    }
}

impl Program for Hashmap {
    fn step(&mut self, t: usize, out: &mut Out<'_>) -> Step {
        if !self.lookup_phase {
            let (key, hi) = self.insert[t];
            if key >= hi {
                return Step::Wait;
            }
            self.insert[t].0 += 1;
            let b = self.bucket(key);
            out.read(self.buckets_at + b as u64 * BUCKET, BUCKET);
            // The new entry {key, value, next} is written whole, then becomes the chain head.
            out.write(self.entries_at + key * ENTRY, 24);
            out.write(self.buckets_at + b as u64 * BUCKET, BUCKET);
            self.next[key as usize] = self.head[b];
            self.head[b] = key as u32;
            return Step::Ran;
        }
        let rng = &mut self.rngs[t];
        let key = rng.gen_range(0..self.entries);
        let write = rng.gen::<f64>() < self.write_ratio;
        let b = self.bucket(key);
        out.read(self.buckets_at + b as u64 * BUCKET, BUCKET);
        let mut e = self.head[b];
        while e != NONE {
            // Compare the key and follow `next`: the entry's key and next fields.
            let at = self.entries_at + e as u64 * ENTRY;
            out.read(at, 8);
            if e as u64 == key {
                if write {
                    out.write(at + 8, 8);
                } else {
                    out.read(at + 8, 8);
                }
                break;
            }
            out.read(at + 16, 8);
            e = self.next[e as usize];
        }
        Step::Ran
    }

    fn barrier(&mut self) -> bool {
        self.lookup_phase = true;
        true
    }
}
