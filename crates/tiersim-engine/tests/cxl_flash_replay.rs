//! Device-mode replay: the same accesses from an MQSim_CXL text trace and from a native trace
//! give the same result; open and closed loop; host LLC filter; hint files and generated hints;
//! malformed input names the file and line.

use std::io::Write;
use std::path::Path;

use tiersim_engine::flash_replay::{replay_input, resolve_params, HotHints, Input, ReplayOptions};
use tiersim_trace::convert::{self, Format, TextOptions};

/// A small device so that a few thousand accesses exercise evictions and write-backs.
const SMALL: &str = r#"
cache_size = "256KiB"
cache_ways = 8
mshr_rows = 8
flash_channels = 2
flash_ways = 2
flash_blocks_per_plane = 16
flash_pages_per_block = 16
"#;

fn params(extra: &str) -> tiersim_core::Params {
    let mut t: toml::Table = toml::from_str(SMALL).unwrap();
    t.extend(toml::from_str::<toml::Table>(extra).unwrap());
    resolve_params(Some("cxl_flash_ull"), Some(&t)).unwrap()
}

/// MQSim lines: 4000 accesses, 50 ns apart, a strided walk over 8 MiB with every 4th a write.
fn write_mqsim(path: &Path) {
    let mut f = std::fs::File::create(path).unwrap();
    for i in 0..4000u64 {
        let addr = (i * 4096 * 3 + (i % 7) * 64) % (8 << 20);
        writeln!(f, "{} 0 {addr} 8 {}", i * 50, u8::from(i % 4 != 0)).unwrap();
    }
}

#[test]
fn mqsim_text_and_native_replay_identically() {
    let d = tempfile::tempdir().unwrap();
    let text = d.path().join("walk.trace");
    let native = d.path().join("walk.tsim");
    write_mqsim(&text);
    convert::convert(&text, Some(Format::Mqsim), &native, Format::Native, &TextOptions::default()).unwrap();
    let p = params("");
    let opts = ReplayOptions::default();
    let a = replay_input(&Input::File { path: &text, format: Some(Format::Mqsim) }, &p, &opts).unwrap();
    let b = replay_input(&Input::File { path: &native, format: None }, &p, &opts).unwrap();
    assert_eq!(a.summary, b.summary);
    assert_eq!(a.bins, b.bins);
    let s = &a.summary;
    assert_eq!(s["requests"], 4000);
    assert_eq!(s["writes"], 1000);
    // MQSim's size field (8 sectors) is ignored: every line is one 64 B access.
    assert_eq!(s["bytes_read"], 3000 * 64);
    assert!(s["flash"]["reads_demand"].as_u64().unwrap() > 0);
    assert!(s["cache"]["flushes"].as_u64().unwrap() > 0);
    // Closed loop with one access outstanding never queues behind itself: no stalls, and its
    // latencies are no worse than the open loop's.
    let c = replay_input(
        &Input::File { path: &text, format: Some(Format::Mqsim) },
        &p,
        &ReplayOptions { closed_loop: Some(1), ..opts },
    )
    .unwrap();
    assert_eq!(c.summary["mshr"]["stall_behind"], 0);
    assert!(c.summary["latency_ns"]["mean_exact"].as_f64() <= a.summary["latency_ns"]["mean_exact"].as_f64());
    assert_eq!(c.summary["replay"]["mode"], "closed(1)");
    // Compat mode knows a read's completion only once later requests arrive: closed loop, which
    // issues on completions, is refused rather than run on lower bounds.
    let compat = params("compat = \"mqsim_cxl\"");
    let e = replay_input(
        &Input::File { path: &text, format: Some(Format::Mqsim) },
        &compat,
        &ReplayOptions { closed_loop: Some(4), ..ReplayOptions::default() },
    )
    .err()
    .expect("closed loop in compat mode accepted")
    .to_string();
    assert!(e.contains("closed_loop") && e.contains("open loop"), "{e}");
    assert!(replay_input(
        &Input::File { path: &text, format: Some(Format::Mqsim) },
        &compat,
        &ReplayOptions::default()
    )
    .is_ok());
}

