//! Exact completion times of single requests and simple queues, registry and preset checks,
//! and parameter errors. Times in comments are in ps unless marked ns; completions are rounded
//! up to whole ns.

use tiersim_core::{Op, Params};
use tiersim_devices::{build, cxl, dram, find, presets, ssd, Device, DeviceRequest, REGISTRY};

fn table(s: &str) -> toml::Table {
    toml::from_str(s).unwrap()
}

fn req(now: u64, addr: u64, size: u32, op: Op) -> DeviceRequest {
    DeviceRequest { now, addr, size, op, socket: 0, cpu: 0, remote: false }
}

fn dev(kind: &str, params: &str) -> Box<dyn Device> {
    build(kind, Some(&table(params))).unwrap().0
}

/// 4 channels at 32 GB/s, efficiency 1: 1e15 / 32e9 = 31250 fs per byte, so a 64 B burst takes
/// 2000 ps = 2 ns and a 256 B interleave block 8 ns. Writes cost what reads do and there is no
/// load term, so these cases check the FCFS channels alone.
const DRAM: &str = r#"
channels = 4
channel_bandwidth = "32GB/s"
efficiency = 1.0
read_latency = "100ns"
write_latency = "50ns"
interleave = "256B"
burst = "64B"
write_cost = 1.0
load_linear_ns = 0.0
load_linear_write_ns = 0.0
load_queue_ns = 0.0
load_queue_write_ns = 0.0
"#;

#[test]
fn dram_write_cost_and_load_term_exact() {
    // A write occupies its channel write_cost = 2 times a read's 2 ns: 1000 + 4 + 50.
    let mut d = dev("dram", &DRAM.replace("write_cost = 1.0", "write_cost = 2.0"));
    assert_eq!(d.access(&req(1000, 0, 64, Op::Write)), 1054);
    assert_eq!(d.idle_latency(Op::Write, 64), 54);
    // 100 ns per unit utilisation, applied at once (gain 1) after a 1 us window. 1000 reads at
    // t = 0 round-robin over 4 channels keep each busy 250 x 2 ns = 500 ns of the first 1000 ns:
    // u = 0.5, so the next read's floor is 1000 + 50 + 102 although its channel is idle.
    let mut d = dev(
        "dram",
        &DRAM.replace("load_linear_ns = 0.0", "load_linear_ns = 100.0\nload_gain = 1.0\nload_window = \"1000ns\""),
    );
    for k in 0..1000u64 {
        d.access(&req(0, k * 256, 64, Op::Read));
    }
    assert_eq!(d.access(&req(1000, 0, 64, Op::Read)), 1152);
    assert_eq!(d.stats()["load"]["windows"], 1);
    assert_eq!(d.stats()["load"]["utilisation_mean"], 0.5);
    // Half the gap per window with the default gain: a quiet window (u = 0, after less than
    // four windows) halves the extra 50 ns to 25.
    let mut d = dev("dram", &DRAM.replace("load_linear_ns = 0.0", "load_linear_ns = 100.0\nload_window = \"1000ns\""));
    for k in 0..1000u64 {
        d.access(&req(0, k * 256, 64, Op::Read));
    }
    assert_eq!(d.access(&req(1000, 0, 64, Op::Read)), 1000 + 25 + 102);
    assert_eq!(d.access(&req(2000, 0, 64, Op::Read)), 2000 + 13 + 102);
}

#[test]
fn dram_single_read_and_write_on_idle_device() {
    let mut d = dev("dram", DRAM);
    // Read: 1000 ns + 2 ns burst + 100 ns latency.
    assert_eq!(d.access(&req(1000, 0, 64, Op::Read)), 1102);
    // Write on another channel (addr 256 -> channel 1): 1000 + 2 + 50.
    assert_eq!(d.access(&req(1000, 256, 64, Op::Write)), 1052);
    assert_eq!(d.idle_latency(Op::Read, 64), 102);
    assert_eq!(d.idle_latency(Op::Write, 64), 52);
    // 4 KiB = 16 blocks of 256 B round-robin over 4 channels: 4 blocks x 8 ns per channel + 100.
    assert_eq!(d.idle_latency(Op::Read, 4096), 132);
    // 4 channels x 32 GB/s.
    assert_eq!(d.peak_bandwidth(), 128e9);
}

