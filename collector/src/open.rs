//! One way in for every kind of file: the kind is told from the first bytes once, here, and
//! every reader (the report, `check`, `import`, the viewer) opens files through [`read_any`] or
//! [`read_any_file`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::recording::{ReadError, Recording, read_recording};
use crate::snapshot::{Snapshot, SnapshotError, SnapshotReader, SourceError, read_snapshot};

/// What a file turned out to be.
#[derive(Debug)]
pub enum Opened {
    /// A tidemark recording.
    Recording(Box<Recording>),
    /// A PyTorch memory snapshot (a pickle). Both are boxed: the enum is passed around.
    Snapshot(Box<Snapshot>),
}

impl Opened {
    /// The recording to analyse and draw (a snapshot's trace as one), and the snapshot itself
    /// when the file was one.
    pub fn into_recording(self) -> (Recording, Option<Snapshot>) {
        match self {
            Self::Recording(recording) => (*recording, None),
            Self::Snapshot(snapshot) => (snapshot.to_recording(), Some(*snapshot)),
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
}

/// A file that cannot be opened, and which file it is (named last).
#[derive(Clone, Debug, thiserror::Error)]
pub enum OpenError {
    /// The file cannot be opened or read.
    #[error("cannot read the file ({reason}): {}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: Arc<std::io::Error>,
    },
    /// The file is neither a readable recording nor a readable snapshot.
    #[error("{reason}: {}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: FormatError,
    },
}

/// Reads a recording or a PyTorch memory snapshot held in memory.
pub fn read_any(bytes: &[u8]) -> Result<Opened, FormatError> {
    // A pickle (or a `torch.save` zip, which the snapshot reader names as such).
    if bytes.first() == Some(&0x80) || bytes.starts_with(b"PK\x03\x04") {
        return Ok(Opened::Snapshot(Box::new(read_snapshot(bytes)?)));
    }
    Ok(Opened::Recording(Box::new(read_recording(bytes)?)))
}

/// Reads a recording or a PyTorch memory snapshot from a file, opened once. A snapshot is read
/// part by part ([`stream_snapshot`]): the process holds what the parser found, not the file's
/// bytes as well (a 2 GB pickle is not held twice).
pub fn read_any_file(path: &Path) -> Result<Opened, OpenError> {
    use std::io::{Read as _, Seek as _};
    let io = |err: std::io::Error| OpenError::Io {
        path: path.to_owned(),
        reason: Arc::new(err),
    };
    // One open: its first byte says whether to stream it or read it.
    let mut file = std::fs::File::open(path).map_err(io)?;
    let mut first = [0u8; 1];
    let is_pickle = file.read(&mut first).map_err(io)? == 1 && first[0] == 0x80;
    file.rewind().map_err(io)?;
    if is_pickle {
        return stream_open_snapshot(file, path).map(|s| Opened::Snapshot(Box::new(s)));
    }
    let len = file.metadata().map_err(io)?.len();
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    file.read_to_end(&mut bytes).map_err(io)?;
    read_any(&bytes).map_err(|reason| OpenError::Format {
        path: path.to_owned(),
        reason,
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

/// The recordings (`*.msgpack`) in a folder, by name: one collector's file per node, to open as
/// one run.
#[cfg(not(target_arch = "wasm32"))]
pub fn recordings_in(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "msgpack"))
        .collect();
    files.sort();
    Ok(files)
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
    let snapshot = match read_any_file(&path) {
        Ok(Opened::Snapshot(s)) => Ok(*s),
        Ok(Opened::Recording(_)) => Err(OpenError::Format {
            path: path.clone(),
            reason: FormatError::Snapshot(SnapshotError::Schema(
                "a tidemark recording where a snapshot was expected".to_owned(),
            )),
        }),
        Err(err) => Err(err),
    };
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
        match read_any_file(file) {
            Ok(Opened::Recording(r)) => {
                recordings.push(*r);
                read.push(*file);
            }
            Ok(Opened::Snapshot(_)) => warnings.push(format!(
                "left out {}: a PyTorch memory snapshot (open it on its own)",
                file.display()
            )),
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
    recording.notes.push(crate::recording::Note {
        t_ns: 0,
        text: format!(
            "one run from {} recordings (hosts {})",
            merged.hosts.len(),
            merged.hosts.join(", ")
        ),
    });
    recording.warnings.extend(warnings);
    Ok(recording)
}
