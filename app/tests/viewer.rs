//! The viewer, driven through its widgets with egui_kittest, and rendered with the software
//! Vulkan renderer (lavapipe) for the image snapshots.

#![cfg(not(target_arch = "wasm32"))] // Files, threads and a GPU renderer: native only.
#![allow(clippy::unwrap_used)] // In tests a panic is how a failure is reported.

use std::io::Write as _;
use std::path::PathBuf;

use egui::accesskit::Role;
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable as _;
use tidemark_app::timeline::XAxis;
use tidemark_app::view::TraceKind;
use tidemark_app::{Tab, TidemarkApp};

fn corpus(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../collector/tests/data/corpus")
        .join(name)
}

fn golden() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../collector/tests/data/golden_v1.msgpack")
}

/// Clicks the toolbar's checkbox `label` (it comes before the legend's entry of the same name).
fn click_checkbox(harness: &mut Harness<'static, TidemarkApp>, label: &str) {
    harness
        .query_all_by_role_and_label(Role::CheckBox, label)
        .next()
        .unwrap()
        .click();
}

fn harness(app: TidemarkApp) -> Harness<'static, TidemarkApp> {
    Harness::builder()
        .with_size(egui::vec2(1280.0, 800.0))
        .build_ui_state(|ui, app: &mut TidemarkApp| app.show(ui), app)
}

fn snapshot_harness(app: TidemarkApp) -> Harness<'static, TidemarkApp> {
    Harness::builder()
        .with_size(egui::vec2(1280.0, 800.0))
        .wgpu()
        .build_ui_state(|ui, app: &mut TidemarkApp| app.show(ui), app)
}

#[test]
fn the_example_opens_with_its_verdict_and_phases() {
    let mut harness = harness(TidemarkApp::default());
    harness.run();
    // The corpus job keeps eval predictions: the verdict names the leak and the phase.
    // In the tab bar, and in the caption under the timeline.
    assert!(harness.query_all_by_label_contains("leak").next().is_some());
    harness.get_by_label("Timeline").click();
    harness.get_by_label("Phases").click();
    harness.run();
    assert_eq!(harness.state().tab, Tab::Phases);
    // Each phase has its row in the table (and its entry in the charts' legends).
    for phase in ["eval", "forward", "backward", "optimizer"] {
        assert!(
            harness.query_all_by_label(phase).next().is_some(),
            "{phase}"
        );
    }
    harness.get_by_label("share of growth");
    harness.get_by_label("Verdict").click();
    harness.run();
    harness.get_by_label("What to try");
    harness.get_by_label("Run info").click();
    harness.run();
    harness.get_by_label_contains("eval_keeps_predictions.py");
}

#[test]
fn curves_toggle_and_the_axis_switches_to_steps() {
    let mut harness = harness(TidemarkApp::default());
    harness.run();
    assert!(harness.state().runs()[0].timeline.is_shown(TraceKind::Host));
    click_checkbox(&mut harness, "host memory");
    harness.run();
    assert!(!harness.state().runs()[0].timeline.is_shown(TraceKind::Host));
    assert_eq!(harness.state().runs()[0].timeline.x_axis, XAxis::Time);
    harness.get_by_label("steps").click();
    harness.run();
    assert_eq!(harness.state().runs()[0].timeline.x_axis, XAxis::Steps);
    click_checkbox(&mut harness, "phase bands");
    harness.run();
    assert!(!harness.state().runs()[0].timeline.phase_bands);
}

#[test]
fn a_bad_file_shows_what_is_wrong_and_the_other_runs_stay_usable() {
    let mut app = TidemarkApp::empty();
    app.open_path(&corpus("healthy.msgpack"));
    app.open_bytes("/tmp/picture.msgpack", b"\x89PNG\r\n\x1a\n0000");
    let mut harness = harness(app);
    harness.run();
    harness.get_by_label("This file cannot be opened");
    let error = harness.get_by_label_contains("/tmp/picture.msgpack");
    assert!(format!("{error:?}").contains("PNG"), "{error:?}");
    // The good run is one click away, and works.
    harness.get_by_label("healthy.msgpack").click();
    harness.run();
    assert_eq!(harness.state().current(), 0);
    assert!(
        harness
            .query_all_by_label_contains("No leak")
            .next()
            .is_some()
    );
    // A missing file is an error tab too, naming the file.
    harness
        .state_mut()
        .open_path(&PathBuf::from("/nonexistent/run.msgpack"));
    harness.run();
    harness.get_by_label_contains("/nonexistent/run.msgpack: cannot read the file");
}

#[test]
fn compare_states_the_difference_in_growth_per_step() {
    let mut app = TidemarkApp::empty();
    app.open_path(&corpus("forward_keeps_losses.msgpack"));
    app.open_path(&corpus("healthy.msgpack"));
    app.select(0);
    let mut harness = harness(app);
    harness.run();
    harness.get_by_label("compare with").click();
    harness.run();
    // The tab and the entry in the open list carry the same name: the entry is the last.
    harness
        .query_all_by_label("healthy.msgpack")
        .last()
        .unwrap()
        .click();
    harness.run();
    assert_eq!(harness.state().compare, Some(1));
    harness.get_by_label_contains("growth per step:");
    // The overlay is drawn as its own legend entry.
    harness.get_by_label_contains("— healthy.msgpack");
}

#[test]
fn recent_files_remember_what_was_opened() {
    let mut app = TidemarkApp::empty();
    app.open_path(&corpus("healthy.msgpack"));
    app.open_path(&corpus("forward_keeps_losses.msgpack"));
    app.open_path(&PathBuf::from("/nonexistent/run.msgpack"));
    let recent = app.recent();
    assert_eq!(recent.len(), 2, "{recent:?}");
    assert!(recent[0].ends_with("forward_keeps_losses.msgpack"));
    assert!(recent[1].ends_with("healthy.msgpack"));
}

/// A file that holds `start` (in a folder that lives as long as the first value), still open
/// for writing, and the app following it after its first two frames.
fn following(
    start: &[u8],
) -> (
    tempfile::TempDir,
    std::fs::File,
    Harness<'static, TidemarkApp>,
) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.msgpack");
    let mut file = std::fs::File::create(&path).unwrap();
    file.write_all(start).unwrap();
    file.flush().unwrap();
    let mut app = TidemarkApp::empty();
    app.follow_path(&path);
    let mut harness = harness(app);
    harness.run_steps(2);
    (dir, file, harness)
}

#[test]
fn a_followed_file_is_shown_as_it_grows() {
    let bytes = std::fs::read(corpus("eval_keeps_predictions.msgpack")).unwrap();
    let half = bytes.len() / 2;
    let (_dir, mut file, mut harness) = following(&bytes[..half]);
    let samples = |h: &Harness<'_, TidemarkApp>| {
        h.state().runs()[0]
            .run
            .as_ref()
            .map(|r| r.recording.sample_count())
            .unwrap_or(0)
    };
    let first = samples(&harness);
    assert!(first > 0);
    harness.get_by_label_contains("following");

    file.write_all(&bytes[half..]).unwrap();
    file.flush().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    harness.run_steps(2);
    let whole = collector::recording::read_recording(&bytes).unwrap();
    assert_eq!(samples(&harness), whole.sample_count());
    assert!(samples(&harness) > first);
    harness.get_by_label_contains("the recording is complete");
}

/// While a followed file grows, it is analyzed again on a thread of its own (the frames go on
/// meanwhile), and what that analysis found is what the run shows once it is done: the
/// analysis of everything read.
#[test]
fn a_growing_file_is_analyzed_again_beside_the_frames() {
    let bytes = std::fs::read(corpus("eval_keeps_predictions.msgpack")).unwrap();
    // Everything but the end record: the job still runs.
    let mut reader = collector::recording::Reader::new(&bytes).unwrap();
    let mut before_end = reader.offset();
    while let Some(record) = reader.read_next().unwrap() {
        if matches!(record, collector::recording::Record::End(_)) {
            break;
        }
        before_end = reader.offset();
    }
    let half = before_end / 2;
    let (_dir, mut file, mut harness) = following(&bytes[..half]);
    let first = harness.state().runs()[0]
        .run
        .as_ref()
        .unwrap()
        .analysis
        .clone();
    file.write_all(&bytes[half..before_end]).unwrap();
    file.flush().unwrap();
    let whole = collector::recording::read_recording(&bytes[..before_end]).unwrap();
    // Polls every 250 ms, analyses at most every second: give it time, however busy the machine.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        std::thread::sleep(std::time::Duration::from_millis(50));
        harness.run_steps(1);
        let run = harness.state().runs()[0].run.as_ref().unwrap();
        if run.recording.sample_count() == whole.sample_count()
            && run.analysis == collector::analysis::analyze(&run.recording)
        {
            assert_ne!(run.analysis, first, "the analysis is of the grown file");
            assert!(run.recording.end.is_none());
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the grown file's analysis never arrived: {} of {} samples read, the analysis {}",
            run.recording.sample_count(),
            whole.sample_count(),
            if run.analysis == first {
                "the first"
            } else {
                "another"
            }
        );
    }
    harness.get_by_label_contains("following: last data");
}

/// Ticking Follow for a recording that is already open re-reads it from its header (it used to
/// stop with "corrupt unknown record at byte 0"); a snapshot cannot be followed.
#[test]
fn follow_ticked_on_an_open_recording_keeps_it() {
    let path = corpus("eval_keeps_predictions.msgpack");
    let mut app = TidemarkApp::empty();
    app.open_path(&path);
    let samples = app.runs()[0].run.as_ref().unwrap().recording.sample_count();
    app.set_follow(true);
    let mut harness = harness(app);
    harness.run_steps(2);
    let run = harness.state().runs()[0].run.as_ref().unwrap();
    assert_eq!(run.recording.sample_count(), samples);
    harness.get_by_label_contains("following: the recording is complete");
    assert!(
        harness
            .query_by_label_contains("following stopped")
            .is_none()
    );

    let mut app = TidemarkApp::empty();
    app.open_path(&snapshot_file("mini_snapshot.pickle"));
    app.set_follow(true);
    let mut snapshot = self::harness(app);
    snapshot.run_steps(2);
    let run = snapshot.state().runs()[0].run.as_ref().unwrap();
    assert!(run.snapshot.is_some(), "the Blocks tab stays");
    assert!(snapshot.query_by_label_contains("following").is_none());
}

#[test]
fn snapshot_timeline_with_phases() {
    let mut app = TidemarkApp::empty();
    app.open_path(&golden());
    let mut harness = snapshot_harness(app);
    harness.run();
    harness.snapshot("timeline_with_phases");
}

