//! The capture pipeline on lackey text (no Valgrind needed): instruction clock, cache filter,
//! virtual-to-physical mapping, the two traces' correspondence, errors.

use std::path::{Path, PathBuf};

use tiersim_core::{Access, Op};
use tiersim_trace::capture::{capture, CaptureReport, CaptureRequest, Progress};
use tiersim_trace::convert::{self, Format, TextOptions};
use tiersim_trace::{AccessSource, AddrKind, TraceReader, V2p};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)
}

fn table(text: &str) -> toml::Table {
    toml::from_str(text).unwrap()
}

fn read(path: &Path) -> Vec<Access> {
    let mut r = TraceReader::open(path).unwrap();
    let mut v = Vec::new();
    while r.read_batch(&mut v, 1000).unwrap() > 0 {}
    v
}

struct Out {
    _dir: tempfile::TempDir,
    out: PathBuf,
    virt: PathBuf,
}

fn outs() -> Out {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("p.trace");
    let virt = d.path().join("v.trace");
    Out { _dir: d, out, virt }
}

/// Capture `text` with `params`; physical captures also write the virtual twin.
fn run(text: &str, params: &str, pid: Option<u32>, o: &Out) -> tiersim_core::Result<CaptureReport> {
    let t = table(params);
    let physical = !params.contains("\"none\"");
    let req = CaptureRequest {
        out: &o.out,
        virt_out: physical.then_some(o.virt.as_path()),
        params: Some(&t),
        seed: 1,
        pid,
        pipe_capacity: None,
    };
    capture(&mut text.as_bytes(), Path::new("<lackey>"), &req, &Progress::default())
}

fn acc(time: u64, addr: u64, size: u16, op: Op) -> Access {
    Access { time, addr, cpu: 0, size, op, flags: 0 }
}

#[test]
fn unfiltered_virtual_capture_is_the_lackey_reader_stream() {
    let text = std::fs::read_to_string(data("small.lackey")).unwrap();
    let o = outs();
    let r = run(&text, "llc = 0\nv2p = \"none\"", None, &o).unwrap();
    let mut lackey = convert::open(&data("small.lackey"), Some(Format::Lackey), &TextOptions::default()).unwrap();
    let mut want = Vec::new();
    while lackey.read_batch(&mut want, 100).unwrap() > 0 {}
    assert_eq!(read(&o.out), want);
    assert_eq!((r.loads, r.stores, r.modifies, r.records), (13, 8, 3, 27));
    assert_eq!(r.instructions, 35);
    assert_eq!(r.v2p, "none");
    assert!(!o.virt.exists());
    assert_eq!(TraceReader::open(&o.out).unwrap().header().addr_kind, AddrKind::Virtual);
    assert_eq!(r.valgrind_messages[..2], ["Lackey, an example Valgrind tool", "Command: ./a.out"]);
    assert_eq!(r.valgrind_messages.last().unwrap(), "Counted 1 call to main()");
}

#[test]
fn cache_filter_hand_checked() {
    // 2 sets x 2 ways of 64 B lines. Lines 0x40 apart alternate sets: 0x000, 0x080, 0x100 are
    // in set 0 and 0x040 in set 1.
    let text = "\
I  1000,4
 L 0008,8
I  1004,4
 S 0010,8
 S 0080,4
I  1008,4
I  100c,4
 L 0100,8
 L 0048,8
I  1010,4
 L 003c,8
 M 0180,8
";
    let o = outs();
    let r = run(text, "llc = 256\nllc_ways = 2\nv2p = \"none\"", None, &o).unwrap();
    let got = read(&o.out);
    let want = vec![
        // Cold miss of line 0 after 1 instruction; the store to it hits.
        acc(1, 0x000, 64, Op::Read),
        acc(1, 0x080, 64, Op::Read),
        // Line 0x100 evicts the LRU of set 0: line 0, dirty since the store.
        acc(2, 0x100, 64, Op::Read),
        acc(0, 0x000, 64, Op::Write),
        acc(0, 0x040, 64, Op::Read),
        // 0x3c..0x44 spans lines 0 (evicted, a miss that evicts dirty 0x080) and 1 (a hit).
        acc(1, 0x000, 64, Op::Read),
        acc(0, 0x080, 64, Op::Write),
        // The modify's load misses and evicts clean 0x100; its store dirties 0x180.
        acc(0, 0x180, 64, Op::Read),
    ];
    assert_eq!(got, want);
    let llc = r.llc.unwrap();
    assert_eq!((llc.hits, llc.misses, llc.writebacks, llc.dirty_at_exit), (3, 6, 2, 1));
    assert_eq!((r.reads, r.writes, r.records), (6, 2, 8));
    assert_eq!(r.instructions, 5);
}

