//! Device models. A device turns one request (issue time, node-local physical address, size,
//! direction) into a completion time, queueing on its own channels so that loaded latency and
//! bandwidth limits emerge from load rather than being assumed. Devices know nothing of pages,
//! policies or CPUs beyond the requesting socket.
//!
//! Adding a device: one file in this crate and one line in `REGISTRY`.

use tiersim_core::{Ns, Op, Params, PluginInfo, Result};

pub mod calibrate;
pub mod characterize;
pub mod curve;
pub mod curves;
pub mod cxl;
pub mod cxl_flash;
pub mod dram;
pub mod interleave;
pub mod loaded;
pub mod pipe;
pub mod pmem;
pub mod presets;

pub use interleave::InterleaveSet;
pub mod ssd;

/// One request as the engine hands it to a device.
#[derive(Debug, Clone, Copy)]
pub struct DeviceRequest {
    /// Issue time (ns). Across calls the engine issues in nondecreasing time order, except that
    /// background work (copies, swap writes) may be issued at a slightly earlier time than the
    /// last demand access; devices must accept that without panicking.
    pub now: Ns,
    /// Node-local physical byte address (page frame * page size + offset).
    pub addr: u64,
    pub size: u32,
    pub op: Op,
    /// Socket of the requesting CPU (for devices with NUMA effects).
    pub socket: u16,
    /// The requesting CPU (for devices whose behaviour depends on how many threads share them,
    /// such as Optane DIMMs); background work uses the CPU it is charged to.
    pub cpu: u32,
    /// Whether the requester sits on another socket than the device.
    pub remote: bool,
}

/// A memory or storage device model.
pub trait Device: Send {
    /// Serve `req`; returns the absolute completion time (>= req.now).
    fn access(&mut self, req: &DeviceRequest) -> Ns;
    /// Latency of a single access of `size` bytes on an idle device.
    fn idle_latency(&self, op: Op, size: u32) -> Ns;
    /// Peak bandwidth (bytes/s) for reads, for reports.
    fn peak_bandwidth(&self) -> f64;
    /// Device statistics (counts, bytes, busy time), for summary.json.
    fn stats(&self) -> serde_json::Value;
    /// A host hint: the bytes `[addr, addr + size)` will be accessed soon (a kernel that knows
    /// the hot pages, seed 004 §5.2 observation 7). Devices without a use for it ignore it.
    fn hint(&mut self, _now: Ns, _addr: u64, _size: u64) {}
    /// Whether `hint` does anything, so the host spends no work on hints for devices without
    /// a use for them.
    fn accepts_hints(&self) -> bool {
        false
    }
}

pub type BuildFn = fn(&Params) -> Result<Box<dyn Device>>;

/// One registered device kind.
pub struct DeviceEntry {
    pub info: PluginInfo,
    pub build: BuildFn,
}

/// Every device kind tiersim knows, by config name. The only place a device is named.
pub static REGISTRY: &[DeviceEntry] = &[
    DeviceEntry { info: dram::INFO, build: dram::build },
    DeviceEntry { info: cxl::INFO, build: cxl::build },
    DeviceEntry { info: ssd::INFO, build: ssd::build },
    DeviceEntry { info: pmem::INFO, build: pmem::build },
    DeviceEntry { info: cxl_flash::INFO, build: cxl_flash::build },
    DeviceEntry { info: curve::INFO, build: curve::build },
];

/// Find a device kind by name; an unknown name lists the valid ones.
pub fn find(name: &str) -> Result<&'static DeviceEntry> {
    tiersim_core::params::lookup("device", name, REGISTRY, |e| &e.info)
}

/// Build a device from its kind and a raw parameter table; errors name the offending key.
pub fn build(kind: &str, table: Option<&toml::Table>) -> Result<(Box<dyn Device>, Params)> {
    let entry = find(kind)?;
    let params = Params::resolve(entry.info.params, table)?;
    let dev = (entry.build)(&params)?;
    Ok((dev, params))
}
