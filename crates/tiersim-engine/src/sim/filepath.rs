//! The file access paths of the event loop, composed from the page cache (`os::filemap::FileIo`),
//! the allocator, the LRU lists and the block device: read(2)/write(2) through the page cache,
//! O_DIRECT calls, DAX, mapping records and faults through a file mapping (mm/filemap.c; the
//! page cache's own header says what each follows).

use tiersim_core::{Access, Error, Ns, Op, Result};
use tiersim_devices::DeviceRequest;

use std::collections::BTreeMap;

use super::Engine;
use crate::os::filemap::{FileMap, Stream, MMAP_LOTSAMISS};
use crate::os::page_runs;
use crate::os::workingset;
use crate::pagetable::{CHUNK, CHUNK_SHIFT, DIRTY, DROPPED, FILE, LOCKED, REFERENCED, UNMAPPED, UNTOUCHED};
use crate::storage::iopath::{Driver, FS_BLOCK};
use crate::storage::pagecache::{init_ra_size, next_ra_size};

/// The DAX path's one request builder: a call's copy, the zeroing of the blocks it allocates
/// and the journal's writes all go to the DAX device from CPU `c` (on its socket). The address
/// (a file offset standing in for the trace address) is folded into the 48 bits of an x86-64
/// virtual address, so that no device sees one near the top of u64; the journal's area sits
/// below 2^48 already.
#[inline]
fn dax_request(now: Ns, addr: u64, bytes: u64, op: Op, socket: u16, c: usize) -> DeviceRequest {
    DeviceRequest { now, addr: addr & ((1 << 48) - 1), size: bytes as u32, op, socket, cpu: c as u32, remote: false }
}

impl Engine {
    /// A file access the page cache of the OS model does not serve as a plain load or store: a
    /// mapping record, a system call, or any file access when the files are on DAX. Completes the access, or asks
    /// for it to be issued again after a DAX fault (`Ok(Some(ps))`).
    pub(crate) fn file_access(&mut self, c: usize, a: Access, issue_ps: u64) -> Result<Option<u64>> {
        if a.is_sync() {
            return self.sync_record(c, a, issue_ps);
        }
        if a.is_size() {
            return self.size_record(c, a, issue_ps);
        }
        if a.is_map() {
            return self.map_record(c, a, issue_ps);
        }
        if a.is_direct() && !(a.is_syscall() && a.is_file()) {
            return Err(Error::Sim(format!(
                "access #{}: flags {:#04x} mark an O_DIRECT call (bit 2) without bits 0 and 1 (a system call on a file)",
                self.processed, a.flags
            )));
        }
        // DAX serves O_DIRECT calls like any other (ext4_file_read_iter tests IS_DAX first).
        // With `dax.files` only the files it lists are there: the others are on the block device.
        if self.files.on_dax(a.addr >> self.mem.page_shift) {
            return self.dax_access(c, a, issue_ps);
        }
        let done = if a.is_direct() {
            self.direct_io(c, a, issue_ps / 1000)?
        } else {
            self.buffered_io(c, a, issue_ps / 1000)?
        };
        self.finish_call(c, a, issue_ps, done);
        Ok(None)
    }

    /// A system call issued at `issue_ps` returns at `done`: the CPU waited for all of it.
    fn finish_call(&mut self, c: usize, a: Access, issue_ps: u64, done: Ns) {
        let end_ps = (done * 1000).max(issue_ps);
        if self.measuring {
            self.files.stats.io_time_ps += end_ps - issue_ps;
            self.max_completion_ns = self.max_completion_ns.max(done);
        }
        self.retire(c, a, issue_ps, end_ps);
    }

    /// The access is done; the CPU goes on at `end_ps` (closed loop) or at its trace times.
    pub(super) fn retire(&mut self, c: usize, a: Access, issue_ps: u64, end_ps: u64) {
        let cpu = &mut self.cpus[c];
        cpu.clock_ps = if self.open_loop { issue_ps } else { end_ps };
        cpu.prev_trace_time = a.time;
        cpu.started = true;
        cpu.done += 1;
        self.processed += 1;
    }

    /// The pages `(first, last)` of a call and its end byte, after the checks every call needs.
    fn call_range(&self, a: &Access) -> Result<(u64, u64, u64)> {
        if self.swap.is_none() {
            return Err(Error::Sim(format!(
                "access #{}: a read/write system call on a file, but the platform has no block device for files: \
                 add a [swap] section (its device holds the files) or put the files on [dax]",
                self.processed
            )));
        }
        let Some(end_byte) = a.addr.checked_add(a.size as u64).filter(|&e| e < u64::MAX - self.mem.page_size) else {
            return Err(Error::Sim(format!(
                "access #{}: a system call of {} bytes at {:#x} runs past the end of the address space",
                self.processed, a.size, a.addr
            )));
        };
        Ok((a.addr >> self.mem.page_shift, (end_byte - 1) >> self.mem.page_shift, end_byte))
    }

    /// The page-table slot of file page `vpn` of a call; an error if the trace used it as
    /// anonymous memory.
    fn file_page(&mut self, vpn: u64) -> Result<u32> {
        let p = self.mem.pt.slot(vpn)?;
        let e = self.mem.pt.entries[p as usize];
        if e.node != UNTOUCHED && e.node != DROPPED && e.flags & FILE == 0 {
            return Err(Error::Sim(format!(
                "access #{}: a read/write system call on page {vpn:#x}, which the trace used as anonymous memory; \
                 file calls and mappings must use addresses of their own",
                self.processed
            )));
        }
        Ok(p)
    }

