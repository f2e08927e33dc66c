//! The streaming writer: records into zstd frames in a temporary file, renamed over the target
//! once the trailer and the completed header are written. Frames are compressed and written by
//! the calling thread, or (`WriterOptions::background`) by a thread of the writer's own, with the
//! same bytes either way.

use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use tiersim_core::{Access, Error, Result};
use zstd::zstd_safe::{self, CCtx, CParameter};

use super::frames::{compact_planes, shuffle_groups_into, ADDR_GROUP, ALL_GROUPS, SHUFFLE_RUN};
use super::*;

/// Compression settings of a `TraceWriter`; they do not change what a reader sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriterOptions {
    /// zstd level (zstd's minimum, a large negative number, up to 22; 3 by default). The
    /// negative levels are zstd's fast ones: larger frames, cheaper to make and to read.
    pub level: i32,
    /// zstd's hashLog (`MIN_HASH_LOG..=MAX_HASH_LOG`), or None for the level's own. A smaller
    /// table is cheaper per frame at the fast levels (BENCHMARKS.md, "Capture").
    pub hash_log: Option<u32>,
    /// Records per zstd frame (1..=MAX_FRAME_RECORDS). Bounds the writer's memory and the
    /// reader's window.
    pub frame_records: usize,
    /// Byte-shuffle each frame (frame filter 1; true by default): smaller files, faster reads.
    pub shuffle: bool,
    /// Shuffle, compress and write frames on a thread of the writer's own (false by default), so
    /// that the caller makes the next records meanwhile. An I/O error then surfaces at a later
    /// `write` or at `finish`.
    pub background: bool,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            level: DEFAULT_LEVEL,
            hash_log: None,
            frame_records: DEFAULT_FRAME_RECORDS,
            shuffle: true,
            background: false,
        }
    }
}

/// Filled frames a background writer holds before `write` waits for its thread.
const BACKGROUND_QUEUE: usize = 2;

/// Turns filled frames into descriptors and zstd frames in the temporary file.
struct Compressor {
    path: PathBuf,
    file: File,
    cctx: CCtx<'static>,
    compressed: Vec<u8>,
    pos: u64,
    /// Frames written so far: the next frame's sequence number.
    frames: u64,
}

impl Compressor {
    /// `src` is the frame's decompressed bytes: rows, or byte planes (the writer shuffles the
    /// records as they come).
    fn frame(&mut self, src: &[u8]) -> Result<()> {
        self.compressed.clear();
        self.cctx.compress2(&mut self.compressed, src).map_err(|c| {
            Error::io(&self.path, std::io::Error::other(format!("zstd: {}", zstd_safe::get_error_name(c))))
        })?;
        let desc = frame_descriptor(self.frames, src.len() / RECORD_SIZE, src);
        self.file.write_all(&desc).map_err(|e| Error::io(&self.path, e))?;
        self.file.write_all(&self.compressed).map_err(|e| Error::io(&self.path, e))?;
        self.pos += (DESC_SIZE + self.compressed.len()) as u64;
        self.frames += 1;
        Ok(())
    }
}

/// Where filled frames go.
enum Sink {
    Inline(Box<Compressor>),
    /// Frames go to `worker` through `tx`; their emptied buffers come back through `free`.
    Background {
        tx: SyncSender<Vec<u8>>,
        free: Receiver<Vec<u8>>,
        worker: JoinHandle<Result<Box<Compressor>>>,
    },
}

