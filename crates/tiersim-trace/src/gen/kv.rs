//! A key-value store under a YCSB core workload (Cooper et al., "Benchmarking Cloud Serving
//! Systems with YCSB", SoCC 2010): records of `record_size` bytes in a slab, in insertion order,
//! indexed by an open-addressing table (8-byte slots, load factor 1/2, linear probing). The load
//! phase inserts every record; then each thread's client runs `workload` a (50 % reads, 50 %
//! updates), b (95/5) or c (reads only) on keys drawn from YCSB's scrambled zipfian distribution
//! (constant `theta`), or from Gray et al.'s self-similar distribution (`popularity`, below). A
//! read probes the index and reads the whole record; an update probes and writes one of the
//! record's ten fields (YCSB's default). Memory: 8 bytes per record.

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use tiersim_core::params::{ParamKind, ParamSpec, Params};
use tiersim_core::{Error, Op, Result};

use super::program::{chunk, mix64, thread_rngs, Driver, Layout, Out, Program, Step};
use super::{Common, Generator, ACCESSES, BASE_ADDR, FOOTPRINT, GAP_INSTRUCTIONS, PAGE_SIZE, THREADS};

const SLOT: u64 = 8;
const LINE: u64 = 64;
const FIELDS: u64 = 10;
const EMPTY: u32 = u32::MAX;

pub const PARAMS: &[ParamSpec] = &[
    FOOTPRINT,
    ACCESSES,
    THREADS,
    GAP_INSTRUCTIONS,
    BASE_ADDR,
    PAGE_SIZE,
    ParamSpec::new("workload", ParamKind::Str, "a", "YCSB mix: a (50% updates), b (5% updates), c (read only)")
        .choices(&["a", "b", "c"]),
    ParamSpec::new("popularity", ParamKind::Str, "zipfian", "key popularity: zipfian (YCSB's, `theta`) or self_similar (Gray et al.'s, `hot_fraction`: the same shares of accesses per fraction of the keys at every size)")
        .choices(&["zipfian", "self_similar"]),
    ParamSpec::new("theta", ParamKind::Float, "0.99", "zipfian constant of the key popularity (YCSB's default 0.99)")
        .min(0.01)
        .max(0.999),
    ParamSpec::new("hot_fraction", ParamKind::Float, "0.2", "self_similar: the hottest hot_fraction of the keys takes 1 - hot_fraction of the accesses, recursively (0.2: the 80-20 rule)")
        .min(0.01)
        .max(0.49),
    ParamSpec::new("head_fraction", ParamKind::Float, "0.05", "self_similar: the hottest head_fraction of the keys are equally popular (with hot_fraction 0.2 they take 66 % of the accesses; zipfian's hottest 5 % take 72 % of 38k keys), so no single key's share depends on the key count")
        .min(0.0)
        .max(1.0),
    ParamSpec::new("record_size", ParamKind::Bytes, "1KiB", "bytes per record (YCSB: 10 fields of 100 B)")
        .min(64.0)
        .max(1048576.0),
    ParamSpec::new("load_phase", ParamKind::Bool, "true", "trace the load phase that inserts every record first"),
];

/// YCSB's ZipfianGenerator (after Gray et al., "Quickly generating billion-record synthetic
/// databases", SIGMOD 1994): rank 0 is the most popular of `n` items.
pub struct Zipf {
    n: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
}

impl Zipf {
    pub fn new(n: u64, theta: f64) -> Zipf {
        let zeta = |k: u64| (1..=k).map(|i| 1.0 / (i as f64).powf(theta)).sum::<f64>();
        let zetan = zeta(n);
        let zeta2 = zeta(2.min(n));
        let eta = (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan);
        Zipf { n, theta, alpha: 1.0 / (1.0 - theta), zetan, eta }
    }

    pub fn sample(&self, rng: &mut impl Rng) -> u64 {
        let u: f64 = rng.gen();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1.min(self.n - 1);
        }
        ((self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64).min(self.n - 1)
    }
}

/// Gray et al.'s self-similar distribution ("Quickly generating billion-record synthetic
/// databases", SIGMOD 1994): rank floor(n u^(ln h / ln(1-h))), so the hottest fraction f of the
/// ranks takes f^(ln(1-h) / ln h) of the draws whatever n is (h of them take 1 - h). Zipf is not
/// like that: with theta 0.99 the hottest fifth of 19k, 38k and 76k keys takes 83.9, 84.8 and
/// 85.7 %, so a study that grows the store with the machine sees the cold share fall (docs/model.md,
/// "When a result can be trusted"). Deviation from Gray: the ranks below `head` n are equally
/// popular. In Gray's form rank 0 alone takes n^-(ln(1-h) / ln h) of the draws (25 % of 19k keys
/// with h = 0.2, 21 % of 76k), and where that one record's page lands (DRAM or DCPMM, which
/// socket) differs with n; a head of many keys spreads over many pages at every size.
pub struct SelfSimilar {
    n: u64,
    exponent: f64,
    head: f64,
    head_share: f64,
}

impl SelfSimilar {
    pub fn new(n: u64, h: f64, head: f64) -> SelfSimilar {
        let exponent = h.ln() / (1.0 - h).ln();
        SelfSimilar { n, exponent, head, head_share: head.powf(1.0 / exponent) }
    }

