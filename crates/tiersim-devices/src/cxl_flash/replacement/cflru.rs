//! Clean-First LRU (Park et al., "CFLRU: a replacement algorithm for flash memory", CASES 2006):
//! an LRU list whose oldest `window` lines form the clean-first region; the victim is the least
//! recently used clean line in it, or the plain LRU line when all of them are dirty, so that
//! evictions write less to flash. The window is `cflru_window` of the set's ways, at most
//! `cflru_window_max` lines (MQSim_CXL: min(ways / 2, 4096)).

use tiersim_core::{ParamKind, ParamSpec, Params, PluginInfo, Result};

use super::{Lists, Replacement, SetView, Shape};

pub const PARAMS: &[ParamSpec] = &[
    ParamSpec::new(
        "cflru_window",
        ParamKind::Float,
        "0.5",
        "cflru: clean-first window as a fraction of the ways (MQSim_CXL: 1/2)",
    )
    .min(0.0)
    .max(1.0),
    ParamSpec::new("cflru_window_max", ParamKind::Int, "4096", "cflru: largest window in lines (MQSim_CXL: 4096)")
        .min(1.0),
];

pub const INFO: PluginInfo = PluginInfo {
    name: "cflru",
    summary: "LRU that evicts the oldest clean line within a window at the LRU end",
    source: "Park et al., CFLRU, CASES 2006; MQSim_CXL CFLRU window",
    params: PARAMS,
};

pub fn build(p: &Params, s: Shape) -> Result<Box<dyn Replacement>> {
    let w = (p.float("cflru_window") * f64::from(s.ways)).round() as usize;
    let order = if s.ways <= ORDER_WAYS { Order::Ways(WayOrder::new(s)) } else { Order::Lists(Lists::new(s)) };
    Ok(Box::new(Cflru { order, window: w.min(p.uint("cflru_window_max") as usize) }))
}

/// Sets of at most this many ways keep their recency packed in one word.
const ORDER_WAYS: u32 = 16;

pub struct Cflru {
    order: Order,
    window: usize,
}

enum Order {
    Ways(WayOrder),
    /// Larger sets (up to a fully associative cache): linked lists, O(1) per hit.
    Lists(Lists),
}

/// Recency of each set of at most 16 ways as its way numbers, 4 bits each, newest in the low
/// bits. The victim search steps over the mostly dirty lines at the LRU end on every fill of a
/// full set: with linked lists each step waited for the previous one's link to load (the
/// search was 10 % of the replay's cycles on the bench's mixed trace for 4 % of its
/// instructions); here the ways to test are in one word. A hit is a few shifts and masks.
struct WayOrder {
    ways: u32,
    order: Vec<u64>,
    len: Vec<u8>,
}

const LOW_NIBBLES: u64 = 0x1111_1111_1111_1111;

impl WayOrder {
    fn new(s: Shape) -> WayOrder {
        WayOrder { ways: s.ways, order: vec![0; s.sets], len: vec![0; s.sets] }
    }

    /// Make `slot` the set's newest line (adding it if the set did not hold it).
    #[inline]
    fn touch(&mut self, set: usize, slot: u32) {
        let way = u64::from(slot - set as u32 * self.ways);
        let o = self.order[set];
        let n = u32::from(self.len[set]);
        // The lowest nibble equal to `way` (a zero nibble of o ^ way in every nibble: the
        // lowest one the bit trick flags is exact); past `n`, the line is new.
        let x = o ^ way.wrapping_mul(LOW_NIBBLES);
        let zero = x.wrapping_sub(LOW_NIBBLES) & !x & (LOW_NIBBLES << 3);
        let k = (zero.trailing_zeros() / 4).min(n);
        if k == n {
            self.len[set] += 1;
        }
        // Nibbles below k move up one; k's is replaced; those above stay.
        let below = if k >= 16 { u64::MAX } else { (1u64 << (4 * k)) - 1 };
        let above = if k >= 15 { 0 } else { u64::MAX << (4 * (k + 1)) };
        self.order[set] = (o & above) | ((o & below) << 4) | way;
    }

