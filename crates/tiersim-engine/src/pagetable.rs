//! The OS model's page table: per-page state in flat arrays, indexed by a dense page id.
//! Pages are grouped in chunks of 512 consecutive virtual pages (one page-table leaf: 2 MiB of
//! address space with 4 KiB pages), and a page's id is its slot in the chunk array, so a lookup
//! is a hash of the chunk number (a small, cache-resident map) plus one access to the page's
//! 8-byte entry, which the engine prefetches ahead of use. Memory is O(touched 2 MiB regions):
//! 16 bytes per slot, so a dense 1M-page footprint costs 16 MiB, while a trace that touches one
//! page per 2 MiB region pays 8 KiB per page.

use std::alloc::Layout;
use std::collections::BTreeMap;
use std::ptr::NonNull;

use rustc_hash::FxHashMap;
use tiersim_core::{Error, Result};

pub const CHUNK_SHIFT: u32 = 9;
pub const CHUNK: usize = 1 << CHUNK_SHIFT;
/// `node` of a slot no access has touched yet.
pub const UNTOUCHED: u16 = u16::MAX;
/// `node` of a page that lives in swap; `frame` is then its swap slot.
pub const SWAPPED: u16 = u16::MAX - 1;
/// `node` of a file page that reclaim dropped from memory: its next access reads it back from
/// the block device. Every `node` value from here up means "not in memory".
pub const DROPPED: u16 = u16::MAX - 2;
pub const NIL: u32 = u32::MAX;

/// The PTE's accessed (young) bit: set by every access, tested and cleared by LRU aging.
pub const REFERENCED: u8 = 1;
pub const DIRTY: u8 = 2;
/// Made PROT_NONE by the NUMA-hinting scanner: the next access takes a hint fault.
pub const PROT_NONE: u8 = 4;
/// PG_active: the page is on its node's active list.
pub const ACTIVE: u8 = 8;
/// PG_referenced, the page flag (not the PTE bit): one reference already seen on the inactive
/// list (mark_page_accessed, page_check_references).
pub const PG_REFERENCED: u8 = 16;
/// A page-cache page of a file mapping; clear for anonymous memory.
pub const FILE: u8 = 32;
/// Faulted in, its access not yet replayed: reclaim passes it over (the kernel maps the page
/// before the faulting instruction retries, so it cannot be taken in between).
pub const LOCKED: u8 = 64;
/// In the swap cache, not yet mapped: read ahead by a swap-in fault of a neighbouring slot. Its
/// swap slot still holds a copy, so reclaim drops it without a write; its first access is a
/// minor fault (do_swap_page finding the page in the swap cache).
pub const SWAPCACHE: u8 = 128;
/// With `FILE`, the same bit: a page-cache page no PTE of the program maps yet (read by a call,
/// read around a fault, or made warm). Its first access through the mapping is a minor fault
/// (filemap_map_pages or filemap_fault finding it cached). File pages are never in the swap
/// cache, so the bit means one or the other by `FILE`.
pub const UNMAPPED: u8 = SWAPCACHE;

/// Per-page state only NUMA balancing needs, beside the hot entry so the access path does not
/// pay for it.
#[derive(Clone, Copy, Debug)]
pub struct PageExt {
    /// CPU of the last hint fault (the kernel's last_cpupid), NIL if none.
    pub last_cpu: u32,
    /// When the scanner last made the page PROT_NONE, in us.
    pub scan_us: u32,
    /// When the page last migrated, in us, and the node it left (for ping-pong counting).
    pub moved_us: u32,
    pub moved_from: u16,
    /// The scanner found the page accessed at its previous visit (for `os.device_hints = "scan_hot"`).
    pub scan_accessed: bool,
    /// Its shadow entry since it was last evicted, 0 if none (`os/workingset.rs`).
    pub shadow: u32,
    /// PG_workingset: the page has been on an active list (`os/workingset.rs`).
    pub workingset: bool,
}

const EXT_EMPTY: PageExt = PageExt {
    last_cpu: NIL,
    scan_us: 0,
    moved_us: 0,
    moved_from: UNTOUCHED,
    scan_accessed: false,
    shadow: 0,
    workingset: false,
};

/// Per-page state, 8 bytes so one cache line holds eight pages.
#[derive(Clone, Copy, Debug)]
pub struct PageEntry {
    /// Frame on its node, or swap slot when swapped.
    pub frame: u32,
    pub node: u16,
    pub flags: u8,
}

#[derive(Clone, Copy, Debug)]
pub struct Link {
    pub prev: u32,
    pub next: u32,
}

