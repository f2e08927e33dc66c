//! The page cache of the OS model: read/write system calls (`Access::SYSCALL`) on the LRU lists
//! shared with anonymous memory, readahead, dirty pages and their writeback, DAX. Every run
//! checks the OS model's invariants after each access (including that the flusher knows every
//! dirty file page).

use tiersim_core::{Access, Op, Result};
use tiersim_engine::platform;
use tiersim_engine::sim::{simulate, SimOptions, SimResult};
use tiersim_trace::format::TraceMeta;
use tiersim_trace::gen::{Generator, GeneratorSource};
use tiersim_trace::{AddrKind, TimeUnit};

/// A hand-built trace as a generator.
struct Replay(std::vec::IntoIter<Access>);

impl Generator for Replay {
    fn meta(&self) -> TraceMeta {
        TraceMeta { time_unit: TimeUnit::Instructions, addr_kind: AddrKind::Virtual, page_size: 4096 }
    }
    fn next_access(&mut self) -> Option<Access> {
        self.0.next()
    }
}

const PAGE: u64 = 4096;
/// Files live at 1 GiB (a 2 MiB-aligned region of their own), anonymous memory at 0.
const FILE_BASE: u64 = 1 << 30;

fn call(op: Op, page: u64, bytes: u16) -> Access {
    Access { time: 10, addr: FILE_BASE + page * PAGE, cpu: 0, size: bytes, op, flags: Access::FILE | Access::SYSCALL }
}

fn anon(op: Op, page: u64) -> Access {
    Access { time: 10, addr: page * PAGE, cpu: 0, size: 64, op, flags: 0 }
}

fn mapped(op: Op, page: u64) -> Access {
    Access { time: 10, addr: FILE_BASE + page * PAGE, cpu: 0, size: 64, op, flags: Access::FILE }
}

/// One DRAM node of `capacity`, an NVMe SSD as swap and as the files' block device, plus `extra`.
fn platform(capacity: &str, extra: &str) -> platform::Platform {
    platform_with(capacity, extra, &[])
}

/// `platform` with `key=value` overrides.
fn platform_with(capacity: &str, extra: &str, overrides: &[&str]) -> platform::Platform {
    try_platform(capacity, extra, overrides).unwrap()
}

/// `platform_with`, its error kept.
fn try_platform(capacity: &str, extra: &str, overrides: &[&str]) -> Result<platform::Platform> {
    let text = format!(
        r#"name = "t"
[host]
cpus = 1
frequency = "1GHz"
[os]
min_free = "4KiB"
[[nodes]]
name = "dram0"
capacity = "{capacity}"
cpus = "0"
preset = "ddr4_3200"
[swap]
preset = "nvme_ssd"
capacity = "16MiB"
{extra}
"#
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.toml");
    std::fs::write(&path, text).unwrap();
    platform::load(path.to_str().unwrap(), &overrides.iter().map(|o| o.to_string()).collect::<Vec<_>>())
}

fn run(p: &platform::Platform, trace: Vec<Access>) -> Result<SimResult> {
    let (policy, _) = tiersim_policies::build("linux_default", None, &tiersim_engine::sim::topology(p))?;
    let mut src = GeneratorSource::new(Box::new(Replay(trace.into_iter())));
    simulate(p, policy, &mut src, SimOptions { check_every: 1 })
}

fn u(v: &serde_json::Value, path: &[&str]) -> u64 {
    let mut v = v;
    for k in path {
        v = &v[*k];
    }
    v.as_u64().unwrap_or_else(|| panic!("{path:?} = {v}"))
}

fn lru(s: &serde_json::Value, list: &str) -> u64 {
    s["nodes"].as_array().unwrap().iter().map(|n| u(n, &["lru_pages", list])).sum()
}

#[test]
fn sequential_reads_hit_after_readahead() {
    // 64 one-page reads in order, read_ahead_kb = 128 (32 pages). The first misses: the initial
    // window is 4 pages (get_init_ra_size(1, 32)), 3 of them async with PG_readahead on page 1.
    // Each marker hit starts the next window: [4,12), [12,28), [28,60), [60,92), [92,124).
    let p = platform("4MiB", "");
    let r = run(&p, (0..64).map(|i| call(Op::Read, i, 4096)).collect()).unwrap();
    let s = &r.summary["page_cache"];
    assert_eq!((u(s, &["misses"]), u(s, &["hits"])), (1, 63), "{s}");
    assert_eq!(u(s, &["readahead_pages"]), 3 + 8 + 16 + 32 + 32 + 32);
    assert_eq!(u(s, &["read_requests"]), 6);
    assert_eq!(u(s, &["bytes_read"]), 64 * 4096);
    assert_eq!(u(&r.summary, &["swap", "device", "bytes_read"]), 124 * 4096);
    // Read once, the pages are inactive with PG_referenced; a second pass activates them.
    assert_eq!((lru(&r.summary, "inactive_file"), lru(&r.summary, "active_file")), (124, 0));
    let twice: Vec<_> = (0..2).flat_map(|_| (0..64).map(|i| call(Op::Read, i, 4096))).collect();
    let r = run(&p, twice).unwrap();
    assert_eq!((lru(&r.summary, "inactive_file"), lru(&r.summary, "active_file")), (60, 64));
    // Random reads (no page follows the last) read only what they ask for.
    let scattered: Vec<_> = (0..64).map(|i| call(Op::Read, (i * 37) % 512 + 1, 4096)).collect();
    let r = run(&p, scattered).unwrap();
    let s = &r.summary["page_cache"];
    // The first read starts a stream (4 pages); the rest are random.
    assert_eq!((u(s, &["misses"]), u(s, &["readahead_pages"])), (64, 3), "{s}");
}

#[test]
fn a_hit_costs_the_layers_a_miss_waits_for_the_device() {
    let p = platform("4MiB", "");
    let t = |trace: Vec<Access>| u(&run(&p, trace).unwrap().summary, &["page_cache", "io_time_ns"]);
    let first = t(vec![call(Op::Read, 0, 4096)]);
    // Page 2 was read ahead (and is past the PG_readahead page 1, so it starts no window):
    // system call 100 + VFS 300 + lookup 50 ns and a 4 KiB DRAM copy.
    let hit = t(vec![call(Op::Read, 0, 4096), call(Op::Read, 2, 4096)]) - first;
    // Page 100 was not: fs_map 400, block layer 1000, driver 500, the NVMe read, the
    // interrupt 3000 and the page allocation 250 come on top.
    let miss = t(vec![call(Op::Read, 0, 4096), call(Op::Read, 100, 4096)]) - first;
    assert!((450..1500).contains(&hit), "hit {hit} ns");
    assert!(miss > hit + 400 + 1000 + 500 + 3000 + 250 + 5000, "miss {miss} ns, hit {hit} ns");
}

#[test]
fn file_pages_and_anon_pages_share_reclaim_and_are_conserved() {
    // 256 KiB = 64 frames. Read a 48-page file twice (its pages go active), then write 80 anon
    // pages: reclaim drops file pages and swaps anon ones; then read the file again, pushing
    // anon out.
    let p = platform("256KiB", "");
    let mut trace: Vec<Access> = (0..2).flat_map(|_| (0..48).map(|i| call(Op::Read, i, 4096))).collect();
    trace.extend((0..80).map(|i| anon(Op::Write, i)));
    trace.extend((0..48).map(|i| call(Op::Read, i, 4096)));
    let r = run(&p, trace).unwrap();
    let s = &r.summary;
    let pc = &s["page_cache"];
    let allocated = u(pc, &["misses"]) + u(pc, &["readahead_pages"]);
    let drops = u(s, &["swap", "file_drops"]);
    assert!(drops > 0 && u(s, &["swap", "swap_outs"]) > 0, "{s}");
    // Every file page brought in is resident or was dropped; every anon page is resident or in
    // swap (nothing came back from swap).
    assert_eq!(allocated, lru(s, "inactive_file") + lru(s, "active_file") + drops, "{pc}");
    assert_eq!(80, lru(s, "inactive_anon") + lru(s, "active_anon") + u(s, &["swap", "final_pages"]), "{s}");
    // The third pass found some of the file gone: it was evicted under anon pressure.
    assert!(u(pc, &["misses"]) > 1, "{pc}");
}

#[test]
fn writeback_bytes_are_conserved() {
    // 200 whole-page writes to distinct pages on 1 MiB (256 frames, all dirtyable): background
    // threshold 10 % = 25 pages, limit 20 % = 51, freerun ceiling 38. The limits are checked
    // every 32 dirtied pages: at 32 the flusher writes 7 (down to 25); at each later check
    // 57 are dirty, 32 are written and the writer waits for them.
    let p = platform("1MiB", "");
    let r = run(&p, (0..200).map(|i| call(Op::Write, i, 4096)).collect()).unwrap();
    let pc = &r.summary["page_cache"];
    assert_eq!(u(pc, &["dirtied_pages"]), 200);
    assert_eq!(u(pc, &["writeback_pages_flusher"]), 7 + 5 * 32, "{pc}");
    assert_eq!(u(pc, &["dirty_pages"]), 200 - 167);
    assert_eq!(u(pc, &["misses"]), 200);
    assert_eq!(u(pc, &["readahead_pages"]), 0, "whole-page writes read nothing");
    assert!(u(pc, &["throttle_time_ns"]) > 0);
    // With memory pressure and rewrites, every dirtied page is written once by the flusher or
    // by reclaim, or is still dirty; the device wrote exactly those pages and the swap-outs.
    let mut trace = Vec::new();
    for round in 0..3u64 {
        trace.extend((0..120).map(|i| call(Op::Write, (i * 7 + round) % 150, 2048)));
        trace.extend((0..40).map(|i| anon(Op::Write, i + 40 * round)));
        trace.extend((0..20).map(|i| mapped(Op::Write, 200 + i)));
    }
    let p = platform("256KiB", "");
    let r = run(&p, trace).unwrap();
    let s = &r.summary;
    let pc = &s["page_cache"];
    let written = u(pc, &["writeback_pages_flusher"]) + u(pc, &["writeback_pages_reclaim"]);
    assert!(u(pc, &["writeback_pages_reclaim"]) > 0 && u(pc, &["writeback_pages_flusher"]) > 0, "{pc}");
    assert_eq!(u(pc, &["dirtied_pages"]), written + u(pc, &["dirty_pages"]), "{pc}");
    assert_eq!(u(pc, &["writeback_bytes"]), written * 4096);
    assert_eq!(u(pc, &["writeback_pages_reclaim"]), u(s, &["swap", "file_writebacks"]));
    assert_eq!(u(s, &["swap", "device", "bytes_written"]), (written + u(s, &["swap", "swap_outs"])) * 4096, "{s}");
    // Partial-page writes to pages not cached read them first.
    assert!(u(pc, &["read_requests"]) > 0);
}

#[test]
fn a_writer_outrunning_the_device_is_held_to_its_write_rate() {
    // 4000 whole-page writes (16 MB) into 4 MiB of memory: past the freerun ceiling the writer
    // waits for pages under writeback, so it writes at the device's rate (the ~1 MiB of dirty
    // and in-flight pages it may keep is a few percent of the volume).
    let gbs = |bw: &str| {
        let p = platform("4MiB", &format!("params = {{ write_bandwidth = \"{bw}\" }}"));
        let r = run(&p, (0..4000).map(|i| call(Op::Write, i, 4096)).collect()).unwrap();
        let pc = &r.summary["page_cache"];
        assert!(u(pc, &["throttle_time_ns"]) > 0, "{pc}");
        u(pc, &["bytes_written"]) as f64 / u(pc, &["io_time_ns"]) as f64
    };
    for (bw, want) in [("0.25GB/s", 0.25), ("0.5GB/s", 0.5)] {
        let got = gbs(bw);
        assert!(got > want * 0.95 && got < want * 1.15, "{bw}: {got:.3} GB/s");
    }
}

#[test]
fn dax_never_touches_the_page_cache() {
    let p = platform("1MiB", "[dax]\nmode = \"fsdax\"\npreset = \"optane_100\"");
    let mut trace: Vec<Access> =
        (0..100).map(|i| call(if i % 3 == 0 { Op::Write } else { Op::Read }, i, 4096)).collect();
    // Loads and stores to a mapping spanning three 2 MiB regions: one PMD fault each.
    trace.extend((0..60).map(|i| mapped(if i % 2 == 0 { Op::Write } else { Op::Read }, i * 20)));
    trace.extend((0..10).map(|i| anon(Op::Write, i)));
    let r = run(&p, trace).unwrap();
    let s = &r.summary;
    let pc = &s["page_cache"];
    assert_eq!(
        (u(pc, &["hits"]), u(pc, &["misses"]), u(pc, &["readahead_pages"]), u(pc, &["dirtied_pages"])),
        (0, 0, 0, 0),
        "{pc}"
    );
    assert_eq!((u(pc, &["read_calls"]), u(pc, &["write_calls"])), (0, 0));
    assert_eq!(lru(s, "inactive_file") + lru(s, "active_file"), 0);
    assert_eq!(lru(s, "inactive_anon") + lru(s, "active_anon"), 10);
    let dax = &pc["dax"];
    assert_eq!((u(dax, &["calls"]), u(dax, &["faults"]), u(dax, &["accesses"])), (100, 3, 60), "{dax}");
    assert_eq!(u(dax, &["bytes"]), 100 * 4096 + 60 * 64);
    // A call is the system call, VFS and the extent lookup (800 ns) plus the PMEM copy.
    let mean_call = pc["mean_call_ns"].as_f64().unwrap();
    assert!(mean_call > 800.0 && mean_call < 5_000.0, "{mean_call}");
    assert_eq!(u(s, &["swap", "device", "bytes_read"]) + u(s, &["swap", "device", "bytes_written"]), 0);
    // An address at the top of the address space is no problem for the device.
    assert!(run(&p, vec![Access { addr: u64::MAX - 100, ..call(Op::Read, 0, 4096) }, mapped(Op::Write, 0)]).is_ok());
    // devdax has no file system to call into.
    let p = platform("1MiB", "[dax]\nmode = \"devdax\"\npreset = \"optane_100\"");
    let e = run(&p, vec![call(Op::Read, 0, 4096)]).err().unwrap().to_string();
    assert!(e.contains("access #0") && e.contains("devdax") && e.contains("fsdax"), "{e}");
}

#[test]
fn bad_file_accesses_are_clear_errors() {
    // A call on a page the trace used as anonymous memory.
    let p = platform("1MiB", "");
    let e = run(&p, vec![anon(Op::Write, 3), Access { addr: 3 * PAGE, ..call(Op::Read, 0, 100) }])
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("access #1") && e.contains("anonymous"), "{e}");
    // A call running off the end of the address space.
    let e = run(&p, vec![Access { addr: u64::MAX - 100, ..call(Op::Read, 0, 4096) }]).err().unwrap().to_string();
    assert!(e.contains("access #0") && e.contains("end of the address space"), "{e}");
    // No block device for the files.
    let (_dir, path) = platform_file("");
    let p = platform::load(path.to_str().unwrap(), &[]).unwrap();
    let e = run(&p, vec![call(Op::Read, 0, 4096)]).err().unwrap().to_string();
    assert!(e.contains("access #0") && e.contains("[swap]") && e.contains("[dax]"), "{e}");
    // An unknown DAX mode.
    let (_dir, path) = platform_file("[dax]\nmode = \"pmem\"\npreset = \"optane_100\"\n");
    let e = platform::load(path.to_str().unwrap(), &[]).err().unwrap().to_string();
    assert!(e.contains("dax.mode") && e.contains("fsdax"), "{e}");
}

