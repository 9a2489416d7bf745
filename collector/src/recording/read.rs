//! The reader: record by record from bytes in memory, with bounded allocation and no panics.

use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::census::Census;
use super::model::SeriesKey;
use super::model::{
    AllocatorSample, Categories, Dropped, End, Exit, FORMAT_MAJOR, Header, MAGIC, Note, Oom,
    PhaseEdge, Record, SavedFreed, SnapshotFile, Unobserved,
};
use super::stall::Stall;
use super::wire::{self, WalkError, WireChunk, WireSeries, kind};

/// Why a recording cannot be read. Each names the byte offset where reading stopped.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// The file has no bytes.
    #[error("the file is empty, not a tidemark recording")]
    Empty,
    /// The file does not start with the magic bytes.
    #[error("not a tidemark recording: at byte 0 it holds {found}, not \"TIDEMARK\"")]
    NotARecording {
        /// What the file seems to be instead.
        found: String,
    },
    /// The file was written in a format version this reader does not understand.
    #[error(
        "made by a newer tidemark: format version {major}.{minor} (header at byte 8), this reader understands {FORMAT_MAJOR}.x; upgrade tidemark to read it"
    )]
    NewerVersion {
        /// The file's major version.
        major: u32,
        /// The file's minor version.
        minor: u32,
    },
    /// A record that is all there but cannot be decoded.
    #[error("corrupt {kind} record at byte {offset}: {what}")]
    Corrupt {
        /// Where the record starts.
        offset: usize,
        /// The record kind, or "unknown" when even that cannot be read.
        kind: String,
        /// What is wrong with it.
        what: String,
    },
    /// The bytes end inside a record: the file is incomplete.
    #[error(
        "the file ends inside a record at byte {offset} of {len}: it is incomplete (the collector was stopped, or the copy was cut short)"
    )]
    Truncated {
        /// Where the incomplete record starts.
        offset: usize,
        /// The file's length.
        len: usize,
    },
}

/// Reads records one at a time from a recording held in memory.
pub struct Reader<'a> {
    bytes: &'a [u8],
    offset: usize,
    header: Header,
    ended: bool,
    unknown_kinds: Vec<String>,
    series: Vec<SeriesKey>,
    /// The columns of the chunk read last (kept to be reused).
    columns: Vec<wire::WireColumn<'a>>,
}

impl<'a> Reader<'a> {
    /// Checks the magic bytes and reads the header.
    pub fn new(bytes: &'a [u8]) -> Result<Self, ReadError> {
        if bytes.is_empty() {
            return Err(ReadError::Empty);
        }
        let head = &bytes[..bytes.len().min(MAGIC.len())];
        if head != &MAGIC[..head.len()] {
            return Err(ReadError::NotARecording {
                found: describe_start(bytes),
            });
        }
        if bytes.len() < MAGIC.len() {
            return Err(ReadError::Truncated {
                offset: 0,
                len: bytes.len(),
            });
        }
        let mut reader = Self {
            bytes,
            offset: MAGIC.len(),
            header: Header::new(0, String::new(), Vec::new()),
            ended: false,
            unknown_kinds: Vec::new(),
            series: Vec::new(),
            columns: Vec::new(),
        };
        let (kind, body, end) = reader.frame()?;
        let corrupt = |what: String| ReadError::Corrupt {
            offset: MAGIC.len(),
            kind: "header".to_owned(),
            what,
        };
        if kind != kind::HEADER {
            return Err(corrupt(format!("the first record is \"{kind}\"")));
        }
        // The version comes first, so that a newer file is refused before its header is parsed.
        #[derive(Deserialize)]
        struct Version {
            format_major: u32,
            format_minor: u32,
        }
        let version: Version = decode(body).map_err(corrupt)?;
        if version.format_major > FORMAT_MAJOR {
            return Err(ReadError::NewerVersion {
                major: version.format_major,
                minor: version.format_minor,
            });
        }
        reader.header = decode(body).map_err(corrupt)?;
        reader.offset = end;
        Ok(reader)
    }

    /// Continues reading where another reader stopped: `bytes` starts at that reader's
    /// [`offset`](Self::offset), and `series` are the series it had seen declared.
    pub(crate) fn resume(bytes: &'a [u8], header: Header, series: Vec<SeriesKey>) -> Self {
        Self {
            bytes,
            offset: 0,
            header,
            ended: false,
            unknown_kinds: Vec::new(),
            series,
            columns: Vec::new(),
        }
    }

    /// The series declared so far, for [`resume`](Self::resume).
    pub(crate) fn into_series(self) -> Vec<SeriesKey> {
        self.series
    }

