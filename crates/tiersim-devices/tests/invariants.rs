//! Properties over random request streams: completions never beat the idle latency, no channel
//! moves bytes faster than its configured rate, each channel serves in arrival order, and
//! out-of-order or extreme inputs never panic.

use proptest::prelude::*;
use tiersim_core::{Op, Params};
use tiersim_devices::{build, dram, Device, DeviceRequest};

/// (time step ns, page, offset seed, log2 size, is write)
type Step = (u64, u64, u64, u32, bool);

fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec((0u64..40, 0u64..4096, any::<u64>(), 0u32..=12, any::<bool>()), 1..300)
}

/// Offsets aligned to the (power-of-two) size, so a request covers the same bursts and channel
/// pattern as one at address 0, for which `idle_latency` is exact.
fn request(now: u64, &(_, page, off, log2, write): &Step) -> DeviceRequest {
    let size = 1u32 << log2;
    let addr = page * 4096 + ((off % 4096) & !(u64::from(size) - 1));
    DeviceRequest { now, addr, size, op: if write { Op::Write } else { Op::Read }, socket: 0, cpu: 0, remote: false }
}

const CHANNELS: [&str; 3] = [
    "channels = 3\ninterleave = \"256B\"",
    "channels = 4\nhash = true\nchannel_bandwidth = \"25.6GB/s\"\nefficiency = 0.7",
    "channels = 12\ninterleave = \"4KiB\"\nread_latency = \"90ns\"\nwrite_latency = \"30ns\"",
];

const NO_LOAD: &str =
    "load_linear_ns = 0.0\nload_linear_write_ns = 0.0\nload_queue_ns = 0.0\nload_queue_write_ns = 0.0";

proptest! {
    #[test]
    fn dram_bounds_bandwidth_and_order(stream in steps(), cfg in 0usize..3) {
        // The load term raises completions above the channel's release: check the channels alone.
        let table: toml::Table = toml::from_str(&format!("{}\n{NO_LOAD}", CHANNELS[cfg])).unwrap();
        let p = Params::resolve(dram::SPECS, Some(&table)).unwrap();
        let mut d = dram::Dram::from_params(&p).unwrap();
        let rate = p.bandwidth("channel_bandwidth") * p.float("efficiency");
        let latency = |op: Op| p.duration(if op.is_write() { "write_latency" } else { "read_latency" });
        let mut now = 0;
        let mut last_release = vec![0u64; d.group().num_channels()];
        for step in &stream {
            now += step.0;
            let r = request(now, step);
            let done = d.access(&r);
            prop_assert!(done >= now + d.idle_latency(r.op, r.size), "{r:?} done {done}");
            // Requests inside one interleave block use one channel; FCFS means the end of their
            // transfer (completion minus the op's latency) never moves backwards on that channel.
            let interleave = p.bytes("interleave");
            if r.addr / interleave == (r.addr + u64::from(r.size) - 1) / interleave {
                let ch = d.group().channel_of(r.addr);
                let release = done - latency(r.op);
                prop_assert!(release >= last_release[ch], "channel {ch} served out of order");
                last_release[ch] = release;
            }
        }
        for (ch, (bytes, busy_ps)) in d.group().channel_usage().enumerate() {
            // bytes / busy <= rate, compared without dividing.
            prop_assert!(bytes as f64 * 1e12 <= busy_ps as f64 * rate * (1.0 + 1e-12),
                "channel {ch}: {bytes} B in {busy_ps} ps exceeds {rate} B/s");
        }
    }

    #[test]
    fn every_device_respects_idle_latency(stream in steps(), kind in 0usize..3) {
        let kind = ["dram", "cxl", "ssd"][kind];
        let (mut d, _) = build(kind, None).unwrap();
        let mut now = 0;
        for step in &stream {
            now += step.0;
            let r = request(now, step);
            let done = d.access(&r);
            prop_assert!(done >= now + d.idle_latency(r.op, r.size), "{kind} {r:?} done {done}");
        }
    }

    #[test]
    fn backwards_and_extreme_requests_do_not_panic(
        reqs in prop::collection::vec((any::<u64>(), any::<u64>(), any::<u32>(), any::<bool>()), 1..100),
        kind in 0usize..3,
    ) {
        let kind = ["dram", "cxl", "ssd"][kind];
        let (mut d, _) = build(kind, None).unwrap();
        for &(now, addr, size, write) in &reqs {
            // Keep sizes realistic (at most 2 MiB) so the test runs fast; addresses and times are
            // unrestricted, including u64::MAX.
            let size = size % (2 << 20);
            let r = DeviceRequest { now, addr, size, op: if write { Op::Write } else { Op::Read }, socket: 0, cpu: 0, remote: false };
            prop_assert!(d.access(&r) >= now);
        }
        let _ = d.stats();
    }
}