/// CPU time of the calling thread, in ns.
fn thread_cpu_ns() -> u64 {
    // SAFETY: clock_gettime writes the struct it is given.
    let mut t: libc::timespec = unsafe { std::mem::zeroed() };
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// A background writer's thread running `work`, its CPU time added to `meter` when it ends.
fn spawn_worker(
    meter: Arc<AtomicU64>,
    work: impl FnOnce() -> Result<Box<Compressor>> + Send + 'static,
) -> JoinHandle<Result<Box<Compressor>>> {
    std::thread::Builder::new()
        .name("tiersim-trace-writer".into())
        .spawn(move || {
            let r = work();
            meter.fetch_add(thread_cpu_ns(), Ordering::Relaxed);
            r
        })
        .expect("spawning the trace writer's thread")
}

impl Sink {
    fn background(c: Box<Compressor>, meter: Arc<AtomicU64>) -> Sink {
        let (tx, rx) = sync_channel::<Vec<u8>>(BACKGROUND_QUEUE);
        let (free_tx, free): (Sender<Vec<u8>>, _) = channel();
        let worker = spawn_worker(meter, move || {
            let mut c = c;
            for buf in rx {
                c.frame(&buf)?;
                // Its bytes stay: a frame of planes is overwritten whole (TraceWriter::ready).
                let _ = free_tx.send(buf);
            }
            Ok(c)
        });
        Sink::Background { tx, free, worker }
    }

    /// Every frame written: the compressor back, or the first error.
    fn close(self) -> Result<Box<Compressor>> {
        match self {
            Sink::Inline(c) => Ok(c),
            Sink::Background { tx, worker, .. } => {
                drop(tx);
                worker.join().unwrap_or_else(|_| Err(Error::Sim("the trace writer's thread panicked".into())))
            }
        }
    }
}

/// Streams accesses into a trace file. Nothing appears at the target path until `finish`
/// succeeds; dropping an unfinished writer removes its temporary file.
pub struct TraceWriter {
    path: PathBuf,
    tmp_path: PathBuf,
    /// None once finished.
    sink: Option<Sink>,
    meta: TraceMeta,
    v2p: V2p,
    filter: FrameFilter,
    frame_records: usize,
    /// The frame being filled: its rows, or (shuffling) its byte planes laid out for
    /// `frame_records` records, `fill` of them placed.
    frame: Vec<u8>,
    /// Records in `frame`.
    fill: usize,
    /// Shuffling: rows waiting to be placed in the planes, fewer than `SHUFFLE_RUN` records.
    stage: Vec<u8>,
    /// Shuffling: the plane groups `frame` holds (`ALL_GROUPS`, or `ADDR_GROUP` for a writer
    /// that takes the others from its twin's frames: `share_planes`).
    groups: Range<usize>,
    /// The records given were checked already (by the twin whose records they are, at other
    /// addresses): `write_all` does not check them again.
    trusted: bool,
    stats: StatsBuilder,
    /// False when the caller gives the statistics to `finish_with` instead.
    counting: bool,
    /// The statistics `finish_with` was given.
    given: Option<TraceStats>,
    /// The footprint `finish_with_footprint` was given (the writer counted no pages).
    footprint: Option<u64>,
    /// Records written.
    records: u64,
    prev_time: u64,
    /// CPU time of the background thread(s) that have ended, in ns.
    thread_cpu: Arc<AtomicU64>,
}

impl TraceWriter {
    /// Start a trace at `path` with default compression settings.
    pub fn create(path: &Path, meta: TraceMeta) -> Result<TraceWriter> {
        TraceWriter::create_with(path, meta, WriterOptions::default())
    }

    /// Start a trace at `path` with explicit compression settings.
    pub fn create_with(path: &Path, meta: TraceMeta, opts: WriterOptions) -> Result<TraceWriter> {
        check_page_size(meta.page_size).map_err(|m| Error::arg("page_size", m))?;
        // zstd's negative levels are its fast modes (less compression, more speed); 0 would mean
        // zstd's default, which a caller should name.
        let (lo, hi) = (zstd_safe::min_c_level(), zstd_safe::max_c_level());
        if !(lo..=hi).contains(&opts.level) || opts.level == 0 {
            return Err(Error::arg("level", format!("zstd level {} is outside {lo}..={hi} or 0", opts.level)));
        }
        if let Some(h) = opts.hash_log.filter(|h| !(MIN_HASH_LOG..=MAX_HASH_LOG).contains(h)) {
            return Err(Error::arg("hash_log", format!("zstd hashLog {h} is outside {MIN_HASH_LOG}..={MAX_HASH_LOG}")));
        }
        if !(1..=MAX_FRAME_RECORDS).contains(&opts.frame_records) {
            return Err(Error::arg(
                "frame_records",
                format!("{} records per frame is outside 1..={MAX_FRAME_RECORDS}", opts.frame_records),
            ));
        }
        let name =
            path.file_name().ok_or_else(|| Error::arg("path", format!("{} does not name a file", path.display())))?;
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(".tmp{}", std::process::id()));
        let tmp_path = path.with_file_name(tmp_name);
        let mut cctx = CCtx::create();
        let zerr = |c: usize| Error::arg("level", format!("zstd: {}", zstd_safe::get_error_name(c)));
        cctx.set_parameter(CParameter::CompressionLevel(opts.level)).map_err(zerr)?;
        if let Some(h) = opts.hash_log {
            // After the level, which would otherwise set it back to the level's own.
            cctx.set_parameter(CParameter::HashLog(h)).map_err(zerr)?;
        }
        // Checksums let the reader tell corruption from valid data; they cost little to verify.
        cctx.set_parameter(CParameter::ChecksumFlag(true)).map_err(zerr)?;
        cctx.set_parameter(CParameter::ContentSizeFlag(true)).map_err(zerr)?;
        // Errors name the user's file, never the hidden temporary one.
        let mut file = File::create(&tmp_path).map_err(|e| Error::io(path, e))?;
        // A valid but incomplete header from the start: an interrupted file is still readable.
        let filter = if opts.shuffle { FrameFilter::Shuffle } else { FrameFilter::None };
        if let Err(e) = file.write_all(&encode_header(&meta, V2p::Unrecorded, filter, 0, 0, None)) {
            // A full disk can take the file's name but not its first block: nothing is left.
            drop(file);
            let _ = std::fs::remove_file(&tmp_path);
            return Err(Error::io(path, e));
        }
        let frame_bytes = opts.frame_records * RECORD_SIZE;
        let c = Box::new(Compressor {
            path: path.to_owned(),
            file,
            cctx,
            compressed: Vec::with_capacity(zstd_safe::compress_bound(frame_bytes)),
            pos: HEADER_SIZE as u64,
            frames: 0,
        });
        let thread_cpu = Arc::new(AtomicU64::new(0));
        let mut w = TraceWriter {
            path: path.to_owned(),
            tmp_path,
            sink: Some(if opts.background { Sink::background(c, thread_cpu.clone()) } else { Sink::Inline(c) }),
            meta,
            v2p: V2p::Unrecorded,
            filter,
            frame_records: opts.frame_records,
            frame: Vec::with_capacity(frame_bytes),
            fill: 0,
            stage: Vec::with_capacity(if opts.shuffle { SHUFFLE_RUN * RECORD_SIZE } else { 0 }),
            groups: ALL_GROUPS,
            trusted: false,
            stats: StatsBuilder::new(meta.time_unit, meta.page_size),
            counting: true,
            given: None,
            footprint: None,
            records: 0,
            prev_time: 0,
            thread_cpu,
        };
        w.ready();
        Ok(w)
    }

    /// Record in the header how the physical addresses were made (written by `finish`).
    pub fn set_v2p(&mut self, v2p: V2p) {
        self.v2p = v2p;
    }

    fn reject(&self, msg: String) -> Error {
        Error::arg("access", format!("record {} for {}: {msg}", self.records, self.path.display()))
    }

    /// Append one access. Rejects size 0, CPUs at or above `MAX_CPUS`, and (for ns traces)
    /// timestamps that go backwards.
    pub fn write(&mut self, a: &Access) -> Result<()> {
        self.write_one(a)
    }

    /// `write`, and `write_all`'s record by record when a check fails.
    #[inline(always)]
    fn write_one(&mut self, a: &Access) -> Result<()> {
        if a.size == 0 {
            return Err(self.reject("size 0; every access moves at least one byte".into()));
        }
        if a.cpu >= MAX_CPUS {
            return Err(self.reject(format!("cpu {} is above the maximum {}", a.cpu, MAX_CPUS - 1)));
        }
        if self.meta.time_unit == TimeUnit::Ns {
            if a.time < self.prev_time {
                return Err(self.reject(format!(
                    "time {} ns is before the previous record's {} ns; ns traces must be sorted by time",
                    a.time, self.prev_time
                )));
            }
            self.prev_time = a.time;
        }
        if self.counting {
            self.stats.add(a);
        }
        self.records += 1;
        self.put_rows(&encode(a))
    }

    /// Append a slice of accesses.
    pub fn write_all(&mut self, accesses: &[Access]) -> Result<()> {
        // The checks first, over the whole slice: when one fails, the records before it are
        // written one at a time, so that the error and what precedes it are `write`'s.
        let ns = self.meta.time_unit == TimeUnit::Ns;
        let mut prev = self.prev_time;
        let mut ok = true;
        if self.trusted {
            prev = accesses.last().map_or(prev, |a| a.time);
        } else {
            for a in accesses {
                ok &= (a.size != 0) & (a.cpu < MAX_CPUS) & (!ns | (a.time >= prev));
                prev = a.time;
            }
        }
        if !ok {
            for a in accesses {
                self.write_one(a)?;
            }
            return Ok(());
        }
        if ns {
            self.prev_time = prev;
        }
        if self.counting {
            self.stats.add_all(accesses);
        }
        self.records += accesses.len() as u64;
        // An `Access` is a record row (asserted below): whole runs go into the frame at once.
        self.put_rows(&access_bytes(accesses))
    }

    /// Whole record rows into the frame, the frame written whenever it is full.
    fn put_rows(&mut self, mut rows: &[u8]) -> Result<()> {
        const R: usize = RECORD_SIZE;
        let cap = self.frame_records;
        while !rows.is_empty() {
            let have = rows.len() / R;
            match self.filter {
                FrameFilter::None => {
                    let n = have.min(cap - self.fill);
                    self.frame.extend_from_slice(&rows[..n * R]);
                    self.fill += n;
                    rows = &rows[n * R..];
                }
                FrameFilter::Shuffle => {
                    let staged = self.stage.len() / R;
                    let room = cap - self.fill - staged;
                    if staged == 0 && have >= SHUFFLE_RUN && room >= SHUFFLE_RUN {
                        // Whole runs straight from the caller's rows into the planes.
                        let n = have.min(room) / SHUFFLE_RUN * SHUFFLE_RUN;
                        shuffle_groups_into(&rows[..n * R], &mut self.frame, cap, self.fill, self.groups.clone());
                        self.fill += n;
                        rows = &rows[n * R..];
                    } else {
                        let n = have.min(SHUFFLE_RUN - staged).min(room);
                        self.stage.extend_from_slice(&rows[..n * R]);
                        rows = &rows[n * R..];
                        if self.stage.len() == SHUFFLE_RUN * R {
                            self.place_stage();
                        }
                    }
                }
            }
            if self.fill + self.stage.len() / R >= cap {
                self.flush_frame()?;
            }
        }
        Ok(())
    }

    /// The staged rows into the planes.
    fn place_stage(&mut self) {
        shuffle_groups_into(&self.stage, &mut self.frame, self.frame_records, self.fill, self.groups.clone());
        self.fill += self.stage.len() / RECORD_SIZE;
        self.stage.clear();
    }

    /// `frame` ready to be filled: empty rows, or planes laid out for a whole frame (their old
    /// bytes are overwritten as records are placed, so they are not cleared).
    fn ready(&mut self) {
        self.fill = 0;
        match self.filter {
            FrameFilter::None => self.frame.clear(),
            FrameFilter::Shuffle => self.frame.resize(self.frame_records * 8 * self.groups.len(), 0),
        }
    }

    fn flush_frame(&mut self) -> Result<()> {
        if !self.stage.is_empty() {
            self.place_stage();
        }
        if self.fill == 0 {
            return Ok(());
        }
        if self.filter == FrameFilter::Shuffle && self.fill < self.frame_records {
            // A short frame (the last): its planes are `fill` records apart.
            let planes = 8 * self.groups.len();
            compact_planes(&mut self.frame, planes, self.frame_records, self.fill);
            self.frame.truncate(self.fill * planes);
        }
        let sent = match self.sink.as_mut().ok_or_else(|| Error::Sim("trace writer used after finish".into()))? {
            Sink::Inline(c) => {
                c.frame(&self.frame)?;
                true
            }
            Sink::Background { tx, free, .. } => {
                let next = free.try_recv().unwrap_or_else(|_| Vec::with_capacity(self.frame.capacity()));
                let full = std::mem::replace(&mut self.frame, next);
                tx.send(full).is_ok()
            }
        };
        if !sent {
            // The thread stopped at an error (a full disk, say): that error, and no partial file
            // (Drop no longer sees the sink, so the file goes here).
            let sink = self.sink.take().expect("checked above");
            let e = sink.close().err().unwrap_or_else(|| Error::Sim("the trace writer's thread ended".into()));
            let _ = std::fs::remove_file(&self.tmp_path);
            return Err(e);
        }
        self.ready();
        Ok(())
    }

    /// Count nothing: the caller knows the statistics and gives them to `finish_with` (a
    /// capture's physical trace: the virtual trace's records at other addresses, whose pages
    /// the translator counts as it gives them frames).
    pub(crate) fn count_nothing(&mut self) {
        self.counting = false;
    }

    /// The records given were checked by another writer (`trusted`): a capture's physical trace,
    /// whose records are the virtual trace's at other addresses.
    pub(crate) fn trust_records(&mut self) {
        self.trusted = true;
    }

    /// Count everything but the pages: the caller knows the footprint and gives it to
    /// `finish_with_footprint` (a capture's virtual trace, whose pages the translator counts as
    /// it maps them).
    pub(crate) fn count_no_pages(&mut self) {
        self.stats.no_pages();
    }

    /// The CPU time its compressing thread has taken, in ns, read once the writer has finished
    /// (the thread adds it as it ends).
    pub(crate) fn thread_cpu(&self) -> Arc<AtomicU64> {
        self.thread_cpu.clone()
    }

    /// `finish` for a writer that counted no pages, with the footprint it was given.
    pub(crate) fn finish_with_footprint(mut self, footprint_pages: u64) -> Result<TraceStats> {
        self.footprint = Some(footprint_pages);
        self.finish()
    }

    /// `finish` for a writer that counted nothing, with the statistics of what it was given.
    pub(crate) fn finish_with(mut self, stats: TraceStats) -> Result<TraceStats> {
        self.given = Some(stats);
        self.finish()
    }

    /// Write the last frame, the trailer and the complete header, then move the file into place.
    pub fn finish(mut self) -> Result<TraceStats> {
        let r = self.finish_inner();
        if r.is_err() {
            let _ = std::fs::remove_file(&self.tmp_path);
        }
        r
    }

    fn finish_inner(&mut self) -> Result<TraceStats> {
        self.flush_frame()?;
        let sink = self.sink.take().ok_or_else(|| Error::Sim("trace writer used after finish".into()))?;
        let c = sink.close()?;
        let stats = if self.counting {
            let mut stats =
                std::mem::replace(&mut self.stats, StatsBuilder::new(self.meta.time_unit, self.meta.page_size))
                    .finish();
            if let Some(pages) = self.footprint {
                stats.footprint_pages = pages;
            }
            stats
        } else {
            match self.given.take() {
                Some(given) if given.accesses == self.records => given,
                given => {
                    return Err(Error::Sim(format!(
                        "{}: {} records written, statistics given of {:?}",
                        self.path.display(),
                        self.records,
                        given.map(|g| g.accesses)
                    )))
                }
            }
        };
        let records_end = c.pos;
        let header = encode_header(&self.meta, self.v2p, self.filter, FLAG_STATS_COMPLETE, records_end, Some(&stats));
        let mut file = c.file;
        let io = |e| Error::io(&self.path, e);
        let mut trailer: Vec<u8> = stats.per_cpu.iter().flat_map(|c| c.to_le_bytes()).collect();
        trailer.extend_from_slice(&end_block(&trailer, c.frames, stats.accesses));
        file.write_all(&trailer).map_err(io)?;
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        file.write_all(&header).map_err(io)?;
        file.sync_all().map_err(io)?;
        drop(file);
        std::fs::rename(&self.tmp_path, &self.path).map_err(|e| Error::io(&self.path, e))?;
        Ok(stats)
    }
}

