//! The active memory timeline of a snapshot's trace, laid out as pytorch.org/memory_viz draws it:
//! per device, one band per allocation from its `alloc` to the free that ends it
//! (`free_completed`, or the older traces' `free`; a `free_requested` alone ends nothing), the
//! bands stacked in the order their blocks were allocated, so that at any moment a band's bottom
//! is the bytes still alive of the blocks allocated before it (a band slides down when one below
//! it is freed).
//!
//! The x axis is the trace itself: step `k` is the state after the device's first `k` trace
//! entries (step 0: before the first), as memory_viz counts. A block is known by its address and
//! the step it was allocated at: a free ends the block last allocated at its address, and a free
//! at an address whose block is already freed is a repeat (old traces write `free` and
//! `free_completed`), never a new block. Blocks alive before the trace began are bands from step
//! 0: those the trace frees without allocating, and those the segments hold that the trace never
//! mentions; what such a late-started history lacks is counted in [`Lacks`].
//!
//! Held compactly (24 bytes a band, 4 a free, and the live bands at checkpoints no more than one
//! per band), a band's place at any step is read off the checkpoint before it and the few steps
//! after, never a sweep of the trace: [`DeviceTimeline::live_at`], [`DeviceTimeline::hit`]. What
//! a picture shows at a given width is sampled by [`DeviceTimeline::picture`]: the bands of at
//! least a threshold's bytes each, in their places (below each, every byte alive that was allocated
//! before it, so a band's place does not depend on the threshold), and the smaller blocks summed
//! per site, so no byte is left out of the totals.

use foldhash::{HashMap, HashMapExt};

use super::{Action, BlockState, Frame, Snapshot};

mod layout;
mod picture;
pub use picture::{DrawnBand, Picture};

/// A band's free step when its block is alive at the end of the trace.
pub const NEVER: u32 = u32::MAX;

/// `Band::source`: the block was allocated before the trace began.
const PRE: u32 = 1 << 31;
/// With [`PRE`]: the block is known from the segments alone (an index into `resident`).
const RESIDENT: u32 = 1 << 30;
/// The index part of `Band::source`.
const INDEX: u32 = RESIDENT - 1;
/// The most trace entries of one device a layout takes (the rest are counted as left out).
const MAX_STEPS: usize = INDEX as usize;
/// How many of the largest sites the picture summarises each in a band of its own.
pub const SUMMARY_SITES: usize = 8;

/// One allocation's band: 24 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Band {
    /// The step it appears at (0: alive before the trace began).
    alloc: u32,
    /// The step it is gone at ([`NEVER`]: alive at the end).
    free: u32,
    /// The trace entry that allocated it (global index); with [`PRE`], the entry that freed it,
    /// or with [`RESIDENT`] too, its place in `resident`.
    source: u32,
    /// Its site (an index into [`MemoryTimeline::sites`]).
    site: u32,
    /// Bytes.
    size: u64,
}

const _: () = assert!(std::mem::size_of::<Band>() == 24);

/// A block the segments hold that the trace never mentions.
#[derive(Clone, Copy, Debug)]
struct Resident {
    addr: u64,
    stack: u32,
    stream: u64,
}

/// What a trace lacks for the whole story: counts of what the layout drew from less than a
/// complete history (all zero for a trace recorded from the allocator's start that never
/// wrapped).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lacks {
    /// Frees of blocks the trace never allocated: the blocks were allocated before the history
    /// began (it was started late, or its ring buffer wrapped); each is a band from step 0.
    pub frees_without_alloc: usize,
    /// Blocks alive in the segments that the trace never mentions; each is a band from step 0.
    pub blocks_before_trace: usize,
    /// Segments with no `segment_alloc` or `segment_map` in the trace at their address.
    pub segments_without_alloc: usize,
    /// Allocations at an address whose earlier block the trace never freed (that block is taken
    /// to end there).
    pub allocs_over_live: usize,
    /// Blocks alive in the segments at an address whose last block the trace freed: the trace
    /// and the segments disagree; not drawn.
    pub unexplained_live: usize,
    /// Trace entries beyond the most one device's layout holds.
    pub entries_left_out: usize,
    /// The history began late and holds a round number of entries (a power of ten or of two,
    /// from 1,000): what `_record_memory_history(max_entries=…)` keeps once its ring buffer has
    /// wrapped, dropping the oldest.
    pub ring_wrapped: bool,
    /// The snapshot says its history's ring buffer wrapped (`allocator_settings`'
    /// `trace_alloc_overflowed`), with its size (`trace_alloc_max_entries`) when given: older
    /// events were overwritten.
    pub ring_overflowed: Option<Option<u64>>,
}

