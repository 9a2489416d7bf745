//! The blocks alive at a time (`LiveIndex`, what the Blocks tab and the verdict read) against a
//! plain replay of the trace, entry by entry, every address it ever named kept in a list: on
//! the real snapshots and on random traces that reuse a few addresses on two devices — a block
//! allocated over one still open, freed twice, freed without being allocated (before the trace
//! began), and segments' active blocks the trace names or never names.

#![allow(clippy::unwrap_used)] // In tests a panic is how a failure is reported.

use collector::snapshot::{
    Action, Block, BlockState, LiveBlock, LiveIndex, Segment, Snapshot, TraceEntry,
};
use proptest::prelude::*;
use tidemark_tests::snapshots::{built, real};

/// One block's life in the replay.
#[derive(Clone, Copy)]
struct Life {
    device: u32,
    addr: u64,
    size: u64,
    stack: u32,
    allocated_us: i64,
    freed_us: i64,
}

/// Every block's life, replayed entry by entry with each address's latest block in a list
/// (linear searches): an allocation opens a block, closing the one still open at its address;
/// a `free_completed` closes the address's latest block (the earliest free counts), or, at an
/// address the trace never named before, is a block allocated before the trace; a segment's
/// active block at an address the trace never names was alive throughout.
fn replay(snapshot: &Snapshot) -> Vec<Life> {
    let mut lives: Vec<Life> = Vec::new();
    // (device, address) → (its latest life, still open)
    let mut latest: Vec<((u32, u64), usize, bool)> = Vec::new();
    let find =
        |latest: &Vec<((u32, u64), usize, bool)>, key| latest.iter().position(|l| l.0 == key);
    for e in snapshot.entries.iter() {
        let key = (e.device(), e.addr);
        let life = |allocated_us, freed_us| Life {
            device: e.device(),
            addr: e.addr,
            size: e.size,
            stack: e.stack,
            allocated_us,
            freed_us,
        };
        match (e.action(), find(&latest, key)) {
            (Action::Alloc, found) => {
                if let Some(at) = found {
                    if latest[at].2 {
                        let older = latest[at].1;
                        lives[older].freed_us = lives[older].freed_us.min(e.time_us);
                    }
                    latest.remove(at);
                }
                latest.push((key, lives.len(), true));
                lives.push(life(e.time_us, i64::MAX));
            }
            (Action::FreeCompleted, Some(at)) => {
                let l = latest[at].1;
                lives[l].freed_us = lives[l].freed_us.min(e.time_us);
                latest[at].2 = false;
            }
            (Action::FreeCompleted, None) => {
                latest.push((key, lives.len(), false));
                lives.push(life(i64::MIN, e.time_us));
            }
            _ => {}
        }
    }
    for s in &snapshot.segments {
        for b in &s.blocks {
            let key = (s.device, b.address);
            if b.state != BlockState::Inactive && find(&latest, key).is_none() {
                latest.push((key, lives.len(), true));
                lives.push(Life {
                    device: s.device,
                    addr: b.address,
                    // The bytes it asked for, as the trace counts a block (else its size).
                    size: if b.requested_size > 0 {
                        b.requested_size
                    } else {
                        b.size
                    },
                    stack: b.stack,
                    allocated_us: i64::MIN,
                    freed_us: i64::MAX,
                });
            }
        }
    }
    lives
}

/// The replay's blocks alive at `t` on `device` (or all), as `LiveIndex::at` orders them.
fn alive(lives: &[Life], t: i64, device: Option<u32>) -> Vec<LiveBlock> {
    let mut blocks: Vec<LiveBlock> = lives
        .iter()
        .filter(|l| device.is_none_or(|d| d == l.device))
        .filter(|l| l.allocated_us <= t && (l.freed_us == i64::MAX || t < l.freed_us))
        .map(|l| LiveBlock {
            device: l.device,
            addr: l.addr,
            size: l.size,
            allocated_us: (l.allocated_us != i64::MIN).then_some(l.allocated_us),
            stack: l.stack,
        })
        .collect();
    largest_first(&mut blocks);
    blocks
}

/// Blocks in `LiveIndex::at`'s order (largest first, then by address and device), blocks of one
/// size at one address (allocated again) by when.
fn largest_first(blocks: &mut [LiveBlock]) {
    blocks.sort_by(|a, b| {
        (b.size.cmp(&a.size))
            .then(a.addr.cmp(&b.addr))
            .then(a.device.cmp(&b.device))
            .then(a.allocated_us.cmp(&b.allocated_us))
    });
}

/// The index answers as the replay at the start, at every entry's time and just after it, and
/// at the end, on every device and on all.
fn check(snapshot: &Snapshot) {
    let index = LiveIndex::new(snapshot);
    let lives = replay(snapshot);
    let mut times: Vec<i64> = vec![i64::MIN, i64::MAX];
    for e in snapshot.entries.iter() {
        times.extend([e.time_us, e.time_us + 1]);
    }
    times.sort_unstable();
    times.dedup();
    let devices: Vec<Option<u32>> = std::iter::once(None)
        .chain((0..snapshot.devices.max(1)).map(Some))
        .collect();
    for &t in &times {
        for &device in &devices {
            let mut got = index.at(t, device);
            largest_first(&mut got);
            assert_eq!(got, alive(&lives, t, device), "alive at {t} on {device:?}");
        }
    }
}

