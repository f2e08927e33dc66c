//! What the two zstd examples (plane_groups, zstd_fast) share: a trace read a frame's worth of
//! records at a time, laid out in byte planes as the writer does, and the thread's CPU clock.

use std::time::Duration;

use tiersim_core::Access;
use tiersim_trace::format::TraceReader;
use tiersim_trace::AccessSource;

/// Records of a frame, as the capture's writer makes them.
pub const FRAME: usize = 65_536;
/// Bytes of a record.
pub const R: usize = 24;

/// CPU time of this thread.
pub fn cpu_time() -> Duration {
    // SAFETY: clock_gettime writes the struct it is given.
    let mut t: libc::timespec = unsafe { std::mem::zeroed() };
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// The next FRAME records of `r` (fewer at the end) into `recs`; their count, 0 at the end.
pub fn next_frame(r: &mut TraceReader, recs: &mut Vec<Access>) -> usize {
    recs.clear();
    let mut k = 0;
    while k < FRAME {
        let got = r.read_batch(recs, FRAME - k).expect("read");
        if got == 0 {
            break;
        }
        k += got;
    }
    k
}

/// `recs` byte-shuffled into `p`: plane b of the k records at b * k, as the writer lays them out;
/// with `delta_time`, each record's time less the previous record's.
pub fn shuffle(recs: &[Access], p: &mut [u8], delta_time: bool) {
    let k = recs.len();
    let mut prev = 0u64;
    for (j, a) in recs.iter().enumerate() {
        let mut row = [0u8; R];
        let t = if delta_time { a.time.wrapping_sub(prev) } else { a.time };
        prev = a.time;
        row[0..8].copy_from_slice(&t.to_le_bytes());
        row[8..16].copy_from_slice(&a.addr.to_le_bytes());
        row[16..20].copy_from_slice(&a.cpu.to_le_bytes());
        row[20..22].copy_from_slice(&a.size.to_le_bytes());
        row[22] = a.op.is_write() as u8;
        row[23] = a.flags;
        for (b, v) in row.iter().enumerate() {
            p[b * k + j] = *v;
        }
    }
}
