//! The kernel's file I/O path (Linux 5.x, ext4) as layers, each with a CPU cost and its source:
//! system call entry/exit, VFS and file system, page cache, block layer, driver, completion
//! (interrupt or polling), page faults of mmap and DAX. The device time itself comes from the
//! device models; copies between page cache, user buffers and PMEM are served by the DRAM and
//! PMEM device models line by line. Costs are published per-operation figures (sources on each
//! parameter, collected in docs/model.md "Storage"); per-device queue depth is blk-mq's tag pool.

use tiersim_core::{Error, Ns, ParamKind, ParamSpec, Params, Result};

/// The ext4 block on fsdax: the kernel's base page, 4 KiB on x86-64, whatever page size the
/// program's memory uses (ext4_fill_super refuses DAX for a block size other than PAGE_SIZE,
/// fs/ext4/super.c; transparent or huge pages do not change PAGE_SIZE). The unit of the blocks
/// a DAX write allocates and zeroes and of the journal's blocks.
pub const FS_BLOCK: u64 = 4096;

pub const SPECS: &[ParamSpec] = &[
    ParamSpec::new(
        "syscall",
        ParamKind::Duration,
        "100ns",
        "system call entry + exit on x86-64 without KPTI (Cascade Lake fixes Meltdown in hardware): \
         ~100 ns for a null call (Soares & Stumm, FlexSC, OSDI'10: 100-150 ns on Core i7)",
    ),
    ParamSpec::new(
        "vfs",
        ParamKind::Duration,
        "300ns",
        "VFS + ext4 per read/write call: fdget, rw_verify_area, generic_file_read_iter / \
         ext4_file_write_iter, file locks and atime/mtime (Lee et al., AIOS, ATC'19 fig. 2: a few \
         hundred ns of a 4 KiB read outside page cache and block layer; approximate)",
    ),
    ParamSpec::new(
        "page_cache_lookup",
        ParamKind::Duration,
        "50ns",
        "per 4 KiB page: find_get_page in the page-cache xarray + refcount (mm/filemap.c); tens of ns",
    ),
    ParamSpec::new(
        "page_alloc",
        ParamKind::Duration,
        "250ns",
        "per 4 KiB page on a miss: page allocation + add_to_page_cache_lru (xarray insert, LRU add, \
         memcg charge) (AIOS ATC'19 fig. 2 puts page allocation and cache insertion at ~0.2-0.4 us)",
    ),
    ParamSpec::new(
        "write_page",
        ParamKind::Duration,
        "200ns",
        "per 4 KiB page of a buffered write: ext4 write_begin/write_end, set_page_dirty, \
         balance_dirty_pages_ratelimited (mm/filemap.c generic_perform_write); approximate",
    ),
    ParamSpec::new(
        "fs_map",
        ParamKind::Duration,
        "400ns",
        "per I/O request: ext4 extent lookup (ext4_map_blocks / iomap_begin) and bio construction \
         (AIOS ATC'19 fig. 2; approximate)",
    ),
    ParamSpec::new(
        "block_layer",
        ParamKind::Duration,
        "1000ns",
        "per request through blk-mq: bio allocation, plugging, tag, request setup and completion \
         (AIOS ATC'19 fig. 2: ~1-1.5 us of a 4 KiB read on an Optane SSD)",
    ),
    ParamSpec::new(
        "bio_layer",
        ParamKind::Duration,
        "300ns",
        "per request of a bio-based driver (drivers/nvdimm/pmem.c pmem_submit_bio): no tag, no \
         queue, no interrupt; submit_bio and bio_endio only",
    ),
    ParamSpec::new(
        "driver",
        ParamKind::Duration,
        "500ns",
        "per request in the NVMe driver: nvme_queue_rq command build + doorbell, and the \
         completion handler (AIOS ATC'19 fig. 2; approximate)",
    ),
    ParamSpec::new(
        "irq_completion",
        ParamKind::Duration,
        "3000ns",
        "interrupt completion of a synchronous request: interrupt, wakeup and context switch back \
         to the sleeping thread (Yang, Minturn & Hady, 'When Poll is Better than Interrupt', \
         FAST'12: interrupts cost a few us more than polling per 4 KiB I/O)",
    ),
    ParamSpec::new(
        "poll_completion",
        ParamKind::Duration,
        "300ns",
        "polled completion (io_poll): the thread spins on the completion queue, no context switch \
         (FAST'12 as above)",
    ),
    ParamSpec::new(
        "completion",
        ParamKind::Str,
        "irq",
        "how NVMe completions reach the waiting thread: irq (Linux default) or poll",
    )
    .choices(&["irq", "poll"]),
    ParamSpec::new(
        "minor_fault",
        ParamKind::Duration,
        "1000ns",
        "mmap fault on a page already in the page cache: exception, filemap_fault / \
         filemap_map_pages, PTE updates (~1 us with fault-around; Linux 5.x)",
    ),
    ParamSpec::new(
        "fault_around_pages",
        ParamKind::Int,
        "16",
        "pages a file fault maps when they are cached (fault_around_bytes = 64 KiB, mm/memory.c)",
    )
    .min(1.0),
    ParamSpec::new(
        "dax_fault",
        ParamKind::Duration,
        "1500ns",
        "DAX mmap fault (dax_iomap_fault: extent lookup + PTE/PMD insert, no page cache)",
    ),
    ParamSpec::new(
        "dax_fault_bytes",
        ParamKind::Bytes,
        "2MiB",
        "bytes one DAX fault maps: a 2 MiB PMD on aligned fsdax / devdax (the blog: DAX keeps huge \
         pages, the buffer cache does not)",
    ),
    ParamSpec::new(
        "dax_new_blocks",
        ParamKind::Str,
        "preallocated",
        "which blocks of a file on fsdax exist before a write: preallocated (every block of a \
         mapped file, as the generators' files are laid out) or past_traced_end (a file's blocks \
         end at the highest byte the trace has read or written in it so far: the trace carries no \
         file sizes; a write past that allocates, ext4_iomap_alloc's EXT4_GET_BLOCKS_CREATE_ZERO \
         zeroes the new blocks on PMEM and the next fsync/fdatasync of the file commits the \
         journal) or size_at_open (a file's blocks exist below its size when the program opened \
         it, from the trace's file size records, and where the trace's write calls have written \
         since: a write allocates the others it covers, holes wherever they lie; a file with no \
         size record is taken as past_traced_end takes it)",
    )
    .choices(&["preallocated", "past_traced_end", "size_at_open"]),
    ParamSpec::new(
        "cache_new_pages",
        ParamKind::Str,
        "preallocated",
        "which pages of a file hold data on the block device before a buffered write: \
         preallocated (every page of a mapped file, as the generators' files are laid out: a \
         write of part of an uncached page reads it first) or past_traced_end (a file ends at the \
         highest byte the trace's calls and faults have read or written in it so far: the trace \
         carries no file sizes; a write of part of an uncached page that starts at or past that \
         reads nothing, as ext4's write_begin zeroes the rest of a page beyond i_size instead of \
         reading it: fs/buffer.c __block_write_begin_int, mm/filemap.c generic_perform_write) or \
         size_at_open (a file holds data below its size when the program opened it, from the \
         trace's file size records, and in the pages the trace has written since: a write of \
         part of an uncached page wholly past that size that the trace has not written reads \
         nothing, a hole or unwritten extent that ext4_block_write_begin zeroes; a file with no \
         size record is taken as past_traced_end takes it)",
    )
    .choices(&["preallocated", "past_traced_end", "size_at_open"]),
    ParamSpec::new(
        "journal_blocks",
        ParamKind::Int,
        "5",
        "4 KiB blocks one jbd2 commit of a block allocation writes to the journal: a descriptor \
         block, the block bitmap and group descriptor (ext4_mb_mark_diskspace_used) and the inode \
         table block holding the extent tree and i_size (ext4_mark_inode_dirty), then the commit \
         block (fs/jbd2/commit.c jbd2_journal_commit_transaction)",
    )
    .min(2.0),
    ParamSpec::new(
        "journal_size",
        ParamKind::Bytes,
        "128MiB",
        "the ext4 journal on a fsdax device: the circular area jbd2's commits write in turn, at the \
         top of the device's 48-bit address space. mke2fs's default for a file system of 16 to 32 \
         GiB, 32768 blocks of 4 KiB (e2fsprogs lib/ext2fs/mkjournal.c ext2fs_default_journal_size; \
         1 GiB from 128 GiB up); at least 4 MiB (jbd2's least, JBD2_MIN_JOURNAL_BLOCKS = 1024 \
         blocks, include/linux/jbd2.h) and one commit's journal_blocks, at most 1 TiB (a sliver of \
         the 256 TiB of device addresses the files are folded into, which it shares)",
    )
    .min(4194304.0)
    .max(1099511627776.0),
    ParamSpec::new(
        "fsync",
        ParamKind::Duration,
        "2000ns",
        "fdatasync bookkeeping beyond the data writes: file_write_and_wait_range, ext4_sync_file, \
         a FLUSH to a power-loss-protected drive (no journal commit for an overwritten \
         preallocated log); approximate",
    ),
    ParamSpec::new(
        "queue_depth",
        ParamKind::Int,
        "128",
        "requests the block layer keeps outstanding per device (blk-mq nr_requests = \
         BLKDEV_DEFAULT_RQ 128); more wait for a tag",
    )
    .min(1.0)
    .max(65536.0),
    ParamSpec::new(
        "max_request",
        ParamKind::Bytes,
        "128KiB",
        "largest block request (max_sectors_kb); larger transfers split",
    ),
];

