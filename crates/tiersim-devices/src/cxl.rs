//! A CXL Type-3 memory expander: a PCIe/CXL link with one FCFS pipe per direction and a fixed
//! round-trip latency (host port, PHY, device controller), in front of DRAM channels
//! modelled by `dram::ChannelGroup`. Defaults are a Micron CZ120-class module (PCIe 5.0 x8, two
//! DDR4 channels; Micron/AMD white paper, reference seed 003) with the link and latency split
//! chosen to match published totals: ~250-270 ns idle load latency and ~36 GB/s at 2:1 R/W.
//! The media write cost and the load term (loaded.rs) default to the fit to Micron's modelled
//! expander curves (preset cxl_expander, docs/calibrate.md).

use serde_json::json;
use tiersim_core::{Ns, Op, ParamKind, ParamSpec, Params, PluginInfo, Result};

use crate::dram::{channel_specs, ChannelGroup, FAST_PATH_NS};
use crate::loaded::Loaded;
use crate::pipe::{completion, ns_f64, ns_from_ps, ps_from_ns, within_unit, Pipe, Ps};
use crate::{Device, DeviceRequest};

pub const SPECS: &[ParamSpec] = channel_specs! {
    prefix: "media_",
    extra: [
        ParamSpec::new("link_latency", ParamKind::Duration, "170ns",
            "round-trip latency the CXL port, link and device controller add; with the media \
             defaults the idle read is ~256 ns vs ~112 ns local DDR5, in the 2-2.5x band that \
             published CZ120-class measurements show (250-270 ns vs 110-120 ns local)"),
        ParamSpec::new("link_read_bandwidth", ParamKind::Bandwidth, "27GB/s",
            "device-to-host payload bandwidth: PCIe 5.0 x8 is 32 GB/s raw per direction, about \
             26-28 GB/s after flit framing and slot headers (typical published value)")
            .min(1e6),
        ParamSpec::new("link_write_bandwidth", ParamKind::Bandwidth, "27GB/s",
            "host-to-device payload bandwidth (see link_read_bandwidth)")
            .min(1e6),
        ParamSpec::new("link_line", ParamKind::Bytes, "64B",
            "CXL.mem transfer unit: requests move whole lines over the link")
            .min(1.0)
            .max(4096.0),
        ParamSpec::new("link_header", ParamKind::Bytes, "16B",
            "link bytes of a message without data (read request, write completion): one 16 B \
             slot of a 68 B flit")
            .max(4096.0),
    ],
    channels: "2",
    channel_bandwidth: "25.6GB/s",
    efficiency: "0.85",
    read_latency: "80ns",
    write_latency: "80ns",
    interleave: "256B",
    burst: "64B",
    write_cost: "1.177",
    load: ["5.324", "40.591", "0.538", "0.748"],
};

pub const INFO: PluginInfo = PluginInfo {
    name: "cxl",
    summary: "CXL Type-3 memory expander: per-direction link pipes + round-trip latency + DRAM channels",
    source: "Micron CZ120 (PCIe 5.0 x8, 2x DDR4; Micron/AMD white paper, seed 003; up to 36 GB/s at 2:1 R/W, \
             Micron launch figures); link efficiency and latency split are typical published values",
    params: SPECS,
};

pub fn build(p: &Params) -> Result<Box<dyn Device>> {
    Ok(Box::new(Cxl::from_params(p)?))
}

pub struct Cxl {
    /// Host-to-device: read requests, write data.
    h2d: Pipe,
    /// Device-to-host: read data, write completions.
    d2h: Pipe,
    link_latency: Ps,
    link_read_bandwidth: f64,
    line_shift: Option<u32>,
    line: u64,
    header: u64,
    /// (request, response) link time of a one-line read and write, the usual request.
    one_line: [(Ps, Ps); 2],
    /// Their (request, response) link bytes.
    one_line_bytes: [(u64, u64); 2],
    /// A link line fits in a media burst, so a one-line request is one burst on the media.
    line_in_burst: bool,
    media: ChannelGroup,
    load: Loaded,
    /// Idle latency of a one-line read and write: the floor the load term raises.
    idle: [Ps; 2],
    /// The media's idle latency of a one-burst read and write.
    media_idle: [Ps; 2],
    /// log2 of the line where `line_in_burst` (then a power of two).
    fast_line_shift: u32,
}

