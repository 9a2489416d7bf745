//! A small unpickler that builds only what a PyTorch memory snapshot needs.
//!
//! It runs the pickle machine (protocols 2–5, and the binary opcodes of 0–1 that those emit) over
//! bytes in memory, with no recursion: lists, tuples and dicts live in an arena and the stack
//! holds 16-byte values. It knows the snapshot's shapes: a dict `{name, filename, line}` becomes an
//! interned frame the moment it is complete, a trace entry (a dict with `action`) becomes a compact
//! [`TraceEntry`] with an interned stack, and the arena slots they used are reused. So memory grows
//! with the number of trace entries (tens of bytes each), not with the size of the object tree,
//! and shared frames (pickled once, then referenced from the memo) cost nothing more.
//!
//! Anything else (classes, persistent ids) is kept as an opaque object that names its class, so
//! a pickle of something other than a snapshot reads to the end and is then refused with a clear
//! message.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::Arc;

use super::{Action, SnapshotError, TraceEntry};

/// A value on the machine's stack: 16 bytes, copied freely (8 in the memo, see [`Memo`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Value {
    None,
    Bool(bool),
    Int(i64),
    /// An integer in `i64::MAX+1 ..= u64::MAX` (addresses with the top bit set).
    U64(u64),
    /// An integer too large for 64 bits, kept as an approximation.
    Huge(f64),
    Float(f64),
    Str(u32),
    /// Bytes (never part of a snapshot): their length.
    Bytes(u64),
    /// A list, tuple, dict or set in the arena.
    Obj(u32),
    /// An interned frame.
    Frame(u32),
    /// An interned stack (a list of frames).
    Stack(u32),
    /// A trace entry, by index.
    Entry(u32),
    /// An instance of a class, or a persistent id: the class name (interned).
    Opaque(u32),
}

impl Value {
    pub(crate) fn describe(self, strings: &[Arc<str>]) -> String {
        match self {
            Self::None => "None".to_owned(),
            Self::Bool(_) => "a bool".to_owned(),
            Self::Int(v) => format!("the integer {v}"),
            Self::U64(v) => format!("the integer {v}"),
            Self::Huge(v) => format!("an integer of about {v:.3e}"),
            Self::Float(_) => "a float".to_owned(),
            Self::Str(_) => "a str".to_owned(),
            Self::Bytes(_) => "bytes".to_owned(),
            Self::Obj(_) => "a container".to_owned(),
            Self::Frame(_) => "a stack frame".to_owned(),
            Self::Stack(_) => "a list of stack frames".to_owned(),
            Self::Entry(_) => "a trace entry".to_owned(),
            Self::Opaque(name) => format!(
                "an object of class {}",
                strings.get(name as usize).map_or("?", |s| s)
            ),
        }
    }

    /// The value as an unsigned integer, if it is a non-negative integer that fits 64 bits.
    pub(crate) fn as_u64(self) -> Option<u64> {
        match self {
            Self::Int(v) => u64::try_from(v).ok(),
            Self::U64(v) => Some(v),
            Self::Bool(b) => Some(u64::from(b)),
            _ => None,
        }
    }

    pub(crate) fn as_i64(self) -> Option<i64> {
        match self {
            Self::Int(v) => Some(v),
            Self::Bool(b) => Some(i64::from(b)),
            _ => None,
        }
    }
}

/// A container in the arena.
#[derive(Debug)]
pub(crate) enum Obj {
    List(Vec<Value>),
    Tuple(Vec<Value>),
    Dict(Vec<(Value, Value)>),
    Set(Vec<Value>),
    /// A container made compact while something else may still refer to it: what it became.
    /// Always a compact value (a frame, a stack, a trace entry), never another container.
    Forward(Value),
    /// A reused slot's placeholder.
    Free,
}

#[derive(Debug)]
struct Slot {
    obj: Obj,
    /// The memo index that refers to this container, if exactly one does.
    memo: Option<u32>,
    /// Something other than its one memo entry may refer to it: it was read back from the memo
    /// (GET), duplicated (DUP) or memoized twice. Such a slot is never reused: when it is made
    /// compact it keeps a [`Obj::Forward`] to what it became, so every reference, earlier or
    /// later, reads the same value.
    shared: bool,
}

/// A frame of a stack trace: interned strings and a line number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Frame {
    /// The function (an index into [`Snapshot::strings`](super::Snapshot::strings)).
    pub name: u32,
    /// The file (an index into the strings).
    pub filename: u32,
    /// The line as PyTorch wrote it: 0, or `u64::MAX` (-1 as unsigned), when unknown.
    pub line: u64,
}

