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

/// `collector report … | head`: the reader goes away; the collector neither panics nor fails,
/// and `check` keeps its verdict's exit status.
#[test]
fn a_closed_standard_output_is_not_an_error() {
    use std::process::{Command, Stdio};
    for (args, status) in [
        (&["report"][..], 0),
        (&["report", "--json"][..], 0),
        (&["check"][..], 1),
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_collector"))
            .args(args)
            .arg(corpus("forward_keeps_losses.msgpack"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Closed before anything is written: every write meets a broken pipe.
        drop(child.stdout.take());
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(status), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
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

fn snapshot_fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/snapshots/mini_snapshot.pickle")
}

#[test]
fn report_reads_a_pytorch_snapshot() {
    let output = collector(&["report"], &snapshot_fixture());
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.contains("VERDICT"), "{text}");
    assert!(text.contains("basis: allocated GPU memory"), "{text}");
    assert!(
        text.contains(
            "50 trace entries (alloc 28, free_completed 4, free_requested 4, segment_alloc 14)"
        ),
        "{text}"
    );
    assert!(
        text.contains("cuda:0: 14 segments, 402 MiB reserved"),
        "{text}"
    );
    assert!(text.contains("LIVE BLOCKS AT THE END"), "{text}");
    assert!(text.contains("get_input (misc/attention.py:206)"), "{text}");
    assert!(text.contains("LEAK SUSPECTS"), "{text}");

    let output = collector(&["report", "--json"], &snapshot_fixture());
    assert!(output.status.success());
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["snapshot"]["trace_entries"], 50);
    assert_eq!(json["snapshot"]["entries_by_action"]["segment_alloc"], 14);
    assert_eq!(json["snapshot"]["segments"][0]["free_pieces"], 14);
}

fn real_snapshot(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/snapshots/real")
        .join(name)
}

/// The SNAPSHOT section says a device is fragmented exactly where the verdict does (one rule), on
/// every real snapshot.
#[test]
fn the_snapshot_section_calls_fragmented_what_the_verdict_does() {
    let real =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/real-snapshots");
    let mut seen = 0;
    for entry in std::fs::read_dir(&real).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "pickle") {
            continue;
        }
        let text = String::from_utf8(collector(&["report"], &path).stdout).unwrap();
        let lines = text
            .lines()
            .filter(|l| l.starts_with("    fragmented: "))
            .count();
        let output = collector(&["report", "--json"], &path);
        let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        let judged = json["snapshot"]["verdict"]["fragmentation"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["fragmented"] == true)
            .count();
        assert_eq!(lines, judged, "{}:\n{text}", path.display());
        seen += judged;
    }
    assert!(
        seen >= 1,
        "no real snapshot is fragmented: the test proves nothing"
    );
}

