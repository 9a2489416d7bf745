//! `collector diff A B` and `collector check RUN --baseline BASE`: a real before/after pair of
//! PyTorch snapshots against what Python's pickle reads from them, a generated pair whose sites
//! change by known amounts, and real torch jobs on the CPU recorded twice, with a larger forward
//! and with a leak.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::{Job, python, stderr};

const MIB: f64 = 1048576.0;

fn collector(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_collector"))
        .args(args)
        .output()
        .unwrap()
}

fn diff(a: &Path, b: &Path, extra: &[&str]) -> Output {
    let mut args: Vec<&std::ffi::OsStr> = vec!["diff".as_ref(), a.as_os_str(), b.as_os_str()];
    args.extend(extra.iter().map(std::ffi::OsStr::new));
    collector(&args)
}

fn check(run: &Path, base: &Path, extra: &[&str]) -> Output {
    let mut args: Vec<&std::ffi::OsStr> = vec![
        "check".as_ref(),
        run.as_os_str(),
        "--baseline".as_ref(),
        base.as_os_str(),
    ];
    args.extend(extra.iter().map(std::ffi::OsStr::new));
    collector(&args)
}

fn json(output: &Output) -> Value {
    assert!(output.status.success(), "{}", stderr(output));
    serde_json::from_slice(&output.stdout).unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn cases() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/snapshots/cases.py")
}

/// Per file, what Python's pickle finds alive per device and per site (`cases.py sites`).
fn python_sites(files: &[&Path]) -> Vec<Value> {
    let output = Command::new(python())
        .arg(cases())
        .arg("sites")
        .args(files)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    output
        .stdout
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect()
}

/// The generated pair (`cases.py pair`).
fn generated_pair() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new(python())
        .arg(cases())
        .arg("pair")
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(status.success());
    dir
}

fn f(value: &Value) -> f64 {
    value
        .as_f64()
        .unwrap_or_else(|| panic!("not a number: {value}"))
}

