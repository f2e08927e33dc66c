//! A block device used as swap: `queue_depth` internal units (dies/planes the controller keeps
//! busy in parallel), each held for the operation's latency, plus one transfer pipe per
//! direction at the interface bandwidth. Reads occupy a unit, then return data over the pipe;
//! writes move data in first, then occupy a unit to program (or buffer) it.
//! Defaults are a typical data-center TLC NVMe drive (typical published values).

use serde_json::json;
use tiersim_core::{Ns, Op, ParamKind, ParamSpec, Params, PluginInfo, Result};

use crate::pipe::{completion, ns_f64, ns_from_ps, ps_from_ns, Pipe, Ps};
use crate::{Device, DeviceRequest};

pub const SPECS: &[ParamSpec] = &[
    ParamSpec::new(
        "read_latency",
        ParamKind::Duration,
        "80us",
        "idle 4 KiB random read latency; TLC NVMe drives publish 70-90 us (typical published value)",
    ),
    ParamSpec::new(
        "write_latency",
        ParamKind::Duration,
        "20us",
        "idle write latency; writes are acknowledged from the drive's buffer, 15-25 us on TLC NVMe \
         (typical published value)",
    ),
    ParamSpec::new("read_bandwidth", ParamKind::Bandwidth, "3.5GB/s", "sequential read bandwidth (PCIe 3.0 x4 class)")
        .min(1e6),
    ParamSpec::new("write_bandwidth", ParamKind::Bandwidth, "3GB/s", "sequential write bandwidth").min(1e6),
    ParamSpec::new(
        "queue_depth",
        ParamKind::Int,
        "32",
        "operations the drive serves in parallel (internal parallelism)",
    )
    .min(1.0)
    .max(65536.0),
];

pub const INFO: PluginInfo = PluginInfo {
    name: "ssd",
    summary: "block device for swap: parallel units busy for the op latency + per-direction transfer pipe",
    source: "typical published NVMe TLC figures; Optane SSD figures from reference seed 001",
    params: SPECS,
};

pub fn build(p: &Params) -> Result<Box<dyn Device>> {
    Ok(Box::new(Ssd::from_params(p)?))
}

pub struct Ssd {
    /// Time each unit becomes free.
    units: Vec<Ps>,
    read_pipe: Pipe,
    write_pipe: Pipe,
    read_latency: Ps,
    write_latency: Ps,
    read_bandwidth: f64,
    reads: u64,
    writes: u64,
    unit_busy: Ps,
    unit_wait_total: Ps,
    unit_wait_max: Ps,
}

impl Ssd {
    pub fn from_params(p: &Params) -> Result<Self> {
        Ok(Ssd {
            units: vec![0; p.uint("queue_depth").max(1) as usize],
            read_pipe: Pipe::new(p.bandwidth("read_bandwidth")),
            write_pipe: Pipe::new(p.bandwidth("write_bandwidth")),
            read_latency: ps_from_ns(p.duration("read_latency")),
            write_latency: ps_from_ns(p.duration("write_latency")),
            read_bandwidth: p.bandwidth("read_bandwidth"),
            reads: 0,
            writes: 0,
            unit_busy: 0,
            unit_wait_total: 0,
            unit_wait_max: 0,
        })
    }

    /// Take the unit that frees first for `latency` from `at`; returns when the operation ends.
    #[inline]
    fn occupy_unit(&mut self, at: Ps, latency: Ps) -> Ps {
        let (i, free) = self.units.iter().copied().enumerate().min_by_key(|&(_, t)| t).unwrap_or((0, 0));
        let start = at.max(free);
        let end = start.saturating_add(latency);
        if let Some(u) = self.units.get_mut(i) {
            *u = end;
        }
        let wait = start - at;
        self.unit_busy = self.unit_busy.saturating_add(latency);
        self.unit_wait_total = self.unit_wait_total.saturating_add(wait);
        self.unit_wait_max = self.unit_wait_max.max(wait);
        end
    }
}

impl Device for Ssd {
    fn access(&mut self, req: &DeviceRequest) -> Ns {
        let at = ps_from_ns(req.now);
        let bytes = u64::from(req.size.max(1));
        let done = match req.op {
            Op::Read => {
                self.reads += 1;
                let ready = self.occupy_unit(at, self.read_latency);
                self.read_pipe.serve(ready, bytes).1
            }
            Op::Write => {
                self.writes += 1;
                let (_, arrived) = self.write_pipe.serve(at, bytes);
                self.occupy_unit(arrived, self.write_latency)
            }
        };
        completion(req.now, done)
    }

    fn idle_latency(&self, op: Op, size: u32) -> Ns {
        let bytes = u64::from(size.max(1));
        ns_from_ps(match op {
            Op::Read => self.read_latency + self.read_pipe.service(bytes),
            Op::Write => self.write_pipe.service(bytes) + self.write_latency,
        })
    }

    fn peak_bandwidth(&self) -> f64 {
        self.read_bandwidth
    }

    fn stats(&self) -> serde_json::Value {
        let reqs = self.reads + self.writes;
        json!({
            "device": "ssd",
            "reads": self.reads,
            "writes": self.writes,
            "bytes_read": self.read_pipe.bytes(),
            "bytes_written": self.write_pipe.bytes(),
            "read_busy_ns": ns_f64(self.read_pipe.busy()),
            "write_busy_ns": ns_f64(self.write_pipe.busy()),
            "unit_busy_ns": ns_f64(self.unit_busy),
            "queue_depth": self.units.len(),
            "unit_wait_ns_total": ns_f64(self.unit_wait_total),
            "unit_wait_ns_mean": if reqs == 0 { 0.0 } else { ns_f64(self.unit_wait_total) / reqs as f64 },
            "unit_wait_ns_max": ns_f64(self.unit_wait_max),
        })
    }
}
