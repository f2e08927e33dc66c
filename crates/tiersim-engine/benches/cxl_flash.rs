//! Device-mode replay speed of cxl_flash (issue 5 target: 10M requests/s; MQSim_CXL does about
//! 85k/s): 10M-access native traces (random 64 B accesses over 4 GiB with 30% writes, so most
//! requests miss the 64 MiB cache and reach flash; a 64 B stride, mostly hits; and issue 17's
//! mix of sequential streams and uniform accesses over 1 GiB, 100 ns apart) replayed open loop
//! against the default 1 TiB device with CFLRU and best-offset, decoding included (on a thread of
//! its own, as every replay of a trace file decodes: on one core it adds about 120 instructions a
//! request; for these open-loop replays it also computes the issue times there).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tiersim_engine::flash_replay::{replay_input, Input, ReplayOptions};

#[path = "common/cxl_flash_trace.rs"]
mod common;

const ACCESSES: u64 = 10_000_000;

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let trace = dir.path().join("bench.trace");
    let params = common::params();
    let opts = ReplayOptions { ns_per_instruction: common::NS_PER_INSTRUCTION, ..Default::default() };
    for name in common::TRACES {
        common::write_trace(name, ACCESSES, &trace).expect("trace");
        let mut group = c.benchmark_group("cxl_flash");
        group.sample_size(10);
        group.throughput(Throughput::Elements(ACCESSES));
        group.bench_function(format!("replay_10M_{name}_cflru_best_offset"), |b| {
            b.iter(|| {
                let r = replay_input(&Input::File { path: &trace, format: None }, &params, &opts).expect("replay");
                assert_eq!(r.summary["requests"], ACCESSES);
            })
        });
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