    /// filemap_read / generic_perform_write over the pages of the call; returns when it ends.
    fn buffered_io(&mut self, c: usize, a: Access, t: Ns) -> Result<Ns> {
        let (first, last, end_byte) = self.call_range(&a)?;
        let io = self.files.path;
        let write = a.op.is_write();
        let mut at = t + io.syscall + io.vfs;
        for vpn in first..=last {
            at += io.page_cache_lookup;
            let p = self.file_page(vpn)?;
            let lo = a.addr.max(vpn << self.mem.page_shift);
            let bytes = end_byte.min((vpn + 1) << self.mem.page_shift) - lo;
            let e = self.mem.pt.entries[p as usize];
            // The page lies in a hole of the file (`FileIo::new_page`), cached or not: a write
            // dirties it with its block delayed-allocated, which its writeback allocates.
            let hole = write && self.files.new_page(vpn, self.mem.page_shift);
            if e.node >= DROPPED {
                if e.node == UNTOUCHED {
                    self.mem.pt.touched += 1;
                }
                self.files.stats.misses += 1;
                if write {
                    workingset::forget(&mut self.mem, &self.lru, p);
                }
                // A write of part of a page the file has no data in reads nothing either (with
                // `cache_new_pages`: at or past the file's traced end before this call, or, with
                // "size_at_open" and the file's size record, wholly past what the file held at
                // open and not written by the trace since: `FileIo::new_page`): ext4_da_write_begin -> ext4_block_write_begin (fs/ext4/inode.c; the
                // generic __block_write_begin_int in fs/buffer.c does the same) finds the
                // page's block unmapped past i_size, get_block maps it new (a delayed
                // allocation, or an unwritten extent), and a new buffer has the part the write
                // will not cover zeroed (zero_user_segments) instead of read; only a mapped,
                // written block is read (ll_rw_block). The same holds below i_size for a block
                // the file never wrote (a hole, or an unwritten extent of fallocate): get_block
                // maps it new all the same. Deviation: the zeroing is not charged beyond
                // page_alloc, as a whole-page write's is not.
                if hole && bytes < self.mem.page_size {
                    self.files.stats.new_partial_pages += 1;
                }
                at = if write && (bytes == self.mem.page_size || hole) {
                    // A whole-page write reads nothing first (ext4_write_begin finds no partial
                    // page to bring up to date).
                    let (_, reclaim_ps) = self.alloc(p, c, vpn, at, FILE)?;
                    at + io.page_alloc + reclaim_ps / 1000
                } else {
                    self.sync_readahead(c, vpn, last - vpn + 1, at)?
                };
                // In the page cache, not mapped: a later load or store through a mapping takes
                // a minor fault.
                let f = &mut self.mem.pt.entries[p as usize].flags;
                *f = (*f & !REFERENCED) | UNMAPPED;
            } else {
                self.files.stats.hits += 1;
                at = self.files.uptodate_at(p, at);
                if self.files.streams[c].marker() == Some(vpn) {
                    // The page stays locked while the window's allocations may reclaim.
                    self.mem.pt.entries[p as usize].flags |= LOCKED;
                    at = self.async_readahead(c, at)?;
                }
            }
            // The copy between the user buffer and the cached page, on the page's node.
            let e = self.mem.pt.entries[p as usize];
            let node = e.node as usize;
            let addr = ((e.frame as u64) << self.mem.page_shift) | (lo & (self.mem.page_size - 1));
            let socket = self.cpus[c].socket;
            let remote = socket != self.mem.nodes[node].spec.socket;
            let done = self.mem.nodes[node].dev.access(&DeviceRequest {
                now: at,
                addr,
                size: bytes as u32,
                op: a.op,
                socket,
                cpu: c as u32,
                remote,
            });
            at = done + self.penalty[self.cpus[c].node as usize * self.mem.nodes.len() + node];
            self.mem.pt.entries[p as usize].flags &= !LOCKED;
            if write {
                at += io.write_page;
                if e.flags & DIRTY == 0 {
                    self.mem.pt.entries[p as usize].flags |= DIRTY;
                    let until = self.file_dirtied(c, p, at);
                    self.files.stats.throttle_ps += (until - at) * 1000;
                    at = until;
                }
                if hole {
                    self.files.delay_allocation(p, vpn);
                }
            }
            // Calls mark the page, not a PTE young bit (filemap_read, generic_perform_write).
            self.mark_page_accessed(p, node);
        }
        self.files.streams[c].prev = Some(last);
        self.files.cache_reached(first, end_byte);
        if write {
            self.files.cache_written(first, last);
        }
        let s = &mut self.files.stats;
        if write {
            s.write_calls += 1;
            s.bytes_written += a.size as u64;
        } else {
            s.read_calls += 1;
            s.bytes_read += a.size as u64;
        }
        Ok(at)
    }

