//! Uniformly random accesses: every access picks an `access_size`-aligned slot anywhere in the
//! footprint with equal probability, so there is no locality beyond the page a slot falls in.
//! This is the worst case for a fast tier smaller than the footprint and the baseline against
//! which tiering policies show their gain (the "random" workload of the CXL-flash study).
//! `file_share` maps the top share of the footprint from a file: its accesses carry
//! `Access::FILE`, so the OS model keeps those pages in the page cache (file LRU lists). The
//! file starts on a 4 KiB boundary, and the trace opens with its mapping record(s)
//! (`Access::MAP`, CPU 0, no gap) so that fault read-around stops at its bounds.

use rand::Rng;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tiersim_core::params::{ParamKind, ParamSpec, Params};
use tiersim_core::{Access, Op, Result};

use super::{Common, Generator, ACCESSES, ACCESS_SIZE, BASE_ADDR, FOOTPRINT, GAP_INSTRUCTIONS, PAGE_SIZE, THREADS};
use crate::format::TraceMeta;

pub const PARAMS: &[ParamSpec] = &[
    FOOTPRINT,
    ACCESSES,
    super::write_ratio("0.3"),
    THREADS,
    ACCESS_SIZE,
    GAP_INSTRUCTIONS,
    BASE_ADDR,
    PAGE_SIZE,
    ParamSpec::new(
        "file_share",
        ParamKind::Float,
        "0",
        "share of the footprint (its upper end) mapped from a file: page-cache pages, not anonymous",
    )
    .min(0.0)
    .max(1.0),
];

struct Random {
    c: Common,
    write_ratio: f64,
    slots: u64,
    /// Slots from here up are file-backed.
    file_from: u64,
    /// The file's mapping records, emitted first.
    maps: std::vec::IntoIter<Access>,
    rng: ChaCha8Rng,
    i: u64,
}

pub fn build(p: &Params, seed: u64) -> Result<Box<dyn Generator>> {
    let c = Common::from_params(p)?;
    c.check_span(c.footprint)?;
    let slots = c.footprint / c.access_size;
    // The file's first slot starts a page, so no page holds both anonymous and file bytes.
    let share = p.float("file_share");
    let raw = (slots as f64 * (1.0 - share)).round() as u64 * c.access_size;
    let file_from = raw.next_multiple_of(Access::MAP_UNIT).div_ceil(c.access_size).min(slots);
    let file_start = (file_from * c.access_size).next_multiple_of(Access::MAP_UNIT);
    let maps = if share > 0.0 && file_start < c.footprint {
        Access::mapping(c.base + file_start, c.footprint - file_start, 0, 0)
    } else {
        Vec::new()
    };
    Ok(Box::new(Random {
        c,
        write_ratio: p.float("write_ratio"),
        slots,
        file_from,
        maps: maps.into_iter(),
        rng: ChaCha8Rng::seed_from_u64(seed),
        i: 0,
    }))
}

impl Generator for Random {
    fn meta(&self) -> TraceMeta {
        self.c.meta()
    }

    fn next_access(&mut self) -> Option<Access> {
        if let Some(m) = self.maps.next() {
            return Some(m);
        }
        if self.i >= self.c.accesses {
            return None;
        }
        let cpu = (self.i % self.c.threads) as u32;
        self.i += 1;
        // Both draws happen every time, so the address sequence does not depend on write_ratio.
        let slot = self.rng.gen_range(0..self.slots);
        let write = self.rng.gen::<f64>() < self.write_ratio;
        Some(Access {
            time: self.c.gap,
            addr: self.c.base + slot * self.c.access_size,
            cpu,
            size: self.c.access_size as u16,
            op: if write { Op::Write } else { Op::Read },
            flags: if slot >= self.file_from { Access::FILE } else { 0 },
        })
    }
}