/// The keys the machine recognises, interned first so that they have fixed ids.
pub(crate) const KEYS: [&str; 34] = [
    "name",
    "filename",
    "line",
    "action",
    "addr",
    "size",
    "stream",
    "time_us",
    "frames",
    "device_free",
    "user_metadata",
    "compile_context",
    "segments",
    "device_traces",
    "external_annotations",
    "allocator_settings",
    "device",
    "address",
    "total_size",
    "allocated_size",
    "active_size",
    "requested_size",
    "segment_type",
    "blocks",
    "state",
    "history",
    "real_size",
    "stage",
    "alloc",
    "free_requested",
    "free_completed",
    "segment_alloc",
    "segment_free",
    "oom",
];
pub(crate) const K_NAME: u32 = 0;
pub(crate) const K_FILENAME: u32 = 1;
pub(crate) const K_LINE: u32 = 2;
pub(crate) const K_ACTION: u32 = 3;
pub(crate) const K_ADDR: u32 = 4;
pub(crate) const K_SIZE: u32 = 5;
pub(crate) const K_STREAM: u32 = 6;
pub(crate) const K_TIME_US: u32 = 7;
pub(crate) const K_FRAMES: u32 = 8;
pub(crate) const K_DEVICE_FREE: u32 = 9;
pub(crate) const K_USER_METADATA: u32 = 10;
pub(crate) const K_SEGMENTS: u32 = 12;
pub(crate) const K_DEVICE_TRACES: u32 = 13;
pub(crate) const K_EXTERNAL_ANNOTATIONS: u32 = 14;
pub(crate) const K_ALLOCATOR_SETTINGS: u32 = 15;
pub(crate) const K_DEVICE: u32 = 16;
pub(crate) const K_ADDRESS: u32 = 17;
pub(crate) const K_TOTAL_SIZE: u32 = 18;
pub(crate) const K_ALLOCATED_SIZE: u32 = 19;
pub(crate) const K_REQUESTED_SIZE: u32 = 21;
pub(crate) const K_SEGMENT_TYPE: u32 = 22;
pub(crate) const K_BLOCKS: u32 = 23;
pub(crate) const K_STATE: u32 = 24;
pub(crate) const K_HISTORY: u32 = 25;
pub(crate) const K_REAL_SIZE: u32 = 26;
pub(crate) const K_STAGE: u32 = 27;
const K_ALLOC: u32 = 28;
const K_FREE_REQUESTED: u32 = 29;
const K_FREE_COMPLETED: u32 = 30;
const K_SEGMENT_ALLOC: u32 = 31;
const K_SEGMENT_FREE: u32 = 32;
const K_OOM: u32 = 33;

/// What the machine leaves: the top-level value and everything it refers to.
pub(crate) struct Machine<'a> {
    bytes: &'a [u8],
    pos: usize,
    stack: Vec<Value>,
    marks: Vec<usize>,
    memo: Memo,
    arena: Vec<Slot>,
    free: Vec<u32>,
    pub(crate) strings: Vec<Arc<str>>,
    string_ids: HashMap<Arc<str>, u32>,
    pub(crate) frames: Vec<Frame>,
    frame_ids: HashMap<Frame, u32>,
    /// Interned stacks: `stack_frames[stack_starts[i]..stack_starts[i+1]]`, innermost first.
    pub(crate) stack_frames: Vec<u32>,
    pub(crate) stack_starts: Vec<u32>,
    stack_ids: HashMap<Box<[u32]>, u32>,
    pub(crate) entries: Vec<TraceEntry>,
    /// The streams entries name, each once, and their places.
    streams: Vec<u64>,
    stream_ids: HashMap<u64, u16>,
    /// Action names this reader does not know, each once.
    other_actions: Vec<u32>,
    scratch: Vec<u32>,
}

/// At most this many values wait on the stack, and this many MARKs are open: a pickler batches
/// items by the thousand, so only a hostile file comes near, and it must not make the machine
/// allocate gigabytes.
const MAX_STACK: usize = 1 << 22;

