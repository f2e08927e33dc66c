//! Typed plugin parameters. Each plugin (device, policy, generator, ...) declares a static list
//! of `ParamSpec`s; a config table is resolved against it: defaults filled in, values parsed to
//! their kind (`"16GiB"`, `"100ns"`, ...), bounds checked, and unknown keys rejected with the
//! list of valid ones. `tiersim list` prints the same specs, so docs and behaviour cannot drift.

use std::fmt;

use crate::error::{Error, Result};
use crate::units;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamKind {
    Bool,
    Int,
    Float,
    /// A size: `"16GiB"` or an integer number of bytes.
    Bytes,
    /// A duration: `"100ns"` or an integer number of ns.
    Duration,
    /// A rate: `"38.4GB/s"`.
    Bandwidth,
    Frequency,
    Str,
    /// A list of numbers, e.g. interleave weights `[4, 1]`.
    FloatList,
    /// A list of names, e.g. interleave nodes `["dram0", "cxl0"]`.
    StrList,
}

impl ParamKind {
    pub fn name(self) -> &'static str {
        match self {
            ParamKind::Bool => "bool",
            ParamKind::Int => "int",
            ParamKind::Float => "float",
            ParamKind::Bytes => "size",
            ParamKind::Duration => "duration",
            ParamKind::Bandwidth => "bandwidth",
            ParamKind::Frequency => "frequency",
            ParamKind::Str => "string",
            ParamKind::FloatList => "list of numbers",
            ParamKind::StrList => "list of names",
        }
    }
}

/// Declaration of one parameter. `default: None` makes it required.
#[derive(Debug, Clone, Copy)]
pub struct ParamSpec {
    pub name: &'static str,
    pub kind: ParamKind,
    pub default: Option<&'static str>,
    pub help: &'static str,
    /// Inclusive lower bound for numeric kinds (sizes, durations and rates included).
    pub min: Option<f64>,
    pub max: Option<f64>,
    /// Allowed values for `Str`.
    pub choices: &'static [&'static str],
    /// A parameter of the same table this one must not exceed (`scan_period_min` and
    /// `scan_period_max`): contradictory pairs are rejected.
    pub not_above: Option<&'static str>,
}

impl ParamSpec {
    pub const fn new(name: &'static str, kind: ParamKind, default: &'static str, help: &'static str) -> Self {
        ParamSpec { name, kind, default: Some(default), help, min: None, max: None, choices: &[], not_above: None }
    }
    pub const fn required(name: &'static str, kind: ParamKind, help: &'static str) -> Self {
        ParamSpec { name, kind, default: None, help, min: None, max: None, choices: &[], not_above: None }
    }
    pub const fn min(self, min: f64) -> Self {
        ParamSpec { min: Some(min), ..self }
    }
    pub const fn max(self, max: f64) -> Self {
        ParamSpec { max: Some(max), ..self }
    }
    pub const fn choices(self, choices: &'static [&'static str]) -> Self {
        ParamSpec { choices, ..self }
    }
    pub const fn not_above(self, other: &'static str) -> Self {
        ParamSpec { not_above: Some(other), ..self }
    }
}

/// A resolved parameter value.
#[derive(Debug, Clone, PartialEq)]
pub enum ParamValue {
    Bool(bool),
    Int(i64),
    Float(f64),
    Bytes(u64),
    Duration(u64),
    Bandwidth(f64),
    Frequency(f64),
    Str(String),
    FloatList(Vec<f64>),
    StrList(Vec<String>),
}

impl fmt::Display for ParamValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamValue::Bool(v) => write!(f, "{v}"),
            ParamValue::Int(v) => write!(f, "{v}"),
            ParamValue::Float(v) => write!(f, "{v}"),
            ParamValue::Bytes(v) => write!(f, "{v}B"),
            ParamValue::Duration(v) => write!(f, "{v}ns"),
            ParamValue::Bandwidth(v) => write!(f, "{}GB/s", v / 1e9),
            ParamValue::Frequency(v) => write!(f, "{}GHz", v / 1e9),
            ParamValue::Str(v) => write!(f, "{v}"),
            ParamValue::FloatList(v) => write!(f, "{v:?}"),
            ParamValue::StrList(v) => write!(f, "{v:?}"),
        }
    }
}

