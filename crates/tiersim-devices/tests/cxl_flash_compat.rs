//! `compat = "mqsim_cxl"`: MQSim_CXL's flash scheduling, with completion times worked out by
//! hand (ns). The device: 1 channel x 2 dies, no link, flash data moves in no time; a read holds
//! the channel 290 ns for its command, each further plane of a multi-plane read 650 ns more; a
//! program 361 ns, then 100 us; a read 3 us; a miss ends with one 46 ns DRAM event. Units never
//! written sit where MQSim_CXL's static PCWD allocation puts them (plane = unit % planes, then
//! channel, then die); writes go where its dynamic allocation does (the same striping of a count
//! of writes).

use tiersim_core::{Op, Params};
use tiersim_devices::cxl_flash::{CxlFlash, SPECS};
use tiersim_devices::{Device, DeviceRequest};

const BASE: &str = r#"
compat = "mqsim_cxl"
cache_size = "64KiB"
cache_line = "4KiB"
cache_ways = 4
replacement = "lru"
prefetcher = "none"
mshr_rows = 8
mshr_entries = 2
flash_channels = 1
flash_ways = 2
flash_planes = 1
flash_blocks_per_plane = 8
flash_pages_per_block = 4
flash_page_size = "16KiB"
flash_read_latency_us = [3]
flash_program_latency_us = [100]
overprovisioning = 0.25
"#;

fn device(extra: &str) -> CxlFlash {
    let mut t: toml::Table = toml::from_str(BASE).unwrap();
    t.extend(toml::from_str::<toml::Table>(extra).unwrap());
    let mut d = CxlFlash::from_params(&Params::resolve(SPECS, Some(&t)).unwrap()).unwrap();
    d.log_completions();
    d
}

/// Issue requests `(time, line, op)` in order.
fn issue(d: &mut CxlFlash, reqs: &[(u64, u64, Op)]) {
    for &(now, line, op) in reqs {
        d.access(&req(now, line, op));
    }
}

/// The completion of the request issued at `now`, once known: a flash read's completion is
/// fixed only when its die has had the channel, which may be after later requests (`finish`
/// runs the device to its end).
fn done(d: &CxlFlash, now: u64) -> u64 {
    let mut found = d.completions().iter().filter(|(t, _)| *t == now);
    let (_, end) = *found.next().unwrap_or_else(|| panic!("no completion for the request at {now}"));
    assert!(found.next().is_none(), "one request at {now}");
    end
}

fn req(now: u64, line: u64, op: Op) -> DeviceRequest {
    DeviceRequest { now, addr: line * 4096, size: 64, op, socket: 0, cpu: 0, remote: false }
}

fn stat(d: &CxlFlash, path: &str) -> u64 {
    let mut v = d.stats();
    for k in path.split('.') {
        v = v[k].clone();
    }
    v.as_u64().unwrap_or_else(|| panic!("{path}: {v}"))
}

/// With 4 planes, units 0-3 are planes 0-3 of die 0 and units 4-7 of die 1 (then die 0 again).
/// A die forms its read command when it gets the channel: the head of its queue and the first
/// waiting read of each other plane at the head's page, 290 ns of command and 650 ns more per
/// added plane. A die's read takes 3000 ns of array time + 20 ns of ready/busy signal
/// (MQSim_CXL's _RBSignalDelayRead); a miss ends with one 46 ns DRAM event.
#[test]
fn reads_waiting_for_a_die_share_one_multi_plane_command() {
    let mut d = device("flash_planes = 4\ncache_size = \"256KiB\"\ncache_ways = 16");
    let reads = [0u64, 1, 2, 9, 3, 10, 4];
    let times = [0u64, 100, 200, 300, 350, 360, 400];
    issue(&mut d, &times.iter().zip(reads).map(|(&t, l)| (t, l, Op::Read)).collect::<Vec<_>>());
    d.finish();
    // Unit 0, die 0 idle: command 0..290, sensed at 3310, + 46.
    assert_eq!(done(&d, 0), 3356);
    // Unit 4 (die 1) finds the channel free at 400 (its turn): command 400..690, sensed at
    // 3710; its data waits for die 0's next command to leave the channel (3310..4900).
    assert_eq!(done(&d, 400), 4946);
    // Units 1, 2, 9, 3, 10 (planes 1, 2, 1, 3, 2) wait for die 0. When it frees at 3310 its
    // command takes the head (unit 1) and the first waiting read of planes 2 and 3 (units 2 and
    // 3): 290 + 2 x 650 = 1590 ns of command -> 4900, sensed at 7920, + 46.
    for t in [100, 200, 350] {
        assert_eq!(done(&d, t), 7966, "request at {t}");
    }
    // Units 9 and 10 go when the die frees again at 7920 (all three reads moved their data in
    // no time): 290 + 650 -> 8860, sensed at 11_880, + 46.
    assert_eq!(done(&d, 300), 11_926);
    assert_eq!(done(&d, 360), 11_926);
    assert_eq!(stat(&d, "flash.backend.multiplane_read_commands"), 2);
    assert_eq!(stat(&d, "flash.reads_demand"), 7);
    assert_eq!(stat(&d, "flash.reads"), 7);
}

