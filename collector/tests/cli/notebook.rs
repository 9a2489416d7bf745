//! A real Jupyter kernel (ipykernel, driven headless by nbclient) records itself:
//! `%load_ext tidemark`, `%tidemark start`, the cells, `%tidemark stop`, `%tidemark report`.

use std::path::Path;
use std::process::Command;

use crate::python;

/// Runs `cells` in a fresh kernel; each cell's stream and error outputs, joined.
fn run_notebook(dir: &Path, cells: &[&str]) -> Vec<String> {
    run_notebook_with(dir, cells, &[])
}

/// [`run_notebook`], the kernel given `env` besides.
fn run_notebook_with(dir: &Path, cells: &[&str], env: &[(&str, &Path)]) -> Vec<String> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let notebook = dir.join("notebook.json");
    std::fs::write(&notebook, serde_json::to_string(cells).unwrap()).unwrap();
    let output = Command::new(python())
        .arg(manifest.join("tests/data/notebook/run.py"))
        .arg(&notebook)
        .current_dir(dir)
        .env("PYTHONPATH", manifest.join("probe"))
        .env("TIDEMARK_COLLECTOR", env!("CARGO_BIN_EXE_collector"))
        .env("OMP_NUM_THREADS", "1")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let cells: Vec<(String, Vec<String>)> = serde_json::from_slice(&output.stdout).unwrap();
    cells.into_iter().map(|(_, texts)| texts.concat()).collect()
}

/// The recording at `out` once the collector has written its end (it notices a kernel gone
/// within its sampling interval); fails after 30 s.
fn whole_recording(out: &Path) -> collector::recording::Recording {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        if let Ok(r) = collector::recording::read_file(out)
            && r.end.is_some()
        {
            return r;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no whole recording at {}",
            out.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// A training loop in a notebook that keeps every step's outputs: the kernel, recorded from
/// within, is judged as a script would be — a leak, held by the notebook's `outputs` — by
/// `%tidemark report` and by `collector report` of the file. A second start says one is
/// running; a stop with none running says so.
#[test]
fn a_kernel_records_itself_and_its_leak_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("nb.msgpack");
    let start = format!("%tidemark start {}", out.display());
    let cells = run_notebook(
        dir.path(),
        &[
            "%load_ext tidemark",
            "%tidemark stop",
            &start,
            &start,
            "import torch\n\
             torch.manual_seed(0)\n\
             torch.set_num_threads(1)\n\
             model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 256))\n\
             opt = torch.optim.SGD(model.parameters(), lr=0.01)\n\
             outputs = []\n\
             for step in range(60):\n\
             \x20   opt.zero_grad()\n\
             \x20   out = model(torch.randn(2048, 256))\n\
             \x20   out.pow(2).mean().backward()\n\
             \x20   opt.step()\n\
             \x20   outputs.append(out.detach())  # 2 MiB kept every step",
            "%tidemark stop",
            "%tidemark report",
        ],
    );
    assert!(cells[1].contains("tidemark: not recording"), "{cells:#?}");
    assert_eq!(
        cells[2],
        format!("tidemark: recording this kernel to {}\n", out.display())
    );
    assert!(
        cells[3].contains("tidemark: already recording to"),
        "{cells:#?}"
    );
    assert!(
        cells[5].starts_with("tidemark: stopped; the recording is"),
        "{cells:#?}"
    );
    // The text as the CLI prints it, then the HTML report in a frame of its own, with its picture.
    let (report, page) = cells[6]
        .split_once("\n<html output>")
        .unwrap_or_else(|| panic!("no HTML: {:#?}", cells[6]));
    assert!(
        page.starts_with("<iframe srcdoc=\"&lt;!DOCTYPE html&gt;") && page.contains("&lt;svg"),
        "{page}"
    );
    let verdict = report
        .lines()
        .find(|l| l.trim_start().starts_with('✗'))
        .unwrap_or_else(|| panic!("{report}"));
    assert!(
        verdict.contains("Host memory leak") && verdict.ends_with("held by __main__.outputs"),
        "{report}"
    );
    // The file, as the CLI reads it: the same verdict, and the kernel's 60 steps.
    let text = crate::report(&out);
    assert!(text.contains(verdict), "{text}");
    let recording = collector::recording::read_file(&out).unwrap();
    assert!(
        recording.phases.len() >= 60 * 4,
        "{} edges",
        recording.phases.len()
    );
    assert!(
        recording
            .header
            .command
            .iter()
            .any(|w| w.contains("ipykernel")),
        "{:?}",
        recording.header.command
    );
}

/// What a notebook holds is named as the notebook knows it: a cell's displayed value by IPython's
/// output cache (`Out[3]`, not `_`), the locals of the cell that failed by the last error's
/// traceback (in its cell, not a temporary file's name), each with how to free it; a global is a
/// global. The census at `%tidemark stop` sees them.
#[test]
fn what_a_notebook_holds_is_named_as_the_notebook_knows_it() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("nb.msgpack");
    let start = format!("%tidemark start {}", out.display());
    let cells = run_notebook(
        dir.path(),
        &[
            "%load_ext tidemark",
            &start,
            "import torch\ntorch.ones(2048, 2048)",
            "def f():\n    big = torch.ones(4096, 1024)\n    raise ValueError('boom')\nf()",
            "kept = [torch.ones(1024, 1024) for _ in range(3)]",
            "%tidemark stop",
        ],
    );
    assert!(cells[3].contains("ValueError: boom"), "{cells:#?}");
    let text = crate::report(&out);
    let holders: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("HOLDERS"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .collect();
    let line = |name: &str| {
        holders
            .iter()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("{name}: {text}"))
            .to_owned()
    };
    assert!(
        line("Out[3] ").contains("16.0 MiB in    1 tensor")
            && line("Out[3] ").contains(
                "the output of cell [3], kept by IPython's output cache (`Out`, `_`: `%reset -f out` frees it)"
            ),
        "{text}"
    );
    assert!(
        line("big ").contains("16.0 MiB")
            && line("big ").contains(
                "a local of f() (cell [4], line 3), kept by the last error's traceback (`sys.last_traceback = None` frees it)"
            ),
        "{text}"
    );
    assert!(
        line("__main__.kept ").contains("12.0 MiB in    3 tensors"),
        "{text}"
    );
    assert!(
        !holders
            .iter()
            .any(|l| l.trim_start().starts_with("__main__._ ")),
        "{text}"
    );
    // The cells that hold them say so.
    let cell = |count: u64| {
        text.lines()
            .skip_while(|l| !l.starts_with("CELLS"))
            .find(|l| l.trim_start().starts_with(&format!("cell [{count}]")))
            .unwrap_or_else(|| panic!("cell [{count}]: {text}"))
    };
    assert!(cell(3).ends_with("— held by Out[3] (16.0 MiB)"), "{text}");
    assert!(cell(4).ends_with("— held by big (16.0 MiB)"), "{text}");
    assert!(!cell(5).contains("held by"), "{text}");
}

