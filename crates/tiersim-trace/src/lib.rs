//! Traces: the native tiersim format (versioned header, fixed-size little-endian records in zstd
//! frames, streamed both ways) and the synthetic generators.

use std::path::Path;

use tiersim_core::{Access, Result};

pub mod capture;
pub mod convert;
pub mod format;
pub mod gen;
pub mod progress;
pub mod stats;
pub mod tools;

pub use format::{
    AddrKind, FrameFilter, TimeUnit, TraceHeader, TraceMeta, TraceReader, TraceStats, TraceWriter, V2p, WriterOptions,
};
pub use gen::{generate, open_generator, Generator, GeneratorSource};

/// Header and statistics of a trace file (the header's own, unverified, or computed by a full
/// scan if the header lacks them), as JSON for `tiersim trace inspect`.
pub fn inspect(path: &Path) -> Result<serde_json::Value> {
    format::inspect(path)
}

/// `inspect` after decoding and checking every frame and recomputing the statistics, for
/// `tiersim trace verify`; an error names what disagrees.
pub fn verify(path: &Path) -> Result<serde_json::Value> {
    format::verify(path)
}

/// Visit every remaining access of `src` in order, a batch at a time; stops at the first error
/// that `src` or `f` returns. Memory stays one batch, whatever the trace's length.
pub fn for_each_access(src: &mut dyn AccessSource, mut f: impl FnMut(&Access) -> Result<()>) -> Result<()> {
    let mut batch = Vec::with_capacity(1 << 14);
    loop {
        batch.clear();
        if src.read_batch(&mut batch, 1 << 14)? == 0 {
            return Ok(());
        }
        for a in &batch {
            f(a)?;
        }
    }
}

/// Any source of accesses the engine can replay.
pub trait AccessSource {
    fn header(&self) -> &TraceHeader;
    /// Append up to `max` accesses to `out`; returns how many were appended (0 at end of trace).
    fn read_batch(&mut self, out: &mut Vec<Access>, max: usize) -> Result<usize>;

    /// The next batch (as `read_batch` would read it) split by CPU into `out`, for CPUs below
    /// `limit`; returns how many accesses it read (0 at end of trace). A source that decodes on
    /// another thread overrides it to split there, off the engine's core.
    fn read_split(&mut self, out: &mut SplitBatch, max: usize, limit: usize) -> Result<usize> {
        out.raw.clear();
        let n = self.read_batch(&mut out.raw, max);
        out.split_raw(limit);
        n
    }
}

/// A boxed reader (`convert::open`'s) is a reader, its own `read_split` included.
impl<T: AccessSource + ?Sized> AccessSource for Box<T> {
    fn header(&self) -> &TraceHeader {
        (**self).header()
    }

    fn read_batch(&mut self, out: &mut Vec<Access>, max: usize) -> Result<usize> {
        (**self).read_batch(out, max)
    }

    fn read_split(&mut self, out: &mut SplitBatch, max: usize, limit: usize) -> Result<usize> {
        (**self).read_split(out, max, limit)
    }
}

/// A batch of accesses split by CPU, each CPU's in trace order: the engine appends each CPU's
/// part to its queue whole instead of dispatching access by access. The allocations are kept
/// from batch to batch.
#[derive(Default)]
pub struct SplitBatch {
    /// Per CPU id, its accesses of the batch (only the CPUs in `cpus` hold any).
    pub per_cpu: Vec<Vec<Access>>,
    /// The CPUs with accesses in the batch, in the order of their first access.
    pub cpus: Vec<u32>,
    /// The batch's first access's time: the trace's time origin, for its first batch.
    pub first_time: Option<u64>,
    /// The first access from a CPU at or above the limit, as (position in the batch, CPU): the
    /// split stops there.
    pub beyond: Option<(usize, u32)>,
    /// The limit the batch was split for (0: not split).
    pub limit: usize,
    /// The batch unsplit, for a source that fills it on another thread and splits it there.
    pub raw: Vec<Access>,
    /// The batch's futex records (`Access::FUTEX`) in trace order, each as (CPU, its position in
    /// that CPU's part, its position in the batch): the one order across CPUs the engine needs,
    /// to pair a wait with the latest wake before it.
    pub futex: Vec<(u32, u32, u32)>,
}

impl SplitBatch {
    /// Split this batch's own `raw` accesses (which it keeps) for CPUs below `limit`.
    pub fn split_raw(&mut self, limit: usize) {
        let raw = std::mem::take(&mut self.raw);
        self.split(&raw, limit);
        self.raw = raw;
    }

    /// Split `batch` by CPU for CPUs below `limit` (dropping what this held before).
    pub fn split(&mut self, batch: &[Access], limit: usize) {
        for &c in &self.cpus {
            self.per_cpu[c as usize].clear();
        }
        self.cpus.clear();
        self.futex.clear();
        self.first_time = batch.first().map(|a| a.time);
        self.beyond = None;
        self.limit = limit;
        for (i, a) in batch.iter().enumerate() {
            let c = a.cpu as usize;
            if c >= limit {
                self.beyond = Some((i, a.cpu));
                return;
            }
            if c >= self.per_cpu.len() {
                self.per_cpu.resize_with(c + 1, Vec::new);
            }
            let part = &mut self.per_cpu[c];
            if part.is_empty() {
                self.cpus.push(a.cpu);
            }
            if a.flags == Access::FUTEX {
                self.futex.push((a.cpu, part.len() as u32, i as u32));
            }
            part.push(*a);
        }
    }
}
