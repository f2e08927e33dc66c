use std::collections::HashSet;
use std::path::Path;

use tiersim_core::{Access, Op};
use tiersim_trace::gen::{self, GeneratorSource, REGISTRY};
use tiersim_trace::{AccessSource, AddrKind, TimeUnit, TraceReader, TraceStats};

fn table(s: &str) -> toml::Table {
    toml::from_str(s).unwrap()
}

fn run(name: &str, params: &str, seed: u64) -> (TraceStats, Vec<Access>, Vec<u8>) {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("g.trace");
    let stats = gen::generate(name, Some(&table(params)), &p, seed).unwrap();
    let accesses = read(&p);
    (stats, accesses, std::fs::read(&p).unwrap())
}

fn read(p: &Path) -> Vec<Access> {
    TraceReader::open(p).unwrap().map(|a| a.unwrap()).collect()
}

#[test]
fn registry_names_are_unique_and_findable() {
    let names: HashSet<_> = REGISTRY.iter().map(|e| e.info.name).collect();
    assert_eq!(names.len(), REGISTRY.len());
    for e in REGISTRY {
        assert_eq!(gen::find(e.info.name).unwrap().info.name, e.info.name);
        // Every generator builds from its defaults.
        gen::open_generator(e.info.name, None, 0).unwrap();
    }
    let e = gen::find("zipf").err().unwrap().to_string();
    assert_eq!(e, "unknown generator `zipf`; valid names: random, stride, stream, hashmap, matmul, minheap, kv, graph, stencil, phased, fileio");
}

#[test]
fn bad_params_rejected() {
    let e = gen::open_generator("random", Some(&table("footprnt = \"1GiB\"")), 0).err().unwrap().to_string();
    assert!(e.contains("`footprnt`") && e.contains("valid parameters: footprint"), "{e}");
    let e = gen::open_generator("stream", Some(&table("write_ratio = 0.5")), 0).err().unwrap().to_string();
    assert!(e.contains("`write_ratio`: unknown parameter"), "{e}");
    let e = gen::open_generator("random", Some(&table("write_ratio = 1.5")), 0).err().unwrap().to_string();
    assert!(e.contains("above the maximum"), "{e}");
    let e = gen::open_generator("random", Some(&table("page_size = 3000")), 0).err().unwrap().to_string();
    assert!(e.contains("`page_size`") && e.contains("power of two"), "{e}");
    let e = gen::open_generator("random", Some(&table("base_addr = 100")), 0).err().unwrap().to_string();
    assert!(e.contains("`base_addr`") && e.contains("not aligned"), "{e}");
    let e = gen::open_generator("stride", Some(&table("footprint = 128\nthreads = 4")), 0).err().unwrap().to_string();
    assert!(e.contains("`footprint`"), "{e}");
    let e = gen::open_generator("random", Some(&table("base_addr = 9223372036854771712\nfootprint = \"16EB\"")), 0);
    assert!(e.is_err());
    let e = gen::open_generator("random", Some(&table("threads = 0")), 0).err().unwrap().to_string();
    assert!(e.contains("below the minimum"), "{e}");
}

fn pages(a: &[Access], page: u64) -> usize {
    a.iter().map(|x| x.addr / page).collect::<HashSet<_>>().len()
}

#[test]
fn random_file_share_marks_the_top_of_the_footprint_file_backed() {
    let (_, plain, _) = run("random", "footprint = \"1MiB\"\naccesses = 20000", 3);
    let (_, a, _) = run("random", "footprint = \"1MiB\"\naccesses = 20000\nfile_share = 0.25", 3);
    let base = gen::DEFAULT_BASE_ADDR;
    // The trace opens with the file's mapping record: the upper 256 KiB, 64 pages.
    assert_eq!(
        a[0],
        Access { time: 0, addr: base + (768 << 10), cpu: 0, size: 64, op: Op::Read, flags: Access::FILE | Access::MAP }
    );
    let a = &a[1..];
    // Same addresses; exactly the upper 256 KiB (pages 192..256) carry the file flag, and the
    // trace file keeps it.
    for (x, y) in a.iter().zip(&plain) {
        assert_eq!((x.addr, x.op), (y.addr, y.op));
        assert_eq!(x.is_file(), x.addr - base >= 768 << 10, "{x:?}");
        assert_eq!(y.flags, 0);
    }
    let files = a.iter().filter(|x| x.is_file()).count();
    assert!((4000..6000).contains(&files), "{files}");
    // A share that does not end on a page: the file starts at the next page, so no page holds
    // both anonymous and file lines (0.3 of 16384 lines is line 11469 of 16384, in page 179;
    // the file starts at page 180).
    let (_, a, _) = run("random", "footprint = \"1MiB\"\naccesses = 20000\nfile_share = 0.3", 3);
    assert_eq!((a[0].addr - base, a[0].size), (180 << 12, 256 - 180));
    assert!(a[1..].iter().all(|x| x.is_file() == (x.addr - base >= 180 << 12)));
}

