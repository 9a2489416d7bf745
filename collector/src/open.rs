//! One way in for every input. What bytes are is told from their first ones by one function,
//! [`Kind::of`] (a recording, a snapshot, a PyTorch profiler trace or memory timeline, gzip data
//! holding one of these), and every reader goes through it: [`read_any`] for bytes held in memory (a
//! browser tab), and natively [`open_path`] for a path, which answers a recording, a snapshot, a
//! folder of nodes' recordings (one run) or a folder of per-rank snapshots, with one error type,
//! [`OpenError`], that names the file or folder last. The report, `check`, `import` and the
//! viewer open their inputs here and nowhere else.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::recording::{ReadError, Recording, read_recording};
use crate::snapshot::ranks::RankFolder;
use crate::snapshot::{Snapshot, SnapshotError, read_snapshot};
#[cfg(not(target_arch = "wasm32"))]
use crate::snapshot::{SnapshotReader, SourceError};

/// What an input is. [`Kind::of`] tells the first three from a file's first bytes; a folder is
/// one of the other two (see [`open_path`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A tidemark recording: it starts with `TIDEMARK` (or is a piece of that, cut short).
    Recording,
    /// A PyTorch memory snapshot: a pickle of protocol 2 or later (`0x80`), as
    /// `torch.cuda.memory._dump_snapshot` writes it. (A `torch.save` zip is not one.)
    Snapshot,
    /// Neither.
    Unknown,
    /// A PyTorch profiler trace (Kineto's chrome trace JSON): it starts with `{` or `[{`.
    Trace,
    /// A PyTorch memory timeline (`export_memory_timeline`): it starts with `[[`.
    MemoryTimeline,
    /// Gzip data: what it holds is told from its decompressed start ([`Kind::of_gzip`]).
    Gzip,
    /// A folder of nodes' recordings of one run (one collector per node), opened as one run.
    NodeRecordings,
    /// A folder of per-rank PyTorch memory snapshots (`rank0_memory_snapshot.pickle`, …).
    RankSnapshots,
}

/// How many first bytes [`Kind::of`] needs to tell a file's kind (fewer: the whole file).
pub const KIND_BYTES: usize = 16;

impl Kind {
    /// What bytes are, from their first [`KIND_BYTES`] (or all of them, when fewer).
    pub fn of(first: &[u8]) -> Self {
        let magic = crate::recording::MAGIC;
        let head = &first[..first.len().min(magic.len())];
        if !head.is_empty() && head == &magic[..head.len()] {
            Self::Recording
        } else if first.first() == Some(&0x80) {
            Self::Snapshot
        } else if crate::trace::is_gzip(first) {
            Self::Gzip
        } else {
            match crate::trace::json_kind(first) {
                Some(crate::trace::JsonKind::Trace) => Self::Trace,
                Some(crate::trace::JsonKind::Timeline) => Self::MemoryTimeline,
                None => Self::Unknown,
            }
        }
    }

    /// What gzip data holds, from its first bytes (as many as there are: a few hundred tell);
    /// [`Kind::Gzip`] when its decompressed start tells nothing known.
    pub fn of_gzip(first: &[u8]) -> Self {
        match Self::of(&crate::trace::gunzip_start(first, KIND_BYTES)) {
            Self::Unknown | Self::Gzip => Self::Gzip,
            kind => kind,
        }
    }

    /// The kind an input of this kind is opened as: a profiler trace or timeline becomes a
    /// recording.
    pub fn opens_as(self) -> Self {
        match self {
            Self::Trace | Self::MemoryTimeline => Self::Recording,
            kind => kind,
        }
    }

    /// The kind in words, for messages: "a tidemark recording", ….
    pub fn name(self) -> &'static str {
        match self {
            Self::Recording => "a tidemark recording",
            Self::Snapshot => "a PyTorch memory snapshot",
            Self::Unknown => {
                "not a tidemark recording, a PyTorch memory snapshot or a profiler trace"
            }
            Self::NodeRecordings => "a folder of nodes' recordings",
            Self::RankSnapshots => "a folder of per-rank snapshots",
            Self::Trace => "a PyTorch profiler trace",
            Self::MemoryTimeline => "a PyTorch memory timeline",
            Self::Gzip => "gzip data",
        }
    }
}