fn platform_file(extra: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.toml");
    let nodes = "[[nodes]]\nname = \"dram0\"\ncapacity = \"1MiB\"\ncpus = \"0\"\npreset = \"ddr4_3200\"\n";
    std::fs::write(&path, format!("name = \"t\"\n[host]\ncpus = 1\n{nodes}{extra}")).unwrap();
    (dir, path)
}

#[test]
fn runs_without_file_calls_have_no_page_cache_section() {
    let p = platform("1MiB", "");
    let r = run(&p, (0..100).map(|i| anon(Op::Write, i)).collect()).unwrap();
    assert!(r.summary.get("page_cache").is_none());
}

fn direct(op: Op, page: u64, bytes: u16) -> Access {
    Access { flags: Access::FILE | Access::SYSCALL | Access::DIRECT, ..call(op, page, bytes) }
}

/// A fresh device named `device` with `params` (a platform's `[swap]` or `[dax]` one) given
/// `reqs` (gap, bytes, address, op) in order, each `gap` ns after the previous ended (the first
/// `gap` after `t0`); each request's end.
fn device_ends(
    device: &str,
    params: &tiersim_core::Params,
    reqs: impl IntoIterator<Item = (u64, u32, u64, Op)>,
    t0: u64,
) -> Vec<u64> {
    let mut dev = (tiersim_devices::find(device).unwrap().build)(params).unwrap();
    let mut at = t0;
    let mut ends = Vec::new();
    for (gap, size, addr, op) in reqs {
        at = dev.access(&tiersim_devices::DeviceRequest {
            now: at + gap,
            addr,
            size,
            op,
            socket: 0,
            cpu: 0,
            remote: false,
        });
        ends.push(at);
    }
    ends
}

/// The time the platform's file device takes, idle, for one request.
fn device_ns(p: &platform::Platform, op: Op, bytes: u32) -> u64 {
    let s = p.swap.as_ref().unwrap();
    device_ends(&s.device, &s.params, [(0, bytes, 0, op)], 1_000_000)[0] - 1_000_000
}