impl<'a> Machine<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        let mut machine = Self {
            bytes,
            pos: 0,
            stack: Vec::new(),
            marks: Vec::new(),
            memo: Memo::default(),
            arena: Vec::new(),
            free: Vec::new(),
            strings: Vec::new(),
            string_ids: HashMap::new(),
            frames: Vec::new(),
            frame_ids: HashMap::new(),
            stack_frames: Vec::new(),
            stack_starts: vec![0],
            stack_ids: HashMap::new(),
            streams: Vec::new(),
            stream_ids: HashMap::new(),
            other_actions: Vec::new(),
            entries: Vec::new(),
            scratch: Vec::new(),
        };
        for key in KEYS {
            machine.intern(key);
        }
        // Stack 0 is the empty stack.
        machine.stack_ids.insert(Box::new([]), 0);
        machine.stack_starts.push(0);
        machine
    }

    fn err(&self, at: usize, message: impl Into<String>) -> SnapshotError {
        SnapshotError::Pickle {
            offset: at,
            message: message.into(),
        }
    }

    pub(crate) fn intern(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.string_ids.get(s) {
            return id;
        }
        let id = self.strings.len() as u32;
        let s: Arc<str> = Arc::from(s);
        self.strings.push(s.clone());
        self.string_ids.insert(s, id);
        id
    }

    fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8], SnapshotError> {
        let at = self.pos;
        let left = (self.bytes.len() - self.pos) as u64;
        if n > left {
            return Err(self.err(
                at,
                format!("{what} declares {n} bytes but only {left} are left (the file is truncated or corrupt)"),
            ));
        }
        let n = n as usize;
        let slice = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(slice)
    }

    fn u8(&mut self) -> Result<u8, SnapshotError> {
        Ok(self.take(1, "an argument")?[0])
    }

    fn le<const N: usize>(&mut self) -> Result<[u8; N], SnapshotError> {
        let slice = self.take(N as u64, "an argument")?;
        let mut out = [0u8; N];
        out.copy_from_slice(slice);
        Ok(out)
    }

    fn line(&mut self) -> Result<&'a [u8], SnapshotError> {
        let rest = &self.bytes[self.pos..];
        match rest.iter().position(|&b| b == b'\n') {
            Some(n) => {
                self.pos += n + 1;
                Ok(&rest[..n])
            }
            None => Err(self.err(self.pos, "a text argument has no end of line (truncated?)")),
        }
    }

    fn pop(&mut self, at: usize) -> Result<Value, SnapshotError> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(self.err(at, "the stack is empty (corrupt opcodes)"));
        }
        self.stack
            .pop()
            .ok_or_else(|| self.err(at, "the stack is empty (corrupt opcodes)"))
    }

    fn top(&self, at: usize) -> Result<Value, SnapshotError> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(self.err(at, "the stack is empty (corrupt opcodes)"));
        }
        self.stack
            .last()
            .copied()
            .ok_or_else(|| self.err(at, "the stack is empty (corrupt opcodes)"))
    }

    fn pop_mark(&mut self, at: usize) -> Result<Vec<Value>, SnapshotError> {
        let mark = self.marks.pop().ok_or_else(|| {
            self.err(
                at,
                "an opcode needs a MARK and there is none (corrupt opcodes)",
            )
        })?;
        Ok(self.stack.split_off(mark.min(self.stack.len())))
    }

    fn alloc(&mut self, obj: Obj) -> Value {
        let slot = Slot {
            obj,
            memo: None,
            shared: false,
        };
        if let Some(index) = self.free.pop() {
            self.arena[index as usize] = slot;
            Value::Obj(index)
        } else {
            self.arena.push(slot);
            Value::Obj(self.arena.len() as u32 - 1)
        }
    }

    pub(crate) fn obj(&self, value: Value) -> Option<&Obj> {
        match value {
            Value::Obj(i) => self.arena.get(i as usize).map(|s| &s.obj),
            _ => None,
        }
    }

    /// The value itself, or what a container that was made compact became.
    pub(crate) fn resolve(&self, value: Value) -> Value {
        match self.obj(value) {
            Some(Obj::Forward(compact)) => *compact,
            _ => value,
        }
    }

    fn memo_get(&mut self, at: usize, index: u32) -> Result<Value, SnapshotError> {
        let value = self.memo.get(index).ok_or_else(|| {
            self.err(
                at,
                format!("memo entry {index} is read before it is written (corrupt opcodes)"),
            )
        })?;
        self.mark_shared(value);
        Ok(value)
    }

    /// A second reference to `value` now exists (a GET or a DUP).
    fn mark_shared(&mut self, value: Value) {
        if let Value::Obj(i) = value
            && let Some(slot) = self.arena.get_mut(i as usize)
        {
            slot.shared = true;
        }
    }

    fn memo_put(&mut self, index: u32, value: Value) {
        if let Value::Obj(i) = value
            && let Some(slot) = self.arena.get_mut(i as usize)
        {
            if slot.memo.is_some() {
                slot.shared = true;
            }
            slot.memo = Some(index);
        }
        self.memo.set(index, value);
    }

    /// Replaces a finished container by its compact form everywhere it is referred to (the memo
    /// and the stack position `at_stack`). Its slot is reused when nothing else can refer to it;
    /// a shared one keeps a forward to the compact form instead (its items are dropped either way).
    fn replace(&mut self, index: u32, at_stack: usize, compact: Value) {
        let Some(slot) = self.arena.get_mut(index as usize) else {
            return;
        };
        let memo = slot.memo;
        slot.memo = None;
        if slot.shared {
            slot.obj = Obj::Forward(compact);
        } else {
            slot.obj = Obj::Free;
            self.free.push(index);
        }
        if let Some(m) = memo {
            self.memo.set(m, compact);
        }
        if let Some(v) = self.stack.get_mut(at_stack) {
            *v = compact;
        }
    }

    /// Runs the machine to STOP and returns the top-level value.
    pub(crate) fn run(&mut self) -> Result<Value, SnapshotError> {
        loop {
            let at = self.pos;
            if at >= self.bytes.len() {
                return Err(self.err(
                    at,
                    "the file ends before the pickle's STOP opcode (truncated)",
                ));
            }
            let op = self.bytes[at];
            self.pos += 1;
            match op {
                0x80 => {
                    let proto = self.u8()?;
                    if proto > 5 {
                        return Err(self.err(at, format!("pickle protocol {proto} is newer than 5, the newest this reader knows")));
                    }
                }
                0x95 => {
                    self.le::<8>()?; // FRAME: a length hint
                }
                b'.' => {
                    let value = self.pop(at)?;
                    return Ok(value);
                }
                b'(' => {
                    if self.marks.len() >= MAX_STACK {
                        return Err(self.err(
                            at,
                            format!(
                                "more than {MAX_STACK} MARKs are open (not what a pickler writes)"
                            ),
                        ));
                    }
                    self.marks.push(self.stack.len());
                }
                b'0' => {
                    self.pop(at)?;
                }
                b'1' => {
                    self.pop_mark(at)?;
                }
                b'2' => {
                    let top = self.top(at)?;
                    self.mark_shared(top);
                    self.push(top)?;
                }
                b'N' => self.push(Value::None)?,
                0x88 => self.push(Value::Bool(true))?,
                0x89 => self.push(Value::Bool(false))?,
                b'J' => {
                    let v = i32::from_le_bytes(self.le()?);
                    self.push(Value::Int(i64::from(v)))?;
                }
                b'K' => {
                    let v = self.u8()?;
                    self.push(Value::Int(i64::from(v)))?;
                }
                b'M' => {
                    let v = u16::from_le_bytes(self.le()?);
                    self.push(Value::Int(i64::from(v)))?;
                }
                0x8a => {
                    let n = self.u8()?;
                    let bytes = self.take(u64::from(n), "LONG1")?;
                    let v = long(bytes);
                    self.push(v)?;
                }
                0x8b => {
                    let n = i32::from_le_bytes(self.le()?);
                    if n < 0 {
                        return Err(self.err(at, "LONG4 with a negative length"));
                    }
                    let bytes = self.take(n as u64, "LONG4")?;
                    let v = long(bytes);
                    self.push(v)?;
                }
                b'I' | b'L' => {
                    let line = self.line()?;
                    let v =
                        text_int(line).ok_or_else(|| self.err(at, "INT/LONG holds no number"))?;
                    self.push(v)?;
                }
                b'F' => {
                    let line = self.line()?;
                    let v = std::str::from_utf8(line)
                        .ok()
                        .and_then(|s| s.trim().parse::<f64>().ok())
                        .ok_or_else(|| self.err(at, "FLOAT holds no number"))?;
                    self.push(Value::Float(v))?;
                }
                b'G' => {
                    let v = f64::from_be_bytes(self.le()?);
                    self.push(Value::Float(v))?;
                }
                0x8c | b'X' | 0x8d | b'U' | b'T' => {
                    let n = match op {
                        0x8c | b'U' => u64::from(self.u8()?),
                        b'X' => u64::from(u32::from_le_bytes(self.le()?)),
                        b'T' => {
                            let n = i32::from_le_bytes(self.le()?);
                            u64::try_from(n)
                                .map_err(|_| self.err(at, "BINSTRING with a negative length"))?
                        }
                        _ => u64::from_le_bytes(self.le()?),
                    };
                    let bytes = self.take(n, "a string")?;
                    let id = match std::str::from_utf8(bytes) {
                        Ok(s) => self.intern(s),
                        Err(_) if matches!(op, b'U' | b'T') => {
                            // Python 2 byte strings: read them as Latin-1.
                            let s: String = bytes.iter().map(|&b| char::from(b)).collect();
                            self.intern(&s)
                        }
                        Err(_) => return Err(self.err(at, "a string is not valid UTF-8")),
                    };
                    self.push(Value::Str(id))?;
                }
                b'C' | b'B' | 0x8e | 0x96 => {
                    let n = match op {
                        b'C' => u64::from(self.u8()?),
                        b'B' => u64::from(u32::from_le_bytes(self.le()?)),
                        _ => u64::from_le_bytes(self.le()?),
                    };
                    self.take(n, "bytes")?;
                    self.push(Value::Bytes(n))?;
                }
                b']' => {
                    let v = self.alloc(Obj::List(Vec::new()));
                    self.push(v)?;
                }
                b')' => {
                    let v = self.alloc(Obj::Tuple(Vec::new()));
                    self.push(v)?;
                }
                b'}' => {
                    let v = self.alloc(Obj::Dict(Vec::new()));
                    self.push(v)?;
                }
                0x8f => {
                    let v = self.alloc(Obj::Set(Vec::new()));
                    self.push(v)?;
                }
                b'l' => {
                    let items = self.pop_mark(at)?;
                    let v = self.alloc(Obj::List(items));
                    self.push(v)?;
                }
                b't' => {
                    let items = self.pop_mark(at)?;
                    let v = self.alloc(Obj::Tuple(items));
                    self.push(v)?;
                }
                0x91 => {
                    let items = self.pop_mark(at)?;
                    let v = self.alloc(Obj::Set(items));
                    self.push(v)?;
                }
                0x85..=0x87 => {
                    let n = usize::from(op - 0x84);
                    let floor = self.marks.last().copied().unwrap_or(0);
                    if self.stack.len() < floor + n {
                        return Err(self.err(
                            at,
                            "TUPLE with too few values on the stack (corrupt opcodes)",
                        ));
                    }
                    let items = self.stack.split_off(self.stack.len() - n);
                    let v = self.alloc(Obj::Tuple(items));
                    self.push(v)?;
                }
                b'd' => {
                    let items = self.pop_mark(at)?;
                    if items.len() % 2 != 0 {
                        return Err(
                            self.err(at, "DICT with an odd number of values (corrupt opcodes)")
                        );
                    }
                    let pairs = items.chunks_exact(2).map(|kv| (kv[0], kv[1])).collect();
                    let v = self.alloc(Obj::Dict(pairs));
                    self.push(v)?;
                    let index = self.stack.len() - 1;
                    self.finished_dict(at, index)?;
                }
                b'a' => {
                    let item = self.pop(at)?;
                    let list = self.top(at)?;
                    self.extend_list(at, list, std::iter::once(item))?;
                }
                b'e' => {
                    let items = self.pop_mark(at)?;
                    let list = self.top(at)?;
                    self.extend_list(at, list, items.into_iter())?;
                }
                0x90 => {
                    let items = self.pop_mark(at)?;
                    let set = self.top(at)?;
                    match set {
                        Value::Obj(i) => match self.arena.get_mut(i as usize).map(|s| &mut s.obj) {
                            Some(Obj::Set(v)) => v.extend(items),
                            _ => {
                                return Err(self.err(at, "ADDITEMS on something that is not a set"));
                            }
                        },
                        _ => return Err(self.err(at, "ADDITEMS on something that is not a set")),
                    }
                }
                b's' => {
                    let value = self.pop(at)?;
                    let key = self.pop(at)?;
                    self.set_items(at, vec![key, value])?;
                }
                b'u' => {
                    let items = self.pop_mark(at)?;
                    if items.len() % 2 != 0 {
                        return Err(self.err(
                            at,
                            "SETITEMS with an odd number of values (corrupt opcodes)",
                        ));
                    }
                    self.set_items(at, items)?;
                }
                b'h' => {
                    let i = self.u8()?;
                    let v = self.memo_get(at, u32::from(i))?;
                    self.push(v)?;
                }
                b'j' => {
                    let i = u32::from_le_bytes(self.le()?);
                    let v = self.memo_get(at, i)?;
                    self.push(v)?;
                }
                b'g' => {
                    let line = self.line()?;
                    let i = parse_index(line).ok_or_else(|| self.err(at, "GET holds no index"))?;
                    let v = self.memo_get(at, i)?;
                    self.push(v)?;
                }
                b'q' => {
                    let i = self.u8()?;
                    let v = self.top(at)?;
                    self.memo_put(u32::from(i), v);
                }
                b'r' => {
                    let i = u32::from_le_bytes(self.le()?);
                    let v = self.top(at)?;
                    self.memo_put(i, v);
                }
                b'p' => {
                    let line = self.line()?;
                    let i = parse_index(line).ok_or_else(|| self.err(at, "PUT holds no index"))?;
                    let v = self.top(at)?;
                    self.memo_put(i, v);
                }
                0x94 => {
                    let v = self.top(at)?;
                    let i = u32::try_from(self.memo.len())
                        .map_err(|_| self.err(at, "too many memo entries"))?;
                    self.memo_put(i, v);
                }
                b'c' => {
                    let module = self.line()?;
                    let name = self.line()?;
                    let full = global_name(module, name);
                    let id = self.intern(&full);
                    self.push(Value::Opaque(id))?;
                }
                0x93 => {
                    let name = self.pop(at)?;
                    let module = self.pop(at)?;
                    let text = |v: Value, m: &Self| match v {
                        Value::Str(i) => m.strings.get(i as usize).map(|s| s.to_string()),
                        _ => None,
                    };
                    let full = match (text(module, self), text(name, self)) {
                        (Some(m), Some(n)) => format!("{m}.{n}"),
                        _ => return Err(self.err(at, "STACK_GLOBAL needs two strings")),
                    };
                    let id = self.intern(&full);
                    self.push(Value::Opaque(id))?;
                }
                // Calls and instances: the result is an opaque object named by its class.
                b'R' | 0x81 => {
                    self.pop(at)?;
                    let class = self.pop(at)?;
                    self.push(opaque_of(class))?;
                }
                0x92 => {
                    self.pop(at)?;
                    self.pop(at)?;
                    let class = self.pop(at)?;
                    self.push(opaque_of(class))?;
                }
                b'b' => {
                    self.pop(at)?; // the state; the object stays opaque
                }
                b'o' => {
                    let items = self.pop_mark(at)?;
                    let class = items.first().copied().unwrap_or(Value::None);
                    self.push(opaque_of(class))?;
                }
                b'i' => {
                    let module = self.line()?;
                    let name = self.line()?;
                    self.pop_mark(at)?;
                    let full = global_name(module, name);
                    let id = self.intern(&full);
                    self.push(Value::Opaque(id))?;
                }
                b'Q' => {
                    self.pop(at)?;
                    let id = self.intern("persistent id");
                    self.push(Value::Opaque(id))?;
                }
                b'P' => {
                    self.line()?;
                    let id = self.intern("persistent id");
                    self.push(Value::Opaque(id))?;
                }
                0x82..=0x84 => {
                    let n = 1usize << (op - 0x82);
                    self.take(n as u64, "an extension code")?;
                    let id = self.intern("extension object");
                    self.push(Value::Opaque(id))?;
                }
                0x97 => {
                    let id = self.intern("out-of-band buffer");
                    self.push(Value::Opaque(id))?;
                }
                0x98 => {}
                b'S' | b'V' => {
                    let line = self.line()?;
                    let s = String::from_utf8_lossy(line);
                    let s = if op == b'S' {
                        s.trim_matches(|c| c == '\'' || c == '"').to_owned()
                    } else {
                        s.into_owned()
                    };
                    let id = self.intern(&s);
                    self.push(Value::Str(id))?;
                }
                other => {
                    return Err(self.err(
                        at,
                        format!("unknown opcode 0x{other:02x} (not a pickle, or a corrupt one)"),
                    ));
                }
            }
        }
    }

    fn push(&mut self, value: Value) -> Result<(), SnapshotError> {
        if self.stack.len() >= MAX_STACK {
            return Err(self.err(
                self.pos,
                format!(
                    "more than {MAX_STACK} values wait on the stack (not what a pickler writes)"
                ),
            ));
        }
        self.stack.push(value);
        Ok(())
    }

    fn extend_list(
        &mut self,
        at: usize,
        list: Value,
        items: impl Iterator<Item = Value>,
    ) -> Result<(), SnapshotError> {
        match list {
            Value::Obj(i) => match self.arena.get_mut(i as usize).map(|s| &mut s.obj) {
                Some(Obj::List(v)) => {
                    v.extend(items);
                    Ok(())
                }
                _ => Err(self.err(
                    at,
                    "APPEND to something that is not a list (corrupt opcodes)",
                )),
            },
            // Appending to an opaque object (a list subclass): ignore the items.
            Value::Opaque(_) => Ok(()),
            _ => Err(self.err(
                at,
                "APPEND to something that is not a list (corrupt opcodes)",
            )),
        }
    }

    fn set_items(&mut self, at: usize, items: Vec<Value>) -> Result<(), SnapshotError> {
        let index = self
            .stack
            .len()
            .checked_sub(1)
            .ok_or_else(|| self.err(at, "SETITEM with no dict (corrupt opcodes)"))?;
        let dict = self.top(at)?;
        match dict {
            Value::Obj(i) => match self.arena.get_mut(i as usize).map(|s| &mut s.obj) {
                Some(Obj::Dict(pairs)) => {
                    pairs.extend(items.chunks_exact(2).map(|kv| (kv[0], kv[1])));
                }
                _ => {
                    return Err(self.err(
                        at,
                        "SETITEM on something that is not a dict (corrupt opcodes)",
                    ));
                }
            },
            Value::Opaque(_) => return Ok(()),
            _ => {
                return Err(self.err(
                    at,
                    "SETITEM on something that is not a dict (corrupt opcodes)",
                ));
            }
        }
        self.finished_dict(at, index)
    }

    /// A dict got its items: if it is a frame or a trace entry, make it compact now.
    fn finished_dict(&mut self, at: usize, stack_index: usize) -> Result<(), SnapshotError> {
        let Some(Value::Obj(i)) = self.stack.get(stack_index).copied() else {
            return Ok(());
        };
        let Some(Obj::Dict(pairs)) = self.arena.get(i as usize).map(|s| &s.obj) else {
            return Ok(());
        };
        let key = |k: u32| {
            pairs
                .iter()
                .find(|(key, _)| *key == Value::Str(k))
                .map(|(_, v)| *v)
        };
        if pairs.len() <= 4 && key(K_FILENAME).is_some() && key(K_NAME).is_some() {
            let (Some(Value::Str(name)), Some(Value::Str(filename))) =
                (key(K_NAME), key(K_FILENAME))
            else {
                return Ok(()); // not a frame after all: left as a dict
            };
            let line = key(K_LINE).and_then(Value::as_u64).unwrap_or(0);
            let frame = Frame {
                name,
                filename,
                line,
            };
            let next = self.frames.len() as u32;
            let id = *self.frame_ids.entry(frame).or_insert(next);
            if id == next {
                self.frames.push(frame);
            }
            self.replace(i, stack_index, Value::Frame(id));
        } else if let Some(Value::Str(action)) = key(K_ACTION) {
            let number = |k: u32, what: &str| -> Result<u64, SnapshotError> {
                match key(k) {
                    None | Some(Value::None) => Ok(0),
                    Some(v) => v.as_u64().ok_or_else(|| {
                        self.err(
                            at,
                            format!(
                                "trace entry {}: {what} is {}, not a non-negative 64-bit integer",
                                self.entries.len(),
                                v.describe(&self.strings)
                            ),
                        )
                    }),
                }
            };
            let addr = number(K_ADDR, "addr")?;
            let size = number(K_SIZE, "size")?;
            let stream = number(K_STREAM, "stream").unwrap_or(0);
            let device_free = number(K_DEVICE_FREE, "device_free")?;
            let time_us = match key(K_TIME_US) {
                None | Some(Value::None) => 0,
                Some(v) => v.as_i64().ok_or_else(|| {
                    self.err(
                        at,
                        format!(
                            "trace entry {}: time_us is {}, not a 64-bit integer",
                            self.entries.len(),
                            v.describe(&self.strings)
                        ),
                    )
                })?,
            };
            let metadata = match key(K_USER_METADATA) {
                Some(Value::Str(s)) if !self.strings[s as usize].is_empty() => {
                    NonZeroU32::new(s.saturating_add(1))
                }
                _ => None,
            };
            let frames = key(K_FRAMES);
            let action = match action {
                K_ALLOC => Action::Alloc,
                K_FREE_REQUESTED => Action::FreeRequested,
                K_FREE_COMPLETED => Action::FreeCompleted,
                K_SEGMENT_ALLOC => Action::SegmentAlloc,
                K_SEGMENT_FREE => Action::SegmentFree,
                K_OOM => Action::Oom,
                other => match &*self.strings[other as usize] {
                    "segment_map" => Action::SegmentMap,
                    "segment_unmap" => Action::SegmentUnmap,
                    "snapshot" => Action::Snapshot,
                    _ => Action::Other(self.other_action(at, other)?),
                },
            };
            let stream = self.stream(at, stream)?;
            let stack = self.stack_of(at, frames)?;
            let entry = TraceEntry {
                time_us,
                addr,
                size,
                device_free,
                stack,
                device: 0,
                metadata,
                stream,
                action,
            };
            let id = u32::try_from(self.entries.len())
                .map_err(|_| self.err(at, "too many trace entries"))?;
            push_gently(&mut self.entries, entry);
            if let Some(Value::Obj(list)) = frames {
                self.replace(list, usize::MAX, Value::Stack(stack));
            }
            self.replace(i, stack_index, Value::Entry(id));
        }
        Ok(())
    }

    /// Interns the stack held by `frames` (a list of frames), 0 when there is none.
    pub(crate) fn stack_of(
        &mut self,
        at: usize,
        frames: Option<Value>,
    ) -> Result<u32, SnapshotError> {
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        let list = match frames.map(|v| self.resolve(v)) {
            None | Some(Value::None) => return Ok(0),
            Some(Value::Stack(id)) => return Ok(id),
            Some(v) => match self.obj(v) {
                Some(Obj::List(items) | Obj::Tuple(items)) => items,
                _ => {
                    self.scratch = scratch;
                    return Err(self.err(
                        at,
                        format!(
                            "frames is {}, not a list of frames",
                            v.describe(&self.strings)
                        ),
                    ));
                }
            },
        };
        for item in list {
            match self.resolve(*item) {
                Value::Frame(f) => scratch.push(f),
                other => {
                    let what = other.describe(&self.strings);
                    self.scratch = scratch;
                    return Err(self.err(
                        at,
                        format!("frames holds {what}, not a frame {{name, filename, line}}"),
                    ));
                }
            }
        }
        let id = match self.stack_ids.get(scratch.as_slice()) {
            Some(&id) => id,
            None => {
                let id = self.stack_starts.len() as u32 - 1;
                self.stack_frames.extend_from_slice(&scratch);
                self.stack_starts.push(self.stack_frames.len() as u32);
                self.stack_ids.insert(scratch.as_slice().into(), id);
                id
            }
        };
        self.scratch = scratch;
        Ok(id)
    }

    /// The items of a dict value, if it is one.
    pub(crate) fn dict(&self, value: Value) -> Option<&[(Value, Value)]> {
        match self.obj(self.resolve(value)) {
            Some(Obj::Dict(pairs)) => Some(pairs),
            _ => None,
        }
    }

    /// The items of a list or tuple value, if it is one.
    pub(crate) fn list(&self, value: Value) -> Option<&[Value]> {
        match self.obj(self.resolve(value)) {
            Some(Obj::List(items) | Obj::Tuple(items)) => Some(items),
            _ => None,
        }
    }

    pub(crate) fn str(&self, value: Value) -> Option<&str> {
        match value {
            Value::Str(i) => self.strings.get(i as usize).map(|s| &**s),
            _ => None,
        }
    }

    /// The place of a stream among those seen (a job uses a handful; 65,536 is the limit).
    fn stream(&mut self, at: usize, stream: u64) -> Result<u16, SnapshotError> {
        if let Some(&id) = self.stream_ids.get(&stream) {
            return Ok(id);
        }
        let id = u16::try_from(self.streams.len()).map_err(|_| {
            self.err(
                at,
                "trace entries name more than 65,536 different CUDA streams",
            )
        })?;
        self.streams.push(stream);
        self.stream_ids.insert(stream, id);
        Ok(id)
    }

    /// The place of an unknown action's name among those seen (256 at most).
    fn other_action(&mut self, at: usize, name: u32) -> Result<u8, SnapshotError> {
        if let Some(i) = self.other_actions.iter().position(|&n| n == name) {
            return Ok(i as u8);
        }
        let i = u8::try_from(self.other_actions.len()).map_err(|_| {
            self.err(
                at,
                "trace entries name more than 256 different unknown actions",
            )
        })?;
        self.other_actions.push(name);
        Ok(i)
    }

    /// Frees what only the machine needs (memo, arena, lookup tables).
    pub(crate) fn into_parts(self) -> Parts {
        Parts {
            streams: self.streams,
            other_actions: self.other_actions,
            strings: self.strings,
            frames: self.frames,
            stack_frames: self.stack_frames,
            stack_starts: self.stack_starts,
            entries: self.entries,
        }
    }
}

