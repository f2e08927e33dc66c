//! The page cache for read(2)/write(2) on files (`Access::SYSCALL`). Its pages are the file
//! pages of the page table, on the same per-node LRU lists as anonymous memory and mmap'd file
//! pages, so kswapd and direct reclaim weigh and take both (a clean file page is dropped, a dirty
//! one written back first: `swap.rs`). A call crosses the layers of `storage::iopath` with their
//! sourced costs; misses read ahead as mm/readahead.c does; written pages stay dirty until the
//! flusher writes them back (mm/page-writeback.c); with `[dax]` file pages live on the PMEM
//! device and neither calls nor loads touch the page cache (fs/dax.c). O_DIRECT calls
//! (`Access::DIRECT`) go between the device and the user buffer (fs/iomap/direct-io.c). Loads
//! and stores through a file mapping fault as filemap_fault does (mm/filemap.c, Linux 5.15):
//! a missing page is read with read-around inside the file's bounds, which the trace's mapping
//! records (`Access::MAP`) give; a cached but unmapped page is a minor fault with fault-around.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use rustc_hash::{FxHashMap, FxHashSet};
use tiersim_core::{NodeId, Ns, Op, Result};
use tiersim_devices::{Device, DeviceRequest};

use super::swap::Swap;
use super::{page_runs, Memory, Metrics, PageEvent};
use crate::pagetable::{PageEntry, PageTable, DIRTY, DROPPED, FILE};
use crate::platform::Platform;
use crate::storage::iopath::{IoPath, FS_BLOCK};

/// Pages a task dirties between two checks of the dirty limits: balance_dirty_pages_ratelimited
/// starts each task at nr_dirtied_pause = 128 KiB of pages (mm/page-writeback.c).
const RATELIMIT_PAGES: u64 = 32;

/// do_sync_mmap_readahead stops reading around faults of a file once its faults that found
/// nothing cached outnumber those that did by this many (mm/filemap.c).
pub(crate) const MMAP_LOTSAMISS: u32 = 100;

/// A file the trace mapped (mapping records): its pages `[start, end)` and the struct file's
/// readahead state, which the kernel keeps per open file (file->f_ra, with mmap_miss).
#[derive(Debug, Clone, Copy)]
pub(crate) struct FileMap {
    pub(crate) end: u64,
    /// Where the last record of the file ended, for a continuation record.
    pub(crate) end_byte: u64,
    pub(crate) ra: Stream,
    pub(crate) mmap_miss: u32,
    /// On fsdax with `storage.dax_new_blocks = "past_traced_end"`, or in the page cache with
    /// `storage.cache_new_pages = "past_traced_end"`: the highest byte address the trace's calls
    /// (and, for the page cache, its faults through a mapping, to the faulting page's end; a
    /// warm file's mapping end) have read or written in the file (its blocks below exist), and
    /// the journal transaction that holds the file's last block allocation (ext4's
    /// i_datasync_tid).
    pub(crate) traced_end: u64,
    pub(crate) datasync_tid: u64,
    /// The byte address where the file's data ended when the program opened it (its file size
    /// record; None without one): with `cache_new_pages = "size_at_open"` its pages wholly past
    /// this are holes until the trace writes them (`FileIo::written`).
    pub(crate) held_end: Option<u64>,
    /// On the DAX device (`dax.files` lists it, or `[dax]` without `dax.files`).
    pub(crate) dax: bool,
}

/// A CPU's readahead state, struct file_ra_state. Deviation: the kernel keeps one per open file;
/// the trace names no files, so each CPU is one stream.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Stream {
    pub(crate) start: u64,
    pub(crate) size: u64,
    pub(crate) async_size: u64,
    pub(crate) prev: Option<u64>,
    /// Pages this CPU dirtied since it last checked the dirty limits.
    pub(crate) nr_dirtied: u64,
}

