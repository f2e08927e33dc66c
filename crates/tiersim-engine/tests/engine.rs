//! Engine behaviour on hand-built platforms and traces: exact latencies, saturation, fallback,
//! swap, errors, and the OS model's invariants over random traces.

use proptest::prelude::*;
use tiersim_core::{Access, Op, Result};
use tiersim_engine::sim::{simulate, simulate_with_future, SimOptions, SimResult};
use tiersim_engine::{platform, Platform};
use tiersim_trace::format::TraceMeta;
use tiersim_trace::{AccessSource, AddrKind, TimeUnit, TraceHeader};

/// An in-memory trace.
struct Mem {
    header: TraceHeader,
    accesses: Vec<Access>,
    pos: usize,
}

impl Mem {
    fn new(unit: TimeUnit, accesses: Vec<Access>) -> Mem {
        let header = TraceHeader::new(&TraceMeta { time_unit: unit, addr_kind: AddrKind::Virtual, page_size: 4096 });
        Mem { header, accesses, pos: 0 }
    }
}

impl AccessSource for Mem {
    fn header(&self) -> &TraceHeader {
        &self.header
    }
    fn read_batch(&mut self, out: &mut Vec<Access>, max: usize) -> Result<usize> {
        let n = max.min(self.accesses.len() - self.pos).min(7); // small batches exercise refills
        out.extend_from_slice(&self.accesses[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

fn acc(cpu: u32, addr: u64, op: Op, gap: u64) -> Access {
    Access { time: gap, addr, cpu, size: 64, op, flags: 0 }
}

/// One channel at 64 GB/s (64 B = exactly 1 ns), 100 ns read / 50 ns write latency.
// Exact-cost cases: writes cost what reads do and the loaded-latency term is off.
const DRAM: &str = r#"device = "dram"
params = { channels = 1, channel_bandwidth = "64GB/s", efficiency = 1.0, read_latency = "100ns", write_latency = "50ns", write_cost = 1.0, load_linear_ns = 0.0, load_linear_write_ns = 0.0, load_queue_ns = 0.0, load_queue_write_ns = 0.0, interleave = "256B" }"#;

fn plat(text: &str, overrides: &[&str]) -> Platform {
    let mut t: toml::Table = toml::from_str(text).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.toml");
    std::fs::write(&path, toml::to_string(&t).unwrap()).unwrap();
    let o: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    t.clear();
    platform::load(path.to_str().unwrap(), &o).unwrap()
}

fn one_node(extra: &str) -> String {
    format!(
        r#"name = "t"
[host]
cpus = 4
frequency = "1GHz"
[os]
fault_latency = "0ns"
min_free = "4KiB"
{extra}
[[nodes]]
name = "dram0"
capacity = "1MiB"
cpus = "0-3"
{DRAM}
"#
    )
}

fn run(p: &Platform, policy: &str, accesses: Vec<Access>) -> Result<SimResult> {
    run_with(p, policy, "", accesses)
}

fn run_with(p: &Platform, policy: &str, params: &str, accesses: Vec<Access>) -> Result<SimResult> {
    let params: toml::Table = toml::from_str(params).unwrap();
    let (pol, _) = tiersim_policies::build(policy, Some(&params), &topo(p))?;
    simulate(p, pol, &mut Mem::new(TimeUnit::Instructions, accesses), SimOptions { check_every: 1 })
}

/// Scanner settings small enough for traces of microseconds.
const FAST_SCAN: &str = "scan_size = \"64KiB\"\nscan_period_min = \"100us\"\nscan_period_max = \"1ms\"\n";

fn topo(p: &Platform) -> tiersim_policies::Topology {
    tiersim_engine::sim::topology(p)
}

fn u(v: &serde_json::Value, path: &[&str]) -> u64 {
    let mut v = v;
    for k in path {
        v = &v[*k];
    }
    v.as_u64().unwrap_or_else(|| panic!("{path:?} = {v}"))
}

#[test]
fn single_read_and_write_latency() {
    let p = plat(&one_node(""), &[]);
    // Read: 1 ns on the channel + 100 ns = completes at 101; mlp 1 so the CPU ends at 101.
    let r = run(&p, "linux_default", vec![acc(0, 0x1000, Op::Read, 0)]).unwrap();
    assert_eq!(u(&r.summary, &["execution_time_ns"]), 101);
    assert_eq!(u(&r.summary, &["latency_ns", "max"]), 101);
    // Write: 1 ns + 50 ns.
    let r = run(&p, "linux_default", vec![acc(0, 0x1000, Op::Write, 0)]).unwrap();
    assert_eq!(u(&r.summary, &["execution_time_ns"]), 51);
    // A first-touch fault of 1 us is paid before the access is issued.
    let p = plat(&one_node(""), &["os.fault_latency=\"1us\""]);
    let r = run(&p, "linux_default", vec![acc(0, 0x1000, Op::Read, 0)]).unwrap();
    assert_eq!(u(&r.summary, &["execution_time_ns"]), 1101);
    assert_eq!(u(&r.summary, &["faults", "fault_time_ns"]), 1000);
    // 50 instructions at CPI 1 and 1 GHz before the access: +50 ns.
    let p = plat(&one_node(""), &[]);
    let r = run(&p, "linux_default", vec![acc(0, 0x1000, Op::Read, 50)]).unwrap();
    assert_eq!(u(&r.summary, &["execution_time_ns"]), 151);
}

/// stats.replay_accesses ends the run at a record of the trace: the same run as the trace cut
/// there (the cut-off CPU's later work, here a long gap and a read, counts nothing), and one clear
/// error for a window with nothing in it or past the trace.
#[test]
fn replay_accesses_ends_the_run_at_a_record() {
    // CPUs 0 and 1 read at 0 (CPU 1's read queued 1 ns behind CPU 0's on the one channel: done at
    // 102), then CPU 1 runs 10,000 instructions (10 us) and reads again: 10,102 + 1 + 100 = 10,203.
    let trace = vec![acc(0, 0x1000, Op::Read, 0), acc(1, 0x2000, Op::Read, 0), acc(1, 0x3000, Op::Read, 10_000)];
    let whole = run(&plat(&one_node(""), &[]), "linux_default", trace.clone()).unwrap();
    assert_eq!(u(&whole.summary, &["execution_time_ns"]), 10_203);
    let cut = run(&plat(&one_node(""), &["stats.replay_accesses=2"]), "linux_default", trace.clone()).unwrap();
    let first_two = run(&plat(&one_node(""), &[]), "linux_default", trace[..2].to_vec()).unwrap();
    assert_eq!(u(&cut.summary, &["execution_time_ns"]), 102);
    assert_eq!(cut.summary["execution_time_ns"], first_two.summary["execution_time_ns"]);
    assert_eq!(u(&cut.summary, &["accesses"]), 2);
    assert_eq!(u(&cut.summary, &["trace_accesses"]), 2);
    // All of the trace: the same as unset.
    let all = run(&plat(&one_node(""), &["stats.replay_accesses=3"]), "linux_default", trace.clone()).unwrap();
    assert_eq!(all.summary["execution_time_ns"], whole.summary["execution_time_ns"]);
    // With a warm-up: the window is the records between the two.
    let p = plat(&one_node(""), &["stats.warmup_accesses=1", "stats.replay_accesses=2"]);
    assert_eq!(u(&run(&p, "linux_default", trace.clone()).unwrap().summary, &["accesses"]), 1);
    let p = plat(&one_node(""), &["stats.warmup_accesses=2", "stats.replay_accesses=2"]);
    let e = run(&p, "linux_default", trace.clone()).err().unwrap().to_string();
    assert!(e.contains("stats.warmup_accesses = 2 is not smaller than stats.replay_accesses = 2"), "{e}");
    let p = plat(&one_node(""), &["stats.replay_accesses=4"]);
    let e = run(&p, "linux_default", trace).err().unwrap().to_string();
    assert!(e.contains("stats.replay_accesses = 4 is more than the trace's 3 accesses"), "{e}");
}

/// stats.warmup_accesses = N: the records before file position N are warm-up; measuring starts
/// when the first record at position N or later is issued and counts every access issued from
/// then on. With two CPUs the issue (simulated time) order is not the file's.
#[test]
fn warmup_accesses_starts_at_the_first_measured_records_issue() {
    // One channel, 1 ns a transfer + 100 ns, 1 instruction = 1 ns, mlp 1. CPU 0 reads at 0
    // (done 101), 101 (202), 202 (303), then 100 instructions later at 403 (504); CPU 1 starts
    // 250 instructions in, reads at 250 (done 351) and again at 351 (452).
    let trace = vec![
        acc(0, 0x1000, Op::Read, 0),   // #0, issued 1st at 0
        acc(1, 0x8000, Op::Read, 250), // #1, issued 4th at 250
        acc(0, 0x2000, Op::Read, 0),   // #2, issued 2nd at 101
        acc(0, 0x3000, Op::Read, 0),   // #3, issued 3rd at 202
        acc(0, 0x4000, Op::Read, 100), // #4, issued 6th at 403
        acc(1, 0x9000, Op::Read, 0),   // #5, issued 5th at 351
    ];
    let window = |n: u64| {
        let r = run(&plat(&one_node(""), &[&format!("stats.warmup_accesses={n}")]), "linux_default", trace.clone())
            .unwrap();
        (u(&r.summary, &["accesses"]), u(&r.summary, &["execution_time_ns"]), u(&r.summary, &["warmup_accesses"]))
    };
    let whole = run(&plat(&one_node(""), &[]), "linux_default", trace.clone()).unwrap();
    assert_eq!((u(&whole.summary, &["accesses"]), u(&whole.summary, &["execution_time_ns"])), (6, 504));
    // N = 1: #1..#5 are past it; the first issued is #2 at 101: 5 measured, 101..504. (Starting
    // at #1's own issue, 250, would have left #2 and #3 in the warm-up.)
    assert_eq!(window(1), (5, 403, 1));
    // N = 2: #2 at 101 again; #1, before it in the file, is issued at 250 and measured. (The
    // first two accesses issued, #0 and #2, as warm-up would have started at #3: 4 measured.)
    assert_eq!(window(2), (5, 403, 2));
    // N = 3: #3 at 202: #3, #1, #5, #4.
    assert_eq!(window(3), (4, 302, 3));
    // N = 4: #5, past #4 in the file, is issued first, at 351: #5 and #4 measured. (From #4's
    // own issue, 403, #5 would have been warm-up.)
    assert_eq!(window(4), (2, 153, 4));
    // N = 5: #5 at 351, and #4, before it in the file, issued after it at 403. (Counting five
    // issued accesses as warm-up would have measured #4 alone.)
    assert_eq!(window(5), (2, 153, 5));
    // Same seed, same bytes.
    let again = |n: u64| {
        let p = plat(&one_node(""), &[&format!("stats.warmup_accesses={n}")]);
        run(&p, "linux_default", trace.clone()).unwrap().summary.to_string()
    };
    assert_eq!(again(2), again(2));
    // The trace's length or more: one error.
    let e = run(&plat(&one_node(""), &["stats.warmup_accesses=6"]), "linux_default", trace).err().unwrap().to_string();
    assert!(e.contains("stats.warmup_accesses = 6 is not smaller than the trace's 6 accesses"), "{e}");
}

/// Position N past the first batch (the test source reads 7 records at a time), with both CPUs'
/// accesses queued before it: 20 records alternating CPUs, N = 15 (CPU 1's 8th, CPU 0's 9th is
/// #16).
#[test]
fn warmup_position_in_a_later_batch() {
    let trace: Vec<Access> = (0..20u64).map(|i| acc((i % 2) as u32, 0x1000 * (i + 1), Op::Read, 0)).collect();
    // Each CPU reads back to back; the two interleave on the channel: CPU 0's k-th read is
    // issued at 101k, CPU 1's at 101k + 1 (after its first, queued 1 ns behind CPU 0's).
    let p = plat(&one_node(""), &["stats.warmup_accesses=15"]);
    let r = run(&p, "linux_default", trace.clone()).unwrap();
    let whole = run(&plat(&one_node(""), &[]), "linux_default", trace).unwrap();
    // Issued in file order here: #15..#19 measured, from CPU 1's 8th read.
    assert_eq!(u(&r.summary, &["accesses"]), 5);
    let end = u(&whole.summary, &["execution_time_ns"]);
    assert_eq!(end, 1011);
    assert_eq!(u(&r.summary, &["execution_time_ns"]), end - 708);
}

/// host.thread_start = "file_order": a CPU's first access waits until every record before it in
/// the file is done (each one's CPU's clock past it), across a batch boundary (the test source
/// reads 7 records at a time) and in a chain; "read" (the default) starts every CPU when its
/// records are read, here at the run's start.
#[test]
fn threads_start_in_file_order() {
    // One channel, 1 ns a transfer + 100 ns, 1 instruction = 1 ns, mlp 1.
    let trace = vec![
        acc(0, 0x1000, Op::Read, 0),  // #0
        acc(0, 0x2000, Op::Read, 0),  // #1
        acc(1, 0x3000, Op::Read, 10), // #2: CPU 1's first
        acc(2, 0x4000, Op::Read, 0),  // #3: CPU 2's first, after CPU 1's first
        acc(0, 0x5000, Op::Read, 0),  // #4
        acc(0, 0x6000, Op::Read, 0),  // #5
        acc(1, 0x7000, Op::Read, 0),  // #6, the first batch's last
        acc(3, 0x8000, Op::Read, 5),  // #7: CPU 3's first, opening the second batch
        acc(0, 0x9000, Op::Read, 0),  // #8
    ];
    // file_order. CPU 0: #0 at 0 (done 101), #1 at 101 (202), #4 at 202 (303), #5 at 303 (404),
    // #8 at 404 (505). CPU 1 starts when #0 and #1 are done, CPU 0's clock 202: 202 + 10 = 212
    // (313); #6 at 313, ahead of CPU 2 by its id, (414). CPU 2 starts when #2 is done too, at
    // 313: 1 ns behind #6 on the channel (415). CPU 3 starts when #0..#6 are done: CPU 0 past #5
    // at 404, CPU 1 past #6 at 414, CPU 2 past #3 at 415; 415 + 5 = 420 (521), the run's end.
    // (Waiting for #6 alone, the record just before it, it would start at 419.)
    let ordered = |extra: &[&str]| {
        let mut o = vec!["host.thread_start=\"file_order\""];
        o.extend_from_slice(extra);
        run(&plat(&one_node(""), &o), "linux_default", trace.clone()).unwrap()
    };
    let r = ordered(&[]);
    assert_eq!(u(&r.summary, &["execution_time_ns"]), 521);
    assert_eq!(u(&r.summary, &["accesses"]), 9);
    // Latencies: eight 101 ns and CPU 2's 102 ns.
    assert_eq!(u(&r.summary, &["latency_ns", "max"]), 102);
    // read: CPU 0 as above; CPU 2 at 0, 1 ns behind CPU 0 (102); CPU 1 at 10 (111), #6 at
    // 111 (212); CPU 3's records are read once CPU 2 has run dry, at simulated time 0: at 5
    // (106). The run ends with CPU 0's #8 at 505.
    let r = run(&plat(&one_node(""), &[]), "linux_default", trace.clone()).unwrap();
    assert_eq!(u(&r.summary, &["execution_time_ns"]), 505);
    // A warm-up by the file's position with the threads in file order: measuring starts at
    // #7's own issue, 420; #8, past it in the file but issued at 404, is warm-up (CPU 0 ran
    // ahead of the program). #7 alone measured, 420..521. (From the first record past the
    // position to be issued, the rule with `read`, #8 and #7 would be measured from 404.)
    let r = ordered(&["stats.warmup_accesses=7"]);
    assert_eq!((u(&r.summary, &["accesses"]), u(&r.summary, &["execution_time_ns"])), (1, 101));
    // From #3 (CPU 2's first, issued at 313): #3 and what is issued after it, #8 (404) and #7;
    // #5 (303) and #6 (313 too, but issued first: the lower CPU id), past #3 in the file, are
    // warm-up. 313..521.
    let r = ordered(&["stats.warmup_accesses=3"]);
    assert_eq!((u(&r.summary, &["accesses"]), u(&r.summary, &["execution_time_ns"])), (3, 208));
    // One CPU: nothing waits, the same run in both modes.
    let one: Vec<Access> = trace.iter().map(|a| Access { cpu: 0, ..*a }).collect();
    let a = run(&plat(&one_node(""), &["host.thread_start=\"file_order\""]), "linux_default", one.clone()).unwrap();
    let b = run(&plat(&one_node(""), &[]), "linux_default", one).unwrap();
    assert_eq!(a.summary.to_string(), b.summary.to_string());
}

#[test]
fn a_thread_passed_over_while_dry_resumes_at_the_current_time() {
    // CPU 1 reads once (#0), has nothing in the next five of CPU 0's reads (#1..#8), then reads
    // six times (#9..#14). One channel, 1 ns a transfer + 100 ns, 1 instruction = 1 ns, mlp 1;
    // the source's batches are 7 records. CPU 0: #1 at 0, #2 at 101, ... #8 at 707 (808).
    let mut trace = vec![acc(1, 0x1000, Op::Read, 0)];
    trace.extend((0..8).map(|k| acc(0, 0x10_000 + 0x1000 * k, Op::Read, 0)));
    trace.extend((0..6).map(|k| acc(1, 0x2000 + 0x1000 * k, Op::Read, 0)));
    // read_ahead 2: CPU 1 runs dry after #0 (0, 102 behind #1) with 5 records waiting, so CPU 0
    // goes on without it; #9 is read once CPU 0 has issued #5 at 404, and CPU 1 resumes then:
    // #9 at 404, 1 ns behind #5 (506), then one each 101 ns, each 1 ns behind CPU 0's at 505,
    // 606, 707: #14 at 910 (1011). Every latency 101 or 102 ns. Before, CPU 1 resumed from its
    // own clock, 102: #9 issued 302 ns in the past, out of order, waiting for the channel until
    // 405 (a latency of 404 ns), and ended at 1011 all the same.
    let r = run(&plat(&one_node(""), &["host.read_ahead=2"]), "linux_default", trace.clone()).unwrap();
    assert_eq!(u(&r.summary, &["execution_time_ns"]), 1011);
    assert_eq!(u(&r.summary, &["out_of_order_issues"]), 0);
    assert_eq!(u(&r.summary, &["latency_ns", "max"]), 102);
    // The default read_ahead reads on while CPU 1 is dry: it never was passed over, and runs
    // beside CPU 0 from its own clock: #9 at 102, 1 ns behind #2 (203), ... #14 at 607 (708).
    let r = run(&plat(&one_node(""), &[]), "linux_default", trace).unwrap();
    assert_eq!(u(&r.summary, &["execution_time_ns"]), 808);
    assert_eq!(u(&r.summary, &["out_of_order_issues"]), 0);
    assert_eq!(u(&r.summary, &["latency_ns", "max"]), 102);
}

#[test]
fn saturated_channel_queues_fcfs() {
    let p = plat(&one_node(""), &[]);
    // Four CPUs issue at t = 0 to the one channel: served 1 ns apart, latencies 101..104.
    let r = run(&p, "linux_default", (0..4).map(|c| acc(c, 0x1000 + 64 * c as u64, Op::Read, 0)).collect()).unwrap();
    assert_eq!(u(&r.summary, &["execution_time_ns"]), 104);
    assert_eq!(u(&r.summary, &["latency_ns", "max"]), 104);
    assert_eq!(u(&r.summary, &["latency_ns", "p50"]), 102);
    // mlp 2: the CPU stalls 101 / 2 = 50.5 ns, so its second read issues at 50 ns, finds the
    // channel idle, and completes at 151.
    let p = plat(&one_node(""), &["host.mlp=2"]);
    let r = run(&p, "linux_default", vec![acc(0, 0x1000, Op::Read, 0), acc(0, 0x2000, Op::Read, 0)]).unwrap();
    assert_eq!(u(&r.summary, &["execution_time_ns"]), 151);
}

#[test]
fn a_posted_write_costs_its_cpu_nothing() {
    // A write then a read from one CPU. Stalled (the default): the write's 1 + 50 ns hold the CPU,
    // the read issues at 51 and completes at 152. Posted: the read issues at 0, waits 1 ns for the
    // channel behind the write, and completes at 102; the write still reaches the device.
    let trace = || vec![acc(0, 0x1000, Op::Write, 0), acc(0, 0x2000, Op::Read, 0)];
    let r = run(&plat(&one_node(""), &[]), "linux_default", trace()).unwrap();
    assert_eq!(u(&r.summary, &["execution_time_ns"]), 152);
    let r = run(&plat(&one_node(""), &["host.writes=\"posted\""]), "linux_default", trace()).unwrap();
    assert_eq!(u(&r.summary, &["execution_time_ns"]), 102);
    assert_eq!(u(&r.summary, &["latency_ns", "max"]), 102);
    assert_eq!(u(&r.summary, &["accesses"]), 2);
}

#[test]
fn a_faulting_access_does_not_block_the_channel_for_others() {
    let p = plat(&one_node(""), &["os.fault_latency=\"1us\""]);
    // CPU 0: first touch of X (fault 0..1000, read done at 1101), then first touch of Z at 1101
    // (fault until 2101). CPU 1 reads X at 1500, while CPU 0 is in its fault: the channel is
    // idle, so 101 ns. (Issuing CPU 0's Z read when its fault began, at 2101, would have
    // queued CPU 1 behind it: 702 ns.)
    let a = vec![acc(0, 0x1000, Op::Read, 0), acc(1, 0x1000, Op::Read, 1500), acc(0, 0x5000, Op::Read, 0)];
    let r = run(&p, "linux_default", a).unwrap();
    assert_eq!(u(&r.summary, &["latency_ns", "max"]), 101, "{}", r.summary);
    assert_eq!(u(&r.summary, &["execution_time_ns"]), 2202);
    assert_eq!(u(&r.summary, &["faults", "fault_time_ns"]), 2000);
}

#[test]
fn open_loop_issues_at_trace_times() {
    let p = plat(&one_node(""), &["host.mode=open"]);
    let (pol, _) = tiersim_policies::build("linux_default", None, &topo(&p)).unwrap();
    // ns trace, absolute times 1000, 1010, 1020 and a burst of two at 1020 (relative 0..20).
    // Reads at 0, 10, 20 find the channel idle: 101 ns each; the burst's second read queues
    // 1 ns behind the first. Execution time = last completion = 20 + 1 + 1 + 100 = 122.
    let a: Vec<_> = [(1000, 0x1000), (1010, 0x1040), (1020, 0x1080), (1020, 0x10c0)]
        .iter()
        .map(|&(t, addr)| Access { time: t, addr, cpu: 0, size: 64, op: Op::Read, flags: 0 })
        .collect();
    let r = simulate(&p, pol, &mut Mem::new(TimeUnit::Ns, a), SimOptions { check_every: 1 }).unwrap();
    assert_eq!(u(&r.summary, &["execution_time_ns"]), 122);
    assert_eq!(u(&r.summary, &["latency_ns", "max"]), 102);
    assert_eq!(u(&r.summary, &["latency_ns", "p50"]), 101);
}

const TWO_SOCKETS: &str = r#"name = "t2"
[host]
cpus = 2
sockets = 2
frequency = "1GHz"
remote_socket_latency = "60ns"
[os]
fault_latency = "0ns"
min_free = "4KiB"
[[nodes]]
name = "dram0"
capacity = "64KiB"
cpus = "0"
socket = 0
device = "dram"
params = { channels = 1, channel_bandwidth = "64GB/s", efficiency = 1.0, read_latency = "100ns", write_latency = "50ns", write_cost = 1.0, load_linear_ns = 0.0, load_linear_write_ns = 0.0, load_queue_ns = 0.0, load_queue_write_ns = 0.0 }
[[nodes]]
name = "dram1"
capacity = "64KiB"
cpus = "1"
socket = 1
device = "dram"
params = { channels = 1, channel_bandwidth = "64GB/s", efficiency = 1.0, read_latency = "100ns", write_latency = "50ns", write_cost = 1.0, load_linear_ns = 0.0, load_linear_write_ns = 0.0, load_queue_ns = 0.0, load_queue_write_ns = 0.0 }
"#;

#[test]
fn remote_socket_penalty_and_fallback() {
    let p = plat(TWO_SOCKETS, &[]);
    // CPU 0 touches the page (node 0), then CPU 1 reads it remotely: 101 + 60 ns.
    let r = run(&p, "linux_default", vec![acc(0, 0x1000, Op::Read, 0), acc(1, 0x1000, Op::Read, 500)]).unwrap();
    assert_eq!(u(&r.summary, &["latency_ns", "max"]), 161);
    // 16 pages per node; min_free (8 KiB) is split by node size, so min = low = high = 1 page
    // per node, and a node takes 15 pages before the allocator falls back to the other socket.
    let p = plat(TWO_SOCKETS, &["os.min_free=\"8KiB\""]);
    let a: Vec<_> = (0..20).map(|i| acc(0, 0x10000 + i * 4096, Op::Write, 0)).collect();
    let r = run(&p, "linux_default", a).unwrap();
    assert_eq!(u(&r.summary["nodes"][0], &["final_pages"]), 15);
    assert_eq!(u(&r.summary["nodes"][1], &["final_pages"]), 5);
}

#[test]
fn autonuma_migrates_after_a_hint_fault_with_exact_costs() {
    let p = plat(TWO_SOCKETS, &[]);
    // CPU 0, the trace's first thread, reads its page W (node 0, 100 ns + 1 ns of queue: its
    // clock is at 101); CPU 1 touches X (node 1). CPU 0 has run for 2101 ns, past its first
    // period (scan_delay, 1 us), when it reads X: it runs the first window, and the touched
    // address space is W and X, so the walk marks both and wraps: 2 PTEs x 2 ns + 2 us TLB
    // flush = 2004 ns, and the read retries at 4105. X is PROT_NONE: hint fault (1 us); no last
    // CPU, so the filter passes and X moves to node 0: migrate 3 us + TLB 2 us + copy (4 KiB at
    // 64 GB/s = 64 ns on each side; node 1's read ends at 4105 + 64 + 100 = 4269) = 6164 ns. The
    // read is reissued at 10269 and is local: 10370.
    let params = format!("{FAST_SCAN}scan_delay = \"1us\"");
    let a = vec![acc(0, 0x5000, Op::Read, 0), acc(1, 0x1000, Op::Read, 0), acc(0, 0x1000, Op::Read, 2000)];
    let r = run_with(&p, "autonuma", &params, a).unwrap();
    let s = &r.summary;
    assert_eq!(u(s, &["execution_time_ns"]), 10370, "{s}");
    assert_eq!(u(s, &["tiering", "scans"]), 1);
    assert_eq!(u(s, &["tiering", "scan_time_ns"]), 2004);
    assert_eq!(u(s, &["tiering", "hint_faults"]), 1);
    assert_eq!(u(s, &["tiering", "migrations"]), 1);
    assert_eq!(u(s, &["tiering", "promotions"]), 0, "DRAM to DRAM is no promotion");
    assert_eq!(u(s, &["tiering", "migration_time_ns"]), 5164);
    assert_eq!(u(s, &["tiering", "migrated_bytes"]), 4096);
    assert_eq!(u(&s["nodes"][0], &["final_pages"]), 2);
    assert_eq!(u(&s["nodes"][0], &["migrated_in"]), 1);
    assert_eq!(u(&s["nodes"][1], &["migrated_out"]), 1);
}

/// host.tlb_entries: a direct-mapped table per CPU; a miss waits tlb_miss_latency before the
/// access issues.
#[test]
fn tlb_misses_cost_a_walk_per_cpu_and_slot() {
    let p = plat(&one_node(""), &["host.tlb_entries=2", "host.tlb_miss_latency=\"30ns\""]);
    // Pages 1, 1, 2, 1, 3, 1 on CPU 0: slots 1, 1, 0, 1, 1, 1. Misses: 1 (cold), 2 (cold), 3
    // (evicts 1 from slot 1), 1 again: 4 walks. Each read takes 1 ns of channel and 100 ns and
    // starts after the one before: 6 x 101 + 4 x 30 = 726 ns.
    let pages = [1u64, 1, 2, 1, 3, 1];
    let a: Vec<Access> = pages.iter().map(|&v| acc(0, v << 12, Op::Read, 0)).collect();
    let r = run(&p, "linux_default", a.clone()).unwrap();
    assert_eq!(u(&r.summary, &["execution_time_ns"]), 726);
    assert_eq!(u(&r.summary, &["tlb", "misses"]), 4);
    assert_eq!(u(&r.summary, &["tlb", "miss_time_ns"]), 120);
    // Without the model the same reads take 606 ns, and the summary has no tlb section.
    let plain = run(&plat(&one_node(""), &[]), "linux_default", a).unwrap();
    assert_eq!(u(&plain.summary, &["execution_time_ns"]), 606);
    assert!(plain.summary.get("tlb").is_none());
    // CPU 1 has its own table: its read of page 1 after CPU 0's walks too.
    let r = run(&p, "linux_default", vec![acc(0, 0x1000, Op::Read, 0), acc(1, 0x1000, Op::Read, 500)]).unwrap();
    assert_eq!(u(&r.summary, &["tlb", "misses"]), 2);
    // tlb_lookups = "reads": a trace's writes (a cache's dirty evictions) are not translated.
    let p =
        plat(&one_node(""), &["host.tlb_entries=2", "host.tlb_miss_latency=\"30ns\"", "host.tlb_lookups=\"reads\""]);
    let r = run(&p, "linux_default", vec![acc(0, 0x1000, Op::Read, 0), acc(0, 0x9000, Op::Write, 0)]).unwrap();
    assert_eq!(u(&r.summary, &["tlb", "misses"]), 1);
    assert_eq!(u(&r.summary, &["execution_time_ns"]), 131 + 51);
    // A table that is not a power of two is refused, naming the key.
    let p = plat(&one_node(""), &["host.tlb_entries=3"]);
    let e = run(&p, "linux_default", vec![acc(0, 0x1000, Op::Read, 0)]).err().map(|e| e.to_string());
    assert!(e.as_deref().is_some_and(|e| e.contains("host.tlb_entries") && e.contains("power of two")), "{e:?}");
    // Two ways: pages 1 and 3 share a set and both stay, so the six reads walk three times.
    let p = plat(&one_node(""), &["host.tlb_entries=4", "host.tlb_ways=2", "host.tlb_miss_latency=\"30ns\""]);
    let a: Vec<Access> = pages.iter().map(|&v| acc(0, v << 12, Op::Read, 0)).collect();
    let r = run(&p, "linux_default", a).unwrap();
    assert_eq!(u(&r.summary, &["tlb", "misses"]), 3);
    assert_eq!(u(&r.summary, &["execution_time_ns"]), 6 * 101 + 3 * 30);
}

/// A scan window flushes every CPU's TLB (x86 flush_tlb_mm_range beyond 33 pages): in the
/// hint-fault case above, CPU 0's walk of X after the window is its third miss, and the window
/// is one flush.
#[test]
fn a_scan_window_flushes_the_tlbs() {
    let p = plat(TWO_SOCKETS, &["host.tlb_entries=16", "host.tlb_miss_latency=\"30ns\""]);
    let params = format!("{FAST_SCAN}scan_delay = \"1us\"");
    let a = vec![
        acc(0, 0x5000, Op::Read, 0),
        acc(1, 0x1000, Op::Read, 0),
        acc(0, 0x5000, Op::Read, 0),
        acc(0, 0x1000, Op::Read, 2000),
    ];
    let r = run_with(&p, "autonuma", &params, a).unwrap();
    let s = &r.summary;
    assert_eq!(u(s, &["tiering", "scans"]), 1, "{s}");
    assert_eq!(u(s, &["tlb", "flushes"]), 1, "{s}");
    // W on CPU 0 (then a hit), X on CPU 1, X on CPU 0 after the window.
    assert_eq!(u(s, &["tlb", "misses"]), 3, "{s}");
    assert_eq!(u(s, &["tiering", "migrations"]), 1);
}

/// A socket with a DRAM node and a slow CPU-less node of 16 pages each. With min_free 16 KiB
/// (2 pages per node) and watermark_scale_factor 1000 (tmp = 1 page), each node has min 2,
/// low 3, high 4 and a promo watermark of 5.
const TIERED: &str = r#"name = "tiered"
[host]
cpus = 1
frequency = "1GHz"
[os]
fault_latency = "0ns"
min_free = "16KiB"
watermark_scale_factor = 1000
[[nodes]]
name = "dram0"
capacity = "64KiB"
cpus = "0"
device = "dram"
params = { channels = 1, channel_bandwidth = "64GB/s", efficiency = 1.0, read_latency = "100ns", write_latency = "50ns", write_cost = 1.0, load_linear_ns = 0.0, load_linear_write_ns = 0.0, load_queue_ns = 0.0, load_queue_write_ns = 0.0 }
[[nodes]]
name = "slow0"
capacity = "64KiB"
device = "dram"
params = { channels = 1, channel_bandwidth = "64GB/s", efficiency = 1.0, read_latency = "300ns", write_latency = "300ns" }
"#;

/// Pages 0..13 first touched (DRAM takes 13, down to its low watermark; page 13 spills to the
/// slow node), then page 13 read again after the first scan, and again after the next one. With
/// scan_delay 10 us and FAST_SCAN's 100 us period, the thread is due at 10 us of run time, where
/// the new mm's first task_numa_work only sets numa_next_scan, and scans at 110 us.
fn tiered_trace() -> Vec<Access> {
    let mut a: Vec<_> = (0..14).map(|i| acc(0, i * 4096, Op::Write, 0)).collect();
    a.push(acc(0, 13 * 4096, Op::Read, 120_000));
    a.push(acc(0, 13 * 4096, Op::Read, 400_000));
    a
}

#[test]
fn the_scanner_waits_32x_its_own_time_before_the_next_window() {
    // Page 0 touched, then read every 10 us for 10 ms by one thread. AutoNUMA's windows come
    // every period of the thread's run time (100 us, min = max), plus 32x the last window's
    // cost: one PTE's pte_scan_cost (the TLB shootdown set to 0).
    let mut a = vec![acc(0, 0, Op::Write, 0)];
    a.extend((0..1000).map(|_| acc(0, 0, Op::Read, 10_000)));
    let scans = |pte_cost: &str| {
        let p = plat(TIERED, &[&format!("os.pte_scan_cost=\"{pte_cost}\""), "os.tlb_shootdown=\"0ns\""]);
        let params =
            "scan_size = \"64KiB\"\nscan_period_min = \"100us\"\nscan_period_max = \"100us\"\nscan_delay = \"10us\"";
        let r = run_with(&p, "autonuma", params, a.clone()).unwrap();
        (u(&r.summary, &["tiering", "scans"]), u(&r.summary, &["tiering", "scan_time_ns"]))
    };
    let (free_scans, free_time) = scans("0ns");
    assert_eq!(free_time, 0);
    // A window costing 1 us (one page at 1 us) holds the next back 32 us: 132 us apart instead
    // of 100, so about 100 / 132 as many windows (task_numa_work's 3 % cap).
    let (costly_scans, costly_time) = scans("1us");
    assert_eq!(costly_time, costly_scans * 1000);
    let ratio = costly_scans as f64 / free_scans as f64;
    assert!((ratio - 100.0 / 132.0).abs() < 0.03, "{free_scans} windows free, {costly_scans} at 1 us: {ratio}");
}

#[test]
fn a_thread_scans_once_it_has_run_its_own_period() {
    // CPU 0, the trace's first thread, runs 400 us and stops: less than its first period
    // (scan_delay, 1 ms). CPU 1 starts at 500 us and reads its page every 10.1 us (10 us of
    // compute, 101 ns of local DRAM); its creation, while the mm has one user, sets
    // numa_next_scan 1 ms ahead. A thread created after the first counts its own run time from
    // node_stamp = task_scan_max's 1 ms read as 1 ns + two ticks (init_numa_balancing, 6.1):
    // with the 4 ms tick, CPU 1 scans once it has run 9 ms and 1 ns, about its 891st read;
    // without ticks, after 1 ms and 1 ns, its 99th.
    let trace = |reads: u64| {
        let mut a = vec![acc(0, 0, Op::Write, 0), acc(0, 0x1000, Op::Read, 400_000), acc(1, 0x2000, Op::Read, 500_000)];
        a.extend((0..reads).map(|_| acc(1, 0x2000, Op::Read, 10_000)));
        a
    };
    let params = format!("{FAST_SCAN}scan_delay = \"1ms\"");
    let scans = |tick: &str, reads: u64| {
        let p = plat(TWO_SOCKETS, &[&format!("os.tick=\"{tick}\"")]);
        u(&run_with(&p, "autonuma", &params, trace(reads)).unwrap().summary, &["tiering", "scans"])
    };
    assert_eq!(scans("4ms", 850), 0);
    assert!(scans("4ms", 950) >= 1);
    assert_eq!(scans("0ns", 90), 0);
    assert!(scans("0ns", 110) >= 1);
    // One thread alone: at 1 ms of run time the new mm's first task_numa_work only sets
    // numa_next_scan 1 ms ahead; its next stamp at or past it (every 100 us) scans, at 2 ms.
    let alone = |reads: u64| {
        let mut a = vec![acc(0, 0, Op::Write, 0)];
        a.extend((0..reads).map(|_| acc(0, 0, Op::Read, 10_000)));
        u(&run_with(&plat(TWO_SOCKETS, &[]), "autonuma", &params, a).unwrap().summary, &["tiering", "scans"])
    };
    assert_eq!(alone(190), 0);
    assert!(alone(210) >= 1);
}

#[test]
fn autonuma_never_promotes_into_a_full_node() {
    let p = plat(TIERED, &[]);
    let r = run_with(&p, "autonuma", &format!("{FAST_SCAN}scan_delay = \"10us\""), tiered_trace()).unwrap();
    let s = &r.summary;
    // Both hint faults want node 0, which has 3 free pages, not more than high + 1 = 5.
    assert_eq!(u(s, &["tiering", "hint_faults"]), 2, "{s}");
    assert_eq!(u(s, &["tiering", "failed_promotions"]), 2);
    assert_eq!(u(s, &["tiering", "migrations"]), 0);
    assert_eq!(u(s, &["tiering", "demotions"]), 0);
    assert_eq!(u(&s["nodes"][0], &["final_pages"]), 13);
    assert_eq!(u(&s["nodes"][1], &["final_pages"]), 1);
}

#[test]
fn autonuma_leaves_a_single_threaded_programs_local_pages_alone() {
    // tiered_trace's thread, then page 0 (DRAM, its own node) read after each scan too. While the
    // mm has one user, change_pte_range leaves pages on the running thread's node as they are
    // (mm/mprotect.c, 6.1): only page 13's two reads fault. With a second thread (CPU 1 reading
    // page 0 once the pages are placed) every present page is marked, and page 0's reads fault
    // too.
    let text = TIERED.replace("cpus = 1", "cpus = 2").replace("cpus = \"0\"", "cpus = \"0-1\"");
    let p = plat(&text, &[]);
    let trace = |second: bool| {
        let mut a: Vec<_> = (0..14).map(|i| acc(0, i * 4096, Op::Write, 0)).collect();
        if second {
            a.push(acc(1, 0, Op::Read, 0));
        }
        for gap in [120_000, 280_000] {
            a.push(acc(0, 13 * 4096, Op::Read, gap));
            a.push(acc(0, 0, Op::Read, 0));
        }
        a
    };
    let faults = |second: bool| {
        let r = run_with(&p, "autonuma", &format!("{FAST_SCAN}scan_delay = \"10us\""), trace(second)).unwrap();
        (u(&r.summary, &["tiering", "hint_faults"]), u(&r.summary, &["tiering", "scans"]))
    };
    let (alone, alone_scans) = faults(false);
    assert_eq!(alone, 2, "one thread: {alone_scans} scans");
    let (both, both_scans) = faults(true);
    assert_eq!(both, 4, "two threads: {both_scans} scans");
}

#[test]
fn a_promotion_after_a_pass_doubles_the_tiering_mode_period() {
    // tiered_trace's pages, then page 13 read every 10 us for 2 ms. The window at 110 us marks
    // it and its fault fails to promote (kswapd makes room, numab_tiering_demotes_...); the
    // window at 210 us marks it again and its fault promotes it: the first fault recorded
    // since a pass ended (tiering mode records only promotions, private and remote), so
    // update_task_scan_period doubles the period, 100 -> 200 us, and numa_next_scan moves 200
    // us ahead. Windows then come every 200 us (nothing faults again: the three demoted pages
    // are never read): 2 + (2,000 - 210) / 200 = 10 in all, where growing by 3/10 would make
    // 2 + 1,790 / 130 = 15.
    let p = plat(TIERED, &["os.pte_scan_cost=\"0ns\"", "os.tlb_shootdown=\"0ns\""]);
    let mut a: Vec<_> = (0..14).map(|i| acc(0, i * 4096, Op::Write, 0)).collect();
    a.extend((0..200).map(|_| acc(0, 13 * 4096, Op::Read, 10_000)));
    let r = run_with(&p, "numab_tiering", &format!("{FAST_SCAN}scan_delay = \"10us\""), a).unwrap();
    let t = &r.summary["tiering"];
    assert_eq!(u(t, &["promotions"]), 1, "{t}");
    assert_eq!(u(t, &["hint_faults"]), 2, "{t}");
    assert_eq!(u(t, &["scans"]), 10, "{t}");
}

#[test]
fn numab_tiering_demotes_to_make_room_then_promotes() {
    let p = plat(TIERED, &[]);
    let r = run_with(&p, "numab_tiering", &format!("{FAST_SCAN}scan_delay = \"10us\""), tiered_trace()).unwrap();
    let s = &r.summary;
    // First hint fault on page 13: promotion fails (3 free, not > 5) and wakes kswapd on node 0,
    // which demotes LRU victims until free > promo (5): 3 pages. The next scan marks page 13
    // again; its fault finds 6 free pages and promotes it.
    assert_eq!(u(s, &["tiering", "hint_faults"]), 2, "{s}");
    assert_eq!(u(s, &["tiering", "failed_promotions"]), 1);
    assert_eq!(u(s, &["tiering", "demotions"]), 3);
    assert_eq!(u(s, &["tiering", "promotions"]), 1);
    assert_eq!(u(s, &["tiering", "migrations"]), 4);
    assert_eq!(u(s, &["tiering", "migrated_bytes"]), 4 * 4096);
    assert_eq!(u(&s["nodes"][0], &["final_pages"]), 11);
    assert_eq!(u(&s["nodes"][1], &["final_pages"]), 3);
    // Tiering mode scans only the slow node: DRAM pages never fault.
    let linux = run(&p, "linux_default", tiered_trace()).unwrap();
    assert_eq!(u(&linux.summary, &["tiering", "hint_faults"]), 0);
}

#[test]
fn other_softwares_pages_are_demoted_before_the_traces() {
    // As numab_tiering_demotes_to_make_room_then_promotes, with 2 of DRAM's 16 pages held by
    // other software (`occupied`, a VM's tmpfs root): the first touches take DRAM to its low
    // watermark after 11 pages, so pages 11-13 spill. The failed promotion's kswapd demotes 3
    // pages: the 2 occupied ones, the oldest on the inactive list, then one of the trace's.
    let tiered = TIERED.replacen("capacity = \"64KiB\"", "capacity = \"64KiB\"\noccupied = \"8KiB\"", 1);
    let p = plat(&tiered, &[]);
    let r = run_with(&p, "numab_tiering", &format!("{FAST_SCAN}scan_delay = \"10us\""), tiered_trace()).unwrap();
    let s = &r.summary;
    assert_eq!(u(s, &["tiering", "failed_promotions"]), 1, "{s}");
    assert_eq!(u(s, &["tiering", "demotions"]), 3);
    assert_eq!(u(s, &["tiering", "occupied_demotions"]), 2);
    assert_eq!(u(s, &["tiering", "promotions"]), 1);
    assert_eq!(u(s, &["tiering", "kswapd_pages"]), 3);
    // Node pages are the trace's; the occupied ones are counted apart.
    assert_eq!(u(&s["nodes"][0], &["final_pages"]), 11);
    assert_eq!(u(&s["nodes"][0], &["occupied_pages"]), 0);
    assert_eq!(u(&s["nodes"][1], &["final_pages"]), 3);
    assert_eq!(u(&s["nodes"][1], &["occupied_pages"]), 2);
    assert_eq!(u(&s["nodes"][0], &["migrated_out"]), 3);
    // Without a demotion target or swap nothing can take them: they stay, and DRAM holds 11.
    let r = run(&p, "linux_default", tiered_trace()).unwrap();
    assert_eq!(u(&r.summary["nodes"][0], &["occupied_pages"]), 2);
    assert_eq!(u(&r.summary["nodes"][0], &["final_pages"]), 11);
    // With swap and no demotion they are swapped out first (written, never read back).
    let text = format!("{tiered}[swap]\npreset = \"nvme_ssd\"\ncapacity = \"1MiB\"\n");
    let p = plat(&text, &["nodes.slow0.capacity=\"4KiB\""]);
    let a: Vec<_> = (0..20).map(|i| acc(0, i * 4096, Op::Write, 100_000)).collect();
    let s = run(&p, "linux_default", a).unwrap().summary;
    assert_eq!(u(&s["nodes"][0], &["occupied_pages"]), 0, "{s}");
    assert!(u(&s, &["swap", "swap_outs"]) >= 2, "{s}");
}

#[test]
fn kswapd_pays_for_the_pages_it_scans_and_leaves() {
    // numab_tiering_demotes_to_make_room_then_promotes' kswapd batch (3 pages taken) with
    // kswapd_scan_cost 1 ms and nothing else: every page the batch looked at and left costs
    // 1 ms of kswapd's time, the 3 it took nothing. All 13 DRAM pages were referenced once, by
    // their first touch: the first round keeps each with PG_referenced set and its young bit
    // cleared, and the second takes the 3 oldest, unreferenced since.
    let p = plat(TIERED, &["os.kswapd_scan_cost=1ms", "os.kswapd_page_cost=0ns", "os.tlb_shootdown=0ns"]);
    let r = run_with(&p, "numab_tiering", &format!("{FAST_SCAN}scan_delay = \"10us\""), tiered_trace()).unwrap();
    let s = &r.summary;
    assert_eq!(u(s, &["tiering", "kswapd_pages"]), 3, "{s}");
    let (scanned, stolen) = (u(s, &["lru", "pgscan"]), u(s, &["lru", "pgsteal"]));
    assert_eq!((scanned, stolen), (16, 3), "{s}");
    // 13 left at 1 ms each; the three copies add a few hundred ns.
    let busy = u(s, &["tiering", "kswapd_time_ns"]);
    assert!((13_000_000..13_001_000).contains(&busy), "{busy}");
}

#[test]
fn occupied_memory_must_leave_room_for_the_trace() {
    let text = TIERED.replacen(
        "capacity = \"64KiB\"",
        "capacity = \"64KiB\"\noccupied = \"48KiB\"\noccupied_file = \"16KiB\"",
        1,
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.toml");
    std::fs::write(&path, text).unwrap();
    let e = platform::load(path.to_str().unwrap(), &[]).unwrap_err().to_string();
    assert!(e.contains("nodes.dram0.occupied") && e.contains("16 occupied pages leave none of the node's 16"), "{e}");
}

#[test]
fn a_promotion_fails_while_kswapd_is_still_making_room() {
    // As numab_tiering_demotes_to_make_room_then_promotes, but kswapd takes 1 ms a page: the
    // failed promotion wakes it (at ~10 us) for 3 pages, one batch whose pages are free only at
    // 3 x 1 ms + 2 us; the second fault (~210 us) finds node 0 as full and fails too (in the
    // kernel, numamigrate_isolate_page only wakes kswapd). A third read after the batch (5 ms on)
    // promotes.
    let p = plat(TIERED, &["os.kswapd_page_cost=1ms"]);
    let mut a = tiered_trace();
    a.push(acc(0, 13 * 4096, Op::Read, 5_000_000));
    let r = run_with(&p, "numab_tiering", &format!("{FAST_SCAN}scan_delay = \"10us\""), a).unwrap();
    let s = &r.summary;
    assert_eq!(u(s, &["tiering", "hint_faults"]), 3, "{s}");
    assert_eq!(u(s, &["tiering", "failed_promotions"]), 2);
    assert_eq!(u(s, &["tiering", "kswapd_wakeups"]), 1);
    assert_eq!(u(s, &["tiering", "kswapd_pages"]), 3);
    assert_eq!(u(s, &["tiering", "demotions"]), 3);
    assert_eq!(u(s, &["tiering", "promotions"]), 1);
    // kswapd's clock: the batch's fixed cost (3 ms + 2 us) and its three copies.
    let busy = u(s, &["tiering", "kswapd_time_ns"]);
    assert!((3_002_000..3_010_000).contains(&busy), "{busy}");
    // At half a CPU the same batch takes twice as long (6 ms): it is not done when the third read
    // comes (~5.2 ms), so that promotion fails too, and no page has left node 0 by the end.
    let p = plat(TIERED, &["os.kswapd_page_cost=1ms", "os.kswapd_cpu_share=0.5"]);
    let mut a = tiered_trace();
    a.push(acc(0, 13 * 4096, Op::Read, 5_000_000));
    let r = run_with(&p, "numab_tiering", &format!("{FAST_SCAN}scan_delay = \"10us\""), a).unwrap();
    assert_eq!(u(&r.summary, &["tiering", "failed_promotions"]), 3);
    assert_eq!(u(&r.summary, &["tiering", "kswapd_pages"]), 0);
    assert_eq!(u(&r.summary, &["tiering", "promotions"]), 0);
}

#[test]
fn demotion_into_a_low_target_wakes_the_targets_kswapd() {
    // TIERED with swap: tpp keeps DRAM (16 pages) at its demotion watermark, 8 free, by demoting
    // to the slow node (16 pages, min 2, low 3, high 4). 40 first touches 100 us apart, so kswapd
    // keeps up and the allocator always finds DRAM above low: it never wakes kswapd itself.
    let text = format!("{TIERED}[swap]\npreset = \"nvme_ssd\"\ncapacity = \"1MiB\"\n");
    let p = plat(&text, &[]);
    let a: Vec<_> = (0..40).map(|i| acc(0, i * 4096, Op::Write, 100_000)).collect();
    let s = run_with(&p, "tpp", "", a).unwrap().summary;
    let slow_free = 16 - u(&s["nodes"][1], &["final_pages"]);
    // Each demotion that leaves the slow node below low wakes its kswapd, which swaps its
    // oldest pages out to its high watermark: it is never pinned at min. Without the wake-up
    // (as before) the slow node ends at min, 2 free, with 32 kswapd wake-ups instead of 38.
    assert!(slow_free >= 3, "{s}");
    assert_eq!(u(&s, &["tiering", "kswapd_wakeups"]), 38);
    assert!(u(&s, &["swap", "swap_outs"]) >= 18);
}

#[test]
fn tpp_keeps_its_demotion_watermark_and_promotes_active_pages() {
    // TIERED: DRAM 16 pages, high 4, so TPP's demotion watermark is clamp(16 x 2 %, 8, 16) = 8.
    let p = plat(TIERED, &[]);
    let params = format!("{FAST_SCAN}scan_delay = \"1ms\"");
    // 12 first touches: the 9th leaves 7 free < 8 and wakes kswapd, which runs beside the
    // program: by the time its first batch is done (4 pages x kswapd_page_cost 3 us + one TLB
    // shootdown of 2 us = 14 us after the wake-up) the 12th has left 4 free, so it demotes the
    // four LRU victims p0..p3 to the slow node, PROT_NONE at once.
    let mut a: Vec<_> = (0..12).map(|i| acc(0, i * 4096, Op::Write, 0)).collect();
    // p0 is read three times, the first 100 us on, after kswapd's batch: fault 1 (its demotion
    // left it PROT_NONE) references it; the first scan, at 2 ms (at 1 ms of run time the new
    // mm's first task_numa_work only set numa_next_scan, 1 ms ahead), re-protects it and fault 2
    // activates it; the next scan, fault 3 promotes it (8 free > high + 1), which leaves 7 free,
    // so kswapd demotes one more page.
    a.push(acc(0, 0, Op::Read, 100_000));
    a.push(acc(0, 0, Op::Read, 2_000_000));
    a.push(acc(0, 0, Op::Read, 200_000));
    let r = run_with(&p, "tpp", &params, a).unwrap();
    let s = &r.summary;
    assert_eq!(u(s, &["tiering", "hint_faults"]), 3, "{s}");
    assert_eq!(u(s, &["tiering", "promotions"]), 1);
    assert_eq!(u(s, &["tiering", "demotions"]), 5);
    assert_eq!(u(s, &["tiering", "failed_promotions"]), 0);
    assert_eq!(u(s, &["tiering", "kswapd_wakeups"]), 2);
    assert_eq!(u(s, &["tiering", "kswapd_pages"]), 5);
    // p0 left DRAM at ~20 us and came back ~2.3 ms later: one ping-pong.
    assert_eq!(u(s, &["tiering", "ping_pong"]), 1);
    assert_eq!(u(&s["nodes"][0], &["final_pages"]), 8);
    assert_eq!(u(&s["nodes"][1], &["final_pages"]), 4);
}

#[test]
fn tpp_allocates_page_cache_on_the_slow_tier_first() {
    // Alternating anon and file first touches on an empty TIERED machine: under TPP the file
    // pages go to the slow node (page-type-aware allocation), under first touch all stay on DRAM.
    let p = plat(TIERED, &[]);
    let a: Vec<_> = (0..6)
        .map(|i| Access { flags: if i % 2 == 1 { Access::FILE } else { 0 }, ..acc(0, i * 4096, Op::Read, 0) })
        .collect();
    let pages =
        |r: &SimResult| (u(&r.summary["nodes"][0], &["final_pages"]), u(&r.summary["nodes"][1], &["final_pages"]));
    assert_eq!(pages(&run(&p, "tpp", a.clone()).unwrap()), (3, 3));
    assert_eq!(pages(&run_with(&p, "tpp", "page_type_aware = false", a.clone()).unwrap()), (6, 0));
    assert_eq!(pages(&run(&p, "linux_default", a).unwrap()), (6, 0));
}

#[test]
fn oracle_gives_the_fast_tier_to_the_hottest_pages() {
    // DRAM 16 pages, slow node 64. min_free 16 KiB splits 1:4, so DRAM has min 0, and with
    // watermark_scale_factor 1000 tmp = 1: low 1, high 2. First touch fills DRAM to 15 pages;
    // the oracle's fast tier holds 16 - 2 = 14 pages.
    let p = plat(TIERED, &["nodes.slow0.capacity=\"256KiB\""]);
    // 20 cold pages touched once, then 10 hot pages read 10 times each.
    let mut a: Vec<_> = (100..120).map(|i| acc(0, i * 4096, Op::Write, 0)).collect();
    for _ in 0..10 {
        a.extend((0..10).map(|i| acc(0, i * 4096, Op::Read, 0)));
    }
    // linux_default: cold pages 100..114 take DRAM; every hot access is slow: 15 of 120 fast.
    let linux = run(&p, "linux_default", a.clone()).unwrap();
    assert_eq!(u(&linux.summary["nodes"][0], &["accesses"]), 15);
    // oracle: the 14 hottest are the 10 hot pages and cold 100..103 (ties go to lower pages):
    // 4 + 100 = 104 fast accesses.
    let (mut pol, _) = tiersim_policies::build("oracle_static", None, &topo(&p)).unwrap();
    pol.set_profile(&tiersim_engine::profile(&mut Mem::new(TimeUnit::Instructions, a.clone()), 4096).unwrap());
    let r = simulate(&p, pol, &mut Mem::new(TimeUnit::Instructions, a), SimOptions { check_every: 1 }).unwrap();
    assert_eq!(u(&r.summary["nodes"][0], &["accesses"]), 104, "{}", r.summary);
    assert_eq!(u(&r.summary["nodes"][0], &["final_pages"]), 14);
    assert!(u(&r.summary, &["execution_time_ns"]) < u(&linux.summary, &["execution_time_ns"]));
}

#[test]
fn interleave_splits_pages_by_weight() {
    let p = plat(TWO_SOCKETS, &[]);
    let topo = topo(&p);
    let params: toml::Table = toml::from_str("weights = [2, 1]").unwrap();
    let (pol, _) = tiersim_policies::build("interleave", Some(&params), &topo).unwrap();
    let a: Vec<_> = (0..12).map(|i| acc(0, i * 4096, Op::Read, 0)).collect();
    let r = simulate(&p, pol, &mut Mem::new(TimeUnit::Instructions, a), SimOptions { check_every: 1 }).unwrap();
    assert_eq!(u(&r.summary["nodes"][0], &["final_pages"]), 8);
    assert_eq!(u(&r.summary["nodes"][1], &["final_pages"]), 4);
}

#[test]
fn swap_takes_the_coldest_pages() {
    // One page per swap-in (vm.page-cluster = 0): this test follows the LRU's choices alone.
    let text = one_node("reclaim_batch = 1\npage_cluster = 0\n[swap]\npreset = \"nvme_ssd\"\ncapacity = \"1MiB\"");
    // 8 frames; min = low = high = 1 page, so 7 pages fit before reclaim.
    let p = plat(&text, &["nodes.dram0.capacity=\"32KiB\""]);
    let page = |i: u64| i * 4096;
    let mut a: Vec<_> = (0..7).map(|i| acc(0, page(i), Op::Write, 0)).collect();
    // p7: direct reclaim evicts the oldest, p0 (the aging is spelled out in
    // reclaim_ages_two_lru_lists). Inactive: p7 p3 p2 p1 (tail), young bits of p1..p3 cleared.
    a.push(acc(0, page(7), Op::Write, 0));
    // p1 is read again (young); p8 needs a frame: p1 is activated, p2 is evicted.
    a.push(acc(0, page(1), Op::Read, 0));
    a.push(acc(0, page(8), Op::Write, 0));
    // p1 is still in memory; p0 comes back from swap and evicts the tail, p3.
    a.push(acc(0, page(1), Op::Read, 0));
    a.push(acc(0, page(0), Op::Read, 0));
    let r = run(&p, "linux_default", a).unwrap();
    let s = &r.summary;
    assert_eq!(u(s, &["swap", "swap_outs"]), 3, "{s}");
    assert_eq!(u(s, &["swap", "swap_ins"]), 1, "{s}");
    assert_eq!(u(s, &["swap", "final_pages"]), 2);
    assert_eq!(u(&s["nodes"][0], &["final_pages"]), 7);
    assert_eq!(u(s, &["pages_touched"]), 9);
    // The swap-in read waits for the NVMe read (80 us + transfer) and the 5 us fault overhead.
    assert!(u(s, &["faults", "fault_time_ns"]) > 85_000, "{s}");
}

#[test]
fn reclaim_ages_two_lru_lists() {
    let text = one_node("reclaim_batch = 1\n[swap]\npreset = \"nvme_ssd\"\ncapacity = \"1MiB\"");
    // 8 frames; min = low = high = 1 page, so 7 pages fit before reclaim.
    let p = plat(&text, &["nodes.dram0.capacity=\"32KiB\""]);
    let page = |i: u64| i * 4096;
    let mut a: Vec<_> = (0..8).map(|i| acc(0, page(i), Op::Write, 0)).collect();
    // p1..p7 are all still resident: no swap-in.
    a.extend((1..8).map(|i| acc(0, page(i), Op::Read, 0)));
    let lru = |s: &serde_json::Value, k: &str| u(&s["nodes"][0], &["lru_pages", k]);
    // New pages start inactive and young. p7's reclaim scans the inactive tail: p0..p6 are young
    // on their first reference, so each is kept with PG_referenced set and its young bit
    // cleared (the used-once logic); p0 comes round unreferenced: it goes. 8 scanned, no
    // activation or deactivation; left: inactive p1..p6 + p7, nothing active.
    let r = run(&p, "linux_default", a.clone()).unwrap();
    let s = &r.summary;
    assert_eq!(u(s, &["swap", "swap_outs"]), 1, "{s}");
    assert_eq!(u(s, &["swap", "swap_ins"]), 0);
    assert_eq!((u(s, &["lru", "pgscan"]), u(s, &["lru", "pgactivate"]), u(s, &["lru", "pgdeactivate"])), (8, 0, 0));
    assert_eq!(u(s, &["lru", "pgsteal"]), 1);
    assert_eq!((lru(s, "inactive_anon"), lru(s, "active_anon"), lru(s, "active_file")), (7, 0, 0));
    // Linux before 5.9 puts new anon pages on the active list: the reclaim finds the inactive
    // list empty, deactivates all 7 (young cleared) and takes the oldest, p0, at the first scan.
    let p = plat(&text, &["nodes.dram0.capacity=\"32KiB\"", "os.new_anon_list=\"active\""]);
    let r = run(&p, "linux_default", a).unwrap();
    let s = &r.summary;
    assert_eq!((u(s, &["swap", "swap_outs"]), u(s, &["swap", "swap_ins"])), (1, 0), "{s}");
    assert_eq!((u(s, &["lru", "pgscan"]), u(s, &["lru", "pgactivate"]), u(s, &["lru", "pgdeactivate"])), (1, 0, 7));
    assert_eq!((lru(s, "inactive_anon"), lru(s, "active_anon")), (6, 1));
}

#[test]
fn reclaim_drops_file_pages_first_and_writes_back_dirty_ones() {
    let text = one_node("reclaim_batch = 1\n[swap]\npreset = \"nvme_ssd\"\ncapacity = \"1MiB\"");
    let anon = |i: u64| acc(0, i * 4096, Op::Write, 0);
    let file = |i: u64, op| Access { flags: Access::FILE, ..acc(0, (100 + i) * 4096, op, 0) };
    // 7 pages fit: a0..a3, f0 (read), f1 (written: dirty), f2 (read).
    let mut a: Vec<_> = (0..4).map(anon).collect();
    a.extend([file(0, Op::Read), file(1, Op::Write), file(2, Op::Read)]);
    // a4: the inactive file list is not low, so reclaim takes file pages only. f0, f1, f2 are
    // young on their first reference: PG_referenced, kept. f0 comes round unreferenced: dropped,
    // clean, no I/O.
    a.push(anon(4));
    // a5: f1 goes, dirty: written back first.
    a.push(anon(5));
    // f0 again: read back from the block device; its frame comes from dropping f2.
    a.push(file(0, Op::Read));
    // With refault detection (`os.workingset = "all"`): its refault distance, the node evicted f1
    // and f2 since f0 (nonresident_age 0 at f0's eviction, 2 at the refault's), is within the
    // workingset of 6 (active file 0; swap has room, so active anon 0 + inactive anon 6): f0 comes
    // back active (mm/workingset.c). Without it (the default, "off") it comes back inactive.
    for (mode, active) in [("all", 1), ("off", 0)] {
        let o = format!("os.workingset=\"{mode}\"");
        let r = run(&plat(&text, &["nodes.dram0.capacity=\"32KiB\"", &o]), "linux_default", a.clone()).unwrap();
        let s = &r.summary;
        let sw = |k: &str| u(s, &["swap", k]);
        assert_eq!((sw("file_drops"), sw("file_writebacks"), sw("file_refaults")), (3, 1, 1), "{s}");
        assert_eq!((sw("swap_outs"), sw("swap_ins")), (0, 0));
        assert_eq!((u(s, &["lru", "pgscan"]), u(s, &["lru", "pgactivate"])), (6, 0));
        if mode == "all" {
            assert_eq!((u(s, &["lru", "workingset_refault_file"]), u(s, &["lru", "workingset_activate_file"])), (1, 1));
        } else {
            assert!(s["lru"].get("workingset_refault_file").is_none(), "off reports as before: {s}");
        }
        let lru = |k: &str| u(&s["nodes"][0], &["lru_pages", k]);
        assert_eq!((lru("inactive_anon"), lru("inactive_file"), lru("active_file")), (6, 1 - active, active));
        // The refault waits for the NVMe read and the major-fault cost.
        assert!(u(s, &["faults", "fault_time_ns"]) > 85_000, "{s}");
    }
}

#[test]
fn a_refault_beyond_the_workingset_comes_back_inactive() {
    // File pages only, each read once: none is ever activated, so the workingset a file refault
    // is measured against (active file, plus anon with swap room: none) is empty. f0..f20 read in
    // turn through 7 frames evict f0..f13, and f0's read again evicts f14 for its frame
    // (nonresident_age 15): distance 15 - 0 > 0, refaulted, not activated, back inactive.
    let text = one_node("reclaim_batch = 1\nworkingset = \"all\"\n[swap]\npreset = \"nvme_ssd\"\ncapacity = \"1MiB\"");
    let file = |i: u64| Access { flags: Access::FILE, ..acc(0, (100 + i) * 4096, Op::Read, 0) };
    let mut a: Vec<_> = (0..21).map(file).collect();
    a.push(file(0));
    let r = run(&plat(&text, &["nodes.dram0.capacity=\"32KiB\""]), "linux_default", a).unwrap();
    let s = &r.summary;
    assert_eq!((u(s, &["swap", "file_drops"]), u(s, &["swap", "file_refaults"])), (15, 1), "{s}");
    assert_eq!((u(s, &["lru", "workingset_refault_file"]), u(s, &["lru", "workingset_activate_file"])), (1, 0));
    assert_eq!(u(s, &["lru", "pgactivate"]), 0);
    let lru = |k: &str| u(&s["nodes"][0], &["lru_pages", k]);
    assert_eq!((lru("inactive_file"), lru("active_file")), (7, 0));
}

#[test]
fn reclaim_of_a_mapped_file_refaults_with_read_around() {
    // The trace above with the three file pages named by a mapping record (a 3-page file).
    let text = one_node("reclaim_batch = 1\n[swap]\npreset = \"nvme_ssd\"\ncapacity = \"1MiB\"");
    let p = plat(&text, &["nodes.dram0.capacity=\"32KiB\""]);
    let anon = |i: u64| acc(0, i * 4096, Op::Write, 0);
    let file = |i: u64, op| Access { flags: Access::FILE, ..acc(0, (100 + i) * 4096, op, 0) };
    let mut a = Access::mapping(100 * 4096, 3 * 4096, 0, 0);
    a.extend((0..4).map(anon));
    a.extend([file(0, Op::Read), file(1, Op::Write), file(2, Op::Read), anon(4), anon(5), file(0, Op::Read)]);
    let on = plat(&text, &["nodes.dram0.capacity=\"32KiB\"", "os.workingset=\"all\""]);
    let r = run(&on, "linux_default", a.clone()).unwrap();
    let s = &r.summary;
    let f = &s["faults"];
    let sw = |k: &str| u(s, &["swap", k]);
    // f0's first touch is a major fault reading the whole file around it (3 pages, cut at its
    // end); f1's store and f2's load find their pages cached: minor faults.
    assert_eq!((u(f, &["major"]), u(f, &["minor_file"]), u(f, &["first_touch"])), (2, 2, 6), "{f}");
    // a4 and a5 drop f0 and then f1 (dirty: written back), as above (nonresident_age 0 and 1).
    // f0's refault reads around again: f0's frame comes from dropping f2 (age 2 -> 3); f0's
    // distance 3 - 0 is within the workingset (6 anon pages, swap with room), so it comes back
    // active (-> 4). For f1's frame the only file page is f0, locked by the fault, so an anon page
    // is swapped out (-> 5); f1's distance 5 - 1 = 4 is within the 5 anon pages left: active
    // (-> 6). For f2's, again no file page can go (both locked): a second anon page is swapped out
    // (-> 7); f2's distance 7 - 2 = 5 is within the 4 anon pages and the active file pages:
    // active. 3 + 3 pages read; 3 drops, 1 write-back, 1 refault, 2 swap-outs; every file page
    // active at the end. Without refault detection f1, read back inactive and unreferenced, was
    // dropped again for f2: 4 drops, 1 swap-out (the default, "off").
    assert_eq!(u(&s["page_cache"], &["mmap", "fault_read_pages"]), 3 + 3);
    assert_eq!(u(s, &["swap", "device", "bytes_read"]), 6 * 4096);
    assert_eq!((sw("file_drops"), sw("file_writebacks"), sw("file_refaults")), (3, 1, 1), "{s}");
    assert_eq!((sw("swap_outs"), sw("swap_ins")), (2, 0));
    let ws = |k: &str| u(s, &["lru", k]);
    assert_eq!((ws("workingset_refault_file"), ws("workingset_activate_file")), (3, 3));
    let lru = |k: &str| u(&s["nodes"][0], &["lru_pages", k]);
    assert_eq!((lru("inactive_anon") + lru("active_anon"), lru("inactive_file"), lru("active_file")), (4, 0, 3));
    let s = run(&p, "linux_default", a).unwrap().summary;
    let sw = |k: &str| u(&s, &["swap", k]);
    assert_eq!((sw("file_drops"), sw("file_writebacks"), sw("file_refaults"), sw("swap_outs")), (4, 1, 1, 1), "{s}");
    let lru = |k: &str| u(&s["nodes"][0], &["lru_pages", k]);
    assert_eq!((lru("inactive_anon") + lru("active_anon"), lru("inactive_file") + lru("active_file")), (5, 2));
}

#[test]
fn out_of_memory_without_swap_is_an_error() {
    let p = plat(&one_node(""), &["nodes.dram0.capacity=\"32KiB\""]);
    // 8 frames: 7 above the watermark, the last one by the allocator's last resort.
    let ok: Vec<_> = (0..8).map(|i| acc(0, i * 4096, Op::Write, 0)).collect();
    assert!(run(&p, "linux_default", ok.clone()).is_ok());
    let mut over = ok;
    over.push(acc(0, 8 * 4096, Op::Write, 0));
    let e = run(&p, "linux_default", over).err().unwrap().to_string();
    assert!(e.contains("out of memory after 8 accesses") && e.contains("swap is disabled"), "{e}");
}

#[test]
fn bad_platforms_and_traces_are_rejected() {
    let text = one_node("");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.toml");
    std::fs::write(&path, &text).unwrap();
    let load = |o: &[&str]| {
        let o: Vec<String> = o.iter().map(|s| s.to_string()).collect();
        platform::load(path.to_str().unwrap(), &o).err().map(|e| e.to_string()).unwrap_or_default()
    };
    assert!(load(&["nodes.dram0.bogus=1"])
        .contains("config key `nodes.dram0.bogus`: unknown key; valid keys: name, device"));
    assert!(load(&["nodes.dram9.capacity=1"]).contains("no node named \"dram9\"; nodes are dram0"));
    assert!(load(&["host.bogus=1"]).contains("config key `host.bogus`: unknown parameter"));
    assert!(load(&["bogus=1"]).contains("config key `bogus`: unknown key"));
    assert!(load(&["nodes.dram0.capacity=\"1KiB\""]).contains("smaller than one page"));
    assert!(load(&["nodes.dram0.params.channels=0"]).contains("nodes.dram0.params.channels"));
    assert!(load(&["os.page_size=\"12KiB\""]).contains("not a power of two"));
    assert!(load(&["host.cpus=8"]).contains("CPU 4 is local to no node"));
    assert!(load(&["nodeschannels"]).contains("expected key.path=value"));
    assert!(platform::load("no_such_preset", &[])
        .err()
        .unwrap()
        .to_string()
        .contains("presets: cascadelake_dcpmm, dram_only, epyc_cxl_nps1"));

    let p = plat(&text, &[]);
    let e = run(&p, "linux_default", vec![acc(9, 0, Op::Read, 0)]).err().unwrap().to_string();
    assert!(e.contains("access #0 is from cpu 9, but the platform has 4 CPUs"), "{e}");
    let e = run(&p, "nope", vec![acc(0, 0, Op::Read, 0)]).err().unwrap().to_string();
    assert!(e.contains("unknown policy `nope`; valid names: linux_default, interleave"), "{e}");
    let p = plat(&text, &["stats.warmup_accesses=5"]);
    let e = run(&p, "linux_default", vec![acc(0, 0, Op::Read, 0)]).err().unwrap().to_string();
    assert!(e.contains("warmup_accesses = 5 is not smaller than the trace's 1 accesses"), "{e}");
}

#[test]
fn presets_load_and_interleave_gives_the_white_paper_ratios() {
    for (name, want_cxl) in [("epyc_cxl_nps1", 0.5), ("epyc_cxl_nps2", 1.0 / 3.0), ("epyc_cxl_nps4", 0.2)] {
        let p = platform::load(name, &["scale=0.0001".to_owned()]).unwrap();
        let (pol, _) = tiersim_policies::build("interleave", None, &topo(&p)).unwrap();
        let a: Vec<_> = (0..3000u64).map(|i| acc((i % 128) as u32, i * 4096, Op::Read, 10)).collect();
        let r = simulate(&p, pol, &mut Mem::new(TimeUnit::Instructions, a), SimOptions::default()).unwrap();
        let nodes = r.summary["nodes"].as_array().unwrap();
        let cxl = nodes.iter().find(|n| n["name"] == "cxl0").unwrap();
        let share = cxl["final_pages"].as_u64().unwrap() as f64 / 3000.0;
        assert!((share - want_cxl).abs() < 0.001, "{name}: CXL holds {share} of pages");
    }
    for (name, _) in platform::PRESETS {
        platform::load(name, &[]).unwrap();
    }
}

#[test]
fn same_inputs_same_results() {
    let p =
        plat(&one_node("[swap]\npreset = \"nvme_ssd\""), &["nodes.dram0.capacity=\"64KiB\"", "stats.epoch=\"200ns\""]);
    let a: Vec<_> = (0..500u64)
        .map(|i| {
            acc(
                (i % 4) as u32,
                (i * 7919 % 40) * 4096 + (i % 64) * 64,
                if i % 3 == 0 { Op::Write } else { Op::Read },
                i % 5,
            )
        })
        .collect();
    let r1 = run(&p, "linux_default", a.clone()).unwrap();
    let r2 = run(&p, "linux_default", a).unwrap();
    assert_eq!(r1.summary.to_string(), r2.summary.to_string());
    assert_eq!(r1.timeseries, r2.timeseries);
}

/// Node 0 holds the CPUs (with two sockets, CPUs 0-1 on node 0 of socket 0, the rest on node 1
/// of socket 1); further nodes are CPU-less, alternating sockets.
/// `occupied[i]`: node i's (anonymous, file) pages of other software.
fn random_platform(
    caps: &[u64],
    occupied: &[(u64, u64)],
    swap: bool,
    cpus: u32,
    sockets: u32,
    workingset: &str,
) -> Platform {
    let mut text = format!("name = \"r\"\n[host]\ncpus = {cpus}\nsockets = {sockets}\nmlp = 4\n[os]\nmin_free = \"4KiB\"\nworkingset = \"{workingset}\"\n[stats]\nepoch = \"300ns\"\n");
    if swap {
        text.push_str("[swap]\npreset = \"nvme_ssd\"\ncapacity = \"4MiB\"\n");
    }
    for (i, c) in caps.iter().enumerate() {
        let cpus = match (sockets, i) {
            (1, 0) => format!("cpus = \"0-{}\"\n", cpus - 1),
            (2, 0) => "cpus = \"0-1\"\n".to_owned(),
            (2, 1) => format!("cpus = \"2-{}\"\n", cpus - 1),
            _ => String::new(),
        };
        let socket = i as u32 % sockets;
        let (anon, file) = occupied.get(i).copied().unwrap_or((0, 0));
        text.push_str(&format!(
            "[[nodes]]\nname = \"n{i}\"\ncapacity = \"{}KiB\"\noccupied = \"{}KiB\"\noccupied_file = \"{}KiB\"\nsocket = {socket}\n{cpus}{DRAM}\n",
            c * 4,
            anon * 4,
            file * 4
        ));
    }
    plat(&text, &[])
}

fn all_policies() -> Vec<&'static str> {
    tiersim_policies::REGISTRY.iter().map(|e| e.info.name).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    /// Over random traces and machines: each page on one node or in swap, no node over capacity,
    /// every access counted once, time never goes back (checked inside with check_every = 1).
    #[test]
    fn invariants_hold_on_random_traces(
        // At least 8 frames a node: with 3 CPUs each holding a page in flight, a 4-frame node can
        // run out of pages reclaim may take (a clear error, tested by its message elsewhere).
        caps in prop::collection::vec(8u64..40, 1..5),
        swap in any::<bool>(),
        two_sockets in any::<bool>(),
        policy in prop::sample::select(all_policies()),
        workingset in prop::sample::select(vec!["off", "file", "all"]),
        raw in prop::collection::vec((0u32..3, 0u64..200, any::<bool>(), 0u64..20, 0u64..64), 1..400),
        // Other software's pages: up to 3/4 of what a node has beyond 8 frames, some of it file.
        occ in prop::collection::vec((0u64..4, 0u64..2), 5),
    ) {
        let sockets = if two_sockets && caps.len() >= 2 { 2 } else { 1 };
        let occupied: Vec<(u64, u64)> = caps.iter().zip(&occ).map(|(&c, &(a, f))| {
            let spare = c.saturating_sub(8);
            (spare * a / 4, spare * f / 4)
        }).collect();
        let p = random_platform(&caps, &occupied, swap, 3, sockets, workingset);
        let total_frames: u64 = caps.iter().zip(&occupied).map(|(c, (a, f))| c - a - f).sum();
        let limit = if swap { 200 } else { total_frames };
        // Every third page is file-backed (page cache), the others anonymous.
        let a: Vec<Access> = raw.iter().map(|&(cpu, page, w, gap, line)| {
            let page = page % limit;
            let flags = if page % 3 == 0 { Access::FILE } else { 0 };
            Access { flags, ..acc(cpu, page * 4096 + line * 64, if w { Op::Write } else { Op::Read }, gap) }
        }).collect();
        let scans = tiersim_policies::find(policy).unwrap().info.params.iter().any(|p| p.name == "scan_size");
        let params = if scans {
            "scan_size = \"16KiB\"\nscan_period_min = \"2us\"\nscan_period_max = \"20us\"\nscan_delay = \"1us\"".to_owned()
        } else {
            String::new()
        };
        let r = run_with(&p, policy, &params, a.clone()).unwrap();
        let s = &r.summary;
        let nodes = s["nodes"].as_array().unwrap();
        let t = &s["tiering"];
        prop_assert_eq!(t["migrated_bytes"].as_u64().unwrap(), t["migrations"].as_u64().unwrap() * 4096);
        let moved_in: u64 = nodes.iter().map(|n| n["migrated_in"].as_u64().unwrap()).sum();
        prop_assert_eq!(moved_in, t["migrations"].as_u64().unwrap() + 2 * t["exchanges"].as_u64().unwrap());
        prop_assert_eq!(t["exchanged_bytes"].as_u64().unwrap(), t["exchanges"].as_u64().unwrap() * 2 * 4096);
        let counted: u64 = nodes.iter().map(|n| n["accesses"].as_u64().unwrap()).sum();
        prop_assert_eq!(counted, a.len() as u64);
        prop_assert_eq!(s["out_of_order_issues"].as_u64().unwrap(), 0);
        let resident: u64 = nodes.iter().map(|n| n["final_pages"].as_u64().unwrap()).sum();
        let swapped = s["swap"]["final_pages"].as_u64().unwrap_or(0);
        let dropped = s["swap"]["file_drops"].as_u64().unwrap() - s["swap"]["file_refaults"].as_u64().unwrap();
        prop_assert_eq!(resident + swapped + dropped, s["pages_touched"].as_u64().unwrap());
        // Pages enter swap by a write or by reclaim dropping an unused swap-cache page, and
        // leave by a swap-in fault or readahead; readahead pages are mapped, dropped or still cached.
        let sw = |k: &str| s["swap"][k].as_u64().unwrap_or(0);
        prop_assert_eq!(sw("swap_outs") + sw("swap_cache_drops"), sw("swap_ins") + sw("readahead_pages") + swapped + sw("occupied_pages"));
        // Other software's pages are conserved: on a node, in swap, or dropped (file pages).
        let occupied_now: u64 = nodes.iter().map(|n| n["occupied_pages"].as_u64().unwrap()).sum::<u64>() + sw("occupied_pages");
        let (occ_anon, occ_file): (u64, u64) = occupied.iter().fold((0, 0), |(a, f), &(x, y)| (a + x, f + y));
        prop_assert!(occupied_now <= occ_anon + occ_file && occupied_now >= occ_anon);
        if !swap {
            prop_assert_eq!(sw("occupied_pages"), 0);
        }
        prop_assert_eq!(sw("readahead_pages"), sw("swap_cache_hits") + sw("swap_cache_drops") + sw("swap_cache_freed") + sw("swap_cache_pages"));
        let ts = &r.timeseries;
        for (i, name) in ts.node.iter().enumerate() {
            if let Some(n) = nodes.iter().find(|n| n["name"] == name.as_str()) {
                prop_assert!(ts.pages[i] <= n["capacity_pages"].as_u64().unwrap());
            }
            if i > 0 {
                prop_assert!(ts.t_start_ns[i] >= ts.t_start_ns[i - 1]);
            }
        }
        for n in nodes {
            let name = n["name"].as_str().unwrap();
            let per_epoch: u64 = ts.node.iter().zip(&ts.accesses).filter(|(m, _)| m.as_str() == name).map(|(_, a)| a).sum();
            prop_assert_eq!(per_epoch, n["accesses"].as_u64().unwrap());
        }
    }
}

#[test]
fn huge_pages_migrate_whole_2mib_pages() {
    // TIERED with 2 MiB pages: 16 huge pages per node (32 MiB); min_free 8 MiB.
    let text = TIERED
        .replace("min_free = \"16KiB\"", "min_free = \"8MiB\"\npage_size = \"2MiB\"")
        .replace("capacity = \"64KiB\"", "capacity = \"32MiB\"");
    let text = text.replace("cpus = 1", "cpus = 2").replace("cpus = \"0\"", "cpus = \"0-1\"");
    let p = plat(&text, &[]);
    const HUGE: u64 = 2 << 20;
    // 16 pages first touched (DRAM fills to its low watermark, the rest spill to the slow
    // node), then the last one read every 5 ms: a 32 MiB scan window takes 12.5 ms at the
    // kernel's 2560 MB/s cap. A second thread makes the first touches, so that AutoTiering's
    // DRAM pages are marked and cool (a single-threaded program's local pages never do).
    let mut a: Vec<_> = (0..16).map(|i| acc(1, i * HUGE, Op::Write, 0)).collect();
    a.extend((0..20).map(|i| acc(0, 15 * HUGE + 64 * i, Op::Read, 5_000_000)));
    let params = "scan_size = \"32MiB\"\nscan_period_min = \"1ms\"\nscan_period_max = \"10ms\"\nscan_delay = \"10us\"";
    for policy in ["numab_tiering", "autotiering_opm", "tpp"] {
        let r = run_with(&p, policy, params, a.clone()).unwrap();
        let s = &r.summary;
        let t = &s["tiering"];
        assert_eq!(u(s, &["page_size"]), HUGE);
        assert!(u(t, &["migrations"]) > 0, "{policy}: {s}");
        assert_eq!(u(t, &["migrated_bytes"]), u(t, &["migrations"]) * HUGE, "{policy}");
        let resident: u64 = s["nodes"].as_array().unwrap().iter().map(|n| n["final_pages"].as_u64().unwrap()).sum();
        assert_eq!(resident, 16, "{policy}");
    }
}

/// TIERED with a cxl_flash slow node: DRAM takes 13 pages, the next 5 spill to flash0.
fn flash_tiered(hints: &str, hint_mode: &str) -> Platform {
    let text = TIERED.replacen(
        "name = \"slow0\"\ncapacity = \"64KiB\"\ndevice = \"dram\"\nparams = { channels = 1, channel_bandwidth = \"64GB/s\", efficiency = 1.0, read_latency = \"300ns\", write_latency = \"300ns\" }",
        &format!("name = \"flash0\"\ncapacity = \"64KiB\"\npreset = \"cxl_flash_ull\"\ntier = 1\nparams = {{ hint_mode = \"{hint_mode}\" }}"),
        1,
    );
    assert!(text.contains("flash0"));
    plat(&text, &[&format!("os.device_hints=\"{hints}\"")])
}

/// Pages 0..18 written (13 in DRAM, 13..18 on flash0), then five reads 2 ms apart, each after a
/// scan (periods stay under 1 ms, so every read runs exactly one): of pages 13, 14, 14, 13 and a
/// DRAM page. DRAM stays full, so autonuma never moves a page.
fn flash_hint_trace() -> Vec<Access> {
    let mut a: Vec<_> = (0..18).map(|i| acc(0, i * 4096, Op::Write, 0)).collect();
    for page in [13, 14, 14, 13, 0] {
        a.push(acc(0, page * 4096, Op::Read, 2_000_000));
    }
    a
}

#[test]
fn scanner_hints_accessed_flash_pages_to_the_device() {
    // The scan before read k finds accessed (not PROT_NONE) the flash pages touched since the
    // previous scan: scan 1 all five (placing them was a touch), scans 2-5 the page read last.
    // `scan` hints each: 5 + 1 + 1 + 1 + 1 = 9. `scan_hot` only those found accessed at the
    // previous visit too: scan 2 (page 13, placed before scan 1) and scan 4 (page 14, read
    // before scans 3 and 4): 2.
    // One scan window covers all 18 pages, so every scan wraps.
    let params =
        "scan_size = \"256KiB\"\nscan_period_min = \"100us\"\nscan_period_max = \"1ms\"\nscan_delay = \"10us\"";
    for (mode, want) in [("none", 0), ("scan", 9), ("scan_hot", 2)] {
        let p = flash_tiered(mode, "pin");
        let r = run_with(&p, "autonuma", params, flash_hint_trace()).unwrap();
        let s = &r.summary;
        assert_eq!(u(s, &["tiering", "scans"]), 5, "{mode}: {s}");
        // Every read of a flash page faults; the DRAM page's does not: the program has one
        // thread, whose own node's pages autonuma leaves unprotected (mm/mprotect.c).
        assert_eq!(u(s, &["tiering", "hint_faults"]), 4, "{mode}");
        assert_eq!(u(s, &["tiering", "migrations"]), 0, "{mode}");
        assert_eq!(u(&s["nodes"][1], &["final_pages"]), 5, "{mode}");
        assert_eq!(u(s, &["tiering", "device_hints"]), want, "{mode}");
        // One 4 KiB page is one device line; the written lines are cached by then, so each
        // hint pins its line (again, for a line pinned before) and prefetches nothing.
        let dev = &s["devices"]["flash0"];
        assert_eq!(u(dev, &["hints", "lines"]), want, "{mode}: {dev}");
        assert_eq!(u(dev, &["hints", "pins"]), want, "{mode}");
        assert_eq!(u(dev, &["hints", "prefetches"]), 0, "{mode}");
    }
    // A device that ignores hints (hint_mode off) is sent none; an unknown mode is rejected.
    let r = run_with(&flash_tiered("scan", "off"), "autonuma", params, flash_hint_trace()).unwrap();
    assert_eq!(u(&r.summary, &["tiering", "device_hints"]), 0);
    let text = one_node("");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.toml");
    std::fs::write(&path, &text).unwrap();
    let e = platform::load(path.to_str().unwrap(), &["os.device_hints=\"hot\"".to_owned()]).err().unwrap().to_string();
    assert!(e.contains("os.device_hints") && e.contains("none, scan, scan_hot"), "{e}");
}

#[test]
fn swap_in_reads_its_cluster_into_the_swap_cache() {
    // 64 frames, min = low = high = 1 page: 63 pages fit. Pages 0..79 written in order push the
    // oldest out a page at a time (reclaim_batch = 1), into slots 0, 1, 2, ... in order.
    let text = one_node("reclaim_batch = 1\npage_cluster = 3\nswap_readahead = \"cluster\"\n[swap]\npreset = \"nvme_ssd\"\ncapacity = \"1MiB\"");
    let trace = || {
        let page = |i: u64| i * 4096;
        let mut a: Vec<_> = (0..80).map(|i| acc(0, page(i), Op::Write, 0)).collect();
        // Page 2 comes back: its aligned cluster is slots 0..8, holding pages 0..7 (all
        // swapped), read in one request; the fault maps page 2, the others wait in the swap
        // cache, and their accesses are minor faults.
        a.extend([2, 0, 1, 3, 4].map(|i| acc(0, page(i), Op::Read, 0)));
        a
    };
    let p = plat(&text, &["nodes.dram0.capacity=\"256KiB\""]);
    let r = run(&p, "linux_default", trace()).unwrap();
    let s = &r.summary;
    let sw = |k: &str| u(s, &["swap", k]);
    assert_eq!(sw("swap_ins"), 1, "{s}");
    assert_eq!(sw("read_requests"), 1);
    assert_eq!(sw("readahead_pages"), 7, "{s}");
    assert_eq!(sw("swap_cache_hits"), 4);
    // Each read-ahead page took a frame, pushing the oldest resident pages (8, 9, ...) to swap;
    // the cached ones are younger, so none was dropped.
    assert_eq!(sw("swap_cache_drops"), 0);
    assert_eq!(sw("swap_cache_pages"), 3);
    // With vm.page-cluster = 0 the same trace reads each page on its own.
    let p0 = plat(&text.replace("page_cluster = 3", "page_cluster = 0"), &["nodes.dram0.capacity=\"256KiB\""]);
    let r0 = run(&p0, "linux_default", trace()).unwrap();
    let sw0 = |k: &str| u(&r0.summary, &["swap", k]);
    assert_eq!((sw0("swap_ins"), sw0("readahead_pages"), sw0("read_requests")), (5, 0, 5));
}

#[test]
fn vma_readahead_reads_the_pages_around_the_fault_wherever_their_slots() {
    // 63 pages fit. Pages 16, 15, ..., 0 are written first, then 17..79: the first 17 go to swap
    // in that order, so page k sits in slot 16 - k, and addresses run against slots.
    let text = one_node("reclaim_batch = 1\npage_cluster = 3\n[swap]\npreset = \"nvme_ssd\"\ncapacity = \"1MiB\"");
    let page = |i: u64| i * 4096;
    let mut a: Vec<_> = (0..17).rev().chain(17..80).map(|i| acc(0, page(i), Op::Write, 0)).collect();
    a.extend((0..8).map(|i| acc(0, page(i), Op::Read, 0)));
    let p = plat(&text, &["nodes.dram0.capacity=\"256KiB\""]);
    let r = run(&p, "linux_default", a.clone()).unwrap();
    let sw = |r: &SimResult, k: &str| u(&r.summary, &["swap", k]);
    // __swapin_nr_pages: page 0 has no adjacent predecessor and no hits: 1 page. Page 1 follows
    // it: 2 pages, [1, 3). Page 2 is a hit. Page 3: 1 hit -> 4 pages, not adjacent to 1, so
    // centred: [2, 6), reading 3, 4, 5. Pages 4, 5 hit. Page 6: 2 hits -> 4 pages, [5, 9):
    // 6, 7, 8. Page 7 hits. Each window's slots are contiguous (descending): one request each.
    assert_eq!(sw(&r, "swap_ins"), 4, "{}", r.summary);
    assert_eq!((sw(&r, "readahead_pages"), sw(&r, "swap_cache_hits"), sw(&r, "read_requests")), (1 + 2 + 2, 4, 4));
    // By slot cluster the same reads find page 1's neighbours by slot, 8..15 = pages 8..1:
    // page 1 brings 2..8, and pages 2..7 all hit.
    let pc = plat(
        &text.replace("page_cluster = 3", "page_cluster = 3\nswap_readahead = \"cluster\""),
        &["nodes.dram0.capacity=\"256KiB\""],
    );
    let r = run(&pc, "linux_default", a.clone()).unwrap();
    assert_eq!((sw(&r, "swap_ins"), sw(&r, "readahead_pages"), sw(&r, "swap_cache_hits")), (2, 7, 6), "{}", r.summary);
    // page_cluster = 0 turns either off.
    let p0 = plat(&text.replace("page_cluster = 3", "page_cluster = 0"), &["nodes.dram0.capacity=\"256KiB\""]);
    let r = run(&p0, "linux_default", a).unwrap();
    assert_eq!((sw(&r, "swap_ins"), sw(&r, "readahead_pages")), (8, 0));
}

#[test]
fn a_reclaim_pass_writes_contiguous_slots_in_one_request() {
    // reclaim_batch = 32: direct reclaim takes up to 32 pages per pass, written as runs of
    // consecutive slots of at most SWAP_CLUSTER_MAX = 32 pages.
    let text = one_node("reclaim_batch = 32\n[swap]\npreset = \"nvme_ssd\"\ncapacity = \"4MiB\"");
    let p = plat(&text, &["nodes.dram0.capacity=\"256KiB\""]);
    let a: Vec<_> = (0..200).map(|i| acc(0, i * 4096, Op::Write, 0)).collect();
    let r = run(&p, "linux_default", a).unwrap();
    let s = &r.summary;
    let (outs, reqs) = (u(s, &["swap", "swap_outs"]), u(s, &["swap", "write_requests"]));
    assert!(outs >= 130, "{s}");
    assert_eq!(reqs, outs.div_ceil(32), "{outs} pages in {reqs} requests");
    assert_eq!(u(s, &["swap", "device", "bytes_written"]), outs * 4096);
}

#[test]
fn scale_sets_the_daemon_time_scale_unless_given() {
    let load =
        |o: &[&str]| platform::load("cascadelake_dcpmm", &o.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    let p = load(&["scale=0.001953125"]);
    assert_eq!(p.os.float("daemon_time_scale"), 0.001953125);
    let (lens, warning) = tiersim_engine::regime::lens(&p);
    assert_eq!(lens["consistent"], true);
    assert!(warning.is_none());
    // The resolved config records it, so rerunning the config keeps the lens.
    assert_eq!(p.resolved["os"]["daemon_time_scale"].as_float(), Some(0.001953125));
    // Given explicitly, it stays, and the run says the two differ and by how much.
    let p = load(&["scale=0.001953125", "os.daemon_time_scale=0.001"]);
    assert_eq!(p.os.float("daemon_time_scale"), 0.001);
    let (lens, warning) = tiersim_engine::regime::lens(&p);
    assert_eq!(lens["consistent"], false);
    assert!((lens["daemon_rate_vs_lens"].as_f64().unwrap() - 1.953125).abs() < 1e-9);
    assert!(warning.unwrap().contains("daemons run 1.953x as often per unit of work"));
    // A machine larger than the modelled one keeps real daemon times (the knob is at most 1).
    assert_eq!(load(&["scale=2.0"]).os.float("daemon_time_scale"), 1.0);
    assert_eq!(load(&[]).os.float("daemon_time_scale"), 1.0);
}

#[test]
fn dynamic_oracle_follows_a_changing_hot_set() {
    // As above: the fast tier holds 14 pages. Phase A reads pages 0..13 five times each, phase B
    // pages 20..33; with two epochs each phase is one epoch.
    let p = plat(TIERED, &["nodes.slow0.capacity=\"256KiB\""]);
    let mut a = Vec::new();
    for first in [0u64, 20] {
        for _ in 0..5 {
            a.extend((first..first + 14).map(|i| acc(0, i * 4096, Op::Read, 0)));
        }
    }
    let profiled = |name: &str, params: &str| {
        let t: toml::Table = toml::from_str(params).unwrap();
        let (mut pol, _) = tiersim_policies::build(name, Some(&t), &topo(&p)).unwrap();
        let mut future = None;
        if let Some(want) = pol.epoch_profile() {
            assert_eq!(want.top, 14);
            pol.set_epoch_length(70);
            let ahead = Box::new(Mem::new(TimeUnit::Instructions, a.clone()));
            future = Some(tiersim_engine::Lookahead::new(
                ahead,
                4096,
                70,
                want.top,
                tiersim_engine::Windows::PerCpu,
                want.write_weight,
                1000,
            ));
        } else {
            pol.set_profile(&tiersim_engine::profile(&mut Mem::new(TimeUnit::Instructions, a.clone()), 4096).unwrap());
        }
        let r = simulate_with_future(
            &p,
            pol,
            &mut Mem::new(TimeUnit::Instructions, a.clone()),
            future,
            SimOptions { check_every: 1 },
        );
        r.unwrap().summary
    };
    // The static oracle keeps phase A's pages (ties go to lower pages): 70 of 140 fast.
    let stat = profiled("oracle_static", "");
    assert_eq!(u(&stat["nodes"][0], &["accesses"]), 70);
    // The dynamic one demotes phase A's 14 pages at the epoch boundary, so phase B's first
    // touches land in DRAM: every access is fast, 14 moves.
    for migrations in ["free", "charged"] {
        // Five accesses per page and epoch: charged moves need min_accesses <= 5 to pay.
        let s = profiled("oracle_dynamic", &format!("epochs = 2\nmigrations = \"{migrations}\"\nmin_accesses = 5"));
        assert_eq!(u(&s["nodes"][0], &["accesses"]), 140, "{migrations}: {s}");
        assert_eq!(u(&s, &["tiering", "demotions"]), 14);
        assert_eq!(u(&s["policy_stats"], &["epoch_moves"]), 14);
        // One CPU: its windows are the trace's spans, and every access came when foreseen.
        assert_eq!(s["epoch_profile"]["agreement"], 1.0, "{s}");
        assert_eq!(u(&s["epoch_profile"], &["epochs"]), 2);
        let copies = u(&s["devices"]["slow0"], &["writes"]);
        let migration_ns = u(&s, &["tiering", "migration_time_ns"]);
        // A migration thread of its own: no CPU time either way; charged copies load the devices.
        assert_eq!(migration_ns, 0);
        assert_eq!(copies, if migrations == "free" { 0 } else { 14 }, "{s}");
    }
    // With the default min_accesses (32) nothing is worth a charged move.
    let lazy = profiled("oracle_dynamic", "epochs = 2");
    assert_eq!(u(&lazy["policy_stats"], &["epoch_moves"]), 0);
    let free = profiled("oracle_dynamic", "epochs = 2\nmigrations = \"free\"");
    assert!(u(&free, &["execution_time_ns"]) < u(&stat, &["execution_time_ns"]));
}

#[test]
fn the_min_free_reserve_shrinks_with_scale() {
    // cascadelake_dcpmm: 2 x 16 GiB DRAM + 2 x 128 GiB PMEM = 288 GiB; the kernel's min_free_kbytes
    // is int_sqrt(288 Mi KiB x 16) = 69,511 KiB; DRAM nodes hold 16/288 of it: 3,954,403 B.
    let mins = |scale: &str| {
        let p = platform::load("cascadelake_dcpmm", &[format!("scale={scale}")]).unwrap();
        (p.watermarks[0].0, p.nodes[0].capacity_pages)
    };
    // Unscaled: 965 pages of 4 KiB.
    assert_eq!(mins("1.0"), (965, 4_194_304));
    // Through the lens the reserve is the same share of DRAM: 3,954,403 B / 512 = 7,723 B, one
    // page (the square root of the scaled memory would give 42 pages, 0.5 % of DRAM).
    assert_eq!(mins("0.001953125"), (1, 8192));
    assert_eq!(mins("0.0001220703125"), (0, 512));
}

/// Issue 15: `stats.epoch=1ns` made a row per nanosecond of simulated time. Past
/// `stats.max_epochs` pairs of epochs merge: the rows stay bounded, totals are kept, and the
/// series equals the one a run with the final epoch length makes from the start.
#[test]
fn time_series_is_coarsened_past_max_epochs() {
    let accesses: Vec<Access> = (0..3000)
        .map(|i| acc(i % 4, (i as u64 * 4096 * 7) % (1 << 20), if i % 3 == 0 { Op::Write } else { Op::Read }, 1000))
        .collect();
    let fine =
        run(&plat(&one_node(""), &["stats.epoch=\"1ns\"", "stats.max_epochs=64"]), "linux_default", accesses.clone())
            .unwrap();
    let ts = &fine.timeseries;
    let s = &fine.summary;
    assert!(s["timeseries"]["coarsened"].as_bool().unwrap());
    let epoch = u(s, &["timeseries", "epoch_ns"]);
    assert!(epoch.is_power_of_two() && epoch >= 1 << 10, "{epoch}");
    assert!(ts.epoch.len() <= 64 && ts.epoch.len() > 16, "{} rows", ts.epoch.len());
    assert_eq!(ts.accesses.iter().sum::<u64>(), u(s, &["accesses"]));
    assert_eq!(ts.bytes.iter().sum::<u64>(), 3000 * 64);
    for i in 1..ts.epoch.len() {
        assert_eq!((ts.epoch[i], ts.t_start_ns[i]), (i as u64, ts.t_end_ns[i - 1]));
    }
    let coarse = run(
        &plat(&one_node(""), &[&format!("stats.epoch=\"{epoch}ns\""), "stats.max_epochs=16777216"]),
        "linux_default",
        accesses,
    )
    .unwrap();
    assert!(!coarse.summary["timeseries"]["coarsened"].as_bool().unwrap());
    assert_eq!(coarse.timeseries, fine.timeseries);
}

fn futex(cpu: u32, word: u64, op: Op, gap: u64) -> Access {
    Access { time: gap, addr: word, cpu, size: 1, op, flags: Access::FUTEX }
}

/// Futex records: a thread that waited in the kernel resumes at the waking thread's wake, in
/// simulated time; a wait pairs only with the latest wake of its word earlier in the file, from
/// another CPU; the test source's batches of 7 split the pairs.
#[test]
fn a_futex_waiter_resumes_at_the_wakers_wake() {
    // One channel, 1 ns a transfer + 100 ns, 1 instruction = 1 ns, mlp 1.
    let trace = vec![
        acc(0, 0x1000, Op::Read, 1000), // #0: CPU 0 at 1000, done 1101
        futex(0, 0xa0, Op::Write, 50),  // #1: CPU 0 wakes word A at 1101 + 50 = 1151
        futex(1, 0xa0, Op::Read, 0),    // #2: CPU 1 waited on A: blocked from 0, resumes at 1151
        futex(2, 0xa0, Op::Read, 2000), // #3: CPU 2 too, but reaches it at 2000: no delay
        acc(1, 0x2000, Op::Read, 10),   // #4: CPU 1 at 1151 + 10 = 1161, done 1262
        acc(0, 0x3000, Op::Read, 0),    // #5: CPU 0 at 1151, done 1252
        futex(1, 0xb0, Op::Read, 0),    // #6: a wait with no wake of B before it: none
        futex(0, 0xb0, Op::Write, 0),   // #7: (the wake after it in the file does not count)
        futex(3, 0xc0, Op::Write, 0),   // #8: CPU 3 wakes C at 0 ...
        futex(3, 0xc0, Op::Read, 0),    // #9: ... and its own wait on C waits for nothing
        acc(2, 0x4000, Op::Read, 0),    // #10: CPU 2 at 2000, done 2101: the run's end
    ];
    let p = plat(&one_node(""), &[]);
    let r = run(&p, "linux_default", trace.clone()).unwrap();
    assert_eq!(u(&r.summary, &["execution_time_ns"]), 2101);
    // The four reads; the futex records are no accesses.
    assert_eq!(u(&r.summary, &["accesses"]), 4);
    let f = &r.summary["futex"];
    assert_eq!(
        (u(f, &["wait_records"]), u(f, &["wake_records"]), u(f, &["paired_waits"]), u(f, &["delayed_waits"])),
        (4, 3, 2, 1)
    );
    // CPU 1's wait: 0 -> 1151.
    assert_eq!(u(f, &["wait_ns"]), 1151);
    // CPU 1's read after the wait: issued at 1161, 101 ns; without the records it is issued at
    // 10 and CPU 1 ends at 111. Without CPU 2 the run ends at CPU 1's 1262; without the futex
    // records (and the wake's 50 instructions), at CPU 0's 1101 + 101 = 1202.
    let no2: Vec<Access> = trace.iter().filter(|a| a.cpu != 2).copied().collect();
    let r = run(&p, "linux_default", no2.clone()).unwrap();
    assert_eq!(u(&r.summary, &["execution_time_ns"]), 1262);
    let plain: Vec<Access> = no2.iter().filter(|a| !a.is_futex()).copied().collect();
    let r = run(&p, "linux_default", plain).unwrap();
    assert_eq!(u(&r.summary, &["execution_time_ns"]), 1202);
    assert!(r.summary.get("futex").is_none());
    // With the threads started in file order the same: CPU 1 starts after #0 and #1 (at 1151).
    let r = run(&plat(&one_node(""), &["host.thread_start=\"file_order\""]), "linux_default", no2.clone()).unwrap();
    assert_eq!(u(&r.summary, &["execution_time_ns"]), 1262);
    // Open loop: every record at its own time (after its gap), the waits change nothing.
    let open = plat(&one_node(""), &["host.mode=\"open\""]);
    let with = run(&open, "linux_default", no2.clone()).unwrap();
    // The same records with every wait on a word no wake names: nothing pairs.
    let unpaired: Vec<Access> =
        no2.iter().map(|&a| if a.is_futex() && a.op == Op::Read { Access { addr: 0xfff0, ..a } } else { a }).collect();
    let without = run(&open, "linux_default", unpaired).unwrap();
    assert_eq!(u(&with.summary, &["execution_time_ns"]), u(&without.summary, &["execution_time_ns"]));
    assert_eq!(u(&with.summary, &["futex", "delayed_waits"]), 0);
    // Ending the replay before the wake (stats.replay_accesses = 1): the wait is never read.
    let r = run(&plat(&one_node(""), &["stats.replay_accesses=1"]), "linux_default", trace.clone()).unwrap();
    assert_eq!(u(&r.summary, &["execution_time_ns"]), 1101);
}

/// A waiter with a lower CPU id than its waker resumes at the very time the waker goes on: the
/// tie goes to the waiter (the lower id), as for any two CPUs issuing at once.
#[test]
fn a_woken_cpu_ties_with_its_waker() {
    let trace = vec![
        acc(1, 0x1000, Op::Read, 399), // CPU 1 at 399, done 500
        futex(1, 0xe0, Op::Write, 0),  // wakes E at 500
        futex(0, 0xe0, Op::Read, 0),   // CPU 0 waited from 0: resumes at 500
        acc(0, 0x2000, Op::Read, 0),   // CPU 0 at 500 first (the lower id): done 601
        acc(1, 0x3000, Op::Read, 0),   // CPU 1 at 500, 1 ns behind on the channel: done 602
    ];
    let r = run(&plat(&one_node(""), &[]), "linux_default", trace).unwrap();
    assert_eq!(u(&r.summary, &["execution_time_ns"]), 602);
    assert_eq!(u(&r.summary, &["latency_ns", "max"]), 102);
    assert_eq!(u(&r.summary, &["futex", "wait_ns"]), 500);
}

/// A futex record of a size other than 1 is refused naming the record; from a trace file, the
/// file and the record's number in it.
#[test]
fn a_malformed_futex_record_is_a_clear_error() {
    let trace = vec![acc(0, 0x1000, Op::Read, 0), Access { size: 8, ..futex(0, 0xa0, Op::Write, 0) }];
    let Err(e) = run(&plat(&one_node(""), &[]), "linux_default", trace.clone()) else { panic!("accepted") };
    let e = e.to_string();
    assert!(e.contains("record #1") && e.contains("futex record") && e.contains("size 8"), "{e}");
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("bad.trace");
    let meta = TraceMeta { time_unit: TimeUnit::Instructions, addr_kind: AddrKind::Virtual, page_size: 4096 };
    let mut w = tiersim_trace::TraceWriter::create(&path, meta).unwrap();
    for a in (0..5).map(|i| acc(0, 0x1000 * (i + 1), Op::Read, 0)).chain(trace.into_iter().skip(1)) {
        w.write(&a).unwrap();
    }
    w.finish().unwrap();
    let r = tiersim_engine::run(&tiersim_engine::RunRequest {
        platform: "dram_only",
        overrides: &[],
        policy: "linux_default",
        policy_params: None,
        trace: tiersim_engine::TraceInput::File(&path),
        seed: 1,
        options: SimOptions::default(),
    });
    let Err(e) = r else { panic!("accepted") };
    let e = e.to_string();
    assert!(e.starts_with(&format!("{}: record #5: a futex record", path.display())) && e.contains("size 8"), "{e}");
}