#[test]
fn snapshot_attribution() {
    let mut app = TidemarkApp::default();
    app.tab = Tab::Phases;
    let mut harness = snapshot_harness(app);
    harness.run();
    harness.snapshot("attribution");
}

#[test]
fn snapshot_error() {
    let mut app = TidemarkApp::empty();
    app.open_bytes("/data/run.msgpack", b"TIDEMARK\x93\xa6header\x01");
    let mut harness = snapshot_harness(app);
    harness.run();
    harness.snapshot("error");
}

fn snapshot_file(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../collector/tests/data/snapshots")
        .join(name)
}

#[test]
fn a_pytorch_snapshot_opens_with_blocks_suspects_and_segments() {
    let mut app = TidemarkApp::empty();
    app.open_path(&snapshot_file("mini_snapshot.pickle"));
    let mut harness = harness(app);
    harness.run();
    let run = harness.state().runs()[0].run.as_ref().unwrap();
    assert_eq!(run.snapshot.as_ref().unwrap().snapshot.entries.len(), 50);
    assert!(!run.recording.allocator.is_empty(), "the allocated curve");
    // The verdict and phases work as for recordings; the Blocks tab is there.
    harness.get_by_label("Blocks").click();
    harness.run();
    assert_eq!(harness.state().tab, Tab::Blocks);
    // No phase repeats in its trace: the sites alive from many moments are not called leaks.
    harness.get_by_label("Alive at the end, allocated at many moments (the trace has no steps)");
    harness.get_by_label("Segments at the snapshot");
    harness.get_by_label_contains("384 MiB in 24 blocks from ");
    harness.get_by_label_contains("cuda:0: 14 segments, 402 MiB reserved");
    // One row per allocation site, the largest first, named by the user's code (not by torch's
    // `convert` under it); expanding it lists the stack and blocks.
    let row = harness.get_by_label_contains("16 blocks   cuda:0   main (");
    row.click();
    harness.run();
    assert_eq!(
        harness
            .query_all_by_label_contains("24.0 MiB  at 0x")
            .count(),
        8
    );
    // Folded again, so that the next row's stack fits the scroll area.
    harness
        .get_by_label_contains("16 blocks   cuda:0   main (")
        .click();
    harness.run();
    let row = harness.get_by_label_contains("1 block   cuda:0   get_input (");
    row.click();
    harness.run();
    harness.get_by_label_contains(
        "main (/home/drisspg/meta/transformer_nuggets/transformer_nuggets/misc/attention.py:361)",
    );
    // A click on the timeline pins a time; the Blocks tab offers it.
    harness.get_by_label("Timeline").click();
    harness.run();
    let at = egui::pos2(700.0, 400.0);
    harness.event(egui::Event::PointerMoved(at));
    harness.run();
    for pressed in [true, false] {
        harness.event(egui::Event::PointerButton {
            pos: at,
            button: egui::PointerButton::Primary,
            pressed,
            modifiers: egui::Modifiers::NONE,
        });
        harness.run();
    }
    let pinned = harness.state().runs()[0].timeline.pinned_ns;
    assert!(pinned.is_some(), "a click pins a time");
    harness.get_by_label("Blocks").click();
    harness.run();
    harness
        .get_by_label_contains("at the time pinned on the timeline")
        .click();
    harness.run();
    assert_eq!(
        harness.state().runs()[0].blocks.at_us,
        pinned.map(|t| (t / 1000) as i64)
    );
    // Back to the snapshot itself.
    harness.get_by_label("at the snapshot (the end)").click();
    harness.run();
    assert_eq!(harness.state().runs()[0].blocks.at_us, None);
    harness.get_by_label_contains("384 MiB in 24 blocks");
    // At the start of the trace nothing of the trace is alive yet.
    harness.state_mut().current_run_mut().unwrap().blocks.at_us = Some(0);
    harness.run();
    harness.get_by_label_contains("0 B in 0 blocks");
}

/// A real snapshot without a trace (from another project): it opens on its blocks, grouped by
/// allocation site, under the same headline the report gives — never a green "No leak".
#[test]
fn a_snapshot_without_a_trace_opens_on_its_blocks_with_the_reports_headline() {
    let path = snapshot_file("real/verl_rollout_state.pickle");
    let mut app = TidemarkApp::empty();
    app.open_path(&path);
    let mut harness = harness(app);
    harness.run();
    assert_eq!(harness.state().tab, Tab::Blocks);
    let run = harness.state().runs()[0].run.as_ref().unwrap();
    let view = run.snapshot.as_ref().unwrap();
    let headline = view.verdict.headline.clone();
    assert!(
        headline.starts_with("At the snapshot: 23.8 GiB in use of 24.4 GiB reserved on cuda:0; the most by __init__ (vllm_rollout/vllm_rollout_spmd.py:114), in the job's pool (0, 2) "),
        "{headline}"
    );
    harness.get_by_label(&headline);
    assert!(harness.query_by_label_contains("No leak").is_none());
    assert!(
        harness.query_by_label_contains("0.000000").is_none(),
        "no time slider without times"
    );
    harness.get_by_label_contains("Live blocks at the snapshot");
    harness.get_by_label_contains("23.7 GiB in 543 blocks from");
    // 24 KV-cache blocks of 866 MiB (865 MiB asked) are one row, not 24: the row of the user's code (verl's)
    // that allocates the cache through vLLM, in the pool vLLM keeps it in (the 315 blocks the same
    // code allocates in another pool are a row of their own).
    let row = harness.get_by_label_contains(
        "24 blocks   cuda:0   __init__ (vllm_rollout/vllm_rollout_spmd.py:114), in the job's pool (0, 2)",
    );
    harness.get_by_label_contains(
        "315 blocks   cuda:0   __init__ (vllm_rollout/vllm_rollout_spmd.py:114), in the job's pool (0, 1)",
    );
    row.click();
    harness.run();
    assert_eq!(
        harness
            .query_all_by_label_contains("865 MiB  at 0x")
            .count(),
        24
    );
    // The Verdict tab says what the snapshot holds first.
    harness.get_by_label("Verdict").click();
    harness.run();
    harness.get_by_label("What the snapshot holds");
    harness.get_by_label_contains("- no trace: the snapshot holds the segments only");
    assert!(
        harness
            .query_by_label_contains("record a longer run")
            .is_none()
    );
}

#[test]
fn a_broken_snapshot_opens_as_an_error_naming_it() {
    let bytes = std::fs::read(snapshot_file("mini_snapshot.pickle")).unwrap();
    let mut file = tempfile::Builder::new()
        .suffix(".pickle")
        .tempfile()
        .unwrap();
    file.write_all(&bytes[..bytes.len() / 2]).unwrap();
    let mut app = TidemarkApp::empty();
    app.open_path(file.path());
    let mut harness = harness(app);
    harness.run();
    harness.get_by_label("This file cannot be opened");
    harness.get_by_label_contains("truncated");
    assert!(harness.query_by_label("Blocks").is_none());
}

/// A recording made with `--history` opens with the snapshot dumped next to it: the timeline
/// first, and a Blocks tab that says which file and when it was dumped.
#[test]
fn a_recording_opens_with_the_snapshot_dumped_at_its_oom() {
    let dir = tempfile::tempdir().unwrap();
    let mut recording =
        collector::recording::read_file(&corpus("eval_keeps_predictions.msgpack")).unwrap();
    let snapshot = dir.path().join("run.rank0.oom.pickle");
    std::fs::copy(snapshot_file("mini_snapshot.pickle"), &snapshot).unwrap();
    recording
        .snapshots
        .push(collector::recording::SnapshotFile {
            t_ns: 1,
            origin: collector::recording::Origin {
                pid: 1,
                rank: Some(0),
            },
            reason: "oom".to_owned(),
            // Written on another machine: found beside the recording by its name.
            path: "/elsewhere/run.rank0.oom.pickle".to_owned(),
        });
    let path = dir.path().join("run.msgpack");
    collector::recording::write_file(&path, &recording).unwrap();

    let mut app = TidemarkApp::empty();
    app.open_path(&path);
    assert_eq!(app.tab, Tab::Timeline, "a recording opens on its timeline");
    let run = app.runs()[0].run.as_ref().unwrap();
    let view = run.snapshot.as_ref().expect("the paired snapshot");
    assert_eq!(view.paired.as_ref().unwrap().1, "oom");
    app.tab = Tab::Blocks;
    let mut harness = harness(app);
    harness.run();
    harness.get_by_label_contains("The allocator at the out-of-memory error");
    harness.get_by_label_contains("run.rank0.oom.pickle");
}

/// `ranks.msgpack` in `dir`: `ranks` ranks of `command` (pids 100, 101, …), 20 forward steps
/// each, every edge carrying the rank's host memory `rss(rank, step)`.
fn ranks_file(
    dir: &std::path::Path,
    command: &[&str],
    ranks: u32,
    rss: impl Fn(u32, u64) -> u64,
) -> PathBuf {
    use collector::recording::{Origin, Recording};
    let mut recording = Recording::new(tidemark_tests::header(command));
    for rank in 0..ranks {
        let origin = Origin {
            pid: 100 + rank,
            rank: Some(rank),
        };
        for record in tidemark_tests::forward_steps(origin, 20, 10, 1, |step| rss(rank, step)) {
            recording.push(record);
        }
    }
    let path = dir.join("ranks.msgpack");
    collector::recording::write_file(&path, &recording).unwrap();
    path
}

/// Several ranks' host memory, each as its probe read it at its edges: one curve per rank, and
/// the rank picker lists them.
#[test]
fn each_rank_gets_its_own_host_memory_curve() {
    let dir = tempfile::tempdir().unwrap();
    let path = ranks_file(dir.path(), &["torchrun", "train.py"], 2, |rank, step| {
        (1 << 30) + u64::from(rank) * step * (8 << 20)
    });
    let mut app = TidemarkApp::empty();
    app.open_path(&path);
    let run = app.runs()[0].run.as_ref().unwrap();
    assert_eq!(
        run.view.origins,
        vec!["rank 0".to_owned(), "rank 1".to_owned()]
    );
    let hosts: Vec<_> = run
        .view
        .traces
        .iter()
        .filter(|t| t.kind == TraceKind::Host)
        .map(|t| t.origin.clone())
        .collect();
    assert_eq!(
        hosts,
        vec![Some("rank 0".to_owned()), Some("rank 1".to_owned())]
    );
    // Each drawn in its own shade of the host colour, so that the legend tells them apart.
    let colors: Vec<egui::Color32> = run
        .view
        .traces
        .iter()
        .filter(|t| t.kind == TraceKind::Host)
        .map(tidemark_app::style::curve_color)
        .collect();
    assert_eq!(colors[0], tidemark_app::style::trace_color(TraceKind::Host));
    assert_ne!(colors[0], colors[1]);
    assert!(
        run.analysis.findings[0].title.starts_with("Rank 1: "),
        "{}",
        run.analysis.findings[0].title
    );
}

