//! `tiersim._native`: PyO3 glue only. Every call runs with the GIL released and inside
//! catch_unwind, so a Rust panic reaches Python as `TiersimError("internal error: ...")`, never
//! as a crash; user errors carry the engine's message (file and offset, or config key). The
//! panic hook prints nothing (whatever RUST_BACKTRACE says) unless TIERSIM_DEBUG=1, when it
//! prints the message and a backtrace.

use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use pyo3::create_exception;
use pyo3::prelude::*;
use tiersim_core::{Error, Result};
use tiersim_trace::convert::{Format, TextOptions};
use tiersim_trace::{AddrKind, TimeUnit};

mod parquet;
// pyo3 0.22's #[pyfunction] expansion converts the PyErr of a PyResult into PyErr, which clippy
// flags at every such function (PyO3/pyo3#4828, fixed in pyo3 0.23); an allow on the function
// does not reach the generated wrapper, so it is on the module that holds only the functions.
#[allow(clippy::useless_conversion)]
mod functions;

use functions::*;

create_exception!(_native, TiersimError, pyo3::exceptions::PyException);

thread_local! {
    /// Where the last panic on this thread happened, for the one-line internal error.
    static PANIC_AT: RefCell<Option<String>> = const { RefCell::new(None) };
}

fn debug_enabled() -> bool {
    std::env::var_os("TIERSIM_DEBUG").is_some_and(|v| !v.is_empty() && v != "0")
}

/// Replaces Rust's default hook, which prints a backtrace before `guarded` can turn the panic
/// into one line whenever RUST_BACKTRACE is set, as it is on many machines.
fn panic_hook(info: &std::panic::PanicHookInfo<'_>) {
    let at = info.location().map(|l| format!("{}:{}", l.file(), l.line()));
    if debug_enabled() {
        eprintln!("tiersim internal error: {info}\n{}", std::backtrace::Backtrace::force_capture());
    }
    PANIC_AT.with(|p| *p.borrow_mut() = at);
}

fn guarded<T: Send>(py: Python<'_>, f: impl FnOnce() -> Result<T> + Send) -> PyResult<T> {
    let out = py
        .allow_threads(|| catch_unwind(AssertUnwindSafe(f)).map_err(|p| (p, PANIC_AT.with(|a| a.borrow_mut().take()))));
    match out {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(TiersimError::new_err(e.to_string())),
        Err((panic, at)) => {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            let at = at.map(|a| format!(" at {a}")).unwrap_or_default();
            let details =
                if debug_enabled() { "the backtrace is above" } else { "set TIERSIM_DEBUG=1 for a backtrace" };
            Err(TiersimError::new_err(format!(
                "internal error: {msg}{at} ({details}; please report this as a tiersim bug)"
            )))
        }
    }
}

/// A progress hook that calls the Python `callback(done, total)` with the GIL re-acquired (the
/// run itself holds it released). Pending signals are checked first, so Ctrl-C stops a long run.
/// An exception from either is kept in `stopped` and ends the run; `reraise_stopped` hands it
/// back to Python unchanged (KeyboardInterrupt stays KeyboardInterrupt).
fn python_progress<'a>(
    callback: &'a PyObject,
    stopped: &'a Mutex<Option<PyErr>>,
) -> impl FnMut(u64, Option<u64>) -> Result<()> + 'a {
    move |done, total| {
        Python::with_gil(|py| {
            py.check_signals().and_then(|()| callback.call1(py, (done, total)).map(drop)).map_err(|e| {
                *stopped.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                Error::Sim("stopped by the progress callback".into())
            })
        })
    }
}

fn reraise_stopped(stopped: Mutex<Option<PyErr>>) -> PyResult<()> {
    match stopped.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn table(what: &str, text: &str) -> Result<Option<toml::Table>> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    toml::from_str(text).map(Some).map_err(|e| Error::config(what, format!("invalid TOML: {}", e.message())))
}

fn text_options(addr_kind: &str, page_size: u32, ns_per_instruction: f64, csv_time_unit: &str) -> Result<TextOptions> {
    let addr_kind = match addr_kind {
        "virtual" => AddrKind::Virtual,
        "physical" => AddrKind::Physical,
        k => return Err(Error::arg("addr_kind", format!("`{k}` is neither virtual nor physical"))),
    };
    let csv_time_unit = match csv_time_unit {
        "instructions" => TimeUnit::Instructions,
        "ns" => TimeUnit::Ns,
        u => return Err(Error::arg("csv_time_unit", format!("`{u}` is neither instructions nor ns"))),
    };
    Ok(TextOptions { addr_kind, page_size, ns_per_instruction, csv_time_unit })
}

/// `None` or "native" read by magic; anything else must name a format.
fn src_format(name: Option<&str>) -> Result<Option<Format>> {
    match name {
        None => Ok(None),
        Some(n) => Format::parse(n).map(Some),
    }
}

