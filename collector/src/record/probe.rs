//! The probe's channel: a Unix datagram socket in a private folder, the probe's files next to it,
//! and the listener that turns datagrams into records.
//!
//! A datagram holds one or more messages, one per line: `tm2 P <t_ns> <pid> <rank> <step> <b|e>
//! <device> <allocated> <reserved> <peak> <active> <inactive_split> <retries> <ooms> <host_heap>
//! <host_rss> <phase name…>` for a phase edge (`-` where a number is unknown; the allocator
//! numbers only once CUDA is initialised; the host numbers are the sending process' own, read at
//! the edge, at every edge of the first 100 steps and then on the steps their shares allow), `tm2 D <pid> <count>` for messages the probe had to drop, and `tm2 S <t_ns> <pid> <rank> <reason>
//! <path…>` for a PyTorch memory snapshot it dumped (`--history`), `tm2 C <t_ns> <pid> <rank>
//! <step> <device|-> <parameters> <gradients> <gradients_at_last_end|-> <total|-> <state,state…|->`
//! for the categories at a
//! step's start (device `-` is the host), and `tm2 H <t_ns> <pid> <rank> <step|-> <reason>
//! <json>` for a census of who holds the live tensors, and `tm2 N <t_ns> <pid> <rank> <text…>`
//! for a remark (the probe skipped the C heap or resident memory at some edges, and why), and `tm2 B <t_ns> <pid> <rank>
//! <step|-> <device|-> <bytes>` for what a backward that just ended freed of what the forwards
//! saved for it, per device (`-` is the host), and `tm2 U <t_ns> <pid> <rank> <first_step|->
//! <steps> <since_ns>` for a run of steps whose phases the probe did not observe (it observes
//! only a sample of short steps), sent when it observes a step again and at exit, and `tm2 T
//! <t_ns> <pid> <rank> <signal>` when a process can answer that real-time signal with the Python
//! stacks of its threads, written to `stacks/<pid>.txt` in the folder (the stall watcher asks).

use std::io::IoSliceMut;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};

use collector::recording::{
    AllocatorSample, Categories, Census, Edge, Note, Origin, Phase, PhaseEdge, Record, SavedFreed,
    SnapshotFile, Unobserved,
};
use nix::sys::socket::{
    AddressFamily, ControlMessageOwned, MsgFlags, SockFlag, SockType, UnixAddr, bind, recvmsg,
    setsockopt, socket, sockopt,
};

use super::clock::Clock;
use super::recorder::Msg;
use super::stall::Progress;

/// The probe's Python files, embedded so that the collector is one self-contained binary.
const PROBE_FILES: &[(&str, &str)] = &[
    (
        "sitecustomize.py",
        include_str!("../../probe/sitecustomize.py"),
    ),
    (
        "tidemark/__init__.py",
        include_str!("../../probe/tidemark/__init__.py"),
    ),
    (
        "tidemark/_auto.py",
        include_str!("../../probe/tidemark/_auto.py"),
    ),
    (
        "tidemark/_census.py",
        include_str!("../../probe/tidemark/_census.py"),
    ),
    (
        "tidemark/_host.py",
        include_str!("../../probe/tidemark/_host.py"),
    ),
    (
        "tidemark/_stacks.py",
        include_str!("../../probe/tidemark/_stacks.py"),
    ),
    (
        "tidemark/_steps.py",
        include_str!("../../probe/tidemark/_steps.py"),
    ),
];

/// The private folder with the probe's files and the socket; removed when dropped.
pub struct Channel {
    dir: PathBuf,
    socket: OwnedFd,
}

