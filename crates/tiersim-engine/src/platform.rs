//! Platform files: the machine a trace runs on. A platform names the host (CPUs, sockets, clock,
//! memory-level parallelism), OS knobs, statistics settings, memory nodes (device kind, preset,
//! capacity, local CPUs, socket, tier) and the swap device. Presets are the TOML files in
//! `platforms/`, embedded at build time. `scale` multiplies every capacity so a small trace sees
//! the pressure of the paper's workload. Overrides (`key.path=value`) are applied to the raw
//! TOML before validation, so they are checked exactly like the file itself.

use tiersim_core::units::parse_bytes;
pub use tiersim_core::units::parse_cpu_list;
use tiersim_core::{Error, ParamKind, ParamSpec, Params, Result};

pub const HOST_PARAMS: &[ParamSpec] = &[
    ParamSpec::required("cpus", ParamKind::Int, "number of CPUs (trace cpu ids must be below it)").min(1.0).max(65536.0),
    ParamSpec::new("sockets", ParamKind::Int, "1", "CPU sockets").min(1.0).max(64.0),
    ParamSpec::new("frequency", ParamKind::Frequency, "2.0GHz", "core clock, turns instruction gaps into time"),
    // A million cycles per instruction is far past any core; larger values only make simulated
    // time (and the epochs it spans) overflow.
    ParamSpec::new("cpi", ParamKind::Float, "1.0", "cycles per instruction of the compute between accesses").min(0.0).max(1e6),
    ParamSpec::new("mlp", ParamKind::Float, "1.0", "memory-level parallelism: a CPU stalls latency/mlp per access (1 = serial)")
        .min(1.0)
        .max(1024.0),
    // A page walk's cost on hardware depends on where the page-table entries are cached; 30 ns
    // is a walk whose upper levels hit the paging-structure caches and whose PTE comes from L2/L3.
    ParamSpec::new("tlb_entries", ParamKind::Int, "0", "translations each CPU's TLB holds, in sets of tlb_ways indexed by the page number (a power of two sets; 0 = no TLB model: translations cost nothing)")
        .min(0.0)
        .max(16777216.0),
    ParamSpec::new("tlb_ways", ParamKind::Int, "1", "ways of each TLB set, LRU within a set (1: direct-mapped, as QEMU's softmmu TLB; 12 for a 1,536-entry STLB)")
        .min(1.0)
        .max(64.0),
    ParamSpec::new("tlb_miss_latency", ParamKind::Duration, "30ns", "a TLB miss's page walk, before the access issues (with tlb_entries)"),
    ParamSpec::new("tlb_lookups", ParamKind::Str, "all", "which accesses the TLB translates: all, or reads when the trace's writes are a cache's dirty evictions (`tiersim capture` traces), which reach memory by physical address")
        .choices(&["all", "reads"]),
    ParamSpec::new("mode", ParamKind::Str, "closed", "closed: CPU clocks advance by compute + stall; open: issue at trace times")
        .choices(&["closed", "open"]),
    // A core does not wait for its cache's dirty evictions, and a capture trace's write records
    // are the LLC's evictions (a store's miss is a read of its line there, and still stalls).
    // `stall` keeps every record a stall, as tiersim always charged.
    ParamSpec::new("writes", ParamKind::Str, "stall", "what a write record costs its CPU: stall (latency/mlp, as a read) or posted (nothing: the LLC's dirty evictions of a `tiersim capture` trace, which a core does not wait for); the device serves it either way")
        .choices(&["stall", "posted"]),
    ParamSpec::new("remote_socket_latency", ParamKind::Duration, "0ns", "added to accesses that cross sockets (UPI / Infinity Fabric)"),
    ParamSpec::new("remote_node_latency", ParamKind::Duration, "0ns", "added to accesses to another NUMA node of the same socket"),
    // How far the replay reads ahead for a thread that has run out of accesses: a thread
    // waiting for its next access in trace order (after a generator's barrier) holds the others
    // back until this many accesses are buffered. Absolute, so it does not go through the lens
    // (docs/model.md, "When a result can be trusted").
    ParamSpec::new("read_ahead", ParamKind::Int, "1048576", "accesses the replay buffers at most to find the next access of a CPU that has none queued; past it that CPU no longer holds the others back, and resumes at the simulated time then reached")
        .min(1.0)
        .max(1e9),
    // A thread of a captured program exists only once the program has run up to where it was
    // created: the capture writes records in the order they were executed (Valgrind runs one
    // thread at a time), so every record before a thread's first one came before the thread.
    ParamSpec::new("thread_start", ParamKind::Str, "read", "when a CPU's first access may issue: read = when the replay reads it, at the simulated time then (every CPU of a trace read at once starts at the run's start); file_order = also not before every record before it in the file is done, each one's CPU past it (a captured program's threads start where the program created them), and stats.warmup_accesses measures from the issue of the record at its position; an open loop on a ns trace issues at the trace's times either way")
        .choices(&["read", "file_order"]),
];

