//! Many ranks in one recording: real `torchrun` (DDP on CPU with gloo) under the collector. Each
//! rank is judged on its own memory (the probe's numbers at its edges), so one rank's leak is
//! found on that rank only, and a rank holding more than the others is an imbalance.

use collector::analysis::{Analysis, FindingKind, analyze};

use crate::{Job, python, stderr};

const DDP_JOB: &str = r#"
import os
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
leaky = [int(r) for r in os.environ.get("LEAKY_RANKS", "").split(",") if r]
big = [int(r) for r in os.environ.get("BIG_RANKS", "").split(",") if r]
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
extra = torch.ones(64 << 20) if rank in big else None  # 256 MiB more on this rank, all run long
kept = []
x = torch.randn(512, 256)
for step in range(30):
    opt.zero_grad(set_to_none=True)
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    if rank in leaky:
        kept.append(torch.randn(2 << 20))  # 8 MiB a step, kept for good
# DDP holds the process group: freed while the group lives, else gloo's threads may meet the
# interpreter's teardown and abort ("terminate called without an active exception").
del model, opt
dist.barrier()
dist.destroy_process_group()
# Even so, one rank in a few hundred runs still aborted there (a fresh clone's run, four ranks on
# two cores): run the exit handlers (the probe's last batch and census), then leave without the
# interpreter's teardown.
import atexit, sys
atexit._run_exitfuncs()
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
"#;

/// `collector -- python -m torch.distributed.run --standalone --nproc-per-node N job.py`.
fn torchrun(ranks: u32, env: &[(&str, &str)]) -> (Job, Analysis) {
    let job = Job::new(DDP_JOB);
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_collector"));
    command
        .arg("--out")
        .arg(job.out())
        .arg("--")
        .arg(python())
        .args(["-m", "torch.distributed.run", "--standalone"])
        .arg(format!("--nproc-per-node={ranks}"))
        .arg(job.path("job.py"))
        .current_dir(job.dir.path())
        .env("OMP_NUM_THREADS", "1");
    for (k, v) in env {
        command.env(k, v);
    }
    let output = command.output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let analysis = analyze(&job.recording());
    (job, analysis)
}

fn leaks(analysis: &Analysis) -> Vec<&str> {
    analysis
        .findings
        .iter()
        .filter(|f| f.kind == FindingKind::Leak)
        .map(|f| f.title.as_str())
        .collect()
}

