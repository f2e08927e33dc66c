//! The 128-byte header: its enumerations, what a file says about itself, and the checks a
//! reader applies before the first frame.

use std::path::Path;

use serde::{Deserialize, Serialize};
use tiersim_core::{Error, Result};

use super::*;

/// What `time` means in a trace's records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TimeUnit {
    /// Absolute timestamps in ns, non-decreasing.
    Ns,
    /// Instructions executed by the same CPU since its previous access.
    Instructions,
}

impl TimeUnit {
    pub fn name(self) -> &'static str {
        match self {
            TimeUnit::Ns => "ns",
            TimeUnit::Instructions => "instructions",
        }
    }
    pub(crate) fn code(self) -> u8 {
        match self {
            TimeUnit::Ns => 0,
            TimeUnit::Instructions => 1,
        }
    }
    pub(crate) fn from_code(c: u8) -> Option<Self> {
        match c {
            0 => Some(TimeUnit::Ns),
            1 => Some(TimeUnit::Instructions),
            _ => None,
        }
    }
}

/// Whether a trace's addresses are virtual or physical.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AddrKind {
    Virtual,
    Physical,
}

impl AddrKind {
    pub fn name(self) -> &'static str {
        match self {
            AddrKind::Virtual => "virtual",
            AddrKind::Physical => "physical",
        }
    }
    pub(crate) fn code(self) -> u8 {
        match self {
            AddrKind::Virtual => 0,
            AddrKind::Physical => 1,
        }
    }
    pub(crate) fn from_code(c: u8) -> Option<Self> {
        match c {
            0 => Some(AddrKind::Virtual),
            1 => Some(AddrKind::Physical),
            _ => None,
        }
    }
}

/// How each frame's decompressed bytes are arranged (header offset 36).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FrameFilter {
    /// Records back to back.
    None,
    /// Byte planes: byte k of every record of the frame, for k in 0..24.
    Shuffle,
}

impl FrameFilter {
    pub fn name(self) -> &'static str {
        match self {
            FrameFilter::None => "none",
            FrameFilter::Shuffle => "shuffle",
        }
    }
    pub fn code(self) -> u8 {
        match self {
            FrameFilter::None => FRAME_FILTER_NONE,
            FrameFilter::Shuffle => FRAME_FILTER_SHUFFLE,
        }
    }
    pub fn from_code(c: u8) -> Option<Self> {
        match c {
            FRAME_FILTER_NONE => Some(FrameFilter::None),
            FRAME_FILTER_SHUFFLE => Some(FrameFilter::Shuffle),
            _ => None,
        }
    }
}

/// How a physical trace's addresses were obtained from the program's virtual ones (header
/// offset 37).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum V2p {
    /// Not recorded: generators, conversions, virtual traces, files from before the field.
    #[default]
    Unrecorded,
    /// Frame numbers read from /proc/PID/pagemap while the program ran.
    Pagemap,
    /// Frames handed out on first touch by a seeded buddy-allocator model.
    Buddy,
}

impl V2p {
    pub fn name(self) -> &'static str {
        match self {
            V2p::Unrecorded => "unrecorded",
            V2p::Pagemap => "pagemap",
            V2p::Buddy => "buddy",
        }
    }
    pub(crate) fn code(self) -> u8 {
        match self {
            V2p::Unrecorded => 0,
            V2p::Pagemap => 1,
            V2p::Buddy => 2,
        }
    }
    pub(crate) fn from_code(c: u8) -> Option<Self> {
        match c {
            0 => Some(V2p::Unrecorded),
            1 => Some(V2p::Pagemap),
            2 => Some(V2p::Buddy),
            _ => None,
        }
    }
}

/// What a trace file says about itself.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TraceHeader {
    pub version: u16,
    pub record_layout: u16,
    pub time_unit: TimeUnit,
    pub addr_kind: AddrKind,
    pub page_size: u32,
    /// How physical addresses were made (`Unrecorded` unless a capture wrote them).
    pub v2p: V2p,
    /// `None` when the file's statistics are not marked complete.
    pub stats: Option<TraceStats>,
}

impl TraceHeader {
    /// The header of a version-1 trace with this metadata and no statistics yet.
    pub fn new(meta: &TraceMeta) -> TraceHeader {
        TraceHeader {
            version: VERSION,
            record_layout: RECORD_LAYOUT_V1,
            time_unit: meta.time_unit,
            addr_kind: meta.addr_kind,
            page_size: meta.page_size,
            v2p: V2p::Unrecorded,
            stats: None,
        }
    }
}

/// What a writer needs to know before the first record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TraceMeta {
    pub time_unit: TimeUnit,
    pub addr_kind: AddrKind,
    /// Bytes; a power of two, at least 64.
    pub page_size: u32,
}