#[test]
fn the_real_fp32_and_bf16_snapshots_differ_as_python_reads_them() {
    let real =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/real-snapshots");
    let a = real.join("cs336_large_fw_bw_fp32.pickle");
    let b = real.join("cs336_large_fw_bw_bf16.pickle");
    let compared = json(&diff(&a, &b, &["--json"]));
    assert_eq!(compared["kind"], "snapshots");
    let truth = python_sites(&[&a, &b]);
    let devices = compared["diff"]["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 1, "{devices:?}");
    let device = &devices[0];
    assert_eq!(device["device"], 0);
    for (side, t) in ["a", "b"].iter().zip(&truth) {
        let bytes = f(&t["devices"]["0"][0]);
        let blocks = f(&t["devices"]["0"][1]);
        assert_eq!(f(&device["live_bytes"][side]), bytes, "{side}");
        assert_eq!(f(&device["allocated"][side]), bytes, "{side}");
        assert_eq!(f(&device["live_blocks"][side]), blocks, "{side}");
    }
    // bf16 autocast keeps casts beside the fp32 weights: more is alive and reserved.
    assert!(f(&device["allocated"]["change"]) > 0.0);
    assert!(f(&device["trace_peak"]["b"]) > f(&device["trace_peak"]["a"]));
    // Every site, on both sides, is what Python sums over its blocks.
    let sites = compared["diff"]["sites"].as_array().unwrap();
    assert_eq!(
        sites.len(),
        {
            let mut keys: std::collections::BTreeSet<&String> =
                truth[0]["sites"].as_object().unwrap().keys().collect();
            keys.extend(truth[1]["sites"].as_object().unwrap().keys());
            keys.len()
        },
        "the same sites"
    );
    for site in sites {
        let key = format!("{} {}", site["device"], site["site"].as_str().unwrap());
        for (side, t) in ["a", "b"].iter().zip(&truth) {
            let expected = t["sites"].get(&key).map_or(0.0, |v| f(&v[0]));
            assert_eq!(f(&site["bytes"][side]), expected, "{key} in {side}");
        }
    }
    // The top site: the largest change, and the sum over its blocks on each side.
    let top = &sites[0];
    let key = format!("0 {}", top["site"].as_str().unwrap());
    let sum = |t: &Value| t["sites"].get(&key).map_or(0.0, |v| f(&v[0]));
    assert_eq!(f(&top["bytes"]["change"]), sum(&truth[1]) - sum(&truth[0]));
    assert!(
        sites
            .iter()
            .all(|s| f(&s["bytes"]["change"]).abs() <= f(&top["bytes"]["change"]).abs())
    );
    // The site is the user's model, not torch's einsum nor einops under it.
    assert_eq!(top["site"], "forward (cs336_basics/model.py:41)");
    // And the text says the same.
    let text = stdout(&diff(&a, &b, &[]));
    assert!(
        text.contains("forward (cs336_basics/model.py:41)"),
        "{text}"
    );
    assert!(
        text.contains("cached, free (reserved − allocated)") && !text.contains("fragmentation"),
        "{text}"
    );
    // As a gate, bf16 against fp32 fails on the peak.
    let gate = check(&b, &a, &[]);
    assert_eq!(gate.status.code(), Some(1), "{}", stdout(&gate));
    assert!(
        stdout(&gate).contains("FAILED: peak allocated in the trace on cuda:0"),
        "{}",
        stdout(&gate)
    );
}

#[test]
fn a_generated_pair_shows_each_site_s_known_change() {
    let dir = generated_pair();
    let (before, after) = (
        dir.path().join("before.pickle"),
        dir.path().join("after.pickle"),
    );
    let compared = json(&diff(&before, &after, &["--json"]));
    let sites = compared["diff"]["sites"].as_array().unwrap();
    let row = |s: &Value| {
        (
            s["site"].as_str().unwrap().to_owned(),
            s["status"].as_str().unwrap().to_owned(),
            f(&s["bytes"]["change"]) / MIB,
            f(&s["blocks"]["a"]),
            f(&s["blocks"]["b"]),
        )
    };
    let rows: Vec<_> = sites.iter().map(row).collect();
    // cases.py: remember 3 × 1 MiB → 5 × 3 MiB, fresh 2 × 2 MiB new, old 1 × 2 MiB gone, steady
    // unchanged; the `__torch_function__` wrapper and torch's einsum under the user's frame are
    // not the site. Sorted by the size of the change.
    assert_eq!(
        rows,
        vec![
            (
                "remember (work/train.py:88)".to_owned(),
                "both".to_owned(),
                12.0,
                3.0,
                5.0
            ),
            (
                "fresh (work/train.py:60)".to_owned(),
                "new".to_owned(),
                4.0,
                0.0,
                2.0
            ),
            (
                "old (work/train.py:50)".to_owned(),
                "gone".to_owned(),
                -2.0,
                1.0,
                0.0
            ),
            (
                "steady (work/train.py:20)".to_owned(),
                "both".to_owned(),
                0.0,
                2.0,
                2.0
            ),
        ]
    );
    let device = &compared["diff"]["devices"][0];
    // Alive: 8 + 3 + 2 = 13 MiB, then 8 + 15 + 4 = 27 MiB; a 16 MiB and a 32 MiB temporary on
    // top of that are the peaks; one 128 MiB segment.
    for (field, a, b) in [
        ("allocated", 13.0, 27.0),
        ("trace_peak", 29.0, 59.0),
        ("reserved", 128.0, 128.0),
        ("cached", 115.0, 101.0),
    ] {
        assert_eq!(f(&device[field]["a"]) / MIB, a, "{field}");
        assert_eq!(f(&device[field]["b"]) / MIB, b, "{field}");
    }
    let markdown = stdout(&diff(&before, &after, &["--markdown"]));
    assert!(
        markdown.contains(
            "| +12.0 MiB | 3.00 MiB | 15.0 MiB | 3 → 5 | cuda:0 remember (work/train.py:88) |"
        ),
        "{markdown}"
    );
    // The gate: the peak doubled (fails); what is alive grew 14 MiB, under 64 MiB (passes).
    let gate = check(&after, &before, &[]);
    assert_eq!(gate.status.code(), Some(1), "{}", stdout(&gate));
    let text = stdout(&gate);
    assert!(
        text.contains("FAILED: peak allocated in the trace on cuda:0 grew 29.0 MiB → 59.0 MiB"),
        "{text}"
    );
    assert!(!text.contains("FAILED: alive at the end"), "{text}");
    let strict = check(&after, &before, &["--max-baseline-increase", "8MiB"]);
    assert!(
        stdout(&strict).contains("FAILED: alive at the end on cuda:0 grew 13.0 MiB → 27.0 MiB"),
        "{}",
        stdout(&strict)
    );
    let same = check(&before, &before, &["--markdown"]);
    assert_eq!(same.status.code(), Some(0), "{}", stdout(&same));
    assert!(
        stdout(&same).starts_with("### tidemark check: passed"),
        "{}",
        stdout(&same)
    );
}

#[test]
fn files_that_cannot_be_compared_exit_2_saying_why() {
    let dir = generated_pair();
    let snapshot = dir.path().join("before.pickle");
    let recording =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/golden_v1_3.msgpack");
    for output in [
        diff(&snapshot, &recording, &[]),
        diff(&recording, &snapshot, &["--json"]),
        check(&snapshot, &recording, &[]),
    ] {
        assert_eq!(output.status.code(), Some(2));
        let err = stderr(&output);
        assert!(
            err.contains("before.pickle (a PyTorch memory snapshot)")
                && err.contains("golden_v1_3.msgpack (a tidemark recording)"),
            "{err}"
        );
        assert!(output.stdout.is_empty());
    }
    // The same blocks on another device: nothing in common.
    let other = diff(&snapshot, &dir.path().join("other_device.pickle"), &[]);
    assert_eq!(other.status.code(), Some(2));
    assert!(
        stderr(&other).contains("no device in common: A holds cuda:0, B holds cuda:1"),
        "{}",
        stderr(&other)
    );
    // A baseline from another command: the JSON that `report --json` or `diff --json` wrote.
    let report = collector(&["report".as_ref(), recording.as_os_str(), "--json".as_ref()]);
    assert!(report.status.success(), "{}", stderr(&report));
    let report_json = dir.path().join("report.json");
    std::fs::write(&report_json, &report.stdout).unwrap();
    let compared = diff(&recording, &recording, &["--json"]);
    assert_eq!(compared.status.code(), Some(0), "{}", stderr(&compared));
    let diff_json = dir.path().join("diff.json");
    std::fs::write(&diff_json, &compared.stdout).unwrap();
    for (base, said) in [
        (&report_json, "the JSON of `collector report --json`"),
        (&diff_json, "the JSON of `collector diff --json`"),
    ] {
        let gated = check(&recording, base, &[]);
        assert_eq!(gated.status.code(), Some(2));
        let err = stderr(&gated);
        assert!(
            err.contains(said) && err.contains(&*base.to_string_lossy()),
            "{err}"
        );
        assert!(gated.stdout.is_empty());
    }
    // A file that is not there.
    let missing = diff(&snapshot, &dir.path().join("nope.pickle"), &[]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        stderr(&missing).contains("nope.pickle"),
        "{}",
        stderr(&missing)
    );
}

/// `collector diff SNAPSHOT --at T1 --at T2` on the real snapshots with a trace: what was
/// allocated between the two moments and is alive at the later one, in all and per site, equals
/// a plain replay of the trace in Python; what was alive changed by what was kept less what was
/// freed.
#[test]
fn two_moments_of_a_real_trace_are_what_a_replay_finds() {
    let real =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/real-snapshots");
    for (name, at) in [
        ("bcrafton_cs336_training_step.pickle", ["5%", "95%"]),
        ("cs336_large_fw_bw_fp32.pickle", ["1000", "60%"]),
        ("cs336_large_fw_bw_bf16.pickle", ["20%", "100%"]),
    ] {
        let file = real.join(name);
        let output = collector(&[
            "diff".as_ref(),
            file.as_os_str(),
            "--at".as_ref(),
            at[0].as_ref(),
            "--at".as_ref(),
            at[1].as_ref(),
            "--json".as_ref(),
        ]);
        let moments = json(&output);
        let devices = moments["devices"].as_array().unwrap();
        assert!(!devices.is_empty(), "{name}");
        for d in devices {
            let steps: Vec<String> = d["steps"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s.to_string())
                .collect();
            assert_ne!(steps[0], steps[1], "{name}");
            let replay = Command::new(python())
                .arg(cases())
                .arg("moments")
                .arg(&file)
                .arg(d["device"].to_string())
                .args(&steps)
                .output()
                .unwrap();
            assert!(replay.status.success(), "{}", stderr(&replay));
            let truth: Value = serde_json::from_slice(&replay.stdout).unwrap();
            assert!(
                f(&truth["bytes"]) > 0.0,
                "{name}: nothing kept between {steps:?}"
            );
            assert_eq!(d["kept"], truth["bytes"], "{name} {steps:?}");
            let sites = d["sites"].as_array().unwrap();
            // Per site: the same groups of bytes and blocks (the replay names a site by the
            // block's own first user frame with its folder; ours by the timeline's site rule,
            // which also passes over Inductor's generated files, and the file's name alone).
            let mut ours: Vec<(u64, u64)> = sites
                .iter()
                .map(|s| (f(&s["bytes"]) as u64, f(&s["blocks"]) as u64))
                .collect();
            let mut theirs: Vec<(u64, u64)> = truth["sites"]
                .as_object()
                .unwrap()
                .values()
                .map(|v| (f(&v[0]) as u64, f(&v[1]) as u64))
                .collect();
            ours.sort_unstable();
            theirs.sort_unstable();
            assert_eq!(ours, theirs, "{name} {steps:?}: {sites:?} {truth}");
            let blocks: u64 = ours.iter().map(|v| v.1).sum();
            assert_eq!(blocks as f64, f(&truth["blocks"]), "{name}");
            // Sorted by bytes, largest first.
            assert!(
                sites
                    .windows(2)
                    .all(|w| f(&w[0]["bytes"]) >= f(&w[1]["bytes"]))
            );
            let (alive, kept, freed) = (&d["alive"], f(&d["kept"]), f(&d["freed"]));
            assert_eq!(f(&alive[1]) - f(&alive[0]), kept - freed, "{name}");
        }
    }
    // The text names the top site with its bytes.
    let file = real.join("bcrafton_cs336_training_step.pickle");
    let text = stdout(&collector(&[
        "diff".as_ref(),
        file.as_os_str(),
        "--at".as_ref(),
        "10%".as_ref(),
        "--at".as_ref(),
        "90%".as_ref(),
    ]));
    assert!(
        text.contains("cuda:0 from step 649 (") && text.contains("to step 5837 ("),
        "{text}"
    );
    assert!(
        text.contains("525 MiB      96  step (cs336_basics/optimizer.py:74)"),
        "{text}"
    );
}

/// `--at` where it cannot answer: said, exit 2, nothing on stdout.
#[test]
fn moments_that_cannot_be_compared_exit_2_saying_why() {
    let real =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/real-snapshots");
    let traced = real.join("bcrafton_cs336_training_step.pickle");
    let untraced = real.join("verl_rollout_state.pickle");
    let recording =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/golden_v1_3.msgpack");
    let at = |file: &Path, moments: &[&str]| {
        let mut args: Vec<&std::ffi::OsStr> = vec!["diff".as_ref(), file.as_os_str()];
        for m in moments {
            args.push("--at".as_ref());
            args.push(m.as_ref());
        }
        collector(&args)
    };
    for (output, says) in [
        (at(&untraced, &["1", "2"]), "the snapshot has no trace"),
        (
            at(&recording, &["1", "4000"]),
            "no step 4000 in the recording",
        ),
        (
            at(&traced, &["10%"]),
            "--at is given 1 time(s): give it twice",
        ),
        (
            at(&traced, &["10%", "later"]),
            "--at \"later\": expected a step of the trace",
        ),
        (
            at(&traced, &["10%", "150%"]),
            "expected a step of the trace",
        ),
    ] {
        assert_eq!(output.status.code(), Some(2), "{says}");
        assert!(stderr(&output).contains(says), "{}", stderr(&output));
        assert!(output.stdout.is_empty());
    }
    // Another file beside --at: one or the other.
    let both = collector(&[
        "diff".as_ref(),
        traced.as_os_str(),
        traced.as_os_str(),
        "--at".as_ref(),
        "1".as_ref(),
    ]);
    assert_eq!(both.status.code(), Some(2));
    assert!(
        stderr(&both).contains("cannot be used with"),
        "{}",
        stderr(&both)
    );
}

/// A small training loop on the CPU whose `torch.cuda` reports the C heap in use (glibc's
/// `mallinfo2`, where these tensors live) as allocated bytes (`scripted_cuda.py`): the
/// allocator's path a GPU job takes, with real torch memory. `ROWS` sets the forward's activations (ROWS × 1024 float32),
/// `KEEP` keeps that many MiB a step, made in the forward.
const JOB: &str = r#"
import os
import torch
from torch import nn
import scripted_cuda  # collector/tests/data/scripted_cuda.py

scripted_cuda.install(torch)

ROWS = int(os.environ["ROWS"])
KEEP = int(os.environ["KEEP"])
torch.manual_seed(0)
torch.set_num_threads(1)
model = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024))
optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
x = torch.randn(ROWS, 1024)
kept = []

