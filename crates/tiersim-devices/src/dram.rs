//! DRAM behind an integrated memory controller: independent channels, each an FCFS server moving
//! whole bursts at its sustained rate, with addresses interleaved across channels. Idle latency
//! is the published load-to-use figure; loaded latency grows only once a channel queues.
//! Defaults are DDR5-4800 (JEDEC JESD79-5: 4800 MT/s x 8 B = 38.4 GB/s per channel); latency and
//! efficiency are typical published values (see the parameter help); write_cost and the load term
//! default to the fit to the Mess Skylake DDR4 curves (preset skylake_ddr4). `ChannelGroup` is also the
//! media model behind the `cxl` device.

use serde_json::json;
use tiersim_core::{Error, Ns, Op, ParamKind, ParamSpec, Params, PluginInfo, Result};

use crate::loaded::Loaded;
use crate::pipe::{completion, ns_f64, ns_from_ps, ps_from_ns, within_unit, Pipe, Ps};
use crate::{Device, DeviceRequest};

/// The parameters of a channel group, with `$prefix` in front of every name so that a device
/// embedding one (the `cxl` media) declares them under its own names, and extra specs first.
macro_rules! channel_specs {
    (
        prefix: $p:literal,
        extra: [$($extra:expr),* $(,)?],
        channels: $ch:literal,
        channel_bandwidth: $bw:literal,
        efficiency: $eff:literal,
        read_latency: $rl:literal,
        write_latency: $wl:literal,
        interleave: $il:literal,
        burst: $burst:literal,
        write_cost: $wc:literal,
        $(load: [$la:literal, $law:literal, $lc:literal, $lcw:literal] $(,)?)?
    ) => {
        &[
            $($extra,)*
            ParamSpec::new(concat!($p, "channels"), ParamKind::Int, $ch, "independent memory channels")
                .min(1.0)
                .max(1024.0),
            ParamSpec::new(concat!($p, "channel_bandwidth"), ParamKind::Bandwidth, $bw,
                "peak data rate of one channel (transfer rate x bus width)")
                .min(1e6),
            ParamSpec::new(concat!($p, "efficiency"), ParamKind::Float, $eff,
                "sustained fraction of peak: refresh, read/write turnarounds and row conflicts keep \
                 STREAM-class bandwidth at about 80-90% of peak on server DDR (typical published value)")
                .min(0.01)
                .max(1.0),
            ParamSpec::new(concat!($p, "read_latency"), ParamKind::Duration, $rl,
                "idle load-to-use latency of a read as a CPU measures it (MLC-style), excluding the \
                 burst transfer"),
            ParamSpec::new(concat!($p, "write_latency"), ParamKind::Duration, $wl,
                "idle latency until a write's data is in the DRAM, excluding the burst transfer"),
            ParamSpec::new(concat!($p, "interleave"), ParamKind::Bytes, $il,
                "channel interleave granularity (power of two, at least `burst`)")
                .min(1.0)
                .max(1073741824.0),
            ParamSpec::new(concat!($p, "burst"), ParamKind::Bytes, $burst,
                "smallest transfer on a channel (power of two); shorter requests still move a burst")
                .min(1.0)
                .max(65536.0),
            ParamSpec::new(concat!($p, "hash"), ParamKind::Bool, "false",
                "XOR higher address bits into the channel index, as server controllers do, so \
                 power-of-two strides spread over the channels"),
            ParamSpec::new(concat!($p, "write_cost"), ParamKind::Float, $wc,
                "channel time of a write burst relative to a read burst: read/write turnarounds \
                 and write drains make the sustained maximum fall with the write share (fitted to \
                 the Mess Skylake DDR4 curves: 111 GB/s at 98 % reads, 83 GB/s at 52 %)")
                .min(0.1)
                .max(100.0),
            $(
            // The load term (loaded.rs) is the device's, so its keys carry no prefix. Defaults
            // are the fit to the Mess Skylake-SP 6 x DDR4-2666 curves (docs/calibrate.md).
            ParamSpec::new("load_linear_ns", ParamKind::Float, $la,
                "loaded latency: extra ns per unit utilisation with reads only (bank and row \
                 conflicts grow in proportion to load)")
                .min(0.0),
            ParamSpec::new("load_linear_write_ns", ParamKind::Float, $law,
                "extra ns per unit utilisation added per unit write fraction")
                .min(-1e6),
            ParamSpec::new("load_queue_ns", ParamKind::Float, $lc,
                "loaded latency: ns times u/(1-u), the queueing term that bends the curve at the knee")
                .min(0.0),
            ParamSpec::new("load_queue_write_ns", ParamKind::Float, $lcw,
                "ns times u/(1-u) added per unit write fraction")
                .min(-1e6),
            crate::loaded::MAX_UTIL_SPEC,
            crate::loaded::WINDOW_SPEC,
            crate::loaded::GAIN_SPEC,
            )?
        ]
    };
}
pub(crate) use channel_specs;

