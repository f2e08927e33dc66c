//! Simulated accesses per second on one core: 10M random accesses over 1M pages (4 GiB, 4 KiB
//! pages) from 16 threads, linux_default on epyc_cxl_nps1 scaled so DRAM holds about half the
//! footprint (the rest is placed on the CXL node). The trace is generated once into the target
//! directory and read from the file, so trace decoding is part of the measurement.
//! The `policies` group runs the same trace under tiering policies on cascadelake_dcpmm scaled
//! to 1/16 (2 GiB of DRAM for the 4 GiB footprint) with daemons 1000x faster, so scanning, hint
//! faults, LAP bookkeeping and migrations are all in the measured path.

use std::path::PathBuf;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tiersim_engine::{RunRequest, SimOptions, TraceInput};

const ACCESSES: u64 = 10_000_000;

fn trace() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let path = dir.join("bench-random-10M-1Mpages.trace");
    if !path.exists() {
        let params: toml::Table =
            toml::from_str(&format!("footprint = \"4GiB\"\naccesses = {ACCESSES}\nthreads = 16\nwrite_ratio = 0.3")).unwrap();
        tiersim_trace::gen::generate("random", Some(&params), &path, 1).unwrap();
    }
    path
}

/// One criterion group: each policy replays the trace on `platform` with `overrides`; `check`
/// asserts on each run's summary that it did the work being measured.
fn group(c: &mut Criterion, name: &str, platform: &str, overrides: &[&str], policies: &[&str], check: fn(&serde_json::Value)) {
    let path = trace();
    let overrides: Vec<String> = overrides.iter().map(|o| o.to_string()).collect();
    let mut g = c.benchmark_group(name);
    g.sample_size(10);
    g.throughput(Throughput::Elements(ACCESSES));
    for &policy in policies {
        g.bench_function(format!("{policy}/{platform}/random_10M_1Mpages"), |b| {
            b.iter(|| {
                let out = tiersim_engine::run(&RunRequest {
                    platform,
                    overrides: &overrides,
                    policy,
                    policy_params: None,
                    trace: TraceInput::File(&path),
                    seed: 0,
                    options: SimOptions::default(),
                })
                .unwrap();
                check(&out.summary);
                out
            })
        });
    }
    g.finish();
}

fn bench(c: &mut Criterion) {
    // 768 GiB x 1/384 = 2 GiB of DRAM for a 4 GiB footprint.
    group(c, "engine", "epyc_cxl_nps1", &["scale=0.0026041666666666665"], &["linux_default", "interleave"], |s| {
        assert_eq!(s["accesses"].as_u64(), Some(ACCESSES))
    });
    group(c, "policies", "cascadelake_dcpmm", &["scale=0.0625", "os.daemon_time_scale=0.001"], &["numab_tiering", "autotiering_opm_bd"], |s| {
        assert!(s["tiering"]["hint_faults"].as_u64().unwrap() > 0)
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
