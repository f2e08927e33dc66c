//! Naive dense matrix multiply C = A x B over n x n f64 matrices in the i-j-k loop order: the
//! innermost loop walks a row of A with unit stride and a column of B with a stride of one row,
//! then stores C[i][j]. One multiply makes 2n^3 + n^2 accesses of 8 bytes. The "matrix
//! multiplication" workload of the CXL-flash study (Yang et al., ATC'23, fig. 3b). Threads split
//! the rows of C (OpenMP static) and the multiply repeats until `accesses` is reached.
//! Memory: O(threads); the matrices are never materialized.

use tiersim_core::params::{ParamSpec, Params};
use tiersim_core::{Error, Result};

use super::program::{chunk, Driver, Layout, Out, Program, Step};
use super::{Common, Generator, ACCESSES, BASE_ADDR, FOOTPRINT, GAP_INSTRUCTIONS, PAGE_SIZE, THREADS};

const ELEM: u64 = 8;

pub const PARAMS: &[ParamSpec] = &[FOOTPRINT, ACCESSES, THREADS, GAP_INSTRUCTIONS, BASE_ADDR, PAGE_SIZE];

#[derive(Clone, Copy)]
struct Cursor {
    i: u64,
    hi: u64,
    j: u64,
    k: u64,
}

struct Matmul {
    n: u64,
    a: u64,
    b: u64,
    c: u64,
    cur: Vec<Cursor>,
    threads: usize,
}

/// Order of the matrices: the largest n whose three n x n f64 matrices fit the footprint.
pub fn order(footprint: u64) -> u64 {
    let mut n = ((footprint / (3 * ELEM)) as f64).sqrt() as u64;
    while 3 * ELEM * (n + 1) * (n + 1) <= footprint {
        n += 1;
    }
    while n > 0 && 3 * ELEM * n * n > footprint {
        n -= 1;
    }
    n
}

pub fn build(p: &Params, _seed: u64) -> Result<Box<dyn Generator>> {
    let c = Common::with_access_size(p, ELEM)?;
    let n = order(c.footprint);
    if n < c.threads {
        return Err(Error::config(
            "footprint",
            format!("{} bytes give {n} x {n} matrices, fewer rows than the {} threads", c.footprint, c.threads),
        ));
    }
    let mut l = Layout::new(&c);
    let (a, b, cm) = (l.alloc(n * n * ELEM)?, l.alloc(n * n * ELEM)?, l.alloc(n * n * ELEM)?);
    let threads = c.threads as usize;
    let mut m = Matmul { n, a, b, c: cm, cur: Vec::new(), threads };
    m.reset();
    Ok(Driver::boxed(m, &c))
}

impl Matmul {
    fn reset(&mut self) {
        self.cur = (0..self.threads)
            .map(|t| {
                let (lo, hi) = chunk(self.n, t, self.threads);
                Cursor { i: lo, hi, j: 0, k: 0 }
            })
            .collect();
    }
}

impl Program for Matmul {
    fn step(&mut self, t: usize, out: &mut Out<'_>) -> Step {
        let n = self.n;
        let cur = &mut self.cur[t];
        if cur.i >= cur.hi {
            return Step::Wait;
        }
        if cur.k < n {
            out.read(self.a + (cur.i * n + cur.k) * ELEM, ELEM);
            out.read(self.b + (cur.k * n + cur.j) * ELEM, ELEM);
            cur.k += 1;
        } else {
            out.write(self.c + (cur.i * n + cur.j) * ELEM, ELEM);
            cur.k = 0;
            cur.j += 1;
            if cur.j == n {
                cur.j = 0;
                cur.i += 1;
            }
        }
        Step::Ran
    }

    fn barrier(&mut self) -> bool {
        self.reset();
        true
    }
}
