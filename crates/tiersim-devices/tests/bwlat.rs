//! The models against the measured Mess curves: fitted `dram` and `cxl` and the `curve` device
//! within 10 % of measured latency at 10..90 % of each curve's maximum, maxima within 5 %.

use std::path::{Path, PathBuf};

use tiersim_devices::calibrate::{compare, fit_cxl, fit_dram, Comparison, Fit};
use tiersim_devices::characterize::{characterize, Target};
use tiersim_devices::curves::{read_dir, Curve};

fn data(system: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/curves").join(system)
}

fn run(name: &str, table: toml::Table, curves: &[Curve]) -> Vec<Comparison> {
    let target = Target::resolve(name, Some(&table)).unwrap();
    let ratios: Vec<u32> = curves.iter().map(|c| (c.read_ratio * 100.0).round() as u32).collect();
    let tables = characterize(&target, &["bwlat".to_owned()], false, &ratios).unwrap();
    compare(&tables[0], curves).unwrap()
}

fn show(cmp: &[Comparison]) {
    for c in cmp {
        println!("{} % reads: max {:.1} vs {:.1} GB/s ({:+.1} %)", c.read_percent, c.model_max / 1e9, c.measured_max / 1e9, c.max_error() * 100.0);
        for p in &c.points {
            println!("  {:.0} %: {:.1} GB/s measured {:.1} model {:.1} ({:+.1} %)", p.fraction * 100.0, p.bandwidth / 1e9, p.measured_ns, p.model_ns, p.error() * 100.0);
        }
    }
}

fn assert_close(cmp: &[Comparison]) {
    show(cmp);
    for c in cmp {
        assert!(c.max_error().abs() <= 0.05, "{} % reads: max off by {:.1} %", c.read_percent, c.max_error() * 100.0);
        for p in &c.points {
            assert!(p.error().abs() <= 0.10, "{} % reads at {} of max: {:.1} vs {:.1} ns", c.read_percent, p.fraction, p.model_ns, p.measured_ns);
        }
    }
}

fn fitted(fit: &Fit, base: &[(&str, toml::Value)]) -> toml::Table {
    let mut t = fit.params.clone();
    for (k, v) in base {
        t.insert((*k).to_owned(), v.clone());
    }
    t
}

#[test]
fn fitted_dram_matches_skylake() {
    let curves = read_dir(&data("skylake-ddr4"), &[]).unwrap();
    let base = Target::resolve("ddr4_2666", Some(&toml::toml! { channels = 6 })).unwrap();
    let fit = fit_dram(&curves, &base.resolved().unwrap()).unwrap();
    println!("{}", toml::to_string(&fit.params).unwrap());
    assert_close(&run("ddr4_2666", fitted(&fit, &[("channels", 6.into())]), &curves));
}

#[test]
fn fitted_cxl_matches_micron_model() {
    let curves = read_dir(&data("cxl"), &[]).unwrap();
    let base = Target::resolve("cxl_cz120", None).unwrap();
    let fit = fit_cxl(&curves, &base.resolved().unwrap()).unwrap();
    println!("{}", toml::to_string(&fit.params).unwrap());
    assert_close(&run("cxl_cz120", fitted(&fit, &[]), &curves));
}

#[test]
fn curve_device_matches_its_curves() {
    for system in ["skylake-ddr4", "cxl"] {
        let curves = read_dir(&data(system), &[]).unwrap();
        let dir = data(system).display().to_string();
        assert_close(&run("curve", toml::toml! { curves_dir = dir }, &curves));
    }
}


#[test]
fn bad_curve_files_name_file_and_line() {
    let dir = std::env::temp_dir().join(format!("tiersim_bad_curves_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("bwlat_80.txt"), "1000 70\n2000 71\n3000 seventy\n").unwrap();
    let e = read_dir(&dir, &[]).unwrap_err().to_string();
    assert!(e.contains("bwlat_80.txt:3") && e.contains("expected two non-negative numbers"), "{e}");
    std::fs::write(dir.join("bwlat_80.txt"), "1000 70\n").unwrap();
    let e = read_dir(&dir, &[]).unwrap_err().to_string();
    assert!(e.contains("1 rows; a curve needs at least 3"), "{e}");
    let e = read_dir(&dir, &[50]).unwrap_err().to_string();
    assert!(e.contains("no bwlat_R.txt files with read ratios [50]"), "{e}");
    let e = Target::resolve("curve", Some(&toml::toml! { curves_dir = "" })).err().unwrap().to_string();
    assert!(e.contains("curves_dir") && e.contains("required"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn maxima_fit_is_exact_for_two_mixes() {
    // 1 / max = r x + (1 - r) y: 100 GB/s at all reads and 80 GB/s at half reads give
    // x = 1/100, y = 2/80 - 1/100 = 0.015, so writes cost 1.5 reads.
    let curve = |r: f64, max_mbs: f64| Curve::parse("t", r, &format!("{} 90\n{} 80\n1 70\n", max_mbs, max_mbs / 2.0)).unwrap();
    let (rate, cost) = tiersim_devices::curves::fit_maxima(&[curve(1.0, 100_000.0), curve(0.5, 80_000.0)]);
    assert!((rate / 1e9 - 100.0).abs() < 1e-6 && (cost - 1.5).abs() < 1e-9, "{rate} {cost}");
    let c = curve(1.0, 100_000.0);
    assert_eq!(c.rising(), vec![(1e6, 70.0), (50e9, 80.0), (100e9, 90.0)]);
    assert_eq!(c.idle(), 70.0);
}