/// The memo: 8 bytes per entry, since a snapshot memoizes two or three objects per allocation.
/// Containers, strings and the compact values they become are stored as a tag and a `u32`; the
/// rare wide value (a memoized number: a pickler never memoizes one, a hostile file might) goes
/// to a side table.
#[derive(Default)]
struct Memo {
    dense: Vec<u64>,
    /// Entries at indices beyond the dense vector (a pickler never writes them; a hostile file
    /// might, and must not make us allocate billions of slots).
    sparse: HashMap<u32, Value>,
    wide: Vec<Value>,
}

impl Memo {
    const NONE: u64 = 0;
    const FALSE: u64 = 1;
    const TRUE: u64 = 2;
    const STR: u64 = 3;
    const OBJ: u64 = 4;
    const FRAME: u64 = 5;
    const STACK: u64 = 6;
    const ENTRY: u64 = 7;
    const OPAQUE: u64 = 8;
    const WIDE: u64 = 9;

    /// How many entries are set (what MEMOIZE numbers the next one, as Python's unpickler does).
    fn len(&self) -> usize {
        self.dense.len() + self.sparse.len()
    }

    fn get(&self, index: u32) -> Option<Value> {
        match self.dense.get(index as usize) {
            Some(&packed) => Some(self.unpack(packed)),
            None => self.sparse.get(&index).copied(),
        }
    }

