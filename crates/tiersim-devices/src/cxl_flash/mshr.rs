//! Miss status holding registers: one row per line being read from flash, holding the requests
//! that merged into it (hit under miss). `rows` and `entries` per row bound them; the device
//! makes a request wait when it needs a row or an entry and none is free (MQSim_CXL: 1024 rows of
//! 65 entries, and a full MSHR stops the host feed). Without MSHRs (`mshr_rows = 0`) every miss
//! reads flash, also for a line already in flight (the duplicate reads of seed 004 fig. 6); rows
//! still carry those reads to their fills, at most `no_mshr_max_inflight` of them, so that a trace
//! whose arrivals outrun the device cannot grow the table with its length (docs/reliability.md).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rustc_hash::FxHashMap;

use crate::pipe::Ps;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Fill the cache with the line when the read completes.
    Fill,
    /// Write without allocating: merge the written data into the read line and program it back.
    Rmw,
}

#[derive(Debug, Clone, Copy)]
pub struct Row {
    pub line: u64,
    /// When the line's data reaches the controller.
    pub ready: Ps,
    pub kind: Kind,
    /// Requests merged into the row (the first demand miss counts).
    pub merged: u32,
    pub prefetch: bool,
    /// A demand request used the row (a prefetch turned late).
    pub demanded: bool,
    /// Sub-blocks written by merged writes.
    pub dirty: u64,
    /// Response bytes of merged requests, charged to the link when the row retires.
    pub resp_bytes: u64,
    /// Pin the line when it is filled (a host hint).
    pub pin: bool,
}

pub struct Mshr {
    rows: Vec<Row>,
    free: Vec<u32>,
    /// Line -> its newest row.
    map: FxHashMap<u64, u32>,
    heap: BinaryHeap<Reverse<(Ps, u32)>>,
    /// Row limit; `None` without MSHRs (no merging).
    limit: Option<u32>,
    /// Rows in flight at most without MSHRs: a bound on memory, not a model figure.
    cap: u32,
    pub entries: u32,
    in_use: u32,
    prefetch_in_use: u32,
    pub peak: u32,
}

impl Mshr {
    pub fn new(rows: u32, entries: u32, cap_without_mshr: u32) -> Mshr {
        Mshr {
            rows: Vec::new(),
            free: Vec::new(),
            map: FxHashMap::default(),
            heap: BinaryHeap::new(),
            limit: (rows > 0).then_some(rows),
            cap: cap_without_mshr.max(1),
            entries: entries.max(1),
            in_use: 0,
            prefetch_in_use: 0,
            peak: 0,
        }
    }

    pub fn merging(&self) -> bool {
        self.limit.is_some()
    }

    /// The in-flight row of `line`, if any.
    #[inline]
    pub fn find(&self, line: u64) -> Option<u32> {
        if self.map.is_empty() {
            return None;
        }
        self.map.get(&line).copied()
    }

    pub fn row(&self, i: u32) -> &Row {
        &self.rows[i as usize]
    }

    pub fn row_mut(&mut self, i: u32) -> &mut Row {
        &mut self.rows[i as usize]
    }

    pub fn full(&self) -> bool {
        self.in_use >= self.limit.unwrap_or(self.cap)
    }

    pub fn in_use(&self) -> u32 {
        self.in_use
    }

    pub fn prefetch_in_use(&self) -> u32 {
        self.prefetch_in_use
    }

    pub fn limit(&self) -> Option<u32> {
        self.limit
    }

    /// Rows in flight at most without MSHRs; None with them (their limit is `limit`).
    pub fn cap_without_mshr(&self) -> Option<u32> {
        self.limit.is_none().then_some(self.cap)
    }

    pub fn alloc(&mut self, row: Row) -> u32 {
        let i = match self.free.pop() {
            Some(i) => {
                self.rows[i as usize] = row;
                i
            }
            None => {
                self.rows.push(row);
                self.rows.len() as u32 - 1
            }
        };
        self.map.insert(row.line, i);
        self.heap.push(Reverse((row.ready, i)));
        self.in_use += 1;
        self.prefetch_in_use += u32::from(row.prefetch);
        self.peak = self.peak.max(self.in_use);
        i
    }

    /// Earliest completion of an in-flight row.
    #[inline]
    pub fn next_ready(&self) -> Option<Ps> {
        self.heap.peek().map(|Reverse((t, _))| *t)
    }

    /// Remove and return the earliest row if it is ready by `t`.
    #[inline]
    pub fn pop_ready(&mut self, t: Ps) -> Option<Row> {
        let &Reverse((ready, i)) = self.heap.peek()?;
        if ready > t {
            return None;
        }
        self.heap.pop();
        let row = self.rows[i as usize];
        if self.map.get(&row.line) == Some(&i) {
            self.map.remove(&row.line);
        }
        self.free.push(i);
        self.in_use -= 1;
        self.prefetch_in_use -= u32::from(row.prefetch);
        Some(row)
    }
}