#[test]
fn random_footprint_mix_and_cpus() {
    let (s, a, _) = run("random", "footprint = \"1MiB\"\naccesses = 100000\nthreads = 4\nwrite_ratio = 0.3", 7);
    assert_eq!(s.accesses, 100_000);
    assert_eq!(a.len(), 100_000);
    // 256 pages, 100k uniform draws: missing one has probability ~256 * e^-390.
    assert_eq!(s.footprint_pages, 256);
    assert_eq!(pages(&a, 4096), 256);
    let wr = s.writes as f64 / s.accesses as f64;
    assert!((wr - 0.3).abs() < 0.01, "write ratio {wr}");
    assert_eq!(s.per_cpu, vec![25_000; 4]);
    let base = gen::DEFAULT_BASE_ADDR;
    for (i, x) in a.iter().enumerate() {
        assert_eq!(x.cpu as usize, i % 4);
        assert!(x.addr >= base && x.addr + 64 <= base + (1 << 20));
        assert_eq!(x.addr % 64, 0);
        assert_eq!((x.size, x.time), (64, 10));
    }
    assert_eq!(s.bytes, 64 * 100_000);
    // 4 CPUs each run 25k accesses 10 instructions apart.
    assert_eq!((s.time_first, s.time_last), (0, 250_000));
}

#[test]
fn stride_covers_its_footprint_exactly() {
    // 4 threads x 256 KiB slices, 64 B stride: 4096 accesses per thread sweep each slice once.
    let (s, a, _) = run("stride", "footprint = \"1MiB\"\naccesses = 16384\nthreads = 4", 1);
    assert_eq!(s.footprint_pages, 256);
    assert_eq!(s.per_cpu, vec![4096; 4]);
    assert_eq!(s.writes, 0);
    let base = gen::DEFAULT_BASE_ADDR;
    assert_eq!(a[0].addr, base);
    assert_eq!(a[1].addr, base + (256 << 10));
    assert_eq!(a[4].addr, base + 64);
    // Every line of the footprint exactly once.
    assert_eq!(a.iter().map(|x| x.addr).collect::<HashSet<_>>().len(), 16384);
    // One more lap wraps back to the start of each slice.
    let (_, a2, _) = run("stride", "footprint = \"1MiB\"\naccesses = 16388\nthreads = 4", 1);
    assert_eq!(a2[16384].addr, base);
    // A page-sized stride touches a new page every access.
    let (s, _, _) = run("stride", "footprint = \"1MiB\"\naccesses = 256\nstride = \"4KiB\"\nwrite_ratio = 0.5", 1);
    assert_eq!(s.footprint_pages, 256);
    assert!(s.writes > 64 && s.writes < 192, "{}", s.writes);
}

