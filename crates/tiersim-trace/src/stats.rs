//! `tiersim trace stats`: page-level reuse distances, page hotness, and page-vs-time scatter
//! points (the CXL-flash study's fig. 3 plots virtual page number against access order).
//!
//! Reuse distance (Mattson et al., 1970: the LRU stack distance) of an access is the number of
//! distinct other pages touched since the previous access to its page. It is computed exactly
//! with a Fenwick tree over "last use" positions (Bennett & Kruskal, 1975): each page marks the
//! position of its latest access, and the distance is the number of marks after its previous
//! one. Positions are renumbered compactly whenever they run out, so memory is bounded by the
//! footprint (a few words per distinct page), not by the trace length.

use std::path::Path;

use rustc_hash::FxHashMap;
use serde_json::{json, Value};
use tiersim_core::Result;

use crate::convert::{self, Format, TextOptions};

/// Options of `trace_stats`.
#[derive(Debug, Clone, Copy)]
pub struct StatsOptions {
    /// Scatter points kept at most (evenly spaced over the trace).
    pub max_points: usize,
}

impl Default for StatsOptions {
    fn default() -> Self {
        StatsOptions { max_points: 100_000 }
    }
}

/// Exact LRU stack distances of a page stream.
pub struct ReuseDistance {
    last: FxHashMap<u64, u32>,
    tree: Vec<i32>,
    next: u32,
}

impl Default for ReuseDistance {
    fn default() -> Self {
        ReuseDistance { last: FxHashMap::default(), tree: vec![0; 1024 + 1], next: 0 }
    }
}

impl ReuseDistance {
    fn add(&mut self, pos: u32, d: i32) {
        let mut i = pos as usize + 1;
        while i < self.tree.len() {
            self.tree[i] += d;
            i += i & i.wrapping_neg();
        }
    }

    /// Marks at positions `0..=pos`.
    fn prefix(&self, pos: u32) -> i64 {
        let mut i = pos as usize + 1;
        let mut s = 0i64;
        while i > 0 {
            s += self.tree[i] as i64;
            i &= i - 1;
        }
        s
    }

    /// Renumber the live positions 0..pages in order, in a tree with room for as many again.
    fn compact(&mut self) {
        let mut live: Vec<(u32, u64)> = self.last.iter().map(|(&p, &pos)| (pos, p)).collect();
        live.sort_unstable();
        let cap = (2 * live.len()).max(1024);
        self.tree = vec![0; cap + 1];
        for (i, (_, page)) in live.iter().enumerate() {
            self.last.insert(*page, i as u32);
            self.add(i as u32, 1);
        }
        self.next = live.len() as u32;
    }

    /// The distance of an access to `page`; `None` for its first access.
    pub fn access(&mut self, page: u64) -> Option<u64> {
        if self.next as usize + 1 >= self.tree.len() {
            self.compact();
        }
        let now = self.next;
        self.next += 1;
        let d = match self.last.insert(page, now) {
            Some(prev) => {
                let between = self.prefix(now.saturating_sub(1)) - self.prefix(prev);
                self.add(prev, -1);
                Some(between as u64)
            }
            None => None,
        };
        self.add(now, 1);
        d
    }
}

/// Index of the log2 bucket of `x`: 0 holds 0, k holds `[2^(k-1), 2^k)`.
fn bucket(x: u64) -> usize {
    (64 - x.leading_zeros()) as usize
}

fn buckets_json(counts: &[u64]) -> Value {
    Value::Array(
        counts
            .iter()
            .enumerate()
            .filter(|(_, &c)| c > 0)
            .map(|(k, &c)| {
                let (lo, hi) = if k == 0 { (0, 1) } else { (1u64 << (k - 1), 1u64 << k) };
                json!({"lo": lo, "hi": hi, "count": c})
            })
            .collect(),
    )
}

