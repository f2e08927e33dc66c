//! The functions `tiersim._native` exports, each a `#[pyfunction]`; lib.rs holds the helpers
//! they share and registers them in the module.

use std::path::Path;
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use tiersim_core::{Error, Result};
use tiersim_engine::{RunRequest, SimOptions, TraceInput};
use tiersim_trace::convert::{Format, TextOptions};
use tiersim_trace::stats::StatsOptions;
use tiersim_trace::tools::{MixInput, SampleOptions};

use crate::{
    curve_paths, curves_read, guarded, python_progress, reraise_stopped, src_format, stats_json, table, target_of,
    text_options, CaptureProgress, TiersimError,
};

/// A deliberate panic, so tests can check that one reaches Python as one line.
#[pyfunction]
pub(crate) fn _panic_for_test(py: Python<'_>) -> PyResult<()> {
    guarded(py, || -> Result<()> { panic!("attempt to divide by zero") })
}

#[pyfunction]
#[pyo3(signature = (platform, policy, trace, overrides=Vec::new(), policy_params="", seed=0, generator=None, generator_params="", progress=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn run(
    py: Python<'_>,
    platform: String,
    policy: String,
    trace: String,
    overrides: Vec<String>,
    policy_params: &str,
    seed: u64,
    generator: Option<String>,
    generator_params: &str,
    progress: Option<PyObject>,
) -> PyResult<PyObject> {
    let stopped = Mutex::new(None);
    let out = guarded(py, || {
        let pp = table("policy_params", policy_params)?;
        let gp = table("generator_params", generator_params)?;
        let input = match &generator {
            Some(name) => TraceInput::Generator { name, params: gp.as_ref() },
            None => TraceInput::File(Path::new(&trace)),
        };
        let req = RunRequest {
            platform: &platform,
            overrides: &overrides,
            policy: &policy,
            policy_params: pp.as_ref(),
            trace: input,
            seed,
            options: SimOptions::default(),
        };
        match &progress {
            Some(callback) => tiersim_engine::run_with_progress(&req, &mut python_progress(callback, &stopped)),
            None => tiersim_engine::run(&req),
        }
    });
    reraise_stopped(stopped)?;
    let out = out?;
    let d = PyDict::new_bound(py);
    d.set_item("summary", out.summary.to_string())?;
    d.set_item("config", out.config)?;
    let ts = PyDict::new_bound(py);
    let t = out.timeseries;
    ts.set_item("epoch", PyList::new_bound(py, t.epoch))?;
    ts.set_item("t_start_ns", PyList::new_bound(py, t.t_start_ns))?;
    ts.set_item("t_end_ns", PyList::new_bound(py, t.t_end_ns))?;
    ts.set_item("node", PyList::new_bound(py, t.node))?;
    ts.set_item("pages", PyList::new_bound(py, t.pages))?;
    ts.set_item("accesses", PyList::new_bound(py, t.accesses))?;
    ts.set_item("reads", PyList::new_bound(py, t.reads))?;
    ts.set_item("writes", PyList::new_bound(py, t.writes))?;
    ts.set_item("bytes", PyList::new_bound(py, t.bytes))?;
    ts.set_item("bandwidth_gbs", PyList::new_bound(py, t.bandwidth_gbs))?;
    ts.set_item("migrated_in", PyList::new_bound(py, t.migrated_in))?;
    ts.set_item("migrated_out", PyList::new_bound(py, t.migrated_out))?;
    if let Some(hot) = t.hotness {
        for level in 0..9 {
            ts.set_item(format!("hot_{level}"), PyList::new_bound(py, hot.iter().map(|h| h[level])))?;
        }
    }
    d.set_item("timeseries", ts)?;
    let hist = PyDict::new_bound(py);
    let h = out.latency_hist;
    hist.set_item("node", PyList::new_bound(py, h.node))?;
    hist.set_item("low_ns", PyList::new_bound(py, h.low_ns))?;
    hist.set_item("high_ns", PyList::new_bound(py, h.high_ns))?;
    hist.set_item("count", PyList::new_bound(py, h.count))?;
    d.set_item("latency_hist", hist)?;
    Ok(d.into())
}