#[test]
fn the_real_snapshots_alive_blocks_are_the_replays() {
    for name in [
        "bcrafton_cs336_training_step.pickle",
        "cs336_large_fw_bw_bf16.pickle",
        "cs336_large_fw_bw_fp32.pickle",
    ] {
        let snapshot = real(name);
        assert!(snapshot.entries.len() > 100, "{name} has a trace");
        // Every time would be slow on a long trace: the ends and a sample of entries' times.
        let index = LiveIndex::new(&snapshot);
        let lives = replay(&snapshot);
        let step = (snapshot.entries.len() / 40).max(1);
        let times = snapshot
            .entries
            .iter()
            .step_by(step)
            .map(|e| e.time_us)
            .chain([i64::MIN, i64::MAX]);
        for t in times {
            let mut got = index.at(t, None);
            largest_first(&mut got);
            assert_eq!(got, alive(&lives, t, None), "{name}: alive at {t}");
        }
    }
}

#[test]
fn a_second_free_and_a_free_from_before_the_trace_are_told_apart() {
    use Action::{Alloc, FreeCompleted};
    let ops = [
        (FreeCompleted, 0x100, 16), // allocated before the trace: alive until here
        (Alloc, 0x200, 32),
        (FreeCompleted, 0x200, 32),
        (FreeCompleted, 0x200, 32), // freed again: no block from before the trace
        (FreeCompleted, 0x100, 16), // the address's block from before the trace, freed again
        (Alloc, 0x300, 8),
        (Alloc, 0x300, 8), // over the one still open: it ends here
    ];
    let segments = vec![segment(
        0,
        &[(0x200, 32), (0x300, 8), (0x400, 64)], // 0x400: never in the trace
    )];
    let snapshot = built(&ops, segments);
    check(&snapshot);
    let index = LiveIndex::new(&snapshot);
    let before = index.at(999, None);
    assert_eq!(
        before.iter().map(|b| b.addr).collect::<Vec<_>>(),
        [0x400, 0x100],
        "before the trace: the block freed first and the segment's block the trace never names"
    );
    let end = index.at(i64::MAX, None);
    assert_eq!(
        end.iter()
            .map(|b| (b.addr, b.allocated_us))
            .collect::<Vec<_>>(),
        [(0x400, None), (0x300, Some(1_006))],
        "at the end: the second 0x300 and the untraced block; 0x200, freed twice, is gone"
    );
}

fn segment(device: u32, blocks: &[(u64, u64)]) -> Segment {
    Segment {
        device,
        address: blocks.first().map_or(0, |b| b.0),
        total_size: blocks.iter().map(|b| b.1).sum(),
        allocated_size: blocks.iter().map(|b| b.1).sum(),
        segment_type: "small".to_owned(),
        stream: 0,
        pool: None,
        blocks: blocks
            .iter()
            .map(|&(address, size)| Block {
                address,
                size,
                requested_size: size,
                state: BlockState::ActiveAllocated,
                stack: 0,
            })
            .collect(),
    }
}

/// Random traces over six addresses on two devices, entries in time order per device (the
/// devices' traces one after the other, as a snapshot holds them), some times repeated, and
/// segments whose active and inactive blocks sit at those addresses and others.
fn random_snapshot() -> impl Strategy<Value = Snapshot> {
    let op = (0u8..5, 0u64..6, 1u64..4, 0i64..3);
    (
        proptest::collection::vec(op.clone(), 0..60),
        proptest::collection::vec(op, 0..60),
        proptest::collection::vec((0u32..2, 0u64..9, any::<bool>()), 0..8),
    )
        .prop_map(|(first, second, blocks)| {
            let mut s = built(&[], Vec::new());
            for (device, ops) in [(0u32, first), (1, second)] {
                let mut t = 1_000;
                for (action, slot, size, dt) in ops {
                    t += dt; // 0: the same time as the entry before
                    let action = match action {
                        0 | 1 => Action::Alloc,
                        2 | 3 => Action::FreeCompleted,
                        _ => Action::FreeRequested,
                    };
                    let entry =
                        TraceEntry::new(action, 0x1000 * (slot + 1), 512 * size, t, 1, device);
                    s.entries.push(entry);
                }
            }
            s.devices = 2;
            for (device, slot, inactive) in blocks {
                let mut seg = segment(device, &[(0x1000 * (slot + 1), 4096)]);
                if inactive {
                    seg.blocks[0].state = BlockState::Inactive;
                }
                s.segments.push(seg);
            }
            s
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn random_traces_alive_blocks_are_the_replays(snapshot in random_snapshot()) {
        check(&snapshot);
    }
}
