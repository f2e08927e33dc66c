//! The response tail on a thread of its own (`CxlFlash::with_tail_thread`) gives the results the
//! device gives with the tail inline: the same summary and latency histogram, byte for byte, over
//! random request streams that exercise what the tail is told (hits, hits under miss, misses,
//! posted writes, requests spanning lines, dirty evictions, reads from the write buffer, which
//! wait for the tail's DRAM, and host hints); and a panic inside comes back out.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tiersim_core::{Op, Params};
use tiersim_devices::cxl_flash::{CxlFlash, SPECS};
use tiersim_devices::{Device, DeviceRequest};

/// A small device that evicts, writes back and stalls within a few thousand requests.
const SMALL: &str = r#"
cache_size = "64KiB"
cache_line = "4KiB"
cache_ways = 4
mshr_rows = 8
mshr_entries = 4
write_buffer = "16KiB"
flash_channels = 2
flash_ways = 2
flash_planes = 1
flash_blocks_per_plane = 16
flash_pages_per_block = 8
flash_page_size = "16KiB"
overprovisioning = 0.25
gc_threshold = 0.1
"#;

fn device(extra: &str) -> CxlFlash {
    let mut t: toml::Table = toml::from_str(SMALL).unwrap();
    t.extend(toml::from_str::<toml::Table>(extra).unwrap());
    CxlFlash::from_params(&Params::resolve(SPECS, Some(&t)).unwrap()).unwrap()
}

enum Step {
    Access(DeviceRequest),
    Hint(u64, u64, u64),
}

/// `n` requests over `lines` 4 KiB lines, `gap_ns` apart on average: 64 B accesses, some
/// longer ones crossing lines, `writes` of them writes, and a hint now and then and at the end.
fn stream(seed: u64, n: usize, lines: u64, gap_ns: u64, writes: f64) -> Vec<Step> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut now = 0;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        now += rng.gen_range(0..=2 * gap_ns);
        let line = rng.gen_range(0..lines);
        if rng.gen_bool(0.02) {
            out.push(Step::Hint(now, (line + 1) * 4096, 4096));
        }
        let (offset, size) = if rng.gen_bool(0.05) { (4000, rng.gen_range(97..9000)) } else { (rng.gen_range(0..64) * 64, 64) };
        let op = if rng.gen_bool(writes) { Op::Write } else { Op::Read };
        out.push(Step::Access(DeviceRequest { now, addr: line * 4096 + offset, size, op, socket: 0, cpu: 0, remote: false }));
    }
    // A hint after the last request: the responses due by then take the link.
    out.push(Step::Hint(now + 1_000_000, 0, 64));
    out
}

fn run(d: &mut CxlFlash, steps: &[Step]) {
    for s in steps {
        match s {
            Step::Access(r) => {
                d.access(r);
            }
            Step::Hint(now, addr, size) => d.hint(*now, *addr, *size),
        }
    }
}

/// (summary, histogram bins) with the tail inline, then on its thread.
fn both(extra: &str, steps: &[Step]) -> [(String, String); 2] {
    let mut inline = device(extra);
    run(&mut inline, steps);
    let mut away = device(extra);
    away.with_tail_thread(|d| run(d, steps));
    [&inline, &away].map(|d| (d.stats().to_string(), format!("{:?}", d.latency().bins())))
}

#[test]
fn the_tail_on_its_thread_gives_the_same_results() {
    let configs = [
        "",
        r#"write_ack = "fill""#,
        r#"write_validate = true"#,
        r#"replacement = "lru"
prefetcher = "feedback_directed""#,
        r#"mshr_rows = 0"#,
        r#"hint_mode = "pin""#,
    ];
    let mut buffer_reads = 0;
    for (i, extra) in configs.iter().enumerate() {
        for (seed, lines, gap, writes) in [(1, 48, 200, 0.5), (2, 400, 50, 0.3), (3, 40, 2000, 0.8)] {
            let steps = stream(seed + 10 * i as u64, 6000, lines, gap, writes);
            let [inline, away] = both(extra, &steps);
            assert_eq!(inline.0, away.0, "summary, config {extra:?}, seed {seed}");
            assert_eq!(inline.1, away.1, "histogram, config {extra:?}, seed {seed}");
            let s: serde_json::Value = serde_json::from_str(&inline.0).unwrap();
            buffer_reads += s["cache"]["write_buffer_hits"].as_u64().unwrap();
        }
    }
    // The tail's thread answered reads from the write buffer (`Port::ask`).
    assert!(buffer_reads > 0, "no stream read from the write buffer");
}

#[test]
fn the_tail_comes_back_after_a_panic_inside() {
    let steps = stream(7, 500, 48, 200, 0.5);
    let mut d = device("");
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        d.with_tail_thread(|d| {
            run(d, &steps);
            panic!("stop");
        })
    }));
    assert!(caught.is_err());
    // The tail is back with everything it was told before the panic.
    let mut whole = device("");
    run(&mut whole, &steps);
    assert_eq!(d.stats().to_string(), whole.stats().to_string());
}
