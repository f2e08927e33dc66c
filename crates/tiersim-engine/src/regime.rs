//! Whether a run's time scale can be trusted: the lens (`scale` vs `os.daemon_time_scale`) and,
//! from the finished run's counters, the regime its daemons ran in. docs/model.md ("Time scale",
//! "When a result can be trusted") explains each figure and warning.

use serde_json::{json, Value};

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
    (json!({"scale": scale, "daemon_time_scale": time, "consistent": consistent, "daemon_rate_vs_lens": daemon_rate}), warning)
}
