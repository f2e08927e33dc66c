//! Virtual to physical: the translator turns each virtual record into a physical one, with the
//! frame pagemap shows for its page (read live, or from the runtime's snapshot), or the one the
//! buddy model gives it; records of a page not yet mapped wait, in order.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;
use tiersim_core::{Access, Error, Op, Result};

use super::v2p::{Buddy, BuddyConfig, Lookup, Pagemap, PAGEMAP_PAGE};
use super::{Settings, MAX_PENDING, SYNTHETIC_FRAME_BASE};
use crate::format::{StatsBuilder, TraceWriter, V2p};

/// Where physical frames come from.
pub(super) enum Source {
    /// pagemap, until its first answer tells whether frame numbers are readable.
    Pagemap {
        pm: Pagemap,
        explicit: bool,
        decided: bool,
    },
    Buddy(Buddy),
}

/// A virtual page's frame, and from which physical record on pagemap is asked again.
#[derive(Debug, Clone, Copy)]
pub(super) struct Mapping {
    frame: u64,
    recheck_at: u64,
}

/// `recheck_at` of a frame that is the page's own for good: the buddy model's, an exclusively
/// mapped page's, a synthetic one.
const FINAL: u64 = u64::MAX;
/// Records between look-ups of a page pagemap shows as shared (the zero page, file pages): a
/// write makes the kernel copy it to a new frame, which later records must use.
const RECHECK_RECORDS: u64 = 1024;
/// Physical records the translator holds before it hands them to the writer.
const OUT_RUN: usize = 1024;
/// Records ahead of the one translated whose page entry is fetched.
const PREFETCH_AHEAD: usize = 16;

/// Pages per chunk of `PageTable` (log2): 2 MiB of 4 KiB pages, so a program's heap is a few
/// hundred chunks where a hash map of pages would miss the host's caches twice per record.
const CHUNK_SHIFT: u32 = 9;
/// Chunks the direct-mapped cache in front of the chunks' map remembers.
const CHUNK_CACHE: usize = 1024;
/// A chunk's entry for a page without a frame (frames are below 2^55).
const NO_FRAME: u64 = u64::MAX;
/// Set in a chunk's entry when the page is looked up again (its `recheck_at` is in `rechecks`).
const RECHECKED: u64 = 1 << 62;

/// Each virtual page's mapping: the frames in chunks of consecutive pages (one load per record
/// once its chunk is in the cache in front), the rare `recheck_at` of shared pages apart.
pub(super) struct PageTable {
    chunks: Vec<Box<[u64; 1 << CHUNK_SHIFT]>>,
    /// Chunk number to its index in `chunks`.
    index: FxHashMap<u64, u32>,
    /// Direct-mapped by chunk number: the chunk number held (`u64::MAX` for none) and its index.
    cache_tags: Box<[u64; CHUNK_CACHE]>,
    cache_slots: Box<[u32; CHUNK_CACHE]>,
    rechecks: FxHashMap<u64, u64>,
    pages: usize,
}

impl Default for PageTable {
    fn default() -> Self {
        PageTable {
            chunks: Vec::new(),
            index: FxHashMap::default(),
            cache_tags: Box::new([u64::MAX; CHUNK_CACHE]),
            cache_slots: Box::new([0; CHUNK_CACHE]),
            rechecks: FxHashMap::default(),
            pages: 0,
        }
    }
}

impl PageTable {
    /// Pages with a mapping.
    pub(super) fn len(&self) -> usize {
        self.pages
    }

    /// The index in `chunks` of chunk `c`, if it exists.
    #[inline]
    fn chunk(&mut self, c: u64) -> Option<usize> {
        let k = c as usize % CHUNK_CACHE;
        if self.cache_tags[k] == c {
            return Some(self.cache_slots[k] as usize);
        }
        let i = *self.index.get(&c)?;
        self.cache_tags[k] = c;
        self.cache_slots[k] = i;
        Some(i as usize)
    }

