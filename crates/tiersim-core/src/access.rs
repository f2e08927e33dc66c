use serde::{Deserialize, Serialize};

use crate::units::Ns;

/// Direction of a memory access.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    Read,
    Write,
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Access {
    pub time: Ns,
    pub addr: u64,
    pub cpu: u32,
    pub size: u16,
    pub op: Op,
}
