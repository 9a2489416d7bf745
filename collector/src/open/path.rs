//! Inputs at a path (natively): a file's kind told from its first bytes (inside gzip or zstd too), a
//! folder of nodes' recordings or of per-rank snapshots, each read the one way [`super`] tells;
//! snapshots and traces streamed from the file rather than read whole.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{
    FormatError, Input, KIND_BYTES, Kind, OpenError, Opened, PairedSnapshot, describe, read_any,
};
use crate::recording::{Recording, read_recording};
use crate::snapshot::ranks::RankFolder;
use crate::snapshot::{Snapshot, SnapshotError, SnapshotReader, SourceError};

enum Found {
    /// A file, and its first bytes.
    File(Kind, Vec<u8>),
    /// A folder of nodes' recordings: the files.
    Nodes(Vec<PathBuf>),
    /// A folder of per-rank snapshots: the files and their ranks.
    Ranks(Vec<(u32, PathBuf)>),
    /// A folder of per-rank profiler traces: the files, read as nodes' recordings are.
    Traces(Vec<PathBuf>),
}

impl Found {
    fn kind(&self) -> Kind {
        match self {
            Self::File(kind, _) => *kind,
            Self::Nodes(_) => Kind::NodeRecordings,
            Self::Ranks(_) => Kind::RankSnapshots,
            Self::Traces(_) => Kind::RankTraces,
        }
    }
}

/// The first [`KIND_BYTES`] of a file.
fn first_bytes(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read as _;
    let mut first = Vec::with_capacity(KIND_BYTES);
    std::fs::File::open(path)?
        .take(KIND_BYTES as u64)
        .read_to_end(&mut first)?;
    Ok(first)
}

/// What the compressed file at `path` holds, from its first 64 KiB.
fn compressed_kind(path: &Path) -> std::io::Result<Kind> {
    compressed_holds(&mut std::fs::File::open(path)?)
}

/// What the compressed data in `file` holds, from its first 64 KiB; the file is left at its start.
fn compressed_holds(file: &mut std::fs::File) -> std::io::Result<Kind> {
    use std::io::{Read as _, Seek as _};
    let mut start = Vec::new();
    file.take(1 << 16).read_to_end(&mut start)?;
    file.rewind()?;
    Ok(Kind::of_compressed(&start))
}