/// The steps axis ends where the last step ends: a 150-step run whose job lingers 100 s after
/// its last step is not drawn to step 250.
#[test]
fn the_steps_axis_ends_at_the_last_step() {
    use collector::recording::{
        Chunk, Column, Edge, Origin, Phase, Record, Recording, SeriesKey, SeriesKind,
    };
    let mut recording = Recording::new(tidemark_tests::header(&["python", "train.py"]));
    let origin = Origin { pid: 1, rank: None };
    let s = 1_000_000_000u64;
    for step in 0..150u64 {
        for (k, edge) in [Edge::Begin, Edge::End].into_iter().enumerate() {
            let t = step * s + k as u64 * s / 2;
            recording.push(Record::Phase(tidemark_tests::edge(
                t,
                edge,
                Phase::Forward,
                Some(step),
                origin,
            )));
        }
    }
    recording.push(Record::Chunk(Chunk {
        times_ns: vec![0, 250 * s],
        columns: vec![Column {
            series: SeriesKey::new(SeriesKind::HostRss),
            values: vec![1 << 30, 1 << 30],
            valid: None,
        }],
    }));
    let run = tidemark_app::Run::new(recording);
    let steps = &run.view.steps;
    assert!(steps.is_available());
    assert_eq!(run.view.duration_ns, 250 * s);
    let end = steps.end_ns(run.view.duration_ns);
    assert_eq!(end, 150 * s, "the end of step 149");
    assert!((steps.step_at(end as f64) - 150.0).abs() < 1e-9);
}

/// Two nodes' recordings opened as one run (`tidemark --one-run`): the ranks are judged
/// together; a file of another job is named in the run's warnings, and the rest opens.
#[test]
fn two_nodes_open_as_one_run() {
    let dir = tempfile::tempdir().unwrap();
    let node = |rank, command| node_recording(dir.path(), rank, command);
    let paths = vec![node(0, "train"), node(1, "train"), node(2, "other")];
    let mut app = TidemarkApp::empty();
    app.open_as_one_run(&paths);
    let open = &app.runs()[0];
    assert!(open.name.ends_with("+ 2 more (one run)"), "{}", open.name);
    let run = open.run.as_ref().unwrap();
    let ranks: Vec<u32> = run.analysis.ranks.iter().map(|r| r.rank).collect();
    assert_eq!(ranks, vec![0, 1], "the same pid on two nodes is two ranks");
    assert!(run.analysis.findings[0].title.starts_with("Rank 1: "));
    assert!(
        run.recording
            .warnings
            .iter()
            .any(|w| w.contains("other-2.msgpack") && w.contains("another job")),
        "{:?}",
        run.recording.warnings
    );
}

/// A file dropped on the window, as the native integration hands it over.
#[derive(Debug)]
struct Dropped(PathBuf);

impl egui::DroppedFile for Dropped {
    fn path(&self) -> &std::path::Path {
        &self.0
    }
    fn bytes(&self) -> Result<Vec<u8>, String> {
        std::fs::read(&self.0).map_err(|e| e.to_string())
    }
}

/// A node's recording of `command` (`tidemark_tests::inputs::node_recording`), written to `dir`.
fn node_recording(dir: &std::path::Path, rank: u32, command: &str) -> PathBuf {
    tidemark_tests::inputs::node_recording(dir, rank, command).unwrap()
}

/// Two nodes' recordings of one job (hosts node-0 and node-1), rank 1 growing.
fn two_nodes(dir: &std::path::Path) -> Vec<PathBuf> {
    (0..2)
        .map(|rank| node_recording(dir, rank, "train"))
        .collect()
}

/// A window with `paths` dropped on it together, once their background reads have opened
/// `tabs` tabs (a few frames more, so that nothing else arrives).
fn dropped_on_the_window(paths: &[PathBuf], tabs: usize) -> Harness<'static, TidemarkApp> {
    let mut harness = harness(TidemarkApp::empty());
    harness.run();
    for path in paths {
        harness
            .input_mut()
            .dropped_files
            .push(std::sync::Arc::new(Dropped(path.clone())));
    }
    for _ in 0..500 {
        harness.step();
        if harness.state().runs().len() >= tabs {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    for _ in 0..5 {
        harness.step();
    }
    harness
}

#[test]
fn nodes_dropped_together_or_their_folder_open_as_one_run() {
    let dir = tempfile::tempdir().unwrap();
    let paths = two_nodes(dir.path());
    let harness = dropped_on_the_window(&paths, 1);
    assert_eq!(harness.state().runs().len(), 1, "one run, not two tabs");
    let open = &harness.state().runs()[0];
    assert!(open.name.ends_with("+ 1 more (one run)"), "{}", open.name);
    let run = open.run.as_ref().unwrap();
    let ranks: Vec<u32> = run.analysis.ranks.iter().map(|r| r.rank).collect();
    assert_eq!(ranks, [0, 1]);

    // The folder holding them: the same run.
    let mut app = TidemarkApp::empty();
    app.open_path(dir.path());
    let run = app.runs()[0].run.as_ref().unwrap();
    let ranks: Vec<u32> = run.analysis.ranks.iter().map(|r| r.rank).collect();
    assert_eq!(ranks, [0, 1]);
    assert!(run.analysis.findings[0].title.starts_with("Rank 1: "));

    // Two recordings of one host (before and after a fix) dropped together stay two.
    let other = tempfile::tempdir().unwrap();
    let mut same_host = Vec::new();
    for (i, path) in paths.iter().enumerate() {
        let mut r = collector::recording::read_file(path).unwrap();
        r.header.host = "laptop".to_owned();
        let p = other.path().join(format!("{i}.msgpack"));
        collector::recording::write_file(&p, &r).unwrap();
        same_host.push(p);
    }
    let apart = dropped_on_the_window(&same_host, 2);
    assert_eq!(apart.state().runs().len(), 2);
}

/// One of the collector's test recordings (`collector/tests/data`), opened and drawn.
fn opened_in_a_window(name: &str) -> Harness<'static, TidemarkApp> {
    let mut app = TidemarkApp::empty();
    app.open_path(
        &PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../collector/tests/data")
            .join(name),
    );
    let mut harness = harness(app);
    harness.run();
    harness
}

#[test]
fn categories_are_stacked_under_the_curves_and_toggle() {
    let mut harness = opened_in_a_window("golden_v1_2.msgpack");
    let run = harness.state().runs()[0].run.as_ref().unwrap();
    assert_eq!(run.view.categories.len(), 2, "cuda:0 and the host");
    // Each layer of the stack has its legend entry.
    for name in ["parameters", "+ gradients", "+ optimizer state"] {
        assert!(harness.query_all_by_label(name).next().is_some(), "{name}");
    }
    click_checkbox(&mut harness, "categories");
    harness.run();
    assert!(!harness.state().runs()[0].timeline.categories);
    assert!(
        harness
            .query_all_by_label("+ optimizer state")
            .next()
            .is_none()
    );
}

/// A host job's C heap read over its first steps only: the phase table says how many of the
/// occurrences observed it measured, and hovered, why the others are not in it.
#[test]
fn the_phase_table_counts_the_occurrences_measured_of_those_observed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.msgpack");
    let recording = tidemark_tests::forward_keeps_on_the_host(300, 3, |step, _| step < 100);
    collector::recording::write_file(&path, &recording).unwrap();
    let mut app = TidemarkApp::empty();
    app.open_path(&path);
    app.tab = Tab::Phases;
    let mut harness = harness(app);
    harness.run();
    let run = harness.state().runs()[0].run.as_ref().unwrap();
    let forward = run
        .analysis
        .phases
        .iter()
        .find(|p| p.phase == collector::recording::Phase::Forward)
        .unwrap();
    // Forward's and backward's rows.
    let count = format!("{} of 300", forward.occurrences);
    assert_eq!(harness.query_all_by_label(&count).count(), 2);
    harness.query_all_by_label(&count).next().unwrap().hover();
    harness.run();
    harness.get_by_label_contains("300 observed; the memory was read at both edges of");
}

/// The steps whose phases the probe did not observe (a sample of a long loop's short steps is)
/// are drawn behind the phase bands, with their legend entry, and go with the bands.
#[test]
fn steps_not_observed_are_drawn_behind_the_phase_bands() {
    const UNOBSERVED: &str = "steps not observed (a sample of short steps is)";
    let mut harness = opened_in_a_window("golden_v1_5.msgpack");
    let run = harness.state().runs()[0].run.as_ref().unwrap();
    assert_eq!(
        run.view.unobserved,
        [(60_000_000, 140_000_000), (150_000_000, 180_000_000)]
    );
    assert!(harness.query_all_by_label(UNOBSERVED).next().is_some());
    click_checkbox(&mut harness, "phase bands");
    harness.run();
    assert!(harness.query_all_by_label(UNOBSERVED).next().is_none());
}

#[test]
fn the_verdict_is_drawn_on_the_timeline_with_a_caption() {
    let mut harness = harness(TidemarkApp::default());
    harness.run();
    // The embedded example leaks in eval: the baseline, its trend and the caption say so.
    for name in ["step baseline", "trend after warm-up"] {
        assert!(harness.query_all_by_label(name).next().is_some(), "{name}");
    }
    harness.get_by_label_contains("dots: host memory at the start of each step, line: its trend");
    let run = harness.state().runs()[0].run.as_ref().unwrap();
    assert_eq!(
        run.view.verdict.problem_phase,
        Some(collector::recording::Phase::Eval)
    );
    assert!(run.view.verdict.baseline.len() >= 50);
    click_checkbox(&mut harness, "verdict");
    harness.run();
    assert!(!harness.state().runs()[0].timeline.verdict);
    assert!(harness.query_all_by_label("step baseline").next().is_none());
}

#[test]
fn save_image_writes_the_window_as_a_png() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("view.png");
    let mut app = TidemarkApp::default();
    app.image_destination = Some(file.clone());
    let mut harness = snapshot_harness(app);
    harness.run();
    harness.get_by_label("Save image").click();
    // The click's frame asks for the screenshot, the next takes it, the one after saves it.
    for _ in 0..4 {
        harness.run();
    }
    harness.get_by_label_contains("saved ");
    let bytes = std::fs::read(&file).unwrap();
    let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
    let reader = decoder.read_info().unwrap();
    let info = reader.info();
    assert!(
        info.width >= 1280 && info.height >= 800,
        "{}×{}",
        info.width,
        info.height
    );
    assert_eq!(info.color_type, png::ColorType::Rgba);
}