    /// An O_DIRECT call, as __iomap_dio_rw (fs/iomap/direct-io.c, Linux 5.15) runs it for ext4:
    /// dirty cached pages of the range are written back and waited for
    /// (filemap_write_and_wait_range), a write then drops the range's cached pages
    /// (invalidate_inode_pages2_range, a page-cache lookup each) so later buffered reads and
    /// mappings read the new data; then the data moves between the device and the user buffer
    /// in requests of up to max_request, each through the extent lookup, block layer and driver
    /// (the same layers as `tiersim filebench`'s direct mode), and the caller sleeps until the
    /// last completes. Nothing is added to the page cache, and the readahead state is left
    /// alone. Deviations: pinning the user pages (bio_iov_iter_get_pages) is not charged;
    /// misaligned calls, which the kernel refuses with EINVAL, are served; pages already under
    /// the flusher's writeback are not waited for.
    fn direct_io(&mut self, c: usize, a: Access, t: Ns) -> Result<Ns> {
        let (first, last, end_byte) = self.call_range(&a)?;
        let io = self.files.path;
        let write = a.op.is_write();
        let (block, driver, completion) = io.request_overhead(Driver::Nvme);
        let per_request = (io.max_request / self.mem.page_size).max(1);
        let socket = self.cpus[c].socket;
        let mut at = t + io.syscall + io.vfs;
        let mut slots = Vec::with_capacity((last - first + 1) as usize);
        for vpn in first..=last {
            slots.push(self.file_page(vpn)?);
        }
        let dirty: Vec<u32> =
            slots.iter().copied().filter(|&p| self.mem.pt.entries[p as usize].flags & DIRTY != 0).collect();
        if !dirty.is_empty() {
            at += io.fs_map;
            let mut done = at;
            let swap = self.swap.as_mut().expect("call_range checks for a block device");
            for run in page_runs(&dirty, per_request) {
                at += block + driver;
                let req = DeviceRequest {
                    now: at,
                    addr: dirty[run.start] as u64 * self.mem.page_size,
                    size: (run.len() as u64 * self.mem.page_size) as u32,
                    op: Op::Write,
                    socket,
                    cpu: c as u32,
                    remote: false,
                };
                done = done.max(swap.dev.access(&req));
                self.files.stats.write_requests += 1;
            }
            at = done.max(at) + completion;
            self.files.clean(&mut self.mem.pt, &dirty);
            self.files.stats.wb_direct += dirty.len() as u64;
        }
        if write {
            // Blocks in holes are allocated by the call (ext4_iomap_alloc), in the running
            // transaction, which the file's next fsync or fdatasync commits (`block_journal_commit`).
            if (first..=last).any(|v| self.files.new_page(v, self.mem.page_shift)) {
                self.files.allocate_now(first);
            }
            for &p in &slots {
                let e = self.mem.pt.entries[p as usize];
                if e.node >= DROPPED {
                    continue;
                }
                at += io.page_cache_lookup;
                let node = e.node as usize;
                self.lru_del(node, p);
                self.files.evict(&mut self.mem, p, node);
                self.files.stats.direct_invalidated += 1;
            }
        }
        // The data: runs of consecutive file pages, split at max_request, each from its first
        // byte in the call to its last.
        let swap = self.swap.as_mut().expect("call_range checks for a block device");
        let mut done = at;
        let mut requests = 0;
        for run in page_runs(&slots, per_request) {
            let lo = a.addr.max((first + run.start as u64) << self.mem.page_shift);
            let hi = end_byte.min((first + run.end as u64) << self.mem.page_shift);
            let addr = slots[run.start] as u64 * self.mem.page_size + (lo & (self.mem.page_size - 1));
            at += io.fs_map + block + driver;
            done = done.max(swap.dev.access(&DeviceRequest {
                now: at,
                addr,
                size: (hi - lo) as u32,
                op: a.op,
                socket,
                cpu: c as u32,
                remote: false,
            }));
            requests += 1;
        }
        self.files.cache_reached(first, end_byte);
        if write {
            self.files.cache_written(first, last);
        }
        let s = &mut self.files.stats;
        s.direct_requests += requests;
        if write {
            s.direct_writes += 1;
            s.direct_bytes_written += a.size as u64;
        } else {
            s.direct_reads += 1;
            s.direct_bytes_read += a.size as u64;
        }
        Ok(done.max(at) + completion)
    }

    /// page_cache_sync_ra on a miss at `vpn` of a call wanting `want` pages from there
    /// (ondemand_readahead): a sequential stream starts or grows its window, the part beyond the
    /// call read asynchronously-marked; a random read reads only what it asks. Returns when the
    /// page at `vpn` is there.
    fn sync_readahead(&mut self, c: usize, vpn: u64, want: u64, at: Ns) -> Result<Ns> {
        let max = self.files.ra_pages;
        let s = &mut self.files.streams[c];
        let sequential = s.prev.is_none_or(|p| p + 1 == vpn || p == vpn);
        let (start, size) = if sequential {
            let size =
                if s.size > 0 && s.start + s.size == vpn { next_ra_size(s.size, max) } else { init_ra_size(want, max) };
            let size = size.max(want);
            (s.start, s.size, s.async_size) = (vpn, size, size - want);
            (vpn, size)
        } else {
            // "Standalone, small random read": read as is, leave the state alone.
            (vpn, want)
        };
        let size = size.min(self.files.file_end(start) - start);
        self.read_window(c, start, size, Some(vpn), at)
    }

    /// page_cache_async_ra on a hit of the PG_readahead page: the next window, twice as large
    /// up to read_ahead_kb, read without waiting. Returns when the submission is done.
    fn async_readahead(&mut self, c: usize, at: Ns) -> Result<Ns> {
        let max = self.files.ra_pages;
        let s = &mut self.files.streams[c];
        let (start, size) = (s.start + s.size, next_ra_size(s.size.max(1), max));
        (s.start, s.size, s.async_size) = (start, size, size);
        let size = size.min(self.files.file_end(start).saturating_sub(start));
        self.read_window(c, start, size, None, at)
    }

    /// Read the missing pages of `[start, start + size)` into the page cache: each is allocated
    /// on the LRU like any page (reclaim included), runs of consecutive pages go as block
    /// requests of up to max_request. With `wait` (the page the caller needs, kept locked), the
    /// caller sleeps until the reads complete; otherwise it only pays the submission.
    fn read_window(&mut self, c: usize, start: u64, size: u64, wait: Option<u64>, at: Ns) -> Result<Ns> {
        let io = self.files.path;
        let per_request = (io.max_request / self.mem.page_size).max(1);
        let mut missing = Vec::new();
        let mut cpu = 0;
        for v in start..start + size {
            let p = self.mem.pt.slot(v)?;
            let node = self.mem.pt.entries[p as usize].node;
            if node != UNTOUCHED && node != DROPPED {
                continue;
            }
            if node == UNTOUCHED {
                self.mem.pt.touched += 1;
            }
            let (_, reclaim_ps) = self.alloc(p, c, v, at + cpu, FILE)?;
            cpu += io.page_alloc + reclaim_ps / 1000;
            if Some(v) != wait {
                let f = &mut self.mem.pt.entries[p as usize].flags;
                *f = (*f & !(LOCKED | REFERENCED)) | UNMAPPED;
                self.files.stats.readahead_pages += 1;
            }
            missing.push(p);
        }
        self.files.stats.pages_read += missing.len() as u64;
        let (block, driver, completion) = io.request_overhead(Driver::Nvme);
        let mut submit = at + cpu + io.fs_map;
        let mut done = submit;
        let swap = self.swap.as_mut().expect("buffered_io checks for a block device");
        let mut requests = 0;
        for run in page_runs(&missing, per_request) {
            submit += block + driver;
            let req = DeviceRequest {
                now: submit,
                addr: missing[run.start] as u64 * self.mem.page_size,
                size: (run.len() as u64 * self.mem.page_size) as u32,
                op: Op::Read,
                socket: self.cpus[c].socket,
                cpu: c as u32,
                remote: false,
            };
            let end = swap.dev.access(&req);
            done = done.max(end);
            requests += 1;
            if wait.is_none() {
                // Nobody waits for an asynchronous window now; its pages are locked until
                // their request completes (end_page_read unlocks them).
                self.files.in_read.extend(missing[run].iter().map(|&p| (p, end)));
            }
        }
        self.files.stats.read_requests += requests;
        Ok(if wait.is_some() { done.max(submit) + completion } else { submit })
    }

