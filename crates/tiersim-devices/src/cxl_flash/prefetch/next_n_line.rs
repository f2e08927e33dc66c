//! Next-N-line (tagged) prefetching (Smith, "Sequential program prefetching in memory
//! hierarchies", IEEE Computer 1978; the "Tagged" prefetcher of MQSim_CXL and seed 004 fig. 8):
//! on a demand miss, or on the first demand use of a prefetched line, fetch `nl_degree` lines
//! starting `nl_offset` lines ahead. As in MQSim_CXL, line L prefetches L+offset+1 ..= L+offset+degree,
//! so the paper's (degree, offset) pairs carry over unchanged; its defaults are (4, 16).

use tiersim_core::{Error, ParamKind, ParamSpec, Params, PluginInfo, Result};

use super::{Context, Prefetcher};

pub const PARAMS: &[ParamSpec] = &[
    ParamSpec::new(
        "nl_degree",
        ParamKind::Int,
        "4",
        "next_n_line: lines fetched per trigger (MQSim_CXL prefetchK = 4)",
    )
    .min(1.0)
    .max(1024.0),
    ParamSpec::new(
        "nl_offset",
        ParamKind::Int,
        "16",
        "next_n_line: distance of the first prefetched line beyond L+1 (MQSim_CXL prefetch_timing_offset = 16)",
    )
    .min(0.0)
    .max(1048576.0),
];

pub const INFO: PluginInfo = PluginInfo {
    name: "next_n_line",
    summary: "fetch `degree` lines `offset` lines ahead on a miss or the first use of a prefetched line",
    source: "Smith 1978 tagged prefetching; MQSim_CXL `Tagged` (seed 004 fig. 8 degree/offset)",
    params: PARAMS,
};

pub fn build(p: &Params) -> Result<Box<dyn Prefetcher>> {
    Ok(Box::new(NextNLine::new(p.uint("nl_degree"), p.uint("nl_offset"))?))
}

pub struct NextNLine {
    pub degree: u64,
    pub offset: u64,
}

impl NextNLine {
    pub fn new(degree: u64, offset: u64) -> Result<Self> {
        if degree == 0 {
            return Err(Error::config("nl_degree", "must be at least 1"));
        }
        Ok(NextNLine { degree, offset })
    }

    /// Lines L+offset+1 ..= L+offset+degree that exist on the device.
    pub fn propose(line: u64, degree: u64, offset: u64, lines: u64, out: &mut Vec<u64>) {
        let first = line.saturating_add(offset).saturating_add(1);
        for k in 0..degree {
            let l = first.saturating_add(k);
            if l >= lines {
                break;
            }
            out.push(l);
        }
    }
}

impl Prefetcher for NextNLine {
    fn on_trigger(&mut self, ctx: &Context<'_>, out: &mut Vec<u64>) {
        Self::propose(ctx.line, self.degree, self.offset, ctx.lines, out);
    }

    fn stats(&self) -> serde_json::Value {
        serde_json::json!({"degree": self.degree, "offset": self.offset})
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cxl_flash::prefetch::Counters;

    #[test]
    fn proposes_mqsim_window() {
        let mut p = NextNLine::new(4, 16).unwrap();
        let c = Counters::default();
        let mut out = Vec::new();
        p.on_trigger(&Context { line: 100, miss: true, lines: 1 << 20, counters: &c }, &mut out);
        assert_eq!(out, vec![117, 118, 119, 120]);
        out.clear();
        // The end of the device cuts the window.
        p.on_trigger(&Context { line: 100, miss: true, lines: 119, counters: &c }, &mut out);
        assert_eq!(out, vec![117, 118]);
    }
}
