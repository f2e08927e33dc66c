//! The cxl_flash benchmark's traces and device, shared by the criterion bench
//! (benches/cxl_flash.rs) and the profiling example (examples/cxl_flash_replay.rs) of tiersim-engine so that both
//! measure the same thing.

use std::path::Path;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tiersim_core::{Access, Op, Params};
use tiersim_engine::flash_replay::resolve_params;
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