#[test]
fn stream_covers_its_arrays_exactly() {
    // 4 arrays of 2 MiB (512 pages each), 32768 lines each: one sweep is 4 * 32768 accesses.
    let (s, a, _) = run("stream", "footprint = \"8MiB\"\narrays = 4\naccesses = 131072\nthreads = 2", 0);
    assert_eq!(s.footprint_pages, 2048);
    assert_eq!(s.writes * 4, s.accesses);
    assert_eq!(s.per_cpu, vec![65536; 2]);
    let base = gen::DEFAULT_BASE_ADDR;
    let two_mib = 2u64 << 20;
    // Thread 0: element 0 of arrays 1, 2, 3 read, then array 0 written; thread 1 starts at 16384.
    let want = [
        (base + two_mib, 0, Op::Read),
        (base + two_mib + 16384 * 64, 1, Op::Read),
        (base + 2 * two_mib, 0, Op::Read),
        (base + 2 * two_mib + 16384 * 64, 1, Op::Read),
        (base + 3 * two_mib, 0, Op::Read),
        (base + 3 * two_mib + 16384 * 64, 1, Op::Read),
        (base, 0, Op::Write),
        (base + 16384 * 64, 1, Op::Write),
        (base + two_mib + 64, 0, Op::Read),
    ];
    for (i, (addr, cpu, op)) in want.into_iter().enumerate() {
        assert_eq!((a[i].addr, a[i].cpu, a[i].op), (addr, cpu, op), "access {i}");
    }
    // Uneven split: 3 arrays of 64 MiB / 3, each starting on a 2 MiB boundary.
    let (s, a, _) = run("stream", "accesses = 300000\nthreads = 3", 0);
    // Each thread's 100000 accesses are 33333 whole elements (3 accesses, 1 write) and a read.
    assert_eq!(s.writes, 99_999);
    // 64 MiB / 3 rounds up to an 11 x 2 MiB slot per array.
    let slot = 11 * two_mib;
    assert_eq!((a[0].addr, a[3].addr, a[6].addr), (base + slot, base + 2 * slot, base));
    assert!(a.iter().all(|x| x.addr >= base && x.addr < base + 3 * slot));
    // Repeats: with twice the accesses every element is visited twice.
    let (s1, _, _) = run("stream", "footprint = \"8MiB\"\narrays = 4\naccesses = 262144", 0);
    assert_eq!(s1.footprint_pages, 2048);
}

#[test]
fn deterministic_files() {
    for (name, params) in [
        ("random", "footprint = \"4MiB\"\naccesses = 50000\nthreads = 3"),
        ("stride", "footprint = \"4MiB\"\naccesses = 50000\nwrite_ratio = 0.25\nstride = \"192B\""),
        ("stream", "footprint = \"4MiB\"\naccesses = 50000\nthreads = 5"),
    ] {
        let (_, _, b1) = run(name, params, 42);
        let (_, _, b2) = run(name, params, 42);
        assert!(b1 == b2, "{name}: same seed must give identical bytes");
        if name != "stream" {
            let (_, _, b3) = run(name, params, 43);
            assert!(b1 != b3, "{name}: a different seed should change the trace");
        }
    }
}

#[test]
fn headers_say_instructions_and_virtual() {
    for e in REGISTRY {
        let (_, _, _) = run(e.info.name, "footprint = \"1MiB\"\naccesses = 1000", 0);
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("h.trace");
        gen::generate(e.info.name, Some(&table("accesses = 10\npage_size = \"2MiB\"")), &p, 0).unwrap();
        let r = TraceReader::open(&p).unwrap();
        let h = r.header();
        assert_eq!((h.time_unit, h.addr_kind, h.page_size), (TimeUnit::Instructions, AddrKind::Virtual, 2 << 20));
        // phased counts only its hot kernel's accesses; its fill and build phases come first.
        // fileio's file mapping record is a record too.
        if e.info.name != "phased" {
            assert_eq!(h.stats.as_ref().unwrap().accesses, 10 + (e.info.name == "fileio") as u64, "{}", e.info.name);
        }
    }
}

#[test]
fn generator_source_matches_file() {
    let params = table("footprint = \"2MiB\"\naccesses = 10001\nthreads = 2");
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("s.trace");
    gen::generate("random", Some(&params), &p, 5).unwrap();
    let mut src = GeneratorSource::new(gen::open_generator("random", Some(&params), 5).unwrap());
    assert_eq!(src.header().time_unit, TimeUnit::Instructions);
    assert!(src.header().stats.is_none());
    let mut got = Vec::new();
    while src.read_batch(&mut got, 1000).unwrap() > 0 {}
    assert_eq!(got, read(&p));
}

