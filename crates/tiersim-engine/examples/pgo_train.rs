//! The Rust-side training workload of a profile-guided build (tools/pgo.sh, `make bench-pgo`):
//! engine runs under the main policies on three generated traces, and cxl_flash replays of three
//! trace shapes on the default device and, with a tenth of the requests each (branch weights sum
//! over the whole training, and the default is what most replays run), under the
//! cxl_flash_matrix example's other settings. Its traces are not the benches' (other seeds,
//! footprints and lengths), so the benches measure a profile they were not trained on.
//!
//! cargo run --release -p tiersim-engine --example pgo_train -- [accesses per trace]

use std::path::Path;

use tiersim_engine::flash_replay::{replay_input, Input};
use tiersim_engine::{RunRequest, SimOptions, TraceInput};

#[path = "../benches/common/cxl_flash_trace.rs"]
mod common;

/// (platform, overrides, policies): the engine bench's platforms with its scales, and its policies
/// plus TPP, AutoNUMA and Tiering-0.6. The other AutoTiering modes share autotiering_opm_bd's
/// file; the two oracles are not trained.
const ENGINE: [(&str, &[&str], &[&str]); 2] = [
    ("epyc_cxl_nps1", &["scale=0.0026041666666666665"], &["linux_default", "interleave"]),
    (
        "cascadelake_dcpmm",
        &["scale=0.0625", "os.daemon_time_scale=0.001"],
        &["numab_tiering", "autotiering_opm_bd", "tpp", "autonuma", "tiering06"],
    ),
];

const SEED: u64 = 7;

fn generate(generator: &str, params: &str, accesses: u64, path: &Path) {
    let mut table: toml::Table = toml::from_str(params).expect("generator parameters");
    table.insert("accesses".into(), toml::Value::Integer(accesses as i64));
    tiersim_trace::gen::generate(generator, Some(&table), path, SEED).expect("generate");
}

fn main() {
    let accesses: u64 = match std::env::args().nth(1) {
        None => 2_000_000,
        Some(a) => a.parse().unwrap_or_else(|_| {
            eprintln!("usage: pgo_train [accesses per trace]");
            std::process::exit(2);
        }),
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let engine_traces = [
        ("random", "footprint = \"2GiB\"\nthreads = 8\nwrite_ratio = 0.2"),
        ("phased", "footprint = \"96MiB\"\nthreads = 16"),
        ("kv", "footprint = \"96MiB\"\nthreads = 16"),
    ];
    for (generator, params) in engine_traces {
        let trace = dir.path().join(format!("engine-{generator}.trace"));
        generate(generator, params, accesses, &trace);
        for (platform, overrides, policies) in ENGINE {
            let overrides: Vec<String> = overrides.iter().map(|o| o.to_string()).collect();
            for policy in policies {
                let req = RunRequest {
                    platform,
                    overrides: &overrides,
                    policy,
                    policy_params: None,
                    trace: TraceInput::File(&trace),
                    seed: SEED,
                    options: SimOptions::default(),
                };
                let run = tiersim_engine::run(&req).expect("engine run");
                println!("{generator} {platform} {policy}: {} accesses", run.summary["trace_accesses"]);
            }
        }
    }
    let flash_trace = dir.path().join("flash.trace");
    for shape in ["random", "stride", "mixed"] {
        match shape {
            "mixed" => common::write_mixed(accesses, &flash_trace, SEED).expect("mixed trace"),
            "random" => generate(
                "random",
                "footprint = \"2GiB\"\nwrite_ratio = 0.3\ngap_instructions = 200\nbase_addr = 0",
                accesses,
                &flash_trace,
            ),
            _ => generate(
                "stride",
                "footprint = \"1GiB\"\nstride = \"64B\"\nwrite_ratio = 0.2\ngap_instructions = 200\nbase_addr = 0",
                accesses,
                &flash_trace,
            ),
        }
        for (i, setting) in common::settings().iter().enumerate() {
            let limit = if i == 0 { 0 } else { accesses / 10 };
            let (params, opts) = (setting.params(), setting.options(limit));
            let r = replay_input(&Input::File { path: &flash_trace, format: None }, &params, &opts).expect("replay");
            println!("flash {shape} {}: {} requests", setting.name, r.summary["requests"]);
        }
    }
}
