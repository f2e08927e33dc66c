//! Making small traces from big ones (`sample`) and multi-program workloads from several traces
//! (`mix`). Both stream: memory is per CPU and per input, never per access.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::path::Path;

use tiersim_core::{Access, Error, Result};

use crate::convert::{self, Format, TextOptions};
use crate::format::{AddrKind, TimeUnit, TraceMeta, TraceStats, TraceWriter, MAX_CPUS};
use crate::AccessSource;

/// Which accesses `sample` keeps: all three filters apply, in this order.
#[derive(Debug, Clone, Default)]
pub struct SampleOptions {
    /// `[start, end)` in the trace's time unit: absolute ns, or for instruction traces the
    /// access's CPU's instruction count since the start of the trace.
    pub window: (Option<u64>, Option<u64>),
    /// Only these CPUs (ids are kept).
    pub cpus: Option<Vec<u32>>,
    /// Keep every Nth access that passed the other filters, starting with the first (1: all).
    pub every: u64,
}

/// Write the accesses of `src` (native, or `src_format`) that `opts` selects to the native
/// trace `dst`. In instruction traces a kept access's gap absorbs its CPU's dropped gaps, so
/// each CPU's instruction count stays that of the original program. File mapping records are
/// all kept, in place.
pub fn sample(
    src: &Path,
    src_format: Option<Format>,
    dst: &Path,
    opts: &SampleOptions,
    text: &TextOptions,
) -> Result<TraceStats> {
    if opts.every == 0 {
        return Err(Error::arg("every", "must be at least 1"));
    }
    if let (Some(s), Some(e)) = opts.window {
        if e <= s {
            return Err(Error::arg("window", format!("end {e} is not after start {s}")));
        }
    }
    let mut r = convert::open(src, src_format, text)?;
    let h = r.header().clone();
    let meta = TraceMeta { time_unit: h.time_unit, addr_kind: h.addr_kind, page_size: h.page_size };
    let mut w = TraceWriter::create(dst, meta)?;
    let (start, end) = (opts.window.0.unwrap_or(0), opts.window.1.unwrap_or(u64::MAX));
    let mut want: Vec<bool> = Vec::new();
    if let Some(cpus) = &opts.cpus {
        for &c in cpus {
            if c >= MAX_CPUS {
                return Err(Error::arg("cpus", format!("cpu {c} is not below {MAX_CPUS}")));
            }
            if c as usize >= want.len() {
                want.resize(c as usize + 1, false);
            }
            want[c as usize] = true;
        }
    }
    // Per CPU: instructions so far, and at the last kept access (or the window start).
    let mut now: Vec<u64> = Vec::new();
    let mut kept_at: Vec<u64> = Vec::new();
    // Every Nth access of each CPU, not of the file: a CPU whose accesses fall between another's
    // (threads interleaved one access each) would otherwise be dropped whole.
    let mut passed: Vec<u64> = Vec::new();
    crate::for_each_access(r.as_mut(), |a| {
        let cpu = a.cpu as usize;
        let t = match h.time_unit {
            TimeUnit::Ns => a.time,
            TimeUnit::Instructions => {
                if cpu >= now.len() {
                    now.resize(cpu + 1, 0);
                    kept_at.resize(cpu + 1, start);
                }
                now[cpu] = now[cpu].saturating_add(a.time);
                now[cpu]
            }
        };
        if a.is_map() {
            // A mapping holds for the rest of the run whatever is sampled: kept, taking no
            // instructions of its own (the next kept access of its CPU carries the gap).
            let mut out = *a;
            if h.time_unit == TimeUnit::Instructions {
                out.time = 0;
            }
            return w.write(&out);
        }
        if t < start || t >= end {
            return Ok(());
        }
        if opts.cpus.is_some() && !want.get(cpu).copied().unwrap_or(false) {
            return Ok(());
        }
        if cpu >= passed.len() {
            passed.resize(cpu + 1, 0);
        }
        passed[cpu] += 1;
        if !(passed[cpu] - 1).is_multiple_of(opts.every) {
            return Ok(());
        }
        let mut out = *a;
        if h.time_unit == TimeUnit::Instructions {
            out.time = t - kept_at[cpu];
            kept_at[cpu] = t;
        }
        w.write(&out)
    })?;
    w.finish()
}

/// One program of a mix.
#[derive(Debug, Clone)]
pub struct MixInput<'a> {
    pub path: &'a Path,
    pub format: Option<Format>,
    /// Its CPU 0 becomes this CPU; `None`: right after the previous input's CPUs.
    pub first_cpu: Option<u32>,
}

/// Bits above x86-64's 47-bit user address space: input i's virtual addresses get i << 48
/// added, like an address-space id, so that programs never share a page.
pub const ASID_SHIFT: u32 = 48;

struct Head {
    src: Box<dyn AccessSource>,
    buf: Vec<Access>,
    pos: usize,
    cpu_base: u32,
    addr_base: u64,
    /// Per-CPU instruction counts (instruction traces), the merge key.
    instr: Vec<u64>,
}

impl Head {
    fn next(&mut self) -> Result<Option<Access>> {
        if self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
            if self.src.read_batch(&mut self.buf, 1 << 12)? == 0 {
                return Ok(None);
            }
        }
        self.pos += 1;
        Ok(Some(self.buf[self.pos - 1]))
    }
}

