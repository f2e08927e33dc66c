//! sample, mix and stats.

use std::path::Path;

use tiersim_core::Access;
use tiersim_trace::convert::TextOptions;
use tiersim_trace::stats::{trace_stats, StatsOptions};
use tiersim_trace::tools::{mix, sample, MixInput, SampleOptions, ASID_SHIFT};
use tiersim_trace::{gen, TraceReader};

fn generate(dir: &Path, name: &str, gen_name: &str, params: &str, seed: u64) -> std::path::PathBuf {
    let p = dir.join(name);
    gen::generate(gen_name, Some(&toml::from_str(params).unwrap()), &p, seed).unwrap();
    p
}

fn read(p: &Path) -> Vec<Access> {
    TraceReader::open(p).unwrap().map(|a| a.unwrap()).collect()
}

#[test]
fn sample_every_nth_cpus_and_window() {
    let d = tempfile::tempdir().unwrap();
    let t = TextOptions::default();
    let src = generate(d.path(), "r.trace", "random", "accesses = 1000\nthreads = 1", 1);
    let orig = read(&src);
    let out = d.path().join("s.trace");
    let s = sample(&src, None, &out, &SampleOptions { every: 10, ..Default::default() }, &t).unwrap();
    assert_eq!(s.accesses, 100);
    let got = read(&out);
    // The first access keeps its 10 instructions; each later one absorbs 9 dropped gaps.
    assert_eq!(got[0].time, 10);
    assert!(got[1..].iter().all(|a| a.time == 100));
    assert!(got.iter().enumerate().all(|(i, a)| a.addr == orig[10 * i].addr));
    assert_eq!(s.time_last, 9910);

    let src = generate(d.path(), "r4.trace", "random", "accesses = 1000\nthreads = 4", 1);
    let s = sample(&src, None, &out, &SampleOptions { cpus: Some(vec![1, 3]), every: 1, ..Default::default() }, &t)
        .unwrap();
    assert_eq!(s.per_cpu, vec![0, 250, 0, 250]);
    assert_eq!(s.time_last, 2500);

    // Two CPUs, 500 accesses each, 10 instructions apart: [1000, 2000) holds 100 of each.
    let src = generate(d.path(), "r2.trace", "random", "accesses = 1000\nthreads = 2", 1);
    let opts = SampleOptions { window: (Some(1000), Some(2000)), every: 1, ..Default::default() };
    let s = sample(&src, None, &out, &opts, &t).unwrap();
    assert_eq!(s.per_cpu, vec![100, 100]);
    let got = read(&out);
    assert_eq!((got[0].time, got[2].time), (0, 10));
    // Every 2nd access of each CPU: the two threads alternate access by access, and each keeps
    // half of its 500, its instructions carried to the end (its last kept access at 990 + 10).
    let s = sample(&src, None, &out, &SampleOptions { every: 2, ..Default::default() }, &t).unwrap();
    assert_eq!(s.per_cpu, vec![250, 250]);
    assert_eq!(s.time_last, 4990);
    let bad = SampleOptions { every: 0, ..Default::default() };
    assert!(sample(&src, None, &out, &bad, &t).unwrap_err().to_string().contains("every"));
}

#[test]
fn mix_remaps_cpus_and_address_spaces() {
    let d = tempfile::tempdir().unwrap();
    let t = TextOptions::default();
    let a = generate(d.path(), "a.trace", "random", "accesses = 1000\nthreads = 2\nfootprint = \"1MiB\"", 1);
    let b = generate(d.path(), "b.trace", "stride", "accesses = 300\nthreads = 1\nfootprint = \"1MiB\"", 1);
    let out = d.path().join("m.trace");
    let inputs =
        [MixInput { path: &a, format: None, first_cpu: None }, MixInput { path: &b, format: None, first_cpu: None }];
    let s = mix(&inputs, &out, &t).unwrap();
    assert_eq!(s.per_cpu, vec![500, 500, 300]);
    // Both programs used the same virtual range; now their pages are distinct: the 249 pages
    // the random draws hit plus the 5 the stride sweep covers (300 x 64 B).
    let alone = |p: &Path| TraceReader::open(p).unwrap().header().stats.as_ref().unwrap().footprint_pages;
    assert_eq!((alone(&a), alone(&b)), (249, 5));
    assert_eq!(s.footprint_pages, 249 + 5);
    let m = read(&out);
    let from_b: Vec<_> = m.iter().filter(|x| x.cpu == 2).map(|x| (x.time, x.addr - (1 << ASID_SHIFT))).collect();
    let want: Vec<_> = read(&b).iter().map(|x| (x.time, x.addr)).collect();
    assert_eq!(from_b, want);
    // Merged by instruction count: CPU 2's 300 accesses all come before anyone's 301st.
    let pos_last_b = m.iter().rposition(|x| x.cpu == 2).unwrap();
    assert!(pos_last_b < 900 + 3, "{pos_last_b}");
    // Explicit binding, and an overlap is refused.
    let bound = [
        MixInput { path: &a, format: None, first_cpu: Some(8) },
        MixInput { path: &b, format: None, first_cpu: Some(0) },
    ];
    assert_eq!(mix(&bound, &out, &t).unwrap().per_cpu, vec![300, 0, 0, 0, 0, 0, 0, 0, 500, 500]);
    let clash = [
        MixInput { path: &a, format: None, first_cpu: Some(0) },
        MixInput { path: &b, format: None, first_cpu: Some(1) },
    ];
    let e = mix(&clash, &out, &t).unwrap_err().to_string();
    assert!(e.contains("overlap input 0's CPUs 0..2"), "{e}");
}

#[test]
fn stats_of_two_sequential_laps() {
    let d = tempfile::tempdir().unwrap();
    // 256 pages of 64 lines, swept twice in order.
    let p = generate(d.path(), "s.trace", "stride", "accesses = 32768\nfootprint = \"1MiB\"", 0);
    let v = trace_stats(&p, None, &TextOptions::default(), &StatsOptions { max_points: 1000 }).unwrap();
    assert_eq!((v["accesses"].as_u64(), v["pages"].as_u64()), (Some(32768), Some(256)));
    let r = &v["reuse_distance"];
    assert_eq!(r["cold"], 256);
    // Within a page the distance is 0; a page's first access of the second lap saw 255 others.
    assert_eq!(
        r["buckets"],
        serde_json::json!([{"lo": 0, "hi": 1, "count": 32256}, {"lo": 128, "hi": 256, "count": 256}])
    );
    let h = &v["hotness"];
    assert_eq!(h["buckets"], serde_json::json!([{"lo": 128, "hi": 256, "count": 256}]));
    assert_eq!(h["top_1pct_share"], 3.0 * 128.0 / 32768.0);
    let s = &v["scatter"];
    assert_eq!(s["stride"], 64);
    assert_eq!(s["index"].as_array().unwrap().len(), 512);
    assert_eq!(s["page"][1].as_u64().unwrap() - s["page"][0].as_u64().unwrap(), 1);
}
