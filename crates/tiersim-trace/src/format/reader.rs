//! The streaming reader: header and trailer checks at open, then frames decoded a batch of
//! records at a time, every record checked; and `inspect`.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use tiersim_core::{Access, Error, Op, Result};
use zstd::zstd_safe::{self, DCtx, DParameter, InBuffer, OutBuffer};

use super::frames::{gather1, unshuffle};
use super::*;
use crate::AccessSource;

/// Streams accesses out of a trace file, in batches (`AccessSource`) or one at a time
/// (`Iterator`). After an error it yields nothing more.
pub struct TraceReader {
    path: PathBuf,
    file: File,
    header: TraceHeader,
    /// Records carry CPUs below this.
    cpu_limit: u32,
    region_end: u64,
    /// File offset of the next byte to read into `inbuf`.
    file_pos: u64,
    /// Read-ahead of the records region; `inbuf[in_pos..in_end]` is not yet decompressed. Its
    /// length stays `IN_BUF` so that refills need not zero it.
    inbuf: Vec<u8>,
    in_end: usize,
    in_pos: usize,
    dctx: DCtx<'static>,
    filter: FrameFilter,
    /// Decompressed bytes; `out[out_pos..]` are not yet converted. When shuffled, the byte
    /// planes of the current frame only, and `out_pos` stays 0.
    out: Vec<u8>,
    out_pos: usize,
    /// Shuffled frames: records in the current frame, the next one to convert, and the frame's
    /// file offset.
    frame_records: usize,
    frame_next: usize,
    frame_at: u64,
    /// Offset of `out[0]` in the decompressed record stream.
    out_base: u64,
    in_frame: bool,
    /// (decompressed offset, file offset) where each frame that fed `out` starts.
    frames: Vec<(u64, u64)>,
    records: u64,
    prev_time: u64,
    eof: bool,
    done: bool,
    iter_buf: Vec<Access>,
    iter_pos: usize,
    /// Version 2: frames whose descriptor and checksum were checked, what the current frame's
    /// descriptor says (sequence number, records, CRC), the CRC and length of what it has
    /// decompressed to so far, and the frame count of the end block (complete files).
    v2: bool,
    frames_checked: u64,
    desc: Option<(u64, u32, u32)>,
    crc: crc32fast::Hasher,
    frame_bytes: u64,
    end_frames: Option<u64>,
}

