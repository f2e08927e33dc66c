//! Decode throughput of the native format (the engine's input rate ceiling) and generator speed.
//! Traces are generated into a temporary directory during setup, byte-shuffled (the writer's
//! default) and re-encoded as rows (`*_rows`). Setup also prints, once per zstd level, write and
//! decode speed and size of the shuffled encoding. `integrity/*` prices version 2's checks: the
//! same records decoded as version 2 (a CRC-32 per frame of its decompressed bytes, a descriptor
//! per frame, the end block) and as version 1 (none of them), and CRC-32 alone over as many bytes.

use std::hint::black_box;
use std::path::Path;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tiersim_core::Access;
use tiersim_trace::format::{rewrite_as_v1, RECORD_SIZE};
use tiersim_trace::gen::{self, Generator};
use tiersim_trace::{AccessSource, TraceReader, TraceWriter, WriterOptions};

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

/// Re-encode `src` with `opts`; returns the seconds spent in the writer alone.
fn reencode(src: &Path, dst: &Path, opts: WriterOptions) -> f64 {
    let mut r = TraceReader::open(src).expect("open bench trace");
    let meta = tiersim_trace::TraceMeta {
        time_unit: r.header().time_unit,
        addr_kind: r.header().addr_kind,
        page_size: r.header().page_size,
    };
    let mut buf = Vec::with_capacity(BATCH);
    let mut spent = 0.0;
    let t = Instant::now();
    let mut w = TraceWriter::create_with(dst, meta, opts).expect("create bench trace");
    spent += t.elapsed().as_secs_f64();
    while r.read_batch(&mut buf, BATCH).expect("decode bench trace") > 0 {
        let t = Instant::now();
        w.write_all(&buf).expect("write bench trace");
        spent += t.elapsed().as_secs_f64();
        buf.clear();
    }
    let t = Instant::now();
    w.finish().expect("finish bench trace");
    spent + t.elapsed().as_secs_f64()
}

/// Best of three single passes, in M records/s.
fn decode_rate(path: &Path, buf: &mut Vec<Access>) -> f64 {
    (0..3)
        .map(|_| {
            let t = Instant::now();
            let n = decode_all(path, buf);
            n as f64 / t.elapsed().as_secs_f64() / 1e6
        })
        .fold(0.0, f64::max)
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
        let rows = dir.path().join(format!("{name}_rows.trace"));
        reencode(&path, &rows, WriterOptions { shuffle: false, ..Default::default() });
        let mut buf = Vec::with_capacity(BATCH);
        // The last: a fast level with a small hash table (`tiersim capture --zstd-level -10`).
        for (level, hash_log) in [(1, None), (3, None), (6, None), (-10, Some(10))] {
            let l = dir.path().join(format!("{name}_l{level}.trace"));
            let w = reencode(&path, &l, WriterOptions { level, hash_log, ..Default::default() });
            let size = std::fs::metadata(&l).expect("stat").len();
            let h = hash_log.map_or(String::new(), |h| format!(" hashLog {h}"));
            println!(
                "level/{name}/{level}{h}: write {:.1} M records/s, decode {:.1} M records/s, {:.2} bytes/record",
                RECORDS as f64 / w / 1e6,
                decode_rate(&l, &mut buf),
                size as f64 / RECORDS as f64
            );
            std::fs::remove_file(&l).expect("remove");
        }
        for (label, path) in [(name.to_string(), &path), (format!("{name}_rows"), &rows)] {
            let size = std::fs::metadata(path).expect("stat").len();
            let t = Instant::now();
            let n = decode_all(path, &mut buf);
            let s = t.elapsed().as_secs_f64();
            println!(
                "decode/{label}: {n} records, {:.2} bytes/record compressed, one pass {:.1} M records/s ({:.2} GB/s of raw records)",
                size as f64 / n as f64,
                n as f64 / s / 1e6,
                n as f64 * 24.0 / s / 1e9
            );
            g.bench_function(label.as_str(), |b| b.iter(|| decode_all(path, &mut buf)));
        }
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

fn integrity(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let v2 = dir.path().join("random_v2.trace");
    let p = format!("footprint = \"16GiB\"\naccesses = {RECORDS}\nthreads = 8");
    gen::generate("random", Some(&params(&p)), &v2, 1).expect("generate bench trace");
    let v1 = dir.path().join("random_v1.trace");
    std::fs::write(&v1, rewrite_as_v1(&std::fs::read(&v2).expect("read"))).expect("write v1");
    let mut buf = Vec::with_capacity(BATCH);
    assert_eq!(decode_all(&v1, &mut buf), decode_all(&v2, &mut buf));
    let mut g = c.benchmark_group("integrity");
    g.sample_size(10).throughput(Throughput::Elements(RECORDS));
    g.bench_function("decode_v2_checked", |b| b.iter(|| decode_all(&v2, &mut buf)));
    g.bench_function("decode_v1_unchecked", |b| b.iter(|| decode_all(&v1, &mut buf)));
    let raw: Vec<u8> = (0..RECORDS as usize * RECORD_SIZE).map(|i| (i * 31 % 251) as u8).collect();
    g.bench_function("crc32_alone", |b| b.iter(|| crc32fast::hash(black_box(&raw))));
    g.finish();
}

criterion_group!(benches, decode, generators, integrity);
criterion_main!(benches);
