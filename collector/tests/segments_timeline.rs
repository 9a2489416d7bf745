//! The segment timeline against a plain replay of the trace: at every step, the segments alive
//! are the replay's in the order they were made, each one's bottom the bytes of those below it,
//! every block alive sits inside its segment at its offset, waiting to be freed exactly between
//! its `free_requested` and its `free_completed`, and a point is answered with the segment and
//! the block the replay has there — on the real snapshots, on expandable segments' maps and
//! unmaps, and on random traces.

#![allow(clippy::unwrap_used)] // In tests a panic is how a failure is reported.

use std::collections::HashMap;

use collector::snapshot::segments_timeline::{Fill, PlacedBlock, SegmentPicture, SegmentTimeline};
use collector::snapshot::timeline::MemoryTimeline;
use collector::snapshot::{Action, BlockState, Segment, Snapshot, TraceEntry};
use proptest::prelude::*;
use tidemark_tests::snapshots::{built, real};

/// A segment in the replay: address and bytes.
type Seg = (u64, u64);
/// A block in the replay: address, bytes, the step its free was requested at.
type Blk = (u64, u64, Option<u32>);

/// The replay of one device, step by step: the segments alive in the order they were made
/// (those from before the trace first) and the blocks alive. Plain lists, linear searches.
fn replay(snapshot: &Snapshot, device: u32, mut each: impl FnMut(u32, &[Seg], &[Blk])) {
    let entries: Vec<&TraceEntry> = snapshot
        .entries
        .iter()
        .filter(|e| e.device() == device)
        .collect();
    // Segments released without being made, in the order released.
    let mut made: Vec<u64> = Vec::new();
    let mut freed_first: Vec<Seg> = Vec::new();
    for e in &entries {
        match e.action() {
            Action::SegmentAlloc | Action::SegmentMap => made.push(e.addr),
            Action::SegmentFree if !made.contains(&e.addr) => freed_first.push((e.addr, e.size)),
            _ => {}
        }
    }
    // Those of the snapshot that nothing made in the trace covers at the end: found by a first
    // replay of the traced segments alone.
    let mut segs: Vec<Seg> = Vec::new();
    for e in &entries {
        step_segments(e, &mut segs);
    }
    let mut live: Vec<Seg> = snapshot
        .segments
        .iter()
        .filter(|s| s.device == device)
        .filter(|s| {
            !segs
                .iter()
                .any(|&(a, n)| a < s.address + s.total_size && a + n > s.address)
        })
        .map(|s| (s.address, s.total_size))
        .collect();
    live.extend(freed_first.iter().rev());
    // The blocks alive before the trace: those the segments hold that the trace never
    // mentions, and those it frees without allocating (as the active memory timeline has them).
    let ends =
        |e: &TraceEntry| e.action() == Action::FreeCompleted || e.action().name(snapshot) == "free";
    let mut seen: Vec<u64> = Vec::new();
    let mut freed_before: Vec<Blk> = Vec::new();
    for e in &entries {
        if e.action() == Action::Alloc {
            seen.push(e.addr);
        } else if ends(e) && !seen.contains(&e.addr) {
            seen.push(e.addr);
            freed_before.push((e.addr, e.size, None));
        }
    }
    let mut blocks: Vec<Blk> = snapshot
        .segments
        .iter()
        .filter(|s| s.device == device)
        .flat_map(|s| &s.blocks)
        .filter(|b| b.state == BlockState::ActiveAllocated && !seen.contains(&b.address))
        .map(|b| {
            let size = if b.requested_size > 0 {
                b.requested_size
            } else {
                b.size
            };
            (b.address, size, None)
        })
        .collect();
    blocks.extend(freed_before);
    each(0, &live, &blocks);
    for (k, e) in entries.iter().enumerate() {
        match e.action() {
            Action::Alloc => {
                // An allocation over a block never freed ends that block.
                blocks.retain(|b| b.0 != e.addr);
                blocks.push((e.addr, e.size, None));
            }
            Action::FreeRequested => {
                if let Some(b) = blocks.iter_mut().find(|b| b.0 == e.addr) {
                    b.2.get_or_insert(k as u32 + 1);
                }
            }
            _ if ends(e) => blocks.retain(|b| b.0 != e.addr),
            _ => step_segments(e, &mut live),
        }
        each(k as u32 + 1, &live, &blocks);
    }
}

