//! The segment timeline of a snapshot's trace: per device, the caching allocator's segments over
//! the trace's steps and the blocks inside them, so that a person sees how the cache grew and
//! where it fragmented. The segments are stacked as memory_viz stacks its "active cached memory"
//! (in the order they were made, one sliding down when one below it is released); inside a
//! segment, each block sits at its offset from the segment's address, allocated (coloured by
//! site), waiting to be freed (`free_requested` seen, `free_completed` not yet) or free (cached).
//!
//! The steps and the blocks are those of the active memory timeline ([`DeviceTimeline`]): a
//! block here is one of its bands, so a block pinned in one view is the same block in the other.
//! Segments come from `segment_alloc`/`segment_free`; expandable segments' `segment_map` and
//! `segment_unmap` are drawn as what they map (each mapped range a segment of its own; an unmap
//! that covers part of a range leaves the rest as a range from that step). Segments alive before
//! the trace began are drawn from step 0: those the trace frees without making, and those the
//! snapshot's segments hold that the trace never mentions.

use foldhash::{HashMap, HashMapExt};

use super::timeline::{DeviceTimeline, MemoryTimeline, NEVER};
use super::{Action, Snapshot};

/// One segment (or one mapped range of an expandable segment) over the steps it lived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentBand {
    /// Its address.
    pub addr: u64,
    /// Bytes.
    pub size: u64,
    /// The step it appears at (0: alive before the trace began).
    pub alloc: u32,
    /// The step it is gone at ([`NEVER`]: alive at the end).
    pub free: u32,
    /// The CUDA stream (0 when the trace does not name one).
    pub stream: u64,
    /// Mapped by `segment_map` (an expandable segment's range).
    pub mapped: bool,
}

impl SegmentBand {
    fn alive_at(&self, step: u32) -> bool {
        self.alloc <= step && step < self.free
    }
}

/// What the trace lacks for the segments' whole story (all zero for a complete history).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SegmentLacks {
    /// Segments freed or unmapped that the trace never made: drawn from step 0.
    pub freed_without_alloc: usize,
    /// Segments the snapshot holds that the trace never made: drawn from step 0.
    pub before_trace: usize,
    /// Blocks alive at a step where no segment the trace knows holds their address (not drawn
    /// inside a segment), counted once per block.
    pub blocks_outside: usize,
}

impl SegmentLacks {
    /// What is lacking, one sentence each (empty when nothing is).
    pub fn describe(&self) -> Vec<String> {
        let n = crate::format::count;
        let were = |k: usize| if k == 1 { "was" } else { "were" };
        let mut out = Vec::new();
        if self.freed_without_alloc > 0 {
            out.push(format!(
                "{} released in the trace {} made before it (drawn from its start)",
                n(self.freed_without_alloc, "segment"),
                were(self.freed_without_alloc)
            ));
        }
        if self.before_trace > 0 {
            out.push(format!(
                "{} of the snapshot {} made before the trace (drawn from its start)",
                n(self.before_trace, "segment"),
                were(self.before_trace)
            ));
        }
        if self.blocks_outside > 0 {
            out.push(format!(
                "{} in no segment the trace knows (not drawn here)",
                match self.blocks_outside {
                    1 => "1 block lies".to_owned(),
                    k => format!("{k} blocks lie"),
                }
            ));
        }
        out
    }
}

/// One device's segments over time, and the step each block's free was requested at.
#[derive(Clone, Debug, Default)]
pub struct DeviceSegments {
    /// The device.
    pub device: u32,
    /// In stacking order: those of the snapshot the trace never made, those freed without
    /// being made (the last freed lowest), then the trace's in the order they were made.
    segments: Vec<SegmentBand>,
    /// Per band of the device's [`DeviceTimeline`]: the step its free was requested at
    /// ([`NEVER`]: not before it was freed, or never).
    pending: Vec<u32>,
    /// The most bytes the segments held at once.
    pub peak: u64,
    /// What the trace lacks.
    pub lacks: SegmentLacks,
}

/// A segment placed at a step: its band and the bytes below it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlacedSegment {
    /// Its place in the device's segments.
    pub index: u32,
    /// The segment.
    pub band: SegmentBand,
    /// The bytes of the segments stacked below it.
    pub bottom: u64,
}

