//! Frozen results: a fixed set of runs whose whole output (summary, time series, latency
//! histogram; for the CXL-flash replays summary and bins) must not change by a single byte
//! unless on purpose. It holds the engine still while its parts move (issue 32): every policy
//! on two traces, a reclaim- and swap-heavy run, file I/O by calls and by mapping, and the
//! cxl_flash replay matrix. data/frozen.json keeps a 64-bit FNV-1a digest of each run's output
//! and a headline figure, the execution time (a replay's simulated time), so a diff says which runs moved and by how much.
//!
//!   TIERSIM_BLESS=1 cargo test -p tiersim-engine --test frozen       # rewrite data/frozen.json
//!   TIERSIM_FROZEN_DUMP=DIR cargo test -p tiersim-engine --test frozen  # also write each output

use std::collections::BTreeMap;
use std::path::Path;

use tiersim_engine::flash_replay::{replay_input, Input};
use tiersim_engine::{RunRequest, SimOptions, TraceInput};

#[path = "../benches/common/cxl_flash_trace.rs"]
mod flash_common;

const FROZEN: &str = "tests/data/frozen.json";
const PHASED: &str = "tests/data/phased_small.trace";

/// The AutoTiering machine at 1/16384 (256 DRAM pages a socket, 2 CPUs each), daemons 10^5
/// times faster: the golden test's lens, where every policy promotes and demotes.
const SMALL_CASCADE: [&str; 5] = [
    "scale=0.00006103515625",
    "os.daemon_time_scale=0.00001",
    "host.cpus=4",
    "nodes.dram0.cpus=\"0-1\"",
    "nodes.dram1.cpus=\"2-3\"",
];

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3))
}

struct Case {
    name: String,
    output: String,
    execution_time_ns: serde_json::Value,
}

fn engine_case(name: &str, platform: &str, overrides: &[&str], policy: &str, trace: TraceInput) -> Case {
    let overrides: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    let out = tiersim_engine::run(&RunRequest {
        platform,
        overrides: &overrides,
        policy,
        policy_params: None,
        trace,
        seed: 1,
        options: SimOptions { check_every: 997 },
    })
    .unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut summary = out.summary;
    // The version is not the engine's behaviour.
    summary.as_object_mut().expect("summary object").remove("tiersim_version");
    let execution_time_ns = summary["execution_time_ns"].clone();
    let output = format!("{summary}\n{:?}\n{:?}\n", out.timeseries, out.latency_hist);
    Case { name: name.to_string(), output, execution_time_ns }
}

fn generator(name: &'static str, params: &str) -> (&'static str, toml::Table) {
    (name, toml::from_str(params).expect("generator params"))
}

/// The file I/O generator's parameters for the runs under memory pressure: random 4 KiB calls or
/// mapped accesses (`access`) over a 4 MiB file, half the operations, beside 1 MiB of anon memory.
fn fileio_under_pressure(access: &str) -> toml::Table {
    generator(
        "fileio",
        &format!(
            "footprint = \"1MiB\"\naccesses = 40000\nthreads = 4\nfile_size = \"4MiB\"\nfile_share = 0.5\n\
             file_write_ratio = 0.3\npattern = \"random\"\nfile_access = \"{access}\""
        ),
    )
    .1
}