#[test]
fn unfiltered_accesses_are_cut_at_page_boundaries() {
    let o = outs();
    let r = run("I  0,1\n S 0ffc,8\n M 1ffe,4\n", "llc = 0\nv2p = \"none\"", None, &o).unwrap();
    assert_eq!(
        read(&o.out),
        vec![
            acc(1, 0x0ffc, 4, Op::Write),
            acc(0, 0x1000, 4, Op::Write),
            acc(0, 0x1ffe, 2, Op::Read),
            acc(0, 0x2000, 2, Op::Read),
            acc(0, 0x1ffe, 2, Op::Write),
            acc(0, 0x2000, 2, Op::Write),
        ]
    );
    assert_eq!(r.data_bytes, 8 + 8);
}

/// A lackey stream touching `pages` pages of a region at `base`, several times, with stores.
fn pages_text(base: u64, pages: u64) -> String {
    let mut t = String::new();
    for round in 0..3 {
        for p in 0..pages {
            // Pages in a scrambled order, at an offset that changes with the round.
            let page = (p * 7 + round) % pages;
            t.push_str(&format!(
                "I  401000,3\n {} {:x},8\n",
                if p % 3 == 0 { 'S' } else { 'L' },
                base + page * 4096 + 8 * round
            ));
        }
    }
    t
}

fn check_twins(o: &Out) -> (Vec<Access>, Vec<Access>) {
    let (v, p) = (read(&o.virt), read(&o.out));
    assert_eq!(v.len(), p.len());
    let mut frame_of = std::collections::HashMap::new();
    for (a, b) in v.iter().zip(&p) {
        assert_eq!((a.time, a.size, a.op, a.cpu), (b.time, b.size, b.op, b.cpu));
        assert_eq!(a.addr % 4096, b.addr % 4096, "the page offset survives translation");
        let f = *frame_of.entry(a.addr / 4096).or_insert(b.addr / 4096);
        assert_eq!(f, b.addr / 4096, "one frame per virtual page");
    }
    let mut frames: Vec<u64> = frame_of.values().copied().collect();
    frames.sort_unstable();
    frames.dedup();
    assert_eq!(frames.len(), frame_of.len(), "no two virtual pages share a frame");
    (v, p)
}

#[test]
fn buddy_capture_writes_twin_traces_and_records_the_mode() {
    let o = outs();
    let text = pages_text(0x7f00_0000_0000, 50);
    let r = run(&text, "llc = 0\nv2p = \"buddy\"\nphys_mem = \"64MiB\"\nfragmentation = 0.0", None, &o).unwrap();
    let (v, p) = check_twins(&o);
    assert_eq!(v.len(), 150);
    // An unfragmented machine hands out frames 0, 1, 2, ... in first-touch order.
    let mut first_touch = Vec::new();
    for a in &p {
        if !first_touch.contains(&(a.addr / 4096)) {
            first_touch.push(a.addr / 4096);
        }
    }
    assert_eq!(first_touch, (0..50).collect::<Vec<_>>());
    assert_eq!((r.v2p, r.pages_mapped, r.pages_unresolved), ("buddy", 50, 0));
    let h = TraceReader::open(&o.out).unwrap().header().clone();
    assert_eq!((h.addr_kind, h.v2p), (AddrKind::Physical, V2p::Buddy));
    let hv = TraceReader::open(&o.virt).unwrap().header().clone();
    assert_eq!((hv.addr_kind, hv.v2p), (AddrKind::Virtual, V2p::Unrecorded));
    assert_eq!(h.stats.unwrap().footprint_pages, 50);

    // Fragmented memory scatters the same pages; the same seed gives the same bytes.
    let frag =
        |o: &Out| run(&text, "llc = 0\nv2p = \"buddy\"\nphys_mem = \"64MiB\"\nfragmentation = 0.5", None, o).unwrap();
    let (o1, o2) = (outs(), outs());
    frag(&o1);
    frag(&o2);
    assert_eq!(std::fs::read(&o1.out).unwrap(), std::fs::read(&o2.out).unwrap());
    let (_, p1) = check_twins(&o1);
    let spread = p1.iter().map(|a| a.addr / 4096).max().unwrap() - p1.iter().map(|a| a.addr / 4096).min().unwrap();
    assert!(spread > 1000, "50 pages spread over {spread} frames of 16384");
}

#[test]
fn buddy_memory_full_is_a_clear_error_and_leaves_no_output() {
    let o = outs();
    let e = run(
        &pages_text(0x10_0000, 40),
        "llc = 0\nv2p = \"buddy\"\nphys_mem = \"128KiB\"\nfragmentation = 0.0",
        None,
        &o,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("`phys_mem`: the buddy model's memory is full after 32 pages"), "{e}");
    assert!(!o.out.exists() && !o.virt.exists());
}