/// What a trace whose ring buffer wrapped lacks, as the snapshot says (`entries`: its size).
pub fn overflow_sentence(entries: Option<u64>) -> String {
    format!(
        "the history's ring buffer{} wrapped (the snapshot says trace_alloc_overflowed): older events were overwritten, so the trace is whole only from its first entry; what was alive before it is drawn from its start",
        entries.map_or(String::new(), |n| format!(" of {n} entries"))
    )
}

impl Lacks {
    /// Whether the trace holds the whole history (nothing is lacking).
    pub fn is_whole(&self) -> bool {
        *self == Self::default()
    }

    /// What is lacking, one sentence each (empty when nothing is).
    pub fn describe(&self) -> Vec<String> {
        let n = crate::format::count;
        let mut out = Vec::new();
        if let Some(entries) = self.ring_overflowed {
            out.push(overflow_sentence(entries));
        }
        if self.ring_wrapped {
            out.push(
                "the trace holds a round number of entries: the history's ring buffer (max_entries) most likely wrapped, dropping the oldest"
                    .to_owned(),
            );
        }
        if self.frees_without_alloc > 0 {
            out.push(format!(
                "the history began late: {} freed in the trace were allocated before it (drawn from its start)",
                n(self.frees_without_alloc, "block")
            ));
        }
        if self.blocks_before_trace > 0 {
            out.push(format!(
                "{} alive in the segments were allocated before the trace (drawn from its start, with the segments' stacks)",
                n(self.blocks_before_trace, "block")
            ));
        }
        if self.segments_without_alloc > 0 {
            out.push(if self.segments_without_alloc == 1 {
                "1 segment was reserved before the trace began".to_owned()
            } else {
                format!(
                    "{} segments were reserved before the trace began",
                    self.segments_without_alloc
                )
            });
        }
        if self.allocs_over_live > 0 {
            out.push(format!(
                "{} reused an address whose block the trace never freed",
                n(self.allocs_over_live, "allocation")
            ));
        }
        if self.unexplained_live > 0 {
            out.push(format!(
                "{} alive in the segments were freed in the trace (not drawn)",
                n(self.unexplained_live, "block")
            ));
        }
        if self.entries_left_out > 0 {
            out.push(format!(
                "{} beyond the first {MAX_STEPS} of the device are left out",
                n(self.entries_left_out, "trace entry")
            ));
        }
        out
    }
}

/// An allocation site: the frame its blocks are known by.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SiteInfo {
    /// The frame ([`site_frame`]); `None`: the stacks have no frame worth naming.
    pub frame: Option<Frame>,
    /// A stack of the site (the first seen).
    pub stack: u32,
    /// Its rank by bytes × steps alive over all devices, 0 the largest (its colour:
    /// [`crate::palette::site`]).
    pub rank: u32,
}

/// The frame a block's allocation site is known by: the site's ([`Snapshot::site`]: the first
/// frame of the user's code), as the report and the Blocks tab name it. The one rule the timeline
/// groups, colours and names blocks by; `None` for a stack without a Python frame.
pub fn site_frame(snapshot: &Snapshot, stack: u32) -> Option<Frame> {
    match snapshot.site(stack) {
        super::SiteKey::Frame(frame) => Some(frame),
        super::SiteKey::CppOnly | super::SiteKey::NoFrames => None,
    }
}

