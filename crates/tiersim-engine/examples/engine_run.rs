//! One run of the engine on a trace file, printing accesses/s by wall time and by the thread's
//! CPU time (which other jobs on a shared machine disturb less), for profiling (`perf record`,
//! callgrind) and A/B timing of the engine bench's cases (benches/engine.rs writes their traces
//! to target/tmp/bench-*.trace).
//!
//! cargo run --release -p tiersim-engine --example engine_run -- PLATFORM POLICY TRACE [KEY=VALUE...] [--out FILE] [--repeat N]
//!
//! `--out FILE` receives the summary, the time series and the latency histogram, to check that a
//! change to the code left the results byte-identical. `--repeat N` runs N times in one process,
//! as criterion's iterations do (each allocating its page table afresh from memory an earlier
//! run freed), and prints a line per run.

use std::path::Path;
use std::time::Instant;

use tiersim_engine::{RunRequest, SimOptions, TraceInput};

/// CPU time this thread has run, in ns (Linux schedstat), when available.
fn thread_cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat").ok()?.split_whitespace().next()?.parse().ok()
}

/// The value of option `name`, removed from `args` with it.
fn take_option(args: &mut Vec<String>, name: &str) -> Option<String> {
    let i = args.iter().position(|a| a == name)?;
    let value = args.get(i + 1).cloned().unwrap_or_else(|| usage());
    args.drain(i..i + 2);
    Some(value)
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let out = take_option(&mut args, "--out");
    let repeat = take_option(&mut args, "--repeat").map_or(1, |n| n.parse::<u32>().unwrap_or_else(|_| usage()));
    if args.len() < 3 {
        usage();
    }
    for _ in 0..repeat {
        run_once(&args, out.as_deref());
    }
}

fn run_once(args: &[String], out: Option<&str>) {
    let (platform, policy, trace) = (&args[0], &args[1], Path::new(&args[2]));
    let overrides = &args[3..];
    let start = Instant::now();
    let cpu_start = thread_cpu_ns();
    let req = RunRequest {
        platform,
        overrides,
        policy,
        policy_params: None,
        trace: TraceInput::File(trace),
        seed: 0,
        options: SimOptions::default(),
    };
    let run = tiersim_engine::run(&req).unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(1);
    });
    let secs = start.elapsed().as_secs_f64();
    let cpu_secs = match (cpu_start, thread_cpu_ns()) {
        (Some(a), Some(b)) => (b - a) as f64 / 1e9,
        _ => f64::NAN,
    };
    let accesses = run.summary["trace_accesses"].as_f64().unwrap_or(0.0);
    println!(
        "{policy} on {platform}: {accesses} accesses in {secs:.3} s wall, {cpu_secs:.3} s cpu: {:.2} M/s wall, {:.2} M/s cpu",
        accesses / secs / 1e6,
        accesses / cpu_secs / 1e6
    );
    if let Some(out) = out {
        let body = format!("{}\n{:?}\n{:?}\n", run.summary, run.timeseries, run.latency_hist);
        std::fs::write(out, body).unwrap_or_else(|e| {
            eprintln!("writing {out}: {e}");
            std::process::exit(1);
        });
    }
}

fn usage() -> ! {
    eprintln!("usage: engine_run PLATFORM POLICY TRACE [KEY=VALUE...] [--out FILE] [--repeat N]");
    std::process::exit(2);
}