impl Stream {
    /// The page carrying PG_readahead: a hit there starts the next window asynchronously.
    pub(crate) fn marker(&self) -> Option<u64> {
        (self.async_size > 0).then(|| self.start + self.size - self.async_size)
    }
}

pub(crate) struct Dax {
    pub(crate) dev: Box<dyn Device>,
    pub(crate) devdax: bool,
    /// Regions of `dax_fault_bytes` already mapped (one PMD fault each).
    pub(crate) mapped: FxHashSet<u64>,
    pub(crate) fault_shift: u32,
    /// The journal of the file system on the module.
    pub(crate) journal: Journal,
    /// `dax.files`: the start addresses of the files on the module; None: every file.
    pub(crate) files: Option<Vec<u64>>,
    /// Those of `files` a mapping record has started, so that one the trace never maps is an
    /// error rather than a file silently left in the page cache.
    pub(crate) files_seen: FxHashSet<u64>,
}

/// jbd2's state on one file system's device: the running transaction (the one new allocations
/// join), the last committed one, and when that commit's writes end; the journal's next block
/// (a circular area of the device).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Journal {
    pub(crate) running_tid: u64,
    pub(crate) committed_tid: u64,
    pub(crate) commit_end: Ns,
    pub(crate) head: u64,
}

impl Default for Journal {
    fn default() -> Self {
        Journal { running_tid: 1, committed_tid: 0, commit_end: 0, head: 0 }
    }
}

impl Journal {
    /// A sync at `at` of a file whose last allocation joined transaction `tid`, if that needs
    /// no commit of its own: when it may go on (at once if the file never allocated, else once
    /// the commit that holds `tid`, maybe still in progress, ends: jbd2_log_wait_commit). None:
    /// `tid` is the running transaction, which the sync commits.
    pub(crate) fn committed(&self, tid: u64, at: Ns) -> Option<Ns> {
        (tid <= self.committed_tid).then(|| if tid > 0 { at.max(self.commit_end) } else { at })
    }

    /// jbd2_journal_commit_transaction (fs/jbd2/commit.c) of the running transaction from `at`:
    /// the descriptor and metadata blocks (`blocks` - 1) written and waited for, then the commit
    /// block, each by `write(at, address, bytes)` (its end) into the journal's circular area of
    /// `area` bytes at the top of the 48-bit device address space, clear of what the device's
    /// other requests address; the caller is woken `wake` after (a wakeup and context switch).
    /// Returns when it is awake.
    pub(crate) fn commit(
        &mut self,
        at: Ns,
        blocks: u64,
        area: u64,
        wake: Ns,
        mut write: impl FnMut(Ns, u64, u64) -> Ns,
    ) -> Ns {
        let base = (1u64 << 48) - area;
        let mut put = |head: &mut u64, at: Ns, n: u64| {
            let addr = base + *head;
            *head = (*head + n * FS_BLOCK) % area;
            write(at, addr, n * FS_BLOCK)
        };
        let t = put(&mut self.head, at, blocks - 1);
        let end = put(&mut self.head, t, 1) + wake;
        self.committed_tid = self.running_tid;
        self.running_tid += 1;
        self.commit_end = end;
        end
    }
}

