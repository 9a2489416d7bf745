//! `collector serve DIR`: the real server on a loopback port, asked over plain TCP connections
//! (raw request lines, so that `..` and percent-encoded dots reach it as a hostile client would
//! send them).

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `collector serve`, stopped when dropped.
struct Server {
    child: Child,
    port: u16,
    /// What it printed before serving.
    printed: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `collector serve DIR --port 0 [extra…]`, once it printed its URL.
fn serve(dir: &Path, extra: &[&str]) -> Server {
    serve_with(Command::new(env!("CARGO_BIN_EXE_collector")), dir, extra)
}

/// [`serve`] through `command` (the collector, or a command that runs it).
fn serve_with(mut command: Command, dir: &Path, extra: &[&str]) -> Server {
    let mut child = command
        .args(["serve", "--port", "0"])
        .args(extra)
        .arg(dir)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut printed = String::new();
    let port = loop {
        let line = lines
            .next()
            .expect("collector serve ended before its URL")
            .unwrap();
        printed.push_str(&line);
        printed.push('\n');
        if let Some(rest) = line.trim().strip_prefix("open http://") {
            let port = rest.split_once(':').unwrap().1;
            break port.split('/').next().unwrap().parse().unwrap();
        }
    };
    for line in lines.take(1).map_while(Result::ok) {
        printed.push_str(&line);
        printed.push('\n');
    }
    Server {
        child,
        port,
        printed,
    }
}

/// An answer: status, headers (lower-case names) and body.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.text()))
    }
}

