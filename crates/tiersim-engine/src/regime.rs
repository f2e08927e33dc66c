//! Whether a run's time scale can be trusted: the lens (`scale` vs `os.daemon_time_scale`) and,
//! from the finished run's counters, the regime its daemons ran in. docs/model.md ("Time scale",
//! "When a result can be trusted") explains each figure and warning.

use serde_json::{json, Value};
use tiersim_policies::ScanSpec;

use crate::Platform;

/// The run's lens: both knobs, whether they agree, and a warning when they do not.
pub fn lens(p: &Platform) -> (Value, Option<String>) {
    let scale = p.scale;
    let time = p.os.float("daemon_time_scale");
    let expected = scale.min(1.0);
    let consistent = (time - expected).abs() <= 1e-9 * expected;
    // Relative to the work a scaled machine does, daemons run expected/time times as often as
    // on the modelled machine (>1: more scans and faults per access than there).
    let daemon_rate = expected / time;
    let warning = (!consistent).then(|| {
        format!(
            "os.daemon_time_scale = {time} differs from scale = {scale}: daemons run {daemon_rate:.3}x as often per unit \
             of work as on the modelled machine (docs/model.md, \"Time scale\")"
        )
    });
    (
        json!({"scale": scale, "daemon_time_scale": time, "consistent": consistent, "daemon_rate_vs_lens": daemon_rate}),
        warning,
    )
}

/// Full scanner passes below which a scanning policy has had too few rounds to act: AutoNUMA's
/// filter needs two consecutive faults on a page, TPP three, Tiering-0.6 a young PTE at the
/// previous scan (reference/policies.md).
pub const MIN_SCAN_PASSES: u64 = 4;
/// Share of the CPUs' time in hint faults, scanning and migration above which daemon overhead,
/// not placement, decides the result.
pub const MAX_DAEMON_SHARE: f64 = 0.5;

/// The regime a finished run's daemons ran in, from its summary and its policy's scanner
/// settings, with a warning for each way its result may not carry over to the modelled machine.
pub fn diagnostics(summary: &Value, scan: Option<ScanSpec>) -> (Value, Vec<String>) {
    let num = |path: &[&str]| path.iter().fold(summary, |v, k| &v[*k]).as_f64().unwrap_or(0.0);
    let exec = num(&["execution_time_ns"]);
    let cpu_time = (exec * num(&["cpus"])).max(1.0);
    let hint = num(&["tiering", "hint_fault_time_ns"]);
    let scan_t = num(&["tiering", "scan_time_ns"]);
    let migration = num(&["tiering", "migration_time_ns"]);
    // Migrations in the fault path are part of hint-fault time; only a policy without hint
    // faults (oracle_dynamic's epoch moves) migrates outside it.
    let outside = if num(&["tiering", "hint_faults"]) > 0.0 { 0.0 } else { migration };
    let daemon_share = (hint + scan_t + outside) / cpu_time;
    let passes = num(&["tiering", "scan_passes"]);
    let pages = num(&["pages_touched"]).max(1.0);
    let accesses = num(&["accesses"]);
    let mut warnings = Vec::new();
    let scanner = scan.map(|s| {
        if (passes as u64) < MIN_SCAN_PASSES {
            warnings.push(format!(
                "the NUMA-hinting scanner completed {passes} full pass{} over memory (fewer than {MIN_SCAN_PASSES}): the policy \
                 had too few rounds to act; run longer or lower os.daemon_time_scale (docs/model.md, \"When a result can be trusted\")",
                if passes == 1.0 { "" } else { "es" }
            ));
        }
        json!({
            "scan_period_min_ns": s.period_min_ns,
            "scan_period_max_ns": s.period_max_ns,
            "scan_periods_min_covered": exec / s.period_min_ns as f64,
            "scan_passes": passes,
            "accesses_per_page_per_pass": accesses / pages / passes.max(1.0),
        })
    });
    if daemon_share > MAX_DAEMON_SHARE {
        warnings.push(format!(
            "daemon overhead dominates: {:.0} % of the CPUs' time went to hint faults, scanning and migration; the result \
             measures the daemons' cost at this time scale more than placement (docs/model.md, \"When a result can be trusted\")",
            100.0 * daemon_share
        ));
    }
    let regime = json!({
        "scanner": scanner,
        "accesses_per_page": accesses / pages,
        "hint_fault_share": hint / cpu_time,
        "migration_share": migration / cpu_time,
        "scan_share": scan_t / cpu_time,
        "daemon_share": daemon_share,
    });
    (regime, warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ScanSpec {
        ScanSpec {
            top_tier: true,
            scan_size: 1 << 20,
            period_min_ns: 1000,
            period_max_ns: 60_000,
            delay_ns: 1000,
            max_rate_bytes_per_s: 1e9,
        }
    }

    fn summary(passes: u64, hint_ns: u64, hint_faults: u64, migration_ns: u64) -> Value {
        json!({
            "execution_time_ns": 100_000, "cpus": 4, "accesses": 80_000, "pages_touched": 100,
            "tiering": {"hint_fault_time_ns": hint_ns, "scan_time_ns": 10_000, "migration_time_ns": migration_ns,
                        "hint_faults": hint_faults, "scan_passes": passes},
        })
    }

    #[test]
    fn figures_by_hand() {
        // 400 us of CPU time: hint faults 100 us (migration 40 us inside them), scanning 10 us.
        let (r, w) = diagnostics(&summary(8, 100_000, 50, 40_000), Some(spec()));
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(r["scanner"]["scan_periods_min_covered"], 100.0);
        // 80,000 accesses over 100 pages in 8 passes: 100 per page per pass.
        assert_eq!(r["scanner"]["accesses_per_page_per_pass"], 100.0);
        assert_eq!(r["accesses_per_page"], 800.0);
        assert_eq!(r["hint_fault_share"], 0.25);
        assert_eq!(r["migration_share"], 0.1);
        assert_eq!(r["daemon_share"], 0.275);
        // Without hint faults migrations happen outside them (oracle_dynamic) and count once.
        let (r, _) = diagnostics(&summary(0, 0, 0, 40_000), None);
        assert_eq!(r["daemon_share"], 0.125);
        assert!(r["scanner"].is_null());
    }

    #[test]
    fn warns_of_too_few_passes_and_dominating_daemons() {
        let (_, w) = diagnostics(&summary(3, 100_000, 50, 0), Some(spec()));
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("completed 3 full passes over memory (fewer than 4)"), "{w:?}");
        let (_, w) = diagnostics(&summary(1, 100_000, 50, 0), Some(spec()));
        assert!(w[0].contains("completed 1 full pass over memory (fewer than 4)"), "{w:?}");
        // No scanner, no pass warning; 200 + 10 of 400 us is more than half.
        let (_, w) = diagnostics(&summary(0, 200_000, 50, 0), None);
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("daemon overhead dominates: 52 %"), "{w:?}");
    }
}
