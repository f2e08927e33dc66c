//! Scripted timing cases of the cxl_flash device with exact completion times, worked out by
//! hand below (times in ps unless marked ns; a completion is rounded up to whole ns).
//!
//! The base configuration (`BASE`):
//! - link: 64 GB/s per direction = 15625 fs/B: a 16 B header takes 250, 64 B 1000, 80 B 1250;
//!   round trip 100 ns.
//! - DRAM: one channel at 64 GB/s, efficiency 1: 64 B = 1000, a 4 KiB fill 64_000; latency 40 ns.
//! - cache 64 KiB of 4 KiB lines, 4 ways: 4 sets, set = line % 4; LRU; no prefetcher.
//! - MSHR: 2 rows of 2 entries.
//! - flash: 1 channel x 2 dies x 1 plane, 8 blocks of 4 pages of 16 KiB; channel 4 GB/s, so a
//!   4 KiB unit crosses it in 1_024_000 and a 16 KiB page in 4_096_000; read 3 us, program
//!   100 us, erase 1 ms. A unit never written is read from die lpn % 2.
//!
//! A read hit: 250 (request) + 1000 (DRAM burst) + 40_000 (DRAM) + 1000 (data) + 100_000 (link)
//! = 142_250 -> 143 ns. A read miss on an idle die: 250 + 3_000_000 (array) + 1_024_000
//! (channel) = ready at 4_024_250, + 1000 (data) + 100_000 = 4_125_250 -> 4126 ns.

use tiersim_core::{Op, Params};
use tiersim_devices::cxl_flash::{CxlFlash, SPECS};
use tiersim_devices::{build, Device, DeviceRequest};

const BASE: &str = r#"
link_latency = "100ns"
link_read_bandwidth = "64GB/s"
link_write_bandwidth = "64GB/s"
link_header = "16B"
cache_size = "64KiB"
cache_line = "4KiB"
cache_ways = 4
replacement = "lru"
prefetcher = "none"
mshr_rows = 2
mshr_entries = 2
dram_channels = 1
dram_channel_bandwidth = "64GB/s"
dram_efficiency = 1.0
dram_read_latency = "40ns"
dram_write_latency = "40ns"
dram_interleave = "256B"
flash_channels = 1
flash_ways = 2
flash_planes = 1
flash_blocks_per_plane = 8
flash_pages_per_block = 4
flash_page_size = "16KiB"
flash_channel_bandwidth = "4GB/s"
flash_read_latency_us = [3]
flash_program_latency_us = [100]
flash_erase_latency = "1ms"
overprovisioning = 0.25
gc_threshold = 0.0
"#;

fn device(extra: &str) -> CxlFlash {
    let mut t: toml::Table = toml::from_str(BASE).unwrap();
    t.extend(toml::from_str::<toml::Table>(extra).unwrap());
    CxlFlash::from_params(&Params::resolve(SPECS, Some(&t)).unwrap()).unwrap()
}

fn rd(now: u64, addr: u64) -> DeviceRequest {
    DeviceRequest { now, addr, size: 64, op: Op::Read, socket: 0, cpu: 0, remote: false }
}

fn wr(now: u64, addr: u64) -> DeviceRequest {
    DeviceRequest { now, addr, size: 64, op: Op::Write, socket: 0, cpu: 0, remote: false }
}

const LINE: u64 = 4096;

fn stat(d: &CxlFlash, path: &str) -> serde_json::Value {
    let mut v = d.stats();
    for k in path.split('.') {
        v = v[k].clone();
    }
    v
}

#[test]
fn hit_latency_after_a_miss() {
    let mut d = device("");
    assert_eq!(d.access(&rd(0, 0)), 4126);
    // The fill (ready at 4_024_250) is long done at 10 us: a hit.
    assert_eq!(d.access(&rd(10_000, 64)), 10_143);
    assert_eq!(d.idle_latency(Op::Read, 64), 143);
    assert_eq!(stat(&d, "hits"), 1);
    assert_eq!(stat(&d, "misses"), 1);
    assert_eq!(stat(&d, "flash.reads_demand"), 1);
}

