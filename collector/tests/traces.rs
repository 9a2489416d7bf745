//! PyTorch profiler files opened as recordings, against what Python computes from the same
//! files (`tests/data/traces/real/`, written by the profiler in public projects, see its
//! README): the levels per device, the number of memory events, the running sum where a trace
//! carries no totals, the rank, the steps; `collector report` gives each a verdict; and a
//! generated trace with a planted leak in forward is judged a leak in forward.

#![allow(clippy::unwrap_used)] // In tests a panic is how a failure is reported.

use std::path::{Path, PathBuf};
use std::process::Command;

use collector::analysis::{FindingKind, analyze};
use collector::open::{Input, Kind, open_path};
use collector::recording::{Phase, Recording, SeriesKey, SeriesKind};

#[path = "support/python.rs"]
mod python;
use python::python;

fn real(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/traces/real")
        .join(name)
}

/// What Python (stdlib json and gzip only) reads from a chrome trace: per device the memory
/// events and the last level (PyTorch's `Total Allocated` after the last event by time, else
/// the running sum of `Bytes` raised by the lowest it reaches), the rank and the steps.
const CHROME_FACTS: &str = r#"
import gzip, json, sys
p = sys.argv[1]
d = json.load((gzip.open if p.endswith('.gz') else open)(p, 'rt'))
ev = d['traceEvents'] if isinstance(d, dict) else d
mem = [(e['ts'], i, e['args']) for i, e in enumerate(ev) if e.get('name') == '[memory]']
mem.sort(key=lambda m: (m[0], m[1]))
devices = {}
for _, _, a in mem:
    key = 'cpu' if a['Device Type'] == 0 else str(a['Device Id'])
    devices.setdefault(key, []).append(a)
out = {}
for key, events in devices.items():
    if 'Total Allocated' in events[-1]:
        last = events[-1]['Total Allocated']
    else:
        s, low = 0, 0
        for a in events:
            s += a['Bytes']
            low = min(low, s)
        last = s - low
    out[key] = {'events': len(events), 'last': last,
                'reserved': events[-1].get('Total Reserved')}
steps = sum(1 for e in ev if e.get('ph') == 'X' and str(e.get('name', '')).startswith('ProfilerStep#'))
rank = (d.get('distributedInfo') or {}).get('rank') if isinstance(d, dict) else None
print(json.dumps({'devices': out, 'memory_events': len(mem), 'steps': steps, 'rank': rank}))
"#;