    pub fn sample(&self, rng: &mut impl Rng) -> u64 {
        let u: f64 = rng.gen();
        // Below the head's share u / head_share is uniform on [0, 1): a uniform rank in the head.
        let x = if u < self.head_share { self.head * u / self.head_share } else { u.powf(self.exponent) };
        ((self.n as f64 * x) as u64).min(self.n - 1)
    }
}

enum Popularity {
    Zipf(Zipf),
    SelfSimilar(SelfSimilar),
}

impl Popularity {
    fn sample(&self, rng: &mut impl Rng) -> u64 {
        match self {
            Popularity::Zipf(z) => z.sample(rng),
            Popularity::SelfSimilar(s) => s.sample(rng),
        }
    }
}

struct Kv {
    records: u64,
    record_size: u64,
    field: u64,
    slots_at: u64,
    records_at: u64,
    slot_mask: u64,
    slots: Vec<u32>,
    read_ratio: f64,
    popularity: Popularity,
    load: Vec<(u64, u64)>,
    run_phase: bool,
    rngs: Vec<ChaCha8Rng>,
}

/// (records, index slots) for a footprint: slots are the power of two at or above 2 x records.
pub fn sizes(footprint: u64, record_size: u64) -> (u64, u64) {
    let mut records = footprint / (record_size + 2 * SLOT);
    while records > 0 && records * record_size + (2 * records).next_power_of_two() * SLOT > footprint {
        records -= 1;
    }
    (records, (2 * records).next_power_of_two())
}

pub fn build(p: &Params, seed: u64) -> Result<Box<dyn Generator>> {
    let c = Common::with_access_size(p, LINE)?;
    let record_size = p.bytes("record_size");
    let (records, slots) = sizes(c.footprint, record_size);
    if records < c.threads.max(2) || records >= EMPTY as u64 {
        return Err(Error::config(
            "footprint",
            format!(
                "{} bytes give {records} records of {record_size} bytes; need at least 2, one per thread, and fewer than 2^32",
                c.footprint
            ),
        ));
    }
    let mut l = Layout::new(&c);
    let slots_at = l.alloc(slots * SLOT)?;
    let records_at = l.alloc(records * record_size)?;
    let threads = c.threads as usize;
    let mut kv = Kv {
        records,
        record_size,
        field: (record_size / FIELDS).max(1),
        slots_at,
        records_at,
        slot_mask: slots - 1,
        slots: vec![EMPTY; slots as usize],
        read_ratio: match p.str("workload") {
            "a" => 0.5,
            "b" => 0.95,
            _ => 1.0,
        },
        popularity: match p.str("popularity") {
            "self_similar" => {
                Popularity::SelfSimilar(SelfSimilar::new(records, p.float("hot_fraction"), p.float("head_fraction")))
            }
            _ => Popularity::Zipf(Zipf::new(records, p.float("theta"))),
        },
        load: (0..threads).map(|t| chunk(records, t, threads)).collect(),
        run_phase: !p.bool("load_phase"),
        rngs: thread_rngs(seed, threads),
    };
    if kv.run_phase {
        // The store exists already: place every key without tracing it.
        for key in 0..records {
            let mut s = kv.home(key);
            while kv.slots[s as usize] != EMPTY {
                s = (s + 1) & kv.slot_mask;
            }
            kv.slots[s as usize] = key as u32;
        }
    }
    Ok(Driver::boxed(kv, &c))
}

impl Kv {
    fn home(&self, key: u64) -> u64 {
        mix64(key) & self.slot_mask
    }

    fn slot_addr(&self, s: u64) -> u64 {
        self.slots_at + s * SLOT
    }

    fn record_addr(&self, key: u64) -> u64 {
        self.records_at + key * self.record_size
    }
}

impl Program for Kv {
    fn step(&mut self, t: usize, out: &mut Out<'_>) -> Step {
        if !self.run_phase {
            let (key, hi) = self.load[t];
            if key >= hi {
                return Step::Wait;
            }
            self.load[t].0 += 1;
            let mut s = self.home(key);
            out.read(self.slot_addr(s), SLOT);
            while self.slots[s as usize] != EMPTY {
                s = (s + 1) & self.slot_mask;
                out.read(self.slot_addr(s), SLOT);
            }
            self.slots[s as usize] = key as u32;
            out.span(self.record_addr(key), self.record_size, LINE, Op::Write);
            out.write(self.slot_addr(s), SLOT);
            return Step::Ran;
        }
        let rng = &mut self.rngs[t];
        // YCSB scrambles ranks with a hash (FNV there, SplitMix64 here) so that popular keys are
        // spread over the store instead of packed at its start.
        let key = mix64(self.popularity.sample(rng)) % self.records;
        let read = rng.gen::<f64>() < self.read_ratio;
        let field = rng.gen_range(0..FIELDS);
        let mut s = self.home(key);
        out.read(self.slot_addr(s), SLOT);
        while self.slots[s as usize] != key as u32 {
            s = (s + 1) & self.slot_mask;
            out.read(self.slot_addr(s), SLOT);
        }
        if read {
            out.span(self.record_addr(key), self.record_size, LINE, Op::Read);
        } else {
            let off = (field * self.field).min(self.record_size - self.field);
            out.span(self.record_addr(key) + off, self.field, LINE, Op::Write);
        }
        Step::Ran
    }

    fn barrier(&mut self) -> bool {
        self.run_phase = true;
        true
    }
}