const FLASH_CONFIGS: [&str; 4] = [
    // Small cache, small MSHR, best-offset: stalls, merges and evictions are frequent.
    "cache_size = \"64KiB\"\ncache_ways = 4\nmshr_rows = 4\nmshr_entries = 3\nflash_blocks_per_plane = 8\n\
     flash_pages_per_block = 8\nflash_channels = 2\nflash_ways = 2\nwrite_buffer = \"64KiB\"",
    // No MSHR, fully associative FIFO, next-N-line, fill acknowledgements.
    "cache_size = \"32KiB\"\ncache_ways = 0\nreplacement = \"fifo\"\nmshr_rows = 0\nprefetcher = \"next_n_line\"\n\
     write_ack = \"fill\"\nflash_blocks_per_plane = 8\nflash_pages_per_block = 8",
    // No cache: every access goes to flash; GC on a tiny device.
    "cache_size = 0\nflash_channels = 1\nflash_ways = 2\nflash_planes = 1\nflash_blocks_per_plane = 6\n\
     flash_pages_per_block = 4\nprefetcher = \"leap\"",
    // Write-validate, no-allocate off, random replacement with hashing, feedback-directed.
    "cache_size = \"128KiB\"\ncache_ways = 8\nreplacement = \"random\"\ncache_index_hash = true\n\
     write_validate = true\nprefetcher = \"feedback_directed\"\nfdp_interval = 16\nflash_blocks_per_plane = 8\n\
     flash_pages_per_block = 8\nhint_mode = \"pin\"",
];

proptest! {
    #[test]
    fn cxl_flash_bounds_and_accounting(stream in steps(), cfg in 0usize..4, hint_every in 2usize..20) {
        let table: toml::Table = toml::from_str(FLASH_CONFIGS[cfg]).unwrap();
        let (mut d, _) = build("cxl_flash", Some(&table)).unwrap();
        let mut now = 0u64;
        for (i, step) in stream.iter().enumerate() {
            now += step.0 * 50;
            let r = request(now, step);
            if i % hint_every == 0 {
                d.hint(now, r.addr ^ 0x5000, 4096);
            }
            let done = d.access(&r);
            // Every answer crosses the link (170 ns round trip by default); a hit under miss can
            // beat an idle hit, since its data may reach the fill buffer just after it arrives.
            prop_assert!(done >= now + 170, "{done} < {now} + link");
        }
        let s = d.stats();
        let requests = s["requests"].as_u64().unwrap();
        prop_assert_eq!(requests, stream.len() as u64);
        prop_assert_eq!(s["hits"].as_u64().unwrap() + s["hits_under_miss"].as_u64().unwrap() + s["misses"].as_u64().unwrap(), requests);
        let f = &s["flash"];
        prop_assert_eq!(
            f["reads"].as_u64().unwrap(),
            f["reads_demand"].as_u64().unwrap() + f["reads_prefetch"].as_u64().unwrap() + f["reads_rmw"].as_u64().unwrap()
        );
        let p = &s["prefetch"];
        prop_assert!(p["useful"].as_u64().unwrap() <= p["issued"].as_u64().unwrap());
        prop_assert!(p["late"].as_u64().unwrap() <= p["useful"].as_u64().unwrap());
        prop_assert_eq!(s["ftl"]["dropped_units"].as_u64().unwrap(), 0);
        prop_assert!(s["latency_ns"]["under_1us"].as_u64().unwrap() <= requests);
    }

    #[test]
    fn cxl_flash_extreme_inputs_do_not_panic(addrs in prop::collection::vec((any::<u64>(), any::<u64>(), 0u32..=70000u32, any::<bool>()), 1..100)) {
        let (mut d, _) = build("cxl_flash", Some(&toml::from_str(FLASH_CONFIGS[0]).unwrap())).unwrap();
        for (now, addr, size, w) in addrs {
            let op = if w { Op::Write } else { Op::Read };
            let done = d.access(&DeviceRequest { now: now >> 20, addr, size: size.min(65535), op, socket: 0, cpu: 0, remote: false });
            prop_assert!(done >= now >> 20);
            d.hint(now >> 20, addr, u64::from(size));
        }
        let _ = d.stats();
    }
}

#[test]
fn cxl_flash_is_deterministic() {
    let run = || {
        let (mut d, _) = build("cxl_flash", Some(&toml::from_str(FLASH_CONFIGS[3]).unwrap())).unwrap();
        let mut x = 0x1234_5678u64;
        let mut out = Vec::new();
        for i in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let op = if x.is_multiple_of(3) { Op::Write } else { Op::Read };
            out.push(d.access(&DeviceRequest {
                now: i * 30,
                addr: (x % (8 << 20)) & !63,
                size: 64,
                op,
                socket: 0,
                cpu: 0,
                remote: false,
            }));
        }
        (out, d.stats().to_string())
    };
    assert_eq!(run(), run());
}