const EMPTY: PageEntry = PageEntry { frame: 0, node: UNTOUCHED, flags: 0 };

/// Slots of the direct-mapped chunk cache: 4096 x 2 MiB covers 8 GiB of contiguous address
/// space (with 4 KiB pages) without a conflict, in 64 KiB.
const RECENT: usize = 4096;
/// An empty slot of the chunk cache (no chunk number reaches it: vpn >> CHUNK_SHIFT < 2^55).
const NO_CHUNK: (u64, u32) = (u64::MAX, 0);

pub struct PageTable {
    chunk_of: FxHashMap<u64, u32>,
    /// Chunk number -> base id for recently used chunks, slot `chunk % RECENT`: a compare
    /// instead of a hash probe per lookup. A chunk's base never changes, so a slot holding a
    /// chunk is always right; a miss falls back to `chunk_of`.
    recent: Box<[(u64, u32); RECENT]>,
    pub entries: HugeArray<PageEntry>,
    /// LRU list links, touched only by allocation, migration and reclaim; prev and next side by
    /// side so linking a new page costs one cache miss, not two.
    pub lru: HugeArray<Link>,
    /// Filled when first written (`ext_mut`), or with the entries where `prefetch_ext` reads it
    /// ahead: runs without NUMA balancing or migration never touch it, and on the engine bench
    /// (1M pages) it was half of the 32 MiB the kernel cleared for each run (BENCHMARKS.md,
    /// ninth pass). Once filled it has the entries' length.
    ext: HugeArray<PageExt>,
    /// Chunk number -> base id, in virtual-address order, for the scanner's walk.
    pub by_address: BTreeMap<u64, u32>,
    pub touched: u64,
    /// Prefetch `ext` with the entry: under a hinting scanner most accesses to a page may take
    /// a hint fault, which reads it.
    pub prefetch_ext: bool,
}

impl PageTable {
    pub fn new(prefetch_ext: bool) -> PageTable {
        PageTable {
            chunk_of: FxHashMap::default(),
            recent: Box::new([NO_CHUNK; RECENT]),
            entries: HugeArray::new(),
            lru: HugeArray::new(),
            ext: HugeArray::new(),
            by_address: BTreeMap::new(),
            touched: 0,
            prefetch_ext,
        }
    }

    /// Room for `pages` page ids before the first chunk is added, so the per-page arrays never
    /// move: grown by doubling instead, each growth copies them into new memory that the kernel
    /// first clears, and all of it is cleared about twice (on the engine bench's 1M pages the
    /// kernel's clearing fell from 12 % to 6 % of the run's perf samples; what it costs depends
    /// on how much memory the hypervisor already backs, BENCHMARKS.md).
    /// A trace's footprint, from its header, is a lower bound of the ids a run needs (each
    /// 2 MiB region touched takes 512); untouched capacity costs address space, not memory.
    pub fn reserve(&mut self, pages: u64) {
        if !self.entries.is_empty() || pages > u64::from(NIL) {
            return;
        }
        let ids = (pages as usize).next_multiple_of(CHUNK);
        self.entries.reserve(ids);
        self.lru.reserve(ids);
        self.ext.reserve(ids);
    }

    /// The page id of `vpn`, creating its chunk if needed (the page itself stays UNTOUCHED).
    #[inline]
    pub fn slot(&mut self, vpn: u64) -> Result<u32> {
        let chunk = vpn >> CHUNK_SHIFT;
        let base = match self.base(chunk) {
            Some(b) => b,
            None => self.add_chunk(chunk)?,
        };
        Ok(base + (vpn as u32 & (CHUNK as u32 - 1)))
    }

    /// Base id of `chunk`, if it exists.
    #[inline]
    fn base(&mut self, chunk: u64) -> Option<u32> {
        match self.recent[chunk as usize % RECENT] {
            (c, base) if c == chunk => Some(base),
            _ => self.base_slow(chunk),
        }
    }

    #[inline(never)]
    fn base_slow(&mut self, chunk: u64) -> Option<u32> {
        let base = *self.chunk_of.get(&chunk)?;
        self.recent[chunk as usize % RECENT] = (chunk, base);
        Some(base)
    }

    #[cold]
    fn add_chunk(&mut self, chunk: u64) -> Result<u32> {
        let base = self.entries.len();
        if base + CHUNK > NIL as usize {
            return Err(Error::Sim("the trace touches more 2 MiB regions than the page table can index (2^23)".into()));
        }
        self.entries.grow(base + CHUNK, EMPTY);
        self.lru.grow(base + CHUNK, Link { prev: NIL, next: NIL });
        if self.prefetch_ext || !self.ext.is_empty() {
            self.ext.grow(base + CHUNK, EXT_EMPTY);
        }
        self.chunk_of.insert(chunk, base as u32);
        self.by_address.insert(chunk, base as u32);
        Ok(base as u32)
    }

