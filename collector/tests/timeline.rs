//! The active memory timeline's layout against a plain replay of the trace: at every step, each
//! band's bottom is the bytes still alive of the blocks allocated before it, the bands alive
//! are the replay's blocks, a point is answered with the block the replay has there, and a
//! picture that sums small blocks per site keeps every byte — on the real snapshots, on random
//! ones, and on histories that began late.

#![allow(clippy::unwrap_used)] // In tests a panic is how a failure is reported.

use collector::snapshot::timeline::{
    BlockInfo, DeviceTimeline, Hit, MemoryTimeline, NEVER, Picture,
};
use collector::snapshot::{Action, Block, BlockState, Frame, Segment, Snapshot, TraceEntry};
use proptest::prelude::*;
use tidemark_tests::snapshots::real;

/// A block in the replay: its address, the step it appeared at (0: before the trace), bytes
/// and site stack.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Replayed {
    addr: u64,
    alloc: u32,
    size: u64,
}

/// The replay: per step `0..=end`, the blocks alive in the order they were allocated, the ones
/// alive before the trace first (those only the segments know, then those the trace frees
/// without allocating, the last freed lowest). Written plainly, with a list and linear searches.
/// `each` is called with every step and the blocks alive then; returns how many steps.
fn replay(snapshot: &Snapshot, device: u32, mut each: impl FnMut(u32, &[Replayed])) -> u32 {
    let entries: Vec<&TraceEntry> = snapshot
        .entries
        .iter()
        .filter(|e| e.device() == device)
        .collect();
    let ends =
        |e: &TraceEntry| e.action() == Action::FreeCompleted || e.action().name(snapshot) == "free";
    // Which frees end a block allocated before the trace: an address neither allocated nor
    // freed before.
    let mut seen: Vec<u64> = Vec::new();
    let mut freed_first: Vec<(u64, u64)> = Vec::new();
    for e in &entries {
        if e.action() == Action::Alloc {
            seen.push(e.addr);
        } else if ends(e) && !seen.contains(&e.addr) {
            seen.push(e.addr);
            freed_first.push((e.addr, e.size));
        }
    }
    let mut resident: Vec<Replayed> = Vec::new();
    for s in snapshot.segments.iter().filter(|s| s.device == device) {
        for b in &s.blocks {
            if b.state == BlockState::ActiveAllocated && !seen.contains(&b.address) {
                resident.push(Replayed {
                    addr: b.address,
                    alloc: 0,
                    size: requested(b),
                });
            }
        }
    }
    let mut live: Vec<Replayed> = resident;
    live.extend(freed_first.iter().rev().map(|&(addr, size)| Replayed {
        addr,
        alloc: 0,
        size,
    }));
    each(0, &live);
    for (k, e) in entries.iter().enumerate() {
        let step = k as u32 + 1;
        if e.action() == Action::Alloc {
            // An address still held: that block ends here.
            live.retain(|r| r.addr != e.addr);
            live.push(Replayed {
                addr: e.addr,
                alloc: step,
                size: e.size,
            });
        } else if ends(e) {
            live.retain(|r| r.addr != e.addr);
        }
        each(step, &live);
    }
    entries.len() as u32 + 1
}

/// The bytes a block asked for, as the trace counts them (its size when the snapshot does not
/// say).
fn requested(b: &Block) -> u64 {
    if b.requested_size > 0 {
        b.requested_size
    } else {
        b.size
    }
}

/// A band's bottom at `step` as the picture draws it (`None`: not drawn then), the steps asked
/// in order: `cursor` is where the last answer was found among its points.
fn bottom_at(picture: &Picture, band: usize, step: u32, cursor: &mut usize) -> Option<u64> {
    let points = &picture.bands[band].points;
    if step < points.first()?.0 {
        return None;
    }
    while points.get(*cursor + 1).is_some_and(|p| p.0 <= step) {
        *cursor += 1;
    }
    points.get(*cursor).map(|p| p.1)
}

