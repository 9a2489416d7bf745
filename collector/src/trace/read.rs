//! Reading a profiler trace: what kind of JSON it is, gzip, and the errors a trace gets.

use std::io::Read as _;

use crate::recording::Recording;

/// Why bytes that look like a profiler file are not a readable one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TraceError {
    /// Gzip data that cannot be decompressed.
    #[error("gzip data that cannot be decompressed ({0})")]
    Gzip(String),
    /// Gzip inside gzip.
    #[error("gzip data that holds gzip data again: decompress it once first")]
    GzipTwice,
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

/// Whether bytes are gzip data.
pub fn is_gzip(bytes: &[u8]) -> bool {
    bytes.starts_with(&GZIP_MAGIC)
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

/// The start of gzip data decompressed, at most `limit` bytes (fewer when the data given ends
/// first or is not gzip): enough to tell what it holds.
pub fn gunzip_start(bytes: &[u8], limit: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(limit);
    let mut decoder = flate2::read::MultiGzDecoder::new(bytes).take(limit as u64);
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

/// Gzip data decompressed, whole.
pub fn gunzip(bytes: &[u8]) -> Result<Vec<u8>, TraceError> {
    let mut out = Vec::with_capacity(bytes.len().saturating_mul(4));
    flate2::read::MultiGzDecoder::new(bytes)
        .read_to_end(&mut out)
        .map_err(|err| TraceError::Gzip(err.to_string()))?;
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
    if !is_gzip(&first) {
        return json_from(first, input, |err| TraceError::Read(err.to_string()));
    }
    let gzip = |err: std::io::Error| TraceError::Gzip(err.to_string());
    let inner = flate2::read::MultiGzDecoder::new(std::io::Cursor::new(first).chain(input));
    let (first, inner) = head(inner, gzip)?;
    if is_gzip(&first) {
        return Err(TraceError::GzipTwice);
    }
    json_from(first, inner, gzip)
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
        assert!(is_gzip(&gz));
        assert_eq!(gunzip_start(&gz, 16), text.as_bytes()[..16].to_vec());
        // Only the first part of the file: its start still comes out.
        assert_eq!(gunzip_start(&gz[..gz.len() / 2], 8), b"[[-1, 1,".to_vec());
        assert_eq!(gunzip(&gz).expect("whole"), text.as_bytes());
        assert!(matches!(
            gunzip(&gz[..gz.len() / 2]),
            Err(TraceError::Gzip(_))
        ));
        let recording = read_trace(&gz).expect("a timeline");
        // What existed before profiling (time -1) is placed at the first time: one instant.
        assert_eq!(recording.allocator.len(), 1);
        assert_eq!(recording.allocator.allocated(0), 512 * 1001);
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