/// The costs resolved, in ns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IoPath {
    pub syscall: Ns,
    pub vfs: Ns,
    pub page_cache_lookup: Ns,
    pub page_alloc: Ns,
    pub write_page: Ns,
    pub fs_map: Ns,
    pub block_layer: Ns,
    pub bio_layer: Ns,
    pub driver: Ns,
    pub irq_completion: Ns,
    pub poll_completion: Ns,
    pub poll: bool,
    pub minor_fault: Ns,
    pub fault_around_pages: u64,
    pub dax_fault: Ns,
    pub dax_fault_bytes: u64,
    /// `dax_new_blocks = "past_traced_end"` or `"size_at_open"`: writes past a file's traced end
    /// allocate blocks.
    pub dax_grow: bool,
    /// `dax_new_blocks = "size_at_open"`: for a file with a size record, the blocks a write
    /// allocates are those wholly past its size at open that no write call has written yet.
    pub dax_sized: bool,
    /// `cache_new_pages = "past_traced_end"` or `"size_at_open"`: a buffered write of part of an
    /// uncached page at or past a file's traced end reads nothing from the device.
    pub cache_grow: bool,
    /// `cache_new_pages = "size_at_open"`: for a file with a size record, the page must lie
    /// wholly past what the file held at open and be unwritten by the trace instead.
    pub cache_sized: bool,
    pub journal_blocks: u64,
    /// Bytes of the journal's circular area (`journal_size`).
    pub journal_bytes: u64,
    pub fsync: Ns,
    pub queue_depth: usize,
    pub max_request: u64,
}