#[test]
fn dram_defaults_are_ddr5_4800() {
    let (mut d, p) = build("dram", None).unwrap();
    assert_eq!(p.bandwidth("channel_bandwidth"), 38.4e9);
    // 38.4 GB/s x 0.85 = 32.64 GB/s: 30638 fs/B (rounded up) x 64 B = 1,960,832 fs -> 1961 ps;
    // 110,000 + 1961 = 111,961 ps -> 112 ns.
    assert_eq!(d.access(&req(0, 0, 64, Op::Read)), 112);
    assert_eq!(d.idle_latency(Op::Read, 64), 112);
}

#[test]
fn dram_saturated_channel_queues_fcfs() {
    let mut d = dev("dram", DRAM);
    // Ten reads at t=0 to channel 0 (addresses 0, 1024, 2048, ...): the k-th finishes its burst
    // at 2k ns, then 100 ns latency.
    for k in 1..=10u64 {
        assert_eq!(d.access(&req(0, (k - 1) * 1024, 64, Op::Read)), 100 + 2 * k);
    }
    let s = d.stats();
    assert_eq!(s["reads"], 10);
    assert_eq!(s["bytes_read"], 640);
    assert_eq!(s["busy_ns"], 20.0);
    // Waits 0, 2, ..., 18 ns.
    assert_eq!(s["queue_delay_ns_total"], 90.0);
    assert_eq!(s["queue_delay_ns_max"], 18.0);
    // A request issued earlier than the queue's end (background work) just queues behind it.
    assert_eq!(d.access(&req(5, 0, 64, Op::Write)), 20 + 2 + 50);
}

#[test]
fn dram_different_channels_do_not_queue() {
    let mut d = dev("dram", DRAM);
    assert_eq!(d.access(&req(0, 0, 64, Op::Read)), 102);
    assert_eq!(d.access(&req(0, 256, 64, Op::Read)), 102);
    assert_eq!(d.access(&req(0, 512 + 64, 64, Op::Read)), 102);
    assert_eq!(d.stats()["queue_delay_ns_total"], 0.0);
}

#[test]
fn dram_interleave_mapping() {
    let p = Params::resolve(dram::SPECS, Some(&table(DRAM))).unwrap();
    let d = dram::Dram::from_params(&p).unwrap();
    let g = d.group();
    let map: Vec<usize> = [0, 255, 256, 511, 512, 768, 1024, 1024 + 256].iter().map(|&a| g.channel_of(a)).collect();
    assert_eq!(map, [0, 0, 1, 1, 2, 3, 0, 1]);
    // Non-power-of-two channel count: block % 3.
    let p = Params::resolve(dram::SPECS, Some(&table("channels = 3\ninterleave = \"4KiB\""))).unwrap();
    let d = dram::Dram::from_params(&p).unwrap();
    let map: Vec<usize> = [0, 4095, 4096, 8192, 12288, 16384].iter().map(|&a| d.group().channel_of(a)).collect();
    assert_eq!(map, [0, 0, 1, 2, 0, 1]);
    // The multiply-based modulo agrees with `%` for every channel count, on both sides of 2^32 blocks.
    for n in [3u64, 5, 6, 7, 12, 1000, 1023] {
        let p = Params::resolve(dram::SPECS, Some(&table(&format!("channels = {n}")))).unwrap();
        let d = dram::Dram::from_params(&p).unwrap();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for i in 0..20_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let addr = match i % 4 {
                0 => x,
                1 => x >> 20,
                2 => (u64::from(u32::MAX) << 8) + (i << 8) - (10_000 << 8),
                _ => u64::MAX - i,
            };
            assert_eq!(d.group().channel_of(addr) as u64, (addr >> 8) % n, "n={n} addr={addr:#x}");
        }
    }
    // Hashing folds block bits 12.. into the index: block 4096 (addr 1 MiB) -> 4096 ^ 1 -> channel 1.
    let p = Params::resolve(dram::SPECS, Some(&table("channels = 4\nhash = true"))).unwrap();
    let d = dram::Dram::from_params(&p).unwrap();
    assert_eq!(d.group().channel_of(0), 0);
    assert_eq!(d.group().channel_of(256), 1);
    assert_eq!(d.group().channel_of(4096 * 256), 1);
    assert_eq!(d.group().channel_of(2 * 4096 * 256), 2);
}

