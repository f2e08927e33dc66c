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

fn run(c: &mut Criterion, name: &str, preset: &str, channels_key: &str, channels: i64) {
    let p = presets::get(preset).expect("preset");
    let mut table = p.params.clone();
    table.insert(channels_key.to_owned(), toml::Value::Integer(channels));
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
                    op: if i % 3 == 2 { Op::Write } else { Op::Read },
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
    run(c, "dram_12ch_random_64B", "ddr5_4800", "channels", 12);
    run(c, "cxl_random_64B", "cxl_cz120", "media_channels", 2);
}

criterion_group!(benches, devices);
criterion_main!(benches);