/// The verdict of a real snapshot leads with what a snapshot answers, not with "record longer".
#[test]
fn a_snapshot_verdict_leads_with_what_is_held_and_by_whom() {
    let rollout = real_snapshot("verl_rollout_state.pickle");
    let output = collector(&["report"], &rollout);
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    let verdict = text
        .split("VERDICT\n")
        .nth(1)
        .and_then(|v| v.lines().next())
        .unwrap();
    assert!(
        verdict.starts_with("  • At the snapshot: 23.8 GiB in use of 24.4 GiB reserved on cuda:0; the most by __init__ (vllm_rollout/vllm_rollout_spmd.py:114), in the job's pool (0, 2) (20.3 GiB in 24 blocks)"),
        "{verdict}"
    );
    assert!(!text.contains("Cannot tell"), "{text}");
    assert!(!text.contains("record a longer run"), "{text}");
    assert!(
        text.contains("no trace: the snapshot holds the segments only"),
        "{text}"
    );
    assert!(
        text.contains("fragmented on cuda:0: the largest free piece is 260 MiB of 562 MiB free"),
        "{text}"
    );
    // vLLM's KV cache sits in a pool of its own (`torch.cuda.MemPool`, for its sleep mode): its
    // free pieces are not the job's free memory.
    assert!(text.contains("82.5 MiB free in private pools"), "{text}");
    assert!(
        text.contains("in private pools: 20.8 GiB reserved in 68 segments — 20.8 GiB allocated, 82.5 MiB free that only the pool's own allocations"),
        "{text}"
    );

    let output = collector(&["report", "--json"], &rollout);
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["schema"], 1);
    let v = &json["snapshot"]["verdict"];
    assert_eq!(v["problem"], false);
    assert_eq!(v["taken_at_oom"], serde_json::Value::Null);
    // The site is verl's code that allocates vLLM's KV cache (24 blocks of 866 MiB) in one pool
    // of its own, and 315 blocks (475 MiB) in another: each its own group.
    assert_eq!(v["top_sites"][0]["blocks"], 24);
    assert_eq!(
        v["top_sites"][0]["site"],
        "__init__ (vllm_rollout/vllm_rollout_spmd.py:114)"
    );
    assert_eq!(v["top_sites"][0]["pool"], serde_json::json!([0, 2]));
    // Live blocks count the bytes they asked for (865 MiB each), as the trace and the memory
    // timeline do; the segments count the blocks (866 MiB each).
    assert_eq!(v["top_sites"][0]["bytes"], 24 * 907_096_064u64);
    let other_pool = v["top_sites"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["pool"] == serde_json::json!([0, 1]))
        .unwrap();
    assert_eq!(other_pool["blocks"], 315);
    assert_eq!(v["top_sites"][1].get("pool"), None);
    let pools = &json["snapshot"]["segments"][0]["pools"];
    assert_eq!(pools.as_array().map(Vec::len), Some(2), "{pools}");
    assert_eq!(pools[1]["pool"], serde_json::json!([0, 2]));
    assert_eq!(pools[1]["segments"], 24);
    assert_eq!(v["fragmentation"][0]["largest_free_bytes"], 272_629_760);
    assert_eq!(json["snapshot"]["live_blocks_at_end"], 543);

    // Taken at an out-of-memory error: that comes first, with the numbers.
    let dir = tempfile::tempdir().unwrap();
    let oom = dir.path().join("oom.pickle");
    let status = std::process::Command::new(crate::python())
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/snapshots/cases.py"))
        .arg("generate")
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::rename(dir.path().join("shared_p4.pickle"), &oom).unwrap();
    let output = collector(&["report", "--json"], &oom);
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let v = &json["snapshot"]["verdict"];
    assert_eq!(v["problem"], true);
    assert_eq!(v["taken_at_oom"]["requested_bytes"], 80u64 << 30);
    assert_eq!(v["taken_at_oom"]["device_free_bytes"], 3u64 << 20);
    assert!(
        v["headline"]
            .as_str()
            .unwrap()
            .starts_with("Out of memory on cuda:0 asking for 80.0 GiB with 3.00 MiB free"),
        "{v}"
    );
    // No device capacity in a snapshot: no projection, and the report says why.
    assert_eq!(json["analysis"]["projection"], serde_json::Value::Null);

    // The legacy schema, taken from an out-of-memory handler: blocks from `history`.
    let legacy = real_snapshot("flexgen_oom_legacy_history.pickle");
    let output = collector(&["report"], &legacy);
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(
        text.contains("the trace ends with a `snapshot` entry"),
        "{text}"
    );
    assert!(
        text.contains("LIVE BLOCKS AT THE END (460 blocks, 11.0 GiB"),
        "{text}"
    );
}