pub const OS_PARAMS: &[ParamSpec] = &[
    ParamSpec::new("page_size", ParamKind::Bytes, "4KiB", "page size: 4KiB base pages or 2MiB huge pages").min(4096.0),
    ParamSpec::new("min_free", ParamKind::Bytes, "0B", "vm.min_free_kbytes of the modelled machine (shrunk by `scale`); 0 = the kernel's formula sqrt(16 x unscaled memory KiB), clamped to 128KiB..256MiB"),
    ParamSpec::new("watermark_scale_factor", ParamKind::Int, "10", "vm.watermark_scale_factor (1/10000 of a node between watermarks)")
        .min(1.0)
        .max(3000.0),
    ParamSpec::new("fault_latency", ParamKind::Duration, "1us", "minor fault on first touch (allocate + zero a 4 KiB page), charged to the CPU"),
    ParamSpec::new("swap_fault_latency", ParamKind::Duration, "5us", "major-fault software cost on swap-in, on top of the swap device read"),
    ParamSpec::new("page_cluster", ParamKind::Int, "3", "vm.page-cluster: a swap-in fault reads ahead into the swap cache the aligned 2^page_cluster slots around its own (swap_readahead = cluster) or a window of up to 2^min(page_cluster, 5) pages around its address (vma; mm/swap_state.c); 0 reads only the faulting page")
        .min(0.0)
        .max(10.0),
    ParamSpec::new("swap_readahead", ParamKind::Str, "vma", "swap-in readahead: vma = the pages around the faulting address (swap_vma_readahead, Linux's default for SSD swap since 4.14), cluster = the slots of its 2^page_cluster cluster (swap_cluster_readahead, rotational swap)")
        .choices(&["vma", "cluster"]),
    ParamSpec::new("reclaim_batch", ParamKind::Int, "32", "pages reclaimed per direct-reclaim round and per kswapd batch (SWAP_CLUSTER_MAX)").min(1.0),
    // kswapd is a thread (mm/vmscan.c balance_pgdat): what it reclaims becomes free only as its
    // batches are done, so allocations and promotions meanwhile find the node as full as it was.
    ParamSpec::new("kswapd_page_cost", ParamKind::Duration, "3us", "kswapd's CPU time per page it reclaims (isolate, unmap, remap or swap-cache add; a demotion's copy is simulated on the devices, and each batch of reclaim_batch pages adds one tlb_shootdown)"),
    ParamSpec::new("kswapd_scan_cost", ParamKind::Duration, "0ns", "kswapd's CPU time per page it scans and leaves (referenced, so rotated or activated: page_check_references' rmap walk), beside kswapd_page_cost per page it takes"),
    ParamSpec::new("kswapd_cpu_share", ParamKind::Float, "1.0", "the share of a CPU kswapd runs on: 1 = a core of its own; below 1 its batches take longer in proportion (kswapd on CPUs the program keeps busy)")
        .min(0.001)
        .max(1.0),
    ParamSpec::new("workingset", ParamKind::Str, "off", "refault detection (mm/workingset.c): a page read back within its node's workingset of its eviction comes back active; all = file and anon pages, with reclaim's anon/file balance weighed by each kind's recent cost (Linux 5.9+), file = file pages only (3.15-5.7), off (the default until checked against the kernel)")
        .choices(&["all", "file", "off"]),
    ParamSpec::new("swappiness", ParamKind::Int, "60", "vm.swappiness: anon vs file share of reclaim scanning (anon x swappiness : file x (200 - swappiness))")
        .min(0.0)
        .max(200.0),
    // The page cache's sysctls (Documentation/admin-guide/sysctl/vm.rst; read_ahead_kb is the
    // block queue's, block/blk-sysfs.c, VM_READAHEAD_PAGES = 128 KiB).
    ParamSpec::new("read_ahead", ParamKind::Bytes, "128KiB", "read_ahead_kb of the file system's block device: the largest readahead window of buffered reads (mm/readahead.c)")
        .min(4096.0),
    ParamSpec::new("dirty_background_ratio", ParamKind::Int, "10", "vm.dirty_background_ratio: percent of dirtyable memory (free + file pages) dirty before the flusher starts writing back")
        .min(0.0)
        .max(100.0),
    ParamSpec::new("dirty_ratio", ParamKind::Int, "20", "vm.dirty_ratio: percent of dirtyable memory dirty at which writers are throttled (balance_dirty_pages)")
        .min(1.0)
        .max(100.0),
    ParamSpec::new("files_start_cached", ParamKind::Bool, "false", "files the trace names by mapping records start in the page cache (warm: clean, unmapped, no device read); false: cold, so the first read(2) or mmap fault of each page reads the device"),
    ParamSpec::new("new_anon_list", ParamKind::Str, "inactive", "LRU list of a new anonymous page: inactive (Linux 5.9+) or active (5.3, AutoTiering's base)")
        .choices(&["inactive", "active"]),
    // Costs of NUMA balancing and migration (policies.md 1.4 and 9: the mechanisms are from the
    // kernel; the papers' per-page numbers were not retrieved, so these are typical published
    // values to calibrate).
    ParamSpec::new("hint_fault_latency", ParamKind::Duration, "1us", "NUMA hint fault: a minor fault that restores the PTE"),
    ParamSpec::new("migrate_overhead", ParamKind::Duration, "3us", "per migrated page: isolate, unmap via rmap, remap (the copy is simulated on the devices)"),
    ParamSpec::new("tlb_shootdown", ParamKind::Duration, "2us", "one IPI round to flush TLBs, per migration and per scan window"),
    ParamSpec::new("pte_scan_cost", ParamKind::Duration, "2ns", "scanner cost per PTE walked (change_prot_numa)"),
    ParamSpec::new("tick", ParamKind::Duration, "4ms", "the scheduler tick, 1/CONFIG_HZ (Debian's kernels: 250 Hz): a new thread waits two ticks more than its period before its first NUMA scan window (init_numa_balancing); scaled like the scan periods"),
    ParamSpec::new(
        "device_hints",
        ParamKind::Str,
        "none",
        "host hints to devices that accept them (cxl_flash): `scan` = each page the NUMA-hinting scanner finds accessed, `scan_hot` = found accessed at two consecutive scanner visits; none without a scanning policy",
    )
    .choices(&["none", "scan", "scan_hot"]),
    ParamSpec::new(
        "daemon_time_scale",
        ParamKind::Float,
        "1.0",
        "multiplies every policy daemon time (scan periods and delay, hot thresholds, rate windows): 0.001 runs them 1000x faster so a short trace sees many scan rounds; above 1, slower, for a simulated CPU slower than the machine whose daemons it follows (a VM's guest, `tiersim validate linux`); default: the platform's `scale` (at most 1), the consistent lens",
    )
    .min(1e-9)
    .max(1000.0),
];