#[test]
fn an_ooms_marker_tells_its_numbers_and_its_cause() {
    let mut app = TidemarkApp::empty();
    app.open_path(&golden());
    let harness = harness(app);
    let run = harness.state().runs()[0].run.as_ref().unwrap();
    let oom = run
        .view
        .events
        .iter()
        .find(|e| e.kind == tidemark_app::view::EventKind::Oom)
        .unwrap();
    assert!(
        oom.text.contains("tried to allocate 2.00 GiB"),
        "{}",
        oom.text
    );
    assert!(
        oom.text.contains("cause: too big from the start"),
        "{}",
        oom.text
    );
}

#[test]
fn small_multiples_show_one_timeline_per_rank_on_one_scale() {
    // Four ranks in one recording; rank 2 grows.
    let dir = tempfile::tempdir().unwrap();
    let path = ranks_file(dir.path(), &["torchrun"], 4, |rank, step| {
        (1 << 30) + if rank == 2 { step * (16 << 20) } else { 0 }
    });
    let mut app = TidemarkApp::empty();
    app.open_path(&path);
    let mut harness = harness(app);
    harness.run();
    click_checkbox(&mut harness, "per rank");
    harness.run();
    assert!(harness.state().runs()[0].timeline.per_rank);
    for rank in 0..4 {
        harness.get_by_label(&format!("rank {rank}: host memory"));
    }
}

#[test]
fn snapshot_projected_oom() {
    use tidemark_tests::{GIB, MIB};
    // 300 MiB a step from 40 GiB on an 80 GiB GPU: the trend reaches it some 38 steps on.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leak.msgpack");
    collector::recording::write_file(&path, &tidemark_tests::gpu_leak(100, 40 * GIB, 300 * MIB))
        .unwrap();
    let mut app = TidemarkApp::empty();
    app.open_path(&path);
    let mut harness = snapshot_harness(app);
    harness.run();
    let run = harness.state().runs()[0].run.as_ref().unwrap();
    let projected = run.view.verdict.projected.unwrap();
    assert!((130..=145).contains(&projected.step), "{}", projected.step);
    harness.get_by_label(&format!(
        "projected out of memory at step {}",
        projected.step
    ));
    harness.get_by_label("projected: the trend reaches the capacity");
    harness.get_by_label_contains("(marked)");
    harness.snapshot("projected_oom");
    // On the steps axis too, at the projected step itself.
    harness.get_by_label("steps").click();
    harness.run();
    assert_eq!(harness.state().runs()[0].timeline.x_axis, XAxis::Steps);
    harness.get_by_label(&format!(
        "projected out of memory at step {}",
        projected.step
    ));
}

#[test]
fn snapshot_suspects_marked() {
    // A real snapshot (mini_snapshot.pickle): one suspect, 16 blocks of 16 MiB alive at the end.
    let mut app = TidemarkApp::empty();
    app.open_path(&snapshot_file("mini_snapshot.pickle"));
    let mut harness = snapshot_harness(app);
    harness.run();
    let run = harness.state().runs()[0].run.as_ref().unwrap();
    let marks = &run.view.verdict.suspects;
    assert_eq!(marks.len(), 1);
    assert_eq!(marks[0].points.len(), 16);
    // Each mark sits on the allocated curve, inside the trace.
    let end = run.recording.duration_ns();
    for &(t, y) in &marks[0].points {
        assert!(t <= end);
        assert!(y > 0.0);
    }
    // Named by the user's code (`main`), not by torch's `convert` under it.
    harness.get_by_label("allocated at 16 times, alive at the end: main (misc/attention.py:358) (256 MiB in 16 blocks)");
    harness.get_by_label_contains(
        "marked: where the blocks of 1 site still alive at the end were allocated (the trace has no steps: what one step holds and a leak look alike)",
    );
    harness.snapshot("snapshot_suspects");
}

#[test]
fn a_folder_of_per_rank_snapshots_opens_as_one_run() {
    // Built from real snapshots: ranks 0 and 2 with a trace, rank 1 holding much more without
    // one, rank 3 cut short.
    let real = snapshot_file("real");
    let dir = tempfile::tempdir().unwrap();
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
        std::fs::copy(real.join(from), dir.path().join(to)).unwrap();
    }
    let legacy = std::fs::read(real.join("flexgen_oom_legacy_history.pickle")).unwrap();
    std::fs::write(
        dir.path().join("rank3_memory_snapshot.pickle"),
        &legacy[..5000],
    )
    .unwrap();
    let mut app = TidemarkApp::empty();
    app.open_path(dir.path());
    let mut harness = harness(app);
    harness.run();
    let run = harness.state().runs()[0].run.as_ref().unwrap();
    let folder = run.rank_folder.as_ref().unwrap();
    assert_eq!(
        folder.rows.iter().map(|r| r.rank).collect::<Vec<_>>(),
        [0, 1, 2, 3]
    );
    let on_timeline: Vec<u32> = run.analysis.ranks.iter().map(|r| r.rank).collect();
    assert_eq!(on_timeline, [0, 2], "the traces, each rank judged");
    // The headline, and the caption under the timeline that starts with it.
    assert_eq!(
        harness
            .query_all_by_label_contains("Imbalance: rank 1 peaks at 23.2 GiB")
            .count(),
        2
    );
    assert!(
        run.view
            .verdict
            .caption
            .starts_with("Imbalance: rank 1 peaks at 23.2 GiB")
    );
    // One small timeline per rank with a trace.
    click_checkbox(&mut harness, "per rank");
    harness.run();
    assert!(harness.state().runs()[0].timeline.per_rank);
    for rank in [0, 2] {
        assert!(
            harness
                .query_all_by_label_contains(&format!("rank {rank}: "))
                .next()
                .is_some(),
            "rank {rank}'s timeline"
        );
    }
    // The Verdict tab compares the ranks, and names the file that cannot be read.
    harness.get_by_label("Verdict").click();
    harness.run();
    harness.get_by_label_contains("Per-rank snapshots in ");
    // Rank 1's allocated and peak.
    assert_eq!(harness.query_all_by_label("23.2 GiB").count(), 2);
    harness.get_by_label_contains("rank1_memory_snapshot.pickle (not on the timeline): ");
    harness.get_by_label_contains("rank3_memory_snapshot.pickle: ");
}

/// A followed run grows: its curves extended by what arrived are the curves of the whole
/// recording opened at once; its analysis is made again only when asked.
#[test]
fn a_grown_run_draws_what_the_whole_recording_draws() {
    use collector::recording::{Chunk, Column, Record, SeriesKey, SeriesKind, Writer};
    use tidemark_app::Run;
    // Written as the collector writes: host memory in 40 chunks of 100 samples (a sawtooth that
    // climbs), five steps' edges after each, flushed every chunk.
    let header = tidemark_tests::header(&["python", "train.py"]);
    let mut writer = Writer::new(Vec::new(), &header).unwrap();
    let origin = collector::recording::Origin { pid: 7, rank: None };
    let edges = tidemark_tests::forward_steps(origin, 200, 100_000_000, 20_000_000, |s| {
        (1 << 30) + s * (1 << 18)
    });
    for (c, edges) in (0..40u64).zip(edges.chunks(10)) {
        writer
            .write(&Record::Chunk(Chunk {
                times_ns: (0..100).map(|i| (c * 100 + i) * 5_000_000).collect(),
                columns: vec![Column {
                    series: SeriesKey::new(SeriesKind::HostRss),
                    values: (0..100)
                        .map(|i| (1 << 30) + (c * 100 + i) % 10 * (1 << 20) + c * (1 << 18))
                        .collect(),
                    valid: None,
                }],
            }))
            .unwrap();
        for edge in edges {
            writer.write(edge).unwrap();
        }
        writer.flush().unwrap();
    }
    let bytes = writer.finish(20_000_000_000).unwrap();
    let whole = collector::recording::read_recording(&bytes).unwrap();
    // The recording as it stood at a third and at two thirds of its bytes.
    let at = |fraction: usize| {
        let mut follower = collector::recording::Follower::new();
        let mut recording = None;
        let _ = follower.feed(&bytes[..bytes.len() * fraction / 3], &mut recording);
        recording.unwrap()
    };
    let mut run = Run::new(at(1));
    // A third in, the host memory series has samples: it is extended, not made again.
    let third = run
        .recording
        .series
        .iter()
        .map(|s| s.values.len())
        .max()
        .unwrap_or(0);
    assert!((500..3000).contains(&third), "{third}");
    let early = run.analysis.clone();
    run.grow(at(2), false);
    assert_eq!(run.analysis, early, "not analyzed again");
    run.grow(whole.clone(), false);
    let fresh = Run::new(whole);
    assert_eq!(run.view.traces.len(), fresh.view.traces.len());
    let end = fresh.recording.duration_ns();
    for (grown, opened) in run.view.traces.iter().zip(&fresh.view.traces) {
        assert_eq!(grown.name(), opened.name());
        for columns in [50, 400, 3000] {
            assert_eq!(
                grown.data(&run.recording).visible(0, end, columns),
                opened.data(&fresh.recording).visible(0, end, columns),
                "{} at {columns} columns",
                grown.name()
            );
        }
    }
    assert_eq!(run.view.duration_ns, fresh.view.duration_ns);
    run.grow(fresh.recording.clone(), true);
    assert_eq!(run.analysis, fresh.analysis, "analyzed again when asked");
}

/// One way in: every kind of input (a recording, a snapshot, a folder of nodes' recordings, a
/// folder of per-rank snapshots, and what cannot be opened) opens in the viewer as the library
/// opens it for `collector report` (whose tests check the report against the same answers): the
/// same kind and the same verdict's headline, or the same error, named.
#[test]
fn every_input_opens_as_collector_report_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    for sample in tidemark_tests::inputs::samples(dir.path()).unwrap() {
        let what = sample.what;
        let mut app = TidemarkApp::empty();
        app.open_path(&sample.path);
        let open = &app.runs()[0];
        match (&open.run, tidemark_tests::inputs::judged(&sample.path)) {
            (Ok(run), Ok((kind, headline))) => {
                assert_eq!(Some(kind), sample.kind, "{what}");
                assert_eq!(run.input, kind, "{what}");
                assert_eq!(run.headline().text, headline, "{what}");
            }
            (Err(message), Err(library)) => {
                assert_eq!(sample.kind, None, "{what}");
                assert!(library.starts_with(sample.error), "{what}: {library}");
                assert_eq!(
                    message,
                    &format!("{}: {library}", sample.path.display()),
                    "{what}"
                );
            }
            (run, library) => panic!(
                "{what}: the viewer opened it {}, the library {library:?}",
                if run.is_ok() { "" } else { "not" }
            ),
        }
    }
}