#[test]
fn one_leaking_rank_of_two_is_found_on_that_rank_only() {
    let (job, analysis) = torchrun(2, &[("LEAKY_RANKS", "1")]);
    let ranks: Vec<(u32, Option<bool>)> =
        analysis.ranks.iter().map(|r| (r.rank, r.problem)).collect();
    assert_eq!(
        ranks,
        vec![(0, Some(false)), (1, Some(true))],
        "{analysis:#?}"
    );
    let leaks = leaks(&analysis);
    assert_eq!(leaks.len(), 1, "{leaks:?}");
    assert!(
        leaks[0].starts_with("Rank 1: host memory leak"),
        "{leaks:?}"
    );
    let leak = analysis.finding(FindingKind::Leak).unwrap();
    assert!(
        leak.evidence
            .iter()
            .any(|e| e.starts_with("rank 0 does not:")),
        "{leak:#?}"
    );
    // The rank's C heap, read by its probe at its step starts: exact.
    let growth = leak.growth_per_step_bytes.unwrap() / (1 << 20) as f64;
    assert!(
        (7.6..8.4).contains(&growth),
        "{growth} MiB/step for 8 MiB kept a step: {leak:#?}"
    );

    let text = crate::report(&job.out());
    assert!(
        text.contains("RANKS (each judged on its own memory)"),
        "{text}"
    );
    assert!(text.contains("PHASES (rank 1)"), "{text}");
    let json = crate::report_json(&job.out());
    let ranks = json["analysis"]["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 2);
    assert!(ranks[0]["baseline_bytes"].as_u64().unwrap() > 0);
    assert_eq!(
        ranks[1]["step_series"]["values"].as_array().unwrap().len(),
        30
    );
}

#[test]
fn no_rank_leaking_is_no_leak_on_any() {
    let (_, analysis) = torchrun(2, &[]);
    assert!(leaks(&analysis).is_empty(), "{:#?}", analysis.findings);
    assert_eq!(analysis.ranks.len(), 2);
    assert!(
        analysis.ranks.iter().all(|r| r.problem == Some(false)),
        "{:#?}",
        analysis.ranks
    );
    assert!(analysis.finding(FindingKind::Imbalance).is_none());
}

#[test]
fn a_rank_holding_more_than_the_others_is_an_imbalance() {
    let (_, analysis) = torchrun(2, &[("BIG_RANKS", "1")]);
    let imbalance = analysis
        .finding(FindingKind::Imbalance)
        .unwrap_or_else(|| panic!("{:#?}", analysis.ranks));
    assert!(
        imbalance.title.starts_with("Imbalance: rank 1 holds"),
        "{}",
        imbalance.title
    );
    assert!(leaks(&analysis).is_empty(), "{:#?}", analysis.findings);
}

#[test]
fn four_ranks_one_leaking_is_found_on_that_rank_only() {
    let (_, analysis) = torchrun(4, &[("LEAKY_RANKS", "2")]);
    assert_eq!(analysis.ranks.len(), 4);
    let leaks = leaks(&analysis);
    assert_eq!(leaks.len(), 1, "{leaks:?}");
    assert!(leaks[0].starts_with("Rank 2: "), "{leaks:?}");
}

/// Two collectors standing in for two nodes (`--out run-%h.msgpack`, a host override): `report`
/// takes both files as one run, rank by rank; a file of another job, a missing one, are named
/// and left out, and the rest still open.
#[test]
fn two_nodes_recordings_report_as_one_run() {
    let job = Job::new(
        r#"
import os, time, tidemark
kept = []
for i in range(20):
    tidemark.step(i)
    with tidemark.phase("forward"):
        time.sleep(0.005)
        if os.environ["RANK"] == "1":
            kept.append(b"k" * (8 << 20))  # 8 MiB a step on rank 1 only
    with tidemark.phase("backward"):
        time.sleep(0.005)
"#,
    );
    let node = |host: &str, rank: &str| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_collector"));
        command
            .arg("--out")
            .arg(job.path("run-%h.msgpack"))
            .arg("--")
            .arg(python())
            .arg(job.path("job.py"))
            .env("TIDEMARK_HOSTNAME", host)
            .env("RANK", rank);
        command.spawn().unwrap()
    };
    let (mut a, mut b) = (node("node-a", "0"), node("node-b", "1"));
    assert!(a.wait().unwrap().success() && b.wait().unwrap().success());
    let (file_a, file_b) = (
        job.path("run-node-a.msgpack"),
        job.path("run-node-b.msgpack"),
    );
    assert!(
        file_a.is_file() && file_b.is_file(),
        "%h names each node's file"
    );

    // A recording of another job, and a file that is not there.
    let other = Job::new("print('hello')\n");
    assert!(other.run(&[]).status.success());
    let report = std::process::Command::new(env!("CARGO_BIN_EXE_collector"))
        .args(["report", "--json"])
        .arg(&file_a)
        .arg(&file_b)
        .arg(other.out())
        .arg(job.path("missing.msgpack"))
        .output()
        .unwrap();
    assert!(report.status.success(), "{}", stderr(&report));
    let json: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
    let analysis = &json["analysis"];
    let ranks: Vec<u64> = analysis["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["rank"].as_u64().unwrap())
        .collect();
    assert_eq!(ranks, vec![0, 1]);
    let leaks: Vec<&str> = analysis["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == "leak")
        .map(|f| f["title"].as_str().unwrap())
        .collect();
    assert_eq!(leaks.len(), 1, "{leaks:?}");
    assert!(leaks[0].starts_with("Rank 1: "), "{leaks:?}");
    let warnings: Vec<&str> = json["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect();
    assert!(
        warnings
            .iter()
            .any(|w| w.starts_with("left out") && w.contains("another job: its command is")),
        "{warnings:?}"
    );
    assert!(
        warnings
            .iter()
            .any(|w| w.starts_with("left out: cannot read the file")
                && w.contains("missing.msgpack")),
        "{warnings:?}"
    );
    let text = std::process::Command::new(env!("CARGO_BIN_EXE_collector"))
        .arg("report")
        .arg(&file_a)
        .arg(&file_b)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("one run from 2 recordings (hosts node-a, node-b)"),
        "{text}"
    );
}

/// A folder of per-rank snapshots (torchtitan's `rank{r}_memory_snapshot.pickle`, and
/// `memory_trace_{r}.pickle`) built from the real snapshots: one multi-rank run, peaks compared;
/// a truncated file and a rank claimed twice are named, and the others open.
#[test]
fn a_folder_of_per_rank_snapshots_compares_the_ranks() {
    let real = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/snapshots/real");
    let dir = tempfile::tempdir().unwrap();
    let copy = |from: &str, to: &str| std::fs::copy(real.join(from), dir.path().join(to)).unwrap();
    copy(
        "bcrafton_cs336_training_step.pickle",
        "rank0_memory_snapshot.pickle",
    );
    copy("verl_rollout_state.pickle", "rank1_memory_snapshot.pickle");
    copy(
        "bcrafton_cs336_training_step.pickle",
        "rank2_memory_snapshot.pickle",
    );
    copy(
        "bcrafton_cs336_training_step.pickle",
        "memory_trace_2.pickle",
    );
    let legacy = std::fs::read(real.join("flexgen_oom_legacy_history.pickle")).unwrap();
    std::fs::write(
        dir.path().join("rank3_memory_snapshot.pickle"),
        &legacy[..5000],
    )
    .unwrap();
    std::fs::write(dir.path().join("notes.txt"), "not a snapshot").unwrap();
    // A snapshot from another job, taken on another day; rank 5's file is missing.
    std::fs::copy(
        real.join("../mini_snapshot.pickle"),
        dir.path().join("rank4_memory_snapshot.pickle"),
    )
    .unwrap();
    std::fs::copy(
        real.join("bcrafton_cs336_training_step.pickle"),
        dir.path().join("rank6_memory_snapshot.pickle"),
    )
    .unwrap();

    let json = crate::report_json(dir.path());
    let ranks = json["ranks"].as_array().unwrap();
    let listed: Vec<(u64, bool, bool)> = ranks
        .iter()
        .map(|r| {
            (
                r["rank"].as_u64().unwrap(),
                r["duplicate"].as_bool().unwrap(),
                r["error"].is_string(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        vec![
            (0, false, false),
            (1, false, false),
            (2, true, false),
            (2, true, false),
            (3, false, true),
            (4, false, false),
            (6, false, false)
        ]
    );
    assert!(
        ranks[4]["error"]
            .as_str()
            .unwrap()
            .contains("rank3_memory_snapshot.pickle")
    );
    assert_eq!(json["missing"], serde_json::json!([5]));
    let standout = json["standout"].as_str().unwrap();
    assert!(
        standout.starts_with("rank 1 peaks at 23.2 GiB"),
        "{standout}"
    );
    // The traces with times on one timeline, each rank judged on its own: rank 1's snapshot
    // has no trace, rank 3's cannot be read; rank 2's two files are two processes.
    let judged: Vec<u64> = json["analysis"]["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["rank"].as_u64().unwrap())
        .collect();
    assert_eq!(judged, [0, 2, 6]);
    let text = crate::report(dir.path());
    assert!(text.contains("TRACES ON ONE TIMELINE"), "{text}");
    assert!(text.contains("rank 0: "), "{text}");
    assert!(
        text.contains(
            "rank 2 is claimed by more than one file; memory_trace_2.pickle is on the timeline"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "rank4_memory_snapshot.pickle is not on the timeline: another run: it started"
        ),
        "{text}"
    );
    assert!(text.contains("✗ Imbalance: rank 1 peaks at"), "{text}");
    assert!(
        text.contains("No snapshot for rank 5: its file is missing from the folder"),
        "{text}"
    );
    assert!(text.contains("(rank claimed twice)"), "{text}");
    // Rank 1's (verl's) top site: its own code that allocates vLLM's KV cache.
    assert!(
        text.contains("vllm_rollout/vllm_rollout_spmd.py:114"),
        "{text}"
    );

    let empty = tempfile::tempdir().unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_collector"))
        .arg("report")
        .arg(empty.path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("per-rank snapshots or profiler traces in the folder"),
        "{}",
        stderr(&output)
    );
}

/// Nodes' recordings where one is cut short and two claim the same rank: all open, and the
/// report names the cut file and the rank claimed twice.
#[test]
fn a_truncated_node_and_a_rank_claimed_twice_are_named() {
    use collector::recording::{Origin, Recording, write_file};
    let dir = tempfile::tempdir().unwrap();
    let node = |name: &str, rank: u32, pid: u32| {
        let mut header = tidemark_tests::header(&["python", "train.py"]);
        header.host = name.to_owned();
        let mut recording = Recording::new(header);
        let origin = Origin {
            pid,
            rank: Some(rank),
        };
        for record in tidemark_tests::forward_steps(origin, 30, 10_000_000, 4_000_000, |_| 1 << 30)
        {
            recording.push(record);
        }
        let path = dir.path().join(format!("{name}.msgpack"));
        write_file(&path, &recording).unwrap();
        path
    };
    let a = node("node-a", 0, 10);
    let b = node("node-b", 1, 11);
    let c = node("node-c", 2, 12);
    let d = node("node-d", 0, 13);
    // node-c's file is cut inside its last record, as a node that died mid-write leaves it.
    let bytes = std::fs::read(&c).unwrap();
    std::fs::write(&c, &bytes[..bytes.len() - 5]).unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_collector"))
        .arg("report")
        .args([&a, &b, &c, &d])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("rank 0 is claimed by 2 recordings"), "{text}");
    let cut = text
        .lines()
        .find(|l| l.contains("warning: node-c"))
        .unwrap_or_else(|| panic!("the cut file is named: {text}"));
    assert!(
        cut.contains("incomplete") || cut.contains("cut") || cut.contains("end"),
        "{cut}"
    );
    // The ranks of all four files are judged.
    for rank in 0..3 {
        assert!(
            text.contains(&format!("rank {rank} ")),
            "rank {rank}: {text}"
        );
    }
}