pub const STATS_PARAMS: &[ParamSpec] = &[
    ParamSpec::new("epoch", ParamKind::Duration, "100us", "time-series epoch length (simulated time)").min(1.0),
    // Bounds the series' memory by the input rather than by simulated time (stats.epoch=1ns on
    // a long run made gigabytes of rows).
    ParamSpec::new(
        "max_epochs",
        ParamKind::Int,
        "65536",
        "time-series epochs kept: past it, pairs of epochs merge and the epoch doubles (the summary says so)",
    )
    .min(2.0)
    .max(16_777_216.0),
    ParamSpec::new(
        "warmup_accesses",
        ParamKind::Int,
        "0",
        "accesses that place pages but are not measured (like ChampSim warmup)",
    )
    .min(0.0),
    // The end of a measured window that is not the trace's end (a benchmark's run phase before
    // the program's shutdown work), as ChampSim's --simulation-instructions ends its; counted in
    // the trace's record order, where a capture's marker record is found.
    ParamSpec::new(
        "replay_accesses",
        ParamKind::Int,
        "0",
        "replay only the trace's first N records, in file order (0: all): the run ends when every CPU has done its records among them (e.g. a benchmark's run phase without its shutdown)",
    )
    .min(0.0),
    ParamSpec::new(
        "ping_pong_window",
        ParamKind::Duration,
        "1s",
        "a page migrated back to the node it left within this time counts as ping-pong",
    ),
];

const NODE_KEYS: &[&str] = &[
    "name",
    "device",
    "preset",
    "capacity",
    "occupied",
    "occupied_file",
    "cpus",
    "socket",
    "tier",
    "count",
    "interleave",
    "params",
];
const SWAP_KEYS: &[&str] = &["enabled", "device", "preset", "capacity", "params"];
const DAX_KEYS: &[&str] = &["mode", "device", "preset", "params", "files"];
const TOP_KEYS: &[&str] =
    &["name", "summary", "scale", "host", "os", "stats", "storage", "nodes", "swap", "dax", "distances"];

/// Platform presets shipped with tiersim: (name, TOML).
pub static PRESETS: &[(&str, &str)] = &[
    ("cascadelake_dcpmm", include_str!("../platforms/cascadelake_dcpmm.toml")),
    ("dram_only", include_str!("../platforms/dram_only.toml")),
    ("epyc_cxl_nps1", include_str!("../platforms/epyc_cxl_nps1.toml")),
    ("epyc_cxl_nps2", include_str!("../platforms/epyc_cxl_nps2.toml")),
    ("epyc_cxl_nps4", include_str!("../platforms/epyc_cxl_nps4.toml")),
    ("dram_cxl_flash", include_str!("../platforms/dram_cxl_flash.toml")),
];

/// A memory node, validated. Capacities here are after `scale`.
#[derive(Debug, Clone)]
pub struct NodeSpec {
    pub name: String,
    pub device: String,
    pub preset: Option<String>,
    pub capacity_bytes: u64,
    pub capacity_pages: u64,
    /// Pages of the capacity other software holds when the trace starts, [anonymous, file]
    /// (`occupied`, `occupied_file`): never accessed by the trace, the oldest on the node's
    /// inactive lists, so reclaim takes them first.
    pub occupied_pages: [u64; 2],
    pub cpus: Vec<u32>,
    pub socket: u16,
    pub tier: u8,
    /// Devices in the node's interleave set (e.g. 4 CXL modules, 6 Optane DIMMs).
    pub count: u32,
    pub interleave: u64,
    pub params: Params,
}

#[derive(Debug, Clone)]
pub struct SwapSpec {
    pub device: String,
    pub preset: Option<String>,
    pub capacity_bytes: u64,
    pub capacity_pages: u64,
    pub params: Params,
}

/// Files on a DAX file system (fsdax) or a DAX character device (devdax): file pages live on this
/// device, mapped and copied without the page cache.
#[derive(Debug, Clone)]
pub struct DaxSpec {
    pub devdax: bool,
    pub device: String,
    pub preset: Option<String>,
    pub params: Params,
    /// `dax.files`: the files on the DAX device, by the byte address of their first mapping
    /// record (where the trace puts the file); the other files stay in the page cache of the
    /// `[swap]` device. None: every file is on DAX.
    pub files: Option<Vec<u64>>,
}

