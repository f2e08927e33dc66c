//! Graph analytics over a power-law graph in CSR form, with the three phases the CXL-flash study
//! sees in PageRank (Yang et al., ATC'23, fig. 16): load (the edge list is read into memory:
//! sequential writes), build (a degree count, a prefix sum and a scatter of both directions of
//! every edge into the CSR adjacency: random accesses), then compute, repeated: PageRank pull
//! iterations (GAP benchmark style) or level-synchronous top-down BFS from random roots.
//! The graph is R-MAT with graph500's parameters (a=0.57, b=0.19, c=0.19, 16 edges per vertex,
//! vertex labels permuted); 2^scale vertices, scale the largest that fits the footprint.
//! Edge i is recomputed from a counter-based hash whenever a phase reads it, so the edge list is
//! never stored; memory is the CSR itself: 8 bytes per vertex plus 8 per edge (about a third of
//! the footprint), plus a visited bit and a queue slot per vertex for BFS.

use rand::Rng;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tiersim_core::params::{ParamKind, ParamSpec, Params};
use tiersim_core::{Error, Result};

use super::program::{chunk, mix64, Driver, Layout, Out, Program, Step};
use super::{Common, Generator, BASE_ADDR, GAP_INSTRUCTIONS, PAGE_SIZE, THREADS};

const EDGE: u64 = 16;
const ADJ: u64 = 4;
const OFF: u64 = 8;
const RMAT_A: f64 = 0.57;
const RMAT_B: f64 = 0.19;
const RMAT_C: f64 = 0.19;

pub const PARAMS: &[ParamSpec] = &[
    ParamSpec::new(
        "footprint",
        ParamKind::Bytes,
        "16MiB",
        "bytes of the edge list, CSR and per-vertex arrays together",
    )
    .min(4096.0),
    ParamSpec::new(
        "accesses",
        ParamKind::Int,
        "20000000",
        "total accesses to generate over all phases (load and build take about 11 per edge)",
    )
    .min(1.0),
    THREADS,
    GAP_INSTRUCTIONS,
    BASE_ADDR,
    PAGE_SIZE,
    ParamSpec::new("algorithm", ParamKind::Str, "pagerank", "compute phase: pagerank or bfs")
        .choices(&["pagerank", "bfs"]),
    ParamSpec::new("edge_factor", ParamKind::Int, "16", "edges per vertex (graph500: 16)").min(1.0).max(256.0),
];

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    Load,
    Count,
    Prefix,
    Fill,
    Shift,
    /// PageRank: ranks set to 1/V. BFS: parents set to -1.
    Init,
    Contrib,
    Pull,
    Root,
    Level,
}

#[derive(Clone, Copy, Default)]
struct Cursor {
    i: u64,
    hi: u64,
    /// The current vertex's remaining adjacency `[e, end)`, once its offsets have been read.
    row: Option<(u64, u64)>,
}

/// Bytes per vertex of every array, for sizing the graph from the footprint.
fn per_vertex(edge_factor: u64, bfs: bool) -> u64 {
    EDGE * edge_factor + 2 * ADJ * edge_factor + OFF + if bfs { 8 } else { 16 }
}

/// log2 of the vertex count that fits `footprint`.
pub fn scale(footprint: u64, edge_factor: u64, bfs: bool) -> u32 {
    let v = footprint / per_vertex(edge_factor, bfs);
    if v == 0 {
        0
    } else {
        63 - v.leading_zeros()
    }
}

struct Graph {
    seed: u64,
    threads: usize,
    scale: u32,
    v: u64,
    e: u64,
    bfs: bool,
    edges_at: u64,
    off_at: u64,
    adj_at: u64,
    /// PageRank: rank; BFS: parent (4 bytes per vertex).
    a_at: u64,
    /// PageRank: contrib; BFS: the frontier queue (4 bytes per vertex).
    b_at: u64,
    off: Vec<u64>,
    adj: Vec<u32>,
    visited: Vec<u64>,
    queue: Vec<u32>,
    tail: u64,
    level: (u64, u64),
    phase: Phase,
    cur: Vec<Cursor>,
    rng: ChaCha8Rng,
}