/// Page-cache activity over the measured part of the run.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct FileStats {
    pub read_calls: u64,
    pub write_calls: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Pages a call found cached, and pages it did not.
    pub hits: u64,
    pub misses: u64,
    /// Pages read beyond the ones a call asked for.
    pub readahead_pages: u64,
    pub read_requests: u64,
    /// Clean -> dirty transitions of file pages, by calls and by stores to mapped pages.
    pub dirtied: u64,
    /// Dirty pages written back by the flusher, and by reclaim before dropping them.
    pub wb_flusher: u64,
    pub wb_reclaim: u64,
    pub write_requests: u64,
    /// Time the calls took, and the part of it writers were throttled by the dirty limits.
    pub io_time_ps: u64,
    pub throttle_ps: u64,
    /// O_DIRECT calls, their bytes and block requests; cached pages of their ranges written back
    /// first, and dropped by direct writes.
    pub direct_reads: u64,
    pub direct_writes: u64,
    pub direct_bytes_read: u64,
    pub direct_bytes_written: u64,
    pub direct_requests: u64,
    pub wb_direct: u64,
    pub direct_invalidated: u64,
    pub dax_calls: u64,
    pub dax_faults: u64,
    pub dax_accesses: u64,
    pub dax_bytes: u64,
    pub dax_latency_ns: u64,
    /// With `dax.files`: the time of the DAX calls (also in `io_time_ps`).
    pub dax_io_ps: u64,
    /// `cache_new_pages` other than "preallocated": pages a buffered write covered only in
    /// part, not cached and holding no data (`FileIo::new_page`), so zeroed rather than read.
    pub new_partial_pages: u64,
    /// `dax_new_blocks` other than "preallocated": write calls that allocated, the blocks they
    /// allocated (each zeroed on PMEM first), journal commits fsync waited for, and their time.
    pub dax_alloc_calls: u64,
    pub dax_zeroed_blocks: u64,
    pub journal_commits: u64,
    pub journal_ps: u64,
    /// Through the page cache with `cache_new_pages` other than "preallocated": pages written
    /// into holes (delayed allocation) that writeback allocated, and the journal commits on the
    /// block device fsync waited for, and their time.
    pub wb_allocated: u64,
    pub block_journal_commits: u64,
    pub block_journal_ps: u64,
    /// Files mapped (mapping records that start one).
    pub mappings: u64,
    /// Faults through a mapping that read the device (filemap_fault on a page not cached,
    /// the thread waiting), faults that found the page cached, pages those mapped beside the
    /// faulting one (fault-around), and pages read from the device by the major faults.
    pub major_faults: u64,
    pub minor_faults: u64,
    pub fault_around_pages: u64,
    pub fault_read_pages: u64,
    /// Pages read from the device into the page cache, by calls, faults and refaults.
    pub pages_read: u64,
    /// First touches of file pages served without a device read (a zeroed page, as before
    /// mapping records existed): no mapping record names their file, or no block device
    /// (`[swap]`) holds the files.
    pub unread_first_touches: u64,
    /// Pages put in the page cache by `os.files_start_cached`.
    pub warm_pages: u64,
    /// File sync records: fsync and fdatasync calls, the dirty pages they wrote back, their
    /// block requests, and the time the callers waited (apart from `io_time_ps`, the time of
    /// the calls that move data).
    pub fsyncs: u64,
    pub fdatasyncs: u64,
    pub wb_sync: u64,
    pub sync_requests: u64,
    pub sync_ps: u64,
}

pub(crate) struct FileIo {
    pub(crate) path: IoPath,
    pub(crate) ra_pages: u64,
    pub(crate) background_ratio: u64,
    pub(crate) dirty_ratio: u64,
    pub(crate) streams: Vec<Stream>,
    /// Dirty file pages by page id (file order within a 2 MiB region), for the flusher's
    /// write_cache_pages walk from a cyclic cursor.
    pub(crate) dirty: BTreeSet<u32>,
    pub(crate) cursor: u32,
    /// Writeback requests in flight: (completion, first page, pages), in issue order
    /// (PG_writeback pages), by the flusher and by fsync; an fsync of a file waits for those of
    /// its pages.
    pub(crate) in_flight: VecDeque<(Ns, u32, u64)>,
    pub(crate) dax: Option<Dax>,
    pub(crate) stats: FileStats,
    /// Pages read ahead asynchronously, and when their read completes: until then they are
    /// locked, not up to date, and whoever needs one waits (wait_on_page_locked).
    pub(crate) in_read: FxHashMap<u32, Ns>,
    /// Mapped files by first page.
    pub(crate) maps: BTreeMap<u64, FileMap>,
    pub(crate) warm: bool,
    /// fault_around_bytes in pages, a power of two as the kernel rounds it.
    pub(crate) fault_around: u64,
    /// With `cache_new_pages = "size_at_open"`: pages of files with a size record that the trace
    /// has written (calls, O_DIRECT calls) or touched through a mapping, so that they hold data
    /// whatever the file held at open.
    pub(crate) written: FxHashSet<u64>,
    /// On fsdax with `dax_new_blocks = "size_at_open"`: the 4 KiB blocks (`FS_BLOCK`) of files
    /// with a size record that the trace's write calls have written, so allocated.
    pub(crate) dax_written: FxHashSet<u64>,
    /// With `cache_new_pages` other than "preallocated": dirty pages a buffered write put in a
    /// hole (`new_page`), by page id, with their file's first page: ext4's delayed allocation,
    /// which their writeback performs (`clean`).
    pub(crate) delalloc: FxHashMap<u32, u64>,
    /// The journal of the file system on the block device (`[swap]`).
    pub(crate) journal: Journal,
}