impl Channel {
    /// Creates the folder (mode 0700), writes the probe, binds the socket: in `$TMPDIR`, else
    /// `/tmp`, `/var/tmp`, `/dev/shm`, `$XDG_RUNTIME_DIR`, or beside the recording (`out_dir`),
    /// the first that works. The error names each place and why it failed.
    pub fn create(out_dir: Option<&std::path::Path>) -> Result<Self, String> {
        let mut bases = vec![std::env::temp_dir()];
        bases.extend(["/tmp", "/var/tmp", "/dev/shm"].map(PathBuf::from));
        bases.extend(std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from));
        bases.extend(out_dir.map(|d| {
            if d.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                d.to_path_buf()
            }
        }));
        let mut tried: Vec<PathBuf> = Vec::new();
        let mut errors = Vec::new();
        // The job may run elsewhere: the socket's path must not depend on the folder.
        for base in bases
            .into_iter()
            .filter_map(|b| std::path::absolute(b).ok())
        {
            // Socket paths are limited to 107 bytes.
            if tried.contains(&base) || base.as_os_str().len() > 60 {
                continue;
            }
            tried.push(base.clone());
            match Self::create_in(&base) {
                Ok(channel) => return Ok(channel),
                Err(err) => errors.push(err),
            }
        }
        Err(errors.join("; "))
    }

    fn create_in(base: &std::path::Path) -> Result<Self, String> {
        let dir = base.join(format!(
            "tidemark-{}-{:x}",
            std::process::id(),
            super::clock::monotonic_ns()
        ));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|err| {
                format!(
                    "cannot create the probe's folder ({err}): {}",
                    dir.display()
                )
            })?;
        let channel = Self::in_dir(dir.clone());
        if channel.is_err() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        channel
    }

    fn in_dir(dir: PathBuf) -> Result<Self, String> {
        for (name, text) in PROBE_FILES {
            let path = dir.join("probe").join(name);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(|err| {
                    format!("cannot write the probe ({err}): {}", parent.display())
                })?;
            }
            std::fs::write(&path, text)
                .map_err(|err| format!("cannot write the probe ({err}): {}", path.display()))?;
        }
        std::fs::create_dir(dir.join("stacks")).map_err(|err| {
            format!(
                "cannot create the folder for the job's stacks ({err}): {}",
                dir.join("stacks").display()
            )
        })?;
        let path = dir.join("sock");
        let socket = socket(
            AddressFamily::Unix,
            SockType::Datagram,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .map_err(|err| format!("cannot create the probe's socket: {err}"))?;
        setsockopt(&socket, sockopt::PassCred, &true)
            .map_err(|err| format!("cannot ask for senders' credentials: {err}"))?;
        // A bigger buffer absorbs bursts; the kernel may cap it, which is fine.
        let _ = setsockopt(&socket, sockopt::RcvBuf, &(4 << 20));
        // Wake up regularly to notice the end of the recording.
        setsockopt(
            &socket,
            sockopt::ReceiveTimeout,
            &nix::sys::time::TimeVal::new(0, 100_000),
        )
        .map_err(|err| format!("cannot set the socket's timeout: {err}"))?;
        let addr = UnixAddr::new(&path)
            .map_err(|err| format!("bad socket path ({err}): {}", path.display()))?;
        bind(socket.as_raw_fd(), &addr)
            .map_err(|err| format!("cannot bind the probe's socket ({err}): {}", path.display()))?;
        Ok(Self { dir, socket })
    }

    /// The folder to put first on `PYTHONPATH`.
    pub fn probe_dir(&self) -> PathBuf {
        self.dir.join("probe")
    }

    /// The folder where each probed process writes its stacks when asked (`TIDEMARK_STACKS`).
    pub fn stacks_dir(&self) -> PathBuf {
        self.dir.join("stacks")
    }

    /// The socket's path, for `TIDEMARK_SOCKET`.
    pub fn socket_path(&self) -> PathBuf {
        self.dir.join("sock")
    }

    /// Receives until `stop` is set and nothing more is waiting; forwards records and counts to
    /// the recorder, asks the host sampler (`edge_seen`) for a sample at every phase edge, and
    /// tells the stall watcher of the job's progress.
    pub fn listen(
        &self,
        clock: Clock,
        stop: &AtomicBool,
        tx: &Sender<Msg>,
        edge_seen: &Sender<()>,
        progress: &Mutex<Progress>,
    ) {
        let uid = nix::unistd::getuid().as_raw();
        let mut buf = vec![0u8; 64 * 1024];
        let mut counts = Counts::default();
        loop {
            let mut iov = [IoSliceMut::new(&mut buf)];
            let mut space = nix::cmsg_space!(nix::sys::socket::UnixCredentials);
            // Blocks for at most the socket's receive timeout, then looks at `stop`.
            let flags = if stop.load(Ordering::Relaxed) {
                MsgFlags::MSG_DONTWAIT
            } else {
                MsgFlags::empty()
            };
            let received =
                recvmsg::<()>(self.socket.as_raw_fd(), &mut iov, Some(&mut space), flags);
            let (bytes, sender_uid) = match received {
                Ok(msg) => {
                    let uid = msg.cmsgs().ok().and_then(|mut cmsgs| {
                        cmsgs.find_map(|c| match c {
                            ControlMessageOwned::ScmCredentials(creds) => Some(creds.uid()),
                            _ => None,
                        })
                    });
                    (msg.bytes, uid)
                }
                Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    counts.flush(tx);
                    continue;
                }
                Err(_) => break,
            };
            if sender_uid != Some(uid) {
                counts.refused += 1;
                continue;
            }
            // A datagram holds one message per line (the probe batches edges that come close
            // together).
            let mut edges = 0;
            for line in buf[..bytes].split(|&b| b == b'\n') {
                match parse(line, clock) {
                    Some(Message::Edge(edge, allocator)) => {
                        edges += 1;
                        if let Ok(mut progress) = progress.lock() {
                            progress.edge(&edge);
                        }
                        let _ = tx.send(Msg::Record(Record::Phase(edge)));
                        if let Some(sample) = allocator {
                            let _ = tx.send(Msg::Record(Record::Allocator(sample)));
                        }
                    }
                    Some(Message::Dropped(n)) => counts.dropped += n,
                    Some(Message::Answers(t_ns, origin, signal)) => {
                        if let Ok(mut progress) = progress.lock() {
                            progress.answers(origin, t_ns, signal);
                        }
                    }
                    Some(Message::Snapshot(file)) => {
                        let _ = tx.send(Msg::Record(Record::Snapshot(file)));
                    }
                    Some(Message::Note(note)) => {
                        let _ = tx.send(Msg::Record(Record::Note(note)));
                    }
                    Some(Message::SavedFreed(freed)) => {
                        let _ = tx.send(Msg::Record(Record::SavedFreed(freed)));
                    }
                    Some(Message::Unobserved(unobserved)) => {
                        let _ = tx.send(Msg::Record(Record::Unobserved(unobserved)));
                    }
                    Some(Message::Categories(categories)) => {
                        let _ = tx.send(Msg::Record(Record::Categories(categories)));
                    }
                    Some(Message::Census(census)) => {
                        let _ = tx.send(Msg::Record(Record::Census(*census)));
                    }
                    None => counts.malformed += 1,
                }
            }
            if edges > 0 {
                let _ = edge_seen.send(());
            }
        }
        counts.flush(tx);
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[derive(Default)]
struct Counts {
    dropped: u64,
    malformed: u64,
    refused: u64,
}