/// What a file's first bytes look like, for a message: "the file is empty", "at byte 0 it
/// holds a PNG image", ….
pub fn describe(first: &[u8]) -> String {
    if first.is_empty() {
        return "the file is empty".to_owned();
    }
    if first.starts_with(b"PK\x03\x04") {
        return "at byte 0 it holds a zip archive (torch.save writes these; a memory snapshot is the pickle torch.cuda.memory._dump_snapshot writes)".to_owned();
    }
    let start = String::from_utf8_lossy(&first[..first.len().min(64)]).to_ascii_lowercase();
    let start = start.trim_start();
    if start.starts_with("<html") || start.starts_with("<!doctype html") {
        return "an HTML page (export_memory_timeline's .html holds only a picture: export the timeline as prof.export_memory_timeline(\"memory.raw.json.gz\") instead)".to_owned();
    }
    format!(
        "at byte 0 it holds {}",
        crate::recording::describe_start(first)
    )
}

/// What a file turned out to be.
#[derive(Debug)]
pub enum Opened {
    /// A tidemark recording.
    Recording(Box<Recording>),
    /// A PyTorch memory snapshot (a pickle). Both are boxed: the enum is passed around.
    Snapshot(Box<Snapshot>),
}

impl Opened {
    /// The recording to analyze and draw (a snapshot's trace as one), and the snapshot itself
    /// when the file was one.
    pub fn into_recording(self) -> (Recording, Option<Snapshot>) {
        match self {
            Self::Recording(recording) => (*recording, None),
            Self::Snapshot(snapshot) => (snapshot.to_recording(), Some(*snapshot)),
        }
    }
}

/// What a path turned out to be, read ([`open_path`]).
#[derive(Debug)]
pub enum Input {
    /// A tidemark recording.
    Recording(Box<Recording>),
    /// A PyTorch memory snapshot.
    Snapshot(Box<Snapshot>),
    /// A folder of nodes' recordings, merged into one run ([`read_one_run`]).
    NodeRecordings {
        /// The run.
        recording: Box<Recording>,
        /// The recordings in the folder, by name (those left out included).
        files: Vec<PathBuf>,
    },
    /// A folder of per-rank snapshots.
    RankSnapshots(Box<RankFolder>),
}

impl Input {
    /// Which kind it is.
    pub fn kind(&self) -> Kind {
        match self {
            Self::Recording(_) => Kind::Recording,
            Self::Snapshot(_) => Kind::Snapshot,
            Self::NodeRecordings { .. } => Kind::NodeRecordings,
            Self::RankSnapshots(_) => Kind::RankSnapshots,
        }
    }
}

impl From<Opened> for Input {
    fn from(opened: Opened) -> Self {
        match opened {
            Opened::Recording(r) => Self::Recording(r),
            Opened::Snapshot(s) => Self::Snapshot(s),
        }
    }
}

/// Why bytes are not a file tidemark reads.
#[derive(Clone, Debug, thiserror::Error)]
pub enum FormatError {
    /// It looks like a recording, and is not a readable one.
    #[error(transparent)]
    Recording(#[from] ReadError),
    /// It looks like a pickle, and is not a readable snapshot.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    /// It looks like a PyTorch profiler file (JSON, or gzip), and is not a readable one.
    #[error(transparent)]
    Trace(#[from] crate::trace::TraceError),
    /// Its first bytes are neither a recording's nor a snapshot's.
    #[error("not a tidemark recording, a PyTorch memory snapshot or a profiler trace: {found}")]
    Unknown {
        /// What the first bytes look like ([`describe`]).
        found: String,
    },
}

/// An input that cannot be opened, and which file or folder it is (named last).
#[derive(Clone, Debug)]
pub enum OpenError {
    /// The file cannot be opened or read.
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: Arc<std::io::Error>,
    },
    /// The file is neither a readable recording nor a readable snapshot.
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: FormatError,
    },
    /// The input is of another kind than the one asked for ([`open_expecting`]).
    Expected {
        /// The file or folder.
        path: PathBuf,
        /// The kind asked for.
        expected: Kind,
        /// The kind it is.
        found: Kind,
    },
    /// The folder cannot be listed.
    Folder {
        /// The folder.
        path: PathBuf,
        /// Why.
        reason: Arc<std::io::Error>,
    },
    /// The folder holds neither recordings nor per-rank snapshots.
    NothingInFolder {
        /// The folder.
        path: PathBuf,
        /// Snapshots in it whose names give no rank.
        unranked: usize,
    },
    /// The folder holds nodes' recordings, and none can be read.
    NoNodeReadable {
        /// The folder.
        path: PathBuf,
        /// Why, file by file.
        reasons: Vec<String>,
    },
}