#[pyfunction]
pub(crate) fn inspect(py: Python<'_>, path: String) -> PyResult<String> {
    guarded(py, || tiersim_trace::inspect(Path::new(&path)).map(|v| v.to_string()))
}

#[pyfunction]
pub(crate) fn verify(py: Python<'_>, path: String) -> PyResult<String> {
    guarded(py, || tiersim_trace::verify(Path::new(&path)).map(|v| v.to_string()))
}

#[pyfunction]
#[pyo3(signature = (name, out, params="", seed=0))]
pub(crate) fn generate(py: Python<'_>, name: String, out: String, params: &str, seed: u64) -> PyResult<String> {
    guarded(py, || {
        let p = table("params", params)?;
        tiersim_trace::gen::generate(&name, p.as_ref(), Path::new(&out), seed)?;
        tiersim_trace::inspect(Path::new(&out)).map(|v| v.to_string())
    })
}

/// Generator `name` built from `params` and dropped: its name, keys and values checked, as a
/// sweep does before any run starts.
#[pyfunction]
#[pyo3(signature = (name, params="", seed=0))]
pub(crate) fn check_generator(py: Python<'_>, name: String, params: &str, seed: u64) -> PyResult<()> {
    guarded(py, || {
        let p = table("params", params)?;
        tiersim_trace::gen::open_generator(&name, p.as_ref(), seed).map(drop)
    })
}

#[pyfunction]
#[pyo3(signature = (src, src_format, dst, dst_format, addr_kind="virtual", page_size=4096, ns_per_instruction=0.5, csv_time_unit="instructions"))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn convert(
    py: Python<'_>,
    src: String,
    src_format: Option<String>,
    dst: String,
    dst_format: String,
    addr_kind: &str,
    page_size: u32,
    ns_per_instruction: f64,
    csv_time_unit: &str,
) -> PyResult<String> {
    let opts = text_options(addr_kind, page_size, ns_per_instruction, csv_time_unit);
    guarded(py, || {
        let opts = opts?;
        let from = self::src_format(src_format.as_deref())?;
        let to = Format::parse(&dst_format)?;
        stats_json(&tiersim_trace::convert::convert(Path::new(&src), from, Path::new(&dst), to, &opts)?)
    })
}

#[pyfunction]
#[pyo3(signature = (src, dst, src_format=None, start=None, end=None, cpus=None, every=1))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn sample(
    py: Python<'_>,
    src: String,
    dst: String,
    src_format: Option<String>,
    start: Option<u64>,
    end: Option<u64>,
    cpus: Option<Vec<u32>>,
    every: u64,
) -> PyResult<String> {
    guarded(py, || {
        let from = self::src_format(src_format.as_deref())?;
        let opts = SampleOptions { window: (start, end), cpus, every };
        tiersim_trace::tools::sample(Path::new(&src), from, Path::new(&dst), &opts, &TextOptions::default())?;
        tiersim_trace::inspect(Path::new(&dst)).map(|v| v.to_string())
    })
}

#[pyfunction]
#[pyo3(signature = (inputs, dst, first_cpus=None))]
pub(crate) fn mix(py: Python<'_>, inputs: Vec<String>, dst: String, first_cpus: Option<Vec<u32>>) -> PyResult<String> {
    guarded(py, || {
        if let Some(f) = &first_cpus {
            if f.len() != inputs.len() {
                return Err(Error::arg("first_cpus", format!("{} values for {} traces", f.len(), inputs.len())));
            }
        }
        let paths: Vec<&Path> = inputs.iter().map(Path::new).collect();
        let mix_inputs: Vec<MixInput<'_>> = paths
            .iter()
            .enumerate()
            .map(|(i, p)| MixInput { path: p, format: None, first_cpu: first_cpus.as_ref().map(|f| f[i]) })
            .collect();
        tiersim_trace::tools::mix(&mix_inputs, Path::new(&dst), &TextOptions::default())?;
        tiersim_trace::inspect(Path::new(&dst)).map(|v| v.to_string())
    })
}