    #[inline]
    pub(super) fn get(&mut self, vpn: u64) -> Option<Mapping> {
        let i = self.chunk(vpn >> CHUNK_SHIFT)?;
        let e = self.chunks[i][(vpn & ((1 << CHUNK_SHIFT) - 1)) as usize];
        if e == NO_FRAME {
            None
        } else if e & RECHECKED == 0 {
            Some(Mapping { frame: e, recheck_at: FINAL })
        } else {
            Some(Mapping { frame: e & !RECHECKED, recheck_at: self.rechecks[&vpn] })
        }
    }

    /// Start fetching the entry of `vpn` if its chunk is in the cache (a hint: nothing changes).
    #[inline]
    fn prefetch(&self, vpn: u64) {
        let c = vpn >> CHUNK_SHIFT;
        let k = c as usize % CHUNK_CACHE;
        if self.cache_tags[k] == c {
            let chunk = &self.chunks[self.cache_slots[k] as usize][..];
            tiersim_core::prefetch(chunk, (vpn & ((1 << CHUNK_SHIFT) - 1)) as usize);
        }
    }

    pub(super) fn insert(&mut self, vpn: u64, m: Mapping) {
        debug_assert!(m.frame & RECHECKED == 0, "frame {:#x} out of range", m.frame);
        let c = vpn >> CHUNK_SHIFT;
        let i = match self.chunk(c) {
            Some(i) => i,
            None => {
                let i = self.chunks.len();
                self.chunks.push(Box::new([NO_FRAME; 1 << CHUNK_SHIFT]));
                self.index.insert(c, i as u32);
                i
            }
        };
        let e = &mut self.chunks[i][(vpn & ((1 << CHUNK_SHIFT) - 1)) as usize];
        self.pages += (*e == NO_FRAME) as usize;
        if m.recheck_at == FINAL {
            if *e != NO_FRAME && *e & RECHECKED != 0 {
                self.rechecks.remove(&vpn);
            }
            *e = m.frame;
        } else {
            *e = m.frame | RECHECKED;
            self.rechecks.insert(vpn, m.recheck_at);
        }
    }
}

/// Turns virtual records into physical ones, in order: the buddy model fixes a page's frame at
/// its first record, pagemap gives the frame the page has when its records are translated.
pub(super) struct Translator {
    pub(super) source: Source,
    pub(super) buddy_cfg: BuddyConfig,
    pub(super) page_shift: u32,
    pub(super) frames: PageTable,
    /// The physical pages of the records written: a frame is counted when a page is given it,
    /// and every further page of a record that crosses a page boundary with the record. The
    /// physical writer counts nothing, so its records are not looked up in a second bitmap.
    pub(super) pages: StatsBuilder,
    /// The virtual pages of the records, counted the same way (a page when it is mapped, the
    /// further pages of a record that crosses a boundary with the record), so that the virtual
    /// writer counts no pages either.
    pub(super) virt_pages: StatsBuilder,
    pub(super) pending: VecDeque<Access>,
    /// Physical records made and not yet given to the writer: written in runs, so that the
    /// writer can fetch ahead what its statistics will touch.
    out: Vec<Access>,
    /// Physical records written: the clock of re-checks.
    pub(super) written: u64,
    pub(super) next_synthetic: u64,
    pub(super) unresolved: u64,
    pub(super) remaps: u64,
    pub(super) note: String,
}

impl Translator {
    pub(super) fn mode(&self) -> V2p {
        match self.source {
            Source::Pagemap { .. } => V2p::Pagemap,
            Source::Buddy(_) => V2p::Buddy,
        }
    }

    pub(super) fn use_buddy(&mut self, note: String) -> Result<()> {
        self.source = Source::Buddy(Buddy::new(&self.buddy_cfg)?);
        self.note = note;
        Ok(())
    }

