use serde::{Deserialize, Serialize};

use crate::units::Ns;

/// Direction of a memory access.
/// One byte with fixed tags, as in the trace record (0 read, 1 write).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[repr(u8)]
pub enum Op {
    Read = 0,
    Write = 1,
}

impl Op {
    pub fn is_write(self) -> bool {
        matches!(self, Op::Write)
    }
}

/// One memory access as it comes out of a trace.
///
/// `time` is either an absolute time in ns or an instruction count since the previous access
/// of the same CPU; the trace header says which (see `tiersim_trace::TimeUnit`).
///
/// `flags`: `Access::FILE` marks an access to a file-backed page (page cache, a file mapping);
/// clear for anonymous memory. The OS model keeps such pages on the file LRU lists.
///
/// `repr(C)`: the fields sit exactly where the trace's 24-byte record has them (time 0, addr 8,
/// cpu 16, size 20, op 22, flags 23), so the trace reader can store decoded record bytes
/// straight into `Access` slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct Access {
    pub time: Ns,
    pub addr: u64,
    pub cpu: u32,
    pub size: u16,
    pub op: Op,
    pub flags: u8,
}

impl Access {
    /// The page is file-backed (page cache), not anonymous.
    pub const FILE: u8 = 1;
    /// A read(2) or write(2) system call on a file, not a load or store: `size` bytes from `addr`,
    /// the address at which the file's pages would be mapped (the same page cache pages as an
    /// mmap of it). Set with `FILE`.
    pub const SYSCALL: u8 = 2;
    /// The system call is on a file opened with O_DIRECT: the data moves between the device and
    /// the user buffer, not through the page cache. Set with `FILE | SYSCALL`.
    pub const DIRECT: u8 = 4;
    /// Not an access: a mapping record, an mmap of a file naming where its pages live, so that
    /// the OS model knows the file's bounds (fault read-around stops at them). Set with `FILE`
    /// only. `addr` is the file's first byte and `size` its length in 4 KiB units
    /// (`MAP_UNIT`); op `Read` starts a file, op `Write` continues the one ending at `addr` (a
    /// file longer than `u16::MAX` units takes several records). It takes effect when its CPU
    /// reaches it, and its time is that of any record (an instruction gap, or ns).
    ///
    /// Bit 3 marks every record that is not an access (`is_map`): with bit 0 only a mapping
    /// record, with bits 0 and 1 a file sync record (`is_sync`), with bits 0 and 2 a file size
    /// record (`is_size`), alone a futex record (`is_futex`).
    pub const MAP: u8 = 8;
    /// The flags of a file sync record: bit 3 (not an access) with bits 0 and 1 (a system call on
    /// a file). A combination, not a new bit, because bit 3 already tells every reader that the
    /// record is no access, and the engine refused bit 3 beside anything but bit 0, so a build
    /// older than sync records refuses such a trace naming the record instead of dropping the
    /// fsyncs unseen.
    pub const SYNC: u8 = Access::FILE | Access::SYSCALL | Access::MAP;
    /// The flags of a futex record: bit 3 (not an access) alone. A wait between threads: op
    /// `Read` says the thread resumed from a futex wait on the word at `addr` (a condition
    /// variable, or a mutex whose lock reached the kernel), op `Write` that a thread woke the
    /// waiters of that word. `addr` is only a key; `size` is 1. A waiter resumes no earlier than
    /// the latest wake of its word before its wait record in the file, once that wake's CPU has
    /// reached it (docs/model.md "Waits between threads"). Bit 3 alone, because the engine
    /// refused it before futex records existed, so an older build rejects such a trace naming
    /// the record instead of replaying it without its waits.
    pub const FUTEX: u8 = Access::MAP;
    /// The flags of a file size record: bit 3 (not an access) with bits 0 and 2. What the file
    /// held when the program first opened it in the trace (its size after the open: 0 when the
    /// open created or truncated it): `addr` is the file's first byte plus that many bytes, op
    /// `Read` naming the file whose mapping holds `addr`, op `Write` the one whose mapping ends at
    /// `addr` (it held every mapped byte, or more); `size` is 1. Its pages wholly past `addr` are
    /// holes until the trace writes them (docs/trace-format.md). A combination the engine refused
    /// before (bit 2 without bit 1, bit 3 beside more than bit 0), so an older build rejects such
    /// a trace naming the record instead of replaying it without the sizes.
    pub const SIZE: u8 = Access::FILE | Access::DIRECT | Access::MAP;
    /// Bytes per unit of a mapping record's `size`: x86-64's base page, mmap's granularity.
    pub const MAP_UNIT: u64 = 4096;
    /// Every flag bit this build knows; readers reject the others.
    pub const KNOWN_FLAGS: u8 = Access::FILE | Access::SYSCALL | Access::DIRECT | Access::MAP;

