//! Golden results: every registered policy on a small committed trace (`tiersim gen phased
//! --size 4MiB --count 60000 --threads 4 --seed 7`) on the AutoTiering machine scaled to 1/16384
//! (256 DRAM pages per socket, 2 CPUs each) with daemons 10^5 times faster. The expected figures in data/golden_policies.json
//! change only on purpose: rerun with TIERSIM_BLESS=1 and review the diff.

use std::collections::BTreeMap;
use std::path::Path;

use tiersim_engine::{RunRequest, SimOptions, TraceInput};

const TRACE: &str = "tests/data/phased_small.trace";
const GOLDEN: &str = "tests/data/golden_policies.json";

fn figures(policy: &str) -> serde_json::Value {
    let overrides: Vec<String> = [
        "scale=0.00006103515625",
        "os.daemon_time_scale=0.00001",
        "host.cpus=4",
        "nodes.dram0.cpus=\"0-1\"",
        "nodes.dram1.cpus=\"2-3\"",
    ]
    .map(String::from)
    .into();
    let out = tiersim_engine::run(&RunRequest {
        platform: "cascadelake_dcpmm",
        overrides: &overrides,
        policy,
        policy_params: None,
        trace: TraceInput::File(Path::new(TRACE)),
        seed: 1,
        options: SimOptions { check_every: 997 },
    })
    .unwrap_or_else(|e| panic!("{policy}: {e}"));
    let s = &out.summary;
    let t = &s["tiering"];
    let pages: Vec<_> = s["nodes"].as_array().unwrap().iter().map(|n| n["final_pages"].clone()).collect();
    serde_json::json!({
        "execution_time_ns": s["execution_time_ns"],
        "fast_tier_hit_ratio": format!("{:.6}", s["fast_tier_hit_ratio"].as_f64().unwrap()),
        "promotions": t["promotions"],
        "demotions": t["demotions"],
        "migrations": t["migrations"],
        "exchanges": t["exchanges"],
        "hint_faults": t["hint_faults"],
        "failed_promotions": t["failed_promotions"],
        "ping_pong": t["ping_pong"],
        "final_pages": pages,
    })
}

#[test]
fn every_policy_matches_its_golden_result() {
    let got: BTreeMap<&str, serde_json::Value> =
        tiersim_policies::REGISTRY.iter().map(|e| (e.info.name, figures(e.info.name))).collect();
    let text = serde_json::to_string_pretty(&got).unwrap() + "\n";
    if std::env::var_os("TIERSIM_BLESS").is_some() {
        std::fs::write(GOLDEN, &text).unwrap();
        return;
    }
    let want = std::fs::read_to_string(GOLDEN).expect("golden file; create it with TIERSIM_BLESS=1");
    let want: BTreeMap<String, serde_json::Value> = serde_json::from_str(&want).unwrap();
    for (policy, figures) in &got {
        assert_eq!(Some(figures), want.get(*policy), "{policy} changed; rerun with TIERSIM_BLESS=1 if on purpose");
    }
    assert_eq!(got.len(), want.len(), "policies added or removed");
}