/// A fully validated platform.
#[derive(Debug, Clone)]
pub struct Platform {
    pub name: String,
    pub summary: String,
    pub scale: f64,
    pub host: Params,
    pub os: Params,
    pub stats: Params,
    /// The kernel's file I/O path costs (`storage::iopath::SPECS`).
    pub storage: Params,
    pub nodes: Vec<NodeSpec>,
    pub swap: Option<SwapSpec>,
    pub dax: Option<DaxSpec>,
    /// SLIT-style distances between nodes (10 = local).
    pub distances: Vec<Vec<u32>>,
    /// Per node, pages: (min, low, high) watermarks.
    pub watermarks: Vec<(u64, u64, u64)>,
    pub page_size: u64,
    /// Per CPU: its local node.
    pub cpu_node: Vec<u16>,
    /// The platform as a TOML table with every default filled in; loads back to the same platform.
    pub resolved: toml::Table,
}

/// Names of the shipped presets with their one-line summaries.
pub fn preset_list() -> Vec<(String, String)> {
    PRESETS
        .iter()
        .map(|(name, text)| {
            let summary = toml::from_str::<toml::Table>(text)
                .ok()
                .and_then(|t| t.get("summary").and_then(|s| s.as_str()).map(str::to_owned))
                .unwrap_or_default();
            (name.to_string(), summary)
        })
        .collect()
}

/// The device of node `node` of `platform` (a preset name or file), as `characterize` drives it:
/// its kind, its parameters as the platform resolves them, and its interleave set.
pub fn node_target(platform: &str, node: &str) -> Result<tiersim_devices::characterize::Target> {
    let p = load(platform, &[])?;
    let Some(n) = p.nodes.iter().find(|n| n.name == node) else {
        let names: Vec<_> = p.nodes.iter().map(|n| n.name.as_str()).collect();
        return Err(Error::arg("node", format!("{platform} has no node `{node}`; its nodes: {}", names.join(", "))));
    };
    Ok(tiersim_devices::characterize::Target {
        name: format!("{platform} node {node}"),
        entry: tiersim_devices::find(&n.device)?,
        table: n.params.to_toml(),
        count: n.count,
        granule: n.interleave,
    })
}

/// The node names of `path` when it is a platform file (TOML with `[[nodes]]`), else None.
pub fn platform_nodes(path: &str) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(path).ok()?;
    let t: toml::Table = toml::from_str(&text).ok()?;
    let nodes = t.get("nodes")?.as_array()?;
    Some(nodes.iter().filter_map(|n| n.get("name").and_then(|v| v.as_str()).map(str::to_owned)).collect())
}

/// Load a platform by preset name or file path and apply `key.path=value` overrides.
pub fn load(platform: &str, overrides: &[String]) -> Result<Platform> {
    let (origin, text) = match PRESETS.iter().find(|(n, _)| *n == platform) {
        Some((name, text)) => (format!("preset {name}"), (*text).to_owned()),
        None => {
            let path = std::path::Path::new(platform);
            if !path.exists() {
                let names: Vec<_> = PRESETS.iter().map(|(n, _)| *n).collect();
                return Err(Error::arg(
                    "platform",
                    format!("{platform:?} is neither a preset nor an existing file; presets: {}", names.join(", ")),
                ));
            }
            (platform.to_owned(), std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?)
        }
    };
    let mut table: toml::Table = toml::from_str(&text).map_err(|e| toml_error(&origin, &text, &e))?;
    // A run directory's config.toml holds the resolved platform under [platform] beside [run]:
    // loading it re-runs on exactly that platform.
    if table.contains_key("run") && !table.contains_key("nodes") {
        if let Some(toml::Value::Table(p)) = table.remove("platform") {
            table = p;
        }
    }
    for o in overrides {
        apply_override(&mut table, o)?;
    }
    from_table(&table)
}

