//! FIFO replacement: evict the line that entered the set first; hits do not reorder
//! (MQSim_CXL `FIFO`, the policy of seed 004's synthetic experiments).

use tiersim_core::{Params, PluginInfo, Result};

use super::{Lists, Replacement, SetView, Shape};

pub const INFO: PluginInfo = PluginInfo {
    name: "fifo",
    summary: "evict the oldest insertion",
    source: "MQSim_CXL FIFO; seed 004 §4",
    params: &[],
};

pub fn build(_: &Params, s: Shape) -> Result<Box<dyn Replacement>> {
    Ok(Box::new(Fifo(Lists::new(s))))
}

pub struct Fifo(Lists);

impl Replacement for Fifo {
    fn insert(&mut self, set: usize, slot: u32) {
        self.0.push_front(set, slot);
    }
    fn hit(&mut self, _set: usize, _slot: u32) {}
    fn victim(&mut self, v: &SetView<'_>) -> u32 {
        self.0.oldest_unpinned(v)
    }
}
