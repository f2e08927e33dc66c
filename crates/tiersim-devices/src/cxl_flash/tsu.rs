//! `compat = "mqsim_cxl"`: MQSim_CXL's transaction scheduling unit (TSU_OutOfOrder) and its ONFI
//! channels, event-driven, as tools/mqsim_tsu_model.py (which replays MQSim_CXL's own logged
//! arrivals to the ns on 81 % of its reads). Per die, queues of waiting reads and writes; a freed
//! channel is offered to its chips in rotation, and a die forms its command only when it gets the
//! channel, so a read's completion is known only once its command has gone out (sources:
//! spypaul/MQSim_CXL_Linux 3701f7b, paths under src/ssd/, at each rule below).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use serde_json::json;

use super::flash::die_stats;
use crate::pipe::Ps;

/// A transaction waiting for its die: plane, page, arrival, and the caller's tag.
#[derive(Debug, Clone, Copy)]
struct Tr {
    plane: u32,
    page: u32,
    arrived: Ps,
    tag: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// The command's cycles are over: the channel frees.
    CommandSent { ch: u32 },
    /// The die's reads have their data in the page registers.
    Sensed { die: u32 },
    /// One read's data has crossed the channel.
    Moved { die: u32, tag: u32 },
    /// The die's program is over.
    Programmed { die: u32 },
}

/// A finished transaction: a read (its data at the controller) or a write (programmed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Finished {
    pub(super) at: Ps,
    pub(super) write: bool,
    pub(super) tag: u32,
}

#[derive(Debug, Clone, Default)]
struct Die {
    idle: bool,
    reads: Vec<Tr>,
    writes: Vec<Tr>,
    /// The transactions of the command in progress.
    command: Vec<Tr>,
    /// Reads of the command whose data has not crossed the channel yet.
    unread: u32,
    issued: Ps,
    busy: Ps,
    wait: Ps,
    wait_max: Ps,
    ops: u64,
}

/// Command and array times, in ps.
#[derive(Debug, Clone)]
pub(super) struct TsuTiming {
    pub(super) read_command: Ps,
    pub(super) read_plane: Ps,
    pub(super) program_command: Ps,
    pub(super) program_plane: Ps,
    /// By page type (page index modulo the length); reads include the ready/busy delay.
    pub(super) read: Vec<Ps>,
    pub(super) program: Vec<Ps>,
}

#[derive(Debug, Clone, Copy, Default)]
pub(super) struct TsuCounts {
    pub(super) reads: u64,
    pub(super) programs: u64,
    pub(super) programmed_units: u64,
    pub(super) multiplane_reads: u64,
}

pub(super) struct Tsu {
    channels: u32,
    chips: u32,
    timing: TsuTiming,
    events: BinaryHeap<Reverse<(Ps, u64, Event)>>,
    seq: u64,
    channel_busy: Vec<bool>,
    turn: Vec<u32>,
    data_out: Vec<VecDeque<(u32, u32)>>,
    dies: Vec<Die>,
    writes_in_flight: usize,
    pub(super) finished: Vec<Finished>,
    pub(super) counts: TsuCounts,
    channel_time: Ps,
}

fn by_page(list: &[Ps], page: u32) -> Ps {
    list[page as usize % list.len()]
}

impl Tsu {
    /// Dies are numbered channel first (`Geometry::channel_of`): die = chip * channels + channel.
    pub(super) fn new(channels: u32, chips: u32, timing: TsuTiming) -> Tsu {
        let dies = (channels * chips) as usize;
        Tsu {
            channels,
            chips,
            timing,
            events: BinaryHeap::new(),
            seq: 0,
            channel_busy: vec![false; channels as usize],
            turn: vec![0; channels as usize],
            data_out: vec![VecDeque::new(); channels as usize],
            dies: vec![Die { idle: true, ..Die::default() }; dies],
            writes_in_flight: 0,
            finished: Vec::new(),
            counts: TsuCounts::default(),
            channel_time: 0,
        }
    }

    /// Writes submitted and not programmed yet.
    pub(super) fn writes_in_flight(&self) -> usize {
        self.writes_in_flight
    }

    /// Time of the next event, if any.
    pub(super) fn next_event(&self) -> Option<Ps> {
        self.events.peek().map(|Reverse((t, _, _))| *t)
    }

    fn at(&mut self, t: Ps, e: Event) {
        self.events.push(Reverse((t, self.seq, e)));
        self.seq += 1;
    }

