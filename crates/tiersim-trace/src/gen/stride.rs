//! Strided sweeps: the footprint is cut into one contiguous slice per thread, and each thread
//! walks its slice `stride` bytes at a time, wrapping to the start when it runs off the end.
//! With a stride of one access this is a sequential scan; larger strides skip lines or pages
//! (the "stride" workload of the CXL-flash study). Addresses are aligned down to `access_size`.

use rand::Rng;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tiersim_core::params::{ParamKind, ParamSpec, Params};
use tiersim_core::{Access, Error, Op, Result};

use super::{Common, Generator, ACCESSES, ACCESS_SIZE, BASE_ADDR, FOOTPRINT, GAP_INSTRUCTIONS, PAGE_SIZE, THREADS};
use crate::format::TraceMeta;

pub const PARAMS: &[ParamSpec] = &[
    FOOTPRINT,
    ACCESSES,
    super::write_ratio("0.0"),
    THREADS,
    ACCESS_SIZE,
    GAP_INSTRUCTIONS,
    BASE_ADDR,
    PAGE_SIZE,
    ParamSpec::new("stride", ParamKind::Bytes, "64B", "bytes between consecutive accesses of one thread").min(1.0),
];

struct Stride {
    c: Common,
    write_ratio: f64,
    stride: u64,
    /// Bytes each thread walks: a whole number of accesses.
    slice: u64,
    /// Each thread's offset within its slice.
    pos: Vec<u64>,
    rng: ChaCha8Rng,
    i: u64,
}

pub fn build(p: &Params, seed: u64) -> Result<Box<dyn Generator>> {
    let c = Common::from_params(p)?;
    c.check_span(c.footprint)?;
    let stride = p.bytes("stride");
    if stride == 0 {
        return Err(Error::config("stride", "must be at least 1 byte"));
    }
    let slice = c.footprint / c.threads / c.access_size * c.access_size;
    Ok(Box::new(Stride {
        c,
        write_ratio: p.float("write_ratio"),
        stride,
        slice,
        pos: vec![0; c.threads as usize],
        rng: ChaCha8Rng::seed_from_u64(seed),
        i: 0,
    }))
}

impl Generator for Stride {
    fn meta(&self) -> TraceMeta {
        self.c.meta()
    }

    fn next_access(&mut self) -> Option<Access> {
        if self.i >= self.c.accesses {
            return None;
        }
        let t = (self.i % self.c.threads) as usize;
        self.i += 1;
        let pos = self.pos[t];
        self.pos[t] = ((pos as u128 + self.stride as u128) % self.slice as u128) as u64;
        let write = self.rng.gen::<f64>() < self.write_ratio;
        Some(Access {
            time: self.c.gap,
            addr: self.c.base + t as u64 * self.slice + (pos - pos % self.c.access_size),
            cpu: t as u32,
            size: self.c.access_size as u16,
            op: if write { Op::Write } else { Op::Read },
            flags: 0,
        })
    }
}