pub const SPECS: &[ParamSpec] = channel_specs! {
    prefix: "",
    extra: [],
    channels: "1",
    channel_bandwidth: "38.4GB/s",
    efficiency: "0.85",
    read_latency: "110ns",
    write_latency: "110ns",
    interleave: "256B",
    burst: "64B",
    write_cost: "1.741",
    load: ["31.011", "-11.134", "1.227", "0.974"],
};

pub const INFO: PluginInfo = PluginInfo {
    name: "dram",
    summary: "DDR channels: per-channel FCFS queue at sustained bandwidth plus idle latency",
    source: "JEDEC DDR5/DDR4 transfer rates; idle latency and efficiency are typical published values",
    params: SPECS,
};

pub fn build(p: &Params) -> Result<Box<dyn Device>> {
    Ok(Box::new(Dram::from_params(p)?))
}

/// Address bits folded into the channel index when `hash` is on: one fold per 12 block bits
/// (a 4 KiB page of 256 B blocks has 4 bits; 12 covers the row bits that strides hit).
const HASH_FOLD_BITS: u32 = 12;

/// A set of interleaved DRAM channels with their statistics.
#[derive(Debug, Clone)]
pub struct ChannelGroup {
    channels: Vec<Pipe>,
    /// `channels - 1` when the count is a power of two (mask instead of divide).
    mask: Option<u64>,
    /// Lemire fastmod multiplier for other counts: `u64::MAX / channels + 1`.
    fastmod: u64,
    interleave: u64,
    interleave_shift: u32,
    burst_shift: u32,
    /// Channel time of one read and one write burst, the usual requests.
    burst_service: [Ps; 2],
    /// Channel time of a read and a write of one whole interleave block (a CXL-flash cache line).
    block_service: [Ps; 2],
    /// Channel time of a write relative to a read of the same bytes.
    write_cost: f64,
    hash: bool,
    /// Read and write latency, indexed by `Op::is_write` like every per-direction array here:
    /// an index instead of a branch on a direction that random traces mispredict.
    latency: [Ps; 2],
    bandwidth: f64,
    /// Requests and bus bytes, read then write.
    requests: [u64; 2],
    bytes: [u64; 2],
    queue_total: Ps,
    queue_max: Ps,
}

fn power_of_two(p: &Params, key: &str) -> Result<u32> {
    let v = p.bytes(key);
    if !v.is_power_of_two() {
        return Err(Error::config(key, format!("{v}B is not a power of two")));
    }
    Ok(v.trailing_zeros())
}