/// One segment entry applied to the segments alive (an unmap of part of a range leaves the
/// rest, last).
fn step_segments(e: &TraceEntry, live: &mut Vec<Seg>) {
    match e.action() {
        Action::SegmentAlloc | Action::SegmentMap => live.push((e.addr, e.size)),
        Action::SegmentFree => live.retain(|s| s.0 != e.addr),
        Action::SegmentUnmap => {
            let (from, to) = (e.addr, e.addr + e.size);
            let hit: Vec<Seg> = live
                .iter()
                .copied()
                .filter(|&(a, n)| a < to && a + n > from)
                .collect();
            live.retain(|s| !hit.contains(s));
            for (a, n) in hit {
                if a < from {
                    live.push((a, from - a));
                }
                if to < a + n {
                    live.push((to, a + n - to));
                }
            }
        }
        _ => {}
    }
}

/// Checks every device's segment timeline against the replay: at every step of a short trace,
/// some 300 steps of a long one (and its last); a point asked for at some of them.
fn check(snapshot: &Snapshot) -> (MemoryTimeline, SegmentTimeline) {
    let layout = MemoryTimeline::new(snapshot);
    let segments = SegmentTimeline::new(snapshot, &layout);
    for (timeline, device) in layout.devices.iter().zip(&segments.devices) {
        let mut peak = 0;
        let stride = (timeline.steps() / 300).max(1);
        let asked = (timeline.steps() / 20).max(1);
        replay(snapshot, timeline.device, |step, live, blocks| {
            peak = peak.max(live.iter().map(|s| s.1).sum());
            if step % stride != 0 && step != timeline.steps() {
                return;
            }
            let column = device.column(snapshot, timeline, step);
            let drawn: Vec<Seg> = column
                .segments
                .iter()
                .map(|s| (s.band.addr, s.band.size))
                .collect();
            assert_eq!(drawn, live, "step {step}: segments");
            let mut below = 0;
            for s in &column.segments {
                assert_eq!(s.bottom, below, "step {step}: 0x{:x}", s.band.addr);
                below += s.band.size;
            }
            let by_bottom: HashMap<u64, &PlacedBlock> =
                column.blocks.iter().map(|b| (b.bottom, b)).collect();
            let mut inside = 0;
            for (k, &(addr, size, requested)) in blocks.iter().enumerate() {
                let Some(&(seg, _)) = live.iter().find(|&&(a, n)| a <= addr && addr < a + n) else {
                    continue;
                };
                inside += 1;
                let placed = column.segments.iter().find(|s| s.band.addr == seg).unwrap();
                let block = by_bottom
                    .get(&(placed.bottom + (addr - seg)))
                    .unwrap_or_else(|| panic!("step {step}: block 0x{addr:x} not drawn"));
                assert_eq!(block.size, size.min(placed.band.size - (addr - seg)));
                assert_eq!(
                    block.pending,
                    requested.is_some(),
                    "step {step}: 0x{addr:x}"
                );
                if step % asked != 0 || k >= 20 {
                    continue;
                }
                // A point in it is answered with it.
                let hit = device
                    .hit(snapshot, timeline, step, block.bottom + block.size / 2)
                    .unwrap();
                assert_eq!(hit.segment.band.addr, seg);
                assert_eq!(hit.block.map(|b| b.band), Some(block.band));
            }
            assert_eq!(column.blocks.len(), inside, "step {step}: blocks drawn");
            assert_eq!(column.outside, blocks.len() - inside, "step {step}");
        });
        let name = timeline.device;
        assert_eq!(device.peak, peak, "cuda:{name}: the segments' peak");
    }
    (layout, segments)
}