#[test]
fn dram_splits_and_rounds_to_bursts() {
    let mut d = dev("dram", DRAM);
    // 1 KiB at 0: one 256 B block per channel in parallel, 8 ns each.
    assert_eq!(d.access(&req(0, 0, 1024, Op::Read)), 108);
    let mut d = dev("dram", DRAM);
    // 512 B at 128: 128 B on channel 0 (4 ns), 256 B on 1 (8 ns), 128 B on 2 (4 ns).
    assert_eq!(d.access(&req(0, 128, 512, Op::Read)), 108);
    let mut d = dev("dram", DRAM);
    // 8 B at offset 60 straddles bursts 0 and 1: 128 B on the bus = 4 ns.
    assert_eq!(d.access(&req(0, 60, 8, Op::Read)), 104);
    // 8 B inside one burst still moves a whole burst (on a free channel): 2 ns.
    assert_eq!(d.access(&req(0, 256, 8, Op::Read)), 102);
    assert_eq!(d.stats()["bytes_read"], 192);
}

/// Link 100 ns; d2h 32 GB/s (64 B = 2000 ps, 16 B = 500 ps); h2d 16 GB/s (62500 fs/B: 16 B =
/// 1000 ps, 64 B = 4000 ps); media: 4 channels at 32 GB/s (64 B = 2000 ps), 50 ns read, 40 ns write.
const CXL: &str = r#"
link_latency = "100ns"
link_read_bandwidth = "32GB/s"
link_write_bandwidth = "16GB/s"
link_header = "16B"
link_line = "64B"
media_channels = 4
media_channel_bandwidth = "32GB/s"
media_efficiency = 1.0
media_read_latency = "50ns"
media_write_latency = "40ns"
"#;

#[test]
fn cxl_read_is_link_plus_backend() {
    let mut d = dev("cxl", CXL);
    // Request header h2d 0..1000; media 1000..3000 + 50,000 = 53,000; data d2h 53,000..55,000;
    // + 100,000 link = 155,000 ps. That is link 100 + backend idle 52 + link transfers 1 + 2 ns.
    assert_eq!(d.access(&req(0, 0, 64, Op::Read)), 155);
    assert_eq!(d.idle_latency(Op::Read, 64), 155);
    let media = dev("dram", "channel_bandwidth = \"32GB/s\"\nefficiency = 1.0\nread_latency = \"50ns\"");
    assert_eq!(d.idle_latency(Op::Read, 64), 100 + media.idle_latency(Op::Read, 64) + 1 + 2);
}

#[test]
fn cxl_write_moves_data_host_to_device() {
    let mut d = dev("cxl", CXL);
    // Data h2d 0..4000; media 4000..6000 + 40,000 = 46,000; completion header d2h 46,000..46,500;
    // + 100,000 = 146,500 ps -> 147 ns.
    assert_eq!(d.access(&req(0, 0, 64, Op::Write)), 147);
    assert_eq!(d.idle_latency(Op::Write, 64), 147);
    let s = d.stats();
    assert_eq!(s["link"]["h2d_bytes"], 64);
    assert_eq!(s["link"]["d2h_bytes"], 16);
}