/// How a block device's requests complete: blk-mq + NVMe with a completion, or a bio-based
/// driver that copies synchronously in the submitter's context (the pmem block driver).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    Nvme,
    PmemBio,
}

/// Time per layer, accumulated over operations, for the breakdown table.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Layers {
    pub syscall: Ns,
    pub fs: Ns,
    pub page_cache: Ns,
    pub block: Ns,
    pub driver: Ns,
    pub completion: Ns,
    pub fault: Ns,
    /// Waiting for a device (media time, transfers, queueing, tags).
    pub device: Ns,
    /// Copies between memories (DRAM page cache, user buffer, PMEM).
    pub copy: Ns,
    /// Throttled by dirty limits or waiting for a page another thread reads in.
    pub wait: Ns,
}

impl Layers {
    pub const NAMES: [&'static str; 10] =
        ["syscall", "fs", "page_cache", "block", "driver", "completion", "fault", "device", "copy", "wait"];

    pub fn values(&self) -> [Ns; 10] {
        [
            self.syscall,
            self.fs,
            self.page_cache,
            self.block,
            self.driver,
            self.completion,
            self.fault,
            self.device,
            self.copy,
            self.wait,
        ]
    }

    pub fn total(&self) -> Ns {
        self.values().iter().sum()
    }
}

impl IoPath {
    pub fn from_params(p: &Params) -> Result<Self> {
        let (journal_blocks, journal_bytes) = (p.uint("journal_blocks").max(2), p.bytes("journal_size"));
        // A commit is written in one piece onto the circular area, so it must fit (4 KiB ext4
        // blocks, mke2fs's default block size).
        if journal_blocks.saturating_mul(FS_BLOCK) > journal_bytes {
            return Err(Error::config(
                "journal_size",
                format!(
                    "{journal_bytes} B holds fewer than journal_blocks = {journal_blocks} blocks of 4 KiB, one commit"
                ),
            ));
        }
        Ok(IoPath {
            syscall: p.duration("syscall"),
            vfs: p.duration("vfs"),
            page_cache_lookup: p.duration("page_cache_lookup"),
            page_alloc: p.duration("page_alloc"),
            write_page: p.duration("write_page"),
            fs_map: p.duration("fs_map"),
            block_layer: p.duration("block_layer"),
            bio_layer: p.duration("bio_layer"),
            driver: p.duration("driver"),
            irq_completion: p.duration("irq_completion"),
            poll_completion: p.duration("poll_completion"),
            poll: p.str("completion") == "poll",
            minor_fault: p.duration("minor_fault"),
            fault_around_pages: p.uint("fault_around_pages"),
            dax_fault: p.duration("dax_fault"),
            dax_fault_bytes: p.bytes("dax_fault_bytes").max(4096),
            dax_grow: p.str("dax_new_blocks") != "preallocated",
            dax_sized: p.str("dax_new_blocks") == "size_at_open",
            cache_grow: p.str("cache_new_pages") != "preallocated",
            cache_sized: p.str("cache_new_pages") == "size_at_open",
            journal_blocks,
            journal_bytes,
            fsync: p.duration("fsync"),
            queue_depth: p.uint("queue_depth").max(1) as usize,
            max_request: p.bytes("max_request").max(4096),
        })
    }