    /// File page `p` turned dirty at `t` by CPU `c`: the page cache's dirty limits decide when
    /// the writer goes on (`FileIo::dirtied`).
    pub(crate) fn file_dirtied(&mut self, c: usize, p: u32, t: Ns) -> Ns {
        self.files.dirtied(&mut self.mem, self.swap.as_mut(), c, p, t)
    }

    /// A file access with the files on DAX: a call copies between the user buffer and PMEM
    /// (dax_iomap_rw: the extent lookup, then copy_mc_to_user or non-temporal stores); a load or
    /// store goes straight to PMEM once its region is mapped by a fault (dax_iomap_fault, a PMD
    /// per `dax_fault_bytes`). Nothing is cached, dirtied or reclaimed.
    fn dax_access(&mut self, c: usize, a: Access, issue_ps: u64) -> Result<Option<u64>> {
        let io = self.files.path;
        let t = issue_ps / 1000;
        let socket = self.cpus[c].socket;
        let processed = self.processed;
        let bounds =
            if io.dax_grow && a.is_syscall() { self.files.bounds(a.addr >> self.mem.page_shift) } else { None };
        let dax = self.files.dax.as_mut().expect("callers check for DAX");
        let req = |now: Ns| dax_request(now, a.addr, a.size as u64, a.op, socket, c);
        if a.is_syscall() {
            if dax.devdax {
                return Err(Error::Sim(format!(
                    "access #{processed}: a read/write system call on a devdax device, which only maps (no file system); use dax.mode = \"fsdax\""
                )));
            }
            let mut at = t + io.syscall + io.vfs + io.fs_map;
            // Blocks the call's range adds past the file's traced end (`dax_new_blocks =
            // "past_traced_end"`). ext4_iomap_begin finds them unmapped, so ext4_iomap_alloc
            // allocates them with EXT4_GET_BLOCKS_CREATE_ZERO (fs/ext4/inode.c; "ext4: pre-zero
            // allocated blocks for DAX IO", Linux 4.7): ext4_map_blocks zeroes them before
            // mapping them (ext4_issue_zeroout -> blkdev_issue_zeroout, zero pages written by
            // the pmem driver's bio path, synchronously), and the allocation joins the running
            // journal transaction (ext4_update_inode_fsync_trans), which the file's next fsync
            // or fdatasync commits. Deviations: the allocator's CPU time (mballoc, the journal
            // handle) is not charged; with past_traced_end, blocks skipped over by a write past
            // the end stay holes that later writes below the end do not allocate (with
            // size_at_open they do); DAX faults do not allocate, nor do stores through a
            // mapping mark blocks written.
            if io.dax_grow {
                let end_byte = a.addr + a.size as u64;
                if let Some((lo, _)) = bounds {
                    let m = self.files.maps.get_mut(&lo).expect("bounds come from the map");
                    let block = FS_BLOCK;
                    let last = (end_byte - 1) / block;
                    // The blocks a write allocates, as runs [first, end) of consecutive blocks:
                    // with size_at_open and the file's size record, those wholly past its size
                    // at open not yet written (a hole wherever it lies: ext4_map_blocks finds
                    // it unmapped all the same); else those past the traced end. A read
                    // allocates nothing.
                    let runs: Vec<(u64, u64)> = match m.held_end {
                        _ if !a.op.is_write() => vec![],
                        Some(h) if io.dax_sized => {
                            let mut runs: Vec<(u64, u64)> = Vec::new();
                            for b in a.addr / block..=last {
                                let unwritten = self.files.dax_written.insert(b);
                                if b * block < h || !unwritten {
                                    continue;
                                }
                                match runs.last_mut() {
                                    Some(r) if r.1 == b => r.1 = b + 1,
                                    _ => runs.push((b, b + 1)),
                                }
                            }
                            runs
                        }
                        _ => {
                            let first = (a.addr / block).max(m.traced_end.div_ceil(block));
                            if first <= last {
                                vec![(first, last + 1)]
                            } else {
                                vec![]
                            }
                        }
                    };
                    if !runs.is_empty() {
                        m.datasync_tid = dax.journal.running_tid;
                        for &(first, end) in &runs {
                            at += io.bio_layer;
                            at = dax.dev.access(&dax_request(
                                at,
                                first * block,
                                (end - first) * block,
                                Op::Write,
                                socket,
                                c,
                            ));
                            self.files.stats.dax_zeroed_blocks += end - first;
                        }
                        self.files.stats.dax_alloc_calls += 1;
                    }
                    m.traced_end = m.traced_end.max(end_byte);
                }
            }
            let done = dax.dev.access(&req(at));
            let s = &mut self.files.stats;
            s.dax_calls += 1;
            s.dax_bytes += a.size as u64;
            if self.measuring {
                s.dax_io_ps += (done * 1000).max(issue_ps) - issue_ps;
            }
            self.finish_call(c, a, issue_ps, done);
            return Ok(None);
        }
        if dax.mapped.insert(a.addr >> dax.fault_shift) {
            self.files.stats.dax_faults += 1;
            self.faults.time_ps += io.dax_fault * 1000;
            return Ok(Some(issue_ps + io.dax_fault * 1000));
        }
        let latency = dax.dev.access(&req(t)) - t;
        let s = &mut self.files.stats;
        s.dax_accesses += 1;
        s.dax_bytes += a.size as u64;
        s.dax_latency_ns += latency;
        if self.measuring {
            self.max_completion_ns = self.max_completion_ns.max(t + latency);
        }
        self.retire(c, a, issue_ps, issue_ps + (latency * 1_000_000).div_ceil(self.mlp_milli));
        Ok(None)
    }
}

