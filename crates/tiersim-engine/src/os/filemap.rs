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
use tiersim_core::{NodeId, Ns, Result};
use tiersim_devices::Device;

use super::{Memory, Metrics, PageEvent};
use crate::pagetable::{PageEntry, DROPPED, FILE};
use crate::platform::Platform;
use crate::storage::iopath::IoPath;

/// Pages a task dirties between two checks of the dirty limits: balance_dirty_pages_ratelimited
/// starts each task at nr_dirtied_pause = 128 KiB of pages (mm/page-writeback.c).
pub(crate) const RATELIMIT_PAGES: u64 = 32;

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
    /// Writeback requests in flight: (completion, pages), in issue order (PG_writeback pages).
    pub(crate) in_flight: VecDeque<(Ns, u64)>,
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
            path,
        })
    }

    pub(crate) fn active(&self) -> bool {
        let s = &self.stats;
        self.dax.is_some()
            || s.read_calls + s.write_calls + s.direct_reads + s.direct_writes + s.wb_flusher > 0
            || s.mappings + s.major_faults + s.minor_faults + s.unread_first_touches > 0
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
        let calls = s.read_calls + s.write_calls + s.direct_reads + s.direct_writes + s.dax_calls;
        serde_json::json!({
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
            "writeback_bytes": (s.wb_flusher + s.wb_reclaim + s.wb_direct) * page_size,
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
        })
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