    pub fn defaults() -> Self {
        Self::from_params(&Params::defaults(SPECS).expect("the defaults parse")).expect("the defaults are valid")
    }

    /// CPU time of one block request below the file system, before and after the device:
    /// (block layer, driver, completion) for `driver`.
    pub fn request_overhead(&self, driver: Driver) -> (Ns, Ns, Ns) {
        match driver {
            Driver::Nvme => {
                (self.block_layer, self.driver, if self.poll { self.poll_completion } else { self.irq_completion })
            }
            Driver::PmemBio => (self.bio_layer, 0, 0),
        }
    }
}

/// blk-mq's tag pool of one device: a request waits for a free tag.
#[derive(Debug, Clone)]
pub struct Tags {
    free_at: Vec<Ns>,
}

impl Tags {
    pub fn new(depth: usize) -> Self {
        Tags { free_at: vec![0; depth.max(1)] }
    }

    /// When a request arriving at `at` gets a tag; the tag is held until `release` sets its end.
    pub fn acquire(&mut self, at: Ns) -> (usize, Ns) {
        let (i, free) = self.free_at.iter().copied().enumerate().min_by_key(|&(_, t)| t).unwrap_or((0, 0));
        (i, at.max(free))
    }

    pub fn release(&mut self, tag: usize, done: Ns) {
        if let Some(t) = self.free_at.get_mut(tag) {
            *t = done;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_overhead_by_driver_and_completion() {
        let p = IoPath::defaults();
        assert_eq!(p.request_overhead(Driver::Nvme), (1000, 500, 3000));
        assert_eq!(p.request_overhead(Driver::PmemBio), (300, 0, 0));
        let polled = IoPath { poll: true, ..p };
        assert_eq!(polled.request_overhead(Driver::Nvme), (1000, 500, 300));
    }

    #[test]
    fn tags_make_the_excess_request_wait() {
        let mut t = Tags::new(2);
        let (a, s) = t.acquire(0);
        t.release(a, 10);
        assert_eq!(s, 0);
        let (b, s) = t.acquire(1);
        t.release(b, 20);
        assert_eq!(s, 1);
        // Both tags busy: the third request starts when the first frees, at 10.
        let (_, s) = t.acquire(2);
        assert_eq!(s, 10);
    }
}