impl ChannelGroup {
    /// Build from parameters declared by `channel_specs!` with the same `prefix`.
    pub fn from_params(p: &Params, prefix: &str) -> Result<Self> {
        let key = |name: &str| format!("{prefix}{name}");
        let n = p.uint(&key("channels"));
        if n == 0 {
            return Err(Error::config(key("channels"), "must be at least 1"));
        }
        let efficiency = p.float(&key("efficiency"));
        if !(efficiency > 0.0 && efficiency <= 1.0) {
            return Err(Error::config(key("efficiency"), format!("{efficiency} is not in (0, 1]")));
        }
        let interleave_shift = power_of_two(p, &key("interleave"))?;
        let burst_shift = power_of_two(p, &key("burst"))?;
        if burst_shift > interleave_shift {
            return Err(Error::config(
                key("interleave"),
                format!("{}B is smaller than the burst ({}B)", p.bytes(&key("interleave")), p.bytes(&key("burst"))),
            ));
        }
        let bandwidth = p.bandwidth(&key("channel_bandwidth")) * efficiency;
        let proto = Pipe::new(bandwidth);
        let write_cost = p.float(&key("write_cost"));
        let read_burst = proto.service(1 << burst_shift);
        let read_block = proto.service(1 << interleave_shift);
        Ok(ChannelGroup {
            burst_service: [read_burst, scale(read_burst, write_cost)],
            block_service: [read_block, scale(read_block, write_cost)],
            write_cost,
            channels: vec![proto; n as usize],
            mask: n.is_power_of_two().then_some(n - 1),
            fastmod: (u64::MAX / n).wrapping_add(1),
            interleave: 1 << interleave_shift,
            interleave_shift,
            burst_shift,
            hash: p.bool(&key("hash")),
            latency: [ps_from_ns(p.duration(&key("read_latency"))), ps_from_ns(p.duration(&key("write_latency")))],
            bandwidth,
            requests: [0; 2],
            bytes: [0; 2],
            queue_total: 0,
            queue_max: 0,
        })
    }

    /// log2 of the burst size.
    pub fn burst_shift(&self) -> u32 {
        self.burst_shift
    }

    pub fn num_channels(&self) -> usize {
        self.channels.len()
    }

    /// Channel holding `addr`.
    #[inline]
    pub fn channel_of(&self, addr: u64) -> usize {
        let mut block = addr >> self.interleave_shift;
        if self.hash {
            let mut x = block;
            while x != 0 {
                x >>= HASH_FOLD_BITS;
                block ^= x;
            }
        }
        let n = self.channels.len() as u64;
        match self.mask {
            Some(m) => (block & m) as usize,
            // A 64-bit divide per access costs as much as the rest of the model; blocks below
            // 2^32 (the first TiB at 256 B interleave) take two multiplies instead.
            None if block <= u64::from(u32::MAX) => {
                ((u128::from(self.fastmod.wrapping_mul(block)) * u128::from(n)) >> 64) as usize
            }
            None => (block % n) as usize,
        }
    }

    /// Bytes moved on the bus for `[addr, addr + size)`: whole bursts, at least one.
    #[inline]
    pub fn bus_bytes(&self, addr: u64, size: u32) -> u64 {
        self.span_bytes(addr, addr.saturating_add(u64::from(size.max(1)) - 1))
    }

    /// Whole bursts covering the inclusive byte range `[first, last]`.
    #[inline]
    fn span_bytes(&self, first: u64, last: u64) -> u64 {
        ((last >> self.burst_shift) - (first >> self.burst_shift) + 1) << self.burst_shift
    }

    #[inline]
    pub fn latency(&self, op: Op) -> Ps {
        self.latency[usize::from(op.is_write())]
    }

    /// Channel time of `bytes` moved in direction `op`.
    #[inline]
    fn service(&self, pipe: &Pipe, bytes: u64, op: Op) -> Ps {
        match op {
            Op::Read => pipe.service(bytes),
            Op::Write => scale(pipe.service(bytes), self.write_cost),
        }
    }

    /// Latency of a one-burst request of direction `op` on an idle channel.
    pub fn idle_burst(&self, op: Op) -> Ps {
        self.burst_service[usize::from(op.is_write())] + self.latency(op)
    }

    /// Busy time per channel so far (ps), the utilisation the load term reads.
    pub fn busy_per_channel(&self) -> f64 {
        self.channels.iter().map(Pipe::busy).sum::<Ps>() as f64 / self.channels.len() as f64
    }

