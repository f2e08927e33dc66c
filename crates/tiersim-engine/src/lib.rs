//! The tiersim engine: loads a platform, builds its devices and the chosen policy, replays a
//! trace (or a generator) through the host and OS model, and returns the summary, the time
//! series and the fully resolved configuration of the run.

use std::path::Path;

use serde_json::json;
use tiersim_core::{Error, Result};
use tiersim_trace::progress::{with_progress, ProgressFn};
use tiersim_trace::AccessSource;

mod epoch_profile;
pub mod flash_replay;
mod latency;
pub mod node;
mod os;
pub mod pagetable;
pub mod platform;
mod readahead;
pub mod regime;
pub mod sim;
pub mod storage;

pub use epoch_profile::{Lookahead, Windows};
pub use platform::Platform;
pub use sim::{LatencyBins, SimOptions, SimResult, Timeseries};

pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Where the accesses come from.
pub enum TraceInput<'a> {
    File(&'a Path),
    /// Run a generator in memory, without writing a trace file.
    Generator {
        name: &'a str,
        params: Option<&'a toml::Table>,
    },
}

pub struct RunRequest<'a> {
    /// Preset name or path to a platform TOML file.
    pub platform: &'a str,
    /// `key.path=value` overrides applied to the platform.
    pub overrides: &'a [String],
    pub policy: &'a str,
    pub policy_params: Option<&'a toml::Table>,
    pub trace: TraceInput<'a>,
    pub seed: u64,
    pub options: SimOptions,
}

pub struct RunOutput {
    pub summary: serde_json::Value,
    pub timeseries: Timeseries,
    /// Latency histogram of the measured accesses, overall and per node.
    pub latency_hist: LatencyBins,
    /// The run's fully resolved configuration (TOML): rerunning it gives the same result.
    pub config: String,
}

pub fn run(req: &RunRequest) -> Result<RunOutput> {
    let platform = platform::load(req.platform, req.overrides)?;
    run_on(&platform, req, None)
}

/// `run`, reporting (accesses read, total when the trace header knows it) to `progress` every
/// `tiersim_trace::progress::PROGRESS_EVERY` accesses of the simulation pass; an error from
/// `progress` stops the run.
pub fn run_with_progress(req: &RunRequest, progress: &mut ProgressFn<'_>) -> Result<RunOutput> {
    let platform = platform::load(req.platform, req.overrides)?;
    run_on(&platform, req, Some(progress))
}

/// Run on an already loaded platform (sweeps load a platform once and run many policies on it).
pub fn run_on(platform: &Platform, req: &RunRequest, progress: Option<&mut ProgressFn<'_>>) -> Result<RunOutput> {
    let topo = sim::topology(platform);
    let (policy, policy_params) = tiersim_policies::build(req.policy, req.policy_params, &topo)?;
    let mut run_t = toml::Table::new();
    run_t.insert("policy".into(), req.policy.into());
    run_t.insert("seed".into(), (req.seed as i64).into());
    run_t.insert("policy_params".into(), policy_params.to_toml().into());
    let (mut source, label, source_t) = open_source(&req.trace, req.seed)?;
    run_t.extend(source_t);
    let mut policy = policy;
    if policy.wants_profile() {
        let (mut again, _, _) = open_source(&req.trace, req.seed)?;
        policy.set_profile(&profile(again.as_mut(), platform.page_size)?);
    }
    let header = source.header().clone();
    let scanner = policy.scanner();
    let future = match policy.epoch_profile() {
        Some(want) => {
            let total = match source.header().stats.as_ref() {
                Some(st) => st.accesses,
                None => {
                    let (mut again, _, _) = open_source(&req.trace, req.seed)?;
                    let mut n = 0u64;
                    tiersim_trace::for_each_access(again.as_mut(), |_| {
                        n += 1;
                        Ok(())
                    })?;
                    n
                }
            };
            let per_epoch = total.div_ceil(want.epochs).max(1);
            policy.set_epoch_length(per_epoch);
            let windows = if want.per_cpu { Windows::PerCpu } else { Windows::TraceOrder };
            // The read-ahead holds the CPUs' lag: a few epochs, plus what the replay itself may
            // read ahead for a thread that waits.
            let cap = per_epoch.saturating_mul(4).saturating_add(platform.host.uint("read_ahead"));
            let (again, _, _) = open_source(&req.trace, req.seed)?;
            Some(
                Lookahead::new(again, platform.page_size, per_epoch, want.top, windows, want.write_weight, cap)
                    .with_cpu_nodes(platform.cpu_node.clone()),
            )
        }
        None => None,
    };
    let result = with_progress(source.as_mut(), progress, |src| {
        sim::simulate_with_future(platform, policy, src, future, req.options)
    })
    .map_err(|e| match (e, &req.trace) {
        // A malformed record the replay finds (a futex record's): the file and its record number.
        (Error::Sim(msg), TraceInput::File(path)) if msg.starts_with("record #") => {
            Error::Path { path: path.to_path_buf(), msg }
        }
        (e, _) => e,
    })?;
    let mut summary = result.summary;
    let (lens, lens_warning) = regime::lens(platform);
    let (regime, regime_warnings) = regime::diagnostics(&summary, scanner);
    let warnings: Vec<String> = lens_warning.into_iter().chain(regime_warnings).collect();
    let head = json!({
        "tiersim_version": VERSION,
        "platform": platform.name,
        "policy": req.policy,
        "trace": label,
        "seed": req.seed,
        "time_unit": header.time_unit,
        "addr_kind": header.addr_kind,
        "mode": platform.host.str("mode"),
        "lens": lens,
        "regime": regime,
        "warnings": warnings,
    });
    if let (Some(s), serde_json::Value::Object(h)) = (summary.as_object_mut(), head) {
        s.extend(h);
    }
    let mut config = toml::Table::new();
    config.insert("run".into(), run_t.into());
    config.insert("platform".into(), platform.resolved.clone().into());
    let config = toml::to_string(&config).map_err(|e| Error::Sim(format!("writing the resolved config: {e}")))?;
    Ok(RunOutput { summary, timeseries: result.timeseries, latency_hist: result.latency_hist, config })
}

