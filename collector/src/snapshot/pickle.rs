//! A small unpickler that builds only what a PyTorch memory snapshot needs.
//!
//! It runs the pickle machine (protocols 2–5, and the binary opcodes of 0–1 that those emit) over
//! bytes in memory, whole or window by window as they arrive ([`Machine::over`]), with no
//! recursion: lists, tuples and dicts live in an arena and the stack holds 16-byte values. It
//! knows the snapshot's shapes: a dict `{name, filename, line}` becomes an interned frame the
//! moment it is complete, a trace entry (a dict with `action`) becomes a compact
//! [`TraceEntry`] with an interned stack, and the arena slots they used are reused. So memory grows
//! with the number of trace entries (tens of bytes each), not with the size of the object tree,
//! and shared frames (pickled once, then referenced from the memo) cost nothing more.
//!
//! Anything else (classes, persistent ids) is kept as an opaque object that names its class, so
//! a pickle of something other than a snapshot reads to the end and is then refused with a clear
//! message.

use foldhash::HashMap;
use std::sync::Arc;

mod fast;
mod memo;
mod run;
mod shapes;

use self::memo::Memo;
pub(crate) use self::shapes::*;
use super::{Entries, SnapshotError};

/// A value on the machine's stack: 16 bytes, copied freely (4 in the memo, see [`Memo`]).
///
/// The tag is a whole word (`repr(u64)`) so that a value is two words with no padding: with a
/// one-byte tag the compiler copied the 15 bytes after it as two overlapping loads, which stalled
/// the loads that read them back (a store that forwards to part of a load). That was a tenth of
/// a snapshot's read.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(u64)]
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
    /// A memory pool's id (a pair of integers, the tuple made compact), by its place among the
    /// machine's pools.
    Pool(u32),
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
            Self::Pool(_) => "a memory pool's id".to_owned(),
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
    /// A list of the trace entries `first..first + len`, in order (what a device's trace is):
    /// two numbers instead of 16 bytes per entry.
    EntryRun {
        first: u32,
        len: u32,
    },
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

