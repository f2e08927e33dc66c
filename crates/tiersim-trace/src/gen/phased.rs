//! A program that first fills memory with intermediate data and then runs a hot kernel on a
//! small part of it: graph500 generates its edge list (most of its memory), builds the graph
//! from it, then runs BFS over the much smaller graph (Kim et al., "Exploring the Design Space
//! of Page Management for Multi-Tiered Memory Systems" (AutoTiering), ATC'21, sec. 5: the reason
//! its OPM demotes cold pages). Phase 1 writes the intermediate region line by line; phase 2
//! reads it back while writing the hot region (`hot_fraction` of the footprint, allocated after
//! it); phase 3 makes `accesses` uniformly random accesses to the hot region only.
//! Threads split each phase's range. Memory: O(threads).

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use tiersim_core::params::{ParamKind, ParamSpec, Params};
use tiersim_core::{Error, Op, Result};

use super::program::{chunk, thread_rngs, Driver, Layout, Out, Program, Step};
use super::{Common, Generator, ACCESS_SIZE, BASE_ADDR, FOOTPRINT, GAP_INSTRUCTIONS, PAGE_SIZE, THREADS};

pub const PARAMS: &[ParamSpec] = &[
    FOOTPRINT,
    ParamSpec::new(
        "accesses",
        ParamKind::Int,
        "1000000",
        "accesses of the hot kernel; the fill and build phases come first (about 2 x footprint / access_size)",
    )
    .min(1.0),
    super::write_ratio("0.3"),
    THREADS,
    ACCESS_SIZE,
    GAP_INSTRUCTIONS,
    BASE_ADDR,
    PAGE_SIZE,
    ParamSpec::new("hot_fraction", ParamKind::Float, "0.1", "share of the footprint the hot kernel works on")
        .min(0.0001)
        .max(0.5),
];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Fill,
    Build,
    Kernel,
}

struct Phased {
    line: u64,
    cold_at: u64,
    cold_lines: u64,
    hot_at: u64,
    hot_lines: u64,
    write_ratio: f64,
    phase: Phase,
    /// Per thread: next line and end of its share of the current phase.
    cur: Vec<(u64, u64)>,
    rngs: Vec<ChaCha8Rng>,
}

/// (intermediate lines, hot lines) of a footprint.
pub fn sizes(footprint: u64, line: u64, hot_fraction: f64) -> (u64, u64) {
    let lines = footprint / line;
    let hot = ((lines as f64 * hot_fraction) as u64).max(1);
    (lines - hot, hot)
}

pub fn build(p: &Params, seed: u64) -> Result<Box<dyn Generator>> {
    let mut c = Common::from_params(p)?;
    let (cold_lines, hot_lines) = sizes(c.footprint, c.access_size, p.float("hot_fraction"));
    if cold_lines < c.threads || hot_lines < c.threads {
        return Err(Error::config(
            "footprint",
            format!(
                "{} bytes give {cold_lines} intermediate and {hot_lines} hot lines; each needs one per thread",
                c.footprint
            ),
        ));
    }
    let mut l = Layout::new(&c);
    let cold_at = l.alloc(cold_lines * c.access_size)?;
    let hot_at = l.alloc(hot_lines * c.access_size)?;
    let threads = c.threads as usize;
    // Fill writes every intermediate line, build reads each once and writes each hot line once.
    c.accesses = c.accesses.saturating_add(2 * cold_lines + hot_lines);
    let prog = Phased {
        line: c.access_size,
        cold_at,
        cold_lines,
        hot_at,
        hot_lines,
        write_ratio: p.float("write_ratio"),
        phase: Phase::Fill,
        cur: (0..threads).map(|t| chunk(cold_lines, t, threads)).collect(),
        rngs: thread_rngs(seed, threads),
    };
    Ok(Driver::boxed(prog, &c))
}

impl Program for Phased {
    fn step(&mut self, t: usize, out: &mut Out<'_>) -> Step {
        let size = self.line;
        if self.phase == Phase::Kernel {
            let rng = &mut self.rngs[t];
            let line = rng.gen_range(0..self.hot_lines);
            let op = if rng.gen::<f64>() < self.write_ratio { Op::Write } else { Op::Read };
            out.span(self.hot_at + line * size, size, size, op);
            return Step::Ran;
        }
        let (i, hi) = self.cur[t];
        if i >= hi {
            return Step::Wait;
        }
        self.cur[t].0 += 1;
        if self.phase == Phase::Fill {
            out.write(self.cold_at + i * size, size);
        } else {
            out.read(self.cold_at + i * size, size);
            // The hot structure is written as the intermediate data is consumed: hot line h
            // once its share of intermediate lines has been read.
            let h = (i as u128 * self.hot_lines as u128 / self.cold_lines as u128) as u64;
            let prev = if i == 0 {
                u64::MAX
            } else {
                ((i - 1) as u128 * self.hot_lines as u128 / self.cold_lines as u128) as u64
            };
            if h != prev {
                out.write(self.hot_at + h * size, size);
            }
        }
        Step::Ran
    }

    fn barrier(&mut self) -> bool {
        let threads = self.cur.len();
        match self.phase {
            Phase::Fill => {
                self.phase = Phase::Build;
                self.cur = (0..threads).map(|t| chunk(self.cold_lines, t, threads)).collect();
            }
            Phase::Build | Phase::Kernel => self.phase = Phase::Kernel,
        }
        true
    }
}