pub fn build(p: &Params, seed: u64) -> Result<Box<dyn Generator>> {
    let c = Common::with_access_size(p, EDGE)?;
    let bfs = p.str("algorithm") == "bfs";
    let ef = p.uint("edge_factor");
    let scale = scale(c.footprint, ef, bfs);
    if scale < 4 {
        return Err(Error::config(
            "footprint",
            format!("{} bytes hold fewer than 16 vertices of {} bytes each", c.footprint, per_vertex(ef, bfs)),
        ));
    }
    let v = 1u64 << scale;
    let e = v * ef;
    if 2 * e >= u32::MAX as u64 {
        return Err(Error::config(
            "footprint",
            format!("{} bytes give {e} edges; at most 2^31 are supported", c.footprint),
        ));
    }
    if v < c.threads {
        return Err(Error::config("threads", format!("{} threads for a graph of {v} vertices", c.threads)));
    }
    let mut l = Layout::new(&c);
    let edges_at = l.alloc(e * EDGE)?;
    let off_at = l.alloc((v + 1) * OFF)?;
    let adj_at = l.alloc(2 * e * ADJ)?;
    let per = if bfs { 4 } else { 8 };
    let a_at = l.alloc(v * per)?;
    let b_at = l.alloc(v * per)?;
    let mut g = Graph {
        seed,
        threads: c.threads as usize,
        scale,
        v,
        e,
        bfs,
        edges_at,
        off_at,
        adj_at,
        a_at,
        b_at,
        off: vec![0; v as usize + 1],
        adj: vec![0; 2 * e as usize],
        visited: if bfs { vec![0; v.div_ceil(64) as usize] } else { Vec::new() },
        queue: if bfs { vec![0; v as usize] } else { Vec::new() },
        tail: 0,
        level: (0, 0),
        phase: Phase::Load,
        cur: Vec::new(),
        rng: ChaCha8Rng::seed_from_u64(seed),
    };
    g.split(e);
    Ok(Driver::boxed(g, &c))
}

impl Graph {
    /// A parallel phase over `0..n`, split among the threads.
    fn split(&mut self, n: u64) {
        let threads = self.threads;
        self.cur = (0..threads)
            .map(|t| {
                let (i, hi) = chunk(n, t, threads);
                Cursor { i, hi, row: None }
            })
            .collect();
    }

    /// A single-threaded phase: thread 0 does all `n` items.
    fn serial(&mut self, n: u64) {
        self.cur = (0..self.threads).map(|t| Cursor { i: 0, hi: if t == 0 { n } else { 0 }, row: None }).collect();
    }

    /// Edge i of the R-MAT generator: `scale` quadrant choices from a hash of (seed, i), then
    /// both endpoints relabelled by a bijection so that hubs are spread over the vertex range.
    fn edge(&self, i: u64) -> (u64, u64) {
        let mut s = mix64(self.seed ^ mix64(i));
        let (mut u, mut w) = (0u64, 0u64);
        for _ in 0..self.scale {
            s = mix64(s);
            let r = (s >> 11) as f64 / (1u64 << 53) as f64;
            let (bu, bw) = if r < RMAT_A {
                (0, 0)
            } else if r < RMAT_A + RMAT_B {
                (0, 1)
            } else if r < RMAT_A + RMAT_B + RMAT_C {
                (1, 0)
            } else {
                (1, 1)
            };
            u = (u << 1) | bu;
            w = (w << 1) | bw;
        }
        (self.permute(u), self.permute(w))
    }

    fn permute(&self, x: u64) -> u64 {
        let mask = self.v - 1;
        let mut x = (x ^ (self.seed & mask)).wrapping_mul(0x9E37_79B9_7F4A_7C15) & mask;
        x ^= x >> (self.scale / 2 + 1);
        x.wrapping_mul(0xD6E8_FEB8_6659_FD93) & mask
    }

    fn visited(&self, u: u64) -> bool {
        self.visited[(u / 64) as usize] >> (u % 64) & 1 == 1
    }

    fn bfs_root(&mut self) -> u64 {
        loop {
            let r = self.rng.gen_range(0..self.v);
            if self.off[r as usize + 1] > self.off[r as usize] {
                return r;
            }
        }
    }
}

