//! Synthetic workload generators. Each emits accesses of a virtual address layout with
//! instruction-count timing, deterministically from its parameters and a seed. `REGISTRY` is
//! the one list of them; configs, the CLI and `tiersim list` all go through it.

use std::path::Path;

use tiersim_core::params::{self, ParamKind, ParamSpec, Params, PluginInfo};
use tiersim_core::{Access, Error, Result};

use crate::format::{check_page_size, AddrKind, TimeUnit, TraceHeader, TraceMeta, TraceStats, TraceWriter};
use crate::AccessSource;

pub mod fileio;
pub mod graph;
pub mod hashmap;
pub mod kv;
pub mod matmul;
pub mod minheap;
pub mod phased;
mod program;
pub mod random;
pub mod stencil;
pub mod stream;
pub mod stride;

/// A source of synthetic accesses.
pub trait Generator {
    /// How the accesses are to be read (time unit, address kind, page size).
    fn meta(&self) -> TraceMeta;
    /// The next access, or `None` when the configured number has been produced.
    fn next_access(&mut self) -> Option<Access>;
}

/// One registered generator: what it is and how to build it from resolved parameters.
pub struct GeneratorEntry {
    pub info: PluginInfo,
    pub build: fn(&Params, seed: u64) -> Result<Box<dyn Generator>>,
}

/// Every generator, by config name.
pub static REGISTRY: &[GeneratorEntry] = &[
    GeneratorEntry {
        info: PluginInfo {
            name: "random",
            summary: "uniformly random accesses over the footprint (the CXL-flash paper's random workload)",
            source: "Yang et al., \"Overcoming the Memory Wall with CXL-Enabled SSDs\", USENIX ATC 2023",
            params: random::PARAMS,
        },
        build: random::build,
    },
    GeneratorEntry {
        info: PluginInfo {
            name: "stride",
            summary: "each thread walks its slice of the footprint with a fixed stride, wrapping around",
            source: "Yang et al., \"Overcoming the Memory Wall with CXL-Enabled SSDs\", USENIX ATC 2023",
            params: stride::PARAMS,
        },
        build: stride::build,
    },
    GeneratorEntry {
        info: PluginInfo {
            name: "stream",
            summary: "STREAM-triad-like sweep over several arrays: read arrays 1..n-1, write array 0",
            source: "McCalpin, STREAM benchmark; CloverLeaf-style bandwidth-bound stencils",
            params: stream::PARAMS,
        },
        build: stream::build,
    },
    GeneratorEntry {
        info: PluginInfo {
            name: "hashmap",
            summary: "chained hash map: insert every key, then random lookups walking the chains (some update the value)",
            source: "Yang et al., \"Overcoming the Memory Wall with CXL-Enabled SSDs\", USENIX ATC 2023 (fig. 3a, hash map)",
            params: hashmap::PARAMS,
        },
        build: hashmap::build,
    },
    GeneratorEntry {
        info: PluginInfo {
            name: "matmul",
            summary: "naive i-j-k multiply of n x n f64 matrices: a row of A, a column of B, one store to C",
            source: "Yang et al., \"Overcoming the Memory Wall with CXL-Enabled SSDs\", USENIX ATC 2023 (fig. 3b, matrix multiplication)",
            params: matmul::PARAMS,
        },
        build: matmul::build,
    },
    GeneratorEntry {
        info: PluginInfo {
            name: "minheap",
            summary: "binary min-heap of 32-byte events: fill by inserts, then hold-model extract-min + insert",
            source: "Yang et al., \"Overcoming the Memory Wall with CXL-Enabled SSDs\", USENIX ATC 2023 (fig. 3c, min-heap); hold model of priority-queue benchmarks",
            params: minheap::PARAMS,
        },
        build: minheap::build,
    },
    GeneratorEntry {
        info: PluginInfo {
            name: "kv",
            summary: "key-value store with a hash index under YCSB workload a/b/c and scrambled zipfian keys",
            source: "Cooper et al., \"Benchmarking Cloud Serving Systems with YCSB\", SoCC 2010",
            params: kv::PARAMS,
        },
        build: kv::build,
    },
    GeneratorEntry {
        info: PluginInfo {
            name: "graph",
            summary: "R-MAT power-law graph: load the edge list, build CSR, then PageRank or BFS",
            source: "Yang et al., \"Overcoming the Memory Wall with CXL-Enabled SSDs\", USENIX ATC 2023 (fig. 16, page rank phases); graph500 R-MAT; GAP benchmark suite kernels",
            params: graph::PARAMS,
        },
        build: graph::build,
    },
    GeneratorEntry {
        info: PluginInfo {
            name: "stencil",
            summary: "CloverLeaf-like 2-D 5-point stencil kernels streaming several field arrays per time step",
            source: "Mallinson et al., \"CloverLeaf: Preparing Hydrodynamics Codes for Exascale\", CUG 2013",
            params: stencil::PARAMS,
        },
        build: stencil::build,
    },
    GeneratorEntry {
        info: PluginInfo {
            name: "phased",
            summary: "write a large intermediate data set, build from it, then a hot kernel on a small region",
            source: "Kim et al., \"Exploring the Design Space of Page Management for Multi-Tiered Memory Systems\" (AutoTiering), USENIX ATC 2021: graph500",
            params: phased::PARAMS,
        },
        build: phased::build,
    },
    GeneratorEntry {
        info: PluginInfo {
            name: "fileio",
            summary: "compute on anonymous memory while reading and writing a file by system calls (page cache) or through an mmap",
            source: "Linux read(2)/write(2) and mmap(2) on a file; the buffered and mmap access paths of reference seed 001 (SCM vs an Optane SSD)",
            params: fileio::PARAMS,
        },
        build: fileio::build,
    },
];

