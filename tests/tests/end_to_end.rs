//! From a recording on disk to what the viewer shows.

use collector::recording::read_file;
use tidemark_app::{EXAMPLE_RECORDING, TidemarkApp};

#[test]
fn the_viewer_opens_the_embedded_example() {
    let app = TidemarkApp::default();
    let run = app.run().unwrap();
    assert!(run.sample_count() > 0);
    assert!(run.warnings.is_empty(), "{:?}", run.warnings);
}

#[test]
fn the_viewer_sees_what_the_collector_library_reads() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../collector/tests/data/golden_v1.msgpack");
    let from_disk = read_file(&path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes, EXAMPLE_RECORDING);
    let app = TidemarkApp::from_bytes("golden", &bytes);
    assert_eq!(app.run().unwrap(), &from_disk);
}

#[test]
fn the_viewer_reports_a_bad_file_by_name() {
    let app = TidemarkApp::from_bytes("holiday.png", b"\x89PNG\r\n\x1a\n");
    let message = app.run().unwrap_err();
    assert!(message.contains("holiday.png"), "{message}");
    assert!(message.contains("PNG image"), "{message}");
}