impl Engine {
    /// A file sync record (`Access::SYNC`): fsync or fdatasync of the mapped file holding
    /// `a.addr`, as ext4_sync_file runs it (fs/ext4/fsync.c, Linux 5.15):
    /// file_write_and_wait_range writes back the file's dirty pages from the calling thread
    /// (ext4_writepages: one extent lookup, then runs of consecutive pages as block requests of
    /// up to max_request, as an O_DIRECT call's flush of its range) and waits for them and for
    /// the file's pages the flusher already has under writeback; then a FLUSH to the device
    /// (blkdev_issue_flush) and the bookkeeping, `storage.fsync`. The caller waits for all of
    /// it. With `storage.cache_new_pages`, the journal commit of the blocks writeback allocated
    /// follows (`block_journal_commit`). On DAX nothing is dirty (calls and stores went to
    /// PMEM): the call costs only the system call and `storage.fsync`, and with
    /// `storage.dax_new_blocks` the commit of the blocks the calls allocated (`journal_commit`);
    /// with `dax.files` each file takes its own device's path. Deviations: fsync and fdatasync
    /// cost the same (ext4's journal commit for changed metadata other than allocations, which
    /// fdatasync skips when only timestamps changed, is not modelled: both Optane devices are
    /// power-loss protected, so the FLUSH itself is cheap and `storage.fsync` stands for it);
    /// pages reclaim is writing are not waited for (they leave the page cache at once in the
    /// model).
    fn sync_record(&mut self, c: usize, a: Access, issue_ps: u64) -> Result<Option<u64>> {
        let n = self.processed;
        if a.flags != Access::SYNC || a.size != 1 {
            return Err(Error::Sim(format!(
                "access #{n}: flags {:#04x}, size {}: a file sync record is flags 0x0b (bits 0, 1 and 3) with size 1",
                a.flags, a.size
            )));
        }
        let io = self.files.path;
        let t = issue_ps / 1000;
        let mut at = t + io.syscall;
        if !self.files.on_dax(a.addr >> self.mem.page_shift) {
            if self.swap.is_none() {
                return Err(Error::Sim(format!(
                    "access #{n}: an fsync record, but the platform has no block device for files: \
                     add a [swap] section (its device holds the files) or put the files on [dax]"
                )));
            }
            let Some((lo, hi)) = self.files.bounds(a.addr >> self.mem.page_shift) else {
                return Err(Error::Sim(format!(
                    "access #{n}: an fsync record at {:#x}, which no mapping record names: a trace that syncs a file \
                     must announce it with mapping records (flags 9) first",
                    a.addr
                )));
            };
            // The file's pages by id: ids are consecutive within a 2 MiB region, so each region
            // of the file is one range of ids (the regions never touched hold nothing dirty).
            let ranges: Vec<(u32, u32)> = self
                .mem
                .pt
                .by_address
                .range(lo >> CHUNK_SHIFT..=(hi - 1) >> CHUNK_SHIFT)
                .map(|(&chunk, &base)| {
                    let from = lo.max(chunk << CHUNK_SHIFT) - (chunk << CHUNK_SHIFT);
                    let to = hi.min((chunk + 1) << CHUNK_SHIFT) - (chunk << CHUNK_SHIFT);
                    (base + from as u32, base + to as u32)
                })
                .collect();
            let dirty: Vec<u32> =
                ranges.iter().flat_map(|&(from, to)| self.files.dirty.range(from..to).copied()).collect();
            let mut done = at;
            if !dirty.is_empty() {
                let (block, driver, completion) = io.request_overhead(Driver::Nvme);
                let per_request = (io.max_request / self.mem.page_size).max(1);
                at += io.fs_map;
                let socket = self.cpus[c].socket;
                let swap = self.swap.as_mut().expect("checked above");
                for run in page_runs(&dirty, per_request) {
                    at += block + driver;
                    let end = swap.dev.access(&DeviceRequest {
                        now: at,
                        addr: dirty[run.start] as u64 * self.mem.page_size,
                        size: (run.len() as u64 * self.mem.page_size) as u32,
                        op: Op::Write,
                        socket,
                        cpu: c as u32,
                        remote: false,
                    });
                    done = done.max(end);
                    // Under writeback until `end`: another thread's fsync of the file waits for
                    // them (a group commit's followers), and the dirty limits count them.
                    self.files.in_flight.push_back((end, dirty[run.start], run.len() as u64));
                    self.files.stats.sync_requests += 1;
                }
                at = done.max(at) + completion;
                self.files.clean(&mut self.mem.pt, &dirty);
                self.files.stats.wb_sync += dirty.len() as u64;
            }
            // filemap_fdatawait_range: the file's pages under writeback (by the flusher, or by
            // another thread's fsync).
            for &(end, first, pages) in &self.files.in_flight {
                let overlaps = ranges.iter().any(|&(from, to)| first < to && first + pages as u32 > from);
                if end > t && overlaps {
                    at = at.max(end);
                }
            }
            if io.cache_grow {
                at = self.block_journal_commit(c, a, at);
            }
        } else if io.dax_grow {
            at = self.journal_commit(c, a, at);
        }
        at += io.fsync;
        let s = &mut self.files.stats;
        if a.op.is_write() {
            s.fdatasyncs += 1;
        } else {
            s.fsyncs += 1;
        }
        let end_ps = (at * 1000).max(issue_ps);
        if self.measuring {
            s.sync_ps += end_ps - issue_ps;
            self.max_completion_ns = self.max_completion_ns.max(at);
        }
        self.retire(c, a, issue_ps, end_ps);
        Ok(None)
    }

