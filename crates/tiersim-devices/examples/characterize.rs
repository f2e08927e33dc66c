//! Print `characterize` tables for a preset: `cargo run --release --example characterize -- optane_100 [quick] [k=v ...]`.

use tiersim_devices::characterize::{characterize, Column, Target};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let name = args.first().map_or("optane_100", String::as_str);
    let quick = args.iter().any(|a| a == "quick");
    let overrides: toml::Table =
        toml::from_str(&args.iter().filter(|a| a.contains('=')).cloned().collect::<Vec<_>>().join("\n"))
            .expect("k=v TOML");
    let target = match Target::resolve(name, Some(&overrides)) {
        Ok(t) => t,
        Err(e) => return eprintln!("error: {e}"),
    };
    match characterize(&target, &[], quick, &[]) {
        Ok(tables) => {
            for t in tables {
                println!("## {} ({})", t.title, t.name);
                let n = match &t.columns[0].1 {
                    Column::Num(v) => v.len(),
                    Column::Str(v) => v.len(),
                };
                println!("{}", t.columns.iter().map(|(c, _)| c.as_str()).collect::<Vec<_>>().join("\t"));
                for i in 0..n {
                    let row: Vec<String> = t
                        .columns
                        .iter()
                        .map(|(_, c)| match c {
                            Column::Num(v) => format!("{:.3}", v[i]),
                            Column::Str(v) => v[i].clone(),
                        })
                        .collect();
                    println!("{}", row.join("\t"));
                }
            }
        }
        Err(e) => eprintln!("error: {e}"),
    }
}