    /// The frame of virtual page `vpn` for a record (a write when `write`), if it can be known
    /// now.
    pub(super) fn frame(&mut self, vpn: u64, write: bool) -> Result<Option<u64>> {
        if let Some(m) = self.frames.get(vpn) {
            let due = self.written >= m.recheck_at || (write && m.recheck_at != FINAL);
            if let (true, Source::Pagemap { pm, .. }) = (due, &mut self.source) {
                let next = match pm.lookup(vpn) {
                    Lookup::Frame { frame, exclusive } => {
                        self.remaps += (frame != m.frame) as u64;
                        Mapping { frame, recheck_at: if exclusive { FINAL } else { self.written + RECHECK_RECORDS } }
                    }
                    // Swapped out or unmapped since: keep the last frame seen.
                    Lookup::Hidden | Lookup::Absent => Mapping { recheck_at: self.written + RECHECK_RECORDS, ..m },
                };
                self.map(vpn, next);
                return Ok(Some(next.frame));
            }
            return Ok(Some(m.frame));
        }
        let m = match &mut self.source {
            Source::Buddy(b) => match b.alloc() {
                Some(frame) => Mapping { frame, recheck_at: FINAL },
                None => {
                    return Err(Error::config(
                        "phys_mem",
                        format!(
                            "the buddy model's memory is full after {} pages of the program ({} frames held by other tenants); give a larger phys_mem or a lower fragmentation",
                            self.frames.len(),
                            b.held_frames()
                        ),
                    ))
                }
            },
            Source::Pagemap { pm, explicit, decided } => match pm.lookup(vpn) {
                Lookup::Frame { frame, exclusive } => {
                    *decided = true;
                    Mapping { frame, recheck_at: if exclusive { FINAL } else { self.written + RECHECK_RECORDS } }
                }
                Lookup::Hidden if !*decided => {
                    let msg = format!(
                        "{} shows every frame number as 0: reading them needs CAP_SYS_ADMIN (run as root)",
                        pm.path().display()
                    );
                    if *explicit {
                        return Err(Error::Sim(format!("{msg}; or capture with v2p buddy")));
                    }
                    // Nothing physical has been written yet, so the whole trace can switch.
                    self.use_buddy(format!("{msg}, so the buddy model gave the frames"))?;
                    return self.frame(vpn, write);
                }
                // The snapshot will not change: the page gets a synthetic frame now.
                Lookup::Absent if pm.is_snapshot() => {
                    let frame = SYNTHETIC_FRAME_BASE + self.next_synthetic;
                    self.next_synthetic += 1;
                    self.unresolved += 1;
                    Mapping { frame, recheck_at: FINAL }
                }
                Lookup::Hidden | Lookup::Absent => return Ok(None),
            },
        };
        self.map(vpn, m);
        Ok(Some(m.frame))
    }

    /// Give page `vpn` its mapping, counting its frame among the trace's pages (every mapping
    /// made is used by the record it was made for).
    fn map(&mut self, vpn: u64, m: Mapping) {
        self.frames.insert(vpn, m);
        self.virt_pages.add(&Access { time: 0, addr: vpn << self.page_shift, cpu: 0, size: 1, op: Op::Read, flags: 0 });
        self.pages.add(&Access { time: 0, addr: m.frame << self.page_shift, cpu: 0, size: 1, op: Op::Read, flags: 0 });
    }

    pub(super) fn write(&mut self, w: &mut TraceWriter, a: &Access, frame: u64) -> Result<()> {
        self.written += 1;
        let p = self.physical(a, frame);
        if (a.addr & ((1 << self.page_shift) - 1)) + (a.size as u64).max(1) > 1 << self.page_shift {
            self.pages.add(&p);
            self.virt_pages.add(a);
        }
        self.out.push(p);
        if self.out.len() >= OUT_RUN {
            self.flush(w)?;
        }
        Ok(())
    }

    /// Give the physical records made so far to the writer.
    fn flush(&mut self, w: &mut TraceWriter) -> Result<()> {
        let r = w.write_all(&self.out);
        self.out.clear();
        r
    }

    pub(super) fn physical(&self, a: &Access, frame: u64) -> Access {
        let offset = a.addr & ((1u64 << self.page_shift) - 1);
        Access { addr: frame << self.page_shift | offset, ..*a }
    }

