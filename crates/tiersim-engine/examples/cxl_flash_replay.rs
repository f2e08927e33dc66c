//! One replay of the cxl_flash benchmark's trace (benches/cxl_flash.rs: 10M random, stride or mixed
//! accesses, cflru + best_offset, default 1 TiB device), printing requests/s (by wall time, and by
//! the replay thread's CPU time, which other jobs on a shared machine disturb less; the trace is
//! decoded on a thread of its own, counted in the process's CPU time), the process's peak
//! resident set (VmHWM) and the summary's key figures, for profiling (`perf record`, callgrind)
//! and for the peak memory of the benchmark configuration.
//!
//! cargo run --release -p tiersim-engine --example cxl_flash_replay -- [random|stride|mixed] [accesses] [out.json|-] [compat]
//!
//! `out.json` receives the summary and histogram bins, to check that a change to the code left
//! the results byte-identical. `compat` (e.g. `mqsim_cxl`) sets the device's compatibility mode.

use std::time::Instant;

use tiersim_engine::flash_replay::{replay_input, Input, ReplayOptions};

#[path = "../benches/common/cxl_flash_trace.rs"]
mod common;

fn vm_hwm_kib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines().find(|l| l.starts_with("VmHWM:"))?.split_whitespace().nth(1)?.parse().ok()
}

/// CPU time this thread has run, in ns (Linux schedstat), when available.
fn thread_cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat").ok()?.split_whitespace().next()?.parse().ok()
}

/// CPU time of the whole process (every thread, the trace decoding one included), in ns, at
/// the kernel's tick resolution (/proc/self/stat utime + stime, in USER_HZ = 100 ticks a second).
fn process_cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces) start at the state, field 3.
    let rest = s.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks * 10_000_000)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let name = args.first().map_or("random", String::as_str);
    let accesses: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(10_000_000);
    let dir = tempfile::tempdir().expect("temp dir");
    let trace = dir.path().join(format!("{name}.trace"));
    if let Err(e) = common::write_trace(name, accesses, &trace) {
        eprintln!("{e}");
        std::process::exit(2);
    }
    let params = match args.get(3) {
        None => common::params(),
        Some(mode) => {
            let set = format!("replacement = \"cflru\"\nprefetcher = \"best_offset\"\ncompat = \"{mode}\"");
            tiersim_engine::flash_replay::resolve_params(
                Some("cxl_flash_ull"),
                Some(&toml::from_str(&set).expect("params")),
            )
            .expect("params")
        }
    };
    let opts = ReplayOptions { ns_per_instruction: common::NS_PER_INSTRUCTION, ..Default::default() };
    let start = Instant::now();
    let cpu_start = thread_cpu_ns();
    let all_start = process_cpu_ns();
    let r = replay_input(&Input::File { path: &trace, format: None }, &params, &opts).expect("replay");
    let secs = start.elapsed().as_secs_f64();
    let cpu_secs = match (cpu_start, thread_cpu_ns()) {
        (Some(a), Some(b)) => (b - a) as f64 / 1e9,
        _ => f64::NAN,
    };
    let all_secs = match (all_start, process_cpu_ns()) {
        (Some(a), Some(b)) => (b - a) as f64 / 1e9,
        _ => f64::NAN,
    };
    let s = &r.summary;
    let requests = s["requests"].as_f64().unwrap_or(0.0);
    println!(
        "{name}: {} requests in {secs:.2} s = {:.2} M/s (replay thread CPU {cpu_secs:.2} s = {:.2} M/s, process CPU {all_secs:.2} s); VmHWM {} KiB; \
         hits {} under-miss {} misses {}; flash reads {} programs {}; p99 {} ns; FTL state {} KiB",
        s["requests"],
        requests / secs / 1e6,
        requests / cpu_secs / 1e6,
        vm_hwm_kib().unwrap_or(0),
        s["hits"],
        s["hits_under_miss"],
        s["misses"],
        s["flash"]["reads"],
        s["flash"]["programs"],
        s["latency_ns"]["all"]["p99"],
        s["ftl"]["state_bytes"].as_u64().unwrap_or(0) >> 10,
    );
    if let Some(out) = args.get(2).filter(|o| *o != "-") {
        let all = serde_json::json!({ "summary": s, "bins": r.bins });
        std::fs::write(out, serde_json::to_string_pretty(&all).expect("json")).expect("write the output");
    }
}
