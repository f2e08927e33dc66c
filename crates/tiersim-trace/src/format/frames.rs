//! Frame filter 1: records of a frame transposed into byte planes and back, with the
//! reader's record checks done on the planes directly.

use std::mem::MaybeUninit;
use std::ops::Range;

use tiersim_core::Access;

use super::*;

/// Records the writer places in the planes at a time.
pub(crate) const SHUFFLE_RUN: usize = 64;
#[cfg(target_arch = "x86_64")]
const _: () = assert!(SHUFFLE_RUN == sse2::SHUFFLE_RECORDS);

/// Records per block of the writer's shuffle: a block's rows (96 KiB) and its slice of every
/// plane stay in L2 while the 24 planes are walked.
const SHUFFLE_BLOCK: usize = 4096;

/// Rows of whole records into byte planes (frame filter 1), by the definition's layout.
#[cfg(test)]
pub(crate) fn shuffle(rows: &[u8], planes: &mut Vec<u8>) {
    let n = rows.len() / RECORD_SIZE;
    // Every byte is written below: what the buffer held before needs no clearing.
    planes.resize(n * RECORD_SIZE, 0);
    shuffle_into(rows, planes, n, 0);
}

/// The plane groups of a whole frame: bytes 0..8 (time), 8..16 (address) and 16..24 (cpu,
/// size, op, flags) of each record, 8 planes a group.
pub(crate) const ALL_GROUPS: Range<usize> = 0..RECORD_SIZE / 8;
/// The address's plane group alone: what differs between a capture's two traces.
pub(crate) const ADDR_GROUP: Range<usize> = R_ADDR / 8..R_ADDR / 8 + 1;

/// Rows of whole records into places `at..` of the byte planes of a frame of `n` records
/// (`planes` is `n` x 24 bytes): the writer shuffles records as they come, in blocks of 64.
#[cfg(test)]
pub(crate) fn shuffle_into(rows: &[u8], planes: &mut [u8], n: usize, at: usize) {
    shuffle_groups_into(rows, planes, n, at, ALL_GROUPS)
}