/// `GET target` with `headers`, the target sent as it is.
fn get(port: u16, target: &str, headers: &[&str]) -> Answer {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut request = format!("GET {target} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    for h in headers {
        request.push_str(h);
        request.push_str("\r\n");
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("an HTTP answer");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Answer {
        status,
        headers,
        body: raw[split + 4..].to_vec(),
    }
}

/// `GET /api/runs` until every run that can be read has its headline (judging runs on the
/// server's own thread; the deadline only stops a test that would otherwise hang).
fn judged_list(port: u16) -> Vec<serde_json::Value> {
    let start = Instant::now();
    loop {
        let list = get(port, "/api/runs", &[]).json();
        let runs = list.as_array().unwrap().clone();
        if runs
            .iter()
            .all(|r| !r["headline"].is_null() || !r["error"].is_null())
        {
            return runs;
        }
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "never judged: {list}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn by_name<'a>(runs: &'a [serde_json::Value], name: &str) -> &'a serde_json::Value {
    runs.iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("{name} is not listed: {runs:?}"))
}

/// A folder with every kind of input in it (`tidemark_tests::inputs::samples`), the files
/// copied in.
fn folder() -> (tempfile::TempDir, Vec<(String, PathBuf)>) {
    let dir = tempfile::tempdir().unwrap();
    let samples = tidemark_tests::inputs::samples(dir.path()).unwrap();
    let mut runs = Vec::new();
    for sample in samples.iter().filter(|s| s.kind.is_some()) {
        // Named by the path under the folder (a sample made in a folder of its own, as the
        // `--history` one, keeps it: `history/run.msgpack`).
        let name = match sample.path.strip_prefix(dir.path()) {
            Ok(inside) => inside.to_string_lossy().into_owned(),
            Err(_) => {
                let name = sample
                    .path
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                std::fs::copy(&sample.path, dir.path().join(&name)).unwrap();
                name
            }
        };
        runs.push((name.clone(), dir.path().join(name)));
    }
    (dir, runs)
}

#[test]
fn the_list_shows_every_run_with_the_librarys_kind_and_headline() {
    let (dir, runs) = folder();
    let server = serve(dir.path(), &[]);
    assert!(server.printed.contains("ssh -L"), "{}", server.printed);
    let list = judged_list(server.port);
    for (name, path) in &runs {
        let run = by_name(&list, name);
        let (kind, headline) = tidemark_tests::inputs::judged(path).unwrap();
        assert_eq!(run["kind"], serde_json::to_value(kind).unwrap(), "{name}");
        assert_eq!(run["headline"], headline.as_str(), "{name}");
        assert!(run["error"].is_null(), "{name}: {run}");
        assert_eq!(run["judged_current"], true, "{name}");
        let size: u64 = if path.is_dir() {
            std::fs::read_dir(path)
                .unwrap()
                .map(|e| e.unwrap().metadata().unwrap().len())
                .sum()
        } else {
            std::fs::metadata(path).unwrap().len()
        };
        assert_eq!(run["size"], size, "{name}");
    }
    // The folders of nodes and of ranks are one run each: their files are not listed apart (a
    // plain folder's files are: `history/`).
    assert!(
        list.iter().all(|r| {
            let name = r["name"].as_str().unwrap();
            !name.starts_with("nodes/") && !name.starts_with("ranks/")
        }),
        "{list:?}"
    );
    // A folder run names its files, each served as it is (the viewer fetches a rank folder's).
    for (folder, count) in [("nodes", 2), ("ranks", 3)] {
        let files: Vec<&str> = by_name(&list, folder)["files"]
            .as_array()
            .unwrap_or_else(|| panic!("{folder} names no files"))
            .iter()
            .map(|f| f.as_str().unwrap())
            .collect();
        assert_eq!(files.len(), count, "{folder}: {files:?}");
        for file in files {
            assert!(file.starts_with(&format!("{folder}/")), "{file}");
            let bytes = get(server.port, &format!("/runs/{file}"), &[]);
            assert_eq!(bytes.status, 200, "{file}");
            assert_eq!(bytes.body, std::fs::read(dir.path().join(file)).unwrap());
        }
    }
    // Files named like runs that are none are listed with what is wrong; an empty folder is not.
    for (name, error) in [
        ("plot.msgpack", "at byte 0 it holds a PNG image"),
        ("empty.msgpack", "the file is empty"),
        ("model.pickle", "zip archive"),
    ] {
        let run = by_name(&list, name);
        assert!(run["error"].as_str().unwrap().contains(error), "{run}");
        assert!(run["headline"].is_null());
    }
    assert!(list.iter().all(|r| r["name"] != "empty"));
    // The page lists them too.
    let page = get(server.port, "/", &[]).text();
    for (name, _) in &runs {
        assert!(page.contains(&format!("data-name=\"{name}\"")), "{name}");
    }
}

#[test]
fn the_report_is_collector_report_json() {
    let (dir, runs) = folder();
    let server = serve(dir.path(), &[]);
    for (name, path) in &runs {
        let served = get(server.port, &format!("/api/runs/{name}/report"), &[]);
        assert_eq!(served.status, 200, "{name}: {}", served.text());
        let canonical = std::fs::canonicalize(path).unwrap();
        assert_eq!(served.json(), crate::report_json(&canonical), "{name}");
    }
    let missing = get(server.port, "/api/runs/nothing.msgpack/report", &[]);
    assert_eq!(missing.status, 404);
}

#[test]
fn ranges_return_exact_bytes() {
    let (dir, _) = folder();
    let server = serve(dir.path(), &[]);
    let name = "eval_keeps_predictions.msgpack";
    let bytes = std::fs::read(dir.path().join(name)).unwrap();
    let len = bytes.len();
    let target = format!("/runs/{name}");
    let whole = get(server.port, &target, &[]);
    assert_eq!((whole.status, &whole.body), (200, &bytes));
    assert_eq!(whole.header("accept-ranges"), Some("bytes"));
    for (range, from, to) in [
        ("bytes=3-10", 3, 11),
        ("bytes=100-", 100, len),
        ("bytes=-7", len - 7, len),
        ("bytes=0-0", 0, 1),
        (&format!("bytes=5-{}", len * 2), 5, len),
    ] {
        let part = get(server.port, &target, &[&format!("Range: {range}")]);
        assert_eq!(part.status, 206, "{range}");
        assert_eq!(part.body, bytes[from..to], "{range}");
        assert_eq!(
            part.header("content-range"),
            Some(format!("bytes {from}-{}/{len}", to - 1).as_str()),
            "{range}"
        );
        assert_eq!(
            part.header("content-length"),
            Some((to - from).to_string().as_str())
        );
    }
    let past = get(server.port, &target, &[&format!("Range: bytes={len}-")]);
    assert_eq!(past.status, 416);
    assert_eq!(
        past.header("content-range"),
        Some(format!("bytes */{len}").as_str())
    );
    // A folder run is served as the one recording it reads as.
    let nodes = get(server.port, "/runs/nodes", &[]);
    assert_eq!(nodes.status, 200, "{}", nodes.text());
    let merged = collector::recording::read_recording(&nodes.body).unwrap();
    assert!(
        merged
            .notes
            .iter()
            .any(|n| n.text.contains("2 recordings (hosts node-0, node-1)")),
        "{:?}",
        merged.notes
    );
}

#[test]
fn a_growing_file_is_served_as_it_grows() {
    let dir = tempfile::tempdir().unwrap();
    let source = tidemark_tests::inputs::data("golden_v1_3.msgpack");
    let bytes = std::fs::read(source).unwrap();
    let file = dir.path().join("live.msgpack");
    std::fs::write(&file, &bytes[..1000]).unwrap();
    let server = serve(dir.path(), &[]);
    let first = get(server.port, "/api/runs", &[]).json();
    assert_eq!(first[0]["size"], 1000);
    assert_eq!(first[0]["growing"], true);
    std::fs::write(&file, &bytes).unwrap();
    let rest = get(server.port, "/runs/live.msgpack", &["Range: bytes=1000-"]);
    assert_eq!(rest.body, bytes[1000..]);
    let list = get(server.port, "/api/runs", &[]).json();
    assert_eq!(list[0]["size"], bytes.len());
}

#[test]
fn nothing_outside_the_folder_is_served() {
    let outer = tempfile::tempdir().unwrap();
    let dir = outer.path().join("runs");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(outer.path().join("secret.msgpack"), b"TIDEMARK secret").unwrap();
    std::fs::copy(
        tidemark_tests::inputs::data("golden_v1_3.msgpack"),
        dir.join("a.msgpack"),
    )
    .unwrap();
    std::os::unix::fs::symlink(outer.path().join("secret.msgpack"), dir.join("out.msgpack"))
        .unwrap();
    let web = outer.path().join("web");
    std::fs::create_dir(&web).unwrap();
    std::fs::write(web.join("index.html"), b"<html>viewer</html>").unwrap();
    let server = serve(&dir, &["--web", web.to_str().unwrap()]);
    assert_eq!(get(server.port, "/runs/a.msgpack", &[]).status, 200);
    assert_eq!(
        get(server.port, "/viewer/", &[]).text(),
        "<html>viewer</html>"
    );
    let secret = outer.path().join("secret.msgpack");
    for target in [
        "/runs/../secret.msgpack".to_owned(),
        "/runs/%2e%2e/secret.msgpack".to_owned(),
        "/runs/%2E%2E%2Fsecret.msgpack".to_owned(),
        "/runs/a.msgpack/../../secret.msgpack".to_owned(),
        format!("/runs/{}", secret.display()),
        format!(
            "/runs/%2F{}",
            secret.display().to_string().trim_start_matches('/')
        ),
        "/runs//etc/passwd".to_owned(),
        "/runs/out.msgpack".to_owned(),
        "/api/runs/..%2Fsecret.msgpack/report".to_owned(),
        "/api/runs/out.msgpack/report".to_owned(),
        "/viewer/../runs/secret.msgpack".to_owned(),
        "/viewer/%2e%2e/secret.msgpack".to_owned(),
    ] {
        let answer = get(server.port, &target, &[]);
        assert_eq!(answer.status, 404, "{target}: {}", answer.text());
        assert!(!answer.text().contains("secret"), "{target}");
    }
    let list = get(server.port, "/api/runs", &[]).text();
    assert!(!list.contains("out.msgpack"), "{list}");
}

#[test]
fn a_token_is_required_when_given() {
    let (dir, _) = folder();
    let server = serve(dir.path(), &["--token", "s3cret"]);
    assert!(
        server.printed.contains("?token=s3cret"),
        "{}",
        server.printed
    );
    assert_eq!(get(server.port, "/api/runs", &[]).status, 401);
    assert_eq!(get(server.port, "/runs/nodes", &[]).status, 401);
    assert_eq!(get(server.port, "/api/runs?token=wrong", &[]).status, 401);
    assert_eq!(
        get(server.port, "/api/runs", &["Authorization: Bearer wrong"]).status,
        401
    );
    assert_eq!(
        get(server.port, "/api/runs", &["Authorization: Bearer s3cret"]).status,
        200
    );
    let queried = get(server.port, "/?token=s3cret", &[]);
    assert_eq!(queried.status, 200);
    let cookie = queried
        .header("set-cookie")
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    assert_eq!(cookie, "tidemark_token=s3cret");
    assert_eq!(
        get(server.port, "/api/runs", &[&format!("Cookie: {cookie}")]).status,
        200
    );
}

#[test]
fn any_address_gets_a_made_up_token() {
    let (dir, _) = folder();
    let server = serve(dir.path(), &["--host", "0.0.0.0"]);
    let token = server
        .printed
        .split("?token=")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .unwrap_or_else(|| panic!("no token printed: {}", server.printed))
        .to_owned();
    assert_eq!(token.len(), 32);
    assert!(token.chars().all(|c| c.is_ascii_hexdigit()));
    assert_eq!(get(server.port, "/api/runs", &[]).status, 401);
    assert_eq!(
        get(server.port, &format!("/api/runs?token={token}"), &[]).status,
        200
    );
}

#[test]
fn a_port_in_use_is_said_with_the_way_around_it() {
    let dir = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let output = Command::new(env!("CARGO_BIN_EXE_collector"))
        .args(["serve", "--port", &port])
        .arg(dir.path())
        .output()
        .unwrap();
    let stderr = crate::stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("port {port} on 127.0.0.1 is in use")),
        "{stderr}"
    );
    assert!(stderr.contains("--port"), "{stderr}");
}