    /// A transaction reaches the TSU at `t`; every event up to `t` must have been processed
    /// (`step`): MQSim_CXL's events at the time of an arrival go first (they were scheduled
    /// earlier). TSU_OutofOrder::Schedule queues it (TSU_OutofOrder.cpp:146-226) and offers
    /// every idle channel to its chips (:229-247); only the arrival's channel can have changed.
    pub(super) fn submit(&mut self, t: Ps, die: u32, plane: u32, page: u32, write: bool, tag: u32) {
        let tr = Tr { plane, page, arrived: t, tag };
        let d = &mut self.dies[die as usize];
        if write {
            d.writes.push(tr);
            self.writes_in_flight += 1;
        } else {
            d.reads.push(tr);
        }
        let ch = die % self.channels;
        if !self.channel_busy[ch as usize] {
            self.grant(t, ch);
        }
    }

    /// The channel goes to its chips in a rotating turn, starting after the last chip tried; the
    /// first chip whose die is idle with a transaction waiting takes it (TSU_Base.cpp:54-71).
    fn grant(&mut self, t: Ps, ch: u32) {
        for _ in 0..self.chips {
            let chip = self.turn[ch as usize];
            self.issue(t, chip * self.channels + ch);
            self.turn[ch as usize] = (chip + 1) % self.chips;
            if self.channel_busy[ch as usize] {
                break;
            }
        }
    }

    /// The die forms its command now: its reads before its writes (service_read_transaction
    /// first, TSU_OutofOrder.cpp:287-297), the head of the queue and the first waiting
    /// transaction of each other plane at the head's page (multi-plane, :359-399 reads, :465-478
    /// writes). Command cycles grow per further plane (ONFI_Channel_NVDDR2.cpp:16-19 reads,
    /// :26-29 programs); data moves in no time (t_RC truncated to 0, B2).
    fn issue(&mut self, t: Ps, die: u32) {
        let d = &mut self.dies[die as usize];
        if !d.idle {
            return;
        }
        let write = d.reads.is_empty();
        let queue = if write { &mut d.writes } else { &mut d.reads };
        let Some(head) = queue.first().copied() else { return };
        let mut planes = 0u64;
        let mut command = std::mem::take(&mut d.command);
        command.clear();
        queue.retain(|tr| {
            let bit = 1u64 << tr.plane;
            if planes & bit == 0 && tr.page == head.page {
                planes |= bit;
                command.push(*tr);
                false
            } else {
                true
            }
        });
        let n = command.len() as Ps;
        for tr in &command {
            let wait = t.saturating_sub(tr.arrived);
            d.wait = d.wait.saturating_add(wait);
            d.wait_max = d.wait_max.max(wait);
        }
        d.ops += n;
        d.idle = false;
        d.issued = t;
        let tm = &self.timing;
        let (cycles, done) = if write {
            let cycles = tm.program_command + tm.program_plane * (n - 1);
            (cycles, Event::Programmed { die })
        } else {
            let cycles = tm.read_command + tm.read_plane * (n - 1);
            (cycles, Event::Sensed { die })
        };
        let array = if write { by_page(&tm.program, head.page) } else { by_page(&tm.read, head.page) };
        if write {
            self.counts.programs += 1;
            self.counts.programmed_units += n;
        } else {
            self.counts.reads += n;
            self.counts.multiplane_reads += u64::from(n > 1);
        }
        d.command = command;
        let ch = die % self.channels;
        self.channel_busy[ch as usize] = true;
        self.channel_time = self.channel_time.saturating_add(cycles);
        self.at(t + cycles + array, done);
        self.at(t + cycles, Event::CommandSent { ch });
    }

    /// A read's data out goes before any new command (NVM_PHY_ONFI_NVDDR2.cpp:545); otherwise
    /// the channel is offered to the chips.
    fn channel_freed(&mut self, t: Ps, ch: u32) {
        self.channel_busy[ch as usize] = false;
        match self.data_out[ch as usize].pop_front() {
            Some((die, tag)) => self.move_data(t, ch, die, tag),
            None => self.grant(t, ch),
        }
    }

    fn move_data(&mut self, t: Ps, ch: u32, die: u32, tag: u32) {
        self.channel_busy[ch as usize] = true;
        self.at(t, Event::Moved { die, tag });
    }