impl ParamValue {
    /// The value in a form that reads back through `Params::resolve` unchanged.
    pub fn to_toml(&self) -> toml::Value {
        match self {
            ParamValue::Bool(v) => toml::Value::Boolean(*v),
            ParamValue::Int(v) => toml::Value::Integer(*v),
            ParamValue::Float(v) => toml::Value::Float(*v),
            ParamValue::Bytes(v) => toml::Value::String(units::format_bytes_exact(*v)),
            ParamValue::Duration(v) => toml::Value::String(units::format_duration_exact(*v)),
            ParamValue::Bandwidth(v) => {
                toml::Value::String(units::format_rate_exact(*v, "B/s", units::parse_bandwidth))
            }
            ParamValue::Frequency(v) => toml::Value::String(units::format_rate_exact(*v, "Hz", units::parse_frequency)),
            ParamValue::Str(v) => toml::Value::String(v.clone()),
            ParamValue::FloatList(v) => toml::Value::Array(v.iter().map(|x| toml::Value::Float(*x)).collect()),
            ParamValue::StrList(v) => toml::Value::Array(v.iter().map(|x| toml::Value::String(x.clone())).collect()),
        }
    }

    fn numeric(&self) -> Option<f64> {
        match self {
            ParamValue::Int(v) => Some(*v as f64),
            ParamValue::Float(v) | ParamValue::Bandwidth(v) | ParamValue::Frequency(v) => Some(*v),
            ParamValue::Bytes(v) | ParamValue::Duration(v) => Some(*v as f64),
            _ => None,
        }
    }
}

fn parse_value(spec: &ParamSpec, v: &toml::Value) -> std::result::Result<ParamValue, String> {
    use toml::Value as V;
    let want = || format!("expected a {}, got {}", spec.kind.name(), v);
    Ok(match (spec.kind, v) {
        (ParamKind::Bool, V::Boolean(b)) => ParamValue::Bool(*b),
        (ParamKind::Int, V::Integer(i)) => ParamValue::Int(*i),
        (ParamKind::Float, V::Integer(i)) => ParamValue::Float(*i as f64),
        (ParamKind::Float, V::Float(x)) => ParamValue::Float(*x),
        (ParamKind::Bytes, V::Integer(i)) if *i >= 0 => ParamValue::Bytes(*i as u64),
        (ParamKind::Bytes, V::String(s)) => ParamValue::Bytes(units::parse_bytes(s)?),
        (ParamKind::Duration, V::Integer(i)) if *i >= 0 => ParamValue::Duration(*i as u64),
        (ParamKind::Duration, V::String(s)) => ParamValue::Duration(units::parse_duration_ns(s)?),
        (ParamKind::Bandwidth, V::String(s)) => ParamValue::Bandwidth(units::parse_bandwidth(s)?),
        (ParamKind::Frequency, V::String(s)) => ParamValue::Frequency(units::parse_frequency(s)?),
        (ParamKind::Str, V::String(s)) => {
            if !spec.choices.is_empty() && !spec.choices.contains(&s.as_str()) {
                return Err(format!("{s:?} is not one of {}", spec.choices.join(", ")));
            }
            ParamValue::Str(s.clone())
        }
        (ParamKind::FloatList, V::Array(a)) => ParamValue::FloatList(
            a.iter()
                .map(|x| match x {
                    V::Integer(i) => Ok(*i as f64),
                    V::Float(f) => Ok(*f),
                    _ => Err(want()),
                })
                .collect::<std::result::Result<_, _>>()?,
        ),
        (ParamKind::StrList, V::Array(a)) => ParamValue::StrList(
            a.iter().map(|x| x.as_str().map(str::to_owned).ok_or_else(want)).collect::<std::result::Result<_, _>>()?,
        ),
        _ => return Err(want()),
    })
}