#[test]
fn import_writes_a_recording_that_reports_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run.msgpack");
    let output = Command::new(env!("CARGO_BIN_EXE_collector"))
        .arg("import")
        .arg(snapshot_fixture())
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let recording = collector::recording::read_file(&out).unwrap();
    let bytes = std::fs::read(snapshot_fixture()).unwrap();
    let direct = collector::snapshot::read_snapshot(&bytes)
        .unwrap()
        .to_recording();
    assert_eq!(recording.allocator, direct.allocator);
    assert_eq!(recording.phases, direct.phases);
    assert!(recording.end.is_some(), "a complete recording");
    // A bad snapshot: the file is named, exit status 2, nothing written.
    let bad = dir.path().join("cut.pickle");
    std::fs::write(&bad, &bytes[..bytes.len() / 3]).unwrap();
    let missing = dir.path().join("never.msgpack");
    let output = Command::new(env!("CARGO_BIN_EXE_collector"))
        .arg("import")
        .arg(&bad)
        .arg("--out")
        .arg(&missing)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        // The reason, then the file, as for recordings.
        stderr.contains("at byte")
            && stderr.contains("truncated")
            && stderr.trim_end().ends_with("cut.pickle"),
        "{stderr}"
    );
    assert!(!missing.exists());
}

/// `collector check` on real jobs under the collector: one that exits 1 and one killed by a
/// signal fail the check by default, naming how the job ended; one that exits 0 passes; and only
/// the chosen findings fail when `--fail-on` names them.
#[test]
fn check_fails_a_job_that_failed() {
    let check = |job: &crate::Job, extra: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_collector"))
            .arg("check")
            .arg(job.out())
            .args(extra)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        (output.status.code(), text)
    };
    for (script, title) in [
        (
            "import sys\nprint('the data is gone', file=sys.stderr)\nsys.exit(1)\n",
            "FAILED: The job failed: exit status 1",
        ),
        (
            "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n",
            "FAILED: The job was killed by signal 15",
        ),
    ] {
        let job = crate::Job::new(script);
        let run = job.run(&[]);
        assert!(!run.status.success(), "{}", crate::stderr(&run));
        let (code, text) = check(&job, &[]);
        assert_eq!(code, Some(1), "{text}");
        assert!(text.contains(title), "{text}");
        let (code, text) = check(&job, &["--fail-on", "leak"]);
        assert_eq!(code, Some(0), "{text}");
    }
    let job = crate::Job::new("import sys\nprint('done')\nsys.exit(0)\n");
    let run = job.run(&[]);
    assert!(run.status.success(), "{}", crate::stderr(&run));
    let (code, text) = check(&job, &[]);
    assert_eq!(code, Some(0), "{text}");
    // No steps: what it was judged over says how.
    assert!(
        text.starts_with("collector check: ok (judged over ")
            && text.contains("time window")
            && text.contains("as no steps are marked; none of: oom, failed"),
        "{text}"
    );
}

/// A snapshot's report speaks of a snapshot: its header says what it is (no "1 steps" for a
/// trace that records no step), and its evidence has none of the lines about what a recording
/// made by the collector lacks (NVML samples, how the job ended), in the text and the JSON.
#[test]
fn a_snapshots_report_speaks_of_a_snapshot() {
    for (name, header) in [
        (
            "bcrafton_cs336_training_step.pickle",
            " — a PyTorch memory snapshot (1 device, 6486 trace entries over 0.051 s)\n",
        ),
        (
            "verl_rollout_state.pickle",
            " — a PyTorch memory snapshot (1 device, no trace)\n",
        ),
    ] {
        let file = real_snapshot(name);
        let output = collector(&["report"], &file);
        assert!(output.status.success());
        let text = String::from_utf8(output.stdout).unwrap();
        let first = text.lines().next().unwrap_or_default();
        assert_eq!(format!("{first}\n"), format!("{}{header}", file.display()));
        says_none_of(
            name,
            &text,
            &[
                " steps)",
                "1 steps",
                "NVML was not available",
                "how the job ended is not known",
                "run the job under the collector",
                "tidemark.phase",
            ],
        );
        let json: serde_json::Value =
            serde_json::from_slice(&collector(&["report", "--json"], &file).stdout).unwrap();
        let lacks = json["analysis"]["lacks"].as_array().unwrap();
        assert!(
            lacks.iter().all(|l| {
                let l = l.as_str().unwrap();
                !l.contains("NVML") && !l.contains("the end of the job")
            }),
            "{name}: {lacks:?}"
        );
    }
    // A recording still says what it lacks.
    let text =
        String::from_utf8(collector(&["report"], &corpus("healthy.msgpack")).stdout).unwrap();
    assert!(text.contains("steps)\n"), "{text}");
}