/// A block placed at a step: where it is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlacedBlock {
    /// Its band in the active memory timeline.
    pub band: u32,
    /// Its segment's place in the device's segments.
    pub segment: u32,
    /// Its bottom: the segment's bottom plus its offset in the segment.
    pub bottom: u64,
    /// Bytes drawn (the block's size, cut at its segment's end).
    pub size: u64,
    /// Its site.
    pub site: u32,
    /// Freed by its tensor, waiting for other streams.
    pub pending: bool,
}

/// The segments and blocks at one step, as drawn.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Column {
    /// The segments alive, in stacking order.
    pub segments: Vec<PlacedSegment>,
    /// The blocks alive inside them, by bottom.
    pub blocks: Vec<PlacedBlock>,
    /// Blocks alive that no segment holds.
    pub outside: usize,
}

impl Column {
    /// The bytes the segments hold.
    pub fn reserved(&self) -> u64 {
        self.segments.iter().map(|s| s.band.size).sum()
    }
}

/// What a cell of the picture shows: what most of its bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fill {
    /// No segment.
    Empty,
    /// Cached by the allocator, free.
    Free,
    /// Freed by its tensor, waiting for other streams.
    Pending,
    /// Allocated; the site of the largest block there.
    Site(u32),
    /// Allocated, the largest block there one a filter leaves out (drawn without colour).
    Filtered,
}

/// The segment timeline of a range of steps as a grid: `samples.len()` columns of `rows`
/// cells, bottom to top, each what most of its bytes are.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SegmentPicture {
    /// The steps sampled, one a column.
    pub samples: Vec<u32>,
    /// Cells a column.
    pub rows: u32,
    /// The bytes the picture's height stands for.
    pub top: u64,
    /// Column after column, bottom cell first.
    pub cells: Vec<Fill>,
    /// (column, row): where a segment at least three cells tall begins.
    pub edges: Vec<(u32, u32)>,
}

impl SegmentPicture {
    /// The cells of column `i`, bottom first.
    pub fn column(&self, i: usize) -> &[Fill] {
        let rows = self.rows as usize;
        self.cells.get(i * rows..(i + 1) * rows).unwrap_or(&[])
    }
}

/// What lies under a point of the segment timeline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentHit {
    /// The segment.
    pub segment: PlacedSegment,
    /// Bytes of it held by blocks at that step.
    pub allocated: u64,
    /// Its blocks at that step.
    pub blocks: usize,
    /// The block under the point, if any.
    pub block: Option<PlacedBlock>,
}

/// Every device's segment timeline, device by device as the [`MemoryTimeline`] has them.
#[derive(Clone, Debug, Default)]
pub struct SegmentTimeline {
    /// Per device of the memory timeline, in its order.
    pub devices: Vec<DeviceSegments>,
}

impl SegmentTimeline {
    /// The segments of every device of `layout`.
    pub fn new(snapshot: &Snapshot, layout: &MemoryTimeline) -> Self {
        Self {
            devices: layout
                .devices
                .iter()
                .map(|d| DeviceSegments::new(snapshot, d))
                .collect(),
        }
    }
}

/// `Tally::site` of a block the filter leaves out.
const FILTERED: u32 = u32::MAX;

/// Per cell of a column being drawn: bytes of segments, of allocated and of waiting blocks, and
/// the largest allocated piece's site.
#[derive(Clone, Copy, Default)]
struct Tally {
    segment: u64,
    allocated: u64,
    pending: u64,
    largest: u64,
    site: u32,
}

