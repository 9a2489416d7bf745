//! `collector serve`: `GET /api/runs` of a folder of 100 recordings (the budget: ≤ 100 ms once
//! their headlines are judged; the first listing reads every file's first bytes). Runs the real
//! binary on a loopback port and asks it over a plain TCP connection, as a browser would.
//! Then 20 clients follow one growing recording as the viewer does (`Range: bytes=N-` once a
//! second): the server's CPU (its own user + system time, from `/proc`, so other load on the
//! machine does not count) against the budget of 10 % of a core, and how long new bytes take to
//! reach every client (≤ 1 s).
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
    let (cpu_share, median_wait, worst_wait) = follow(port, server.id(), dir.path());
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
    println!(
        "20 clients following a growing recording for {FOLLOW_S} s: the server used {:.2} % of a core (budget ≤ 10 %); new bytes reached a client after {:.2} s median, {:.2} s at most (budget ≤ 1 s; a client asks four times a second, as the viewer does)",
        cpu_share * 100.0,
        median_wait,
        worst_wait
    );
}

const FOLLOW_S: u64 = 10;

/// The server's user + system time so far, seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the server's stat");
    // The fields after the command name (which may hold spaces) in parentheses.
    let rest = stat.rsplit_once(')').expect("a stat line").1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 =
        fields[11].parse::<f64>().expect("utime") + fields[12].parse::<f64>().expect("stime");
    ticks / 100.0 // USER_HZ
}

/// 20 clients follow `grow.msgpack` in `dir` while a writer appends to it every 330 ms (out of
/// step with the clients, so that the waits spread over their whole cycle): the
/// server's CPU share over the time, and the median and longest wait of a client between bytes
/// being written and its reading them (a client asks four times a second, as the viewer does).
fn follow(port: u16, pid: u32, dir: &std::path::Path) -> (f64, f64, f64) {
    use std::sync::{Arc, Mutex};
    let mut bytes = Vec::new();
    collector::recording::write_to(
        &mut bytes,
        &tidemark_tests::gpu_leak(2000, 1 << 30, 1 << 20),
    )
    .expect("a recording's bytes");
    let path = dir.join("grow.msgpack");
    std::fs::write(&path, &bytes[..4096]).expect("the file's start");
    // When each length was reached.
    let written: Arc<Mutex<Vec<(u64, Instant)>>> =
        Arc::new(Mutex::new(vec![(4096, Instant::now())]));
    let start = Instant::now();
    let cpu_start = cpu_seconds(pid);
    let writer = {
        let written = Arc::clone(&written);
        let path = path.clone();
        std::thread::spawn(move || {
            let mut len = 4096;
            while start.elapsed() < Duration::from_secs(FOLLOW_S) && len < bytes.len() {
                std::thread::sleep(Duration::from_millis(330));
                let next = (len + 8192).min(bytes.len());
                let mut f = std::fs::OpenOptions::new()
                    .append(true)
                    .open(&path)
                    .expect("append");
                f.write_all(&bytes[len..next]).expect("append the bytes");
                len = next;
                written
                    .lock()
                    .expect("the lengths")
                    .push((len as u64, Instant::now()));
            }
        })
    };
    let clients: Vec<_> = (0..20)
        .map(|_| {
            let written = Arc::clone(&written);
            std::thread::spawn(move || {
                let mut have = 0u64;
                let mut seen = 0; // the lengths reached that this client has read
                let mut waits = Vec::new();
                while start.elapsed() < Duration::from_secs(FOLLOW_S) {
                    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
                    write!(
                        stream,
                        "GET /runs/grow.msgpack HTTP/1.1\r\nHost: localhost\r\nRange: bytes={have}-\r\nConnection: close\r\n\r\n"
                    )
                    .expect("send");
                    let mut answer = Vec::new();
                    stream.read_to_end(&mut answer).expect("read");
                    let now = Instant::now();
                    if let Some(at) = answer.windows(4).position(|w| w == b"\r\n\r\n") {
                        have += (answer.len() - at - 4) as u64;
                    }
                    // Every length reached and now read: how long it waited.
                    let lengths = written.lock().expect("the lengths").clone();
                    while let Some(&(_, when)) = lengths.get(seen).filter(|(len, _)| *len <= have) {
                        waits.push(now.duration_since(when).as_secs_f64());
                        seen += 1;
                    }
                    std::thread::sleep(Duration::from_millis(250));
                }
                waits
            })
        })
        .collect();
    let mut waits: Vec<f64> = clients
        .into_iter()
        .flat_map(|c| c.join().expect("a client"))
        .collect();
    let _ = writer.join();
    let share = (cpu_seconds(pid) - cpu_start) / start.elapsed().as_secs_f64();
    waits.sort_by(f64::total_cmp);
    let median = waits.get(waits.len() / 2).copied().unwrap_or(f64::NAN);
    let worst = waits.last().copied().unwrap_or(f64::NAN);
    (share, median, worst)
}
