//! Every registered policy, device, generator and preset as JSON: what `tiersim list` shows,
//! without the Python build. tests/test_add_a_policy.py reads it to check that a policy added
//! as docs/architecture.md says is registered.
//!
//! cargo run -p tiersim-engine --example list_plugins

fn main() {
    match tiersim_engine::list_plugins() {
        Ok(v) => println!("{v}"),
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
}