/// A snapshot speaks of a snapshot in the viewer: the caption under its timeline starts with the
/// headline above it (not "Cannot tell yet" under a headline that tells), and the Verdict tab
/// lists nothing a recording made by the collector would lack.
#[test]
fn a_snapshots_caption_agrees_with_its_headline() {
    let mut app = TidemarkApp::empty();
    app.open_path(&snapshot_file("real/bcrafton_cs336_training_step.pickle"));
    let mut harness = harness(app);
    harness.run();
    let run = harness.state().runs()[0].run.as_ref().unwrap();
    let headline = run.headline();
    assert!(headline.snapshot, "{headline:?}");
    let caption = run.view.verdict.caption.clone();
    assert!(caption.starts_with(&headline.text), "{caption}");
    assert!(!caption.contains("Cannot tell"), "{caption}");
    harness.get_by_label_contains(&caption);
    harness.get_by_label("Verdict").click();
    harness.run();
    harness.get_by_label("What the snapshot holds");
    for recording_only in [
        "NVML was not available",
        "how the job ended is not known",
        "Not in this recording",
    ] {
        assert!(
            harness.query_by_label_contains(recording_only).is_none(),
            "{recording_only}"
        );
    }
    // Run info: a snapshot has no job's end, and is not an incomplete recording.
    harness.get_by_label("Run info").click();
    harness.run();
    harness.get_by_label("the snapshot (no job's end in it)");
    assert!(harness.query_by_label("incomplete recording").is_none());
}

/// A recording made with `--history` leads with its own verdict, as the report does; the snapshot
/// dumped next to it is in the Blocks tab, with its verdict there.
#[test]
fn a_history_recording_leads_with_its_own_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let path = tidemark_tests::inputs::history_recording(dir.path()).unwrap();
    let mut app = TidemarkApp::empty();
    app.open_path(&path);
    let run = app.runs()[0].run.as_ref().unwrap();
    let view = run.snapshot.as_ref().expect("the paired snapshot");
    let lead = run.headline();
    assert!(!lead.snapshot);
    assert_eq!(lead.text, collector::analysis::headline(&run.analysis).0);
    assert_ne!(lead.text, view.verdict.headline);
    assert!(run.view.verdict.caption.starts_with(&lead.text));
    assert_eq!(
        tidemark_tests::inputs::judged(&path),
        Ok((collector::open::Kind::Recording, lead.text.clone()))
    );
}

#[test]
fn memory_timeline_of_a_real_snapshot() {
    // A real training step's snapshot (bcrafton/assignment2-systems, MIT): its history began
    // after some of its blocks were allocated, which the view says.
    let (mut harness, path) =
        real_snapshot_on("bcrafton_cs336_training_step.pickle", "Memory timeline");
    assert_eq!(harness.state().tab, Tab::Memory);
    harness.get_by_label_contains("Active memory timeline of cuda:0");
    harness.get_by_label_contains("the history began late");
    // The lowest bands are blocks alive from before the trace to the end: the bottom of the
    // plot, anywhere along it, is a block.
    harness.hover_at(egui::pos2(640.0, 700.0));
    harness.run();
    harness.snapshot("memory_timeline");
    harness.get_by_label_contains("allocated: before the trace began");

    // Pinned, the largest block alive at the end shows its stack, and Ctrl+C copies it.
    let snapshot = collector::snapshot::read_snapshot(&std::fs::read(&path).unwrap()).unwrap();
    let layout = collector::snapshot::timeline::MemoryTimeline::new(&snapshot);
    let device = &layout.devices[0];
    let mut live = Vec::new();
    device.live_at(device.steps(), &mut live);
    let largest = live
        .iter()
        .copied()
        .max_by_key(|&b| device.block(&snapshot, b).unwrap().size)
        .unwrap();
    let block = device.block(&snapshot, largest).unwrap();
    harness.state_mut().current_run_mut().unwrap().memory.pinned = Some((0, largest));
    harness.run();
    harness.get_by_label("Pinned block");
    harness.get_by_label_contains(&format!("at 0x{:x}", block.addr));
    harness.event(egui::Event::Copy);
    // One frame: the copy is in that frame's output.
    harness.step();
    let copied: Vec<&String> = harness
        .output()
        .platform_output
        .commands
        .iter()
        .filter_map(|c| match c {
            egui::OutputCommand::CopyText(text) => Some(text),
            _ => None,
        })
        .collect();
    let expected = tidemark_app::memtimeline::stack_text(&snapshot, block.stack);
    assert_eq!(copied, vec![&expected]);
    assert!(
        expected.contains(".py:") || expected.contains("??"),
        "{expected}"
    );
    // A copy is never silent: the panel says what went to the clipboard.
    harness.run();
    harness.get_by_label(&format!(
        "copied the stack ({} lines)",
        expected.lines().count()
    ));

    // A block allocated in the trace: its stack starts with the allocator's C++ frames; the
    // panel shows the Python frames first, innermost first, and folds the whole stack.
    let (band, stack) = live
        .iter()
        .map(|&b| (b, device.block(&snapshot, b).unwrap().stack))
        .find(|&(_, stack)| {
            let mut frames = snapshot.stack(stack);
            frames
                .next()
                .is_some_and(|f| !snapshot.string(f.filename).ends_with(".py"))
                && snapshot
                    .stack(stack)
                    .any(|f| snapshot.string(f.filename).ends_with(".py"))
        })
        .expect("a block alive at the end with C++ and Python frames");
    harness.state_mut().current_run_mut().unwrap().memory.pinned = Some((0, band));
    harness.run();
    let (shown, all) = tidemark_app::memtimeline::pinned_frames(&snapshot, stack).unwrap();
    assert!(shown.lines().all(|l| l.contains(".py:")), "{shown}");
    let first_python = snapshot
        .stack(stack)
        .find(|f| snapshot.string(f.filename).ends_with(".py"))
        .unwrap();
    assert!(
        shown.starts_with(&snapshot.frame_text(first_python)),
        "{shown}"
    );
    harness.get_by_label(&shown);
    harness.get_by_label(&format!(
        "the whole stack: {all} frames, the C++ and the allocator's included"
    ));
}

#[test]
fn segment_timeline_of_a_real_snapshot_links_the_pinned_block() {
    let (mut harness, path) =
        real_snapshot_on("bcrafton_cs336_training_step.pickle", "Memory timeline");
    harness.get_by_label("Segments").click();
    harness.run();
    assert!(harness.state().runs()[0].memory.segments);
    harness.get_by_label_contains("Segments of cuda:0");
    // The lowest segment, along the whole trace, holds a block: hovered, it is named with its
    // segment; clicked, it is pinned.
    harness.hover_at(egui::pos2(640.0, 700.0));
    harness.run();
    harness.snapshot("segment_timeline");
    harness.get_by_label_contains("made: ");
    click_at(
        &mut harness,
        egui::pos2(640.0, 700.0),
        egui::PointerButton::Primary,
    );
    let (device, band) = harness.state().runs()[0]
        .memory
        .pinned
        .expect("a block pinned in the segments");
    // The same block, by the library: the segment timeline's block at that band is the memory
    // timeline's.
    let snapshot = collector::snapshot::read_snapshot(&std::fs::read(&path).unwrap()).unwrap();
    let layout = collector::snapshot::timeline::MemoryTimeline::new(&snapshot);
    let block = layout.devices[device].block(&snapshot, band).unwrap();
    harness.get_by_label("Pinned block");
    harness.get_by_label_contains(&format!("at 0x{:x}", block.addr));
    // Pinned there, it is pinned in the allocations' view too.
    harness.get_by_label("Allocations").click();
    harness.run();
    harness.get_by_label_contains("Active memory timeline of cuda:0");
    harness.get_by_label("Pinned block");
    assert_eq!(
        harness.state().runs()[0].memory.pinned,
        Some((device, band))
    );
}

#[test]
fn the_blocks_tab_and_the_memory_timeline_share_the_pinned_block() {
    let (mut harness, path) =
        real_snapshot_on("bcrafton_cs336_training_step.pickle", "Memory timeline");
    let snapshot = collector::snapshot::read_snapshot(&std::fs::read(&path).unwrap()).unwrap();
    let layout = collector::snapshot::timeline::MemoryTimeline::new(&snapshot);
    let device = &layout.devices[0];
    let mut live = Vec::new();
    device.live_at(device.steps(), &mut live);
    let mut by_size: Vec<u32> = live.clone();
    by_size.sort_by_key(|&b| std::cmp::Reverse(device.block(&snapshot, b).unwrap().size));
    let largest = by_size[0];
    let block = device.block(&snapshot, largest).unwrap();
    harness.state_mut().current_run_mut().unwrap().memory.pinned = Some((0, largest));
    harness.run();
    // Pinned on the timeline, it is named on the Blocks tab, and marked in its site's list
    // (opened for it).
    harness.get_by_label("Blocks").click();
    harness.run();
    harness.get_by_label("Pinned on the memory timeline:");
    harness.get_by_label_contains(&format!("at 0x{:x} on cuda:0", block.addr));
    harness.get_by_label("(pinned)");
    // Another block of that site pinned here is pinned on the timeline.
    harness.get_all_by_label("pin").next().unwrap().click();
    harness.run();
    let (d, band) = harness.state().runs()[0].memory.pinned.unwrap();
    assert_eq!(d, 0);
    assert_ne!(band, largest);
    assert!(
        live.contains(&band),
        "the band pinned is alive at the snapshot"
    );
    let other = device.block(&snapshot, band).unwrap();
    harness.get_by_label_contains(&format!("at 0x{:x} on cuda:0", other.addr));
}

/// Each snapshot view of a real snapshot: drawn from what it has, saying what it lacks.
fn snapshot_views_of(file: &str, tag: &str) {
    let (mut harness, _) = real_snapshot_on(file, "Memory timeline");
    harness.get_by_label_contains("Active memory timeline of cuda:");
    harness.snapshot(format!("memory_timeline_{tag}"));
    harness.get_by_label("Segments").click();
    harness.run();
    harness.get_by_label_contains("Segments of cuda:");
    harness.snapshot(format!("segment_timeline_{tag}"));
    harness.get_by_label("Flame graph").click();
    harness.run();
    harness.snapshot(format!("flame_graph_{tag}"));
}