fn python_facts(script: &str, path: &Path) -> serde_json::Value {
    let out = Command::new(python())
        .arg("-c")
        .arg(script)
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn open(path: &Path) -> Recording {
    match open_path(path).unwrap() {
        Input::Recording(r) => *r,
        other => panic!("{}: opened as {:?}", path.display(), other.kind()),
    }
}

/// The recording of a real trace agrees with Python on every device's events and last level,
/// the rank and the steps; returns it.
fn agrees_with_python(name: &str) -> Recording {
    let path = real(name);
    let facts = python_facts(CHROME_FACTS, &path);
    let recording = open(&path);
    let readings = &recording.allocator;
    let edges = recording.phases.len();
    let mut gpu_events = 0;
    for (key, device) in facts["devices"].as_object().unwrap() {
        let events = device["events"].as_u64().unwrap() as usize;
        let last = device["last"].as_u64().unwrap();
        if key == "cpu" {
            let host = recording
                .series(&SeriesKey::new(SeriesKind::HostRss))
                .unwrap();
            assert_eq!(host.values.len(), events, "{name}: CPU events");
            assert_eq!(
                host.values.iter().next_back(),
                Some(last),
                "{name}: CPU level"
            );
            continue;
        }
        let d: u32 = key.parse().unwrap();
        let mine: Vec<usize> = (0..readings.len())
            .filter(|&i| readings.device(i) == d)
            .collect();
        // One reading per event, and one at every phase edge (as the probe sends them).
        assert_eq!(mine.len(), events + edges, "{name}: cuda:{d} readings");
        gpu_events += events;
        let final_reading = readings.get(*mine.last().unwrap());
        assert_eq!(final_reading.allocated, last, "{name}: cuda:{d} allocated");
        if let Some(reserved) = device["reserved"].as_u64() {
            assert_eq!(
                final_reading.reserved, reserved,
                "{name}: cuda:{d} reserved"
            );
        }
        assert!(recording.header.devices.iter().any(|x| x.index == d));
    }
    let cpu = facts["devices"]["cpu"]["events"].as_u64().unwrap_or(0) as usize;
    assert_eq!(
        gpu_events + cpu,
        facts["memory_events"].as_u64().unwrap() as usize,
        "{name}: memory events"
    );
    let rank = facts["rank"].as_u64().map(|r| r as u32);
    assert!(
        (0..readings.len()).all(|i| readings.source(i).0.rank == rank),
        "{name}: rank {rank:?}"
    );
    let mut steps: Vec<u64> = recording.phases.iter().filter_map(|e| e.step).collect();
    steps.dedup();
    assert_eq!(
        steps.len() as u64,
        facts["steps"].as_u64().unwrap(),
        "{name}: steps"
    );
    recording
}

#[test]
fn real_kineto_traces_read_as_python_reads_them() {
    // 2021: no totals (the running sum), CPU and cuda:0, whole epoch µs, six steps.
    let resnet = agrees_with_python("kineto_resnet50_2021.pt.trace.json.gz");
    assert!(
        resnet
            .notes
            .iter()
            .any(|n| n.text.contains("running sum of the events' Bytes")),
        "{:?}",
        resnet.notes
    );
    // Every step has forward (unlabelled: the stretch before autograd's backward), backward
    // (its autograd nodes, `MeanBackward1` …), zero_grad and the optimizer.
    for phase in [
        Phase::Forward,
        Phase::Backward,
        Phase::Optimizer,
        Phase::Custom("zero_grad".to_owned()),
    ] {
        let begins = resnet
            .phases
            .iter()
            .filter(|e| e.phase == phase && e.edge == collector::recording::Edge::Begin)
            .count();
        assert_eq!(begins, 6, "{phase}");
    }
    // The profiler ran on 4 V100s; the events are on cuda:0, named and sized by deviceProperties.
    assert_eq!(resnet.header.devices.len(), 1);
    assert_eq!(resnet.header.devices[0].name, "Tesla V100-DGXS-32GB");
    assert_eq!(resnet.header.devices[0].total_bytes, 34_084_028_416);
    // Rank 1 of 2 (`distributedInfo`), totals, events out of time order in the file.
    let hta = agrees_with_python("hta_rank1_of_2_v100.json.gz");
    assert_eq!(hta.header.devices[0].index, 1);
    // 2024: fractional µs after baseTimeNanoseconds (2024-09-30), no steps.
    let particle = agrees_with_python("particle_transformer_a100.json");
    assert!(particle.header.start_unix_ns >= 1_727_743_122_000_000_000);
    assert!(particle.phases.is_empty());
    // Sub-microsecond times are kept: the readings are not all on whole microseconds.
    assert!((0..particle.allocator.len()).any(|i| particle.allocator.t_ns(i) % 1000 != 0));
}

/// What Python reads from the raw memory timeline: per category (PyTorch's
/// `_CATEGORY_TO_INDEX`) the bytes after the last row, and the distinct times.
const TIMELINE_FACTS: &str = r#"
import gzip, json, sys
rows = json.load(gzip.open(sys.argv[1], 'rt'))
sizes = [0] * 8
for t, action, b, c in rows:
    sizes[c] += b
first = min(t for t, _, _, _ in rows if t >= 0)
times = {first if t < 0 else t for t, _, _, _ in rows}
print(json.dumps({'sizes': sizes, 'instants': len(times), 'rows': len(rows)}))
"#;

#[test]
fn the_real_memory_timeline_reads_as_python_reads_it() {
    let path = real("hta_memory_timeline.raw.json.gz");
    let facts = python_facts(TIMELINE_FACTS, &path);
    let sizes: Vec<u64> = facts["sizes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap().max(0) as u64)
        .collect();
    let recording = open(&path);
    assert_eq!(
        recording.allocator.len() as u64,
        facts["instants"].as_u64().unwrap()
    );
    let last = recording.allocator.last().unwrap();
    assert_eq!(last.allocated, sizes.iter().sum::<u64>());
    let categories = recording.categories.last().unwrap();
    // 0 parameter, 1 optimizer state, 5 gradient; the rest is total's remainder.
    assert_eq!(categories.parameters, sizes[0]);
    assert_eq!(categories.optimizer_state, [sizes[1]]);
    assert_eq!(categories.gradients, sizes[5]);
    assert_eq!(
        categories.rest(),
        Some(sizes[2] + sizes[3] + sizes[4] + sizes[6] + sizes[7])
    );
    for (k, name) in collector::trace::timeline::CATEGORIES.iter().enumerate() {
        let curve = recording
            .series(&SeriesKey::device(
                SeriesKind::Other(format!("category_{name}")),
                0,
            ))
            .unwrap();
        assert_eq!(curve.values.iter().next_back(), Some(sizes[k]), "{name}");
    }
}

#[test]
fn report_gives_every_real_file_a_verdict() {
    for name in [
        "kineto_resnet50_2021.pt.trace.json.gz",
        "hta_rank1_of_2_v100.json.gz",
        "particle_transformer_a100.json",
        "hta_memory_timeline.raw.json.gz",
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_collector"))
            .args(["report", "--json"])
            .arg(real(name))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let headline = json["headline"].as_str().unwrap_or_default();
        assert!(!headline.is_empty(), "{name}: {json}");
        // Judged by time window (no steps): the verdict speaks of windows, not steps — except
        // a profiler trace without steps, which is not judged on windows and says why.
        if json["analysis"]["by_step"] == false && json["input"] != "trace" {
            assert!(!headline.contains("step"), "{name}: {headline}");
        }
        if name == "particle_transformer_a100.json" {
            // One forward pass, 31 ms, no ProfilerStep: its rise is not called a leak, and its
            // device's peak is what it holds (959 cuda:0 events, not the CPU's 24).
            assert_eq!(
                headline,
                "Cannot tell yet — not enough data: the trace holds no ProfilerStep spans, so a rise within one step cannot be told from a leak"
            );
            assert_eq!(json["analysis"]["basis"], "allocated", "{json}");
            let evidence = &json["analysis"]["findings"][0]["evidence"];
            assert!(
                evidence[0]
                    .as_str()
                    .is_some_and(|e| e.starts_with("cuda:0 allocated at most 3.09 GiB, ")),
                "{evidence}"
            );
        }
        let text = Command::new(env!("CARGO_BIN_EXE_collector"))
            .arg("report")
            .arg(real(name))
            .output()
            .unwrap();
        assert!(text.status.success(), "{name}");
        assert!(
            String::from_utf8_lossy(&text.stdout).contains(headline),
            "{name}"
        );
    }
}

#[test]
fn a_leak_planted_in_forward_is_a_leak_in_forward() {
    let leaky = collector::trace::read_trace(
        tidemark_tests::traces::generated_trace(30, 1 << 20).as_bytes(),
    )
    .unwrap();
    let analysis = analyze(&leaky);
    let leak = analysis
        .findings
        .iter()
        .find(|f| f.kind == FindingKind::Leak)
        .unwrap_or_else(|| panic!("{:#?}", analysis.findings));
    assert_eq!(leak.phase, Some(Phase::Forward), "{}", leak.title);
    assert!(leak.title.contains("leak in forward"), "{}", leak.title);
    // 1 MiB a step, exactly: the totals are PyTorch's.
    let per_step = leak.growth_per_step_bytes.unwrap();
    assert!((per_step - 1_048_576.0).abs() < 1.0, "{per_step}");
    let phases: Vec<&str> = analysis.phases.iter().map(|p| p.phase.as_str()).collect();
    for phase in ["forward", "backward", "optimizer"] {
        assert!(phases.contains(&phase), "{phases:?}");
    }
    // The same job without the leak: no leak.
    let clean =
        collector::trace::read_trace(tidemark_tests::traces::generated_trace(30, 0).as_bytes())
            .unwrap();
    let analysis = analyze(&clean);
    assert!(
        analysis
            .findings
            .iter()
            .all(|f| f.kind != FindingKind::Leak),
        "{:#?}",
        analysis.findings
    );
}

#[test]
fn a_folder_of_per_rank_traces_is_one_run_with_every_rank_judged() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("rank0.pt.trace.json"),
        tidemark_tests::traces::rank_trace(30, 0, 0),
    )
    .unwrap();
    // Rank 1's, gzipped as the profiler can write it, leaks 1 MiB a step in forward.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(
        &mut gz,
        tidemark_tests::traces::rank_trace(30, 1 << 20, 1).as_bytes(),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("rank1.pt.trace.json.gz"),
        gz.finish().unwrap(),
    )
    .unwrap();
    let input = collector::open::open_path(dir.path()).unwrap();
    // Merged as nodes' recordings are, and said to be what it is (the report's JSON `input`,
    // `serve`'s kind).
    assert_eq!(input.kind(), collector::open::Kind::RankTraces);
    let collector::open::Input::NodeRecordings { recording, files } = input else {
        panic!("not one run: {:?}", input.kind());
    };
    assert_eq!(files.len(), 2);
    assert!(
        recording
            .notes
            .iter()
            .any(|n| n.text == "one run from 2 files"),
        "{:?}",
        recording.notes
    );
    let analysis = analyze(&recording);
    let ranks: Vec<(u32, Option<bool>)> =
        analysis.ranks.iter().map(|r| (r.rank, r.problem)).collect();
    assert_eq!(ranks.len(), 2, "{ranks:?}");
    let judged = |rank: u32| analysis.ranks.iter().find(|r| r.rank == rank).unwrap();
    assert!(
        judged(1).headline.contains("leak in forward"),
        "{}",
        judged(1).headline
    );
    assert!(
        judged(0).headline.starts_with("No leak"),
        "{}",
        judged(0).headline
    );
    // Each rank on its own GPU.
    let devices: Vec<u32> = recording.header.devices.iter().map(|d| d.index).collect();
    assert!(devices.contains(&0), "{devices:?}");
}