impl OpenError {
    /// The file or folder.
    pub fn path(&self) -> &Path {
        match self {
            Self::Io { path, .. }
            | Self::Format { path, .. }
            | Self::Expected { path, .. }
            | Self::Folder { path, .. }
            | Self::NothingInFolder { path, .. }
            | Self::NoNodeReadable { path, .. } => path,
        }
    }

    /// What is wrong, without the path (a viewer names the file first, in its own words).
    pub fn what(&self) -> String {
        match self {
            Self::Io { reason, .. } => format!("cannot read the file ({reason})"),
            Self::Format { reason, .. } => reason.to_string(),
            Self::Expected {
                expected, found, ..
            } => format!("{} where {} was expected", found.name(), expected.name()),
            Self::Folder { reason, .. } => format!("cannot read the folder ({reason})"),
            Self::NothingInFolder { unranked, .. } => {
                let unranked = match unranked {
                    0 => String::new(),
                    1 => {
                        "; its one snapshot has no rank in its name: open it on its own".to_owned()
                    }
                    n => format!(
                        "; its {n} snapshots have no rank in their names: open them one by one"
                    ),
                };
                format!(
                    "no tidemark recordings, per-rank snapshots or profiler traces in the folder (looked for recordings, which start with TIDEMARK, PyTorch memory snapshots with a rank in their names, like rank0_memory_snapshot.pickle or memory_trace_0.pickle, and torch.profiler traces, *.pt.trace.json[.gz]){unranked}"
                )
            }
            Self::NoNodeReadable { reasons, .. } => format!(
                "none of the recordings in the folder can be read: {}",
                reasons.join("; ")
            ),
        }
    }
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.what(), self.path().display())
    }
}

impl std::error::Error for OpenError {}

/// Reads a recording, a PyTorch memory snapshot, or a PyTorch profiler trace or memory
/// timeline (as a recording) held in memory, as [`Kind::of`] tells; gzip data is decompressed
/// first.
pub fn read_any(bytes: &[u8]) -> Result<Opened, FormatError> {
    match Kind::of(bytes) {
        Kind::Snapshot => Ok(Opened::Snapshot(Box::new(read_snapshot(bytes)?))),
        Kind::Recording => Ok(Opened::Recording(Box::new(read_recording(bytes)?))),
        // A profiler file (gzipped too: read as it is decompressed, never whole).
        Kind::Trace | Kind::MemoryTimeline => {
            Ok(Opened::Recording(Box::new(crate::trace::read_from(bytes)?)))
        }
        Kind::Gzip if Kind::of_gzip(bytes).opens_as() == Kind::Recording => {
            Ok(Opened::Recording(Box::new(crate::trace::read_from(bytes)?)))
        }
        Kind::Gzip => {
            let inner = crate::trace::gunzip(bytes)?;
            match Kind::of(&inner) {
                Kind::Gzip => Err(crate::trace::TraceError::GzipTwice.into()),
                Kind::Unknown => Err(FormatError::Unknown {
                    found: format!("gzip data; decompressed, {}", describe(&inner)),
                }),
                _ => read_any(&inner),
            }
        }
        _ => Err(FormatError::Unknown {
            found: describe(bytes),
        }),
    }
}

/// What is at `path`, told without reading it whole: a file's kind from its first bytes, a
/// folder's from its files' names and first bytes.
#[cfg(not(target_arch = "wasm32"))]
enum Found {
    /// A file, and its first bytes.
    File(Kind, Vec<u8>),
    /// A folder of nodes' recordings: the files.
    Nodes(Vec<PathBuf>),
    /// A folder of per-rank snapshots: the files and their ranks.
    Ranks(Vec<(u32, PathBuf)>),
}

#[cfg(not(target_arch = "wasm32"))]
impl Found {
    fn kind(&self) -> Kind {
        match self {
            Self::File(kind, _) => *kind,
            Self::Nodes(_) => Kind::NodeRecordings,
            Self::Ranks(_) => Kind::RankSnapshots,
        }
    }
}

/// The first [`KIND_BYTES`] of a file.
#[cfg(not(target_arch = "wasm32"))]
fn first_bytes(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read as _;
    let mut first = Vec::with_capacity(KIND_BYTES);
    std::fs::File::open(path)?
        .take(KIND_BYTES as u64)
        .read_to_end(&mut first)?;
    Ok(first)
}

