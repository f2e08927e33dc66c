//! The steps of an I/O the configured way (buffered, direct or DAX; calls or mmap), the block
//! requests they submit, reads into the page cache, and the storage engine's operations and log.

use tiersim_core::{Ns, Op};
use tiersim_devices::DeviceRequest;

use super::step::Step;
use super::{Api, Bench, CacheMode, Layer, LogMode, Mem, LINE, USER_BASE};
use crate::storage::iopath::Driver;
use crate::storage::kvstore::KvOp;
use crate::storage::pagecache::PAGE;

impl Bench {
    /// The steps of reading or writing `bytes` at file `offset` the configured way.
    pub(super) fn file_io(&self, t: usize, op: Op, offset: u64, bytes: u64) -> Vec<Step> {
        let user = USER_BASE + t as u64 * (1 << 24);
        let (first, count) = (offset / PAGE, bytes.div_ceil(PAGE));
        let p = &self.path;
        let sys = Step::Cpu(p.syscall, Layer::Syscall);
        match (self.mode, self.api) {
            (CacheMode::Buffered, Api::Syscall) => {
                let body = match op {
                    Op::Read => Step::ReadPages { first, count, user },
                    Op::Write => Step::WritePages { first, count, user },
                };
                vec![sys, Step::Cpu(p.vfs, Layer::Fs), body]
            }
            (CacheMode::Buffered, Api::Mmap) => vec![Step::MapAccess { first, count, write: op == Op::Write }],
            (CacheMode::Direct, _) => {
                vec![sys, Step::Cpu(p.vfs, Layer::Fs), Step::Block { op, offset, bytes, user, writeback: 0 }]
            }
            (CacheMode::Dax, Api::Syscall) => {
                // dax_iomap_rw: one extent lookup, then a copy between PMEM and the user buffer
                // (copy_mc_to_user / copy_from_iter_flushcache, i.e. ntstores).
                let copy = match op {
                    Op::Read => Step::Copy { src: Mem::Pm(offset), dst: Mem::Dram(user), bytes },
                    Op::Write => Step::Copy { src: Mem::Dram(user), dst: Mem::Pm(offset), bytes },
                };
                vec![sys, Step::Cpu(p.vfs + p.fs_map, Layer::Fs), copy, Step::CopyEnd]
            }
            (CacheMode::Dax, Api::Mmap) => {
                let mut v = Vec::new();
                let region = offset / p.dax_fault_bytes;
                if !self.dax_mapped.contains(&region) {
                    v.push(Step::DaxFault(region));
                }
                v.push(match op {
                    Op::Read => Step::Copy { src: Mem::Pm(offset), dst: Mem::Cpu, bytes },
                    Op::Write => Step::Copy { src: Mem::Cpu, dst: Mem::Pm(offset), bytes },
                });
                v.push(Step::CopyEnd);
                v
            }
        }
    }

    pub(super) fn mem_access(&mut self, now: Ns, m: Mem, off: u64, op: Op, cpu: u32) -> Ns {
        let (set, addr) = match m {
            Mem::Cpu => return now,
            Mem::Dram(a) => (&mut self.dram, a + off),
            Mem::Pm(a) => (&mut self.dev, a + off),
        };
        set.access(&DeviceRequest { now, addr, size: LINE as u32, op, socket: 0, cpu, remote: false })
    }

    /// Submit a block request of `bytes` at `offset` at `at` (split at max_request, each part
    /// with a tag); `buf` is the DRAM address the data moves to or from. NVMe: returns when the
    /// data is there (before the completion's CPU), and no steps. The bio-based pmem driver
    /// copies in the submitter's context: returns `at` and the copy steps the submitter runs.
    pub(super) fn submit(&mut self, at: Ns, t: usize, op: Op, offset: u64, bytes: u64, buf: u64) -> (Ns, Vec<Step>) {
        let mut done = at;
        let mut steps = Vec::new();
        let mut o = 0;
        while o < bytes {
            let part = (bytes - o).min(self.path.max_request);
            self.block_requests += 1;
            match self.driver {
                Driver::Nvme => {
                    let (tag, start) = self.tags.acquire(at);
                    let req = DeviceRequest {
                        now: start,
                        addr: offset + o,
                        size: part as u32,
                        op,
                        socket: 0,
                        cpu: t as u32,
                        remote: false,
                    };
                    let end = self.dev.access(&req);
                    self.tags.release(tag, end);
                    done = done.max(end);
                }
                Driver::PmemBio => {
                    let (src, dst) = match op {
                        Op::Read => (Mem::Pm(offset + o), Mem::Dram(buf + o)),
                        Op::Write => (Mem::Dram(buf + o), Mem::Pm(offset + o)),
                    };
                    steps.push(Step::Copy { src, dst, bytes: part });
                    steps.push(Step::CopyEnd);
                }
            }
            o += part;
        }
        (done, steps)
    }