    /// On fsdax with `dax_new_blocks = "past_traced_end"`: the journal commit an fsync or
    /// fdatasync at `at` waits for. ext4_sync_file (fs/ext4/fsync.c) calls ext4_fsync_journal,
    /// which commits the running transaction with jbd2_complete_transaction when the file's
    /// datasync tid is not yet committed (a block allocation since the last commit): the
    /// journal thread writes a descriptor block and the metadata blocks, then the commit block
    /// with a flush (fs/jbd2/commit.c), `storage.journal_blocks` in all, each through the pmem
    /// driver's bio path onto the same device; the caller sleeps until the commit ends and is
    /// woken (a wakeup and context switch, `storage.irq_completion`). A file whose allocation a
    /// commit still in progress holds waits for that commit (jbd2_log_wait_commit); one with
    /// nothing uncommitted costs nothing here. Deviations: every commit writes the same number
    /// of blocks whatever it holds; jbd2's periodic commit (every 5 s) is not modelled.
    fn journal_commit(&mut self, c: usize, a: Access, at: Ns) -> Ns {
        let io = self.files.path;
        let Some(tid) = self.files.datasync_tid(a.addr >> self.mem.page_shift) else {
            return at;
        };
        let socket = self.cpus[c].socket;
        let crate::os::filemap::Dax { dev, journal, .. } = self.files.dax.as_mut().expect("callers check for DAX");
        if let Some(t) = journal.committed(tid, at) {
            return t;
        }
        // The journal: a circular area of `storage.journal_size` (mke2fs's default, 128 MiB for a
        // 16-32 GiB file system: e2fsprogs ext2fs_default_journal_size) at the top of the 48-bit
        // device address space, clear of the files folded below it. Its writes are the DAX
        // path's requests (`dax_request`), each through the pmem driver's bio path.
        let end = journal.commit(at, io.journal_blocks, io.journal_bytes, io.irq_completion, |at, addr, bytes| {
            dev.access(&dax_request(at + io.bio_layer, addr, bytes, Op::Write, socket, c))
        });
        let s = &mut self.files.stats;
        s.journal_commits += 1;
        s.journal_ps += (end - at) * 1000;
        end
    }

    /// Through the page cache with `cache_new_pages` other than "preallocated": the journal
    /// commit an fsync or fdatasync at `at` waits for, after file_write_and_wait_range has
    /// written back the file's dirty pages. A buffered write into a hole is delayed-allocated
    /// (ext4_da_write_begin reserves, nothing is mapped); writeback allocates the blocks
    /// (ext4_writepages -> mpage_map_and_submit_extent -> ext4_map_blocks, in a journal handle)
    /// and ext4_update_inode_fsync_trans puts the file's i_datasync_tid on the running
    /// transaction (`FileIo::clean`), so ext4_sync_file's ext4_fsync_journal then commits it
    /// with jbd2_complete_transaction (fs/ext4/fsync.c, fs/ext4/inode.c, Linux 6.1) as on fsdax
    /// (`journal_commit`): the journal thread writes the descriptor and metadata blocks and waits
    /// for them, then the commit block (fs/jbd2/commit.c), `storage.journal_blocks` in all, here
    /// through the block layer and NVMe driver of the device holding the files, each request
    /// completing by `storage.completion`; the caller sleeps until the commit ends and is woken
    /// (`storage.irq_completion`). A file whose allocation a commit in progress holds waits for
    /// it. Deviations: the commit block's flush/FUA costs nothing beyond the write (both Optane
    /// presets are power-loss protected, no volatile cache); jbd2 runs the commit, the model
    /// charges its CPU costs to the caller's wait; a write that extends i_disksize within an
    /// allocated block (which also marks i_datasync_tid, ext4_do_update_inode) commits nothing,
    /// as on fsdax.
    fn block_journal_commit(&mut self, c: usize, a: Access, at: Ns) -> Ns {
        let io = self.files.path;
        let Some(tid) = self.files.datasync_tid(a.addr >> self.mem.page_shift) else {
            return at;
        };
        let journal = &mut self.files.journal;
        if let Some(t) = journal.committed(tid, at) {
            return t;
        }
        let (block_layer, driver, completion) = io.request_overhead(Driver::Nvme);
        let socket = self.cpus[c].socket;
        let swap = self.swap.as_mut().expect("sync_record checks for a block device");
        // The same circular area as on fsdax, above the page ids the page cache's requests
        // address.
        let end = journal.commit(at, io.journal_blocks, io.journal_bytes, io.irq_completion, |at, addr, bytes| {
            let issue = at + block_layer + driver;
            let done = swap.dev.access(&DeviceRequest {
                now: issue,
                addr,
                size: bytes as u32,
                op: Op::Write,
                socket,
                cpu: c as u32,
                remote: false,
            });
            done.max(issue) + completion
        });
        let s = &mut self.files.stats;
        s.block_journal_commits += 1;
        s.block_journal_ps += (end - at) * 1000;
        end
    }

