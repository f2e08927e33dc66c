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

pub use format::{AddrKind, FrameFilter, TimeUnit, TraceHeader, TraceMeta, TraceReader, TraceStats, TraceWriter, V2p, WriterOptions};
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
}