/// CPUs an input uses: its header's count, or a scan when the header has none.
fn cpu_count(path: &Path, format: Option<Format>, text: &TextOptions) -> Result<u32> {
    let mut r = convert::open(path, format, text)?;
    if let Some(s) = &r.header().stats {
        return Ok(s.per_cpu.len() as u32);
    }
    let mut n = 0u32;
    crate::for_each_access(r.as_mut(), |a| {
        n = n.max(a.cpu + 1);
        Ok(())
    })?;
    Ok(n)
}

/// Merge several traces into one multi-program trace at `dst`: each input's CPUs are moved to
/// their own range, virtual addresses to their own address space (see `ASID_SHIFT`), and
/// accesses are merged in time order (ns traces by timestamp; instruction traces by each
/// access's CPU's instruction count, which keeps every CPU's gaps valid). Ties go to the
/// earlier input.
pub fn mix(inputs: &[MixInput<'_>], dst: &Path, text: &TextOptions) -> Result<TraceStats> {
    if inputs.is_empty() {
        return Err(Error::arg("inputs", "give at least one trace to mix"));
    }
    if inputs.len() > 1 << (64 - ASID_SHIFT) {
        return Err(Error::arg("inputs", format!("at most {} traces can be mixed", 1u32 << (64 - ASID_SHIFT))));
    }
    let mut heads = Vec::new();
    let mut meta: Option<TraceMeta> = None;
    let mut next_cpu = 0u64;
    let mut used: Vec<(u64, u64, usize)> = Vec::new();
    for (i, inp) in inputs.iter().enumerate() {
        let n = cpu_count(inp.path, inp.format, text)?;
        let src = convert::open(inp.path, inp.format, text)?;
        let h = src.header();
        let m = TraceMeta { time_unit: h.time_unit, addr_kind: h.addr_kind, page_size: h.page_size };
        match meta {
            None => meta = Some(m),
            Some(first) if first.time_unit != m.time_unit || first.addr_kind != m.addr_kind => {
                return Err(Error::arg(
                    inp.path.display().to_string(),
                    format!(
                        "{} time and {} addresses, but the first input has {} and {}; mix traces of one kind",
                        m.time_unit.name(),
                        m.addr_kind.name(),
                        first.time_unit.name(),
                        first.addr_kind.name()
                    ),
                ))
            }
            Some(_) => {}
        }
        let base = inp.first_cpu.map(u64::from).unwrap_or(next_cpu);
        if base + n as u64 > MAX_CPUS as u64 {
            return Err(Error::arg(
                inp.path.display().to_string(),
                format!("CPUs {base}..{} exceed {MAX_CPUS}", base + n as u64),
            ));
        }
        if let Some(&(lo, hi, j)) = used.iter().find(|&&(lo, hi, _)| base < hi && lo < base + n as u64) {
            return Err(Error::arg(
                inp.path.display().to_string(),
                format!("CPUs {base}..{} overlap input {j}'s CPUs {lo}..{hi}", base + n as u64),
            ));
        }
        used.push((base, base + n as u64, i));
        next_cpu = base + n as u64;
        let addr_base = if m.addr_kind == AddrKind::Virtual { (i as u64) << ASID_SHIFT } else { 0 };
        heads.push(Head { src, buf: Vec::new(), pos: 0, cpu_base: base as u32, addr_base, instr: Vec::new() });
    }
    let meta = meta.expect("at least one input");
    let separate = meta.addr_kind == AddrKind::Virtual && inputs.len() > 1;
    let mut w = TraceWriter::create(dst, meta)?;
    // (key, input) of each input's next access; the access itself waits in `pending`.
    let mut heap = BinaryHeap::new();
    let mut pending: Vec<Option<Access>> = vec![None; heads.len()];
    let key = |h: &mut Head, a: &Access| -> u64 {
        match meta.time_unit {
            TimeUnit::Ns => a.time,
            TimeUnit::Instructions => {
                let c = a.cpu as usize;
                if c >= h.instr.len() {
                    h.instr.resize(c + 1, 0);
                }
                h.instr[c] = h.instr[c].saturating_add(a.time);
                h.instr[c]
            }
        }
    };
    for (i, h) in heads.iter_mut().enumerate() {
        if let Some(a) = h.next()? {
            heap.push(Reverse((key(h, &a), i)));
            pending[i] = Some(a);
        }
    }
    while let Some(Reverse((_, i))) = heap.pop() {
        let h = &mut heads[i];
        let a = pending[i].take().expect("a pending access per heap entry");
        if separate && a.addr >> ASID_SHIFT != 0 {
            return Err(Error::arg(
                inputs[i].path.display().to_string(),
                format!("virtual address {:#x} uses bits 48 and above, where mix puts the program's id", a.addr),
            ));
        }
        let addr = a.addr + h.addr_base;
        w.write(&Access { addr, cpu: a.cpu + h.cpu_base, ..a })?;
        if let Some(b) = h.next()? {
            heap.push(Reverse((key(h, &b), i)));
            pending[i] = Some(b);
        }
    }
    w.finish()
}