pub(crate) fn encode_header(
    meta: &TraceMeta,
    v2p: V2p,
    filter: FrameFilter,
    flags: u32,
    records_end: u64,
    stats: Option<&TraceStats>,
) -> [u8; HEADER_SIZE] {
    let mut h = [0u8; HEADER_SIZE];
    h[H_MAGIC..H_MAGIC + 8].copy_from_slice(&MAGIC);
    h[H_VERSION..H_VERSION + 2].copy_from_slice(&VERSION.to_le_bytes());
    h[H_RECORD_LAYOUT..H_RECORD_LAYOUT + 2].copy_from_slice(&RECORD_LAYOUT_V1.to_le_bytes());
    h[H_RECORD_SIZE..H_RECORD_SIZE + 2].copy_from_slice(&(RECORD_SIZE as u16).to_le_bytes());
    h[H_TIME_UNIT] = meta.time_unit.code();
    h[H_ADDR_KIND] = meta.addr_kind.code();
    h[H_PAGE_SIZE..H_PAGE_SIZE + 4].copy_from_slice(&meta.page_size.to_le_bytes());
    h[H_FLAGS..H_FLAGS + 4].copy_from_slice(&flags.to_le_bytes());
    h[H_RECORDS_END..H_RECORDS_END + 8].copy_from_slice(&records_end.to_le_bytes());
    h[H_FRAME_FILTER] = filter.code();
    h[H_V2P] = v2p.code();
    if let Some(s) = stats {
        h[H_N_CPUS..H_N_CPUS + 4].copy_from_slice(&(s.per_cpu.len() as u32).to_le_bytes());
        for (at, v) in [
            (H_ACCESSES, s.accesses),
            (H_READS, s.reads),
            (H_WRITES, s.writes),
            (H_BYTES, s.bytes),
            (H_FOOTPRINT_PAGES, s.footprint_pages),
            (H_TIME_FIRST, s.time_first),
            (H_TIME_LAST, s.time_last),
        ] {
            h[at..at + 8].copy_from_slice(&v.to_le_bytes());
        }
    }
    let crc = header_crc(&h);
    h[H_HEADER_CRC..H_HEADER_CRC + 4].copy_from_slice(&crc.to_le_bytes());
    h
}

/// CRC-32 of a version-2 header with its own checksum field taken as zero.
fn header_crc(h: &[u8]) -> u32 {
    let mut c = crc32fast::Hasher::new();
    c.update(&h[..H_HEADER_CRC]);
    c.update(&[0; 4]);
    c.update(&h[H_HEADER_CRC + 4..HEADER_SIZE]);
    c.finalize()
}

pub(crate) struct RawHeader {
    pub(crate) header: TraceHeader,
    pub(crate) filter: FrameFilter,
    pub(crate) flags: u32,
    pub(crate) records_end: u64,
    pub(crate) n_cpus: u32,
}