/// Reuse-distance and hotness histograms and scatter points of the trace at `path` (native, or
/// `format`), at the page size of its header.
pub fn trace_stats(path: &Path, format: Option<Format>, text: &TextOptions, opts: &StatsOptions) -> Result<Value> {
    let mut r = convert::open(path, format, text)?;
    let page_size = r.header().page_size as u64;
    let shift = page_size.trailing_zeros();
    let mut rd = ReuseDistance::default();
    let mut reuse = vec![0u64; 65];
    let mut cold = 0u64;
    let mut per_page: FxHashMap<u64, u64> = FxHashMap::default();
    let max_points = opts.max_points.max(2);
    let mut stride = 1u64;
    let mut points: Vec<(u64, u64)> = Vec::new();
    let mut n = 0u64;
    let (mut mappings, mut mapped_bytes) = (0u64, 0u64);
    let mut syncs = [0u64; 2];
    let mut futexes = [0u64; 2];
    // File size records, and those of files empty at open; the first bytes of the mapped files.
    let mut sizes = [0u64; 2];
    let mut file_starts: rustc_hash::FxHashSet<u64> = Default::default();
    // Records and bytes per kind (anonymous, file mapping, buffered call, O_DIRECT call) and
    // direction: how much of a captured program's traffic is file I/O, and through which path.
    let mut kinds = [[(0u64, 0u64); 2]; 4];
    crate::for_each_access(r.as_mut(), |a| {
        if !a.is_map() {
            let kind = match (a.is_file(), a.is_syscall(), a.is_direct()) {
                (false, _, _) => 0,
                (true, false, _) => 1,
                (true, true, false) => 2,
                (true, true, true) => 3,
            };
            let k = &mut kinds[kind][a.op.is_write() as usize];
            k.0 += 1;
            k.1 += a.size as u64;
        }
        if a.is_futex() {
            // Nor a futex record: waits (op read) and wakes (op write) counted apart.
            futexes[a.op.is_write() as usize] += 1;
            return Ok(());
        }
        if a.is_size() {
            // Nor a file size record: counted apart, with the files it says were empty at open
            // (created or truncated there: the record sits at the file's first byte, op read).
            sizes[0] += 1;
            sizes[1] += u64::from(a.op == tiersim_core::Op::Read && file_starts.contains(&a.addr));
            return Ok(());
        }
        if a.is_sync() {
            // Not an access either: fsync (op read) and fdatasync (op write) counted apart.
            syncs[a.op.is_write() as usize] += 1;
            return Ok(());
        }
        if a.is_map() {
            // Not an access: counted apart, outside reuse and hotness.
            mappings += 1;
            mapped_bytes += a.map_bytes();
            if a.op == tiersim_core::Op::Read {
                file_starts.insert(a.addr);
            }
            return Ok(());
        }
        let page = a.addr >> shift;
        match rd.access(page) {
            Some(d) => reuse[bucket(d)] += 1,
            None => cold += 1,
        }
        *per_page.entry(page).or_default() += 1;
        if n.is_multiple_of(stride) {
            points.push((n, page));
            if points.len() > max_points {
                // Keep every other point and sample half as often: still evenly spaced.
                stride *= 2;
                points.retain(|&(i, _)| i % stride == 0);
            }
        }
        n += 1;
        Ok(())
    })?;
    let mut hot = vec![0u64; 65];
    let mut counts: Vec<u64> = per_page.values().copied().collect();
    counts.iter().for_each(|&c| hot[bucket(c)] += 1);
    counts.sort_unstable_by(|a, b| b.cmp(a));
    let share = |frac: f64| {
        if n == 0 {
            return 0.0;
        }
        let k = ((counts.len() as f64 * frac).ceil() as usize).clamp(1, counts.len());
        counts[..k].iter().sum::<u64>() as f64 / n as f64
    };
    let by_kind: serde_json::Map<String, Value> = ["anonymous", "file_mapping", "syscall", "direct"]
        .iter()
        .zip(kinds.iter())
        .map(|(name, k)| {
            let v = json!({"reads": k[0].0, "read_bytes": k[0].1, "writes": k[1].0, "write_bytes": k[1].1});
            (name.to_string(), v)
        })
        .collect();
    Ok(json!({
        "path": path.display().to_string(),
        "accesses": n,
        "page_size": page_size,
        "pages": counts.len(),
        "mapping_records": mappings,
        "mapped_bytes": mapped_bytes,
        "sync_records": {"fsync": syncs[0], "fdatasync": syncs[1]},
        "futex_records": {"wait": futexes[0], "wake": futexes[1]},
        "size_records": {"files": sizes[0], "empty_at_open": sizes[1]},
        "by_kind": by_kind,
        "reuse_distance": {
            "unit": "distinct pages",
            "cold": cold,
            "buckets": buckets_json(&reuse),
        },
        "hotness": {
            "unit": "accesses per page",
            "buckets": buckets_json(&hot),
            "top_1pct_share": share(0.01),
            "top_10pct_share": share(0.10),
        },
        "scatter": {
            "stride": stride,
            "index": points.iter().map(|p| p.0).collect::<Vec<_>>(),
            "page": points.iter().map(|p| p.1).collect::<Vec<_>>(),
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition, by brute force.
    fn naive(pages: &[u64]) -> Vec<Option<u64>> {
        (0..pages.len())
            .map(|i| {
                let prev = (0..i).rev().find(|&j| pages[j] == pages[i])?;
                let mut seen: Vec<u64> = pages[prev + 1..i].to_vec();
                seen.sort_unstable();
                seen.dedup();
                Some(seen.len() as u64)
            })
            .collect()
    }

    #[test]
    fn matches_the_definition_across_compactions() {
        let mut x = 1u64;
        let pages: Vec<u64> = (0..5000)
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407) >> 1;
                // Skewed: most accesses go to a few pages, so compactions keep few live marks.
                let r = x % 1000;
                if r < 800 {
                    r % 40
                } else {
                    r
                }
            })
            .collect();
        let mut rd = ReuseDistance::default();
        let got: Vec<_> = pages.iter().map(|&p| rd.access(p)).collect();
        assert_eq!(got, naive(&pages));
        let mut rd = ReuseDistance::default();
        assert_eq!([1, 2, 3, 1, 1, 3, 2].map(|p| rd.access(p)), [None, None, None, Some(2), Some(0), Some(1), Some(2)]);
    }
}