/// A snapshot with pinned host memory (PyTorch 2.14+): the memory views offer it as a device of
/// its own, named as what it is, and draw its allocations and segments; the curves name it too.
#[test]
fn pinned_host_memory_is_a_device_of_the_snapshot_views() {
    let path = tidemark_tests::inputs::data("snapshots/pinned_host.pickle");
    let mut app = TidemarkApp::empty();
    app.open_path(&path);
    let mut harness = snapshot_harness(app);
    harness.run();
    // The curves: one per device, the host's named so in the legend.
    harness.get_by_label_contains("allocated pinned host");
    harness.get_by_label("Memory timeline").click();
    harness.run();
    harness.get_by_label_contains("Active memory timeline of cuda:0");
    harness.get_by_label("device").click();
    harness.run();
    harness.get_by_label("pinned host").click();
    harness.run();
    // 33 pinned buffers made (32 kept in the cache, the staging one given back), 4 alive.
    harness.get_by_label_contains("Active memory timeline of pinned host: 33 bands");
    harness.get_by_label_contains("8.00 MiB alive at the snapshot");
    harness.get_by_label("Segments").click();
    harness.run();
    harness.get_by_label_contains("Segments of pinned host");
}

/// FlexGen's out-of-memory snapshot, with a legacy history.
#[test]
fn snapshot_views_of_an_oom_snapshot() {
    snapshot_views_of("flexgen_oom_legacy_history.pickle", "oom");
}

/// verl's rollout: segments and blocks, no trace.
#[test]
fn snapshot_views_of_a_state_only_snapshot() {
    snapshot_views_of("verl_rollout_state.pickle", "state_only");
}

/// A click of `button` at `pos`: the pointer there, the button pressed and released in one
/// frame (frames between them would make it a long press).
fn click_at(
    harness: &mut Harness<'static, TidemarkApp>,
    pos: egui::Pos2,
    button: egui::PointerButton,
) {
    harness.hover_at(pos);
    for pressed in [true, false] {
        harness.event(egui::Event::PointerButton {
            pos,
            button,
            pressed,
            modifiers: egui::Modifiers::NONE,
        });
    }
    harness.run();
}

/// A right-click at `pos`.
fn right_click(harness: &mut Harness<'static, TidemarkApp>, pos: egui::Pos2) {
    click_at(harness, pos, egui::PointerButton::Secondary);
}

/// A real snapshot from `../shared/fixtures/real-snapshots/` opened on the tab labelled `tab`
/// (rendered, for goldens): the harness and the file.
fn real_snapshot_on(file: &str, tab: &str) -> (Harness<'static, TidemarkApp>, PathBuf) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/fixtures/real-snapshots")
        .join(file);
    let mut app = TidemarkApp::empty();
    app.open_path(&path);
    let mut harness = snapshot_harness(app);
    harness.run();
    harness.get_by_label(tab).click();
    harness.run();
    (harness, path)
}

#[test]
fn two_moments_marked_on_the_timeline_show_what_each_phase_did_between_them() {
    let mut app = TidemarkApp::empty();
    app.open_path(&corpus("forward_keeps_losses.msgpack"));
    let mut harness = snapshot_harness(app);
    harness.run();
    harness.get_by_label_contains("Right-click two moments");
    right_click(&mut harness, egui::pos2(400.0, 400.0));
    harness.get_by_label_contains("A is marked");
    right_click(&mut harness, egui::pos2(1000.0, 400.0));
    let open = &harness.state().runs()[0];
    let (a, b) = open.timeline.moments.both().expect("A and B marked");
    assert!(a < b, "A at {a} ns, B at {b} ns");
    // The panel shows what the library says of these two moments.
    let run = open.run.as_ref().unwrap();
    let moments = collector::compare::compare_moments(&run.recording, &run.analysis, a, b);
    let forward = moments
        .phases
        .iter()
        .find(|p| p.phase == "forward")
        .expect("forwards between the moments");
    assert!(
        forward.occurrences > 0 && forward.net_bytes > 0.0,
        "{forward:?}"
    );
    let net = collector::compare::signed_bytes(forward.net_bytes);
    harness.get_by_label_contains("From ");
    harness.snapshot("timeline_moments");
    for text in ["forward".to_owned(), forward.occurrences.to_string(), net] {
        assert!(
            harness.query_all_by_label(&text).next().is_some(),
            "{text} is not shown"
        );
    }
    // A third right-click starts again at A; the button clears both.
    right_click(&mut harness, egui::pos2(600.0, 400.0));
    let marks = harness.state().runs()[0].timeline.moments;
    assert!(marks.a.is_some() && marks.b.is_none(), "{marks:?}");
    right_click(&mut harness, egui::pos2(900.0, 400.0));
    harness.get_by_label("Clear A and B").click();
    harness.run();
    assert_eq!(
        harness.state().runs()[0].timeline.moments,
        tidemark_app::diff::Marks::default()
    );
}

#[test]
fn two_moments_of_a_snapshots_memory_timeline_show_what_was_kept_by_site() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/fixtures/real-snapshots/cs336_large_fw_bw_fp32.pickle");
    let mut app = TidemarkApp::empty();
    app.open_path(&path);
    let mut harness = harness(app);
    harness.run();
    harness.get_by_label("Memory timeline").click();
    harness.run();
    right_click(&mut harness, egui::pos2(200.0, 400.0));
    right_click(&mut harness, egui::pos2(700.0, 400.0));
    let (a, b) = harness.state().runs()[0]
        .memory
        .moments
        .both()
        .expect("A and B marked");
    assert!(a < b, "A at step {a}, B at step {b}");
    harness.get_by_label(&format!("From trace entry {a} to {b}"));
    // What was allocated between them and is alive at B, by site, as the library replays it.
    let snapshot = collector::snapshot::read_snapshot(&std::fs::read(&path).unwrap()).unwrap();
    let layout = collector::snapshot::timeline::MemoryTimeline::new(&snapshot);
    let between = layout.devices[0].between(a, b);
    let top = between
        .kept
        .first()
        .expect("something kept between A and B");
    harness.get_by_label(&layout.site_name(&snapshot, top.site));
    assert!(
        !harness
            .query_all_by_label(&collector::format::format_bytes(top.bytes as f64))
            .collect::<Vec<_>>()
            .is_empty()
    );
    harness.get_by_label_contains(&format!(
        "alive at A {}",
        collector::format::format_bytes(between.alive_from as f64)
    ));
}

/// Opens `paths` as `tidemark A B` does: the last is shown, already compared with the first (the
/// baseline, A), as `collector diff A B` compares them; then the Compare tab.
fn compared(paths: &[PathBuf]) -> Harness<'static, TidemarkApp> {
    let mut app = TidemarkApp::empty();
    app.open_paths(paths);
    assert_eq!(app.current(), paths.len() - 1);
    assert_eq!(app.compare, Some(0));
    let mut harness = harness(app);
    harness.run();
    harness.get_by_label("Compare").click();
    harness.run();
    assert_eq!(harness.state().tab, Tab::Compare);
    let name = |p: &PathBuf| p.file_name().unwrap().to_string_lossy().into_owned();
    harness.get_by_label(&format!(
        "A (baseline): {}    B: {}",
        name(&paths[0]),
        name(&paths[paths.len() - 1])
    ));
    harness
}

#[test]
fn two_snapshots_compared_in_the_viewer_by_site_as_collector_diff_does() {
    let real =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/real-snapshots");
    let (a, b) = (
        real.join("cs336_large_fw_bw_fp32.pickle"),
        real.join("cs336_large_fw_bw_bf16.pickle"),
    );
    let mut harness = compared(&[a.clone(), b.clone()]);
    // The changes drawn as bars to one scale, as `collector diff --html` draws them.
    harness.get_by_label("shrank · grew");
    harness.snapshot("compare_snapshots");
    let facts = |p: &PathBuf| {
        collector::compare::SnapshotFacts::of(
            &collector::snapshot::read_snapshot(&std::fs::read(p).unwrap()).unwrap(),
        )
    };
    let diff = collector::compare::compare_snapshots(&facts(&a), &facts(&b));
    let top = &diff.sites[0];
    harness.get_by_label(&format!("cuda:{} {}", top.device, top.site));
    let change = top.bytes.b.unwrap_or(0.0) - top.bytes.a.unwrap_or(0.0);
    assert!(
        !harness
            .query_all_by_label(&collector::compare::signed_bytes(change))
            .collect::<Vec<_>>()
            .is_empty()
    );
    harness.get_by_label("cuda:0 peak in the trace");
}

#[test]
fn two_recordings_compared_in_the_viewer_by_phase_and_holder() {
    let harness = compared(&[
        corpus("healthy.msgpack"),
        corpus("forward_keeps_losses.msgpack"),
    ]);
    harness.get_by_label("A (baseline): healthy.msgpack    B: forward_keeps_losses.msgpack");
    harness.get_by_label("forward retained");
    harness.get_by_label("step baseline (median)");
    // The overlay in the timeline is drawn on one step axis.
    let mut harness = harness;
    assert_eq!(harness.state().runs()[1].timeline.x_axis, XAxis::Steps);
    harness.get_by_label("Timeline").click();
    harness.run();
    harness.get_by_label_contains("— healthy.msgpack");
}

#[test]
fn a_snapshot_and_a_recording_are_not_compared_and_the_viewer_says_why() {
    let real =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/real-snapshots");
    let harness = compared(&[
        corpus("healthy.msgpack"),
        real.join("cs336_large_fw_bw_fp32.pickle"),
    ]);
    harness.get_by_label(
        "cs336_large_fw_bw_fp32.pickle is a snapshot and healthy.msgpack a recording: compare two snapshots, or two recordings",
    );
}

