//! A software prefetch: the simulators' state is megabytes read at random (page tables, FTL
//! maps, cache metadata), and fetching what a step will touch while earlier steps run hides
//! its memory latency.

/// Hint the CPU to fetch the cache line holding `items[i]` for a read or write soon after. A
/// hint only: nothing is read, an index past the end is harmless, and targets other than
/// x86-64 do nothing.
#[inline(always)]
pub fn prefetch<T>(items: &[T], i: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and reads nothing the program sees; `wrapping_add` forms
    // the address without claiming it is in bounds.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch(items.as_ptr().wrapping_add(i).cast::<i8>(), _MM_HINT_T0);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (items, i);
}