    /// Translate `batch` in order, fetching the page entries of the records ahead.
    pub(super) fn submit_all(&mut self, batch: &[Access], w: &mut TraceWriter) -> Result<()> {
        for (i, a) in batch.iter().enumerate() {
            if let Some(next) = batch.get(i + PREFETCH_AHEAD) {
                self.frames.prefetch(next.addr >> self.page_shift);
            }
            self.submit(*a, w)?;
        }
        self.flush(w)
    }

    #[inline]
    fn submit(&mut self, a: Access, w: &mut TraceWriter) -> Result<()> {
        if self.pending.is_empty() {
            let vpn = a.addr >> self.page_shift;
            // The common case inline: a page seen before whose frame is its own for good.
            if let Some(Mapping { frame, recheck_at: FINAL }) = self.frames.get(vpn) {
                return self.write(w, &a, frame);
            }
            if let Some(f) = self.frame(vpn, a.op.is_write())? {
                return self.write(w, &a, f);
            }
        }
        self.pending.push_back(a);
        if self.pending.len() > MAX_PENDING {
            self.drain(w, Force::Head)?;
        }
        Ok(())
    }

    /// Write the pending records whose frames are known, in order.
    pub(super) fn drain(&mut self, w: &mut TraceWriter, force: Force) -> Result<()> {
        if let (Force::All, Source::Pagemap { decided: false, explicit: false, .. }) = (force, &self.source) {
            if !self.pending.is_empty() && self.written == 0 {
                // pagemap never showed a page (the program ended before it was read), and
                // nothing physical is written yet: the whole trace can take the buddy model.
                self.use_buddy(
                    "the program ended before its pagemap could be read, so the buddy model gave the frames".into(),
                )?;
            }
        }
        let mut force_head = force == Force::Head;
        while let Some(&a) = self.pending.front() {
            let vpn = a.addr >> self.page_shift;
            let f = match self.frame(vpn, a.op.is_write())? {
                Some(f) => f,
                None if force == Force::All || force_head => {
                    let frame = SYNTHETIC_FRAME_BASE + self.next_synthetic;
                    self.next_synthetic += 1;
                    self.unresolved += 1;
                    self.map(vpn, Mapping { frame, recheck_at: FINAL });
                    frame
                }
                None => break,
            };
            force_head = false;
            self.write(w, &a, f)?;
            self.pending.pop_front();
        }
        self.flush(w)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Force {
    None,
    /// Give the oldest pending page a synthetic frame if it still has none.
    Head,
    /// End of input: every pending page gets a frame.
    All,
}

/// The translator v2p asks for; `auto` takes pagemap when it can be opened.
pub(super) fn translator(
    s: &Settings,
    pm: std::result::Result<Pagemap, String>,
    page_shift: u32,
) -> Result<Translator> {
    let explicit = s.v2p == "pagemap";
    let buddy = |note: String| -> Result<(Source, String)> { Ok((Source::Buddy(Buddy::new(&s.buddy)?), note)) };
    let (source, note) = match (s.v2p.as_str(), pm) {
        ("buddy", _) => buddy("asked for".into())?,
        (_, Ok(pm)) if s.page_size as u64 == PAGEMAP_PAGE => {
            (Source::Pagemap { pm, explicit, decided: false }, "frames read from /proc/PID/pagemap".into())
        }
        (_, Ok(_)) => buddy(format!("pagemap maps 4 KiB pages, not {}", s.page_size))?,
        (_, Err(m)) if explicit => return Err(Error::Sim(format!("cannot read pagemap: {m}"))),
        (_, Err(m)) => buddy(format!("{m}, so the buddy model gave the frames"))?,
    };
    Ok(Translator {
        source,
        buddy_cfg: s.buddy,
        page_shift,
        frames: PageTable::default(),
        pages: StatsBuilder::pages(1 << page_shift),
        virt_pages: StatsBuilder::pages(1 << page_shift),
        pending: VecDeque::new(),
        out: Vec::with_capacity(OUT_RUN),
        written: 0,
        next_synthetic: 0,
        unresolved: 0,
        remaps: 0,
        note,
    })
}