    /// Process the earliest event; returns its time (None: nothing is pending). Transactions
    /// that finish are appended to `finished`.
    pub(super) fn step(&mut self) -> Option<Ps> {
        let Reverse((t, _, event)) = self.events.pop()?;
        match event {
            Event::CommandSent { ch } => self.channel_freed(t, ch),
            Event::Sensed { die } => {
                let ch = die % self.channels;
                let d = &mut self.dies[die as usize];
                d.unread = d.command.len() as u32;
                // A read waits in WaitingReadTX while the channel is busy (NVM_PHY_ONFI_NVDDR2.cpp).
                for i in 0..self.dies[die as usize].command.len() {
                    let tag = self.dies[die as usize].command[i].tag;
                    if self.channel_busy[ch as usize] {
                        self.data_out[ch as usize].push_back((die, tag));
                    } else {
                        self.move_data(t, ch, die, tag);
                    }
                }
            }
            Event::Moved { die, tag } => {
                self.finished.push(Finished { at: t, write: false, tag });
                let d = &mut self.dies[die as usize];
                d.unread -= 1;
                if d.unread == 0 {
                    // The die is idle again once every read of its command has moved its data.
                    self.release(die, t);
                }
                self.channel_freed(t, die % self.channels);
            }
            Event::Programmed { die } => {
                let n = self.dies[die as usize].command.len();
                for i in 0..n {
                    let tag = self.dies[die as usize].command[i].tag;
                    self.finished.push(Finished { at: t, write: true, tag });
                }
                self.writes_in_flight -= n;
                self.release(die, t);
                let ch = die % self.channels;
                if !self.channel_busy[ch as usize] {
                    self.grant(t, ch);
                }
            }
        }
        Some(t)
    }

    fn release(&mut self, die: u32, t: Ps) {
        let d = &mut self.dies[die as usize];
        d.idle = true;
        d.busy = d.busy.saturating_add(t - d.issued);
        d.command.clear();
    }