impl TraceReader {
    /// Open a trace and check its header (and trailer, if the header says there is one).
    pub fn open(path: &Path) -> Result<TraceReader> {
        let io = |e| Error::io(path, e);
        let mut file = open_trace_file(path)?;
        let file_len = file.metadata().map_err(io)?.len();
        let mut h = Vec::with_capacity(HEADER_SIZE);
        (&mut file).take(HEADER_SIZE as u64).read_to_end(&mut h).map_err(io)?;
        let raw = parse_header(path, &h, file_len)?;
        let mut header = raw.header;
        let region_end = if raw.records_end == 0 { file_len } else { raw.records_end };
        let v2 = header.version >= 2;
        let mut end_frames = None;
        let end_len = if v2 { END_SIZE } else { 0 };
        if raw.records_end != 0 && raw.n_cpus as usize * 8 + end_len > 0 {
            let mut t = vec![0u8; raw.n_cpus as usize * 8 + end_len];
            file.seek(SeekFrom::Start(raw.records_end)).map_err(io)?;
            file.read_exact(&mut t).map_err(io)?;
            if v2 {
                let cut = t.len() - END_SIZE;
                let frames =
                    check_end_block(path, raw.records_end + cut as u64, &t[..cut], &t[cut..], header.stats.as_ref())?;
                end_frames = Some(frames);
                t.truncate(cut);
            }
            if let Some(s) = header.stats.as_mut() {
                s.per_cpu = t.chunks_exact(8).map(|c| le_u64(c, 0)).collect();
                let sum = s.per_cpu.iter().try_fold(0u64, |acc, &c| acc.checked_add(c));
                if sum != Some(s.accesses) {
                    return Err(Error::trace(
                        path,
                        raw.records_end,
                        format!("trailer per-CPU counts do not sum to the header's {} accesses", s.accesses),
                    ));
                }
            }
        }
        let complete = raw.flags & FLAG_STATS_COMPLETE != 0;
        let mut dctx = DCtx::create();
        dctx.set_parameter(DParameter::WindowLogMax(WINDOW_LOG_MAX))
            .map_err(|c| Error::Sim(format!("zstd: {}", zstd_safe::get_error_name(c))))?;
        let mut r = TraceReader {
            path: path.to_owned(),
            file,
            header,
            cpu_limit: if complete { raw.n_cpus } else { MAX_CPUS },
            region_end,
            file_pos: HEADER_SIZE as u64,
            inbuf: vec![0; IN_BUF],
            in_end: 0,
            in_pos: 0,
            dctx,
            filter: raw.filter,
            // A shuffled frame sizes the buffer itself, from its content size.
            out: Vec::with_capacity(if raw.filter == FrameFilter::None { OUT_BUF } else { 0 }),
            out_pos: 0,
            frame_records: 0,
            frame_next: 0,
            frame_at: HEADER_SIZE as u64,
            out_base: 0,
            in_frame: false,
            frames: Vec::new(),
            records: 0,
            prev_time: 0,
            eof: false,
            done: false,
            iter_buf: Vec::new(),
            iter_pos: 0,
            v2,
            frames_checked: 0,
            desc: None,
            crc: crc32fast::Hasher::new(),
            frame_bytes: 0,
            end_frames,
        };
        r.file.seek(SeekFrom::Start(HEADER_SIZE as u64)).map_err(io)?;
        r.refill_input()?;
        let first = &r.inbuf[..r.in_end.min(4)];
        let (magic, what) =
            if v2 { (DESC_MAGIC.to_le_bytes(), "a frame descriptor") } else { (ZSTD_MAGIC, "a zstd frame") };
        if first != &magic[..first.len()] {
            return Err(Error::trace(
                path,
                HEADER_SIZE as u64,
                format!(
                    "expected the records region to start with {what} (magic {}), found {}",
                    hex(&magic),
                    hex(first)
                ),
            ));
        }
        Ok(r)
    }

