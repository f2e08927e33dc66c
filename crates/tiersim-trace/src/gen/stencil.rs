//! A CloverLeaf-like hydrodynamics time step (Mallinson et al., "CloverLeaf: Preparing
//! Hydrodynamics Codes for Exascale", CUG 2013): `fields` 2-D arrays of nx x nx f64 cells. Each
//! time step runs one kernel per field: kernel k reads a 5-point stencil of field k and the same
//! cell of field k+2, and writes field k+1 (indices mod `fields`), over the interior cells,
//! row by row. Several large arrays stream per step with little reuse, so the code is
//! bandwidth-bound. Threads split the rows of every kernel (OpenMP static) and meet at a
//! barrier after each. Each interior cell costs 7 accesses per kernel. Memory: O(threads).

use tiersim_core::params::{ParamKind, ParamSpec, Params};
use tiersim_core::{Error, Result};

use super::program::{chunk, Driver, Layout, Out, Program, Step};
use super::{Common, Generator, ACCESSES, BASE_ADDR, FOOTPRINT, GAP_INSTRUCTIONS, PAGE_SIZE, THREADS};

const ELEM: u64 = 8;

pub const PARAMS: &[ParamSpec] = &[
    FOOTPRINT,
    ACCESSES,
    THREADS,
    GAP_INSTRUCTIONS,
    BASE_ADDR,
    PAGE_SIZE,
    ParamSpec::new("fields", ParamKind::Int, "6", "2-D arrays (CloverLeaf fields); footprint / fields bytes each")
        .min(3.0)
        .max(64.0),
];

#[derive(Clone, Copy)]
struct Cursor {
    row: u64,
    hi: u64,
    col: u64,
}

struct Stencil {
    nx: u64,
    fields: Vec<u64>,
    kernel: usize,
    cur: Vec<Cursor>,
}

/// Cells per side: the largest nx whose `fields` nx x nx arrays fit the footprint.
pub fn side(footprint: u64, fields: u64) -> u64 {
    let mut n = ((footprint / (fields * ELEM)) as f64).sqrt() as u64;
    while fields * ELEM * (n + 1) * (n + 1) <= footprint {
        n += 1;
    }
    while n > 0 && fields * ELEM * n * n > footprint {
        n -= 1;
    }
    n
}

pub fn build(p: &Params, _seed: u64) -> Result<Box<dyn Generator>> {
    let c = Common::with_access_size(p, ELEM)?;
    let nf = p.uint("fields");
    let nx = side(c.footprint, nf);
    if nx < 3 || nx - 2 < c.threads {
        return Err(Error::config(
            "footprint",
            format!(
                "{} bytes give {nf} grids of {nx} x {nx} cells: need at least one interior row per thread",
                c.footprint
            ),
        ));
    }
    let mut l = Layout::new(&c);
    let fields = (0..nf).map(|_| l.alloc(nx * nx * ELEM)).collect::<Result<Vec<_>>>()?;
    let mut s = Stencil { nx, fields, kernel: 0, cur: Vec::new() };
    s.start_kernel(c.threads as usize);
    Ok(Driver::boxed(s, &c))
}

impl Stencil {
    fn start_kernel(&mut self, threads: usize) {
        self.cur = (0..threads)
            .map(|t| {
                let (lo, hi) = chunk(self.nx - 2, t, threads);
                Cursor { row: lo + 1, hi: hi + 1, col: 1 }
            })
            .collect();
    }
}

impl Program for Stencil {
    fn step(&mut self, t: usize, out: &mut Out<'_>) -> Step {
        let nx = self.nx;
        let nf = self.fields.len();
        let cur = &mut self.cur[t];
        if cur.row >= cur.hi {
            return Step::Wait;
        }
        let k = self.kernel;
        let (src, aux, dst) = (self.fields[k], self.fields[(k + 2) % nf], self.fields[(k + 1) % nf]);
        let cell = |base: u64, r: u64, c: u64| base + (r * nx + c) * ELEM;
        let (r, c) = (cur.row, cur.col);
        out.read(cell(src, r - 1, c), ELEM);
        out.read(cell(src, r, c - 1), ELEM);
        out.read(cell(src, r, c), ELEM);
        out.read(cell(src, r, c + 1), ELEM);
        out.read(cell(src, r + 1, c), ELEM);
        out.read(cell(aux, r, c), ELEM);
        out.write(cell(dst, r, c), ELEM);
        cur.col += 1;
        if cur.col == nx - 1 {
            cur.col = 1;
            cur.row += 1;
        }
        Step::Ran
    }

    fn barrier(&mut self) -> bool {
        self.kernel = (self.kernel + 1) % self.fields.len();
        self.start_kernel(self.cur.len());
        true
    }
}
