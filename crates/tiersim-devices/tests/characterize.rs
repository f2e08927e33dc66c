//! `characterize` on every preset (quick mode), and the seed 000 shapes on the Optane preset.

use tiersim_devices::characterize::{characterize, to_json, Table, Target, ON_REQUEST, PMEM_ONLY, TESTS};
use tiersim_devices::presets;

fn target(name: &str, params: &str) -> Target {
    Target::resolve(name, Some(&toml::from_str(params).unwrap())).unwrap()
}

fn tables(name: &str, params: &str, tests: &[&str]) -> Vec<Table> {
    let tests: Vec<String> = tests.iter().map(|s| (*s).to_owned()).collect();
    characterize(&target(name, params), &tests, true, &[]).unwrap()
}

fn value(t: &Table, key_col: &str, key: f64, col: &str) -> f64 {
    let i = t.col(key_col).unwrap().iter().position(|&k| k == key).unwrap();
    t.col(col).unwrap()[i]
}

#[test]
fn smoke_every_preset() {
    for p in presets::all().unwrap() {
        let t = target(&p.name, "");
        let out = characterize(&t, &[], true, &[]).unwrap();
        let names: Vec<_> = out.iter().map(|t| t.name.as_str()).collect();
        let expect: Vec<_> = TESTS
            .iter()
            .copied()
            .filter(|n| (p.device == "pmem" || !PMEM_ONLY.contains(n)) && !ON_REQUEST.contains(n))
            .collect();
        assert_eq!(names, expect, "{}", p.name);
        for table in &out {
            for (name, _) in &table.columns {
                if let Some(v) = table.col(name) {
                    assert!(v.iter().all(|x| x.is_finite() && *x >= 0.0), "{} {} {name}: {v:?}", p.name, table.name);
                }
            }
        }
        let j = to_json(&t, &out);
        assert_eq!(j["tables"].as_array().unwrap().len(), out.len());
    }
}

#[test]
fn deterministic() {
    assert_eq!(
        tables("optane_100", "count = 6", &["bandwidth_size"]),
        tables("optane_100", "count = 6", &["bandwidth_size"])
    );
}

#[test]
fn optane_reproduces_seed_000_shapes() {
    let t = tables(
        "optane_100",
        "",
        &["idle_latency", "bandwidth_threads", "ewr_size", "ewr_threads", "ewr_working_set", "scaling"],
    );
    let lat = t[0].col("latency_ns").unwrap();
    // Sequential read (305 + 3 x 124) / 4, random read 305, ntstore 90, clwb 62.
    assert_eq!(&lat[..4], &[169.25, 305.0, 90.0, 62.0]);
    // Single-DIMM bandwidth: reads saturate at 6.6 GB/s, writes at 2.3 GB/s up to 4 threads,
    // then fall (seed 000: peak at 1-4 threads, 69% at 8).
    let bw = &t[1];
    let ops = bw.strs("op").unwrap();
    let at = |op: &str, n: f64| {
        let i = (0..ops.len()).find(|&i| ops[i] == op && bw.col("threads").unwrap()[i] == n).unwrap();
        bw.col("bandwidth_gbs").unwrap()[i]
    };
    assert!((at("read", 4.0) - 6.6).abs() < 0.01);
    assert!((at("write", 4.0) - 2.3).abs() < 0.01);
    // Every writer counts while its writes are outstanding, so n > 4 writers get exactly
    // 1 / (1 + 0.112 (n - 4)) of the peak: 69.06% at 8 (seed 000: 69%), 42.66% at 16.
    for (n, share) in [(8.0, 1.0 / 1.448), (16.0, 1.0 / 2.344)] {
        let got = at("write", n) / at("write", 4.0);
        assert!((got - share).abs() < 0.002, "{n} writers: {got} vs {share}");
    }
    // EWR: 64 B random ntstore ~0.25, 256 B 1.
    let ewr = &t[2];
    let e64 = value(ewr, "size", 64.0, "ewr");
    assert!((0.25..0.27).contains(&e64), "{e64}");
    assert_eq!(value(ewr, "size", 256.0, "ewr"), 1.0);
    // EWR vs writer threads: a known gap. Seed 000 measures 0.62 with 8 sequential writers; here
    // each writer holds at most three partly written XPLines (10 lines in flight), far from the
    // 64 that would make the XPBuffer evict them, so EWR stays 1 (docs/devices.md; just above 1
    // as the lines still in the buffer at the end are not written yet).
    let e8 = value(&t[3], "threads", 8.0, "ewr");
    assert!((1.0..1.001).contains(&e8), "{e8}");
    // The XPBuffer knee: EWR 1 up to 16 KiB, about 0.5 beyond.
    let ws = &t[4];
    assert_eq!(value(ws, "working_set", 16384.0, "ewr"), 1.0);
    assert!(value(ws, "working_set", 18432.0, "ewr") < 0.6);
    // Interleaving 6 DIMMs scales reads ~6x (seed 000: 5.8x).
    let s = &t[5];
    let scale = s.col("read_gbs").unwrap()[5] / s.col("read_gbs").unwrap()[0];
    assert!((5.6..6.1).contains(&scale), "{scale}");
}