/// `limit` replays the trace's first accesses and nothing else: the same result as a trace cut
/// after them, whether the limit falls inside a decoded batch or at its end, with pages
/// scattered; behind an LLC, its misses and write-backs are the device requests.
#[test]
fn a_limit_replays_exactly_the_first_accesses() {
    let d = tempfile::tempdir().unwrap();
    let text = d.path().join("walk.trace");
    write_mqsim(&text);
    let lines = std::fs::read_to_string(&text).unwrap();
    let p = params("");
    for (limit, llc_bytes) in [(1, 0), (2999, 0), (2999, 64 << 10), (4000, 0)] {
        let cut = d.path().join(format!("cut{limit}.trace"));
        std::fs::write(&cut, lines.lines().take(limit).map(|l| format!("{l}\n")).collect::<String>()).unwrap();
        let opts = ReplayOptions { scatter: Some(9), llc_bytes, llc_ways: 8, ..Default::default() };
        let limited = replay_input(
            &Input::File { path: &text, format: Some(Format::Mqsim) },
            &p,
            &ReplayOptions { limit: limit as u64, ..opts.clone() },
        )
        .unwrap();
        let whole = replay_input(&Input::File { path: &cut, format: Some(Format::Mqsim) }, &p, &opts).unwrap();
        assert_eq!(limited.summary, whole.summary, "limit {limit}");
        assert_eq!(limited.bins, whole.bins);
        assert_eq!(limited.summary["replay"]["trace_accesses"], limit as u64);
        let requests = limited.summary["requests"].as_u64().unwrap();
        if llc_bytes == 0 {
            assert_eq!(requests, limit as u64);
        } else {
            let llc = &limited.summary["replay"]["llc"];
            assert_eq!(llc["hits"].as_u64().unwrap() + llc["misses"].as_u64().unwrap(), limit as u64);
            assert_eq!(requests, llc["misses"].as_u64().unwrap() + llc["writebacks"].as_u64().unwrap());
        }
    }
}

#[test]
fn malformed_input_names_file_and_line() {
    let d = tempfile::tempdir().unwrap();
    let text = d.path().join("bad.trace");
    std::fs::write(&text, "0 0 4096 8 1\n10 0 8192 8 1\n20 0 0x3000 8 7\n").unwrap();
    let e =
        replay_input(&Input::File { path: &text, format: Some(Format::Mqsim) }, &params(""), &ReplayOptions::default())
            .err()
            .unwrap()
            .to_string();
    assert!(e.contains("bad.trace:3:") && e.contains("neither 1 (read) nor 0 (write)"), "{e}");
    // A text file without a named format is not guessed.
    let e = replay_input(&Input::File { path: &text, format: None }, &params(""), &ReplayOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("not a native tiersim trace"), "{e}");
    let hints = d.path().join("hints.txt");
    std::fs::write(&hints, "# time addr\n0 4096\n5 oops\n").unwrap();
    std::fs::write(&text, "0 0 4096 8 1\n").unwrap();
    let opts = ReplayOptions { hint_file: Some(hints), ..Default::default() };
    let e = replay_input(&Input::File { path: &text, format: Some(Format::Mqsim) }, &params(""), &opts)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("hints.txt:3:") && e.contains("address \"oops\""), "{e}");
}

#[test]
fn a_hint_turns_a_miss_into_a_hit() {
    let d = tempfile::tempdir().unwrap();
    let text = d.path().join("t.trace");
    std::fs::write(&text, "100000 0 1048576 1 1\n").unwrap();
    let hints = d.path().join("h.txt");
    std::fs::write(&hints, "0 1048576 64\n").unwrap();
    let input = Input::File { path: &text, format: Some(Format::Mqsim) };
    let p = params("prefetcher = \"none\"");
    let plain = replay_input(&input, &p, &ReplayOptions::default()).unwrap();
    assert_eq!(plain.summary["misses"], 1);
    let hinted =
        replay_input(&input, &p, &ReplayOptions { hint_file: Some(hints.clone()), ..Default::default() }).unwrap();
    assert_eq!(hinted.summary["hits"], 1);
    assert_eq!(hinted.summary["hints"]["prefetches"], 1);
    // hint_mode = off ignores it.
    let off = replay_input(
        &input,
        &params("prefetcher = \"none\"\nhint_mode = \"off\""),
        &ReplayOptions { hint_file: Some(hints), ..Default::default() },
    )
    .unwrap();
    assert_eq!(off.summary["misses"], 1);
}