/// Checks one device's layout against the replay at every step.
fn check_device(snapshot: &Snapshot, timeline: &MemoryTimeline, device: &DeviceTimeline) {
    let end = device.end();
    // Every step sampled, every block a band of its own.
    let picture = device.picture(0, end, end, 0, &[]);
    assert_eq!(picture.samples.len() as u32, end + 1);
    // Each drawn band's block, found once.
    let blocks: Vec<_> = picture
        .bands
        .iter()
        .map(|d| device.block(snapshot, d.band).unwrap())
        .collect();
    // A block is known by its address and the step it appeared at: one band each.
    let mut by_key = std::collections::HashMap::new();
    for (i, b) in blocks.iter().enumerate() {
        assert!(
            by_key.insert((b.addr, b.alloc_step), i).is_none(),
            "two bands for {b:?}"
        );
    }
    let mut cursors = vec![0usize; blocks.len()];
    let mut peak = 0;
    let mut live = Vec::new();
    let steps = replay(snapshot, device.device, |step, alive| {
        let total: u64 = alive.iter().map(|r| r.size).sum();
        peak = peak.max(total);
        // The index answers the same blocks, in the same order.
        let indexed = device.live_at(step, &mut live);
        assert_eq!(indexed, total, "step {step}");
        let order: Vec<(u64, u32)> = live
            .iter()
            .map(|&b| {
                let info = device.block(snapshot, b).unwrap();
                (info.addr, info.alloc_step)
            })
            .collect();
        let expected: Vec<(u64, u32)> = alive.iter().map(|r| (r.addr, r.alloc)).collect();
        assert_eq!(order, expected, "step {step}");
        // The picture: each block alive has a band whose bottom is the bytes below it.
        let mut below = 0;
        for r in alive {
            let at = *by_key
                .get(&(r.addr, r.alloc))
                .unwrap_or_else(|| panic!("step {step}: no band for {r:?}"));
            let b = &blocks[at];
            assert!(b.alloc_step <= step && (b.free_step == NEVER || step < b.free_step));
            assert_eq!(blocks[at].size, r.size);
            assert_eq!(
                bottom_at(&picture, at, step, &mut cursors[at]),
                Some(below),
                "step {step}: the band of {r:?}"
            );
            // A point inside it is answered with it (at some steps: each answer reads the
            // bands alive).
            if step % 13 == 0 && (alive.len() < 64 || r.addr % 7 == 0) {
                match device.hit(snapshot, &picture, step, below + r.size / 2) {
                    Some(Hit::Block(info)) => {
                        assert_eq!(
                            (info.addr, info.alloc_step),
                            (r.addr, r.alloc),
                            "step {step}"
                        )
                    }
                    other => panic!("step {step}: {other:?} under {r:?}"),
                }
            }
            below += r.size;
        }
        assert_eq!(picture.levels_at(step as usize).last(), Some(&total));
        assert_eq!(device.hit(snapshot, &picture, step, total), None);
        // No band drawn at this step that the replay does not have.
        let drawn = blocks
            .iter()
            .filter(|b| b.alloc_step <= step && (b.free_step == NEVER || step < b.free_step))
            .count();
        assert_eq!(drawn, alive.len(), "step {step}");
    });
    assert_eq!(steps, end, "device {}", device.device);
    assert_eq!(device.peak, peak);
    check_summarised(snapshot, timeline, device);
}

