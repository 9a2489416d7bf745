//! A chrome trace's events, read as the bytes stream in: the file is never held whole (a 1 GB
//! trace is read through a window of a few MiB), and each event is handed on as soon as it is
//! parsed, its name already told ([`Name`]), so that nothing but what matters is kept. The
//! members beside the events (`deviceProperties`, `distributedInfo`, `baseTimeNanoseconds`,
//! `traceName`) are read whole; any other member is skipped. JSON that is cut short or broken
//! is named with the byte where it goes wrong.

use std::io::Read;

use serde::Deserialize;
use serde::de::{DeserializeOwned, Deserializer, IgnoredAny, Visitor};

use super::TraceError;
use super::loose::Loose;
use crate::recording::Phase;

/// Bytes read from the input at a time.
const BLOCK: usize = 4 << 20;

/// The members of a trace file beside its events.
#[derive(Default)]
pub(super) struct Meta {
    pub device_properties: Option<Vec<DeviceProperties>>,
    pub distributed_info: Option<DistributedInfo>,
    pub base_time_ns: Loose,
    pub trace_name: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct DeviceProperties {
    #[serde(default)]
    pub id: Loose,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(rename = "totalGlobalMem", default)]
    pub total_global_mem: Loose,
}

#[derive(Deserialize)]
pub(super) struct DistributedInfo {
    #[serde(default)]
    pub rank: Loose,
}

/// One trace event; only what a memory reading needs is kept, and nothing is allocated for it.
#[derive(Deserialize)]
pub(super) struct Event {
    #[serde(default)]
    pub ph: Complete,
    #[serde(default)]
    pub name: Name,
    #[serde(default)]
    pub ts: Loose,
    #[serde(default)]
    pub dur: Loose,
    #[serde(default)]
    pub pid: Loose,
    #[serde(default)]
    pub tid: Loose,
    #[serde(default)]
    pub cat: Operator,
    #[serde(default)]
    pub finished: Loose,
    #[serde(default)]
    pub args: Option<Args>,
}

/// The args of a `[memory]` or `[OutOfMemory]` event.
#[derive(Default, Deserialize)]
pub(super) struct Args {
    #[serde(rename = "Bytes", default)]
    pub bytes: Loose,
    #[serde(rename = "Total Allocated", default)]
    pub total_allocated: Loose,
    #[serde(rename = "Total Reserved", default)]
    pub total_reserved: Loose,
    #[serde(rename = "Device Type", default)]
    pub device_type: Loose,
    #[serde(rename = "Device Id", default)]
    pub device_id: Loose,
    #[serde(default)]
    pub finished: Loose,
}

/// Whether an event is a complete span (`ph: "X"`).
#[derive(Default)]
pub(super) struct Complete(pub bool);

impl<'de> Deserialize<'de> for Complete {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        told(d, |ph| Self(ph == "X"))
    }
}

/// Whether an event's category is an operator's (`cpu_op`; `Operator` in older traces).
#[derive(Default)]
pub(super) struct Operator(pub bool);

impl<'de> Deserialize<'de> for Operator {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        told(d, |cat| {
            Self(matches!(cat, "cpu_op" | "Operator" | "operator"))
        })
    }
}

/// A name kept in place (its first 62 bytes, cut at a character's boundary): an operator's name
/// is read without an allocation.
#[derive(Clone, Copy)]
pub(super) struct Short {
    len: u8,
    bytes: [u8; 62],
}

impl Short {
    fn of(name: &str) -> Self {
        let mut len = name.len().min(62);
        while !name.is_char_boundary(len) {
            len -= 1;
        }
        let mut bytes = [0; 62];
        bytes[..len].copy_from_slice(&name.as_bytes()[..len]);
        Self {
            len: len as u8,
            bytes,
        }
    }

    pub(super) fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or("")
    }
}

impl std::fmt::Debug for Short {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_str().fmt(f)
    }
}

