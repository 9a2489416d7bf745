//! From a recording on disk to what the viewer shows.

#![allow(clippy::unwrap_used)] // In tests a panic is how a failure is reported.

use collector::analysis::FindingKind;
use collector::recording::{Phase, read_file};
use tidemark_app::{EXAMPLE_RECORDING, Run, TidemarkApp};

fn corpus(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../collector/tests/data/corpus")
        .join(name)
}

#[test]
fn the_viewer_opens_the_embedded_example_and_names_the_leak() {
    let app = TidemarkApp::default();
    let run = app.runs()[0].run.as_ref().unwrap();
    assert!(run.recording.sample_count() > 0);
    assert!(
        run.recording.warnings.is_empty(),
        "{:?}",
        run.recording.warnings
    );
    let leak = run.analysis.finding(FindingKind::Leak).unwrap();
    assert_eq!(leak.phase, Some(Phase::Eval));
}

#[test]
fn the_viewer_sees_what_the_collector_library_reads() {
    let path = corpus("eval_keeps_predictions.msgpack");
    let from_disk = read_file(&path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes, EXAMPLE_RECORDING);
    let run = Run::from_bytes("example", &bytes).unwrap();
    assert_eq!(run.recording, from_disk);
}

#[test]
fn the_viewer_reports_a_bad_file_by_name() {
    let mut app = TidemarkApp::empty();
    app.open_bytes("holiday.png", b"\x89PNG\r\n\x1a\n");
    let message = app.runs()[0].run.as_ref().err().unwrap();
    assert!(message.starts_with("holiday.png: "), "{message}");
    assert!(message.contains("PNG image"), "{message}");
}