#[test]
fn pagemap_capture_of_this_process_uses_its_frames() {
    use tiersim_trace::capture::v2p::{Lookup, Pagemap};
    // A buffer of this process, touched, so that its pages are present.
    let buf = vec![7u8; 64 * 4096];
    let base = (buf.as_ptr() as u64).div_ceil(4096) * 4096;
    let mut pm = Pagemap::open(std::process::id()).unwrap();
    let o = outs();
    // Pages 0..40 of the buffer, and one page that is never mapped (the top of the lower half).
    let mut text = pages_text(base, 40);
    text.push_str(" L 7ffffffff000,8\n");
    match pm.lookup(base / 4096) {
        Lookup::Frame { .. } => {
            let r = run(&text, "llc = 0\nv2p = \"pagemap\"", Some(std::process::id()), &o).unwrap();
            let (v, p) = check_twins(&o);
            for (a, b) in v.iter().zip(&p).filter(|(a, _)| a.addr < 0x7fff_ffff_f000) {
                assert_eq!(Lookup::Frame { frame: b.addr / 4096, exclusive: true }, pm.lookup(a.addr / 4096));
            }
            // The unmapped page never showed up in pagemap: a synthetic frame above 2^52.
            assert_eq!(p.last().unwrap().addr, 1 << 52);
            assert_eq!((r.v2p, r.pages_mapped, r.pages_unresolved), ("pagemap", 41, 1));
            assert_eq!(TraceReader::open(&o.out).unwrap().header().v2p, V2p::Pagemap);
        }
        Lookup::Hidden => {
            // Without CAP_SYS_ADMIN: auto falls back to the buddy model and says why, an
            // explicit pagemap is an error.
            let r = run(&text, "llc = 0", Some(std::process::id()), &o).unwrap();
            assert_eq!(r.v2p, "buddy");
            assert!(r.v2p_note.contains("CAP_SYS_ADMIN"), "{}", r.v2p_note);
            let e =
                run(&text, "llc = 0\nv2p = \"pagemap\"", Some(std::process::id()), &outs()).unwrap_err().to_string();
            assert!(e.contains("CAP_SYS_ADMIN"), "{e}");
        }
        Lookup::Absent => panic!("a touched page of this process is not present"),
    }
    drop(buf);
}

#[test]
fn auto_without_a_process_uses_the_buddy_model_and_pagemap_is_an_error() {
    let o = outs();
    let r = run(&pages_text(0x10_0000, 4), "llc = 0\nphys_mem = \"64MiB\"", None, &o).unwrap();
    assert_eq!(r.v2p, "buddy");
    assert!(r.v2p_note.contains("no process id"), "{}", r.v2p_note);
    let e = run("", "v2p = \"pagemap\"", None, &outs()).unwrap_err().to_string();
    assert!(e.contains("cannot read pagemap: no process id was given"), "{e}");
    let e = run("", "v2p = \"pagemap\"\npage_size = 8192", Some(1), &outs()).unwrap_err().to_string();
    assert!(e.contains("`page_size`: pagemap maps 4 KiB pages"), "{e}");
}

#[test]
fn auto_falls_back_to_buddy_when_pagemap_never_shows_a_page() {
    // Pages this process never mapped: pagemap reads them as absent to the end.
    let o = outs();
    let r = run(&pages_text(0x10_0000_0000, 5), "llc = 0\nphys_mem = \"64MiB\"", Some(std::process::id()), &o).unwrap();
    assert_eq!((r.v2p, r.pages_unresolved, r.pages_mapped), ("buddy", 0, 5));
    assert!(r.v2p_note.contains("ended before its pagemap could be read"), "{}", r.v2p_note);
    assert_eq!(TraceReader::open(&o.out).unwrap().header().v2p, V2p::Buddy);
    // Asked for explicitly, pagemap keeps its word: synthetic frames, counted.
    let o = outs();
    let r = run(&pages_text(0x10_0000_0000, 5), "llc = 0\nv2p = \"pagemap\"", Some(std::process::id()), &o).unwrap();
    assert_eq!((r.v2p, r.pages_unresolved), ("pagemap", 5));
    assert!(read(&o.out).iter().all(|a| a.addr >= 1 << 52));
}

#[test]
fn malformed_input_names_the_line_and_leaves_nothing() {
    let o = outs();
    let e =
        run("==1== hi\nI  0040,2\n L 1000,8\n X 1000,8\n", "phys_mem = \"64MiB\"", None, &o).unwrap_err().to_string();
    assert_eq!(e, "<lackey>:4: unknown access kind 'X'; lackey writes I, L, S and M");
    assert!(!o.out.exists() && !o.virt.exists());
    assert!(std::fs::read_dir(o.out.parent().unwrap()).unwrap().next().is_none(), "no temporary files left");
    let e = run(&format!("I  0,1\n{}", "x".repeat(5000)), "v2p = \"none\"", None, &outs()).unwrap_err().to_string();
    assert!(e.contains("<lackey>:2: line longer than 4096 bytes"), "{e}");
    let e = run("", "llc = 1000", None, &outs()).unwrap_err().to_string();
    assert!(e.contains("`llc`: 1000 bytes is not a positive multiple"), "{e}");
    let e = run("", "lcc = 0", None, &outs()).unwrap_err().to_string();
    assert!(e.contains("`lcc`: unknown parameter; valid parameters: llc, llc_ways"), "{e}");
}