#[test]
fn interleave_dip_for_random_4k() {
    let t = &tables("optane_100", "count = 6", &["bandwidth_size"])[0];
    let bw = |pattern: &str, op: &str, size: f64| {
        let (p, o, s) = (t.strs("pattern").unwrap(), t.strs("op").unwrap(), t.col("size").unwrap());
        let i = (0..s.len()).find(|&i| p[i] == pattern && o[i] == op && s[i] == size).unwrap();
        t.col("bandwidth_gbs").unwrap()[i]
    };
    // Lines go out one by one, ten in flight per thread: a random access of up to 4 KiB keeps all
    // of a thread's lines on one DIMM, so the DIMMs are unevenly loaded; larger accesses walk the
    // DIMMs and 24 KiB covers all six evenly. A V with its bottom at 4 KiB (seed 000 Fig. 5 right).
    for op in ["read", "write"] {
        let sizes = [256.0, 1024.0, 4096.0, 24576.0, 65536.0];
        let v: Vec<f64> = sizes.iter().map(|&s| bw("random", op, s)).collect();
        let min = v.iter().cloned().fold(f64::INFINITY, f64::min);
        assert_eq!(min, v[2], "{op}: {v:?}");
        assert!(v[1] > v[2] && v[3] > v[2], "{op}: {v:?}");
    }
    assert!(bw("random", "write", 4096.0) < 0.7 * bw("random", "write", 24576.0));
    assert!(bw("random", "read", 4096.0) < 0.9 * bw("random", "read", 24576.0));
    // Sequential streams do not dip.
    assert!(bw("sequential", "write", 4096.0) > 0.99 * bw("sequential", "write", 24576.0));
}

#[test]
fn remote_socket_ratios() {
    let t = tables("optane_100", "count = 6", &["remote_latency", "remote_bandwidth"]);
    // Idle latencies from the other socket (seed 000: 1.79x sequential read, 1.20x random read,
    // 2.53x ntstore, 1.68x clwb): sequential (366 + 3 x 282) / 4 = 303 ns over 169.25 ns.
    let lat = &t[0];
    assert_eq!(lat.col("remote_ns").unwrap(), &[303.0, 366.0, 228.0, 104.0, 228.0, 104.0]);
    let ratio = lat.col("ratio").unwrap();
    for (got, want) in ratio.iter().zip([303.0 / 169.25, 366.0 / 305.0, 228.0 / 90.0, 104.0 / 62.0]) {
        assert!((got - want).abs() < 0.002, "{ratio:?}");
    }
    // Bandwidth, 6 DIMMs: the best remote over the best local (seed 000: 59.2% read, 61.7%
    // write), and remote traffic losing more than local as threads grow.
    let bw = &t[1];
    let ops = bw.strs("op").unwrap();
    let best = |op: &str, col: &str| {
        (0..ops.len()).filter(|&i| ops[i] == op).map(|i| bw.col(col).unwrap()[i]).fold(0.0, f64::max)
    };
    let read = best("read", "remote_gbs") / best("read", "local_gbs");
    let write = best("write", "remote_gbs") / best("write", "local_gbs");
    assert!((0.5..0.62).contains(&read) && (0.5..0.62).contains(&write), "{read} {write}");
    let r = bw.col("ratio").unwrap();
    for op in ["read", "write", "mixed"] {
        let v: Vec<f64> = (0..ops.len()).filter(|&i| ops[i] == op).map(|i| r[i]).collect();
        assert!(v.iter().all(|&x| x < 0.8) && v[v.len() - 1] < 0.8 * v[0], "{op}: {v:?}");
    }
}

#[test]
fn bad_targets_and_tests_are_rejected() {
    let err = |name: &str, params: &str| {
        Target::resolve(name, Some(&toml::from_str(params).unwrap())).err().unwrap().to_string()
    };
    assert!(err("hbm3", "").starts_with("invalid argument `device`: `hbm3` is neither a preset (ddr5_4800,"));
    assert_eq!(err("optane_100", "count = 0"), "config key `count`: expected devices in the set, 1..=64, got 0");
    assert_eq!(
        err("optane_100", "granule = \"3000B\""),
        "config key `granule`: 3000B is not a power of two of at least 64B"
    );
    assert_eq!(err("pmem", "xpline = \"100B\""), "config key `xpline`: 100B is not a power of two");
    assert!(err("dram", "chanels = 2").contains("valid parameters: channels,"));
    assert!(err("dram", "chanels = 2").ends_with("hash, write_cost, load_linear_ns, load_linear_write_ns, load_queue_ns, load_queue_write_ns, load_max_util, load_window, load_gain, count, granule"));
    let e = characterize(&target("dram", ""), &["bandwidth".to_owned()], true, &[]).unwrap_err().to_string();
    assert!(e.starts_with("invalid argument `tests`: unknown test `bandwidth`; valid tests: idle_latency,"), "{e}");
}