#[test]
fn two_misses_to_one_line_merge_and_a_full_row_waits() {
    let mut d = device("");
    assert_eq!(d.access(&rd(0, 0)), 4126);
    // Line 0 is in flight: the request merges into its row and returns with the same data.
    assert_eq!(d.access(&rd(1_000, 64)), 4126);
    assert_eq!(stat(&d, "hits_under_miss"), 1);
    assert_eq!(stat(&d, "flash.reads_demand"), 1);
    // The row holds 2 entries: a third request waits for the fill (4_024_250), then hits. The
    // DRAM is writing the fill until 4_088_250: + 1000 + 40_000 = 4_129_250; data 1000 and the
    // link 100_000: 4_230_250 -> 4231 ns.
    assert_eq!(d.access(&rd(2_000, 128)), 4231);
    assert_eq!(stat(&d, "mshr.stall_entries"), 1);
    assert_eq!(stat(&d, "mshr.stall_entries_ns"), 4_024_250.0 / 1000.0 - 2000.25);
    // Without MSHRs the second access reads flash again (a duplicate read): die 0 is busy with
    // the first read until 4_024_250, so it senses until 7_024_250 and transfers until 8_048_250.
    let mut d = device("mshr_rows = 0");
    assert_eq!(d.access(&rd(0, 0)), 4126);
    assert_eq!(d.access(&rd(1_000, 64)), 8150);
    assert_eq!(stat(&d, "flash.reads_duplicate"), 1);
    assert_eq!(stat(&d, "flash.reads_demand"), 2);
}

#[test]
fn full_mshr_stalls_the_host_and_the_wait_is_latency() {
    let mut d = device("");
    assert_eq!(d.access(&rd(0, 0)), 4126);
    // Line 1 lives on die 1 (sensed at 3_010_250) but the one channel carries line 0's data
    // until 4_024_250: 5_048_250 + 1000 + 100_000 -> 5150 ns.
    assert_eq!(d.access(&rd(10, LINE)), 5150);
    // Both rows busy: line 2 waits until line 0 arrives (4_024_250), then reads die 0
    // (sensed 7_024_250, channel 7_024_250..8_048_250): + 1000 + 100_000 -> 8150 ns.
    assert_eq!(d.access(&rd(20, 2 * LINE)), 8150);
    assert_eq!(stat(&d, "mshr.stall_rows"), 1);
    assert_eq!(stat(&d, "mshr.stall_rows_ns"), 4_004.0);
    // A hit issued right behind the stalled miss waits for it to be accepted (in-order
    // acceptance): from 4_024_250 the DRAM still writes line 0's fill until 4_088_250, so the
    // hit's data leaves at 4_129_250 and arrives at 4_230_250 -> 4231 ns.
    assert_eq!(d.access(&rd(30, 0)), 4231);
    assert_eq!(stat(&d, "mshr.stall_behind"), 1);
    let lat = stat(&d, "latency_ns.all.max").as_u64().unwrap();
    assert_eq!(lat, 8150 - 20, "the stall is part of the miss's latency");
}

#[test]
fn a_useful_prefetch_turns_a_miss_into_a_hit() {
    let mut d = device(
        r#"prefetcher = "next_n_line"
nl_degree = 1
nl_offset = 0"#,
    );
    // The miss on line 0 prefetches line 1 (die 1): sensed at 3_000_250, channel after line 0:
    // ready at 5_048_250.
    assert_eq!(d.access(&rd(0, 0)), 4126);
    assert_eq!(stat(&d, "prefetch.issued"), 1);
    assert_eq!(stat(&d, "flash.reads_prefetch"), 1);
    // At 10 us line 1 is cached: a hit, counted useful and timely.
    assert_eq!(d.access(&rd(10_000, LINE)), 10_143);
    assert_eq!(stat(&d, "prefetch.useful"), 1);
    assert_eq!(stat(&d, "prefetch.late"), 0);
    // Its first use triggers the next prefetch (line 2): 1 useful of 2 issued so far.
    assert_eq!(stat(&d, "prefetch.issued"), 2);
    assert_eq!(stat(&d, "prefetch.accuracy"), 0.5);
    // Without the prefetcher the same access is a miss: 10_000_250 + 3_000_000 + 1_024_000 +
    // 1000 + 100_000 -> 14_126 ns.
    let mut d = device("");
    d.access(&rd(0, 0));
    assert_eq!(d.access(&rd(10_000, LINE)), 14_126);
    // Issued too late: the demand access merges into the prefetch's row (a late prefetch).
    let mut d = device(
        r#"prefetcher = "next_n_line"
nl_degree = 1
nl_offset = 0"#,
    );
    d.access(&rd(0, 0));
    assert_eq!(d.access(&rd(100, LINE)), 5150);
    assert_eq!(stat(&d, "prefetch.late"), 1);
    assert_eq!(stat(&d, "prefetch.lateness"), 1.0);
}