impl FileIo {
    pub(crate) fn new(platform: &Platform) -> Result<FileIo> {
        let path = IoPath::from_params(&platform.storage)?;
        let dax = match &platform.dax {
            None => None,
            Some(d) => Some(Dax {
                dev: (tiersim_devices::find(&d.device)?.build)(&d.params)?,
                devdax: d.devdax,
                mapped: FxHashSet::default(),
                fault_shift: 63 - path.dax_fault_bytes.leading_zeros(),
                journal: Journal::default(),
                files: d.files.clone(),
                files_seen: FxHashSet::default(),
            }),
        };
        Ok(FileIo {
            ra_pages: (platform.os.bytes("read_ahead") / platform.page_size).max(1),
            background_ratio: platform.os.uint("dirty_background_ratio"),
            dirty_ratio: platform.os.uint("dirty_ratio"),
            streams: vec![Stream::default(); platform.cpu_node.len()],
            dirty: BTreeSet::new(),
            cursor: 0,
            in_flight: VecDeque::new(),
            dax,
            stats: FileStats::default(),
            in_read: FxHashMap::default(),
            maps: BTreeMap::new(),
            warm: platform.os.bool("files_start_cached"),
            fault_around: 1 << (63 - path.fault_around_pages.max(1).leading_zeros()),
            written: FxHashSet::default(),
            dax_written: FxHashSet::default(),
            delalloc: FxHashMap::default(),
            journal: Journal::default(),
            path,
        })
    }

    pub(crate) fn active(&self) -> bool {
        let s = &self.stats;
        self.dax.is_some()
            || s.read_calls + s.write_calls + s.direct_reads + s.direct_writes + s.wb_flusher > 0
            || s.mappings + s.major_faults + s.minor_faults + s.unread_first_touches > 0
            || s.fsyncs + s.fdatasyncs > 0
    }

    /// A file whose first mapping record is at byte address `addr` is on the DAX device.
    pub(crate) fn dax_file(&mut self, addr: u64) -> bool {
        let Some(d) = self.dax.as_mut() else { return false };
        match &d.files {
            None => true,
            Some(f) if f.contains(&addr) => {
                d.files_seen.insert(addr);
                true
            }
            Some(_) => false,
        }
    }

    /// The first `dax.files` address no mapping record of the trace started a file at.
    pub(crate) fn dax_file_never_mapped(&self) -> Option<u64> {
        let d = self.dax.as_ref()?;
        d.files.as_ref()?.iter().copied().find(|a| !d.files_seen.contains(a))
    }

    /// An access to page `vpn` goes to the DAX device: with `[dax]`, every file access, or with
    /// `dax.files` those to the files it lists (any other goes through the page cache).
    #[inline]
    pub(crate) fn on_dax(&self, vpn: u64) -> bool {
        match &self.dax {
            None => false,
            Some(d) if d.files.is_none() => true,
            Some(_) => self.bounds(vpn).is_some_and(|(lo, _)| self.maps[&lo].dax),
        }
    }