    /// The entry of page `p`, an id `slot` or `prefetch` handed out: ids are below
    /// `entries.len()` when handed out and `entries` only grows, so no bounds check.
    #[inline(always)]
    pub fn entry(&self, p: u32) -> &PageEntry {
        debug_assert!((p as usize) < self.entries.len());
        // SAFETY: p < entries.len(), as above.
        unsafe { self.entries.get_unchecked(p as usize) }
    }

    #[inline(always)]
    pub fn entry_mut(&mut self, p: u32) -> &mut PageEntry {
        debug_assert!((p as usize) < self.entries.len());
        // SAFETY: as in `entry`.
        unsafe { self.entries.get_unchecked_mut(p as usize) }
    }

    /// Page `p`'s NUMA record; an id no chunk holds reads as a page never scanned, faulted or moved.
    #[inline]
    pub fn ext(&self, p: u32) -> PageExt {
        self.ext.get(p as usize).copied().unwrap_or(EXT_EMPTY)
    }

    /// Page `p`'s NUMA record for writing, filling the array on the first write; `p` is an id
    /// `slot` or `prefetch` handed out.
    #[inline]
    pub fn ext_mut(&mut self, p: u32) -> &mut PageExt {
        if p as usize >= self.ext.len() {
            self.fill_ext();
        }
        &mut self.ext[p as usize]
    }

    #[cold]
    #[inline(never)]
    fn fill_ext(&mut self) {
        self.ext.grow(self.entries.len(), EXT_EMPTY);
    }

    /// Fetch page `p`'s LRU link if the page is untouched: its access will allocate it and link
    /// it at a list head, a store to a line nothing else brings in (on the engine bench, 1M first
    /// touches at random over 1M pages, that store missed every time, and the engine thread's
    /// CPU fell 12-14 % with this hint). Reads `p`'s entry, so it pays where the entry was
    /// prefetched earlier.
    #[inline(always)]
    pub fn prefetch_link_if_new(&self, p: u32) {
        if self.entry(p).node == UNTOUCHED {
            tiersim_core::prefetch(&self.lru, p as usize);
        }
    }

    /// Hint the CPU to fetch `vpn`'s entry; returns the page id if its chunk exists, so the
    /// caller can keep it and skip the lookup when the access comes up.
    #[inline]
    pub fn prefetch(&mut self, vpn: u64) -> Option<u32> {
        let base = self.base(vpn >> CHUNK_SHIFT)?;
        let i = base as usize + (vpn as usize & (CHUNK - 1));
        tiersim_core::prefetch(&self.entries, i);
        if self.prefetch_ext {
            tiersim_core::prefetch(&self.ext, i);
        }
        Some(i as u32)
    }
}

/// A growable array of per-page state in memory the kernel may back with 2 MiB pages. The
/// per-page arrays are read at random addresses (one page entry per access): with 4 KiB pages a
/// 1M-page footprint spreads its entries, links and NUMA state over 8K pages, beyond what the
/// TLB holds, so most accesses add a page walk (two-level under a hypervisor) to the entry's
/// cache miss. Where transparent huge pages are on for advised memory only (the `madvise`
/// setting, the common default) the arrays ask for them, and a buffer of 2 MiB or more starts
/// on a 2 MiB boundary: a `Vec`'s buffer starts wherever the allocator puts it, and the part
/// before its first boundary and after its last stays in 4 KiB pages (a quarter of an 8 MiB
/// array; aligning cut the engine bench's engine-thread CPU by 2-3 %, BENCHMARKS.md).
/// Layout only: no value changes.
pub struct HugeArray<T: Copy> {
    ptr: NonNull<T>,
    len: usize,
    cap: usize,
}

// SAFETY: the array owns its buffer, as a Vec<T> does.
unsafe impl<T: Copy + Send> Send for HugeArray<T> {}
// SAFETY: as above; shared access only reads.
unsafe impl<T: Copy + Sync> Sync for HugeArray<T> {}

const HUGE: usize = 2 << 20;

impl<T: Copy> HugeArray<T> {
    pub fn new() -> HugeArray<T> {
        HugeArray { ptr: NonNull::dangling(), len: 0, cap: 0 }
    }

    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// The buffer's layout for `cap` elements, a function of `cap` alone so the buffer is freed
    /// with the layout it was allocated with. None past the address space.
    fn layout(cap: usize) -> Option<Layout> {
        let layout = Layout::array::<T>(cap).ok()?;
        if layout.size() >= HUGE {
            layout.align_to(HUGE).ok()
        } else {
            Some(layout)
        }
    }

