#![allow(clippy::unwrap_used)] // In tests a panic is how a failure is reported.

use super::*;
use crate::snapshot::TraceEntry;

/// An entry, and `metadata` (an interned string) as its `user_metadata`.
fn with(action: Action, addr: u64, metadata: Option<u32>) -> (TraceEntry, Option<u32>) {
    (TraceEntry::new(action, addr, 512, 1_000, 1, 0), metadata)
}

#[test]
fn a_block_s_metadata_and_annotations_are_its_own() {
    let mut s = Snapshot::default();
    for text in [
        "train.py",
        "step",
        r#"{"phase":"forward","micro_batch":2}"#,
        "packed",
    ] {
        s.strings.push(text.into());
    }
    s.frames.push(crate::snapshot::Frame {
        name: 1,
        filename: 0,
        line: 3,
    });
    s.add_stack(&[0]);
    s.devices = 1;
    for e in [
        with(Action::Alloc, 0x100, Some(2)),
        with(Action::Annotate, 0x100, Some(3)),
        with(Action::Alloc, 0x200, None),
        with(Action::FreeCompleted, 0x100, None),
        // A new block at the same address: the first one's annotation is not its own.
        with(Action::Alloc, 0x100, None),
        with(Action::Annotate, 0x100, Some(3)),
    ] {
        s.entries.push(e.0);
        if let Some(m) = e.1 {
            s.entries.set_user_metadata(s.entries.len() - 1, m);
        }
    }
    let layout = MemoryTimeline::new(&s);
    let device = &layout.devices[0];
    let bands: Vec<u32> = (0..device.band_count() as u32).collect();
    let first = bands[0];
    let second = bands[2];
    assert_eq!(device.block(&s, second).unwrap().alloc_step, 5);
    assert_eq!(device.annotations(&s, first), [(2, "packed")]);
    assert_eq!(device.annotations(&s, second), [(6, "packed")]);
    assert!(device.annotations(&s, bands[1]).is_empty());
    let metadata = device.metadata(&s, first).unwrap();
    assert_eq!(
        crate::snapshot::metadata_text(metadata),
        "micro_batch: 2, phase: forward"
    );
    assert_eq!(device.metadata(&s, second), None);
    assert_eq!(crate::snapshot::metadata_text("plain"), "plain");
    assert_eq!(device.compile_context(&s, first), None);
}

#[test]
fn a_block_s_compile_context_is_the_one_its_allocation_was_recorded_in() {
    let mut s = Snapshot::default();
    s.strings
        .push("torch/_dynamo/convert_frame.py [0/1]".into());
    s.devices = 1;
    s.entries.push(with(Action::Alloc, 0x100, None).0);
    s.entries.set_compile_context(0, 0);
    s.entries.push(with(Action::Alloc, 0x200, None).0);
    let layout = MemoryTimeline::new(&s);
    let device = &layout.devices[0];
    assert_eq!(
        device.compile_context(&s, 0),
        Some("torch/_dynamo/convert_frame.py [0/1]")
    );
    assert_eq!(device.compile_context(&s, 1), None);
}

/// A block's pool: its allocation's `pool_id`, else the pool of the segment at the snapshot that
/// holds it (older PyTorch writes `segment_pool_id` but no `pool_id`), else none.
#[test]
fn a_block_s_pool_is_its_allocation_s_or_its_segment_s() {
    let mut s = Snapshot {
        devices: 1,
        ..Snapshot::default()
    };
    s.entries.push(with(Action::Alloc, 0x100, None).0);
    s.entries.set_pool(0, crate::snapshot::PoolId(1, 0));
    s.entries.push(with(Action::Alloc, 0x10_0000, None).0);
    s.entries.push(with(Action::Alloc, 0x20_0000, None).0);
    s.segments.push(crate::snapshot::Segment {
        device: 0,
        address: 0x10_0000,
        total_size: 0x1000,
        allocated_size: 512,
        segment_type: "small".to_owned(),
        stream: 0,
        pool: Some(crate::snapshot::PoolId(0, 3)),
        blocks: Vec::new(),
    });
    let layout = MemoryTimeline::new(&s);
    let device = &layout.devices[0];
    assert_eq!(
        device.pool(&s, 0, 0x100),
        Some(crate::snapshot::PoolId(1, 0))
    );
    assert_eq!(
        device.pool(&s, 1, 0x10_0000),
        Some(crate::snapshot::PoolId(0, 3))
    );
    assert_eq!(device.pool(&s, 2, 0x20_0000), None);
    assert_eq!(
        crate::snapshot::PoolId(0, 3).describe(),
        "the job's pool (0, 3)"
    );
}

/// A site's peak is where its own blocks held the most, not the device's: the bytes `live_at`
/// counts for it, at every step.
#[test]
fn a_site_peaks_where_its_own_blocks_held_the_most() {
    let mut s = Snapshot::default();
    s.strings.extend(["a.py".into(), "b.py".into(), "f".into()]);
    for file in [0, 1] {
        s.frames.push(crate::snapshot::Frame {
            name: 2,
            filename: file,
            line: 1,
        });
    }
    let (a, b) = (s.add_stack(&[0]), s.add_stack(&[1]));
    s.devices = 1;
    let entry = |action, addr, size, stack| TraceEntry::new(action, addr, size, 1_000, stack, 0);
    for e in [
        entry(Action::Alloc, 0x100, 100, a),
        entry(Action::Alloc, 0x200, 100, a),
        entry(Action::Alloc, 0x300, 100, a),
        entry(Action::FreeCompleted, 0x100, 100, a),
        entry(Action::FreeCompleted, 0x200, 100, a),
        entry(Action::Alloc, 0x400, 500, b),
        entry(Action::FreeCompleted, 0x300, 100, a),
        entry(Action::FreeCompleted, 0x400, 500, b),
        entry(Action::Alloc, 0x500, 50, a),
    ] {
        s.entries.push(e);
    }
    let layout = MemoryTimeline::new(&s);
    let device = &layout.devices[0];
    let site = |stack| layout.site_of_stack(&s, stack).unwrap();
    let (site_a, site_b) = (site(a), site(b));
    let peak = |site| device.peak_where(&s, |p| p.site == site);
    assert_eq!(peak(site_a), Some((3, 300)));
    assert_eq!(peak(site_b), Some((6, 500)));
    assert_eq!(device.peak_where(&s, |_| false), None);
    // The same bytes as the blocks alive at each step.
    let mut live = Vec::new();
    for site in [site_a, site_b] {
        let most = (0..=device.steps())
            .map(|step| {
                device.live_at(step, &mut live);
                let bytes: u64 = live
                    .iter()
                    .filter_map(|&band| device.band_place(&s, band))
                    .filter(|p| p.site == site)
                    .map(|p| p.size)
                    .sum();
                (bytes, std::cmp::Reverse(step))
            })
            .max()
            .unwrap();
        assert_eq!(peak(site), Some((most.1.0, most.0)));
    }
}
