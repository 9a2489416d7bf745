//! `collector report` and `collector check` on real recordings.

use std::path::PathBuf;
use std::process::Command;

fn corpus(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/corpus")
        .join(name)
}

fn collector(args: &[&str], file: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_collector"))
        .args(&args[..1])
        .arg(file)
        .args(&args[1..])
        .output()
        .unwrap()
}

#[test]
fn report_puts_the_verdict_first_then_phases_then_evidence() {
    let output = collector(&["report"], &corpus("eval_keeps_predictions.msgpack"));
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    let verdict = text.find("VERDICT").unwrap();
    let phases = text.find("PHASES").unwrap();
    let evidence = text.find("EVIDENCE").unwrap();
    assert!(verdict < phases && phases < evidence, "{text}");
    assert!(text.contains("✗ Host memory leak in eval"), "{text}");
    assert!(text.contains("Mann–Kendall"), "{text}");
    assert!(text.contains("usual causes"), "{text}");
}

#[test]
fn report_json_is_stable_and_complete() {
    let output = collector(
        &["report", "--json"],
        &corpus("forward_keeps_losses.msgpack"),
    );
    assert!(output.status.success());
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["schema"], 1);
    assert_eq!(json["complete"], true);
    let analysis = &json["analysis"];
    assert_eq!(analysis["basis"], "host_rss");
    assert_eq!(analysis["by_step"], true);
    let leak = &analysis["findings"][0];
    assert_eq!(leak["kind"], "leak");
    assert_eq!(leak["phase"], "forward");
    let growth = leak["growth_per_step_bytes"].as_f64().unwrap();
    assert!(
        (growth - 4.0 * 1048576.0).abs() < 0.5 * 1048576.0,
        "{growth}"
    );
    assert_eq!(
        analysis["step_series"]["values"].as_array().unwrap().len(),
        60
    );
    let phases: Vec<&str> = analysis["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["phase"].as_str().unwrap())
        .collect();
    assert_eq!(phases, ["forward", "backward", "optimizer", "eval"]);
}

#[test]
fn check_is_a_ci_gate() {
    let leak = corpus("forward_keeps_losses.msgpack");
    let output = collector(&["check"], &leak);
    assert_eq!(output.status.code(), Some(1));
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("FAILED: Host memory leak in forward"),
        "{text}"
    );

    // A threshold above the leak's growth passes it.
    let output = collector(&["check", "--max-growth", "8MiB/step"], &leak);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
    let output = collector(&["check", "--max-growth", "1MiB/step"], &leak);
    assert_eq!(output.status.code(), Some(1));

    // Only the chosen findings fail.
    let output = collector(&["check", "--fail-on", "fragmentation"], &leak);
    assert_eq!(output.status.code(), Some(0));

    let output = collector(&["check"], &corpus("healthy.msgpack"));
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
}

#[test]
fn unreadable_files_exit_2_with_the_reason_and_the_name() {
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("plot.msgpack");
    std::fs::write(&png, b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR").unwrap();
    for command in ["check", "report"] {
        let output = collector(&[command], &png);
        assert_eq!(output.status.code(), Some(2), "{command}");
        let err = String::from_utf8_lossy(&output.stderr);
        assert!(err.contains("PNG image"), "{err}");
        assert!(err.trim_end().ends_with("plot.msgpack"), "{err}");
    }
}