#[test]
fn the_real_snapshots_place_segments_and_blocks_as_the_replay() {
    for name in [
        "bcrafton_cs336_training_step.pickle",
        "cs336_large_fw_bw_bf16.pickle",
        "verl_rollout_state.pickle",
    ] {
        let snapshot = real(name);
        let (layout, segments) = check(&snapshot);
        for (timeline, device) in layout.devices.iter().zip(&segments.devices) {
            // At the end, the segments drawn hold what the snapshot's segments hold.
            let column = device.column(&snapshot, timeline, timeline.steps());
            let held: u64 = snapshot
                .segments
                .iter()
                .filter(|s| s.device == timeline.device)
                .map(|s| s.total_size)
                .sum();
            assert_eq!(column.reserved(), held, "{name} cuda:{}", timeline.device);
            // The picture: every cell of a column below what the segments hold is a segment's.
            let top = device.peak.max(1);
            let whole = |keep: Option<&dyn Fn(u32) -> bool>| {
                device.picture(
                    &snapshot,
                    timeline,
                    (0, timeline.end()),
                    300,
                    200,
                    top,
                    keep,
                )
            };
            let picture = whole(None);
            assert_eq!(picture.cells.len(), picture.samples.len() * 200);
            let last = picture.samples.len() - 1;
            let filled = picture
                .column(last)
                .iter()
                .filter(|&&c| c != Fill::Empty)
                .count();
            let expected = (u128::from(held) * 200 / u128::from(top)) as usize;
            assert!(
                filled.abs_diff(expected) <= 1,
                "{name}: {filled} cells filled, {expected} expected"
            );
            if column.blocks.iter().any(|b| !b.pending) {
                assert!(
                    picture.cells.iter().any(|c| matches!(c, Fill::Site(_))),
                    "{name}"
                );
                // A filter that keeps nothing leaves no site's colour, and the same cells filled.
                let none = whole(Some(&|_| false));
                assert!(
                    !none.cells.iter().any(|c| matches!(c, Fill::Site(_))),
                    "{name}"
                );
                assert!(none.cells.contains(&Fill::Filtered), "{name}");
                let filled =
                    |p: &SegmentPicture| p.cells.iter().filter(|c| **c != Fill::Empty).count();
                assert_eq!(filled(&none), filled(&picture), "{name}");
            }
        }
    }
}

/// A snapshot built from a script: (action, addr, size), on device 0, one stack.
#[test]
fn expandable_segments_are_drawn_as_what_they_map() {
    use Action::{Alloc, FreeCompleted, FreeRequested, SegmentMap, SegmentUnmap};
    const MIB: u64 = 1 << 20;
    let base = 0x7f00_0000_0000;
    let ops = [
        (SegmentMap, base, 4 * MIB),
        (Alloc, base, MIB),
        (SegmentMap, base + 4 * MIB, 4 * MIB),
        (Alloc, base + 5 * MIB, 2 * MIB),
        (FreeRequested, base, MIB),
        (FreeCompleted, base, MIB),
        // The first range's upper half goes back to the driver; its lower half stays mapped.
        (SegmentUnmap, base + 2 * MIB, 2 * MIB),
        (Alloc, base, MIB),
    ];
    let snapshot = built(&ops, Vec::new());
    let (layout, segments) = check(&snapshot);
    let (timeline, device) = (&layout.devices[0], &segments.devices[0]);
    assert_eq!(device.peak, 8 * MIB);
    let end = device.column(&snapshot, timeline, timeline.steps());
    let ranges: Vec<(u64, u64, u64)> = end
        .segments
        .iter()
        .map(|s| (s.band.addr - base, s.band.size / MIB, s.bottom / MIB))
        .collect();
    // The second range, then what is left of the first, stacked on it.
    assert_eq!(ranges, [(4 * MIB, 4, 0), (0, 2, 4)]);
    assert!(end.segments.iter().all(|s| s.band.mapped));
    // The block at the first range's start sits at the bottom of what is left of it.
    let block = end.blocks.iter().find(|b| b.bottom == 4 * MIB).unwrap();
    assert_eq!(block.size, MIB);
    // Between its free_requested and free_completed the first block was waiting.
    let waiting = device.column(&snapshot, timeline, 5);
    assert!(waiting.blocks.iter().any(|b| b.pending && b.size == MIB));
    assert!(device.lacks.describe().is_empty(), "{:?}", device.lacks);
}