#[test]
fn generated_hot_hints_and_llc_filter() {
    let gen: toml::Table = toml::from_str("footprint = \"4MiB\"\naccesses = 60000\ngap_instructions = 4000").unwrap();
    let input = Input::Generator { name: "hashmap", params: Some(&gen), seed: 3 };
    let p = params("prefetcher = \"none\"");
    let base = ReplayOptions { ns_per_instruction: 0.5, llc_bytes: 64 << 10, llc_ways: 8, ..Default::default() };
    let plain = replay_input(&input, &p, &base).unwrap();
    let llc = &plain.summary["replay"]["llc"];
    // The LLC sends misses and dirty write-backs only.
    assert_eq!(
        plain.summary["requests"].as_u64().unwrap(),
        llc["misses"].as_u64().unwrap() + llc["writebacks"].as_u64().unwrap()
    );
    assert!(llc["hits"].as_u64().unwrap() > 0);
    let hints = HotHints { top: 0.1, probability: 0.5, lead: 64, seed: 1 };
    let hinted = replay_input(&input, &p, &ReplayOptions { hot_hints: Some(hints), ..base.clone() }).unwrap();
    assert!(hinted.summary["replay"]["hints_sent"].as_u64().unwrap() > 0);
    let under = |s: &serde_json::Value| s["under_1us_fraction"].as_f64().unwrap();
    assert!(under(&hinted.summary) > under(&plain.summary), "{} vs {}", under(&hinted.summary), under(&plain.summary));
    // Reproducible.
    let again = replay_input(&input, &p, &ReplayOptions { hot_hints: Some(hints), ..base.clone() }).unwrap();
    assert_eq!(again.summary, hinted.summary);
    // The read-ahead window holds `lead` accesses: 2^32 of them asked for 128 GiB up front and
    // aborted the process; the lead is bounded.
    let far = HotHints { lead: 1 << 32, ..hints };
    let e =
        replay_input(&input, &p, &ReplayOptions { hot_hints: Some(far), ..base }).err().expect("refused").to_string();
    assert!(e.contains("hint_lead") && e.contains("above the maximum 1048576"), "{e}");
}

/// Open loop, no MSHR, random reads arriving far faster than the flash dies serve them: every
/// access is a miss whose read is still in flight when the next arrives, so without a bound the
/// in-flight rows grew with the trace's length (a row per access: 1.6M rows, about 150 MiB, for
/// 1.6M accesses). `no_mshr_max_inflight` bounds them; past it misses wait as for a full MSHR.
#[test]
fn reads_in_flight_without_mshr_are_bounded_by_the_configuration_not_the_trace_length() {
    let replay = |accesses: u64, cap: u32| {
        let gen: toml::Table =
            toml::from_str(&format!("accesses = {accesses}\nfootprint = \"1GiB\"\nthreads = 4\nwrite_ratio = 0.0"))
                .unwrap();
        let input = Input::Generator { name: "random", params: Some(&gen), seed: 5 };
        let p = params(&format!("mshr_rows = 0\nno_mshr_max_inflight = {cap}\nflash_blocks_per_plane = 512"));
        let opts = ReplayOptions { ns_per_instruction: 0.5, ..ReplayOptions::default() };
        let s = replay_input(&input, &p, &opts).unwrap().summary;
        (
            s["mshr"]["peak_rows"].as_u64().unwrap(),
            s["mshr"]["stall_rows"].as_u64().unwrap(),
            s["mshr"]["in_flight_cap"].clone(),
        )
    };
    // Unbounded in effect (the cap above the trace): the peak follows the trace's length.
    let (short, _, _) = replay(5_000, 1 << 24);
    let (long, stalls, _) = replay(20_000, 1 << 24);
    assert!(short > 4_000 && long > 16_000, "{short} {long}: arrivals do not outrun the device");
    assert_eq!(stalls, 0);
    // Bounded: the same peak whatever the length, and the waits are counted.
    for accesses in [5_000, 20_000] {
        let (peak, stalls, cap) = replay(accesses, 256);
        assert_eq!(peak, 256);
        assert!(stalls > accesses / 2, "{stalls} stalls of {accesses}");
        assert_eq!(cap, 256);
    }
}

