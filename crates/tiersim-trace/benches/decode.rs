//! Decode throughput of the native format (the engine's input rate ceiling) and generator speed.
//! Traces are generated into a temporary directory during setup.

use std::hint::black_box;
use std::path::Path;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tiersim_core::Access;
use tiersim_trace::gen::{self, Generator};
use tiersim_trace::{AccessSource, TraceReader};

const RECORDS: u64 = 10_000_000;
const BATCH: usize = 1 << 16;

fn decode_all(path: &Path, buf: &mut Vec<Access>) -> u64 {
    let mut r = TraceReader::open(path).expect("open bench trace");
    let mut n = 0;
    loop {
        buf.clear();
        let got = r.read_batch(buf, BATCH).expect("decode bench trace");
        if got == 0 {
            return n;
        }
        n += got as u64;
        black_box(&buf[got - 1]);
    }
}

fn params(s: &str) -> toml::Table {
    toml::from_str(s).expect("bench params")
}

fn decode(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut g = c.benchmark_group("decode");
    g.sample_size(10).throughput(Throughput::Elements(RECORDS));
    for (name, p) in [
        ("random", format!("footprint = \"16GiB\"\naccesses = {RECORDS}\nthreads = 8")),
        ("stream", format!("footprint = \"1GiB\"\naccesses = {RECORDS}\nthreads = 8")),
    ] {
        let path = dir.path().join(format!("{name}.trace"));
        gen::generate(name, Some(&params(&p)), &path, 1).expect("generate bench trace");
        let size = std::fs::metadata(&path).expect("stat").len();
        let mut buf = Vec::with_capacity(BATCH);
        let t = Instant::now();
        let n = decode_all(&path, &mut buf);
        let s = t.elapsed().as_secs_f64();
        println!(
            "decode/{name}: {n} records, {:.2} bytes/record compressed, one pass {:.1} M records/s ({:.2} GB/s of raw records)",
            size as f64 / n as f64,
            n as f64 / s / 1e6,
            n as f64 * 24.0 / s / 1e9
        );
        g.bench_function(name, |b| b.iter(|| decode_all(&path, &mut buf)));
    }
    g.finish();
}

fn generators(c: &mut Criterion) {
    const N: u64 = 1_000_000;
    let mut g = c.benchmark_group("generate");
    g.sample_size(10).throughput(Throughput::Elements(N));
    for name in ["random", "stride", "stream"] {
        let p = params(&format!("accesses = {N}\nthreads = 4"));
        g.bench_function(name, |b| {
            b.iter(|| {
                let mut gen: Box<dyn Generator> = gen::open_generator(name, Some(&p), 1).expect("generator");
                let mut n = 0u64;
                while let Some(a) = gen.next_access() {
                    n += a.addr & 1;
                }
                black_box(n)
            })
        });
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("w.trace");
    let p = params(&format!("accesses = {N}\nthreads = 4"));
    g.bench_function("random_to_file", |b| b.iter(|| gen::generate("random", Some(&p), &out, 1).expect("generate")));
    g.finish();
}

criterion_group!(benches, decode, generators);
criterion_main!(benches);