/// A kernel that dies while it records (here a plain Python process that started recording
/// itself with `tidemark.notebook.start()`, then ends without a word): the collector, in a
/// session of its own, sees it gone and finishes the recording, which reads whole.
#[test]
fn a_kernel_that_dies_while_recording_leaves_a_whole_recording() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("died.msgpack");
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let status = Command::new(python())
        .arg("-c")
        .arg(format!(
            "import os, tidemark.notebook as nb\n\
             nb.start({:?})\n\
             import torch\n\
             kept = [torch.ones(1 << 20) for _ in range(8)]\n\
             os._exit(3)",
            out.display().to_string()
        ))
        .env("PYTHONPATH", manifest.join("probe"))
        .env("TIDEMARK_COLLECTOR", env!("CARGO_BIN_EXE_collector"))
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(3));
    let recording = whole_recording(&out);
    assert!(
        recording.series.iter().any(|s| !s.values.is_empty()),
        "the process' memory was sampled"
    );
}

/// Without a collector where the kernel can find it, `start` says how to get one and records
/// nothing; the process runs on.
#[test]
fn without_a_collector_start_says_how_to_get_one() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let output = Command::new(python())
        .arg("-c")
        .arg(
            "import tidemark.notebook as nb\n\
             try:\n\
             \x20   nb.start('x.msgpack')\n\
             except nb.NotebookError as error:\n\
             \x20   print(error)\n\
             print('ran on')",
        )
        .current_dir(dir.path())
        .env("PYTHONPATH", manifest.join("probe"))
        .env_remove("TIDEMARK_COLLECTOR")
        .env("PATH", dir.path())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        said.contains("the collector is not installed where this kernel can find it")
            && said.contains("pip install")
            && said.ends_with("ran on\n"),
        "{said}"
    );
    assert!(!dir.path().join("x.msgpack").exists());
}