#[test]
fn bad_inputs_say_what_they_are() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, bytes: &[u8]| {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    };
    let err = |path: &Path| open_path(path).unwrap_err().to_string();
    // JSON that is no trace: the file, and what was expected.
    let config = write("config.json", br#"{"lr": 0.1, "epochs": 3}"#);
    let message = err(&config);
    assert!(
        message.contains("expected a trace (an object with traceEvents"),
        "{message}"
    );
    assert!(message.ends_with("config.json"), "{message}");
    // A trace without memory events.
    let cpu_only = write(
        "cpu.pt.trace.json",
        br#"{"traceEvents": [{"ph": "X", "name": "aten::mm", "ts": 1, "dur": 2}]}"#,
    );
    let message = err(&cpu_only);
    assert!(
        message.contains("profile_memory=True was not set?"),
        "{message}"
    );
    // export_memory_timeline's .html: a picture only.
    let html = write(
        "memory.html",
        b"<html>\n<head><meta charset=\"utf-8\" /><title>GPU Memory Timeline HTML</title></head>",
    );
    let message = err(&html);
    assert!(
        message
            .contains("export the timeline as prof.export_memory_timeline(\"memory.raw.json.gz\")"),
        "{message}"
    );
    // PaddlePaddle's [memory] events.
    let paddle = write(
        "paddle.pt.trace.json",
        br#"{"traceEvents": [{"ph": "i", "name": "[memory]", "ts": 1, "args": {"place": "Place(gpu:0)", "increase_bytes": 512}}]}"#,
    );
    let message = err(&paddle);
    assert!(message.contains("not PyTorch's profiler"), "{message}");
    // Gzip of something unknown.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, b"step,bytes\n1,2\n").unwrap();
    let csv = write("steps.csv.gz", &gz.finish().unwrap());
    let message = err(&csv);
    assert!(
        message.contains("gzip data; decompressed, at byte 0 it holds the bytes 73 74"),
        "{message}"
    );
    // What the kinds are told as.
    assert_eq!(Kind::of(br#"{"traceEvents""#), Kind::Trace);
    assert_eq!(Kind::of(b"[[-1, 1, 5"), Kind::MemoryTimeline);
    assert_eq!(Kind::of(b"\x1f\x8b\x08\0"), Kind::Compressed);
}

/// Every real file of `../shared/fixtures` that tidemark reads (a snapshot, a profiler trace or
/// memory timeline, gzipped or not) is named as the viewer's Open dialog offers
/// (`open::EXTENSIONS`): a user who opens one is shown it without switching to "all files".
#[test]
fn the_open_dialog_offers_every_real_file_tidemark_reads() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures");
    let mut read = 0;
    let mut folders = vec![fixtures];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                folders.push(path);
                continue;
            }
            let bytes = std::fs::read(&path).unwrap();
            let first = &bytes[..bytes.len().min(collector::open::KIND_BYTES)];
            let kind = match Kind::of(first) {
                Kind::Compressed => Kind::of_compressed(&bytes),
                kind => kind,
            };
            if kind == Kind::Unknown {
                continue;
            }
            read += 1;
            let extension = path.extension().unwrap().to_string_lossy().to_lowercase();
            assert!(
                collector::open::EXTENSIONS.contains(&extension.as_str()),
                "{} ({kind:?}) is not offered",
                path.display()
            );
        }
    }
    // Six snapshots and four traces.
    assert!(read >= 10, "{read} files read");
}