    /// The header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// Where the next record starts.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Whether the end record has been read.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// Bytes after the end record, which are ignored.
    pub fn trailing_bytes(&self) -> usize {
        if self.ended {
            self.bytes.len() - self.offset
        } else {
            0
        }
    }

    /// Kinds of records skipped because this reader does not know them (newer minor versions).
    pub fn unknown_kinds(&self) -> &[String] {
        &self.unknown_kinds
    }

    /// The next record; `None` at the end of the bytes or after the end record.
    ///
    /// [`ReadError::Truncated`] means the bytes stop inside a record; everything before it was
    /// fine, and a file still being written will continue there.
    pub fn read_next(&mut self) -> Result<Option<Record>, ReadError> {
        loop {
            if self.ended || self.offset >= self.bytes.len() {
                return Ok(None);
            }
            let start = self.offset;
            let (kind, body, end) = self.frame()?;
            let corrupt = |what: String| ReadError::Corrupt {
                offset: start,
                kind: kind.to_owned(),
                what,
            };
            let record = match kind {
                kind::SERIES => {
                    let WireSeries { id, key } = decode(body).map_err(corrupt)?;
                    if id as usize != self.series.len() {
                        return Err(corrupt(format!(
                            "declares series {id}, expected {}",
                            self.series.len()
                        )));
                    }
                    self.series.push(key);
                    self.offset = end;
                    continue;
                }
                kind::CHUNK => {
                    let wire: WireChunk<'_> =
                        rmp_serde::from_slice(body).map_err(|err| corrupt(err.to_string()))?;
                    let series = &self.series;
                    let chunk = wire::decode_chunk(wire, |id| series.get(id as usize).cloned());
                    Record::Chunk(chunk.map_err(corrupt)?)
                }
                kind::ALLOCATOR => {
                    Record::Allocator(decode::<AllocatorSample>(body).map_err(corrupt)?)
                }
                kind::PHASE => Record::Phase(decode::<PhaseEdge>(body).map_err(corrupt)?),
                kind::ALLOCATORS => {
                    let wire: wire::WireAllocators<'_> =
                        rmp_serde::from_slice(body).map_err(|err| corrupt(err.to_string()))?;
                    Record::Allocators(wire::decode_allocators(&wire).map_err(corrupt)?)
                }
                kind::PHASES => {
                    let wire: wire::WirePhases<'_> =
                        rmp_serde::from_slice(body).map_err(|err| corrupt(err.to_string()))?;
                    Record::Phases(wire::decode_phases(&wire).map_err(corrupt)?)
                }
                kind::OOM => Record::Oom(decode::<Oom>(body).map_err(corrupt)?),
                kind::EXIT => Record::Exit(decode::<Exit>(body).map_err(corrupt)?),
                kind::DROPPED => Record::Dropped(decode::<Dropped>(body).map_err(corrupt)?),
                kind::NOTE => Record::Note(decode::<Note>(body).map_err(corrupt)?),
                kind::SNAPSHOT => Record::Snapshot(decode::<SnapshotFile>(body).map_err(corrupt)?),
                kind::CATEGORIES => {
                    Record::Categories(decode::<Categories>(body).map_err(corrupt)?)
                }
                kind::CENSUS => Record::Census(decode::<Census>(body).map_err(corrupt)?),
                kind::SAVED_FREED => {
                    Record::SavedFreed(decode::<SavedFreed>(body).map_err(corrupt)?)
                }
                kind::UNOBSERVED => {
                    Record::Unobserved(decode::<Unobserved>(body).map_err(corrupt)?)
                }
                kind::STALL => Record::Stall(decode::<Stall>(body).map_err(corrupt)?),
                kind::END => {
                    self.ended = true;
                    Record::End(decode::<End>(body).map_err(corrupt)?)
                }
                kind::HEADER => return Err(corrupt("a second header".to_owned())),
                other => {
                    if !self.unknown_kinds.iter().any(|k| k == other) {
                        self.unknown_kinds.push(other.to_owned());
                    }
                    self.offset = end;
                    continue;
                }
            };
            self.offset = end;
            return Ok(Some(record));
        }
    }

