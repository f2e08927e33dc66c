//! A B-tree key-value store in the manner of WiredTiger (seed 001's storage engine): records
//! sorted by key in leaf blocks of `block_size` bytes laid out in one file, the engine's own
//! DRAM cache of leaf blocks (LRU, dirty leaves written back to the file when evicted), YCSB
//! operation mixes on zipfian keys (Cooper et al., SoCC'10), and a write-ahead log record per
//! update committed by the bench (group commit, fsync or DAX). Internal B-tree nodes are few and
//! hot, so they are taken to stay in the engine's cache and cost only the operation's CPU.

use std::collections::BTreeMap;

use rand::Rng;
use rustc_hash::FxHashMap;
use serde_json::json;
use tiersim_core::{Error, Ns, Params, Result};
use tiersim_trace::gen::kv::Zipf;

/// Bytes of a log record beyond the value: key, LSN, lengths, checksum.
const LOG_HEADER: u64 = 32;
/// The log file's size: it is reused circularly (WiredTiger preallocates log files).
const LOG_BYTES: u64 = 64 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvOp {
    Get(u64),
    Put(u64),
}

/// What an operation needs from the file and the log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KvAccess {
    /// File offset of a leaf to read (a miss in the engine's cache).
    pub read: Option<u64>,
    /// File offset of a dirty leaf evicted to make room, to write first.
    pub write_back: Option<u64>,
    /// Bytes of the log record to commit.
    pub log: Option<u64>,
}

pub struct KvStore {
    records: u64,
    per_leaf: u64,
    block: u64,
    record_size: u64,
    zipf: Zipf,
    update_pct: u32,
    op_cpu: Ns,
    capacity: u64,
    leaves: FxHashMap<u64, (u64, bool)>,
    lru: BTreeMap<u64, u64>,
    seq: u64,
    pub hits: u64,
    pub misses: u64,
    pub dirty_evictions: u64,
}

impl KvStore {
    pub fn new(p: &Params, block: u64, file_size: u64) -> Result<Self> {
        let records = p.uint("kv_records");
        let record_size = p.bytes("kv_record_size");
        let per_leaf = block / record_size;
        if per_leaf == 0 {
            return Err(Error::config(
                "kv_record_size",
                format!("{record_size} B records do not fit a {block} B leaf"),
            ));
        }
        let leaves = records.div_ceil(per_leaf);
        if leaves * block > file_size {
            return Err(Error::config(
                "kv_records",
                format!(
                    "{records} records need {} leaf blocks = {} B, more than file_size {file_size} B",
                    leaves,
                    leaves * block
                ),
            ));
        }
        let update_pct = match p.str("kv_mix") {
            "a" => 50,
            "b" => 5,
            "c" => 0,
            _ => 100,
        };
        Ok(KvStore {
            records,
            per_leaf,
            block,
            record_size,
            zipf: Zipf::new(records, p.float("kv_theta")),
            update_pct,
            op_cpu: p.duration("kv_op_cpu"),
            capacity: (p.bytes("kv_cache") / block).max(1),
            leaves: FxHashMap::default(),
            lru: BTreeMap::new(),
            seq: 0,
            hits: 0,
            misses: 0,
            dirty_evictions: 0,
        })
    }

    pub fn log_pages(&self) -> u64 {
        LOG_BYTES / 4096
    }

    pub fn op_cpu(&self) -> Ns {
        self.op_cpu
    }

    pub fn next(&mut self, rng: &mut impl Rng) -> KvOp {
        // YCSB scrambles the zipfian rank so that hot keys spread over the key space (and leaves).
        let key = scramble(self.zipf.sample(rng)) % self.records;
        if rng.gen_range(0..100) < self.update_pct {
            KvOp::Put(key)
        } else {
            KvOp::Get(key)
        }
    }