impl Counts {
    fn flush(&mut self, tx: &Sender<Msg>) {
        if self.dropped + self.malformed + self.refused > 0 {
            let _ = tx.send(Msg::Drops {
                dropped: self.dropped,
                malformed: self.malformed,
                refused: self.refused,
            });
            *self = Self::default();
        }
    }
}

/// A parsed probe message.
#[derive(Debug, PartialEq)]
pub enum Message {
    /// A phase edge, with the allocator's numbers when CUDA was initialised.
    Edge(PhaseEdge, Option<AllocatorSample>),
    /// The probe dropped this many messages.
    Dropped(u64),
    /// The probe dumped a PyTorch memory snapshot.
    Snapshot(SnapshotFile),
    /// A remark from the probe.
    Note(Note),
    /// Memory by category at a step's start.
    Categories(Categories),
    /// A census of who holds the live tensors.
    Census(Box<Census>),
    /// What a backward freed of what the forwards saved for it.
    SavedFreed(SavedFreed),
    /// Steps whose phases the probe did not observe.
    Unobserved(Unobserved),
    /// A process answers this signal with its stacks.
    Answers(u64, Origin, i32),
}

/// Parses one datagram; `None` when it is malformed.
pub fn parse(bytes: &[u8], clock: Clock) -> Option<Message> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut fields = text.splitn(18, ' ');
    // The probe is the collector's own (it injects it), so only its version is spoken.
    if fields.next()? != "tm2" {
        return None;
    }
    let optional = |field: &str| -> Option<Option<u64>> {
        if field == "-" {
            Some(None)
        } else {
            field.parse().ok().map(Some)
        }
    };
    // A rank or a device: a `u32`, or `-`.
    let optional_u32 = |field: &str| -> Option<Option<u32>> {
        optional(field)?.map(u32::try_from).transpose().ok()
    };
    // `<t_ns> <pid> <rank>`: when, and who sent it.
    let sender = |fields: &mut std::str::SplitN<'_, char>| -> Option<(u64, Origin)> {
        let t_ns = clock.since_start_ns(fields.next()?.parse().ok()?);
        let pid = fields.next()?.parse().ok()?;
        let rank = optional_u32(fields.next()?)?;
        Some((t_ns, Origin { pid, rank }))
    };
    match fields.next()? {
        "T" => {
            let (t_ns, origin) = sender(&mut fields)?;
            let signal = fields.next()?.trim_end().parse().ok()?;
            fields
                .next()
                .is_none()
                .then_some(Message::Answers(t_ns, origin, signal))
        }
        "D" => {
            let _pid: u32 = fields.next()?.parse().ok()?;
            let count = fields.next()?.trim_end().parse().ok()?;
            fields.next().is_none().then_some(Message::Dropped(count))
        }
        "S" => {
            let (t_ns, origin) = sender(&mut fields)?;
            let reason = fields.next()?.to_owned();
            // The path is the rest of the line (it may hold spaces).
            let path: Vec<&str> = fields.collect();
            let path = path.join(" ");
            let path = path.trim_end_matches(['\n', '\r']);
            if path.is_empty() || !matches!(reason.as_str(), "oom" | "end") {
                return None;
            }
            Some(Message::Snapshot(SnapshotFile {
                t_ns,
                origin,
                reason,
                path: path.to_owned(),
            }))
        }
        "N" => {
            let (t_ns, origin) = sender(&mut fields)?;
            let text: Vec<&str> = fields.collect();
            let text = text.join(" ");
            let text = text.trim_end_matches(['\n', '\r']);
            if text.is_empty() || text.len() > 1000 {
                return None;
            }
            let who = origin.rank.map_or(String::new(), |r| format!("rank {r}: "));
            Some(Message::Note(Note {
                t_ns,
                text: format!("{who}{text}"),
            }))
        }
        "C" => {
            let (t_ns, origin) = sender(&mut fields)?;
            let step = optional(fields.next()?)?;
            let device = optional_u32(fields.next()?)?;
            let parameters = fields.next()?.parse().ok()?;
            let gradients = fields.next()?.parse().ok()?;
            let gradients_at_last_end = optional(fields.next()?)?;
            let total = optional(fields.next()?)?;
            let state = fields.next()?.trim_end_matches(['\n', '\r']);
            if fields.next().is_some() {
                return None;
            }
            let optimizer_state = if state == "-" {
                Vec::new()
            } else {
                state
                    .split(',')
                    .map(|s| s.parse().ok())
                    .collect::<Option<Vec<u64>>>()?
            };
            Some(Message::Categories(Categories {
                t_ns,
                origin,
                step,
                device,
                parameters,
                gradients,
                gradients_at_last_end,
                optimizer_state,
                total,
            }))
        }
        "B" => {
            let (t_ns, origin) = sender(&mut fields)?;
            let step = optional(fields.next()?)?;
            let device = optional_u32(fields.next()?)?;
            let bytes = fields.next()?.trim_end_matches(['\n', '\r']).parse().ok()?;
            fields
                .next()
                .is_none()
                .then_some(Message::SavedFreed(SavedFreed {
                    t_ns,
                    origin,
                    step,
                    device,
                    bytes,
                }))
        }
        "U" => {
            let (t_ns, origin) = sender(&mut fields)?;
            let first_step = optional(fields.next()?)?;
            let steps: u64 = fields.next()?.parse().ok()?;
            let since_ns = fields.next()?.trim_end_matches(['\n', '\r']).parse().ok()?;
            // The start of the span, on the same clock as `t_ns`.
            let since_ns = clock.since_start_ns(since_ns);
            (fields.next().is_none() && steps >= 1 && since_ns <= t_ns).then_some(
                Message::Unobserved(Unobserved {
                    t_ns,
                    origin,
                    since_ns,
                    first_step,
                    steps,
                }),
            )
        }
        "H" => {
            let (t_ns, origin) = sender(&mut fields)?;
            let step = optional(fields.next()?)?;
            let reason = fields.next()?.to_owned();
            if !matches!(reason.as_str(), "step" | "end" | "oom") {
                return None;
            }
            // The body is the rest of the line: JSON (names may hold spaces).
            let body: Vec<&str> = fields.collect();
            let body: CensusBody = serde_json::from_str(&body.join(" ")).ok()?;
            Some(Message::Census(Box::new(Census {
                t_ns,
                origin,
                step,
                reason,
                holders: body.holders,
                more_holders: body.more_holders,
                cutoff_bytes: body.cutoff_bytes,
                tensors: body.tensors,
                bytes: body.bytes,
                unreached_tensors: body.unreached_tensors,
                unreached_bytes: body.unreached_bytes,
                unreached_counted: body.unreached_counted,
                objects: body.objects,
                skipped: body.skipped,
                truncated: body.truncated,
                cost_ns: body.cost_ns,
                grown: body.grown,
            })))
        }
        "P" => {
            let (t_ns, origin) = sender(&mut fields)?;
            let step = optional(fields.next()?)?;
            let edge = match fields.next()? {
                "b" => Edge::Begin,
                "e" => Edge::End,
                _ => return None,
            };
            let mut numbers = [None; 8];
            for number in &mut numbers {
                *number = optional(fields.next()?)?;
            }
            let host_heap = optional(fields.next()?)?;
            let host_rss = optional(fields.next()?)?;
            let name = fields.next()?.trim_end_matches(['\n', '\r']);
            if name.is_empty() || name.len() > 200 {
                return None;
            }
            let allocator = match numbers {
                [
                    Some(device),
                    Some(allocated),
                    Some(reserved),
                    Some(peak),
                    active,
                    inactive,
                    retries,
                    ooms,
                ] => Some(AllocatorSample {
                    t_ns,
                    origin,
                    device: u32::try_from(device).ok()?,
                    allocated,
                    reserved,
                    peak,
                    active: active.unwrap_or(0),
                    inactive_split: inactive.unwrap_or(0),
                    retries: retries.unwrap_or(0),
                    ooms: ooms.unwrap_or(0),
                }),
                [None, None, None, None, ..] => None,
                _ => return None,
            };
            let edge = PhaseEdge {
                t_ns,
                edge,
                phase: Phase::from(name.to_owned()),
                step,
                origin,
                host_heap,
                host_rss,
            };
            Some(Message::Edge(edge, allocator))
        }
        _ => None,
    }
}

