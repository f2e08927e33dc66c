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
    CxlFlash::from_params(&Params::resolve(SPECS, Some(&t)).unwrap()).unwrap()
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
/// Reads waiting for die 0 on distinct planes go out as one command at page 0 (every unit here
/// is unwritten), its command 290 ns long and 650 ns more per added plane: a read joins the
/// earliest waiting command without its plane, and the commands behind it start later. A die's
/// read takes 3000 ns of array time + 20 ns of ready/busy signal (MQSim_CXL's _RBSignalDelayRead).
#[test]
fn reads_waiting_for_a_die_share_one_multi_plane_command() {
    let mut d = device("flash_planes = 4\ncache_size = \"256KiB\"\ncache_ways = 16");
    // Die 0 idle: 290 + 3020, + 46.
    assert_eq!(d.access(&req(0, 0, Op::Read)), 3356);
    // Unit 1 (plane 1) waits for die 0: a command at 3310, 290 + 3020 -> 6620, + 46.
    assert_eq!(d.access(&req(100, 1, Op::Read)), 6666);
    // Unit 2 (plane 2) joins it before it starts: the command takes 940 ns -> 7270, + 46.
    assert_eq!(d.access(&req(200, 2, Op::Read)), 7316);
    // Unit 9 is plane 1 of die 0 again: taken in the waiting command, so the next one, after
    // the die frees at 7270: 7270 + 290 + 3020 = 10_580, + 46.
    assert_eq!(d.access(&req(300, 9, Op::Read)), 10_626);
    // Unit 3 (plane 3) joins the earliest waiting command without its plane, the first: 1590 ns
    // of command from 3310, sensed at 7920, + 46. The second command starts 650 ns later (7920).
    assert_eq!(d.access(&req(350, 3, Op::Read)), 7966);
    // Unit 10 (plane 2 of die 0) is taken in the first, so it joins the second: command
    // 7920..8210 + 650, sensed at 11_880, + 46.
    assert_eq!(d.access(&req(360, 10, Op::Read)), 11_926);
    // Unit 4 is on die 1, idle: its command 400..690, sensed at 3710, but its data leaves only
    // when the channel stops moving die 0's first command (3310..4900): 4900, + 46.
    assert_eq!(d.access(&req(400, 4, Op::Read)), 4946);
    assert_eq!(stat(&d, "flash.backend.multiplane_read_commands"), 2);
    assert_eq!(stat(&d, "flash.reads_demand"), 7);
}

/// A dirty victim goes to flash at once as a 4 KiB program of its own (MQSim_CXL's flush), not
/// into the FTL's write buffer; a read of its die that arrives after the program started waits
/// for it.
#[test]
fn a_dirty_eviction_is_programmed_at_once() {
    let mut d = device("");
    // Set 0 (4 ways) holds lines 0, 4, 8, 12; line 0 is dirty (a write miss fetches it).
    assert_eq!(d.access(&req(0, 0, Op::Write)), 3356);
    for (i, line) in [4u64, 8, 12].into_iter().enumerate() {
        let t = 10_000 * (i as u64 + 1);
        assert_eq!(d.access(&req(t, line, Op::Read)), t + 3356);
    }
    // Line 16 evicts line 0 when its data arrives at 43_310.
    assert_eq!(d.access(&req(40_000, 16, Op::Read)), 43_356);
    assert_eq!(stat(&d, "flash.programs"), 0);
    // At 43_320 the fill has happened: line 0 was programmed on die 0 from 43_310 (361 ns of
    // command, 100 us), so this read of die 0 starts at 143_671: + 3310, + 46.
    assert_eq!(d.access(&req(43_320, 18, Op::Read)), 147_027);
    assert_eq!(stat(&d, "flash.programs"), 1);
    assert_eq!(stat(&d, "cache.flushes"), 1);
}

/// Without a cache every write is a program. A die serves the reads waiting for it before a
/// waiting program; the program's completion is computed when the write arrives (103_671),
/// before the read that went first pushed it to 106_981.
#[test]
fn reads_go_before_a_waiting_program() {
    let mut d = device("cache_size = 0");
    // Unit 0 on die 0: 290 + 3020 (no DRAM event without a cache).
    assert_eq!(d.access(&req(0, 0, Op::Read)), 3310);
    // Unit 2, die 0: waits for the die (3310), then 361 + 100_000.
    assert_eq!(d.access(&req(100, 2, Op::Write)), 103_671);
    // Unit 4, die 0, arrives while the program waits: it goes first, at 3310.
    assert_eq!(d.access(&req(200, 4, Op::Read)), 6620);
    // By 7000 the die freed (6620) with no read waiting: the program runs 6620..106_981, and
    // this read of die 0 follows it.
    assert_eq!(d.access(&req(7_000, 6, Op::Read)), 106_981 + 3310);
    assert_eq!(stat(&d, "flash.programs"), 1);
}