def forward(batch):
    out = model(batch)
    if KEEP:
        kept.append(torch.ones(KEEP << 18))
    return out

for step in range(24):
    optimizer.zero_grad(set_to_none=True)
    loss = forward(x).square().mean()
    loss.backward()
    optimizer.step()
"#;

/// Records the job with `ROWS` and `KEEP`; the recording's path (in `job`'s folder).
fn record(job: &Job, name: &str, rows: u32, keep: u32) -> PathBuf {
    let out = job.path(name);
    let output = Command::new(env!("CARGO_BIN_EXE_collector"))
        .arg("--out")
        .arg(&out)
        .arg("--")
        .arg(python())
        .arg(job.path("job.py"))
        .env("ROWS", rows.to_string())
        .env("KEEP", keep.to_string())
        .env("OMP_NUM_THREADS", "1")
        .current_dir(job.dir.path())
        .output()
        .unwrap();
    assert!(output.status.success(), "{name}: {}", stderr(&output));
    out
}

#[test]
fn the_gate_passes_a_rerun_and_fails_a_larger_forward_and_a_leak_naming_the_phase() {
    let job = Job::new(JOB).with_scripted_cuda();
    // The forward's activations: 1024 rows × 1024 float32 = 4 MiB each; the larger forward's
    // are three times that.
    let base = record(&job, "base.msgpack", 1024, 0);
    let rerun = record(&job, "rerun.msgpack", 1024, 0);
    let larger = record(&job, "larger.msgpack", 3072, 0);
    let leak = record(&job, "leak.msgpack", 1024, 2);

    // The same job again passes with the default thresholds (the C heap moves by kilobytes
    // from one run to the next; the thresholds are 5% of the peak, 10% of a watermark with a
    // 1 MiB floor, 1 MiB/step retained, 64 MiB of step baseline).
    let same = check(&rerun, &base, &[]);
    assert_eq!(same.status.code(), Some(0), "{}", stdout(&same));
    assert!(
        stdout(&same).contains("ok against the baseline"),
        "{}",
        stdout(&same)
    );

    let larger_gate = check(&larger, &base, &[]);
    assert_eq!(
        larger_gate.status.code(),
        Some(1),
        "{}",
        stdout(&larger_gate)
    );
    let text = stdout(&larger_gate);
    assert!(text.contains("FAILED: forward's watermark grew"), "{text}");
    assert!(!text.contains("FAILED: backward's"), "{text}");

    let leak_gate = check(&leak, &base, &["--markdown"]);
    assert_eq!(leak_gate.status.code(), Some(1), "{}", stdout(&leak_gate));
    let markdown = stdout(&leak_gate);
    assert!(
        markdown.starts_with("### tidemark check: FAILED"),
        "{markdown}"
    );
    assert!(
        markdown
            .lines()
            .any(|l| l.starts_with("| forward's retained per step |")
                && l.ends_with("| **FAILED** |")),
        "{markdown}"
    );
    assert!(
        markdown
            .lines()
            .any(|l| l.starts_with("| backward's retained per step |") && l.ends_with("| ok |")),
        "{markdown}"
    );

    // The diff of the larger forward: its watermark grows by about what its activations added
    // (the two it keeps for the backward, ReLU's output and the output, 8 MiB larger each),
    // within a margin for the C heap's own bookkeeping.
    let compared = json(&diff(&base, &larger, &["--json"]));
    assert_eq!(compared["kind"], "recordings");
    let phases = compared["diff"]["phases"].as_array().unwrap();
    let forward = phases.iter().find(|p| p["phase"] == "forward").unwrap();
    let grew = f(&forward["watermark"]["change"]) / MIB;
    assert!(
        (12.0..=40.0).contains(&grew),
        "forward's watermark grew {grew} MiB"
    );
    assert_eq!(f(&forward["occurrences"]["a"]), 24.0);
    assert_eq!(f(&forward["occurrences"]["b"]), 24.0);
    // And of the leak: the forward retains 2 MiB a step more, the slope follows.
    let compared = json(&diff(&base, &leak, &["--json"]));
    let phases = compared["diff"]["phases"].as_array().unwrap();
    let forward = phases.iter().find(|p| p["phase"] == "forward").unwrap();
    let retained = f(&forward["retained"]["change"]) / MIB;
    assert!((1.5..=2.5).contains(&retained), "{retained}");
    let slope = f(&compared["diff"]["slope"]["change"]) / MIB;
    assert!((1.5..=2.5).contains(&slope), "{slope}");
}