    /// Move to a buffer of `cap` elements, advised before anything is stored in it, so its
    /// pages are faulted in huge; false, and nothing changed, if the allocator refuses.
    fn try_reserve(&mut self, cap: usize) -> bool {
        debug_assert!(cap > self.cap && std::mem::size_of::<T>() > 0);
        let Some(layout) = Self::layout(cap) else { return false };
        // SAFETY: the layout's size is not zero (cap > 0, T is not zero-sized).
        let Some(ptr) = NonNull::new(unsafe { std::alloc::alloc(layout) } as *mut T) else { return false };
        advise_huge(ptr.as_ptr() as usize, layout.size());
        // SAFETY: both buffers hold at least len elements and do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.as_ptr(), ptr.as_ptr(), self.len) };
        self.free();
        (self.ptr, self.cap) = (ptr, cap);
        true
    }

    /// Room for `cap` elements, taken before anything is stored; skipped if the allocator
    /// refuses (a hint, as `PageTable::reserve` says).
    fn reserve(&mut self, cap: usize) {
        if cap > self.cap {
            self.try_reserve(cap);
        }
    }

    /// `Vec::resize` for growth, doubling the capacity when it must grow.
    fn grow(&mut self, len: usize, fill: T) {
        if len > self.cap {
            let cap = len.max(self.cap * 2);
            if !self.try_reserve(cap) {
                std::alloc::handle_alloc_error(Self::layout(cap).unwrap_or(Layout::new::<T>()));
            }
        }
        for i in self.len..len {
            // SAFETY: i < len <= cap.
            unsafe { self.ptr.as_ptr().add(i).write(fill) };
        }
        self.len = self.len.max(len);
    }

    fn free(&mut self) {
        if self.cap > 0 {
            let layout = Self::layout(self.cap).expect("the layout the buffer was allocated with");
            // SAFETY: allocated by `try_reserve` with this layout.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr() as *mut u8, layout) };
        }
    }
}

impl<T: Copy> Default for HugeArray<T> {
    fn default() -> Self {
        HugeArray::new()
    }
}

impl<T: Copy> Drop for HugeArray<T> {
    fn drop(&mut self) {
        self.free();
    }
}