fn stats_json(stats: &tiersim_trace::TraceStats) -> Result<String> {
    serde_json::to_string(stats).map_err(|e| Error::Sim(format!("writing statistics: {e}")))
}

/// Counters of a running capture, shared with the Python thread that shows progress.
#[pyclass(frozen)]
struct CaptureProgress {
    inner: Arc<tiersim_trace::capture::Progress>,
}

#[pymethods]
impl CaptureProgress {
    #[new]
    fn new() -> Self {
        CaptureProgress { inner: Arc::default() }
    }

    /// (input bytes, instructions, data accesses, records) so far.
    fn snapshot(&self) -> (u64, u64, u64, u64) {
        let p = &self.inner;
        (
            p.input_bytes.load(Ordering::Relaxed),
            p.instructions.load(Ordering::Relaxed),
            p.data_accesses.load(Ordering::Relaxed),
            p.records.load(Ordering::Relaxed),
        )
    }

    /// Ask the capture to stop at its next read.
    fn cancel(&self) {
        self.inner.cancel();
    }
}

pub(crate) fn curve_paths(paths: &[String]) -> Vec<std::path::PathBuf> {
    paths.iter().map(std::path::PathBuf::from).collect()
}

/// What the curve reader did, for the fit report: each curve's source, mix, rows and notes,
/// and the files passed over.
pub(crate) fn curves_read(set: &tiersim_devices::curves::CurveSet) -> serde_json::Value {
    serde_json::json!({
        "curves": set.curves.iter().map(|c| serde_json::json!({
            "source": c.source, "read_percent": c.percent(), "rows": c.points.len(), "notes": c.notes,
        })).collect::<Vec<_>>(),
        "skipped": set.skipped,
    })
}

/// The target of `characterize`: node `node` of a platform, else a preset (name or file) or a
/// device kind; a platform file without `node` is an error naming its nodes.
pub(crate) fn target_of(
    device_or_preset: &str,
    params: Option<&toml::Table>,
    node: Option<&str>,
) -> Result<tiersim_devices::characterize::Target> {
    use tiersim_devices::characterize as ch;
    match node {
        Some(node) => {
            let mut t = tiersim_engine::platform::node_target(device_or_preset, node)?;
            if let Some(p) = params {
                t = ch::Target::resolve(
                    t.entry.info.name,
                    Some(&{
                        let mut table = t.table.clone();
                        table.insert("count".into(), i64::from(t.count).into());
                        table.insert("granule".into(), (t.granule as i64).into());
                        table.extend(p.clone());
                        table
                    }),
                )
                .map(|r| ch::Target { name: t.name.clone(), ..r })?;
            }
            Ok(t)
        }
        None => match tiersim_engine::platform::platform_nodes(device_or_preset) {
            Some(nodes) => Err(Error::arg(
                "node",
                format!(
                    "{device_or_preset} is a platform file: name one of its nodes with --node ({})",
                    nodes.join(", ")
                ),
            )),
            None => ch::Target::resolve(device_or_preset, params),
        },
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("TiersimError", m.py().get_type_bound::<TiersimError>())?;
    std::panic::set_hook(Box::new(panic_hook));
    m.add_function(wrap_pyfunction!(_panic_for_test, m)?)?;
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(inspect, m)?)?;
    m.add_function(wrap_pyfunction!(verify, m)?)?;
    m.add_function(wrap_pyfunction!(generate, m)?)?;
    m.add_function(wrap_pyfunction!(check_generator, m)?)?;
    m.add_function(wrap_pyfunction!(convert, m)?)?;
    m.add_function(wrap_pyfunction!(sample, m)?)?;
    m.add_function(wrap_pyfunction!(mix, m)?)?;
    m.add_function(wrap_pyfunction!(trace_stats, m)?)?;
    m.add_function(wrap_pyfunction!(list_plugins, m)?)?;
    m.add_function(wrap_pyfunction!(resolve_platform, m)?)?;
    m.add_function(wrap_pyfunction!(characterize, m)?)?;
    m.add_function(wrap_pyfunction!(calibrate, m)?)?;
    m.add_function(wrap_pyfunction!(filebench, m)?)?;
    m.add_class::<CaptureProgress>()?;
    m.add_function(wrap_pyfunction!(capture, m)?)?;
    m.add_function(wrap_pyfunction!(capture_params, m)?)?;
    m.add_function(wrap_pyfunction!(capture_instrumented, m)?)?;
    m.add_function(wrap_pyfunction!(capture_shm_init, m)?)?;
    m.add_function(wrap_pyfunction!(capture_stream, m)?)?;
    m.add_function(wrap_pyfunction!(capture_runtime_env, m)?)?;
    m.add_function(wrap_pyfunction!(capture_resolve, m)?)?;
    m.add_function(wrap_pyfunction!(flash_replay, m)?)?;
    m.add_function(wrap_pyfunction!(write_parquet, m)?)?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    Ok(())
}