    fn victim(&self, v: &SetView<'_>, window: usize) -> u32 {
        let o = self.order[v.set];
        let n = u32::from(self.len[v.set]);
        let slot = |k: u32| v.first + ((o >> (4 * k)) & 15) as u32;
        for k in (n.saturating_sub(window as u32)..n).rev() {
            let s = slot(k);
            if v.dirty[s as usize] == 0 && !v.pinned(s) {
                return s;
            }
        }
        // As `Lists::oldest_unpinned`: the oldest unpinned line, else the oldest.
        (0..n).rev().map(slot).find(|&s| !v.pinned(s)).unwrap_or(if n == 0 { v.first } else { slot(n - 1) })
    }
}

impl Replacement for Cflru {
    fn insert(&mut self, set: usize, slot: u32) {
        self.hit(set, slot);
    }
    fn hit(&mut self, set: usize, slot: u32) {
        match &mut self.order {
            Order::Ways(o) => o.touch(set, slot),
            Order::Lists(l) => l.push_front(set, slot),
        }
    }
    fn victim(&mut self, v: &SetView<'_>) -> u32 {
        let l = match &self.order {
            Order::Ways(o) => return o.victim(v, self.window),
            Order::Lists(l) => l,
        };
        // The window walked by hand (it runs on every fill of a full set, and clean-first
        // eviction leaves mostly dirty lines at the tail to step over).
        let mut cur = l.tail[v.set];
        for _ in 0..self.window {
            if cur == 0 {
                break;
            }
            let s = cur - 1;
            if v.dirty[s as usize] == 0 && !v.pinned(s) {
                return s;
            }
            cur = l.prev[s as usize];
        }
        l.oldest_unpinned(v)
    }
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::super::PINNED;
    use super::*;

    /// Random fills, hits, dirtying and pins on sets of 1 to 16 ways: the packed recency picks
    /// the same victims as the linked lists (which larger sets keep).
    #[test]
    fn way_arrays_choose_as_linked_lists() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        for ways in [1u32, 2, 5, 15, 16] {
            for window in [0, 1, ways as usize / 2, ways as usize] {
                let shape = Shape { sets: 3, ways };
                let slots = shape.sets * ways as usize;
                let mut arrays = Cflru { order: Order::Ways(WayOrder::new(shape)), window };
                let mut lists = Cflru { order: Order::Lists(Lists::new(shape)), window };
                let mut dirty = vec![0u64; slots];
                let mut flags = vec![0u8; slots];
                let mut used = vec![0u32; shape.sets];
                let mut victims = 0;
                for step in 0..4000 {
                    let set = rng.gen_range(0..shape.sets);
                    let first = set as u32 * ways;
                    match rng.gen_range(0..4) {
                        0 if used[set] < ways => {
                            let slot = first + used[set];
                            used[set] += 1;
                            arrays.insert(set, slot);
                            lists.insert(set, slot);
                        }
                        0 => {
                            let v = SetView { set, first, ways, dirty: &dirty, flags: &flags };
                            let (a, b) = (arrays.victim(&v), lists.victim(&v));
                            assert_eq!(a, b, "ways {ways}, window {window}, step {step}");
                            victims += 1;
                            dirty[a as usize] = 0;
                            arrays.insert(set, a);
                            lists.insert(set, a);
                        }
                        1 if used[set] > 0 => {
                            let slot = first + rng.gen_range(0..used[set]);
                            arrays.hit(set, slot);
                            lists.hit(set, slot);
                        }
                        2 if used[set] > 0 => dirty[(first + rng.gen_range(0..used[set])) as usize] ^= 1,
                        _ if used[set] > 0 && rng.gen_bool(0.2) => {
                            flags[(first + rng.gen_range(0..used[set])) as usize] ^= PINNED
                        }
                        _ => {}
                    }
                }
                assert!(victims > 300, "ways {ways}: {victims} victims");
            }
        }
    }
}