#[test]
fn lines_split_across_reads_and_the_closing_summary() {
    // A reader that returns 3 bytes at a time cuts every line.
    struct Trickle<'a>(&'a [u8]);
    impl std::io::Read for Trickle<'_> {
        fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
            let n = self.0.len().min(3).min(b.len());
            b[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }
    let text = std::fs::read_to_string(data("small.lackey")).unwrap()
        + "==4242== Executed:\n==4242==   guest instrs:  35\n==4242== Exit code:       0";
    let o = outs();
    let t = table("llc = 0\nv2p = \"none\"");
    let req = CaptureRequest { out: &o.out, virt_out: None, params: Some(&t), seed: 0, pid: None, pipe_capacity: None };
    let progress = Progress::default();
    let r = capture(&mut Trickle(text.as_bytes()), Path::new("<lackey>"), &req, &progress).unwrap();
    assert_eq!((r.instructions, r.guest_instrs_reported, r.records), (35, Some(35), 27));
    assert_eq!(r.valgrind_messages.last().unwrap(), "Exit code:       0");
    use std::sync::atomic::Ordering::Relaxed;
    assert_eq!(progress.records.load(Relaxed), 27);
    assert_eq!(progress.data_accesses.load(Relaxed), 24);
    assert_eq!(progress.input_bytes.load(Relaxed), text.len() as u64);
}

#[test]
fn a_cancelled_capture_stops_with_an_error() {
    let o = outs();
    let t = table("v2p = \"none\"");
    let req = CaptureRequest { out: &o.out, virt_out: None, params: Some(&t), seed: 0, pid: None, pipe_capacity: None };
    let progress = Progress::default();
    progress.cancel();
    let e = capture(&mut "I  0,1\n".as_bytes(), Path::new("x"), &req, &progress).unwrap_err();
    assert_eq!(e.to_string(), "capture interrupted");
    assert!(!o.out.exists());
}

#[test]
fn output_arguments_are_checked() {
    let o = outs();
    let t = table("");
    let bad = |virt: Option<&Path>, out: &Path, params: &toml::Table| {
        let req = CaptureRequest { out, virt_out: virt, params: Some(params), seed: 0, pid: None, pipe_capacity: None };
        capture(&mut "".as_bytes(), Path::new("x"), &req, &Progress::default()).unwrap_err().to_string()
    };
    assert!(bad(None, &o.out, &t).contains("virtual twin"));
    assert!(bad(Some(&o.out), &o.out, &t).contains("different paths"));
    assert!(bad(Some(&o.virt), &o.out, &table("v2p = \"none\"")).contains("only the virtual trace"));
}

#[test]
fn pagemap_follows_copy_on_write_of_the_zero_page() {
    use tiersim_trace::capture::v2p::{Lookup, Pagemap};
    // Untouched anonymous memory, read once: the kernel maps the shared zero page.
    let mut buf = vec![0u8; 8 << 20];
    let page = (buf.as_ptr() as u64).div_ceil(4096) * 4096 + (1 << 20);
    let idx = (page - buf.as_ptr() as u64) as usize;
    // SAFETY: `idx` is inside `buf`.
    let _ = unsafe { std::ptr::read_volatile(buf.as_ptr().add(idx)) };
    let mut pm = Pagemap::open(std::process::id()).unwrap();
    let Lookup::Frame { frame: zero, exclusive: false } = pm.lookup(page / 4096) else {
        // Frame numbers hidden (not root) or the page not shared: nothing to follow here.
        return;
    };
    // The lackey stream reads the page, then (after the program wrote it, which this reader
    // does between its two halves) writes and reads it again.
    struct WriteBetween<'a> {
        parts: [&'a [u8]; 2],
        next: usize,
        buf: &'a mut [u8],
        idx: usize,
    }
    impl std::io::Read for WriteBetween<'_> {
        fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
            if self.next == 1 {
                self.buf[self.idx] = 1;
            }
            let Some(part) = self.parts.get(self.next) else { return Ok(0) };
            self.next += 1;
            b[..part.len()].copy_from_slice(part);
            Ok(part.len())
        }
    }
    let first = format!("I  0,1\n L {page:x},8\n");
    let second = format!("I  0,1\n S {:x},8\n L {:x},8\n", page + 8, page + 16);
    let o = outs();
    let t = table("llc = 0\nv2p = \"pagemap\"");
    let req = CaptureRequest {
        out: &o.out,
        virt_out: Some(&o.virt),
        params: Some(&t),
        seed: 0,
        pid: Some(std::process::id()),
        pipe_capacity: None,
    };
    let mut input = WriteBetween { parts: [first.as_bytes(), second.as_bytes()], next: 0, buf: &mut buf, idx };
    let r = capture(&mut input, Path::new("<lackey>"), &req, &Progress::default()).unwrap();
    let Lookup::Frame { frame: own, exclusive: true } = pm.lookup(page / 4096) else {
        panic!("written page not exclusive")
    };
    assert_ne!(own, zero);
    let p: Vec<u64> = read(&o.out).iter().map(|a| a.addr).collect();
    assert_eq!(p, vec![zero * 4096, own * 4096 + 8, own * 4096 + 16]);
    assert_eq!(r.remaps, 1);
    drop(buf);
}