    fn set(&mut self, index: u32, value: Value) {
        let i = index as usize;
        if i > self.dense.len() {
            self.sparse.insert(index, value);
            return;
        }
        let packed = self.pack(value);
        if i < self.dense.len() {
            self.dense[i] = packed;
        } else {
            push_gently(&mut self.dense, packed);
            self.sparse.remove(&index);
        }
    }

    fn pack(&mut self, value: Value) -> u64 {
        let (tag, payload) = match value {
            Value::None => (Self::NONE, 0),
            Value::Bool(false) => (Self::FALSE, 0),
            Value::Bool(true) => (Self::TRUE, 0),
            Value::Str(i) => (Self::STR, i),
            Value::Obj(i) => (Self::OBJ, i),
            Value::Frame(i) => (Self::FRAME, i),
            Value::Stack(i) => (Self::STACK, i),
            Value::Entry(i) => (Self::ENTRY, i),
            Value::Opaque(i) => (Self::OPAQUE, i),
            Value::Int(_) | Value::U64(_) | Value::Huge(_) | Value::Float(_) | Value::Bytes(_) => {
                let Ok(i) = u32::try_from(self.wide.len()) else {
                    // More wide values than a file of 4 GiB could hold: keep it unknown.
                    return Self::NONE;
                };
                self.wide.push(value);
                (Self::WIDE, i)
            }
        };
        (tag << 32) | u64::from(payload)
    }