#[test]
fn o_direct_calls_go_to_the_device_and_leave_the_page_cache_alone() {
    let p = platform("4MiB", "");
    // One 4 KiB direct read: system call 100 + VFS 300, then fs_map 400 + block layer 1000 +
    // driver 500 before the NVMe read, and the interrupt completion 3000 after it; no page
    // allocation, no lookup, no copy.
    for op in [Op::Read, Op::Write] {
        let r = run(&p, vec![direct(op, 0, 4096)]).unwrap();
        let s = &r.summary;
        let pc = &s["page_cache"];
        let dev = device_ns(&p, op, 4096);
        assert!(dev > 1000, "{dev}");
        assert_eq!(u(pc, &["io_time_ns"]), 100 + 300 + 400 + 1000 + 500 + dev + 3000, "{op:?} {pc}");
        let d = &pc["direct"];
        let calls = if op == Op::Read { (1, 0) } else { (0, 1) };
        assert_eq!((u(d, &["read_calls"]), u(d, &["write_calls"]), u(d, &["requests"])), (calls.0, calls.1, 1), "{d}");
        assert_eq!(
            (u(pc, &["hits"]), u(pc, &["misses"]), u(pc, &["readahead_pages"]), u(pc, &["dirtied_pages"])),
            (0, 0, 0, 0),
            "{pc}"
        );
        assert_eq!(lru(s, "inactive_file") + lru(s, "active_file"), 0);
        let moved = if op == Op::Read { "bytes_read" } else { "bytes_written" };
        assert_eq!(u(s, &["swap", "device", moved]), 4096);
    }
    // 15 pages in one call, max_request 16 KiB: four requests (4 + 4 + 4 + 3 pages).
    let small = platform("4MiB", "[storage]\nmax_request = \"16KiB\"");
    let r = run(&small, vec![direct(Op::Read, 0, 15 * 4096)]).unwrap();
    assert_eq!(u(&r.summary["page_cache"]["direct"], &["requests"]), 4);
    assert_eq!(u(&r.summary, &["swap", "device", "bytes_read"]), 15 * 4096);

    // A buffered read caches pages 0..4 (the first window); a buffered write dirties page 1, the
    // PG_readahead page, which reads the next window, pages 4..12. A
    // direct read of pages 0..2 writes page 1 back first and leaves both cached; a direct write
    // of them drops them, so the next buffered read of page 0 misses.
    let warm = vec![call(Op::Read, 0, 4096), call(Op::Write, 1, 4096)];
    let r = run(&p, warm.clone()).unwrap();
    assert_eq!(lru(&r.summary, "inactive_file"), 12);
    let mut t = warm.clone();
    t.push(direct(Op::Read, 0, 8192));
    let r = run(&p, t).unwrap();
    let pc = &r.summary["page_cache"];
    assert_eq!(
        (u(pc, &["direct", "flushed_pages"]), u(pc, &["direct", "invalidated_pages"]), u(pc, &["dirty_pages"])),
        (1, 0, 0),
        "{pc}"
    );
    assert_eq!((u(pc, &["writeback_pages_direct"]), u(pc, &["writeback_bytes"])), (1, 4096));
    assert_eq!(lru(&r.summary, "inactive_file") + lru(&r.summary, "active_file"), 12);
    assert_eq!(u(&r.summary, &["swap", "device", "bytes_written"]), 4096);
    let mut t = warm;
    t.extend([direct(Op::Write, 0, 8192), call(Op::Read, 0, 4096)]);
    let r = run(&p, t).unwrap();
    let pc = &r.summary["page_cache"];
    assert_eq!((u(pc, &["direct", "flushed_pages"]), u(pc, &["direct", "invalidated_pages"])), (1, 2), "{pc}");
    assert_eq!(
        u(pc, &["dirtied_pages"]),
        u(pc, &["writeback_pages_flusher"])
            + u(pc, &["writeback_pages_reclaim"])
            + u(pc, &["writeback_pages_direct"])
            + u(pc, &["dirty_pages"])
    );
    // The first read missed page 0, the write hit page 1, the last read misses page 0 again.
    assert_eq!((u(pc, &["misses"]), u(pc, &["hits"])), (2, 1), "{pc}");
    assert_eq!(lru(&r.summary, "inactive_file") + lru(&r.summary, "active_file"), 12 - 2 + 1);
    // The O_DIRECT bit alone, without a system call on a file, is refused.
    let e = run(&p, vec![Access { flags: Access::DIRECT, ..call(Op::Read, 0, 64) }]).err().unwrap().to_string();
    assert!(e.contains("access #0") && e.contains("O_DIRECT") && e.contains("0x04"), "{e}");
}

/// The mapping record(s) of a file of `pages` pages whose first page is page `first` of the
/// file area.
fn map(first: u64, pages: u64) -> Vec<Access> {
    Access::mapping(FILE_BASE + first * PAGE, pages * PAGE, 0, 10)
}

fn with(mut head: Vec<Access>, tail: impl IntoIterator<Item = Access>) -> Vec<Access> {
    head.extend(tail);
    head
}

#[test]
fn a_cold_mapped_read_is_a_major_fault_that_reads_around_it() {
    // A 1 MiB file (256 pages); read_ahead 128 KiB = 32 pages (ra_pages); fault-around off.
    let p = platform("4MiB", "[storage]\nfault_around_pages = 1");
    // Its first page: do_sync_mmap_readahead reads [0, 32) (the window would start 16 pages
    // earlier, before the file), one 128 KiB request; the thread waits: lookup 50, 32 page
    // allocations of 250, fs_map 400, block layer 1000 + driver 500, the device read, the
    // interrupt 3000, then the fault itself (minor_fault 1000) maps the page.
    let r = run(&p, with(map(0, 256), [mapped(Op::Read, 0)])).unwrap();
    let s = &r.summary;
    let f = &s["faults"];
    assert_eq!(
        (u(f, &["major"]), u(f, &["minor_file"]), u(f, &["first_touch"]), u(f, &["file_unread"])),
        (1, 0, 0, 0),
        "{f}"
    );
    assert_eq!(u(s, &["swap", "device", "bytes_read"]), 32 * 4096);
    assert_eq!(u(&s["page_cache"], &["read_requests"]), 1);
    assert_eq!(u(&s["page_cache"], &["mmap", "fault_read_pages"]), 32);
    assert_eq!(lru(s, "inactive_file"), 32);
    let dev = device_ns(&p, Op::Read, 32 * 4096);
    assert_eq!(u(f, &["fault_time_ns"]), 50 + 32 * 250 + 400 + 1000 + 500 + dev + 3000 + 1000, "{f}");
    assert!(s.get("notes").is_none());
    // The next 31 pages were read around: each touch is a minor fault (1 us), no read waits.
    // Page 24 carries PG_readahead (the window's last quarter, 8 pages): its fault starts the
    // next window, [32, 64), asynchronously.
    let r = run(&p, with(map(0, 256), (0..32).map(|i| mapped(Op::Read, i)))).unwrap();
    let s = &r.summary;
    let f = &s["faults"];
    assert_eq!((u(f, &["major"]), u(f, &["minor_file"])), (1, 31), "{f}");
    assert_eq!(u(s, &["swap", "device", "bytes_read"]), 64 * 4096);
    assert_eq!(u(&s["page_cache"], &["mmap", "fault_read_pages"]), 32, "the async window is not the fault's read");
    // With fault-around (16 pages, the default), the faults at pages 1 and 16 map the cached
    // pages of their aligned 16-page windows; page 24, the PG_readahead page, is left to fault.
    let p16 = platform("4MiB", "");
    let r = run(&p16, with(map(0, 256), (0..32).map(|i| mapped(Op::Read, i)))).unwrap();
    let s = &r.summary;
    assert_eq!((u(&s["faults"], &["major"]), u(&s["faults"], &["minor_file"])), (1, 3), "{}", s["faults"]);
    assert_eq!(u(&s["page_cache"], &["mmap", "fault_around_pages"]), 14 + 14);
    assert_eq!(u(s, &["swap", "device", "bytes_read"]), 64 * 4096);
}

#[test]
fn read_around_stays_inside_the_file() {
    let p = platform("4MiB", "[storage]\nfault_around_pages = 1");
    let dev_pages = |trace: Vec<Access>| {
        let r = run(&p, trace).unwrap();
        (u(&r.summary, &["faults", "major"]), u(&r.summary, &["swap", "device", "bytes_read"]) / 4096)
    };
    // The middle of the file: [84, 116). 84 and 115 are then cached; 83 and 116 are not, and
    // their read-arounds, [67, 99) and [100, 132), read only the pages not cached yet.
    let t = with(map(0, 256), [100, 84, 115].map(|i| mapped(Op::Read, i)));
    assert_eq!(dev_pages(t.clone()), (1, 32));
    assert_eq!(dev_pages(with(t, [83, 116].map(|i| mapped(Op::Read, i)))), (3, 32 + 17 + 16));
    // Near the end: [234, 256), the 10 pages past the end are not read.
    assert_eq!(dev_pages(with(map(0, 256), [mapped(Op::Read, 250)])), (1, 22));
    // A file starting at page 64, anonymous pages untouched right before and after it: the
    // faults at its second and last pages read [64, 96) and [80, 100), and the neighbours,
    // touched afterwards, are anonymous first touches.
    let t = with(map(64, 36), [mapped(Op::Read, 65), mapped(Op::Write, 99)]);
    let neighbours = [63, 100].map(|i| Access { addr: FILE_BASE + i * PAGE, ..anon(Op::Write, 0) });
    let r = run(&p, with(t, neighbours)).unwrap();
    let s = &r.summary;
    assert_eq!(u(s, &["swap", "device", "bytes_read"]), 36 * 4096);
    assert_eq!((u(s, &["faults", "major"]), u(s, &["faults", "first_touch"])), (2, 2), "{}", s["faults"]);
    assert_eq!(
        (lru(s, "inactive_file") + lru(s, "active_file"), lru(s, "inactive_anon") + lru(s, "active_anon")),
        (36, 2)
    );
}

#[test]
fn warm_files_and_pages_read_by_calls_are_minor_faults() {
    // files_start_cached: the mapping record puts the 256 pages in the page cache unmapped, no
    // device read; reading them all through the mapping takes one minor fault per aligned
    // 16-page fault-around window.
    let base = platform("4MiB", "");
    let warm = platform_with("4MiB", "", &["os.files_start_cached=true"]);
    let r = run(&warm, with(map(0, 256), (0..256).map(|i| mapped(Op::Read, i)))).unwrap();
    let s = &r.summary;
    assert_eq!((u(&s["faults"], &["major"]), u(&s["faults"], &["minor_file"])), (0, 16), "{}", s["faults"]);
    assert_eq!(u(&s["page_cache"], &["mmap", "warm_pages"]), 256);
    assert_eq!(u(s, &["swap", "device", "bytes_read"]), 0);
    // Cold, the same file read by read(2) first: the call reads 4 pages (get_init_ra_size), and
    // the mapped read of page 0 finds them cached: a minor fault mapping all 4.
    let r = run(&base, with(map(0, 256), [call(Op::Read, 0, 4096), mapped(Op::Read, 0)])).unwrap();
    let s = &r.summary;
    assert_eq!((u(&s["faults"], &["major"]), u(&s["faults"], &["minor_file"])), (0, 1), "{}", s["faults"]);
    assert_eq!(u(&s["page_cache"], &["mmap", "fault_around_pages"]), 3);
    assert_eq!(u(s, &["swap", "device", "bytes_read"]), 4 * 4096);
}

