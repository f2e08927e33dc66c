//! Loaded latency: memory latency rises with utilisation from the first GB/s (bank conflicts, row
//! misses and scheduler queues grow with load long before a channel is full) and rises faster with
//! more writes (read/write turnarounds, write drains). A device measures its utilisation and read
//! fraction per window and looks up a latency floor for its requests, as the Mess simulator does
//! with measured curves (Esmaili-Dokht et al., arXiv 2405.10170, MICRO 2024, section 6).

use tiersim_core::{Error, Op, ParamKind, ParamSpec, Params, Result};

use crate::pipe::{ps_from_ns, Ps};

/// How the estimator runs: shared by every device with a load term.
pub const MAX_UTIL_SPEC: ParamSpec = ParamSpec::new(
    "load_max_util",
    ParamKind::Float,
    "0.97",
    "utilisation at which the load term stops growing; past it the FCFS channels queue and set \
     the saturated latency",
)
.min(0.0)
.max(0.999);
pub const WINDOW_SPEC: ParamSpec = ParamSpec::new(
    "load_window",
    ParamKind::Duration,
    "1000ns",
    "window over which utilisation and read fraction are measured",
)
.min(1.0);
pub const GAIN_SPEC: ParamSpec = ParamSpec::new(
    "load_gain",
    ParamKind::Float,
    "0.5",
    "fraction of the gap between the current and the looked-up latency closed per window (a \
     proportional controller: 1 jumps, smaller is steadier)",
)
.min(0.01)
.max(1.0);

/// Load-dependent latency above idle, as a function of utilisation `u` in [0, 1] and the
/// fraction of writes `w`.
#[derive(Debug, Clone)]
pub enum Shape {
    /// `(a + a_w w) u + (c + c_w w) u / (1 - u)`, with `u` capped at `max_util`: a linear
    /// conflict term and an M/M/1-like queueing term, both in ns.
    Queue { a: f64, a_w: f64, c: f64, c_w: f64, max_util: f64 },
    /// Measured curves: per read fraction (ascending), points (utilisation, extra ns) ascending
    /// in utilisation; interpolated linearly in both, with `u` capped at `max_util` like the
    /// queue form: the saturated end of a curve is where latency stops being a function of
    /// bandwidth, and looking it up from one busy window would throw the loop off (a window
    /// measured at u = 1 would set the saturated latency for everyone).
    Curves { curves: Vec<(f64, Vec<(f64, f64)>)>, max_util: f64 },
}

impl Shape {
    pub fn from_params(p: &Params) -> Shape {
        Shape::Queue {
            a: p.float("load_linear_ns"),
            a_w: p.float("load_linear_write_ns"),
            c: p.float("load_queue_ns"),
            c_w: p.float("load_queue_write_ns"),
            max_util: p.float("load_max_util"),
        }
    }

    /// Extra ns at utilisation `u` and read fraction `r`.
    pub fn extra_ns(&self, u: f64, r: f64) -> f64 {
        let u = u.clamp(0.0, 1.0);
        match self {
            Shape::Queue { a, a_w, c, c_w, max_util } => {
                let w = 1.0 - r;
                let u = u.min(*max_util);
                ((a + a_w * w) * u + (c + c_w * w) * u / (1.0 - u)).max(0.0)
            }
            Shape::Curves { curves, max_util } => {
                let u = u.min(*max_util);
                let at = |pts: &[(f64, f64)]| interpolate(pts, u);
                let i = curves.partition_point(|(ratio, _)| *ratio < r);
                if i == 0 {
                    return at(&curves[0].1);
                }
                if i == curves.len() {
                    return at(&curves[i - 1].1);
                }
                let ((r0, p0), (r1, p1)) = (&curves[i - 1], &curves[i]);
                let t = (r - r0) / (r1 - r0);
                at(p0) * (1.0 - t) + at(p1) * t
            }
        }
    }
}

/// Linear interpolation in points ascending in x, clamped at both ends.
pub fn interpolate(pts: &[(f64, f64)], x: f64) -> f64 {
    let i = pts.partition_point(|p| p.0 < x);
    if i == 0 {
        return pts[0].1;
    }
    if i == pts.len() {
        return pts[i - 1].1;
    }
    let (a, b) = (pts[i - 1], pts[i]);
    if b.0 <= a.0 {
        return b.1;
    }
    a.1 + (b.1 - a.1) * (x - a.0) / (b.0 - a.0)
}

