//! Peak memory of a 1 TiB cxl_flash device (issue 5 target: under 500 MB; MQSim_CXL needs over
//! 24 GB to initialise one): build the default device (8 x 8 dies x 4 planes x 512 blocks x 512
//! pages x 16 KiB = 1 TiB, 64 MiB cache), then write N random 4 KiB lines spread over the whole
//! logical space so that the FTL maps them and opens blocks, and print the process's peak
//! resident set (VmHWM) and the FTL's own state size. `sequential` writes lines 0, 1, 2, ...
//! instead (`all` writes: every logical line, the fully written device).
//!
//! cargo run --release -p tiersim-devices --example cxl_flash_memory -- [writes|all] [sequential]

use tiersim_core::{Op, Params};
use tiersim_devices::cxl_flash::{CxlFlash, SPECS};
use tiersim_devices::{Device, DeviceRequest};

fn vm_hwm_kib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines().find(|l| l.starts_with("VmHWM:"))?.split_whitespace().nth(1)?.parse().ok()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let sequential = args.iter().any(|a| a == "sequential");
    let mut d = CxlFlash::from_params(&Params::defaults(SPECS).expect("defaults")).expect("device");
    println!("after build: VmHWM {} KiB", vm_hwm_kib().unwrap_or(0));
    let lines = d.logical_bytes() / 4096;
    let writes: u64 = match args.first().map(String::as_str) {
        Some("all") => lines,
        Some(n) => n.parse().unwrap_or(10_000_000),
        None => 10_000_000,
    };
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for i in 0..writes {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let addr = if sequential { (i % lines) * 4096 } else { (x % lines) * 4096 };
        d.access(&DeviceRequest { now: i * 1000, addr, size: 64, op: Op::Write, socket: 0, cpu: 0, remote: false });
    }
    let s = d.stats();
    println!(
        "after {writes} {} line writes: VmHWM {} KiB; FTL state {} MiB; blocks opened {}; flash programs {}; erases {}",
        if sequential { "sequential" } else { "random" },
        vm_hwm_kib().unwrap_or(0),
        s["ftl"]["state_bytes"].as_u64().unwrap_or(0) >> 20,
        s["ftl"]["blocks_opened"],
        s["flash"]["programs"],
        s["flash"]["erases"],
    );
}