    /// `dax.files` is set: some files are on DAX, the others in the page cache.
    pub(crate) fn split(&self) -> bool {
        self.dax.as_ref().is_some_and(|d| d.files.is_some())
    }

    /// The mapped file holding page `vpn`: its first page and its end.
    pub(crate) fn bounds(&self, vpn: u64) -> Option<(u64, u64)> {
        // Every first touch of an anonymous page asks; most traces map no file, and an empty
        // map's range search still costs 2 % of the engine bench's time (perf).
        if self.maps.is_empty() {
            return None;
        }
        let (&lo, m) = self.maps.range(..=vpn).next_back()?;
        (vpn < m.end).then_some((lo, m.end))
    }

    /// The pages `[start, end)` of every mapped file.
    pub(crate) fn mapped_ranges(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.maps.iter().map(|(&lo, m)| (lo, m.end))
    }

    /// Page `vpn` belongs to a file a mapping record named.
    pub(crate) fn mapped(&self, vpn: u64) -> bool {
        self.bounds(vpn).is_some()
    }

    pub(crate) fn summary(&self, page_size: u64) -> serde_json::Value {
        let s = &self.stats;
        let dax = self.dax.as_ref().map(|d| {
            serde_json::json!({
                "mode": if d.devdax { "devdax" } else { "fsdax" },
                "calls": s.dax_calls,
                "faults": s.dax_faults,
                "accesses": s.dax_accesses,
                "bytes": s.dax_bytes,
                "mean_latency_ns": if s.dax_accesses > 0 { s.dax_latency_ns as f64 / s.dax_accesses as f64 } else { 0.0 },
            })
        });
        // Only with dax.files: the DAX calls' share of io_time_ns, and the files on the module.
        let dax = match dax {
            Some(mut d) if self.split() => {
                d["io_time_ns"] = (s.dax_io_ps / 1000).into();
                d["files"] = self.maps.values().filter(|m| m.dax).count().into();
                Some(d)
            }
            d => d,
        };
        // Only with the rule on: runs without it report exactly what they did before it.
        let dax = match dax {
            Some(mut d) if self.path.dax_grow => {
                d["allocating_calls"] = s.dax_alloc_calls.into();
                d["zeroed_bytes"] = (s.dax_zeroed_blocks * crate::storage::iopath::FS_BLOCK).into();
                d["journal_commits"] = s.journal_commits.into();
                d["journal_time_ns"] = (s.journal_ps / 1000).into();
                Some(d)
            }
            d => d,
        };
        let calls = s.read_calls + s.write_calls + s.direct_reads + s.direct_writes + s.dax_calls;
        let syncs = s.fsyncs + s.fdatasyncs;
        let mut out = serde_json::json!({
            "read_calls": s.read_calls,
            "write_calls": s.write_calls,
            "bytes_read": s.bytes_read,
            "bytes_written": s.bytes_written,
            "hits": s.hits,
            "misses": s.misses,
            "hit_ratio": if s.hits + s.misses > 0 { s.hits as f64 / (s.hits + s.misses) as f64 } else { 0.0 },
            "readahead_pages": s.readahead_pages,
            "read_requests": s.read_requests,
            "dirtied_pages": s.dirtied,
            "dirty_pages": self.dirty.len(),
            "writeback_pages_flusher": s.wb_flusher,
            "writeback_pages_reclaim": s.wb_reclaim,
            "writeback_pages_direct": s.wb_direct,
            "writeback_bytes": (s.wb_flusher + s.wb_reclaim + s.wb_direct + s.wb_sync) * page_size,
            "write_requests": s.write_requests,
            "io_time_ns": s.io_time_ps / 1000,
            "mean_call_ns": if calls > 0 { s.io_time_ps as f64 / 1000.0 / calls as f64 } else { 0.0 },
            "throttle_time_ns": s.throttle_ps / 1000,
            "direct": {
                "read_calls": s.direct_reads,
                "write_calls": s.direct_writes,
                "bytes_read": s.direct_bytes_read,
                "bytes_written": s.direct_bytes_written,
                "requests": s.direct_requests,
                "flushed_pages": s.wb_direct,
                "invalidated_pages": s.direct_invalidated,
            },
            "dax": dax,
            "mmap": {
                "mappings": s.mappings,
                "major_faults": s.major_faults,
                "minor_faults": s.minor_faults,
                "fault_around_pages": s.fault_around_pages,
                "fault_read_pages": s.fault_read_pages,
                "unread_first_touches": s.unread_first_touches,
                "warm_pages": s.warm_pages,
            },
            "pages_read": s.pages_read,
        });
        // Only with the rule on, as the DAX allocation keys.
        if self.path.cache_grow {
            out["new_partial_pages"] = s.new_partial_pages.into();
            out["allocated_pages"] = s.wb_allocated.into();
            out["journal_commits"] = s.block_journal_commits.into();
            out["journal_time_ns"] = (s.block_journal_ps / 1000).into();
        }
        // Only when the trace synced: a trace without sync records reports exactly what it did
        // before they existed (the frozen runs' digests hold the whole summary).
        if syncs > 0 {
            out["sync"] = serde_json::json!({
                "fsync_calls": s.fsyncs,
                "fdatasync_calls": s.fdatasyncs,
                "writeback_pages": s.wb_sync,
                "requests": s.sync_requests,
                "time_ns": s.sync_ps / 1000,
                "mean_ns": s.sync_ps as f64 / 1000.0 / syncs as f64,
            });
        }
        out
    }