#[test]
fn segments_from_before_the_trace_are_drawn_from_its_start_and_said() {
    use Action::{Alloc, FreeCompleted, SegmentAlloc, SegmentFree};
    let ops = [
        (Alloc, 0x1000, 256),
        (FreeCompleted, 0x1000, 256),
        // Made before the trace: released in it.
        (SegmentFree, 0x1000, 4096),
        (SegmentAlloc, 0x8000, 2048),
        // A block in no segment the trace knows.
        (Alloc, 0x20000, 512),
    ];
    let kept = Segment {
        device: 0,
        address: 0x40000,
        total_size: 8192,
        allocated_size: 0,
        segment_type: "large".to_owned(),
        stream: 0,
        pool: None,
        blocks: Vec::new(),
    };
    let snapshot = built(&ops, vec![kept]);
    let (layout, segments) = check(&snapshot);
    let device = &segments.devices[0];
    let start = device.column(&snapshot, &layout.devices[0], 0);
    let at_start: Vec<u64> = start.segments.iter().map(|s| s.band.addr).collect();
    assert_eq!(at_start, [0x40000, 0x1000]);
    assert_eq!(device.lacks.freed_without_alloc, 1);
    assert_eq!(device.lacks.before_trace, 1);
    assert_eq!(device.lacks.blocks_outside, 1);
    assert_eq!(device.lacks.describe().len(), 3);
}

/// A random trace on one device: segments made and released (blocks only inside them), blocks
/// allocated in free room of a segment, their frees requested and completed, a prefix dropped.
fn random_trace() -> impl Strategy<Value = Snapshot> {
    (
        proptest::collection::vec((0u8..10, 1u64..8, any::<bool>()), 1..120),
        0usize..10,
    )
        .prop_map(|(script, dropped)| {
            let mut ops = Vec::new();
            // (address, bytes, its blocks' (address, bytes))
            let mut segments: Vec<(u64, u64, Vec<Seg>)> = Vec::new();
            let mut waiting: Vec<(u64, u64)> = Vec::new();
            let mut next = 0x10_0000u64;
            for &(op, n, flag) in &script {
                match op {
                    0 | 1 => {
                        let size = n * 0x1000;
                        ops.push((Action::SegmentAlloc, next, size));
                        segments.push((next, size, Vec::new()));
                        next += size + 0x1000;
                    }
                    2 if !segments.is_empty() => {
                        let at = n as usize % segments.len();
                        if segments[at].2.is_empty() {
                            let (addr, size, _) = segments.remove(at);
                            ops.push((Action::SegmentFree, addr, size));
                        }
                    }
                    3 | 4 if !waiting.is_empty() => {
                        let (addr, size) = waiting.remove(0);
                        ops.push((Action::FreeCompleted, addr, size));
                        for s in &mut segments {
                            s.2.retain(|b| b.0 != addr);
                        }
                    }
                    _ if !segments.is_empty() => {
                        let at = n as usize % segments.len();
                        let (addr, size, blocks) = &mut segments[at];
                        if flag && !blocks.is_empty() {
                            let (b, bs) = blocks[n as usize % blocks.len()];
                            if !waiting.contains(&(b, bs)) {
                                ops.push((Action::FreeRequested, b, bs));
                                waiting.push((b, bs));
                            }
                        } else {
                            // The first free room of 512 bytes × n in the segment.
                            let want = 512 * n;
                            let mut at = *addr;
                            blocks.sort_unstable();
                            for &(b, bs) in blocks.iter() {
                                if b >= at + want {
                                    break;
                                }
                                at = at.max(b + bs);
                            }
                            if at + want <= *addr + *size {
                                ops.push((Action::Alloc, at, want));
                                blocks.push((at, want));
                            }
                        }
                    }
                    _ => {}
                }
            }
            let dropped = dropped.min(ops.len());
            built(&ops[dropped..], Vec::new())
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn random_traces_place_segments_and_blocks_as_the_replay(snapshot in random_trace()) {
        check(&snapshot);
    }
}