#[test]
fn a_missing_folder_is_exit_2_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-runs");
    let output = Command::new(env!("CARGO_BIN_EXE_collector"))
        .args(["serve", "--port", "0"])
        .arg(&missing)
        .output()
        .unwrap();
    let stderr = crate::stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&missing.display().to_string()), "{stderr}");
    let file = dir.path().join("a.msgpack");
    std::fs::write(&file, b"TIDEMARK").unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_collector"))
        .args(["serve", "--port", "0"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        crate::stderr(&output).contains("not a folder"),
        "{}",
        crate::stderr(&output)
    );
}

#[test]
fn an_unreadable_file_is_listed_with_its_error_and_the_others_served() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let readable = dir.path().join("a.msgpack");
    std::fs::copy(
        tidemark_tests::inputs::data("golden_v1_3.msgpack"),
        &readable,
    )
    .unwrap();
    std::fs::set_permissions(&readable, std::fs::Permissions::from_mode(0o644)).unwrap();
    let locked = dir.path().join("locked.msgpack");
    std::fs::write(&locked, b"TIDEMARK").unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
    // Root reads any file: there the server runs as `nobody` (util-linux `setpriv`), to whom
    // the locked file is closed as it is to any user but its owner.
    let command = if std::fs::File::open(&locked).is_ok() {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_collector"));
        c
    } else {
        Command::new(env!("CARGO_BIN_EXE_collector"))
    };
    let server = serve_with(command, dir.path(), &[]);
    let list = judged_list(server.port);
    let run = by_name(&list, "locked.msgpack");
    let error = run["error"].as_str().unwrap_or_default();
    assert!(error.contains("cannot read the file"), "{run}");
    assert!(error.contains("locked.msgpack"), "{run}");
    assert!(
        by_name(&list, "a.msgpack")["headline"].is_string(),
        "{list:?}"
    );
    assert_eq!(get(server.port, "/runs/a.msgpack", &[]).status, 200);
    // Asked for, it is refused with the reason, and the server goes on.
    let answer = get(server.port, "/runs/locked.msgpack", &[]);
    assert_eq!(answer.status, 403, "{}", answer.text());
    assert!(
        answer.text().contains("cannot read the file"),
        "{}",
        answer.text()
    );
    assert_eq!(get(server.port, "/runs/a.msgpack", &[]).status, 200);
}

