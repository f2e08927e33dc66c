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

/// `TIERSIM_REGEN_TEST_DATA=1 cargo test -p tiersim-trace --test convert regenerate_mapped`
/// rewrites mapped.trace from mapped.csv (written by hand).
#[test]
fn regenerate_mapped_data_when_asked() {
    if std::env::var_os("TIERSIM_REGEN_TEST_DATA").is_none() {
        return;
    }
    convert::convert(
        &data("mapped.csv"),
        Some(Format::Csv),
        &data("mapped.trace"),
        Format::Native,
        &TextOptions::default(),
    )
    .unwrap();
}

/// The committed mapped trace (mapped.csv, written by hand, and mapped.trace from it): a file
/// mapping of 65,537 pages in two records (the second continues the first), loads and stores
/// through it, a buffered and an O_DIRECT call and anonymous accesses, on two CPUs, then a futex
/// wake on CPU 0 and a wait of the same word on CPU 1.
#[test]
fn mapping_records_travel_through_every_format_that_can_hold_them() {
    let csv = read(&data("mapped.csv"), Some(Format::Csv));
    assert_eq!(read(&data("mapped.trace"), None), csv);
    let maps: Vec<&Access> = csv.iter().filter(|a| a.flags == Access::FILE | Access::MAP).collect();
    assert_eq!(maps.len(), 2);
    assert_eq!(
        (maps[0].op, maps[0].map_bytes(), maps[1].op, maps[1].addr),
        (Op::Read, 65535 * 4096, Op::Write, 0x4000_0000 + 65535 * 4096)
    );
    assert_eq!(csv.iter().map(|a| a.flags).collect::<Vec<_>>(), vec![9, 9, 1, 1, 0, 3, 7, 0, 8, 8]);
    let futex: Vec<(u32, Op, u64, u16)> =
        csv.iter().filter(|a| a.is_futex()).map(|a| (a.cpu, a.op, a.addr, a.size)).collect();
    assert_eq!(futex, vec![(0, Op::Write, 0x7000, 1), (1, Op::Read, 0x7000, 1)]);
    // The header's statistics count the records but neither their bytes nor their pages (nor the
    // futex records').
    let h = tiersim_trace::TraceReader::open(&data("mapped.trace")).unwrap();
    let st = h.header().stats.clone().unwrap();
    assert_eq!((st.accesses, st.bytes, st.footprint_pages), (10, 8 + 16 + 8 + 4096 + 512 + 8, 6));
    let d = tempfile::tempdir().unwrap();
    let o = TextOptions::default();
    // CSV round-trips byte for byte; lackey and MQSim have no place for them and say so, naming
    // the record, and write nothing.
    let back = d.path().join("back.csv");
    convert::convert(&data("mapped.trace"), None, &back, Format::Csv, &o).unwrap();
    assert_eq!(std::fs::read(&back).unwrap(), std::fs::read(data("mapped.csv")).unwrap());
    for f in [Format::Lackey, Format::Mqsim] {
        let out = d.path().join("out.txt");
        let e = convert::convert(&data("mapped.trace"), None, &out, f, &o).unwrap_err().to_string();
        assert!(e.contains("access 1") && e.contains("mapping record") && e.contains("out.txt"), "{f:?}: {e}");
        assert!(!out.exists());
    }
    // A CSV file column of 9 is the only way to write one; 8 (bit 3 without bit 0) is a futex
    // record, of size 1: another size is refused naming the line, as is a value with no meaning.
    let bad = d.path().join("bad.csv");
    std::fs::write(&bad, "time,cpu,op,addr,size,file\n0,0,R,0x1000,1,8\n0,1,W,0x1000,4,8\n").unwrap();
    let e = read_err(&bad, Format::Csv);
    assert!(e.contains("bad.csv:3:") && e.contains("futex record") && e.contains("size 4"), "{e}");
    std::fs::write(&bad, "time,cpu,op,addr,size,file\n0,0,R,0x1000,1,10\n").unwrap();
    let e = read_err(&bad, Format::Csv);
    assert!(e.contains("bad.csv:2:") && e.contains("8 (futex record)") && e.contains("9 (file mapping record)"), "{e}");
    // 11 is a file sync record (fsync op R, fdatasync op W), read as such and written back as 11;
    // trace stats counts it apart, with no bytes and no pages.
    let synced = d.path().join("sync.csv");
    std::fs::write(&synced, "time,cpu,op,addr,size,file\n0,0,R,0x1000,1,9\n5,0,W,0x1000,1,11\n3,1,R,0x1000,1,11\n")
        .unwrap();
    let native = d.path().join("sync.trace");
    convert::convert(&synced, Some(Format::Csv), &native, Format::Native, &o).unwrap();
    let st = tiersim_trace::stats::trace_stats(&native, None, &o, &Default::default()).unwrap();
    assert_eq!(st["sync_records"], serde_json::json!({"fsync": 1, "fdatasync": 1}));
    assert_eq!(
        (st["accesses"].as_u64(), st["pages"].as_u64(), st["mapping_records"].as_u64()),
        (Some(0), Some(0), Some(1))
    );
    let back = d.path().join("back.csv");
    convert::convert(&native, None, &back, Format::Csv, &o).unwrap();
    assert!(std::fs::read_to_string(&back).unwrap().contains("5,0,W,0x1000,1,11\n"));
    // 13 is a file size record (what a file held at open: op R at the byte where its data ended,
    // here the first, so the file was empty; op W at its mapping's end, every byte held), of
    // size 1, read and written back as 13; trace stats counts them apart, and the empty files.
    let sized = d.path().join("size.csv");
    std::fs::write(
        &sized,
        "time,cpu,op,addr,size,file\n0,0,R,0x1000,1,9\n0,0,R,0x1000,1,13\n0,0,R,0x3000,1,9\n0,0,W,0x4000,1,13\n",
    )
    .unwrap();
    convert::convert(&sized, Some(Format::Csv), &native, Format::Native, &o).unwrap();
    let st = tiersim_trace::stats::trace_stats(&native, None, &o, &Default::default()).unwrap();
    assert_eq!(st["size_records"], serde_json::json!({"files": 2, "empty_at_open": 1}));
    assert_eq!((st["accesses"].as_u64(), st["mapping_records"].as_u64()), (Some(0), Some(2)));
    let h = tiersim_trace::TraceReader::open(&native).unwrap();
    let hs = h.header().stats.clone().unwrap();
    assert_eq!((hs.accesses, hs.bytes, hs.footprint_pages), (4, 0, 0));
    convert::convert(&native, None, &back, Format::Csv, &o).unwrap();
    assert!(std::fs::read_to_string(&back).unwrap().ends_with("0,0,R,0x3000,1,9\n0,0,W,0x4000,1,13\n"));
    std::fs::write(&bad, "time,cpu,op,addr,size,file\n0,0,R,0x1000,1,9\n0,0,R,0x1000,2,13\n").unwrap();
    let e = read_err(&bad, Format::Csv);
    assert!(e.contains("bad.csv:3:") && e.contains("file size record") && e.contains("size 2"), "{e}");
    // Sampling keeps every mapping record, whatever the filters, with no gap of its own.
    let sampled = d.path().join("s.trace");
    let opts = tiersim_trace::tools::SampleOptions { window: (Some(5), None), cpus: Some(vec![1]), every: 2 };
    tiersim_trace::tools::sample(&data("mapped.trace"), None, &sampled, &opts, &o).unwrap();
    let kept = read(&sampled, None);
    assert_eq!(
        kept.iter().filter(|a| a.flags == Access::FILE | Access::MAP).map(|a| (a.time, a.addr)).collect::<Vec<_>>(),
        vec![(0, maps[0].addr), (0, maps[1].addr)]
    );
    // So are the futex records, which order the threads whatever is sampled.
    assert_eq!(
        kept.iter().filter(|a| a.is_futex()).map(|a| (a.cpu, a.op)).collect::<Vec<_>>(),
        vec![(0, Op::Write), (1, Op::Read)]
    );
    // CPU 1 at instructions 2, 7, 9: from 5 on, 7 and 9 pass; every 2nd keeps 7, its gap
    // counted from the window's start (2).
    assert_eq!(kept.iter().filter(|a| !a.is_map()).map(|a| (a.time, a.flags)).collect::<Vec<_>>(), vec![(2, 3)]);
    // `trace stats` counts them apart from the accesses, and the futex records apart from both.
    let st = tiersim_trace::stats::trace_stats(&data("mapped.trace"), None, &o, &Default::default()).unwrap();
    assert_eq!(
        (st["accesses"].as_u64(), st["mapping_records"].as_u64(), st["mapped_bytes"].as_u64()),
        (Some(6), Some(2), Some(65537 * 4096))
    );
    assert_eq!(st["futex_records"], serde_json::json!({"wait": 1, "wake": 1}));
}

