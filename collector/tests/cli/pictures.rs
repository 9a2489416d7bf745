//! `collector report --svg / --html / --markdown`: the picture parses as XML and shows the
//! verdict (baseline, trend, the leaking phase), the HTML is self-contained, and bad input gets a
//! picture that says what is missing or a clear error before any work.
//! (`scripts/html-check.py` opens the HTML in headless Chromium.)

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use collector::recording::{Chunk, Column, Recording, SeriesKey, SeriesKind, write_file};
use quick_xml::Reader;
use quick_xml::events::Event;

fn corpus(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/corpus")
        .join(name)
}

fn report(file: &Path, extra: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_collector"))
        .arg("report")
        .arg(file)
        .args(extra)
        .output()
        .unwrap()
}

/// Every element name and every text of an XML document, checking that it parses.
fn parse(xml: &str) -> (Vec<String>, Vec<String>) {
    let mut reader = Reader::from_str(xml);
    let (mut names, mut texts) = (Vec::new(), Vec::new());
    loop {
        match reader.read_event() {
            Ok(Event::Start(e) | Event::Empty(e)) => {
                names.push(String::from_utf8_lossy(e.name().as_ref()).into_owned());
            }
            Ok(Event::Text(t)) => {
                let text = String::from_utf8_lossy(t.as_ref()).trim().to_owned();
                if !text.is_empty() {
                    texts.push(text);
                }
            }
            Ok(Event::Eof) => break,
            Ok(_) => {}
            Err(err) => panic!("not XML at {}: {err}", reader.buffer_position()),
        }
    }
    (names, texts)
}

#[test]
fn the_svg_shows_the_baseline_the_trend_and_the_caption() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("plot.svg");
    let output = report(
        &corpus("eval_keeps_predictions.msgpack"),
        &["--svg".as_ref(), svg.as_os_str()],
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // The text report still goes to stdout.
    assert!(
        String::from_utf8_lossy(&output.stdout).starts_with(
            &*corpus("eval_keeps_predictions.msgpack")
                .display()
                .to_string()
        )
    );
    let xml = std::fs::read_to_string(&svg).unwrap();
    let (names, texts) = parse(&xml);
    assert_eq!(names.first().map(String::as_str), Some("svg"));
    for label in ["host memory", "step baseline"] {
        assert!(texts.iter().any(|t| t == label), "{label}: {texts:?}");
    }
    assert!(
        texts
            .iter()
            .any(|t| t.starts_with("trend ") && t.ends_with("/step")),
        "{texts:?}"
    );
    assert!(
        texts
            .iter()
            .any(|t| t.starts_with("Host memory leak in eval")
                && t.contains("dots: host memory at the start of each step")),
        "the caption: {texts:?}"
    );
    // One baseline dot per step (60), and the leaking phase's bands.
    let circles = names.iter().filter(|n| *n == "circle").count();
    assert!((60..=62).contains(&circles), "{circles}");
    assert!(names.iter().filter(|n| *n == "rect").count() > 20);
}

/// The steps the probe did not observe are drawn under the phase bands, in a grey no phase
/// has; a recording without such steps has none.
#[test]
fn steps_not_observed_are_drawn_under_the_phase_bands() {
    let dir = tempfile::tempdir().unwrap();
    let grey = "#808080";
    let svg_of = |file: &Path| {
        let svg = dir.path().join("plot.svg");
        let output = report(file, &["--svg".as_ref(), svg.as_os_str()]);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        std::fs::read_to_string(&svg).unwrap().to_ascii_lowercase()
    };
    let golden = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/golden_v1_5.msgpack");
    let xml = svg_of(&golden);
    assert!(xml.contains(grey), "{xml}");
    let xml = svg_of(&corpus("eval_keeps_predictions.msgpack"));
    assert!(!xml.contains(grey));
}