/// `shuffle_into` for the planes of plane groups `groups` only (see `ALL_GROUPS`): `planes` is
/// `n` x 8 bytes a group, the groups' planes in order.
pub(crate) fn shuffle_groups_into(rows: &[u8], planes: &mut [u8], n: usize, at: usize, groups: Range<usize>) {
    let k = rows.len() / RECORD_SIZE;
    assert!(
        at + k <= n && groups.end <= ALL_GROUPS.end && planes.len() == n * 8 * groups.len(),
        "{k} records at {at} of a frame of {n}"
    );
    if k == 0 {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    let done = {
        let whole = k - k % sse2::SHUFFLE_RECORDS;
        for start in (0..whole).step_by(sse2::SHUFFLE_RECORDS) {
            // SAFETY: SSE2 is part of the x86_64 baseline; the loads and stores are slices
            // checked in bounds.
            unsafe { sse2::shuffle64(rows, start, planes, n, at + start, groups.clone()) };
        }
        whole
    };
    #[cfg(not(target_arch = "x86_64"))]
    let done = 0;
    let first = groups.start * 8;
    for start in (done..k).step_by(SHUFFLE_BLOCK) {
        let end = (start + SHUFFLE_BLOCK).min(k);
        let block = &rows[start * RECORD_SIZE..end * RECORD_SIZE];
        for (b, plane) in planes.chunks_exact_mut(n).enumerate() {
            for (d, r) in plane[at + start..at + end].iter_mut().zip(block.chunks_exact(RECORD_SIZE)) {
                *d = r[first + b];
            }
        }
    }
}

/// Move the `planes` planes of a frame laid out for `cap` records, of which the first `n` are
/// filled, to their places in a frame of `n` records (the first `n` x `planes` bytes of `buf`).
pub(crate) fn compact_planes(buf: &mut [u8], planes: usize, cap: usize, n: usize) {
    debug_assert!(n <= cap && buf.len() >= cap * planes);
    for b in 1..planes {
        buf.copy_within(b * cap..b * cap + n, b * n);
    }
}

/// The 24 bytes of record `j` of a shuffled frame of `n` records.
#[inline(always)]
pub(crate) fn gather1(planes: &[u8], n: usize, j: usize) -> [u8; RECORD_SIZE] {
    let mut r = [0u8; RECORD_SIZE];
    for (k, b) in r.iter_mut().enumerate() {
        *b = planes[k * n + j];
    }
    r
}

/// Records `first..first + dst.len()` of the shuffled frame `planes` into `dst`, read straight
/// from the planes, checked as `TraceReader::convert` checks rows. Returns whether every record
/// was good; only then is all of `dst` written.
pub(crate) fn unshuffle(
    planes: &[u8],
    first: usize,
    dst: &mut [MaybeUninit<Access>],
    cpu_limit: u32,
    ns: bool,
    prev: &mut u64,
) -> bool {
    // Two copies, so instruction traces pay nothing for the ns ordering check.
    if ns {
        unshuffle_as::<true>(planes, first, dst, cpu_limit, prev)
    } else {
        unshuffle_as::<false>(planes, first, dst, cpu_limit, prev)
    }
}

#[inline(always)]
fn unshuffle_as<const NS: bool>(
    planes: &[u8],
    first: usize,
    dst: &mut [MaybeUninit<Access>],
    cpu_limit: u32,
    prev: &mut u64,
) -> bool {
    let n = planes.len() / RECORD_SIZE;
    let mut done = 0;
    // Only the non-SIMD build keeps this initial value.
    #[cfg_attr(target_arch = "x86_64", allow(unused_assignments))]
    let mut ok = true;
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY (all three calls): SSE2 is part of the x86_64 baseline; `rows` bounds-checks its
        // loads and stores, and `Access` is laid out as a record row (asserted in `sse2`).
        let mut checks = unsafe { sse2::Checks::new(cpu_limit) };
        for chunk in dst.chunks_exact_mut(sse2::BLOCK) {
            unsafe { sse2::rows(planes, n, first + done, chunk, &mut checks) };
            done += sse2::BLOCK;
        }
        ok = unsafe { checks.passed() };
        if NS && ok {
            for slot in &dst[..done] {
                // SAFETY: `rows` wrote every slot in `..done`, and `checks` passed, so each is a
                // valid `Access` (an op byte of 0 or 1 is a valid `Op`: it is repr(u8) with those tags).
                let time = unsafe { slot.assume_init_ref() }.time;
                ok &= time >= *prev;
                *prev = time;
            }
        }
    }
    let mut p = *prev;
    for (j, slot) in dst.iter_mut().enumerate().skip(done) {
        let r = gather1(planes, n, first + j);
        let time = le_u64(&r, R_TIME);
        let cpu = le_u32(&r, R_CPU);
        let size = le_u16(&r, R_SIZE);
        let op = r[R_OP];
        let flags = r[R_FLAGS];
        ok &= (op <= 1) & (flags & !Access::KNOWN_FLAGS == 0) & (size != 0) & (cpu < cpu_limit) & (!NS | (time >= p));
        p = time;
        slot.write(Access {
            time,
            addr: le_u64(&r, R_ADDR),
            cpu,
            size,
            op: if op == 1 { Op::Write } else { Op::Read },
            flags,
        });
    }
    *prev = p;
    ok
}

/// Transposes records out of byte planes with SSE2 byte interleaves: three rounds (8-, 16-,
/// then 32-bit) turn 8 planes of 16 bytes into 16 little-endian u64 fields, which are then
/// stored as `Access` rows.
#[cfg(target_arch = "x86_64")]
mod sse2 {
    use std::arch::x86_64::*;
    use std::mem::{size_of, MaybeUninit};

    use tiersim_core::{Access, Op};