/// The one place numbers are checked: every number finite first (TOML admits `nan` and `inf`,
/// and NaN passes any `x < min || x > max`), then within the spec's range.
fn check_range(spec: &ParamSpec, value: &ParamValue) -> std::result::Result<(), String> {
    // An integer parameter says so: "a finite number" would invite 2.5.
    let what = if spec.kind == ParamKind::Int { "an integer" } else { "a finite number" };
    let range = match (spec.min, spec.max) {
        (Some(lo), Some(hi)) => format!("{what} in [{lo}, {hi}]"),
        (Some(lo), None) => format!("{what} at least {lo}"),
        (None, Some(hi)) => format!("{what} at most {hi}"),
        (None, None) => what.to_owned(),
    };
    let xs: Vec<f64> = match value {
        ParamValue::FloatList(v) => v.clone(),
        v => v.numeric().into_iter().collect(),
    };
    for x in xs {
        if !x.is_finite() {
            return Err(format!("{x} is not a number that can be simulated; expected {range}"));
        }
        if let Some(min) = spec.min {
            if x < min {
                return Err(format!("{} is below the minimum {min}; expected {range}", shown(value, x)));
            }
        }
        if let Some(max) = spec.max {
            if x > max {
                return Err(format!("{} is above the maximum {max}; expected {range}", shown(value, x)));
            }
        }
    }
    Ok(())
}

/// A number for an error message: floats in their shortest exact form (`1e300`, not 301
/// digits), sizes and durations as written.
fn shown(value: &ParamValue, x: f64) -> String {
    match value {
        ParamValue::Float(_) | ParamValue::FloatList(_) => format!("{x:?}"),
        v => v.to_string(),
    }
}

/// Parse a default written in source (`"16GiB"`, `"8"`, `"[1, 1]"`) as if it came from TOML.
fn parse_default(spec: &ParamSpec, text: &str) -> ParamValue {
    let v: toml::Value = match spec.kind {
        ParamKind::Bool | ParamKind::Int | ParamKind::Float | ParamKind::FloatList | ParamKind::StrList => {
            toml::from_str::<toml::Table>(&format!("v = {text}"))
                .ok()
                .and_then(|mut t| t.remove("v"))
                .unwrap_or_else(|| panic!("bad default {text:?} for parameter {}", spec.name))
        }
        _ => toml::Value::String(text.to_owned()),
    };
    parse_value(spec, &v).unwrap_or_else(|e| panic!("bad default for parameter {}: {e}", spec.name))
}

/// Resolved parameters of one plugin instance, in declaration order.
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    values: Vec<(&'static str, ParamValue)>,
}

impl Params {
    /// Resolve `table` against `specs`. Errors name the key (relative to the table) and what was
    /// expected; the caller prefixes the table's own path with `Error::under`.
    pub fn resolve(specs: &[ParamSpec], table: Option<&toml::Table>) -> Result<Params> {
        if let Some(t) = table {
            for key in t.keys() {
                if !specs.iter().any(|s| s.name == key) {
                    let valid: Vec<_> = specs.iter().map(|s| s.name).collect();
                    let valid = if valid.is_empty() { "(none)".to_owned() } else { valid.join(", ") };
                    return Err(Error::config(key.clone(), format!("unknown parameter; valid parameters: {valid}")));
                }
            }
        }
        let mut values = Vec::with_capacity(specs.len());
        for spec in specs {
            let value = match table.and_then(|t| t.get(spec.name)) {
                Some(v) => parse_value(spec, v).map_err(|e| Error::config(spec.name, e))?,
                None => match spec.default {
                    Some(d) => parse_default(spec, d),
                    None => {
                        return Err(Error::config(
                            spec.name,
                            format!("required parameter ({}) is missing", spec.kind.name()),
                        ))
                    }
                },
            };
            check_range(spec, &value).map_err(|e| Error::config(spec.name, e))?;
            values.push((spec.name, value));
        }
        let p = Params { values };
        for spec in specs {
            if let Some(other) = spec.not_above {
                let (a, b) = (p.get(spec.name), p.get(other));
                if a.numeric() > b.numeric() {
                    return Err(Error::config(
                        spec.name,
                        format!("{a} is above {other} ({b}); expected {} <= {other}", spec.name),
                    ));
                }
            }
        }
        Ok(p)
    }

    /// Defaults only (every parameter must have one).
    pub fn defaults(specs: &[ParamSpec]) -> Result<Params> {
        Params::resolve(specs, None)
    }