/// What the gzip file at `path` holds, from its first 64 KiB.
#[cfg(not(target_arch = "wasm32"))]
fn gzip_kind(path: &Path) -> std::io::Result<Kind> {
    gzip_holds(&mut std::fs::File::open(path)?)
}

/// What the gzip data in `file` holds, from its first 64 KiB; the file is left at its start.
#[cfg(not(target_arch = "wasm32"))]
fn gzip_holds(file: &mut std::fs::File) -> std::io::Result<Kind> {
    use std::io::{Read as _, Seek as _};
    let mut start = Vec::new();
    file.take(1 << 16).read_to_end(&mut start)?;
    file.rewind()?;
    Ok(Kind::of_gzip(&start))
}

/// What is at `path` ([`Found`]).
#[cfg(not(target_arch = "wasm32"))]
fn look(path: &Path) -> Result<Found, OpenError> {
    let io = |err: std::io::Error| OpenError::Io {
        path: path.to_owned(),
        reason: Arc::new(err),
    };
    if !std::fs::metadata(path).map_err(io)?.is_dir() {
        let first = first_bytes(path).map_err(io)?;
        let kind = match Kind::of(&first) {
            Kind::Gzip => gzip_kind(path).map_err(io)?,
            kind => kind,
        };
        return Ok(Found::File(kind, first));
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|err| OpenError::Folder {
            path: path.to_owned(),
            reason: Arc::new(err),
        })?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    let (mut nodes, mut ranks, mut unranked, mut recordings) = (Vec::new(), Vec::new(), 0, 0);
    let mut traces = Vec::new();
    for file in files {
        let kind = match first_bytes(&file).map_or(Kind::Unknown, |first| Kind::of(&first)) {
            Kind::Gzip => gzip_kind(&file).unwrap_or(Kind::Unknown),
            kind => kind,
        };
        let named = |ext: &[&str]| {
            file.extension()
                .is_some_and(|e| ext.iter().any(|x| e.eq_ignore_ascii_case(x)))
        };
        let rank = file
            .file_name()
            .and_then(|n| crate::snapshot::ranks::rank_of(&n.to_string_lossy()));
        match (kind, rank) {
            // A recording by its bytes, or by its name (then named with what it is instead).
            (Kind::Recording, _) => {
                recordings += 1;
                nodes.push(file);
            }
            _ if named(&["msgpack"]) => nodes.push(file),
            (Kind::Snapshot, Some(rank)) => ranks.push((rank, file)),
            (Kind::Unknown, Some(rank)) if named(&["pickle", "pkl"]) => ranks.push((rank, file)),
            (Kind::Snapshot, None) => unranked += 1,
            // A profiler trace: one rank's (`distributedInfo`), when the folder holds several.
            (Kind::Trace, _) => traces.push(file),
            _ => {}
        }
    }
    // Recordings first (the snapshots a `--history` run dumps beside them are not the run);
    // files named `*.msgpack` that are no recording are named with what they are, unless the
    // folder holds per-rank snapshots and no recording.
    if recordings > 0 || (ranks.is_empty() && !nodes.is_empty()) {
        Ok(Found::Nodes(nodes))
    } else if !ranks.is_empty() {
        ranks.sort();
        Ok(Found::Ranks(ranks))
    } else if !traces.is_empty() {
        // Per-rank profiler traces: read and merged into one run as nodes' recordings are.
        Ok(Found::Nodes(traces))
    } else {
        Err(OpenError::NothingInFolder {
            path: path.to_owned(),
            unranked,
        })
    }
}

/// The error of a file whose first bytes are neither a recording's nor a snapshot's.
#[cfg(not(target_arch = "wasm32"))]
fn unknown(path: &Path, first: &[u8]) -> OpenError {
    OpenError::Format {
        path: path.to_owned(),
        reason: FormatError::Unknown {
            found: describe(first),
        },
    }
}