    /// Look the key's leaf up in the engine's cache (loading it on a miss) and dirty it on a put.
    pub fn access(&mut self, op: KvOp) -> KvAccess {
        let (key, put) = match op {
            KvOp::Get(k) => (k, false),
            KvOp::Put(k) => (k, true),
        };
        let leaf = key / self.per_leaf;
        let mut out = KvAccess::default();
        self.seq += 1;
        let seq = self.seq;
        match self.leaves.get_mut(&leaf) {
            Some((s, dirty)) => {
                self.hits += 1;
                self.lru.remove(s);
                *s = seq;
                *dirty |= put;
            }
            None => {
                self.misses += 1;
                if self.leaves.len() as u64 >= self.capacity {
                    if let Some((&old_seq, &victim)) = self.lru.iter().next() {
                        self.lru.remove(&old_seq);
                        if let Some((_, true)) = self.leaves.remove(&victim) {
                            self.dirty_evictions += 1;
                            out.write_back = Some(victim * self.block);
                        }
                    }
                }
                self.leaves.insert(leaf, (seq, put));
                out.read = Some(leaf * self.block);
            }
        }
        self.lru.insert(seq, leaf);
        if put {
            out.log = Some(self.record_size + LOG_HEADER);
        }
        out
    }

    /// Fill the cache with the leaves of the most popular keys, as a long-running engine's
    /// cache holds them (a warm start instead of a long warm-up); counters stay zero.
    pub fn warm(&mut self) {
        let mut rank = 0;
        while (self.leaves.len() as u64) < self.capacity && rank < self.records {
            let leaf = (scramble(rank) % self.records) / self.per_leaf;
            if !self.leaves.contains_key(&leaf) {
                // Less popular leaves get older LRU positions.
                self.seq += 1;
                self.leaves.insert(leaf, (u64::MAX - self.seq, false));
            }
            rank += 1;
        }
        let mut order: Vec<(u64, u64)> = self.leaves.iter().map(|(l, (s, _))| (*s, *l)).collect();
        order.sort_unstable();
        self.lru.clear();
        self.seq = 0;
        for (_, leaf) in order {
            self.seq += 1;
            self.leaves.insert(leaf, (self.seq, false));
            self.lru.insert(self.seq, leaf);
        }
    }

    pub fn stats_json(&self) -> serde_json::Value {
        let total = self.hits + self.misses;
        json!({
            "hits": self.hits, "misses": self.misses, "dirty_evictions": self.dirty_evictions,
            "hit_ratio": if total == 0 { 0.0 } else { self.hits as f64 / total as f64 },
            "cache_leaves": self.capacity,
        })
    }
}

/// A 64-bit mix (splitmix64's finalizer), as YCSB's scrambled zipfian hashes ranks.
fn scramble(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tiersim_core::Params;

    fn store(cache: &str, mix: &str) -> KvStore {
        let mut t = toml::Table::new();
        t.insert("kv_records".into(), 1000.into());
        t.insert("kv_cache".into(), cache.into());
        t.insert("kv_mix".into(), mix.into());
        let p = Params::resolve(super::super::bench::SPECS, Some(&t)).unwrap();
        KvStore::new(&p, 8192, 1 << 30).unwrap()
    }

    #[test]
    fn cache_misses_read_leaves_and_dirty_evictions_write_them() {
        // 1000 records of 100 B: 81 per 8 KiB leaf, 13 leaves; a cache of 2 leaves.
        let mut kv = store("16KiB", "w");
        assert_eq!(kv.access(KvOp::Put(0)), KvAccess { read: Some(0), write_back: None, log: Some(132) });
        assert_eq!(kv.access(KvOp::Get(81)), KvAccess { read: Some(8192), write_back: None, log: None });
        assert_eq!(kv.access(KvOp::Get(5)).read, None);
        // Leaf 1 is now the oldest and clean: evicted without a write.
        assert_eq!(kv.access(KvOp::Get(200)), KvAccess { read: Some(2 * 8192), write_back: None, log: None });
        // Leaf 0 (dirty) is the oldest now.
        assert_eq!(kv.access(KvOp::Get(300)).write_back, Some(0));
        assert_eq!((kv.hits, kv.misses, kv.dirty_evictions), (1, 4, 1));
    }

    #[test]
    fn too_many_records_for_the_file_is_an_error() {
        let mut t = toml::Table::new();
        t.insert("kv_records".into(), 10_000_000.into());
        let p = Params::resolve(super::super::bench::SPECS, Some(&t)).unwrap();
        let e = KvStore::new(&p, 8192, 1 << 20).err().unwrap().to_string();
        assert!(e.contains("kv_records"), "{e}");
    }
}
