//! `compat = "mqsim_cxl"`: the parts of MQSim_CXL (spypaul/MQSim_CXL_Linux 3701f7b) that the
//! compatibility mode reproduces with state of their own: its single device-DRAM server with its
//! queue limit, the ONFI NVDDR2 command cycles, its plane allocation (static for units never
//! written, dynamic for writes), and the multi-plane programs of its write path. The list of
//! every compat behaviour and its source line is in docs/cxl_flash.md.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};

use rustc_hash::FxHashMap;

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
/// Command cycles each plane after the first adds to a multi-plane program
/// (ssd/ONFI_Channel_NVDDR2.cpp:26-29: 361, 1177, 1993, 2809 ns for 1-4 planes, as measured on
/// MQSim_CXL's own program commands).
pub(super) const MQSIM_PROGRAM_PLANE_NS: Ns = 816;
/// The value of MQSim_CXL's write allocation counter (`user_Alloc_count`) at its first user write
/// with the "real world workloads" configuration: measured, not derived (a patched MQSim_CXL that
/// logs every transaction puts the first write of every run at channel 3, chip 6, plane 0, PCWD
/// slot 204, with or without a cache; where the 204 earlier counts come from was not traced).
pub(super) const MQSIM_FIRST_WRITE_SLOT: u64 = 204;
/// Flash accesses (reads and writes) the back end holds before MQSim_CXL stops its host feed
/// (`flash_back_end_queue_size`, cxl/Host_Interface_CXL.h:90; counted at :934,942, checked at :947).
pub(super) const MQSIM_BACKEND_QUEUE: usize = 1024;
/// Command cycles each plane after the first adds to a multi-plane read: t_DBSY + 6 t_WC
/// (ssd/ONFI_Channel_NVDDR2.cpp:16-19: 290, 940, 1590, 2240 ns for 1-4 planes).
pub(super) const MQSIM_READ_PLANE_NS: Ns = 650;

/// Die (channel-first numbering, as `Geometry::channel_of`) and plane of logical unit `lpn`
/// under MQSim_CXL's static PCWD plane allocation (its example ssdconfig.xml): plane, then
/// channel, then chip (`ssd/Address_Mapping_Unit_Page_Level.cpp:1828-1832`; one die per chip).
/// A unit read before it was written gets this plane at page 0 (`online_create_entry_for_reads`
/// sets only channel, chip, die and plane). Writes are placed by the same striping applied to a
/// count of writes instead of the unit (`MqsimDram::allocate`).
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
    /// Writes allocated so far, plus `MQSIM_FIRST_WRITE_SLOT`.
    write_slot: u64,
    /// Where each unit written last went: die, plane, page.
    pub(super) written: FxHashMap<u64, (u32, u32, u32)>,
}

/// A program waiting for its die, not booked yet: reads that reach the die before it starts go
/// first, and writes to other planes at its page join it.
#[derive(Debug, Clone, Copy)]
pub(super) struct PendingProgram {
    pub(super) earliest: Ps,
    pub(super) planes: u64,
    pub(super) page: u32,
}

impl MqsimDram {
    pub(super) fn new(dies: u32) -> MqsimDram {
        MqsimDram {
            server: Pipe::new(64.0 / (MQSIM_DRAM_EVENT_NS as f64 * 1e-9)),
            due: BinaryHeap::new(),
            prefetched: HashSet::new(),
            programs: vec![Vec::new(); dies as usize],
            writes: BinaryHeap::new(),
            write_slot: MQSIM_FIRST_WRITE_SLOT,
            written: FxHashMap::default(),
        }
    }