/// Make `twin` (a capture's physical trace) take every plane but the addresses' from `giver`'s
/// frames (its virtual trace: the same records, in the same order, at other addresses), so that
/// those 16 bytes of a record are shuffled once for both traces. `twin` shuffles the addresses'
/// 8 planes alone; its compressing thread copies them into `giver`'s frame of the same records
/// once `giver`'s thread has compressed it, compresses that, and hands the buffer back to
/// `giver`. The bytes of both files are what they would be without.
///
/// Both must be shuffling, compressing in the background, of the same frame size, and have no
/// records yet; `twin` must be given `giver`'s records, and no earlier than `giver` (its
/// thread waits for `giver`'s frames).
pub(crate) fn share_planes(giver: &mut TraceWriter, twin: &mut TraceWriter) -> Result<()> {
    let fit = |w: &TraceWriter| {
        w.filter == FrameFilter::Shuffle
            && w.records == 0
            && w.groups == ALL_GROUPS
            && matches!(w.sink, Some(Sink::Background { .. }))
    };
    if !fit(giver) || !fit(twin) || giver.frame_records != twin.frame_records {
        return Err(Error::Sim("share_planes: writers that cannot share their frames".into()));
    }
    let cg = giver.sink.take().expect("checked above").close()?;
    let ct = twin.sink.take().expect("checked above").close()?;
    // The giver's compressed frames to the twin's thread, and back to the giver once the twin's
    // thread has compressed them too.
    let (share_tx, share_rx) = channel::<Vec<u8>>();
    let (gfree_tx, gfree) = channel::<Vec<u8>>();
    let (gtx, grx) = sync_channel::<Vec<u8>>(BACKGROUND_QUEUE);
    let gworker = spawn_worker(giver.thread_cpu.clone(), move || {
        let mut c = cg;
        for buf in grx {
            c.frame(&buf)?;
            let _ = share_tx.send(buf);
        }
        Ok(c)
    });
    giver.sink = Some(Sink::Background { tx: gtx, free: gfree, worker: gworker });
    let (tfree_tx, tfree) = channel::<Vec<u8>>();
    let (ttx, trx) = sync_channel::<Vec<u8>>(BACKGROUND_QUEUE);
    let tworker = spawn_worker(twin.thread_cpu.clone(), move || {
        let mut c = ct;
        for addrs in trx {
            let mut frame = share_rx
                .recv()
                .map_err(|_| Error::Sim("the virtual trace's writer stopped before the physical one".into()))?;
            let n = addrs.len() / 8;
            if frame.len() != n * RECORD_SIZE {
                return Err(Error::Sim(format!(
                    "frame {}: {n} physical records against {} virtual ones",
                    c.frames,
                    frame.len() / RECORD_SIZE
                )));
            }
            frame[R_ADDR * n..(R_ADDR + 8) * n].copy_from_slice(&addrs);
            c.frame(&frame)?;
            let _ = gfree_tx.send(frame);
            let _ = tfree_tx.send(addrs);
        }
        Ok(c)
    });
    twin.sink = Some(Sink::Background { tx: ttx, free: tfree, worker: tworker });
    twin.groups = ADDR_GROUP;
    twin.ready();
    Ok(())
}