#[test]
fn a_snapshots_flame_graph_weighs_its_memory_by_stack_and_zooms() {
    use collector::snapshot::flame::{Flame, Weigh};
    let (mut harness, path) = real_snapshot_on("cs336_large_fw_bw_fp32.pickle", "Flame graph");
    assert_eq!(harness.state().tab, Tab::Flame);
    // What the library weighs at the snapshot: the total, and the heaviest frame under the root.
    let snapshot = collector::snapshot::read_snapshot(&std::fs::read(&path).unwrap()).unwrap();
    let layout = collector::snapshot::timeline::MemoryTimeline::new(&snapshot);
    let device = &layout.devices[0];
    let flame = Flame::new(&snapshot, device, Weigh::LiveAt(device.end()), false);
    harness.get_by_label_contains(&format!(
        "{} alive at trace entry {} in {} blocks",
        collector::format::format_bytes(flame.total()),
        device.end(),
        flame.nodes[0].blocks
    ));
    harness.snapshot("flame_graph");
    // The heaviest frame under the root is drawn first from the left, on the second row: found
    // by pointing down the left edge until its name is told.
    let heaviest = flame.nodes[0].children[0];
    let node = &flame.nodes[heaviest as usize];
    // Its tooltip: its name, its bytes, its share and its blocks.
    let told = format!(
        "{}\n{} ({:.1}%) in {} blocks",
        flame.name(&snapshot, heaviest),
        collector::format::format_bytes(node.weight),
        100.0 * node.weight / flame.total(),
        node.blocks
    );
    let mut at = None;
    for y in (90..260).step_by(5) {
        let pos = egui::pos2(40.0, y as f32);
        harness.hover_at(pos);
        harness.run();
        if harness.query_all_by_label(&told).next().is_some() {
            at = Some(pos);
            break;
        }
    }
    let at = at.unwrap_or_else(|| panic!("{told:?} is never told"));
    click_at(&mut harness, at, egui::PointerButton::Primary);
    assert_eq!(harness.state().runs()[0].flame.zoom, heaviest);
    // The memory timeline now shows that frame's blocks in colour: the library's stacks under it.
    let filter = harness.state().runs()[0]
        .memory
        .filter
        .clone()
        .expect("a filter");
    assert_eq!(*filter.stacks, flame.stacks_under(heaviest));
    let under: u64 = {
        let mut live = Vec::new();
        device.live_at(device.end(), &mut live);
        live.iter()
            .filter_map(|&b| device.block(&snapshot, b))
            .filter(|b| filter.stacks.binary_search(&b.stack).is_ok())
            .count() as u64
    };
    assert_eq!(
        under, node.blocks,
        "the blocks alive under it at the snapshot"
    );
    harness.get_by_label("Memory timeline").click();
    harness.run();
    harness.get_by_label_contains("Only the blocks allocated under");
    harness.snapshot("memory_timeline_filtered");
    // The segments too: the frame's blocks in colour, the others grey.
    harness.get_by_label("Segments").click();
    harness.run();
    harness.get_by_label_contains("Only the blocks allocated under");
    harness.snapshot("segment_timeline_filtered");
    harness.get_by_label("Allocations").click();
    harness.run();
    harness.get_by_label("Flame graph").click();
    harness.run();
    harness.get_by_label("Whole graph").click();
    harness.run();
    assert_eq!(harness.state().runs()[0].flame.zoom, 0);
    assert!(harness.state().runs()[0].memory.filter.is_none());
    // A block pinned on the memory timeline, one under the heaviest frame: its stack's frames
    // are outlined here (the golden image holds the outline).
    let mut live = Vec::new();
    device.live_at(device.end(), &mut live);
    let under = flame.stacks_under(heaviest);
    let pinned = live
        .iter()
        .copied()
        .find(|&b| {
            device
                .block(&snapshot, b)
                .is_some_and(|x| under.binary_search(&x.stack).is_ok())
        })
        .expect("a block under the heaviest frame");
    harness.state_mut().current_run_mut().unwrap().memory.pinned = Some((0, pinned));
    harness.run();
    harness.snapshot("flame_graph_pinned");
    // Over the whole trace: bytes × the steps they lived.
    harness.get_by_label("bytes × lifetime").click();
    harness.run();
    harness.get_by_label_contains("each block's bytes × the trace entries it lived through");
}

