//! Device-mode replay speed of cxl_flash (issue 5 target: 10M requests/s; MQSim_CXL does about
//! 85k/s): a 10M-access native trace (random 64 B accesses over 4 GiB, 30% writes, so most
//! requests miss the 64 MiB cache and reach flash) replayed open loop against the default
//! 1 TiB device with CFLRU and best-offset, decoding included.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tiersim_devices::cxl_flash::replay::{replay_input, resolve_params, Input, ReplayOptions};

const ACCESSES: u64 = 10_000_000;

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let trace = dir.path().join("random.trace");
    for (name, gen) in [
        ("random", "footprint = \"4GiB\"\nwrite_ratio = 0.3\ngap_instructions = 200\nbase_addr = 0"),
        ("stride", "footprint = \"4GiB\"\nstride = \"64B\"\nwrite_ratio = 0.1\ngap_instructions = 200\nbase_addr = 0"),
    ] {
        let mut table: toml::Table = toml::from_str(gen).expect("generator params");
        table.insert("accesses".into(), toml::Value::Integer(ACCESSES as i64));
        tiersim_trace::gen::generate(name, Some(&table), &trace, 1).expect("trace");
        let params = resolve_params(
            Some("cxl_flash_ull"),
            Some(&toml::from_str("replacement = \"cflru\"\nprefetcher = \"best_offset\"").expect("params")),
        )
        .expect("params");
        let opts = ReplayOptions { ns_per_instruction: 0.5, ..Default::default() };
        let mut group = c.benchmark_group("cxl_flash");
        group.sample_size(10);
        group.throughput(Throughput::Elements(ACCESSES));
        group.bench_function(format!("replay_10M_{name}_cflru_best_offset"), |b| {
            b.iter(|| {
                let r = replay_input(&Input::File { path: &trace, format: None }, &params, &opts).expect("replay");
                assert_eq!(r.summary["requests"], ACCESSES);
            })
        });
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