#[test]
fn mapped_pages_without_bounds_keep_the_old_first_touch() {
    // No mapping record: the first touch is a zeroed page (os.fault_latency), nothing read, and
    // the summary says so.
    let p = platform("4MiB", "");
    let r = run(&p, vec![mapped(Op::Read, 0), mapped(Op::Read, 1)]).unwrap();
    let s = &r.summary;
    assert_eq!(
        (u(&s["faults"], &["first_touch"]), u(&s["faults"], &["file_unread"]), u(&s["faults"], &["major"])),
        (2, 2, 0)
    );
    assert_eq!(u(s, &["swap", "device", "bytes_read"]), 0);
    let note = s["notes"][0].as_str().unwrap();
    assert!(note.starts_with("2 first touches") && note.contains("no mapping record"), "{note}");
}

#[test]
fn bad_mapping_records_are_clear_errors() {
    let p = platform("4MiB", "");
    let err = |t: Vec<Access>| run(&p, t).err().unwrap().to_string();
    let e = err(with(map(0, 16), map(8, 16)));
    assert!(e.contains("access #1") && e.contains("overlaps"), "{e}");
    let e = err(vec![Access { op: Op::Write, ..map(0, 16)[0] }]);
    assert!(e.contains("access #0") && e.contains("continuation"), "{e}");
    // Bits 0, 1 and 3 make a sync record (below), bits 0, 2 and 3 a file size record (whose
    // size is 1, not a mapping's length); bit 2 beside bit 3 without bit 0 is nothing.
    let e = err(vec![Access { flags: Access::MAP | Access::DIRECT, ..map(0, 16)[0] }]);
    assert!(e.contains("access #0") && e.contains("bit 3"), "{e}");
    let e = err(vec![Access { flags: Access::SIZE, ..map(0, 16)[0] }]);
    assert!(e.contains("access #0") && e.contains("file size record") && e.contains("size 16"), "{e}");
    let e = err(with(map(0, 16), [Access { addr: FILE_BASE + 3 * PAGE, ..anon(Op::Read, 0) }]));
    assert!(e.contains("access #1") && e.contains("anonymous"), "{e}");
    // The same file mapped again is no error, and maps nothing new.
    let r = run(&p, with(with(map(0, 16), map(0, 16)), [mapped(Op::Read, 0)])).unwrap();
    assert_eq!(u(&r.summary, &["page_cache", "mmap", "mappings"]), 1);
}

#[test]
fn page_cache_invariants_over_random_mixes() {
    // Two files (pages [0, 100) and [300, 337)) with anonymous pages between, right before and
    // right after them, in 256 KiB of memory (reclaim drops and swaps), random loads, stores
    // and calls. Every access the engine checks that no page of a mapped file is anonymous;
    // at the end the device read exactly the pages the page cache took in, plus the swap-ins.
    let p = platform("256KiB", "");
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    for round in 0..6 {
        let mut t = with(map(0, 100), map(300, 37));
        for _ in 0..1500 {
            let file_page = if next(3) == 0 { 300 + next(37) } else { next(100) };
            let op = if next(4) == 0 { Op::Write } else { Op::Read };
            t.push(match next(5) {
                0 => call(op, file_page, 1 + next(4096) as u16),
                1 => Access { addr: FILE_BASE + [299, 337, 100 + next(200)][next(3) as usize] * PAGE, ..anon(op, 0) },
                _ => mapped(op, file_page),
            });
        }
        let r = run(&p, t).unwrap_or_else(|e| panic!("round {round}: {e}"));
        let s = &r.summary;
        let pc = &s["page_cache"];
        let sw = &s["swap"];
        assert!(u(sw, &["file_drops"]) > 0 && u(&s["faults"], &["major"]) > 0, "round {round}: {s}");
        let swapped_in = u(sw, &["swap_ins"]) + u(sw, &["readahead_pages"]);
        assert_eq!(
            u(sw, &["device", "bytes_read"]),
            (u(pc, &["pages_read"]) + swapped_in) * 4096,
            "round {round}: {pc} {sw}"
        );
    }
}

#[test]
fn readers_cannot_outrun_the_device_they_read_ahead_from() {
    // 16 MiB read in order, by 4 KiB read(2) calls or by one load per page of a mapping: the
    // asynchronous windows run ahead of the reader, but a page is usable only once its read has
    // completed (the kernel keeps it locked until then), so the run lasts at least as long as
    // the device takes to deliver the bytes at its peak rate.
    let p = platform("64MiB", "");
    let s = p.swap.as_ref().unwrap();
    let peak = (tiersim_devices::find(&s.device).unwrap().build)(&s.params).unwrap().peak_bandwidth();
    for mmap in [false, true] {
        let reads = (0..4096).map(|i| if mmap { mapped(Op::Read, i) } else { call(Op::Read, i, 4096) });
        let r = run(&p, with(map(0, 4096), reads)).unwrap();
        let s = &r.summary;
        let bytes = u(s, &["swap", "device", "bytes_read"]);
        assert!(bytes >= 4096 * 4096, "{bytes}");
        let floor_ns = bytes as f64 / peak * 1e9;
        let took = u(s, &["execution_time_ns"]) as f64;
        assert!(took >= floor_ns, "mmap {mmap}: {took} ns for {bytes} B, the device needs {floor_ns:.0} ns");
    }
}

/// fsync (op read) or fdatasync (op write) of the mapped file holding page `page` of the file area.
fn sync(op: Op, page: u64) -> Access {
    Access { time: 10, addr: FILE_BASE + page * PAGE, cpu: 0, size: 1, op, flags: Access::SYNC }
}

#[test]
fn an_fsync_waits_for_the_files_dirty_pages_and_the_flush() {
    // A 64-page file, 8 whole pages written (nothing read first; far below the background
    // threshold, so the flusher writes nothing), then fsync: system call 100 + fs_map 400 +
    // block layer 1000 + driver 500, one 32 KiB request (the pages are consecutive, max_request
    // 128 KiB) on the idle device, the interrupt completion 3000, and storage.fsync 2000 (the
    // FLUSH and ext4_sync_file's bookkeeping).
    for preset in ["nvme_ssd", "optane_ssd"] {
        let set = format!("swap.preset=\"{preset}\"");
        let p = platform_with("4MiB", "", &[&set]);
        let writes: Vec<Access> = (0..8).map(|i| call(Op::Write, i, 4096)).collect();
        let r = run(&p, with(with(map(0, 64), writes.clone()), [sync(Op::Read, 0)])).unwrap();
        let pc = &r.summary["page_cache"];
        let dev = device_ns(&p, Op::Write, 8 * 4096);
        assert!(dev > 1000, "{preset}: {dev}");
        let sy = &pc["sync"];
        assert_eq!(u(sy, &["time_ns"]), 100 + 400 + 1000 + 500 + dev + 3000 + 2000, "{preset}: {sy}");
        assert_eq!(
            (u(sy, &["fsync_calls"]), u(sy, &["fdatasync_calls"]), u(sy, &["writeback_pages"]), u(sy, &["requests"])),
            (1, 0, 8, 1),
            "{preset}: {sy}"
        );
        assert_eq!((u(pc, &["dirty_pages"]), u(pc, &["writeback_bytes"])), (0, 8 * 4096), "{preset}: {pc}");
        assert_eq!(u(&r.summary, &["swap", "device", "bytes_written"]), 8 * 4096);
        // The sync is not a data call: the calls' own time and mean are those of the writes.
        let no_sync = run(&p, with(map(0, 64), writes.clone())).unwrap();
        assert_eq!(u(pc, &["io_time_ns"]), u(&no_sync.summary, &["page_cache", "io_time_ns"]));
        assert!(no_sync.summary["page_cache"].get("sync").is_none());
        // A second fdatasync finds nothing dirty: the system call and the flush, 2,100 ns.
        let r = run(&p, with(with(map(0, 64), writes), [sync(Op::Read, 0), sync(Op::Write, 63)])).unwrap();
        let sy = &r.summary["page_cache"]["sync"];
        assert_eq!(u(sy, &["time_ns"]), 100 + 400 + 1000 + 500 + dev + 3000 + 2000 + 2100, "{preset}: {sy}");
        assert_eq!((u(sy, &["fsync_calls"]), u(sy, &["fdatasync_calls"])), (1, 1));
    }
}

#[test]
fn an_fsync_writes_only_its_own_file() {
    let p = platform("4MiB", "");
    // Two files: pages 0..16 and 512..528 of the file area (another 2 MiB region). Pages 0-3 and
    // 8-9 of the first are dirty (two runs: two requests), and page 512 of the second.
    let mut t = with(map(0, 16), map(512, 16));
    t.extend([0, 1, 2, 3, 8, 9, 512].map(|i| call(Op::Write, i, 4096)));
    t.push(sync(Op::Write, 5));
    let r = run(&p, t).unwrap();
    let pc = &r.summary["page_cache"];
    assert_eq!((u(pc, &["sync", "writeback_pages"]), u(pc, &["sync", "requests"])), (6, 2), "{pc}");
    assert_eq!(u(pc, &["dirty_pages"]), 1);
    assert_eq!(u(&r.summary, &["swap", "device", "bytes_written"]), 6 * 4096);
    // dirtied = written back + still dirty, the sync's pages included.
    assert_eq!(u(pc, &["dirtied_pages"]), u(pc, &["writeback_bytes"]) / 4096 + u(pc, &["dirty_pages"]));
}