/// What is at `path` ([`Found`]).
fn look(path: &Path) -> Result<Found, OpenError> {
    let io = |err: std::io::Error| OpenError::Io {
        path: path.to_owned(),
        reason: Arc::new(err),
    };
    if !std::fs::metadata(path).map_err(io)?.is_dir() {
        let first = first_bytes(path).map_err(io)?;
        let kind = match Kind::of(&first) {
            Kind::Compressed => compressed_kind(path).map_err(io)?,
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
    let kinds = files.into_iter().map(|file| {
        let kind = match first_bytes(&file).map_or(Kind::Unknown, |first| Kind::of(&first)) {
            Kind::Compressed => compressed_kind(&file).unwrap_or(Kind::Unknown),
            kind => kind,
        };
        (file, kind)
    });
    match folder_run(kinds) {
        FolderRun::Nodes(files) => Ok(Found::Nodes(files)),
        FolderRun::Traces(files) => Ok(Found::Traces(files)),
        FolderRun::Ranks(files) => Ok(Found::Ranks(files)),
        FolderRun::Nothing { unranked } => Err(OpenError::NothingInFolder {
            path: path.to_owned(),
            unranked,
        }),
    }
}

/// What a folder's files make, by the one rule `report DIR`, the viewer and `collector serve`
/// read a folder with ([`folder_run`]).
#[derive(Debug, PartialEq)]
pub enum FolderRun<T> {
    /// Nodes' recordings of one job (with the files named `*.msgpack` that are none, so that
    /// opening them says what they are).
    Nodes(Vec<T>),
    /// Per-rank snapshots (a rank in the file's name: `rank3`, `rank_3`), by rank.
    Ranks(Vec<(u32, T)>),
    /// Per-rank profiler traces (each names its rank in `distributedInfo`), merged into one run
    /// as nodes' recordings are.
    Traces(Vec<T>),
    /// None: the snapshots without a rank in their names, counted.
    Nothing { unranked: usize },
}

/// The one rule for a folder: its files (each with the path its name is read from, and its kind
/// from its bytes) in order. Recordings first — the snapshots a `--history` run dumps beside
/// them are not the run — and files named `*.msgpack` that are no recording with them, unless
/// the folder holds per-rank snapshots and no recording; else the per-rank snapshots (a file
/// named `*.pickle`/`*.pkl` with a rank that is no snapshot among them); else the profiler
/// traces.
pub fn folder_run<T: AsRef<Path>>(files: impl IntoIterator<Item = (T, Kind)>) -> FolderRun<T> {
    let (mut nodes, mut ranks, mut traces, mut unranked, mut recordings) =
        (Vec::new(), Vec::new(), Vec::new(), 0, 0);
    for (file, kind) in files {
        let path = file.as_ref();
        let named = |ext: &[&str]| {
            path.extension()
                .is_some_and(|e| ext.iter().any(|x| e.eq_ignore_ascii_case(x)))
        };
        let rank = path
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
            (Kind::Trace, _) => traces.push(file),
            _ => {}
        }
    }
    if recordings > 0 || (ranks.is_empty() && !nodes.is_empty()) {
        FolderRun::Nodes(nodes)
    } else if !ranks.is_empty() {
        ranks.sort_by_key(|(rank, _)| *rank);
        FolderRun::Ranks(ranks)
    } else if !traces.is_empty() {
        FolderRun::Traces(traces)
    } else {
        FolderRun::Nothing { unranked }
    }
}

/// The error of a file whose first bytes are neither a recording's nor a snapshot's.
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
pub fn open_path(path: &Path) -> Result<Input, OpenError> {
    let found = look(path)?;
    read_found(path, found)
}

/// [`open_path`] when only `expected` will do: another kind is refused before it is read, with
/// the one message that says what it is and what was expected.
pub fn open_expecting(path: &Path, expected: Kind) -> Result<Input, OpenError> {
    let found = look(path)?;
    let kind = found.kind();
    if kind.opens_as() != expected.opens_as() && !matches!(kind, Kind::Unknown | Kind::Compressed) {
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
fn read_found(path: &Path, found: Found) -> Result<Input, OpenError> {
    match found {
        Found::File(Kind::Unknown, first) => Err(unknown(path, &first)),
        Found::File(_, _) => read_any_file(path).map(Input::from),
        Found::Nodes(files) | Found::Traces(files) => {
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
        Kind::Compressed
            if compressed_holds(&mut file).map_err(io)?.opens_as() == Kind::Recording =>
        {
            streamed_trace(file, path)
        }
        Kind::Compressed => {
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
pub fn stream_snapshot(path: &Path) -> Result<Snapshot, OpenError> {
    let file = std::fs::File::open(path).map_err(|err| OpenError::Io {
        path: path.to_owned(),
        reason: Arc::new(err),
    })?;
    stream_open_snapshot(file, path)
}

/// [`stream_snapshot`] of a file already open, read from where it stands.
fn stream_open_snapshot(file: std::fs::File, path: &Path) -> Result<Snapshot, OpenError> {
    let format = |reason: SnapshotError| OpenError::Format {
        path: path.to_owned(),
        reason: reason.into(),
    };
    match SnapshotReader::new().read_all(file) {
        Ok(snapshot) => Ok(snapshot),
        Err(SourceError::Io(err)) => Err(OpenError::Io {
            path: path.to_owned(),
            reason: Arc::new(err),
        }),
        Err(SourceError::Snapshot(err)) => Err(format(err)),
    }
}

/// The header of the recording in `path`, read from the file's first bytes only (`None`: not a
/// recording, or not readable).
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

/// The snapshot a recording names that tells the most (the first dumped at an out-of-memory
/// error, else the first dumped at the end), found where the probe wrote it or, when the files
/// were moved together, beside the recording at `recording_path`. `None` when the recording
/// names none, or none of the files is there.
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