/// A dirty victim goes to flash at once as a 4 KiB program of its own (MQSim_CXL's flush), not
/// into the FTL's write buffer; a read of its die that arrives after the program started waits
/// for it.
#[test]
fn a_dirty_eviction_is_programmed_at_once() {
    let mut d = device("");
    // Set 0 (4 ways) holds lines 0, 4, 8, 12 (all on die 0); line 0 is dirty (a write miss
    // fetches it): 290 + 3020 + 46 each.
    issue(&mut d, &[(0, 0, Op::Write), (10_000, 4, Op::Read), (20_000, 8, Op::Read), (30_000, 12, Op::Read)]);
    // Line 16 evicts line 0 when its data arrives at 43_310.
    issue(&mut d, &[(40_000, 16, Op::Read)]);
    assert_eq!(stat(&d, "flash.programs"), 0);
    // At 43_320 the fill has happened: line 0 was programmed on die 0 from 43_310 (361 ns of
    // command, 100 us), so this read of die 0 starts at 143_671: + 3310, + 46.
    issue(&mut d, &[(43_320, 18, Op::Read)]);
    assert_eq!(stat(&d, "flash.programs"), 1);
    d.finish();
    for t in [0, 10_000, 20_000, 30_000, 40_000] {
        assert_eq!(done(&d, t), t + 3356, "request at {t}");
    }
    assert_eq!(done(&d, 43_320), 147_027);
    assert_eq!(stat(&d, "cache.flushes"), 1);
}

/// Without a cache every write is a program, acknowledged when it is done. A die serves the
/// reads waiting for it before a waiting program, which MQSim_CXL forms only when the die
/// frees with no read waiting.
#[test]
fn reads_go_before_a_waiting_program() {
    let mut d = device("cache_size = 0");
    // Unit 0 on die 0: 290 + 3020 (no DRAM event without a cache). Unit 2's write (die 0)
    // waits for the die; unit 4's read (die 0) arrives while it waits and goes first when the
    // die frees at 3310: 3310 + 3310. The program then runs 6620..6981..106_981, and a read of
    // die 0 at 7000 follows it.
    issue(&mut d, &[(0, 0, Op::Read), (100, 2, Op::Write), (200, 4, Op::Read), (7_000, 6, Op::Read)]);
    d.finish();
    assert_eq!(done(&d, 0), 3310);
    assert_eq!(done(&d, 200), 6620);
    assert_eq!(done(&d, 100), 106_981);
    assert_eq!(done(&d, 7_000), 106_981 + 3310);
    assert_eq!(stat(&d, "flash.programs"), 1);
}

/// `prefetcher = "best_offset"` in compat mode is MQSim_CXL's variant, triggered by every demand
/// hit on a prefetched line (not only the first) and not by hits under miss. With offset 1 only,
/// one round a phase: every trigger ends a learning phase.
#[test]
fn mqsim_best_offset_is_triggered_by_every_hit_on_a_prefetched_line() {
    let mut d =
        device("prefetcher = \"best_offset\"\nmbo_max_offset = 1\nmbo_rounds = 1\nmbo_bad_score = 1\nmbo_degree = 1");
    assert_eq!(d.stats()["prefetch"]["prefetcher"], "best_offset_mqsim");
    // Miss on line 10: phase 1, nothing learned. Miss on line 11: 10 was a trigger, offset 1
    // scores and is kept; this trigger prefetches line 12 (die 0, idle: ready at 3310 + 10_000).
    d.access(&req(0, 10, Op::Read));
    d.access(&req(10_000, 11, Op::Read));
    assert_eq!(stat(&d, "prefetch.state.learning_phases"), 2);
    assert_eq!(stat(&d, "prefetch.issued"), 1);
    // A hit under miss on line 12 while it is read: no trigger.
    d.access(&req(10_100, 12, Op::Read));
    assert_eq!(stat(&d, "prefetch.state.learning_phases"), 2);
    // Three hits on line 12 once it is filled: three triggers; the first prefetches line 13.
    for t in [20_000, 21_000, 22_000] {
        d.access(&req(t, 12, Op::Read));
    }
    assert_eq!(stat(&d, "prefetch.state.learning_phases"), 5);
    assert_eq!(stat(&d, "prefetch.issued"), 2);
    // Hits on line 11, a demand line: no trigger.
    d.access(&req(30_000, 11, Op::Read));
    assert_eq!(stat(&d, "prefetch.state.learning_phases"), 5);
}