/// A two-thread log as `valgrind --tool=lackey --trace-mem=yes --trace-sched=yes` writes it.
const SCHED_LOG: &str = "\
==9== Lackey, an example Valgrind tool
I  0400,3
 S 1000,8
SCHEDSETJMP(line 1211) tid 1, jumped=1476724588
--9--   SCHED[1]:  acquired lock (thread_wrapper(starting new thread))
I  0400,3
 L 1040,8
--9--   SCHED[1]: releasing lock (VG_(client_syscall)[async]) -> VgTs_WaitSys
--9--   SCHED[2]:  acquired lock (thread_wrapper(starting new thread))
I  0500,3
I  0503,3
 L 2000,8
 S 2008,8
--9--   SCHED[2]: release lock in VG_(exit_thread)
--9--   SCHED[1]:  acquired lock (VG_(client_syscall)[async])
I  0403,3
 L 1000,8
--9--   SCHED[2]:  acquired lock (thread_wrapper(starting new thread))
I  0600,3
 M 3000,4
--9--   SCHED[1]:  acquired lock (VG_(vg_yield))
I  0406,3
I  0409,3
 L 1080,8
";

#[test]
fn scheduler_lines_give_each_access_its_thread_and_cpu() {
    // Unfiltered: every access is a record of the thread that ran it, at its own clock. Valgrind
    // id 2 is reused by the third thread after the second ended.
    let o = outs();
    let r = run(SCHED_LOG, "llc = 0\nv2p = \"none\"\ncpu_map = \"4,8-9\"", None, &o).unwrap();
    let got: Vec<(u64, u64, u32, Op)> = read(&o.out).iter().map(|a| (a.time, a.addr, a.cpu, a.op)).collect();
    assert_eq!(
        got,
        vec![
            (1, 0x1000, 4, Op::Write),
            (1, 0x1040, 4, Op::Read),
            (2, 0x2000, 8, Op::Read),
            (0, 0x2008, 8, Op::Write),
            (1, 0x1000, 4, Op::Read),
            (1, 0x3000, 9, Op::Read),
            (0, 0x3000, 9, Op::Write),
            (2, 0x1080, 4, Op::Read),
        ]
    );
    let threads: Vec<(u32, u32, u64, u64, u64)> =
        r.threads.iter().map(|t| (t.thread, t.cpu, t.instructions, t.accesses, t.records)).collect();
    assert_eq!(threads, vec![(0, 4, 5, 4, 4), (1, 8, 2, 2, 2), (2, 9, 1, 1, 2)]);
    assert!(r.valgrind_messages.iter().all(|m| !m.contains("SCHED")));
    // Threads past the map wrap around; an empty map puts thread i on CPU i.
    let r = run(SCHED_LOG, "llc = 0\nv2p = \"none\"\ncpu_map = \"3\"", None, &o).unwrap();
    assert!(r.threads.iter().all(|t| t.cpu == 3));
    let r = run(SCHED_LOG, "llc = 0\nv2p = \"none\"", None, &o).unwrap();
    assert_eq!(r.threads.iter().map(|t| t.cpu).collect::<Vec<_>>(), vec![0, 1, 2]);
    let e = run(SCHED_LOG, "cpu_map = \"2-1\"", None, &o).unwrap_err().to_string();
    assert!(e.contains("`cpu_map`") && e.contains("empty CPU range"), "{e}");
}

#[test]
fn threads_are_numbered_in_creation_order_when_a_later_one_starts_first() {
    // Valgrind ids 2 and 3 were created in that order; 3 starts first, then 2. After 2 ends, a
    // new thread reuses id 2: it is the fourth thread created.
    let log = "\
--1--   SCHED[1]:  acquired lock (thread_wrapper(starting new thread))
 L 1000,8
--1--   SCHED[3]:  acquired lock (thread_wrapper(starting new thread))
 L 3000,8
--1--   SCHED[2]:  acquired lock (thread_wrapper(starting new thread))
 L 2000,8
--1--   SCHED[2]: release lock in VG_(exit_thread)
--1--   SCHED[1]:  acquired lock (VG_(client_syscall)[async])
 L 1008,8
--1--   SCHED[2]:  acquired lock (thread_wrapper(starting new thread))
 L 4000,8
";
    let o = outs();
    let r = run(log, "llc = 0\nv2p = \"none\"\ncpu_map = \"10,11,12,13\"", None, &o).unwrap();
    let got: Vec<(u64, u32)> = read(&o.out).iter().map(|a| (a.addr, a.cpu)).collect();
    assert_eq!(got, vec![(0x1000, 10), (0x3000, 12), (0x2000, 11), (0x1008, 10), (0x4000, 13)]);
    assert_eq!(r.threads.len(), 4);
}