    fn get(&self, name: &str) -> &ParamValue {
        self.values
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v)
            .unwrap_or_else(|| panic!("parameter {name} was not declared in the plugin's specs"))
    }

    pub fn bool(&self, name: &str) -> bool {
        match self.get(name) {
            ParamValue::Bool(v) => *v,
            v => panic!("parameter {name} is {v:?}, not a bool"),
        }
    }
    pub fn int(&self, name: &str) -> i64 {
        match self.get(name) {
            ParamValue::Int(v) => *v,
            v => panic!("parameter {name} is {v:?}, not an int"),
        }
    }
    pub fn uint(&self, name: &str) -> u64 {
        self.int(name).max(0) as u64
    }
    pub fn float(&self, name: &str) -> f64 {
        match self.get(name) {
            ParamValue::Float(v) | ParamValue::Bandwidth(v) | ParamValue::Frequency(v) => *v,
            ParamValue::Int(v) => *v as f64,
            v => panic!("parameter {name} is {v:?}, not a number"),
        }
    }
    pub fn bytes(&self, name: &str) -> u64 {
        match self.get(name) {
            ParamValue::Bytes(v) => *v,
            v => panic!("parameter {name} is {v:?}, not a size"),
        }
    }
    pub fn duration(&self, name: &str) -> u64 {
        match self.get(name) {
            ParamValue::Duration(v) => *v,
            v => panic!("parameter {name} is {v:?}, not a duration"),
        }
    }
    /// Bytes per second.
    pub fn bandwidth(&self, name: &str) -> f64 {
        self.float(name)
    }
    pub fn str(&self, name: &str) -> &str {
        match self.get(name) {
            ParamValue::Str(v) => v,
            v => panic!("parameter {name} is {v:?}, not a string"),
        }
    }
    pub fn floats(&self, name: &str) -> &[f64] {
        match self.get(name) {
            ParamValue::FloatList(v) => v,
            v => panic!("parameter {name} is {v:?}, not a list of numbers"),
        }
    }
    pub fn strs(&self, name: &str) -> &[String] {
        match self.get(name) {
            ParamValue::StrList(v) => v,
            v => panic!("parameter {name} is {v:?}, not a list of names"),
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &ParamValue)> {
        self.values.iter().map(|(n, v)| (*n, v))
    }

    /// The resolved values as a TOML table (written into every run's resolved config).
    pub fn to_toml(&self) -> toml::Table {
        self.values.iter().map(|(n, v)| ((*n).to_owned(), v.to_toml())).collect()
    }
}

/// What a registry says about one plugin: its config name, one line on what it models, where the
/// model comes from, and its parameters.
#[derive(Debug, Clone, Copy)]
pub struct PluginInfo {
    pub name: &'static str,
    pub summary: &'static str,
    pub source: &'static str,
    pub params: &'static [ParamSpec],
}

impl PluginInfo {
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "name": self.name,
            "summary": self.summary,
            "source": self.source,
            "params": self.params.iter().map(|p| serde_json::json!({
                "name": p.name,
                "kind": p.kind.name(),
                "default": p.default,
                "help": p.help,
                "min": p.min,
                "max": p.max,
                "choices": p.choices,
            })).collect::<Vec<_>>(),
        })
    }
}

