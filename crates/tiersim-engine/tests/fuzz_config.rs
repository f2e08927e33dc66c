//! Fuzzing of platform TOML and parameter overrides: every preset with values replaced by edge
//! values, lines deleted, duplicated or cut, and `--set KEY=VALUE` overrides of every host, os
//! and stats parameter with edge values. Each case loads or ends in one error naming a key,
//! `FILE:LINE:COLUMN` or an argument; never a panic, never a hang. Fixed seed, bounded cases
//! (TIERSIM_FUZZ_CASES for more); the tallies print with --nocapture.

use std::time::{Duration, Instant};

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tiersim_core::Error;
use tiersim_engine::platform::{self, HOST_PARAMS, OS_PARAMS, PRESETS, STATS_PARAMS};

const EDGE: &[&str] = &[
    "nan",
    "-nan",
    "inf",
    "-inf",
    "0",
    "-1",
    "1e300",
    "-1e300",
    "1e-300",
    "9223372036854775807",
    "-9223372036854775808",
    "\"\"",
    "\"0B\"",
    "\"1e30s\"",
    "\"nan\"",
    "\"16EiB\"",
    "\"18446744073709551615B\"",
    "\"0ns\"",
    "\"1ns\"",
    "true",
    "[]",
    "[nan]",
    "{}",
    "\"x\"",
    "0.5",
    "4096",
    "1024",
    "65536",
];

fn cases(default: usize) -> usize {
    std::env::var("TIERSIM_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn located(e: &Error) -> bool {
    matches!(e, Error::Config { .. } | Error::Syntax { .. } | Error::Arg { .. } | Error::UnknownPlugin { .. })
}

fn mutate(text: &str, rng: &mut ChaCha8Rng) -> (String, &'static str) {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let i = rng.gen_range(0..lines.len());
    let kind = match rng.gen_range(0..5) {
        0 | 1 => match lines[i].split_once(" = ") {
            Some((k, _)) => {
                lines[i] = format!("{k} = {}", EDGE.choose(rng).unwrap());
                "value set to an edge value"
            }
            None => "no value on the line",
        },
        2 => {
            lines.remove(i);
            "line deleted"
        }
        3 => {
            let l = lines[i].clone();
            lines.insert(i, l);
            "line duplicated"
        }
        _ => {
            let cut = rng.gen_range(0..=lines[i].len());
            lines[i] = lines[i].chars().take(cut).collect();
            "line cut"
        }
    };
    (lines.join("\n") + "\n", kind)
}

#[test]
fn mutated_platform_files_load_or_fail_with_a_located_error() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("p.toml");
    let mut rng = ChaCha8Rng::seed_from_u64(15);
    let (mut ok, mut rejected) = (0, 0);
    for i in 0..cases(300) {
        let (name, text) = PRESETS[i % PRESETS.len()];
        let (m, kind) = mutate(text, &mut rng);
        std::fs::write(&path, &m).unwrap();
        let start = Instant::now();
        let r = std::panic::catch_unwind(|| platform::load(path.to_str().unwrap(), &[]));
        assert!(start.elapsed() < Duration::from_secs(10), "{name}: {kind}: hang guard");
        match r {
            Err(_) => panic!("{name}: {kind} panicked on:\n{m}"),
            Ok(Ok(_)) => ok += 1,
            Ok(Err(e)) => {
                assert!(located(&e), "{name}: {kind}: {e}");
                rejected += 1;
            }
        }
    }
    eprintln!(
        "platform TOML: {} cases, {ok} loaded, {rejected} rejected naming a key or file:line:column",
        ok + rejected
    );
}

#[test]
fn overrides_of_every_parameter_with_edge_values_load_or_name_the_key() {
    let mut rng = ChaCha8Rng::seed_from_u64(15);
    let keys: Vec<String> = [("host", HOST_PARAMS), ("os", OS_PARAMS), ("stats", STATS_PARAMS)]
        .iter()
        .flat_map(|(s, specs)| specs.iter().map(move |p| format!("{s}.{}", p.name)))
        .chain(["scale", "nodes.dram0.capacity", "nodes.dram0.params.channels", "swap.capacity"].map(str::to_owned))
        .collect();
    let (mut ok, mut rejected) = (0, 0);
    for _ in 0..cases(400) {
        let key = keys.choose(&mut rng).unwrap();
        let value = EDGE.choose(&mut rng).unwrap();
        let set = format!("{key}={value}");
        let r = std::panic::catch_unwind(|| platform::load("epyc_cxl_nps1", std::slice::from_ref(&set)));
        match r {
            Err(_) => panic!("--set {set} panicked"),
            Ok(Ok(p)) => {
                // Whatever loaded is finite: no NaN or infinity got through.
                for (_, v) in p.host.iter().chain(p.os.iter()).chain(p.stats.iter()) {
                    let t = v.to_string();
                    assert!(!t.contains("NaN") && !t.contains("inf"), "--set {set} loaded {t}");
                }
                ok += 1;
            }
            Ok(Err(e)) => {
                // The key named may be the one the value contradicts (host.cpus=65536 names nodes).
                assert!(located(&e), "--set {set}: {e}");
                rejected += 1;
            }
        }
    }
    eprintln!("parameter overrides: {} cases, {ok} loaded, {rejected} rejected naming the key", ok + rejected);
}