/// The byte axis is ticked at round binary values, as the viewer's grid is (0, 32 MiB, 64 MiB …,
/// not 47.7 MiB or 19.1 MiB): evenly, a power of two apart, each tick a multiple of that.
#[test]
fn the_byte_axis_is_ticked_at_round_binary_values() {
    let dir = tempfile::tempdir().unwrap();
    for (i, file) in [
        corpus("eval_keeps_predictions.msgpack"),
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/snapshots/real/bcrafton_cs336_training_step.pickle"),
    ]
    .iter()
    .enumerate()
    {
        let svg = dir.path().join(format!("{i}.svg"));
        assert!(
            report(file, &["--svg".as_ref(), svg.as_os_str()])
                .status
                .success()
        );
        let (_, texts) = parse(&std::fs::read_to_string(&svg).unwrap());
        let unit = |u: &str| match u {
            "B" => Some(1.0),
            "KiB" => Some(1024.0),
            "MiB" => Some(1048576.0),
            "GiB" => Some(1073741824.0),
            _ => None,
        };
        let ticks: Vec<f64> = texts
            .iter()
            .filter_map(|t| {
                let (number, u) = t.split_once(' ')?;
                Some(number.parse::<f64>().ok()? * unit(u)?)
            })
            .collect();
        assert!(ticks.len() >= 4, "{file:?}: {texts:?}");
        assert_eq!(ticks[0], 0.0, "{texts:?}");
        // Each axis from 0 (a snapshot's picture has a second: its active memory timeline's).
        let mut bounds: Vec<usize> = (0..ticks.len()).filter(|&k| ticks[k] == 0.0).collect();
        bounds.push(ticks.len());
        for axis in bounds.windows(2).map(|w| &ticks[w[0]..w[1]]) {
            assert!(axis.len() >= 3, "{ticks:?}");
            let step = axis[1] - axis[0];
            assert_eq!(step, 2f64.powf(step.log2().round()), "{ticks:?}");
            for (k, t) in axis.iter().enumerate() {
                assert_eq!(*t, k as f64 * step, "{ticks:?}");
            }
        }
        assert_eq!(bounds.len() - 1, if i == 1 { 2 } else { 1 }, "{ticks:?}");
    }
}

#[test]
fn a_snapshot_s_svg_carries_its_active_memory_timeline() {
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/fixtures/real-snapshots/bcrafton_cs336_training_step.pickle");
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("snapshot.svg");
    let output = report(&file, &["--svg".as_ref(), svg.as_os_str()]);
    assert!(output.status.success(), "{}", crate::stderr(&output));
    let (names, texts) = parse(&std::fs::read_to_string(&svg).unwrap());
    // One picture holding two: the curves, then the timeline, with its heading and legend.
    assert!(
        names.iter().filter(|n| *n == "svg").count() >= 3,
        "{names:?}"
    );
    let at = texts
        .iter()
        .position(|t| t == "Active memory timeline of cuda:0")
        .unwrap_or_else(|| panic!("no timeline heading in {texts:?}"));
    let after = &texts[at..];
    assert!(
        after
            .iter()
            .any(|t| t.starts_with("the history began late"))
    );
    assert!(
        after.iter().any(|t| t.ends_with("other sites")),
        "{after:?}"
    );
    assert!(after.iter().any(|t| t.starts_with("entry 0")), "{after:?}");
    // A recording's picture stays one.
    let plain = dir.path().join("recording.svg");
    let corpus = corpus("eval_keeps_predictions.msgpack");
    assert!(
        report(&corpus, &["--svg".as_ref(), plain.as_os_str()])
            .status
            .success()
    );
    let (names, texts) = parse(&std::fs::read_to_string(&plain).unwrap());
    assert_eq!(names.iter().filter(|n| *n == "svg").count(), 1);
    assert!(
        !texts
            .iter()
            .any(|t| t.starts_with("Active memory timeline"))
    );
}