/// Every device's active memory timeline.
#[derive(Clone, Debug, Default)]
pub struct MemoryTimeline {
    /// Per device with trace entries or segments, by device.
    pub devices: Vec<DeviceTimeline>,
    /// The allocation sites, by the index bands name them by.
    pub sites: Vec<SiteInfo>,
    /// Each site by what it is known by.
    by_key: HashMap<super::SiteKey, u32>,
}

/// One device's active memory timeline.
#[derive(Clone, Debug, Default)]
pub struct DeviceTimeline {
    /// The device.
    pub device: u32,
    /// The global index of the device's first trace entry.
    first: usize,
    /// The device's trace entries (the last step).
    steps: u32,
    /// In stacking order: the blocks from the segments alone, those freed without being
    /// allocated (the last freed lowest), then the trace's allocations in order.
    bands: Vec<Band>,
    /// The bands that end, in the order they end.
    frees: Vec<u32>,
    resident: Vec<Resident>,
    /// Steps between checkpoints.
    every: u32,
    /// Checkpoint `c` (the state at step `c × every`): `live[starts[c]..starts[c + 1]]`.
    starts: Vec<u32>,
    live: Vec<u32>,
    /// The most bytes alive at once.
    pub peak: u64,
    /// The first step they were.
    pub peak_step: u32,
    /// The bytes alive at the end.
    pub end_bytes: u64,
    /// The device's memory as an out-of-memory entry tells it (the bytes it said were free,
    /// and those the segments held then); `None` when the trace has no such entry.
    pub capacity: Option<u64>,
    /// What the trace lacks.
    pub lacks: Lacks,
    /// The `annotate` entries, (address, step), by address then step.
    annotated: Vec<(u64, u32)>,
}

/// One block, as the hover and the pinned block show it.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockInfo {
    /// The band.
    pub band: u32,
    /// Its address.
    pub addr: u64,
    /// Bytes.
    pub size: u64,
    /// The CUDA stream.
    pub stream: u64,
    /// The stack of its allocation (0: unknown).
    pub stack: u32,
    /// Its site.
    pub site: u32,
    /// The step it appears at, and when (µs since the epoch; `None`: before the trace).
    pub alloc_step: u32,
    /// When it was allocated.
    pub allocated_us: Option<i64>,
    /// The step it is gone at ([`NEVER`]: alive at the end), and when.
    pub free_step: u32,
    /// When it was freed.
    pub freed_us: Option<i64>,
}

/// Where a band's block is ([`DeviceTimeline::band_place`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BandPlace {
    /// Its address.
    pub addr: u64,
    /// Bytes.
    pub size: u64,
    /// Its site.
    pub site: u32,
    /// The stack of its allocation (0: unknown).
    pub stack: u32,
    /// The step it appears at.
    pub alloc: u32,
}

/// What changed between two steps of a device's timeline ([`DeviceTimeline::between`]).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Between {
    /// The earlier step.
    pub from: u32,
    /// The later step.
    pub to: u32,
    /// Bytes alive at `from`.
    pub alive_from: u64,
    /// Bytes alive at `to`.
    pub alive_to: u64,
    /// Of what was alive at `from`, the bytes freed by `to`.
    pub freed: u64,
    /// The blocks allocated after `from` and alive at `to`, by site, largest first.
    pub kept: Vec<SiteBytes>,
}

impl Between {
    /// The bytes allocated after `from` and alive at `to`: `alive_to − alive_from + freed`.
    pub fn kept_bytes(&self) -> u64 {
        self.kept.iter().map(|s| s.bytes).sum()
    }
}

/// Bytes and blocks of one site.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SiteBytes {
    /// The site ([`MemoryTimeline::sites`]).
    pub site: u32,
    /// Bytes.
    pub bytes: u64,
    /// Blocks.
    pub blocks: usize,
}

