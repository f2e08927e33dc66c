//! What zstd alone costs, per record, on a captured trace's frames at each compression setting
//! (BENCHMARKS.md, "Capture", issue 36: the write side's 50 ns a record). Each frame of 65,536
//! records is byte-shuffled as the capture's writer lays it out, then compressed at every setting
//! in turn (so that the settings share the machine's load), and decompressed again; CPU time of
//! this thread around each call only (no reading, statistics or shuffle), and the compressed bytes.
//!
//! Settings: `L` a zstd level (1, -1, -5, ...); `L:lit0` that level with the literals left
//! uncompressed (zstd's literalCompressionMode, which its negative levels choose themselves);
//! `L:lit1` with them Huffman-coded whatever the level; `L:mmN`, `L:hlN`, `L:tlN` with zstd's
//! minMatch, hashLog or targetLength (the acceleration of its fast levels) set to N;
//! `L:dt` that level on a frame whose time planes hold each record's time less the previous
//! record's (a plane encoding the format does not have: it measures what it would save).
//!
//!   cargo run --release -p tiersim-trace --example zstd_fast -- A.trace [B.trace...] -- 1 -1 -5 1:lit0 1:dt

use std::ffi::{c_int, c_void};
use std::path::Path;
use std::time::Duration;

use tiersim_core::Access;
use tiersim_trace::format::TraceReader;

mod frames;
use frames::{cpu_time, next_frame, shuffle, FRAME, R};

// zstd's advanced API, declared here with the parameter as an int so that the experimental
// literalCompressionMode (ZSTD_c_experimentalParam5) can be set without zstd-sys's
// `experimental` feature; the symbols are zstd's own, linked through the zstd crate.
extern "C" {
    fn ZSTD_createCCtx() -> *mut c_void;
    fn ZSTD_CCtx_setParameter(cctx: *mut c_void, param: c_int, value: c_int) -> usize;
    fn ZSTD_compress2(cctx: *mut c_void, dst: *mut c_void, cap: usize, src: *const c_void, n: usize) -> usize;
    fn ZSTD_isError(code: usize) -> u32;
    fn ZSTD_createDCtx() -> *mut c_void;
    fn ZSTD_decompressDCtx(dctx: *mut c_void, dst: *mut c_void, cap: usize, src: *const c_void, n: usize) -> usize;
}
const C_LEVEL: c_int = 100;
const C_CHECKSUM: c_int = 201;
const C_CONTENT_SIZE: c_int = 200;
const C_LITERAL_MODE: c_int = 1002;
/// ZSTD_ps_disable: literals stored raw; ZSTD_ps_enable: Huffman-coded whatever the level.
const LIT_UNCOMPRESSED: c_int = 2;
const LIT_HUFFMAN: c_int = 1;
const C_HASH_LOG: c_int = 102;
const C_MIN_MATCH: c_int = 105;
const C_TARGET_LENGTH: c_int = 106;

struct Setting {
    name: String,
    cctx: *mut c_void,
    delta_time: bool,
    compress: Duration,
    decompress: Duration,
    bytes: u64,
}

fn setting(s: &str) -> Setting {
    let mut parts = s.split(':');
    let level: c_int = parts.next().unwrap().parse().expect("a zstd level");
    // SAFETY: a fresh context, parameters set before any use.
    let cctx = unsafe { ZSTD_createCCtx() };
    let set = |p, v| {
        let r = unsafe { ZSTD_CCtx_setParameter(cctx, p, v) };
        assert_eq!(unsafe { ZSTD_isError(r) }, 0, "zstd parameter {p} = {v}");
    };
    set(C_LEVEL, level);
    set(C_CHECKSUM, 1);
    set(C_CONTENT_SIZE, 1);
    let mut delta_time = false;
    for e in parts {
        let num = |p: &str| e[p.len()..].parse::<c_int>().expect("a number");
        match e {
            "dt" => delta_time = true,
            "lit0" => set(C_LITERAL_MODE, LIT_UNCOMPRESSED),
            "lit1" => set(C_LITERAL_MODE, LIT_HUFFMAN),
            _ if e.starts_with("mm") => set(C_MIN_MATCH, num("mm")),
            _ if e.starts_with("hl") => set(C_HASH_LOG, num("hl")),
            _ if e.starts_with("tl") => set(C_TARGET_LENGTH, num("tl")),
            _ => panic!("unknown setting suffix {e}"),
        }
    }
    Setting { name: s.to_owned(), cctx, delta_time, compress: Duration::ZERO, decompress: Duration::ZERO, bytes: 0 }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cut = args.iter().position(|a| a == "--").expect("usage: zstd_fast TRACE... -- SETTING...");
    let (traces, settings) = (&args[..cut], &args[cut + 1..]);
    let dctx = unsafe { ZSTD_createDCtx() };
    for arg in traces {
        let mut sets: Vec<Setting> = settings.iter().map(|s| setting(s)).collect();
        let mut r = TraceReader::open(Path::new(arg)).expect("open");
        let mut recs: Vec<Access> = Vec::with_capacity(FRAME);
        let (mut plain, mut delta) = (vec![0u8; FRAME * R], vec![0u8; FRAME * R]);
        let mut back = vec![0u8; FRAME * R];
        let cap = zstd::zstd_safe::compress_bound(FRAME * R);
        let mut out = vec![0u8; cap];
        let mut n = 0u64;
        loop {
            let k = next_frame(&mut r, &mut recs);
            if k == 0 {
                break;
            }
            n += k as u64;
            shuffle(&recs, &mut plain[..k * R], false);
            if sets.iter().any(|s| s.delta_time) {
                shuffle(&recs, &mut delta[..k * R], true);
            }
            for s in &mut sets {
                let src = if s.delta_time { &delta[..k * R] } else { &plain[..k * R] };
                let t = cpu_time();
                // SAFETY: buffers of the lengths given.
                let c = unsafe { ZSTD_compress2(s.cctx, out.as_mut_ptr().cast(), cap, src.as_ptr().cast(), src.len()) };
                s.compress += cpu_time() - t;
                assert_eq!(unsafe { ZSTD_isError(c) }, 0, "compress");
                s.bytes += c as u64;
                let t = cpu_time();
                let d =
                    unsafe { ZSTD_decompressDCtx(dctx, back.as_mut_ptr().cast(), back.len(), out.as_ptr().cast(), c) };
                s.decompress += cpu_time() - t;
                assert_eq!(d, src.len(), "decompress");
                assert!(back[..d] == *src, "round trip");
            }
        }
        println!("{arg}: {n} records");
        println!("  setting      compress_ns/rec  bytes/rec  decompress_ns/rec");
        for s in &sets {
            let per = |d: Duration| d.as_secs_f64() * 1e9 / n as f64;
            println!(
                "  {:12} {:15.2} {:10.3} {:18.2}",
                s.name,
                per(s.compress),
                s.bytes as f64 / n as f64,
                per(s.decompress)
            );
        }
    }
}
