//! tiersim's write side on a real program's records, alone on the machine's cores (BENCHMARKS.md,
//! "Capture", issue 36's "records written at 20M/s on 2 cores"): a captured virtual trace's
//! records are written as the runtime's per-thread record files (one thread per CPU of the
//! trace, in the trace's order), then merged into the physical (buddy model) and virtual traces
//! as a capture does, `RUNS` times. Per run: wall time, the process's CPU time, and the report's
//! split of it (the compressing threads' `compress_cpu_s`, the rest being the merging thread).
//! The records come from files here, not from the runtime's rings: the merging thread also pays
//! for their read.
//!
//!   cargo run --release -p tiersim-trace --example merge_wall -- VIRT.trace DIR [RUNS] [LLC] [KEY=VALUE...]
//!
//! Each KEY=VALUE is one more capture parameter as `tiersim capture --param` takes it, for
//! example `zstd_level=-10 zstd_hash_log=10`.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use tiersim_core::Access;
use tiersim_trace::capture::instrumented::capture_instrumented;
use tiersim_trace::capture::{CaptureRequest, Progress};
use tiersim_trace::format::TraceReader;
use tiersim_trace::AccessSource;

/// User + system time of this process, every thread.
fn cpu_time() -> Duration {
    // SAFETY: getrusage writes the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(u.ru_utime) + tv(u.ru_stime)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    assert!(args.len() >= 2, "usage: merge_wall VIRT.trace DIR [RUNS] [LLC]");
    let (src, dir) = (Path::new(&args[0]), Path::new(&args[1]));
    let runs: usize = args.get(2).map_or(3, |s| s.parse().expect("runs"));
    let llc = args.get(3).map_or("1MiB", String::as_str);
    std::fs::create_dir_all(dir).expect("dir");
    let rec = dir.join("rec");
    std::fs::create_dir_all(&rec).expect("dir");

    // The record files: stamp u64, addr u64, gap u32, size u16, op u8, flags u8 (the trace's
    // time is the record's instruction gap). One thread per CPU.
    let mut r = TraceReader::open(src).expect("open");
    let mut files: Vec<std::io::BufWriter<std::fs::File>> = Vec::new();
    let mut counts: Vec<(u64, u64, u64)> = Vec::new();
    let mut buf: Vec<Access> = Vec::with_capacity(1 << 16);
    let mut stamp = 0u64;
    loop {
        buf.clear();
        if r.read_batch(&mut buf, 1 << 16).expect("read") == 0 {
            break;
        }
        for a in &buf {
            let t = a.cpu as usize;
            while files.len() <= t {
                let f = std::fs::File::create(rec.join(format!("t{}.bin", files.len()))).expect("create");
                files.push(std::io::BufWriter::with_capacity(1 << 20, f));
                counts.push((0, 0, 0));
            }
            stamp += 1;
            let mut row = [0u8; 24];
            row[0..8].copy_from_slice(&stamp.to_le_bytes());
            row[8..16].copy_from_slice(&a.addr.to_le_bytes());
            row[16..20].copy_from_slice(&(a.time as u32).to_le_bytes());
            row[20..22].copy_from_slice(&a.size.to_le_bytes());
            row[22] = a.op.is_write() as u8;
            row[23] = a.flags;
            files[t].write_all(&row).expect("write");
            let c = &mut counts[t];
            c.0 += a.time;
            c.1 += 1;
            c.2 += a.op.is_write() as u64;
        }
    }
    let records: u64 = counts.iter().map(|c| c.1).sum();
    let mut summary = format!("version 1\ncaches {}\ndirty_at_exit 0\npagemap off\n", files.len());
    for (t, (f, &(accesses, n, writebacks))) in files.iter_mut().zip(&counts).enumerate() {
        f.flush().expect("flush");
        summary += &format!(
            "thread {t} cpu {t} loads {accesses} stores 0 bytes 0 hits 0 misses {} writebacks {writebacks} records {n}\n",
            n - writebacks
        );
    }
    drop(files);
    std::fs::write(rec.join("summary"), summary).expect("summary");
    println!("{}: {records} records", src.display());

    let mut text = format!("llc = \"{llc}\"\nv2p = \"buddy\"\n");
    for kv in args.iter().skip(4) {
        let (key, value) = kv.split_once('=').expect("KEY=VALUE");
        text.push_str(&format!("{key} = {value}\n"));
    }
    let params: toml::Table = toml::from_str(&text).expect("parameters");
    let (out, virt) = (dir.join("p.trace"), dir.join("v.trace"));
    for _ in 0..runs {
        let req = CaptureRequest {
            out: &out,
            virt_out: Some(&virt),
            params: Some(&params),
            seed: 1,
            pid: None,
            pipe_capacity: None,
        };
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        let (c0, w0) = (cpu_time(), Instant::now());
        let rep = capture_instrumented(&rec, &req, &Progress::default()).expect("merge");
        let (cpu, wall) = ((cpu_time() - c0).as_secs_f64(), w0.elapsed().as_secs_f64());
        assert_eq!(rep.records, records);
        let ns = |s: f64| s * 1e9 / records as f64;
        println!(
            "load {} wall {wall:.2} s: {:.2} M records/s; CPU {cpu:.2} s: {:.2} M/CPU-s ({:.1} ns a record: compressing threads {:.1}, the rest {:.1})",
            load.split_whitespace().next().unwrap_or("?"),
            records as f64 / wall / 1e6,
            records as f64 / cpu / 1e6,
            ns(cpu),
            ns(rep.compress_cpu_s),
            ns(cpu - rep.compress_cpu_s),
        );
    }
    let _ = std::fs::remove_dir_all(&rec);
}