/// Opens what is at `path`, as the report and the viewer do: a recording; a PyTorch memory
/// snapshot (read part by part, see [`stream_snapshot`]); a folder holding recordings (told by
/// their first bytes), one collector's file per node, read and merged into one run
/// ([`read_one_run`]; a file named `*.msgpack` that is no recording, or of another job, is left
/// out and named in its warnings); else a folder of per-rank snapshots (a snapshot with a rank
/// in its name, [`crate::snapshot::ranks::rank_of`]; one that cannot be read is a row with its
/// error). Anything else is an error naming the file and what its first bytes look like, or the
/// folder and what was looked for.
#[cfg(not(target_arch = "wasm32"))]
pub fn open_path(path: &Path) -> Result<Input, OpenError> {
    let found = look(path)?;
    read_found(path, found)
}

/// [`open_path`] when only `expected` will do: another kind is refused before it is read, with
/// the one message that says what it is and what was expected.
#[cfg(not(target_arch = "wasm32"))]
pub fn open_expecting(path: &Path, expected: Kind) -> Result<Input, OpenError> {
    let found = look(path)?;
    let kind = found.kind();
    if kind.opens_as() != expected && !matches!(kind, Kind::Unknown | Kind::Gzip) {
        return Err(OpenError::Expected {
            path: path.to_owned(),
            expected,
            found: kind,
        });
    }
    read_found(path, found)
}

/// The PyTorch memory snapshot in `path` ([`open_expecting`]): anything else is refused with
/// the one message that says what it is.
#[cfg(not(target_arch = "wasm32"))]
pub fn open_snapshot(path: &Path) -> Result<Snapshot, OpenError> {
    match open_expecting(path, Kind::Snapshot)? {
        Input::Snapshot(s) => Ok(*s),
        other => Err(OpenError::Expected {
            path: path.to_owned(),
            expected: Kind::Snapshot,
            found: other.kind(),
        }),
    }
}

/// The recording in `path` ([`open_expecting`]): anything else is refused with the one
/// message that says what it is.
#[cfg(not(target_arch = "wasm32"))]
pub fn open_recording(path: &Path) -> Result<Recording, OpenError> {
    match open_expecting(path, Kind::Recording)? {
        Input::Recording(r) => Ok(*r),
        other => Err(OpenError::Expected {
            path: path.to_owned(),
            expected: Kind::Recording,
            found: other.kind(),
        }),
    }
}

/// Reads what [`look`] found.
#[cfg(not(target_arch = "wasm32"))]
fn read_found(path: &Path, found: Found) -> Result<Input, OpenError> {
    match found {
        Found::File(Kind::Unknown, first) => Err(unknown(path, &first)),
        Found::File(_, _) => read_any_file(path).map(Input::from),
        Found::Nodes(files) => {
            let list: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
            match read_one_run(&list) {
                Ok(recording) => Ok(Input::NodeRecordings {
                    recording: Box::new(recording),
                    files,
                }),
                Err(reasons) => Err(OpenError::NoNodeReadable {
                    path: path.to_owned(),
                    reasons,
                }),
            }
        }
        Found::Ranks(files) => {
            let snapshots = files
                .into_iter()
                .map(|(rank, file)| {
                    let snapshot = open_snapshot(&file).map_err(|err| err.to_string());
                    (rank, file.display().to_string(), snapshot)
                })
                .collect();
            Ok(Input::RankSnapshots(Box::new(RankFolder::new(
                path.to_owned(),
                snapshots,
            ))))
        }
    }
}

/// Reads a recording or a PyTorch memory snapshot from a file, opened once, as [`Kind::of`]
/// tells from its first bytes. A snapshot is read part by part ([`stream_snapshot`]): the
/// process holds what the parser found, not the file's bytes as well (a 2 GB pickle is not held
/// twice).
#[cfg(not(target_arch = "wasm32"))]
pub fn read_any_file(path: &Path) -> Result<Opened, OpenError> {
    use std::io::{Read as _, Seek as _};
    let io = |err: std::io::Error| OpenError::Io {
        path: path.to_owned(),
        reason: Arc::new(err),
    };
    // One open: its first bytes say whether to stream it or read it.
    let mut file = std::fs::File::open(path).map_err(io)?;
    let mut first = Vec::with_capacity(KIND_BYTES);
    (&mut file)
        .take(KIND_BYTES as u64)
        .read_to_end(&mut first)
        .map_err(io)?;
    file.rewind().map_err(io)?;
    match Kind::of(&first) {
        Kind::Snapshot => stream_open_snapshot(file, path).map(|s| Opened::Snapshot(Box::new(s))),
        Kind::Recording => {
            let len = file.metadata().map_err(io)?.len();
            let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
            file.read_to_end(&mut bytes).map_err(io)?;
            read_recording(&bytes)
                .map(|r| Opened::Recording(Box::new(r)))
                .map_err(|reason| OpenError::Format {
                    path: path.to_owned(),
                    reason: reason.into(),
                })
        }
        // A profiler file streams from the file (gzip too): a 1 GB trace is not held.
        Kind::Trace | Kind::MemoryTimeline => streamed_trace(file, path),
        Kind::Gzip if gzip_holds(&mut file).map_err(io)?.opens_as() == Kind::Recording => {
            streamed_trace(file, path)
        }
        Kind::Gzip => {
            let len = file.metadata().map_err(io)?.len();
            let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
            file.read_to_end(&mut bytes).map_err(io)?;
            read_any(&bytes).map_err(|reason| OpenError::Format {
                path: path.to_owned(),
                reason,
            })
        }
        _ => Err(unknown(path, &first)),
    }
}

