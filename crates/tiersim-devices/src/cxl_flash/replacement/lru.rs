//! LRU replacement: evict the least recently used line of the set (MQSim_CXL `LRU`, which is
//! its CFLRU list with a zero window; its bug B4, a crash on one-line sets, has no counterpart here).

use tiersim_core::{Params, PluginInfo, Result};

use super::{Lists, Replacement, SetView, Shape};

pub const INFO: PluginInfo = PluginInfo {
    name: "lru",
    summary: "evict the least recently used line",
    source: "MQSim_CXL LRU; seed 004 §5.1",
    params: &[],
};

pub fn build(_: &Params, s: Shape) -> Result<Box<dyn Replacement>> {
    Ok(Box::new(Lru(Lists::new(s))))
}

pub struct Lru(Lists);

impl Replacement for Lru {
    fn insert(&mut self, set: usize, slot: u32) {
        self.0.push_front(set, slot);
    }
    fn hit(&mut self, set: usize, slot: u32) {
        self.0.push_front(set, slot);
    }
    fn victim(&mut self, v: &SetView<'_>) -> u32 {
        self.0.oldest_unpinned(v)
    }
}
