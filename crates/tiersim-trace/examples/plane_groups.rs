//! What zstd costs on each plane group of a captured trace's frames (BENCHMARKS.md, "Capture",
//! issue 36): whether a capture's two traces, whose records differ only in their addresses,
//! could share the compression of the planes they have in common. Each frame of 65,536 records
//! is byte-shuffled as the writer does, then compressed at level 1 (the capture's) whole, and
//! as three separate zstd frames: the time planes (bytes 0..8 of a record), the address planes
//! (8..16) and the rest (cpu, size, op, flags). CPU time of this thread, per record.
//!
//!   cargo run --release -p tiersim-trace --example plane_groups -- A.trace [B.trace...]

use std::path::Path;
use std::time::Duration;

use tiersim_core::Access;
use tiersim_trace::format::TraceReader;
use zstd::zstd_safe::{CCtx, CParameter};

mod frames;
use frames::{cpu_time, next_frame, shuffle, FRAME, R};

fn cctx() -> CCtx<'static> {
    let mut c = CCtx::create();
    c.set_parameter(CParameter::CompressionLevel(1)).unwrap();
    c.set_parameter(CParameter::ChecksumFlag(true)).unwrap();
    c.set_parameter(CParameter::ContentSizeFlag(true)).unwrap();
    c
}

fn main() {
    for arg in std::env::args().skip(1) {
        let mut r = TraceReader::open(Path::new(&arg)).expect("open");
        let mut recs: Vec<Access> = Vec::with_capacity(FRAME);
        let mut planes = vec![0u8; FRAME * R];
        let mut out = Vec::with_capacity(zstd::zstd_safe::compress_bound(FRAME * R));
        let mut c = cctx();
        // whole, time, addr, rest: CPU and bytes
        let mut cpu = [Duration::ZERO; 4];
        let mut bytes = [0u64; 4];
        let mut n = 0u64;
        loop {
            let k = next_frame(&mut r, &mut recs);
            if k == 0 {
                break;
            }
            n += k as u64;
            let p = &mut planes[..k * R];
            shuffle(&recs, p, false);
            let spans = [0..k * R, 0..8 * k, 8 * k..16 * k, 16 * k..24 * k];
            for (i, s) in spans.into_iter().enumerate() {
                out.clear();
                let t = cpu_time();
                c.compress2(&mut out, &p[s]).expect("zstd");
                cpu[i] += cpu_time() - t;
                bytes[i] += out.len() as u64;
            }
        }
        println!("{arg}: {n} records");
        for (i, name) in ["whole frame", "time planes", "address planes", "cpu/size/op/flags planes"].iter().enumerate()
        {
            println!(
                "  {name:26} {:6.2} ns/record {:6.3} bytes/record",
                cpu[i].as_secs_f64() * 1e9 / n as f64,
                bytes[i] as f64 / n as f64
            );
        }
    }
}