/// `prefetcher = "best_offset"` in compat mode is MQSim_CXL's variant, triggered by every demand
/// hit on a prefetched line (not only the first) and not by hits under miss. With offsets 1..2
/// of which only 1 is tested, one round a phase: every trigger ends a learning phase.
#[test]
fn mqsim_best_offset_is_triggered_by_every_hit_on_a_prefetched_line() {
    let mut d = device(
        "prefetcher = \"best_offset\"\nmbo_max_offset = 2\nmbo_rounds = 1\nmbo_bad_score = 1\nmbo_degree = 1",
    );
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
/// slots 208-223 at page 1, and so on. Write 0 starts at once, alone; write 1 finds die 0 busy
/// and waits, alone too (write 0 has started); write 2 (at 400, once write 0's command has left
/// the channel) starts at once on die 1, write 3 waits; every later pair of writes of one die
/// shares a page and plane pair and joins into a two-plane program: 2 x (2 + 255) programs.
#[test]
fn the_host_feed_stops_while_1024_flash_accesses_are_in_flight() {
    let mut d = device("cache_size = 0\nmshr_rows = 1024\nflash_planes = 2");
    // 361 ns of command, 100 us of program.
    assert_eq!(d.access(&req(0, 0, Op::Write)), 100_361);
    // Write 1 waits for write 0's program: 100_361 + 361 + 100_000.
    assert_eq!(d.access(&req(1, 8, Op::Write)), 200_722);
    assert_eq!(d.access(&req(400, 16, Op::Write)), 400 + 100_361);
    for i in 3..1024u64 {
        d.access(&req(400 + i, 8 * i, Op::Write));
    }
    assert_eq!(stat(&d, "flash.programs"), 2 * (2 + 255));
    // A read of unit 2 (never written: die 1 under the static PCWD allocation, page 0) is
    // accepted when write 0 ends (100_361) and goes before die 1's waiting programs when die 1
    // frees at 100_761: + 290 + 3020.
    assert_eq!(d.access(&req(2_000, 2, Op::Read)), 100_761 + 3310);
    assert_eq!(stat(&d, "mshr.stall_rows"), 1);
}

/// Writes waiting for one die on distinct planes at one page join into one multi-plane
/// program, whose command cycles grow by 816 ns a plane (361, 1177, 1993, 2809 ns). With 4
/// planes and 2 dies, write 0 (slot 204: plane 0 of die 1, as 204 / 4 = 51 is odd) starts at
/// once; writes 1-3 (slots 205-207: planes 1-3 of die 1, the same page) wait for it and form one
/// three-plane program from 100_361: 1993 + 100_000 -> 202_354. Each write's completion is
/// computed when it arrives, with the planes joined so far (a deviation: MQSim_CXL ends all three
/// at 202_354, as it forms the command when the die frees). A read of a unit that was written is
/// read where the write put it, plane 2 of die 1, after that program: + 290 + 3020.
#[test]
fn writes_waiting_for_a_die_join_on_distinct_planes_of_one_page() {
    let mut d = device("cache_size = 0\nflash_planes = 4");
    assert_eq!(d.access(&req(0, 0, Op::Write)), 100_361);
    assert_eq!(d.access(&req(10, 101, Op::Write)), 100_361 + 361 + 100_000);
    assert_eq!(d.access(&req(11, 102, Op::Write)), 100_361 + 1177 + 100_000);
    assert_eq!(d.access(&req(12, 103, Op::Write)), 100_361 + 1993 + 100_000);
    assert_eq!(stat(&d, "flash.programs"), 2);
    // Every unit counts as written (for the lifetime), joined or not.
    assert_eq!(stat(&d, "flash.program_bytes"), 4 * 4096);
    assert_eq!(d.access(&req(150_000, 102, Op::Read)), 202_354 + 3310);
    // Line 6 was never written: its static place is plane 2 of die 1 as well (6 % 4 = 2,
    // 6 / 4 % 2 = 1), but at page 0, so it is a read of its own after line 102's.
    assert_eq!(d.access(&req(150_001, 6, Op::Read)), 202_354 + 2 * 3310);
}