#[pyfunction]
#[pyo3(signature = (path, src_format=None, max_points=100_000))]
pub(crate) fn trace_stats(
    py: Python<'_>,
    path: String,
    src_format: Option<String>,
    max_points: usize,
) -> PyResult<String> {
    guarded(py, || {
        let from = self::src_format(src_format.as_deref())?;
        let v = tiersim_trace::stats::trace_stats(
            Path::new(&path),
            from,
            &TextOptions::default(),
            &StatsOptions { max_points },
        )?;
        Ok(v.to_string())
    })
}

#[pyfunction]
pub(crate) fn list_plugins(py: Python<'_>) -> PyResult<String> {
    guarded(py, || tiersim_engine::list_plugins().map(|v| v.to_string()))
}

#[pyfunction]
#[pyo3(signature = (platform, overrides=Vec::new()))]
pub(crate) fn resolve_platform(py: Python<'_>, platform: String, overrides: Vec<String>) -> PyResult<String> {
    guarded(py, || {
        let p = tiersim_engine::platform::load(&platform, &overrides)?;
        toml::to_string(&p.resolved).map_err(|e| Error::Sim(format!("writing the resolved platform: {e}")))
    })
}

#[pyfunction]
#[pyo3(signature = (device_or_preset, params="", tests=Vec::new(), quick=false, ratios=Vec::new(), compare=Vec::new(), cycles_ghz=None, node=None, port_ns=0.0))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn characterize(
    py: Python<'_>,
    device_or_preset: String,
    params: &str,
    tests: Vec<String>,
    quick: bool,
    ratios: Vec<u32>,
    compare: Vec<String>,
    cycles_ghz: Option<f64>,
    node: Option<String>,
    port_ns: f64,
) -> PyResult<String> {
    use tiersim_devices::{calibrate as cal, characterize as ch};
    guarded(py, || {
        let p = table("params", params)?;
        let target = target_of(&device_or_preset, p.as_ref(), node.as_deref())?;
        let mut ratios = ratios;
        let set = if compare.is_empty() {
            None
        } else {
            let units = tiersim_devices::curves::Units { cycles_ghz, port_ns };
            let set = tiersim_devices::curves::read_paths(&curve_paths(&compare), &ratios, units)?;
            // Compare at the measured mixes unless the caller named others.
            if ratios.is_empty() {
                ratios = set.curves.iter().map(|c| c.percent()).collect();
            }
            Some(set)
        };
        let tables = ch::characterize(&target, &tests, quick, &ratios)?;
        let mut out = ch::to_json(&target, &tables);
        if let Some(set) = set {
            let bwlat = tables
                .iter()
                .find(|t| t.name == "bwlat")
                .ok_or_else(|| Error::arg("compare", "needs the bwlat test (--test bwlat)"))?;
            out["measured"] = cal::curves_json(&set.curves);
            out["comparison"] = cal::to_json(&cal::compare(bwlat, &set.curves)?);
            out["read"] = curves_read(&set);
        }
        Ok(out.to_string())
    })
}