/// MQSim_CXL stops its host feed while 1024 flash accesses, reads or writes, are in its back
/// end. Without a cache, 1024 writes fill it. With 2 planes a die, its dynamic allocation puts
/// the n-th write at slot 204 + n, striped plane, channel, die as PCWD stripes units, and fills
/// each plane's 4 units a page: write 0 is plane 0 of die 0 (slot 204), write 1 plane 1 of die
/// 0, writes 2-3 die 1, all at page 0 (slots 204-207 / 4 planes / 4 units = 12 -> page 0), then
/// slots 208-223 at page 1, and so on, back to page 0 at slot 268 (4 pages a block: MQSim_CXL
/// compares the page, not the block, ssd/TSU_OutofOrder.cpp:367,474). Write 0 starts at once,
/// alone; write 1 finds die 0 busy and waits; write 2 (at 400, once write 0's command has left
/// the channel) starts at once on die 1, write 3 waits. Every later command of a die pairs the
/// head of its queue with the first waiting write of the other plane at its page: 2 x (1 + 255
/// pairs + 1 left alone) programs.
#[test]
fn the_host_feed_stops_while_1024_flash_accesses_are_in_flight() {
    let mut d = device("cache_size = 0\nmshr_rows = 1024\nflash_planes = 2");
    issue(&mut d, &[(0, 0, Op::Write), (1, 8, Op::Write), (400, 16, Op::Write)]);
    for i in 3..1024u64 {
        issue(&mut d, &[(400 + i, 8 * i, Op::Write)]);
    }
    // A read of unit 2 (never written: die 1 under the static PCWD allocation, page 0) is
    // accepted when write 0 ends (100_361) and goes before die 1's waiting programs once die 1
    // has freed (100_761) and the channel too: die 0's next program command holds it
    // 100_361..101_538 (see below). Then + 290 + 3020.
    issue(&mut d, &[(2_000, 2, Op::Read)]);
    assert_eq!(stat(&d, "mshr.stall_rows"), 1);
    d.finish();
    // 361 ns of command, 100 us of program. When die 0 frees, write 1 (plane 1, page 0) goes
    // with slot 268 (plane 0, page 0): 1177 ns of command.
    assert_eq!(done(&d, 0), 100_361);
    assert_eq!(done(&d, 1), 100_361 + 1177 + 100_000);
    assert_eq!(done(&d, 400), 400 + 100_361);
    assert_eq!(done(&d, 2_000), 101_538 + 3310);
    assert_eq!(stat(&d, "flash.programs"), 2 * (2 + 255));
    assert_eq!(stat(&d, "flash.program_bytes"), 1024 * 4096);
}

/// Writes waiting for one die on distinct planes at one page join into one multi-plane
/// program when the die frees, whose command cycles grow by 816 ns a plane (361, 1177, 1993,
/// 2809 ns). With 4 planes and 2 dies, write 0 (slot 204: plane 0 of die 1, as 204 / 4 = 51 is
/// odd) starts at once; writes 1-3 (slots 205-207: planes 1-3 of die 1, the same page) wait for
/// it and form one three-plane program from 100_361: 1993 + 100_000 -> 202_354 for all three.
/// A read of a unit that was written is read where the write put it, plane 2 of die 1, after
/// that program: + 290 + 3020.
#[test]
fn writes_waiting_for_a_die_join_on_distinct_planes_of_one_page() {
    let mut d = device("cache_size = 0\nflash_planes = 4");
    issue(&mut d, &[(0, 0, Op::Write), (10, 101, Op::Write), (11, 102, Op::Write), (12, 103, Op::Write)]);
    // Line 6 was never written: its static place is plane 2 of die 1 as well (6 % 4 = 2,
    // 6 / 4 % 2 = 1), but at page 0, so it is a read of its own after line 102's.
    issue(&mut d, &[(150_000, 102, Op::Read), (150_001, 6, Op::Read)]);
    d.finish();
    assert_eq!(done(&d, 0), 100_361);
    for t in [10, 11, 12] {
        assert_eq!(done(&d, t), 100_361 + 1993 + 100_000, "request at {t}");
    }
    assert_eq!(stat(&d, "flash.programs"), 2);
    // Every unit counts as written (for the lifetime), joined or not.
    assert_eq!(stat(&d, "flash.program_bytes"), 4 * 4096);
    assert_eq!(done(&d, 150_000), 202_354 + 3310);
    assert_eq!(done(&d, 150_001), 202_354 + 2 * 3310);
}
