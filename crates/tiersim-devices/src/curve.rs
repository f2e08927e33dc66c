//! A memory device defined by measured bandwidth-latency curves, the Mess simulator's method
//! (Esmaili-Dokht et al., arXiv 2405.10170, MICRO 2024): latency is looked up from the curves
//! by the utilisation and read fraction of the last window (loaded.rs keeps that loop stable);
//! one FCFS pipe whose read and write costs reproduce each curve's maximum limits bandwidth, so
//! the saturated branch comes from queueing. Point `curves_dir` at your own Mess or MLC output.

use std::path::Path;

use serde_json::json;
use tiersim_core::{Error, Ns, Op, ParamKind, ParamSpec, Params, PluginInfo, Result};

use crate::curves::{fit_maxima, read_dir_units, Curve, Units};
use crate::loaded::{Loaded, Shape};
use crate::pipe::{completion, ns_from_ps, ps_from_ns, Pipe, Ps};
use crate::{Device, DeviceRequest};

pub const SPECS: &[ParamSpec] = &[
    ParamSpec::new(
        "curves_dir",
        ParamKind::Str,
        "",
        "directory of measured curves: Mess bwlat_R.txt per read percentage R, Intel MLC --loaded_latency \
         output or CSV with named columns (docs/calibrate.md)",
    ),
    ParamSpec::new(
        "cycles_ghz",
        ParamKind::Float,
        "0",
        "Mess latency is in cycles at this clock in GHz (0: in ns), as Mess publishes some systems'",
    )
    .min(0.0)
    .max(100.0),
    ParamSpec::new(
        "port_ns",
        ParamKind::Float,
        "0",
        "on-chip path added to every latency of curves measured from a port rather than the core \
         (Mess's CXL curves: the CXL host port)",
    )
    .min(0.0)
    .max(10000.0),
    ParamSpec::new(
        "read_ratios",
        ParamKind::FloatList,
        "[]",
        "read percentages to use from curves_dir (empty: every bwlat_R.txt there)",
    ),
    ParamSpec::new("line", ParamKind::Bytes, "64B", "bytes a request moves at least (a cache line)")
        .min(1.0)
        .max(65536.0),
    crate::loaded::MAX_UTIL_SPEC,
    crate::loaded::WINDOW_SPEC,
    crate::loaded::GAIN_SPEC,
];

pub const INFO: PluginInfo = PluginInfo {
    name: "curve",
    summary: "latency looked up from measured bandwidth-latency curves (Mess simulator method)",
    source: "Mess: Esmaili-Dokht et al., arXiv 2405.10170 (MICRO 2024); curves from the Mess benchmark or Intel MLC",
    params: SPECS,
};

pub fn build(p: &Params) -> Result<Box<dyn Device>> {
    Ok(Box::new(CurveDevice::from_params(p)?))
}

pub struct CurveDevice {
    pipe: Pipe,
    line: u64,
    /// Pipe time of one line read and one line write.
    line_service: [Ps; 2],
    write_cost: f64,
    load: Loaded,
    idle: Ps,
    peak: f64,
}

impl CurveDevice {
    pub fn from_params(p: &Params) -> Result<Self> {
        let dir = p.str("curves_dir");
        if dir.is_empty() {
            return Err(Error::config("curves_dir", "required: a directory of measured curves"));
        }
        let mut only = Vec::new();
        for &r in p.floats("read_ratios") {
            if !(0.0..=100.0).contains(&r) || r.fract() != 0.0 {
                return Err(Error::config("read_ratios", format!("{r} is not a whole percentage 0..100")));
            }
            only.push(r as u32);
        }
        let ghz = p.float("cycles_ghz");
        let units = Units { cycles_ghz: (ghz > 0.0).then_some(ghz), port_ns: p.float("port_ns") };
        let curves = read_dir_units(Path::new(dir), &only, units)?;
        let max_util = p.float("load_max_util");
        Ok(Self::from_curves(&curves, p.bytes("line"), p.duration("load_window"), p.float("load_gain"), max_util))
    }

    pub fn from_curves(curves: &[Curve], line: u64, window: Ns, gain: f64, max_util: f64) -> Self {
        let (read_rate, write_cost) = fit_maxima(curves);
        let pipe = Pipe::new(read_rate);
        let read = pipe.service(line);
        // Utilisation is the pipe's busy fraction, so each curve is indexed by its bandwidth
        // over the pipe's maximum for that mix; the looked-up value is the whole latency.
        let shape = Shape::Curves {
            curves: curves
                .iter()
                .map(|c| {
                    let max = read_rate / (c.read_ratio + (1.0 - c.read_ratio) * write_cost);
                    (c.read_ratio, c.rising().into_iter().map(|(bw, lat)| (bw / max, lat)).collect())
                })
                .collect(),
            max_util,
        };
        let idle = (shape.extra_ns(0.0, 1.0) * 1000.0).round() as Ps;
        CurveDevice {
            pipe,
            line,
            line_service: [read, ((read as f64 * write_cost).ceil() as Ps).max(1)],
            write_cost,
            load: Loaded::new(shape, window, gain),
            idle,
            peak: read_rate,
        }
    }
}

impl Device for CurveDevice {
    #[inline]
    fn access(&mut self, req: &DeviceRequest) -> Ns {
        let at = ps_from_ns(req.now);
        let pipe = &self.pipe;
        let latency = self.load.extra(at, req.op, || pipe.busy() as f64);
        let bytes = u64::from(req.size.max(1)).div_ceil(self.line) * self.line;
        let w = usize::from(req.op.is_write());
        let service = if bytes == self.line {
            self.line_service[w]
        } else {
            let s = self.pipe.service(bytes);
            if w == 1 {
                ((s as f64 * self.write_cost).ceil() as Ps).max(1)
            } else {
                s
            }
        };
        // The curve's latency already holds the queueing of its load: the pipe only counts
        // when it is the later of the two, past the maximum.
        let (_, finish) = self.pipe.serve_for(at, bytes, service);
        completion(req.now, finish.max(at.saturating_add(latency)))
    }

    fn idle_latency(&self, _op: Op, _size: u32) -> Ns {
        ns_from_ps(self.idle)
    }

    fn peak_bandwidth(&self) -> f64 {
        self.peak
    }

    fn stats(&self) -> serde_json::Value {
        json!({
            "device": "curve",
            "bytes": self.pipe.bytes(),
            "busy_ns": self.pipe.busy() as f64 / 1000.0,
            "write_cost": self.write_cost,
            "load": self.load.stats(),
        })
    }
}
