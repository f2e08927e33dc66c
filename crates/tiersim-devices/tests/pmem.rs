//! The pmem model by hand: media bytes of given write patterns through the XPBuffer (merges,
//! full-line writes, read-modify-write), exact completion times on idle and saturated media,
//! interleave mapping, contention, remote and outlier effects, and parameter errors.
//! With the defaults a 256 B media line takes 1e15/6.6e9 -> 151516 fs/B x 256 = 38789 ps to read
//! and 1e15/2.3e9 -> 434783 fs/B x 256 = 111305 ps to write.

use tiersim_core::{Op, Params};
use tiersim_devices::{build, pmem, presets, Device, DeviceRequest, InterleaveSet};

const READ: u64 = 38_789;
const WRITE: u64 = 111_305;

fn table(s: &str) -> toml::Table {
    toml::from_str(s).unwrap()
}

fn dev(params: &str) -> Box<dyn Device> {
    build("pmem", Some(&table(params))).unwrap().0
}

fn rq(now: u64, addr: u64, size: u32, op: Op) -> DeviceRequest {
    DeviceRequest { now, addr, size, op, socket: 0, cpu: 0, remote: false }
}

fn w(d: &mut dyn Device, now: u64, addr: u64, size: u32) -> u64 {
    d.access(&rq(now, addr, size, Op::Write))
}

fn stat(d: &dyn Device, key: &str) -> u64 {
    d.stats()[key].as_u64().unwrap_or_else(|| panic!("{key}: {}", d.stats()))
}

#[test]
fn random_64b_writes_cost_a_read_modify_write_each() {
    let mut d = dev("");
    // 64 single-host-line writes to 64 different XPLines fill the 16 KiB buffer: no media traffic.
    for i in 0..64 {
        w(d.as_mut(), 0, i * 256, 64);
    }
    assert_eq!((stat(&*d, "media_bytes_written"), stat(&*d, "media_bytes_read")), (0, 0));
    // The 65th evicts line 0 (one of four host lines dirty): media read 256 B + media write 256 B.
    w(d.as_mut(), 0, 64 * 256, 64);
    assert_eq!((stat(&*d, "media_bytes_written"), stat(&*d, "media_bytes_read"), stat(&*d, "rmw")), (256, 256, 1));
    // 100 more: one RMW each, so EWR -> 64 / 256.
    for i in 65..165 {
        w(d.as_mut(), 0, i * 256, 64);
    }
    assert_eq!(stat(&*d, "media_bytes_written"), 101 * 256);
    assert_eq!(stat(&*d, "bytes_written"), 165 * 64);
    assert_eq!(d.stats()["ewr"].as_f64().unwrap(), (165.0 * 64.0) / (101.0 * 256.0));
}

#[test]
fn sequential_and_full_line_writes_go_to_media_whole() {
    let mut d = dev("");
    // Sixteen 64 B writes in order complete four lines: each goes to the media once, no read.
    for i in 0..16 {
        w(d.as_mut(), 0, i * 64, 64);
    }
    assert_eq!(
        (stat(&*d, "media_bytes_written"), stat(&*d, "media_bytes_read"), stat(&*d, "buffer_write_hits")),
        (1024, 0, 12)
    );
    assert_eq!(d.stats()["ewr"], 1.0);
    // A 256 B write to a new line is one media line; a 512 B write spanning lines 5-6, two.
    w(d.as_mut(), 0, 4 * 256, 256);
    w(d.as_mut(), 0, 5 * 256, 512);
    assert_eq!(stat(&*d, "media_bytes_written"), 1024 + 768);
    // Rewriting one host line many times merges in the buffer: EWR above 1.
    let mut e = dev("");
    for _ in 0..7 {
        w(e.as_mut(), 0, 0, 64);
    }
    w(e.as_mut(), 0, 64, 192);
    assert_eq!((stat(&*e, "bytes_written"), stat(&*e, "media_bytes_written")), (7 * 64 + 192, 256));
    assert_eq!(e.stats()["ewr"].as_f64().unwrap(), 640.0 / 256.0);
}

/// Seed 000's XPBuffer probe: write the first 128 B of N consecutive XPLines, then the second
/// 128 B of each; returns (media lines written, RMWs) after one round.
fn half_line_round(lines: u64) -> (u64, u64) {
    let mut d = dev("");
    for half in [0, 128] {
        for i in 0..lines {
            w(d.as_mut(), 0, i * 256 + half, 128);
        }
    }
    (stat(&*d, "media_bytes_written") / 256, stat(&*d, "rmw"))
}