/// What lies under a point of the picture.
#[derive(Clone, Debug, PartialEq)]
pub enum Hit {
    /// A band of its own.
    Block(BlockInfo),
    /// A run of blocks smaller than the picture's threshold, between two bands of their own (in
    /// their places: those allocated between them), summed.
    Small {
        /// The site that holds the most of their bytes.
        site: Option<u32>,
        /// Their bytes at that step.
        bytes: u64,
        /// How many blocks.
        blocks: usize,
    },
}

/// Sites by the frame they are known by.
struct Sites<'a> {
    snapshot: &'a Snapshot,
    by_stack: Vec<u32>,
    by_key: HashMap<super::SiteKey, u32>,
    sites: Vec<SiteInfo>,
    weight: Vec<f64>,
}

impl<'a> Sites<'a> {
    fn new(snapshot: &'a Snapshot) -> Self {
        Self {
            snapshot,
            by_stack: vec![u32::MAX; snapshot.stack_count() + 1],
            by_key: HashMap::new(),
            sites: Vec::new(),
            weight: Vec::new(),
        }
    }

    fn of(&mut self, stack: u32) -> u32 {
        if let Some(&s) = self.by_stack.get(stack as usize)
            && s != u32::MAX
        {
            return s;
        }
        // One site per frame; the stacks without one are two sites (C++ frames only, and no
        // frames: allocated before the history), each named as every view names it.
        let key = self.snapshot.site(stack);
        let frame = site_frame(self.snapshot, stack);
        let next = self.sites.len() as u32;
        let site = *self.by_key.entry(key).or_insert(next);
        if site == next {
            self.sites.push(SiteInfo {
                frame,
                stack,
                rank: 0,
            });
            self.weight.push(0.0);
        }
        if let Some(slot) = self.by_stack.get_mut(stack as usize) {
            *slot = site;
        }
        site
    }
}

impl MemoryTimeline {
    /// Lays out every device's trace.
    pub fn new(snapshot: &Snapshot) -> Self {
        // The devices' runs of entries (entries are device by device).
        let mut runs: Vec<(u32, usize, usize)> = Vec::new();
        for (i, e) in snapshot.entries.iter().enumerate() {
            match runs.last_mut() {
                Some((d, _, len)) if *d == e.device() => *len += 1,
                _ => runs.push((e.device(), i, 1)),
            }
        }
        let mut devices: Vec<u32> = runs.iter().map(|r| r.0).collect();
        devices.extend(snapshot.segments.iter().map(|s| s.device));
        devices.sort_unstable();
        devices.dedup();
        let ends: Vec<u32> = snapshot
            .other_actions
            .iter()
            .enumerate()
            .filter(|(_, name)| snapshot.string(**name) == "free")
            .filter_map(|(i, _)| u8::try_from(i).ok())
            .map(u32::from)
            .collect();
        let mut sites = Sites::new(snapshot);
        let mut out = Vec::with_capacity(devices.len());
        for device in devices {
            let (first, len) = runs
                .iter()
                .find(|r| r.0 == device)
                .map_or((snapshot.entries.len(), 0), |r| (r.1, r.2));
            out.push(DeviceTimeline::lay_out(
                snapshot, device, first, len, &ends, &mut sites,
            ));
        }
        // Rank the sites by bytes × steps alive.
        let mut order: Vec<u32> = (0..sites.sites.len() as u32).collect();
        order.sort_by(|&a, &b| {
            sites.weight[b as usize]
                .total_cmp(&sites.weight[a as usize])
                .then(a.cmp(&b))
        });
        for (rank, &s) in order.iter().enumerate() {
            sites.sites[s as usize].rank = rank as u32;
        }
        Self {
            devices: out,
            sites: sites.sites,
            by_key: sites.by_key,
        }
    }

    /// The site of blocks allocated by `stack` (`None`: no block of the timeline has it), so
    /// that every view gives a site the timeline's colour.
    pub fn site_of_stack(&self, snapshot: &Snapshot, stack: u32) -> Option<u32> {
        self.site_of(snapshot.site(stack))
    }