    /// Serve a request arriving at `at`; returns when its data is complete (latency included).
    /// A request spanning several interleave blocks is split; each part queues on its channel and
    /// the request completes with its last part.
    #[inline(always)]
    pub fn serve(&mut self, at: Ps, addr: u64, size: u32, op: Op) -> Ps {
        // Inclusive end, so a request touching the top of the address space cannot vanish.
        let last = addr.saturating_add(u64::from(size.max(1)) - 1);
        if (addr ^ last) >> self.burst_shift == 0 {
            return self.serve_burst(at, addr, op);
        }
        self.serve_long(at, addr, last, op)
    }

    /// A request within one burst (so within one interleave block): a cache line, nearly every
    /// request. The same arithmetic as `serve_long` on that case, without its size computations.
    #[inline(always)]
    pub(crate) fn serve_burst(&mut self, at: Ps, addr: u64, op: Op) -> Ps {
        let w = usize::from(op.is_write());
        let ch = self.channel_of(addr);
        let (start, finish) = self.channels[ch].serve_for(at, 1 << self.burst_shift, self.burst_service[w]);
        self.account(w, start - at, 1 << self.burst_shift);
        finish.saturating_add(self.latency[w])
    }

    /// `serve_burst` for a caller that finishes the arithmetic itself: returns how long the
    /// burst queued (0 on an idle channel, the usual case below saturation), the burst's end
    /// being `at + queued + burst_service[w]`. The queue statistics move only when it queued.
    /// `at` must leave room for the burst's end below 2^64 ps (no saturation here).
    #[inline(always)]
    pub(crate) fn serve_burst_queued(&mut self, at: Ps, addr: u64, w: usize) -> Ps {
        let ch = self.channel_of(addr);
        let (start, _) = self.channels[ch].serve_for(at, 1 << self.burst_shift, self.burst_service[w]);
        let queued = start - at;
        if queued > 0 {
            self.queue_total = self.queue_total.saturating_add(queued);
            self.queue_max = self.queue_max.max(queued);
        }
        self.requests[w] += 1;
        self.bytes[w] = self.bytes[w].wrapping_add(1 << self.burst_shift);
        queued
    }

    /// Whether `[addr, addr + size)` lies within one burst.
    #[inline(always)]
    pub(crate) fn one_burst(&self, addr: u64, size: u32) -> bool {
        within_unit(addr, size, self.burst_shift)
    }

    #[inline]
    fn account(&mut self, w: usize, queued: Ps, bytes: u64) {
        self.queue_total = self.queue_total.saturating_add(queued);
        self.queue_max = self.queue_max.max(queued);
        self.requests[w] += 1;
        // As a pipe's byte count (pipe.rs): no saturation test needed.
        self.bytes[w] = self.bytes[w].wrapping_add(bytes);
    }

    #[inline(never)]
    fn serve_long(&mut self, at: Ps, addr: u64, last: u64, op: Op) -> Ps {
        let (done, queued, bytes) = if (addr ^ last) >> self.interleave_shift == 0 {
            let bytes = self.span_bytes(addr, last);
            let ch = self.channel_of(addr);
            let service = if bytes == self.interleave {
                self.block_service[usize::from(op.is_write())]
            } else {
                self.service(&self.channels[ch], bytes, op)
            };
            let (start, finish) = self.channels[ch].serve_for(at, bytes, service);
            (finish, start - at, bytes)
        } else {
            self.serve_split(at, addr, last, op)
        };
        self.account(usize::from(op.is_write()), queued, bytes);
        done.saturating_add(self.latency(op))
    }

