//! The cxl_flash replay results a speed change must leave byte-identical: the three bench traces
//! (random, stride, mixed) each replayed against 12 device and replay settings that between them
//! take every replacement policy and prefetcher, no MSHR, no cache, write-validate, no-allocate,
//! acknowledgement at fill, compat = mqsim_cxl with and without a cache, host pins (generated
//! hints, replace_oldest), an LLC, closed loop, hashed and non-power-of-two sets and a small
//! device that garbage-collects. Writes one line per replay (its name, summary and histogram bins
//! as JSON) to OUT; run it before and after a change and `cmp` the two files.
//!
//! cargo run --release -p tiersim-engine --example cxl_flash_matrix -- OUT [accesses per trace]

use tiersim_engine::flash_replay::{replay_input, resolve_params, HotHints, Input, ReplayOptions};

#[path = "../benches/common/cxl_flash_trace.rs"]
#[allow(dead_code)] // the bench's device (`params`): each replay here builds its own
mod common;

/// (name, parameter overrides on the cxl_flash_ull preset, closed loop, LLC bytes, generated hints)
type Setting = (&'static str, &'static str, Option<u32>, u64, bool);

const SMALL_DEVICE: &str = "flash_channels = 2\nflash_ways = 2\nflash_planes = 2\nflash_blocks_per_plane = 16\n\
                            flash_pages_per_block = 64\n";

fn settings() -> Vec<Setting> {
    vec![
        ("cflru_best_offset", "", None, 0, false),
        ("lru_next_n_line", "replacement = \"lru\"\nprefetcher = \"next_n_line\"", None, 0, false),
        ("fifo_feedback_directed", "replacement = \"fifo\"\nprefetcher = \"feedback_directed\"", None, 0, false),
        ("random_leap_hashed", "replacement = \"random\"\nprefetcher = \"leap\"\ncache_index_hash = true\nseed = 5", None, 0, false),
        ("no_mshr", "mshr_rows = 0\nno_mshr_max_inflight = 4096\nprefetcher = \"none\"", None, 0, false),
        ("no_cache", "cache_size = 0", None, 0, false),
        ("write_validate_ack_fill", "write_validate = true\nwrite_ack = \"fill\"", None, 0, false),
        ("no_allocate_closed_loop", "write_allocate = false\nprefetcher = \"none\"", Some(16), 0, false),
        ("compat", "compat = \"mqsim_cxl\"\nflash_blocks_per_plane = 32\nprefetcher = \"none\"", None, 0, false),
        ("compat_no_cache", "compat = \"mqsim_cxl\"\nflash_blocks_per_plane = 32\ncache_size = 0\nmshr_rows = 0", None, 0, false),
        ("pins_llc", "hint_mode = \"pin\"\nhint_pin_full = \"replace_oldest\"\ncache_size = \"4MiB\"", None, 1 << 20, true),
        ("small_device_gc", "cache_size = \"3MiB\"\nwrite_buffer = \"256KiB\"\nmshr_rows = 64\nmshr_entries = 4", None, 0, false),
    ]
}

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
        for (name, overrides, closed_loop, llc_bytes, hints) in settings() {
            let mut table: toml::Table = toml::from_str(overrides).expect("overrides");
            if name == "small_device_gc" {
                table.extend(toml::from_str::<toml::Table>(SMALL_DEVICE).expect("small device"));
            }
            let params = resolve_params(Some("cxl_flash_ull"), Some(&table)).expect("params");
            let opts = ReplayOptions {
                ns_per_instruction: common::NS_PER_INSTRUCTION,
                closed_loop,
                llc_bytes,
                llc_ways: 16,
                hot_hints: hints.then_some(HotHints { top: 0.05, probability: 0.5, lead: 64, seed: 3 }),
                ..Default::default()
            };
            let r = replay_input(&Input::File { path: &trace, format: None }, &params, &opts).expect("replay");
            let s = &r.summary;
            println!(
                "{trace_name}/{name}: hits {} under-miss {} misses {}; flash reads {} programs {}; stalls {}",
                s["hits"], s["hits_under_miss"], s["misses"], s["flash"]["reads"], s["flash"]["programs"], s["mshr"]["stall_rows"]
            );
            lines.push(serde_json::json!({ "replay": format!("{trace_name}/{name}"), "summary": s, "bins": r.bins }).to_string());
        }
    }
    std::fs::write(out, lines.join("\n") + "\n").expect("write the output");
}
