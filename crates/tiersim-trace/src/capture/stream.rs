//! The instrumented path's streaming merge: the tracing runtime (python/tiersim/runtime/
//! tiersim_trace_rt.c) publishes each thread's records into a ring of its own in memory shared
//! with this process (a memfd the program inherits), and this merge takes them while the program
//! runs: a k-way merge on the records' stamps restores the order they were made in, and the
//! records go straight into the traces' frames, which compress on threads of their own.
//!
//! The order is the file merge's (`instrumented.rs`): earliest stamp first, ties by thread
//! number. A record may be written once no thread can still publish an earlier one. A thread
//! with records waiting in its ring has its next one there; a thread with none is bounded by
//! the clock: the runtime sets its slot's `busy` flag with a full barrier before it takes a
//! record's stamp and clears it once the record is published, so a thread seen after a clock
//! reading with `busy` clear and nothing new published will stamp its next record later than
//! that reading. Threads never wait for the merge except when their ring is full, and the merge
//! never waits for a thread that is not in the middle of publishing a record, so neither can
//! hold the other up for long.
//!
//! Frames come from pagemap read live (`/proc/PID/pagemap` of the program, as the Valgrind path
//! reads it) while the program is alive: the runtime's exit handler waits until every record is
//! merged before the process ends.

use std::os::fd::RawFd;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tiersim_core::{Error, Op, Result};

use super::instrumented::{parse_summary_text, summary_totals, Rec, RECORD};
use super::v2p::Pagemap;
use super::{finish, pipeline, resolve, CaptureReport, CaptureRequest, Pipeline, Progress};

const MAGIC: u64 = u64::from_le_bytes(*b"TISTSHM1");
/// The layout's version; the runtime refuses another.
const VERSION: u64 = 1;
/// Records per thread ring (a power of two): 3 MiB, about 9 ms of records at the fastest rate
/// a thread makes them.
const RING: u64 = 1 << 17;
/// Threads a capture follows (slots are never reused).
const SLOTS: u64 = 4096;
const PAGE: u64 = 4096;
const SUMMARY_OFF: u64 = PAGE;
const SUMMARY_SIZE: u64 = 1 << 20;
const SLOTS_OFF: u64 = SUMMARY_OFF + SUMMARY_SIZE;
/// A slot: its control page, then its ring.
const SLOT_SIZE: u64 = PAGE + RING * RECORD as u64;
/// The whole shared memory; a memfd is sparse, so only the rings threads use take memory.
pub const SHM_SIZE: u64 = SLOTS_OFF + SLOTS * SLOT_SIZE;

// Header words (u64 index); tiersim_trace_rt.c names them H_*.
const H_MAGIC: usize = 0;
const H_VERSION: usize = 1;
const H_RING: usize = 2;
const H_SLOTS: usize = 3;
const H_SLOT_SIZE: usize = 4;
const H_SLOTS_OFF: usize = 5;
const H_SUMMARY_OFF: usize = 6;
const H_SUMMARY_SIZE: usize = 7;
const H_LOADED: usize = 8;
const H_RESERVED: usize = 16;
const H_FINISHED: usize = 24;
const H_SUMMARY_LEN: usize = 25;
const H_MERGED: usize = 32;
const H_GONE: usize = 33;

// Slot control words (byte offsets; struct slot_ctl).
const C_PUB: usize = 0;
const C_BUSY: usize = 8;
const C_STATE: usize = 12;
const C_DONE: usize = 16;
const C_INDEX: usize = 24;
const C_CPU: usize = 28;
const C_CONS: usize = 64;

/// Records taken between two updates of a ring's `cons` (the producer's room) and of progress.
const PUBLISH_EVERY: u64 = 1 << 12;
/// How long the merge sleeps when nothing, or less than `BATCH` records, could be written: a
/// thread making records as fast as it can fills a third of its ring meanwhile.
const IDLE_SLEEP: Duration = Duration::from_micros(500);
const BATCH: u64 = 1 << 14;
/// How often an idle merge checks that the program is still alive.
const ALIVE_CHECK: Duration = Duration::from_millis(20);