#[test]
fn fileio_streams_each_threads_slice_by_calls_or_mapped_lines() {
    let base = 0x7f00_0000_0000u64;
    // 1 MiB of anon memory, then the 256 KiB file at the next 2 MiB boundary.
    let params = "footprint = \"1MiB\"\nfile_size = \"256KiB\"\naccesses = 4000\nthreads = 2\nfile_share = 0.25\nio_size = \"8KiB\"\nfile_write_ratio = 0.5";
    let (_, a, _) = run("fileio", params, 3);
    let file_base = base + (2 << 20);
    // First the file's mapping record: 256 KiB at the 2 MiB boundary.
    assert_eq!(
        a[0],
        Access { time: 0, addr: file_base, cpu: 0, size: 64, op: Op::Read, flags: Access::FILE | Access::MAP }
    );
    let a = a[1..].to_vec();
    let calls: Vec<&Access> = a.iter().filter(|x| x.is_syscall()).collect();
    assert_eq!(calls.len() + a.iter().filter(|x| x.flags == 0).count(), 4000);
    assert!((900..1100).contains(&calls.len()), "{}", calls.len());
    assert!(a.iter().filter(|x| x.flags == 0).all(|x| (base..base + (1 << 20)).contains(&x.addr) && x.size == 64));
    let writes = calls.iter().filter(|x| x.op == Op::Write).count();
    assert!((400..600).contains(&writes), "{writes}");
    // 32 slots of 8 KiB, 16 per thread: each thread walks on from its first slot, wrapping.
    for cpu in 0..2u32 {
        let mine: Vec<u64> = calls.iter().filter(|x| x.cpu == cpu).map(|x| (x.addr - file_base) / 8192).collect();
        assert!(calls.iter().all(|x| x.flags == Access::FILE | Access::SYSCALL && x.size == 8192));
        for (i, s) in mine.iter().enumerate() {
            assert_eq!(*s, (16 * cpu as u64 + i as u64) % 32, "cpu {cpu} call {i}");
        }
    }
    // Through a mapping, each operation is 8 KiB of 64-byte lines, same choices, same offsets.
    let (_, m, _) = run("fileio", &format!("{params}\nfile_access = \"mmap\""), 3);
    assert_eq!(
        m[0],
        Access { time: 0, addr: file_base, cpu: 0, size: 64, op: Op::Read, flags: Access::FILE | Access::MAP }
    );
    let lines: Vec<&Access> = m[1..].iter().filter(|x| x.is_file()).collect();
    assert_eq!(lines.len(), calls.len() * 128);
    assert!(lines.iter().all(|x| x.flags == Access::FILE && x.size == 64));
    for (k, c) in calls.iter().enumerate() {
        let op = &lines[k * 128..(k + 1) * 128];
        assert!(
            op.iter().enumerate().all(|(j, x)| x.addr == c.addr + 64 * j as u64 && x.op == c.op && x.cpu == c.cpu),
            "operation {k}"
        );
    }
    // O_DIRECT: the same trace with the direct bit on every call, nothing else changed.
    let (_, d, _) = run("fileio", &format!("{params}\ndirect = true"), 3);
    let d = d[1..].to_vec();
    assert_eq!(d.len(), a.len());
    for (x, y) in a.iter().zip(&d) {
        let flags = if x.is_syscall() { x.flags | Access::DIRECT } else { x.flags };
        assert_eq!(*y, Access { flags, ..*x });
    }
    let err = |extra: &str| {
        let t = table(&format!("{params}\ndirect = true\n{extra}"));
        gen::generate("fileio", Some(&t), &tempfile::tempdir().unwrap().path().join("e.trace"), 3)
            .unwrap_err()
            .to_string()
    };
    assert!(err("file_access = \"mmap\"").contains("direct"));
    let t = table(&params.replace("io_size = \"8KiB\"", "io_size = 1000\ndirect = true"));
    let e = gen::generate("fileio", Some(&t), &tempfile::tempdir().unwrap().path().join("e.trace"), 3)
        .unwrap_err()
        .to_string();
    assert!(e.contains("io_size") && e.contains("512"), "{e}");
}
