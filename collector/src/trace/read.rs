//! Reading a profiler trace: what kind of JSON it is, gzip or zstd, and the errors a trace gets.

use std::io::Read as _;

use crate::recording::Recording;

/// Why bytes that look like a profiler file are not a readable one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TraceError {
    /// Compressed data that cannot be decompressed.
    #[error("{codec} data that cannot be decompressed ({why})")]
    Decompress {
        /// How it is compressed: `gzip`, `zstd`.
        codec: &'static str,
        /// What went wrong.
        why: String,
    },
    /// Compressed data inside compressed data.
    #[error("{0} data that holds compressed data again: decompress it once first")]
    CompressedTwice(&'static str),
    /// The input could not be read.
    #[error("cannot read it ({0})")]
    Read(String),
    /// Not JSON at all, or JSON cut short.
    #[error("not valid JSON ({0})")]
    Json(String),
    /// JSON, and neither a trace nor a memory timeline.
    #[error(
        "JSON, but not a PyTorch profiler file: {found}; expected a trace (an object with traceEvents, as torch.profiler's export_chrome_trace or tensorboard_trace_handler write it) or a memory timeline (export_memory_timeline's .raw.json.gz or .json)"
    )]
    NotATrace {
        /// What the JSON holds instead.
        found: String,
    },
    /// A trace without memory events.
    #[error(
        "a PyTorch profiler trace of {events} events without [memory] events: profile_memory=True was not set? (torch.profiler.profile(profile_memory=True, …) records them)"
    )]
    NoMemoryEvents {
        /// The trace's events.
        events: usize,
    },
    /// `[memory]` events without PyTorch's args (another profiler's).
    #[error(
        "a trace whose {count} [memory] events carry no Bytes/Device Type args (PaddlePaddle's profiler writes place and increase_bytes): not PyTorch's profiler"
    )]
    OtherProfiler {
        /// The `[memory]` events.
        count: usize,
    },
    /// A memory timeline whose rows are not `[time, action, bytes, category]`.
    #[error("a memory timeline with a bad row {row}: {why}")]
    Timeline {
        /// The row's index.
        row: usize,
        /// What is wrong.
        why: String,
    },
}

/// The two magic bytes of gzip.
pub const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
/// The four magic bytes of a zstd frame.
pub const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// How data is compressed, told from its first bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    /// gzip (`.gz`): what `torch.profiler` and many users write.
    Gzip,
    /// zstd (`.zst`).
    Zstd,
}

impl Compression {
    /// How `bytes` are compressed, if they are.
    pub fn of(bytes: &[u8]) -> Option<Self> {
        if bytes.starts_with(&GZIP_MAGIC) {
            Some(Self::Gzip)
        } else if bytes.starts_with(&ZSTD_MAGIC) {
            Some(Self::Zstd)
        } else {
            None
        }
    }

    /// Its name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Self::Gzip => "gzip",
            Self::Zstd => "zstd",
        }
    }

    /// The decompressed bytes of `input`, as they are read. A zstd frame's header is read here.
    pub fn decoder<'a>(
        self,
        input: impl std::io::Read + 'a,
    ) -> std::io::Result<Box<dyn std::io::Read + 'a>> {
        Ok(match self {
            Self::Gzip => Box::new(flate2::read::MultiGzDecoder::new(input)),
            Self::Zstd => Box::new(
                ruzstd::decoding::StreamingDecoder::new(input)
                    .map_err(|err| std::io::Error::new(std::io::ErrorKind::InvalidData, err))?,
            ),
        })
    }

    /// The error of data that cannot be decompressed.
    fn error(self, err: std::io::Error) -> TraceError {
        TraceError::Decompress {
            codec: self.name(),
            why: err.to_string(),
        }
    }
}

/// Whether bytes are compressed (gzip or zstd).
pub fn is_compressed(bytes: &[u8]) -> bool {
    Compression::of(bytes).is_some()
}

/// What JSON bytes hold, from their first non-blank ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JsonKind {
    /// A chrome trace: an object, or an array of event objects.
    Trace,
    /// A memory timeline: an array of arrays.
    Timeline,
}

/// The bytes after blanks and a UTF-8 byte order mark.
fn skip_blank(bytes: &[u8]) -> &[u8] {
    let bytes = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(bytes.len());
    &bytes[start..]
}