#[test]
fn a_dirty_eviction_programs_flash() {
    // 4 KiB pages: one written-back unit fills a page, so it is programmed at once.
    let mut d = device(
        r#"flash_page_size = "4KiB"
flash_pages_per_block = 16"#,
    );
    // A write miss on line 0 reads it (fetch on write) and is acknowledged once its data is in
    // the MSHR row: 1250 (80 B request) + 1000 + 40_000 (DRAM write) + 250 (completion) +
    // 100_000 = 142_500 -> 143 ns.
    assert_eq!(d.access(&wr(0, 0)), 143);
    // Lines 4, 8, 12 fill set 0 (reads at 10, 20, 30 us); line 16 then evicts line 0, the LRU.
    for (i, line) in [4u64, 8, 12].iter().enumerate() {
        d.access(&rd(10_000 * (i as u64 + 1), line * LINE));
    }
    assert_eq!(stat(&d, "flash.programs"), 0);
    // Line 16 (die 0) is read at 40_000_250 and arrives at 44_024_250; it is filled when the
    // next request arrives (50 us), evicting dirty line 0: the write buffer programs it on die
    // 0 at 44_024_250 (the first die in turn): 1_024_000 in + 100 us = done at 145_048_250.
    d.access(&rd(40_000, 16 * LINE));
    // A miss on line 20 (die 0) at 50 us waits for the program: sensed 148_048_250, channel
    // until 149_072_250, + 1000 + 100_000 -> 149_174 ns.
    assert_eq!(d.access(&rd(50_000, 20 * LINE)), 149_174);
    assert_eq!(stat(&d, "flash.programs"), 1);
    assert_eq!(stat(&d, "cache.flushes"), 1);
    assert_eq!(stat(&d, "cache.evictions_clean"), 0);
    assert_eq!(stat(&d, "flash.write_amplification"), 1.0);
    assert_eq!(stat(&d, "cache.dirty_fraction_of_evicted_lines"), 1.0 / 64.0);
}

#[test]
fn cflru_evicts_clean_lines_first() {
    // Set 0 holds dirty line 0 (oldest) then clean 4, 8, 12. LRU evicts line 0 (a program);
    // CFLRU with a window of all 4 ways evicts clean line 4 instead.
    for (repl, flushes) in [("lru", 1), ("cflru", 0)] {
        let mut d = device(&format!("replacement = \"{repl}\"\ncflru_window = 1.0"));
        d.access(&wr(0, 0));
        for (i, line) in [4u64, 8, 12, 16, 20].iter().enumerate() {
            d.access(&rd(10_000 * (i as u64 + 1), line * LINE));
        }
        assert_eq!(stat(&d, "cache.flushes"), flushes, "{repl}");
    }
}

#[test]
fn gc_runs_and_erase_counts_rise_on_a_small_device() {
    // No cache: every 64 B write is a read-modify-write of its 4 KiB unit. 192 logical units
    // on 256 physical; overwrite 64 of them round after round.
    let mut d = device("cache_size = 0");
    let mut t = 0;
    for _round in 0..12 {
        for lpn in 0..64u64 {
            t += 20_000;
            d.access(&wr(t, lpn * LINE));
        }
    }
    let erases = stat(&d, "flash.erases").as_u64().unwrap();
    assert!(erases >= 8, "GC erased {erases} blocks");
    assert!(stat(&d, "ftl.gc_runs").as_u64().unwrap() >= 8);
    assert!(stat(&d, "ftl.max_block_erases").as_u64().unwrap() >= 2);
    assert_eq!(stat(&d, "ftl.dropped_units"), 0);
    assert_eq!(stat(&d, "ftl.gc_stuck"), 0);
    let wa = stat(&d, "flash.write_amplification").as_f64().unwrap();
    assert!((1.0..1.5).contains(&wa), "write amplification {wa}");
    // Every unit still reads from where the FTL last put it: reads complete.
    assert!(d.access(&rd(t + 1_000_000_000, 5 * LINE)) > t);
}

