//! Random replacement: evict a uniformly chosen unpinned way, from a ChaCha8 stream seeded by
//! `seed` so runs repeat exactly (MQSim_CXL `Random` uses unseeded rand() with a RAND_MAX+1
//! overflow, its bug B8).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tiersim_core::{Params, PluginInfo, Result};

use super::{Replacement, SetView, Shape};

pub const INFO: PluginInfo = PluginInfo {
    name: "random",
    summary: "evict a uniformly random way (seeded by the device's `seed`)",
    source: "MQSim_CXL Random (the baseline of seed 004 §5.1)",
    params: &[],
};

pub fn build(p: &Params, _: Shape) -> Result<Box<dyn Replacement>> {
    Ok(Box::new(RandomRepl(ChaCha8Rng::seed_from_u64(p.uint("seed")))))
}

pub struct RandomRepl(ChaCha8Rng);

impl Replacement for RandomRepl {
    fn insert(&mut self, _set: usize, _slot: u32) {}
    fn hit(&mut self, _set: usize, _slot: u32) {}
    fn victim(&mut self, v: &SetView<'_>) -> u32 {
        let start = self.0.gen_range(0..v.ways);
        (0..v.ways).map(|k| v.first + (start + k) % v.ways).find(|&s| !v.pinned(s)).unwrap_or(v.first + start)
    }
}
