//! One way in: every kind of input (a recording, a snapshot, a folder of nodes' recordings, a
//! folder of per-rank snapshots, and what cannot be opened) is what the library says it is when
//! `collector report`, `check` and `import` open it, with the same verdict's headline or the
//! same error. (The viewer's tests check its intake against the same library answers.)

use std::process::Command;

use collector::open::Kind;
use tidemark_tests::inputs::{judged, node_recording, samples};

use crate::stderr;

fn collector(args: &[&str], path: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_collector"))
        .args(args)
        .arg(path)
        .output()
        .unwrap()
}

#[test]
fn report_opens_every_input_as_the_library_does() {
    let dir = tempfile::tempdir().unwrap();
    for sample in samples(dir.path()).unwrap() {
        let what = sample.what;
        let output = collector(&["report", "--json"], &sample.path);
        match (sample.kind, judged(&sample.path)) {
            (Some(kind), Ok((library_kind, headline))) => {
                assert_eq!(library_kind, kind, "{what}");
                assert!(output.status.success(), "{what}: {}", stderr(&output));
                let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
                assert_eq!(json["input"], serde_json::to_value(kind).unwrap(), "{what}");
                assert_eq!(json["headline"], headline.as_str(), "{what}");
                assert!(!headline.is_empty(), "{what}");
            }
            (None, Err(message)) => {
                assert!(message.starts_with(sample.error), "{what}: {message}");
                assert_eq!(output.status.code(), Some(2), "{what}");
                // The library's message, the path last.
                assert_eq!(
                    stderr(&output).trim_end(),
                    format!("collector: {message}: {}", sample.path.display()),
                    "{what}"
                );
            }
            (expected, got) => panic!("{what}: expected {expected:?}, the library gave {got:?}"),
        }
    }
}

/// `collector report DIR` on a folder of nodes' recordings reports them as one run, as
/// `collector report a.msgpack b.msgpack` and `tidemark DIR` do; `check` judges that run.
#[test]
fn a_folder_of_nodes_recordings_reports_as_one_run() {
    let dir = tempfile::tempdir().unwrap();
    let a = node_recording(dir.path(), 0, "train").unwrap();
    let b = node_recording(dir.path(), 1, "train").unwrap();
    let folder = collector(&["report"], dir.path());
    assert!(folder.status.success(), "{}", stderr(&folder));
    let text = String::from_utf8_lossy(&folder.stdout);
    assert!(
        text.starts_with(&format!("{} — train (host node-0", dir.path().display())),
        "{text}"
    );
    assert!(
        text.contains("one run from 2 recordings (hosts node-0, node-1)"),
        "{text}"
    );
    assert!(
        text.contains("RANKS (each judged on its own memory)"),
        "{text}"
    );
    assert!(text.contains("✗ Rank 1: "), "{text}");
    let files = Command::new(env!("CARGO_BIN_EXE_collector"))
        .arg("report")
        .args([&a, &b])
        .output()
        .unwrap();
    let by_files = String::from_utf8_lossy(&files.stdout);
    // The same report but for the name on its first line.
    let body = |t: &str| t.split_once('\n').map(|(_, rest)| rest.to_owned());
    assert_eq!(body(&text), body(&by_files));

    // A snapshot among the nodes' recordings is named and left out.
    std::fs::copy(
        tidemark_tests::inputs::data("snapshots/mini_snapshot.pickle"),
        dir.path().join("stray.msgpack"),
    )
    .unwrap();
    let json = collector(&["report", "--json"], dir.path());
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(json["input"], "node_recordings");
    let warnings = json["warnings"].as_array().unwrap();
    assert!(
        warnings.iter().any(|w| w.as_str().unwrap().starts_with(
            "left out: a PyTorch memory snapshot where a tidemark recording was expected: "
        ) && w.as_str().unwrap().ends_with("stray.msgpack")),
        "{warnings:?}"
    );

    let check = collector(&["check"], dir.path());
    assert_eq!(check.status.code(), Some(1), "{}", stderr(&check));
    let out = String::from_utf8_lossy(&check.stdout);
    assert!(out.contains("FAILED: Rank 1: "), "{out}");
}

/// `import` takes a snapshot; anything else is refused, before it is read, with the one message
/// that says what it is.
#[test]
fn import_refuses_what_is_not_a_snapshot_in_one_message() {
    let dir = tempfile::tempdir().unwrap();
    let samples = samples(dir.path()).unwrap();
    let out = dir.path().join("out.msgpack");
    for sample in &samples {
        let output = Command::new(env!("CARGO_BIN_EXE_collector"))
            .arg("import")
            .arg(&sample.path)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        let err = stderr(&output);
        let name = sample.path.display().to_string();
        match sample.kind {
            Some(Kind::Snapshot) => assert!(output.status.success(), "{}: {err}", sample.what),
            Some(kind) => {
                assert_eq!(output.status.code(), Some(2), "{}", sample.what);
                assert_eq!(
                    err.trim_end(),
                    format!(
                        "collector: {} where a PyTorch memory snapshot was expected: {name}",
                        kind.name()
                    )
                );
            }
            None => {
                assert_eq!(output.status.code(), Some(2), "{}", sample.what);
                assert!(
                    err.contains(sample.error) && err.trim_end().ends_with(&name),
                    "{}: {err}",
                    sample.what
                );
            }
        }
    }
}

/// Two recordings of one command from two hosts that never recorded at the same time (the second
/// began two minutes after the first ended) are two runs, not two nodes of one: the report judges
/// the first alone and says why the second was left out, pointing to `collector diff`. One that
/// began within a minute of the first's end (a node's collector started late) is still a node.
#[test]
fn recordings_that_never_overlap_are_two_runs_not_two_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let a = node_recording(dir.path(), 0, "train").unwrap();
    let b = node_recording(dir.path(), 1, "train").unwrap();
    let first = collector::recording::read_file(&a).unwrap();
    let a_ends = first.header.start_unix_ns + first.duration_ns();
    let started = |seconds_after_a_ended: u64| {
        let mut later = collector::recording::read_file(&b).unwrap();
        later.header.start_unix_ns = a_ends + seconds_after_a_ended * 1_000_000_000;
        collector::recording::write_file(&b, &later).unwrap();
    };
    let report = || {
        let output = Command::new(env!("CARGO_BIN_EXE_collector"))
            .args(["report", "--json"])
            .args([&a, &b])
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", stderr(&output));
        serde_json::from_slice::<serde_json::Value>(&output.stdout).unwrap()
    };
    started(120);
    let json = report();
    let warnings = json["warnings"].as_array().unwrap();
    assert!(
        warnings.iter().any(|w| {
            let w = w.as_str().unwrap();
            w.starts_with(&format!(
                "left out {}: another run: it began 120 s after the first recording ended",
                b.display()
            )) && w.contains("collector diff A B")
        }),
        "{warnings:?}"
    );
    // The first alone: its rank only.
    assert_eq!(json["headline"], collector_headline(&a), "{json:#}");
    started(30);
    let json = report();
    assert!(
        json["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .all(|w| !w.as_str().unwrap().contains("another run")),
        "{json:#}"
    );
    assert_eq!(json["analysis"]["ranks"].as_array().unwrap().len(), 2);
}

/// The headline `collector report --json FILE` gives.
fn collector_headline(file: &std::path::Path) -> serde_json::Value {
    let output = collector(&["report", "--json"], file);
    serde_json::from_slice::<serde_json::Value>(&output.stdout).unwrap()["headline"].clone()
}