    /// When page `p`, needed at `t`, is up to date: later than `t` while an asynchronous read
    /// brings it in (filemap_get_pages and filemap_fault wait on the locked page).
    pub(crate) fn uptodate_at(&mut self, p: u32, t: Ns) -> Ns {
        match self.in_read.get(&p) {
            Some(&ready) if ready > t => ready,
            Some(_) => {
                self.in_read.remove(&p);
                t
            }
            None => t,
        }
    }

    /// File page `p` turned dirty (a call or a store to a mapping) at `t`, by CPU `c`. Every
    /// RATELIMIT_PAGES the CPU checks the limits as balance_dirty_pages does: dirty pages above
    /// the background threshold start the flusher, which writes back down to it; dirty pages
    /// plus pages under writeback above the freerun ceiling (halfway to vm.dirty_ratio) make
    /// the writer wait until enough writeback completes to bring them below it, so a writer
    /// outrunning the device is held to the device's rate. Returns when the writer goes on.
    /// Deviation: the kernel paces a throttled writer in proportion to the excess (pos_ratio)
    /// rather than until the excess is written; dirty_expire_centisecs (30 s) is not modelled.
    pub(crate) fn dirtied(&mut self, mem: &mut Memory, swap: Option<&mut Swap>, c: usize, p: u32, t: Ns) -> Ns {
        self.dirty.insert(p);
        self.stats.dirtied += 1;
        let s = &mut self.streams[c];
        s.nr_dirtied += 1;
        if s.nr_dirtied < RATELIMIT_PAGES {
            return t;
        }
        s.nr_dirtied = 0;
        // global_dirtyable_memory: free pages plus file pages.
        let dirtyable: u64 = mem.nodes.iter().map(|n| n.free() + n.lists[2].len + n.lists[3].len).sum();
        let thresh = dirtyable * self.dirty_ratio / 100;
        let mut background = dirtyable * self.background_ratio / 100;
        if background >= thresh {
            background = thresh / 2;
        }
        let f = &mut *self;
        while f.in_flight.front().is_some_and(|&(done, _, _)| done <= t) {
            f.in_flight.pop_front();
        }
        let dirty = f.dirty.len() as u64;
        if dirty > background {
            self.writeback(mem, swap, dirty - background, t);
        }
        let freerun = (background + thresh) / 2;
        let f = &*self;
        let mut over =
            (f.dirty.len() as u64 + f.in_flight.iter().map(|&(_, _, n)| n).sum::<u64>()).saturating_sub(freerun);
        let mut until = t;
        for &(done, _, n) in &f.in_flight {
            if over == 0 {
                break;
            }
            until = until.max(done);
            over = over.saturating_sub(n);
        }
        until
    }

