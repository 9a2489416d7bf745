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

/// How the files tidemark opens are named: recordings and PyTorch snapshots
/// ([`RUN_EXTENSIONS`]), profiler traces and memory timelines (`.json`), each also gzipped
/// (`.gz`). What a file is comes from its bytes ([`Kind::of`]), never from its name; these only
/// say which names to offer (the viewer's Open dialog).
pub const EXTENSIONS: [&str; 5] = ["msgpack", "pickle", "pkl", "json", "gz"];

/// How recordings and PyTorch snapshots are named: a folder's files named so are runs, listed
/// (by `serve`) with what is wrong even when their bytes are not one.
pub const RUN_EXTENSIONS: [&str; 3] = ["msgpack", "pickle", "pkl"];

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
    /// Compressed data (gzip or zstd): what it holds is told from its decompressed start
    /// ([`Kind::of_compressed`]).
    Compressed,
    /// A folder of nodes' recordings of one run (one collector per node), opened as one run.
    NodeRecordings,
    /// A folder of per-rank PyTorch memory snapshots (`rank0_memory_snapshot.pickle`, …).
    RankSnapshots,
    /// A folder of per-rank profiler traces, opened as nodes' recordings are: merged into one
    /// run ([`Kind::opens_as`]).
    RankTraces,
}

/// How many first bytes [`Kind::of`] needs to tell a file's kind (fewer: the whole file).
pub const KIND_BYTES: usize = 16;

impl Kind {
    /// What a recording was read from: a profiler trace or memory timeline is read as a
    /// recording, and still is what it was.
    pub fn of_recording(recording: &Recording) -> Self {
        match recording.header.imported() {
            Some(crate::recording::Imported::Trace) => Self::Trace,
            Some(crate::recording::Imported::MemoryTimeline) => Self::MemoryTimeline,
            _ => Self::Recording,
        }
    }

    /// What bytes are, from their first [`KIND_BYTES`] (or all of them, when fewer).
    pub fn of(first: &[u8]) -> Self {
        let magic = crate::recording::MAGIC;
        let head = &first[..first.len().min(magic.len())];
        if !head.is_empty() && head == &magic[..head.len()] {
            Self::Recording
        } else if first.first() == Some(&0x80) {
            Self::Snapshot
        } else if crate::trace::is_compressed(first) {
            Self::Compressed
        } else {
            match crate::trace::json_kind(first) {
                Some(crate::trace::JsonKind::Trace) => Self::Trace,
                Some(crate::trace::JsonKind::Timeline) => Self::MemoryTimeline,
                None => Self::Unknown,
            }
        }
    }

    /// What compressed data holds, from its first bytes (as many as there are: a few hundred
    /// tell); [`Kind::Compressed`] when its decompressed start tells nothing known.
    pub fn of_compressed(first: &[u8]) -> Self {
        match Self::of(&crate::trace::decompress_start(first, KIND_BYTES)) {
            Self::Unknown | Self::Compressed => Self::Compressed,
            kind => kind,
        }
    }

    /// The kind an input of this kind is opened as: a profiler trace or timeline becomes a
    /// recording.
    pub fn opens_as(self) -> Self {
        match self {
            Self::Trace | Self::MemoryTimeline => Self::Recording,
            Self::RankTraces => Self::NodeRecordings,
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
            Self::RankTraces => "a folder of per-rank profiler traces",
            Self::Trace => "a PyTorch profiler trace",
            Self::MemoryTimeline => "a PyTorch memory timeline",
            Self::Compressed => "compressed data",
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
            Self::Recording(recording) => Kind::of_recording(recording),
            Self::Snapshot(_) => Kind::Snapshot,
            // Per-rank profiler traces are merged as nodes' recordings are, and still are traces.
            Self::NodeRecordings { recording, .. } => match Kind::of_recording(recording) {
                Kind::Trace => Kind::RankTraces,
                _ => Kind::NodeRecordings,
            },
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
/// timeline (as a recording) held in memory, as [`Kind::of`] tells; compressed data (gzip, zstd)
/// is decompressed first.
pub fn read_any(bytes: &[u8]) -> Result<Opened, FormatError> {
    match Kind::of(bytes) {
        Kind::Snapshot => Ok(Opened::Snapshot(Box::new(read_snapshot(bytes)?))),
        Kind::Recording => Ok(Opened::Recording(Box::new(read_recording(bytes)?))),
        // A profiler file (gzipped too: read as it is decompressed, never whole).
        Kind::Trace | Kind::MemoryTimeline => {
            Ok(Opened::Recording(Box::new(crate::trace::read_from(bytes)?)))
        }
        Kind::Compressed if Kind::of_compressed(bytes).opens_as() == Kind::Recording => {
            Ok(Opened::Recording(Box::new(crate::trace::read_from(bytes)?)))
        }
        Kind::Compressed => {
            let codec = crate::trace::Compression::of(bytes).map_or("compressed", |c| c.name());
            let inner = crate::trace::decompress(bytes)?;
            match Kind::of(&inner) {
                Kind::Compressed => Err(crate::trace::TraceError::CompressedTwice(codec).into()),
                Kind::Unknown => Err(FormatError::Unknown {
                    found: format!("{codec} data; decompressed, {}", describe(&inner)),
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

#[cfg(not(target_arch = "wasm32"))]
mod path;
#[cfg(not(target_arch = "wasm32"))]
pub use path::{
    FolderRun, folder_run, open_expecting, open_path, open_recording, open_snapshot,
    paired_snapshot, peek_header, read_any_file, read_one_run, stream_snapshot,
};

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