#[test]
fn announced_numbers_survive_a_thread_ending_between_creation_and_start() {
    // Main (id 1) creates thread 1 (id 2), which starts; then thread 2 (id 3); thread 1 ends,
    // freeing id 2, and main creates thread 3, which takes id 2. Thread 2 (id 3) starts first.
    // The start-order rule takes the free id 2 below it for a thread created earlier and swaps
    // threads 2 and 3; the preload shim's announcements (client messages) say which is which,
    // and accesses a thread makes before its announcement wait for it.
    let body = "\
--1--   SCHED[1]:  acquired lock (thread_wrapper(starting new thread))
 L 1000,8
**1** tiersim-thread 0
--1--   SCHED[2]:  acquired lock (thread_wrapper(starting new thread))
 S 2ff8,8
**1** tiersim-thread 1
 L 2000,8
--1--   SCHED[1]:  acquired lock (VG_(vg_yield))
 L 1008,8
--1--   SCHED[2]:  acquired lock (VG_(vg_yield))
--1--   SCHED[2]: release lock in VG_(exit_thread)
--1--   SCHED[1]:  acquired lock (VG_(client_syscall)[async])
 L 1010,8
--1--   SCHED[3]:  acquired lock (thread_wrapper(starting new thread))
I  0500,3
 S 3ff8,8
--1--   SCHED[1]:  acquired lock (VG_(vg_yield))
 L 1018,8
--1--   SCHED[3]:  acquired lock (VG_(vg_yield))
**1** tiersim-thread 2
 L 3000,8
--1--   SCHED[2]:  acquired lock (thread_wrapper(starting new thread))
 S 4ff8,8
**1** tiersim-thread 3
 L 4000,8
";
    let o = outs();
    let params = "llc = 0\nv2p = \"none\"\ncpu_map = \"10,11,12,13\"";
    let r = run(body, params, None, &o).unwrap();
    let got: Vec<(u64, u32)> = read(&o.out).iter().map(|a| (a.addr, a.cpu)).collect();
    assert_eq!(
        got,
        vec![
            (0x1000, 10),
            (0x2ff8, 11),
            (0x2000, 11),
            (0x1008, 10),
            (0x1010, 10),
            (0x1018, 10),
            (0x3ff8, 12),
            (0x3000, 12),
            (0x4ff8, 13),
            (0x4000, 13)
        ]
    );
    assert_eq!(r.thread_numbering, "announced");
    // Thread 2's instruction before its announcement is its own.
    let instrs: Vec<u64> = r.threads.iter().map(|t| t.instructions).collect();
    assert_eq!(instrs, vec![0, 0, 1, 0]);
    // Without the announcements (a static program: no shim) the start-order rule swaps 2 and 3.
    let bare: String = body.lines().filter(|l| !l.starts_with("**")).map(|l| format!("{l}\n")).collect();
    let r = run(&bare, params, None, &o).unwrap();
    assert_eq!(r.thread_numbering, "start_order");
    let cpu_of = |addr: u64| read(&o.out).iter().find(|a| a.addr == addr).unwrap().cpu;
    assert_eq!((cpu_of(0x3000), cpu_of(0x4000)), (13, 12));
}

#[test]
fn a_thread_that_never_announces_itself_gets_the_next_number() {
    // With the shim on, a thread not created through its pthread_create (a raw clone) holds its
    // accesses until it ends, then takes the next free number.
    let body = "\
--1--   SCHED[1]:  acquired lock (thread_wrapper(starting new thread))
**1** tiersim-thread 0
--1--   SCHED[2]:  acquired lock (thread_wrapper(starting new thread))
 L 2000,8
--1--   SCHED[1]:  acquired lock (VG_(vg_yield))
 L 1000,8
--1--   SCHED[2]:  acquired lock (VG_(vg_yield))
 L 2008,8
--1--   SCHED[2]: release lock in VG_(exit_thread)
--1--   SCHED[3]:  acquired lock (thread_wrapper(starting new thread))
 L 3000,8
";
    let o = outs();
    let r = run(body, "llc = 0\nv2p = \"none\"", None, &o).unwrap();
    let got: Vec<(u64, u32)> = read(&o.out).iter().map(|a| (a.addr, a.cpu)).collect();
    // Id 3 never announces and is still waiting at the end of input: numbered then.
    assert_eq!(got, vec![(0x1000, 0), (0x2000, 1), (0x2008, 1), (0x3000, 2)]);
    assert_eq!(r.threads.len(), 3);
}