#[test]
fn bad_parameters_are_rejected_with_the_key() {
    for (extra, key) in [
        ("cache_line = \"3KiB\"", "cache_line"),
        ("cache_size = \"65KiB\"", "cache_size"),
        ("cache_ways = 3", "cache_ways"),
        ("flash_page_size = \"2KiB\"", "flash_page_size"),
        ("write_allocate = false\nwrite_validate = true", "write_validate"),
        ("flash_read_latency_us = []", "flash_read_latency_us"),
        ("prefetcher = \"magic\"", "prefetcher"),
        ("replacement = \"mru\"", "replacement"),
        ("fdp_offsets = [1, 2]\nprefetcher = \"feedback_directed\"", "fdp_offsets"),
        ("cache_sizee = 1", "cache_sizee"),
        // The registry builds devices for callers that need each completion at issue.
        ("compat = \"mqsim_cxl\"", "open loop"),
    ] {
        let mut t: toml::Table = toml::from_str(BASE).unwrap();
        t.extend(toml::from_str::<toml::Table>(extra).unwrap());
        let e = build("cxl_flash", Some(&t)).err().unwrap_or_else(|| panic!("{extra} accepted")).to_string();
        assert!(e.contains(key), "{extra}: {e}");
    }
}

#[test]
fn logical_bytes_without_building_the_device() {
    // BASE: 2 dies x 8 blocks x 4 pages x 4 units = 256 units, 25 % hidden: 192 x 4 KiB.
    for (extra, want) in
        [("", 192 * LINE), ("overprovisioning = 0.5", 128 * LINE), ("cache_line = \"16KiB\"", 48 * 16384)]
    {
        let mut t: toml::Table = toml::from_str(BASE).unwrap();
        t.extend(toml::from_str::<toml::Table>(extra).unwrap());
        let p = Params::resolve(SPECS, Some(&t)).unwrap();
        assert_eq!(tiersim_devices::cxl_flash::logical_bytes(&p).unwrap(), want, "{extra}");
        assert_eq!(CxlFlash::from_params(&p).unwrap().logical_bytes(), want, "{extra}");
    }
    assert_eq!(
        device_defaults().logical_bytes(),
        tiersim_devices::cxl_flash::logical_bytes(&Params::defaults(SPECS).unwrap()).unwrap()
    );
    let mut t: toml::Table = toml::from_str(BASE).unwrap();
    t.extend(toml::from_str::<toml::Table>("flash_page_size = \"2KiB\"").unwrap());
    let e =
        tiersim_devices::cxl_flash::logical_bytes(&Params::resolve(SPECS, Some(&t)).unwrap()).unwrap_err().to_string();
    assert!(e.contains("flash_page_size"), "{e}");
}

/// FTL state of a default 1 TiB device (8 x 8 dies x 4 planes x 512 blocks x 512 pages x 16 KiB)
/// after `reads` reads of distinct lines, then `writes` writes of other distinct lines, spread
/// over the whole logical space (`scatter`) or consecutive; returns (bytes when built, bytes
/// after, units written back to flash).
fn ftl_bytes_after(reads: u64, writes: u64, scatter: bool) -> (u64, u64, u64) {
    let mut d = device_defaults();
    assert_eq!(stat(&d, "flash.geometry.physical_bytes"), 1u64 << 40);
    let built = stat(&d, "ftl.state_bytes").as_u64().unwrap();
    let lines = d.logical_bytes() / LINE;
    // Scattered: 1025 lines (4 MiB) apart, so each line is in its own chunk of 1024 map
    // entries; 100,000 of them span 0.39 TiB.
    let line = |i: u64| if scatter { i * 1025 } else { i };
    assert!(line(reads + writes) < lines);
    for i in 0..reads {
        d.access(&rd(i * 100, line(i) * LINE));
    }
    assert_eq!(stat(&d, "ftl.state_bytes").as_u64().unwrap(), built, "reads of unwritten lines allocate nothing");
    for i in reads..reads + writes {
        d.access(&wr(i * 100, line(i) * LINE));
    }
    (built, stat(&d, "ftl.state_bytes").as_u64().unwrap(), stat(&d, "ftl.host_units").as_u64().unwrap())
}