    /// Written-back pages leave the flusher's dirty set and lose PG_dirty; those written into
    /// holes get their blocks (`allocated`).
    pub(crate) fn clean(&mut self, pt: &mut PageTable, pages: &[u32]) {
        for &p in pages {
            self.dirty.remove(&p);
            pt.entries[p as usize].flags &= !DIRTY;
            self.allocated(p);
        }
    }

    /// Page `p` is written back: if a buffered write put it in a hole, writeback allocates its
    /// block now (ext4_writepages -> mpage_map_and_submit_extent -> ext4_map_blocks, fs/ext4/inode.c)
    /// in a journal handle, and ext4_update_inode_fsync_trans puts its file's i_datasync_tid on
    /// the running transaction, which the file's next fsync or fdatasync commits.
    pub(crate) fn allocated(&mut self, p: u32) {
        if self.delalloc.is_empty() {
            return;
        }
        if let Some(lo) = self.delalloc.remove(&p) {
            if let Some(m) = self.maps.get_mut(&lo) {
                m.datasync_tid = self.journal.running_tid;
            }
            self.stats.wb_allocated += 1;
        }
    }

    /// The first page of the mapped file whose mapping ends at byte address `end` (page size
    /// `1 << shift`): the file a continuation mapping record or a full file's size record names.
    pub(crate) fn file_ending_at(&self, end: u64, shift: u32) -> Option<u64> {
        self.maps.range(..=end >> shift).rev().find(|(_, m)| m.end_byte == end).map(|(&l, _)| l)
    }

    /// The journal transaction that holds the last block allocation of the file with page
    /// `vpn` (ext4's i_datasync_tid; 0 if it never allocated), None outside a mapped file.
    pub(crate) fn datasync_tid(&self, vpn: u64) -> Option<u64> {
        self.bounds(vpn).map(|(lo, _)| self.maps[&lo].datasync_tid)
    }

    /// A buffered write dirtied page `p` (`vpn`), which lay in a hole (`new_page`): its block is
    /// allocated when it is written back.
    pub(crate) fn delay_allocation(&mut self, p: u32, vpn: u64) {
        if let Some((lo, _)) = self.bounds(vpn) {
            self.delalloc.insert(p, lo);
        }
    }

    /// An O_DIRECT write reached page `vpn`, which lay in a hole: ext4_iomap_begin allocates its
    /// block during the call (ext4_iomap_alloc, fs/ext4/inode.c), in the running transaction.
    pub(crate) fn allocate_now(&mut self, vpn: u64) {
        if let Some((lo, _)) = self.bounds(vpn) {
            let tid = self.journal.running_tid;
            self.maps.get_mut(&lo).expect("bounds come from the map").datasync_tid = tid;
        }
    }

