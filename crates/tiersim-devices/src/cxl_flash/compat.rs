//! `compat = "mqsim_cxl"`: the parts of MQSim_CXL (spypaul/MQSim_CXL_Linux 3701f7b) that the
//! compatibility mode reproduces with state of their own: its single device-DRAM server with its
//! queue limit, the ONFI NVDDR2 command cycles, its plane allocation (static for units never
//! written, dynamic for writes), and its flash back end (`tsu.rs`), whose reads complete only
//! once their die has had the channel: the device runs it in time order with its MSHR
//! retirements, and records a request's latency once every part of it is known. The list of
//! every compat behaviour and its source line is in docs/cxl_flash.md.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};

use rustc_hash::FxHashMap;

use tiersim_core::Ns;

use super::flash::{Geometry, OpCounts};
use super::metrics::Class;
use super::mshr::{take_slot, PENDING};
use super::tsu::Tsu;
use crate::pipe::{completion, ps_from_ns, Pipe, Ps};

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
/// Prefetch reads in flight at most (`prefetch_queue_size`, cxl/Host_Interface_CXL.h:61; an entry
/// of `in_progress_prefetch_lba` is added at issue, :1471, and erased when the line is filled,
/// :1373-1374). MQSim_CXL's prefetches take no MSHR row: they count against this queue and the
/// back end's.
pub(super) const MQSIM_PREFETCH_QUEUE: u64 = 1024;
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
/// misses and hits under miss alike; fills and write-backs cost it nothing), and its flash back
/// end (`Tsu`), whose reads complete only once their die has had the channel.
pub(super) struct MqsimDram {
    pub(super) server: Pipe,
    /// Events of misses and merged requests, due when their line arrives from flash.
    pub(super) due: BinaryHeap<Reverse<Ps>>,
    /// Lines a prefetch was issued for and not evicted since (`prefetched_lba`,
    /// cxl/Host_Interface_CXL.cpp:261; erased on eviction, cxl/DRAM_Subsystem.cpp:808).
    pub(super) prefetched: HashSet<u64>,
    /// Prefetched lines whose demand hit has triggered a next-line prefetcher (`tagAssertedLBA`,
    /// inserted at cxl/Host_Interface_CXL.cpp:135; erased with the line's `prefetched_lba` entry
    /// on eviction, cxl/DRAM_Subsystem.cpp:809-811). Unused by best-offset, which every such hit
    /// triggers.
    pub(super) tag_asserted: HashSet<u64>,
    /// Triggers the prefetch throttle refused (`compat_prefetch_room`).
    pub(super) throttled: u64,
    /// Prefetch proposals past the throttle's room, not issued.
    pub(super) truncated: u64,
    pub(super) tsu: Tsu,
    /// Writes allocated so far, plus `MQSIM_FIRST_WRITE_SLOT`.
    write_slot: u64,
    /// Where each unit written last went: die, plane, page.
    pub(super) written: FxHashMap<u64, (u32, u32, u32)>,
    /// Requests whose completion waits for a flash read or program.
    pub(super) responses: Responses,
    /// Per MSHR row, the responses waiting for its data: (response, DRAM events up to and
    /// including its own in the row; 0 for a read without a cache, which has none).
    row_waiters: Vec<Vec<(u32, u32)>>,
}

/// A request's completion while parts of it wait for flash.
#[derive(Debug, Clone, Copy)]
struct Response {
    now: Ns,
    start: Ns,
    class: Class,
    done: Ps,
    waiting: u32,
    /// Still being served (`access` has not returned): not complete even with nothing waiting.
    open: bool,
}

/// The responses of requests in flight, by slot.
#[derive(Default)]
pub(super) struct Responses {
    slots: Vec<Response>,
    free: Vec<u32>,
    current: Option<u32>,
    /// (request time, completion) of every request in completion order, if asked for.
    pub(super) log: Option<Vec<(Ns, Ns)>>,
}

/// What serving a line returns while its completion waits for the back end: nothing later than
/// the parts of the request already known (its completion is recorded when the wait ends).
pub(super) const WAITING: Ps = 0;

