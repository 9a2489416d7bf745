//! Whole recordings in and out: read from bytes or a file (a cut file is read up to the cut),
//! written to a file, and a file still being written followed as it grows ([`Follower`]).

use super::{Chunk, ChunkBuffers, Column, ReadError, Reader, Record, Recording, SeriesKey, Writer};

/// Reads a whole recording from bytes.
///
/// An incomplete file (cut inside a record, or with no end record) is not an error: everything
/// before the cut is returned and [`Recording::warnings`] says where the file ends.
pub fn read_recording(bytes: &[u8]) -> Result<Recording, ReadError> {
    let mut reader = Reader::new(bytes)?;
    let mut recording = Recording::new(reader.header().clone());
    let mut buffers = ChunkBuffers::default();
    loop {
        match reader.read_next_into(&mut recording, &mut buffers) {
            Ok(true) => {}
            Ok(false) => break,
            Err(err @ ReadError::Truncated { .. }) => {
                recording.warnings.push(format!(
                    "{err}; {} bytes after it were not read",
                    bytes.len() - reader.offset()
                ));
                break;
            }
            Err(err) => return Err(err),
        }
    }
    recording.finish_chunks(&mut buffers);
    if !reader.ended() && recording.warnings.is_empty() {
        recording.warnings.push(format!(
            "the file ends at byte {} without an end record: it is incomplete (the collector was stopped, or is still writing)",
            bytes.len()
        ));
    }
    if reader.trailing_bytes() > 0 {
        recording.warnings.push(format!(
            "{} bytes after the end record at byte {} were ignored",
            reader.trailing_bytes(),
            reader.offset()
        ));
    }
    recording.shrink_to_fit();
    if !reader.unknown_kinds().is_empty() {
        recording.warnings.push(format!(
            "skipped records of kinds this tidemark does not know ({}): made by a newer tidemark",
            reader.unknown_kinds().join(", ")
        ));
    }
    Ok(recording)
}

/// Reads a recording that is still being written, as its bytes arrive: a live view of a running
/// job. Only the bytes of a record not yet complete are kept between calls.
#[derive(Debug, Default)]
pub struct Follower {
    /// Bytes received but not yet read: the start of a record still being written.
    pending: Vec<u8>,
    /// The series declared so far.
    series: Vec<SeriesKey>,
    ended: bool,
}

impl Follower {
    /// A follower that has read nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the end record has been read: the file is complete.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// Reads the complete records among `bytes` (the file's next bytes) into `recording`, which
    /// is created once the header has arrived. Returns how many records were added. A record cut
    /// off at the end waits for the next call; an error means the file is not a readable
    /// recording, and nothing more will be read.
    pub fn feed(
        &mut self,
        bytes: &[u8],
        recording: &mut Option<Recording>,
    ) -> Result<usize, ReadError> {
        if self.ended {
            return Ok(0);
        }
        self.pending.extend_from_slice(bytes);
        let rec = match recording {
            Some(rec) => rec,
            None => match Reader::new(&self.pending) {
                Ok(reader) => {
                    let offset = reader.offset();
                    let rec = recording.insert(Recording::new(reader.header().clone()));
                    self.pending.drain(..offset);
                    rec
                }
                Err(ReadError::Empty | ReadError::Truncated { .. }) => return Ok(0),
                Err(err) => return Err(err),
            },
        };
        let mut reader = Reader::resume(
            &self.pending,
            rec.header.clone(),
            std::mem::take(&mut self.series),
        );
        let mut added = 0;
        let result = loop {
            match reader.read_next() {
                Ok(Some(record)) => {
                    rec.push(record);
                    added += 1;
                }
                Ok(None) | Err(ReadError::Truncated { .. }) => break Ok(added),
                Err(err) => break Err(err),
            }
        };
        let offset = reader.offset();
        self.ended = reader.ended();
        self.series = reader.into_series();
        self.pending.drain(..offset);
        result
    }
}