/// The profiler trace (gzipped or not) in `file`, read as it streams in.
#[cfg(not(target_arch = "wasm32"))]
fn streamed_trace(file: std::fs::File, path: &Path) -> Result<Opened, OpenError> {
    crate::trace::read_from(file)
        .map(|r| Opened::Recording(Box::new(r)))
        .map_err(|reason| OpenError::Format {
            path: path.to_owned(),
            reason: reason.into(),
        })
}

/// Reads the PyTorch memory snapshot in `path` part by part ([`SnapshotReader`]): the process
/// holds what the parser found and one window of the file, not the file's bytes as well.
#[cfg(not(target_arch = "wasm32"))]
pub fn stream_snapshot(path: &Path) -> Result<Snapshot, OpenError> {
    let file = std::fs::File::open(path).map_err(|err| OpenError::Io {
        path: path.to_owned(),
        reason: Arc::new(err),
    })?;
    stream_open_snapshot(file, path)
}

/// [`stream_snapshot`] of a file already open, read from where it stands.
#[cfg(not(target_arch = "wasm32"))]
fn stream_open_snapshot(mut file: std::fs::File, path: &Path) -> Result<Snapshot, OpenError> {
    let format = |reason: SnapshotError| OpenError::Format {
        path: path.to_owned(),
        reason: reason.into(),
    };
    let mut reader = SnapshotReader::new();
    loop {
        match reader.read_from(&mut file) {
            Ok(0) => break,
            Ok(_) => {}
            Err(SourceError::Io(err)) => {
                return Err(OpenError::Io {
                    path: path.to_owned(),
                    reason: Arc::new(err),
                });
            }
            Err(SourceError::Snapshot(err)) => return Err(format(err)),
        }
    }
    reader.finish().map_err(format)
}

/// The header of the recording in `path`, read from the file's first bytes only (`None`: not a
/// recording, or not readable).
#[cfg(not(target_arch = "wasm32"))]
pub fn peek_header(path: &Path) -> Option<crate::recording::Header> {
    use std::io::Read as _;
    let mut head = Vec::new();
    std::fs::File::open(path)
        .ok()?
        .take(1 << 16)
        .read_to_end(&mut head)
        .ok()?;
    crate::recording::Reader::new(&head)
        .ok()
        .map(|r| r.header().clone())
}

/// A snapshot the probe dumped next to a recording (`collector --history`), read.
#[derive(Debug)]
pub struct PairedSnapshot {
    /// The file read.
    pub path: PathBuf,
    /// Why it was dumped: `oom` or `end`.
    pub reason: String,
    /// The snapshot, or why it cannot be read.
    pub snapshot: Result<Snapshot, OpenError>,
}

/// The snapshot a recording names that tells the most (the first dumped at an out-of-memory
/// error, else the first dumped at the end), found where the probe wrote it or, when the files
/// were moved together, beside the recording at `recording_path`. `None` when the recording
/// names none, or none of the files is there.
#[cfg(not(target_arch = "wasm32"))]
pub fn paired_snapshot(recording_path: &Path, recording: &Recording) -> Option<PairedSnapshot> {
    let file = recording
        .snapshots
        .iter()
        .find(|s| s.reason == "oom")
        .or_else(|| recording.snapshots.first())?;
    let written = PathBuf::from(&file.path);
    let beside = written
        .file_name()
        .and_then(|name| recording_path.parent().map(|dir| dir.join(name)));
    let path = std::iter::once(written)
        .chain(beside)
        .find(|p| p.is_file())?;
    let snapshot = open_snapshot(&path);
    Some(PairedSnapshot {
        path,
        reason: file.reason.clone(),
        snapshot,
    })
}

