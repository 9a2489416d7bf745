//! `collector serve`: `GET /api/runs` of a folder of 100 recordings (the budget: ≤ 100 ms once
//! their headlines are judged; the first listing reads every file's first bytes). Runs the real
//! binary on a loopback port and asks it over a plain TCP connection, as a browser would.
//! `cargo bench -p tidemark-collector --bench serve`.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `GET path` on `port`: the body.
fn get(port: u16, path: &str) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to the server");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .expect("send the request");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read the answer");
    answer
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default()
}

fn main() {
    const RUNS: usize = 100;
    let dir = tempfile::tempdir().expect("a temporary folder");
    for i in 0..RUNS {
        let folder = dir.path().join(format!("job{}", i / 10));
        std::fs::create_dir_all(&folder).expect("a folder");
        let recording = tidemark_tests::gpu_leak(200, 1 << 30, (i as u64 + 1) << 20);
        collector::recording::write_file(&folder.join(format!("run{i}.msgpack")), &recording)
            .expect("write a recording");
    }
    let mut server = Command::new(env!("CARGO_BIN_EXE_collector"))
        .args(["serve", "--port", "0"])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start collector serve");
    let mut lines = BufReader::new(server.stdout.take().expect("its output")).lines();
    let port: u16 = lines
        .find_map(|l| {
            let l = l.ok()?;
            let url = l.trim().strip_prefix("open http://127.0.0.1:")?;
            url.split('/').next()?.parse().ok()
        })
        .expect("the printed URL");
    let start = Instant::now();
    let first = get(port, "/api/runs");
    let cold = start.elapsed();
    assert_eq!(first.matches("\"name\"").count(), RUNS, "{first}");
    // Wait for every headline, then time the listing the page asks for every 2 s.
    let judging = Instant::now();
    while get(port, "/api/runs").contains("\"headline\": null") {
        assert!(judging.elapsed() < Duration::from_secs(600), "never judged");
        std::thread::sleep(Duration::from_millis(100));
    }
    let judged = judging.elapsed();
    let mut times: Vec<f64> = (0..21)
        .map(|_| {
            let start = Instant::now();
            let body = get(port, "/api/runs");
            let t = start.elapsed().as_secs_f64() * 1e3;
            assert_eq!(body.matches("\"headline\": \"").count(), RUNS);
            t
        })
        .collect();
    times.sort_by(f64::total_cmp);
    let _ = server.kill();
    let _ = server.wait();
    println!(
        "GET /api/runs, {RUNS} recordings in 10 folders: {:.1} ms median of 21 ({:.1}–{:.1} ms), judged; first listing {:.1} ms; all judged after {:.1} s (budget ≤ 100 ms)",
        times[10],
        times[0],
        times[20],
        cold.as_secs_f64() * 1e3,
        judged.as_secs_f64()
    );
}