impl Drop for TraceWriter {
    fn drop(&mut self) {
        if let Some(sink) = self.sink.take() {
            // The thread's file is closed before it is removed.
            let _ = sink.close();
            let _ = std::fs::remove_file(&self.tmp_path);
        }
    }
}

// `Access` is repr(C) with no padding and `Op` repr(u8) with the record's op values, so on a
// little-endian machine an `Access`'s bytes are its record row. Checked at compile time.
#[cfg(target_endian = "little")]
const _: () = {
    assert!(std::mem::size_of::<Access>() == RECORD_SIZE);
    assert!(std::mem::offset_of!(Access, time) == R_TIME);
    assert!(std::mem::offset_of!(Access, addr) == R_ADDR);
    assert!(std::mem::offset_of!(Access, cpu) == R_CPU);
    assert!(std::mem::offset_of!(Access, size) == R_SIZE);
    assert!(std::mem::offset_of!(Access, op) == R_OP);
    assert!(std::mem::offset_of!(Access, flags) == R_FLAGS);
    assert!(tiersim_core::Op::Read as u8 == 0 && tiersim_core::Op::Write as u8 == 1);
};

/// The record rows of `accesses`.
#[cfg(target_endian = "little")]
fn access_bytes(accesses: &[Access]) -> std::borrow::Cow<'_, [u8]> {
    // SAFETY: an `Access` is 24 initialised bytes with no padding (asserted above), valid as u8s.
    std::borrow::Cow::Borrowed(unsafe {
        std::slice::from_raw_parts(accesses.as_ptr().cast::<u8>(), std::mem::size_of_val(accesses))
    })
}