/// A TOML syntax error as `FILE:LINE:COLUMN: message` (lines and columns from 1), so that an
/// editor can jump to it.
fn toml_error(origin: &str, text: &str, e: &toml::de::Error) -> Error {
    // toml's messages can run over lines ("invalid string\nexpected ..."): one line here.
    let msg = e.message().trim_end().lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join("; ");
    let Some(span) = e.span() else {
        return Error::Path { path: origin.into(), msg };
    };
    let before = &text[..span.start.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    let source_line = text.lines().nth(line - 1).unwrap_or("").trim();
    Error::Syntax {
        path: origin.into(),
        line: line as u64,
        column: column as u64,
        msg: format!("{msg} (in `{source_line}`)"),
    }
}

/// Parse `key.path=value`; the value is TOML (`4`, `"16GiB"`, `[1, 2]`, `true`), and a bare word
/// that is not valid TOML is taken as a string, so `--set host.mode=open` works unquoted.
pub fn parse_override(o: &str) -> Result<(Vec<String>, toml::Value)> {
    let (key, value) = o.split_once('=').ok_or_else(|| Error::arg(o, "expected key.path=value"))?;
    let key = key.trim();
    if key.is_empty() || key.split('.').any(|s| s.is_empty()) {
        return Err(Error::arg(o, "expected key.path=value with a non-empty dotted key"));
    }
    let value = value.trim();
    let parsed = toml::from_str::<toml::Table>(&format!("v = {value}")).ok().and_then(|mut t| t.remove("v"));
    let value = parsed.unwrap_or_else(|| toml::Value::String(value.to_owned()));
    Ok((key.split('.').map(str::to_owned).collect(), value))
}

fn apply_override(table: &mut toml::Table, o: &str) -> Result<()> {
    let (path, value) = parse_override(o)?;
    let mut cur = table;
    let mut i = 0;
    while i < path.len() - 1 {
        let seg = &path[i];
        if seg == "nodes" {
            if i + 2 >= path.len() {
                return Err(Error::arg(o, "expected nodes.NAME.key=value"));
            }
            let name = &path[i + 1];
            let nodes = cur
                .get_mut("nodes")
                .and_then(|v| v.as_array_mut())
                .ok_or_else(|| Error::config("nodes", "platform has no nodes"))?;
            let names: Vec<String> =
                nodes.iter().filter_map(|n| n.get("name").and_then(|v| v.as_str()).map(str::to_owned)).collect();
            let node =
                nodes.iter_mut().find(|n| n.get("name").and_then(|v| v.as_str()) == Some(name)).ok_or_else(|| {
                    Error::config(
                        format!("nodes.{name}"),
                        format!("no node named {name:?}; nodes are {}", names.join(", ")),
                    )
                })?;
            cur = node.as_table_mut().ok_or_else(|| Error::config(format!("nodes.{name}"), "expected a table"))?;
            i += 2;
            continue;
        }
        let entry = cur.entry(seg.clone()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
        cur = entry
            .as_table_mut()
            .ok_or_else(|| Error::config(path[..=i].join("."), "is not a table; cannot set a key inside it"))?;
        i += 1;
    }
    cur.insert(path[path.len() - 1].clone(), value);
    Ok(())
}

/// `dax.files`: an array of distinct file start addresses (non-negative integers, as the trace's
/// mapping records give them), which puts the other files in the page cache, so it needs a
/// `[swap]` device for them.
fn dax_files(v: &toml::Value, has_swap: bool) -> Result<Vec<u64>> {
    const WHAT: &str = "expected an array of file start addresses, the byte address of each file's first mapping \
                        record (integers, e.g. [0x600000a00000])";
    let Some(items) = v.as_array() else {
        return Err(Error::config("dax.files", format!("{WHAT}, got {v}")));
    };
    let mut files = Vec::with_capacity(items.len());
    for item in items {
        match item.as_integer() {
            Some(a) if a >= 0 && !files.contains(&(a as u64)) => files.push(a as u64),
            Some(a) if a >= 0 => {
                return Err(Error::config("dax.files", format!("the address {a:#x} is listed twice")));
            }
            _ => return Err(Error::config("dax.files", format!("{WHAT}, got {item}"))),
        }
    }
    if !has_swap {
        return Err(Error::config(
            "dax.files",
            "puts the files it does not list in the page cache of the block device, but the platform has no [swap] \
             section: add one (its device holds those files), or leave dax.files out to put every file on DAX",
        ));
    }
    Ok(files)
}

fn check_keys(t: &toml::Table, valid: &[&str], at: &str) -> Result<()> {
    for k in t.keys() {
        if !valid.contains(&k.as_str()) {
            let key = if at.is_empty() { k.clone() } else { format!("{at}.{k}") };
            return Err(Error::config(key, format!("unknown key; valid keys: {}", valid.join(", "))));
        }
    }
    Ok(())
}

fn section<'a>(t: &'a toml::Table, key: &str) -> Result<Option<&'a toml::Table>> {
    match t.get(key) {
        None => Ok(None),
        Some(toml::Value::Table(s)) => Ok(Some(s)),
        Some(v) => Err(Error::config(key, format!("expected a table, got {v}"))),
    }
}

fn str_of<'a>(t: &'a toml::Table, key: &str, at: &str) -> Result<Option<&'a str>> {
    match t.get(key) {
        None => Ok(None),
        Some(toml::Value::String(s)) => Ok(Some(s)),
        Some(v) => Err(Error::config(format!("{at}.{key}"), format!("expected a string, got {v}"))),
    }
}

fn int_of(t: &toml::Table, key: &str, at: &str) -> Result<Option<i64>> {
    match t.get(key) {
        None => Ok(None),
        Some(toml::Value::Integer(i)) => Ok(Some(*i)),
        Some(v) => Err(Error::config(format!("{at}.{key}"), format!("expected an integer, got {v}"))),
    }
}

fn bytes_of(t: &toml::Table, key: &str, at: &str) -> Result<Option<u64>> {
    match t.get(key) {
        None => Ok(None),
        Some(toml::Value::Integer(i)) if *i >= 0 => Ok(Some(*i as u64)),
        Some(toml::Value::String(s)) => parse_bytes(s).map(Some).map_err(|e| Error::config(format!("{at}.{key}"), e)),
        Some(v) => Err(Error::config(format!("{at}.{key}"), format!("expected a size like \"16GiB\", got {v}"))),
    }
}

/// Resolve a device's parameter table: preset params, then the node's own `params` on top.
fn device_params(t: &toml::Table, at: &str, default_device: Option<&str>) -> Result<(String, Option<String>, Params)> {
    let preset_name = str_of(t, "preset", at)?.map(str::to_owned);
    let mut merged = toml::Table::new();
    let mut device = str_of(t, "device", at)?.map(str::to_owned);
    if let Some(p) = &preset_name {
        let preset = tiersim_devices::presets::get(p).map_err(|e| match e {
            Error::UnknownPlugin { .. } => Error::config(format!("{at}.preset"), e.to_string()),
            other => other,
        })?;
        if let Some(d) = &device {
            if *d != preset.device {
                return Err(Error::config(
                    format!("{at}.device"),
                    format!("device {d:?} does not match preset {p:?}, which is a {:?} device", preset.device),
                ));
            }
        }
        device = Some(preset.device.clone());
        merged.extend(preset.params.clone());
    }
    let device = device
        .or_else(|| default_device.map(str::to_owned))
        .ok_or_else(|| Error::config(format!("{at}.device"), "missing: give a device kind or a preset"))?;
    if let Some(own) = section(t, "params").map_err(|e| e.under(at))? {
        merged.extend(own.clone());
    }
    let entry = tiersim_devices::find(&device).map_err(|e| Error::config(format!("{at}.device"), e.to_string()))?;
    let params = Params::resolve(entry.info.params, Some(&merged)).map_err(|e| e.under(&format!("{at}.params")))?;
    (entry.build)(&params).map_err(|e| e.under(&format!("{at}.params")))?;
    Ok((device, preset_name, params))
}