#[test]
fn xpbuffer_probe_knee_at_64_lines() {
    // 64 lines (16 KiB): every second half hits, each line is written once, whole.
    assert_eq!(half_line_round(64), (64, 0));
    // 65 lines: the first pass evicts line 0 half-written; in the second pass every second half
    // misses and displaces a half-written line: 1 + 65 read-modify-writes.
    assert_eq!(half_line_round(65), (66, 66));
    // FIFO gives the same knee.
    let mut d = dev("xpbuffer_policy = \"fifo\"");
    for half in [0, 128] {
        for i in 0..64 {
            w(d.as_mut(), 0, i * 256 + half, 128);
        }
    }
    assert_eq!((stat(&*d, "media_bytes_written"), stat(&*d, "rmw")), (64 * 256, 0));
}

#[test]
fn lru_keeps_a_recently_touched_line_fifo_does_not() {
    for (policy, rmw) in [("lru", 0), ("fifo", 1)] {
        let mut d = dev(&format!("xpbuffer_policy = \"{policy}\""));
        for i in 0..64 {
            w(d.as_mut(), 0, i * 256, 64);
        }
        // Touch line 0 again, then bring in line 64: LRU evicts line 1, FIFO line 0.
        w(d.as_mut(), 0, 64, 64);
        w(d.as_mut(), 0, 64 * 256, 64);
        assert_eq!(stat(&*d, "rmw"), 1, "{policy}");
        // Line 0's remaining half: with LRU it completes in the buffer and goes whole (no RMW).
        w(d.as_mut(), 0, 128, 128);
        assert_eq!(stat(&*d, "rmw"), 1 + rmw, "{policy}");
    }
}

#[test]
fn idle_latencies() {
    let mut d = dev("");
    // Random read: 38789 ps media + 266 ns = 304789 ps -> 305 ns.
    assert_eq!(d.access(&rq(0, 1 << 20, 64, Op::Read)), 305);
    // The rest of that XPLine is in the buffer: 124 ns.
    assert_eq!(d.access(&rq(1000, (1 << 20) + 64, 64, Op::Read)), 1124);
    assert_eq!(d.idle_latency(Op::Read, 64), 305);
    // ntstore completes in the ADR domain: 90 ns.
    assert_eq!(w(d.as_mut(), 2000, 0, 64), 2090);
    assert_eq!(d.idle_latency(Op::Write, 64), 90);
    // 512 B of whole lines: the second line's media write starts 111305 ps after the first.
    assert_eq!(d.idle_latency(Op::Write, 512), 202);
    let mut c = dev("store_kind = \"clwb\"");
    // clwb: 62 ns; the line fill is media work the store does not wait for...
    assert_eq!(w(c.as_mut(), 0, 0, 64), 62);
    assert_eq!((stat(&*c, "rfo_reads"), stat(&*c, "media_bytes_read")), (1, 256));
    // ...unless a full line must then go to the media: behind both line fills, 2 x 38789 + 62000 ps.
    assert_eq!(w(c.as_mut(), 0, 256, 256), (2 * READ + 62_000).div_ceil(1000));
    assert_eq!(c.idle_latency(Op::Write, 256), 101);
}

#[test]
fn a_read_hitting_a_line_being_filled_waits_for_the_fill() {
    let mut d = dev("");
    // The miss ends at 38789 + 266000 ps; a hit on the same XPLine 10 ns later returns with it
    // (305 ns), not at 10 + 124 ns.
    assert_eq!(d.access(&rq(0, 0, 64, Op::Read)), 305);
    assert_eq!(d.access(&rq(10, 64, 64, Op::Read)), 305);
    // Behind five queued line writes the fill ends at 5 x 111305 + 38789 = 595314 ps, so the
    // miss and the hit both complete at 595314 + 266000 ps.
    let mut m = dev("");
    for k in 0..5 {
        w(m.as_mut(), 0, k * 256, 256);
    }
    assert_eq!(m.access(&rq(0, 1 << 20, 64, Op::Read)), 862);
    assert_eq!(m.access(&rq(0, (1 << 20) + 128, 64, Op::Read)), 862);
    // Once filled, a hit takes the buffer latency alone.
    assert_eq!(m.access(&rq(2000, (1 << 20) + 192, 64, Op::Read)), 2124);
    assert_eq!(stat(&*m, "buffer_read_hits"), 2);
    // A clwb line fill counts too: a read right behind the store waits for the line's RFO read.
    let mut c = dev("store_kind = \"clwb\"");
    assert_eq!(w(c.as_mut(), 0, 0, 64), 62);
    assert_eq!(c.access(&rq(0, 64, 64, Op::Read)), (READ + 266_000).div_ceil(1000));
}