/// Reads a recording from a file; the error names the file.
#[cfg(not(target_arch = "wasm32"))]
pub fn read_file(path: &std::path::Path) -> Result<Recording, FileError> {
    let bytes = std::fs::read(path).map_err(|err| FileError::Io {
        path: path.to_owned(),
        reason: std::sync::Arc::new(err),
    })?;
    read_recording(&bytes).map_err(|reason| FileError::Format {
        path: path.to_owned(),
        reason,
    })
}

/// Writes a whole recording to a file, as the collector would have streamed it: its series (in
/// chunks of at most 65,536 samples, series by series), then the allocator readings and phase
/// edges merged in time order, then the OOMs, exits, drop counts and notes. What `read_file`
/// reads back is the same recording (warnings aside).
#[cfg(not(target_arch = "wasm32"))]
pub fn write_file(path: &std::path::Path, recording: &Recording) -> std::io::Result<()> {
    let file = std::io::BufWriter::new(std::fs::File::create(path)?);
    write_to(file, recording)
}

/// Writes a whole recording to `out` as [`write_file`] writes it to a file.
pub fn write_to<W: std::io::Write>(out: W, recording: &Recording) -> std::io::Result<()> {
    const CHUNK: usize = 1 << 16;
    let mut writer = Writer::new(out, &recording.header)?;
    for series in &recording.series {
        for (times, values) in series
            .times_ns
            .chunks(CHUNK)
            .zip((0..series.values.len()).step_by(CHUNK))
        {
            writer.write(&Record::Chunk(Chunk {
                times_ns: times.to_vec(),
                columns: vec![Column {
                    series: series.key.clone(),
                    values: series
                        .values
                        .range(values..(values + CHUNK).min(series.values.len()))
                        .collect(),
                    valid: None,
                }],
            }))?;
        }
    }
    let mut allocator = recording.allocator.iter().peekable();
    let mut phases = recording.phases.iter().peekable();
    loop {
        let record = match (allocator.peek(), phases.peek()) {
            (Some(a), Some(p)) if p.t_ns <= a.t_ns => phases.next().map(Record::Phase),
            (Some(_), _) => allocator.next().map(Record::Allocator),
            (None, Some(_)) => phases.next().map(Record::Phase),
            (None, None) => None,
        };
        let Some(record) = record else { break };
        writer.write(&record)?;
    }
    let rest = (recording.cells.iter().cloned().map(Record::Phase))
        .chain(recording.ooms.iter().cloned().map(Record::Oom))
        .chain(recording.exits.iter().cloned().map(Record::Exit))
        .chain(recording.drops.iter().cloned().map(Record::Dropped))
        .chain(recording.notes.iter().cloned().map(Record::Note))
        .chain(recording.snapshots.iter().cloned().map(Record::Snapshot))
        .chain(recording.categories.iter().cloned().map(Record::Categories))
        .chain(recording.censuses.iter().cloned().map(Record::Census))
        .chain(
            recording
                .saved_freed
                .iter()
                .cloned()
                .map(Record::SavedFreed),
        )
        .chain(recording.unobserved.iter().cloned().map(Record::Unobserved))
        .chain(recording.stalls.iter().cloned().map(Record::Stall));
    for record in rest {
        writer.write(&record)?;
    }
    let end = recording
        .end
        .as_ref()
        .map_or_else(|| recording.duration_ns(), |e| e.t_ns);
    let mut out = writer.finish(end)?;
    std::io::Write::flush(&mut out)
}

/// A recording file that cannot be read, and which file it is.
#[derive(Clone, Debug, thiserror::Error)]
pub enum FileError {
    /// The file cannot be opened or read.
    #[error("cannot read the file ({reason}): {}", path.display())]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        reason: std::sync::Arc<std::io::Error>,
    },
    /// The file is not a readable recording.
    #[error("{reason}: {}", path.display())]
    Format {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong with it.
        reason: ReadError,
    },
}
