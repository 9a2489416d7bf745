//! Any bytes given to the snapshot importer: a snapshot or an error, never a panic, and
//! everything derived from a snapshot (curves, live blocks, suspects, segments, the verdict)
//! works on it.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    // The fuzzer rarely finds the 0x80 protocol header by itself: try the bytes as they are and
    // behind a protocol-4 header.
    let mut with_header = vec![0x80, 0x04];
    with_header.extend_from_slice(bytes);
    for input in [bytes, &with_header[..]] {
        if let Ok(snapshot) = collector::snapshot::read_snapshot(input) {
            assert!(snapshot.entries.len() <= input.len());
            let recording = snapshot.to_recording();
            assert!(recording.allocator.len() <= snapshot.entries.len());
            let live = snapshot.live_blocks_at(i64::MAX, None);
            for block in &live {
                let _ = snapshot.user_frames(block.stack);
            }
            let _ = snapshot.leak_suspects();
            let _ = snapshot.segment_summary();
            let analysis = collector::analysis::analyze(&recording);
            let verdict = collector::snapshot::SnapshotVerdict::new(&snapshot, &analysis);
            assert!(!verdict.headline.is_empty());
        }
    }
});
