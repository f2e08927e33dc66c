//! Trace decoding on a thread of its own: a worker reads batches from the source (zstd frames,
//! byte planes) a few batches ahead of the engine and hands them over a bounded channel, so the
//! event loop's core spends no time decoding. Once the engine has asked for batches split by CPU
//! (`read_split`), the worker splits them too. The engine sees the same accesses in the same
//! batches and order, and a decoding error where it would have met it. A stage given at
//! construction (`with_stage`) also runs on the worker, over each decoded batch in order.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use tiersim_core::{Access, Error, Result};
use tiersim_trace::{AccessSource, SplitBatch, TraceHeader};

const BATCH: usize = 1 << 14;
/// Batches decoded ahead of the engine at most (about 1.5 MiB of accesses).
const AHEAD: usize = 4;

pub struct ReadAhead {
    header: TraceHeader,
    /// Decoded batches in trace order (in `raw`, and split if the worker knew the CPU limit); an
    /// empty batch marks the end. None once it has ended.
    full: Option<Receiver<Result<SplitBatch>>>,
    /// Spent buffers back to the worker, so batches allocate nothing in the steady state.
    empty: SyncSender<SplitBatch>,
    batch: SplitBatch,
    pos: usize,
    /// The CPU limit of `read_split`'s last call, for the worker (0: split nothing).
    split_limit: Arc<AtomicUsize>,
    worker: Option<JoinHandle<()>>,
}

impl ReadAhead {
    pub fn new<S: AccessSource + Send + 'static>(source: S) -> Result<ReadAhead> {
        ReadAhead::with_stage(source, |_| {})
    }

    /// `new`, with `stage` applied on the worker to each decoded batch, in trace order.
    pub fn with_stage<S, F>(mut source: S, mut stage: F) -> Result<ReadAhead>
    where
        S: AccessSource + Send + 'static,
        F: FnMut(&mut [Access]) + Send + 'static,
    {
        let header = source.header().clone();
        let (full_tx, full_rx) = sync_channel::<Result<SplitBatch>>(AHEAD);
        let (empty_tx, empty_rx) = sync_channel::<SplitBatch>(AHEAD + 2);
        let split_limit = Arc::new(AtomicUsize::new(0));
        let limit = split_limit.clone();
        let worker = std::thread::Builder::new()
            .name("tiersim-decode".into())
            .spawn(move || loop {
                let mut buf = empty_rx.try_recv().unwrap_or_default();
                buf.raw.clear();
                buf.raw.reserve(BATCH);
                let (batch, last) = match source.read_batch(&mut buf.raw, BATCH) {
                    Ok(n) => {
                        stage(&mut buf.raw);
                        let limit = limit.load(Ordering::Relaxed);
                        if limit > 0 && n > 0 {
                            buf.split_raw(limit);
                        } else {
                            buf.limit = 0;
                        }
                        (Ok(buf), n == 0)
                    }
                    Err(e) => (Err(e), true),
                };
                // A send fails only when the engine has stopped reading (an error, or done).
                if full_tx.send(batch).is_err() || last {
                    return;
                }
            })
            .map_err(|e| Error::Sim(format!("starting the trace decoding thread: {e}")))?;
        Ok(ReadAhead {
            header,
            full: Some(full_rx),
            empty: empty_tx,
            batch: SplitBatch::default(),
            pos: 0,
            split_limit,
            worker: Some(worker),
        })
    }

    /// The next decoded batch into `self.batch`; false at the end of the trace.
    fn next_batch(&mut self) -> Result<bool> {
        let Some(full) = &self.full else { return Ok(false) };
        let batch = match full.recv() {
            Ok(Ok(b)) => b,
            Ok(Err(e)) => {
                self.full = None;
                return Err(e);
            }
            Err(_) => {
                // The worker quit without an end marker: it panicked. Surface its panic here.
                self.full = None;
                if let Some(Err(panic)) = self.worker.take().map(JoinHandle::join) {
                    std::panic::resume_unwind(panic);
                }
                return Err(Error::Sim("the trace decoding thread stopped early".into()));
            }
        };
        if batch.raw.is_empty() {
            self.full = None;
            return Ok(false);
        }
        let spent = std::mem::replace(&mut self.batch, batch);
        let _ = self.empty.try_send(spent);
        self.pos = 0;
        Ok(true)
    }
}