#[test]
fn a_1tib_devices_memory_follows_the_lines_written() {
    // Built: one pointer per chunk of 1024 units (0.93 TiB logical = 234M units: 1.8 MB).
    // MQSim_CXL allocates every mapping entry up front, over 24 GB.
    let (built, after, units) = ftl_bytes_after(20_000, 40_000, true);
    assert!(built < 2 << 20, "built: {built} B");
    // The 64 MiB cache (16,384 lines) keeps the last writes and up to 1024 MSHR rows are still
    // being read (writes allocate): the rest were written back.
    assert!((40_000 - 16_384 - 1024..40_000 - 16_384).contains(&units), "{units} units written back");
    // Scattered, each unit opens its own chunk of the forward map (a 160 B bitmap with its
    // counts, a vector of 4 entries: about 200 B) and fills 4 B of its block's reverse map:
    // bounded by the units written, where a dense 4 B-per-unit map would take 0.9 GiB.
    let per_unit = (after - built) as f64 / units as f64;
    assert!((195.0..220.0).contains(&per_unit), "{per_unit:.1} B per written unit ({after} B)");
    // Twice the writes, twice the growth: nothing grows with the device's size.
    let (_, after2, units2) = ftl_bytes_after(20_000, 80_000, true);
    let per_unit2 = (after2 - built) as f64 / units2 as f64;
    assert!((per_unit2 / per_unit - 1.0).abs() < 0.03, "{per_unit:.1} vs {per_unit2:.1} B per unit");
    // Consecutive units share chunks, which turn dense at half full: 4 B forward + 4 B
    // reverse per unit, plus each block's reverse map grown in doublings.
    let (_, seq, seq_units) = ftl_bytes_after(0, 100_000, false);
    let per_seq = (seq - built) as f64 / seq_units as f64;
    assert!((8.0..12.0).contains(&per_seq), "{per_seq:.1} B per sequential unit");
}

fn device_defaults() -> CxlFlash {
    CxlFlash::from_params(&Params::defaults(SPECS).unwrap()).unwrap()
}

/// One set of 4 ways (16 KiB of 4 KiB lines), LRU, at most 2 pinned lines. Lines A = 0, B = 1
/// and C = 2 are hinted 10 us apart in `pin` mode (optionally re-pinning one of them at 15 us,
/// after A and B are pinned), then D = 3 and E = 4 are read: D fills the last free way and E's
/// fill evicts the least recently used unpinned line. `probes` are read 10 us apart after that
/// and report whether each hit; `hints.{pins, pins_refused, pins_replaced}` at the end.
fn pin_run(full: &str, repin: Option<u64>, probes: &[u64]) -> (Vec<bool>, [u64; 3]) {
    let mut d = device(&format!(
        "cache_size = \"16KiB\"\nhint_mode = \"pin\"\nhint_pin_share = 0.5\nhint_pin_full = \"{full}\""
    ));
    d.hint(0, 0, LINE);
    d.hint(10_000, LINE, LINE);
    if let Some(line) = repin {
        d.hint(15_000, line * LINE, LINE);
    }
    d.hint(20_000, 2 * LINE, LINE);
    d.access(&rd(30_000, 3 * LINE));
    d.access(&rd(40_000, 4 * LINE));
    let mut hits = Vec::new();
    for (i, &line) in probes.iter().enumerate() {
        let before = stat(&d, "hits").as_u64().unwrap();
        d.access(&rd(50_000 + 10_000 * i as u64, line * LINE));
        hits.push(stat(&d, "hits").as_u64().unwrap() == before + 1);
    }
    let counts = ["pins", "pins_refused", "pins_replaced"].map(|k| stat(&d, &format!("hints.{k}")).as_u64().unwrap());
    (hits, counts)
}