#[pyfunction]
#[pyo3(signature = (curves, device, base, params="", ratios=Vec::new(), cycles_ghz=None, port_ns=0.0))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn calibrate(
    py: Python<'_>,
    curves: Vec<String>,
    device: String,
    base: String,
    params: &str,
    ratios: Vec<u32>,
    cycles_ghz: Option<f64>,
    port_ns: f64,
) -> PyResult<String> {
    use tiersim_devices::{calibrate as cal, characterize as ch};
    guarded(py, || {
        let p = table("params", params)?;
        let units = tiersim_devices::curves::Units { cycles_ghz, port_ns };
        let set = tiersim_devices::curves::read_paths(&curve_paths(&curves), &ratios, units)?;
        let c = cal::calibrate(&set, &curves.join(" "), &device, &base, p.as_ref())?;
        Ok(serde_json::json!({
            "device": c.fit.device,
            "fitted": toml::to_string(&c.fit.params).unwrap_or_default(),
            "platform_toml": c.platform_toml,
            "preset_toml": c.preset_toml,
            "table": c.table.to_json(),
            "measured": cal::curves_json(&set.curves),
            "comparison": cal::to_json(&c.comparisons),
            "read": curves_read(&set),
            "base": base,
            "target": ch::Target::resolve(&base, p.as_ref())?.name,
        })
        .to_string())
    })
}

#[pyfunction]
#[pyo3(signature = (params=""))]
pub(crate) fn filebench(py: Python<'_>, params: &str) -> PyResult<String> {
    guarded(py, || {
        let t = table("params", params)?.unwrap_or_default();
        let out = tiersim_engine::storage::Bench::new(&t)?.run()?;
        Ok(out.to_json().to_string())
    })
}

#[pyfunction]
#[pyo3(signature = (source, out, virt_out=None, params="", seed=0, pid=None, pipe_capacity=None, progress=None, source_name=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn capture(
    py: Python<'_>,
    source: String,
    out: String,
    virt_out: Option<String>,
    params: &str,
    seed: u64,
    pid: Option<u32>,
    pipe_capacity: Option<usize>,
    progress: Option<Bound<'_, CaptureProgress>>,
    source_name: Option<String>,
) -> PyResult<String> {
    let target = CaptureTarget { out: &out, virt_out: virt_out.as_deref(), params, seed, pid, pipe_capacity };
    run_capture(py, target, progress, |req, progress| {
        let mut input = std::fs::File::open(&source).map_err(|e| Error::io(&source, e))?;
        let name = source_name.as_deref().unwrap_or(&source);
        tiersim_trace::capture::capture(&mut input, Path::new(name), req, progress)
    })
}

/// What every capture binding is given of its traces and parameters.
struct CaptureTarget<'a> {
    out: &'a str,
    virt_out: Option<&'a str>,
    params: &'a str,
    seed: u64,
    pid: Option<u32>,
    pipe_capacity: Option<usize>,
}

/// The part the capture bindings share: the progress Python may hand in, the request, and the
/// report as JSON; `merge` is the path's own work.
fn run_capture(
    py: Python<'_>,
    target: CaptureTarget<'_>,
    progress: Option<Bound<'_, CaptureProgress>>,
    merge: impl FnOnce(
            &tiersim_trace::capture::CaptureRequest<'_>,
            &tiersim_trace::capture::Progress,
        ) -> Result<tiersim_trace::capture::CaptureReport>
        + Send,
) -> PyResult<String> {
    use tiersim_trace::capture::{CaptureRequest, Progress};
    let progress = progress.map_or_else(|| Arc::new(Progress::default()), |p| p.get().inner.clone());
    guarded(py, || {
        let p = table("params", target.params)?;
        let req = CaptureRequest {
            out: Path::new(target.out),
            virt_out: target.virt_out.map(Path::new),
            params: p.as_ref(),
            seed: target.seed,
            pid: target.pid,
            pipe_capacity: target.pipe_capacity,
        };
        let report = merge(&req, &progress)?;
        serde_json::to_string(&report).map_err(|e| Error::Sim(format!("writing the capture report: {e}")))
    })
}

/// Size a memfd for the instrumented path's streaming merge and write its layout.
#[pyfunction]
pub(crate) fn capture_shm_init(py: Python<'_>, fd: i32) -> PyResult<()> {
    guarded(py, || tiersim_trace::capture::stream::init_shm(fd))
}