#[test]
fn saturated_media_limits_bandwidth() {
    let mut d = dev("");
    // Five whole-line writes at t=0: the k-th waits for k-1 media writes to drain.
    let done: Vec<u64> = (0..5).map(|k| w(d.as_mut(), 0, k * 256, 256)).collect();
    assert_eq!(done, vec![90, 202, 313, 424, 536]);
    // Reads queue behind the writes on the same media: 5 x 111305 + 38789 + 266000 = 861314 ps.
    assert_eq!(d.access(&rq(0, 1 << 20, 64, Op::Read)), 862);
    assert_eq!(d.stats()["media_busy_ns"], (5 * WRITE + READ) as f64 / 1000.0);
    // 1000 random 256 B reads at t=0 end at 1000 x 38789 ps + 266 ns: 6.6 GB/s.
    let mut r = dev("");
    let last = (0..1000).map(|k| r.access(&rq(0, k * 4096, 256, Op::Read))).max().unwrap();
    assert_eq!(last, (1000 * READ + 266_000).div_ceil(1000));
    // An RMW eviction delays the write that caused it until the media can start on the victim:
    // at once on idle media, after the queued work on busy media.
    let mut m = dev("");
    for i in 0..64 {
        w(m.as_mut(), 0, i * 256, 64);
    }
    assert_eq!(w(m.as_mut(), 0, 64 * 256, 64), 90);
    assert_eq!(w(m.as_mut(), 0, 65 * 256, 64), (READ + WRITE + 90_000).div_ceil(1000));
}

#[test]
fn writer_contention_and_remote_penalties() {
    let mut d = dev("write_contention_threads = 1\nwrite_contention_penalty = 1.0");
    assert_eq!(w(d.as_mut(), 0, 0, 256), 90);
    // A second writer within the window: writes take twice the media time.
    let r = DeviceRequest { cpu: 1, ..rq(0, 256, 256, Op::Write) };
    assert_eq!(d.access(&r), (WRITE + 90_000).div_ceil(1000));
    let r = DeviceRequest { cpu: 1, ..rq(0, 512, 256, Op::Write) };
    assert_eq!(d.access(&r), (WRITE + 2 * WRITE + 90_000).div_ceil(1000));
    assert_eq!(stat(&*d, "contended_writes"), 2);
    // Remote read: media time / 0.6 (38789 -> 64649 ps) + 266 ns + 35 ns = 366 ns, 1.20x local.
    let mut e = dev("");
    let r = DeviceRequest { remote: true, ..rq(0, 0, 64, Op::Read) };
    assert_eq!(e.access(&r), (64_649u64 + 266_000 + 35_000).div_ceil(1000));
    assert_eq!(e.access(&r), 366);
    // A remote XPBuffer hit: 124 + 35 + 123 ns (seed 000's 1.79x on sequential reads).
    let r = DeviceRequest { remote: true, ..rq(2000, 64, 64, Op::Read) };
    assert_eq!(e.access(&r), 2282);
    // Remote ntstore: 90 + 138 ns (2.53x local).
    let r = DeviceRequest { remote: true, ..rq(1000, 4096, 64, Op::Write) };
    assert_eq!(e.access(&r), 1228);
}

#[test]
fn a_writer_waiting_in_a_backlog_still_counts() {
    let mut d = dev("write_contention_threads = 1\nwrite_contention_penalty = 1.0\ncontention_window = \"100ns\"");
    // CPU 0 queues twelve whole lines at t=0; the last completes at 11 x 111305 + 90000 ps.
    let done: Vec<u64> = (0..12).map(|k| w(d.as_mut(), 0, k * 256, 256)).collect();
    assert_eq!(done[11], (11 * WRITE + 90_000).div_ceil(1000));
    // At t=1000 ns CPU 0 issued 1 us ago (beyond the 100 ns window) but its writes are still
    // outstanding: CPU 1 is the second writer, so its lines take twice the media time. The
    // first waits for the backlog (12 x 111305 ps), the second behind it and a doubled write.
    let r = |now, addr| DeviceRequest { cpu: 1, ..rq(now, addr, 256, Op::Write) };
    assert_eq!(d.access(&r(1000, 4096)), (12 * WRITE + 90_000).div_ceil(1000));
    assert_eq!(d.access(&r(1000, 4352)), (14 * WRITE + 90_000).div_ceil(1000));
    assert_eq!(stat(&*d, "contended_writes"), 2);
    // At t=3000 ns CPU 0's last write ended more than 100 ns ago: CPU 1 writes alone again.
    assert_eq!(d.access(&r(3000, 4608)), 3090);
    assert_eq!(d.access(&r(3000, 4864)), (3_000_000 + WRITE + 90_000).div_ceil(1000));
    assert_eq!(stat(&*d, "contended_writes"), 2);
}