/// Linux 5.x init_per_zone_wmark_min: min_free_kbytes = int_sqrt(lowmem_kbytes * 16), clamped
/// to [128, 262144]; split over nodes by size. Per node (policies.md 1.1, __setup_per_zone_wmarks):
/// tmp = max(min/4, managed * watermark_scale_factor / 10000); low = min + tmp; high = low + tmp.
/// min_free is the modelled machine's (from its unscaled memory, or as given) shrunk by `scale`
/// like every byte-sized knob: the kernel's square root would otherwise give a scaled machine
/// a reserve that grows as it shrinks (2 % of DRAM at scale 1/8192 against 0.05 % unscaled).
fn watermarks(nodes: &[NodeSpec], page_size: u64, min_free: u64, wsf: u64, scale: f64) -> Vec<(u64, u64, u64)> {
    let total_bytes: u64 = nodes.iter().map(|n| n.capacity_bytes).sum();
    let unscaled_min_free = if min_free > 0 {
        min_free
    } else {
        let kb = ((((total_bytes as f64 / scale) as u64 / 1024) as f64 * 16.0).sqrt() as u64).clamp(128, 262_144);
        kb * 1024
    };
    let min_free_bytes = (unscaled_min_free as f64 * scale) as u64;
    nodes
        .iter()
        .map(|n| {
            let share = (min_free_bytes as u128 * n.capacity_bytes as u128 / total_bytes.max(1) as u128) as u64;
            let min = share / page_size;
            let tmp = (min / 4).max(n.capacity_pages * wsf / 10_000);
            // A node must keep at least one usable page above its high watermark.
            let cap = n.capacity_pages.saturating_sub(1);
            let (min, low, high) = (min.min(cap), (min + tmp).min(cap), (min + 2 * tmp).min(cap));
            (min, low, high)
        })
        .collect()
}

/// Default SLIT distances when the file gives none; these match the example of policies.md 1.1
/// (local DRAM 10, local CPU-less node 17, remote DRAM 21, remote CPU-less 28); two NUMA nodes
/// of one socket (AMD NPS2/NPS4) are 12 apart.
fn default_distance(a: &NodeSpec, b: &NodeSpec) -> u32 {
    let same_socket = a.socket == b.socket;
    match (same_socket, !a.cpus.is_empty() && !b.cpus.is_empty()) {
        (true, true) => 12,
        (true, false) => 17,
        (false, true) => 21,
        (false, false) => 28,
    }
}