impl<T: Copy> std::ops::Deref for HugeArray<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: the first len elements are initialized; the pointer is aligned and not null.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Copy> std::ops::DerefMut for HugeArray<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`, and the array is borrowed mutably.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

/// Ask for huge pages on the 2 MiB-aligned part of `[addr, addr + bytes)`; a hint, so a
/// refusal (THP off, or an old kernel) changes nothing but speed.
#[cfg(target_os = "linux")]
fn advise_huge(addr: usize, bytes: usize) {
    let start = addr.next_multiple_of(HUGE);
    let end = (addr + bytes) / HUGE * HUGE;
    if end > start {
        // SAFETY: madvise reads no memory; the range lies inside an allocation this process
        // owns, and MADV_HUGEPAGE changes how its pages are backed, not their contents.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_huge(_addr: usize, _bytes: usize) {}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;

    /// The chunk cache changes no page id: lookups and prefetches agree with ids handed out in
    /// first-touch order of the chunks, also for chunks that share a cache slot.
    #[test]
    fn ids_as_without_the_chunk_cache() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let mut pt = PageTable::new(false);
        let mut base_of: std::collections::HashMap<u64, u32> = std::collections::HashMap::new();
        // Chunks 0..8 and the same plus multiples of RECENT: each slot is fought over.
        let chunks: Vec<u64> =
            (0..8u64).flat_map(|c| (0..4u64).map(move |k| c + k * RECENT as u64 + (k << 40))).collect();
        for _ in 0..20_000 {
            let chunk = chunks[rng.gen_range(0..chunks.len())];
            let vpn = (chunk << CHUNK_SHIFT) | rng.gen_range(0..CHUNK as u64);
            let known = base_of.get(&chunk).copied();
            let want_base = known.unwrap_or(base_of.len() as u32 * CHUNK as u32);
            let want = want_base + (vpn as u32 & (CHUNK as u32 - 1));
            if rng.gen_bool(0.5) {
                assert_eq!(pt.prefetch(vpn), known.map(|_| want), "prefetch of vpn {vpn:#x}");
            }
            assert_eq!(pt.slot(vpn).unwrap(), want, "vpn {vpn:#x}");
            base_of.entry(chunk).or_insert(want_base);
        }
        assert_eq!(base_of.len(), chunks.len());
    }

    /// Reserved for a footprint, the arrays take its chunks without moving and hand out the
    /// ids they would without the reservation; past it they grow as before. A reservation after
    /// the first chunk, or for more pages than ids exist, does nothing.
    #[test]
    fn reserve_keeps_ids_and_arrays_in_place() {
        let (mut reserved, mut plain) = (PageTable::new(false), PageTable::new(false));
        reserved.reserve(3000);
        assert_eq!(reserved.entries.capacity(), 3072);
        assert!(reserved.lru.capacity() >= 3072 && reserved.ext.capacity() >= 3072);
        let at = (reserved.entries.as_ptr(), reserved.lru.as_ptr(), reserved.ext.as_ptr());
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let chunks = [5u64, 0, 1 << 30, 6, 7, 2];
        for i in 0..5000 {
            let vpn = (chunks[i % chunks.len()] << CHUNK_SHIFT) | rng.gen_range(0..CHUNK as u64);
            assert_eq!(reserved.slot(vpn).unwrap(), plain.slot(vpn).unwrap(), "vpn {vpn:#x}");
        }
        assert_eq!((reserved.entries.as_ptr(), reserved.lru.as_ptr(), reserved.ext.as_ptr()), at);
        assert_eq!(reserved.entries.len(), 3072);
        let vpn = 99 << CHUNK_SHIFT;
        assert_eq!(reserved.slot(vpn).unwrap(), plain.slot(vpn).unwrap());
        assert_eq!(reserved.entries.len(), 3584);
        reserved.reserve(1 << 20);
        assert!(reserved.entries.capacity() < 1 << 20);
        let mut absurd = PageTable::new(false);
        absurd.reserve(u64::MAX);
        assert_eq!(absurd.entries.capacity(), 0);
    }

    /// NUMA records filled on their first write read and write as records filled with the
    /// chunks: every id reads the same before and after writes at random, in chunks added before
    /// and after the first write, and a table that never writes one allocates none.
    #[test]
    fn lazy_numa_records_match_eager_ones() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let (mut lazy, mut eager) = (PageTable::new(false), PageTable::new(true));
        let mut ids = Vec::new();
        for step in 0..6000u32 {
            let vpn =
                (rng.gen_range(0..10 + u64::from(step) / 100) << (CHUNK_SHIFT + 3)) | rng.gen_range(0..CHUNK as u64);
            let id = lazy.slot(vpn).unwrap();
            assert_eq!(eager.slot(vpn).unwrap(), id);
            ids.push(id);
            if step >= 2000 && rng.gen_bool(0.1) {
                let p = ids[rng.gen_range(0..ids.len())];
                let (a, b) = (lazy.ext_mut(p), eager.ext_mut(p));
                (a.last_cpu, a.scan_us, a.moved_us, a.moved_from) = (step, step * 3, step * 5, 2);
                (b.last_cpu, b.scan_us, b.moved_us, b.moved_from) = (step, step * 3, step * 5, 2);
            }
            if step == 1999 {
                assert!(lazy.ext.is_empty() && lazy.ext.capacity() == 0);
            }
            let p = ids[rng.gen_range(0..ids.len())];
            assert_eq!(format!("{:?}", lazy.ext(p)), format!("{:?}", eager.ext(p)), "id {p} at step {step}");
        }
        assert_eq!(lazy.ext.len(), lazy.entries.len());
        assert_eq!(format!("{:?}", &lazy.ext[..]), format!("{:?}", &eager.ext[..]));
        assert_eq!(lazy.ext(u32::MAX - 7).last_cpu, NIL);
    }

    /// Growth in advised buffers keeps what was there and fills the rest, as `Vec::resize`
    /// does, across reallocations and sizes past the 2 MiB threshold, where buffers start on a
    /// 2 MiB boundary.
    #[test]
    fn huge_array_grows_as_a_vec_resizes() {
        let (mut v, mut w) = (HugeArray::new(), Vec::new());
        let mut len = 0;
        for step in [1usize, 511, 512, 4096, 100_000, 300_000, 1 << 20] {
            len += step;
            v.grow(len, (len % 251) as u64);
            w.resize(len, (len % 251) as u64);
            let k = v.len() - 1;
            v[k] = k as u64;
            w[k] = k as u64;
            assert_eq!(&v[..], &w[..], "at {len}");
            assert_eq!((v.as_ptr() as usize).is_multiple_of(HUGE), v.capacity() * 8 >= HUGE, "at {len}");
        }
        v.grow(3, 0);
        assert_eq!(v.len(), w.len());
    }
}
