//! The curve readers on data as published: Mess rows with idle noise and in cycles, Intel MLC
//! `--loaded_latency` output, CSV with named columns (samples in the repository's
//! tests/data/curves), the Mess files as stored, and bad input that must name file and line.

use std::path::{Path, PathBuf};

use tiersim_devices::curves::{read_file, read_paths, CurveSet, Units};

fn sample(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/curves").join(name)
}

fn mess(system: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/curves").join(system)
}

const NS: Units = Units { cycles_ghz: None, port_ns: 0.0 };

fn read(paths: &[PathBuf], units: Units) -> CurveSet {
    read_paths(paths, &[], units).unwrap()
}

#[test]
fn mess_noise_rows_are_clamped_and_reported() {
    let set = read(&[sample("mess_noise")], NS);
    assert_eq!(set.curves.iter().map(|c| c.percent()).collect::<Vec<_>>(), vec![50, 100]);
    let c = &set.curves[0];
    assert_eq!(c.points.len(), 23);
    // Line 21 is "-0.0213\t90.1200": bandwidth clamped to zero, latency kept as an idle sample.
    assert_eq!(c.points[20], (0.0, 90.12));
    assert_eq!(c.points[21], (0.0, 90.05));
    assert_eq!(c.notes, vec!["clamped to 0 MB/s, idle noise kept as idle latency samples: line 21 (-0.0213 MB/s)"]);
    // Idle: the rows under 2 % of the 76830 MB/s maximum (1536.6): 31.2, -0.0213, 0, 7.8 MB/s.
    assert!((c.idle() - (90.31 + 90.12 + 90.05 + 90.22) / 4.0).abs() < 1e-9, "{}", c.idle());
    assert_eq!(c.max_bandwidth(), 76_830e6);
}

#[test]
fn cycles_convert_to_the_same_curve() {
    let ns = read(&[sample("mess_noise")], NS);
    let cycles = read(&[sample("mess_cycles")], Units { cycles_ghz: Some(2.1), port_ns: 0.0 });
    for (a, b) in ns.curves.iter().zip(&cycles.curves) {
        assert_eq!(a.points.len(), b.points.len());
        for (p, q) in a.points.iter().zip(&b.points) {
            assert_eq!(p.0, q.0);
            assert!((p.1 - q.1).abs() < 1e-9, "{p:?} vs {q:?}");
        }
        assert_eq!(b.notes[0], "latency in cycles at 2.1 GHz, divided by 2.1");
    }
    // The port offset adds to every row after conversion: 599.7467 ns + 24.3.
    let port = read(&[sample("mess_cycles")], Units { cycles_ghz: Some(2.1), port_ns: 24.3 });
    assert!((port.curves[0].points[0].1 - (1259.46807 / 2.1 + 24.3)).abs() < 1e-9);
    assert!(port.curves[0].notes.contains(&"24.3 ns of on-chip path added to every latency".to_owned()));
}

#[test]
fn mlc_output_gives_one_curve_per_run() {
    let curves = read_file(&sample("mlc_loaded_latency.txt"), NS).unwrap();
    let got: Vec<(String, f64, usize)> = curves
        .iter()
        .map(|c| (c.source.rsplit('(').next().unwrap().to_owned(), c.read_ratio, c.points.len()))
        .collect();
    assert_eq!(
        got,
        vec![("MLC -R)".to_owned(), 1.0, 19), ("MLC -W2)".to_owned(), 2.0 / 3.0, 19), ("MLC -W5)".to_owned(), 0.5, 19)]
    );
    // First and last rows of the -R table: " 00000\t355.35\t 113275.0", " 20000\t 82.46\t   2254.9".
    assert_eq!(curves[0].points[0], (113_275.0e6, 355.35));
    assert_eq!(curves[0].points[18], (2254.9e6, 82.46));
    assert_eq!(curves[2].points[0], (88_650.0e6, 458.41));
}

#[test]
fn csv_with_named_columns_matches_the_mess_rows() {
    let csv = read(&[sample("named_columns.csv")], NS);
    let mess = read(&[sample("mess_noise")], NS);
    assert_eq!(csv.curves.len(), 2);
    for (c, m) in csv.curves.iter().zip(&mess.curves) {
        assert_eq!(c.read_ratio, m.read_ratio);
        // The CSV holds the Mess rows upward, in GB/s, without the two noise rows.
        let kept: Vec<(f64, f64)> = m.points.iter().rev().filter(|p| p.0 > 0.0).cloned().collect();
        assert_eq!(c.points.len(), kept.len());
        for (p, q) in c.points.iter().zip(&kept) {
            assert!((p.0 / q.0 - 1.0).abs() < 1e-12 && p.1 == q.1, "{p:?} vs {q:?}");
        }
    }
}

/// Write `bytes` to DIR/bwlat_50.txt in a fresh directory and read it; the error's text.
fn bad(tag: &str, bytes: &[u8], units: Units) -> (String, PathBuf) {
    let dir = tempfile::Builder::new().prefix(tag).tempdir().unwrap().keep();
    let path = dir.join("bwlat_50.txt");
    std::fs::write(&path, bytes).unwrap();
    (read_paths(std::slice::from_ref(&path), &[], units).unwrap_err().to_string(), path)
}