/// The shared memory, mapped.
struct Shm {
    base: *mut u8,
    /// Whether dropping it tells a waiting runtime that the merge is over.
    merging: bool,
}

// The mapping is process-wide memory; every access to the words both sides write is atomic.
unsafe impl Send for Shm {}

impl Shm {
    fn map(fd: RawFd) -> Result<Shm> {
        // SAFETY: a fresh shared mapping of the descriptor; its length is checked by the caller's
        // ftruncate (init) or the header (capture), and it is unmapped on drop only.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                SHM_SIZE as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(Error::Sim(format!(
                "mapping the capture's shared memory: {}",
                std::io::Error::last_os_error()
            )));
        }
        Ok(Shm { base: base.cast(), merging: false })
    }

    fn word(&self, off: u64) -> &AtomicU64 {
        debug_assert!(off.is_multiple_of(8) && off < SHM_SIZE);
        // SAFETY: in bounds, aligned, and the memory lives as long as self.
        unsafe { &*(self.base.add(off as usize) as *const AtomicU64) }
    }

    fn word32(&self, off: u64) -> &AtomicU32 {
        debug_assert!(off.is_multiple_of(4) && off < SHM_SIZE);
        // SAFETY: as `word`.
        unsafe { &*(self.base.add(off as usize) as *const AtomicU32) }
    }

    fn hdr(&self, i: usize) -> &AtomicU64 {
        self.word(8 * i as u64)
    }

    fn ctl(&self, slot: u64, off: usize) -> u64 {
        SLOTS_OFF + slot * SLOT_SIZE + off as u64
    }

    /// Record `n` of slot `slot`'s ring; the caller has seen it published.
    fn record(&self, slot: u64, n: u64) -> Rec {
        let off = SLOTS_OFF + slot * SLOT_SIZE + PAGE + (n & (RING - 1)) * RECORD as u64;
        let mut b = [0u8; RECORD];
        // SAFETY: in bounds; published records are not written again until `cons` passes them.
        unsafe { std::ptr::copy_nonoverlapping(self.base.add(off as usize), b.as_mut_ptr(), RECORD) };
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Rec {
            stamp: u64_at(0),
            addr: u64_at(8),
            gap: u32::from_le_bytes(b[16..20].try_into().expect("4 bytes")),
            size: u16::from_le_bytes([b[20], b[21]]),
            write: b[22] == 1,
        }
    }

    fn summary(&self) -> String {
        let len = self.hdr(H_SUMMARY_LEN).load(Ordering::Acquire).min(SUMMARY_SIZE) as usize;
        let mut b = vec![0u8; len];
        // SAFETY: in bounds; the runtime wrote it before setting H_FINISHED, which was read.
        unsafe { std::ptr::copy_nonoverlapping(self.base.add(SUMMARY_OFF as usize), b.as_mut_ptr(), len) };
        String::from_utf8_lossy(&b).into_owned()
    }
}

impl Drop for Shm {
    fn drop(&mut self) {
        if self.merging {
            // A runtime still waiting for the merge stops waiting.
            self.hdr(H_GONE).store(1, Ordering::Release);
        }
        // SAFETY: mapped in `map` with this length.
        unsafe { libc::munmap(self.base.cast(), SHM_SIZE as usize) };
    }
}

/// Size the memfd `fd` for a capture and write the layout the runtime reads.
pub fn init_shm(fd: RawFd) -> Result<()> {
    // SAFETY: plain system call on a descriptor the caller owns.
    if unsafe { libc::ftruncate(fd, SHM_SIZE as libc::off_t) } != 0 {
        return Err(Error::Sim(format!("sizing the capture's shared memory: {}", std::io::Error::last_os_error())));
    }
    let shm = Shm::map(fd)?;
    for (i, v) in [
        (H_VERSION, VERSION),
        (H_RING, RING),
        (H_SLOTS, SLOTS),
        (H_SLOT_SIZE, SLOT_SIZE),
        (H_SLOTS_OFF, SLOTS_OFF),
        (H_SUMMARY_OFF, SUMMARY_OFF),
        (H_SUMMARY_SIZE, SUMMARY_SIZE),
        (H_MAGIC, MAGIC),
    ] {
        shm.hdr(i).store(v, Ordering::Release);
    }
    Ok(())
}

