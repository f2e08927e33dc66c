//! Clean-First LRU (Park et al., "CFLRU: a replacement algorithm for flash memory", CASES 2006):
//! an LRU list whose oldest `window` lines form the clean-first region; the victim is the least
//! recently used clean line in it, or the plain LRU line when all of them are dirty, so that
//! evictions write less to flash. The window is `cflru_window` of the set's ways, at most
//! `cflru_window_max` lines (MQSim_CXL: min(ways / 2, 4096)).

use tiersim_core::{ParamKind, ParamSpec, Params, PluginInfo, Result};

use super::{Lists, Replacement, SetView, Shape};

pub const PARAMS: &[ParamSpec] = &[
    ParamSpec::new("cflru_window", ParamKind::Float, "0.5", "cflru: clean-first window as a fraction of the ways (MQSim_CXL: 1/2)")
        .min(0.0)
        .max(1.0),
    ParamSpec::new("cflru_window_max", ParamKind::Int, "4096", "cflru: largest window in lines (MQSim_CXL: 4096)").min(1.0),
];

pub const INFO: PluginInfo = PluginInfo {
    name: "cflru",
    summary: "LRU that evicts the oldest clean line within a window at the LRU end",
    source: "Park et al., CFLRU, CASES 2006; MQSim_CXL CFLRU window",
    params: PARAMS,
};

pub fn build(p: &Params, s: Shape) -> Result<Box<dyn Replacement>> {
    let w = (p.float("cflru_window") * f64::from(s.ways)).round() as usize;
    Ok(Box::new(Cflru { lists: Lists::new(s), window: w.min(p.uint("cflru_window_max") as usize) }))
}

pub struct Cflru {
    lists: Lists,
    window: usize,
}

impl Replacement for Cflru {
    fn insert(&mut self, set: usize, slot: u32) {
        self.lists.push_front(set, slot);
    }
    fn hit(&mut self, set: usize, slot: u32) {
        self.lists.push_front(set, slot);
    }
    fn victim(&mut self, v: &SetView<'_>) -> u32 {
        // The window walked by hand (it runs on every fill of a full set, and clean-first
        // eviction leaves mostly dirty lines at the tail to step over).
        let mut cur = self.lists.tail[v.set];
        for _ in 0..self.window {
            if cur == 0 {
                break;
            }
            let s = cur - 1;
            if v.dirty[s as usize] == 0 && !v.pinned(s) {
                return s;
            }
            cur = self.lists.prev[s as usize];
        }
        self.lists.oldest_unpinned(v)
    }
}