    /// Records per call of `rows`: one cache line of each plane. The planes of a frame whose
    /// record count is a multiple of 4096 all map to the same L1 sets, so each line must be
    /// used whole before the other planes evict it.
    pub(super) const BLOCK: usize = 64;

    // `Access` is repr(C) and `Op` repr(u8), so an `Access` is a record row: the SIMD path
    // stores record bytes straight into `Access` slots. Checked at compile time.
    const _: () = {
        assert!(size_of::<Access>() == super::RECORD_SIZE);
        assert!(std::mem::offset_of!(Access, time) == super::R_TIME);
        assert!(std::mem::offset_of!(Access, addr) == super::R_ADDR);
        assert!(std::mem::offset_of!(Access, cpu) == super::R_CPU);
        assert!(std::mem::offset_of!(Access, size) == super::R_SIZE);
        assert!(std::mem::offset_of!(Access, op) == super::R_OP);
        assert!(std::mem::offset_of!(Access, flags) == super::R_FLAGS);
        assert!(size_of::<Op>() == 1 && Op::Read as u8 == 0 && Op::Write as u8 == 1);
    };

    /// Records per call of `shuffle64`.
    pub(super) const SHUFFLE_RECORDS: usize = 64;

    /// Records `start..start + 64` of `rows` into places `at..at + 64` of the `n`-record planes
    /// of plane groups `groups` (8 bytes of the row a group; `planes` holds those groups' planes).
    ///
    /// Sixteen records at a time: eight registers hold 128 bytes, a byte's place 7 bits,
    /// register (3) then byte (4). Loaded as `unpacklo_epi8(row m, row m + 8)` for m in 0..8,
    /// byte k of row r sits at r2 r1 r0 | k2 k1 k0 r3; one round of
    /// `unpack{lo,hi}_epi8(x[i], x[i + 4])` into x'[2i], x'[2i + 1] rotates those 7 bits left
    /// by one, so three rounds leave it at k2 k1 k0 | r3 r2 r1 r0: register k is byte k of the
    /// 16 records in order. Each plane's 64 bytes are gathered on the stack and stored together:
    /// planes of a frame of 64Ki records start 64 KiB apart, in the same L1 sets, and stores of
    /// 16 bytes to 24 of them in turn evicted each line before it was whole.
    #[inline(always)]
    pub(super) unsafe fn shuffle64(
        rows: &[u8],
        start: usize,
        planes: &mut [u8],
        n: usize,
        at: usize,
        groups: std::ops::Range<usize>,
    ) {
        const R: usize = super::RECORD_SIZE;
        let rows = &rows[start * R..(start + SHUFFLE_RECORDS) * R];
        let first = groups.start;
        for g in groups {
            let mut out = [[_mm_setzero_si128(); SHUFFLE_RECORDS / 16]; 8];
            for q in 0..SHUFFLE_RECORDS / 16 {
                let row = |r: usize| {
                    let s = &rows[(16 * q + r) * R + 8 * g..][..8];
                    _mm_loadl_epi64(s.as_ptr().cast())
                };
                let mut x: [__m128i; 8] = std::array::from_fn(|m| _mm_unpacklo_epi8(row(m), row(m + 8)));
                for _ in 0..3 {
                    x = [
                        _mm_unpacklo_epi8(x[0], x[4]),
                        _mm_unpackhi_epi8(x[0], x[4]),
                        _mm_unpacklo_epi8(x[1], x[5]),
                        _mm_unpackhi_epi8(x[1], x[5]),
                        _mm_unpacklo_epi8(x[2], x[6]),
                        _mm_unpackhi_epi8(x[2], x[6]),
                        _mm_unpacklo_epi8(x[3], x[7]),
                        _mm_unpackhi_epi8(x[3], x[7]),
                    ];
                }
                for k in 0..8 {
                    out[k][q] = x[k];
                }
            }
            for (k, v) in out.iter().enumerate() {
                let d = &mut planes[(8 * (g - first) + k) * n + at..][..SHUFFLE_RECORDS];
                for (q, v) in v.iter().enumerate() {
                    _mm_storeu_si128(d[16 * q..].as_mut_ptr().cast(), *v);
                }
            }
        }
    }

