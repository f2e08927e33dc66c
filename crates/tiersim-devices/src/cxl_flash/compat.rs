//! `compat = "mqsim_cxl"`: the parts of MQSim_CXL (spypaul/MQSim_CXL_Linux 3701f7b) that the
//! compatibility mode reproduces with state of their own: its single device-DRAM server with its
//! queue limit, the ONFI NVDDR2 command cycles, its static plane allocation, and the per-die
//! program batching of its write path. The list of every compat behaviour and its source line is
//! in docs/cxl_flash.md.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};

use tiersim_core::Ns;

use super::flash::Geometry;
use crate::pipe::{ps_from_ns, Pipe, Ps};

/// MQSim_CXL's device DRAM event: `estimate_dram_access_time(64 B)` with its shipped timings
/// (tRCD 13 + tCL 13 + 32 transfers at 1600 MT/s = 46 ns), one event at a time (DRAM_Model.cpp).
pub(super) const MQSIM_DRAM_EVENT_NS: Ns = 46;
/// Events the DRAM model's wait queue holds, plus the one in service (`max_wait_queue_size` 8).
pub(super) const MQSIM_DRAM_QUEUE: Ns = 9;
pub(super) const MQSIM_READ_COMMAND_NS: Ns = 290;
/// What a die's read takes beyond its sensing time: the ready/busy signal delay of a read
/// command (`_RBSignalDelayRead`, default `commProtocolDelayRead = 20`, ssd/Flash_Chip.h:29, added
/// to every read command's latency at :101). Programs and erases add 0.
pub(super) const MQSIM_READ_RB_DELAY_NS: Ns = 20;
pub(super) const MQSIM_PROGRAM_COMMAND_NS: Ns = 361;
/// Flash accesses (reads and writes) the back end holds before MQSim_CXL stops its host feed
/// (`flash_back_end_queue_size`, cxl/Host_Interface_CXL.h:90; counted at :934,942, checked at :947).
pub(super) const MQSIM_BACKEND_QUEUE: usize = 1024;
/// Command cycles each plane after the first adds to a multi-plane read: t_DBSY + 6 t_WC
/// (ssd/ONFI_Channel_NVDDR2.cpp:16-19: 290, 940, 1590, 2240 ns for 1-4 planes).
pub(super) const MQSIM_READ_PLANE_NS: Ns = 650;

/// Die (channel-first numbering, as `Geometry::channel_of`) and plane of logical unit `lpn`
/// under MQSim_CXL's static PCWD plane allocation (its example ssdconfig.xml): plane, then
/// channel, then chip (`ssd/Address_Mapping_Unit_Page_Level.cpp:1828-1832`; one die per chip).
/// Every unit of the trace lives there, read or written: MQSim allocates a write's page inside
/// this plane, and a unit read before it was written gets this plane at page 0
/// (`online_create_entry_for_reads` sets only channel, chip, die and plane).
pub(super) fn pcwd(geo: &Geometry, lpn: u64) -> (u32, u32) {
    let planes = u64::from(geo.planes);
    let channels = u64::from(geo.channels);
    let plane = (lpn % planes) as u32;
    let channel = (lpn / planes % channels) as u32;
    let chip = (lpn / (planes * channels) % u64::from(geo.ways)) as u32;
    (chip * geo.channels + channel, plane)
}

/// MQSim_CXL's `CXL_DRAM_Model`: one FCFS server, `MQSIM_DRAM_EVENT_NS` per 64 B event (hits,
/// misses and hits under miss alike; fills and write-backs cost it nothing).
pub(super) struct MqsimDram {
    pub(super) server: Pipe,
    /// Events of misses and merged requests, due when their line arrives from flash.
    pub(super) due: BinaryHeap<Reverse<Ps>>,
    /// Lines a prefetch was issued for and not evicted since (`prefetched_lba`,
    /// cxl/Host_Interface_CXL.cpp:261; erased on eviction, cxl/DRAM_Subsystem.cpp:808).
    pub(super) prefetched: HashSet<u64>,
    /// Per die, the programs waiting for it, in order.
    pub(super) programs: Vec<Vec<PendingProgram>>,
    /// Completions of the writes in the flash back end (each holds one place of its queue).
    pub(super) writes: BinaryHeap<Reverse<Ps>>,

}

/// A program waiting for its die, not booked yet: reads that reach the die before it starts go
/// first, and writes join it.
#[derive(Debug, Clone, Copy)]
pub(super) struct PendingProgram {
    pub(super) earliest: Ps,
    pub(super) units: u32,
}