#[test]
fn an_fsync_on_dax_is_the_call_and_the_flush() {
    let p = platform("1MiB", "[dax]\nmode = \"fsdax\"\npreset = \"optane_100\"");
    let r = run(&p, with(with(map(0, 16), (0..4).map(|i| call(Op::Write, i, 4096))), [sync(Op::Read, 0)])).unwrap();
    let pc = &r.summary["page_cache"];
    assert_eq!((u(pc, &["sync", "time_ns"]), u(pc, &["sync", "writeback_pages"])), (2100, 0), "{pc}");
    assert_eq!(u(&r.summary, &["swap", "device", "bytes_written"]), 0);
}

#[test]
fn bad_sync_records_are_clear_errors() {
    let p = platform("4MiB", "");
    let err = |p: &platform::Platform, t: Vec<Access>| run(p, t).err().unwrap().to_string();
    // No mapping record names the file.
    let e = err(&p, vec![call(Op::Write, 0, 4096), sync(Op::Read, 0)]);
    assert!(e.contains("access #1") && e.contains("no mapping record"), "{e}");
    // A size other than 1 is reserved.
    let e = err(&p, with(map(0, 16), [Access { size: 16, ..sync(Op::Read, 0) }]));
    assert!(e.contains("access #1") && e.contains("size 1"), "{e}");
    // No block device for the files.
    let (_dir, path) = platform_file("");
    let bare = platform::load(path.to_str().unwrap(), &[]).unwrap();
    let e = err(&bare, with(map(0, 16), [sync(Op::Read, 0)]));
    assert!(e.contains("access #1") && e.contains("[swap]"), "{e}");
}

#[test]
fn a_second_fsync_waits_for_the_first_ones_writes() {
    // CPU 0 dirties 8 pages and fsyncs; CPU 1 fsyncs the same file after a gap. Once CPU 0 has
    // submitted its pages they are clean but under writeback until the device completes, and an
    // fsync arriving then waits for them (filemap_fdatawait_range), as a group commit's
    // followers wait for the leader's write; before or after that window it pays only its own
    // call and flush (2,100 ns), never more than the whole of CPU 0's sync.
    let p = platform_with("4MiB", "", &["host.cpus=2", "nodes.dram0.cpus=\"0-1\""]);
    let mut t = map(0, 64);
    t.extend((0..8).map(|i| call(Op::Write, i, 4096)));
    t.push(sync(Op::Read, 0));
    let first = u(&run(&p, t.clone()).unwrap().summary, &["page_cache", "sync", "time_ns"]);
    let mut waited = 0;
    for gap in (1..60).map(|k| k * 1000) {
        let mut t = t.clone();
        t.push(Access { cpu: 1, time: gap, ..sync(Op::Read, 0) });
        let r = run(&p, t).unwrap();
        let sy = &r.summary["page_cache"]["sync"];
        assert_eq!((u(sy, &["fsync_calls"]), u(sy, &["writeback_pages"])), (2, 8), "{sy}");
        let second = u(sy, &["time_ns"]) - first;
        assert!((2100..=first).contains(&second), "gap {gap}: {second} ns, the first {first}");
        waited += (second > 2100) as u32;
    }
    assert!(waited > 0, "no fsync of CPU 1 fell in the write's window");
}

/// The time a fresh device of the platform's DAX preset takes for `reqs` (gap, bytes, address)
/// of writes issued in order, each its gap after the previous ended (`None`: at once).
fn dax_writes_ns(p: &platform::Platform, reqs: &[(Option<u64>, u32, u64)], t0: u64) -> u64 {
    let d = p.dax.as_ref().unwrap();
    let reqs = reqs.iter().map(|&(gap, bytes, addr)| (gap.unwrap_or(0), bytes, addr, Op::Write));
    device_ends(&d.device, &d.params, reqs, t0).last().map_or(0, |end| end - t0)
}

/// A 16-page file. Page 0 read (the file's blocks end at 4 KiB), then overwritten; pages 1-2
/// written (past the end: two new blocks, zeroed first); 256 B written inside page 2 (below the
/// end now: nothing new). Every write covers whole 256 B media lines, so after the 1 ms pause
/// (10^6 instructions at 1 GHz) the device has nothing left to write back. Then fdatasync
/// twice: the first commits the journal, the second finds nothing uncommitted.
fn dax_allocating_trace() -> Vec<Access> {
    let pause = |a: Access| Access { time: 1_000_000, ..a };
    with(
        map(0, 16),
        [
            call(Op::Read, 0, 4096),
            call(Op::Write, 0, 4096),
            call(Op::Write, 1, 8192),
            call(Op::Write, 2, 256),
            pause(sync(Op::Write, 0)),
            sync(Op::Write, 5),
        ],
    )
}

#[test]
fn a_dax_write_past_the_traced_end_zeroes_its_new_blocks_and_the_next_sync_commits_the_journal() {
    let fsdax = "[dax]\nmode = \"fsdax\"\npreset = \"optane_100\"";
    let on = platform_with("1MiB", fsdax, &["storage.dax_new_blocks=\"past_traced_end\""]);
    let trace = dax_allocating_trace();
    let r = run(&on, trace.clone()).unwrap();
    let pc = &r.summary["page_cache"];
    let dax = &pc["dax"];
    assert_eq!(
        (u(dax, &["calls"]), u(dax, &["allocating_calls"]), u(dax, &["zeroed_bytes"]), u(dax, &["journal_commits"])),
        (4, 1, 8192, 1),
        "{dax}"
    );
    // The commit: 4 blocks (descriptor, bitmap, group descriptor, inode) through the pmem
    // driver's bio path (300 ns) to the idle device, then the commit block (300 ns more), then
    // the wakeup (3,000 ns). The journal sits at 2^48 - 128 MiB.
    let jbase = (1u64 << 48) - (128 << 20);
    let t0 = 100;
    let dev = dax_writes_ns(&on, &[(Some(300), 4 * 4096, jbase), (Some(300), 4096, jbase + 4 * 4096)], t0);
    // By hand: a 256 B line takes 111.304 ns of media at 2.3 GB/s, and an ntstore write
    // completes 90 ns after its last line starts on the media. The 16 KiB: 300 + 63 x 111.304 +
    // 90 = 7,402 ns. The commit block 300 ns later (the media idle again at 300 + 64 x 111.304 =
    // 7,423 ns < 7,702): 7,702 + 15 x 111.304 + 90 = 9,462 ns.
    assert!(dev.abs_diff(9462) <= 2, "{dev}");
    assert_eq!(u(dax, &["journal_time_ns"]), dev + 3000, "{dax}");
    // fdatasync 1: the system call 100, the commit, storage.fsync 2000; fdatasync 2: 2,100 ns.
    assert_eq!(u(pc, &["sync", "time_ns"]), 100 + dev + 3000 + 2000 + 2100, "{pc}");
    // The allocating call costs its zeroing: slower than the same calls without the rule, which
    // reports what it did before the rule existed (no allocation keys, the bare 2,100 ns syncs).
    let off = run(&platform("1MiB", fsdax), trace).unwrap();
    let (pc_off, dax_off) = (&off.summary["page_cache"], &off.summary["page_cache"]["dax"]);
    assert!(dax_off.get("allocating_calls").is_none() && dax_off.get("journal_commits").is_none(), "{dax_off}");
    assert_eq!(u(pc_off, &["sync", "time_ns"]), 2 * 2100);
    assert!(u(pc, &["io_time_ns"]) > u(pc_off, &["io_time_ns"]) + 300, "{pc} vs {pc_off}");
}

/// The blocks a DAX write allocates and the journal's are ext4's 4 KiB, whatever `os.page_size`
/// is (ext4 refuses DAX for a block size other than the kernel's 4 KiB PAGE_SIZE): with 2 MiB
/// pages `dax_allocating_trace` zeroes the same two blocks, 8 KiB, and its commit writes the same 20
/// KiB, 9,462 ns of device time. (With the page as the block it allocated nothing and committed
/// nothing: its new blocks fell inside the 2 MiB "block" the file's end was in; a write reaching
/// a new 2 MiB would have zeroed all of it, and each commit written 10 MiB.)
#[test]
fn dax_allocation_and_the_journal_use_4kib_blocks_with_2mib_pages() {
    let fsdax = "[dax]\nmode = \"fsdax\"\npreset = \"optane_100\"";
    let past = "storage.dax_new_blocks=\"past_traced_end\"";
    let trace = dax_allocating_trace();
    let small = platform_with("8MiB", fsdax, &[past]);
    let huge = platform_with("8MiB", fsdax, &[past, "os.page_size=\"2MiB\""]);
    assert_eq!(huge.page_size, 2 << 20);
    let jbase = (1u64 << 48) - (128 << 20);
    let dev = dax_writes_ns(&huge, &[(Some(300), 4 * 4096, jbase), (Some(300), 4096, jbase + 4 * 4096)], 100);
    assert!(dev.abs_diff(9462) <= 2, "{dev}");
    for p in [&small, &huge] {
        let r = run(p, trace.clone()).unwrap();
        let pc = &r.summary["page_cache"];
        let dax = &pc["dax"];
        assert_eq!(
            (u(dax, &["allocating_calls"]), u(dax, &["zeroed_bytes"]), u(dax, &["journal_commits"])),
            (1, 8192, 1),
            "page size {}: {dax}",
            p.page_size
        );
        assert_eq!(u(dax, &["journal_time_ns"]), dev + 3000, "page size {}: {dax}", p.page_size);
        assert_eq!(u(pc, &["sync", "time_ns"]), 100 + dev + 3000 + 2000 + 2100, "page size {}: {pc}", p.page_size);
    }
}