/// `collector flame`: the folded stacks of a generated snapshot equal a plain replay of its trace
/// in Python, stack by stack (`--unfold`: every frame); folded into the first frame of the user's
/// code by default, where the leaves are the lines that made the memory; on the real snapshots
/// the weights add up to what is alive at that moment (as `diff --at` replays it); an SVG.
#[test]
fn a_flame_graph_is_the_live_bytes_by_stack() {
    let dir = generated_pair();
    let after = dir.path().join("after.pickle");
    let folded = |file: &Path, extra: &[&str]| -> Vec<(String, u64)> {
        let mut args: Vec<&std::ffi::OsStr> = vec!["flame".as_ref(), file.as_os_str()];
        args.extend(extra.iter().map(std::ffi::OsStr::new));
        let output = collector(&args);
        assert!(output.status.success(), "{}", stderr(&output));
        stdout(&output)
            .lines()
            .map(|l| {
                let (path, weight) = l.rsplit_once(' ').unwrap();
                (path.to_owned(), weight.parse().unwrap())
            })
            .collect()
    };
    let unfolded = folded(&after, &["--unfold"]);
    let replay = Command::new(python())
        .arg(cases())
        .args([
            "flame".as_ref(),
            after.as_os_str(),
            "0".as_ref(),
            "100".as_ref(),
        ])
        .output()
        .unwrap();
    assert!(replay.status.success(), "{}", stderr(&replay));
    let truth: Value = serde_json::from_slice(&replay.stdout).unwrap();
    let mut theirs: Vec<(String, u64)> = truth
        .as_object()
        .unwrap()
        .iter()
        .map(|(path, bytes)| (format!("cuda:0;{path}"), bytes.as_u64().unwrap()))
        .collect();
    let mut ours = unfolded.clone();
    ours.sort();
    theirs.sort();
    assert_eq!(ours, theirs);
    // Folded: torch's einsum, the `__torch_function__` wrapper and the allocator's C++ frames
    // inside the site are folded into it; heaviest first.
    let call = "_call_impl (modules/module.py:1750)";
    assert_eq!(
        folded(&after, &[]),
        vec![
            (
                format!("cuda:0;<module> (work/train.py:12);{call};remember (work/train.py:88)"),
                15 << 20
            ),
            (
                format!("cuda:0;<module> (work/train.py:12);{call};steady (work/train.py:20)"),
                8 << 20
            ),
            (
                format!("cuda:0;<module> (work/train.py:12);{call};fresh (work/train.py:60)"),
                4 << 20
            ),
        ]
    );
    // Step 12: the 32 MiB temporary (entry 11) is alive, its free only requested (entry 12).
    let at_peak = folded(&after, &["--at", "12"]);
    assert!(
        at_peak
            .iter()
            .any(|(p, w)| p.ends_with("forward (work/model.py:42)") && *w == 32 << 20),
        "{at_peak:?}"
    );
    // The peak: the same 32 MiB on top of the 27 MiB kept, 59 MiB, the trace's peak as the
    // snapshot diff computes it.
    let peak = folded(&after, &["--at", "peak"]);
    assert_eq!(peak.iter().map(|l| l.1).sum::<u64>(), 59 << 20, "{peak:?}");
    assert!(
        peak.iter()
            .any(|(p, w)| p.ends_with("forward (work/model.py:42)") && *w == 32 << 20)
    );
    // Bytes × steps alive: remember's five blocks live from their allocation to the end.
    let lifetime = folded(&after, &["--lifetime"]);
    assert!(lifetime.iter().all(|(_, w)| *w > 0), "{lifetime:?}");

    let real =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/real-snapshots");
    for name in [
        "bcrafton_cs336_training_step.pickle",
        "cs336_large_fw_bw_fp32.pickle",
    ] {
        let file = real.join(name);
        let sum: u64 = folded(&file, &["--at", "40%"]).iter().map(|l| l.1).sum();
        let moments = json(&collector(&[
            "diff".as_ref(),
            file.as_os_str(),
            "--at".as_ref(),
            "40%".as_ref(),
            "--at".as_ref(),
            "40%".as_ref(),
            "--json".as_ref(),
        ]));
        assert_eq!(sum as f64, f(&moments["devices"][0]["alive"][0]), "{name}");
        let svg = dir.path().join(format!("{name}.svg"));
        let output = collector(&[
            "flame".as_ref(),
            file.as_os_str(),
            "--svg".as_ref(),
            svg.as_os_str(),
        ]);
        assert!(output.status.success(), "{}", stderr(&output));
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(
            text.starts_with("<svg") && text.contains("alive at step"),
            "{name}"
        );
        assert!(
            text.contains("<title>step (") || text.contains("<title>forward ("),
            "{name}"
        );
    }

    // What it cannot draw: exit 2, saying why.
    let recording =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/golden_v1_3.msgpack");
    let untraced = real.join("verl_rollout_state.pickle");
    for (args, says) in [
        (vec![recording.as_os_str()], "this is a tidemark recording"),
        (vec![untraced.as_os_str()], "the snapshot has no trace"),
        (
            vec![after.as_os_str(), "--device".as_ref(), "3".as_ref()],
            "no trace of cuda:3",
        ),
        (
            vec![after.as_os_str(), "--at".as_ref(), "soon".as_ref()],
            "expected a step of the trace",
        ),
    ] {
        let mut all: Vec<&std::ffi::OsStr> = vec!["flame".as_ref()];
        all.extend(args);
        let output = collector(&all);
        assert_eq!(output.status.code(), Some(2), "{says}");
        assert!(stderr(&output).contains(says), "{}", stderr(&output));
    }
}