/// Several nodes' recordings of one run (one collector per node) read and merged into one
/// (see [`crate::recording::merge`]). A file that cannot be read, is a snapshot, or belongs to
/// another job is left out with a warning in the recording naming it; the others open. `Err`
/// holds the reasons when none could be read.
#[cfg(not(target_arch = "wasm32"))]
pub fn read_one_run(files: &[&Path]) -> Result<Recording, Vec<String>> {
    let mut recordings = Vec::new();
    let mut read = Vec::new();
    let mut warnings = Vec::new();
    for file in files {
        match open_recording(file) {
            Ok(r) => {
                recordings.push(r);
                read.push(*file);
            }
            Err(err) => warnings.push(format!("left out: {err}")),
        }
    }
    if recordings.is_empty() {
        return Err(warnings);
    }
    let merged = crate::recording::merge(recordings);
    let mut recording = merged.recording;
    for (index, why) in merged.left_out {
        warnings.push(format!("left out {}: {why}", read[index].display()));
    }
    let hosts: Vec<&str> = merged
        .hosts
        .iter()
        .map(String::as_str)
        .filter(|h| !h.is_empty())
        .collect();
    recording.notes.push(crate::recording::Note {
        t_ns: 0,
        text: if hosts.is_empty() {
            // Profiler traces name no host.
            format!("one run from {} files", merged.hosts.len())
        } else {
            format!(
                "one run from {} recordings (hosts {})",
                merged.hosts.len(),
                hosts.join(", ")
            )
        },
    });
    recording.warnings.extend(warnings);
    Ok(recording)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kind_is_told_from_the_first_bytes() {
        assert_eq!(Kind::of(b"TIDEMARK\x92"), Kind::Recording);
        // A recording cut inside its magic is still one (its reader says it is cut short).
        assert_eq!(Kind::of(b"TIDE"), Kind::Recording);
        assert_eq!(Kind::of(b"\x80\x04\x95"), Kind::Snapshot);
        assert_eq!(Kind::of(b"\x80"), Kind::Snapshot);
        assert_eq!(Kind::of(b""), Kind::Unknown);
        assert_eq!(Kind::of(b"TIDEMARX"), Kind::Unknown);
        assert_eq!(Kind::of(b"PK\x03\x04"), Kind::Unknown);
        assert_eq!(Kind::of(b"\x89PNG\r\n\x1a\n"), Kind::Unknown);
    }

    #[test]
    fn bytes_of_no_known_kind_are_said_by_their_start() {
        let err = |bytes: &[u8]| read_any(bytes).err().map(|e| e.to_string());
        assert_eq!(
            err(b"").as_deref(),
            Some(
                "not a tidemark recording, a PyTorch memory snapshot or a profiler trace: the file is empty"
            )
        );
        assert_eq!(
            err(b"\x89PNG\r\n\x1a\n").as_deref(),
            Some(
                "not a tidemark recording, a PyTorch memory snapshot or a profiler trace: at byte 0 it holds a PNG image"
            )
        );
        let zip = err(b"PK\x03\x04\x14\0\0\0").unwrap_or_default();
        assert!(
            zip.contains("zip archive (torch.save writes these"),
            "{zip}"
        );
        let text = err(b"step,bytes\n").unwrap_or_default();
        assert!(
            text.ends_with("the bytes 73 74 65 70 2c 62 79 74"),
            "{text}"
        );
        // A recording or a pickle gets its own reader's error.
        assert!(matches!(
            read_any(b"TIDEMARK\x93"),
            Err(FormatError::Recording(_))
        ));
        assert!(matches!(
            read_any(b"\x80\x04"),
            Err(FormatError::Snapshot(_))
        ));
    }

    #[test]
    fn one_message_for_an_input_of_another_kind() {
        let err = |expected, found| {
            OpenError::Expected {
                path: PathBuf::from("/data/x"),
                expected,
                found,
            }
            .to_string()
        };
        assert_eq!(
            err(Kind::Snapshot, Kind::Recording),
            "a tidemark recording where a PyTorch memory snapshot was expected: /data/x"
        );
        assert_eq!(
            err(Kind::Recording, Kind::Snapshot),
            "a PyTorch memory snapshot where a tidemark recording was expected: /data/x"
        );
    }
}
