//! Text formats: every committed copy of the small trace reads to the same stream, conversions
//! round-trip, malformed lines are reported with their line numbers.

use std::path::{Path, PathBuf};

use tiersim_core::{Access, Op};
use tiersim_trace::convert::{self, Format, TextOptions};
use tiersim_trace::{gen, AddrKind, TimeUnit, TraceMeta, TraceWriter};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)
}

fn read(path: &Path, format: Option<Format>) -> Vec<Access> {
    let mut r = convert::open(path, format, &TextOptions::default()).unwrap();
    let mut v = Vec::new();
    while r.read_batch(&mut v, 7).unwrap() > 0 {}
    v
}

fn read_err(path: &Path, format: Format) -> String {
    let mut r = match convert::open(path, Some(format), &TextOptions::default()) {
        Ok(r) => r,
        Err(e) => return e.to_string(),
    };
    let mut v = Vec::new();
    loop {
        match r.read_batch(&mut v, 1000) {
            Ok(0) => panic!("{}: no error", path.display()),
            Ok(_) => {}
            Err(e) => return e.to_string(),
        }
    }
}

/// `TIERSIM_REGEN_TEST_DATA=1 cargo test -p tiersim-trace --test convert` rewrites the
/// committed copies from small.lackey (the one written by hand in Valgrind's layout).
#[test]
fn regenerate_data_when_asked() {
    if std::env::var_os("TIERSIM_REGEN_TEST_DATA").is_none() {
        return;
    }
    let o = TextOptions::default();
    for (name, f) in [("small.trace", Format::Native), ("small.csv", Format::Csv), ("small.mqsim", Format::Mqsim)] {
        convert::convert(&data("small.lackey"), Some(Format::Lackey), &data(name), f, &o).unwrap();
    }
}

#[test]
fn every_reader_gives_the_same_stream() {
    let lackey = read(&data("small.lackey"), Some(Format::Lackey));
    // 24 data lines, 3 of them modifies (a load and a store each).
    assert_eq!(lackey.len(), 27);
    assert_eq!(lackey.iter().filter(|a| a.op == Op::Write).count(), 11);
    assert_eq!(lackey.iter().map(|a| a.time).sum::<u64>(), 35);
    assert_eq!((lackey[0].time, lackey[0].addr, lackey[0].size, lackey[0].op), (1, 0x1ffefffd40, 16, Op::Write));
    assert_eq!(read(&data("small.trace"), None), lackey);
    assert_eq!(read(&data("small.csv"), Some(Format::Csv)), lackey);
    // MQSim keeps addresses and directions; sizes become 512-byte sectors, times ns at 0.5 ns
    // per instruction, and CPUs are gone.
    let mq = read(&data("small.mqsim"), Some(Format::Mqsim));
    let key = |v: &[Access]| v.iter().map(|a| (a.addr, a.op)).collect::<Vec<_>>();
    assert_eq!(key(&mq), key(&lackey));
    assert!(mq.iter().all(|a| a.size == 512 && a.cpu == 0));
    // 35 instructions x 0.5 ns, rounded.
    assert_eq!(mq.last().unwrap().time, 18);
    let r = convert::open(&data("small.csv"), Some(Format::Csv), &TextOptions::default()).unwrap();
    assert_eq!((r.header().time_unit, r.header().addr_kind), (TimeUnit::Instructions, AddrKind::Virtual));
}

#[test]
fn text_files_round_trip_through_native_byte_for_byte() {
    let d = tempfile::tempdir().unwrap();
    let o = TextOptions::default();
    for (name, f) in [("small.csv", Format::Csv), ("small.mqsim", Format::Mqsim), ("small.lackey", Format::Lackey)] {
        let native = d.path().join(format!("{name}.trace"));
        let back = d.path().join(name);
        convert::convert(&data(name), Some(f), &native, Format::Native, &o).unwrap();
        // MQSim back from an ns trace: times stay ns.
        convert::convert(&native, None, &back, f, &o).unwrap();
        assert_eq!(read(&back, Some(f)), read(&data(name), Some(f)), "{name}");
        if f != Format::Lackey {
            assert_eq!(std::fs::read(&back).unwrap(), std::fs::read(data(name)).unwrap(), "{name}");
        }
    }
}