/// MQSim_CXL's trace format as its simulator reads it: each line one 64 B access whatever the
/// size field says (8 sectors, 1, 64), at the 64 B block of a decimal, hex or octal address.
#[test]
fn mqsim_lines_are_64_byte_accesses() {
    let got = read(&data("mqsim_cxl.trace"), Some(Format::Mqsim));
    let want = [
        (84, 135520832, Op::Read),
        (84, 135520832, Op::Write),
        (90, 0x1fc0, Op::Read),
        (100, 4032, Op::Read),
        (100, 4096, Op::Write),
        (250, (1u64 << 32) + 64, Op::Read),
    ];
    assert_eq!(got.len(), want.len());
    // 2^55 sectors (issue 15: once wrapped to 0 bytes) is ignored too; size 0 is refused
    // (`malformed_lines_...`).
    let d = tempfile::tempdir().unwrap();
    let odd = d.path().join("odd.trace");
    std::fs::write(&odd, "10 0 4096 1 1\n11 0 4096 36028797018963968 0\n").unwrap();
    assert!(read(&odd, Some(Format::Mqsim)).iter().all(|a| a.size == 64));
    for (a, &(time, addr, op)) in got.iter().zip(&want) {
        assert_eq!((a.time, a.addr, a.op, a.size, a.cpu), (time, addr, op, 64, 0));
    }
    // Back to text: the same lines with decimal, aligned addresses and size 8.
    let d = tempfile::tempdir().unwrap();
    let (native, back) = (d.path().join("t.trace"), d.path().join("t.mqsim"));
    let o = TextOptions::default();
    convert::convert(&data("mqsim_cxl.trace"), Some(Format::Mqsim), &native, Format::Native, &o).unwrap();
    convert::convert(&native, None, &back, Format::Mqsim, &o).unwrap();
    assert_eq!(
        std::fs::read_to_string(&back).unwrap(),
        "84 0 135520832 8 1\n84 0 135520832 8 0\n90 0 8128 8 1\n100 0 4032 8 1\n100 0 4096 8 0\n250 0 4294967360 8 1\n"
    );
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
    // MQSim keeps directions; an access is one 64 B access per 64 B block it touches (3 of the
    // 27 cross into a second block), times ns at 0.5 ns per instruction, and CPUs are gone.
    let mq = read(&data("small.mqsim"), Some(Format::Mqsim));
    assert_eq!(mq.len(), 30);
    let blocks: Vec<(u64, Op)> = lackey
        .iter()
        .flat_map(|a| (a.addr / 64..=(a.addr + a.size as u64 - 1) / 64).map(move |b| (b * 64, a.op)))
        .collect();
    assert_eq!(mq.iter().map(|a| (a.addr, a.op)).collect::<Vec<_>>(), blocks);
    assert!(mq.iter().all(|a| a.size == 64 && a.addr % 64 == 0 && a.cpu == 0));
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
    // An ns trace of 4 KiB accesses goes to MQSim as one line per 64 B block and comes back as
    // those 64 B accesses.
    let src = d.path().join("ns.trace");
    let meta = TraceMeta { time_unit: TimeUnit::Ns, addr_kind: AddrKind::Physical, page_size: 4096 };
    let mut w = TraceWriter::create(&src, meta).unwrap();
    let accesses: Vec<Access> = (0..100u64)
        .map(|i| Access {
            time: i * 37,
            addr: (i * 7919) << 12,
            cpu: 0,
            size: 4096,
            op: if i % 3 == 0 { Op::Write } else { Op::Read },
            flags: 0,
        })
        .collect();
    w.write_all(&accesses).unwrap();
    w.finish().unwrap();
    let text = d.path().join("ns.mqsim");
    convert::convert(&src, None, &text, Format::Mqsim, &o).unwrap();
    let lines: Vec<String> = std::fs::read_to_string(&text).unwrap().lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), 6400);
    assert_eq!((lines[1].as_str(), lines[63].as_str()), ("0 0 64 8 0", "0 0 4032 8 0"));
    assert_eq!(lines[64], format!("37 0 {} 8 1", 7919u64 << 12));
    let blocks: Vec<Access> =
        accesses.iter().flat_map(|a| (0..64).map(move |k| Access { addr: a.addr + k * 64, size: 64, ..*a })).collect();
    assert_eq!(read(&text, Some(Format::Mqsim)), blocks);
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
    // System calls, buffered (flags 3) and O_DIRECT (7), keep their flags through CSV.
    for (direct, flags) in [(false, "3"), (true, "7")] {
        let calls = d.path().join("c.trace");
        let params =
            toml::from_str(&format!("footprint = \"1MiB\"\naccesses = 2000\nfile_share = 0.5\ndirect = {direct}"))
                .unwrap();
        gen::generate("fileio", Some(&params), &calls, 1).unwrap();
        let accesses = read(&calls, None);
        let n = accesses.iter().filter(|a| a.is_syscall() && a.is_direct() == direct).count();
        assert!(n > 500 && n < 1500, "{n}");
        convert::convert(&calls, None, &text, Format::Csv, &o).unwrap();
        let body = std::fs::read_to_string(&text).unwrap();
        assert_eq!(body.lines().skip(2).filter(|l| l.ends_with(&format!(",{flags}"))).count(), n);
        assert_eq!(read(&text, Some(Format::Csv)), accesses);
    }
    // The older header without the column: anonymous memory.
    let old = d.path().join("old.csv");
    std::fs::write(&old, "time,cpu,op,addr,size\n5,1,W,0x1000,64\n").unwrap();
    assert_eq!(
        read(&old, Some(Format::Csv)),
        vec![Access { time: 5, addr: 0x1000, cpu: 1, size: 64, op: Op::Write, flags: 0 }]
    );
}

#[test]
fn malformed_lines_name_file_and_line() {
    let d = tempfile::tempdir().unwrap();
    let cases: &[(Format, &str, &str)] = &[
        (Format::Mqsim, "0 0 4096 8 1\n10 0 8192 8 0\n20 0 12288 8\n", ":3: expected 5 fields"),
        (Format::Mqsim, "0 0 4096 8 1\n\n5 0 0x10 8 2\n", ":3: type \"2\" is neither"),
        (Format::Mqsim, "10 0 4096 8 1\n5 0 4096 8 1\n", ":2: time 5 is before"),
        (Format::Mqsim, "10 0 zz 8 1\n", ":1: address \"zz\""),
        (Format::Mqsim, "10 0 4096 -8 1\n", ":1: size \"-8\" is not a whole number of sectors"),
        (Format::Mqsim, "10 0 4096 8 1\n20 0 4096 0 1\n", ":2: size 0 sectors"),
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
        (
            Format::Csv,
            "time,cpu,op,addr,size,file\n1,0,R,0x40,8,1\n2,0,W,0x40,8,yes\n",
            ":3: file \"yes\" is not 0 (anonymous), 1 (file page), 3",
        ),
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
