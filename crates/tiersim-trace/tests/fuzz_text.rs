//! Structure-aware fuzzing of the text importers (CSV, MQSim, lackey): lines of the committed
//! small traces with fields replaced by edge values, deleted, duplicated, swapped or cut. Every
//! case ends in Ok or in one error naming `file:line`; never a panic, never a hang. Fixed seed,
//! bounded cases (TIERSIM_FUZZ_CASES for more); the tallies print with --nocapture.

use std::path::Path;
use std::time::{Duration, Instant};

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tiersim_core::Error;
use tiersim_trace::convert::{self, Format, TextOptions};

const EDGE: &[&str] = &[
    "",
    "0",
    "-1",
    "1",
    "nan",
    "inf",
    "-0",
    "0x",
    "0xffffffffffffffff",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999",
    "4294967296",
    "65535",
    "65536",
    "36028797018963968",
    "1e9",
    "0.5",
    "R",
    "W",
    "Q",
    "2",
    "\u{0}",
    "é",
    " ",
    ",",
    "#",
];

fn cases(default: usize) -> usize {
    std::env::var("TIERSIM_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn split_fields(line: &str, format: Format) -> (Vec<String>, &'static str) {
    match format {
        Format::Csv => (line.split(',').map(str::to_owned).collect(), ","),
        _ => (line.split(' ').map(str::to_owned).collect(), " "),
    }
}

/// One structural mutation of the text's lines.
fn mutate(text: &str, format: Format, rng: &mut ChaCha8Rng) -> (String, &'static str) {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let i = rng.gen_range(0..lines.len());
    let kind = match rng.gen_range(0..7) {
        0 => {
            let (mut f, sep) = split_fields(&lines[i], format);
            let j = rng.gen_range(0..f.len());
            f[j] = EDGE.choose(rng).unwrap().to_string();
            lines[i] = f.join(sep);
            "field set to an edge value"
        }
        1 => {
            let (mut f, sep) = split_fields(&lines[i], format);
            f.remove(rng.gen_range(0..f.len()));
            lines[i] = f.join(sep);
            "field deleted"
        }
        2 => {
            let (mut f, sep) = split_fields(&lines[i], format);
            let (a, b) = (rng.gen_range(0..f.len()), rng.gen_range(0..f.len()));
            f.swap(a, b);
            lines[i] = f.join(sep);
            "fields swapped"
        }
        3 => {
            let l = lines[i].clone();
            lines.insert(i, l);
            "line duplicated"
        }
        4 => {
            let j = rng.gen_range(0..lines.len());
            lines.swap(i, j);
            "lines swapped"
        }
        5 => {
            let cut = rng.gen_range(0..=lines[i].len());
            lines[i] = lines[i].chars().take(cut).collect();
            "line cut"
        }
        _ => {
            let mut b = lines[i].clone().into_bytes();
            if !b.is_empty() {
                let k = rng.gen_range(0..b.len());
                b[k] = rng.gen();
            }
            lines[i] = String::from_utf8_lossy(&b).into_owned();
            "byte changed"
        }
    };
    (lines.join("\n") + "\n", kind)
}

fn read(path: &Path, format: Format) -> tiersim_core::Result<u64> {
    let mut src = convert::open(path, Some(format), &TextOptions::default())?;
    let mut n = 0;
    tiersim_trace::for_each_access(src.as_mut(), |_| {
        n += 1;
        Ok(())
    })?;
    Ok(n)
}

#[test]
fn mutated_text_traces_end_in_ok_or_a_located_error() {
    let d = tempfile::tempdir().unwrap();
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/");
    for (name, format) in [("small.csv", Format::Csv), ("small.mqsim", Format::Mqsim), ("small.lackey", Format::Lackey)]
    {
        let text = std::fs::read_to_string(format!("{data}{name}")).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(15);
        let (mut ok, mut rejected) = (0, 0);
        let path = d.path().join(name);
        for _ in 0..cases(400) {
            let (m, kind) = mutate(&text, format, &mut rng);
            std::fs::write(&path, &m).unwrap();
            let start = Instant::now();
            let r = std::panic::catch_unwind(|| read(&path, format));
            // A hang guard, not a speed target: a 30-line file reads in microseconds.
            assert!(start.elapsed() < Duration::from_secs(10), "{name}: {kind} took {:?}", start.elapsed());
            match r {
                Err(_) => panic!("{name}: {kind} panicked on:\n{m}"),
                Ok(Ok(_)) => ok += 1,
                Ok(Err(Error::Line { line, .. })) => {
                    assert!(line >= 1, "{name}: {kind}");
                    rejected += 1;
                }
                Ok(Err(e)) => panic!("{name}: {kind}: an error without file:line: {e}\n{m}"),
            }
        }
        eprintln!("{name}: {} cases, {ok} read, {rejected} rejected with file:line", ok + rejected);
    }
}