#[test]
fn native_round_trips_through_csv_and_lackey() {
    let d = tempfile::tempdir().unwrap();
    let o = TextOptions::default();
    // Four CPUs through CSV; one CPU through lackey (which has no CPU field).
    for (threads, f) in [(4, Format::Csv), (1, Format::Lackey), (1, Format::Csv)] {
        let src = d.path().join("src.trace");
        let params = toml::from_str(&format!("footprint = \"1MiB\"\naccesses = 3000\nthreads = {threads}")).unwrap();
        gen::generate("hashmap", Some(&params), &src, 1).unwrap();
        let text = d.path().join("t.txt");
        let back = d.path().join("back.trace");
        convert::convert(&src, None, &text, f, &o).unwrap();
        convert::convert(&text, Some(f), &back, Format::Native, &o).unwrap();
        assert_eq!(read(&back, None), read(&src, None), "{f:?}, {threads} threads");
    }
    // An ns trace of whole sectors on one CPU survives MQSim exactly.
    let src = d.path().join("ns.trace");
    let meta = TraceMeta { time_unit: TimeUnit::Ns, addr_kind: AddrKind::Physical, page_size: 4096 };
    let mut w = TraceWriter::create(&src, meta).unwrap();
    let accesses: Vec<Access> = (0..100u64)
        .map(|i| Access { time: i * 37, addr: (i * 7919) << 12, cpu: 0, size: 4096, op: if i % 3 == 0 { Op::Write } else { Op::Read }, flags: 0 })
        .collect();
    w.write_all(&accesses).unwrap();
    w.finish().unwrap();
    let text = d.path().join("ns.mqsim");
    convert::convert(&src, None, &text, Format::Mqsim, &o).unwrap();
    let first = std::fs::read_to_string(&text).unwrap().lines().nth(1).unwrap().to_owned();
    assert_eq!(first, format!("37 0 {} 8 1", 7919u64 << 12));
    assert_eq!(read(&text, Some(Format::Mqsim)), accesses);
    // Lackey cannot hold several CPUs or ns times: errors, and no output file.
    let multi = d.path().join("multi.trace");
    gen::generate("random", Some(&toml::from_str("threads = 2\naccesses = 10").unwrap()), &multi, 0).unwrap();
    let out = d.path().join("multi.lackey");
    let e = convert::convert(&multi, None, &out, Format::Lackey, &o).unwrap_err().to_string();
    assert!(e.contains("cpu 1") && e.contains("one thread"), "{e}");
    assert!(!out.exists());
    let e = convert::convert(&src, None, &out, Format::Lackey, &o).unwrap_err().to_string();
    assert!(e.contains("ns"), "{e}");
}

#[test]
fn csv_carries_the_file_flag() {
    let d = tempfile::tempdir().unwrap();
    let o = TextOptions::default();
    let src = d.path().join("f.trace");
    let params = toml::from_str("footprint = \"1MiB\"\naccesses = 2000\nthreads = 2\nfile_share = 0.5").unwrap();
    gen::generate("random", Some(&params), &src, 1).unwrap();
    let accesses = read(&src, None);
    let files = accesses.iter().filter(|a| a.flags == Access::FILE).count();
    assert!(files > 500 && files < 1500, "{files} file accesses of 2000");
    let text = d.path().join("f.csv");
    convert::convert(&src, None, &text, Format::Csv, &o).unwrap();
    let body = std::fs::read_to_string(&text).unwrap();
    assert_eq!(body.lines().nth(1), Some("time,cpu,op,addr,size,file"));
    assert_eq!(body.lines().skip(2).filter(|l| l.ends_with(",1")).count(), files);
    assert_eq!(read(&text, Some(Format::Csv)), accesses);
    // The older header without the column: anonymous memory.
    let old = d.path().join("old.csv");
    std::fs::write(&old, "time,cpu,op,addr,size\n5,1,W,0x1000,64\n").unwrap();
    assert_eq!(read(&old, Some(Format::Csv)), vec![Access { time: 5, addr: 0x1000, cpu: 1, size: 64, op: Op::Write, flags: 0 }]);
}

