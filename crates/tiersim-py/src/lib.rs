//! `tiersim._native`: PyO3 glue only. Every call runs with the GIL released and inside
//! catch_unwind, so a Rust panic reaches Python as `TiersimError("internal error: ...")`, never
//! as a crash; user errors carry the engine's message (file and offset, or config key).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use pyo3::create_exception;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use tiersim_core::{Error, Result};
use tiersim_engine::{RunRequest, SimOptions, TraceInput};

create_exception!(_native, TiersimError, pyo3::exceptions::PyException);

fn guarded<T: Send>(py: Python<'_>, f: impl FnOnce() -> Result<T> + Send) -> PyResult<T> {
    let out = py.allow_threads(|| catch_unwind(AssertUnwindSafe(f)));
    match out {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(TiersimError::new_err(e.to_string())),
        Err(panic) => {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            Err(TiersimError::new_err(format!("internal error: {msg} (please report this as a tiersim bug)")))
        }
    }
}

fn table(what: &str, text: &str) -> Result<Option<toml::Table>> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    toml::from_str(text).map(Some).map_err(|e| Error::config(what, format!("invalid TOML: {}", e.message())))
}

#[pyfunction]
#[pyo3(signature = (platform, policy, trace, overrides=Vec::new(), policy_params=String::new(), seed=0, generator=None, generator_params=String::new()))]
#[allow(clippy::too_many_arguments)]
fn run(
    py: Python<'_>,
    platform: String,
    policy: String,
    trace: String,
    overrides: Vec<String>,
    policy_params: String,
    seed: u64,
    generator: Option<String>,
    generator_params: String,
) -> PyResult<PyObject> {
    let out = guarded(py, || {
        let pp = table("policy_params", &policy_params)?;
        let gp = table("generator_params", &generator_params)?;
        let input = match &generator {
            Some(name) => TraceInput::Generator { name, params: gp.as_ref() },
            None => TraceInput::File(Path::new(&trace)),
        };
        tiersim_engine::run(&RunRequest {
            platform: &platform,
            overrides: &overrides,
            policy: &policy,
            policy_params: pp.as_ref(),
            trace: input,
            seed,
            options: SimOptions::default(),
        })
    })?;
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
    d.set_item("timeseries", ts)?;
    Ok(d.into())
}

#[pyfunction]
fn inspect(py: Python<'_>, path: String) -> PyResult<String> {
    guarded(py, || tiersim_trace::inspect(Path::new(&path)).map(|v| v.to_string()))
}

#[pyfunction]
#[pyo3(signature = (name, out, params=String::new(), seed=0))]
fn generate(py: Python<'_>, name: String, out: String, params: String, seed: u64) -> PyResult<String> {
    guarded(py, || {
        let p = table("params", &params)?;
        tiersim_trace::gen::generate(&name, p.as_ref(), Path::new(&out), seed)?;
        tiersim_trace::inspect(Path::new(&out)).map(|v| v.to_string())
    })
}

#[pyfunction]
fn list_plugins(py: Python<'_>) -> PyResult<String> {
    guarded(py, || tiersim_engine::list_plugins().map(|v| v.to_string()))
}

#[pyfunction]
#[pyo3(signature = (platform, overrides=Vec::new()))]
fn resolve_platform(py: Python<'_>, platform: String, overrides: Vec<String>) -> PyResult<String> {
    guarded(py, || {
        let p = tiersim_engine::platform::load(&platform, &overrides)?;
        toml::to_string(&p.resolved).map_err(|e| Error::Sim(format!("writing the resolved platform: {e}")))
    })
}

#[pyfunction]
#[pyo3(signature = (device_or_preset, params=String::new(), tests=Vec::new(), quick=false))]
fn characterize(py: Python<'_>, device_or_preset: String, params: String, tests: Vec<String>, quick: bool) -> PyResult<String> {
    use tiersim_devices::characterize as ch;
    guarded(py, || {
        let p = table("params", &params)?;
        let target = ch::Target::resolve(&device_or_preset, p.as_ref())?;
        let tables = ch::characterize(&target, &tests, quick)?;
        Ok(ch::to_json(&target, &tables).to_string())
    })
}

#[pyfunction]
fn version() -> &'static str {
    tiersim_engine::VERSION
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("TiersimError", m.py().get_type_bound::<TiersimError>())?;
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(inspect, m)?)?;
    m.add_function(wrap_pyfunction!(generate, m)?)?;
    m.add_function(wrap_pyfunction!(list_plugins, m)?)?;
    m.add_function(wrap_pyfunction!(resolve_platform, m)?)?;
    m.add_function(wrap_pyfunction!(characterize, m)?)?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    Ok(())
}
