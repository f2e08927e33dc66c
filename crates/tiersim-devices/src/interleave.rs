//! An interleave set: several identical devices behind one address space, as the 4 CXL modules
//! of one NUMA node (CXL host-bridge interleave) or the 6 Optane DIMMs of a socket (4 KiB
//! interleave, seed 000). Address chunk k of `granule` bytes goes to device k mod count, which
//! sees a dense address space of its own.

use tiersim_core::{Ns, Op, Params, Result};

use crate::{Device, DeviceRequest};

/// `count` devices interleaved at `granule` bytes: device = (addr / granule) % count, and each
/// device sees a dense address space of its own.
pub struct InterleaveSet {
    devices: Vec<Box<dyn Device>>,
    shift: u32,
    /// log2(count) when count is a power of two: spares two divisions per access.
    count_shift: Option<u32>,
}

impl InterleaveSet {
    /// `count` devices built by `build` from `params`, interleaved at `granule` bytes (a power
    /// of two).
    pub fn build(build: crate::BuildFn, params: &Params, count: u32, granule: u64) -> Result<Self> {
        let devices = (0..count).map(|_| build(params)).collect::<Result<Vec<_>>>()?;
        Ok(InterleaveSet {
            devices,
            shift: granule.trailing_zeros(),
            count_shift: count.is_power_of_two().then(|| count.trailing_zeros()),
        })
    }

    #[inline]
    pub fn access(&mut self, req: &DeviceRequest) -> Ns {
        self.access_local(&mut DeviceRequest { ..*req })
    }

    /// `access`, rewriting `req.addr` to the address within the device that serves it: no
    /// copy of the request when the caller has no further use for it (the engine's access path).
    #[inline]
    pub fn access_local(&mut self, req: &mut DeviceRequest) -> Ns {
        let n = self.devices.len() as u64;
        if n == 1 {
            return self.devices[0].access(req);
        }
        let chunk = req.addr >> self.shift;
        let mask = (1u64 << self.shift) - 1;
        let (row, dev) = match self.count_shift {
            Some(k) => (chunk >> k, chunk & (n - 1)),
            None => (chunk / n, chunk % n),
        };
        req.addr = (row << self.shift) | (req.addr & mask);
        self.devices[dev as usize].access(req)
    }

    /// Pass a host hint to the devices holding `[addr, addr + size)`, chunk by chunk.
    pub fn hint(&mut self, now: Ns, addr: u64, size: u64) {
        let n = self.devices.len() as u64;
        let g = 1u64 << self.shift;
        let end = addr.saturating_add(size.max(1));
        let mut a = addr;
        while a < end {
            let chunk = a >> self.shift;
            let len = (end - a).min(g - (a & (g - 1)));
            let (row, dev) = (chunk / n, chunk % n);
            self.devices[dev as usize].hint(now, (row << self.shift) | (a & (g - 1)), len);
            a += len;
        }
    }

    /// Whether the devices act on host hints (they are identical, so the first answers).
    pub fn accepts_hints(&self) -> bool {
        self.devices[0].accepts_hints()
    }

    pub fn idle_latency(&self, op: Op, size: u32) -> Ns {
        self.devices[0].idle_latency(op, size)
    }

    pub fn peak_bandwidth(&self) -> f64 {
        self.devices.iter().map(|d| d.peak_bandwidth()).sum()
    }

    pub fn stats(&self) -> serde_json::Value {
        if self.devices.len() == 1 {
            return self.devices[0].stats();
        }
        serde_json::Value::Array(self.devices.iter().map(|d| d.stats()).collect())
    }
}
