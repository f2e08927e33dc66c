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

    /// The next batch (as `read_batch` would read it) split by CPU into `out` as `spec` asks;
    /// returns how many accesses it read (0 at end of trace). A source that decodes on another
    /// thread overrides it to split there, off the engine's core.
    fn read_split(&mut self, out: &mut SplitBatch, max: usize, spec: SplitSpec) -> Result<usize> {
        out.raw.clear();
        let n = self.read_batch(&mut out.raw, max);
        out.split_raw(spec);
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

    fn read_split(&mut self, out: &mut SplitBatch, max: usize, spec: SplitSpec) -> Result<usize> {
        (**self).read_split(out, max, spec)
    }
}

/// How to split a batch: by CPU for CPUs below `limit` (0: not split), and, given
/// `ps_per_instr`, with each access's `time` (an instruction gap) replaced by that gap in ps as
/// `instr_ps` converts it. The engine asks for the conversion so that it runs where the batch
/// is split, on the decoding thread when the source has one, not once per access on its own.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SplitSpec {
    pub limit: usize,
    pub ps_per_instr: Option<f64>,
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
    /// How the batch was split (limit 0: not split).
    pub spec: SplitSpec,
    /// The batch unsplit, for a source that fills it on another thread and splits it there.
    pub raw: Vec<Access>,
}

impl SplitBatch {
    /// Split this batch's own `raw` accesses (which it keeps, unconverted) as `spec` asks.
    pub fn split_raw(&mut self, spec: SplitSpec) {
        let raw = std::mem::take(&mut self.raw);
        self.split(&raw, spec);
        self.raw = raw;
    }

    /// Split `batch` as `spec` asks (dropping what this held before).
    pub fn split(&mut self, batch: &[Access], spec: SplitSpec) {
        match spec.ps_per_instr {
            Some(k) => self.split_with(batch, spec, |a| Access { time: instr_ps(a.time, k), ..*a }),
            None => self.split_with(batch, spec, |a| *a),
        }
    }

    #[inline(always)]
    fn split_with(&mut self, batch: &[Access], spec: SplitSpec, convert: impl Fn(&Access) -> Access) {
        let limit = spec.limit;
        for &c in &self.cpus {
            self.per_cpu[c as usize].clear();
        }
        self.cpus.clear();
        self.first_time = batch.first().map(|a| a.time);
        self.beyond = None;
        self.spec = spec;
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
            part.push(convert(a));
        }
    }
}

/// `instructions * ps_per_instr` in whole ps, as `(instructions as f64 * ps_per_instr) as u64`:
/// a compute gap in instructions as time, at a CPI and clock rate the caller folds into
/// `ps_per_instr`. For gaps below 2^52 (all but absurd ones) the integer goes to f64 by placing
/// it in the mantissa of 2^52 and subtracting 2^52, exact, in two instructions; LLVM lowers the
/// plain conversion of a non-negative u64 as the unsigned one, a dozen on x86-64 before AVX-512.
#[inline]
pub fn instr_ps(instructions: u64, ps_per_instr: f64) -> u64 {
    const TWO_52: f64 = 4_503_599_627_370_496.0;
    const LIMIT: f64 = 9_223_372_036_854_775_808.0; // 2^63
    if instructions < 1 << 52 {
        let n = f64::from_bits(TWO_52.to_bits() | instructions) - TWO_52;
        let ps = n * ps_per_instr;
        if (0.0..LIMIT).contains(&ps) {
            // SAFETY: ps is in [0, 2^63), so truncated it fits an i64: the same value `as`
            // gives, without its saturation and NaN tests.
            return unsafe { ps.to_int_unchecked::<i64>() } as u64;
        }
    }
    (instructions as f64 * ps_per_instr) as u64
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::instr_ps;

    /// The same product as the plain unsigned conversions, at the edges and over random inputs.
    #[test]
    fn instr_ps_matches_unsigned_conversions() {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let plain = |n: u64, k: f64| (n as f64 * k) as u64;
        let edges = [0, 1, 3, u32::MAX as u64, 1 << 32, (1 << 52) - 1, 1 << 52, (1 << 53) + 1, i64::MAX as u64, 1 << 63, u64::MAX];
        for k in [0.0, 0.001, 0.4444444444444444, 1.0, 2.5, 1e6, 1e9, 3e9, f64::INFINITY, f64::NAN] {
            for n in edges {
                assert_eq!(instr_ps(n, k), plain(n, k), "{n} x {k}");
            }
            for _ in 0..10_000 {
                let n = rng.gen::<u64>() >> rng.gen_range(0..64);
                assert_eq!(instr_ps(n, k), plain(n, k), "{n} x {k}");
            }
        }
    }
}
