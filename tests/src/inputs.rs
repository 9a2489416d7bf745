//! One input of every kind a path can hold, made from the repository's fixtures, and what the
//! collector library makes of each (its kind and its verdict's headline, or its error): the
//! report's tests and the viewer's check that both open every input as the library does.

use std::path::{Path, PathBuf};

use collector::open::{Input, Kind, open_path};
use collector::recording::{Origin, Recording, write_file};

/// An input, and what opening it gives.
#[derive(Debug)]
pub struct Sample {
    /// What it is, in words.
    pub what: &'static str,
    /// The file or folder.
    pub path: PathBuf,
    /// Its kind, or `None` when it cannot be opened.
    pub kind: Option<Kind>,
    /// When it cannot be opened: a part of the error's message.
    pub error: &'static str,
}

/// The repository's test data (`collector/tests/data`).
pub fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../collector/tests/data")
        .join(name)
}

/// A node's recording of `command` (host `node-{rank}`), rank `rank`'s host memory growing by
/// 8 MiB a step times its rank over 20 forward steps, written to `dir`.
pub fn node_recording(dir: &Path, rank: u32, command: &str) -> std::io::Result<PathBuf> {
    let mut header = crate::header(&[command]);
    header.host = format!("node-{rank}");
    let mut recording = Recording::new(header);
    let origin = Origin {
        pid: 7,
        rank: Some(rank),
    };
    for record in crate::forward_steps(origin, 20, 10, 1, |step| {
        (1 << 30) + u64::from(rank) * step * (8 << 20)
    }) {
        recording.push(record);
    }
    let path = dir.join(format!("{command}-{rank}.msgpack"));
    write_file(&path, &recording)?;
    Ok(path)
}

/// A recording made with `--history` (`history/run.msgpack` in `dir`): the corpus' eval recording
/// naming a snapshot dumped at an out-of-memory error (`run.rank0.oom.pickle`, the mini snapshot),
/// written on another machine and found beside it.
pub fn history_recording(dir: &Path) -> std::io::Result<PathBuf> {
    let folder = dir.join("history");
    std::fs::create_dir_all(&folder)?;
    let mut recording =
        collector::recording::read_file(&data("corpus/eval_keeps_predictions.msgpack"))
            .map_err(std::io::Error::other)?;
    std::fs::copy(
        data("snapshots/mini_snapshot.pickle"),
        folder.join("run.rank0.oom.pickle"),
    )?;
    recording
        .snapshots
        .push(collector::recording::SnapshotFile {
            t_ns: 1,
            origin: Origin {
                pid: 1,
                rank: Some(0),
            },
            reason: "oom".to_owned(),
            path: "/elsewhere/run.rank0.oom.pickle".to_owned(),
        });
    let path = folder.join("run.msgpack");
    write_file(&path, &recording)?;
    Ok(path)
}