#[test]
fn cxl_reads_saturate_device_to_host_only() {
    let mut d = dev("cxl", CXL);
    // 20 reads at t=0 over the 4 media channels. Headers leave h2d every 1000 ps (k-th arrives
    // at 1000k); each media channel sees one request per 4000 ps and serves it in 2000, so never
    // queues: data ready at 52,000 + 1000k. d2h needs 2000 per line, so it is the bottleneck: the
    // k-th line leaves at 53,000 + 2000k, completion 153 + 2k ns.
    for k in 1..=20u64 {
        assert_eq!(d.access(&req(0, (k - 1) * 256, 64, Op::Read)), 153 + 2 * k, "read {k}");
    }
    let s = d.stats();
    assert_eq!(s["media"]["queue_delay_ns_total"], 0.0);
    assert_eq!(s["link"]["d2h_busy_ns"], 40.0);
    assert_eq!(s["link"]["h2d_busy_ns"], 20.0);
    // A write now: its data goes h2d, which is free after 20 ns; it is not behind the read data.
    // h2d 20,000..24,000; media ch0 (free at 19,000) 24,000..26,000 + 40,000; header d2h waits for
    // the reads' data (busy until 93,000) 93,000..93,500; + 100,000 -> 193.5 -> 194 ns.
    assert_eq!(d.access(&req(0, 0, 64, Op::Write)), 194);
}

#[test]
fn cxl_cz120_matches_published_totals() {
    let p = presets::get("cxl_cz120").unwrap();
    let (d, _) = build(&p.device, Some(&p.params)).unwrap();
    // h2d header 16 B @27 GB/s: 37038 fs/B -> 593 ps; media 64 B @ 25.6x0.85 GB/s: 45956 fs/B ->
    // 2942 ps + 80 ns; d2h 64 B: 2371 ps; + 170 ns: 255,906 ps -> 256 ns (published ~250-270).
    assert_eq!(d.idle_latency(Op::Read, 64), 256);
    assert_eq!(d.peak_bandwidth(), 27e9);
}

/// Queue depth 2, 80 us read; 4 GB/s read pipe (250,000 fs/B: 4 KiB = 1024 ns); 2 GB/s write
/// pipe (4 KiB = 2048 ns); 20 us write.
const SSD: &str = r#"
queue_depth = 2
read_latency = "80us"
write_latency = "20us"
read_bandwidth = "4GB/s"
write_bandwidth = "2GB/s"
"#;

#[test]
fn ssd_single_read_and_write() {
    let mut d = dev("ssd", SSD);
    // 80,000 + 1024 ns.
    assert_eq!(d.access(&req(0, 0, 4096, Op::Read)), 81_024);
    let mut d = dev("ssd", SSD);
    // 2048 ns transfer in, then 20,000 ns.
    assert_eq!(d.access(&req(0, 0, 4096, Op::Write)), 22_048);
    assert_eq!(d.idle_latency(Op::Write, 4096), 22_048);
}

#[test]
fn ssd_third_concurrent_read_waits_for_a_unit() {
    let mut d = dev("ssd", SSD);
    // Units 0 and 1 busy 0..80,000; the transfers share the pipe: 80,000..81,024, 81,024..82,048.
    assert_eq!(d.access(&req(0, 0, 4096, Op::Read)), 81_024);
    assert_eq!(d.access(&req(0, 4096, 4096, Op::Read)), 82_048);
    // Third: unit 0 again from 80,000 to 160,000, then 1024 ns on the idle pipe.
    assert_eq!(d.access(&req(0, 8192, 4096, Op::Read)), 161_024);
    let s = d.stats();
    assert_eq!(s["unit_wait_ns_max"], 80_000.0);
    assert_eq!(s["bytes_read"], 3 * 4096);
}