/// `%tidemark view` shows the web viewer in the cell, following the recording: a frame on
/// `collector serve` of the recording's folder (loopback, a free port), which serves the viewer
/// and the recording as it grows, and ends with the kernel. A viewer that cannot be served is
/// said, and the kernel runs on.
#[test]
fn the_viewer_is_shown_in_the_cell_and_follows_the_recording() {
    let dir = tempfile::tempdir().unwrap();
    // The web viewer's files, as `trunk build` leaves them (a debug collector has none built in).
    let web = dir.path().join("dist");
    std::fs::create_dir(&web).unwrap();
    std::fs::write(
        web.join("index.html"),
        "<!DOCTYPE html><title>the tidemark viewer</title>",
    )
    .unwrap();
    let out = dir.path().join("nb.msgpack");
    let start = format!("%tidemark start {}", out.display());
    let cells = run_notebook_with(
        dir.path(),
        &[
            "%load_ext tidemark",
            &start,
            "import torch\nx = [torch.ones(1024, 1024) for _ in range(4)]",
            "%tidemark view",
            "import time, urllib.request, tidemark.notebook as nb\n\
             address = nb.view()\n\
             base = address.split('viewer/')[0]\n\
             print(urllib.request.urlopen(address).read().decode())\n\
             size = lambda: len(urllib.request.urlopen(base + 'runs/nb.msgpack').read())\n\
             first = size()\n\
             more = [torch.ones(1024, 1024) for _ in range(4)]\n\
             deadline = time.monotonic() + 20\n\
             while size() <= first and time.monotonic() < deadline:\n\
             \x20   time.sleep(0.2)\n\
             print('grew', size() > first)\n\
             print('server', nb._server[0].pid)",
            "import os, tidemark.notebook as nb\n\
             os.environ['TIDEMARK_WEB'] = os.path.join(os.getcwd(), 'nowhere')\n\
             nb._stop_server()",
            "%tidemark view",
            "print('ran on')",
            "%tidemark stop",
        ],
        &[("TIDEMARK_WEB", &web)],
    );
    assert!(
        cells[3].starts_with("tidemark: the viewer, following the recording: http://127.0.0.1:"),
        "{cells:#?}"
    );
    let (_, frame) = cells[3]
        .split_once("\n<html output>")
        .unwrap_or_else(|| panic!("no frame: {cells:#?}"));
    assert!(
        frame.contains("<iframe")
            && frame.contains("/viewer/?url=..%2Fruns%2Fnb.msgpack&amp;follow=1\""),
        "{frame}"
    );
    assert!(
        cells[4].contains("<title>the tidemark viewer</title>"),
        "{cells:#?}"
    );
    assert!(cells[4].contains("grew True"), "{cells:#?}");
    assert!(
        cells[6].contains("the viewer's server did not start")
            && cells[6].contains("no web viewer in"),
        "{cells:#?}"
    );
    assert_eq!(cells[7], "ran on\n");
    // The server ends with the kernel.
    let pid: u32 = cells[4]
        .lines()
        .find_map(|l| l.strip_prefix("server "))
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("{cells:#?}"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while Path::new(&format!("/proc/{pid}")).exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the viewer's server {pid} outlived the kernel"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Each cell's run is marked while the kernel records: the report's CELLS section says what each
/// run kept (the kernel's resident memory after it less before it: a CPU kernel), and that the
/// cell run three times keeps its 32 MiB each time, while the one that frees what it made keeps
/// nothing; the cells are not phases, and the cells that start and stop the recording are not
/// marked.
#[test]
fn each_cell_s_run_says_what_it_kept() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("nb.msgpack");
    let start = format!("%tidemark start {}", out.display());
    let grow = "kept.append(torch.ones(8192, 1024))  # 32 MiB";
    run_notebook(
        dir.path(),
        &[
            "%load_ext tidemark",
            &start,
            "import torch\nkept = []",
            grow,
            grow,
            grow,
            "tmp = torch.ones(8192, 1024)\ndel tmp",
            "%tidemark stop",
        ],
    );
    let recording = collector::recording::read_file(&out).unwrap();
    assert!(
        recording.phases.iter().all(|e| e.phase.cell().is_none()),
        "cells are not phases"
    );
    let text = crate::report(&out);
    let cells: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("CELLS"))
        .take_while(|l| !l.is_empty())
        .collect();
    assert_eq!(
        cells.first(),
        Some(&"CELLS (host memory after each run less before it)"),
        "{text}"
    );
    let kept = |count: u64| -> f64 {
        let line = cells
            .iter()
            .find(|l| l.trim_start().starts_with(&format!("cell [{count}]")))
            .unwrap_or_else(|| panic!("cell [{count}]: {text}"));
        let words: Vec<&str> = line.split_whitespace().collect();
        let (value, unit) = (words[2], words[3]);
        let value: f64 = value.trim_start_matches('+').parse().unwrap();
        value
            * match unit {
                "MiB" => 1.0,
                "KiB" => 1.0 / 1024.0,
                "B" => 1.0 / (1024.0 * 1024.0),
                other => panic!("{other}: {line}"),
            }
    };
    for count in [4, 5, 6] {
        let mib = kept(count);
        assert!(
            (31.0..=34.0).contains(&mib),
            "cell [{count}] kept {mib} MiB: {text}"
        );
    }
    assert!(kept(7).abs() < 2.0, "{text}");
    // The verdict leads with it, each run its evidence.
    let verdict = text
        .lines()
        .find(|l| l.trim_start().starts_with('✗'))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        verdict.contains(&format!(
            "✗ Each run of cell `{grow}` keeps memory: at least"
        )) && verdict.ends_with("in 3 runs ([4], [5], [6])"),
        "{text}"
    );
    assert!(text.contains("      cell [5] kept "), "{text}");
    // Neither the start's nor the stop's cell.
    assert!(!text.contains("%tidemark"), "{text}");
}

