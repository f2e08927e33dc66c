//! The cxl_flash benchmark's traces and device, shared by the criterion bench
//! (benches/cxl_flash.rs) and the profiling example (examples/cxl_flash_replay.rs) of tiersim-engine so that both
//! measure the same thing, and the device settings of the cxl_flash_matrix example, which the
//! PGO training (examples/pgo_train.rs) replays too.
#![allow(dead_code)] // each of the bench and the examples takes a part

use std::path::Path;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tiersim_core::{Access, Op, Params};
use tiersim_engine::flash_replay::{resolve_params, HotHints, ReplayOptions};
use tiersim_trace::{AddrKind, TimeUnit, TraceMeta, TraceWriter};

/// The benchmark traces: `random` (every request misses the 64 MiB cache; the back end saturates),
/// `stride` (nearly every request hits or merges) and `mixed` (issue 17's side-by-side trace).
pub const TRACES: [&str; 3] = ["random", "stride", "mixed"];

/// Write `accesses` of trace `name` (one of `TRACES`) to `path`.
pub fn write_trace(name: &str, accesses: u64, path: &Path) -> Result<(), String> {
    if name == "mixed" {
        return write_mixed(accesses, path, 4).map_err(|e| e.to_string());
    }
    let gen = match name {
        "random" => "footprint = \"4GiB\"\nwrite_ratio = 0.3\ngap_instructions = 200\nbase_addr = 0",
        "stride" => "footprint = \"4GiB\"\nstride = \"64B\"\nwrite_ratio = 0.1\ngap_instructions = 200\nbase_addr = 0",
        other => return Err(format!("unknown trace {other:?}: one of {TRACES:?}")),
    };
    let mut table: toml::Table = toml::from_str(gen).map_err(|e| e.to_string())?;
    table.insert("accesses".into(), toml::Value::Integer(accesses as i64));
    tiersim_trace::gen::generate(name, Some(&table), path, 1).map_err(|e| e.to_string())?;
    Ok(())
}

/// The configuration: the default 1 TiB ULL device with CFLRU and best-offset.
pub fn params() -> Params {
    resolve_params(
        Some("cxl_flash_ull"),
        Some(&toml::from_str("replacement = \"cflru\"\nprefetcher = \"best_offset\"").expect("params")),
    )
    .expect("params")
}

/// Generator instructions become time at this rate (0.5 ns: 100 ns between accesses).
pub const NS_PER_INSTRUCTION: f64 = 0.5;

/// Issue 17's trace shape, as tools/mqsim_diff.py's `make_trace` builds it (not its random
/// stream): 64 B accesses, half continuing a sequential stream that restarts at a random 4 KiB-
/// aligned address every 256 KiB, half uniform over 1 GiB; 70 % reads; exponential gaps of mean
/// 100 ns, times floored to ns.
pub fn write_mixed(accesses: u64, path: &Path, seed: u64) -> tiersim_core::Result<()> {
    const FOOTPRINT: u64 = 1 << 30;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let meta = TraceMeta { time_unit: TimeUnit::Ns, addr_kind: AddrKind::Physical, page_size: 4096 };
    let mut w = TraceWriter::create(path, meta)?;
    let (mut t, mut stream, mut left) = (0.0f64, 0u64, 0u32);
    for _ in 0..accesses {
        t += -(1.0 - rng.gen::<f64>()).ln() * 100.0;
        let addr = if rng.gen::<f64>() < 0.5 {
            if left == 0 {
                stream = rng.gen_range(0..FOOTPRINT / 4096) * 4096;
                left = 256 * 1024 / 64;
            }
            let a = stream % FOOTPRINT;
            stream += 64;
            left -= 1;
            a
        } else {
            rng.gen_range(0..FOOTPRINT / 64) * 64
        };
        let op = if rng.gen::<f64>() < 0.7 { Op::Read } else { Op::Write };
        w.write(&Access { time: t as u64, addr, cpu: 0, size: 64, op, flags: 0 })?;
    }
    w.finish()?;
    Ok(())
}

/// One device and replay setting: parameter overrides on the cxl_flash_ull preset, closed loop,
/// host LLC bytes, hints generated from the trace.
pub struct Setting {
    pub name: &'static str,
    overrides: &'static str,
    closed_loop: Option<u32>,
    llc_bytes: u64,
    hints: bool,
}

/// The settings that between them take every replacement policy and prefetcher, no MSHR, no
/// cache, write-validate, no-allocate, acknowledgement at fill, compat = mqsim_cxl with and
/// without a cache, host pins behind an LLC, closed loop, hashed and non-power-of-two sets and a
/// small device that garbage-collects. The first is the bench's, the preset's default.
pub fn settings() -> Vec<Setting> {
    let s = |name, overrides, closed_loop, llc_bytes, hints| Setting { name, overrides, closed_loop, llc_bytes, hints };
    vec![
        s("cflru_best_offset", "", None, 0, false),
        s("lru_next_n_line", "replacement = \"lru\"\nprefetcher = \"next_n_line\"", None, 0, false),
        s("fifo_feedback_directed", "replacement = \"fifo\"\nprefetcher = \"feedback_directed\"", None, 0, false),
        s(
            "random_leap_hashed",
            "replacement = \"random\"\nprefetcher = \"leap\"\ncache_index_hash = true\nseed = 5",
            None,
            0,
            false,
        ),
        s("no_mshr", "mshr_rows = 0\nno_mshr_max_inflight = 4096\nprefetcher = \"none\"", None, 0, false),
        s("no_cache", "cache_size = 0", None, 0, false),
        s("write_validate_ack_fill", "write_validate = true\nwrite_ack = \"fill\"", None, 0, false),
        s("no_allocate_closed_loop", "write_allocate = false\nprefetcher = \"none\"", Some(16), 0, false),
        s("compat", "compat = \"mqsim_cxl\"\nflash_blocks_per_plane = 32\nprefetcher = \"none\"", None, 0, false),
        s(
            "compat_no_cache",
            "compat = \"mqsim_cxl\"\nflash_blocks_per_plane = 32\ncache_size = 0\nmshr_rows = 0",
            None,
            0,
            false,
        ),
        s(
            "pins_llc",
            "hint_mode = \"pin\"\nhint_pin_full = \"replace_oldest\"\ncache_size = \"4MiB\"",
            None,
            1 << 20,
            true,
        ),
        s(
            "small_device_gc",
            "cache_size = \"3MiB\"\nwrite_buffer = \"256KiB\"\nmshr_rows = 64\nmshr_entries = 4\nflash_channels = 2\n\
             flash_ways = 2\nflash_planes = 2\nflash_blocks_per_plane = 16\nflash_pages_per_block = 64",
            None,
            0,
            false,
        ),
    ]
}

impl Setting {
    pub fn params(&self) -> Params {
        let table: toml::Table = toml::from_str(self.overrides).expect("overrides");
        resolve_params(Some("cxl_flash_ull"), Some(&table)).expect("params")
    }

    /// Replay options for the bench's traces (issue times at `NS_PER_INSTRUCTION`), stopping after
    /// `limit` accesses (0: all).
    pub fn options(&self, limit: u64) -> ReplayOptions {
        ReplayOptions {
            ns_per_instruction: NS_PER_INSTRUCTION,
            closed_loop: self.closed_loop,
            llc_bytes: self.llc_bytes,
            llc_ways: 16,
            hot_hints: self.hints.then_some(HotHints { top: 0.05, probability: 0.5, lead: 64, seed: 3 }),
            limit,
            ..Default::default()
        }
    }
}