/// A picture that keeps only the larger blocks as bands: each is where it is when every block
/// is a band (its bottom the bytes alive of every block allocated before it: a band's place does
/// not depend on the threshold, that is on the picture's pixels), the smaller ones between them
/// are answered as one run, the levels sum the smaller ones per site, and the top is every byte
/// alive.
fn check_summarised(snapshot: &Snapshot, timeline: &MemoryTimeline, device: &DeviceTimeline) {
    let mut sizes: Vec<u64> = (0..device.band_count() as u32)
        .map(|b| device.block(snapshot, b).unwrap().size)
        .collect();
    sizes.sort_unstable();
    let Some(&threshold) = sizes.get(sizes.len() / 2) else {
        return;
    };
    let sites = timeline.ranked_sites();
    let summary = &sites[..sites.len().min(2)];
    let end = device.end();
    let picture = device.picture(0, end, end, threshold, summary);
    let mut cursors = vec![0usize; picture.bands.len()];
    let drawn: std::collections::HashMap<u32, usize> = picture
        .bands
        .iter()
        .enumerate()
        .map(|(i, d)| (d.band, i))
        .collect();
    let mut live = Vec::new();
    replay(snapshot, device.device, |step, alive| {
        let step = step as usize;
        let levels = picture.levels_at(step);
        let total: u64 = alive.iter().map(|r| r.size).sum();
        let big: u64 = alive
            .iter()
            .filter(|r| r.size >= threshold)
            .map(|r| r.size)
            .sum();
        assert_eq!(levels.first(), Some(&big), "step {step}");
        assert_eq!(levels.last(), Some(&total), "step {step}");
        device.live_at(step as u32, &mut live);
        let blocks: Vec<BlockInfo> = live
            .iter()
            .map(|&b| device.block(snapshot, b).unwrap())
            .collect();
        // Each summary level is its site's small blocks.
        for (i, &site) in picture.summary_sites.iter().enumerate() {
            let bytes: u64 = blocks
                .iter()
                .filter(|b| b.size < threshold && b.site == site)
                .map(|b| b.size)
                .sum();
            assert_eq!(levels[i + 1] - levels[i], bytes, "step {step}, site {site}");
        }
        // Each band of its own at its place among all the blocks; each run of smaller blocks
        // between two answered whole.
        let mut below = 0u64;
        let mut run = (0u64, 0usize);
        let mut runs = 0usize;
        // (Each answer reads the bands alive: some runs at some steps.)
        let few = blocks.len() < 64;
        let mut check_run = |run: &mut (u64, usize), top: u64| {
            runs += usize::from(run.1 > 0);
            if run.1 > 0 && step.is_multiple_of(13) && (few || runs % 7 == 1) {
                match device.hit(snapshot, &picture, step as u32, top - run.0) {
                    Some(Hit::Small { bytes, blocks, .. }) => {
                        assert_eq!((bytes, blocks), *run, "step {step}")
                    }
                    other => panic!("step {step}: {other:?} at a run of {run:?}"),
                }
            }
            *run = (0, 0);
        };
        for b in &blocks {
            if b.size >= threshold {
                check_run(&mut run, below);
                let at = *drawn
                    .get(&b.band)
                    .unwrap_or_else(|| panic!("step {step}: {b:?} not drawn"));
                assert_eq!(
                    bottom_at(&picture, at, step as u32, &mut cursors[at]),
                    Some(below),
                    "step {step}: {b:?}"
                );
            } else {
                run.0 += b.size;
                run.1 += 1;
            }
            below += b.size;
        }
        check_run(&mut run, below);
        assert!(picture.peaks[step] >= total);
    });
}

fn check(snapshot: &Snapshot) -> MemoryTimeline {
    let timeline = MemoryTimeline::new(snapshot);
    for device in &timeline.devices {
        check_device(snapshot, &timeline, device);
    }
    timeline
}

#[test]
fn the_real_snapshots_stack_as_the_replay() {
    for name in [
        "bcrafton_cs336_training_step.pickle",
        "cs336_large_fw_bw_fp32.pickle",
        "cs336_large_fw_bw_bf16.pickle",
    ] {
        let snapshot = real(name);
        let timeline = check(&snapshot);
        let device = &timeline.devices[0];
        assert!(device.band_count() > 100, "{name}");
        assert!(device.peak > 0, "{name}");
        // What is alive at the end is what the segments hold.
        let mut held: Vec<u64> = snapshot
            .segments
            .iter()
            .flat_map(|s| &s.blocks)
            .filter(|b| b.state == BlockState::ActiveAllocated)
            .map(|b| b.address)
            .collect();
        held.sort_unstable();
        let mut live = Vec::new();
        device.live_at(device.steps(), &mut live);
        let mut alive: Vec<u64> = live
            .iter()
            .map(|&b| device.block(&snapshot, b).unwrap().addr)
            .collect();
        alive.sort_unstable();
        assert_eq!(alive, held, "{name}");
        // Each began after blocks alive at its end were allocated, and freed blocks it never
        // saw allocated: said, and drawn from the start.
        assert!(
            device.lacks.frees_without_alloc > 0,
            "{name}: {:?}",
            device.lacks
        );
        assert!(
            device.lacks.blocks_before_trace > 0,
            "{name}: {:?}",
            device.lacks
        );
        assert_eq!(device.lacks.unexplained_live, 0, "{name}");
    }
}

#[test]
fn a_snapshot_without_a_trace_is_its_segments_from_the_start() {
    for name in [
        "verl_rollout_state.pickle",
        "flexgen_oom_legacy_history.pickle",
    ] {
        let snapshot = real(name);
        let timeline = check(&snapshot);
        let held: u64 = snapshot
            .segments
            .iter()
            .flat_map(|s| &s.blocks)
            .filter(|b| b.state == BlockState::ActiveAllocated)
            .map(requested)
            .sum();
        let drawn: u64 = timeline.devices.iter().map(|d| d.end_bytes).sum();
        assert_eq!(drawn, held, "{name}");
        let before: usize = timeline
            .devices
            .iter()
            .map(|d| d.lacks.blocks_before_trace)
            .sum();
        assert!(before > 0, "{name}");
        assert!(
            timeline
                .devices
                .iter()
                .all(|d| d.lacks.blocks_before_trace == 0 || !d.lacks.describe().is_empty())
        );
    }
}