/// What the machine leaves: the top-level value and everything it refers to.
pub(crate) struct Machine<'a> {
    /// The bytes being read: the whole pickle, or the part of it that has arrived and is not
    /// read yet (see [`Machine::over`]).
    bytes: &'a [u8],
    pos: usize,
    /// Where `bytes` starts in the pickle (for the offsets errors name).
    base: u64,
    /// More bytes follow `bytes`: an opcode cut at its end waits for them instead of failing.
    more: bool,
    /// The last failure was such a cut: [`Machine::run_window`] rewinds to `op_start`.
    pending: bool,
    /// Where the opcode being run starts in `bytes`.
    op_start: usize,
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
    pub(crate) entries: Entries,
    /// The streams entries name, each once, and their places.
    streams: Vec<u64>,
    stream_ids: HashMap<u64, u16>,
    /// Action names this reader does not know, each once.
    other_actions: Vec<u32>,
    /// The memory pools trace entries and segments name, each once ([`Value::Pool`]).
    pools: Vec<crate::snapshot::PoolId>,
    /// The frames of the user's code behind frames of compiled code (`fx_original_trace`):
    /// (frame, start, end) in `behind_frames`, innermost first.
    behind: Vec<(u32, u32, u32)>,
    behind_frames: Vec<u32>,
    scratch: Vec<u32>,
    /// The fast path's memo entries waiting for its commit, and its frames (see [`fast`]).
    fast_memo: Vec<(u32, fast::Pending)>,
    fast_frames: Vec<u32>,
    /// The fast path is taken (always, but in the tests that hold it to the general path).
    pub(crate) fast: bool,
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
            base: 0,
            more: false,
            pending: false,
            op_start: 0,
            stack: Vec::new(),
            marks: Vec::new(),
            memo: Memo::default(),
            arena: Vec::new(),
            free: Vec::new(),
            strings: Vec::new(),
            string_ids: HashMap::default(),
            frames: Vec::new(),
            frame_ids: HashMap::default(),
            stack_frames: Vec::new(),
            stack_starts: vec![0],
            stack_ids: HashMap::default(),
            streams: Vec::new(),
            stream_ids: HashMap::default(),
            other_actions: Vec::new(),
            pools: Vec::new(),
            behind: Vec::new(),
            behind_frames: Vec::new(),
            entries: Entries::new(),
            scratch: Vec::new(),
            fast_memo: Vec::new(),
            fast_frames: Vec::new(),
            fast: true,
        };
        for key in KEYS {
            machine.intern(key);
        }
        // Stack 0 is the empty stack.
        machine.stack_ids.insert(Box::new([]), 0);
        machine.stack_starts.push(0);
        machine
    }

    /// The same machine, reading on in `bytes`, which start at offset `base` of the pickle;
    /// `more`: bytes after these will come (the pickle arrives in parts).
    pub(crate) fn over<'b>(self, bytes: &'b [u8], base: u64, more: bool) -> Machine<'b> {
        Machine {
            bytes,
            pos: 0,
            base,
            more,
            pending: false,
            op_start: 0,
            stack: self.stack,
            marks: self.marks,
            memo: self.memo,
            arena: self.arena,
            free: self.free,
            strings: self.strings,
            string_ids: self.string_ids,
            frames: self.frames,
            frame_ids: self.frame_ids,
            stack_frames: self.stack_frames,
            stack_starts: self.stack_starts,
            stack_ids: self.stack_ids,
            entries: self.entries,
            streams: self.streams,
            stream_ids: self.stream_ids,
            other_actions: self.other_actions,
            pools: self.pools,
            behind: self.behind,
            behind_frames: self.behind_frames,
            scratch: self.scratch,
            fast_memo: self.fast_memo,
            fast_frames: self.fast_frames,
            fast: self.fast,
        }
    }

    /// How far into `bytes` the machine has read: every opcode before this offset has run.
    pub(crate) fn read_to(&self) -> usize {
        self.pos
    }

    #[cold]
    fn err(&self, at: usize, message: impl Into<String>) -> SnapshotError {
        SnapshotError::Pickle {
            offset: usize::try_from(self.base)
                .unwrap_or(usize::MAX)
                .saturating_add(at),
            message: message.into(),
        }
    }

    /// An opcode runs past the end of the bytes: with more to come, the window ends here
    /// ([`Machine::run_window`] rewinds and waits); otherwise the pickle is cut short.
    #[cold]
    #[inline(never)]
    fn past_the_end(&mut self, message: String) -> SnapshotError {
        self.pending = self.more;
        self.err(self.pos, message)
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

    #[inline]
    fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8], SnapshotError> {
        let bytes: &'a [u8] = self.bytes;
        match bytes
            .get(self.pos..)
            .and_then(|rest| rest.get(..usize::try_from(n).ok()?))
        {
            Some(slice) => {
                self.pos += slice.len();
                Ok(slice)
            }
            None => Err(self.cut_short(n, what)),
        }
    }

    /// The error for an argument that runs past the end (kept out of the opcodes' fast path).
    #[cold]
    #[inline(never)]
    fn cut_short(&mut self, n: u64, what: &str) -> SnapshotError {
        let left = self.bytes.len().saturating_sub(self.pos);
        self.past_the_end(format!(
            "{what} declares {n} bytes but only {left} are left (the file is truncated or corrupt)"
        ))
    }

    #[inline]
    fn u8(&mut self) -> Result<u8, SnapshotError> {
        match self.bytes.get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                Ok(b)
            }
            None => Err(self.cut_short(1, "an argument")),
        }
    }

    #[inline]
    fn le<const N: usize>(&mut self) -> Result<[u8; N], SnapshotError> {
        match self
            .bytes
            .get(self.pos..)
            .and_then(|rest| rest.first_chunk::<N>())
        {
            Some(&out) => {
                self.pos += N;
                Ok(out)
            }
            None => Err(self.cut_short(N as u64, "an argument")),
        }
    }

    fn line(&mut self) -> Result<&'a [u8], SnapshotError> {
        let rest = &self.bytes[self.pos..];
        match rest.iter().position(|&b| b == b'\n') {
            Some(n) => {
                self.pos += n + 1;
                Ok(&rest[..n])
            }
            None => {
                Err(self.past_the_end("a text argument has no end of line (truncated?)".to_owned()))
            }
        }
    }

    #[inline]
    fn pop(&mut self, at: usize) -> Result<Value, SnapshotError> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(self.err(at, "the stack is empty (corrupt opcodes)"));
        }
        self.stack
            .pop()
            .ok_or_else(|| self.err(at, "the stack is empty (corrupt opcodes)"))
    }

    #[inline]
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
        let mark = self.pop_mark_index(at)?;
        Ok(self.stack.split_off(mark))
    }

    /// Closes the innermost MARK: where its items start on the stack (they are left there).
    #[inline]
    fn pop_mark_index(&mut self, at: usize) -> Result<usize, SnapshotError> {
        let mark = self.marks.pop().ok_or_else(|| {
            self.err(
                at,
                "an opcode needs a MARK and there is none (corrupt opcodes)",
            )
        })?;
        Ok(mark.min(self.stack.len()))
    }

    /// The value just below stack position `index`, which must lie above the innermost MARK:
    /// the container that the items from `index` on are added to.
    #[inline]
    fn below(&self, at: usize, index: usize) -> Result<Value, SnapshotError> {
        let floor = self.marks.last().copied().unwrap_or(0);
        match index.checked_sub(1) {
            Some(i) if i >= floor => self
                .stack
                .get(i)
                .copied()
                .ok_or_else(|| self.err(at, "the stack is empty (corrupt opcodes)")),
            _ => Err(self.err(at, "the stack is empty (corrupt opcodes)")),
        }
    }

    #[inline]
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

    #[inline(always)]
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
    #[inline]
    fn mark_shared(&mut self, value: Value) {
        if let Value::Obj(i) = value
            && let Some(slot) = self.arena.get_mut(i as usize)
        {
            slot.shared = true;
        }
    }

    #[inline]
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
}