    #[inline]
    pub fn is_file(&self) -> bool {
        self.flags & Access::FILE != 0
    }

    #[inline]
    pub fn is_syscall(&self) -> bool {
        self.flags & Access::SYSCALL != 0
    }

    #[inline]
    pub fn is_direct(&self) -> bool {
        self.flags & Access::DIRECT != 0
    }

    /// Not an access (bit 3): a mapping record, a file sync record or a futex record. None moves
    /// bytes or touches a page, so every tool that counts accesses leaves them all out alike.
    #[inline]
    pub fn is_map(&self) -> bool {
        self.flags & Access::MAP != 0
    }

    /// A file sync record (`SYNC`): fsync(2) (op `Read`) or fdatasync(2) (op `Write`) on the file
    /// whose pages hold `addr`, which the trace's mapping records name. `size` is 1 (a record's
    /// size is never 0; other values are reserved). The calling CPU waits until the file's dirty
    /// pages are written back and the device has flushed its write cache.
    #[inline]
    pub fn is_sync(&self) -> bool {
        self.flags & Access::SYNC == Access::SYNC
    }

    /// A futex record (`FUTEX`): op `Read` a wait that returned, op `Write` a wake.
    #[inline]
    pub fn is_futex(&self) -> bool {
        self.flags == Access::FUTEX
    }

    /// A file size record (`SIZE`).
    #[inline]
    pub fn is_size(&self) -> bool {
        self.flags == Access::SIZE
    }

    /// The mapping records of a file mapped at `addr` for `bytes` bytes, all at
    /// CPU `cpu` with time `time` on the first and 0 on the continuations.
    pub fn mapping(addr: u64, bytes: u64, cpu: u32, time: Ns) -> Vec<Access> {
        let mut units = bytes.div_ceil(Access::MAP_UNIT).max(1);
        let mut out = Vec::new();
        let mut at = addr;
        while units > 0 {
            let n = units.min(u16::MAX as u64);
            let op = if out.is_empty() { Op::Read } else { Op::Write };
            out.push(Access {
                time: if out.is_empty() { time } else { 0 },
                addr: at,
                cpu,
                size: n as u16,
                op,
                flags: Access::FILE | Access::MAP,
            });
            at += n * Access::MAP_UNIT;
            units -= n;
        }
        out
    }

    /// A mapping record's bytes, `[addr, addr + map_bytes())`.
    #[inline]
    pub fn map_bytes(&self) -> u64 {
        self.size as u64 * Access::MAP_UNIT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_mapping_takes_continuation_records() {
        let m = Access::mapping(1 << 30, (1 << 30) + 1, 3, 7);
        // 262,145 units: four full records and one of 5.
        assert_eq!(m.iter().map(|a| a.size as u64).collect::<Vec<_>>(), vec![65535, 65535, 65535, 65535, 5]);
        assert_eq!(
            m.iter().map(|a| a.op).collect::<Vec<_>>(),
            vec![Op::Read, Op::Write, Op::Write, Op::Write, Op::Write]
        );
        assert_eq!(m[1].addr, m[0].addr + m[0].map_bytes());
        assert_eq!(m.last().map(|a| a.addr + a.map_bytes()), Some((1 << 30) + 262_145 * 4096));
        assert!(m.iter().all(|a| a.flags == Access::FILE | Access::MAP && a.cpu == 3));
        assert_eq!((m[0].time, m[1].time), (7, 0));
        assert_eq!(Access::mapping(0, 4096, 0, 0).len(), 1);
    }
}