#[test]
fn a_folder_run_is_sent_again_only_when_its_files_changed() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = dir.path().join("nodes");
    std::fs::create_dir(&nodes).unwrap();
    tidemark_tests::inputs::node_recording(&nodes, 0, "train").unwrap();
    let second = tidemark_tests::inputs::node_recording(&nodes, 1, "train").unwrap();
    // The second node has written half of its recording so far.
    let whole = std::fs::read(&second).unwrap();
    std::fs::write(&second, &whole[..whole.len() / 2]).unwrap();
    let server = serve(dir.path(), &[]);
    let first = get(server.port, "/runs/nodes", &[]);
    assert_eq!(first.status, 200, "{}", first.text());
    let etag = first.header("etag").expect("a version").to_owned();
    let early = collector::recording::read_recording(&first.body).unwrap();
    // Asked again with that version: not sent again.
    let same = get(
        server.port,
        "/runs/nodes",
        &[&format!("If-None-Match: {etag}")],
    );
    assert_eq!(same.status, 304, "{}", same.text());
    assert!(same.body.is_empty());
    assert_eq!(same.header("etag"), Some(etag.as_str()));
    // The node writes the rest: the run is sent again, grown, under a new version.
    std::fs::write(&second, &whole).unwrap();
    let grown = get(
        server.port,
        "/runs/nodes",
        &[&format!("If-None-Match: {etag}")],
    );
    assert_eq!(grown.status, 200, "{}", grown.text());
    assert_ne!(grown.header("etag"), Some(etag.as_str()));
    let later = collector::recording::read_recording(&grown.body).unwrap();
    assert!(
        later.phases.len() > early.phases.len(),
        "{} phase edges, then {}",
        early.phases.len(),
        later.phases.len()
    );
    // Still growing: the listing says so.
    let list = get(server.port, "/api/runs", &[]).json();
    let run = list
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "nodes")
        .unwrap();
    assert_eq!(run["growing"], true, "{run}");
}