/// `--html`: one self-contained page with its picture and the same numbers as the text, for
/// two snapshots, two recordings and two moments; a page that cannot be written exits 2 naming
/// it, and writes nothing else.
#[test]
fn a_comparison_as_an_html_page_carries_its_picture_and_numbers() {
    let real =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/real-snapshots");
    let corpus = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/corpus");
    let dir = tempfile::tempdir().unwrap();
    let escape = |s: &str| {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;")
    };
    let page_of = |args: &[&std::ffi::OsStr], name: &str| {
        let page = dir.path().join(name);
        let mut all = args.to_vec();
        all.extend(["--html".as_ref(), page.as_os_str()]);
        let output = collector(&all);
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        let html = std::fs::read_to_string(&page).unwrap();
        assert!(html.starts_with("<!DOCTYPE html>"), "{name}");
        assert!(html.contains("<svg"), "{name}: no picture");
        assert!(!html.contains("<script"), "{name}: a script");
        assert!(html.trim_end().ends_with("</html>"), "{name}");
        (html, String::from_utf8(output.stdout).unwrap())
    };

    // Two snapshots: the top site's change leads and is in the table; the text is printed too.
    let (a, b) = (
        real.join("cs336_large_fw_bw_fp32.pickle"),
        real.join("cs336_large_fw_bw_bf16.pickle"),
    );
    let compared = json(&diff(&a, &b, &["--json"]));
    let top = &compared["diff"]["sites"][0];
    let site = format!("cuda:{} {}", top["device"], top["site"].as_str().unwrap());
    let change = collector::compare::signed_bytes(f(&top["bytes"]["change"]));
    let (html, text) = page_of(
        &["diff".as_ref(), a.as_os_str(), b.as_os_str()],
        "snapshots.html",
    );
    assert!(
        html.contains(&format!(
            "The largest change: {change} at {}",
            escape(&site)
        )),
        "{html}"
    );
    assert!(html.contains("<h2>per device</h2>"));
    assert!(html.contains(&format!("<td>{}</td>", escape(&site))));
    assert!(text.contains(&site), "{text}");

    // Two recordings: the step baselines on one step axis, and the phase table.
    let (healthy, leak) = (
        corpus.join("healthy.msgpack"),
        corpus.join("forward_keeps_losses.msgpack"),
    );
    let compared = json(&diff(&healthy, &leak, &["--json"]));
    let moved = collector::compare::signed_bytes(f(&compared["diff"]["baseline"]["change"]));
    let (html, _) = page_of(
        &["diff".as_ref(), healthy.as_os_str(), leak.as_os_str()],
        "recordings.html",
    );
    assert!(
        html.contains(&format!("The step baseline moved {moved}")),
        "{html}"
    );
    assert!(html.contains("A dashed, B solid") && html.contains("<td>forward net</td>"));

    // Two moments of a trace.
    let snapshot = real.join("bcrafton_cs336_training_step.pickle");
    let (html, _) = page_of(
        &[
            "diff".as_ref(),
            snapshot.as_os_str(),
            "--at".as_ref(),
            "20%".as_ref(),
            "--at".as_ref(),
            "90%".as_ref(),
        ],
        "moments.html",
    );
    assert!(html.contains("allocated between the moments and still alive at the later one"));

    // A page that cannot be written.
    let nowhere = dir.path().join("no/such/folder/page.html");
    let output = collector(&[
        "diff".as_ref(),
        a.as_os_str(),
        b.as_os_str(),
        "--html".as_ref(),
        nowhere.as_os_str(),
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains(&format!("cannot write {}", nowhere.display())),
        "{}",
        stderr(&output)
    );
    assert!(output.stdout.is_empty());
}

/// `collector diff RECORDING --at T1 --at T2`: the viewer's two moments, on the command line:
/// the same numbers as the library's `compare_moments` at the steps' starts.
#[test]
fn two_moments_of_a_recording_are_what_the_viewer_shows() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/corpus/forward_keeps_losses.msgpack");
    let output = collector(&[
        "diff".as_ref(),
        path.as_os_str(),
        "--at".as_ref(),
        "40".as_ref(),
        "--at".as_ref(),
        "10".as_ref(),
        "--json".as_ref(),
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let shown = json(&output);
    let recording = collector::recording::read_file(&path).unwrap();
    let analysis = collector::analysis::analyze(&recording);
    let start = |step: u64| {
        analysis
            .step_starts
            .iter()
            .find(|s| s.step == step)
            .unwrap()
            .t_ns
    };
    let expected = collector::compare::compare_moments(&recording, &analysis, start(10), start(40));
    assert_eq!(shown["from_ns"], expected.from_ns);
    assert_eq!(shown["to_ns"], expected.to_ns);
    assert_eq!(shown["steps"], serde_json::json!([10, 40]));
    assert_eq!(
        shown["phases"],
        serde_json::to_value(&expected.phases).unwrap()
    );
    assert_eq!(
        shown["series"],
        serde_json::to_value(&expected.series).unwrap()
    );
    // The loop keeps its losses in forward: 30 forwards between steps 10 and 40 grew memory.
    let forward = expected
        .phases
        .iter()
        .find(|p| p.phase == "forward")
        .unwrap();
    assert_eq!(forward.occurrences, 30);
    assert!(forward.net_bytes > 0.0 && forward.retained_bytes.unwrap() > 0.0);
    // Text: the curve by the name a person gives it, and the phase table.
    let text = collector(&[
        "diff".as_ref(),
        path.as_os_str(),
        "--at".as_ref(),
        "10".as_ref(),
        "--at".as_ref(),
        "peak".as_ref(),
    ]);
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(
        text.contains("host memory") && text.contains("forward"),
        "{text}"
    );
}

/// One spelling of a site: the leak suspect of a real snapshot is written the same in the
/// report, its JSON, `diff A B`, `diff --at` and the flame graph's frames.
#[test]
fn a_site_is_spelled_the_same_by_every_face() {
    let real =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/real-snapshots");
    let (fp32, bf16) = (
        real.join("cs336_large_fw_bw_fp32.pickle"),
        real.join("cs336_large_fw_bw_bf16.pickle"),
    );
    let json: Value = serde_json::from_str(&stdout(&collector(&[
        "report".as_ref(),
        "--json".as_ref(),
        fp32.as_os_str(),
    ])))
    .unwrap();
    let site = json["snapshot"]["leak_suspects"][0]["site"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(site, "forward (cs336_basics/model.py:41)");
    let faces = [
        (
            "report",
            stdout(&collector(&["report".as_ref(), fp32.as_os_str()])),
        ),
        (
            "diff A B",
            stdout(&collector(&[
                "diff".as_ref(),
                fp32.as_os_str(),
                bf16.as_os_str(),
            ])),
        ),
        (
            "diff --at",
            stdout(&collector(&[
                "diff".as_ref(),
                fp32.as_os_str(),
                "--at".as_ref(),
                "20%".as_ref(),
                "--at".as_ref(),
                "90%".as_ref(),
            ])),
        ),
        (
            "flame",
            stdout(&collector(&["flame".as_ref(), fp32.as_os_str()])),
        ),
    ];
    for (face, text) in faces {
        assert!(text.contains(&site), "{face} does not write {site}: {text}");
    }
}