    fn unpack(&self, packed: u64) -> Value {
        let payload = packed as u32;
        match packed >> 32 {
            Self::FALSE => Value::Bool(false),
            Self::TRUE => Value::Bool(true),
            Self::STR => Value::Str(payload),
            Self::OBJ => Value::Obj(payload),
            Self::FRAME => Value::Frame(payload),
            Self::STACK => Value::Stack(payload),
            Self::ENTRY => Value::Entry(payload),
            Self::OPAQUE => Value::Opaque(payload),
            Self::WIDE => self
                .wide
                .get(payload as usize)
                .copied()
                .unwrap_or(Value::None),
            _ => Value::None,
        }
    }
}

/// What the machine built that the snapshot keeps.
pub(crate) struct Parts {
    pub strings: Vec<Arc<str>>,
    pub frames: Vec<Frame>,
    pub stack_frames: Vec<u32>,
    pub stack_starts: Vec<u32>,
    pub entries: Vec<TraceEntry>,
    pub streams: Vec<u64>,
    pub other_actions: Vec<u32>,
}

/// Pushes with growth by a quarter instead of doubling: the two largest vectors (trace entries
/// and the memo) then hold at most a quarter more than they need while the file is read, which
/// keeps the peak near the memory budget. Large vectors grow in place (`mremap`), so growing
/// more often costs little.
fn push_gently<T>(v: &mut Vec<T>, item: T) {
    if v.len() == v.capacity() {
        v.reserve_exact((v.len() / 4).max(1024));
    }
    v.push(item);
}

