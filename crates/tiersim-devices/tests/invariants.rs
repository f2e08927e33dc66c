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

proptest! {
    #[test]
    fn dram_bounds_bandwidth_and_order(stream in steps(), cfg in 0usize..3) {
        let table: toml::Table = toml::from_str(CHANNELS[cfg]).unwrap();
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