    /// The header as read from the file.
    pub fn header(&self) -> &TraceHeader {
        &self.header
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How the file's frames are arranged (header offset 36).
    pub fn frame_filter(&self) -> FrameFilter {
        self.filter
    }

    fn err(&self, offset: u64, msg: String) -> Error {
        Error::trace(&self.path, offset, msg)
    }

    /// Move unread input to the front of `inbuf` and read more, up to the end of the region.
    /// Returns how many bytes were read.
    fn refill_input(&mut self) -> Result<usize> {
        self.inbuf.copy_within(self.in_pos..self.in_end, 0);
        self.in_end -= self.in_pos;
        self.in_pos = 0;
        let want = ((IN_BUF - self.in_end) as u64).min(self.region_end - self.file_pos) as usize;
        if want == 0 {
            return Ok(0);
        }
        let start = self.in_end;
        self.file.read_exact(&mut self.inbuf[start..start + want]).map_err(|e| Error::io(&self.path, e))?;
        self.in_end += want;
        self.file_pos += want as u64;
        Ok(want)
    }

    fn input_file_offset(&self) -> u64 {
        self.file_pos - (self.in_end - self.in_pos) as u64
    }

    /// Check the start of the next frame, refilling input first unless the frame is whole in it
    /// (zstd decodes a whole frame straight into `out` in one pass, but must go through its own
    /// buffers otherwise). Returns the frame's file offset, or `None` at the end of the region.
    fn next_frame(&mut self) -> Result<Option<u64>> {
        self.refill_for_frame()?;
        if self.in_pos == self.in_end {
            return Ok(None);
        }
        // `fill` may have stopped before this frame after reading its descriptor (the frame did
        // not fit the window): the descriptor is then already held.
        if self.v2 && self.desc.is_none() {
            self.read_descriptor()?;
            self.refill_for_frame()?;
        }
        let rest = &self.inbuf[self.in_pos..self.in_end];
        let at = self.input_file_offset();
        if rest.is_empty() {
            return Err(self.err(at, "truncated record stream: a frame descriptor ends the records region".into()));
        }
        if rest.len() < 4 {
            return Err(self.err(
                self.region_end,
                format!("truncated record stream: {} bytes at the end are too short for a zstd frame", rest.len()),
            ));
        }
        let magic = le_u32(rest, 0);
        // Version 2 admits no skippable frames but its own descriptors.
        if rest[..4] != ZSTD_MAGIC && (self.v2 || magic & SKIPPABLE_MAGIC_MASK != SKIPPABLE_MAGIC) {
            return Err(self.err(
                at,
                format!("corrupt zstd frame: expected frame magic {}, found {}", hex(&ZSTD_MAGIC), hex(&rest[..4])),
            ));
        }
        Ok(Some(at))
    }

    /// Refill input unless a whole frame (or descriptor) is in it: zstd decodes a whole frame
    /// straight into `out` in one pass, but must go through its own buffers otherwise.
    fn refill_for_frame(&mut self) -> Result<()> {
        let avail = self.in_end - self.in_pos;
        if self.file_pos < self.region_end
            && (avail < 4 || zstd_safe::find_frame_compressed_size(&self.inbuf[self.in_pos..self.in_end]).is_err())
        {
            self.refill_input()?;
        }
        Ok(())
    }

    /// Check and consume the version-2 descriptor of the next frame.
    fn read_descriptor(&mut self) -> Result<()> {
        let rest = &self.inbuf[self.in_pos..self.in_end];
        let at = self.input_file_offset();
        let n = self.frames_checked;
        if rest.len() < DESC_SIZE {
            return Err(self.err(
                at,
                format!(
                    "truncated record stream: {} bytes at the end are too short for the descriptor of frame {n}",
                    rest.len()
                ),
            ));
        }
        if le_u32(rest, 0) != DESC_MAGIC || le_u32(rest, 4) != 16 {
            return Err(self.err(
                at,
                format!(
                    "expected the descriptor of frame {n} (skippable frame {} with 16 bytes), found {}",
                    hex(&DESC_MAGIC.to_le_bytes()),
                    hex(&rest[..8])
                ),
            ));
        }
        let seq = le_u64(rest, 8);
        if seq != n {
            return Err(self.err(
                at,
                format!("frame sequence number {seq} where frame {n} belongs: frames are out of order, duplicated or missing"),
            ));
        }
        self.desc = Some((seq, le_u32(rest, 16), le_u32(rest, 20)));
        self.crc = crc32fast::Hasher::new();
        self.crc.update(&seq.to_le_bytes());
        self.frame_bytes = 0;
        self.in_pos += DESC_SIZE;
        Ok(())
    }

    /// Version 2: add the bytes decoded into `out[from..]` to the frame's checksum, and check
    /// it against the descriptor once the frame has ended.
    fn check_frame(&mut self, from: usize, frame_at: u64) -> Result<()> {
        if !self.v2 {
            return Ok(());
        }
        self.crc.update(&self.out[from..]);
        self.frame_bytes += (self.out.len() - from) as u64;
        if self.in_frame {
            return Ok(());
        }
        let Some((seq, records, want)) = self.desc.take() else {
            return Err(self.err(frame_at, "a zstd frame without a descriptor".into()));
        };
        let got = std::mem::replace(&mut self.crc, crc32fast::Hasher::new()).finalize();
        if self.frame_bytes != records as u64 * RECORD_SIZE as u64 {
            return Err(self.err(
                frame_at,
                format!(
                    "frame {seq} decompresses to {} bytes, but its descriptor says {records} records ({} bytes)",
                    self.frame_bytes,
                    records as u64 * RECORD_SIZE as u64
                ),
            ));
        }
        if got != want {
            return Err(self.err(
                frame_at,
                format!(
                    "frame {seq} checksum mismatch: the descriptor says {want:#010x}, its records give {got:#010x}"
                ),
            ));
        }
        self.frames_checked += 1;
        Ok(())
    }

    /// Content size the next frame declares, if any.
    fn next_frame_size(&self) -> Option<u64> {
        zstd_safe::get_frame_content_size(&self.inbuf[self.in_pos..self.in_end]).ok().flatten()
    }

    /// Decompress part of the frame at `frame_at` into the spare capacity of `out` (which must
    /// have some), clearing `in_frame` when the frame ends.
    fn decompress_step(&mut self, frame_at: u64) -> Result<()> {
        if self.in_pos == self.in_end && self.refill_input()? == 0 {
            // Input is exhausted mid-frame: zstd may still hold decoded bytes to flush.
            let before = self.out.len();
            let mut input = InBuffer::around(&[]);
            let mut output = OutBuffer::around_pos(&mut self.out, before);
            let res = self.dctx.decompress_stream(&mut output, &mut input);
            return match res {
                Ok(0) => {
                    self.in_frame = false;
                    self.check_frame(before, frame_at)
                }
                Ok(_) if self.out.len() > before => self.check_frame(before, frame_at),
                Ok(_) => Err(self.err(
                    self.region_end,
                    format!("truncated record stream: the zstd frame at offset {frame_at} ends early"),
                )),
                Err(c) => Err(self.corrupt(frame_at, c)),
            };
        }
        let mut input = InBuffer::around(&self.inbuf[self.in_pos..self.in_end]);
        let filled = self.out.len();
        let mut output = OutBuffer::around_pos(&mut self.out, filled);
        let res = self.dctx.decompress_stream(&mut output, &mut input);
        self.in_pos += input.pos();
        match res {
            Ok(0) => self.in_frame = false,
            Ok(_) => {}
            Err(c) => return Err(self.corrupt(frame_at, c)),
        }
        self.check_frame(filled, frame_at)
    }

    /// Decompress more records into `out` after moving its unconverted tail to the front
    /// (frame filter 0).
    fn fill(&mut self) -> Result<()> {
        let tail = self.out.len() - self.out_pos;
        self.out.copy_within(self.out_pos.., 0);
        self.out.truncate(tail);
        self.out_base += self.out_pos as u64;
        self.out_pos = 0;
        let keep = self.frames.iter().rposition(|&(u, _)| u <= self.out_base).unwrap_or(0);
        self.frames.drain(..keep);

        while !self.eof && self.out.capacity() - self.out.len() >= RECORD_SIZE {
            if !self.in_frame {
                let Some(at) = self.next_frame()? else {
                    self.eof = true;
                    break;
                };
                // Stop before a frame that would not fit whole, so it too decodes in one pass.
                if let Some(size) = self.next_frame_size() {
                    let spare = (self.out.capacity() - self.out.len()) as u64;
                    if size > spare && self.out.len() >= RECORD_SIZE {
                        break;
                    }
                }
                self.in_frame = true;
                self.frames.push((self.out_base + self.out.len() as u64, at));
            }
            let frame_at = self.frames.last().map_or(HEADER_SIZE as u64, |f| f.1);
            self.decompress_step(frame_at)?;
        }
        Ok(())
    }

    /// Decompress the next frame that holds records, whole, into `out` (frame filter 1).
    fn fill_frame(&mut self) -> Result<()> {
        self.out.clear();
        self.frame_records = 0;
        self.frame_next = 0;
        while !self.eof {
            if !self.in_frame {
                let Some(at) = self.next_frame()? else {
                    self.eof = true;
                    break;
                };
                self.frame_at = at;
                if let Some(size) = self.next_frame_size() {
                    if size > MAX_FRAME_BYTES as u64 {
                        return Err(self.frame_too_large(format!("declares {size} bytes")));
                    }
                    self.out.reserve_exact(size as usize);
                }
                self.in_frame = true;
            }
            if self.out.len() == self.out.capacity() {
                // Frames without a content size grow the buffer; one byte over the bound is
                // room enough to tell an oversized frame from one that is exactly at the bound.
                let cap = (self.out.capacity() * 2).clamp(1 << 16, MAX_FRAME_BYTES + 1);
                self.out.reserve_exact(cap - self.out.len());
            }
            self.decompress_step(self.frame_at)?;
            if self.out.len() > MAX_FRAME_BYTES {
                return Err(self.frame_too_large("decompresses to more".into()));
            }
            if !self.in_frame && !self.out.is_empty() {
                break;
            }
        }
        if !self.out.len().is_multiple_of(RECORD_SIZE) {
            return Err(self.err(
                self.frame_at,
                format!(
                    "the byte-shuffled zstd frame at this offset decompresses to {} bytes, not a whole number of {RECORD_SIZE}-byte records",
                    self.out.len()
                ),
            ));
        }
        self.frame_records = self.out.len() / RECORD_SIZE;
        Ok(())
    }

    fn frame_too_large(&self, what: String) -> Error {
        self.err(
            self.frame_at,
            format!(
                "the byte-shuffled zstd frame at this offset {what}; a frame may hold at most {MAX_FRAME_BYTES} bytes ({MAX_FRAME_RECORDS} records)"
            ),
        )
    }

    fn corrupt(&self, frame_at: u64, code: usize) -> Error {
        self.err(frame_at, format!("corrupt zstd frame: {}", zstd_safe::get_error_name(code)))
    }

    /// File offset of the frame that decoded the byte at decompressed offset `u`.
    fn frame_of(&self, u: u64) -> u64 {
        self.frames.iter().rev().find(|&&(s, _)| s <= u).map_or(HEADER_SIZE as u64, |f| f.1)
    }

    /// Check and convert up to `max` whole records from `out`.
    fn convert(&mut self, dst: &mut Vec<Access>, max: usize) -> Result<usize> {
        let n = ((self.out.len() - self.out_pos) / RECORD_SIZE).min(max);
        let bytes = &self.out[self.out_pos..self.out_pos + n * RECORD_SIZE];
        let cpu_limit = self.cpu_limit;
        let ns = self.header.time_unit == TimeUnit::Ns;
        let mut prev = self.prev_time;
        let mut bad = false;
        let start = dst.len();
        dst.reserve(n);
        dst.extend(bytes.chunks_exact(RECORD_SIZE).map(|r| {
            let time = le_u64(r, R_TIME);
            let cpu = le_u32(r, R_CPU);
            let size = le_u16(r, R_SIZE);
            let op = r[R_OP];
            let flags = r[R_FLAGS];
            bad |= (op > 1)
                | (flags & !Access::KNOWN_FLAGS != 0)
                | (size == 0)
                | (cpu >= cpu_limit)
                | (ns & (time < prev));
            prev = time;
            Access { time, addr: le_u64(r, R_ADDR), cpu, size, op: if op == 1 { Op::Write } else { Op::Read }, flags }
        }));
        if bad {
            dst.truncate(start);
            return Err(self.record_error(n));
        }
        if let Some(s) = &self.header.stats {
            if self.records + n as u64 > s.accesses {
                dst.truncate(start);
                return Err(self.err(
                    self.frame_of(self.out_base + self.out_pos as u64),
                    format!("the record stream holds more records than the header's {} accesses", s.accesses),
                ));
            }
        }
        self.prev_time = prev;
        self.out_pos += n * RECORD_SIZE;
        self.records += n as u64;
        Ok(n)
    }

    /// What is wrong with a record, given the previous record's time.
    fn record_problem(&self, time: u64, cpu: u32, size: u16, op: u8, flags: u8, prev: u64) -> Option<String> {
        if op > 1 {
            return Some(format!("invalid op byte {op}; expected 0 (read) or 1 (write)"));
        }
        if flags & !Access::KNOWN_FLAGS != 0 {
            return Some(format!("invalid flags byte {flags:#04x}; only bit 0 (file-backed page), bit 1 (file system call), bit 2 (O_DIRECT call) and bit 3 (not an access: a file mapping, file sync or futex record) are defined"));
        }
        if size == 0 {
            return Some("size 0; every access moves at least one byte".into());
        }
        if cpu >= self.cpu_limit {
            return Some(if self.cpu_limit == MAX_CPUS {
                format!("cpu {cpu} is above the maximum {}", MAX_CPUS - 1)
            } else {
                format!("cpu {cpu} is not below the header's n_cpus {}", self.cpu_limit)
            });
        }
        if self.header.time_unit == TimeUnit::Ns && time < prev {
            return Some(format!("time {time} ns is before the previous record's {prev} ns; ns traces must be sorted"));
        }
        None
    }

    /// Find and describe the first bad record among the next `n`.
    fn record_error(&self, n: usize) -> Error {
        let mut prev = self.prev_time;
        for i in 0..n {
            let at = self.out_pos + i * RECORD_SIZE;
            let r = &self.out[at..at + RECORD_SIZE];
            let time = le_u64(r, R_TIME);
            if let Some(m) = self.record_problem(time, le_u32(r, R_CPU), le_u16(r, R_SIZE), r[R_OP], r[R_FLAGS], prev) {
                let u = self.out_base + at as u64;
                let index = self.records + i as u64;
                return self.err(
                    self.frame_of(u),
                    format!(
                        "record {index} (byte {u} of the decompressed records, in the zstd frame at this offset): {m}"
                    ),
                );
            }
            prev = time;
        }
        self.err(self.frame_of(self.out_base), "invalid record".into())
    }

    /// Check and convert up to `max` records of the current shuffled frame.
    fn convert_shuffled(&mut self, dst: &mut Vec<Access>, max: usize) -> Result<usize> {
        let n = (self.frame_records - self.frame_next).min(max);
        let planes = &self.out[..self.frame_records * RECORD_SIZE];
        let start = dst.len();
        dst.reserve(n);
        let mut prev = self.prev_time;
        let ok = unshuffle(
            planes,
            self.frame_next,
            &mut dst.spare_capacity_mut()[..n],
            self.cpu_limit,
            self.header.time_unit == TimeUnit::Ns,
            &mut prev,
        );
        if !ok {
            return Err(self.shuffled_record_error(n));
        }
        if let Some(s) = &self.header.stats {
            if self.records + n as u64 > s.accesses {
                return Err(self.err(
                    self.frame_at,
                    format!("the record stream holds more records than the header's {} accesses", s.accesses),
                ));
            }
        }
        // SAFETY: `unshuffle` returned true, so it initialised all of the `n` spare slots.
        unsafe { dst.set_len(start + n) };
        self.prev_time = prev;
        self.frame_next += n;
        self.records += n as u64;
        Ok(n)
    }

    /// Find and describe the first bad record among the next `n` of the shuffled frame.
    fn shuffled_record_error(&self, n: usize) -> Error {
        let planes = &self.out[..self.frame_records * RECORD_SIZE];
        let mut prev = self.prev_time;
        for j in self.frame_next..self.frame_next + n {
            let r = gather1(planes, self.frame_records, j);
            let time = le_u64(&r, R_TIME);
            if let Some(m) = self.record_problem(time, le_u32(&r, R_CPU), le_u16(&r, R_SIZE), r[R_OP], r[R_FLAGS], prev)
            {
                let index = self.records + (j - self.frame_next) as u64;
                return self.err(
                    self.frame_at,
                    format!("record {index} (record {j} of the byte-shuffled zstd frame at this offset): {m}"),
                );
            }
            prev = time;
        }
        self.err(self.frame_at, "invalid record".into())
    }

    fn read_inner(&mut self, dst: &mut Vec<Access>, max: usize) -> Result<usize> {
        let mut got = 0;
        if self.iter_pos < self.iter_buf.len() {
            let take = (self.iter_buf.len() - self.iter_pos).min(max);
            dst.extend_from_slice(&self.iter_buf[self.iter_pos..self.iter_pos + take]);
            self.iter_pos += take;
            got += take;
        }
        while got < max && !self.done {
            match self.filter {
                FrameFilter::None => {
                    if self.out.len() - self.out_pos < RECORD_SIZE {
                        if self.eof {
                            return self.finish_stream().map(|()| got);
                        }
                        self.fill()?;
                        continue;
                    }
                    got += self.convert(dst, max - got)?;
                }
                FrameFilter::Shuffle => {
                    if self.frame_next == self.frame_records {
                        if self.eof {
                            return self.finish_stream().map(|()| got);
                        }
                        self.fill_frame()?;
                        continue;
                    }
                    got += self.convert_shuffled(dst, max - got)?;
                }
            }
        }
        Ok(got)
    }

    fn finish_stream(&mut self) -> Result<()> {
        self.done = true;
        // Shuffled frames are checked for whole records as each is decoded.
        let tail = if self.filter == FrameFilter::None { self.out.len() - self.out_pos } else { 0 };
        if tail > 0 {
            return Err(self.err(
                self.region_end,
                format!(
                    "partial record at the end of the record stream: {tail} bytes after record {}; records are {RECORD_SIZE} bytes",
                    self.records
                ),
            ));
        }
        if self.in_frame {
            return Err(self.err(self.region_end, "truncated record stream: the last zstd frame ends early".into()));
        }
        if let Some(s) = &self.header.stats {
            if s.accesses != self.records {
                return Err(self.err(
                    self.region_end,
                    format!("truncated record stream: {} records, but the header says {}", self.records, s.accesses),
                ));
            }
        }
        if let Some(n) = self.end_frames {
            if n != self.frames_checked {
                return Err(self.err(
                    self.region_end,
                    format!("the end block says {n} frames, the records region holds {}", self.frames_checked),
                ));
            }
        }
        Ok(())
    }
}

impl AccessSource for TraceReader {
    fn header(&self) -> &TraceHeader {
        &self.header
    }