pub fn from_table(t: &toml::Table) -> Result<Platform> {
    check_keys(t, TOP_KEYS, "")?;
    let name = str_of(t, "name", "")?.ok_or_else(|| Error::config("name", "missing platform name"))?.to_owned();
    let summary = str_of(t, "summary", "")?.unwrap_or("").to_owned();
    let scale = match t.get("scale") {
        None => 1.0,
        Some(toml::Value::Float(f)) => *f,
        Some(toml::Value::Integer(i)) => *i as f64,
        Some(v) => return Err(Error::config("scale", format!("expected a number, got {v}"))),
    };
    if !(scale > 0.0 && scale <= 1024.0) {
        return Err(Error::config("scale", format!("{scale} must be in (0, 1024]")));
    }
    let host = Params::resolve(HOST_PARAMS, section(t, "host")?).map_err(|e| e.under("host"))?;
    // The lens by default: a machine shrunk by `scale` runs its daemons `scale` times faster
    // unless told otherwise, so a page is rescanned after the same share of the run as on the
    // real machine (docs/model.md, "Time scale").
    let mut os_t = section(t, "os")?.cloned().unwrap_or_default();
    os_t.entry("daemon_time_scale").or_insert(toml::Value::Float(scale.min(1.0)));
    let os = Params::resolve(OS_PARAMS, Some(&os_t)).map_err(|e| e.under("os"))?;
    let stats = Params::resolve(STATS_PARAMS, section(t, "stats")?).map_err(|e| e.under("stats"))?;
    let storage =
        Params::resolve(crate::storage::iopath::SPECS, section(t, "storage")?).map_err(|e| e.under("storage"))?;
    // The pairs of costs checked together (a journal that holds a commit), at load.
    crate::storage::iopath::IoPath::from_params(&storage).map_err(|e| e.under("storage"))?;
    let page_size = os.bytes("page_size");
    if !page_size.is_power_of_two() {
        return Err(Error::config("os.page_size", format!("{page_size} B is not a power of two")));
    }
    let ncpus = host.uint("cpus") as u32;
    let sockets = host.uint("sockets") as u16;

    let raw_nodes = match t.get("nodes") {
        Some(toml::Value::Array(a)) if !a.is_empty() => a,
        Some(toml::Value::Array(_)) | None => {
            return Err(Error::config("nodes", "a platform needs at least one [[nodes]] entry"))
        }
        Some(v) => return Err(Error::config("nodes", format!("expected an array of tables ([[nodes]]), got {v}"))),
    };
    if raw_nodes.len() > 64 {
        return Err(Error::config("nodes", "at most 64 memory nodes are supported"));
    }
    let mut nodes = Vec::new();
    let mut cpu_node: Vec<Option<u16>> = vec![None; ncpus as usize];
    for (i, raw) in raw_nodes.iter().enumerate() {
        let nt = raw.as_table().ok_or_else(|| Error::config(format!("nodes[{i}]"), "expected a table"))?;
        let name = str_of(nt, "name", &format!("nodes[{i}]"))?
            .ok_or_else(|| Error::config(format!("nodes[{i}].name"), "missing node name"))?
            .to_owned();
        let at = format!("nodes.{name}");
        if nodes.iter().any(|n: &NodeSpec| n.name == name) {
            return Err(Error::config(at, "duplicate node name"));
        }
        check_keys(nt, NODE_KEYS, &at)?;
        let (device, preset, params) = device_params(nt, &at, None)?;
        let raw_cap = bytes_of(nt, "capacity", &at)?
            .ok_or_else(|| Error::config(format!("{at}.capacity"), "missing node capacity"))?;
        let capacity_bytes = (raw_cap as f64 * scale) as u64;
        let capacity_pages = capacity_bytes / page_size;
        if capacity_pages == 0 {
            return Err(Error::config(
                format!("{at}.capacity"),
                format!("capacity {capacity_bytes} B (after scale {scale}) is smaller than one page ({page_size} B)"),
            ));
        }
        if capacity_pages > u32::MAX as u64 {
            return Err(Error::config(
                format!("{at}.capacity"),
                format!("{capacity_pages} pages is more than the 2^32 frames a node may have"),
            ));
        }
        let mut occupied_pages = [0; 2];
        for (slot, key) in occupied_pages.iter_mut().zip(["occupied", "occupied_file"]) {
            *slot = (bytes_of(nt, key, &at)?.unwrap_or(0) as f64 * scale) as u64 / page_size;
        }
        if occupied_pages[0] + occupied_pages[1] >= capacity_pages {
            return Err(Error::config(
                format!("{at}.occupied"),
                format!(
                    "{} occupied pages leave none of the node's {capacity_pages} for the trace",
                    occupied_pages[0] + occupied_pages[1]
                ),
            ));
        }
        let cpus = match str_of(nt, "cpus", &at)? {
            Some(s) => parse_cpu_list(s).map_err(|e| Error::config(format!("{at}.cpus"), e))?,
            None => Vec::new(),
        };
        let socket = int_of(nt, "socket", &at)?.unwrap_or(0);
        if socket < 0 || socket >= sockets as i64 {
            return Err(Error::config(
                format!("{at}.socket"),
                format!("socket {socket} does not exist (host.sockets = {sockets})"),
            ));
        }
        for &c in &cpus {
            let slot = cpu_node
                .get_mut(c as usize)
                .ok_or_else(|| Error::config(format!("{at}.cpus"), format!("CPU {c} is beyond host.cpus = {ncpus}")))?;
            if let Some(prev) = slot {
                return Err(Error::config(
                    format!("{at}.cpus"),
                    format!("CPU {c} is already local to node {}", nodes[*prev as usize].name),
                ));
            }
            *slot = Some(i as u16);
        }
        let tier = int_of(nt, "tier", &at)?.unwrap_or(if cpus.is_empty() { 1 } else { 0 });
        if !(0..=7).contains(&tier) {
            return Err(Error::config(format!("{at}.tier"), format!("tier {tier} must be in 0..7")));
        }
        let count = int_of(nt, "count", &at)?.unwrap_or(1);
        if !(1..=64).contains(&count) {
            return Err(Error::config(
                format!("{at}.count"),
                format!("{count} devices in the interleave set; must be 1..64"),
            ));
        }
        let interleave = bytes_of(nt, "interleave", &at)?.unwrap_or(4096);
        if !interleave.is_power_of_two() || interleave < 64 {
            return Err(Error::config(
                format!("{at}.interleave"),
                format!("{interleave} B must be a power of two of at least 64 B"),
            ));
        }
        nodes.push(NodeSpec {
            name,
            device,
            preset,
            capacity_bytes,
            capacity_pages,
            occupied_pages,
            cpus,
            socket: socket as u16,
            tier: tier as u8,
            count: count as u32,
            interleave,
            params,
        });
    }
    let cpu_node: Vec<u16> = cpu_node
        .iter()
        .enumerate()
        .map(|(c, n)| {
            n.ok_or_else(|| {
                Error::config(
                    "nodes",
                    format!("CPU {c} is local to no node: give every CPU a node in some node's `cpus`"),
                )
            })
        })
        .collect::<Result<_>>()?;

    let swap = match section(t, "swap")? {
        None => None,
        Some(st) => {
            check_keys(st, SWAP_KEYS, "swap")?;
            let enabled = match st.get("enabled") {
                None => true,
                Some(toml::Value::Boolean(b)) => *b,
                Some(v) => return Err(Error::config("swap.enabled", format!("expected true or false, got {v}"))),
            };
            if enabled {
                let (device, preset, params) = device_params(st, "swap", Some("ssd"))?;
                let raw = bytes_of(st, "capacity", "swap")?.unwrap_or(64 << 30);
                let capacity_bytes = (raw as f64 * scale) as u64;
                let capacity_pages = capacity_bytes / page_size;
                if capacity_pages == 0 {
                    return Err(Error::config(
                        "swap.capacity",
                        format!("capacity {capacity_bytes} B (after scale) is smaller than one page"),
                    ));
                }
                Some(SwapSpec { device, preset, capacity_bytes, capacity_pages, params })
            } else {
                None
            }
        }
    };

    let dax = match section(t, "dax")? {
        None => None,
        Some(dt) => {
            check_keys(dt, DAX_KEYS, "dax")?;
            let devdax = match str_of(dt, "mode", "dax")?.unwrap_or("fsdax") {
                "fsdax" => false,
                "devdax" => true,
                other => {
                    return Err(Error::config("dax.mode", format!("expected \"fsdax\" or \"devdax\", got {other:?}")))
                }
            };
            let (device, preset, params) = device_params(dt, "dax", None)?;
            let files = match dt.get("files") {
                None => None,
                Some(v) => Some(dax_files(v, swap.is_some())?),
            };
            Some(DaxSpec { devdax, device, preset, params, files })
        }
    };

    let n = nodes.len();
    let distances = match t.get("distances") {
        None => (0..n)
            .map(|a| (0..n).map(|b| if a == b { 10 } else { default_distance(&nodes[a], &nodes[b]) }).collect())
            .collect(),
        Some(v) => {
            let rows =
                v.as_array().ok_or_else(|| Error::config("distances", "expected a square matrix of integers"))?;
            let m: Vec<Vec<u32>> = rows
                .iter()
                .map(|r| {
                    r.as_array().filter(|r| r.len() == n).and_then(|r| {
                        r.iter().map(|x| x.as_integer().filter(|x| (10..=255).contains(x)).map(|x| x as u32)).collect()
                    })
                })
                .collect::<Option<_>>()
                .ok_or_else(|| Error::config("distances", format!("expected a {n}x{n} matrix of integers 10..255")))?;
            if m.len() != n || (0..n).any(|i| m[i][i] != 10) {
                return Err(Error::config("distances", format!("expected a {n}x{n} matrix with 10 on the diagonal")));
            }
            m
        }
    };
    let watermarks = watermarks(&nodes, page_size, os.bytes("min_free"), os.uint("watermark_scale_factor"), scale);

    let mut resolved = toml::Table::new();
    resolved.insert("name".into(), name.clone().into());
    resolved.insert("summary".into(), summary.clone().into());
    resolved.insert("scale".into(), toml::Value::Float(scale));
    resolved.insert("host".into(), host.to_toml().into());
    resolved.insert("os".into(), os.to_toml().into());
    resolved.insert("stats".into(), stats.to_toml().into());
    resolved.insert("storage".into(), storage.to_toml().into());
    let node_tables: Vec<toml::Value> = raw_nodes
        .iter()
        .zip(&nodes)
        .map(|(raw, spec)| {
            let mut nt = raw.as_table().cloned().unwrap_or_default();
            nt.insert("device".into(), spec.device.clone().into());
            nt.insert("tier".into(), (spec.tier as i64).into());
            nt.insert("socket".into(), (spec.socket as i64).into());
            nt.insert("count".into(), (spec.count as i64).into());
            nt.insert("interleave".into(), format!("{}B", spec.interleave).into());
            nt.insert("params".into(), spec.params.to_toml().into());
            nt.into()
        })
        .collect();
    resolved.insert("nodes".into(), toml::Value::Array(node_tables));
    let mut swap_t = section(t, "swap")?.cloned().unwrap_or_default();
    match &swap {
        Some(s) => {
            swap_t.insert("enabled".into(), true.into());
            swap_t.insert("device".into(), s.device.clone().into());
            swap_t.insert("params".into(), s.params.to_toml().into());
        }
        None => {
            swap_t = toml::Table::new();
            swap_t.insert("enabled".into(), false.into());
        }
    }
    resolved.insert("swap".into(), swap_t.into());
    if let Some(d) = &dax {
        let mut dax_t = toml::Table::new();
        dax_t.insert("mode".into(), if d.devdax { "devdax" } else { "fsdax" }.into());
        dax_t.insert("device".into(), d.device.clone().into());
        dax_t.insert("params".into(), d.params.to_toml().into());
        if let Some(files) = &d.files {
            dax_t.insert("files".into(), toml::Value::Array(files.iter().map(|&a| (a as i64).into()).collect()));
        }
        resolved.insert("dax".into(), dax_t.into());
    }
    resolved.insert(
        "distances".into(),
        toml::Value::Array(
            distances.iter().map(|r| toml::Value::Array(r.iter().map(|d| (*d as i64).into()).collect())).collect(),
        ),
    );

    Ok(Platform {
        name,
        summary,
        scale,
        host,
        os,
        stats,
        storage,
        nodes,
        swap,
        dax,
        distances,
        watermarks,
        page_size,
        cpu_node,
        resolved,
    })
}

impl Platform {
    /// Zonelist of node `from`: every node by increasing distance; ties broken as the kernel's
    /// find_next_best_node does (a CPU-less node wins a tie against a node with CPUs, then the
    /// lower id) — policies.md 1.1.
    pub fn zonelist(&self, from: usize) -> Vec<u16> {
        let mut order: Vec<usize> = (0..self.nodes.len()).collect();
        order.sort_by_key(|&b| {
            (if b == from { 0 } else { 1 }, self.distances[from][b], !self.nodes[b].cpus.is_empty(), b)
        });
        order.into_iter().map(|b| b as u16).collect()
    }
}