/// Merge, while it runs, what the program `pid` publishes into the memfd `fd` (the instrumented
/// path) into traces.
#[pyfunction]
#[pyo3(signature = (fd, pid, out, virt_out=None, params="", seed=0, progress=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn capture_stream(
    py: Python<'_>,
    fd: i32,
    pid: u32,
    out: String,
    virt_out: Option<String>,
    params: &str,
    seed: u64,
    progress: Option<Bound<'_, CaptureProgress>>,
) -> PyResult<String> {
    let target =
        CaptureTarget { out: &out, virt_out: virt_out.as_deref(), params, seed, pid: Some(pid), pipe_capacity: None };
    run_capture(py, target, progress, |req, progress| {
        tiersim_trace::capture::stream::capture_stream(fd, pid, req, progress)
    })
}

/// Merge the per-thread files in `dir` that tiersim's Valgrind tool wrote into traces.
#[pyfunction]
#[pyo3(signature = (dir, out, virt_out=None, params="", seed=0, progress=None))]
pub(crate) fn capture_instrumented(
    py: Python<'_>,
    dir: String,
    out: String,
    virt_out: Option<String>,
    params: &str,
    seed: u64,
    progress: Option<Bound<'_, CaptureProgress>>,
) -> PyResult<String> {
    let target =
        CaptureTarget { out: &out, virt_out: virt_out.as_deref(), params, seed, pid: None, pipe_capacity: None };
    run_capture(py, target, progress, |req, progress| {
        tiersim_trace::capture::instrumented::capture_instrumented(Path::new(&dir), req, progress)
    })
}

/// JSON object: the environment the tracing runtime reads for a capture with `params` into `dir`.
#[pyfunction]
#[pyo3(signature = (dir, params=""))]
pub(crate) fn capture_runtime_env(py: Python<'_>, dir: String, params: &str) -> PyResult<String> {
    guarded(py, || {
        let p = table("params", params)?;
        let env = tiersim_trace::capture::instrumented::runtime_env(p.as_ref(), Path::new(&dir))?;
        let map: serde_json::Map<String, serde_json::Value> = env.into_iter().map(|(k, v)| (k, v.into())).collect();
        Ok(serde_json::Value::Object(map).to_string())
    })
}

/// The resolved capture parameters as JSON, or the error a capture with them would give.
#[pyfunction]
#[pyo3(signature = (params=""))]
pub(crate) fn capture_resolve(py: Python<'_>, params: &str) -> PyResult<String> {
    guarded(py, || {
        let p = table("params", params)?;
        let t = tiersim_trace::capture::resolve_params(p.as_ref())?;
        serde_json::to_string(&t).map_err(|e| Error::Sim(format!("writing the capture parameters: {e}")))
    })
}

/// The capture's parameters: name, kind, default, bounds, help.
#[pyfunction]
pub(crate) fn capture_params() -> String {
    let info = tiersim_core::params::PluginInfo {
        name: "capture",
        summary: "Valgrind lackey stream, or the -fsanitize=thread tracing runtime -> LLC filter -> virtual-to-physical mapping -> native traces",
        source: "Yang et al., \"Overcoming the Memory Wall with CXL-Enabled SSDs\", USENIX ATC 2023, sec. 3.1",
        params: tiersim_trace::capture::PARAMS,
    };
    info.to_json().to_string()
}