pub(crate) fn parse_header(path: &Path, h: &[u8], file_len: u64) -> Result<RawHeader> {
    let err = |off: usize, msg: String| Error::trace(path, off as u64, msg);
    let n = h.len().min(8);
    if h[..n] != MAGIC[..n] {
        return Err(err(
            0,
            format!("not a tiersim trace: expected magic \"TIERSIM\\0\" ({}), found {}", hex(&MAGIC), hex(&h[..n])),
        ));
    }
    if h.len() < HEADER_SIZE {
        return Err(Error::trace(
            path,
            h.len() as u64,
            format!("truncated header: the file is {} bytes, a tiersim header is {HEADER_SIZE}", h.len()),
        ));
    }
    let version = le_u16(h, H_VERSION);
    if !SUPPORTED_VERSIONS.contains(&version) {
        let v: Vec<_> = SUPPORTED_VERSIONS.iter().map(|v| v.to_string()).collect();
        return Err(err(
            H_VERSION,
            format!("unsupported trace version {version}; this build reads version {}", v.join(", ")),
        ));
    }
    let layout = le_u16(h, H_RECORD_LAYOUT);
    if layout != RECORD_LAYOUT_V1 {
        return Err(err(
            H_RECORD_LAYOUT,
            format!("unsupported record layout {layout}; expected {RECORD_LAYOUT_V1} (24-byte records)"),
        ));
    }
    let record_size = le_u16(h, H_RECORD_SIZE);
    if record_size as usize != RECORD_SIZE {
        return Err(err(
            H_RECORD_SIZE,
            format!("record_size {record_size} does not match record layout {layout}, whose records are {RECORD_SIZE} bytes"),
        ));
    }
    let time_unit = TimeUnit::from_code(h[H_TIME_UNIT]).ok_or_else(|| {
        err(H_TIME_UNIT, format!("invalid time_unit {}; expected 0 (ns) or 1 (instructions)", h[H_TIME_UNIT]))
    })?;
    let addr_kind = AddrKind::from_code(h[H_ADDR_KIND]).ok_or_else(|| {
        err(H_ADDR_KIND, format!("invalid addr_kind {}; expected 0 (virtual) or 1 (physical)", h[H_ADDR_KIND]))
    })?;
    let page_size = le_u32(h, H_PAGE_SIZE);
    check_page_size(page_size).map_err(|m| err(H_PAGE_SIZE, m))?;
    let flags = le_u32(h, H_FLAGS);
    if flags & !FLAG_STATS_COMPLETE != 0 {
        return Err(err(H_FLAGS, format!("unknown flags {flags:#x}; this build knows only bit 0 (stats complete)")));
    }
    let filter = FrameFilter::from_code(h[H_FRAME_FILTER]).ok_or_else(|| {
        err(
            H_FRAME_FILTER,
            format!(
                "unknown frame_filter {}; expected {FRAME_FILTER_NONE} (none) or {FRAME_FILTER_SHUFFLE} (byte shuffle)",
                h[H_FRAME_FILTER]
            ),
        )
    })?;
    let v2p = V2p::from_code(h[H_V2P]).ok_or_else(|| {
        err(H_V2P, format!("unknown v2p {}; expected 0 (not recorded), 1 (pagemap) or 2 (buddy model)", h[H_V2P]))
    })?;
    let records_end = le_u64(h, H_RECORDS_END);
    let n_cpus = le_u32(h, H_N_CPUS);
    if n_cpus > MAX_CPUS {
        return Err(err(H_N_CPUS, format!("n_cpus {n_cpus} is above the maximum {MAX_CPUS}")));
    }
    let complete = flags & FLAG_STATS_COMPLETE != 0;
    if records_end == 0 {
        if complete {
            return Err(err(H_RECORDS_END, "records_end is 0 (unknown) but the stats-complete flag is set".into()));
        }
        if n_cpus != 0 {
            return Err(err(H_N_CPUS, format!("n_cpus is {n_cpus} but records_end is 0, so there is no trailer")));
        }
    } else {
        if records_end < HEADER_SIZE as u64 {
            return Err(err(
                H_RECORDS_END,
                format!("records_end {records_end} points inside the {HEADER_SIZE}-byte header"),
            ));
        }
        if records_end > file_len {
            return Err(err(
                H_RECORDS_END,
                format!("records_end {records_end} is beyond end of file ({file_len} bytes)"),
            ));
        }
        let trailer = file_len - records_end;
        let end_block = if version >= 2 { END_SIZE as u64 } else { 0 };
        if trailer != n_cpus as u64 * 8 + end_block {
            return Err(Error::trace(
                path,
                records_end,
                format!(
                    "expected a trailer of {n_cpus} per-CPU counts{} ({} bytes) from records_end to end of file, found {trailer} bytes",
                    if version >= 2 { " and the end block" } else { "" },
                    n_cpus as u64 * 8 + end_block
                ),
            ));
        }
    }
    let reserved_from = if version >= 2 { H_HEADER_CRC + 4 } else { H_HEADER_CRC };
    for range in [H_RESERVED..H_RESERVED + 2, reserved_from..HEADER_SIZE] {
        if let Some(i) = range.clone().find(|&i| h[i] != 0) {
            return Err(err(
                i,
                format!(
                    "reserved header byte {i} is {:#04x}; bytes {}..{} are reserved and must be zero",
                    h[i], range.start, range.end
                ),
            ));
        }
    }
    let stats = complete.then(|| TraceStats {
        accesses: le_u64(h, H_ACCESSES),
        reads: le_u64(h, H_READS),
        writes: le_u64(h, H_WRITES),
        bytes: le_u64(h, H_BYTES),
        footprint_pages: le_u64(h, H_FOOTPRINT_PAGES),
        time_first: le_u64(h, H_TIME_FIRST),
        time_last: le_u64(h, H_TIME_LAST),
        per_cpu: Vec::new(),
    });
    if let Some(s) = &stats {
        if s.reads.checked_add(s.writes) != Some(s.accesses) {
            return Err(err(
                H_ACCESSES,
                format!("header stats disagree: {} reads + {} writes != {} accesses", s.reads, s.writes, s.accesses),
            ));
        }
    }
    // Last, so that a field that is invalid in itself is named as such.
    if version >= 2 {
        let (stored, computed) = (le_u32(h, H_HEADER_CRC), header_crc(h));
        if stored != computed {
            return Err(err(
                H_HEADER_CRC,
                format!(
                    "header checksum mismatch: stored {stored:#010x}, computed {computed:#010x}; the header is corrupt"
                ),
            ));
        }
    }
    Ok(RawHeader {
        header: TraceHeader { version, record_layout: layout, time_unit, addr_kind, page_size, v2p, stats },
        filter,
        flags,
        records_end,
        n_cpus,
    })
}