/// A kernel restarted while it records (Jupyter's "Restart kernel": the kernel killed, a new one
/// started, driven here by jupyter_client): the collector sees the old kernel gone and ends the
/// recording, which reads whole with the cell it ran; the new kernel runs on.
#[test]
fn a_kernel_restarted_while_recording_leaves_a_whole_recording() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("nb.msgpack");
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let output = Command::new(python())
        .arg(manifest.join("tests/data/notebook/restart.py"))
        .arg(&out)
        .current_dir(dir.path())
        .env("PYTHONPATH", manifest.join("probe"))
        .env("TIDEMARK_COLLECTOR", env!("CARGO_BIN_EXE_collector"))
        .env("OMP_NUM_THREADS", "1")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let pids: serde_json::Value = serde_json::from_slice(
        output
            .stdout
            .split(|&b| b == b'\n')
            .rfind(|l| l.starts_with(b"{"))
            .unwrap_or_default(),
    )
    .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&output.stdout)));
    assert_ne!(pids["old"], pids["new"], "a new kernel ran");
    let recording = whole_recording(&out);
    assert!(recording.series.iter().any(|s| !s.values.is_empty()));
    let cells = collector::analysis::cells(&recording);
    assert!(
        cells
            .runs
            .iter()
            .any(|r| r.source.starts_with("import os, torch") && r.end_ns.is_some()),
        "{:?}",
        cells.runs
    );
}

/// A notebook that frees what each cell made: no finding of a problem, no cell that keeps
/// memory, each run of the cell keeping next to nothing.
#[test]
fn a_notebook_that_frees_everything_is_judged_clean() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("nb.msgpack");
    let start = format!("%tidemark start {}", out.display());
    let work = "x = torch.ones(8192, 1024)\ny = (x * 2).sum()\ndel x, y";
    run_notebook(
        dir.path(),
        &[
            "%load_ext tidemark",
            &start,
            "import torch",
            work,
            work,
            work,
            "%tidemark stop",
        ],
    );
    let text = crate::report(&out);
    assert!(!text.contains('✗'), "{text}");
    let runs = collector::analysis::cells(&collector::recording::read_file(&out).unwrap());
    let kept: Vec<i64> = runs
        .runs
        .iter()
        .filter(|r| r.source.starts_with("x = torch.ones"))
        .filter_map(|r| r.kept())
        .collect();
    assert_eq!(kept.len(), 3, "{:?}", runs.runs);
    // Resident memory moves by a few MiB as the first run warms up (the allocator's arenas,
    // the thread pool): far less than the 32 MiB each run makes.
    assert!(
        kept.iter().all(|&k| k.abs() < 8 << 20),
        "each run keeps far less than it made: {kept:?}"
    );
    assert!(runs.reruns.is_empty(), "{:?}", runs.reruns);
}