/// That the report of `name` says none of what only a recording made by the collector says.
fn says_none_of(name: &str, text: &str, recording_only: &[&str]) {
    for said in recording_only {
        assert!(!text.contains(said), "{name}: {said}\n{text}");
    }
}

/// A profiler trace's and a memory timeline's reports speak of the file, not of a job the
/// collector watched: no NVML, no probe, no end of the job; the phases of a trace are attributed
/// from its own memory events; `--json` says which input it was; and what cannot be told yet is
/// said once, under the headline.
#[test]
fn a_profiler_files_report_speaks_of_the_file() {
    let real = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/traces/real");
    for (name, input) in [
        ("particle_transformer_a100.json", "trace"),
        ("hta_rank1_of_2_v100.json.gz", "trace"),
        ("hta_memory_timeline.raw.json.gz", "memory_timeline"),
    ] {
        let file = real.join(name);
        let output = collector(&["report"], &file);
        assert!(output.status.success(), "{name}");
        let text = String::from_utf8(output.stdout).unwrap();
        says_none_of(
            name,
            &text,
            &[
                "NVML",
                "probe",
                "how the job ended is not known",
                "run the job under the collector",
                "tidemark.phase",
            ],
        );
        if text.contains("Cannot tell yet") {
            assert_eq!(text.matches("not enough data").count(), 1, "{name}: {text}");
        }
        let json: serde_json::Value =
            serde_json::from_slice(&collector(&["report", "--json"], &file).stdout).unwrap();
        assert_eq!(json["input"], input, "{name}");
        // The JSON carries the text's notes, every one of them.
        let notes = json["notes"].as_array().unwrap();
        assert!(!notes.is_empty(), "{name}");
        for note in notes {
            assert!(
                text.contains(&format!("note: {}", note.as_str().unwrap())),
                "{name}: {note}"
            );
        }
    }
    let text =
        String::from_utf8(collector(&["report"], &real.join("hta_rank1_of_2_v100.json.gz")).stdout)
            .unwrap();
    assert!(
        text.contains("note: peak on cuda:1: 6.17 GiB allocated, 194 ms into the trace, while aten::clone › aten::empty_like › aten::empty ran"),
        "{text}"
    );
    assert!(
        text.contains("phases attributed with PyTorch's allocated bytes at every phase edge, from the profiler trace's own memory events"),
        "{text}"
    );
}

/// `collector check` on a snapshot gates on the snapshot's verdict: taken at an out-of-memory
/// error, it fails (unless `oom` is not among the kinds that fail), naming the verdict; a
/// snapshot whose verdict names no problem passes.
#[test]
fn check_on_a_snapshot_gates_on_its_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let status = std::process::Command::new(crate::python())
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/snapshots/cases.py"))
        .arg("generate")
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(status.success());
    let oom = dir.path().join("shared_p4.pickle");
    let output = collector(&["check"], &oom);
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(output.status.code(), Some(1), "{text}");
    assert!(
        text.starts_with(
            "collector check: FAILED: Out of memory on cuda:0 asking for 80.0 GiB with 3.00 MiB free"
        ),
        "{text}"
    );
    assert!(
        text.contains("    taken at an out-of-memory error on cuda:0"),
        "{text}"
    );
    let output = collector(&["check", "--fail-on", "leak"], &oom);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
    // Without a trace it passes on its own verdict, and says so (not "0 windows").
    let output = collector(&["check"], &real_snapshot("verl_rollout_state.pickle"));
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{text}");
    assert!(
        text.starts_with("collector check: ok (the snapshot's own verdict: it has no trace to judge over time; none of: oom, failed, stalled, leak"),
        "{text}"
    );
}

