//! Throughput of the capture filter on lackey text held in memory: how many lackey lines per
//! second it parses, filters and writes, against the rate Valgrind produces them (about 2-4 M
//! lines/s on this machine, see BENCHMARKS.md). The text is the hashmap generator's accesses
//! (1M, three instructions between them) written as lackey lines with real instruction
//! addresses, so it looks like Valgrind's output.

use std::fmt::Write as _;
use std::path::Path;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tiersim_trace::capture::{capture, CaptureRequest, Progress};
use tiersim_trace::gen;

const ACCESSES: u64 = 1_000_000;

fn lackey_text() -> (String, u64) {
    let p: toml::Table =
        toml::from_str(&format!("accesses = {ACCESSES}\nfootprint = \"256MiB\"\ngap_instructions = 3")).unwrap();
    let mut g = gen::open_generator("hashmap", Some(&p), 1).expect("bench generator");
    let mut s = String::with_capacity(ACCESSES as usize * 80);
    let mut lines = 0;
    let mut pc = 0x401000u64;
    while let Some(a) = g.next_access() {
        for _ in 0..a.time {
            pc += 4;
            let _ = writeln!(s, "I  {:08x},4", pc & 0xffff);
            lines += 1;
        }
        let k = if a.op.is_write() { 'S' } else { 'L' };
        let _ = writeln!(s, " {k} {:08x},{}", a.addr, a.size.min(8));
        lines += 1;
    }
    (s, lines)
}

fn bench(c: &mut Criterion) {
    let (text, lines) = lackey_text();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("p.trace");
    let virt = dir.path().join("v.trace");
    let mut g = c.benchmark_group("capture");
    g.sample_size(10).throughput(Throughput::Elements(lines));
    for (name, params) in [
        ("unfiltered_virtual", "llc = 0\nv2p = \"none\""),
        ("llc16m_virtual", "v2p = \"none\""),
        ("llc16m_buddy", "phys_mem = \"1GiB\"\nv2p = \"buddy\""),
        ("unfiltered_buddy", "llc = 0\nphys_mem = \"1GiB\"\nv2p = \"buddy\""),
    ] {
        let t: toml::Table = toml::from_str(params).unwrap();
        let physical = params.contains("buddy");
        g.bench_function(name, |b| {
            b.iter(|| {
                let req = CaptureRequest {
                    out: &out,
                    virt_out: physical.then_some(virt.as_path()),
                    params: Some(&t),
                    seed: 1,
                    pid: None,
                    pipe_capacity: None,
                };
                capture(&mut text.as_bytes(), Path::new("bench"), &req, &Progress::default()).expect("bench capture")
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
