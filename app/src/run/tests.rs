//! The tests of `run`.

use super::*;

#[test]
fn a_file_too_big_for_a_tab_is_named_with_its_size_and_where_to_open_it() {
    assert_eq!(
        too_big_for_a_tab("a.pickle", WEB_MAX_SNAPSHOT, TabFile::Snapshot),
        None
    );
    let why = too_big_for_a_tab("big.pickle", 3 << 30, TabFile::Snapshot).unwrap_or_default();
    assert!(
        why.starts_with("big.pickle: this 3.00 GiB snapshot"),
        "{why}"
    );
    assert!(
        why.contains("up to 2.50 GiB") && why.contains("desktop viewer"),
        "{why}"
    );
    // Dropped, a snapshot arrives whole: the tab would hold its bytes too.
    assert_eq!(
        too_big_for_a_tab("a.pickle", 2 << 30, TabFile::Snapshot),
        None
    );
    let why = too_big_for_a_tab("a.pickle", 2 << 30, TabFile::SnapshotHeld).unwrap_or_default();
    assert!(why.contains("when dropped (open it with Open…"), "{why}");
    assert_eq!(
        too_big_for_a_tab("r.msgpack", 100 << 20, TabFile::Recording),
        None
    );
    let why = too_big_for_a_tab("r.msgpack", 300 << 20, TabFile::Recording).unwrap_or_default();
    assert!(
        why.contains("recording") && why.contains("up to 256 MiB"),
        "{why}"
    );
    // A profiler trace: its bytes and half as much again of its events; 1 GB opens.
    assert_eq!(
        too_big_for_a_tab("t.pt.trace.json", 1 << 30, TabFile::Trace),
        None
    );
    let why = too_big_for_a_tab("t.pt.trace.json", 2 << 30, TabFile::Trace).unwrap_or_default();
    assert!(
        why.contains("2.00 GiB profiler file") && why.contains("up to 1.50 GiB"),
        "{why}"
    );
    // Before its first bytes tell what it is: too big for any kind.
    assert_eq!(too_big_for_a_tab("x", 300 << 20, TabFile::Any), None);
    let why = too_big_for_a_tab("x.pickle", 3 << 30, TabFile::Any).unwrap_or_default();
    assert!(
        why.starts_with(
            "x.pickle: this 3.00 GiB file is more than a browser tab can open (up to 2.50 GiB"
        ),
        "{why}"
    );
}

/// A file arriving in parts opens as its whole bytes do: a snapshot read as it arrives, a
/// recording gathered; a bad one gets the error of its bytes, named.
#[test]
fn a_snapshot_too_big_to_show_in_a_tab_is_told_from_its_entries() {
    // The 2.07 GB benchmark snapshot (19.5 M entries, 13 M readings) opens in a tab.
    assert!(tab_memory_for_snapshot(19_500_000, 13_000_000) < TAB_MEMORY);
    assert!(tab_memory_for_snapshot(34_000_000, 22_000_000) > TAB_MEMORY);
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../collector/tests/data");
    let bytes = std::fs::read(root.join("snapshots/mini_snapshot.pickle")).unwrap_or_default();
    let snapshot = collector::snapshot::read_snapshot(&bytes).unwrap_or_default();
    assert!(!snapshot.entries.is_empty());
    assert_eq!(too_many_for_a_tab("mini.pickle", &snapshot), None);
    // As many entries as would not fit: refused, with the numbers and where to open it.
    let why = too_many_entries_for_a_tab("big.pickle", 34_000_000, 22_000_000).unwrap_or_default();
    assert!(
        why.starts_with(
            "big.pickle: this snapshot holds 34.0 million trace entries (22.0 million of them"
        ),
        "{why}"
    );
    assert!(
        why.contains("more than a browser tab has") && why.contains("desktop viewer"),
        "{why}"
    );
}

#[test]
fn a_file_arriving_in_parts_opens_as_its_bytes_do() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../collector/tests/data");
    for (file, part) in [
        ("snapshots/real/bcrafton_cs336_training_step.pickle", 1000),
        ("snapshots/mini_snapshot.pickle", 7),
        ("corpus/eval_keeps_predictions.msgpack", 333),
    ] {
        let bytes = std::fs::read(root.join(file)).unwrap_or_default();
        let whole = Run::from_bytes(file, &bytes).unwrap_or_else(|e| panic!("{e}"));
        let mut arriving = Arriving::new(file);
        // Parts given whole and parts written in place (a browser's), taking turns.
        for (i, p) in bytes.chunks(part).enumerate() {
            let pushed = if i % 2 == 0 {
                arriving.push(p)
            } else {
                arriving.push_from(p.len(), |room| room.write_copy_of_slice(p))
            };
            pushed.unwrap_or_else(|e| panic!("{e}"));
        }
        let run = arriving.finish().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(run.recording.allocator, whole.recording.allocator, "{file}");
        assert_eq!(run.recording.phases, whole.recording.phases, "{file}");
        assert_eq!(
            run.recording.sample_count(),
            whole.recording.sample_count(),
            "{file}"
        );
        assert_eq!(run.snapshot.is_some(), file.ends_with(".pickle"), "{file}");
        assert_eq!(
            collector::analysis::headline(&run.analysis),
            collector::analysis::headline(&whole.analysis),
            "{file}"
        );
    }
    let cut = std::fs::read(root.join("snapshots/mini_snapshot.pickle")).unwrap_or_default();
    let cut = &cut[..cut.len() / 2];
    let mut arriving = Arriving::new("cut.pickle");
    let pushed = cut.chunks(100).try_for_each(|p| arriving.push(p));
    let err = pushed
        .err()
        .or_else(|| arriving.finish().err())
        .unwrap_or_default();
    let whole = Run::from_bytes("cut.pickle", cut).err().unwrap_or_default();
    assert!(
        err.starts_with("cut.pickle: ") && err.contains("truncated"),
        "{err}"
    );
    assert_eq!(err, whole);
    let empty = Arriving::new("empty.pickle")
        .finish()
        .err()
        .unwrap_or_default();
    assert!(empty.starts_with("empty.pickle: "), "{empty}");
}