    /// Place a write of unit `line`: MQSim_CXL's dynamic plane allocation stripes the n-th user
    /// write over the planes as PCWD stripes units (`lpn = user_Alloc_count`,
    /// ssd/Address_Mapping_Unit_Page_Level.cpp:1382-1386, counted at :810), and each plane fills
    /// its pages' units in turn (a 16 KiB page holds 4 of the 4 KiB units). So consecutive writes
    /// go to the planes of one die at one page, and join into multi-plane programs. Returns the
    /// die, plane and page.
    fn allocate(&mut self, geo: &Geometry, line: u64) -> (u32, u32, u32) {
        let slot = self.write_slot;
        self.write_slot += 1;
        let (die, plane) = pcwd(geo, slot);
        let page = slot / geo.planes_total() / u64::from(geo.units_per_page) % u64::from(geo.pages_per_block);
        let placed = (die, plane, page as u32);
        self.written.insert(line, placed);
        placed
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
        let mq = self.mq.as_ref().expect("compat mode");
        let (die, plane, page) = match mq.written.get(&line) {
            Some(&at) => at,
            None => {
                let (die, plane) = pcwd(&self.flash.geo, line);
                (die, plane, 0)
            }
        };
        self.mqsim_start_program(die, t);
        (self.flash.read_plane(die, plane, page, 1u64 << self.line_shift, t), Some(die))
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
            let command = program_command(self.flash.timing.program_command, p.planes);
            self.flash.book_program_with(die, p.page, command, 1u64 << self.line_shift, start);
            started += 1;
        }
        waiting.drain(..started);
    }

    /// Program unit `line` as a write of its own, as MQSim_CXL does with a write without a
    /// cache (`cxl/Host_Interface_CXL.cpp:294` returns before the cache) and with each dirty
    /// victim (`:1382-1400` builds an NVMe write per flushed line), bypassing the FTL's write
    /// buffer, at the place its dynamic allocation gives (`MqsimDram::allocate`). Its scheduler
    /// joins the writes waiting for one die on distinct planes at the first one's page into one
    /// multi-plane program (ssd/TSU_OutofOrder.cpp:465-478), whose command cycles grow by
    /// `MQSIM_PROGRAM_PLANE_NS` per plane. Returns when the program would be done if no read came
    /// first: reads that reach the die later but before it starts delay it without changing this
    /// (a deviation: the write's completion is computed when it arrives).
    pub(super) fn mqsim_program(&mut self, line: u64, t: Ps) -> Ps {
        let geo = self.flash.geo;
        let mq = self.mq.as_mut().expect("compat mode");
        let (die, plane, page) = mq.allocate(&geo, line);
        self.mqsim_start_program(die, t);
        let bit = 1u64 << plane;
        let timing = &self.flash.timing;
        let (command, program) = (timing.program_command, timing.program[page as usize % timing.program.len()]);
        let length = |planes: u64| program_command(command, planes) + program;
        let free = self.flash.die_free(die);
        let mq = self.mq.as_mut().expect("compat mode");
        let waiting = &mut mq.programs[die as usize];
        let mut at = waiting.first().map_or(t, |p| p.earliest).max(free);
        let joined = waiting.iter().position(|p| p.planes & bit == 0 && p.page == page);
        let bytes = 1u64 << self.line_shift;
        let done = match joined {
            Some(i) => {
                // One program, one more unit written.
                self.flash.ops.program_bytes += bytes;
                waiting[i].planes |= bit;
                for p in &waiting[..=i] {
                    at += length(p.planes);
                }
                at
            }
            None => {
                waiting.push(PendingProgram { earliest: t, planes: bit, page });
                for p in waiting.iter() {
                    at += length(p.planes);
                }
                self.flash.count_program(bytes);
                at
            }
        };
        mq.writes.push(Reverse(done));
        done
    }
}

/// Channel time of the command cycles of a program of `planes` (a plane mask), `one_plane` for
/// the first.
fn program_command(one_plane: Ps, planes: u64) -> Ps {
    one_plane + ps_from_ns(MQSIM_PROGRAM_PLANE_NS) * Ps::from(planes.count_ones().saturating_sub(1))
}