/// The record rows of `accesses`.
#[cfg(not(target_endian = "little"))]
fn access_bytes(accesses: &[Access]) -> std::borrow::Cow<'_, [u8]> {
    std::borrow::Cow::Owned(accesses.iter().flat_map(encode).collect())
}

/// One access as its record row.
fn encode(a: &Access) -> [u8; RECORD_SIZE] {
    let mut r = [0u8; RECORD_SIZE];
    r[R_TIME..R_TIME + 8].copy_from_slice(&a.time.to_le_bytes());
    r[R_ADDR..R_ADDR + 8].copy_from_slice(&a.addr.to_le_bytes());
    r[R_CPU..R_CPU + 4].copy_from_slice(&a.cpu.to_le_bytes());
    r[R_SIZE..R_SIZE + 2].copy_from_slice(&a.size.to_le_bytes());
    r[R_OP] = a.op.is_write() as u8;
    r[R_FLAGS] = a.flags;
    r
}

/// The version-2 descriptor that precedes frame `seq` (see `DESC_MAGIC`); `content` is the
/// frame's decompressed bytes.
fn frame_descriptor(seq: u64, records: usize, content: &[u8]) -> [u8; DESC_SIZE] {
    let mut d = [0u8; DESC_SIZE];
    d[0..4].copy_from_slice(&DESC_MAGIC.to_le_bytes());
    d[4..8].copy_from_slice(&16u32.to_le_bytes());
    d[8..16].copy_from_slice(&seq.to_le_bytes());
    d[16..20].copy_from_slice(&(records as u32).to_le_bytes());
    d[20..24].copy_from_slice(&frame_crc(seq, content).to_le_bytes());
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use tiersim_core::Op;

    /// Records as a capture makes them: the virtual ones and the same at other addresses.
    fn twins(n: usize) -> (Vec<Access>, Vec<Access>) {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let virt: Vec<Access> = (0..n)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                Access {
                    time: x % 50,
                    addr: 0x7f00_0000_0000 + (x >> 20) % (1 << 30),
                    cpu: (i % 3) as u32,
                    size: 64,
                    op: if x.is_multiple_of(5) { Op::Write } else { Op::Read },
                    flags: 0,
                }
            })
            .collect();
        let phys = virt.iter().map(|a| Access { addr: (a.addr ^ 0x7f00_0000_0000) * 3, ..*a }).collect();
        (virt, phys)
    }

    fn meta(addr_kind: AddrKind) -> TraceMeta {
        TraceMeta { time_unit: TimeUnit::Instructions, addr_kind, page_size: 4096 }
    }

    /// Two traces written with `share_planes` are byte for byte the traces written without,
    /// for frames filled whole and short, the physical records given late and in other runs.
    #[test]
    fn shared_planes_write_the_same_bytes() {
        let dir = tempfile::tempdir().unwrap();
        for (n, frame_records, lag) in
            [(0usize, 64usize, 0usize), (1, 64, 0), (1000, 64, 100), (5000, 256, 700), (4096, 1024, 1)]
        {
            let (virt, phys) = twins(n);
            let opts = WriterOptions { level: 1, frame_records, shuffle: true, background: true, ..Default::default() };
            let write = |shared: bool| -> (Vec<u8>, Vec<u8>) {
                let (vp, pp) = (dir.path().join(format!("v{shared}")), dir.path().join(format!("p{shared}")));
                let mut v = TraceWriter::create_with(&vp, meta(AddrKind::Virtual), opts).unwrap();
                let mut p = TraceWriter::create_with(&pp, meta(AddrKind::Physical), opts).unwrap();
                if shared {
                    p.trust_records();
                    share_planes(&mut v, &mut p).unwrap();
                }
                // The physical records follow the virtual ones `lag` behind, in runs of 37.
                let mut done = 0;
                for chunk in virt.chunks(100) {
                    v.write_all(chunk).unwrap();
                    let upto = (done + chunk.len()).saturating_sub(lag);
                    while done < upto {
                        let end = (done + 37).min(upto);
                        p.write_all(&phys[done..end]).unwrap();
                        done = end;
                    }
                }
                v.finish().unwrap();
                p.write_all(&phys[done..]).unwrap();
                p.finish().unwrap();
                (std::fs::read(&vp).unwrap(), std::fs::read(&pp).unwrap())
            };
            let alone = write(false);
            let shared = write(true);
            assert!(alone.0 == shared.0, "virtual trace, {n} records in frames of {frame_records}");
            assert!(alone.1 == shared.1, "physical trace, {n} records in frames of {frame_records}");
        }
    }

    /// The twin's thread reports a twin given more records than its giver.
    #[test]
    fn a_twin_with_more_records_than_its_giver_fails() {
        let dir = tempfile::tempdir().unwrap();
        let (virt, phys) = twins(300);
        let opts = WriterOptions { level: 1, frame_records: 64, shuffle: true, background: true, ..Default::default() };
        let mut v = TraceWriter::create_with(&dir.path().join("v"), meta(AddrKind::Virtual), opts).unwrap();
        let mut p = TraceWriter::create_with(&dir.path().join("p"), meta(AddrKind::Physical), opts).unwrap();
        share_planes(&mut v, &mut p).unwrap();
        v.write_all(&virt[..100]).unwrap();
        v.finish().unwrap();
        p.write_all(&phys).unwrap_or(());
        assert!(p.finish().is_err());
        assert!(!dir.path().join("p").exists());
    }
}
