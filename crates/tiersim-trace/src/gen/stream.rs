//! A STREAM-triad-like bandwidth-bound kernel, `a[i] = b[i] + s * c[i]` generalised to `arrays`
//! arrays (CloverLeaf-style stencils stream over several): for each element, read arrays
//! 1..n-1, then write array 0. Arrays split the footprint evenly and each starts on a 2 MiB
//! boundary, as a large allocation would. Threads own contiguous chunks of the index range
//! (OpenMP static schedule) and sweep them again and again until `accesses` is reached.

use tiersim_core::params::{ParamKind, ParamSpec, Params};
use tiersim_core::{Access, Error, Op, Result};

use super::{Common, Generator, ACCESSES, ACCESS_SIZE, BASE_ADDR, FOOTPRINT, GAP_INSTRUCTIONS, PAGE_SIZE, THREADS};
use crate::format::TraceMeta;

const ARRAY_ALIGN: u64 = 2 << 20;

pub const PARAMS: &[ParamSpec] = &[
    FOOTPRINT,
    ACCESSES,
    THREADS,
    ACCESS_SIZE,
    GAP_INSTRUCTIONS,
    BASE_ADDR,
    PAGE_SIZE,
    ParamSpec::new("arrays", ParamKind::Int, "3", "arrays swept together; footprint / arrays bytes each")
        .min(2.0)
        .max(64.0),
];

#[derive(Clone, Copy)]
struct Cursor {
    lo: u64,
    hi: u64,
    idx: u64,
    /// Which access of the element comes next: 0..arrays-1 read arrays 1.., arrays-1 writes 0.
    step: u64,
}

struct Stream {
    c: Common,
    arrays: u64,
    first: u64,
    array_stride: u64,
    cursors: Vec<Cursor>,
    i: u64,
}

pub fn build(p: &Params, _seed: u64) -> Result<Box<dyn Generator>> {
    let c = Common::from_params(p)?;
    let arrays = p.uint("arrays");
    let elements = c.footprint / arrays / c.access_size;
    if elements < c.threads {
        return Err(Error::config(
            "footprint",
            format!(
                "{} bytes in {arrays} arrays give {elements} elements of {} bytes, fewer than the {} threads",
                c.footprint, c.access_size, c.threads
            ),
        ));
    }
    let array_bytes = elements * c.access_size;
    let array_stride = array_bytes.div_ceil(ARRAY_ALIGN) * ARRAY_ALIGN;
    let first = c.base.div_ceil(ARRAY_ALIGN) * ARRAY_ALIGN;
    c.check_span((first - c.base) + array_stride * arrays)?;
    let cursors = (0..c.threads)
        .map(|t| {
            let lo = elements * t / c.threads;
            Cursor { lo, hi: elements * (t + 1) / c.threads, idx: lo, step: 0 }
        })
        .collect();
    Ok(Box::new(Stream { c, arrays, first, array_stride, cursors, i: 0 }))
}

impl Generator for Stream {
    fn meta(&self) -> TraceMeta {
        self.c.meta()
    }

    fn next_access(&mut self) -> Option<Access> {
        if self.i >= self.c.accesses {
            return None;
        }
        let t = (self.i % self.c.threads) as usize;
        self.i += 1;
        let cur = &mut self.cursors[t];
        let (array, op) = if cur.step + 1 < self.arrays { (cur.step + 1, Op::Read) } else { (0, Op::Write) };
        let addr = self.first + array * self.array_stride + cur.idx * self.c.access_size;
        cur.step += 1;
        if cur.step == self.arrays {
            cur.step = 0;
            cur.idx += 1;
            if cur.idx == cur.hi {
                cur.idx = cur.lo;
            }
        }
        Some(Access { time: self.c.gap, addr, cpu: t as u32, size: self.c.access_size as u16, op, flags: 0 })
    }
}