#[test]
fn llc_scope_shared_or_per_cpu() {
    // Thread 0 reads line 0x1000 twice around thread 1's read of it. Shared: one fill. Per CPU:
    // each CPU's cache fills it once. Two threads on one CPU share that CPU's cache.
    let log = "\
--1--   SCHED[1]:  acquired lock (thread_wrapper(starting new thread))
 L 1000,8
--1--   SCHED[2]:  acquired lock (thread_wrapper(starting new thread))
 L 1008,8
--1--   SCHED[1]:  acquired lock (VG_(vg_yield))
 L 1010,8
";
    let o = outs();
    let fills = |params: &str| {
        let r = run(log, &format!("v2p = \"none\"\n{params}"), None, &o).unwrap();
        let llc = r.llc.unwrap();
        (llc.misses, llc.hits, llc.caches, read(&o.out).iter().map(|a| a.cpu).collect::<Vec<_>>())
    };
    assert_eq!(fills("llc_scope = \"shared\""), (1, 2, 1, vec![0]));
    assert_eq!(fills("llc_scope = \"per_cpu\""), (2, 1, 2, vec![0, 1]));
    assert_eq!(fills("llc_scope = \"per_cpu\"\ncpu_map = \"5\""), (1, 2, 1, vec![5]));
}

/// A runtime record file's bytes: (stamp, addr, gap, size, op) each.
fn rt_records(recs: &[(u64, u64, u32, u16, u8)]) -> Vec<u8> {
    let mut b = Vec::new();
    for &(stamp, addr, gap, size, op) in recs {
        b.extend(stamp.to_le_bytes());
        b.extend(addr.to_le_bytes());
        b.extend(gap.to_le_bytes());
        b.extend(size.to_le_bytes());
        b.extend([op, 0]);
    }
    b
}

/// The runtime's pagemap.bin: (virtual page, /proc/PID/pagemap entry) pairs, as it records them.
fn pagemap_bin(entries: &[(u64, u64)]) -> Vec<u8> {
    entries.iter().flat_map(|&(v, e)| v.to_le_bytes().into_iter().chain(e.to_le_bytes())).collect()
}

fn run_instrumented(dir: &Path, params: &str, o: &Out) -> tiersim_core::Result<CaptureReport> {
    let t = table(params);
    let physical = !params.contains("\"none\"");
    let req = CaptureRequest {
        out: &o.out,
        virt_out: physical.then_some(o.virt.as_path()),
        params: Some(&t),
        seed: 1,
        pid: None,
        pipe_capacity: None,
    };
    tiersim_trace::capture::instrumented::capture_instrumented(dir, &req, &Progress::default())
}

#[test]
fn instrumented_threads_merge_by_stamp_with_their_cpus_and_gaps() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    std::fs::write(
        dir.join("summary"),
        "version 1\ncaches 1\ndirty_at_exit 1\npagemap ok\n\
         thread 1 cpu 16 loads 5 stores 0 bytes 40 hits 3 misses 2 writebacks 0 records 2\n\
         thread 0 cpu 0 loads 3 stores 2 bytes 40 hits 3 misses 2 writebacks 1 records 3\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("t0.bin"),
        rt_records(&[(10, 0x10000, 1, 64, 0), (30, 0x20040, 3, 64, 0), (30, 0x10000, 0, 64, 1)]),
    )
    .unwrap();
    std::fs::write(dir.join("t1.bin"), rt_records(&[(20, 0x30000, 3, 64, 0), (40, 0x30040, 2, 64, 0)])).unwrap();
    // Pages 0x10 and 0x30 have frames (the last entry of 0x10 wins: the zero page first, then
    // its own frame); page 0x20 never showed one.
    let pm =
        pagemap_bin(&[(0x10, (1 << 63) | 7), (0x30, (1 << 63) | (1 << 56) | 9), (0x10, (1 << 63) | (1 << 56) | 5)]);
    std::fs::write(dir.join("pagemap.bin"), pm).unwrap();
    let o = outs();
    // 1.5 instructions per access: gaps 1, 3, 0 -> 1 (carry .5), 5 (4.5+.5), 0; 3, 2 -> 4 (carry .5), 3.
    let r = run_instrumented(dir, "llc = \"1MiB\"\ninstructions_per_access = 1.5", &o).unwrap();
    let got: Vec<(u64, u64, u32, Op)> = read(&o.virt).iter().map(|a| (a.time, a.addr, a.cpu, a.op)).collect();
    assert_eq!(
        got,
        vec![
            (1, 0x10000, 0, Op::Read),
            (4, 0x30000, 16, Op::Read),
            (5, 0x20040, 0, Op::Read),
            (0, 0x10000, 0, Op::Write),
            (3, 0x30040, 16, Op::Read),
        ]
    );
    let phys: Vec<u64> = read(&o.out).iter().map(|a| a.addr).collect();
    assert_eq!(phys, vec![0x5000, 0x9000, (1u64 << 40) << 12 | 0x40, 0x5000, 0x9040]);
    assert_eq!((r.v2p, r.pages_unresolved, r.path), ("pagemap", 1, "instrumented"));
    let llc = r.llc.unwrap();
    assert_eq!((llc.hits, llc.misses, llc.writebacks, llc.dirty_at_exit, llc.caches), (6, 4, 1, 1, 1));
    assert_eq!((r.loads, r.stores, r.instructions), (8, 2, 16));
    let th: Vec<(u32, u32, u64, u64, u64)> =
        r.threads.iter().map(|t| (t.thread, t.cpu, t.instructions, t.accesses, t.records)).collect();
    assert_eq!(th, vec![(0, 0, 8, 5, 3), (1, 16, 8, 5, 2)]);
    // Without readable frames the buddy model gives them, and says why.
    let s = std::fs::read_to_string(dir.join("summary")).unwrap().replace("pagemap ok", "pagemap hidden");
    std::fs::write(dir.join("summary"), s).unwrap();
    let r = run_instrumented(dir, "llc = \"1MiB\"", &o).unwrap();
    assert_eq!(r.v2p, "buddy");
    assert!(r.v2p_note.contains("CAP_SYS_ADMIN"), "{}", r.v2p_note);
}