fn engine_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    let (kv, kv_params) = generator("kv", "footprint = \"4MiB\"\naccesses = 60000\nthreads = 4");
    for e in tiersim_policies::REGISTRY.iter() {
        let p = e.info.name;
        cases.push(engine_case(
            &format!("phased/{p}"),
            "cascadelake_dcpmm",
            &SMALL_CASCADE,
            p,
            TraceInput::File(Path::new(PHASED)),
        ));
        let trace = TraceInput::Generator { name: kv, params: Some(&kv_params) };
        cases.push(engine_case(&format!("kv/{p}"), "cascadelake_dcpmm", &SMALL_CASCADE, p, trace));
    }
    // Reclaim and swap: 2 MiB of DRAM under a 6 MiB write-heavy working set, swap behind it.
    let (random, random_params) =
        generator("random", "footprint = \"6MiB\"\naccesses = 80000\nthreads = 4\nwrite_ratio = 0.5");
    let tight = ["nodes.dram0.capacity=\"2MiB\"", "host.cpus=4", "nodes.dram0.cpus=\"0-3\"", "swap.capacity=\"64MiB\""];
    cases.push(engine_case(
        "swap/random",
        "dram_only",
        &tight,
        "linux_default",
        TraceInput::Generator { name: random, params: Some(&random_params) },
    ));
    // File I/O through the page cache under the same pressure: calls, then a mapping.
    let pressured = ["syscall", "mmap"].map(|access| (access, fileio_under_pressure(access)));
    for (access, params) in &pressured {
        let trace = TraceInput::Generator { name: "fileio", params: Some(params) };
        cases.push(engine_case(&format!("fileio/{access}"), "dram_only", &tight, "linux_default", trace));
    }
    // File I/O on the tiered machine under the policy that places page cache by type.
    let (fileio, params) = generator(
        "fileio",
        "footprint = \"8MiB\"\naccesses = 40000\nthreads = 4\nfile_size = \"8MiB\"\nfile_share = 0.3\nfile_write_ratio = 0.2",
    );
    let with_disk: Vec<&str> =
        SMALL_CASCADE.iter().copied().chain(["swap.preset=\"nvme_ssd\"", "swap.capacity=\"64MiB\""]).collect();
    for policy in ["tpp", "numab_tiering"] {
        let trace = TraceInput::Generator { name: fileio, params: Some(&params) };
        cases.push(engine_case(&format!("fileio_tiered/{policy}"), "cascadelake_dcpmm", &with_disk, policy, trace));
    }
    // The same OS paths with a warm-up: counters must count from its end only.
    let warm: Vec<&str> = SMALL_CASCADE.iter().copied().chain(["stats.warmup_accesses=25000"]).collect();
    for p in ["numab_tiering", "autotiering_opmx", "tpp", "oracle_dynamic"] {
        cases.push(engine_case(
            &format!("warm/phased/{p}"),
            "cascadelake_dcpmm",
            &warm,
            p,
            TraceInput::File(Path::new(PHASED)),
        ));
    }
    let warm_tight: Vec<&str> = tight.iter().copied().chain(["stats.warmup_accesses=15000"]).collect();
    let trace = TraceInput::Generator { name: random, params: Some(&random_params) };
    cases.push(engine_case("warm/swap/random", "dram_only", &warm_tight, "linux_default", trace));
    for (access, params) in &pressured {
        let trace = TraceInput::Generator { name: "fileio", params: Some(params) };
        cases.push(engine_case(&format!("warm/fileio/{access}"), "dram_only", &warm_tight, "linux_default", trace));
    }
    let warm_disk: Vec<&str> = with_disk.iter().copied().chain(["stats.warmup_accesses=15000"]).collect();
    let trace = TraceInput::Generator { name: fileio, params: Some(&params) };
    cases.push(engine_case("warm/fileio_tiered/tpp", "cascadelake_dcpmm", &warm_disk, "tpp", trace));
    cases
}

fn flash_cases() -> Vec<Case> {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut cases = Vec::new();
    for trace_name in flash_common::TRACES {
        let trace = dir.path().join(format!("{trace_name}.trace"));
        flash_common::write_trace(trace_name, 20_000, &trace).expect("trace");
        for setting in flash_common::settings() {
            let (params, opts) = (setting.params(), setting.options(0));
            let r = replay_input(&Input::File { path: &trace, format: None }, &params, &opts)
                .unwrap_or_else(|e| panic!("{trace_name}/{}: {e}", setting.name));
            let output = serde_json::json!({ "summary": r.summary, "bins": r.bins }).to_string();
            cases.push(Case {
                name: format!("flash/{trace_name}/{}", setting.name),
                execution_time_ns: r.summary["simulated_ns"].clone(),
                output,
            });
        }
    }
    cases
}

#[test]
fn the_frozen_runs_give_the_same_bytes() {
    let cases: Vec<Case> = engine_cases().into_iter().chain(flash_cases()).collect();
    if let Some(dir) = std::env::var_os("TIERSIM_FROZEN_DUMP") {
        std::fs::create_dir_all(&dir).unwrap();
        for c in &cases {
            std::fs::write(Path::new(&dir).join(c.name.replace('/', "__")), &c.output).unwrap();
        }
    }
    let got: BTreeMap<String, serde_json::Value> = cases
        .iter()
        .map(|c| {
            let digest = format!("{:016x}", fnv1a(c.output.as_bytes()));
            (c.name.clone(), serde_json::json!({ "digest": digest, "headline": c.execution_time_ns }))
        })
        .collect();
    let text = serde_json::to_string_pretty(&got).unwrap() + "\n";
    if std::env::var_os("TIERSIM_BLESS").is_some() {
        std::fs::write(FROZEN, &text).unwrap();
        return;
    }
    let want = std::fs::read_to_string(FROZEN).expect("frozen file; create it with TIERSIM_BLESS=1");
    let want: BTreeMap<String, serde_json::Value> = serde_json::from_str(&want).unwrap();
    let moved: Vec<String> = got
        .iter()
        .filter(|(k, v)| want.get(*k) != Some(*v))
        .map(|(k, v)| format!("{k}: {} -> {}", want.get(k).map_or("(new)".into(), |w| w.to_string()), v))
        .collect();
    assert!(
        moved.is_empty(),
        "{} runs changed (rerun with TIERSIM_BLESS=1 if on purpose):\n{}",
        moved.len(),
        moved.join("\n")
    );
    let gone: Vec<&String> = want.keys().filter(|k| !got.contains_key(*k)).collect();
    assert!(gone.is_empty(), "runs removed: {gone:?}");
}
