//! Device presets: named parameter sets for real parts, each with the published figures it
//! matches. Presets are TOML files under `presets/`, embedded at build time; each holds
//! `device`, `summary`, `source` and a `[params]` table that must resolve against the device's specs.
//! A file of the same form (as `tiersim calibrate --preset-out` writes) is taken by its path
//! wherever a preset name is.

use tiersim_core::{Error, Params, Result};

/// (preset name, TOML text)
pub static PRESETS: &[(&str, &str)] = &[
    ("ddr5_4800", include_str!("../presets/ddr5_4800.toml")),
    ("ddr4_3200", include_str!("../presets/ddr4_3200.toml")),
    ("ddr4_2666", include_str!("../presets/ddr4_2666.toml")),
    ("skylake_ddr4", include_str!("../presets/skylake_ddr4.toml")),
    ("cxl_cz120", include_str!("../presets/cxl_cz120.toml")),
    ("cxl_expander", include_str!("../presets/cxl_expander.toml")),
    ("nvme_ssd", include_str!("../presets/nvme_ssd.toml")),
    ("optane_ssd", include_str!("../presets/optane_ssd.toml")),
    ("optane_100", include_str!("../presets/optane_100.toml")),
    ("cxl_flash_ull", include_str!("../presets/cxl_flash_ull.toml")),
    ("cxl_flash_slc", include_str!("../presets/cxl_flash_slc.toml")),
    ("cxl_flash_mlc", include_str!("../presets/cxl_flash_mlc.toml")),
    ("cxl_flash_tlc", include_str!("../presets/cxl_flash_tlc.toml")),
];

#[derive(Debug, Clone, PartialEq)]
pub struct Preset {
    /// The shipped preset's name, or the path of a preset file.
    pub name: String,
    /// Device kind, a name in `REGISTRY`.
    pub device: String,
    pub summary: String,
    pub source: String,
    pub params: toml::Table,
}

impl Preset {
    /// The preset's parameters resolved against its device's specs (defaults filled in).
    pub fn resolve(&self) -> Result<Params> {
        let entry = crate::find(&self.device)?;
        Params::resolve(entry.info.params, Some(&self.params))
            .map_err(|e| e.under(&format!("preset {}.params", self.name)))
    }
}

fn parse(name: &str, text: &str) -> Result<Preset> {
    let where_ = format!("preset {name}");
    let mut t: toml::Table = toml::from_str(text).map_err(|e| match e.span() {
        // A preset file's syntax error names its line and column, as an editor takes them.
        Some(span) if !PRESETS.iter().any(|(n, _)| *n == name) => {
            let before = &text[..span.start.min(text.len())];
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            let msg = e.message().lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join("; ");
            Error::Syntax {
                path: name.into(),
                line: before.matches('\n').count() as u64 + 1,
                column: column as u64,
                msg,
            }
        }
        _ => Error::config(&where_, e.to_string()),
    })?;
    let mut string = |key: &str| match t.remove(key) {
        Some(toml::Value::String(s)) => Ok(s),
        Some(v) => Err(Error::config(format!("{where_}.{key}"), format!("expected a string, got {v}"))),
        None => Err(Error::config(format!("{where_}.{key}"), "missing")),
    };
    let device = string("device")?;
    let summary = string("summary")?;
    let source = string("source")?;
    let params = match t.remove("params") {
        Some(toml::Value::Table(p)) => p,
        Some(v) => return Err(Error::config(format!("{where_}.params"), format!("expected a table, got {v}"))),
        None => toml::Table::new(),
    };
    if let Some(key) = t.keys().next() {
        return Err(Error::config(
            format!("{where_}.{key}"),
            "unknown key; valid keys: device, summary, source, params",
        ));
    }
    let preset = Preset { name: name.to_owned(), device, summary, source, params };
    preset.resolve()?;
    Ok(preset)
}

/// Every preset, parsed and checked against its device's specs.
pub fn all() -> Result<Vec<Preset>> {
    PRESETS.iter().map(|(name, text)| parse(name, text)).collect()
}

/// One preset by name, or a preset file by its path; an unknown name lists the valid ones.
pub fn get(name: &str) -> Result<Preset> {
    match PRESETS.iter().find(|(n, _)| *n == name) {
        Some((n, text)) => parse(n, text),
        None if std::path::Path::new(name).is_file() => {
            let text = std::fs::read_to_string(name).map_err(|e| Error::io(name, e))?;
            parse(name, &text)
        }
        None => Err(Error::UnknownPlugin {
            kind: "device preset".to_owned(),
            name: name.to_owned(),
            valid: PRESETS.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", "),
        }),
    }
}

/// Whether `name` is a shipped preset or a preset file.
pub fn exists(name: &str) -> bool {
    PRESETS.iter().any(|(n, _)| *n == name) || std::path::Path::new(name).is_file()
}

/// A preset file holding `device` with `params`, as `get` reads it back.
pub fn to_file_text(device: &str, summary: &str, source: &str, params: &toml::Table) -> Result<String> {
    let mut t = toml::Table::new();
    t.insert("device".into(), device.into());
    t.insert("summary".into(), summary.into());
    t.insert("source".into(), source.into());
    t.insert("params".into(), toml::Value::Table(params.clone()));
    toml::to_string(&t).map_err(|e| Error::Sim(format!("writing the preset: {e}")))
}