#[test]
fn bad_input_names_file_and_line() {
    let cases: &[(&str, &[u8], String)] = &[
        ("empty", b"", "1: empty file; expected Mess rows".into()),
        ("one_row", b"1000\t90\n", "1: 1 row; a curve needs at least 3, from idle up to saturation".into()),
        (
            "flat",
            b"5000\t200\n5000\t150\n5000\t90\n",
            "1: the bandwidth never rises (every row holds 5000 MB/s); a curve runs from idle up to saturation".into(),
        ),
        (
            "falls",
            b"9000\t90\n8000\t120\n1000\t200\n",
            "1: the bandwidth never rises with load: its maximum 9000 MB/s has latency 90 ns, no more than the 200 ns \
             of the idle end (line 3)"
                .into(),
        ),
        (
            "binary",
            b"5000\t90\n\x7fELF\x02\x01\x01\x00\x00",
            "2: binary data (byte 0x00 at offset 15), not a text curve".into(),
        ),
        (
            "words",
            b"1000 70\n2000 71\n3000 seventy\n",
            "3: expected two numbers (bandwidth MB/s, latency ns), got `3000 seventy`".into(),
        ),
        (
            "negative",
            b"9000\t200\n-500\t120\n10\t90\n",
            "2: bandwidth -500 MB/s is negative beyond idle noise (more than 2 % of the maximum 9000 MB/s)".into(),
        ),
        (
            "mlc_w4",
            b"Intel(R) Memory Latency Checker - v3.11\nCommand line parameters: --loaded_latency -W4\n",
            "2: traffic type -W4 has no read share known here".into(),
        ),
        (
            "csv_cycles",
            b"read_percent,bandwidth_mbs,latency_cycles\n100,1,200\n",
            "1: latency_cycles: latency in cycles needs the clock (--cycles-ghz)".into(),
        ),
        ("header", b"when,what\n1,2\n", "1: not a curve: `when,what`; expected Mess rows".into()),
    ];
    for (tag, bytes, want) in cases {
        let (e, path) = bad(tag, bytes, NS);
        let want = format!("{}:{want}", path.display());
        assert!(e.starts_with(&want), "{tag}: {e}\nwanted: {want}");
        assert_eq!(e.lines().count(), 1, "{tag}: {e}");
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }
    let (e, path) = bad(
        "mlc_cycles",
        std::fs::read(sample("mlc_loaded_latency.txt")).unwrap().as_slice(),
        Units { cycles_ghz: Some(2.1), port_ns: 0.0 },
    );
    assert!(e.contains("Intel MLC reports latency in ns, not cycles"), "{e}");
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

#[test]
fn directories_skip_what_is_no_curve_and_refuse_two_of_one_mix() {
    // cxl as published: bwlat_0 holds bandwidth only; the README is no curve.
    let dir = tempfile::tempdir().unwrap();
    for f in ["bwlat_0.txt", "bwlat_100.txt"] {
        std::fs::copy(mess("cxl").join(f), dir.path().join(f)).unwrap();
    }
    std::fs::write(dir.path().join("README.md"), "# Curves\nSome words.\n").unwrap();
    let set = read(&[dir.path().to_path_buf()], Units { cycles_ghz: Some(2.1), port_ns: 0.0 });
    assert_eq!(set.curves.len(), 1);
    let shown = dir.path().display();
    assert_eq!(
        set.skipped,
        vec![
            format!("{shown}/README.md: not a curve file"),
            format!("{shown}/bwlat_0.txt: bandwidth only, no latency column")
        ]
    );
    // By name, bandwidth only is an error naming the first row.
    let e = read_paths(&[dir.path().join("bwlat_0.txt")], &[], NS).unwrap_err().to_string();
    assert_eq!(e, format!("{shown}/bwlat_0.txt:1: one column (bandwidth only, the latency column is empty); a curve needs bandwidth and latency"));
    // Two files of one mix.
    std::fs::copy(mess("cxl").join("bwlat_100.txt"), dir.path().join("bwlat_100_copy.txt")).unwrap();
    let e = read_paths(&[dir.path().to_path_buf()], &[], NS).unwrap_err().to_string();
    assert!(e.contains("two curves at 100 % reads") && e.contains("bwlat_100_copy.txt"), "{e}");
    // A directory with no curves is a directory, not a config key.
    let empty = tempfile::tempdir().unwrap();
    let e = read_paths(&[empty.path().to_path_buf()], &[], NS).unwrap_err().to_string();
    assert_eq!(
        e,
        format!(
            "{}: directory holds no curves (Mess bwlat_R.txt, Intel MLC output or curve CSV)",
            empty.path().display()
        )
    );
}

/// A stored folder, its unit, and per curve (percent, rows, idle ns, max GB/s).
type StoredFolder = (&'static str, Units, &'static [(u32, usize, f64, f64)]);

#[test]
fn every_stored_mess_file_reads_with_its_unit() {
    // (folder, unit, (percent, rows, idle ns, max GB/s)) as the folders' README gives them.
    let c21 = Units { cycles_ghz: Some(2.1), port_ns: 0.0 };
    let cases: &[StoredFolder] = &[
        ("skylake-ddr4", NS, &[(52, 61, 66.0, 83.2), (98, 85, 66.4, 111.1)]),
        ("skylake-ddr4-7746acbf", NS, &[(2, 61, 93.6, 85.1), (100, 85, 94.4, 115.6)]),
        ("skylake-ddr4-2eb5ef69", c21, &[(48, 85, 94.2, 92.2), (52, 85, 94.3, 94.7)]),
        ("cxl", c21, &[(4, 37, 107.5, 24.9), (50, 37, 107.4, 40.0), (100, 37, 107.4, 26.8)]),
    ];
    for (folder, units, want) in cases {
        let set = read(&[mess(folder)], *units);
        let got: Vec<(u32, usize, f64, f64)> = set
            .curves
            .iter()
            .map(|c| {
                (
                    c.percent(),
                    c.points.len(),
                    (c.idle() * 10.0).round() / 10.0,
                    (c.max_bandwidth() / 1e8).round() / 10.0,
                )
            })
            .collect();
        assert_eq!(&got, want, "{folder}");
    }
}