/// Find a plugin by name in a registry list; an unknown name lists the valid ones.
pub fn lookup<'a, T>(kind: &str, name: &str, entries: &'a [T], info: impl Fn(&T) -> &PluginInfo) -> Result<&'a T> {
    entries.iter().find(|e| info(e).name == name).ok_or_else(|| Error::UnknownPlugin {
        kind: kind.to_owned(),
        name: name.to_owned(),
        valid: entries.iter().map(|e| info(e).name).collect::<Vec<_>>().join(", "),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPECS: &[ParamSpec] = &[
        ParamSpec::new("channels", ParamKind::Int, "8", "memory channels").min(1.0),
        ParamSpec::new("capacity", ParamKind::Bytes, "16GiB", "capacity"),
        ParamSpec::new("latency", ParamKind::Duration, "100ns", "idle latency"),
        ParamSpec::new("bw", ParamKind::Bandwidth, "38.4GB/s", "per-channel bandwidth"),
        ParamSpec::new("mode", ParamKind::Str, "fcfs", "scheduling").choices(&["fcfs", "frfcfs"]),
        ParamSpec::new("weights", ParamKind::FloatList, "[1, 1]", "weights"),
    ];

    fn table(s: &str) -> toml::Table {
        toml::from_str(s).unwrap()
    }

    #[test]
    fn defaults_and_overrides() {
        let p = Params::resolve(SPECS, Some(&table("channels = 12\ncapacity = \"1TiB\"\nweights = [4, 1]"))).unwrap();
        assert_eq!(p.int("channels"), 12);
        assert_eq!(p.bytes("capacity"), 1 << 40);
        assert_eq!(p.duration("latency"), 100);
        assert_eq!(p.bandwidth("bw"), 38.4e9);
        assert_eq!(p.str("mode"), "fcfs");
        assert_eq!(p.floats("weights"), &[4.0, 1.0]);
        // The resolved table reads back to the same values.
        let again = Params::resolve(SPECS, Some(&p.to_toml())).unwrap();
        assert_eq!(again, p);
    }

    #[test]
    fn rejects_bad_input() {
        let e = Params::resolve(SPECS, Some(&table("chanels = 3"))).unwrap_err().to_string();
        assert!(e.contains("`chanels`") && e.contains("valid parameters: channels, capacity"), "{e}");
        let e = Params::resolve(SPECS, Some(&table("channels = 0"))).unwrap_err().to_string();
        assert!(e.contains("below the minimum"), "{e}");
        let e = Params::resolve(SPECS, Some(&table("capacity = \"lots\""))).unwrap_err().to_string();
        assert!(e.contains("capacity"), "{e}");
        let e = Params::resolve(SPECS, Some(&table("mode = \"random\""))).unwrap_err().to_string();
        assert!(e.contains("not one of fcfs, frfcfs"), "{e}");
        let e = Params::resolve(SPECS, Some(&table("channels = \"8\""))).unwrap_err().to_string();
        assert!(e.contains("expected a int"), "{e}");
        let e = Error::config("channels", "x").under("nodes.dram0.params").to_string();
        assert!(e.starts_with("config key `nodes.dram0.params.channels`"), "{e}");
    }

    #[test]
    fn rejects_nan_and_infinity_with_key_and_range() {
        const S: &[ParamSpec] = &[
            ParamSpec::new("mlp", ParamKind::Float, "1.0", "").min(1.0).max(1024.0),
            ParamSpec::new("cpi", ParamKind::Float, "1.0", "").min(0.0),
            ParamSpec::new("theta", ParamKind::Float, "0.5", ""),
            ParamSpec::new("weights", ParamKind::FloatList, "[1, 1]", ""),
        ];
        for (toml, key, want) in [
            ("mlp = nan", "mlp", "NaN is not a number that can be simulated; expected a finite number in [1, 1024]"),
            ("mlp = -nan", "mlp", "NaN is not a number that can be simulated"),
            ("cpi = inf", "cpi", "inf is not a number that can be simulated; expected a finite number at least 0"),
            ("theta = -inf", "theta", "-inf is not a number that can be simulated; expected a finite number"),
            ("weights = [1, nan]", "weights", "NaN is not a number"),
            ("mlp = 1025.0", "mlp", "1025.0 is above the maximum 1024; expected a finite number in [1, 1024]"),
        ] {
            let e = Params::resolve(S, Some(&table(toml))).unwrap_err().to_string();
            assert!(e.contains(&format!("`{key}`")) && e.contains(want), "{toml}: {e}");
        }
    }

    #[test]
    fn contradictory_pairs_are_rejected() {
        const S: &[ParamSpec] = &[
            ParamSpec::new("period_min", ParamKind::Duration, "1s", "").not_above("period_max"),
            ParamSpec::new("period_max", ParamKind::Duration, "60s", ""),
        ];
        let e = Params::resolve(S, Some(&table("period_min = \"120s\""))).unwrap_err().to_string();
        assert!(
            e.contains("`period_min`")
                && e.contains("120000000000ns is above period_max (60000000000ns); expected period_min <= period_max"),
            "{e}"
        );
        let e = Params::resolve(S, Some(&table("period_max = \"10ms\""))).unwrap_err().to_string();
        assert!(e.contains("1000000000ns is above period_max (10000000ns)"), "{e}");
        let p = Params::resolve(S, Some(&table("period_min = \"60s\""))).unwrap();
        assert_eq!(p.duration("period_min"), p.duration("period_max"));
    }

    #[test]
    fn unknown_plugin_lists_valid() {
        let infos = [
            PluginInfo { name: "a", summary: "", source: "", params: &[] },
            PluginInfo { name: "b", summary: "", source: "", params: &[] },
        ];
        let e = lookup("policy", "c", &infos, |i| i).unwrap_err().to_string();
        assert_eq!(e, "unknown policy `c`; valid names: a, b");
    }
}