/// The open-loop fast path (no LLC, no hints) gives what the general loop gives, which an empty
/// hint file selects: an instruction-count trace whose CPUs take turns irregularly, with file
/// mapping records, sizes 1 to 300 B and writes, plain and scattered, whole and cut by a limit
/// inside a decoded batch; from a file (its accesses prepared on the decoding thread) and from
/// a generator (on the replay's thread).
#[test]
fn the_fast_path_replays_as_the_general_loop_does() {
    use rand::{Rng, SeedableRng};
    use tiersim_core::{Access, Op};
    use tiersim_trace::{AddrKind, TimeUnit, TraceMeta, TraceWriter};

    let d = tempfile::tempdir().unwrap();
    let trace = d.path().join("cpus.trace");
    let meta = TraceMeta { time_unit: TimeUnit::Instructions, addr_kind: AddrKind::Physical, page_size: 4096 };
    let mut w = TraceWriter::create(&trace, meta).unwrap();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(17);
    let mut maps = 0u64;
    for i in 0..40_000u64 {
        let cpu = rng.gen_range(0..4u32);
        if i % 997 == 0 {
            for m in Access::mapping(rng.gen_range(0..1u64 << 30), 3 * Access::MAP_UNIT, cpu, rng.gen_range(1..500)) {
                w.write(&m).unwrap();
                maps += 1;
            }
        }
        let op = if rng.gen_bool(0.3) { Op::Write } else { Op::Read };
        let addr = if rng.gen_bool(0.5) { rng.gen_range(0..8u64 << 20) } else { i * 64 % (64 << 20) };
        w.write(&Access { time: rng.gen_range(1..400), addr, cpu, size: rng.gen_range(1..300), op, flags: 0 }).unwrap();
    }
    w.finish().unwrap();
    assert_eq!(maps, 41);
    let empty = d.path().join("no_hints.txt");
    std::fs::write(&empty, "# no hints\n").unwrap();
    let p = params("");
    let input = Input::File { path: &trace, format: None };
    for (scatter, limit) in [(None, 0), (Some(5), 0), (None, 20_001), (Some(5), 20_001)] {
        let fast = ReplayOptions { ns_per_instruction: 0.3, scatter, limit, ..Default::default() };
        let general = ReplayOptions { hint_file: Some(empty.clone()), ..fast.clone() };
        let a = replay_input(&input, &p, &fast).unwrap();
        let b = replay_input(&input, &p, &general).unwrap();
        assert_eq!(a.summary, b.summary, "scatter {scatter:?} limit {limit}");
        assert_eq!(a.bins, b.bins);
        let accesses = if limit == 0 { 40_000 + maps } else { limit };
        assert_eq!(a.summary["replay"]["trace_accesses"], accesses);
        if limit == 0 {
            assert_eq!(a.summary["requests"], 40_000);
        }
        assert!(a.summary["writes"].as_u64().unwrap() > 0);
        assert_eq!(a.summary["replay"]["scattered_pages"].is_null(), scatter.is_none());
    }
    let gen: toml::Table = toml::from_str(
        "accesses = 30000\nthreads = 3\nfile_share = 0.25\nfootprint = \"16MiB\"\ngap_instructions = 150",
    )
    .unwrap();
    let input = Input::Generator { name: "random", params: Some(&gen), seed: 4 };
    for (scatter, limit) in [(None, 0), (Some(5), 0), (Some(5), 20_001)] {
        let fast = ReplayOptions { ns_per_instruction: 0.3, scatter, limit, ..Default::default() };
        let general = ReplayOptions { hint_file: Some(empty.clone()), ..fast.clone() };
        let a = replay_input(&input, &p, &fast).unwrap();
        assert_eq!(
            a.summary,
            replay_input(&input, &p, &general).unwrap().summary,
            "generator, scatter {scatter:?} limit {limit}"
        );
        let accesses = a.summary["replay"]["trace_accesses"].as_u64().unwrap();
        let requests = a.summary["requests"].as_u64().unwrap();
        assert!(
            requests < accesses && requests >= 20_000,
            "{requests} requests of {accesses} accesses: mapping records skipped"
        );
    }
}