#[pyfunction]
#[pyo3(signature = (trace=None, src_format=None, preset=None, params="", closed_loop=None, ns_per_instruction=0.5, limit=0, llc_bytes=0, llc_ways=16, hint_file=None, hint_top=None, hint_probability=0.1, hint_lead=1000, seed=0, generator=None, generator_params="", scatter=None, progress=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn flash_replay(
    py: Python<'_>,
    trace: Option<String>,
    src_format: Option<String>,
    preset: Option<String>,
    params: &str,
    closed_loop: Option<u32>,
    ns_per_instruction: f64,
    limit: u64,
    llc_bytes: u64,
    llc_ways: u32,
    hint_file: Option<String>,
    hint_top: Option<f64>,
    hint_probability: f64,
    hint_lead: usize,
    seed: u64,
    generator: Option<String>,
    generator_params: &str,
    scatter: Option<u64>,
    progress: Option<PyObject>,
) -> PyResult<String> {
    use tiersim_engine::flash_replay::{self as replay, HotHints, Input, ReplayOptions};
    let stopped = Mutex::new(None);
    let out = guarded(py, || {
        let overrides = table("params", params)?;
        let gp = table("generator_params", generator_params)?;
        let p = replay::resolve_params(preset.as_deref(), overrides.as_ref())?;
        let format = self::src_format(src_format.as_deref())?;
        let input = match (&trace, &generator) {
            (Some(t), None) => Input::File { path: Path::new(t), format },
            (None, Some(name)) => Input::Generator { name, params: gp.as_ref(), seed },
            _ => return Err(Error::arg("trace", "give exactly one of a trace file and a generator")),
        };
        let opts = ReplayOptions {
            closed_loop,
            ns_per_instruction,
            limit,
            llc_bytes,
            llc_ways,
            hint_file: hint_file.map(Into::into),
            hot_hints: hint_top.map(|top| HotHints { top, probability: hint_probability, lead: hint_lead, seed }),
            scatter,
        };
        let r = match &progress {
            Some(callback) => {
                replay::replay_input_observed(&input, &p, &opts, Some(&mut python_progress(callback, &stopped)))
            }
            None => replay::replay_input(&input, &p, &opts),
        }?;
        let resolved = toml::to_string(&p.to_toml()).map_err(|e| Error::Sim(format!("writing the parameters: {e}")))?;
        let bins = serde_json::json!({
            "class": r.bins.iter().map(|b| b.0).collect::<Vec<_>>(),
            "low_ns": r.bins.iter().map(|b| b.1).collect::<Vec<_>>(),
            "high_ns": r.bins.iter().map(|b| b.2).collect::<Vec<_>>(),
            "count": r.bins.iter().map(|b| b.3).collect::<Vec<_>>(),
        });
        Ok(serde_json::json!({"summary": r.summary, "params": resolved, "bins": bins}).to_string())
    });
    reraise_stopped(stopped)?;
    out
}

/// Write `columns`, a list of (name, kind, values) with kind "i64", "f64" or "str" and None for
/// a null, to `path` as one Parquet file. A failure to create or write the file is an OSError
/// with its errno and `path`, as Python's own file functions raise it.
#[pyfunction]
pub(crate) fn write_parquet(
    py: Python<'_>,
    path: String,
    columns: Vec<(String, String, Bound<'_, PyAny>)>,
) -> PyResult<()> {
    use crate::parquet::{self, Column, Values, WriteError};
    let columns = columns
        .into_iter()
        .map(|(name, kind, values)| {
            let values = match kind.as_str() {
                "i64" => Values::I64(values.extract()?),
                "f64" => Values::F64(values.extract()?),
                "str" => Values::Str(values.extract()?),
                _ => {
                    return Err(TiersimError::new_err(format!(
                        "column '{name}': kind '{kind}' is not one of i64, f64, str"
                    )))
                }
            };
            Ok(Column { name, values })
        })
        .collect::<PyResult<Vec<_>>>()?;
    match guarded(py, || Ok(parquet::write(Path::new(&path), &columns)))? {
        Ok(()) => Ok(()),
        Err(WriteError::Io(e)) => {
            let text = e.to_string();
            Err(match e.raw_os_error() {
                Some(errno) => {
                    let strerror = text.split(" (os error").next().unwrap_or(&text).to_string();
                    pyo3::exceptions::PyOSError::new_err((errno, strerror, path))
                }
                None => pyo3::exceptions::PyOSError::new_err(format!("{text}: '{path}'")),
            })
        }
        Err(WriteError::Invalid(msg)) => Err(TiersimError::new_err(format!("{path}: cannot write Parquet: {msg}"))),
    }
}

#[pyfunction]
pub(crate) fn version() -> &'static str {
    tiersim_engine::VERSION
}