impl MqsimDram {
    pub(super) fn new(dies: u32) -> MqsimDram {
        MqsimDram {
            server: Pipe::new(64.0 / (MQSIM_DRAM_EVENT_NS as f64 * 1e-9)),
            due: BinaryHeap::new(),
            prefetched: HashSet::new(),
            programs: vec![Vec::new(); dies as usize],
            writes: BinaryHeap::new(),

        }
    }

    /// The completion of the `nth` (from 1) request of a line whose data arrives at `ready`:
    /// MQSim_CXL drains an MSHR row into the DRAM queue one 46 ns event after the other.
    pub(super) fn arrival_event(&mut self, ready: Ps, nth: u32) -> Ps {
        self.due.push(Reverse(ready));
        ready + ps_from_ns(MQSIM_DRAM_EVENT_NS) * Ps::from(nth)
    }

    /// With `reads` flash reads in flight at `t`: if the back-end queue is full, when a place
    /// frees (`next_read`: when the earliest read completes); `None` if a request may go on.
    pub(super) fn backend_full(&mut self, t: Ps, reads: u32, next_read: Option<Ps>) -> Option<Ps> {
        while self.writes.peek().is_some_and(|&Reverse(done)| done <= t) {
            self.writes.pop();
        }
        if reads as usize + self.writes.len() < MQSIM_BACKEND_QUEUE {
            return None;
        }
        let next_write = self.writes.peek().map(|&Reverse(done)| done);
        next_read.into_iter().chain(next_write).min()
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

impl super::CxlFlash {
    /// Read unit `line` from flash in compat mode: at its PCWD plane, page 0, joining a
    /// multi-plane read waiting for the die, ahead of a program waiting for it. Returns when the
    /// data is at the controller, and the die.
    pub(super) fn mqsim_read(&mut self, line: u64, t: Ps) -> (Ps, Option<u32>) {
        let (die, plane) = pcwd(&self.flash.geo, line);
        self.mqsim_start_program(die, t);
        (self.flash.read_plane(die, plane, 0, 1u64 << self.line_shift, t), Some(die))
    }

    /// Book `die`'s waiting program if the die has freed for it by `t`. MQSim_CXL serves a
    /// die's waiting reads before its waiting writes (`ssd/TSU_OutofOrder.cpp:234` and
    /// `ssd/TSU_Base.cpp:59,76` ask `service_read_transaction` first; it gives way only when no
    /// read waits, `:287-297`), so a program starts only when the die frees with no read queued.
    fn mqsim_start_program(&mut self, die: u32, t: Ps) {
        let mq = self.mq.as_mut().expect("compat mode");
        let waiting = &mut mq.programs[die as usize];
        let mut started = 0;
        for p in waiting.iter() {
            let start = p.earliest.max(self.flash.die_free(die));
            if start > t {
                break;
            }
            self.flash.book_program(die, 0, 1u64 << self.line_shift, start);
            started += 1;
        }
        waiting.drain(..started);
    }

    /// Program unit `line` as a write of its own, as MQSim_CXL does with a write without a
    /// cache (`cxl/Host_Interface_CXL.cpp:294` returns before the cache) and with each dirty
    /// victim (`:1382-1400` builds an NVMe write per flushed line), bypassing the FTL's write
    /// buffer, at the unit's PCWD die. Its scheduler (TSU_OutofOrder) joins writes waiting for
    /// one die into one multi-plane program of up to planes x units-per-page units. Returns when
    /// the program would be done if no read came first: reads that reach the die later but before
    /// it starts delay it without changing this (a deviation: the write's completion is computed
    /// when it arrives).
    pub(super) fn mqsim_program(&mut self, line: u64, t: Ps) -> Ps {
        let (die, _) = pcwd(&self.flash.geo, line);
        self.mqsim_start_program(die, t);
        let per_program = self.flash.geo.planes * self.flash.geo.units_per_page;
        let bytes = 1u64 << self.line_shift;
        let timing = &self.flash.timing;
        let duration = timing.program_command + self.flash.transfer(bytes) + timing.program[0];
        let free = self.flash.die_free(die);
        let mq = self.mq.as_mut().expect("compat mode");
        let waiting = &mut mq.programs[die as usize];
        let ahead = Ps::from(waiting.len().saturating_sub(1) as u32) * duration;
        let start = waiting.first().map_or(t, |p| p.earliest).max(free);
        if let Some(p) = waiting.last_mut().filter(|p| p.units < per_program) {
            p.units += 1;
            let done = start + ahead + duration;
            mq.writes.push(Reverse(done));
            return done;
        }
        let queued = if waiting.is_empty() { 0 } else { ahead + duration };
        waiting.push(PendingProgram { earliest: t, units: 1 });
        let done = start + queued + duration;
        mq.writes.push(Reverse(done));
        self.flash.count_program(bytes);
        done
    }
}
