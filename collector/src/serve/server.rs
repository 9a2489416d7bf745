//! The server: requests checked for the token, routed, and answered (a run's bytes streamed,
//! with ranges).

use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use collector::open::{Input, Kind};
use tiny_http::{Header, Method, Request, Response, StatusCode};

use super::http::{Range, parse_range, resolve, split_target};
use super::page::Viewer;
use super::runs::{Judge, Run, Runs};
use super::{http, page};

/// The cookie that carries the token once a URL with `?token=` was opened.
const COOKIE: &str = "tidemark_token";

/// What the server serves, and to whom.
pub struct Config {
    /// The folder of runs, canonical.
    pub root: PathBuf,
    /// The folder as the user named it (for the page's title).
    pub shown: String,
    /// The token every request must carry, if any.
    pub token: Option<String>,
    /// The web viewer's files.
    pub viewer: Viewer,
    /// What judges a run (`collector report --json`).
    pub judge: Judge,
}

struct State {
    config: Config,
    runs: Arc<Runs>,
}

/// Serves `config` on `listener` until the process ends: each request on a thread of its own.
pub fn serve(listener: std::net::TcpListener, config: Config) -> Result<(), String> {
    let server = tiny_http::Server::from_listener(listener, None)
        .map_err(|err| format!("cannot start the server: {err}"))?;
    let runs = Runs::new(config.root.clone(), config.judge);
    // The first listing reads every file's first bytes and queues their judgements.
    runs.list();
    let state = Arc::new(State { config, runs });
    for request in server.incoming_requests() {
        let state = Arc::clone(&state);
        let spawned = std::thread::Builder::new()
            .name("request".to_owned())
            .spawn(move || handle(&state, request));
        if let Err(err) = spawned {
            eprintln!("collector: cannot answer a request: {err}");
        }
    }
    Ok(())
}

fn header(name: &str, value: &str) -> Option<Header> {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).ok()
}

fn with<R: std::io::Read>(mut response: Response<R>, name: &str, value: &str) -> Response<R> {
    if let Some(h) = header(name, value) {
        response.add_header(h);
    }
    response
}

fn text(status: u16, body: &str) -> Response<std::io::Cursor<Vec<u8>>> {
    with(
        Response::from_string(body).with_status_code(status),
        "Content-Type",
        "text/plain; charset=utf-8",
    )
}

fn typed(body: String, content_type: &str) -> Response<std::io::Cursor<Vec<u8>>> {
    with(
        with(Response::from_string(body), "Content-Type", content_type),
        "Cache-Control",
        "no-store",
    )
}

fn not_found() -> Response<std::io::Cursor<Vec<u8>>> {
    text(404, "not found\n")
}

fn request_header<'a>(request: &'a Request, name: &'static str) -> Option<&'a str> {
    request
        .headers()
        .iter()
        .find(|h| h.field.equiv(name))
        .map(|h| h.value.as_str())
}

/// Whether the request carries the token (always, without one), and whether it came in the
/// query (then a cookie is set with the answer).
fn authorized(state: &State, request: &Request, query: &str) -> (bool, bool) {
    let Some(token) = &state.config.token else {
        return (true, false);
    };
    let bearer = request_header(request, "Authorization")
        .and_then(|h| h.strip_prefix("Bearer "))
        .is_some_and(|t| http::same_secret(t.trim(), token));
    let cookie = request_header(request, "Cookie")
        .and_then(|h| http::cookie_value(h, COOKIE))
        .is_some_and(|t| http::same_secret(t, token));
    let queried = http::query_value(query, "token").is_some_and(|t| http::same_secret(&t, token));
    (bearer || cookie || queried, queried)
}

fn handle(state: &State, request: Request) {
    let target = request.url().to_owned();
    let (path, query) = split_target(&target);
    if !matches!(request.method(), Method::Get | Method::Head) {
        let _ = request.respond(text(405, "read-only: only GET and HEAD are answered\n"));
        return;
    }
    let (ok, queried) = authorized(state, &request, query);
    if !ok {
        let _ = request.respond(text(
            401,
            "this server wants its token: open the URL `collector serve` printed (…/?token=…), or send `Authorization: Bearer TOKEN`\n",
        ));
        return;
    }
    let cookie = queried
        .then_some(state.config.token.as_ref())
        .flatten()
        .map(|t| format!("{COOKIE}={t}; Path=/; HttpOnly; SameSite=Lax"));
    let respond = |request: Request, response: Streamed| {
        let mut response = response.with_chunked_threshold(usize::MAX);
        if let Some(c) = cookie.as_deref().and_then(|c| header("Set-Cookie", c)) {
            response.add_header(c);
        }
        let _ = request.respond(response);
    };
    let response = route(state, &request, path, query);
    respond(request, response);
}