#[test]
fn the_html_is_self_contained_and_the_markdown_points_at_its_picture() {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("report.html");
    let md = dir.path().join("summary.md");
    let output = report(
        &corpus("forward_keeps_losses.msgpack"),
        &[
            "--html".as_ref(),
            html.as_os_str(),
            "--markdown".as_ref(),
            md.as_os_str(),
        ],
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert!(page.contains("<svg") && page.contains("Host memory leak in forward"));
    assert!(!page.contains("<script") && !page.contains("src=") && !page.contains("@import"));
    // And the page says so to the browser: nothing may load.
    assert!(page.contains("default-src 'none'"));
    // The only URL is the SVG namespace, which is a name, not a request.
    let urls: Vec<&str> = page
        .match_indices("http://")
        .chain(page.match_indices("https://"))
        .map(|(i, _)| &page[i..i + 30])
        .collect();
    assert!(
        urls.iter()
            .all(|u| u.starts_with("http://www.w3.org/2000/svg")),
        "{urls:?}"
    );
    let summary = std::fs::read_to_string(&md).unwrap();
    assert!(
        summary.starts_with("### tidemark: ✗ Host memory leak in forward"),
        "{summary}"
    );
    assert!(summary.contains("](summary.svg)"), "{summary}");
    assert!(summary.contains("| forward |"), "{summary}");
    parse(&std::fs::read_to_string(dir.path().join("summary.svg")).unwrap());
}

fn recording_with(samples: usize) -> Recording {
    let mut recording = Recording::new(tidemark_tests::header(&["python", "train.py"]));
    if samples > 0 {
        recording.push(collector::recording::Record::Chunk(Chunk {
            times_ns: (0..samples as u64).map(|i| i * 1_000_000).collect(),
            columns: vec![Column {
                series: SeriesKey::new(SeriesKind::HostRss),
                values: vec![1 << 30; samples],
                valid: None,
            }],
        }));
    }
    recording
}

#[test]
fn a_projected_out_of_memory_error_is_marked_when_near_and_told_when_far() {
    use tidemark_tests::{GIB, MIB, gpu_leak};
    let dir = tempfile::tempdir().unwrap();
    // 300 MiB a step from 40 GiB: 69 GiB after 100 steps, 80 GiB some 38 steps later.
    let near = dir.path().join("near.msgpack");
    write_file(&near, &gpu_leak(100, 40 * GIB, 300 * MIB)).unwrap();
    let svg = dir.path().join("near.svg");
    let output = report(&near, &["--svg".as_ref(), svg.as_os_str()]);
    assert!(output.status.success());
    let (_, texts) = parse(&std::fs::read_to_string(&svg).unwrap());
    let marked: Vec<&String> = texts
        .iter()
        .filter(|t| t.starts_with("projected out of memory at step "))
        .collect();
    assert_eq!(marked.len(), 1, "{texts:?}");
    let step: u64 = marked[0].rsplit(' ').next().unwrap().parse().unwrap();
    assert!((130..=145).contains(&step), "{step}");
    assert!(texts.contains(&format!("out of memory at step {step}")));
    // The caption, over two lines.
    assert!(
        texts.join(" ").contains(&format!(
            "the trend reaches the capacity (80.0 GiB) at step {step} (marked)"
        )),
        "{texts:?}"
    );
    // The x axis goes on to the projected step: its labels pass the recording's 10 s.
    assert!(texts.iter().any(|t| t == "12 s"), "{texts:?}");

    // 10 MiB a step: thousands of steps away. Not drawn; the caption says where.
    let far = dir.path().join("far.msgpack");
    write_file(&far, &gpu_leak(100, 40 * GIB, 10 * MIB)).unwrap();
    let svg = dir.path().join("far.svg");
    assert!(
        report(&far, &["--svg".as_ref(), svg.as_os_str()])
            .status
            .success()
    );
    let (_, texts) = parse(&std::fs::read_to_string(&svg).unwrap());
    assert!(!texts.iter().any(|t| t.contains("projected out of memory")));
    assert!(
        texts
            .join(" ")
            .contains("after the last step: beyond the picture"),
        "{texts:?}"
    );
}

#[test]
fn a_snapshots_leak_suspects_are_marked_where_their_blocks_were_allocated() {
    // A real snapshot: one suspect site with 16 blocks of 16 MiB alive at the end, named by
    // the user's code (`main`), not by torch's `convert` under it.
    let file =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/snapshots/mini_snapshot.pickle");
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("snap.svg");
    let output = report(&file, &["--svg".as_ref(), svg.as_os_str()]);
    assert!(output.status.success());
    let xml = std::fs::read_to_string(&svg).unwrap();
    let (names, texts) = parse(&xml);
    assert!(
        texts.contains(
            &"allocated at 16 times, alive at the end: main (misc/attention.py:358) (256 MiB in 16 blocks)".to_owned()
        ),
        "{texts:?}"
    );
    assert!(
        texts.join(" ").contains(
            "marked: where the blocks of 1 site still alive at the end were allocated (the trace has no steps: what one step holds and a leak look alike)"
        ),
        "{texts:?}"
    );
    // 16 triangles on the curve and one in the legend, in the suspects' colour.
    let fill = format!(
        "fill=\"{}\"",
        collector::palette::SUSPECT.hex().to_uppercase()
    );
    let triangles = xml
        .lines()
        .flat_map(|l| l.split("<polygon").skip(1))
        .filter(|p| p.split('>').next().is_some_and(|p| p.contains(&fill)))
        .count();
    assert_eq!(triangles, 17, "{names:?}");
}

#[test]
fn nothing_to_draw_is_said_in_the_picture() {
    let dir = tempfile::tempdir().unwrap();
    for (samples, why) in [
        (0, "Nothing to draw: the recording has no samples"),
        (1, "Nothing to draw: the recording holds one sample"),
    ] {
        let file = dir.path().join(format!("{samples}.msgpack"));
        write_file(&file, &recording_with(samples)).unwrap();
        let svg = dir.path().join(format!("{samples}.svg"));
        let output = report(&file, &["--svg".as_ref(), svg.as_os_str()]);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let (_, texts) = parse(&std::fs::read_to_string(&svg).unwrap());
        assert!(
            texts.iter().any(|t| t.starts_with(why)),
            "{samples}: {texts:?}"
        );
    }
    // Two samples and no steps: a curve, and a caption that says the trend is over time windows.
    let file = dir.path().join("2.msgpack");
    write_file(&file, &recording_with(2)).unwrap();
    let svg = dir.path().join("2.svg");
    assert!(
        report(&file, &["--svg".as_ref(), svg.as_os_str()])
            .status
            .success()
    );
    let (names, texts) = parse(&std::fs::read_to_string(&svg).unwrap());
    assert!(names.iter().any(|n| n == "polyline"), "{names:?}");
    assert!(
        texts.iter().any(|t| t.contains("no steps were recorded")),
        "{texts:?}"
    );
}

#[test]
fn an_unwritable_output_is_an_error_before_any_work() {
    // The recording does not even exist: the output path is checked first.
    for flag in ["--svg", "--html", "--markdown"] {
        let output = report(
            Path::new("/nonexistent/run.msgpack"),
            &[flag.as_ref(), "/nonexistent/folder/out.file".as_ref()],
        );
        assert_eq!(output.status.code(), Some(2), "{flag}");
        let err = String::from_utf8_lossy(&output.stderr);
        assert!(
            err.contains("cannot write /nonexistent/folder/out.file"),
            "{flag}: {err}"
        );
        assert!(
            !err.contains("run.msgpack"),
            "the recording was not read: {err}"
        );
        assert!(output.stdout.is_empty());
    }
}

#[test]
fn real_snapshots_draw_their_trace_or_say_they_have_none() {
    let real =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/real-snapshots");
    let dir = tempfile::tempdir().unwrap();
    for (name, curve) in [
        ("bcrafton_cs336_training_step.pickle", true),
        ("verl_rollout_state.pickle", false),
    ] {
        let svg = dir.path().join(format!("{name}.svg"));
        let output = report(&real.join(name), &["--svg".as_ref(), svg.as_os_str()]);
        assert!(
            output.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let (names, texts) = parse(&std::fs::read_to_string(&svg).unwrap());
        if curve {
            assert!(names.iter().any(|n| n == "polyline"), "{name}");
            // A trace tens of milliseconds long still gets distinct axis labels.
            let ticks: Vec<&String> = texts.iter().filter(|t| t.ends_with(" s")).collect();
            let distinct: std::collections::BTreeSet<&&String> = ticks.iter().collect();
            assert!(
                distinct.len() >= 3 && distinct.len() == ticks.len(),
                "{ticks:?}"
            );
        } else {
            // The apostrophe is an XML entity: the text comes in pieces.
            let all = texts.concat();
            assert!(
                all.contains("Nothing to draw: the snapshot")
                    && all.contains("trace holds no allocations over time"),
                "{name}: {texts:?}"
            );
        }
    }
}

#[test]
fn a_snapshot_s_html_report_shows_its_active_memory_timeline_by_site() {
    let real =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/real-snapshots");
    let file = real.join("bcrafton_cs336_training_step.pickle");
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("report.html");
    let output = report(&file, &["--html".as_ref(), html.as_os_str()]);
    assert!(output.status.success(), "{}", crate::stderr(&output));
    let page = std::fs::read_to_string(&html).unwrap();
    let at = page
        .find("<h2>Active memory timeline of cuda:0</h2>")
        .unwrap_or_else(|| panic!("no active memory timeline in {page}"));
    // Its picture parses, with a band per ranked site and one for the rest.
    let section = &page[at..];
    let svg = &section[section.find("<svg").unwrap()..section.find("</svg>").unwrap() + 6];
    let (names, _) = parse(svg);
    let paths = names.iter().filter(|n| *n == "path").count();
    let legend = &section[section.find("<ul class=\"sites\">").unwrap()..];
    let legend = &legend[..legend.find("</ul>").unwrap()];
    let entries = legend.matches("<li>").count();
    assert_eq!(paths, entries, "{legend}");
    assert!(legend.contains("other sites"), "{legend}");
    // The largest site is the blocks alive before the trace began, which it says.
    assert!(section.contains("the history began late"));
    // The bytes alive at the snapshot are those the layout finds in the trace and segments.
    let snapshot = collector::snapshot::read_snapshot(&std::fs::read(&file).unwrap()).unwrap();
    let layout = collector::snapshot::timeline::MemoryTimeline::new(&snapshot);
    let alive = collector::format::format_bytes(layout.devices[0].end_bytes as f64);
    assert!(
        section.contains(&format!("{alive} alive at the snapshot")),
        "{alive}"
    );
}