    /// The flusher writes back `n` dirty pages from its cursor in page order (write_cache_pages,
    /// range_cyclic), runs of consecutive pages as requests of up to max_request; the pages
    /// stay cached, clean, under writeback until their request completes.
    fn writeback(&mut self, mem: &mut Memory, swap: Option<&mut Swap>, n: u64, t: Ns) {
        let mut pages: Vec<u32> = self.dirty.range(self.cursor..).take(n as usize).copied().collect();
        if (pages.len() as u64) < n {
            let rest = n as usize - pages.len();
            pages.extend(self.dirty.range(..self.cursor).take(rest));
        }
        let per_request = (self.path.max_request / mem.page_size).max(1);
        let Some(swap) = swap else { return };
        let mut done = t;
        for run in page_runs(&pages, per_request) {
            let req = DeviceRequest {
                now: t,
                addr: pages[run.start] as u64 * mem.page_size,
                size: (run.len() as u64 * mem.page_size) as u32,
                op: Op::Write,
                socket: 0,
                cpu: 0,
                remote: false,
            };
            let end = swap.dev.access(&req);
            done = done.max(end);
            self.in_flight.push_back((done, pages[run.start], run.len() as u64));
            self.stats.write_requests += 1;
        }
        self.clean(&mut mem.pt, &pages);
        self.stats.wb_flusher += pages.len() as u64;
        if let Some(&last) = pages.last() {
            self.cursor = last + 1;
        }
    }

    /// With `cache_new_pages = "past_traced_end"`: the mapped file holding page `vpn`, if any,
    /// has been read or written up to byte address `end`.
    pub(crate) fn cache_reached(&mut self, vpn: u64, end: u64) {
        if !self.path.cache_grow {
            return;
        }
        if let Some((lo, _)) = self.bounds(vpn) {
            let m = self.maps.get_mut(&lo).expect("bounds come from the map");
            m.traced_end = m.traced_end.max(end);
        }
    }

    /// With `cache_new_pages = "size_at_open"`: the trace wrote pages `[first, last]` of a file
    /// (or touched them through a mapping): they hold data from now on.
    pub(crate) fn cache_written(&mut self, first: u64, last: u64) {
        if !self.path.cache_sized {
            return;
        }
        if let Some((lo, _)) = self.bounds(first) {
            if self.maps[&lo].held_end.is_some() {
                self.written.extend(first..=last);
            }
        }
    }

    /// A buffered write of part of uncached page `vpn` (page size `1 << shift`) reads nothing
    /// from the device: the page is a hole. With `cache_new_pages = "size_at_open"` and the
    /// file's size record, when the page lies wholly at or past what the file held at open and
    /// the trace has not written it; else (`past_traced_end`, or no size record) when it starts
    /// at or past the file's traced end.
    pub(crate) fn new_page(&self, vpn: u64, shift: u32) -> bool {
        if !self.path.cache_grow {
            return false;
        }
        let Some((lo, _)) = self.bounds(vpn) else { return false };
        let m = &self.maps[&lo];
        match m.held_end {
            Some(h) if self.path.cache_sized => vpn << shift >= h && !self.written.contains(&vpn),
            _ => vpn << shift >= m.traced_end,
        }
    }

    /// The end of the mapped file holding page `vpn` (u64::MAX: none).
    pub(crate) fn file_end(&self, vpn: u64) -> u64 {
        self.bounds(vpn).map_or(u64::MAX, |(_, hi)| hi)
    }

    /// Free the frame of clean file page `p` (already off its LRU list): it stays a file page,
    /// which its next access refaults.
    pub(crate) fn evict(&mut self, mem: &mut Memory, p: u32, node: usize) {
        self.in_read.remove(&p);
        mem.nodes[node].release_frame(mem.pt.entries[p as usize].frame);
        mem.pt.entries[p as usize] = PageEntry { frame: 0, node: DROPPED, flags: FILE };
        mem.policy.page_event(PageEvent::Evicted(p, node as NodeId));
    }
}

impl Metrics for FileIo {
    fn reset(&mut self) {
        self.stats = FileStats::default();
    }

    /// Its faults; the page cache's own section is `summary`.
    fn report(&self, section: &str, into: &mut serde_json::Map<String, serde_json::Value>) {
        if section == "faults" {
            into.insert("major".into(), self.stats.major_faults.into());
            into.insert("minor_file".into(), self.stats.minor_faults.into());
            into.insert("file_unread".into(), self.stats.unread_first_touches.into());
        }
    }
}