    /// A mapping record (`Access::MAP`): the file whose pages live at `[addr, addr + size x 4
    /// KiB)` is mapped from here on. Opening the same file again changes nothing; a mapping
    /// that overlaps another is refused, as is anything but bit 0 beside bit 3. With
    /// `os.files_start_cached` the file's uncached pages enter the page cache clean and
    /// unmapped, with no device read and no time charged (a warm file). The record costs a
    /// system call (do_mmap's VMA setup is not charged).
    pub(crate) fn map_record(&mut self, c: usize, a: Access, issue_ps: u64) -> Result<Option<u64>> {
        let n = self.processed;
        if a.flags != Access::FILE | Access::MAP {
            return Err(Error::Sim(format!(
                "access #{n}: flags {:#04x} mark a file mapping record (bit 3) with bits other than bit 0",
                a.flags
            )));
        }
        let Some(end_byte) = a.addr.checked_add(a.map_bytes()).filter(|&e| e < u64::MAX - self.mem.page_size) else {
            return Err(Error::Sim(format!(
                "access #{n}: a file mapping of {} bytes at {:#x} runs past the end of the address space",
                a.map_bytes(),
                a.addr
            )));
        };
        let (lo, hi) = (a.addr >> self.mem.page_shift, ((end_byte - 1) >> self.mem.page_shift) + 1);
        let overlap = |maps: &BTreeMap<u64, FileMap>, skip: Option<u64>| {
            maps.range(..hi).rev().find(|(&l, m)| Some(l) != skip && m.end > lo).map(|(&l, m)| (l, m.end))
        };
        let (first, fresh) = match a.op {
            Op::Read => match overlap(&self.files.maps, None) {
                Some((l, _)) if l == lo && self.files.maps[&l].end_byte == end_byte => (lo, false),
                Some((l, e)) => {
                    return Err(Error::Sim(format!(
                        "access #{n}: the file mapping [{:#x}, {end_byte:#x}) overlaps the one of pages [{l:#x}, {e:#x}); unmapping is not in the trace format",
                        a.addr
                    )))
                }
                None => {
                    let dax = self.files.dax_file(a.addr);
                    self.files.maps.insert(lo, FileMap {
                            end: hi,
                            end_byte,
                            ra: Stream::default(),
                            mmap_miss: 0,
                            traced_end: a.addr,
                            datasync_tid: 0,
                            held_end: None,
                            dax,
                        });
                    self.files.stats.mappings += 1;
                    (lo, true)
                }
            },
            Op::Write => {
                let Some(l) = self.files.file_ending_at(a.addr, self.mem.page_shift) else {
                    return Err(Error::Sim(format!(
                        "access #{n}: a continuation mapping record (op write) at {:#x}, where no mapped file ends",
                        a.addr
                    )));
                };
                if let Some((o, e)) = overlap(&self.files.maps, Some(l)) {
                    return Err(Error::Sim(format!(
                        "access #{n}: the file mapping continued to {end_byte:#x} overlaps the one of pages [{o:#x}, {e:#x})"
                    )));
                }
                let m = self.files.maps.get_mut(&l).expect("found above");
                (m.end, m.end_byte) = (hi, end_byte);
                (lo, true)
            }
        };
        // With `dax.files`, a file on DAX has no page cache to start warm in.
        let on_dax = self.files.on_dax(first);
        if self.files.warm && fresh && self.swap.is_some() && !(on_dax && self.files.split()) {
            self.warm_file(c, first, hi, issue_ps / 1000)?;
            // A warm file's pages hold data: with `cache_new_pages = "past_traced_end"` it ends
            // where its mapping does.
            if !on_dax {
                self.files.cache_reached(first, end_byte);
            }
        }
        let end_ps = issue_ps + self.files.path.syscall * 1000;
        self.retire(c, a, issue_ps, end_ps);
        Ok(None)
    }

    /// A file size record (`Access::SIZE`): where the data of a mapped file ended when the
    /// program opened it, `addr` inside the file's mapping (op read) or at its end (op write: it
    /// held every mapped byte). Kept for `cache_new_pages = "size_at_open"` (`FileIo::new_page`);
    /// on a warm run (`os.files_start_cached`) every mapped page holds data, as the warm file's
    /// traced end says, so the record changes nothing there. Costs nothing: the open it
    /// describes is not a record of its own. The file must have been mapped before; a second
    /// record for it is refused (the first open's size is the one that counts).
    fn size_record(&mut self, c: usize, a: Access, issue_ps: u64) -> Result<Option<u64>> {
        let n = self.processed;
        if a.size != 1 {
            return Err(Error::Sim(format!(
                "access #{n}: a file size record (flags 0x0d) of size {}; file size records have size 1",
                a.size
            )));
        }
        let shift = self.mem.page_shift;
        let found = match a.op {
            Op::Read => self.files.bounds(a.addr >> shift).map(|(lo, _)| lo).filter(|&lo| {
                let m = &self.files.maps[&lo];
                a.addr < m.end_byte && (lo << shift) <= a.addr
            }),
            Op::Write => self.files.file_ending_at(a.addr, shift),
        };
        let Some(lo) = found else {
            return Err(Error::Sim(format!(
                "access #{n}: a file size record at {:#x} (op {}), where no mapped file {}; a file's mapping records must come first",
                a.addr,
                if a.op.is_write() { "write" } else { "read" },
                if a.op.is_write() { "ends" } else { "holds that byte" }
            )));
        };
        let m = self.files.maps.get_mut(&lo).expect("found above");
        if m.held_end.is_some() {
            return Err(Error::Sim(format!(
                "access #{n}: a second file size record for the file mapped at page {lo:#x}; a file has one, its size at the program's first open"
            )));
        }
        if !self.files.warm {
            m.held_end = Some(a.addr);
        }
        self.retire(c, a, issue_ps, issue_ps);
        Ok(None)
    }

    /// Put the uncached pages of `[lo, hi)` in the page cache as a warm file's are: clean, not
    /// mapped, not referenced, on the inactive file list.
    fn warm_file(&mut self, c: usize, lo: u64, hi: u64, t: Ns) -> Result<()> {
        for v in lo..hi {
            let p = self.file_page(v)?;
            let node = self.mem.pt.entries[p as usize].node;
            if node != UNTOUCHED && node != DROPPED {
                continue;
            }
            if node == UNTOUCHED {
                self.mem.pt.touched += 1;
            }
            self.alloc(p, c, v, t, FILE)?;
            let f = &mut self.mem.pt.entries[p as usize].flags;
            *f = (*f & !(LOCKED | REFERENCED)) | UNMAPPED;
            self.files.stats.warm_pages += 1;
        }
        Ok(())
    }