#[test]
fn malformed_lines_name_file_and_line() {
    let d = tempfile::tempdir().unwrap();
    let cases: &[(Format, &str, &str)] = &[
        (Format::Mqsim, "0 0 4096 8 1\n10 0 8192 8 0\n20 0 12288 8\n", ":3: expected 5 fields"),
        (Format::Mqsim, "0 0 4096 8 1\n\n5 0 0x10 8 2\n", ":3: type \"2\" is neither"),
        (Format::Mqsim, "10 0 4096 8 1\n5 0 4096 8 1\n", ":2: time 5 is before"),
        (Format::Mqsim, "10 0 zz 8 1\n", ":1: address \"zz\""),
        (Format::Mqsim, "10 0 4096 200 1\n", ":1: size is 102400 bytes"),
        // Issue 15 section 5: 2^55 sectors x 512 wrapped to 0 bytes; size 0 was accepted.
        (Format::Mqsim, "10 0 4096 8 1\n11 0 4096 36028797018963968 1\n", ":2: size 36028797018963968 sectors overflows a 64-bit byte count"),
        (Format::Mqsim, "10 0 4096 0 1\n", ":1: size is 0; every access moves at least one byte"),
        (Format::Lackey, " L 1000,0\n", ":1: size is 0"),
        (Format::Csv, "time,cpu,op,addr,size\n1,0,R,0x40,0\n", ":2: size is 0"),
        (Format::Lackey, "==1== hi\nI  0040,2\n L 1000,8\n X 1000,8\n", ":4: unknown access kind 'X'"),
        (Format::Lackey, " L 10g0,8\n", ":1: address \"10g0\" is not hexadecimal"),
        (Format::Lackey, "garbage\n", ":1: expected `I  addr,size`"),
        (Format::Csv, "time,cpu,op,addr,size\n1,0,R,0x40,8\n2,0,Q,0x40,8\n", ":3: op \"Q\""),
        (Format::Csv, "1,0,R,0x40,8\n", ":1: expected the header"),
        (Format::Csv, "# tiersim time_unit=weeks\ntime,cpu,op,addr,size\n", ":1: unknown setting"),
        (Format::Csv, "time,cpu,op,addr,size\n1,0,R,0x40\n", ":2: expected 5 fields"),
        (Format::Csv, "time,cpu,op,addr,size,file\n1,0,R,0x40,8\n", ":2: expected 6 fields"),
        (Format::Csv, "time,cpu,op,addr,size,file\n1,0,R,0x40,8,1\n2,0,W,0x40,8,yes\n", ":3: file \"yes\" is neither 0 nor 1"),
    ];
    for (i, (f, text, want)) in cases.iter().enumerate() {
        let p = d.path().join(format!("bad{i}.txt"));
        std::fs::write(&p, text).unwrap();
        let e = read_err(&p, *f);
        assert!(e.starts_with(&p.display().to_string()) && e.contains(want), "case {i}: {e}");
    }
    // A text file is never taken for a native trace.
    let p = d.path().join("bad0.txt");
    let e = convert::open(&p, None, &TextOptions::default()).err().unwrap().to_string();
    assert!(e.contains("name its format"), "{e}");
    let e = Format::parse("pin").unwrap_err().to_string();
    assert!(e.contains("valid formats: native, mqsim, lackey, csv"), "{e}");
}