    fn read_batch(&mut self, out: &mut Vec<Access>, max: usize) -> Result<usize> {
        let r = self.read_inner(out, max);
        if r.is_err() {
            self.done = true;
            self.iter_buf.clear();
            self.iter_pos = 0;
        }
        r
    }
}

impl Iterator for TraceReader {
    type Item = Result<Access>;

    fn next(&mut self) -> Option<Result<Access>> {
        if self.iter_pos == self.iter_buf.len() {
            let mut buf = std::mem::take(&mut self.iter_buf);
            buf.clear();
            self.iter_pos = 0;
            let r = self.read_batch(&mut buf, 4096);
            self.iter_buf = buf;
            match r {
                Ok(0) => return None,
                Ok(_) => {}
                Err(e) => return Some(Err(e)),
            }
        }
        let a = self.iter_buf[self.iter_pos];
        self.iter_pos += 1;
        Some(Ok(a))
    }
}

/// Header and statistics of a trace as JSON (see `crate::inspect`). The statistics are the
/// header's own, unverified, when it has them (`"verified": false`); see `verify`.
pub fn inspect(path: &Path) -> Result<serde_json::Value> {
    inspect_with(path, false)
}

/// As `inspect`, but every frame is decoded and checked and the statistics are recomputed from
/// the records; an error when the header's statistics or per-CPU counts disagree with them.
pub fn verify(path: &Path) -> Result<serde_json::Value> {
    inspect_with(path, true)
}

fn inspect_with(path: &Path, verify: bool) -> Result<serde_json::Value> {
    let mut r = TraceReader::open(path)?;
    let file_len = std::fs::metadata(path).map_err(|e| Error::io(path, e))?.len();
    let h = r.header().clone();
    let scan = |r: &mut TraceReader| -> Result<TraceStats> {
        let mut b = StatsBuilder::new(h.time_unit, h.page_size);
        crate::for_each_access(r, |a| {
            b.add(a);
            Ok(())
        })?;
        Ok(b.finish())
    };
    let (stats, source) = match h.stats.clone() {
        Some(s) if !verify => (s, "header"),
        Some(s) => {
            let got = scan(&mut r)?;
            if let Some(m) = stats_mismatch(&s, &got) {
                return Err(Error::trace(
                    path,
                    H_ACCESSES as u64,
                    format!("header statistics disagree with the records: {m}"),
                ));
            }
            (got, "header, verified")
        }
        None => (scan(&mut r)?, "scan"),
    };
    let verified = source != "header";
    let bytes_per_access = (stats.accesses > 0).then(|| file_len as f64 / stats.accesses as f64);
    Ok(serde_json::json!({
        "path": path.display().to_string(),
        "version": h.version,
        "record_layout": h.record_layout,
        "frame_filter": r.frame_filter(),
        "time_unit": h.time_unit,
        "addr_kind": h.addr_kind,
        "v2p": h.v2p,
        "page_size": h.page_size,
        "stats_source": source,
        "verified": verified,
        "frames_checked": (verified && h.version >= 2).then_some(r.frames_checked),
        "accesses": stats.accesses,
        "reads": stats.reads,
        "writes": stats.writes,
        "bytes": stats.bytes,
        "footprint_pages": stats.footprint_pages,
        "footprint_bytes": stats.footprint_pages.saturating_mul(h.page_size as u64),
        "time_first": stats.time_first,
        "time_last": stats.time_last,
        "time_span": stats.time_last.saturating_sub(stats.time_first),
        "per_cpu": stats.per_cpu,
        "compressed_bytes": file_len,
        "bytes_per_access": bytes_per_access,
    }))
}

/// Check a version-2 end block at file offset `at`, after the per-CPU counts `per_cpu`; returns
/// the frame count it records.
fn check_end_block(path: &Path, at: u64, per_cpu: &[u8], block: &[u8], stats: Option<&TraceStats>) -> Result<u64> {
    let err = |off: usize, msg: String| Error::trace(path, at + off as u64, msg);
    if block[..8] != END_MAGIC {
        return Err(err(0, format!("expected the end block (magic {}), found {}", hex(&END_MAGIC), hex(&block[..8]))));
    }
    let (frames, records) = (le_u64(block, 8), le_u64(block, 16));
    let want = end_block(per_cpu, frames, records);
    if block[24..28] != want[24..28] {
        return Err(err(24, "end block checksum mismatch: the per-CPU counts or the totals are corrupt".into()));
    }
    if block[28..] != [0; 4] {
        return Err(err(28, format!("reserved end block bytes are {}; they must be zero", hex(&block[28..]))));
    }
    if let Some(s) = stats {
        if records != s.accesses {
            return Err(err(16, format!("the end block says {records} records, the header {} accesses", s.accesses)));
        }
    }
    Ok(frames)
}

/// The first field where a header's statistics differ from those of the records.
fn stats_mismatch(header: &TraceStats, records: &TraceStats) -> Option<String> {
    let fields = [
        ("accesses", header.accesses, records.accesses),
        ("reads", header.reads, records.reads),
        ("writes", header.writes, records.writes),
        ("bytes", header.bytes, records.bytes),
        ("footprint_pages", header.footprint_pages, records.footprint_pages),
        ("time_first", header.time_first, records.time_first),
        ("time_last", header.time_last, records.time_last),
    ];
    if let Some((k, a, b)) = fields.iter().find(|(_, a, b)| a != b) {
        return Some(format!("{k} is {a} in the header, {b} in the records"));
    }
    (header.per_cpu != records.per_cpu).then(|| {
        format!("the trailer's per-CPU counts {:?} are not the records' {:?}", header.per_cpu, records.per_cpu)
    })
}