/// The physical trace's statistics are counted by the translator, not by its writer: its
/// footprint is still the distinct pages of its records (two pages on one shared frame count
/// once, a record across a page boundary counts the next frame too), and `verify`, which
/// recounts them from the records, agrees with the header.
#[test]
fn physical_footprint_counts_shared_frames_once_and_pages_a_record_crosses() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    std::fs::write(
        dir.join("summary"),
        "version 1\ncaches 1\ndirty_at_exit 0\npagemap ok\n\
         thread 0 cpu 0 loads 4 stores 0 bytes 0 hits 0 misses 4 writebacks 0 records 4\n",
    )
    .unwrap();
    // Pages 0x10 and 0x11 read as one shared frame (the zero page), 0x12 has its own; the last
    // record starts 32 bytes before the end of page 0x12.
    std::fs::write(
        dir.join("t0.bin"),
        rt_records(&[(1, 0x10000, 1, 64, 0), (2, 0x11000, 1, 64, 0), (3, 0x12000, 1, 64, 0), (4, 0x12fe0, 1, 64, 0)]),
    )
    .unwrap();
    let pm = pagemap_bin(&[(0x10, (1 << 63) | 7), (0x11, (1 << 63) | 7), (0x12, (1 << 63) | (1 << 56) | 40)]);
    std::fs::write(dir.join("pagemap.bin"), pm).unwrap();
    let o = outs();
    run_instrumented(dir, "llc = \"1MiB\"", &o).unwrap();
    let phys: Vec<u64> = read(&o.out).iter().map(|a| a.addr).collect();
    assert_eq!(phys, vec![0x7000, 0x7000, 0x28000, 0x28fe0]);
    let footprint = |p: &Path| tiersim_trace::format::verify(p).unwrap()["footprint_pages"].as_u64();
    // Frames 7, 40 and 41 (the crossing record's second page); virtual pages 0x10, 0x11, 0x12, 0x13.
    assert_eq!(footprint(&o.out), Some(3));
    assert_eq!(footprint(&o.virt), Some(4));
    let h = TraceReader::open(&o.out).unwrap().header().stats.clone().unwrap();
    let v = TraceReader::open(&o.virt).unwrap().header().stats.clone().unwrap();
    assert_eq!(
        (h.accesses, h.reads, h.bytes, h.time_last, h.per_cpu),
        (v.accesses, v.reads, v.bytes, v.time_last, v.per_cpu)
    );
}

#[test]
fn instrumented_bad_files_are_clear_errors() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let o = outs();
    let e = run_instrumented(dir, "v2p = \"none\"", &o).unwrap_err().to_string();
    assert!(e.contains("summary is missing"), "{e}");
    std::fs::write(dir.join("summary"), "version 1\nthread 0 cpu 0 loads x\n").unwrap();
    let e = run_instrumented(dir, "v2p = \"none\"", &o).unwrap_err().to_string();
    assert!(e.contains("summary:2") && e.contains("not a tiersim runtime summary"), "{e}");
    std::fs::write(
        dir.join("summary"),
        "version 1\ncaches 0\ndirty_at_exit 0\npagemap off\nthread 0 cpu 0 loads 1 stores 0 bytes 8 hits 0 misses 0 writebacks 0 records 2\n",
    )
    .unwrap();
    let mut b = rt_records(&[(1, 0x1000, 1, 8, 0), (2, 0x1000, 1, 8, 0)]);
    b[24 + 22] = 7;
    std::fs::write(dir.join("t0.bin"), &b).unwrap();
    let e = run_instrumented(dir, "v2p = \"none\"\nllc = 0", &o).unwrap_err().to_string();
    assert!(e.contains("t0.bin: offset 46: op 7"), "{e}");
    std::fs::write(dir.join("t0.bin"), &b[..30]).unwrap();
    let e = run_instrumented(dir, "v2p = \"none\"\nllc = 0", &o).unwrap_err().to_string();
    assert!(e.contains("t0.bin: offset 24: a record cut short (6 of 24 bytes)"), "{e}");
    assert!(!o.out.exists());
}
