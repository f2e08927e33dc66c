//! A program that computes on anonymous memory and reads and writes a file, through read(2) /
//! write(2) system calls (`Access::SYSCALL`, served by the OS model's page cache) or through an
//! mmap of the file (loads and stores of `access_size` over the same bytes). File offsets are
//! sequential (each thread streams its own slice of the file, wrapping) or uniformly random,
//! aligned to `io_size`; anonymous accesses are uniformly random over the footprint. The file
//! is laid out after the anonymous memory, 2 MiB-aligned, so the two never share a page.
//! `accesses` counts operations: a mapped file operation is io_size / access_size accesses.
//! `write_ratio` is the anonymous accesses', `file_write_ratio` the file operations'.
//! `direct = true` makes the system calls O_DIRECT (`Access::DIRECT`): straight to the device.
//! The trace opens with the file's mapping record(s) (`Access::MAP`, CPU 0, no gap), so that
//! the OS model's readahead and fault read-around stop at the file's bounds and
//! `os.files_start_cached` knows which pages to warm, whether the file is read by calls or
//! through a mapping.

use rand::Rng;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tiersim_core::params::{ParamKind, ParamSpec, Params};
use tiersim_core::{Access, Error, Op, Result};

use super::{Common, Generator, ACCESSES, ACCESS_SIZE, BASE_ADDR, FOOTPRINT, GAP_INSTRUCTIONS, PAGE_SIZE, THREADS};
use crate::format::TraceMeta;

pub const PARAMS: &[ParamSpec] = &[
    FOOTPRINT,
    ACCESSES,
    THREADS,
    ACCESS_SIZE,
    GAP_INSTRUCTIONS,
    BASE_ADDR,
    PAGE_SIZE,
    super::write_ratio("0.3"),
    ParamSpec::new("file_size", ParamKind::Bytes, "64MiB", "bytes of the file").min(4096.0),
    ParamSpec::new("file_share", ParamKind::Float, "0.1", "share of the operations that are file reads or writes (the others are anonymous accesses)")
        .min(0.0)
        .max(1.0),
    ParamSpec::new("io_size", ParamKind::Bytes, "4KiB", "bytes per file operation; offsets are aligned to it")
        .min(1.0)
        .max(65535.0),
    ParamSpec::new("file_write_ratio", ParamKind::Float, "0", "share of the file operations that write").min(0.0).max(1.0),
    ParamSpec::new("pattern", ParamKind::Str, "sequential", "file offsets: sequential (each thread streams its slice) or random")
        .choices(&["sequential", "random"]),
    ParamSpec::new("file_access", ParamKind::Str, "syscall", "syscall: read/write system calls through the page cache; mmap: loads and stores of access_size to a mapping of the file")
        .choices(&["syscall", "mmap"]),
    ParamSpec::new("direct", ParamKind::Bool, "false", "open the file with O_DIRECT: the system calls bypass the page cache (syscall access only)"),
];

/// O_DIRECT wants offsets and sizes in whole logical blocks (bdev_logical_block_size, checked
/// in iomap_dio_bio_iter; else EINVAL): 512 B, the smallest a block device has.
const LOGICAL_BLOCK: u64 = 512;

struct FileIo {
    c: Common,
    file_base: u64,
    slots: u64,
    io_size: u64,
    file_share: f64,
    anon_write_ratio: f64,
    write_ratio: f64,
    random: bool,
    mmap: bool,
    /// The flags of a system call.
    call_flags: u8,
    /// Per thread: the next slot of its sequential stream.
    cursor: Vec<u64>,
    /// A mapped operation in progress: (cpu, next address, end, write).
    pending: Option<(u32, u64, u64, bool)>,
    /// The file's mapping records, emitted first.
    maps: std::vec::IntoIter<Access>,
    rng: ChaCha8Rng,
    i: u64,
}