impl AccessSource for ReadAhead {
    fn header(&self) -> &TraceHeader {
        &self.header
    }

    fn read_batch(&mut self, out: &mut Vec<Access>, max: usize) -> Result<usize> {
        if self.pos == self.batch.raw.len() && !self.next_batch()? {
            return Ok(0);
        }
        let left = self.batch.raw.len() - self.pos;
        if self.pos == 0 && out.is_empty() && left <= max {
            // Hand the whole batch over and keep the caller's buffer: no copy.
            std::mem::swap(out, &mut self.batch.raw);
            self.batch.raw.clear();
            self.pos = 0;
            return Ok(left);
        }
        let n = left.min(max);
        out.extend_from_slice(&self.batch.raw[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }

    fn read_split(&mut self, out: &mut SplitBatch, max: usize, limit: usize) -> Result<usize> {
        self.split_limit.store(limit, Ordering::Relaxed);
        if self.pos == self.batch.raw.len() && !self.next_batch()? {
            out.split(&[], limit);
            return Ok(0);
        }
        let left = self.batch.raw.len() - self.pos;
        if self.pos == 0 && left <= max {
            // The whole batch, split on the worker unless it was decoded before the limit was known.
            if self.batch.limit != limit {
                self.batch.split_raw(limit);
            }
            std::mem::swap(out, &mut self.batch);
            self.batch.raw.clear();
            return Ok(left);
        }
        let n = left.min(max);
        out.split(&self.batch.raw[self.pos..self.pos + n], limit);
        self.pos += n;
        Ok(n)
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        // Closing the channel stops the worker at its next send; it never blocks elsewhere.
        self.full = None;
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use tiersim_core::Op;
    use tiersim_trace::format::TraceMeta;
    use tiersim_trace::{AddrKind, TimeUnit};

    use super::*;

    /// `len` accesses with addresses 0, 1, 2, ... from CPUs addr % 5, in batches of `step`; an
    /// error instead of the batch that would reach `fail_at`, if given.
    struct Counting {
        header: TraceHeader,
        next: u64,
        len: u64,
        step: u64,
        fail_at: Option<u64>,
    }

    impl AccessSource for Counting {
        fn header(&self) -> &TraceHeader {
            &self.header
        }
        fn read_batch(&mut self, out: &mut Vec<Access>, max: usize) -> Result<usize> {
            let n = self.step.min(max as u64).min(self.len - self.next);
            if self.fail_at.is_some_and(|f| self.next + n > f) {
                return Err(Error::Sim(format!("bad frame after access {}", self.next)));
            }
            out.extend((self.next..self.next + n).map(|addr| Access {
                time: 1,
                addr,
                cpu: (addr % 5) as u32,
                size: 64,
                op: Op::Read,
                flags: 0,
            }));
            self.next += n;
            Ok(n as usize)
        }
    }

    fn counting(len: u64, step: u64, fail_at: Option<u64>) -> Counting {
        let meta = TraceMeta { time_unit: TimeUnit::Instructions, addr_kind: AddrKind::Virtual, page_size: 4096 };
        Counting { header: TraceHeader::new(&meta), next: 0, len, step, fail_at }
    }

    /// Reads everything with batches of at most `max`, into a buffer the caller clears (as the
    /// engine does) or not; returns the addresses and the error, if any.
    fn drain(src: &mut ReadAhead, max: usize, clear: bool) -> (Vec<u64>, Option<String>) {
        let (mut buf, mut seen) = (Vec::new(), Vec::new());
        loop {
            if clear {
                buf.clear();
            }
            let before = buf.len();
            match src.read_batch(&mut buf, max) {
                Ok(0) => return (seen, None),
                Ok(n) => {
                    assert_eq!(buf.len(), before + n);
                    assert!(n <= max);
                    seen.extend(buf[before..].iter().map(|a| a.addr));
                }
                Err(e) => return (seen, Some(e.to_string())),
            }
        }
    }

    #[test]
    fn same_accesses_in_order_whatever_the_batch_sizes() {
        for (len, step, max, clear) in
            [(0, 7, 5, true), (100_000, 16384, 16384, true), (100_000, 1000, 333, false), (50_000, 7, 20_000, true)]
        {
            let mut src = ReadAhead::new(counting(len, step, None)).unwrap();
            let (seen, err) = drain(&mut src, max, clear);
            assert_eq!(err, None);
            assert_eq!(seen, (0..len).collect::<Vec<_>>(), "len {len} step {step} max {max}");
            // After the end it stays at the end.
            assert_eq!(src.read_batch(&mut Vec::new(), max).unwrap(), 0);
        }
    }

    /// Split by CPU, on the worker or (for batches decoded before the engine asked) here: each
    /// CPU's accesses in order, the same batches as unsplit, and a CPU past the limit reported
    /// at its position.
    #[test]
    fn split_batches_hold_each_cpus_accesses_in_order() {
        let mut src = ReadAhead::new(counting(200_000, 5000, None)).unwrap();
        let (mut batch, mut per_cpu, mut total) = (SplitBatch::default(), vec![Vec::new(); 5], 0);
        loop {
            let n = src.read_split(&mut batch, 16384, 5).unwrap();
            if n == 0 {
                break;
            }
            assert_eq!(n, 5000);
            assert_eq!(batch.beyond, None);
            assert_eq!(batch.first_time, Some(1));
            assert_eq!(batch.cpus, [0, 1, 2, 3, 4].map(|c| (total as u32 + c) % 5));
            for &c in &batch.cpus {
                per_cpu[c as usize].extend(batch.per_cpu[c as usize].iter().map(|a| a.addr));
            }
            total += n;
        }
        assert_eq!(total, 200_000);
        for (c, addrs) in per_cpu.iter().enumerate() {
            assert_eq!(*addrs, (0..200_000).filter(|a| a % 5 == c as u64).collect::<Vec<_>>(), "cpu {c}");
        }
        let mut src = ReadAhead::new(counting(10_000, 5000, None)).unwrap();
        assert_eq!(src.read_split(&mut batch, 16384, 3).unwrap(), 5000);
        assert_eq!(batch.beyond, Some((3, 3)));
    }

    #[test]
    fn an_error_arrives_after_the_accesses_before_it() {
        let mut src = ReadAhead::new(counting(1_000_000, 1000, Some(70_500))).unwrap();
        let (seen, err) = drain(&mut src, 16384, true);
        assert_eq!(seen, (0..70_000).collect::<Vec<_>>());
        assert_eq!(err.as_deref(), Some("bad frame after access 70000"));
    }

    /// The stage sees every access once, in trace order, across batches of any size.
    #[test]
    fn a_stage_runs_over_every_access_in_order() {
        let mut seen = 0u64;
        let stage = move |batch: &mut [Access]| {
            for a in batch {
                a.time = seen * 1000 + a.addr;
                seen += 1;
            }
        };
        let mut src = ReadAhead::with_stage(counting(50_000, 777, None), stage).unwrap();
        let mut buf = Vec::new();
        let mut times = Vec::new();
        while src.read_batch(&mut buf, 5000).unwrap() > 0 {
            times.extend(buf.drain(..).map(|a| a.time));
        }
        assert_eq!(times, (0..50_000).map(|i| i * 1001).collect::<Vec<_>>());
    }

    #[test]
    fn dropping_it_early_stops_the_worker() {
        let mut src = ReadAhead::new(counting(u64::MAX, 16384, None)).unwrap();
        assert_eq!(src.read_batch(&mut Vec::new(), 10).unwrap(), 10);
        drop(src);
    }
}