/// What arrives is told from its first bytes, whatever its name and however small its
/// parts: bytes of no known kind are refused as soon as they tell, with the error their
/// whole bytes get; a file whose length is known is refused as too big for its kind once
/// its first bytes tell the kind.
#[test]
fn what_arrives_is_told_from_its_first_bytes() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../collector/tests/data");
    // A snapshot named like a recording, a byte at a time.
    let bytes = std::fs::read(root.join("snapshots/mini_snapshot.pickle")).unwrap_or_default();
    let mut arriving = Arriving::new("snap.msgpack");
    for b in bytes.chunks(1) {
        arriving.push(b).unwrap_or_else(|e| panic!("{e}"));
    }
    let run = arriving.finish().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(run.input, Kind::Snapshot);
    assert!(run.snapshot.is_some());
    // A recording of fewer bytes than tell the kind: its reader's error.
    let mut arriving = Arriving::new("cut.msgpack");
    arriving.push(b"TIDE").unwrap_or_else(|e| panic!("{e}"));
    let err = arriving.finish().err().unwrap_or_default();
    assert_eq!(Some(err), Run::from_bytes("cut.msgpack", b"TIDE").err());
    // A PNG: refused once the bytes that tell a kind have arrived (KIND_BYTES: 16, the
    // sixth part of three), not before.
    let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";
    assert_eq!(png.len(), collector::open::KIND_BYTES);
    let mut arriving = Arriving::new("plot.pickle");
    let pushed: Vec<bool> = png.chunks(3).map(|p| arriving.push(p).is_ok()).collect();
    assert_eq!(pushed, [true, true, true, true, true, false]);
    let mut arriving = Arriving::new("plot.pickle");
    let err = png.chunks(3).find_map(|p| arriving.push(p).err());
    let whole = Run::from_bytes("plot.pickle", png).err();
    assert_eq!(err, whole);
    assert!(
        whole.as_deref().is_some_and(|w| w.starts_with(
            "plot.pickle: not a tidemark recording, a PyTorch memory snapshot or a profiler trace: at byte 0 it holds a PNG image"
        )),
        "{whole:?}"
    );
    // 300 MiB announced: a recording is refused once its first bytes arrive, a snapshot not.
    let mut arriving = Arriving::expecting("big.msgpack", 300 << 20);
    assert_eq!(arriving.push(b"TIDEMARK"), Ok(()));
    let why = arriving.push(&[0; 8]).err().unwrap_or_default();
    assert!(
        why.starts_with("big.msgpack: this 300 MiB recording"),
        "{why}"
    );
    let mut arriving = Arriving::expecting("big.msgpack", 300 << 20);
    assert_eq!(
        arriving.push_from(8, |room| room.write_copy_of_slice(b"TIDEMARK")),
        Ok(())
    );
    let why = arriving
        .push_from(8, |room| room.write_copy_of_slice(&[0; 8]))
        .err()
        .unwrap_or_default();
    assert!(
        why.starts_with("big.msgpack: this 300 MiB recording"),
        "{why}"
    );
    let mut arriving = Arriving::expecting("big.pickle", 300 << 20);
    assert_eq!(arriving.push(&bytes[..100]), Ok(()));
}

#[test]
fn the_pages_early_fetch_asks_with_the_apps_window_and_limit() {
    // web/index.html starts the fetch of `?url=` before the app runs, with these two numbers
    // written out: a file the app refuses from its size must not be downloaded by it either.
    let page = include_str!("../../../web/index.html");
    let ask = format!("window: {TAB_FETCH_WINDOW}, most: {TAB_FETCH_MOST}");
    assert!(
        page.contains(&ask),
        "web/index.html's early fetch must ask with {{ {ask} }}"
    );
    assert_eq!(too_big_for_a_tab("f", TAB_FETCH_MOST, TabFile::Any), None);
    assert!(too_big_for_a_tab("f", TAB_FETCH_MOST + 1, TabFile::Any).is_some());
}
