//! Per-access cost of the device models on a random 64 B stream.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use tiersim_core::Op;
use tiersim_devices::{build, presets, DeviceRequest};

const BATCH: u64 = 1 << 16;
/// Address span of the stream: large enough that channels see a uniform mix.
const SPAN: u64 = 64 << 30;

/// xorshift64*: deterministic addresses without pulling a RNG crate into the bench.
fn next(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

/// `writes_every`: every n-th access is a write (1 = all writes).
fn run(c: &mut Criterion, name: &str, preset: &str, set: Option<(&str, i64)>, writes_every: u64) {
    let p = presets::get(preset).expect("preset");
    let mut table = p.params.clone();
    if let Some((key, value)) = set {
        table.insert(key.to_owned(), toml::Value::Integer(value));
    }
    let (mut dev, _) = build(&p.device, Some(&table)).expect("device");
    let mut group = c.benchmark_group("devices");
    group.throughput(Throughput::Elements(BATCH));
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut now = 0u64;
    group.bench_function(name, |b| {
        b.iter(|| {
            let mut last = 0;
            for i in 0..BATCH {
                let r = next(&mut state);
                now += 1;
                let req = DeviceRequest {
                    now,
                    addr: (r % SPAN) & !63,
                    size: 64,
                    op: if i % writes_every == writes_every - 1 { Op::Write } else { Op::Read },
                    socket: 0,
                    cpu: 0,
                    remote: false,
                };
                last = dev.access(black_box(&req));
            }
            black_box(last)
        })
    });
    group.finish();
}

fn devices(c: &mut Criterion) {
    run(c, "dram_12ch_random_64B", "ddr5_4800", Some(("channels", 12)), 3);
    run(c, "cxl_random_64B", "cxl_cz120", Some(("media_channels", 2)), 3);
    // Every write misses the XPBuffer and evicts a partly written line (RMW): the costliest path.
    run(c, "pmem_random_64B_writes", "optane_100", None, 1);
}

criterion_group!(benches, devices);
criterion_main!(benches);
