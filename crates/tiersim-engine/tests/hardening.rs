//! Issue 15 reproductions on platforms and parameters: NaN, infinity and absurd magnitudes,
//! contradictory pairs and TOML syntax errors each end in one error naming the key (or
//! file:line:column) and what was expected.

use tiersim_core::Params;
use tiersim_engine::platform;

fn load_err(preset: &str, overrides: &[&str]) -> String {
    let o: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    match platform::load(preset, &o) {
        Ok(_) => panic!("{overrides:?} was accepted"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn nan_infinity_and_absurd_magnitudes_are_refused_with_key_and_range() {
    for (set, want) in [
        ("host.mlp=nan", "config key `host.mlp`: NaN is not a number that can be simulated; expected a finite number in [1, 1024]"),
        ("host.cpi=nan", "config key `host.cpi`: NaN is not a number that can be simulated; expected a finite number in [0, 1000000]"),
        ("host.cpi=inf", "config key `host.cpi`: inf is not a number that can be simulated"),
        ("host.cpi=1e300", "config key `host.cpi`: 1e300 is above the maximum 1000000; expected a finite number in [0, 1000000]"),
        ("os.daemon_time_scale=nan", "config key `os.daemon_time_scale`: NaN is not a number that can be simulated"),
        ("os.daemon_time_scale=-inf", "config key `os.daemon_time_scale`: -inf is not a number"),
        ("scale=nan", "config key `scale`: NaN must be in (0, 1024]"),
        ("stats.epoch=\"1e30s\"", "config key `stats.epoch`: duration \"1e30s\" is too large"),
    ] {
        let e = load_err("epyc_cxl_nps1", &[set]);
        assert!(e.contains(want), "{set}: {e}");
    }
    // The legal extremes still load.
    let o = ["host.cpi=1e6".to_owned(), "host.mlp=1024".to_owned()];
    platform::load("epyc_cxl_nps1", &o).unwrap();
}

#[test]
fn scan_period_min_above_max_is_refused() {
    let t: toml::Table = toml::from_str("scan_period_min = \"90s\"").unwrap();
    let e = Params::resolve(&tiersim_policies::SCAN_PARAMS, Some(&t)).unwrap_err().to_string();
    assert!(
        e.contains("config key `scan_period_min`: 90000000000ns is above scan_period_max (60000000000ns); expected scan_period_min <= scan_period_max"),
        "{e}"
    );
    let t: toml::Table = toml::from_str("scan_period_min = \"90s\"\nscan_period_max = \"90s\"").unwrap();
    Params::resolve(&tiersim_policies::SCAN_PARAMS, Some(&t)).unwrap();
}

#[test]
fn toml_syntax_errors_name_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.toml");
    std::fs::write(&path, "name = \"x\"\n[host]\ncpus = 4\nmlp = = 2\n").unwrap();
    let e = platform::load(path.to_str().unwrap(), &[]).err().unwrap().to_string();
    let want = format!("{}:4:7: ", path.display());
    assert!(e.contains(&want) && e.contains("(in `mlp = = 2`)"), "{e}");
    // One line, whatever toml's own message looks like ("invalid string\nexpected ...").
    assert!(e.starts_with(&want) && !e.contains('\n'), "{e}");
}