/// Open the run's access source; also returns its label and its part of the resolved config.
fn open_source(input: &TraceInput, seed: u64) -> Result<(Box<dyn AccessSource>, String, toml::Table)> {
    let mut t = toml::Table::new();
    Ok(match input {
        TraceInput::File(path) => {
            t.insert("trace".into(), path.display().to_string().into());
            let reader = readahead::ReadAhead::new(tiersim_trace::TraceReader::open(path)?)?;
            (Box::new(reader), path.display().to_string(), t)
        }
        TraceInput::Generator { name, params } => {
            let entry = tiersim_trace::gen::find(name)?;
            let resolved =
                tiersim_core::Params::resolve(entry.info.params, *params).map_err(|e| e.under("generator_params"))?;
            t.insert("generator".into(), (*name).into());
            t.insert("generator_params".into(), resolved.to_toml().into());
            (
                Box::new(tiersim_trace::gen::GeneratorSource::new((entry.build)(&resolved, seed)?)),
                format!("generator:{name}"),
                t,
            )
        }
    })
}

/// Accesses per page over the whole trace, hottest first (ties: lower page first), for
/// policies that know the future.
pub fn profile(source: &mut dyn AccessSource, page_size: u64) -> Result<Vec<(u64, u64)>> {
    let shift = page_size.trailing_zeros();
    let mut counts: rustc_hash::FxHashMap<u64, u64> = Default::default();
    tiersim_trace::for_each_access(source, |a| {
        // A file mapping record touches no page.
        if !a.is_map() {
            *counts.entry(a.addr >> shift).or_default() += 1;
        }
        Ok(())
    })?;
    let mut v: Vec<(u64, u64)> = counts.into_iter().collect();
    v.sort_unstable_by(epoch_profile::hottest_first);
    Ok(v)
}

/// Every registered plugin and preset, with parameters and defaults, for `tiersim list`.
pub fn list_plugins() -> Result<serde_json::Value> {
    let section = |params: &'static [tiersim_core::ParamSpec], name: &'static str, summary: &'static str| {
        tiersim_core::PluginInfo { name, summary, source: "", params }.to_json()
    };
    Ok(json!({
        "policies": tiersim_policies::REGISTRY.iter().map(|e| e.info.to_json()).collect::<Vec<_>>(),
        "devices": tiersim_devices::REGISTRY.iter().map(|e| e.info.to_json()).collect::<Vec<_>>(),
        "generators": tiersim_trace::gen::REGISTRY.iter().map(|e| e.info.to_json()).collect::<Vec<_>>(),
        "platforms": platform::preset_list().into_iter().map(|(n, s)| json!({"name": n, "summary": s})).collect::<Vec<_>>(),
        "device_presets": tiersim_devices::presets::all()?.into_iter().map(|p| json!({
            "name": p.name, "device": p.device, "summary": p.summary, "source": p.source,
        })).collect::<Vec<_>>(),
        "platform_sections": [
            section(platform::HOST_PARAMS, "host", "CPUs, sockets, clock, memory-level parallelism, loop mode"),
            section(platform::OS_PARAMS, "os", "page size, watermarks, fault costs, reclaim"),
            section(storage::iopath::SPECS, "storage", "costs of the kernel's file I/O path (system calls, file system, block layer, driver, completion, faults)"),
            section(platform::STATS_PARAMS, "stats", "time-series epoch and warmup"),
        ],
    }))
}