/// The one folder rule: a folder `collector report DIR` reads as one run is one run in the list,
/// whatever it holds — here two ranks' profiler traces, merged as nodes' recordings are — and a
/// folder it reads as a single recording keeps that file listed on its own.
#[test]
fn a_folder_report_reads_as_one_run_is_one_run_in_the_list() {
    let dir = tempfile::tempdir().unwrap();
    let traces = dir.path().join("traces");
    std::fs::create_dir(&traces).unwrap();
    for rank in 0..2 {
        let trace = tidemark_tests::traces::rank_trace(20, u64::from(rank) << 20, rank);
        std::fs::write(traces.join(format!("rank{rank}.pt.trace.json")), trace).unwrap();
    }
    let single = dir.path().join("single");
    std::fs::create_dir(&single).unwrap();
    let alone = tidemark_tests::inputs::node_recording(&single, 0, "train").unwrap();
    // What `report DIR` reads: the files of one run.
    let report = |folder: &Path| match collector::open::open_path(folder).unwrap() {
        collector::open::Input::NodeRecordings { files, .. } => files.len(),
        other => panic!("{}: {:?}", folder.display(), other.kind()),
    };
    assert_eq!(report(&traces), 2);
    assert_eq!(report(&single), 1);

    let server = serve(dir.path(), &[]);
    let list = judged_list(server.port);
    let run = by_name(&list, "traces");
    assert_eq!(run["kind"], "rank_traces", "{run}");
    assert_eq!(run["files"].as_array().map(Vec::len), Some(2), "{run}");
    assert!(run["error"].is_null(), "{run}");
    let (_, headline) = tidemark_tests::inputs::judged(&traces).unwrap();
    assert_eq!(run["headline"], headline.as_str(), "{run}");
    assert!(
        list.iter()
            .all(|r| !r["name"].as_str().unwrap().starts_with("traces/")),
        "{list:?}"
    );
    let whole = get(server.port, "/runs/traces", &[]);
    assert_eq!(whole.status, 200, "{}", whole.text());
    // One recording in a folder: the file itself, the one run `report DIR` opens.
    let name = alone.file_name().unwrap().to_string_lossy();
    by_name(&list, &format!("single/{name}"));
}