/// A string (or null, as "") told apart by `tell` while it is read: nothing is allocated.
fn told<'de, D: Deserializer<'de>, T>(d: D, tell: fn(&str) -> T) -> Result<T, D::Error> {
    struct Tell<T>(fn(&str) -> T);
    impl<T> Visitor<'_> for Tell<T> {
        type Value = T;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a string")
        }
        fn visit_str<E>(self, v: &str) -> Result<T, E> {
            Ok((self.0)(v))
        }
        fn visit_unit<E>(self) -> Result<T, E> {
            Ok((self.0)(""))
        }
    }
    d.deserialize_any(Tell(tell))
}

/// What an event's name says it is.
#[derive(Clone, Debug, Default)]
pub(super) enum Name {
    /// `[memory]`.
    Memory,
    /// `[OutOfMemory]`.
    OutOfMemory,
    /// A step or a phase ([`named`]).
    Span(Named),
    /// Any other name (an operator's, a kernel's).
    Op(Short),
    /// No name.
    #[default]
    Other,
}

impl<'de> Deserialize<'de> for Name {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        told(d, |name| match name {
            "[memory]" => Self::Memory,
            "[OutOfMemory]" => Self::OutOfMemory,
            "" => Self::Other,
            _ => named(name).map_or_else(|| Self::Op(Short::of(name)), Self::Span),
        })
    }
}

/// A span (`ph: X`) that names a step or a phase.
#[derive(Clone, Debug)]
pub(super) enum Named {
    Step(u64),
    /// A phase named by a `record_function` label or the optimizer.
    Phase(Phase),
    /// A piece of autograd's backward pass.
    Autograd,
    /// The data loader's `__next__`.
    Data,
}

/// What a span's name says it is.
pub(super) fn named(name: &str) -> Option<Named> {
    if let Some(n) = name.strip_prefix("ProfilerStep#") {
        return n.trim().parse().ok().map(Named::Step);
    }
    if name.starts_with("Optimizer.step#") {
        return Some(Named::Phase(Phase::Optimizer));
    }
    if name.starts_with("Optimizer.zero_grad#") {
        return Some(Named::Phase(Phase::Custom("zero_grad".to_owned())));
    }
    if name.starts_with("autograd::engine::evaluate_function") || is_autograd_node(name) {
        return Some(Named::Autograd);
    }
    if name.starts_with("enumerate(DataLoader)#") {
        return Some(Named::Data);
    }
    // A label: `## forward ##`, `forward`, `optimizer step`.
    let label = name.trim_matches(|c: char| c == '#' || c.is_whitespace());
    let is = |words: &[&str]| words.iter().any(|w| label.eq_ignore_ascii_case(w));
    if is(&["forward", "forward pass"]) {
        Some(Named::Phase(Phase::Forward))
    } else if is(&["backward", "backward pass"]) {
        Some(Named::Phase(Phase::Backward))
    } else if is(&[
        "optimizer",
        "optimizer step",
        "optimizer_step",
        "optimizer.step",
    ]) {
        Some(Named::Phase(Phase::Optimizer))
    } else if is(&["eval", "evaluation", "validation"]) {
        Some(Named::Phase(Phase::Eval))
    } else if is(&["zero_grad"]) {
        Some(Named::Phase(Phase::Custom("zero_grad".to_owned())))
    } else {
        None
    }
}