/// 2,000 steps of a sawtooth (12,000 allocator readings) on a plot ~1,100 pixels wide: more
/// readings than columns, so each curve is drawn as one band through the columns' spans; the
/// picture shows the sawtooth filled between its troughs and peaks, each curve in its colour.
#[test]
fn a_dense_run_is_drawn_as_bands_through_each_columns_span() {
    let origin = collector::recording::Origin { pid: 7, rank: None };
    let mut recording =
        collector::recording::Recording::new(tidemark_tests::header(&["python", "train.py"]));
    for step in 0..2_000 {
        for record in tidemark_tests::sawtooth_step(step, 100_000_000, origin) {
            recording.push(record);
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dense.msgpack");
    collector::recording::write_file(&path, &recording).unwrap();
    let mut app = TidemarkApp::empty();
    app.open_path(&path);
    let mut harness = snapshot_harness(app);
    harness.run();
    let run = harness.state().runs()[0].run.as_ref().unwrap();
    let allocated = run
        .view
        .traces
        .iter()
        .find(|t| t.kind == TraceKind::Allocated)
        .unwrap();
    let end = run.recording.duration_ns();
    assert!(matches!(
        allocated.data(&run.recording).shown(0, end, 1_100),
        tidemark_app::lod::Shown::Columns(_)
    ));
    // Without the verdict's projection to 80 GiB, the axis fits the curves.
    harness.get_by_label("verdict").click();
    harness.run();
    harness.snapshot("timeline_dense");
}

/// A process whose device memory outside PyTorch's cache grows: its own curve and toggle, "outside
/// PyTorch", the driver's count less what the cache held, and the finding in the verdict.
#[test]
fn memory_outside_pytorch_has_its_own_curve_and_finding() {
    use collector::recording::{
        AllocatorSample, Chunk, Column, Edge, Origin, Phase, Record, Recording, SeriesKey,
        SeriesKind,
    };
    const MIB: u64 = 1 << 20;
    let s = 1_000_000_000u64;
    let mut recording = Recording::new(tidemark_tests::header(&["python", "train.py"]));
    let origin = Origin { pid: 7, rank: None };
    for step in 0..60u64 {
        for (k, edge) in [Edge::Begin, Edge::End].into_iter().enumerate() {
            let t = step * s + k as u64 * s / 2;
            recording.push(Record::Phase(tidemark_tests::edge(
                t,
                edge,
                Phase::Forward,
                Some(step),
                origin,
            )));
            recording.push(Record::Allocator(AllocatorSample {
                t_ns: t,
                origin,
                device: 0,
                allocated: 400 * MIB,
                reserved: 512 * MIB,
                peak: 500 * MIB,
                ..Default::default()
            }));
        }
    }
    recording.push(Record::Chunk(Chunk {
        times_ns: (0..60).map(|step| step * s + 7 * s / 10).collect(),
        columns: vec![Column {
            series: SeriesKey {
                kind: SeriesKind::ProcessDevice,
                device: Some(0),
                pid: Some(7),
            },
            values: (0..60).map(|step| (812 + 8 * step) * MIB).collect(),
            valid: None,
        }],
    }));
    let run = tidemark_app::Run::new(recording);
    let outside: Vec<u64> = run
        .view
        .traces
        .iter()
        .filter(|t| t.kind == tidemark_app::view::TraceKind::OutsidePytorch)
        .flat_map(|t| t.data(&run.recording).values.iter().collect::<Vec<_>>())
        .collect();
    assert_eq!(
        outside,
        (0..60)
            .map(|step| (300 + 8 * step) * MIB)
            .collect::<Vec<_>>()
    );
    let mut app = TidemarkApp::empty();
    app.add_run("outside.msgpack", run);
    let mut harness = harness(app);
    harness.run();
    harness.get_by_label("outside PyTorch");
    // The headline above the tabs and the caption under the timeline.
    assert!(
        harness
            .query_all_by_label_contains(
                "Device memory outside PyTorch's cache leaks on GPU 0: +8.00 MiB/step"
            )
            .count()
            >= 1
    );
}

/// The README's picture: the recording its sample output comes from (`docs/example.msgpack`,
/// recorded by the README's first command), in the viewer with the verdict drawn. The image is
/// `docs/example.png`, compared as every snapshot is (`UPDATE_SNAPSHOTS=1` writes it again).
#[test]
fn snapshot_the_readmes_example() {
    let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs");
    let mut app = TidemarkApp::empty();
    app.open_path(&docs.join("example.msgpack"));
    let mut harness = snapshot_harness(app);
    harness.run();
    harness.snapshot_options(
        "example",
        &egui_kittest::SnapshotOptions::new().output_path(docs),
    );
}

/// docs/viewer.md's picture: the embedded example as the viewer opens with no file
/// (`docs/screenshot.png`, compared as every snapshot is).
#[test]
fn snapshot_the_guides_screenshot() {
    let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs");
    let mut harness = snapshot_harness(TidemarkApp::default());
    harness.run();
    harness.snapshot_options(
        "screenshot",
        &egui_kittest::SnapshotOptions::new().output_path(docs),
    );
}

/// A snapshot whose trace marks phases (`Optimizer.step` ranges) but has no steps: its Phases
/// tab names them and says why they are not attributed, rather than that there are none.
#[test]
fn a_snapshots_phases_without_steps_are_named_on_the_phases_tab() {
    let mut app = TidemarkApp::empty();
    app.open_path(&snapshot_file("real/bcrafton_cs336_training_step.pickle"));
    let mut harness = harness(app);
    harness.run();
    let run = harness.state().runs()[0].run.as_ref().unwrap();
    assert!(run.analysis.phases.is_empty());
    assert!(
        !run.analysis.occurrences.is_empty(),
        "the trace marks phases"
    );
    harness.get_by_label("Phases").click();
    harness.run();
    harness.get_by_label_contains("The phases this file marks (");
    harness.get_by_label_contains("are not attributed");
    assert!(
        harness
            .query_by_label_contains("No phases in this recording")
            .is_none()
    );
}

/// The plain wheel over the curves zooms time around the pointer, as on the memory timeline,
/// and leaves the memory axis fitted to the data; Reset view shows everything again.
#[test]
fn the_wheel_zooms_time_and_reset_fits_everything() {
    let mut harness = harness(TidemarkApp::default());
    harness.run();
    let whole = harness.state().runs()[0].timeline.shown_x.unwrap();
    assert!(harness.state().runs()[0].timeline.y_fits);
    // The pointer over the middle of the plot, then the wheel turned away (zoom in).
    let size = harness.ctx.content_rect().size();
    harness.event(egui::Event::PointerMoved(egui::pos2(
        size.x * 0.5,
        size.y * 0.5,
    )));
    harness.run_steps(8);
    for _ in 0..5 {
        harness.event(egui::Event::MouseWheel {
            unit: egui::MouseWheelUnit::Point,
            delta: egui::vec2(0.0, 60.0),
            phase: egui::TouchPhase::Move,
            source: egui::MouseWheelSource::Wheel,
            modifiers: egui::Modifiers::NONE,
        });
        // The wheel's scroll is smoothed over the frames after it.
        harness.run_steps(8);
    }
    let zoomed = harness.state().runs()[0].timeline.shown_x.unwrap();
    assert!(
        zoomed.1 - zoomed.0 < 0.8 * (whole.1 - whole.0),
        "{whole:?} -> {zoomed:?}"
    );
    assert!(
        zoomed.0 > whole.0 && zoomed.1 < whole.1,
        "{whole:?} -> {zoomed:?}"
    );
    assert!(
        harness.state().runs()[0].timeline.y_fits,
        "the wheel moved the memory axis"
    );
    harness.get_by_label("Reset view").click();
    harness.run_steps(8);
    let reset = harness.state().runs()[0].timeline.shown_x.unwrap();
    assert!(
        (reset.1 - reset.0 - (whole.1 - whole.0)).abs() < 1e-6 * (whole.1 - whole.0).max(1.0),
        "{whole:?} -> {reset:?}"
    );
}

/// One colour per site in every view of a real snapshot: a frame of the flame graph that is a
/// site's, an allocated block of the segments (the Blocks tab's map and the segment timeline)
/// and the site's bands on the memory timeline. (The flame graph used to colour a frame by its
/// file, apart from the timeline.)
#[test]
fn a_site_has_one_colour_in_every_view() {
    use collector::snapshot::BlockState;
    use collector::snapshot::flame::{Flame, Label, Weigh};
    use tidemark_app::memtimeline::{segment_block_color, site_color, stack_color};
    for file in [
        "bcrafton_cs336_training_step.pickle",
        "cs336_large_fw_bw_fp32.pickle",
    ] {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../shared/fixtures/real-snapshots")
            .join(file);
        let snapshot = collector::snapshot::read_snapshot(&std::fs::read(&path).unwrap()).unwrap();
        let layout = collector::snapshot::timeline::MemoryTimeline::new(&snapshot);
        let device = &layout.devices[0];
        let flame = Flame::new(&snapshot, device, Weigh::LiveAt(device.end()), false);
        let mut sites_seen = 0;
        for (i, node) in flame.nodes.iter().enumerate() {
            if let Label::Frame(frame) = node.label
                && let Some(site) = layout.site_of(collector::snapshot::SiteKey::Frame(frame))
            {
                sites_seen += 1;
                assert_eq!(
                    tidemark_app::flame::color(&flame, &layout, i as u32),
                    site_color(&layout, site),
                    "{file}: {}",
                    snapshot.frame_text(&frame)
                );
            }
        }
        assert!(
            sites_seen >= 3,
            "{file}: {sites_seen} site frames in the flame graph"
        );
        let mut allocated = 0;
        for segment in &snapshot.segments {
            for b in &segment.blocks {
                if b.state == BlockState::ActiveAllocated {
                    allocated += 1;
                    let site = layout.site_of_stack(&snapshot, b.stack).unwrap();
                    assert_eq!(
                        segment_block_color(&layout, &snapshot, b.state, b.stack),
                        site_color(&layout, site),
                        "{file}: the block at 0x{:x}",
                        b.address
                    );
                    assert_eq!(
                        stack_color(&layout, &snapshot, b.stack),
                        Some(site_color(&layout, site))
                    );
                }
            }
        }
        assert!(allocated > 100, "{file}: {allocated}");
    }
}

/// From a flame graph's frame and from a Blocks tab's site to the moment it peaked: the memory
/// timeline shown at that trace entry, marked A, its bytes said, where the library's
/// `peak_where` finds them (not the device's peak).
#[test]
fn a_frame_and_a_site_go_to_the_moment_of_their_peak() {
    use collector::snapshot::flame::{Flame, Weigh};
    let (mut harness, path) =
        real_snapshot_on("bcrafton_cs336_training_step.pickle", "Flame graph");
    let snapshot = collector::snapshot::read_snapshot(&std::fs::read(&path).unwrap()).unwrap();
    let layout = collector::snapshot::timeline::MemoryTimeline::new(&snapshot);
    let device = &layout.devices[0];
    // The smallest frame under the root: its peak is not the device's.
    let flame = Flame::new(&snapshot, device, Weigh::LiveAt(device.end()), false);
    let frame = *flame.nodes[0].children.last().unwrap();
    let stacks = std::sync::Arc::new(flame.stacks_under(frame));
    let (step, bytes) = device
        .peak_where(&snapshot, |p| stacks.binary_search(&p.stack).is_ok())
        .unwrap();
    assert_ne!(step, device.peak_step);
    {
        let open = harness.state_mut().current_run_mut().unwrap();
        open.flame.zoom = frame;
        open.memory.filter = Some(tidemark_app::memtimeline::Filter {
            what: "the frame".into(),
            stacks,
        });
    }
    harness.run();
    harness.get_by_label("Its peak").click();
    harness.run();
    harness.run();
    assert_eq!(harness.state().tab, Tab::Memory);
    let memory = &harness.state().runs()[0].memory;
    assert_eq!(memory.moments.a, Some(step));
    let (x0, x1) = memory.range.expect("zoomed in around it");
    assert!(x0 <= f64::from(step) && f64::from(step) <= x1);
    harness.get_by_label_contains(&format!(
        "The blocks allocated under the frame held the most at entry {step}"
    ));
    harness.get_by_label_contains(&format!(
        ": {} (marked A)",
        collector::format::format_bytes(bytes as f64)
    ));
    // A site of the Blocks tab (the largest block's, opened when it is pinned).
    let mut live = Vec::new();
    device.live_at(device.end(), &mut live);
    let largest = *live
        .iter()
        .max_by_key(|&&b| device.block(&snapshot, b).unwrap().size)
        .unwrap();
    let site = device.block(&snapshot, largest).unwrap().site;
    let frame_step = step;
    let (step, _) = device.peak_where(&snapshot, |p| p.site == site).unwrap();
    assert_ne!(step, frame_step, "two peaks told apart");
    harness.state_mut().current_run_mut().unwrap().memory.pinned = Some((0, largest));
    harness.get_by_label("Blocks").click();
    harness.run();
    harness.get_by_label("its peak").click();
    harness.run();
    harness.run();
    assert_eq!(harness.state().tab, Tab::Memory);
    assert_eq!(harness.state().runs()[0].memory.moments.a, Some(step));
    harness.get_by_label_contains(&format!("held the most at entry {step}"));
}

/// Memory in private pools (a CUDA graph's, a `torch.cuda.MemPool`), as a snapshot's trace tells
/// it: its own toggle, "in private pools", drawn as the part of the allocated curve it is (an
/// area in allocated's colour under it); hidden with its toggle.
#[test]
fn memory_in_private_pools_is_shaded_under_allocated() {
    use collector::recording::{
        AllocatorSample, Chunk, Column, Origin, Record, Recording, SeriesKey, SeriesKind,
    };
    const MIB: u64 = 1 << 20;
    let ms = 1_000_000u64;
    let mut recording = Recording::new(tidemark_tests::header(&["python", "train.py"]));
    let origin = Origin { pid: 0, rank: None };
    // 40 allocations of 16 MiB; from the 10th, every other one goes to a graph's pool.
    let pooled = |i: u64| i >= 10 && i.is_multiple_of(2);
    let mut pools = 0;
    let (mut times, mut values) = (vec![0], vec![0]);
    for i in 0..40u64 {
        recording.push(Record::Allocator(AllocatorSample {
            t_ns: i * ms,
            origin,
            device: 0,
            allocated: (i + 1) * 16 * MIB,
            reserved: 1024 * MIB,
            peak: (i + 1) * 16 * MIB,
            ..Default::default()
        }));
        if pooled(i) {
            pools += 16 * MIB;
            times.push(i * ms);
            values.push(pools);
        }
    }
    recording.push(Record::Chunk(Chunk {
        times_ns: times,
        columns: vec![Column {
            series: SeriesKey {
                device: Some(0),
                ..SeriesKey::new(SeriesKind::PrivatePools)
            },
            values,
            valid: None,
        }],
    }));
    let run = tidemark_app::Run::new(recording);
    let trace = run
        .view
        .traces
        .iter()
        .find(|t| t.kind == tidemark_app::view::TraceKind::PrivatePools)
        .expect("a curve of the private pools");
    assert_eq!(
        trace.data(&run.recording).values.last(),
        Some(15 * 16 * MIB)
    );
    let mut app = TidemarkApp::empty();
    app.add_run("pools.msgpack", run);
    let mut harness = snapshot_harness(app);
    harness.run();
    harness.snapshot("timeline_private_pools");
    harness.get_by_label("in private pools").click();
    harness.run();
    assert!(
        !harness.state().runs()[0]
            .timeline
            .is_shown(tidemark_app::view::TraceKind::PrivatePools)
    );
}

/// A notebook's recording: each cell's run is a block in a lane along the timeline's top,
/// labelled by its execution count, and the cells are not phases (no band, no Phases row).
#[test]
fn a_notebooks_cells_are_a_lane_along_the_top() {
    use collector::recording::{
        AllocatorSample, Edge, Origin, Phase, PhaseEdge, Record, Recording,
    };
    const MIB: u64 = 1 << 20;
    let s = 1_000_000_000u64;
    let origin = Origin { pid: 7, rank: None };
    let mut recording = Recording::new(tidemark_tests::header(&[
        "python",
        "-m",
        "ipykernel_launcher",
    ]));
    let mut allocated = 200 * MIB;
    for (k, (count, source, keeps)) in [
        (3, "model = Net().cuda()", 300 * MIB),
        (4, "outputs.append(model(x))", 64 * MIB),
        (5, "outputs.append(model(x))", 64 * MIB),
        (6, "evaluate(model)", 0),
    ]
    .into_iter()
    .enumerate()
    {
        let t = k as u64 * 4 * s;
        for (dt, edge, value) in [
            (0, Edge::Begin, allocated),
            (3 * s, Edge::End, allocated + keeps),
        ] {
            recording.push(Record::Allocator(AllocatorSample {
                t_ns: t + dt,
                origin,
                device: 0,
                allocated: value,
                reserved: 1024 * MIB,
                peak: value,
                ..Default::default()
            }));
            recording.push(Record::Phase(PhaseEdge {
                t_ns: t + dt,
                edge,
                phase: Phase::from(format!("cell [{count}]: {source}")),
                step: None,
                origin,
                host_heap: None,
                host_rss: None,
            }));
        }
        allocated += keeps;
    }
    let run = tidemark_app::Run::new(recording);
    assert!(run.view.occurrences.is_empty(), "cells are not phases");
    assert_eq!(run.view.cells.len(), 4);
    let cell = run.view.cell_at(5 * s).expect("cell [4] runs at 5 s");
    assert_eq!((cell.count, cell.kept()), (4, Some(64 * MIB as i64)));
    assert!(run.view.cell_at(3 * s + s / 2).is_none(), "between cells");
    let mut app = TidemarkApp::empty();
    app.add_run("notebook.msgpack", run);
    let mut harness = snapshot_harness(app);
    harness.run();
    // The verdict leads with the cell run twice that kept 64 MiB each time.
    assert!(
        harness
            .query_all_by_label_contains(
                "Each run of cell `outputs.append(model(x))` keeps memory: at least 64.0 MiB a run",
            )
            .count()
            >= 1
    );
    harness.snapshot("timeline_cells");
}