    /// Field checks accumulated over many records, tested once at the end.
    pub(super) struct Checks {
        /// Largest op byte seen.
        op_max: __m128i,
        /// Flag bits seen, ORed.
        flags_or: __m128i,
        /// Nonzero bytes where a record had size 0.
        size_zero: __m128i,
        /// All ones while every cpu was below the limit.
        cpu_ok: __m128i,
        /// The CPU limit, biased by 2^31 so a signed compare orders u32s.
        limit: __m128i,
    }

    const BIAS: i32 = i32::MIN;

    impl Checks {
        #[inline(always)]
        pub(super) unsafe fn new(cpu_limit: u32) -> Checks {
            Checks {
                op_max: _mm_setzero_si128(),
                flags_or: _mm_setzero_si128(),
                size_zero: _mm_setzero_si128(),
                cpu_ok: _mm_set1_epi32(-1),
                limit: _mm_set1_epi32((cpu_limit as i32) ^ BIAS),
            }
        }

        #[inline(always)]
        pub(super) unsafe fn passed(&self) -> bool {
            let op_ok = _mm_cmpeq_epi8(_mm_min_epu8(self.op_max, _mm_set1_epi8(1)), self.op_max);
            let unknown = _mm_andnot_si128(_mm_set1_epi8(Access::KNOWN_FLAGS as i8), self.flags_or);
            _mm_movemask_epi8(op_ok) == 0xFFFF
                && _mm_movemask_epi8(_mm_cmpeq_epi8(unknown, _mm_setzero_si128())) == 0xFFFF
                && _mm_movemask_epi8(self.size_zero) == 0
                && _mm_movemask_epi8(self.cpu_ok) == 0xFFFF
        }
    }

    #[inline(always)]
    unsafe fn load(planes: &[u8], at: usize) -> __m128i {
        let s = &planes[at..at + 16];
        _mm_loadu_si128(s.as_ptr().cast())
    }

    #[inline(always)]
    unsafe fn planes8(planes: &[u8], n: usize, i: usize, k0: usize) -> [__m128i; 8] {
        std::array::from_fn(|k| load(planes, (k0 + k) * n + i))
    }

    /// The 8- and 16-bit rounds: of 8 planes of 16 records, `c[0..4]` hold bytes 0..4 of
    /// records 0..4, 4..8, 8..12, 12..16 as u32 lanes, and `c[4..8]` bytes 4..8 likewise.
    #[inline(always)]
    unsafe fn rounds8_16(a: &[__m128i; 8]) -> [__m128i; 8] {
        let b0 = _mm_unpacklo_epi8(a[0], a[1]);
        let b1 = _mm_unpackhi_epi8(a[0], a[1]);
        let b2 = _mm_unpacklo_epi8(a[2], a[3]);
        let b3 = _mm_unpackhi_epi8(a[2], a[3]);
        let b4 = _mm_unpacklo_epi8(a[4], a[5]);
        let b5 = _mm_unpackhi_epi8(a[4], a[5]);
        let b6 = _mm_unpacklo_epi8(a[6], a[7]);
        let b7 = _mm_unpackhi_epi8(a[6], a[7]);
        [
            _mm_unpacklo_epi16(b0, b2),
            _mm_unpackhi_epi16(b0, b2),
            _mm_unpacklo_epi16(b1, b3),
            _mm_unpackhi_epi16(b1, b3),
            _mm_unpacklo_epi16(b4, b6),
            _mm_unpackhi_epi16(b4, b6),
            _mm_unpacklo_epi16(b5, b7),
            _mm_unpackhi_epi16(b5, b7),
        ]
    }

