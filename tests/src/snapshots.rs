//! Snapshots built in memory for the benchmarks: a long trace the shape `cases.py big` writes
//! (allocations from 500 call sites of ~20 frames, each freed with `free_requested` and
//! `free_completed`, about 200 alive at a time), at any number of trace entries, without a
//! pickle of gigabytes to write and read first; short traces spelled out by the tests (`built`);
//! and the real snapshots of `../shared/fixtures`.

use collector::snapshot::{Action, Block, BlockState, Frame, Segment, Snapshot, TraceEntry};

/// A trace of about `entries` trace entries on device 0 (a third of them allocations), and the
/// segment holding what is alive at its end. Deterministic.
pub fn big_snapshot(entries: usize) -> Snapshot {
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        // xorshift64*
        rng ^= rng >> 12;
        rng ^= rng << 25;
        rng ^= rng >> 27;
        rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    };
    let mut s = Snapshot::default();
    for i in 0..40 {
        s.strings.push(format!("/work/pkg/module_{i}.py").into());
    }
    for i in 0..300u32 {
        s.strings.push(format!("fn_{i}").into());
        s.frames.push(Frame {
            name: 40 + i,
            filename: i % 40,
            line: 10 + u64::from(i),
        });
    }
    let sites: Vec<u32> = (0..500)
        .map(|_| {
            let frames: Vec<u32> = (0..18).map(|_| (next() % 300) as u32).collect();
            s.add_stack(&frames)
        })
        .collect();
    let t = 1_771_267_191_000_000i64;
    let mut live: Vec<(u64, u64, u32)> = Vec::new();
    let mut addr = 0x7f00_0000_0000u64;
    let mut i = 0i64;
    while s.entries.len() < entries {
        i += 1;
        if !live.is_empty() && (live.len() > 200 || next() % 100 < 45) {
            let at = (next() % live.len() as u64) as usize;
            let (a, size, stack) = live.swap_remove(at);
            for action in [Action::FreeRequested, Action::FreeCompleted] {
                s.entries
                    .push(TraceEntry::new(action, a, size, t + i, stack, 0));
            }
        } else {
            let stack = sites[(next() % sites.len() as u64) as usize];
            let size = 512 * (1 + next() % 4095);
            addr += size;
            live.push((addr, size, stack));
            s.entries
                .push(TraceEntry::new(Action::Alloc, addr, size, t + i, stack, 0));
        }
    }
    live.sort_unstable();
    let blocks: Vec<Block> = live
        .iter()
        .map(|&(address, size, stack)| Block {
            address,
            size,
            requested_size: size,
            state: BlockState::ActiveAllocated,
            stack,
        })
        .collect();
    let total = blocks.iter().map(|b| b.size).sum();
    s.segments.push(Segment {
        device: 0,
        address: blocks.first().map_or(0, |b| b.address),
        total_size: total,
        allocated_size: total,
        segment_type: "large".to_owned(),
        stream: 0,
        pool: None,
        blocks,
    });
    s.devices = 1;
    s
}

/// A real snapshot from `../shared/fixtures/real-snapshots/` (made by PyTorch on real GPUs in
/// other projects), read. Panics when it cannot be: the tests need it.
#[allow(clippy::unwrap_used, clippy::missing_panics_doc)]
pub fn real(name: &str) -> Snapshot {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/fixtures/real-snapshots")
        .join(name);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    collector::snapshot::read_snapshot(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A snapshot of one device whose trace is `ops` (action, address, bytes), one microsecond apart
/// from 1,000, every entry from one frame (`step` in `train.py`, line 7), and `segments`.
pub fn built(ops: &[(Action, u64, u64)], segments: Vec<Segment>) -> Snapshot {
    let mut s = Snapshot::default();
    s.strings.push("train.py".into());
    s.strings.push("step".into());
    s.frames.push(Frame {
        name: 1,
        filename: 0,
        line: 7,
    });
    s.add_stack(&[0]);
    for (k, &(action, addr, size)) in ops.iter().enumerate() {
        s.entries
            .push(TraceEntry::new(action, addr, size, 1_000 + k as i64, 1, 0));
    }
    s.devices = 1;
    s.segments = segments;
    s
}