fn boxed(response: Response<impl std::io::Read + Send + 'static>) -> Streamed {
    let status = response.status_code();
    let headers = response.headers().to_vec();
    let length = response.data_length();
    Response::new(
        status,
        headers,
        Box::new(response.into_reader()) as Box<dyn std::io::Read + Send>,
        length,
        None,
    )
}

fn route(state: &State, request: &Request, path: &str, query: &str) -> Streamed {
    let viewer = state.config.viewer.present();
    if path == "/" || path == "/index.html" {
        let runs = state.runs.list();
        if http::query_value(query, "part").as_deref() == Some("rows") {
            return boxed(typed(page::rows(&runs, viewer), "text/html; charset=utf-8"));
        }
        return boxed(typed(
            page::page(&state.config.shown, &runs, viewer),
            "text/html; charset=utf-8",
        ));
    }
    if path == "/api/runs" {
        return match serde_json::to_string_pretty(&state.runs.list()) {
            Ok(json) => boxed(typed(json, "application/json")),
            Err(err) => boxed(text(
                500,
                &format!("cannot write the list as JSON: {err}\n"),
            )),
        };
    }
    if let Some(name) = path
        .strip_prefix("/api/runs/")
        .and_then(|p| p.strip_suffix("/report"))
    {
        return boxed(report(state, name));
    }
    if let Some(name) = path.strip_prefix("/runs/") {
        return run_bytes(state, request, name);
    }
    if path == "/viewer" {
        return boxed(with(text(308, ""), "Location", "viewer/"));
    }
    if let Some(file) = path.strip_prefix("/viewer/") {
        return viewer_file(
            &state.config.viewer,
            if file.is_empty() { "index.html" } else { file },
        );
    }
    boxed(not_found())
}

/// The run `name` (a raw request path), as listed: `None` for anything outside the folder or
/// not a run.
fn find_run(state: &State, name: &str) -> Option<Run> {
    state.runs.run_at(&resolve(state.runs.root(), name)?)
}

fn report(state: &State, name: &str) -> Response<std::io::Cursor<Vec<u8>>> {
    let Some(run) = find_run(state, name) else {
        return not_found();
    };
    match state.runs.report(&run) {
        Ok(json) => typed(json, "application/json"),
        Err(err) => text(422, &format!("{err}\n")),
    }
}

/// A run's bytes: a file as it is (with `Range`), a folder run as the recording it reads as.
fn run_bytes(state: &State, request: &Request, name: &str) -> Streamed {
    let Some(path) = resolve(state.runs.root(), name) else {
        return boxed(not_found());
    };
    let range = request_header(request, "Range");
    if path.is_file() {
        return match std::fs::File::open(&path) {
            Ok(file) => file_range(file, range),
            Err(err) => boxed(text(403, &format!("cannot read the file ({err})\n"))),
        };
    }
    let Some(run) = find_run(state, name) else {
        return boxed(not_found());
    };
    // A folder run is made anew for each request: a viewer following it asks whether its files
    // changed since the version it has, and gets 304 without the work when they did not.
    let etag = run.version.etag();
    if request_header(request, "If-None-Match").is_some_and(|tags| {
        tags.split(',')
            .any(|t| t.trim().trim_start_matches("W/") == etag)
    }) {
        return boxed(with(text(304, ""), "ETag", &etag));
    }
    match folder_recording(&run.path, run.kind) {
        Ok(bytes) => with(bytes_range(bytes, range), "ETag", &etag),
        Err(err) => boxed(text(422, &format!("{err}\n"))),
    }
}