    /// The 32-bit round: `d[x]` holds the u64 fields of records 2x and 2x + 1.
    #[inline(always)]
    unsafe fn round32(c: [__m128i; 8]) -> [__m128i; 8] {
        [
            _mm_unpacklo_epi32(c[0], c[4]),
            _mm_unpackhi_epi32(c[0], c[4]),
            _mm_unpacklo_epi32(c[1], c[5]),
            _mm_unpackhi_epi32(c[1], c[5]),
            _mm_unpacklo_epi32(c[2], c[6]),
            _mm_unpackhi_epi32(c[2], c[6]),
            _mm_unpacklo_epi32(c[3], c[7]),
            _mm_unpackhi_epi32(c[3], c[7]),
        ]
    }

    /// Store records `i..i + BLOCK` of a shuffled frame of `n` records as rows into `dst`
    /// (`BLOCK` long), adding their cpu, size and op to `checks`. The layout assertions make
    /// the rows `Access` values, and only `checks` passing makes their op bytes valid.
    #[inline(always)]
    pub(super) unsafe fn rows(planes: &[u8], n: usize, i: usize, dst: &mut [MaybeUninit<Access>], checks: &mut Checks) {
        let dst = &mut dst[..BLOCK];
        let out: *mut __m128i = dst.as_mut_ptr().cast();
        // Times and addresses of the whole block first, plane group by plane group (see BLOCK).
        let mut t = [[_mm_setzero_si128(); 8]; BLOCK / 16];
        let mut a = t;
        for (s, d) in t.iter_mut().enumerate() {
            *d = round32(rounds8_16(&planes8(planes, n, i + 16 * s, 0)));
        }
        for (s, d) in a.iter_mut().enumerate() {
            *d = round32(rounds8_16(&planes8(planes, n, i + 16 * s, 8)));
        }
        let bias = _mm_set1_epi32(BIAS);
        for s in 0..BLOCK / 16 {
            let p = planes8(planes, n, i + 16 * s, 16);
            checks.op_max = _mm_max_epu8(checks.op_max, p[6]);
            checks.flags_or = _mm_or_si128(checks.flags_or, p[7]);
            let size_zero = _mm_cmpeq_epi8(_mm_or_si128(p[4], p[5]), _mm_setzero_si128());
            checks.size_zero = _mm_or_si128(checks.size_zero, size_zero);
            let c = rounds8_16(&p);
            for cpu in &c[..4] {
                let below = _mm_cmpgt_epi32(checks.limit, _mm_xor_si128(*cpu, bias));
                checks.cpu_ok = _mm_and_si128(checks.cpu_ok, below);
            }
            let w = round32(c);
            for x in 0..8 {
                // Records 16s + 2x and 16s + 2x + 1 are 48 bytes: t0 a0 | w0 t1 | a1 w1.
                let (tv, av, wv) = (t[s][x], a[s][x], w[x]);
                let o = out.add((16 * s + 2 * x) / 2 * 3);
                _mm_storeu_si128(o, _mm_unpacklo_epi64(tv, av));
                _mm_storeu_si128(
                    o.add(1),
                    _mm_castpd_si128(_mm_shuffle_pd(_mm_castsi128_pd(wv), _mm_castsi128_pd(tv), 0b10)),
                );
                _mm_storeu_si128(o.add(2), _mm_unpackhi_epi64(av, wv));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` records of xorshift bytes from the state `x`.
    fn random_rows(x: &mut u64, n: usize) -> Vec<u8> {
        (0..n * RECORD_SIZE)
            .map(|_| {
                *x ^= *x << 13;
                *x ^= *x >> 7;
                *x ^= *x << 17;
                *x as u8
            })
            .collect()
    }

    /// The SIMD shuffle puts every byte where the definition does: byte k of record j at
    /// plane k, place j, for frames with and without a tail of fewer than 64 records.
    #[test]
    fn shuffle_places_each_byte_by_the_definition() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for n in [1usize, 15, 63, 64, 65, 200, 1000, SHUFFLE_BLOCK + 31] {
            let rows = random_rows(&mut x, n);
            let mut planes = Vec::new();
            shuffle(&rows, &mut planes);
            let want: Vec<u8> = (0..RECORD_SIZE)
                .flat_map(|k| (0..n).map(move |j| (j, k)))
                .map(|(j, k)| rows[j * RECORD_SIZE + k])
                .collect();
            assert!(planes == want, "n {n}");
        }
    }

    /// A group's planes alone are that group's planes of the whole shuffle, at any offset.
    #[test]
    fn shuffle_of_one_group_is_its_planes_of_the_whole() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for (n, at) in [(1usize, 0usize), (64, 0), (200, 7), (1000, 64), (SHUFFLE_BLOCK + 31, 100)] {
            let rows = random_rows(&mut x, n - at);
            let mut whole = vec![0u8; n * RECORD_SIZE];
            shuffle_into(&rows, &mut whole, n, at);
            for g in ALL_GROUPS {
                let mut part = vec![0u8; n * 8];
                shuffle_groups_into(&rows, &mut part, n, at, g..g + 1);
                for b in 0..8 {
                    let p = 8 * g + b;
                    assert!(part[b * n + at..(b + 1) * n] == whole[p * n + at..(p + 1) * n], "n {n} plane {p}");
                }
            }
        }
    }

    #[test]
    fn shuffle_then_unshuffle_round_trips() {
        for n in [0usize, 1, 15, 64, 65, 200, SHUFFLE_BLOCK + 3] {
            let rows: Vec<u8> = (0..n)
                .flat_map(|i| {
                    let mut r = [0u8; RECORD_SIZE];
                    r[R_TIME..R_TIME + 8].copy_from_slice(&(i as u64 * 0x0101_0101_0101).to_le_bytes());
                    r[R_ADDR..R_ADDR + 8].copy_from_slice(&(u64::MAX - i as u64).to_le_bytes());
                    r[R_CPU..R_CPU + 4].copy_from_slice(&(i as u32 % 65536).to_le_bytes());
                    r[R_SIZE..R_SIZE + 2].copy_from_slice(&(1 + i as u16).to_le_bytes());
                    r[R_OP] = (i % 2) as u8;
                    r[R_FLAGS] = (i % 3 == 0) as u8;
                    r
                })
                .collect();
            let mut planes = Vec::new();
            shuffle(&rows, &mut planes);
            assert_eq!(planes.len(), rows.len());
            for first in [0, n.min(1), n / 2] {
                let mut dst: Vec<Access> = Vec::with_capacity(n - first);
                let mut prev = 0;
                assert!(unshuffle(
                    &planes,
                    first,
                    &mut dst.spare_capacity_mut()[..n - first],
                    MAX_CPUS,
                    true,
                    &mut prev
                ));
                // SAFETY: `unshuffle` returned true, so it wrote all `n - first` slots.
                unsafe { dst.set_len(n - first) };
                for (j, a) in dst.iter().enumerate() {
                    let r = &rows[(first + j) * RECORD_SIZE..][..RECORD_SIZE];
                    assert_eq!(
                        (a.time, a.addr, a.cpu, a.size),
                        (le_u64(r, 0), le_u64(r, 8), le_u32(r, 16), le_u16(r, 20))
                    );
                    assert_eq!(a.op.is_write(), r[R_OP] == 1);
                    assert_eq!(a.flags, r[R_FLAGS]);
                }
            }
            // A flag bit this build does not know fails the SIMD checks and the scalar tail alike.
            if n > 0 {
                for bad in [n - 1, 0] {
                    let mut rows = rows.clone();
                    rows[bad * RECORD_SIZE + R_FLAGS] = 0x80;
                    shuffle(&rows, &mut planes);
                    let mut dst: Vec<Access> = Vec::with_capacity(n);
                    let mut prev = 0;
                    assert!(
                        !unshuffle(&planes, 0, &mut dst.spare_capacity_mut()[..n], MAX_CPUS, true, &mut prev),
                        "n {n}, record {bad}"
                    );
                }
            }
        }
    }
}
