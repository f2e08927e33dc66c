//! What the zstd level and frame size of a captured trace cost and save (BENCHMARKS.md, "Capture",
//! issue 36): a trace's records written again at each setting, single-threaded, then read back.
//! Per setting: the file's bytes per record, the writer's CPU time beyond reading the source (the
//! statistics, shuffle and compression of the capture's writer, compression being all that
//! changes), and the CPU time to read the written file (zstd's decompression and the unshuffle,
//! what a replay pays before its simulation).
//!
//!   cargo run --release -p tiersim-trace --example zstd_levels -- SRC.trace DIR LEVEL:FRAME_RECORDS[:HASH_LOG]...
//!   e.g. ... pr.virt.trace /tmp/z 1:65536 -1:65536 -5:65536:10 3:65536 (HASH_LOG: zstd's hashLog,
//!   the level's own when left out)

use std::path::Path;
use std::time::Duration;

use tiersim_core::Access;
use tiersim_trace::format::{TraceMeta, TraceReader, TraceWriter, WriterOptions};
use tiersim_trace::AccessSource;

/// User + system time of this thread.
fn cpu_time() -> Duration {
    // SAFETY: getrusage writes the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// Every record of `path`, each batch handed to `f`; the number of records.
fn each_batch(path: &Path, mut f: impl FnMut(&[Access])) -> u64 {
    let mut r = TraceReader::open(path).expect("open");
    let mut buf = Vec::with_capacity(1 << 16);
    let mut n = 0u64;
    loop {
        buf.clear();
        let k = r.read_batch(&mut buf, 1 << 16).expect("read");
        if k == 0 {
            return n;
        }
        n += k as u64;
        f(&buf);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    assert!(args.len() >= 3, "usage: zstd_levels SRC DIR LEVEL:FRAME_RECORDS[:HASH_LOG]...");
    let (src, dir) = (Path::new(&args[0]), Path::new(&args[1]));
    std::fs::create_dir_all(dir).expect("dir");
    let h = TraceReader::open(src).expect("open").header().clone();
    let meta = TraceMeta { time_unit: h.time_unit, addr_kind: h.addr_kind, page_size: h.page_size };

    let t0 = cpu_time();
    let records = each_batch(src, |_| {});
    let read_src = cpu_time() - t0;
    println!("{}: {records} records, read in {:.2} s CPU", src.display(), read_src.as_secs_f64());
    println!("setting bytes/record write_ns/record write_Mrec/s read_ns/record read_Mrec/s");
    for s in &args[2..] {
        let mut parts = s.split(':');
        let level = parts.next().expect("LEVEL");
        let frame = parts.next().expect("LEVEL:FRAME_RECORDS");
        let opts = WriterOptions {
            level: level.parse().expect("level"),
            frame_records: frame.parse().expect("frame records"),
            hash_log: parts.next().map(|h| h.parse().expect("hash log")),
            ..Default::default()
        };
        let out = dir.join(format!("{}.trace", s.replace(':', "_")));
        let t0 = cpu_time();
        let mut w = TraceWriter::create_with(&out, meta, opts).expect("create");
        w.set_v2p(h.v2p);
        each_batch(src, |b| w.write_all(b).expect("write"));
        w.finish().expect("finish");
        let write = (cpu_time() - t0).saturating_sub(read_src);
        let t0 = cpu_time();
        assert_eq!(each_batch(&out, |_| {}), records);
        let read = cpu_time() - t0;
        let bytes = std::fs::metadata(&out).expect("size").len();
        let per = |d: Duration| d.as_secs_f64() * 1e9 / records as f64;
        println!(
            "{s} {:.3} {:.1} {:.1} {:.1} {:.1}",
            bytes as f64 / records as f64,
            per(write),
            1e3 / per(write),
            per(read),
            1e3 / per(read)
        );
        std::fs::remove_file(&out).expect("remove");
    }
}