impl DeviceSegments {
    /// The segments of one device's trace (`timeline`'s entries), and its blocks' requested
    /// frees.
    pub fn new(snapshot: &Snapshot, timeline: &DeviceTimeline) -> Self {
        let mut lacks = SegmentLacks::default();
        let mut traced: Vec<SegmentBand> = Vec::new();
        let mut freed_first: Vec<SegmentBand> = Vec::new();
        // The live traced segments by address.
        let mut live: HashMap<u64, usize> = HashMap::new();
        // The step of the last alloc at an address, and the free requested after it.
        let mut last_alloc: HashMap<u64, u32> = HashMap::with_capacity(1024);
        let mut requested: HashMap<(u64, u32), u32> = HashMap::with_capacity(1024);
        // A segment released that the trace never made: alive from step 0.
        let mut freed_before = |e: &super::TraceEntry, step: u32, mapped: bool| {
            lacks.freed_without_alloc += 1;
            freed_first.push(SegmentBand {
                addr: e.addr,
                size: e.size,
                alloc: 0,
                free: step,
                stream: snapshot.stream(e),
                mapped,
            });
        };
        for step in 1..=timeline.steps() {
            let Some(e) = timeline.entry(snapshot, step) else {
                break;
            };
            match e.action() {
                Action::Alloc => {
                    last_alloc.insert(e.addr, step);
                }
                Action::FreeRequested => {
                    // A block from before the trace is known by step 0.
                    let at = last_alloc.get(&e.addr).copied().unwrap_or(0);
                    requested.entry((e.addr, at)).or_insert(step);
                }
                Action::SegmentAlloc | Action::SegmentMap => {
                    live.insert(e.addr, traced.len());
                    traced.push(SegmentBand {
                        addr: e.addr,
                        size: e.size,
                        alloc: step,
                        free: NEVER,
                        stream: snapshot.stream(e),
                        mapped: e.action() == Action::SegmentMap,
                    });
                }
                Action::SegmentFree => match live.remove(&e.addr) {
                    Some(i) => traced[i].free = step,
                    None => freed_before(e, step, false),
                },
                Action::SegmentUnmap => {
                    let (from, to) = (e.addr, e.addr.saturating_add(e.size));
                    let hit: Vec<u64> = live
                        .iter()
                        .filter(|&(&a, &i)| a < to && a.saturating_add(traced[i].size) > from)
                        .map(|(&a, _)| a)
                        .collect();
                    if hit.is_empty() {
                        freed_before(e, step, true);
                    }
                    for a in hit {
                        let Some(i) = live.remove(&a) else { continue };
                        traced[i].free = step;
                        let old = traced[i];
                        let end = old.addr.saturating_add(old.size);
                        // What the unmap leaves of the range stays mapped, from this step.
                        for (lo, hi) in [(old.addr, from), (to, end)] {
                            if lo < hi && lo >= old.addr && hi <= end {
                                live.insert(lo, traced.len());
                                traced.push(SegmentBand {
                                    addr: lo,
                                    size: hi - lo,
                                    alloc: step,
                                    free: NEVER,
                                    ..old
                                });
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        // The snapshot's segments the trace never made (nothing alive at the end covers them).
        let mut resident: Vec<SegmentBand> = Vec::new();
        let alive_at_end: Vec<(u64, u64)> = live
            .values()
            .map(|&i| {
                (
                    traced[i].addr,
                    traced[i].addr.saturating_add(traced[i].size),
                )
            })
            .collect();
        for s in snapshot
            .segments
            .iter()
            .filter(|s| s.device == timeline.device)
        {
            let end = s.address.saturating_add(s.total_size);
            if !alive_at_end.iter().any(|&(a, b)| a < end && b > s.address) {
                lacks.before_trace += 1;
                resident.push(SegmentBand {
                    addr: s.address,
                    size: s.total_size,
                    alloc: 0,
                    free: NEVER,
                    stream: s.stream,
                    mapped: false,
                });
            }
        }
        let mut segments = resident;
        segments.extend(freed_first.iter().rev());
        segments.extend_from_slice(&traced);
        // Each band's requested free, by its address and allocation step.
        let pending = if requested.is_empty() {
            Vec::new()
        } else {
            (0..timeline.band_count() as u32)
                .map(|band| {
                    timeline
                        .band_place(snapshot, band)
                        .and_then(|b| requested.get(&(b.addr, b.alloc)).copied())
                        .unwrap_or(NEVER)
                })
                .collect()
        };
        let mut timeline_segments = Self {
            device: timeline.device,
            segments,
            pending,
            peak: 0,
            lacks,
        };
        timeline_segments.peak = timeline_segments.peak_reserved();
        timeline_segments.lacks.blocks_outside =
            timeline_segments.count_outside(snapshot, timeline);
        timeline_segments
    }

    /// The most bytes the segments held at once (one sweep of their starts and ends).
    fn peak_reserved(&self) -> u64 {
        let mut events: Vec<(u32, bool, u64)> = Vec::with_capacity(self.segments.len() * 2);
        for s in &self.segments {
            events.push((s.alloc, true, s.size));
            if s.free != NEVER {
                events.push((s.free, false, s.size));
            }
        }
        // At one step, what goes is gone before what comes.
        events.sort_unstable_by_key(|&(step, comes, _)| (step, comes));
        let (mut now, mut peak) = (0u64, 0u64);
        for (_, comes, size) in events {
            if comes {
                now += size;
                peak = peak.max(now);
            } else {
                now = now.saturating_sub(size);
            }
        }
        peak
    }

    /// Blocks alive at their allocation step that no segment holds then: one sweep of the
    /// bands (in the order they appear) beside the segments' starts and ends.
    fn count_outside(&self, snapshot: &Snapshot, timeline: &DeviceTimeline) -> usize {
        // (step, comes, place): at one step what goes is gone before what comes.
        let mut events: Vec<(u32, bool, usize)> = Vec::with_capacity(self.segments.len() * 2);
        for (i, s) in self.segments.iter().enumerate() {
            events.push((s.alloc, true, i));
            if s.free != NEVER {
                events.push((s.free, false, i));
            }
        }
        events.sort_unstable();
        let mut events = events.into_iter().peekable();
        // The segments alive, by (address, place): their ends.
        let mut alive: std::collections::BTreeMap<(u64, usize), u64> = Default::default();
        let mut outside = 0;
        for band in 0..timeline.band_count() as u32 {
            let Some(b) = timeline.band_place(snapshot, band) else {
                continue;
            };
            while let Some((_, comes, i)) = events.next_if(|e| e.0 <= b.alloc) {
                let s = &self.segments[i];
                if comes {
                    alive.insert((s.addr, i), s.addr.saturating_add(s.size));
                } else {
                    alive.remove(&(s.addr, i));
                }
            }
            let held = alive
                .range(..=(b.addr, usize::MAX))
                .next_back()
                .is_some_and(|(_, &end)| b.addr < end);
            if !held {
                outside += 1;
            }
        }
        outside
    }

    /// The segments, in stacking order.
    pub fn segments(&self) -> &[SegmentBand] {
        &self.segments
    }

    /// The step `band`'s free was requested at ([`NEVER`]: not before it was freed).
    pub fn requested_free(&self, band: u32) -> u32 {
        self.pending.get(band as usize).copied().unwrap_or(NEVER)
    }

    /// The segments and the blocks in them at `step`, as drawn.
    pub fn column(&self, snapshot: &Snapshot, timeline: &DeviceTimeline, step: u32) -> Column {
        let mut column = Column::default();
        let mut bottom = 0u64;
        for (i, s) in self.segments.iter().enumerate() {
            if s.alive_at(step) {
                column.segments.push(PlacedSegment {
                    index: i as u32,
                    band: *s,
                    bottom,
                });
                bottom += s.size;
            }
        }
        let mut by_addr: Vec<&PlacedSegment> = column.segments.iter().collect();
        by_addr.sort_unstable_by_key(|s| s.band.addr);
        let mut bands = Vec::new();
        timeline.live_at(step, &mut bands);
        for band in bands {
            let Some(b) = timeline.band_place(snapshot, band) else {
                continue;
            };
            let at = by_addr.partition_point(|s| s.band.addr <= b.addr);
            let Some(seg) = at
                .checked_sub(1)
                .and_then(|k| by_addr.get(k))
                .filter(|s| b.addr < s.band.addr.saturating_add(s.band.size))
            else {
                column.outside += 1;
                continue;
            };
            let offset = b.addr - seg.band.addr;
            column.blocks.push(PlacedBlock {
                band,
                segment: seg.index,
                bottom: seg.bottom + offset,
                size: b.size.min(seg.band.size - offset),
                site: b.site,
                pending: self.requested_free(band) <= step,
            });
        }
        column.blocks.sort_unstable_by_key(|b| (b.bottom, b.band));
        column
    }

    /// The picture of steps `from..=to` in at most `columns` columns of `rows` cells, the
    /// height standing for `top` bytes; with `keep`, the blocks it leaves out are
    /// [`Fill::Filtered`] (a frame clicked in the flame graph keeps its own blocks).
    #[allow(clippy::too_many_arguments)]
    pub fn picture(
        &self,
        snapshot: &Snapshot,
        timeline: &DeviceTimeline,
        (from, to): (u32, u32),
        columns: u32,
        rows: u32,
        top: u64,
        keep: Option<&dyn Fn(u32) -> bool>,
    ) -> SegmentPicture {
        let (from, to) = (from.min(to), from.max(to).min(timeline.end()));
        let columns = columns.clamp(1, (to - from).saturating_add(1).max(1));
        let rows = rows.max(1);
        let mut samples: Vec<u32> = (0..columns)
            .map(|i| from + ((u64::from(to - from) * u64::from(i)) / u64::from(columns)) as u32)
            .collect();
        samples.dedup();
        let cell = (top / u64::from(rows)).max(1);
        let mut picture = SegmentPicture {
            samples,
            rows,
            top,
            cells: Vec::new(),
            edges: Vec::new(),
        };
        let mut tally = vec![Tally::default(); rows as usize];
        for (i, &step) in picture.samples.iter().enumerate() {
            tally.fill(Tally::default());
            let column = self.column(snapshot, timeline, step);
            for s in &column.segments {
                let row = s.bottom / cell;
                if s.band.size >= 3 * cell && row < u64::from(rows) {
                    picture.edges.push((i as u32, row as u32));
                }
                spread(&mut tally, cell, s.bottom, s.band.size, |t, bytes| {
                    t.segment += bytes;
                });
            }
            for b in &column.blocks {
                let site = if keep.is_none_or(|keep| keep(b.band)) {
                    b.site
                } else {
                    FILTERED
                };
                spread(&mut tally, cell, b.bottom, b.size, |t, bytes| {
                    if b.pending {
                        t.pending += bytes;
                    } else {
                        t.allocated += bytes;
                        if bytes > t.largest {
                            t.largest = bytes;
                            t.site = site;
                        }
                    }
                });
            }
            picture.cells.extend(tally.iter().map(|t| {
                let free = t.segment.saturating_sub(t.allocated + t.pending);
                if t.segment == 0 {
                    Fill::Empty
                } else if t.allocated >= free && t.allocated >= t.pending {
                    if t.site == FILTERED {
                        Fill::Filtered
                    } else {
                        Fill::Site(t.site)
                    }
                } else if t.pending > free {
                    Fill::Pending
                } else {
                    Fill::Free
                }
            }));
        }
        picture
    }

    /// Where `band`'s block is drawn at each of `steps` it is alive at: (step, bottom).
    pub fn block_track(
        &self,
        snapshot: &Snapshot,
        timeline: &DeviceTimeline,
        band: u32,
        steps: &[u32],
    ) -> Vec<(u32, u64)> {
        let (Some(place), Some(block)) = (
            timeline.band_place(snapshot, band),
            timeline.block(snapshot, band),
        ) else {
            return Vec::new();
        };
        steps
            .iter()
            .filter(|&&step| place.alloc <= step && step < block.free_step)
            .filter_map(|&step| {
                let mut bottom = 0u64;
                for s in self.segments.iter().filter(|s| s.alive_at(step)) {
                    if s.addr <= place.addr && place.addr < s.addr.saturating_add(s.size) {
                        return Some((step, bottom + (place.addr - s.addr)));
                    }
                    bottom += s.size;
                }
                None
            })
            .collect()
    }

    /// What lies at `bytes` from the bottom at `step`: the segment there and the block, if any.
    pub fn hit(
        &self,
        snapshot: &Snapshot,
        timeline: &DeviceTimeline,
        step: u32,
        bytes: u64,
    ) -> Option<SegmentHit> {
        let column = self.column(snapshot, timeline, step);
        let segment = *column
            .segments
            .iter()
            .find(|s| s.bottom <= bytes && bytes < s.bottom + s.band.size)?;
        let inside = column.blocks.iter().filter(|b| b.segment == segment.index);
        Some(SegmentHit {
            segment,
            allocated: inside.clone().map(|b| b.size).sum(),
            blocks: inside.clone().count(),
            block: inside
                .clone()
                .find(|b| b.bottom <= bytes && bytes < b.bottom + b.size)
                .copied(),
        })
    }
}

/// Adds `size` bytes from `bottom` to the cells they cover, `add(cell, bytes of it)`.
fn spread(
    tally: &mut [Tally],
    cell: u64,
    bottom: u64,
    size: u64,
    mut add: impl FnMut(&mut Tally, u64),
) {
    let top = bottom.saturating_add(size);
    let mut at = bottom;
    while at < top {
        let row = (at / cell) as usize;
        let Some(t) = tally.get_mut(row) else {
            return;
        };
        let end = ((row as u64 + 1) * cell).min(top);
        add(t, end - at);
        at = end;
    }
}