impl Cxl {
    pub fn from_params(p: &Params) -> Result<Self> {
        let line = p.bytes("link_line");
        let header = p.bytes("link_header");
        let h2d = Pipe::new(p.bandwidth("link_write_bandwidth"));
        let d2h = Pipe::new(p.bandwidth("link_read_bandwidth"));
        let one_line_bytes = [(header, line), (line, header)];
        let one_line = one_line_bytes.map(|(up, down)| (h2d.service(up), d2h.service(down)));
        crate::loaded::check(p)?;
        let media = ChannelGroup::from_params(p, "media_")?;
        let link_latency = ps_from_ns(p.duration("link_latency"));
        let line_in_burst = line.is_power_of_two() && line.trailing_zeros() <= media.burst_shift();
        let idle = [Op::Read, Op::Write].map(|op| {
            let (up, down) = one_line[usize::from(op.is_write())];
            up + media.idle_burst(op) + down + link_latency
        });
        let media_idle = [media.idle_burst(Op::Read), media.idle_burst(Op::Write)];
        Ok(Cxl {
            h2d,
            d2h,
            link_latency,
            link_read_bandwidth: p.bandwidth("link_read_bandwidth"),
            line_shift: line.is_power_of_two().then_some(line.trailing_zeros()),
            line,
            header,
            one_line,
            one_line_bytes,
            line_in_burst,
            media,
            load: Loaded::from_params(p),
            idle,
            media_idle,
            fast_line_shift: line.trailing_zeros(),
        })
    }

    /// Any request: the load term's floor under the link and media's FCFS completion.
    #[inline(never)]
    fn access_general(&mut self, req: &DeviceRequest) -> Ns {
        let w = usize::from(req.op.is_write());
        let lines = match self.line_shift {
            // One line, nearly every request: its link bytes and times are kept.
            Some(s) if within_unit(req.addr, req.size, s) => 1,
            _ => self.lines(req.addr, req.size),
        };
        let (up, down, up_t, down_t) = if lines == 1 {
            let (up, down) = self.one_line_bytes[w];
            let (up_t, down_t) = self.one_line[w];
            (up, down, up_t, down_t)
        } else {
            let (up, down) = self.message_bytes(req.op, lines);
            (up, down, self.h2d.service(up), self.d2h.service(down))
        };
        let at = ps_from_ns(req.now);
        let (h2d, d2h, media) = (&self.h2d, &self.d2h, &self.media);
        // The bottleneck of the window is whichever of the link directions and the media is busiest.
        let extra =
            self.load.extra(at, req.op, || (h2d.busy() as f64).max(d2h.busy() as f64).max(media.busy_per_channel()));
        let (_, arrived) = self.h2d.serve_for(at, up, up_t);
        let media_done = if lines == 1 && self.line_in_burst {
            // What `serve` would choose, without its second look at the request's span.
            self.media.serve_burst(arrived, req.addr, req.op)
        } else {
            self.media.serve(arrived, req.addr, req.size, req.op)
        };
        let (_, returned) = self.d2h.serve_for(media_done, down, down_t);
        let floor = at.saturating_add(extra + self.idle[w]);
        completion(req.now, returned.saturating_add(self.link_latency).max(floor))
    }

    pub fn media(&self) -> &ChannelGroup {
        &self.media
    }

    /// Lines covering `[addr, addr + size)`.
    #[inline]
    fn lines(&self, addr: u64, size: u32) -> u64 {
        let last = addr.saturating_add(u64::from(size.max(1)) - 1);
        match self.line_shift {
            Some(s) => (last >> s) - (addr >> s) + 1,
            None => last / self.line - addr / self.line + 1,
        }
    }