/// The generator called `name`; an unknown name lists the valid ones.
pub fn find(name: &str) -> Result<&'static GeneratorEntry> {
    params::lookup("generator", name, REGISTRY, |e| &e.info)
}

/// Build generator `name` from a parameter table (unknown keys are rejected).
pub fn open_generator(name: &str, params: Option<&toml::Table>, seed: u64) -> Result<Box<dyn Generator>> {
    let entry = find(name)?;
    let p = Params::resolve(entry.info.params, params)?;
    (entry.build)(&p, seed)
}

/// Run generator `name` into a trace file at `out`.
pub fn generate(name: &str, params: Option<&toml::Table>, out: &Path, seed: u64) -> Result<TraceStats> {
    let mut g = open_generator(name, params, seed)?;
    let mut w = TraceWriter::create(out, g.meta())?;
    while let Some(a) = g.next_access() {
        w.write(&a)?;
    }
    w.finish()
}

/// Lets the engine replay a generator directly, without a file. The header has no statistics.
pub struct GeneratorSource {
    gen: Box<dyn Generator>,
    header: TraceHeader,
}

impl GeneratorSource {
    pub fn new(gen: Box<dyn Generator>) -> GeneratorSource {
        let header = TraceHeader::new(&gen.meta());
        GeneratorSource { gen, header }
    }
}

impl AccessSource for GeneratorSource {
    fn header(&self) -> &TraceHeader {
        &self.header
    }

    fn read_batch(&mut self, out: &mut Vec<Access>, max: usize) -> Result<usize> {
        out.reserve(max.min(1 << 16));
        let mut n = 0;
        while n < max {
            match self.gen.next_access() {
                Some(a) => out.push(a),
                None => break,
            }
            n += 1;
        }
        Ok(n)
    }
}

/// 0x7f00_0000_0000: where Linux on x86-64 places large anonymous mmaps (below the stack and
/// shared libraries), i.e. where big heap arrays live.
pub const DEFAULT_BASE_ADDR: u64 = 0x7f00_0000_0000;