    /// Reads the next record into `recording`, a chunk's columns decoded straight into their
    /// series (see [`Recording::push_wire_chunk`]; `buffers` are kept between calls): the
    /// whole-file reader's way. `Ok(false)` at the end, as [`read_next`](Self::read_next)'s `None`.
    pub(crate) fn read_next_into(
        &mut self,
        recording: &mut super::Recording,
        buffers: &mut super::ChunkBuffers,
    ) -> Result<bool, ReadError> {
        if self.ended || self.offset >= self.bytes.len() {
            return Ok(false);
        }
        let start = self.offset;
        let corrupt = |what: String| ReadError::Corrupt {
            offset: start,
            kind: kind::CHUNK.to_owned(),
            what,
        };
        // A chunk as the writer writes it, read in one pass and without serde (most of a file).
        if let Some((kind::CHUNK, at)) = self.head()
            && let Some((n, times, used)) = wire::parse_chunk(&self.bytes[at..], &mut self.columns)
        {
            recording
                .push_wire_chunk(n, &times, &self.columns, &self.series, buffers)
                .map_err(corrupt)?;
            self.offset = at + used;
            return Ok(true);
        }
        let (kind, body, end) = self.frame()?;
        if kind != kind::CHUNK {
            return Ok(match self.read_next()? {
                Some(record) => {
                    if matches!(record, super::Record::Chunk(_)) {
                        // Samples added another way: the times gathered so far go first.
                        recording.finish_chunks(buffers);
                    }
                    recording.push(record);
                    true
                }
                None => false,
            });
        }
        let wire: WireChunk<'_> =
            rmp_serde::from_slice(body).map_err(|err| corrupt(err.to_string()))?;
        recording
            .push_wire_chunk(wire.n, &wire.t, &wire.c, &self.series, buffers)
            .map_err(corrupt)?;
        self.offset = end;
        Ok(true)
    }

    /// The kind of the record at the current offset and where its body starts, read without
    /// walking the body (`None`: not a record's start; [`frame`](Self::frame) says why).
    fn head(&self) -> Option<(&'a str, usize)> {
        let bytes: &'a [u8] = self.bytes;
        let mut rest = bytes.get(self.offset..)?;
        if rmp::decode::read_array_len(&mut rest).ok()? != 2 {
            return None;
        }
        let (kind, body) = rmp::decode::read_str_from_slice(rest).ok()?;
        Some((kind, bytes.len() - body.len()))
    }

    /// Splits the record at the current offset into its kind and body, and finds its end.
    fn frame(&self) -> Result<(&'a str, &'a [u8], usize), ReadError> {
        let bytes = self.bytes;
        let start = self.offset;
        let end = match wire::value_end(bytes, start) {
            Ok(end) => end,
            Err(WalkError::Eof) => {
                return Err(ReadError::Truncated {
                    offset: start,
                    len: bytes.len(),
                });
            }
            Err(WalkError::BadMarker { at }) => {
                return Err(ReadError::Corrupt {
                    offset: start,
                    kind: "unknown".to_owned(),
                    what: format!("byte {at} is not MessagePack (0xc1)"),
                });
            }
        };
        let corrupt = |what: &str| ReadError::Corrupt {
            offset: start,
            kind: "unknown".to_owned(),
            what: what.to_owned(),
        };
        let mut rest = &bytes[start..end];
        let len = rmp::decode::read_array_len(&mut rest)
            .map_err(|_| corrupt("a record must be a two-element array [kind, body]"))?;
        if len != 2 {
            return Err(corrupt(&format!(
                "a record must be a two-element array [kind, body], found {len} elements"
            )));
        }
        let (kind, body) = rmp::decode::read_str_from_slice(rest)
            .map_err(|_| corrupt("the record kind is not a UTF-8 string"))?;
        Ok((kind, body, end))
    }
}

fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    let mut deserializer = rmp_serde::Deserializer::new(body);
    T::deserialize(&mut deserializer).map_err(|err| err.to_string())
}

/// Names what a file that is not a recording seems to be.
pub(crate) fn describe_start(bytes: &[u8]) -> String {
    let known: &[(&[u8], &str)] = &[
        (b"\x89PNG", "a PNG image"),
        (b"\x1f\x8b", "gzip data (decompress it first)"),
        (b"PK\x03\x04", "a zip archive"),
        (b"\x80\x02", "a Python pickle (a PyTorch memory snapshot?)"),
        (b"\x80\x03", "a Python pickle (a PyTorch memory snapshot?)"),
        (b"\x80\x04", "a Python pickle (a PyTorch memory snapshot?)"),
        (b"\x80\x05", "a Python pickle (a PyTorch memory snapshot?)"),
        (b"{", "what looks like JSON"),
    ];
    for (prefix, what) in known {
        if bytes.starts_with(prefix) {
            return (*what).to_owned();
        }
    }
    let shown: Vec<String> = bytes.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("the bytes {}", shown.join(" "))
}