/// A snapshot compressed as users keep them (`snap.pickle.gz`, `snap.pickle.zst`) reads as the
/// pickle does: the same report, byte for byte but the file's name; compressed twice, or cut
/// short, it is named with what is wrong (exit 2).
#[test]
fn a_compressed_snapshot_reads_as_the_pickle_does() {
    use std::io::Write as _;
    let pickle = real_snapshot("bcrafton_cs336_training_step.pickle");
    let bytes = std::fs::read(&pickle).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&bytes).unwrap();
    let gz_path = dir.path().join("snap.pickle.gz");
    std::fs::write(&gz_path, gz.finish().unwrap()).unwrap();
    let zst =
        ruzstd::encoding::compress_to_vec(&bytes[..], ruzstd::encoding::CompressionLevel::Fastest);
    let zst_path = dir.path().join("snap.pickle.zst");
    std::fs::write(&zst_path, &zst).unwrap();
    let without_file = |path: &std::path::Path| {
        let mut json = crate::report_json(path);
        json.as_object_mut().unwrap().remove("file");
        json
    };
    let plain = without_file(&pickle);
    assert_eq!(plain["input"], "snapshot");
    assert_eq!(without_file(&gz_path), plain);
    assert_eq!(without_file(&zst_path), plain);

    let cut = dir.path().join("cut.pickle.zst");
    std::fs::write(&cut, &zst[..zst.len() / 2]).unwrap();
    let twice = dir.path().join("twice.pickle.zst");
    std::fs::write(
        &twice,
        ruzstd::encoding::compress_to_vec(&zst[..], ruzstd::encoding::CompressionLevel::Fastest),
    )
    .unwrap();
    for (path, said) in [
        (&cut, "zstd data that cannot be decompressed ("),
        (
            &twice,
            "zstd data that holds compressed data again: decompress it once first",
        ),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_collector"))
            .arg("report")
            .arg(path)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{err}");
        assert!(
            err.contains(said) && err.contains(&*path.to_string_lossy()),
            "{err}"
        );
    }
}

/// A snapshot whose history's ring buffer wrapped says so (PyTorch's `allocator_settings`:
/// `trace_alloc_overflowed`, `trace_alloc_max_entries`): the verdict's evidence, and the memory
/// timeline's notes (`diff --at`) name it; the same snapshot without the flag does not.
#[test]
fn a_snapshot_whose_ring_buffer_wrapped_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let wrapped = dir.path().join("wrapped.pickle");
    let output = Command::new(crate::python())
        .arg("-c")
        .arg(
            "import pickle, sys\n\
             s = pickle.load(open(sys.argv[1], 'rb'))\n\
             s['allocator_settings'] = dict(s['allocator_settings'], trace_alloc_overflowed=True, trace_alloc_max_entries=6486)\n\
             pickle.dump(s, open(sys.argv[2], 'wb'), protocol=5)",
        )
        .arg(real_snapshot("bcrafton_cs336_training_step.pickle"))
        .arg(&wrapped)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let said = "the history's ring buffer of 6486 entries wrapped (the snapshot says trace_alloc_overflowed): older events were overwritten, so the trace is whole only from its first entry";
    let report = crate::report(&wrapped);
    assert!(report.contains(said), "{report}");
    let plain = crate::report(&real_snapshot("bcrafton_cs336_training_step.pickle"));
    assert!(!plain.contains("ring buffer"), "{plain}");
    let moments = Command::new(env!("CARGO_BIN_EXE_collector"))
        .args(["diff"])
        .arg(&wrapped)
        .args(["--at", "20%", "--at", "90%"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&moments.stdout);
    assert!(text.contains(said), "{text}");
}