    /// The back end's figures, with the keys of `Flash::stats`.
    pub(super) fn stats(&self) -> serde_json::Value {
        let mut s = die_stats(self.dies.iter().map(|d| (d.ops, d.busy, d.wait, d.wait_max)), self.channel_time);
        s["multiplane_read_commands"] = json!(self.counts.multiplane_reads);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NS: Ps = 1000;

    fn tsu(channels: u32, chips: u32) -> Tsu {
        Tsu::new(
            channels,
            chips,
            TsuTiming {
                read_command: 290 * NS,
                read_plane: 650 * NS,
                program_command: 361 * NS,
                program_plane: 816 * NS,
                read: vec![3020 * NS],
                program: vec![100_000 * NS],
            },
        )
    }

    /// Arrivals `(t ns, die, plane, write)` at page 0 in order, each after the events before it
    /// (as the device submits them); returns every finished transaction (ns, write, tag = index).
    fn run(mut s: Tsu, arrivals: &[(Ps, u32, u32, bool)]) -> (Tsu, Vec<(Ps, bool, u32)>) {
        for (i, &(t, die, plane, write)) in arrivals.iter().enumerate() {
            while s.next_event().is_some_and(|e| e <= t * NS) {
                s.step();
            }
            s.submit(t * NS, die, plane, 0, write, i as u32);
        }
        while s.step().is_some() {}
        let done = s.finished.iter().map(|f| (f.at / NS, f.write, f.tag)).collect();
        (s, done)
    }

    /// tests/test_mqsim_tsu_model.py's first case: read 1 (plane 0) finds die 0 idle: 290 ns of
    /// command + 3020 of sensing = 3310. Read 2 (plane 1, at 100) and read 3 (plane 0, at 200)
    /// wait; when the die frees at 3310 the command takes the head (read 2) and the first
    /// waiting read of the other plane (read 3): 290 + 650 ns of command -> 4250, + 3020 = 7270.
    #[test]
    fn a_command_forms_when_the_die_frees_so_a_later_read_joins_an_earlier_one() {
        let (s, done) = run(tsu(1, 2), &[(0, 0, 0, false), (100, 0, 1, false), (200, 0, 0, false)]);
        assert_eq!(done, [(3310, false, 0), (7270, false, 1), (7270, false, 2)]);
        assert_eq!(s.counts.multiplane_reads, 1);
        assert_eq!(s.counts.reads, 3);
    }

    /// The model's second case, three chips on one channel (dies 0, 1, 2): chip 0 takes the
    /// channel at 0 (the turn moves to chip 1). While its command holds the channel (0..290),
    /// chip 2 gets a read at 10 and chip 1 one at 20. At 290 the turn is chip 1's: it goes
    /// first although chip 2's read is older (290..580, + 3020 = 3600), then chip 2
    /// (580..870, 3890).
    #[test]
    fn the_channel_goes_round_robin_not_to_the_oldest_read() {
        let (_, done) = run(tsu(1, 3), &[(0, 0, 0, false), (10, 2, 0, false), (20, 1, 0, false)]);
        assert_eq!(done, [(3310, false, 0), (3600, false, 2), (3890, false, 1)]);
    }

    /// The model's third case: die 0 reads from 0 (3310). Two writes (planes 0 and 1) and then a
    /// read arrive while it is busy: at 3310 the read goes first (3310 + 3310 = 6620), then both
    /// writes as one two-plane program: 361 + 816 ns of command from 6620, + 100 us = 107_797.
    #[test]
    fn reads_go_before_a_waiting_write_and_writes_join_on_distinct_planes() {
        let (s, done) = run(tsu(1, 1), &[(0, 0, 0, false), (10, 0, 0, true), (20, 0, 1, true), (30, 0, 2, false)]);
        assert_eq!(done, [(3310, false, 0), (6620, false, 3), (107_797, true, 1), (107_797, true, 2)]);
        assert_eq!((s.counts.programs, s.counts.programmed_units), (1, 2));
        assert_eq!(s.writes_in_flight(), 0);
    }

    /// Two chips on one channel. Die 0 reads at 0 (command 0..290, data out at 3310), die 1 at
    /// 100 (the channel is busy until 290: command 290..580, sensed at 3600). A read for die 0
    /// at 3400 finds the channel free (die 0 is idle since 3310): command 3400..3690, so die 1's
    /// data, sensed at 3600, waits for the channel and moves at 3690; data out goes before any
    /// new command, then die 0's data at 6710. A read for die 1 on another plane at 3500 waits
    /// for its die: at 3690 die 1 takes the channel with it (3690..3980, + 3020 = 7000). The
    /// same as tools/mqsim_tsu_model.py on this input.
    #[test]
    fn data_out_goes_before_new_commands_and_dies_take_turns() {
        let (_, done) =
            run(tsu(1, 2), &[(0, 0, 0, false), (100, 1, 0, false), (3400, 0, 0, false), (3500, 1, 1, false)]);
        assert_eq!(done, [(3310, false, 0), (3690, false, 1), (6710, false, 2), (7000, false, 3)]);
    }

    /// Random arrivals on 2 channels x 3 chips x 4 planes, two page addresses, a third of them
    /// writes: every transaction finishes exactly once, no sooner than its command and array
    /// time after its arrival; commands join transactions (fewer programs than writes, some
    /// multi-plane reads); the counts add up and nothing is left in flight.
    #[test]
    fn every_transaction_finishes_once_and_no_sooner_than_it_can() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(17);
        let mut s = tsu(2, 3);
        let mut arrivals = Vec::new();
        let mut t = 0;
        for tag in 0..5000u32 {
            t += rng.gen_range(0..400) * NS;
            while s.next_event().is_some_and(|e| e <= t) {
                s.step();
            }
            let (die, plane, page, write) =
                (rng.gen_range(0..6), rng.gen_range(0..4), rng.gen_range(0..2), rng.gen_bool(0.3));
            s.submit(t, die, plane, page, write, tag);
            arrivals.push((t, write));
        }
        while s.step().is_some() {}
        let mut seen = vec![None; arrivals.len()];
        for f in &s.finished {
            let (at, write) = arrivals[f.tag as usize];
            assert_eq!(f.write, write);
            assert!(seen[f.tag as usize].replace(f.at).is_none(), "tag {} finished twice", f.tag);
            let least = if write { 361 + 100_000 } else { 290 + 3020 };
            assert!(f.at >= at + least * NS, "tag {} at {} ns, arrived {} ns", f.tag, f.at / NS, at / NS);
        }
        assert!(seen.iter().all(Option::is_some));
        let writes = arrivals.iter().filter(|a| a.1).count() as u64;
        assert_eq!(s.counts.reads, arrivals.len() as u64 - writes);
        assert_eq!(s.counts.programmed_units, writes);
        assert!(s.counts.programs < writes && s.counts.multiplane_reads > 0, "{:?}", s.counts);
        assert_eq!(s.writes_in_flight(), 0);
    }
}