#[test]
fn a_full_pin_quota_refuses_or_replaces_the_oldest_pin() {
    // Ten misses on lines 5..=14 after the probes of the three hinted lines: each fill evicts an
    // unpinned line, so the pinned ones still hit at the end.
    let churn: Vec<u64> = (5..15).collect();
    let probes = |first: [u64; 3], last: [u64; 2]| [&first[..], &churn, &last].concat();
    let hit = |first: [bool; 3]| [&first[..], &[false; 10], &[true, true]].concat();

    // refuse: C is refused, A and B stay pinned; E's fill evicts C (the oldest unpinned).
    let (hits, counts) = pin_run("refuse", None, &probes([0, 1, 2], [0, 1]));
    assert_eq!(hits, hit([true, true, false]));
    assert_eq!(counts, [2, 1, 0]);

    // replace_oldest: C's pin releases A's (pinned first), A is an ordinary line again and the
    // oldest in LRU order, so E's fill evicts it; B and C survive every later fill.
    let (hits, counts) = pin_run("replace_oldest", None, &probes([1, 2, 0], [1, 2]));
    assert_eq!(hits, hit([true, true, false]));
    assert_eq!(counts, [3, 0, 1]);

    // Re-pinning B refreshes a pin that was not the oldest: A is still displaced.
    let (hits, counts) = pin_run("replace_oldest", Some(1), &probes([1, 2, 0], [1, 2]));
    assert_eq!(hits, hit([true, true, false]));
    assert_eq!(counts, [4, 0, 1]);

    // Re-pinning A makes B the oldest pin: C displaces B, and E's fill evicts B although A is
    // older in LRU order.
    let (hits, counts) = pin_run("replace_oldest", Some(0), &probes([0, 2, 1], [0, 2]));
    assert_eq!(hits, hit([true, true, false]));
    assert_eq!(counts, [4, 0, 1]);

    // With refuse a re-pin changes nothing: C is refused and evicted.
    let (hits, counts) = pin_run("refuse", Some(0), &probes([0, 1, 2], [0, 1]));
    assert_eq!(hits, hit([true, true, false]));
    assert_eq!(counts, [3, 1, 0]);
}

#[test]
fn a_bad_hint_pin_full_lists_the_valid_ones() {
    let mut t: toml::Table = toml::from_str(BASE).unwrap();
    t.insert("hint_pin_full".into(), "oldest".into());
    let e = build("cxl_flash", Some(&t)).err().expect("accepted").to_string();
    assert!(e.contains("hint_pin_full") && e.contains("refuse, replace_oldest"), "{e}");
}

/// `compat = "mqsim_cxl"` on the base device: no link, the channel moves data in no time (B2), a
/// read holds the channel 290 ns for its command cycles, and every request ends with one 46 ns
/// event of a single device-DRAM server. A miss on an idle die: 290 + 3000 (array) + 20 (the
/// ready/busy signal) = ready at 3310 ns, + 46 = 3356 ns. Requests merged into its row drain one event after the other.
/// A flash read's completion is fixed only when its die gets the channel (after later requests
/// may have taken it), so completions are read from the device's log once it has finished.
#[test]
fn mqsim_compat_timing() {
    let mut d = device("compat = \"mqsim_cxl\"\nmshr_entries = 4");
    d.log_completions();
    let reqs = [rd(0, 0), rd(1_000, 64), rd(1_100, 128)];
    for r in &reqs {
        d.access(r);
    }
    // A hit long after the fill: one DRAM event, 46 ns. Hits back to back queue on the one
    // server: the second waits for the first.
    assert_eq!(d.access(&rd(10_000, 192)), 10_046);
    assert_eq!(d.access(&rd(10_010, 256)), 10_092);
    // A write miss fetches its line and is acknowledged with the fill, as a read (line 1 is on
    // die 1, idle): 20_000 + 290 + 3020 + 46.
    d.access(&wr(20_000, LINE));
    d.finish();
    let done = |now: u64| d.completions().iter().find(|c| c.0 == now).expect("completed").1;
    assert_eq!(done(0), 3356);
    assert_eq!(done(1_000), 3310 + 2 * 46);
    assert_eq!(done(1_100), 3310 + 3 * 46);
    assert_eq!(done(20_000), 23_356);
    // Latency counts from acceptance: 3356, 2402 and 2348 ns.
    assert_eq!(stat(&d, "latency_ns.all.max"), 3356);
    assert_eq!(stat(&d, "flash.reads_demand"), 2);
    assert_eq!(stat(&d, "hits_under_miss"), 2);
    // The corrected model on the same requests is slower on a miss (the 4 KiB channel transfer,
    // the link) and faster on a hit-under-miss write (acknowledged on arrival).
    let mut d = device("");
    assert_eq!(d.access(&rd(0, 0)), 4126);
}