impl Program for Graph {
    fn step(&mut self, t: usize, out: &mut Out<'_>) -> Step {
        let Cursor { i, hi, row } = self.cur[t];
        if i >= hi {
            return Step::Wait;
        }
        let next = |g: &mut Graph| g.cur[t] = Cursor { i: i + 1, hi, row: None };
        match self.phase {
            Phase::Load => {
                out.write(self.edges_at + i * EDGE, EDGE);
                next(self);
            }
            Phase::Count => {
                out.read(self.edges_at + i * EDGE, EDGE);
                let (u, w) = self.edge(i);
                for x in [u, w] {
                    out.read(self.off_at + (x + 1) * OFF, OFF);
                    out.write(self.off_at + (x + 1) * OFF, OFF);
                    self.off[x as usize + 1] += 1;
                }
                next(self);
            }
            Phase::Prefix => {
                // i runs over 1..=V as 0..V: offsets[i + 1] += offsets[i].
                out.read(self.off_at + (i + 1) * OFF, OFF);
                out.write(self.off_at + (i + 1) * OFF, OFF);
                self.off[i as usize + 1] += self.off[i as usize];
                next(self);
            }
            Phase::Fill => {
                out.read(self.edges_at + i * EDGE, EDGE);
                let (u, w) = self.edge(i);
                for (x, y) in [(u, w), (w, u)] {
                    out.read(self.off_at + x * OFF, OFF);
                    let pos = self.off[x as usize];
                    out.write(self.adj_at + pos * ADJ, ADJ);
                    out.write(self.off_at + x * OFF, OFF);
                    self.adj[pos as usize] = y as u32;
                    self.off[x as usize] += 1;
                }
                next(self);
            }
            Phase::Shift => {
                // After the scatter offsets[x] is the end of row x; move each down one slot,
                // from the top, so it is the start of row x + 1 again.
                let x = self.v - i;
                out.read(self.off_at + (x - 1) * OFF, OFF);
                out.write(self.off_at + x * OFF, OFF);
                self.off[x as usize] = self.off[x as usize - 1];
                if x == 1 {
                    out.write(self.off_at, OFF);
                    self.off[0] = 0;
                }
                next(self);
            }
            Phase::Init => {
                if self.bfs {
                    out.write(self.a_at + i * 4, 4);
                } else {
                    out.write(self.a_at + i * 8, 8);
                }
                next(self);
            }
            Phase::Contrib => {
                out.read(self.a_at + i * 8, 8);
                out.read(self.off_at + i * OFF, 2 * OFF);
                out.write(self.b_at + i * 8, 8);
                next(self);
            }
            Phase::Pull => {
                let (e, end) = match row {
                    Some(r) => r,
                    None => {
                        out.read(self.off_at + i * OFF, 2 * OFF);
                        (self.off[i as usize], self.off[i as usize + 1])
                    }
                };
                if e < end {
                    out.read(self.adj_at + e * ADJ, ADJ);
                    let u = self.adj[e as usize] as u64;
                    out.read(self.b_at + u * 8, 8);
                }
                if e + 1 >= end {
                    out.write(self.a_at + i * 8, 8);
                    next(self);
                } else {
                    self.cur[t].row = Some((e + 1, end));
                }
            }
            Phase::Root => {
                let r = self.bfs_root();
                out.write(self.a_at + r * 4, 4);
                out.write(self.b_at, 4);
                self.visited.iter_mut().for_each(|w| *w = 0);
                self.visited[(r / 64) as usize] |= 1 << (r % 64);
                self.queue[0] = r as u32;
                self.tail = 1;
                self.level = (0, 0);
                next(self);
            }
            Phase::Level => {
                let (e, end) = match row {
                    Some(r) => r,
                    None => {
                        out.read(self.b_at + i * 4, 4);
                        let x = self.queue[i as usize] as u64;
                        out.read(self.off_at + x * OFF, 2 * OFF);
                        (self.off[x as usize], self.off[x as usize + 1])
                    }
                };
                if e < end {
                    out.read(self.adj_at + e * ADJ, ADJ);
                    let u = self.adj[e as usize] as u64;
                    out.read(self.a_at + u * 4, 4);
                    if !self.visited(u) {
                        self.visited[(u / 64) as usize] |= 1 << (u % 64);
                        out.write(self.a_at + u * 4, 4);
                        out.write(self.b_at + self.tail * 4, 4);
                        self.queue[self.tail as usize] = u as u32;
                        self.tail += 1;
                    }
                }
                if e + 1 >= end {
                    next(self);
                } else {
                    self.cur[t].row = Some((e + 1, end));
                }
            }
        }
        Step::Ran
    }

    fn barrier(&mut self) -> bool {
        let (v, e) = (self.v, self.e);
        let compute = if self.bfs { Phase::Root } else { Phase::Contrib };
        self.phase = match self.phase {
            Phase::Load => Phase::Count,
            Phase::Count => Phase::Prefix,
            Phase::Prefix => Phase::Fill,
            Phase::Fill => Phase::Shift,
            Phase::Shift => Phase::Init,
            Phase::Init => compute,
            Phase::Contrib => Phase::Pull,
            Phase::Pull => Phase::Contrib,
            Phase::Root => Phase::Level,
            Phase::Level if self.tail > self.level.1 => Phase::Level,
            Phase::Level => Phase::Init,
        };
        match self.phase {
            Phase::Load | Phase::Count | Phase::Fill => self.split(e),
            Phase::Prefix | Phase::Shift | Phase::Root => self.serial(if self.phase == Phase::Root { 1 } else { v }),
            Phase::Init | Phase::Contrib | Phase::Pull => self.split(v),
            Phase::Level => {
                // The next level is what the previous one appended to the queue.
                let (lo, hi) = (self.level.1, self.tail);
                self.level = (lo, hi);
                self.split(hi - lo);
                self.cur.iter_mut().for_each(|c| {
                    c.i += lo;
                    c.hi += lo;
                });
            }
        }
        true
    }
}