/// storage.journal_size places the journal's circular area (2^48 - size): the same commit as
/// above in jbd2's least journal, 4 MiB, costs the same 9,462 ns of device writes there (the
/// module's time does not depend on the address), and a size that is no journal is one error.
#[test]
fn the_journal_size_places_the_journal_and_bad_sizes_are_one_error() {
    let fsdax = "[dax]\nmode = \"fsdax\"\npreset = \"optane_100\"";
    let past = "storage.dax_new_blocks=\"past_traced_end\"";
    assert_eq!(platform_with("1MiB", fsdax, &[past]).storage.bytes("journal_size"), 128 << 20);
    let small = platform_with("1MiB", fsdax, &[past, "storage.journal_size=\"4MiB\""]);
    let trace = with(map(0, 16), [call(Op::Write, 1, 4096), Access { time: 1_000_000, ..sync(Op::Write, 0) }]);
    let r = run(&small, trace).unwrap();
    let dax = &r.summary["page_cache"]["dax"];
    let jbase = (1u64 << 48) - (4 << 20);
    let dev = dax_writes_ns(&small, &[(Some(300), 4 * 4096, jbase), (Some(300), 4096, jbase + 4 * 4096)], 100);
    assert!(dev.abs_diff(9462) <= 2, "{dev}");
    assert_eq!((u(dax, &["journal_commits"]), u(dax, &["journal_time_ns"])), (1, dev + 3000), "{dax}");
    let err = |set: &[&str]| try_platform("1MiB", fsdax, set).map(|_| ()).expect_err("an error").to_string();
    let e = err(&["storage.journal_size=\"1MiB\""]);
    assert!(e.contains("storage.journal_size"), "{e}");
    let e = err(&["storage.journal_size=\"4MiB\"", "storage.journal_blocks=1025"]);
    assert!(
        e.contains("storage.journal_size") && e.contains("fewer than journal_blocks = 1025 blocks of 4 KiB"),
        "{e}"
    );
}

/// `storage.cache_new_pages = "past_traced_end"`: a 16-page file, mapped (its traced end starts
/// at its first byte). Page 0 written whole (traced end 4 KiB); 100 B written at page 1 (at the
/// traced end: nothing to read, ext4's write_begin zeroes the rest of a new page); 100 B at page
/// 8 (past it: nothing read; traced end now 8 x 4 KiB + 100); 100 B at page 3, not cached and
/// below the traced end: read first (a random miss, prev = 8: only the page, one 4 KiB request).
#[test]
fn a_partial_write_past_the_traced_end_reads_nothing_one_below_it_reads_the_page() {
    let past = "storage.cache_new_pages=\"past_traced_end\"";
    let on = platform_with("4MiB", "", &[past]);
    let head = || with(map(0, 16), [call(Op::Write, 0, 4096)]);
    let trace = with(head(), [call(Op::Write, 1, 100), call(Op::Write, 8, 100), call(Op::Write, 3, 100)]);
    let r = run(&on, trace.clone()).unwrap();
    let pc = &r.summary["page_cache"];
    assert_eq!(
        (u(pc, &["misses"]), u(pc, &["hits"]), u(pc, &["new_partial_pages"]), u(pc, &["pages_read"])),
        (4, 0, 2, 1),
        "{pc}"
    );
    assert_eq!((u(pc, &["read_requests"]), u(pc, &["readahead_pages"])), (1, 0), "{pc}");
    assert_eq!(u(&r.summary, &["swap", "device", "bytes_read"]), 4096);

    // The partial write past the end costs what a hit on a cached, dirty page costs plus the
    // page allocation (250 ns), nothing of the device: system call 100 + VFS 300 + lookup 50 +
    // the 100 B DRAM copy + write_page 200 either way.
    let t = |p: &platform::Platform, tail: Vec<Access>| {
        let r = run(p, with(head(), tail)).unwrap();
        (u(&r.summary["page_cache"], &["io_time_ns"]), u(&r.summary, &["swap", "device", "bytes_read"]))
    };
    let (base, read0) = t(&on, vec![]);
    let (new_page, read1) = t(&on, vec![call(Op::Write, 1, 100)]);
    let (hit, _) = t(&on, vec![call(Op::Write, 0, 100)]);
    assert_eq!((read0, read1), (0, 0));
    assert_eq!(new_page - base, hit - base + 250, "new page {} ns, hit {} ns", new_page - base, hit - base);
    assert!((hit - base) < 1000, "{}", hit - base);
    // The partial write below the end waits for the page: page allocation 250, fs_map 400,
    // block layer 1000 + driver 500, the 4 KiB NVMe read, the interrupt 3000, on top of the hit.
    let (below, read3) = t(&on, vec![call(Op::Write, 8, 100), call(Op::Write, 3, 100)]);
    let (upto8, _) = t(&on, vec![call(Op::Write, 8, 100)]);
    assert_eq!(read3, 4096);
    let dev = device_ns(&on, Op::Read, 4096);
    assert_eq!(below - upto8, hit - base + 250 + 400 + 1000 + 500 + dev + 3000, "dev {dev} ns");

    // Without the rule (the default, every page of a mapped file holding data) the write at
    // page 1 misses a sequential stream (prev = 0) and reads the initial window, pages [1, 5)
    // (get_init_ra_size(1, 32) = 4); page 8 is read alone (random); page 3 hits.
    let off = run(&platform("4MiB", ""), trace).unwrap();
    let pc = &off.summary["page_cache"];
    assert!(pc.get("new_partial_pages").is_none(), "{pc}");
    assert_eq!((u(pc, &["misses"]), u(pc, &["hits"]), u(pc, &["pages_read"])), (3, 1, 5), "{pc}");
    assert_eq!(u(&off.summary, &["swap", "device", "bytes_read"]), 5 * 4096);

    // An unknown value is one error naming the key.
    let e = try_platform("4MiB", "", &["storage.cache_new_pages=\"sometimes\""]).map(|_| ()).expect_err("an error");
    let e = e.to_string();
    assert!(
        e.contains("storage.cache_new_pages") && e.contains("not one of preallocated, past_traced_end, size_at_open"),
        "{e}"
    );
}

/// A page a load or store through the mapping touched, then dropped, is below the traced end:
/// a partial write to it reads it (the fault raised the traced end to the page's end).
#[test]
fn a_page_touched_through_the_mapping_is_below_the_traced_end() {
    let on =
        platform_with("4MiB", "[storage]\nfault_around_pages = 1", &["storage.cache_new_pages=\"past_traced_end\""]);
    // A 64-page file: a load faults page 0 (read-around caches [0, 32); the traced end is page
    // 0's end); an O_DIRECT write of page 2 drops its cached copy (traced end: page 2's end);
    // 100 B written at page 40 (past the end: nothing read) and at page 2 (not cached, below
    // the end: read, alone, as a random miss).
    let trace = with(
        map(0, 64),
        [mapped(Op::Read, 0), direct(Op::Write, 2, 4096), call(Op::Write, 40, 100), call(Op::Write, 2, 100)],
    );
    let r = run(&on, trace).unwrap();
    let pc = &r.summary["page_cache"];
    assert_eq!(u(pc, &["new_partial_pages"]), 1, "{pc}");
    assert_eq!(u(pc, &["mmap", "fault_read_pages"]), 32, "{pc}");
    // 32 pages by the fault, then page 2 again by the write below the end.
    assert_eq!(u(pc, &["pages_read"]), 33, "{pc}");
}

/// A file size record (flags 13) for the file at page `first`: its data ended `held` bytes in
/// when the program opened it (op read: inside its mapping of `pages` pages; op write: at the
/// mapping's end, every mapped byte held).
fn held(first: u64, pages: u64, held: u64) -> Access {
    let op = if held < pages * PAGE { Op::Read } else { Op::Write };
    let addr = FILE_BASE + first * PAGE + held.min(pages * PAGE);
    Access { time: 0, addr, cpu: 0, size: 1, op, flags: Access::SIZE }
}