/// A snapshot built from a script: (device, action, addr, size, stack), with `stacks` stacks
/// of one Python frame each, and the given segments.
fn built(ops: &[(u32, Action, u64, u64, u32)], stacks: u32, segments: Vec<Segment>) -> Snapshot {
    let mut s = Snapshot::default();
    s.strings.push("train.py".into());
    for i in 0..stacks {
        s.strings.push(format!("site_{i}").into());
        s.frames.push(Frame {
            name: i + 1,
            filename: 0,
            line: u64::from(i) + 1,
        });
        s.add_stack(&[i]);
    }
    let mut sorted: Vec<_> = ops.to_vec();
    sorted.sort_by_key(|o| o.0); // device by device, each in order
    for (k, &(device, action, addr, size, stack)) in sorted.iter().enumerate() {
        s.entries.push(TraceEntry::new(
            action,
            addr,
            size,
            1_000 + k as i64,
            stack,
            device,
        ));
    }
    s.devices = sorted.iter().map(|o| o.0 + 1).max().unwrap_or(0);
    s.segments = segments;
    s
}

fn segment(device: u32, address: u64, blocks: Vec<Block>) -> Segment {
    let total: u64 = blocks.iter().map(|b| b.size).sum();
    Segment {
        device,
        address,
        total_size: total.max(1),
        allocated_size: total,
        segment_type: "large".to_owned(),
        stream: 0,
        pool: None,
        blocks,
    }
}

fn active(address: u64, size: u64, stack: u32) -> Block {
    Block {
        address,
        size,
        requested_size: size,
        state: BlockState::ActiveAllocated,
        stack,
    }
}

#[test]
fn a_late_history_draws_what_it_has_and_says_what_it_lacks() {
    let a = Action::Alloc;
    let f = Action::FreeCompleted;
    let r = Action::FreeRequested;
    let ops = [
        // Freed without being allocated: two blocks from before the trace.
        (0, r, 0x100, 512, 1),
        (0, f, 0x100, 512, 1),
        (0, a, 0x300, 2048, 2),
        (0, f, 0x200, 1024, 1),
        // The address of the first reused: a new block, not the old one.
        (0, a, 0x100, 4096, 2),
        (0, f, 0x300, 2048, 2),
        // A repeat of a free already seen changes nothing.
        (0, f, 0x300, 2048, 2),
        // An allocation over a block never freed ends it.
        (0, a, 0x100, 1536, 3),
    ];
    // The segments: the last block alive, one the trace never mentions, and a free piece.
    let segments = vec![segment(
        0,
        0x100,
        vec![
            active(0x100, 1536, 3),
            active(0x900, 8192, 0),
            Block {
                address: 0xb00,
                size: 512,
                requested_size: 0,
                state: BlockState::Inactive,
                stack: 0,
            },
        ],
    )];
    let snapshot = built(&ops, 4, segments);
    let timeline = check(&snapshot);
    let device = &timeline.devices[0];
    assert_eq!(device.lacks.frees_without_alloc, 2);
    assert_eq!(device.lacks.blocks_before_trace, 1);
    assert_eq!(device.lacks.segments_without_alloc, 1);
    assert_eq!(device.lacks.allocs_over_live, 1);
    assert_eq!(device.lacks.describe().len(), 4);
    // Alive at the start: the two freed first and the one only the segments know.
    assert_eq!(device.peak, 8192 + 2048 + 4096);
    assert_eq!(device.end_bytes, 8192 + 1536);
    let mut live = Vec::new();
    assert_eq!(device.live_at(0, &mut live), 8192 + 512 + 1024);
    // The block only the segments know is the lowest band, from step 0 to the end.
    let lowest = device.block(&snapshot, live[0]).unwrap();
    assert_eq!(
        (lowest.addr, lowest.alloc_step, lowest.free_step),
        (0x900, 0, NEVER)
    );
    assert_eq!(lowest.allocated_us, None);
}

#[test]
fn a_full_ring_buffer_is_named_as_the_likely_cause() {
    // 1,000 entries that begin with a free of a block the trace never allocated.
    let mut ops = vec![(0, Action::FreeCompleted, 0x10, 512, 1)];
    for i in 0..999u64 {
        let action = if i % 2 == 0 {
            Action::Alloc
        } else {
            Action::FreeCompleted
        };
        ops.push((0, action, 0x1000 + (i / 2) * 0x1000, 1024, 1));
    }
    let snapshot = built(&ops, 2, Vec::new());
    let timeline = check(&snapshot);
    let lacks = &timeline.devices[0].lacks;
    assert!(lacks.ring_wrapped, "{lacks:?}");
    assert!(lacks.describe()[0].contains("ring buffer"));
    // One entry fewer is no round number.
    let snapshot = built(&ops[..999], 2, Vec::new());
    assert!(!MemoryTimeline::new(&snapshot).devices[0].lacks.ring_wrapped);
}