/// `module.name` of a GLOBAL or INST.
fn global_name(module: &[u8], name: &[u8]) -> String {
    format!(
        "{}.{}",
        String::from_utf8_lossy(module),
        String::from_utf8_lossy(name)
    )
}

fn opaque_of(class: Value) -> Value {
    match class {
        Value::Opaque(id) => Value::Opaque(id),
        _ => Value::Opaque(0), // "name": an unnamed object
    }
}

/// A little-endian two's-complement integer of any length.
fn long(bytes: &[u8]) -> Value {
    if bytes.is_empty() {
        return Value::Int(0);
    }
    let negative = bytes[bytes.len() - 1] & 0x80 != 0;
    if bytes.len() <= 8 {
        let mut buf = if negative { [0xffu8; 8] } else { [0u8; 8] };
        buf[..bytes.len()].copy_from_slice(bytes);
        return Value::Int(i64::from_le_bytes(buf));
    }
    // Longer: fits u64 when the extra bytes are zero (a positive number ≥ 2^63).
    if !negative && bytes[8..].iter().all(|&b| b == 0) {
        let mut buf = [0u8; 8];
        buf.copy_from_slice(&bytes[..8]);
        let v = u64::from_le_bytes(buf);
        return match i64::try_from(v) {
            Ok(v) => Value::Int(v),
            Err(_) => Value::U64(v),
        };
    }
    if negative && bytes[8..].iter().all(|&b| b == 0xff) && bytes[7] & 0x80 != 0 {
        let mut buf = [0u8; 8];
        buf.copy_from_slice(&bytes[..8]);
        return Value::Int(i64::from_le_bytes(buf));
    }
    // Too large for 64 bits: an approximation (only its size matters to the messages).
    let mut v = 0f64;
    for &b in bytes.iter().rev() {
        v = v * 256.0 + f64::from(if negative { !b } else { b });
    }
    Value::Huge(if negative { -(v + 1.0) } else { v })
}

