//! Simulated accesses per second on one core: 10M random accesses over 1M pages (4 GiB, 4 KiB
//! pages) from 16 threads, linux_default on epyc_cxl_nps1 scaled so DRAM holds about half the
//! footprint (the rest is placed on the CXL node). The trace is generated once into the target
//! directory and read from the file, so trace decoding is part of the measurement.
//! The `policies` group runs the same trace under tiering policies on cascadelake_dcpmm scaled
//! to 1/16 (2 GiB of DRAM for the 4 GiB footprint) with daemons 1000x faster, so scanning, hint
//! faults, LAP bookkeeping and migrations are all in the measured path: a stress case where most
//! accesses take a hint fault. The `policies_study` group runs the README's AutoTiering study
//! setting instead (8M accesses of the phased and kv generators, 32 threads over 160 MiB, scale
//! 1/512 with daemons 1000x faster).

use std::path::PathBuf;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tiersim_engine::{RunRequest, SimOptions, TraceInput};

const ACCESSES: u64 = 10_000_000;
const STUDY_ACCESSES: u64 = 8_000_000;

/// A generated trace, written once into the target directory.
fn trace(name: &str, generator: &str, params: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("bench-{name}.trace"));
    if !path.exists() {
        let params: toml::Table = toml::from_str(params).unwrap();
        tiersim_trace::gen::generate(generator, Some(&params), &path, 1).unwrap();
    }
    path
}

/// One criterion group: each policy replays the trace on `platform` with `overrides`; `check`
/// asserts on each run's summary that it did the work being measured.
struct Group<'a> {
    name: &'a str,
    platform: &'a str,
    overrides: &'a [&'a str],
    policies: &'a [&'a str],
    /// (label, generator, generator parameters)
    traces: &'a [(&'a str, &'a str, &'a str)],
}

fn group(c: &mut Criterion, spec: Group, check: fn(&serde_json::Value)) {
    let Group { name, platform, overrides, policies, traces } = spec;
    let overrides: Vec<String> = overrides.iter().map(|o| o.to_string()).collect();
    let mut g = c.benchmark_group(name);
    g.sample_size(10);
    for &(label, generator, params) in traces {
        let path = trace(label, generator, params);
        // Throughput counts every access of the trace (phased adds an initialisation phase).
        let accesses = tiersim_trace::TraceReader::open(&path).unwrap().header().stats.as_ref().unwrap().accesses;
        g.throughput(Throughput::Elements(accesses));
        for &policy in policies {
            g.bench_function(format!("{policy}/{platform}/{label}"), |b| {
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
    }
    g.finish();
}

fn bench(c: &mut Criterion) {
    let random = format!("footprint = \"4GiB\"\naccesses = {ACCESSES}\nthreads = 16\nwrite_ratio = 0.3");
    let random = [("random_10M_1Mpages", "random", random.as_str())];
    let tiering = ["numab_tiering", "autotiering_opm_bd"];
    // 768 GiB x 1/384 = 2 GiB of DRAM for a 4 GiB footprint.
    let engine = Group {
        name: "engine",
        platform: "epyc_cxl_nps1",
        overrides: &["scale=0.0026041666666666665"],
        policies: &["linux_default", "interleave"],
        traces: &random,
    };
    group(c, engine, |s| assert_eq!(s["accesses"].as_u64(), Some(ACCESSES)));
    let stress = Group {
        name: "policies",
        platform: "cascadelake_dcpmm",
        overrides: &["scale=0.0625", "os.daemon_time_scale=0.001"],
        policies: &tiering,
        traces: &random,
    };
    group(c, stress, |s| assert!(s["tiering"]["hint_faults"].as_u64().unwrap() > 0));
    let study = format!("footprint = \"160MiB\"\naccesses = {STUDY_ACCESSES}\nthreads = 32");
    let study = [("phased_8M_160MiB", "phased", study.as_str()), ("kv_8M_160MiB", "kv", study.as_str())];
    let readme = Group {
        name: "policies_study",
        platform: "cascadelake_dcpmm",
        overrides: &["scale=0.001953125", "os.daemon_time_scale=0.001"],
        policies: &tiering,
        traces: &study,
    };
    group(c, readme, |s| assert!(s["tiering"]["migrations"].as_u64().unwrap() > 0));
}

criterion_group!(benches, bench);
criterion_main!(benches);