    /// Read `[first, first + count)` into the page cache per `plan`; returns when the sync
    /// part's data is there, with the CPU the submitter spent on request overheads.
    pub(super) fn read_into_cache(
        &mut self,
        at: Ns,
        t: usize,
        first: u64,
        count: u64,
        sync: bool,
    ) -> (Ns, Ns, Vec<Step>) {
        let (blk, drv, _) = self.path.request_overhead(self.driver);
        let mut cpu = 0;
        let mut ready = at;
        let mut steps = Vec::new();
        // Contiguous runs of pages not yet cached, each a request (mpage_readahead).
        let mut p = first;
        while p < first + count {
            if self.cache.contains(p) {
                p += 1;
                continue;
            }
            let mut q = p;
            while q < first + count && !self.cache.contains(q) && (q - p + 1) * PAGE <= self.path.max_request {
                q += 1;
            }
            let n = q - p;
            cpu += n * self.path.page_alloc + self.path.fs_map + blk + drv;
            let submit = at + cpu;
            // Frames first, so the request reads into them.
            let mut frames = Vec::with_capacity(n as usize);
            for pg in p..q {
                let (frame, victim) = self.cache.insert(pg, Ns::MAX);
                if let Some((vp, vframe, dirty)) = victim {
                    self.mapped.remove(&vp);
                    if dirty {
                        // Reclaim writes the dirty victim before reusing its frame (pageout).
                        let (w, s) = self.submit(submit, t, Op::Write, vp * PAGE, PAGE, vframe * PAGE);
                        self.writeback_pages += 1;
                        ready = ready.max(w);
                        steps.extend(s);
                    }
                }
                frames.push(frame);
            }
            let (done, s) = self.submit(submit, t, Op::Read, p * PAGE, n * PAGE, frames[0] * PAGE);
            steps.extend(s);
            self.cache.set_ready(p, q, done);
            if sync {
                ready = ready.max(done);
            }
            p = q;
        }
        (ready, cpu, steps)
    }

    /// The steps of one storage-engine operation.
    pub(super) fn kv_steps(&mut self, t: usize, op: KvOp) -> Vec<Step> {
        let Some(kv) = self.kv.as_mut() else { return Vec::new() };
        let access = kv.access(op);
        let cpu = kv.op_cpu();
        let mut v = Vec::new();
        if let Some(evicted) = access.write_back {
            v.extend(self.file_io(t, Op::Write, evicted, self.block));
        }
        if let Some(leaf) = access.read {
            v.extend(self.file_io(t, Op::Read, leaf, self.block));
        }
        v.push(Step::Cpu(cpu, Layer::Engine));
        if let Some(bytes) = access.log {
            if self.log_mode != LogMode::None {
                v.push(Step::Commit { bytes });
            }
        }
        v
    }

    /// The leader's write of a commit group: `bytes` appended to the log, then made durable.
    pub(super) fn log_write(&mut self, t: usize, bytes: u64) -> Vec<Step> {
        let kv_log = self.kv.as_ref().map_or(1, |k| k.log_pages());
        let off = self.log_offset;
        self.log_offset = (off + bytes) % (kv_log * PAGE);
        let at = self.log_base + off;
        let p = self.path;
        let user = USER_BASE + t as u64 * (1 << 24);
        match self.log_mode {
            LogMode::Dax => vec![Step::Copy { src: Mem::Dram(user), dst: Mem::Pm(at), bytes }, Step::CopyEnd],
            // pwrite on an fsdax file copies straight to PMEM with ntstores; fdatasync then has
            // no dirty page to write.
            _ if self.mode == CacheMode::Dax => vec![
                Step::Cpu(p.syscall, Layer::Syscall),
                Step::Cpu(p.vfs + p.fs_map, Layer::Fs),
                Step::Copy { src: Mem::Dram(user), dst: Mem::Pm(at), bytes },
                Step::CopyEnd,
                Step::Cpu(p.syscall + p.fsync, Layer::Fs),
            ],
            _ => {
                // pwrite into the page cache, then fdatasync writes the touched log pages.
                let (first, last) = (at / PAGE, (at + bytes - 1) / PAGE);
                let mut v = vec![Step::Cpu(p.syscall, Layer::Syscall), Step::Cpu(p.vfs, Layer::Fs)];
                v.push(Step::Copy { src: Mem::Dram(user), dst: Mem::Dram((1 << 43) + off), bytes });
                v.push(Step::CopyEnd);
                v.push(Step::Cpu(p.syscall + p.fsync, Layer::Fs));
                v.push(Step::Block {
                    op: Op::Write,
                    offset: first * PAGE,
                    bytes: (last - first + 1) * PAGE,
                    user: (1 << 43) + first * PAGE,
                    writeback: 0,
                });
                v
            }
        }
    }
}