#[test]
fn a_repeated_free_ends_nothing_more_and_starts_no_block() {
    let a = Action::Alloc;
    let ops = vec![
        (0, a, 0x100, 512, 1),
        (0, a, 0x200, 1024, 1),
        (0, Action::FreeCompleted, 0x100, 512, 1),
        (0, Action::FreeCompleted, 0x100, 512, 1),
    ];
    let snapshot = built(&ops, 2, Vec::new());
    let timeline = check(&snapshot);
    let device = &timeline.devices[0];
    assert!(device.lacks.is_whole(), "{:?}", device.lacks);
    assert_eq!(device.end_bytes, 1024);
}

#[test]
fn a_capacity_is_known_from_an_out_of_memory_entry() {
    let ops = vec![
        (0, Action::SegmentAlloc, 0x100, 1 << 20, 0),
        (0, Action::Alloc, 0x100, 512, 1),
    ];
    let snapshot = built(
        &ops,
        2,
        vec![segment(0, 0x100, vec![active(0x100, 512, 1)])],
    );
    let timeline = MemoryTimeline::new(&snapshot);
    assert_eq!(timeline.devices[0].capacity, None);
    assert!(timeline.devices[0].lacks.is_whole());
}

/// A random trace: allocations (sometimes at a freed block's address), frees requested and
/// completed, on one or two devices, a prefix dropped as a wrapped ring buffer drops it, and
/// the segments holding what is alive at the end with some blocks from before.
fn random_trace() -> impl Strategy<Value = Snapshot> {
    (
        proptest::collection::vec((0u8..10, 0u32..6, 1u64..64, any::<bool>()), 1..160),
        0usize..20,
        proptest::collection::vec((1u64..32, 0u32..6), 0..4),
    )
        .prop_map(|(script, dropped, resident)| {
            let mut ops = Vec::new();
            let mut live: Vec<Vec<(u64, u64, u32)>> = vec![Vec::new(), Vec::new()];
            let mut freed: Vec<u64> = Vec::new();
            let mut next = 0x1000u64;
            for (i, &(op, stack, size, flag)) in script.iter().enumerate() {
                let device = u32::from(flag && i % 3 == 0);
                let d = device as usize;
                if op < 5 || live[d].is_empty() {
                    let addr = if op == 0 && !freed.is_empty() {
                        freed.remove(0)
                    } else {
                        next += 0x1000;
                        next
                    };
                    let size = size * 512;
                    live[d].push((addr, size, stack));
                    ops.push((device, Action::Alloc, addr, size, stack));
                } else {
                    let at = op as usize % live[d].len();
                    let (addr, size, stack) = live[d].remove(at);
                    if flag {
                        ops.push((device, Action::FreeRequested, addr, size, stack));
                    }
                    ops.push((device, Action::FreeCompleted, addr, size, stack));
                    freed.push(addr);
                }
            }
            let dropped = dropped.min(ops.len());
            let ops = &ops[dropped..];
            let mut segments = Vec::new();
            for (device, blocks) in live.iter().enumerate() {
                let mut blocks: Vec<Block> = blocks
                    .iter()
                    .map(|&(addr, size, stack)| active(addr, size, stack))
                    .collect();
                if device == 0 {
                    for (i, &(size, stack)) in resident.iter().enumerate() {
                        blocks.push(active(0x9000_0000 + i as u64 * 0x1000, size * 512, stack));
                    }
                }
                if !blocks.is_empty() {
                    segments.push(segment(device as u32, blocks[0].address, blocks));
                }
            }
            built(ops, 6, segments)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn random_traces_stack_as_the_replay(snapshot in random_trace()) {
        let timeline = check(&snapshot);
        // Sampled coarsely, the top is still what is alive at each sample.
        for device in &timeline.devices {
            let end = device.end();
            let picture = device.picture(0, end, 7, 0, &[]);
            let mut live = Vec::new();
            for (i, &x) in picture.samples.iter().enumerate() {
                let total = device.live_at(x, &mut live);
                prop_assert_eq!(picture.levels_at(i).last().copied(), Some(total));
            }
        }
    }
}