pub(crate) const FOOTPRINT: ParamSpec =
    ParamSpec::new("footprint", ParamKind::Bytes, "64MiB", "bytes of memory the workload spans").min(64.0);
pub(crate) const ACCESSES: ParamSpec =
    ParamSpec::new("accesses", ParamKind::Int, "1000000", "total accesses to generate, over all threads").min(1.0);
pub(crate) const THREADS: ParamSpec =
    ParamSpec::new("threads", ParamKind::Int, "1", "threads (one per CPU), interleaved round-robin access by access")
        .min(1.0)
        .max(4096.0);
pub(crate) const ACCESS_SIZE: ParamSpec = ParamSpec::new(
    "access_size",
    ParamKind::Bytes,
    "64B",
    "bytes per access (a cache line by default); addresses are aligned to it",
)
.min(1.0)
.max(65535.0);
pub(crate) const GAP_INSTRUCTIONS: ParamSpec = ParamSpec::new(
    "gap_instructions",
    ParamKind::Int,
    "10",
    "instructions a thread executes between two of its accesses",
)
.min(0.0)
.max(4294967295.0);
pub(crate) const BASE_ADDR: ParamSpec = ParamSpec::new(
    "base_addr",
    ParamKind::Int,
    "139637976727552",
    "virtual address of the first byte (default 0x7f0000000000, the mmap area); page aligned",
)
.min(0.0);
pub(crate) const PAGE_SIZE: ParamSpec =
    ParamSpec::new("page_size", ParamKind::Bytes, "4KiB", "page size recorded in the trace header (a power of two)")
        .min(64.0)
        .max(1073741824.0);

pub(crate) const fn write_ratio(default: &'static str) -> ParamSpec {
    ParamSpec::new("write_ratio", ParamKind::Float, default, "fraction of accesses that are writes").min(0.0).max(1.0)
}

/// Parameters every generator takes, checked against each other.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Common {
    pub footprint: u64,
    pub accesses: u64,
    pub threads: u64,
    pub access_size: u64,
    pub gap: u64,
    pub base: u64,
    pub page_size: u32,
}

impl Common {
    pub fn from_params(p: &Params) -> Result<Common> {
        Common::with_access_size(p, p.bytes("access_size"))
    }

    /// For generators whose access sizes come from their data structures (an 8-byte matrix
    /// element, a 32-byte heap entry) rather than from the `access_size` parameter.
    pub fn with_access_size(p: &Params, access_size: u64) -> Result<Common> {
        let c = Common {
            footprint: p.bytes("footprint"),
            accesses: p.uint("accesses"),
            threads: p.uint("threads"),
            access_size,
            gap: p.uint("gap_instructions"),
            base: p.uint("base_addr"),
            page_size: u32::try_from(p.bytes("page_size")).map_err(|_| Error::config("page_size", "too large"))?,
        };
        check_page_size(c.page_size).map_err(|m| Error::config("page_size", m))?;
        if c.base & (c.page_size as u64 - 1) != 0 {
            return Err(Error::config(
                "base_addr",
                format!("{} ({:#x}) is not aligned to the page size {}", c.base, c.base, c.page_size),
            ));
        }
        if c.footprint < c.access_size * c.threads {
            return Err(Error::config(
                "footprint",
                format!(
                    "{} bytes cannot give each of {} threads one {}-byte access",
                    c.footprint, c.threads, c.access_size
                ),
            ));
        }
        Ok(c)
    }

    /// Check that `[base, base + span)` fits the 64-bit address space.
    pub fn check_span(&self, span: u64) -> Result<()> {
        if self.base.checked_add(span).is_none() {
            return Err(Error::config(
                "base_addr",
                format!("{:#x} + {span} bytes runs past the end of the 64-bit address space", self.base),
            ));
        }
        Ok(())
    }

    pub fn meta(&self) -> TraceMeta {
        TraceMeta { time_unit: TimeUnit::Instructions, addr_kind: AddrKind::Virtual, page_size: self.page_size }
    }
}