/// What JSON bytes hold, told from their start: `{` or `[{` a trace, `[[` a memory timeline;
/// `None` when they do not start as JSON does. An array whose first element has not arrived
/// yet is taken for a trace (its reader tells).
pub fn json_kind(first: &[u8]) -> Option<JsonKind> {
    match skip_blank(first) {
        [b'{', ..] => Some(JsonKind::Trace),
        [b'[', rest @ ..] => match skip_blank(rest).first() {
            Some(b'[') => Some(JsonKind::Timeline),
            _ => Some(JsonKind::Trace),
        },
        _ => None,
    }
}

/// The start of compressed data decompressed, at most `limit` bytes (fewer when the data given
/// ends first or is not compressed): enough to tell what it holds.
pub fn decompress_start(bytes: &[u8], limit: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(limit);
    let Some(decoder) = Compression::of(bytes).and_then(|c| c.decoder(bytes).ok()) else {
        return out;
    };
    let mut decoder = decoder.take(limit as u64);
    // A read cut short by the end of the bytes given keeps what came before it.
    let mut buf = [0u8; 512];
    while out.len() < limit {
        match decoder.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
    out
}

/// Compressed data decompressed, whole (bytes that are not compressed come back as they are).
pub fn decompress(bytes: &[u8]) -> Result<Vec<u8>, TraceError> {
    let Some(compression) = Compression::of(bytes) else {
        return Ok(bytes.to_vec());
    };
    let mut out = Vec::with_capacity(bytes.len().saturating_mul(4));
    compression
        .decoder(bytes)
        .and_then(|mut d| d.read_to_end(&mut out))
        .map_err(|err| compression.error(err))?;
    Ok(out)
}

/// A profiler file, gzipped or not, as a recording.
pub fn read_trace(bytes: &[u8]) -> Result<Recording, TraceError> {
    read_from(bytes)
}

/// A profiler file, gzipped or not, read from `input` as it streams in: a chrome trace is never
/// held whole, nor decompressed whole (a memory timeline, a small file, is).
pub fn read_from(input: impl std::io::Read) -> Result<Recording, TraceError> {
    let (first, input) = head(input, |err| TraceError::Read(err.to_string()))?;
    let Some(compression) = Compression::of(&first) else {
        return json_from(first, input, |err| TraceError::Read(err.to_string()));
    };
    let broken: fn(std::io::Error) -> TraceError = match compression {
        Compression::Gzip => |err| Compression::Gzip.error(err),
        Compression::Zstd => |err| Compression::Zstd.error(err),
    };
    let inner = compression
        .decoder(std::io::Cursor::new(first).chain(input))
        .map_err(broken)?;
    let (first, inner) = head(inner, broken)?;
    if is_compressed(&first) {
        return Err(TraceError::CompressedTwice(compression.name()));
    }
    json_from(first, inner, broken)
}

/// The first bytes of `input` (enough to tell what it holds), and the rest of it.
fn head<R: std::io::Read>(
    mut input: R,
    read_error: fn(std::io::Error) -> TraceError,
) -> Result<(Vec<u8>, R), TraceError> {
    let mut first = Vec::with_capacity(256);
    (&mut input)
        .take(256)
        .read_to_end(&mut first)
        .map_err(read_error)?;
    Ok((first, input))
}

/// JSON that starts with `first` and goes on in `rest`, as its first bytes tell.
fn json_from(
    first: Vec<u8>,
    rest: impl std::io::Read,
    read_error: fn(std::io::Error) -> TraceError,
) -> Result<Recording, TraceError> {
    let kind = json_kind(&first);
    let mut input = std::io::Cursor::new(first).chain(rest);
    match kind {
        Some(JsonKind::Trace) => super::chrome::read_chrome_trace_from(input, read_error),
        Some(JsonKind::Timeline) => {
            let mut bytes = Vec::new();
            input.read_to_end(&mut bytes).map_err(read_error)?;
            super::timeline::read_timeline(&bytes)
        }
        None => Err(TraceError::Json("it does not start with { or [".to_owned())),
    }
}

/// A serde_json error in words, with where it happened.
pub(crate) fn json_error(err: &serde_json::Error) -> TraceError {
    TraceError::Json(err.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_told_from_its_first_bytes() {
        assert_eq!(json_kind(b"{\"traceEvents\""), Some(JsonKind::Trace));
        assert_eq!(json_kind(b"\n  {"), Some(JsonKind::Trace));
        assert_eq!(json_kind(b"\xef\xbb\xbf{"), Some(JsonKind::Trace));
        assert_eq!(json_kind(b"[{\"ph\""), Some(JsonKind::Trace));
        assert_eq!(json_kind(b"[ \n[-1, 1,"), Some(JsonKind::Timeline));
        assert_eq!(json_kind(b"[[0, 5"), Some(JsonKind::Timeline));
        assert_eq!(json_kind(b"["), Some(JsonKind::Trace));
        assert_eq!(json_kind(b"<html>"), None);
        assert_eq!(json_kind(b"  "), None);
        assert_eq!(json_kind(b""), None);
    }

    #[test]
    fn gzip_is_peeked_and_read() {
        use std::io::Write as _;
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let text = format!("[[-1, 1, 512, 7]{}]", ", [5, 2, 512, 0]".repeat(1000));
        encoder.write_all(text.as_bytes()).expect("in memory");
        let gz = encoder.finish().expect("in memory");
        assert!(is_compressed(&gz));
        assert_eq!(decompress_start(&gz, 16), text.as_bytes()[..16].to_vec());
        // Only the first part of the file: its start still comes out.
        assert_eq!(
            decompress_start(&gz[..gz.len() / 2], 8),
            b"[[-1, 1,".to_vec()
        );
        assert_eq!(decompress(&gz).expect("whole"), text.as_bytes());
        assert!(matches!(
            decompress(&gz[..gz.len() / 2]),
            Err(TraceError::Decompress { codec: "gzip", .. })
        ));
        let recording = read_trace(&gz).expect("a timeline");
        // What existed before profiling (time -1) is placed at the first time: one instant.
        assert_eq!(recording.allocator.len(), 1);
        assert_eq!(recording.allocator.allocated(0), 512 * 1001);
    }

    /// zstd as gzip: told from its magic, peeked, read whole and as it streams; cut short, or
    /// compressed twice, it says so.
    #[test]
    fn zstd_is_peeked_and_read() {
        let text = format!("[[-1, 1, 512, 7]{}]", ", [5, 2, 512, 0]".repeat(1000));
        let zst = ruzstd::encoding::compress_to_vec(
            text.as_bytes(),
            ruzstd::encoding::CompressionLevel::Fastest,
        );
        assert_eq!(Compression::of(&zst), Some(Compression::Zstd));
        assert_eq!(decompress_start(&zst, 16), text.as_bytes()[..16].to_vec());
        assert_eq!(decompress(&zst).expect("whole"), text.as_bytes());
        let recording = read_trace(&zst).expect("a timeline");
        assert_eq!(recording.allocator.allocated(0), 512 * 1001);
        let err = decompress(&zst[..zst.len() / 2]).expect_err("cut short");
        assert!(
            err.to_string()
                .starts_with("zstd data that cannot be decompressed ("),
            "{err}"
        );
        let twice = ruzstd::encoding::compress_to_vec(
            &zst[..],
            ruzstd::encoding::CompressionLevel::Fastest,
        );
        assert_eq!(
            read_trace(&twice).expect_err("twice").to_string(),
            "zstd data that holds compressed data again: decompress it once first"
        );
        assert_eq!(Compression::of(b"[[0"), None);
    }

    #[test]
    fn json_of_another_kind_says_what_was_expected() {
        let err = read_trace(b"{\"model\": \"resnet\"}").expect_err("not a trace");
        assert!(
            err.to_string()
                .starts_with("JSON, but not a PyTorch profiler file: an object without traceEvents; expected a trace"),
            "{err}"
        );
        let err = read_trace(b"[1, 2, 3]").expect_err("not a trace");
        assert!(err.to_string().contains("expected a trace"), "{err}");
        let err = read_trace(b"{\"traceEvents\": [").expect_err("cut short");
        assert_eq!(
            err.to_string(),
            "not valid JSON (the JSON ends after 17 bytes where trace event 0 was expected: cut short?)"
        );
    }
}