    /// A request spanning interleave blocks: each block queues on its own channel.
    /// Returns (last part's end, longest wait, bus bytes).
    fn serve_split(&mut self, at: Ps, addr: u64, last: u64, op: Op) -> (Ps, Ps, u64) {
        let mut a = addr;
        let mut done = at;
        let mut queued = 0;
        let mut bytes = 0u64;
        loop {
            let chunk_last = last.min(a | (self.interleave - 1));
            let chunk_bytes = self.span_bytes(a, chunk_last);
            let ch = self.channel_of(a);
            let service = self.service(&self.channels[ch], chunk_bytes, op);
            let (start, finish) = self.channels[ch].serve_for(at, chunk_bytes, service);
            queued = queued.max(start - at);
            done = done.max(finish);
            bytes = bytes.saturating_add(chunk_bytes);
            if chunk_last >= last {
                return (done, queued, bytes);
            }
            a = chunk_last + 1;
        }
    }

    /// Latency of `size` bytes at address 0 on idle channels.
    pub fn idle(&self, op: Op, size: u32) -> Ps {
        let size = u64::from(size.max(1));
        let n = self.channels.len() as u64;
        let blocks = size.div_ceil(self.interleave);
        let pipe = &self.channels[0];
        // Without hashing, blocks of a request at address 0 go round-robin over the channels, so
        // the busiest channel is one of the first two (the last block may be partial).
        let per_channel = |c: u64| -> Ps {
            (c..blocks)
                .step_by(n as usize)
                .map(|b| {
                    let len = (size - b * self.interleave).min(self.interleave);
                    self.service(pipe, self.bus_bytes(b * self.interleave, len as u32), op)
                })
                .sum()
        };
        let busiest = (0..n.min(2).min(blocks)).map(per_channel).max().unwrap_or(0);
        busiest + self.latency(op)
    }

    /// Sustained read bandwidth of all channels together (bytes/s).
    pub fn peak_bandwidth(&self) -> f64 {
        self.bandwidth * self.channels.len() as f64
    }

    /// (bytes moved, busy time) per channel.
    pub fn channel_usage(&self) -> impl Iterator<Item = (u64, Ps)> + '_ {
        self.channels.iter().map(|c| (c.bytes(), c.busy()))
    }

    pub fn stats(&self) -> serde_json::Value {
        let reqs = self.requests[0] + self.requests[1];
        json!({
            "channels": self.channels.len(),
            "reads": self.requests[0],
            "writes": self.requests[1],
            "bytes_read": self.bytes[0],
            "bytes_written": self.bytes[1],
            "busy_ns": ns_f64(self.channels.iter().map(Pipe::busy).sum()),
            "busy_ns_per_channel": self.channels.iter().map(|c| ns_f64(c.busy())).collect::<Vec<_>>(),
            "queue_delay_ns_total": ns_f64(self.queue_total),
            "queue_delay_ns_mean": if reqs == 0 { 0.0 } else { ns_f64(self.queue_total) / reqs as f64 },
            "queue_delay_ns_max": ns_f64(self.queue_max),
        })
    }
}

/// `ps * factor`, rounded up, at least 1.
fn scale(ps: Ps, factor: f64) -> Ps {
    ((ps as f64 * factor).ceil() as Ps).max(1)
}

/// Requests issued before this (2^50 ns, 13 simulated days) take the devices' one-burst paths,
/// whose ps arithmetic cannot overflow there.
pub(crate) const FAST_PATH_NS: Ns = 1 << 50;

/// The `dram` device: one channel group and its load term.
pub struct Dram {
    group: ChannelGroup,
    load: Loaded,
    /// Idle latency of a one-burst read and write: the floor the load term raises.
    idle: [Ps; 2],
}

impl Dram {
    pub fn from_params(p: &Params) -> Result<Self> {
        crate::loaded::check(p)?;
        let group = ChannelGroup::from_params(p, "")?;
        Ok(Dram {
            idle: [group.idle_burst(Op::Read), group.idle_burst(Op::Write)],
            load: Loaded::from_params(p),
            group,
        })
    }

    pub fn group(&self) -> &ChannelGroup {
        &self.group
    }