/// The tag of a program no request waits for (a dirty victim's).
const NO_RESPONSE: u32 = u32::MAX;

impl MqsimDram {
    pub(super) fn new(tsu: Tsu) -> MqsimDram {
        MqsimDram {
            server: Pipe::new(64.0 / (MQSIM_DRAM_EVENT_NS as f64 * 1e-9)),
            due: BinaryHeap::new(),
            prefetched: HashSet::new(),
            tag_asserted: HashSet::new(),
            throttled: 0,
            truncated: 0,
            tsu,
            write_slot: MQSIM_FIRST_WRITE_SLOT,
            written: FxHashMap::default(),
            responses: Responses::default(),
            row_waiters: Vec::new(),
        }
    }

    fn waiter(&mut self, row: u32, nth: u32) {
        let slot = self.responses.current.expect("a request is being served");
        self.responses.slots[slot as usize].waiting += 1;
        let i = row as usize;
        if self.row_waiters.len() <= i {
            self.row_waiters.resize_with(i + 1, Vec::new);
        }
        self.row_waiters[i].push((slot, nth));
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

    /// With `reads` flash reads in flight: whether the back end holds as many accesses as
    /// MQSim_CXL's queue, which stops its host feed.
    pub(super) fn backend_full(&self, reads: u32) -> bool {
        reads as usize + self.tsu.writes_in_flight() >= MQSIM_BACKEND_QUEUE
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

impl MqsimDram {
    /// Operation counts of the back end, in bytes of `unit`.
    pub(super) fn ops(&self, unit: u64) -> OpCounts {
        let c = self.tsu.counts;
        OpCounts {
            reads: c.reads,
            programs: c.programs,
            erases: 0,
            read_bytes: c.reads * unit,
            program_bytes: c.programmed_units * unit,
        }
    }
}

impl super::CxlFlash {
    /// Where unit `line` is read from: where it was written last, or, never written, its PCWD
    /// plane at page 0. Returns the die, plane and page.
    pub(super) fn mqsim_place(&self, line: u64) -> (u32, u32, u32) {
        let mq = self.mq.as_ref().expect("compat mode");
        match mq.written.get(&line) {
            Some(&at) => at,
            None => {
                let (die, plane) = pcwd(&self.flash.geo, line);
                (die, plane, 0)
            }
        }
    }

    /// MQSim_CXL's throttle on prefetching, checked at every trigger before the prefetcher runs
    /// (`prefetch_decision_maker`, cxl/Host_Interface_CXL.cpp:109): with 1024 prefetches in flight,
    /// or fewer than 2 free places in the 1024-access flash back-end queue (reads in flight, demand
    /// and prefetch, and programs), the trigger returns before the prefetcher sees it, so nothing is
    /// learned and nothing fetched: None. Otherwise how many of the proposals that pass the filter
    /// (not cached, not in flight) may be issued, the first ones kept (:249-258): the free places of
    /// the prefetch queue, or of the back-end queue less one, whichever is fewer. On a miss the
    /// demand read, whose row `miss` says is already allocated, goes to the back end only after
    /// the prefetcher has run (`Consume_pcie_message`, cxl/Host_Interface_CXL.h:201-212), so it is
    /// not counted. The arithmetic is MQSim_CXL's, on unsigned integers.
    pub(super) fn compat_prefetch_room(&mut self, miss: bool) -> Option<u64> {
        let reads = u64::from(self.mshr.in_use() - u32::from(miss));
        let prefetches = u64::from(self.mshr.prefetch_in_use());
        let mq = self.mq.as_mut().expect("compat mode");
        let accesses = reads + mq.tsu.writes_in_flight() as u64;
        let backend_room = (MQSIM_BACKEND_QUEUE as u64).wrapping_sub(accesses);
        if prefetches == MQSIM_PREFETCH_QUEUE || backend_room < 2 {
            mq.throttled += 1;
            return None;
        }
        let prefetch_room = MQSIM_PREFETCH_QUEUE - prefetches;
        Some(if prefetch_room < backend_room - 1 { prefetch_room } else { backend_room - 1 })
    }

    /// Read unit `line` from flash at `t` into MSHR row `row` (allocated `PENDING`): its
    /// completion is set when the data has crossed the channel (`compat_step`).
    pub(super) fn mqsim_read(&mut self, line: u64, t: Ps, row: u32) {
        let (die, plane, page) = self.mqsim_place(line);
        let mq = self.mq.as_mut().expect("compat mode");
        mq.tsu.submit(t, die, plane, page, false, row);
    }

    /// Program unit `line` as a write of its own, as MQSim_CXL does with a write without a
    /// cache (`cxl/Host_Interface_CXL.cpp:294` returns before the cache) and with each dirty
    /// victim (`:1382-1400` builds an NVMe write per flushed line), bypassing the FTL's write
    /// buffer, at the place its dynamic allocation gives (`MqsimDram::allocate`); its scheduler
    /// joins it with the writes waiting for the die (`Tsu`). `respond`: the request being
    /// served completes when the program is done (a write without a cache).
    pub(super) fn mqsim_program(&mut self, line: u64, t: Ps, respond: bool) {
        let geo = self.flash.geo;
        let mq = self.mq.as_mut().expect("compat mode");
        let (die, plane, page) = mq.allocate(&geo, line);
        let tag = match mq.responses.current.filter(|_| respond) {
            Some(slot) => {
                mq.responses.slots[slot as usize].waiting += 1;
                slot
            }
            None => NO_RESPONSE,
        };
        mq.tsu.submit(t, die, plane, page, true, tag);
    }

    /// Process the earliest of the back end's next event and the retirement of the earliest
    /// MSHR row whose data is in (the event first at equal times: a victim's write-back goes to
    /// the back end after its events at that time); returns its time, None if nothing is left.
    fn compat_step(&mut self) -> Option<Ps> {
        let mq = self.mq.as_mut().expect("compat mode");
        let event = mq.tsu.next_event();
        let row = self.mshr.next_ready();
        match (event, row) {
            (None, None) => return None,
            (Some(e), Some(r)) if r < e => {}
            (Some(_), _) => {
                let t = mq.tsu.step();
                self.compat_finished();
                return t;
            }
            (None, Some(_)) => {}
        }
        let ready = row.expect("a row is ready");
        let r = self.mshr.pop_ready(ready).expect("the earliest row");
        self.retire(r);
        Some(ready)
    }

    /// Deliver what the back end finished: reads complete their rows (and the responses
    /// waiting for them), programs the writes requests wait for.
    fn compat_finished(&mut self) {
        let mq = self.mq.as_mut().expect("compat mode");
        let mut finished = std::mem::take(&mut mq.tsu.finished);
        for f in finished.drain(..) {
            if f.write {
                if f.tag != NO_RESPONSE {
                    self.compat_complete(f.tag, f.at);
                }
                continue;
            }
            self.mshr.resolve(f.tag, f.at);
            let mq = self.mq.as_mut().expect("compat mode");
            if self.mshr.row(f.tag).prefetch {
                // A prefetched line's arrival is a DRAM event too (PREFETCH_READY).
                mq.due.push(Reverse(f.at));
            }
            let Some(waiters) = mq.row_waiters.get_mut(f.tag as usize) else { continue };
            let mut waiters = std::mem::take(waiters);
            for &(slot, nth) in &waiters {
                let done = if nth == 0 { f.at } else { self.compat_arrival_event(f.at, nth) };
                self.compat_complete(slot, done);
            }
            waiters.clear();
            self.mq.as_mut().expect("compat mode").row_waiters[f.tag as usize] = waiters;
        }
        self.mq.as_mut().expect("compat mode").tsu.finished = finished;
    }

    /// The completion of the `nth` (from 1) request of a line whose data arrives at `ready`:
    /// MQSim_CXL drains an MSHR row into the DRAM queue one 46 ns event after the other.
    fn compat_arrival_event(&mut self, ready: Ps, nth: u32) -> Ps {
        let mq = self.mq.as_mut().expect("compat mode");
        mq.due.push(Reverse(ready));
        ready + ps_from_ns(MQSIM_DRAM_EVENT_NS) * Ps::from(nth)
    }

    /// The request being served completes as the `nth` (0: a read without a cache, no DRAM
    /// event) of row `row`'s data; returns `WAITING` until the row's read has completed.
    pub(super) fn compat_wait_for(&mut self, row: u32, nth: u32, t: Ps) -> Ps {
        let ready = self.mshr.row(row).ready;
        if ready != PENDING {
            return if nth == 0 { ready.max(t) } else { self.compat_arrival_event(ready.max(t), nth) };
        }
        self.mq.as_mut().expect("compat mode").waiter(row, nth);
        WAITING
    }

    /// Run the device (retirements, back-end events, DRAM events) up to `t`.
    pub(super) fn compat_retire_until(&mut self, t: Ps) {
        loop {
            let mq = self.mq.as_ref().expect("compat mode");
            let next = match (mq.tsu.next_event(), self.mshr.next_ready()) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => match a.or(b) {
                    Some(n) => n,
                    None => break,
                },
            };
            if next > t {
                break;
            }
            self.compat_step();
        }
        self.mq.as_mut().expect("compat mode").advance(t);
    }

    /// When row `row`'s data arrives, running the device until it is known (the host feed is
    /// stopped meanwhile, so no arrival can come before).
    pub(super) fn compat_wait_row(&mut self, row: u32, t: Ps) -> Ps {
        loop {
            let ready = self.mshr.row(row).ready;
            if ready != PENDING {
                return ready;
            }
            if self.compat_step().is_none() {
                return t;
            }
        }
    }

    /// When the earliest MSHR row's data arrives (a full MSHR's wait).
    pub(super) fn compat_next_ready(&mut self, t: Ps) -> Ps {
        loop {
            if let Some(ready) = self.mshr.next_ready() {
                return ready;
            }
            if self.compat_step().is_none() {
                return t;
            }
        }
    }

    /// When a place frees in MQSim_CXL's full back-end queue (a read's row retires or a program
    /// ends).
    pub(super) fn compat_backend_wait(&mut self, t: Ps) -> Ps {
        loop {
            let Some(at) = self.compat_step() else { return t };
            if !self.mq.as_ref().expect("compat mode").backend_full(self.mshr.in_use()) {
                return at.max(t);
            }
        }
    }

    /// A request begins: its completion is the latest of its parts, some of which may wait.
    pub(super) fn compat_open(&mut self, now: Ns) {
        let r = &mut self.mq.as_mut().expect("compat mode").responses;
        let fresh = Response { now, start: now, class: Class::Hit, done: 0, waiting: 0, open: true };
        r.current = Some(take_slot(&mut r.slots, &mut r.free, fresh));
    }

    /// The request's lines are served: `done` is the latest known completion of its parts.
    pub(super) fn compat_close(&mut self, start: Ns, class: Class, done: Ps) {
        let r = &mut self.mq.as_mut().expect("compat mode").responses;
        let Some(slot) = r.current.take() else { return };
        let s = &mut r.slots[slot as usize];
        s.start = start;
        s.class = class;
        s.done = s.done.max(done);
        s.open = false;
        if s.waiting == 0 {
            self.compat_record(slot);
        }
    }

    fn compat_complete(&mut self, slot: u32, done: Ps) {
        let r = &mut self.mq.as_mut().expect("compat mode").responses;
        let s = &mut r.slots[slot as usize];
        s.done = s.done.max(done);
        s.waiting -= 1;
        if s.waiting == 0 && !s.open {
            self.compat_record(slot);
        }
    }

    /// MQSim_CXL times a request from when the device accepted it (`start`): the time it waited
    /// in the host feed while the device was stalled is not in its latency (B12).
    fn compat_record(&mut self, slot: u32) {
        let r = &mut self.mq.as_mut().expect("compat mode").responses;
        let s = r.slots[slot as usize];
        r.free.push(slot);
        let end = completion(s.now, s.done);
        if let Some(log) = r.log.as_mut() {
            log.push((s.now, end));
        }
        self.lat.record(end.saturating_sub(s.start), s.class);
        self.last_completion = self.last_completion.max(end);
    }
}