    /// A load or store by CPU `c` through a file mapping at `t` to page `p` (`vpn`), which no
    /// PTE maps: not cached (a first touch, or dropped by reclaim) in a file a mapping record
    /// names, or cached but unmapped. Returns the fault's time (ps).
    pub(crate) fn filemap_fault(&mut self, c: usize, p: u32, vpn: u64, t: Ns, write: bool) -> Result<u64> {
        let io = self.files.path;
        let bounds = self.files.bounds(vpn);
        // A load or store through the mapping reads or writes the page: with `cache_new_pages =
        // "past_traced_end"` the file reaches at least its end (every page a mapping touches
        // faults first).
        self.files.cache_reached(vpn, (vpn + 1) << self.mem.page_shift);
        // With "size_at_open" likewise: a page touched through a mapping holds data from here on
        // (a store after a read fault takes no fault of its own in the model, so any fault counts).
        self.files.cache_written(vpn, vpn);
        let node = self.mem.pt.entries[p as usize].node;
        if node >= DROPPED {
            let (lo, hi) = bounds.expect("callers send uncached pages only inside a mapped file");
            if node == DROPPED {
                if let Some(s) = self.swap.as_mut() {
                    s.stats.file_refaults += 1;
                }
            }
            let ra_pages = self.files.ra_pages;
            let m = self.files.maps.get_mut(&lo).expect("bounds come from the map");
            // do_sync_mmap_readahead (mm/filemap.c): count the miss; past MMAP_LOTSAMISS read
            // only the page. Else read around it: ra_pages from ra_pages/2 before it (not
            // before the file's start), the last quarter marked for async readahead;
            // do_page_cache_ra cuts the window at the file's end. Deviation: no madvise in
            // traces, so neither MADV_RANDOM (only the page) nor MADV_SEQUENTIAL (sync
            // readahead) is modelled.
            m.mmap_miss = (m.mmap_miss + 1).min(MMAP_LOTSAMISS * 10);
            let (start, size) = if m.mmap_miss > MMAP_LOTSAMISS {
                (vpn, 1)
            } else {
                let start = vpn.saturating_sub(ra_pages / 2).max(lo);
                let size = ra_pages.min(hi - start);
                let lookahead = ra_pages / 4;
                m.ra = Stream { start, size, async_size: if size >= lookahead { lookahead } else { 0 }, ..m.ra };
                (start, size)
            };
            let before = self.files.stats.pages_read;
            let done = self.read_window(c, start, size, Some(vpn), t + io.page_cache_lookup)?;
            let s = &mut self.files.stats;
            s.major_faults += 1;
            s.fault_read_pages += s.pages_read - before;
            // The page is mapped (finish_fault) and stays locked until the access replays.
            self.mem.pt.entries[p as usize].flags &= !UNMAPPED;
            return Ok((done - t + io.minor_fault) * 1000);
        }
        // The page is cached. do_read_fault maps the cached neighbours first (do_fault_around);
        // a write fault on a shared mapping (do_shared_fault) goes to filemap_fault alone.
        let marker = bounds.and_then(|(lo, _)| self.files.maps[&lo].ra.marker());
        if !write {
            self.fault_around(vpn, bounds, marker, t)?;
        }
        let mut at = t + io.minor_fault;
        if self.mem.pt.entries[p as usize].flags & UNMAPPED != 0 {
            at = self.files.uptodate_at(p, at);
            // filemap_fault finds the page: do_async_mmap_readahead counts a hit, and on the
            // PG_readahead page starts the next window without waiting (page_cache_async_ra).
            self.mem.pt.entries[p as usize].flags = (self.mem.pt.entries[p as usize].flags & !UNMAPPED) | LOCKED;
            if let Some((lo, hi)) = bounds {
                let m = self.files.maps.get_mut(&lo).expect("bounds come from the map");
                m.mmap_miss = m.mmap_miss.saturating_sub(1);
                if marker == Some(vpn) {
                    let max = self.files.ra_pages;
                    let start = m.ra.start + m.ra.size;
                    let size = next_ra_size(m.ra.size.max(1), max);
                    m.ra = Stream { start, size, async_size: size, ..m.ra };
                    let size = size.min(hi.saturating_sub(start));
                    at = self.read_window(c, start, size, None, at)?;
                }
            }
        }
        self.files.stats.minor_faults += 1;
        Ok((at - t) * 1000)
    }

    /// do_fault_around (mm/memory.c) with filemap_map_pages (mm/filemap.c): map every cached,
    /// unmapped page of the fault_around_bytes-aligned window around `vpn` that lies in the
    /// same file and page-table page, except the PG_readahead page (left to fault, so that it
    /// starts the next window) and pages still being read (not up to date at `t`). Prefaulted
    /// PTEs are young on x86 (do_set_pte), and each page mapped counts as an mmap hit
    /// (mmap_miss--).
    fn fault_around(&mut self, vpn: u64, bounds: Option<(u64, u64)>, marker: Option<u64>, t: Ns) -> Result<()> {
        let n = self.files.fault_around;
        if n <= 1 {
            return Ok(());
        }
        let pmd = vpn & !(CHUNK as u64 - 1);
        let (mut lo, mut hi) = ((vpn & !(n - 1)).max(pmd), ((vpn & !(n - 1)) + n).min(pmd + CHUNK as u64));
        if let Some((a, b)) = bounds {
            (lo, hi) = (lo.max(a), hi.min(b));
        }
        let mut mapped = 0;
        for v in lo..hi {
            let q = self.mem.pt.slot(v)?;
            if self.files.in_read.get(&q).is_some_and(|&ready| ready > t) {
                continue;
            }
            let e = &mut self.mem.pt.entries[q as usize];
            if e.node < DROPPED && e.flags & (FILE | UNMAPPED) == FILE | UNMAPPED && Some(v) != marker {
                e.flags = (e.flags & !UNMAPPED) | REFERENCED | if v == vpn { LOCKED } else { 0 };
                mapped += (v != vpn) as u64;
                if let Some((a, _)) = bounds {
                    let m = self.files.maps.get_mut(&a).expect("bounds come from the map");
                    m.mmap_miss = m.mmap_miss.saturating_sub(1);
                }
            }
        }
        self.files.stats.fault_around_pages += mapped;
        Ok(())
    }
}