    /// The site known by `key` (a frame, C++ frames only, or no frames).
    pub fn site_of(&self, key: super::SiteKey) -> Option<u32> {
        self.by_key.get(&key).copied()
    }

    /// A site's name: its frame, short (`name (file:line)`), or why it has none.
    pub fn site_name(&self, snapshot: &Snapshot, site: u32) -> String {
        match self.sites.get(site as usize) {
            Some(s) => snapshot.site_name(snapshot.site(s.stack)),
            None => super::BEFORE_HISTORY.to_owned(),
        }
    }

    /// The sites by rank, largest first.
    pub fn ranked_sites(&self) -> Vec<u32> {
        let mut order: Vec<u32> = (0..self.sites.len() as u32).collect();
        order.sort_by_key(|&s| self.sites[s as usize].rank);
        order
    }

    /// The bytes this layout holds (for the budget of bytes per allocation).
    pub fn heap_bytes(&self) -> usize {
        self.devices
            .iter()
            .map(DeviceTimeline::heap_bytes)
            .sum::<usize>()
            + self.sites.capacity() * std::mem::size_of::<SiteInfo>()
    }
}

impl DeviceTimeline {
    /// The step a band ends at ([`NEVER`]: it is alive at every step).
    fn end_of(&self, band: &Band) -> u32 {
        band.free
    }

    /// Just past the last step: where the bands alive at the end stop.
    pub fn end(&self) -> u32 {
        self.steps.saturating_add(1)
    }

    /// How many trace entries (steps) the device has.
    pub fn steps(&self) -> u32 {
        self.steps
    }

    /// How many bands (allocations, and blocks alive before the trace).
    pub fn band_count(&self) -> usize {
        self.bands.len()
    }

    /// The bytes this layout holds.
    pub fn heap_bytes(&self) -> usize {
        self.bands.capacity() * std::mem::size_of::<Band>()
            + self.frees.capacity() * 4
            + self.resident.capacity() * std::mem::size_of::<Resident>()
            + self.starts.capacity() * 4
            + self.live.capacity() * 4
            + self.annotated.capacity() * 16
    }

    /// The bands alive at `step` (and their total), in stacking order, into `out`.
    pub fn live_at(&self, step: u32, out: &mut Vec<u32>) -> u64 {
        out.clear();
        let step = step.min(self.end());
        let c = ((step / self.every) as usize).min(self.checkpoint_count().saturating_sub(1));
        let base = (c as u32).saturating_mul(self.every);
        let (from, to) = self.checkpoint(c);
        let mut total = 0;
        for &b in &self.live[from..to] {
            let band = &self.bands[b as usize];
            if self.end_of(band) > step {
                out.push(b);
                total += band.size;
            }
        }
        let lo = self.bands.partition_point(|b| b.alloc <= base);
        let hi = self.bands.partition_point(|b| b.alloc <= step);
        for i in lo..hi {
            let band = &self.bands[i];
            if self.end_of(band) > step {
                out.push(i as u32);
                total += band.size;
            }
        }
        total
    }

    fn checkpoint_count(&self) -> usize {
        self.starts.len().saturating_sub(1)
    }

    /// Checkpoint `c`'s range in `live`.
    fn checkpoint(&self, c: usize) -> (usize, usize) {
        let from = self.starts.get(c).copied().unwrap_or(0) as usize;
        let to = self.starts.get(c + 1).copied().unwrap_or(from as u32) as usize;
        (from, to)
    }