/// `cache_new_pages = "size_at_open"`, by hand. A 16-page file that held 2 pages and 100 B at
/// open (pages 0-1 whole, page 2 in part). 100 B written at page 10 (wholly past the size, never
/// written: a hole, nothing read); at page 6 (below the traced end that write left, 10 x 4 KiB +
/// 100, but past the size and never written: nothing read, where past_traced_end reads it); an
/// O_DIRECT write of page 12, then 100 B at page 12 (not cached, but the trace wrote it: read, a
/// random miss, only the page); 100 B at page 2 (the file held data in it: read, alone).
#[test]
fn a_partial_write_past_the_size_at_open_reads_nothing_unless_the_trace_wrote_the_page() {
    let sized = platform_with("4MiB", "", &["storage.cache_new_pages=\"size_at_open\""]);
    let past = platform_with("4MiB", "", &["storage.cache_new_pages=\"past_traced_end\""]);
    let head = || with(map(0, 16), [held(0, 16, 2 * PAGE + 100)]);
    let tail = [
        call(Op::Write, 10, 100),
        call(Op::Write, 6, 100),
        direct(Op::Write, 12, 4096),
        call(Op::Write, 12, 100),
        call(Op::Write, 2, 100),
    ];
    let r = run(&sized, with(head(), tail)).unwrap();
    let pc = &r.summary["page_cache"];
    assert_eq!(
        (u(pc, &["misses"]), u(pc, &["hits"]), u(pc, &["new_partial_pages"]), u(pc, &["pages_read"])),
        (4, 0, 2, 2),
        "{pc}"
    );
    assert_eq!((u(pc, &["read_requests"]), u(pc, &["readahead_pages"])), (2, 0), "{pc}");
    assert_eq!(u(&r.summary, &["swap", "device", "bytes_read"]), 2 * 4096);
    // The same trace with past_traced_end (the size record kept but not used): only page 10 is
    // past the traced end; pages 6, 12 and 2 are read, each alone.
    let r = run(&past, with(head(), tail)).unwrap();
    let pc = &r.summary["page_cache"];
    assert_eq!((u(pc, &["new_partial_pages"]), u(pc, &["pages_read"])), (1, 3), "{pc}");

    // The hole at page 6 costs what past_traced_end's new page costs: a hit on a cached, dirty
    // page (the 100 B written at page 10 again) plus the page allocation, 250 ns.
    let t = |tail: Vec<Access>| {
        let r = run(&sized, with(head(), tail)).unwrap();
        (u(&r.summary["page_cache"], &["io_time_ns"]), u(&r.summary, &["swap", "device", "bytes_read"]))
    };
    let (one, _) = t(vec![call(Op::Write, 10, 100)]);
    let (hole, read) = t(vec![call(Op::Write, 10, 100), call(Op::Write, 6, 100)]);
    let (hit, _) = t(vec![call(Op::Write, 10, 100), call(Op::Write, 10, 100)]);
    assert_eq!(read, 0);
    assert_eq!(hole - one, hit - one + 250, "hole {} ns, hit {} ns", hole - one, hit - one);

    // A file that held every mapped byte at open (op write, at the mapping's end): a partial
    // write past its traced end reads the page (the CPU's first call, so a sequential stream's
    // initial window, pages [8, 12): get_init_ra_size(1, 32) = 4), where past_traced_end reads
    // nothing; a file with no size record is taken as past_traced_end takes it.
    let full = || with(map(0, 16), [held(0, 16, 16 * PAGE)]);
    let r = run(&sized, with(full(), [call(Op::Write, 8, 100)])).unwrap();
    assert_eq!(
        (u(&r.summary["page_cache"], &["new_partial_pages"]), u(&r.summary["page_cache"], &["pages_read"])),
        (0, 4)
    );
    let r = run(&past, with(full(), [call(Op::Write, 8, 100)])).unwrap();
    assert_eq!(
        (u(&r.summary["page_cache"], &["new_partial_pages"]), u(&r.summary["page_cache"], &["pages_read"])),
        (1, 0)
    );
    let r = run(&sized, with(map(0, 16), [call(Op::Write, 8, 100)])).unwrap();
    assert_eq!(
        (u(&r.summary["page_cache"], &["new_partial_pages"]), u(&r.summary["page_cache"], &["pages_read"])),
        (1, 0)
    );

    // Without a cache_new_pages rule the size record changes nothing: the trace with it replays
    // as the one without it, to the ns.
    let off = platform("4MiB", "");
    let a = run(&off, with(head(), tail)).unwrap();
    let b = run(&off, with(map(0, 16), tail)).unwrap();
    assert_eq!(a.summary["execution_time_ns"], b.summary["execution_time_ns"]);
    assert_eq!(a.summary["page_cache"], b.summary["page_cache"]);
}

/// A file size record must name a mapped file, once, with size 1; each mistake is one error
/// naming the record.
#[test]
fn a_file_size_record_must_follow_its_files_mapping() {
    let sized = platform_with("4MiB", "", &["storage.cache_new_pages=\"size_at_open\""]);
    let err = |trace: Vec<Access>| run(&sized, trace).map(|_| ()).expect_err("an error").to_string();
    let e = err(vec![held(0, 16, 100)]);
    assert!(e.contains("access #0") && e.contains("file size record") && e.contains("no mapped file"), "{e}");
    let e = err(with(map(0, 16), [held(0, 16, 100), held(0, 16, 100)]));
    assert!(e.contains("access #2") && e.contains("second file size record"), "{e}");
    let e = err(with(map(0, 16), [Access { size: 2, ..held(0, 16, 100) }]));
    assert!(e.contains("access #1") && e.contains("size 2"), "{e}");
    // Op write names the file ending at its address: a file of 16 pages does not end at page 8.
    let e = err(with(map(0, 16), [Access { op: Op::Write, ..held(0, 16, 8 * PAGE) }]));
    assert!(e.contains("access #1") && e.contains("ends"), "{e}");
}

/// `dax_new_blocks = "size_at_open"` on fsdax, by hand. A 16-page file that held 2 pages and
/// 100 B at open. Writes: page 10 whole (past the size: 1 block allocated); page 6 whole (below
/// the traced end that left, but a hole: 1 block, where past_traced_end allocates none); 100 B
/// at page 2 (the file held data in that block: none); page 6 again (written: none); page 13
/// (1 block); pages 12-14 (12 and 14 are holes, 13 written: 2 blocks, two zeroing requests, one
/// allocating call). 4 allocating calls, 5 blocks zeroed. past_traced_end on the same trace: pages
/// 10 and 13 and, of 12-14, only 14 (past the traced end then): 3 calls, 3 blocks.
#[test]
fn a_dax_write_allocates_the_holes_past_the_size_at_open() {
    let fsdax = "[dax]\nmode = \"fsdax\"\npreset = \"optane_100\"";
    let sized = platform_with("1MiB", fsdax, &["storage.dax_new_blocks=\"size_at_open\""]);
    let past = platform_with("1MiB", fsdax, &["storage.dax_new_blocks=\"past_traced_end\""]);
    let tail = [
        call(Op::Write, 10, 4096),
        call(Op::Write, 6, 4096),
        call(Op::Write, 2, 100),
        call(Op::Write, 6, 4096),
        call(Op::Write, 13, 4096),
        call(Op::Write, 12, 3 * 4096),
    ];
    let trace = |size: Option<u64>| {
        let head = map(0, 16);
        match size {
            Some(h) => with(with(head, [held(0, 16, h)]), tail),
            None => with(head, tail),
        }
    };
    let alloc = |p: &platform::Platform, size: Option<u64>| {
        let r = run(p, trace(size)).unwrap();
        let dax = r.summary["page_cache"]["dax"].clone();
        (u(&dax, &["allocating_calls"]), u(&dax, &["zeroed_bytes"]), u(&r.summary["page_cache"], &["io_time_ns"]))
    };
    let (calls, zeroed, _) = alloc(&sized, Some(2 * PAGE + 100));
    assert_eq!((calls, zeroed), (4, 5 * 4096));
    let (calls, zeroed, _) = alloc(&past, Some(2 * PAGE + 100));
    assert_eq!((calls, zeroed), (3, 3 * 4096));
    // No size record: size_at_open takes the file as past_traced_end does, to the ns.
    assert_eq!(alloc(&sized, None), alloc(&past, None));
    // A file that held every mapped byte: nothing is allocated, and the calls cost what they cost
    // with every block preallocated (the default), to the ns.
    let (calls, zeroed, t) = alloc(&sized, Some(16 * PAGE));
    assert_eq!((calls, zeroed), (0, 0));
    let r = run(&platform("1MiB", fsdax), trace(Some(16 * PAGE))).unwrap();
    assert_eq!(t, u(&r.summary["page_cache"], &["io_time_ns"]));
}

/// The time a fresh device of the platform's file device (`[swap]`) takes for `reqs` (gap,
/// bytes, address) of writes issued in order, each `gap` ns after the previous ended (the
/// first `gap` after `t0`); returns each request's end.
fn swap_writes_ns(p: &platform::Platform, reqs: &[(u64, u32, u64)], t0: u64) -> Vec<u64> {
    let s = p.swap.as_ref().unwrap();
    device_ends(&s.device, &s.params, reqs.iter().map(|&(gap, bytes, addr)| (gap, bytes, addr, Op::Write)), t0)
}

/// `dax_allocating_trace` through the page cache on the Optane SSD, with `cache_new_pages`: the
/// writes of pages 1-2 (past the traced end) put them in holes (cached already, by the read's
/// readahead: pages 0-3), delayed-allocated; the first fdatasync writes back pages 0-2 (one 12
/// KiB request), which allocates the two, so it commits the journal on the SSD; the second finds
/// nothing dirty and nothing uncommitted.
#[test]
fn a_buffered_write_into_a_hole_is_allocated_at_writeback_and_the_next_sync_commits_the_journal() {
    let ssd = "swap.preset=\"optane_ssd\"";
    let on = platform_with("1MiB", "", &[ssd, "storage.cache_new_pages=\"past_traced_end\""]);
    let trace = dax_allocating_trace();
    let r = run(&on, trace.clone()).unwrap();
    let pc = &r.summary["page_cache"];
    assert_eq!(
        (u(pc, &["allocated_pages"]), u(pc, &["journal_commits"]), u(pc, &["sync", "writeback_pages"])),
        (2, 1, 3),
        "{pc}"
    );
    // By hand: the sync's writeback after the system call (100), fs_map (400), block layer
    // (1,000) and driver (500): 12 KiB, 10 us + 12,288 B at 2.2 GB/s (5,585.5 ns, rounded up) =
    // 15,586 ns on the idle SSD;
    // its interrupt completion (3,000). Then jbd2: the descriptor and metadata blocks, 16 KiB,
    // through the block layer and driver (1,500): 10 us + 7,448 ns = 17,448 ns, its completion
    // (3,000); the commit block, 4 KiB (1,500 + 10 us + 1,862 ns = 11,862 ns), its completion
    // (3,000), and the caller's wakeup (3,000). The journal sits at 2^48 - 128 MiB.
    let jbase = (1u64 << 48) - (128 << 20);
    let t0 = 1_000_000;
    let ends = swap_writes_ns(&on, &[(2000, 3 * 4096, 0), (4500, 4 * 4096, jbase), (4500, 4096, jbase + 4 * 4096)], t0);
    let (data, desc, commit) = (ends[0] - t0 - 2000, ends[1] - ends[0] - 4500, ends[2] - ends[1] - 4500);
    assert_eq!((data, desc, commit), (15586, 17448, 11862));
    let journal = 1500 + desc + 3000 + 1500 + commit + 3000 + 3000;
    assert_eq!(u(pc, &["journal_time_ns"]), journal, "{pc}");
    // fdatasync 1: 2,000 + the data + 3,000, the commit, storage.fsync 2,000; fdatasync 2: 2,100.
    assert_eq!(u(pc, &["sync", "time_ns"]), 2000 + data + 3000 + journal + 2000 + 2100, "{pc}");
    assert_eq!(u(&r.summary, &["swap", "device", "bytes_written"]), 3 * 4096 + 5 * 4096);
    // Without the rule the same trace commits nothing and reports no journal: the writeback,
    // its completion and the flush (what it did before the rule existed).
    let off = run(&platform_with("1MiB", "", &[ssd]), trace.clone()).unwrap();
    let pc_off = &off.summary["page_cache"];
    assert!(pc_off.get("journal_commits").is_none() && pc_off.get("allocated_pages").is_none(), "{pc_off}");
    assert_eq!(u(pc_off, &["sync", "time_ns"]), 2000 + data + 3000 + 2000 + 2100, "{pc_off}");
    // Overwrites of blocks that exist allocate nothing: the file held 16 pages at open.
    let sized = platform_with("1MiB", "", &[ssd, "storage.cache_new_pages=\"size_at_open\""]);
    let full = with(vec![held(0, 16, 16 * PAGE)], trace.iter().copied().skip(map(0, 16).len()));
    let r = run(&sized, with(map(0, 16), full)).unwrap();
    let pc = &r.summary["page_cache"];
    assert_eq!((u(pc, &["allocated_pages"]), u(pc, &["journal_commits"]), u(pc, &["journal_time_ns"])), (0, 0, 0));
    assert_eq!(u(pc, &["sync", "time_ns"]), 2000 + data + 3000 + 2000 + 2100, "{pc}");
    // A page the flusher or reclaim writes back allocates all the same: an O_DIRECT read of
    // page 1 first writes back the cached, dirty pages of its range (pages 1, allocating), and
    // the sync after commits though it writes back only pages 0 and 2.
    let mut t = trace.clone();
    let at = t.len() - 2;
    t.insert(at, direct(Op::Read, 1, 4096));
    let r = run(&on, t).unwrap();
    let pc = &r.summary["page_cache"];
    assert_eq!(
        (u(pc, &["allocated_pages"]), u(pc, &["journal_commits"]), u(pc, &["sync", "writeback_pages"])),
        (2, 1, 2),
        "{pc}"
    );
}