/// Every kind of input, made in `dir`: a recording, one made with `--history` (a snapshot dumped
/// next to it), two real snapshots (one with a trace, one without), a real profiler trace and
/// memory timeline, a folder of two nodes'
/// recordings, a folder of per-rank snapshots, and what cannot be opened (a `torch.save` zip, a
/// PNG, an empty file, an empty folder, a missing file).
pub fn samples(dir: &Path) -> std::io::Result<Vec<Sample>> {
    let ok = |what, path, kind| Sample {
        what,
        path,
        kind: Some(kind),
        error: "",
    };
    let bad = |what, path, error| Sample {
        what,
        path,
        kind: None,
        error,
    };
    let nodes = dir.join("nodes");
    std::fs::create_dir(&nodes)?;
    node_recording(&nodes, 0, "train")?;
    node_recording(&nodes, 1, "train")?;
    let ranks = dir.join("ranks");
    std::fs::create_dir(&ranks)?;
    for (from, to) in [
        (
            "bcrafton_cs336_training_step.pickle",
            "rank0_memory_snapshot.pickle",
        ),
        ("verl_rollout_state.pickle", "rank1_memory_snapshot.pickle"),
        (
            "bcrafton_cs336_training_step.pickle",
            "rank2_memory_snapshot.pickle",
        ),
    ] {
        std::fs::copy(data("snapshots/real").join(from), ranks.join(to))?;
    }
    let zip = dir.join("model.pickle");
    std::fs::write(&zip, b"PK\x03\x04\x14\0\0\0\0\0archive/data.pkl")?;
    let png = dir.join("plot.msgpack");
    std::fs::write(&png, b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR")?;
    let empty_file = dir.join("empty.msgpack");
    std::fs::write(&empty_file, b"")?;
    let empty_folder = dir.join("empty");
    std::fs::create_dir(&empty_folder)?;
    Ok(vec![
        ok(
            "a recording",
            data("corpus/eval_keeps_predictions.msgpack"),
            Kind::Recording,
        ),
        ok(
            "a recording made with --history",
            history_recording(dir)?,
            Kind::Recording,
        ),
        ok(
            "a snapshot with a trace",
            data("snapshots/real/bcrafton_cs336_training_step.pickle"),
            Kind::Snapshot,
        ),
        ok(
            "a snapshot with pinned host memory",
            data("snapshots/pinned_host.pickle"),
            Kind::Snapshot,
        ),
        ok(
            "a snapshot without a trace",
            data("snapshots/real/verl_rollout_state.pickle"),
            Kind::Snapshot,
        ),
        ok(
            "a profiler trace",
            data("traces/real/hta_rank1_of_2_v100.json.gz"),
            Kind::Trace,
        ),
        ok(
            "a memory timeline",
            data("traces/real/hta_memory_timeline.raw.json.gz"),
            Kind::MemoryTimeline,
        ),
        ok("a folder of nodes' recordings", nodes, Kind::NodeRecordings),
        ok("a folder of per-rank snapshots", ranks, Kind::RankSnapshots),
        bad(
            "a torch.save zip",
            zip,
            "not a tidemark recording, a PyTorch memory snapshot or a profiler trace: at byte 0 it holds a zip archive (torch.save writes these",
        ),
        bad(
            "a PNG",
            png,
            "not a tidemark recording, a PyTorch memory snapshot or a profiler trace: at byte 0 it holds a PNG image",
        ),
        bad(
            "an empty file",
            empty_file,
            "not a tidemark recording, a PyTorch memory snapshot or a profiler trace: the file is empty",
        ),
        bad(
            "an empty folder",
            empty_folder,
            "no tidemark recordings, per-rank snapshots or profiler traces in the folder",
        ),
        bad(
            "a missing file",
            dir.join("missing.msgpack"),
            "cannot read the file",
        ),
    ])
}

/// What the library makes of `path`: its kind and the headline that leads
/// ([`collector::headline::leading`]: a snapshot's own verdict, a folder of per-rank snapshots'
/// from the rank that stands out, else the analysis' — also for a recording with a snapshot
/// dumped next to it), or its error's message without the path.
pub fn judged(path: &Path) -> Result<(Kind, String), String> {
    use collector::analysis::analyze;
    use collector::headline::leading;
    let input = open_path(path).map_err(|err| err.what())?;
    let kind = input.kind();
    let headline = match input {
        Input::Recording(recording) | Input::NodeRecordings { recording, .. } => {
            leading(Some(&analyze(&recording)), None, None)
        }
        Input::Snapshot(snapshot) => {
            let judged = collector::snapshot::Judged::new(*snapshot);
            leading(Some(&judged.analysis), Some(&judged.verdict), None)
        }
        Input::RankSnapshots(folder) => {
            let traces = folder.recording.as_ref().map(analyze);
            leading(traces.as_ref(), None, Some(&folder))
        }
    };
    Ok((kind, headline.text))
}