    /// What changed from step `from` to step `to` (in either order; the earlier is `from`): the
    /// blocks allocated after `from` and still alive at `to`, by site, largest first, and what
    /// was alive at `from` and freed by `to`.
    pub fn between(&self, from: u32, to: u32) -> Between {
        let (from, to) = (from.min(to).min(self.end()), from.max(to).min(self.end()));
        let mut scratch = Vec::new();
        let alive_from = self.live_at(from, &mut scratch);
        let freed: u64 = scratch
            .iter()
            .map(|&b| &self.bands[b as usize])
            .filter(|band| self.end_of(band) <= to)
            .map(|band| band.size)
            .sum();
        let alive_to = self.live_at(to, &mut scratch);
        let lo = self.bands.partition_point(|b| b.alloc <= from);
        let hi = self.bands.partition_point(|b| b.alloc <= to);
        let mut by_site: HashMap<u32, (u64, usize)> = HashMap::new();
        for band in &self.bands[lo..hi] {
            if self.end_of(band) > to {
                let entry = by_site.entry(band.site).or_insert((0, 0));
                entry.0 += band.size;
                entry.1 += 1;
            }
        }
        let mut kept: Vec<SiteBytes> = by_site
            .into_iter()
            .map(|(site, (bytes, blocks))| SiteBytes {
                site,
                bytes,
                blocks,
            })
            .collect();
        kept.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.site.cmp(&b.site)));
        Between {
            from,
            to,
            alive_from,
            alive_to,
            freed,
            kept,
        }
    }

    /// The step at which the blocks `keep` chooses held the most bytes together, and those bytes
    /// (the first such step; `None` where it chooses none): where a site or a frame of the flame
    /// graph peaked, which need not be the device's peak.
    pub fn peak_where(
        &self,
        snapshot: &Snapshot,
        mut keep: impl FnMut(&BandPlace) -> bool,
    ) -> Option<(u32, u64)> {
        // A block is alive from its step up to (not at) its end: at one step, its allocations
        // count and its ends do not.
        let mut changes: Vec<(u32, i64)> = Vec::new();
        for band in 0..self.bands.len() as u32 {
            let Some(place) = self.band_place(snapshot, band) else {
                continue;
            };
            if keep(&place) {
                let size = i64::try_from(place.size).unwrap_or(i64::MAX);
                changes.push((place.alloc, size));
                changes.push((self.end_of(&self.bands[band as usize]), -size));
            }
        }
        changes.sort_unstable();
        let (mut alive, mut best): (i64, Option<(u32, u64)>) = (0, None);
        for (i, &(step, change)) in changes.iter().enumerate() {
            alive += change;
            let last_of_step = changes.get(i + 1).is_none_or(|&(next, _)| next != step);
            let bytes = u64::try_from(alive).unwrap_or(0);
            if last_of_step && step != NEVER && best.is_none_or(|(_, most)| bytes > most) {
                best = Some((step, bytes));
            }
        }
        best
    }

    /// The step at a trace time (µs since the epoch): the state after every entry of the device
    /// made at or before it (entries are in time order).
    pub fn step_at_time(&self, snapshot: &Snapshot, time_us: i64) -> u32 {
        let (mut lo, mut hi) = (0, self.steps as usize);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match snapshot.entries.get(self.first + mid) {
                Some(e) if e.time_us <= time_us => lo = mid + 1,
                _ => hi = mid,
            }
        }
        lo as u32
    }

    /// One band's block.
    pub fn block(&self, snapshot: &Snapshot, band: u32) -> Option<BlockInfo> {
        let b = self.bands.get(band as usize)?;
        let time = |step: u32| {
            (step != NEVER)
                .then(|| self.entry(snapshot, step))
                .flatten()
                .map(|e| e.time_us)
                .filter(|&t| t > 0)
        };
        let (addr, stack, stream) = self.origin(snapshot, b)?;
        Some(BlockInfo {
            band,
            addr,
            size: b.size,
            stream,
            stack,
            site: b.site,
            alloc_step: b.alloc,
            allocated_us: time(b.alloc),
            free_step: b.free,
            freed_us: time(b.free),
        })
    }

    /// A band's address, stack and stream: from the segments for a block only they know, else
    /// from the trace entry that allocated (or freed) it.
    fn origin(&self, snapshot: &Snapshot, b: &Band) -> Option<(u64, u32, u64)> {
        if b.source & RESIDENT != 0 {
            let r = self.resident.get((b.source & INDEX) as usize)?;
            Some((r.addr, r.stack, r.stream))
        } else {
            let e = snapshot.entries.get((b.source & !PRE) as usize)?;
            Some((e.addr, e.stack, snapshot.stream(e)))
        }
    }

    /// The trace entry that makes `step` (1 to [`steps`](Self::steps)).
    pub fn entry<'s>(&self, snapshot: &'s Snapshot, step: u32) -> Option<&'s super::TraceEntry> {
        snapshot.entries.get(self.index(step)?)
    }

    /// Where the trace entry that makes `step` is among the snapshot's entries.
    fn index(&self, step: u32) -> Option<usize> {
        let k = (step as usize)
            .checked_sub(1)
            .filter(|&k| k < self.steps as usize)?;
        Some(self.first + k)
    }

    /// Where one band's block is, without the rest of [`block`](Self::block)'s answer (for
    /// views that place many blocks).
    pub fn band_place(&self, snapshot: &Snapshot, band: u32) -> Option<BandPlace> {
        let b = self.bands.get(band as usize)?;
        let (addr, stack, _) = self.origin(snapshot, b)?;
        Some(BandPlace {
            addr,
            size: b.size,
            site: b.site,
            stack,
            alloc: b.alloc,
        })
    }

    /// The annotations attached to `band`'s block while it lived (`annotate` entries at its
    /// address, PyTorch 2.14 and later): (step, the annotation), in order.
    pub fn annotations<'s>(&self, snapshot: &'s Snapshot, band: u32) -> Vec<(u32, &'s str)> {
        let (Some(place), Some(b)) = (
            self.band_place(snapshot, band),
            self.bands.get(band as usize),
        ) else {
            return Vec::new();
        };
        let from = self
            .annotated
            .partition_point(|&(a, step)| (a, step) < (place.addr, b.alloc));
        self.annotated[from..]
            .iter()
            .take_while(|&&(a, step)| a == place.addr && step < b.free)
            .filter_map(|&(_, step)| {
                let text = snapshot.string(snapshot.entries.user_metadata(self.index(step)?)?);
                Some((step, text))
            })
            .collect()
    }

    /// The metadata (`_set_memory_metadata`) in force when `band`'s block was allocated, if the
    /// trace has its allocation.
    pub fn metadata<'s>(&self, snapshot: &'s Snapshot, band: u32) -> Option<&'s str> {
        let b = self.bands.get(band as usize)?;
        if b.source & PRE != 0 {
            return None;
        }
        Some(snapshot.string(snapshot.entries.user_metadata(b.source as usize)?))
    }

    /// What `torch.compile` was compiling when `band`'s block was allocated
    /// (`compile_context`), if the trace has its allocation and says.
    pub fn compile_context<'s>(&self, snapshot: &'s Snapshot, band: u32) -> Option<&'s str> {
        let b = self.bands.get(band as usize)?;
        if b.source & PRE != 0 {
            return None;
        }
        Some(snapshot.string(snapshot.entries.compile_context(b.source as usize)?))
    }

    /// The private pool `band`'s block was allocated in: its allocation's `pool_id` where the
    /// trace has it (PyTorch 2.14 and later), else the pool of the segment at the snapshot that
    /// holds its address, `addr`.
    pub fn pool(&self, snapshot: &Snapshot, band: u32, addr: u64) -> Option<super::PoolId> {
        let b = self.bands.get(band as usize)?;
        if b.source & PRE == 0
            && let Some(pool) = snapshot.entries.pool(b.source as usize)
        {
            return Some(pool);
        }
        snapshot.private_segments().pool_at(self.device, addr)
    }

    /// The trace's time at `step` (µs since the epoch), if the entry has one.
    pub fn time_at(&self, snapshot: &Snapshot, step: u32) -> Option<i64> {
        let step = step.clamp(1, self.steps.max(1));
        snapshot
            .entries
            .get(self.first + step as usize - 1)
            .map(|e| e.time_us)
            .filter(|&t| t > 0)
    }
}

#[cfg(test)]
mod tests;
