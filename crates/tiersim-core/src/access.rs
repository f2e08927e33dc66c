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
    /// Every flag bit this build knows; readers reject the others.
    pub const KNOWN_FLAGS: u8 = Access::FILE | Access::SYSCALL | Access::DIRECT;

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
}