    /// Any request: the load term's floor under the channels' FCFS completion.
    #[inline(never)]
    fn access_general(&mut self, req: &DeviceRequest) -> Ns {
        let at = ps_from_ns(req.now);
        let group = &self.group;
        let extra = self.load.extra(at, req.op, || group.busy_per_channel());
        // The load term is a floor under the queueing delay, not added to it: the FCFS wait
        // counts only when bursts exceed what the window's average predicts, or past saturation.
        let floor = at.saturating_add(extra + self.idle[usize::from(req.op.is_write())]);
        completion(req.now, self.group.serve(at, req.addr, req.size, req.op).max(floor))
    }
}

impl Device for Dram {
    #[inline]
    fn access(&mut self, req: &DeviceRequest) -> Ns {
        if req.now < FAST_PATH_NS && self.group.one_burst(req.addr, req.size) {
            // One burst, nearly every request. With the burst's end at + queued + service and
            // idle = service + latency, the general path's max(end + latency, at + extra + idle)
            // is at + idle + max(queued, extra); at = 1000 now, so its ns are now plus those of
            // idle + max(queued, extra): one small conversion, no saturation tests (nothing
            // saturates below FAST_PATH_NS unless a channel is booked 213 days ahead).
            let w = usize::from(req.op.is_write());
            let at = req.now * 1000;
            let group = &self.group;
            let extra = self.load.extra(at, req.op, || group.busy_per_channel());
            let queued = self.group.serve_burst_queued(at, req.addr, w);
            let idle = self.idle[w];
            return req.now + ns_from_ps(queued.max(extra).saturating_add(idle));
        }
        self.access_general(req)
    }

    fn idle_latency(&self, op: Op, size: u32) -> Ns {
        ns_from_ps(self.group.idle(op, size))
    }

    fn peak_bandwidth(&self) -> f64 {
        self.group.peak_bandwidth()
    }

    fn stats(&self) -> serde_json::Value {
        let mut s = self.group.stats();
        s["device"] = json!("dram");
        s["load"] = self.load.stats();
        s
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;

    /// 200k requests from `start` ns: runs a few ns apart (channels queue) between idle gaps,
    /// now and then one issued in the past; mostly aligned lines, some short, unaligned (a few
    /// crossing a burst) or longer than a block, 30 % writes.
    pub(crate) fn random_requests(start: Ns) -> impl Iterator<Item = DeviceRequest> {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let mut now = start;
        (0..200_000).map(move |_| {
            now = match rng.gen_range(0..100) {
                0 => now.saturating_sub(rng.gen_range(0..50)),
                1..=4 => now + rng.gen_range(100..3000),
                _ => now + rng.gen_range(0..3),
            };
            let (addr, size) = match rng.gen_range(0..10) {
                0 => (rng.gen_range(0..1 << 36), rng.gen_range(1..16)),
                1 => (rng.gen_range(0..1 << 36), [128, 256, 4096][rng.gen_range(0..3)]),
                _ => (rng.gen_range(0..1u64 << 36) & !63, 64),
            };
            let op = if rng.gen_bool(0.3) { Op::Write } else { Op::Read };
            DeviceRequest { now, addr, size, op, socket: 0, cpu: 0, remote: false }
        })
    }

    /// The one-burst path against the general one it shortcuts: the same completions and
    /// statistics on idle and queued channels, across load windows, up to and past the path's
    /// time limit.
    #[test]
    fn one_burst_path_matches_the_general_one() {
        for params in ["channels = 12", "channels = 4\nhash = true\nload_window = \"200ns\""] {
            let p = Params::resolve(SPECS, Some(&toml::from_str(params).unwrap())).unwrap();
            for start in [0, FAST_PATH_NS - 200_000] {
                let (mut short, mut general) = (Dram::from_params(&p).unwrap(), Dram::from_params(&p).unwrap());
                for (i, req) in random_requests(start).enumerate() {
                    assert_eq!(short.access(&req), general.access_general(&req), "{params:?}, request {i}: {req:?}");
                }
                assert_eq!(short.stats(), general.stats(), "{params:?}");
                assert!(general.group.queue_max > 0, "the channels never queued");
                assert!(general.load.stats()["windows"].as_u64().unwrap() > 100);
            }
        }
    }
}