#[test]
fn outliers_are_seeded_and_off_by_default() {
    let count = |params: &str| {
        let mut d = dev(params);
        for i in 0..10_000u64 {
            w(d.as_mut(), i * 1000, (i % 4) * 64, 64);
        }
        stat(&*d, "outliers")
    };
    assert_eq!(count(""), 0);
    let a = count("outlier_probability = 0.01\nseed = 7");
    assert_eq!(a, count("outlier_probability = 0.01\nseed = 7"));
    assert!((50..=150).contains(&a), "{a}");
    let mut d = dev("outlier_probability = 1.0");
    assert_eq!(w(d.as_mut(), 0, 0, 64), 50_090);
}

#[test]
fn interleave_maps_4k_chunks_round_robin() {
    let p = presets::get("optane_100").unwrap().resolve().unwrap();
    let mut set = InterleaveSet::build(pmem::build, &p, 6, 4096).unwrap();
    // Chunk 7 is DIMM 1, row 1: a read there misses DIMM 1's buffer, the one at chunk 1 then hits
    // only if it is the same local line (local address 4096 + 64 vs 64: different lines).
    set.access(&rq(0, 7 * 4096 + 64, 64, Op::Read));
    set.access(&rq(0, 4096 + 64, 64, Op::Read));
    set.access(&rq(0, 7 * 4096 + 128, 64, Op::Read));
    let s = set.stats();
    let reads: Vec<u64> = (0..6).map(|i| s[i]["reads"].as_u64().unwrap()).collect();
    assert_eq!(reads, vec![0, 3, 0, 0, 0, 0]);
    assert_eq!(s[1]["buffer_read_hits"], 1);
    assert_eq!(set.peak_bandwidth(), 6.0 * 6.6e9);
}

#[test]
fn bad_parameters_are_rejected_naming_the_key() {
    let err = |params: &str| build("pmem", Some(&table(params))).err().expect(params).to_string();
    assert_eq!(err("xpline = \"100B\""), "config key `xpline`: 100B is not a power of two");
    assert_eq!(err("host_line = \"512B\""), "config key `host_line`: 512B is larger than the xpline (256B)");
    assert_eq!(
        err("xpbuffer_size = \"1000B\""),
        "config key `xpbuffer_size`: 1000B is not a whole number of 256B xplines"
    );
    assert!(err("store_kind = \"movnt\"").contains("not one of ntstore, clwb"));
    assert!(err("outlier_probability = 2.0").contains("above the maximum 1"));
    assert!(err("media_write_bandwidth = \"0GB/s\"").contains("media_write_bandwidth"));
    assert!(err("xpbuffer = 3").contains("valid parameters: xpline, host_line"));
    // Defaults resolve.
    Params::defaults(pmem::SPECS).unwrap();
}

#[test]
fn a_read_behind_another_cpus_write_stream_waits_for_the_posted_writes_only() {
    let read = |d: &mut dyn Device, now: u64, addr: u64, cpu: u32| {
        d.access(&DeviceRequest { now, addr, size: 4096, op: Op::Read, socket: 0, cpu, remote: false })
    };
    // CPU 0 writes 128 KiB (a pmem block driver's bio, or a DAX copy): 512 lines, the media
    // busy until 512 x 111.305 = 56,988 ns.
    let mut d = dev("");
    w(d.as_mut(), 0, 0, 128 << 10);
    // CPU 1 reads 4 KiB (16 lines, not buffered) at 1 us: behind the XPBuffer's worth of posted
    // writes (64 x 111.305 = 7,124 ns), then its 16 media reads (16 x 38.789 = 621 ns) and the
    // read latency 266 ns: 1,000 + 7,124 + 621 + 266 = 9,011 ns.
    assert_eq!(read(d.as_mut(), 1000, 1 << 20, 1), 9011);
    // CPU 2's read at the same time goes after CPU 1's: 9,011 + 621 = 9,631 (rounding 9,632).
    assert!(read(d.as_mut(), 1000, 2 << 20, 2).abs_diff(9632) <= 1);
    assert_eq!(stat(&*d, "reads_past_write_streams"), 2);
    // The writer's own read waits for its stream, which the two reads made 2 x 621 ns longer:
    // 56,988 + 1,241 + 621 + 266 = 59,116 ns.
    assert!(read(d.as_mut(), 1000, 3 << 20, 0).abs_diff(59_116) <= 1);
    // A write of the buffer's size or less is no stream: a read behind it waits for it all.
    let mut d = dev("");
    w(d.as_mut(), 0, 0, 16 << 10);
    // 64 lines: the media busy until 7,124 ns; the read: 7,124 + 621 + 266 = 8,011 ns.
    assert!(read(d.as_mut(), 1000, 1 << 20, 1).abs_diff(8011) <= 1);
    assert!(d.stats().get("reads_past_write_streams").is_none());
}