/// An autograd node as profilers before `autograd::engine::evaluate_function` named them on
/// the backward thread: `CudnnConvolutionBackward`, `MeanBackward1`.
fn is_autograd_node(name: &str) -> bool {
    let stem = name.trim_end_matches(|c: char| c.is_ascii_digit());
    !name.contains("::")
        && stem.len() > "Backward".len()
        && stem.ends_with("Backward")
        && stem.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Reads a trace from `input` (an object holding `traceEvents`, or the array of events alone),
/// handing `each` every event in file order; returns the other members and the number of events.
/// `read_error` says what a failed read of `input` is (a file's, or gzip data's).
pub(super) fn read_events(
    input: impl Read,
    read_error: fn(std::io::Error) -> TraceError,
    mut each: impl FnMut(Event),
) -> Result<(Meta, usize), TraceError> {
    let mut w = Window {
        input,
        read_error,
        buf: Vec::new(),
        pos: 0,
        before: 0,
        eof: false,
    };
    w.fill()?;
    if w.buf.starts_with(b"\xef\xbb\xbf") {
        w.pos = 3;
    }
    let mut meta = Meta::default();
    let mut events = None;
    // The names of the other members, to say what an object without events is.
    let mut others: Vec<String> = Vec::new();
    match w.peek()? {
        Some(b'[') => events = Some(w.events(&mut each)?),
        Some(b'{') => {
            w.pos += 1;
            if w.peek()? == Some(b'}') {
                w.pos += 1;
            } else {
                loop {
                    let key: String = w.next(&|| "a member's name".to_owned())?;
                    w.expect(b':', "`:` after a member's name")?;
                    let what = || format!("the value of {key}");
                    match key.as_str() {
                        "traceEvents" if w.peek()? == Some(b'[') => {
                            events = Some(w.events(&mut each)?);
                        }
                        "deviceProperties" => meta.device_properties = w.next(&what)?,
                        "distributedInfo" => meta.distributed_info = w.next(&what)?,
                        "baseTimeNanoseconds" => meta.base_time_ns = w.next(&what)?,
                        "traceName" => meta.trace_name = w.next(&what)?,
                        _ => {
                            w.next::<IgnoredAny>(&what)?;
                            if others.len() < 32 {
                                others.push(key);
                            }
                        }
                    }
                    match w.peek()? {
                        Some(b',') => w.pos += 1,
                        Some(b'}') => {
                            w.pos += 1;
                            break;
                        }
                        found => return Err(w.unexpected(found, "`,` or `}` after a member")),
                    }
                }
            }
        }
        found => return Err(w.unexpected(found, "`{` or `[`")),
    }
    if let Some(found) = w.peek()? {
        return Err(TraceError::Json(format!(
            "trailing characters at byte {}: {:?} after the trace",
            w.at(),
            char::from(found)
        )));
    }
    let Some(events) = events else {
        return Err(TraceError::NotATrace {
            found: without_events(&others),
        });
    };
    Ok((meta, events))
}

/// What a JSON object without `traceEvents` is: tidemark's own outputs are told by their
/// members, so a report passed where a run is expected says so.
fn without_events(members: &[String]) -> String {
    let has = |name: &str| members.iter().any(|m| m == name);
    if has("headline") && has("analysis") && has("schema") {
        "the JSON of `collector report --json` (a report on a run, not the run: pass the recording or snapshot it was made from)".to_owned()
    } else if has("kind") && has("a") && has("b") && has("diff") {
        "the JSON of `collector diff --json` (a comparison, not a run: pass the recording or snapshot itself)".to_owned()
    } else {
        "an object without traceEvents".to_owned()
    }
}

/// A window onto the input: the bytes from `buf[pos]` on are not read yet.
struct Window<R> {
    input: R,
    read_error: fn(std::io::Error) -> TraceError,
    buf: Vec<u8>,
    pos: usize,
    /// The input's bytes before `buf[0]`.
    before: u64,
    eof: bool,
}

impl<R: Read> Window<R> {
    /// Where in the input `pos` is.
    fn at(&self) -> u64 {
        self.before + self.pos as u64
    }

    /// Reads more of the input after what is left in the window; false at its end.
    fn fill(&mut self) -> Result<bool, TraceError> {
        if self.eof {
            return Ok(false);
        }
        if self.pos > 0 {
            self.buf.drain(..self.pos);
            self.before += self.pos as u64;
            self.pos = 0;
        }
        let len = self.buf.len();
        self.buf.resize(len + BLOCK, 0);
        let n = loop {
            match self.input.read(&mut self.buf[len..]) {
                Ok(n) => break n,
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
                Err(err) => {
                    self.buf.truncate(len);
                    return Err((self.read_error)(err));
                }
            }
        };
        self.buf.truncate(len + n);
        self.eof = n == 0;
        Ok(n > 0)
    }

    /// The next byte that is not blank, left unread; `None` at the end of the input.
    fn peek(&mut self) -> Result<Option<u8>, TraceError> {
        loop {
            while let Some(&b) = self.buf.get(self.pos) {
                if !matches!(b, b' ' | b'\n' | b'\r' | b'\t') {
                    return Ok(Some(b));
                }
                self.pos += 1;
            }
            if !self.fill()? {
                return Ok(None);
            }
        }
    }

    /// Takes `byte` (after blanks), or says what came instead of `what`.
    fn expect(&mut self, byte: u8, what: &str) -> Result<(), TraceError> {
        match self.peek()? {
            Some(b) if b == byte => {
                self.pos += 1;
                Ok(())
            }
            found => Err(self.unexpected(found, what)),
        }
    }

    fn unexpected(&self, found: Option<u8>, what: &str) -> TraceError {
        match found {
            None => TraceError::Json(format!(
                "the JSON ends after {} bytes where {what} was expected: cut short?",
                self.before + self.buf.len() as u64
            )),
            Some(b) => TraceError::Json(format!(
                "{:?} at byte {} where {what} was expected",
                char::from(b),
                self.at()
            )),
        }
    }

    /// The next JSON value, read as `T`; the window grows until it holds it whole. `what` names
    /// it for an error.
    fn next<T: DeserializeOwned>(&mut self, what: &dyn Fn() -> String) -> Result<T, TraceError> {
        loop {
            let (outcome, used) = {
                let mut values =
                    serde_json::Deserializer::from_slice(&self.buf[self.pos..]).into_iter::<T>();
                let outcome = values.next();
                (outcome, values.byte_offset())
            };
            match outcome {
                // A number may go on in bytes not read yet: a value is whole when a byte
                // follows it, or the input ends.
                Some(Ok(value)) if self.eof || self.pos + used < self.buf.len() => {
                    self.pos += used;
                    return Ok(value);
                }
                // An error where the window ends may be a value cut by it (serde_json calls
                // `3390730.` an invalid number, not the end of its input): read on and retry.
                Some(Err(err))
                    if self.eof
                        || !(err.is_eof()
                            || self.pos + self.offset_in_rest(&err) + 64 >= self.buf.len()) =>
                {
                    return Err(self.json_error(&err, what));
                }
                None if self.eof => {
                    return Err(self.unexpected(None, &what()));
                }
                _ => {
                    self.fill()?;
                }
            }
        }
    }

    /// Where in the window after `pos` a serde_json error of the value there is.
    fn offset_in_rest(&self, err: &serde_json::Error) -> usize {
        let rest = &self.buf[self.pos..];
        let line_start = match err.line() {
            0 | 1 => 0,
            line => rest
                .iter()
                .enumerate()
                .filter(|(_, b)| **b == b'\n')
                .nth(line - 2)
                .map_or(rest.len(), |(i, _)| i + 1),
        };
        line_start + err.column().saturating_sub(1)
    }

    /// A serde_json error at the value starting at `pos`, with the byte of the input it is at.
    fn json_error(&self, err: &serde_json::Error, what: &dyn Fn() -> String) -> TraceError {
        let byte = self.at() + self.offset_in_rest(err) as u64;
        let text = err.to_string();
        let text = text.split(" at line ").next().unwrap_or_default();
        if err.is_eof() {
            TraceError::Json(format!(
                "the JSON ends after {} bytes, inside {}: cut short?",
                self.before + self.buf.len() as u64,
                what()
            ))
        } else if err.is_data() {
            TraceError::NotATrace {
                found: format!(
                    "{} is not what a trace holds there ({text}, at byte {byte})",
                    what()
                ),
            }
        } else {
            TraceError::Json(format!("{text} at byte {byte}, in {}", what()))
        }
    }

    /// The events of the array at `pos`, handed to `each`; how many.
    fn events(&mut self, each: &mut impl FnMut(Event)) -> Result<usize, TraceError> {
        self.pos += 1;
        if self.peek()? == Some(b']') {
            self.pos += 1;
            return Ok(0);
        }
        let mut n = 0usize;
        loop {
            each(self.next(&|| format!("trace event {n}"))?);
            n += 1;
            match self.peek()? {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(n);
                }
                found => {
                    return Err(
                        self.unexpected(found, &format!("`,` or `]` after trace event {}", n - 1))
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that gives at most `n` bytes a read: values cut at every place.
    struct Trickle<'a>(&'a [u8], usize);

    impl Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            let n = self.1.min(out.len()).min(self.0.len());
            out[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    fn io(err: std::io::Error) -> TraceError {
        TraceError::Json(err.to_string())
    }

    #[test]
    fn span_names_say_the_phase() {
        let phase = |name: &str| match named(name) {
            Some(Named::Phase(p)) => Some(p),
            _ => None,
        };
        assert!(matches!(named("ProfilerStep#12"), Some(Named::Step(12))));
        assert_eq!(phase("## forward ##"), Some(Phase::Forward));
        assert_eq!(phase("Backward"), Some(Phase::Backward));
        assert_eq!(phase("Optimizer.step#SGD.step"), Some(Phase::Optimizer));
        assert_eq!(
            phase("Optimizer.zero_grad#SGD.zero_grad"),
            Some(Phase::Custom("zero_grad".to_owned()))
        );
        assert_eq!(phase("aten::conv2d"), None);
        assert!(matches!(
            named("autograd::engine::evaluate_function: AddmmBackward0"),
            Some(Named::Autograd)
        ));
        assert!(matches!(
            named("CudnnConvolutionBackward"),
            Some(Named::Autograd)
        ));
        assert!(matches!(named("MeanBackward1"), Some(Named::Autograd)));
        assert!(named("aten::cudnn_convolution_backward").is_none());
        assert!(named("Backward").is_some_and(|n| !matches!(n, Named::Autograd)));
        assert!(matches!(
            named("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"),
            Some(Named::Data)
        ));
    }

    #[test]
    fn events_and_members_are_read_in_any_order_whatever_the_reads_return() {
        let json = br#"{"schemaVersion": 1, "traceEvents": [
            {"ph": "X", "name": "ProfilerStep#7", "ts": 10, "dur": 5},
            {"ph": "i", "name": "[memory]", "ts": 3390730.000, "args": {"Bytes": -512, "Total Allocated": 1.5e3, "Device Type": 1, "Device Id": 0}},
            {"name": "aten::mm", "cat": "cpu_op", "args": {"External id": 3, "blocks per SM": 0.3, "x": -1.5e3}}
        ], "baseTimeNanoseconds": 1700000000000000000, "distributedInfo": {"rank": 3}}"#;
        for step in [1, 2, 3, 7, 64, 1 << 20] {
            let mut names = Vec::new();
            let (meta, n) = read_events(Trickle(json, step), io, |e| names.push(e.name))
                .unwrap_or_else(|e| panic!("{step}: {e}"));
            assert_eq!(n, 3);
            assert!(matches!(names[0], Name::Span(Named::Step(7))));
            assert!(matches!(names[1], Name::Memory));
            assert!(matches!(names[2], Name::Op(op) if op.as_str() == "aten::mm"));
            assert_eq!(meta.base_time_ns.uint(), Some(1_700_000_000_000_000_000));
            assert_eq!(meta.distributed_info.and_then(|d| d.rank.uint()), Some(3));
        }
    }

    #[test]
    fn broken_json_names_the_byte() {
        let cut = br#"{"traceEvents": [{"ph": "X", "name": "a"}, {"ph": "#;
        let err = read_events(Trickle(cut, 5), io, |_| {})
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("not valid JSON (the JSON ends after 50 bytes, inside trace event 1: cut short?)")
        );
        let bad = b"{\"traceEvents\": [{\"ph\": \"X\"},\n {\"ph\" \"i\"}]}";
        let err = read_events(&bad[..], io, |_| {})
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("not valid JSON (expected `:` at byte 37, in trace event 1)")
        );
        let trailing = br#"{"traceEvents": []} x"#;
        let err = read_events(&trailing[..], io, |_| {})
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("not valid JSON (trailing characters at byte 20: 'x' after the trace)")
        );
    }
}