/// Check `load_*` parameters that only make sense together.
pub fn check(p: &Params) -> Result<()> {
    let w = p.float("load_max_util");
    if !(0.0..1.0).contains(&w) {
        return Err(Error::config("load_max_util", format!("{w} is not in [0, 1)")));
    }
    Ok(())
}

/// The per-device estimator: utilisation and read fraction over the last window, and the extra
/// latency it currently applies.
///
/// Stability: latency sets bandwidth in a closed loop and bandwidth sets latency here. Two
/// things keep that loop from oscillating, as in the Mess simulator's controller: the lookup uses
/// the utilisation of a whole window, never of a single request, and the applied latency moves
/// only `gain` of the way to the looked-up value per window (after an idle gap of several
/// windows it jumps). Bandwidth above what the channels sustain is not the lookup's job: the FCFS
/// channels queue it, so the saturated branch emerges from the channel model and the lookup is
/// only ever asked about the rising branch.
#[derive(Debug, Clone)]
pub struct Loaded {
    shape: Shape,
    window: Ps,
    gain: f64,
    start: Ps,
    end: Ps,
    ops: [u32; 2],
    last_busy: f64,
    last_ratio: f64,
    extra: Ps,
    /// (windows, sum of utilisation, sum of applied extra ps), for stats.
    windows: u64,
    util_sum: f64,
    extra_sum: f64,
}

impl Loaded {
    pub fn new(shape: Shape, window_ns: u64, gain: f64) -> Loaded {
        let window = ps_from_ns(window_ns).max(1);
        let unloaded = (shape.extra_ns(0.0, 1.0) * 1000.0).round() as Ps;
        Loaded {
            shape,
            window,
            gain,
            start: 0,
            end: window,
            ops: [0; 2],
            last_busy: 0.0,
            last_ratio: 1.0,
            extra: unloaded,
            windows: 0,
            util_sum: 0.0,
            extra_sum: 0.0,
        }
    }

    pub fn from_params(p: &Params) -> Loaded {
        Loaded::new(Shape::from_params(p), p.duration("load_window"), p.float("load_gain"))
    }

    /// Extra latency for a request arriving at `at`. `busy` gives the bottleneck resource's
    /// cumulative busy time divided by its servers (ps); it is read only when a window closes.
    #[inline]
    pub fn extra(&mut self, at: Ps, op: Op, busy: impl FnOnce() -> f64) -> Ps {
        if at >= self.end {
            self.close_window(at, busy);
        }
        self.ops[usize::from(op.is_write())] += 1;
        self.extra
    }

    /// Out of line with the busy-time sum, so the per-request path keeps its registers free.
    #[cold]
    #[inline(never)]
    fn close_window(&mut self, at: Ps, busy: impl FnOnce() -> f64) {
        self.roll(at, busy());
    }

    fn roll(&mut self, at: Ps, busy: f64) {
        let elapsed = (at - self.start) as f64;
        let u = ((busy - self.last_busy) / elapsed).clamp(0.0, 1.0);
        let n = self.ops[0] + self.ops[1];
        if n > 0 {
            self.last_ratio = f64::from(self.ops[0]) / f64::from(n);
        }
        let target = self.shape.extra_ns(u, self.last_ratio) * 1000.0;
        // After an idle gap of several windows the old estimate says nothing: jump.
        let gain = if at - self.start >= 4 * self.window { 1.0 } else { self.gain };
        let now = self.extra as f64;
        self.extra = (now + gain * (target - now)).round().max(0.0) as Ps;
        self.windows += 1;
        self.util_sum += u;
        self.extra_sum += self.extra as f64;
        self.start = at;
        self.end = at.saturating_add(self.window);
        self.last_busy = busy;
        self.ops = [0; 2];
    }

    pub fn stats(&self) -> serde_json::Value {
        let n = self.windows.max(1) as f64;
        serde_json::json!({
            "windows": self.windows,
            "utilisation_mean": self.util_sum / n,
            "extra_ns_mean": self.extra_sum / n / 1000.0,
        })
    }
}