/// A census as the probe sends it (the rest of [`Census`] comes from the line).
#[derive(serde::Deserialize)]
struct CensusBody {
    #[serde(default)]
    holders: Vec<collector::recording::Holder>,
    #[serde(default)]
    more_holders: u64,
    #[serde(default)]
    cutoff_bytes: u64,
    #[serde(default)]
    tensors: u64,
    #[serde(default)]
    bytes: u64,
    #[serde(default)]
    unreached_tensors: u64,
    #[serde(default)]
    unreached_bytes: u64,
    #[serde(default)]
    unreached_counted: bool,
    #[serde(default)]
    objects: u64,
    #[serde(default)]
    skipped: u64,
    #[serde(default)]
    truncated: bool,
    #[serde(default)]
    cost_ns: u64,
    #[serde(default)]
    grown: Option<collector::recording::ObjectGrowth>,
}

/// Sets up the job's environment so that Python loads the probe.
pub fn job_environment(
    channel: &Channel,
    auto_phases: bool,
    keep_peaks: bool,
    census: Option<f64>,
    every_step: bool,
    history: Option<(u64, &std::path::Path)>,
) -> Vec<(String, std::ffi::OsString)> {
    let mut pythonpath = channel.probe_dir().into_os_string();
    if let Some(existing) = std::env::var_os("PYTHONPATH").filter(|p| !p.is_empty()) {
        pythonpath.push(":");
        pythonpath.push(existing);
    }
    let mut env = vec![
        ("PYTHONPATH".to_owned(), pythonpath),
        (
            "TIDEMARK_SOCKET".to_owned(),
            channel.socket_path().into_os_string(),
        ),
        (
            "TIDEMARK_STACKS".to_owned(),
            channel.stacks_dir().into_os_string(),
        ),
        (
            "TIDEMARK_AUTO".to_owned(),
            if auto_phases { "1" } else { "0" }.into(),
        ),
        (
            "TIDEMARK_KEEP_PEAKS".to_owned(),
            if keep_peaks { "1" } else { "0" }.into(),
        ),
        (
            "TIDEMARK_CENSUS".to_owned(),
            if census.is_some() { "1" } else { "0" }.into(),
        ),
        (
            "TIDEMARK_CENSUS_LIMIT_S".to_owned(),
            census.unwrap_or(0.0).to_string().into(),
        ),
        (
            "TIDEMARK_HISTORY".to_owned(),
            history.map_or(0, |(entries, _)| entries).to_string().into(),
        ),
        (
            "TIDEMARK_SNAPSHOTS".to_owned(),
            history.map_or_else(Default::default, |(_, base)| base.as_os_str().to_owned()),
        ),
    ];
    // Otherwise the job's own `TIDEMARK_OBSERVE_ONE_IN`, if any, else the probe's `auto`.
    if every_step {
        env.push(("TIDEMARK_OBSERVE_ONE_IN".to_owned(), "1".into()));
    }
    env
}

/// Runs the listener on its own thread.
pub fn spawn_listener(
    channel: Arc<Channel>,
    clock: Clock,
    stop: Arc<AtomicBool>,
    tx: Sender<Msg>,
    edge_seen: Sender<()>,
    progress: Arc<Mutex<Progress>>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("probe-listener".to_owned())
        .spawn(move || channel.listen(clock, &stop, &tx, &edge_seen, &progress))
}

#[cfg(test)]
mod tests;