fn text_int(line: &[u8]) -> Option<Value> {
    let s = std::str::from_utf8(line).ok()?.trim().trim_end_matches('L');
    match s {
        "00" => return Some(Value::Bool(false)),
        "01" => return Some(Value::Bool(true)),
        _ => {}
    }
    if let Ok(v) = s.parse::<i64>() {
        return Some(Value::Int(v));
    }
    if let Ok(v) = s.parse::<u64>() {
        return Some(Value::U64(v));
    }
    s.parse::<f64>().ok().map(Value::Huge)
}

fn parse_index(line: &[u8]) -> Option<u32> {
    std::str::from_utf8(line).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longs_of_every_width() {
        assert_eq!(long(&[]), Value::Int(0));
        assert_eq!(long(&[0xff]), Value::Int(-1));
        assert_eq!(long(&[0x00, 0x80]), Value::Int(-32768));
        assert_eq!(long(&[0xff, 0x7f]), Value::Int(32767));
        // 2^63 needs 9 bytes: 00 .. 80 00.
        let mut b = [0u8; 9];
        b[7] = 0x80;
        assert_eq!(long(&b), Value::U64(1 << 63));
        // 2^64 - 1.
        let mut b = [0xffu8; 9];
        b[8] = 0;
        assert_eq!(long(&b), Value::U64(u64::MAX));
        // -2^63 in 9 bytes (sign-extended).
        let mut b = [0u8; 9];
        b[7] = 0x80;
        b[8] = 0xff;
        assert_eq!(long(&b), Value::Int(i64::MIN));
        // 2^80.
        let mut b = [0u8; 11];
        b[10] = 0x01;
        assert_eq!(long(&b), Value::Huge(2f64.powi(80)));
    }
}
