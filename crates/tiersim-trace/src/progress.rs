//! Progress of a long replay, for a progress bar: an `AccessSource` wrapper that reports how many
//! accesses have been read (and the total, when the trace header knows it) every `every` accesses.
//! It counts per batch, so the per-access path of the simulation pays nothing.

use tiersim_core::{Access, Result};

use crate::{AccessSource, SplitBatch, TraceHeader};

/// Called with (accesses read so far, total accesses when known). An error stops the replay
/// with that error: the caller's way to cancel (Ctrl-C in Python).
pub type ProgressFn<'a> = dyn FnMut(u64, Option<u64>) -> Result<()> + 'a;

/// Default reporting interval: about 20 reports per second at 5M accesses per second.
pub const PROGRESS_EVERY: u64 = 1 << 18;

pub struct Observed<'a, 'f> {
    inner: &'a mut dyn AccessSource,
    report: &'a mut ProgressFn<'f>,
    every: u64,
    total: Option<u64>,
    done: u64,
    next: u64,
    finished: bool,
}

impl<'a, 'f> Observed<'a, 'f> {
    /// Reports at start (0 done), after every `every` accesses (at batch granularity) and once at
    /// the end of the trace. The total comes from the header's statistics, when it has them.
    pub fn new(inner: &'a mut dyn AccessSource, every: u64, report: &'a mut ProgressFn<'f>) -> Result<Self> {
        let total = inner.header().stats.as_ref().map(|s| s.accesses);
        report(0, total)?;
        Ok(Observed { inner, report, every: every.max(1), total, done: 0, next: every.max(1), finished: false })
    }
}

/// Run `f` on `src`, observed by `progress` (every `PROGRESS_EVERY` accesses) when there is one.
pub fn with_progress<T>(
    src: &mut dyn AccessSource,
    progress: Option<&mut ProgressFn<'_>>,
    f: impl FnOnce(&mut dyn AccessSource) -> Result<T>,
) -> Result<T> {
    match progress {
        Some(report) => f(&mut Observed::new(src, PROGRESS_EVERY, report)?),
        None => f(src),
    }
}

impl AccessSource for Observed<'_, '_> {
    fn header(&self) -> &TraceHeader {
        self.inner.header()
    }

    fn read_batch(&mut self, out: &mut Vec<Access>, max: usize) -> Result<usize> {
        let n = self.inner.read_batch(out, max)?;
        self.count(n)
    }

    fn read_split(&mut self, out: &mut SplitBatch, max: usize, limit: usize) -> Result<usize> {
        let n = self.inner.read_split(out, max, limit)?;
        self.count(n)
    }
}

impl Observed<'_, '_> {
    /// `n` more accesses read: report when an interval is complete or the trace has ended.
    fn count(&mut self, n: usize) -> Result<usize> {
        self.done += n as u64;
        if n == 0 && !self.finished {
            self.finished = true;
            (self.report)(self.done, self.total)?;
        } else if self.done >= self.next {
            self.next = self.done + self.every;
            (self.report)(self.done, self.total)?;
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gen::{open_generator, GeneratorSource};

    fn random(accesses: u64) -> GeneratorSource {
        let params: toml::Table = toml::from_str(&format!("accesses = {accesses}\nfootprint = \"1MiB\"")).unwrap();
        GeneratorSource::new(open_generator("random", Some(&params), 7).unwrap())
    }

    #[test]
    fn reports_every_interval_and_the_end_exactly_once() {
        let mut src = random(10_000);
        let mut seen = Vec::new();
        let mut report = |done: u64, total: Option<u64>| {
            seen.push((done, total));
            Ok(())
        };
        let mut obs = Observed::new(&mut src, 3_000, &mut report).unwrap();
        let mut buf = Vec::new();
        let mut read = 0;
        loop {
            buf.clear();
            let n = obs.read_batch(&mut buf, 1_000).unwrap();
            if n == 0 {
                break;
            }
            read += n as u64;
        }
        assert_eq!(obs.read_batch(&mut buf, 1_000).unwrap(), 0);
        assert_eq!(read, 10_000);
        // A generator's header has no statistics: the total is unknown.
        let expect: Vec<(u64, Option<u64>)> = [0, 3_000, 6_000, 9_000, 10_000].iter().map(|&d| (d, None)).collect();
        assert_eq!(seen, expect);
    }

    #[test]
    fn an_error_from_the_report_stops_the_read() {
        let mut src = random(5_000);
        let mut report = |done: u64, _: Option<u64>| {
            if done >= 2_000 {
                Err(tiersim_core::Error::Sim("cancelled".into()))
            } else {
                Ok(())
            }
        };
        let mut obs = Observed::new(&mut src, 1_000, &mut report).unwrap();
        let mut buf = Vec::new();
        assert!(obs.read_batch(&mut buf, 1_000).is_ok());
        let err = obs.read_batch(&mut buf, 1_000).unwrap_err();
        assert_eq!(err.to_string(), "cancelled");
    }
}
