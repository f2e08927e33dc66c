//! The cxl_flash benchmark's traces and device, shared by the criterion bench
//! (benches/cxl_flash.rs) and the profiling example (examples/cxl_flash_replay.rs) of tiersim-engine so that both
//! measure the same thing.

use std::path::Path;

use tiersim_core::Params;
use tiersim_engine::flash_replay::resolve_params;

/// The benchmark traces: `random` (every request misses the 64 MiB cache; the back end saturates)
/// and `stride` (nearly every request hits or merges).
pub const TRACES: [&str; 2] = ["random", "stride"];

/// Write `accesses` of trace `name` (one of `TRACES`) to `path`.
pub fn write_trace(name: &str, accesses: u64, path: &Path) -> Result<(), String> {
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
