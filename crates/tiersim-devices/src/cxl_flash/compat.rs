//! `compat = "mqsim_cxl"`: the parts of MQSim_CXL (spypaul/MQSim_CXL_Linux 3701f7b) that the
//! compatibility mode reproduces with state of their own: its single device-DRAM server with its
//! queue limit, the ONFI NVDDR2 command cycles, and the per-die program batching of its no-cache
//! write path. The list of every compat behaviour and its source line is in docs/cxl_flash.md.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use tiersim_core::Ns;

use crate::pipe::{ps_from_ns, Pipe, Ps};

/// MQSim_CXL's device DRAM event: `estimate_dram_access_time(64 B)` with its shipped timings
/// (tRCD 13 + tCL 13 + 32 transfers at 1600 MT/s = 46 ns), one event at a time (DRAM_Model.cpp).
pub(super) const MQSIM_DRAM_EVENT_NS: Ns = 46;
/// Events the DRAM model's wait queue holds, plus the one in service (`max_wait_queue_size` 8).
pub(super) const MQSIM_DRAM_QUEUE: Ns = 9;
pub(super) const MQSIM_READ_COMMAND_NS: Ns = 290;
pub(super) const MQSIM_PROGRAM_COMMAND_NS: Ns = 361;

/// MQSim_CXL's `CXL_DRAM_Model`: one FCFS server, `MQSIM_DRAM_EVENT_NS` per 64 B event (hits,
/// misses and hits under miss alike; fills and write-backs cost it nothing).
pub(super) struct MqsimDram {
    pub(super) server: Pipe,
    /// Events of misses and merged requests, due when their line arrives from flash.
    pub(super) due: BinaryHeap<Reverse<Ps>>,
    /// Per die, the last program of the no-cache write path.
    pub(super) programs: Vec<ProgramBatch>,
}

#[derive(Debug, Clone, Copy, Default)]
pub(super) struct ProgramBatch {
    pub(super) start: Ps,
    pub(super) done: Ps,
    pub(super) units: u32,
}

impl MqsimDram {
    pub(super) fn new(dies: u32) -> MqsimDram {
        MqsimDram {
            server: Pipe::new(64.0 / (MQSIM_DRAM_EVENT_NS as f64 * 1e-9)),
            due: BinaryHeap::new(),
            programs: vec![ProgramBatch::default(); dies as usize],
        }
    }

    /// The completion of the `nth` (from 1) request of a line whose data arrives at `ready`:
    /// MQSim_CXL drains an MSHR row into the DRAM queue one 46 ns event after the other.
    pub(super) fn arrival_event(&mut self, ready: Ps, nth: u32) -> Ps {
        self.due.push(Reverse(ready));
        ready + ps_from_ns(MQSIM_DRAM_EVENT_NS) * Ps::from(nth)
    }

    /// Serve every due event up to `t`, in time order.
    pub(super) fn advance(&mut self, t: Ps) {
        while let Some(&Reverse(when)) = self.due.peek() {
            if when > t {
                break;
            }
            self.due.pop();
            self.server.serve(when, 64);
        }
    }
}
