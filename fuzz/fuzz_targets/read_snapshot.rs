//! Any bytes given to the snapshot importer: a snapshot or an error, never a panic, the same
//! with the trace entry's fast path as without it, and everything derived from a snapshot
//! (curves, live blocks, suspects, segments, the verdict) works on it.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    // The fuzzer rarely finds the 0x80 protocol header by itself: try the bytes as they are and
    // behind a protocol-4 header.
    let mut with_header = vec![0x80, 0x04];
    with_header.extend_from_slice(bytes);
    for input in [bytes, &with_header[..]] {
        let read = collector::snapshot::read_snapshot(input);
        match (&read, &collector::snapshot::read_snapshot_general(input)) {
            (Ok(fast), Ok(general)) => {
                assert!(fast.entries == general.entries, "the entries differ");
                assert!(fast.segments == general.segments, "the segments differ");
                assert!(fast.strings == general.strings, "the strings differ");
                assert!(fast.frames == general.frames, "the frames differ");
                assert_eq!(fast.stack_count(), general.stack_count());
                for stack in 0..fast.stack_count() as u32 {
                    assert!(
                        fast.stack(stack).eq(general.stack(stack)),
                        "stack {stack} differs"
                    );
                }
            }
            (Err(fast), Err(general)) => assert_eq!(fast, general),
            _ => panic!("the fast path and the general one disagree on whether it reads"),
        }
        if let Ok(snapshot) = read {
            assert!(snapshot.entries.len() <= input.len());
            let recording = snapshot.to_recording();
            assert!(recording.allocator.len() <= snapshot.entries.len());
            let live = snapshot.live_blocks_at(i64::MAX, None);
            for block in &live {
                let _ = snapshot.user_frames(block.stack);
            }
            let _ = snapshot.leak_suspects();
            let _ = snapshot.segment_summary();
            let judged = collector::snapshot::Judged::new(snapshot);
            assert!(!judged.verdict.headline.is_empty());
        }
    }
});