#[test]
fn registry_and_presets() {
    let names: Vec<_> = REGISTRY.iter().map(|e| e.info.name).collect();
    assert_eq!(names, ["dram", "cxl", "ssd", "pmem", "cxl_flash", "curve"]);
    let e = find("hbm").err().unwrap().to_string();
    assert_eq!(e, "unknown device `hbm`; valid names: dram, cxl, ssd, pmem, cxl_flash, curve");
    // Every declared default resolves and builds (curve needs its curves_dir: tests/bwlat.rs).
    for entry in REGISTRY.iter().filter(|e| e.info.name != "curve") {
        let (d, _) = build(entry.info.name, None).unwrap();
        assert!(d.idle_latency(Op::Read, 64) > 0);
    }
    let all = presets::all().unwrap();
    let names: Vec<_> = all.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "ddr5_4800",
            "ddr4_3200",
            "ddr4_2666",
            "skylake_ddr4",
            "cxl_cz120",
            "cxl_expander",
            "nvme_ssd",
            "optane_ssd",
            "optane_100",
            "cxl_flash_ull",
            "cxl_flash_slc",
            "cxl_flash_mlc",
            "cxl_flash_tlc"
        ]
    );
    for p in &all {
        assert!(!p.summary.is_empty() && !p.source.is_empty(), "{}", p.name);
        let (mut d, resolved) = build(&p.device, Some(&p.params)).unwrap();
        assert_eq!(resolved, p.resolve().unwrap());
        let t = d.access(&req(0, 0, 4096, Op::Read));
        assert!(t >= d.idle_latency(Op::Read, 4096), "{}", p.name);
    }
    assert_eq!(presets::get("optane_ssd").unwrap().device, "ssd");
    let e = presets::get("ddr3").unwrap_err().to_string();
    assert_eq!(
        e,
        "unknown device preset `ddr3`; valid names: ddr5_4800, ddr4_3200, ddr4_2666, skylake_ddr4, cxl_cz120, cxl_expander, nvme_ssd, optane_ssd, optane_100, \
         cxl_flash_ull, cxl_flash_slc, cxl_flash_mlc, cxl_flash_tlc"
    );
    // Plugin info lists every parameter with its default.
    let j = cxl::INFO.to_json();
    assert!(j["params"].as_array().unwrap().iter().any(|p| p["name"] == "media_channels" && p["default"] == "2"));
    assert_eq!(ssd::INFO.name, "ssd");
}

fn build_err(kind: &str, params: &str) -> String {
    build(kind, Some(&table(params))).err().expect("should be rejected").to_string()
}

#[test]
fn bad_parameters_are_rejected_naming_the_key() {
    let e = build_err("dram", "chanels = 3");
    assert!(e.contains("`chanels`") && e.contains("valid parameters: channels, channel_bandwidth"), "{e}");
    let e = build_err("dram", "channels = 0");
    assert!(e.contains("`channels`") && e.contains("below the minimum"), "{e}");
    let e = build_err("dram", "efficiency = 1.5");
    assert!(e.contains("`efficiency`") && e.contains("above the maximum"), "{e}");
    let e = build_err("dram", "interleave = \"384B\"");
    assert!(e.contains("`interleave`") && e.contains("not a power of two"), "{e}");
    let e = build_err("dram", "interleave = \"32B\"");
    assert!(e.contains("`interleave`") && e.contains("smaller than the burst"), "{e}");
    let e = build_err("dram", "channel_bandwidth = \"fast\"");
    assert!(e.contains("`channel_bandwidth`"), "{e}");
    let e = build_err("cxl", "media_interleave = \"100B\"");
    assert!(e.contains("`media_interleave`") && e.contains("not a power of two"), "{e}");
    let e = build_err("cxl", "media_efficiency = 0");
    assert!(e.contains("`media_efficiency`"), "{e}");
    let e = build_err("cxl", "channels = 2");
    assert!(e.contains("`channels`") && e.contains("media_channels"), "{e}");
    let e = build_err("ssd", "queue_depth = 0");
    assert!(e.contains("`queue_depth`"), "{e}");
}