/// A folder run (nodes' recordings, per-rank snapshots' traces) as one recording's bytes.
fn folder_recording(path: &Path, kind: Kind) -> Result<Vec<u8>, String> {
    let recording = match collector::open::open_expecting(path, kind).map_err(|e| e.to_string())? {
        Input::NodeRecordings { recording, .. } => *recording,
        Input::RankSnapshots(folder) => folder.recording.ok_or_else(|| {
            format!(
                "no snapshot in the folder has a trace: nothing to draw on a timeline: {}",
                path.display()
            )
        })?,
        other => return Err(format!("{} is not a folder run", other.kind().name())),
    };
    let mut bytes = Vec::new();
    collector::recording::write_to(&mut bytes, &recording)
        .map_err(|err| format!("cannot write the run as one recording: {err}"))?;
    Ok(bytes)
}

/// A response whose body is read as it is sent.
type Streamed = Response<Box<dyn std::io::Read + Send>>;

/// The part a request for `len` bytes with `range` gets: its status, `Content-Range`, and which
/// bytes (`start..end`).
struct Part {
    status: u16,
    content_range: Option<String>,
    start: u64,
    end: u64,
}

/// The answer to a request for `len` bytes with `range`: the part to send, or the refusal.
fn ranged(range: Option<&str>, len: u64) -> Result<Part, Streamed> {
    match parse_range(range, len) {
        Range::Whole => Ok(Part {
            status: 200,
            content_range: None,
            start: 0,
            end: len,
        }),
        Range::Part { start, end } => Ok(Part {
            status: 206,
            content_range: Some(format!("bytes {start}-{}/{len}", end - 1)),
            start,
            end,
        }),
        Range::Unsatisfiable => {
            let all = format!("bytes */{len}");
            Err(boxed(with(
                text(416, "the range starts past the end\n"),
                "Content-Range",
                &all,
            )))
        }
    }
}

fn bytes_response(
    body: Box<dyn std::io::Read + Send>,
    status: u16,
    content_range: Option<String>,
    length: u64,
) -> Streamed {
    let mut headers: Vec<Header> = [
        ("Content-Type", "application/octet-stream"),
        ("Accept-Ranges", "bytes"),
        ("Cache-Control", "no-store"),
    ]
    .iter()
    .filter_map(|(n, v)| header(n, v))
    .collect();
    headers.extend(content_range.and_then(|r| header("Content-Range", &r)));
    Response::new(
        StatusCode(status),
        headers,
        body,
        usize::try_from(length).ok(),
        None,
    )
}

/// A file's bytes as the range asks: the length is the file's now (a growing file's later bytes
/// are the next request's), streamed.
fn file_range(mut file: std::fs::File, range: Option<&str>) -> Streamed {
    let len = file.metadata().map_or(0, |m| m.len());
    let Part {
        status,
        content_range,
        start,
        end,
    } = match ranged(range, len) {
        Ok(part) => part,
        Err(response) => return response,
    };
    if let Err(err) = file.seek(SeekFrom::Start(start)) {
        return boxed(text(500, &format!("cannot read the file ({err})\n")));
    }
    bytes_response(
        Box::new(file.take(end - start)),
        status,
        content_range,
        end - start,
    )
}

fn bytes_range(bytes: Vec<u8>, range: Option<&str>) -> Streamed {
    let len = bytes.len() as u64;
    let Part {
        status,
        content_range,
        start,
        end,
    } = match ranged(range, len) {
        Ok(part) => part,
        Err(response) => return response,
    };
    let mut cursor = std::io::Cursor::new(bytes);
    cursor.set_position(start);
    bytes_response(
        Box::new(cursor.take(end - start)),
        status,
        content_range,
        end - start,
    )
}

/// A file of the web viewer.
fn viewer_file(viewer: &Viewer, name: &str) -> Streamed {
    let content_type = http::content_type(name);
    match viewer {
        Viewer::Embedded(files) => {
            let Some(decoded) = http::percent_decode(name) else {
                return boxed(not_found());
            };
            match files.iter().find(|(n, _)| *n == decoded) {
                Some((_, bytes)) => boxed(with(
                    Response::from_data(*bytes),
                    "Content-Type",
                    content_type,
                )),
                None => boxed(not_found()),
            }
        }
        Viewer::Folder(root) => match resolve(root, name).filter(|p| p.is_file()) {
            Some(path) => match std::fs::File::open(&path) {
                Ok(file) => boxed(with(
                    Response::from_file(file),
                    "Content-Type",
                    content_type,
                )),
                Err(_) => boxed(not_found()),
            },
            None => boxed(not_found()),
        },
        Viewer::Missing => boxed(text(404, &format!("{}\n", page::NOT_BUILT))),
    }
}