/// `dax.files`: the files it lists (by the address of their first mapping record) are on the
/// fsdax module, the others in the page cache of the `[swap]` device, in one run. File A (16
/// pages at page 0) on DAX, file B (16 pages at page 512, the next 2 MiB region) on the NVMe SSD:
/// A's calls and sync cost what they cost with every file on DAX, B's what they cost with no DAX,
/// to the ns.
#[test]
fn dax_files_put_the_listed_files_on_dax_and_the_others_in_the_page_cache() {
    let both = "[dax]\nmode = \"fsdax\"\npreset = \"optane_100\"\nfiles = [0x40000000]";
    let split = platform("1MiB", both);
    assert_eq!(split.dax.as_ref().unwrap().files, Some(vec![FILE_BASE]));
    let a = || vec![call(Op::Write, 0, 4096), call(Op::Read, 0, 4096), sync(Op::Write, 0)];
    let b = || vec![call(Op::Write, 512, 4096), sync(Op::Write, 512)];
    let maps = || with(map(0, 16), map(512, 16));
    // Interleaved: A's write, B's write, A's read, A's sync, B's sync.
    let (av, bv) = (a(), b());
    let trace = with(maps(), [av[0], bv[0], av[1], av[2], bv[1]]);
    let r = run(&split, trace).unwrap();
    let pc = &r.summary["page_cache"];
    let dax = &pc["dax"];
    assert_eq!(
        (u(dax, &["files"]), u(dax, &["calls"]), u(dax, &["bytes"]), u(pc, &["write_calls"]), u(pc, &["read_calls"])),
        (1, 2, 8192, 1, 0),
        "{pc}"
    );
    assert_eq!((u(pc, &["bytes_written"]), u(pc, &["sync", "fdatasync_calls"])), (4096, 2), "{pc}");
    assert_eq!(u(pc, &["sync", "writeback_pages"]), 1, "{pc}");
    assert_eq!(u(&r.summary, &["swap", "device", "bytes_written"]), 4096);
    // A alone with every file on DAX, and B alone with no DAX: the same times, split.
    let all_dax =
        run(&platform("1MiB", "[dax]\nmode = \"fsdax\"\npreset = \"optane_100\""), with(maps(), a())).unwrap();
    let no_dax = run(&platform("1MiB", ""), with(maps(), b())).unwrap();
    let (pa, pb) = (&all_dax.summary["page_cache"], &no_dax.summary["page_cache"]);
    assert_eq!(u(dax, &["io_time_ns"]), u(pa, &["io_time_ns"]), "{pa}");
    assert_eq!(u(pc, &["io_time_ns"]), u(pa, &["io_time_ns"]) + u(pb, &["io_time_ns"]), "{pc}");
    // A's fdatasync on DAX: the call and the flush, 2,100 ns; B's: the writeback of its page
    // (100 + 400 + 1,000 + 500 + the device + 3,000) and the flush (2,000).
    let dev = device_ns(&split, Op::Write, 4096);
    assert_eq!(u(pb, &["sync", "time_ns"]), 100 + 400 + 1000 + 500 + dev + 3000 + 2000);
    assert_eq!(u(pc, &["sync", "time_ns"]), 2100 + u(pb, &["sync", "time_ns"]), "{pc}");
    // The DAX file allocates on the module and commits its journal there; the page-cache file
    // delays its allocation to writeback and commits on the SSD: one commit each.
    let grow = platform_with(
        "1MiB",
        both,
        &["storage.dax_new_blocks=\"past_traced_end\"", "storage.cache_new_pages=\"past_traced_end\""],
    );
    let r = run(&grow, with(maps(), [av[0], bv[0], av[2], bv[1]])).unwrap();
    let pc = &r.summary["page_cache"];
    assert_eq!((u(pc, &["dax", "allocating_calls"]), u(pc, &["dax", "journal_commits"])), (1, 1), "{pc}");
    assert_eq!((u(pc, &["allocated_pages"]), u(pc, &["journal_commits"])), (1, 1), "{pc}");
    // Without dax.files the summary has neither key: what it reported before them.
    assert!(pa["dax"].get("io_time_ns").is_none() && pa["dax"].get("files").is_none(), "{pa}");
}

/// A bad `dax.files` is one error naming the key.
#[test]
fn bad_dax_files_are_one_error_naming_the_key() {
    let dax = |files: &str| format!("[dax]\nmode = \"fsdax\"\npreset = \"optane_100\"\nfiles = {files}");
    let err =
        |extra: &str, set: &[&str]| try_platform("1MiB", extra, set).map(|_| ()).expect_err("an error").to_string();
    for bad in ["\"WiredTigerLog.*\"", "[-4096]", "[\"0x40000000\"]", "[1.5]"] {
        let e = err(&dax(bad), &[]);
        assert!(e.contains("dax.files") && e.contains("file start addresses"), "{bad}: {e}");
    }
    let e = err(&dax("[0x40000000, 0x40000000]"), &[]);
    assert!(e.contains("dax.files") && e.contains("0x40000000 is listed twice"), "{e}");
    let e = err(&dax("[0x40000000]"), &["swap.enabled=false"]);
    assert!(e.contains("dax.files") && e.contains("no [swap] section"), "{e}");
    let e = err("[dax]\nmode = \"fsdax\"\npreset = \"optane_100\"\nfile = [0]", &[]);
    assert!(e.contains("dax.file") && e.contains("unknown key") && e.contains("files"), "{e}");
    // An empty list is valid: every file in the page cache, the module idle.
    let p = platform("1MiB", &dax("[]"));
    let r = run(&p, with(map(0, 16), [call(Op::Write, 0, 4096)])).unwrap();
    let pc = &r.summary["page_cache"];
    assert_eq!((u(pc, &["dax", "calls"]), u(pc, &["write_calls"]), u(pc, &["dax", "files"])), (0, 1, 0), "{pc}");
    // An address where the trace starts no file (a typo, another capture's layout) is an error
    // at the end of the run, not a file silently left in the page cache.
    let p = platform("1MiB", &dax("[0x1000]"));
    let e = run(&p, with(map(0, 16), [call(Op::Write, 0, 4096)])).map(|_| ()).expect_err("an error").to_string();
    assert!(e.contains("dax.files") && e.contains("lists 0x1000, where no mapping record"), "{e}");
}

#[test]
fn a_page_a_write_call_brings_back_is_not_a_refault() {
    // With refault detection on: 40 pages read by calls through 16 frames drop page 0. Reading it
    // again is a refault (workingset_refault_file one more than the trace before it); writing it
    // whole is not (filemap_add_folio with __GFP_WRITE: no test, its shadow dropped), and a read
    // after that write finds it cached.
    let p = platform_with("64KiB", "", &["os.workingset=\"all\""]);
    let head: Vec<Access> = (0..40).map(|i| call(Op::Read, (i * 7) % 40, 4096)).collect();
    let refaults = |trace: Vec<Access>| {
        let s = run(&p, trace).unwrap().summary;
        (u(&s, &["lru", "workingset_refault_file"]), u(&s, &["page_cache", "misses"]))
    };
    let (before, misses) = refaults(head.clone());
    assert!(before > 0, "the head itself refaults pages read ahead and dropped");
    let read = refaults(with(head.clone(), [call(Op::Read, 0, 4096)]));
    assert_eq!(read, (before + 1, misses + 1));
    let written = refaults(with(head.clone(), [call(Op::Write, 0, 4096)]));
    assert_eq!(written, (before, misses + 1));
    let then_read = refaults(with(head, [call(Op::Write, 0, 4096), call(Op::Read, 0, 4096)]));
    assert_eq!(then_read, (before, misses + 1));
}
