//! tiersim's side of the instrumented capture without a program (issue 36, "records written at
//! 20M/s"): the runtime's records merged in stamp order into the physical and the virtual trace,
//! with the buddy model's frames, the traces' statistics, byte-shuffling and zstd. The records
//! come from per-thread files (the Valgrind tool's merge), which share everything after the read
//! with the streaming merge of the instrumented path (`Pipeline::emit` onwards).
//!
//! The records look like a PageRank gather behind a 1 MiB LLC: two threads, each reading an
//! index array in order between fills of random lines of a 1 GiB array, an eighth of the
//! records dirty writebacks; threads alternate in runs of 1 to 64 records.
//!
//! `merge/cpu` reports the process's CPU time (every thread: the merge and the two compressing
//! threads), the figure BENCHMARKS.md quotes as records per CPU-second; `merge/wall` the wall
//! time, where the compressing threads run beside the merge (records written per second on the
//! machine's cores, the "20M/s on 2 cores", which other jobs on the machine slow).
//! Before them one merge prints its CPU split: the compressing threads' (the report's
//! `compress_cpu_s`) and the rest (the merging thread, with the buddy model's set-up), and the
//! wall rate that split allows on two idle cores.

use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tiersim_trace::capture::instrumented::capture_instrumented;
use tiersim_trace::capture::{CaptureRequest, Progress};

const RECORDS: u64 = 4_000_000;
const THREADS: usize = 2;
const RECORD: usize = 24;

/// The runtime's record files and summary in `dir`.
fn write_records(dir: &Path) {
    let mut rng = ChaCha8Rng::seed_from_u64(36);
    let mut files = vec![Vec::<u8>::new(); THREADS];
    let mut counts = [(0u64, 0u64, 0u64); THREADS];
    let mut seq = [0u64; THREADS];
    let mut stamp = 0u64;
    let mut t = 0;
    let mut left_in_run = 0;
    for i in 0..RECORDS {
        if left_in_run == 0 {
            t = rng.gen_range(0..THREADS);
            left_in_run = rng.gen_range(1..=64);
        }
        left_in_run -= 1;
        stamp += rng.gen_range(1..200);
        let (addr, write) = if i % 8 == 7 {
            (0x7f00_0000_0000 + rng.gen_range(0..1u64 << 24) * 64, true)
        } else if i % 2 == 0 {
            seq[t] += 1;
            (0x5555_0000_0000 + ((t as u64) << 32) + seq[t] * 64, false)
        } else {
            (0x7f00_0000_0000 + rng.gen_range(0..1u64 << 24) * 64, false)
        };
        let gap: u32 = rng.gen_range(1..16);
        let r = &mut files[t];
        r.extend_from_slice(&stamp.to_le_bytes());
        r.extend_from_slice(&addr.to_le_bytes());
        r.extend_from_slice(&gap.to_le_bytes());
        r.extend_from_slice(&64u16.to_le_bytes());
        r.extend_from_slice(&[write as u8, 0]);
        let c = &mut counts[t];
        c.0 += gap as u64;
        c.1 += 1;
        c.2 += write as u64;
    }
    let mut summary = format!("version 1\ncaches {THREADS}\ndirty_at_exit 0\npagemap off\n");
    for (t, (recs, &(accesses, records, writebacks))) in files.iter().zip(&counts).enumerate() {
        assert_eq!(recs.len(), records as usize * RECORD);
        std::fs::write(dir.join(format!("t{t}.bin")), recs).unwrap();
        summary += &format!(
            "thread {t} cpu {t} loads {accesses} stores 0 bytes 0 hits 0 misses {} writebacks {writebacks} records {records}\n",
            records - writebacks
        );
    }
    std::fs::write(dir.join("summary"), summary).unwrap();
}

/// User + system time of this process, every thread.
fn cpu_time() -> Duration {
    // SAFETY: getrusage writes the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(u.ru_utime) + tv(u.ru_stime)
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    write_records(dir.path());
    let out = dir.path().join("p.trace");
    let virt = dir.path().join("v.trace");
    // The default capture's physical memory (16 GiB, fragmented), so frames spread as pagemap's
    // do over a host's memory.
    let params: toml::Table = toml::from_str("llc = \"1MiB\"\nv2p = \"buddy\"").unwrap();
    let merge = || {
        let req = CaptureRequest {
            out: &out,
            virt_out: Some(&virt),
            params: Some(&params),
            seed: 1,
            pid: None,
            pipe_capacity: None,
        };
        let r = capture_instrumented(dir.path(), &req, &Progress::default()).expect("bench merge");
        assert_eq!(r.records, RECORDS);
        r
    };
    let (cpu0, wall0) = (cpu_time(), Instant::now());
    let r = merge();
    let (cpu, wall) = ((cpu_time() - cpu0).as_secs_f64(), wall0.elapsed().as_secs_f64());
    let per = |s: f64| s * 1e9 / RECORDS as f64;
    let (zstd, rest) = (per(r.compress_cpu_s), per(cpu - r.compress_cpu_s));
    eprintln!(
        "merge/split: {RECORDS} records, {:.1} ns CPU a record: compressing threads {zstd:.1} ns, the rest {rest:.1} ns; \
         wall {:.1} ns a record ({:.2} M/s); two idle cores allow at most {:.2} M/s",
        per(cpu),
        per(wall),
        1e3 / per(wall),
        1e3 / rest.max((zstd + rest) / 2.0)
    );
    let mut g = c.benchmark_group("merge");
    g.sample_size(10).throughput(Throughput::Elements(RECORDS));
    g.bench_function("cpu", |b| {
        b.iter_custom(|iters| {
            let start = cpu_time();
            (0..iters).for_each(|_| {
                merge();
            });
            cpu_time() - start
        })
    });
    g.bench_function("wall", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            (0..iters).for_each(|_| {
                merge();
            });
            start.elapsed()
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
