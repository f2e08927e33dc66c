//! The cxl_flash replay results a speed change must leave byte-identical: the three bench traces
//! (random, stride, mixed) each replayed against 12 device and replay settings that between them
//! take every replacement policy and prefetcher, no MSHR, no cache, write-validate, no-allocate,
//! acknowledgement at fill, compat = mqsim_cxl with and without a cache, host pins (generated
//! hints, replace_oldest), an LLC, closed loop, hashed and non-power-of-two sets and a small
//! device that garbage-collects. Writes one line per replay (its name, summary and histogram bins
//! as JSON) to OUT; run it before and after a change and `cmp` the two files.
//!
//! cargo run --release -p tiersim-engine --example cxl_flash_matrix -- OUT [accesses per trace]

use tiersim_engine::flash_replay::{replay_input, Input};

#[path = "../benches/common/cxl_flash_trace.rs"]
mod common;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(out) = args.first() else {
        eprintln!("usage: cxl_flash_matrix OUT [accesses per trace]");
        std::process::exit(2);
    };
    let accesses: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(200_000);
    let dir = tempfile::tempdir().expect("temp dir");
    let mut lines = Vec::new();
    for trace_name in common::TRACES {
        let trace = dir.path().join(format!("{trace_name}.trace"));
        common::write_trace(trace_name, accesses, &trace).expect("trace");
        for setting in common::settings() {
            let (name, params, opts) = (setting.name, setting.params(), setting.options(0));
            let r = replay_input(&Input::File { path: &trace, format: None }, &params, &opts).expect("replay");
            let s = &r.summary;
            println!(
                "{trace_name}/{name}: hits {} under-miss {} misses {}; flash reads {} programs {}; stalls {}",
                s["hits"],
                s["hits_under_miss"],
                s["misses"],
                s["flash"]["reads"],
                s["flash"]["programs"],
                s["mshr"]["stall_rows"]
            );
            lines.push(
                serde_json::json!({ "replay": format!("{trace_name}/{name}"), "summary": s, "bins": r.bins })
                    .to_string(),
            );
        }
    }
    std::fs::write(out, lines.join("\n") + "\n").expect("write the output");
}