/// The clock the runtime stamps records with, read so that the loads after it come after it.
fn now() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc and lfence exist on every x86-64.
        unsafe {
            std::arch::x86_64::_mm_lfence();
            let t = std::arch::x86_64::_rdtsc();
            std::arch::x86_64::_mm_lfence();
            fence(Ordering::SeqCst);
            t
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: writes ts only.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        fence(Ordering::SeqCst);
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }
}

/// Whether process `pid` has ended (gone, or a zombie nobody has reaped yet).
fn ended(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name's closing parenthesis.
        Ok(s) => {
            s.rsplit_once(')').is_none_or(|(_, rest)| matches!(rest.trim_start().as_bytes().first(), Some(b'Z' | b'X')))
        }
        Err(_) => true,
    }
}

/// One thread's ring as the merge sees it.
struct Source {
    slot: u64,
    index: u32,
    /// Next record to take, and records published as last read.
    cons: u64,
    published: u64,
    /// `cons` as last told to the runtime.
    told: u64,
    /// The stamp of its last record taken: a record it is publishing now is no earlier.
    last_stamp: u64,
    finished: bool,
}

/// Run the streaming merge for the program `pid`, which inherited the memfd `fd` (prepared by
/// `init_shm`), into the traces of `req`. Returns when the program's runtime has finished and
/// every record is written; an error when the program ended without its exit handler, or on
/// cancel. On error nothing appears at the output paths.
pub fn capture_stream(fd: RawFd, pid: u32, req: &CaptureRequest<'_>, progress: &Progress) -> Result<CaptureReport> {
    let (params, s) = resolve(req)?;
    let mut shm = Shm::map(fd)?;
    shm.merging = true;
    let pm = if matches!(s.v2p.as_str(), "auto" | "pagemap") {
        Pagemap::open(pid).map_err(|e| format!("cannot open /proc/{pid}/pagemap: {e}"))
    } else {
        Err("not asked for".to_owned())
    };
    let mut p = pipeline(req, &s, pm)?;
    let per_gap = s.instructions_per_access;
    let whole_per_gap = (per_gap.fract() == 0.0).then_some(per_gap as u64);
    let mut frac: Vec<f64> = vec![0.0];
    let filtered = s.cache.is_some();
    let put = |p: &mut Pipeline, frac: &mut Vec<f64>, t: usize, r: &Rec| -> Result<()> {
        p.threads[t].gap = match whole_per_gap {
            Some(k) => r.gap as u64 * k,
            None => {
                // Whole instructions, carrying the fraction, so a thread's total is its loads
                // and stores x instructions_per_access.
                let exact = r.gap as f64 * per_gap + frac[t];
                let whole = exact.floor();
                frac[t] = exact - whole;
                whole as u64
            }
        };
        let op = if r.write { Op::Write } else { Op::Read };
        if filtered {
            p.emit(t, op, r.addr, r.size)
        } else {
            p.emit_split(t, op, r.addr, r.size)
        }
    };

    let mut sources: Vec<Source> = Vec::new();
    // Heads of the rings with records waiting: (stamp, thread, source).
    let mut heap: std::collections::BinaryHeap<std::cmp::Reverse<(u64, u32, usize)>> = Default::default();
    let mut in_heap: Vec<bool> = Vec::new();
    let mut taken = 0u64;
    let mut last_clock = 0u64;
    let mut last_alive_check = Instant::now();
    let mut was_finished = false;
    loop {
        // Which threads exist and what each has published; the bound on the stamps of records
        // not yet seen (see the module's comment).
        let x = now();
        let finished_flag = shm.hdr(H_FINISHED).load(Ordering::Acquire) == 1;
        let reserved = shm.hdr(H_RESERVED).load(Ordering::SeqCst).min(SLOTS);
        // A thread that took a slot after the previous round's clock reading stamps later
        // than that reading; one still filling in its slot is bounded by it.
        let mut bound = u64::MAX;
        while (sources.len() as u64) < reserved {
            let k = sources.len() as u64;
            if shm.word32(shm.ctl(k, C_STATE)).load(Ordering::Acquire) != 1 {
                bound = bound.min(last_clock);
                break;
            }
            let index = shm.word32(shm.ctl(k, C_INDEX)).load(Ordering::Relaxed);
            let cpu = shm.word32(shm.ctl(k, C_CPU)).load(Ordering::Relaxed);
            while p.threads.len() <= index as usize {
                p.new_thread()?;
                frac.push(0.0);
            }
            p.threads[index as usize].cpu = cpu;
            sources.push(Source { slot: k, index, cons: 0, published: 0, told: 0, last_stamp: 0, finished: false });
            in_heap.push(false);
        }
        for (i, src) in sources.iter_mut().enumerate() {
            if src.finished {
                continue;
            }
            let done = shm.word32(shm.ctl(src.slot, C_DONE)).load(Ordering::Acquire) == 1;
            let busy = shm.word32(shm.ctl(src.slot, C_BUSY)).load(Ordering::SeqCst) != 0;
            src.published = shm.word(shm.ctl(src.slot, C_PUB)).load(Ordering::Acquire);
            if src.cons < src.published {
                if !in_heap[i] {
                    let r = shm.record(src.slot, src.cons);
                    heap.push(std::cmp::Reverse((r.stamp, src.index, i)));
                    in_heap[i] = true;
                }
            } else if done && !busy {
                src.finished = true;
            } else if busy {
                bound = bound.min(src.last_stamp);
            } else {
                bound = bound.min(x);
            }
        }
        last_clock = x;

        // Write every record that comes before the bound, in order.
        let mut wrote = 0u64;
        while let Some(&std::cmp::Reverse((stamp, index, i))) = heap.peek() {
            if stamp >= bound {
                break;
            }
            heap.pop();
            let mut r = shm.record(sources[i].slot, sources[i].cons);
            loop {
                put(&mut p, &mut frac, index as usize, &r)?;
                let src = &mut sources[i];
                src.last_stamp = r.stamp;
                src.cons += 1;
                wrote += 1;
                taken += 1;
                if src.cons - src.told >= PUBLISH_EVERY {
                    shm.word(shm.ctl(src.slot, C_CONS)).store(src.cons, Ordering::Release);
                    src.told = src.cons;
                }
                if taken.is_multiple_of(PUBLISH_EVERY) {
                    progress.records.store(p.records, Ordering::Relaxed);
                    if progress.cancelled() {
                        return Err(Error::Sim("capture interrupted".into()));
                    }
                }
                if src.cons == src.published {
                    // Its bound is unknown until the next round looks again.
                    in_heap[i] = false;
                    bound = bound.min(r.stamp);
                    break;
                }
                r = shm.record(src.slot, src.cons);
                // The thread's records run on while they come before every other thread's next.
                let first = r.stamp < bound
                    && heap.peek().is_none_or(|std::cmp::Reverse(top)| (r.stamp, index) < (top.0, top.1));
                if !first {
                    heap.push(std::cmp::Reverse((r.stamp, index, i)));
                    break;
                }
            }
        }
        for src in sources.iter_mut().filter(|s| s.told != s.cons) {
            shm.word(shm.ctl(src.slot, C_CONS)).store(src.cons, Ordering::Release);
            src.told = src.cons;
        }
        if wrote > 0 {
            progress.records.store(p.records, Ordering::Relaxed);
            p.drain(super::Force::None)?;
            // A round costs a look at every ring: when records come slowly, let them gather.
            if wrote < BATCH && !finished_flag {
                std::thread::sleep(IDLE_SLEEP);
            }
            continue;
        }
        if was_finished && heap.is_empty() && sources.iter().all(|s| s.finished) {
            break;
        }
        // The exit handler had run before this round read the rings: one more round takes what
        // they still held.
        was_finished = finished_flag;
        if progress.cancelled() {
            return Err(Error::Sim("capture interrupted".into()));
        }
        if last_alive_check.elapsed() >= ALIVE_CHECK {
            last_alive_check = Instant::now();
            if ended(pid) && shm.hdr(H_FINISHED).load(Ordering::Acquire) == 0 {
                return Err(if shm.hdr(H_LOADED).load(Ordering::Acquire) == 0 {
                    Error::Sim(
                        "the program did not load the tiersim tracing runtime: compile it with -fsanitize=thread and link it with `tiersim capture --build-runtime`'s object instead of -fsanitize=thread (docs/capture.md)".into(),
                    )
                } else {
                    Error::Sim(
                        "the program ended without running the tiersim runtime's exit handler (it was killed by a signal, or left by _exit), so its records cannot be trusted to be complete: no trace was written".into(),
                    )
                });
            }
        }
        std::thread::sleep(IDLE_SLEEP);
    }
    // Pages still waiting for pagemap are looked up once more while the program is alive.
    p.drain(super::Force::None)?;
    shm.hdr(H_MERGED).store(1, Ordering::Release);
    p.drain(super::Force::All)?;

    let text = shm.summary();
    let sum = parse_summary_text(&text, "the runtime's summary")?;
    for t in &sum.threads {
        while p.threads.len() <= t.index as usize {
            p.new_thread()?;
        }
        let th = &mut p.threads[t.index as usize];
        th.cpu = t.cpu;
        th.accesses = t.loads + t.stores;
        th.instructions = (th.accesses as f64 * s.instructions_per_access).round() as u64;
        let written = th.records;
        // An unfiltered record cut at a page boundary is two records.
        if written < t.records || (filtered && written != t.records) {
            return Err(Error::Sim(format!(
                "thread {} has {written} records, the runtime's summary says {}",
                t.index, t.records
            )));
        }
    }
    let instructions = p.threads.iter().map(|t| t.instructions).sum();
    let (llc, n) = summary_totals(&s, &sum, instructions, taken * RECORD as u64);
    progress.records.store(p.records, Ordering::Relaxed);
    progress.data_accesses.store(n.loads + n.stores, Ordering::Relaxed);
    drop(shm);
    finish(p, llc, req, &params, &s, "instrumented", n, Vec::new())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::sync::Arc;

    /// What the runtime's emit does (tiersim_trace_rt.c): busy with a full barrier, stamp,
    /// record, publish, busy clear. Returns the record as the files would hold it.
    fn publish(shm: &Shm, slot: u64, n: u64, addr: u64, gap: u32, write: bool) -> [u8; RECORD] {
        let busy = shm.word32(shm.ctl(slot, C_BUSY));
        while n >= shm.word(shm.ctl(slot, C_CONS)).load(Ordering::Acquire) + RING {
            std::thread::yield_now();
        }
        busy.swap(1, Ordering::SeqCst);
        let stamp = now();
        let mut b = [0u8; RECORD];
        b[..8].copy_from_slice(&stamp.to_le_bytes());
        b[8..16].copy_from_slice(&addr.to_le_bytes());
        b[16..20].copy_from_slice(&gap.to_le_bytes());
        b[20..22].copy_from_slice(&64u16.to_le_bytes());
        b[22] = write as u8;
        let off = SLOTS_OFF + slot * SLOT_SIZE + PAGE + (n & (RING - 1)) * RECORD as u64;
        // SAFETY: this slot's ring, at a place the merge has taken (checked above).
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), shm.base.add(off as usize), RECORD) };
        shm.word(shm.ctl(slot, C_PUB)).store(n + 1, Ordering::Release);
        busy.store(0, Ordering::Release);
        b
    }

    unsafe impl Sync for Shm {}

    /// The same records give the same bytes through the streaming merge as through the file
    /// merge, with threads publishing concurrently, a ring wrapping several times (the producer
    /// waiting for room) and a thread that pauses.
    #[test]
    fn streaming_merge_writes_the_file_merges_bytes() {
        let dir = tempfile::tempdir().unwrap();
        // SAFETY: plain system call; the descriptor is closed at the end.
        let fd = unsafe { libc::memfd_create(c"tiersim-test".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0);
        init_shm(fd).unwrap();
        let shm = Arc::new(Shm::map(fd).unwrap());
        let counts = [300_000u64, 100_000, 5_000];
        let params: toml::Table = toml::from_str("llc = \"1MiB\"\nv2p = \"buddy\"\nfragmentation = 0.3").unwrap();
        let out = |name: &str| dir.path().join(name);
        let (so, sv) = (out("s.trace"), out("s.virt.trace"));
        let merger = {
            let (so, sv, params) = (so.clone(), sv.clone(), params.clone());
            std::thread::spawn(move || {
                let req = CaptureRequest {
                    out: &so,
                    virt_out: Some(&sv),
                    params: Some(&params),
                    seed: 7,
                    pid: None,
                    pipe_capacity: None,
                };
                capture_stream(fd, std::process::id(), &req, &Progress::default())
            })
        };
        let producers: Vec<_> = counts
            .iter()
            .enumerate()
            .map(|(t, &n)| {
                let shm = shm.clone();
                std::thread::spawn(move || {
                    let slot = shm.hdr(H_RESERVED).fetch_add(1, Ordering::SeqCst);
                    shm.word32(shm.ctl(slot, C_INDEX)).store(t as u32, Ordering::Relaxed);
                    shm.word32(shm.ctl(slot, C_CPU)).store(t as u32, Ordering::Relaxed);
                    shm.word32(shm.ctl(slot, C_STATE)).store(1, Ordering::Release);
                    let mut recs = Vec::with_capacity(n as usize * RECORD);
                    for i in 0..n {
                        if t == 2 && i == n / 2 {
                            std::thread::sleep(Duration::from_millis(30));
                        }
                        let addr = ((t as u64) << 32) + ((i * 2654435761) % (1 << 24)) * 64;
                        recs.extend_from_slice(&publish(&shm, slot, i, addr, (i % 7) as u32 + 1, i % 3 == 0));
                    }
                    shm.word32(shm.ctl(slot, C_DONE)).store(1, Ordering::Release);
                    recs
                })
            })
            .collect();
        let mut summary = String::from("version 1\ncaches 3\ndirty_at_exit 0\npagemap off\n");
        for (t, h) in producers.into_iter().enumerate() {
            let recs = h.join().unwrap();
            std::fs::write(out(&format!("t{t}.bin")), &recs).unwrap();
            let n = counts[t];
            let accesses: u64 = (0..n).map(|i| i % 7 + 1).sum();
            summary += &format!(
                "thread {t} cpu {t} loads {accesses} stores 0 bytes 0 hits 0 misses {n} writebacks 0 records {n}\n"
            );
        }
        std::fs::write(out("summary"), &summary).unwrap();
        let b = summary.as_bytes();
        // SAFETY: the summary area, written before H_FINISHED as the runtime does.
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), shm.base.add(SUMMARY_OFF as usize), b.len()) };
        shm.hdr(H_SUMMARY_LEN).store(b.len() as u64, Ordering::Release);
        shm.hdr(H_FINISHED).store(1, Ordering::Release);
        let streamed = merger.join().unwrap().unwrap();
        assert_eq!(shm.hdr(H_MERGED).load(Ordering::Acquire), 1);
        let (fo, fv) = (out("f.trace"), out("f.virt.trace"));
        let req = CaptureRequest {
            out: &fo,
            virt_out: Some(&fv),
            params: Some(&params),
            seed: 7,
            pid: None,
            pipe_capacity: None,
        };
        let files = super::super::instrumented::capture_instrumented(dir.path(), &req, &Progress::default()).unwrap();
        assert_eq!(streamed.records, counts.iter().sum::<u64>());
        assert_eq!(streamed.records, files.records);
        let read = |p: &Path| std::fs::read(p).unwrap();
        assert!(read(&so) == read(&fo), "physical traces differ");
        assert!(read(&sv) == read(&fv), "virtual traces differ");
        drop(shm);
        // SAFETY: ours.
        unsafe { libc::close(fd) };
    }
}