    /// Link bytes of (request, response) for a request of `lines` lines.
    #[inline]
    fn message_bytes(&self, op: Op, lines: u64) -> (u64, u64) {
        let data = lines.saturating_mul(self.line);
        let headers = lines.saturating_mul(self.header);
        match op {
            Op::Read => (headers, data),
            Op::Write => (data, headers),
        }
    }
}

impl Device for Cxl {
    #[inline]
    fn access(&mut self, req: &DeviceRequest) -> Ns {
        let w = usize::from(req.op.is_write());
        if req.now < FAST_PATH_NS && self.line_in_burst && within_unit(req.addr, req.size, self.fast_line_shift) {
            // One line, so one media burst (`line_in_burst`), nearly every request. The general
            // path's returned + link latency is at + idle + the waits at the three stages, so as
            // in `Dram::access` the completion is now plus the ns of idle + max(waits, extra).
            let at = req.now * 1000;
            let (h2d, d2h, media) = (&self.h2d, &self.d2h, &self.media);
            let extra = self
                .load
                .extra(at, req.op, || (h2d.busy() as f64).max(d2h.busy() as f64).max(media.busy_per_channel()));
            let (up, down) = self.one_line_bytes[w];
            let (up_t, down_t) = self.one_line[w];
            let (sent, arrived) = self.h2d.serve_for(at, up, up_t);
            let media_wait = self.media.serve_burst_queued(arrived, req.addr, w);
            let media_done = arrived + media_wait + self.media_idle[w];
            let (returning, _) = self.d2h.serve_for(media_done, down, down_t);
            let waits = (sent - at) + media_wait + (returning - media_done);
            return req.now + ns_from_ps(waits.max(extra).saturating_add(self.idle[w]));
        }
        self.access_general(req)
    }

    fn idle_latency(&self, op: Op, size: u32) -> Ns {
        let (up, down) = self.message_bytes(op, self.lines(0, size));
        ns_from_ps(self.h2d.service(up) + self.media.idle(op, size) + self.d2h.service(down) + self.link_latency)
    }

    /// Read bandwidth: the smaller of the device-to-host pipe and the media.
    fn peak_bandwidth(&self) -> f64 {
        self.link_read_bandwidth.min(self.media.peak_bandwidth())
    }

    fn stats(&self) -> serde_json::Value {
        json!({
            "device": "cxl",
            "link": {
                "h2d_busy_ns": ns_f64(self.h2d.busy()),
                "h2d_bytes": self.h2d.bytes(),
                "d2h_busy_ns": ns_f64(self.d2h.busy()),
                "d2h_bytes": self.d2h.bytes(),
            },
            "media": self.media.stats(),
            "load": self.load.stats(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dram::tests::random_requests;

    /// The one-line path against the general one: the same completions and statistics, with
    /// lines smaller than a burst (two lines to a burst: only one-line requests take the short
    /// path) and larger (none does).
    #[test]
    fn one_line_path_matches_the_general_one() {
        for params in ["", "link_line = \"32B\"\nload_window = \"300ns\"", "link_line = \"128B\""] {
            let p = Params::resolve(SPECS, Some(&toml::from_str(params).unwrap())).unwrap();
            for start in [0, FAST_PATH_NS - 200_000] {
                let (mut short, mut general) = (Cxl::from_params(&p).unwrap(), Cxl::from_params(&p).unwrap());
                for (i, req) in random_requests(start).enumerate() {
                    assert_eq!(short.access(&req), general.access_general(&req), "{params:?}, request {i}: {req:?}");
                }
                assert_eq!(short.stats(), general.stats(), "{params:?}");
                assert!(general.media.stats()["queue_delay_ns_max"].as_f64().unwrap() > 0.0, "the media never queued");
            }
        }
    }
}