pub fn build(p: &Params, seed: u64) -> Result<Box<dyn Generator>> {
    let c = Common::from_params(p)?;
    let io_size = p.bytes("io_size");
    let file_size = p.bytes("file_size");
    if file_size < io_size * c.threads {
        return Err(Error::config(
            "file_size",
            format!("{file_size} bytes cannot give each of {} threads one {io_size}-byte operation", c.threads),
        ));
    }
    let direct = p.bool("direct");
    if direct && p.str("file_access") == "mmap" {
        return Err(Error::config(
            "direct",
            "O_DIRECT applies to read/write system calls; a mapping of the file goes through the page cache",
        ));
    }
    if direct && !io_size.is_multiple_of(LOGICAL_BLOCK) {
        return Err(Error::config(
            "io_size",
            format!("{io_size} bytes is not a multiple of the {LOGICAL_BLOCK}-byte logical block O_DIRECT calls need"),
        ));
    }
    let file_base = c.footprint.next_multiple_of(2 << 20);
    c.check_span(file_base + file_size)?;
    let slots = file_size / io_size;
    let mmap = p.str("file_access") == "mmap";
    let maps = Access::mapping(c.base + file_base, file_size, 0, 0);
    Ok(Box::new(FileIo {
        c,
        file_base: c.base + file_base,
        slots,
        io_size,
        file_share: p.float("file_share"),
        anon_write_ratio: p.float("write_ratio"),
        write_ratio: p.float("file_write_ratio"),
        random: p.str("pattern") == "random",
        mmap,
        call_flags: Access::FILE | Access::SYSCALL | if direct { Access::DIRECT } else { 0 },
        cursor: (0..c.threads).map(|t| t * (slots / c.threads)).collect(),
        pending: None,
        maps: maps.into_iter(),
        rng: ChaCha8Rng::seed_from_u64(seed),
        i: 0,
    }))
}

impl FileIo {
    /// The next line of a mapped operation in progress.
    fn mapped_line(&mut self) -> Option<Access> {
        let (cpu, addr, end, write) = self.pending?;
        let size = self.c.access_size.min(end - addr);
        self.pending = (addr + size < end).then_some((cpu, addr + size, end, write));
        Some(Access {
            time: self.c.gap,
            addr,
            cpu,
            size: size as u16,
            op: if write { Op::Write } else { Op::Read },
            flags: Access::FILE,
        })
    }
}

impl Generator for FileIo {
    fn meta(&self) -> TraceMeta {
        self.c.meta()
    }

    fn next_access(&mut self) -> Option<Access> {
        if let Some(m) = self.maps.next() {
            return Some(m);
        }
        if let Some(a) = self.mapped_line() {
            return Some(a);
        }
        if self.i >= self.c.accesses {
            return None;
        }
        let cpu = (self.i % self.c.threads) as u32;
        self.i += 1;
        // Every draw happens every time, so the sequence of choices does not depend on the mix.
        let file = self.rng.gen::<f64>() < self.file_share;
        let write = self.rng.gen::<f64>() < self.write_ratio;
        let random_slot = self.rng.gen_range(0..self.slots);
        let anon_slot = self.rng.gen_range(0..self.c.footprint / self.c.access_size);
        let anon_write = self.rng.gen::<f64>() < self.anon_write_ratio;
        if !file {
            let op = if anon_write { Op::Write } else { Op::Read };
            return Some(Access {
                time: self.c.gap,
                addr: self.c.base + anon_slot * self.c.access_size,
                cpu,
                size: self.c.access_size as u16,
                op,
                flags: 0,
            });
        }
        let slot = if self.random {
            random_slot
        } else {
            let cur = &mut self.cursor[cpu as usize];
            let s = *cur;
            *cur = (s + 1) % self.slots;
            s
        };
        let addr = self.file_base + slot * self.io_size;
        if self.mmap {
            self.pending = Some((cpu, addr, addr + self.io_size, write));
            return self.mapped_line();
        }
        let op = if write { Op::Write } else { Op::Read };
        Some(Access { time: self.c.gap, addr, cpu, size: self.io_size as u16, op, flags: self.call_flags })
    }
}
