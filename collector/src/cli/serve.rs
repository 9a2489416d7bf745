//! `collector serve DIR [--port 6007] [--host H] [--token T]`: the runs in a folder and the web
//! viewer over HTTP (see [`crate::serve`]), with the lines that reach it from another machine.

use std::io::Write as _;
use std::net::{IpAddr, TcpListener};
use std::path::PathBuf;

use super::failure::{Answer, Failure};
use crate::serve::{Config, page::Viewer};

/// Arguments of `collector serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The folder of runs: recordings, snapshots, profiler traces, and folders of nodes'
    /// recordings or per-rank snapshots, looked for in every folder below it.
    pub dir: PathBuf,
    /// The port to listen on (0: any free one, printed).
    #[arg(long, default_value_t = 6007)]
    pub port: u16,
    /// The address to listen on. Only this machine by default; another address (e.g. 0.0.0.0)
    /// needs a token, and one is made up and printed when none is given.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: IpAddr,
    /// A token every request must carry (`Authorization: Bearer T` or `?token=T`).
    #[arg(long, value_name = "T")]
    pub token: Option<String>,
    /// Serve the web viewer from this folder (`trunk build --release`'s dist/) instead of the one
    /// built into the collector.
    #[arg(long, value_name = "DIR")]
    pub web: Option<PathBuf>,
    /// Stop serving when process PID ends (a notebook's kernel that started the server).
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
}

/// A token of 128 random bits, as hex, from the kernel's random source.
fn new_token() -> Result<String, String> {
    use std::io::Read as _;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|err| format!("cannot make up a token (/dev/urandom: {err}): pass --token"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// `collector serve DIR`.
pub fn serve(args: &ServeArgs) -> Result<Answer, Failure> {
    let fail = |err: String| Err(Failure::Cannot(err));
    let dir = &args.dir;
    let root = match std::fs::canonicalize(dir) {
        Ok(root) if root.is_dir() => root,
        Ok(_) => return fail(format!("not a folder: {}", dir.display())),
        Err(err) => return fail(format!("cannot open the folder ({err}): {}", dir.display())),
    };
    if let Err(err) = std::fs::read_dir(&root) {
        return fail(format!("cannot read the folder ({err}): {}", dir.display()));
    }
    let web = match &args.web {
        Some(web) => match std::fs::canonicalize(web) {
            Ok(web) if web.join("index.html").is_file() => Some(web),
            _ => {
                return fail(format!(
                    "no web viewer in {} (no index.html: build it with `trunk build --release`)",
                    web.display()
                ));
            }
        },
        None => None,
    };
    let token = match (&args.token, args.host.is_loopback()) {
        (Some(t), _) if t.is_empty() => return fail("--token is empty".to_owned()),
        (Some(t), _) => Some(t.clone()),
        (None, true) => None,
        (None, false) => match new_token() {
            Ok(t) => Some(t),
            Err(err) => return fail(err),
        },
    };
    let listener = match TcpListener::bind((args.host, args.port)) {
        Ok(l) => l,
        Err(err) if err.kind() == std::io::ErrorKind::AddrInUse => {
            return fail(format!(
                "port {} on {} is in use (another `collector serve`, or a TensorBoard?): choose another with --port",
                args.port, args.host
            ));
        }
        Err(err) => {
            return fail(format!(
                "cannot listen on {}:{} ({err})",
                args.host, args.port
            ));
        }
    };
    let port = listener.local_addr().map_or(args.port, |a| a.port());
    let viewer = Viewer::new(web);
    let shown = if args.host.is_unspecified() {
        "localhost".to_owned()
    } else {
        args.host.to_string()
    };
    let query = token
        .as_ref()
        .map_or_else(String::new, |t| format!("?token={t}"));
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "HOST".to_owned());
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "collector serve: the runs in {}", root.display());
        let _ = writeln!(out, "  open http://{shown}:{port}/{query}");
        let _ = writeln!(
            out,
            "  from another machine: ssh -L {port}:localhost:{port} {host}   then open http://localhost:{port}/{query}"
        );
        if !viewer.present() {
            let _ = writeln!(out, "  {}", crate::serve::page::NOT_BUILT);
        }
        let _ = out.flush();
    }
    if let Some(pid) = args.pid {
        if !crate::record::alive(pid) {
            return fail(format!("no process {pid} to serve beside"));
        }
        let watched = std::thread::Builder::new()
            .name("pid".to_owned())
            .spawn(move || {
                while crate::record::alive(pid) {
                    std::thread::sleep(std::time::Duration::from_millis(500));
                }
                eprintln!("collector serve: process {pid} ended; stopping");
                std::process::exit(0);
            });
        if let Err(err) = watched {
            return fail(format!("cannot watch process {pid}: {err}"));
        }
    }
    let config = Config {
        root,
        shown: dir.display().to_string(),
        token,
        viewer,
        judge: super::report_json::json_report,
    };
    match crate::serve::serve(listener, config) {
        Ok(()) => Ok(Answer::Done),
        Err(err) => fail(err),
    }
}
