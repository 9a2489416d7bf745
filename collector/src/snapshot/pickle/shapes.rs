//! What the machine knows of a snapshot's shapes: the keys it interns first, frames and trace
//! entries made compact the moment their dicts are complete, stacks interned, and the accessors
//! the snapshot reader uses.

use std::sync::Arc;

use super::{Frame, Machine, Obj, Value};
use crate::snapshot::{Action, Entries, PoolId, SnapshotError, TraceEntry};

/// The keys the machine recognises, interned first so that they have fixed ids.
pub(crate) const KEYS: [&str; 40] = [
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
    "pool_id",
    "fx_original_trace",
    "fx_node_name",
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
    "host_segments",
    "host_traces",
    "segment_pool_id",
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
pub(crate) const K_COMPILE_CONTEXT: u32 = 11;
pub(crate) const K_POOL_ID: u32 = 12;
pub(crate) const K_FX_ORIGINAL_TRACE: u32 = 13;
pub(crate) const K_FX_NODE_NAME: u32 = 14;
pub(crate) const K_SEGMENTS: u32 = 15;
pub(crate) const K_DEVICE_TRACES: u32 = 16;
pub(crate) const K_EXTERNAL_ANNOTATIONS: u32 = 17;
pub(crate) const K_ALLOCATOR_SETTINGS: u32 = 18;
pub(crate) const K_DEVICE: u32 = 19;
pub(crate) const K_ADDRESS: u32 = 20;
pub(crate) const K_TOTAL_SIZE: u32 = 21;
pub(crate) const K_ALLOCATED_SIZE: u32 = 22;
pub(crate) const K_REQUESTED_SIZE: u32 = 24;
pub(crate) const K_SEGMENT_TYPE: u32 = 25;
pub(crate) const K_BLOCKS: u32 = 26;
pub(crate) const K_STATE: u32 = 27;
pub(crate) const K_HISTORY: u32 = 28;
pub(crate) const K_REAL_SIZE: u32 = 29;
pub(crate) const K_STAGE: u32 = 30;
const K_ALLOC: u32 = 31;
const K_FREE_REQUESTED: u32 = 32;
const K_FREE_COMPLETED: u32 = 33;
const K_SEGMENT_ALLOC: u32 = 34;
const K_SEGMENT_FREE: u32 = 35;
const K_OOM: u32 = 36;
pub(crate) const K_HOST_SEGMENTS: u32 = 37;
pub(crate) const K_HOST_TRACES: u32 = 38;
pub(crate) const K_SEGMENT_POOL_ID: u32 = 39;

impl Machine<'_> {
    /// A dict got its items: if it is a frame or a trace entry, make it compact now.
    pub(super) fn finished_dict(
        &mut self,
        at: usize,
        stack_index: usize,
    ) -> Result<(), SnapshotError> {
        let Some(Value::Obj(i)) = self.stack.get(stack_index).copied() else {
            return Ok(());
        };
        let Some(Obj::Dict(pairs)) = self.arena.get(i as usize).map(|s| &s.obj) else {
            return Ok(());
        };
        let fields = Fields::of(pairs.iter().copied());
        if let Some(compact) = self.compact(at, &fields)? {
            self.replace(i, stack_index, compact);
        }
        Ok(())
    }

    /// What a dict with these items becomes: an interned frame, a trace entry (pushed to the
    /// entries, its frames list interned and replaced by the stack), or `None` for any other dict.
    pub(super) fn compact(
        &mut self,
        at: usize,
        fields: &Fields,
    ) -> Result<Option<Value>, SnapshotError> {
        let key = |k: u32| fields.get(k);
        if fields.frame_shaped() {
            let (Some(Value::Str(name)), Some(Value::Str(filename))) =
                (key(K_NAME), key(K_FILENAME))
            else {
                return Ok(None); // not a frame after all: left as a dict
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
            if let Some(Value::Str(trace)) = key(K_FX_ORIGINAL_TRACE) {
                self.note_behind(id, trace);
            }
            return Ok(Some(Value::Frame(id)));
        }
        let Some(Value::Str(action)) = key(K_ACTION) else {
            return Ok(None);
        };
        let wrong = |what: &str, v: Value, kind: &str| {
            self.err(
                at,
                format!(
                    "trace entry {}: {what} is {}, not {kind}",
                    self.entries.len(),
                    v.describe(&self.strings)
                ),
            )
        };
        let number = |k: u32, what: &str| -> Result<u64, SnapshotError> {
            match key(k) {
                None | Some(Value::None) => Ok(0),
                Some(v) => v
                    .as_u64()
                    .ok_or_else(|| wrong(what, v, "a non-negative 64-bit integer")),
            }
        };
        let addr = number(K_ADDR, "addr")?;
        let size = number(K_SIZE, "size")?;
        let stream = number(K_STREAM, "stream").unwrap_or(0);
        let device_free = number(K_DEVICE_FREE, "device_free")?;
        let time_us = match key(K_TIME_US) {
            None | Some(Value::None) => 0,
            Some(v) => v
                .as_i64()
                .ok_or_else(|| wrong("time_us", v, "a 64-bit integer"))?,
        };
        let metadata = match key(K_USER_METADATA) {
            Some(Value::Str(s)) if !self.strings[s as usize].is_empty() => Some(s),
            _ => None,
        };
        // What `torch.compile` was compiling (`_record_memory_history(compile_context=True)`).
        let compile_context = match key(K_COMPILE_CONTEXT) {
            Some(Value::Str(s)) if !matches!(&*self.strings[s as usize], "" | "N/A") => Some(s),
            _ => None,
        };
        // The pool it was in (`pool_id`, PyTorch 2.14 and later): a pair of integers.
        let pool = match key(K_POOL_ID) {
            None | Some(Value::None) => None,
            Some(v) => Some(
                self.pool_id(v)
                    .ok_or_else(|| wrong("pool_id", v, "a pair of non-negative integers"))?,
            ),
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
                "annotate" => Action::Annotate,
                _ => Action::Other(self.other_action(at, other)?),
            },
        };
        let stream = self.stream(at, stream)?;
        let stack = self.stack_of(at, frames)?;
        let entry = TraceEntry::new(action, addr, size, time_us, stack, 0).with_stream(stream);
        let id = u32::try_from(self.entries.len())
            .map_err(|_| self.err(at, "too many trace entries"))?;
        self.entries.push_with_free(entry, device_free);
        if let Some(context) = compile_context {
            self.entries.set_compile_context(id as usize, context);
        }
        if let Some(metadata) = metadata {
            self.entries.set_user_metadata(id as usize, metadata);
        }
        if let Some(pool) = pool {
            self.entries.set_pool(id as usize, pool);
            // The tuple becomes compact, as a frames list does: millions of entries each have one.
            if let Some(Value::Obj(tuple)) = key(K_POOL_ID) {
                let compact = self.intern_pool(pool);
                self.replace(tuple, usize::MAX, compact);
            }
        }
        if let Some(Value::Obj(list)) = frames {
            self.replace(list, usize::MAX, Value::Stack(stack));
        }
        Ok(Some(Value::Entry(id)))
    }

    /// Notes the frames of the user's code behind frame `id` of compiled code, read from its
    /// `fx_original_trace` (a Python traceback's text, outermost first: `File "…", line N, in
    /// name` and the line's code), once per frame.
    fn note_behind(&mut self, id: u32, trace: u32) {
        if self.behind.iter().any(|&(f, _, _)| f == id) {
            return;
        }
        let text = Arc::clone(&self.strings[trace as usize]);
        let start = self.behind_frames.len() as u32;
        for (filename, line, name) in traceback_frames(&text) {
            let frame = Frame {
                name: self.intern(name),
                filename: self.intern(filename),
                line,
            };
            let next = self.frames.len() as u32;
            let f = *self.frame_ids.entry(frame).or_insert(next);
            if f == next {
                self.frames.push(frame);
            }
            self.behind_frames.push(f);
        }
        let end = self.behind_frames.len() as u32;
        // Innermost first, as a stack's frames are.
        self.behind_frames[start as usize..].reverse();
        if end > start {
            self.behind.push((id, start, end));
        }
    }

    /// A memory pool's id, `(a, b)` as PyTorch writes it (a tuple, or a list, or what one became
    /// once read: [`Value::Pool`]), if `value` is one.
    pub(crate) fn pool_id(&self, value: Value) -> Option<PoolId> {
        match self.resolve(value) {
            Value::Pool(i) => self.pools.get(i as usize).copied(),
            v => match self.obj(v)? {
                Obj::Tuple(items) | Obj::List(items) => match items[..] {
                    [a, b] => Some(PoolId(a.as_u64()?, b.as_u64()?)),
                    _ => None,
                },
                _ => None,
            },
        }
    }

    /// The compact value of a pool's id: its place among the pools, each kept once.
    pub(super) fn intern_pool(&mut self, pool: PoolId) -> Value {
        let at = match self.pools.iter().position(|&p| p == pool) {
            Some(at) => at,
            None => {
                self.pools.push(pool);
                self.pools.len() - 1
            }
        };
        Value::Pool(u32::try_from(at).unwrap_or(u32::MAX))
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
        let id = self.intern_stack(&scratch);
        self.scratch = scratch;
        Ok(id)
    }

    /// The id of the stack of these frames (innermost first), interned on first sight.
    pub(super) fn intern_stack(&mut self, frames: &[u32]) -> u32 {
        match self.stack_ids.get(frames) {
            Some(&id) => id,
            None => {
                let id = self.stack_starts.len() as u32 - 1;
                self.stack_frames.extend_from_slice(frames);
                self.stack_starts.push(self.stack_frames.len() as u32);
                self.stack_ids.insert(frames.into(), id);
                id
            }
        }
    }

    /// The items of a dict value, if it is one.
    pub(crate) fn dict(&self, value: Value) -> Option<&[(Value, Value)]> {
        match self.obj(self.resolve(value)) {
            Some(Obj::Dict(pairs)) => Some(pairs),
            _ => None,
        }
    }

    /// The trace entries `first..first + len`, if the value is a list of them in order.
    pub(crate) fn entry_run(&self, value: Value) -> Option<(u32, u32)> {
        match self.obj(self.resolve(value)) {
            Some(&Obj::EntryRun { first, len }) => Some((first, len)),
            _ => None,
        }
    }

    /// The items of a list or tuple value, if it is one (a run of trace entries is not: see
    /// [`Machine::entry_run`]).
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
    pub(super) fn stream(&mut self, at: usize, stream: u64) -> Result<u16, SnapshotError> {
        // Most entries name the stream the first one named (the default stream).
        if self.streams.first() == Some(&stream) {
            return Ok(0);
        }
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
    pub(super) fn other_action(&mut self, at: usize, name: u32) -> Result<u8, SnapshotError> {
        if let Some(i) = self.other_actions.iter().position(|&n| n == name) {
            return Ok(i as u8);
        }
        let i = u8::try_from(self.other_actions.len())
            .ok()
            .filter(|&i| usize::from(i) < Action::OTHERS)
            .ok_or_else(|| {
                self.err(
                    at,
                    format!(
                        "trace entries name more than {} different unknown actions",
                        Action::OTHERS
                    ),
                )
            })?;
        self.other_actions.push(name);
        Ok(i)
    }

    /// Frees what only the machine needs (memo, arena, lookup tables).
    pub(crate) fn into_parts(mut self) -> Parts {
        // By frame, for [`crate::snapshot::Behind::of`]'s search.
        self.behind.sort_unstable();
        Parts {
            streams: self.streams,
            other_actions: self.other_actions,
            strings: self.strings,
            frames: self.frames,
            stack_frames: self.stack_frames,
            stack_starts: self.stack_starts,
            entries: self.entries,
            behind: crate::snapshot::Behind {
                frames: self.behind_frames,
                of: self.behind,
            },
        }
    }
}

/// The items of a dict that the shapes look at (the keys up to `fx_node_name`), each by its
/// key's id, read in one pass; the first of a key that appears twice counts.
pub(crate) struct Fields {
    by_key: [Option<Value>; K_FX_NODE_NAME as usize + 1],
    /// How many items the dict has.
    len: usize,
}

impl Fields {
    #[inline]
    pub(crate) fn of(pairs: impl Iterator<Item = (Value, Value)>) -> Self {
        let mut fields = Self::empty();
        for (key, value) in pairs {
            match key {
                Value::Str(k) => fields.add(k, value),
                _ => fields.len += 1,
            }
        }
        fields
    }

    /// No items yet (see [`Fields::add`]).
    #[inline]
    pub(super) fn empty() -> Self {
        Self {
            by_key: [None; K_FX_NODE_NAME as usize + 1],
            len: 0,
        }
    }

    /// One more item, as [`Fields::of`] reads it (a key's first value counts).
    #[inline]
    pub(super) fn add(&mut self, key: u32, value: Value) {
        self.len += 1;
        if let Some(slot @ None) = self.by_key.get_mut(key as usize) {
            *slot = Some(value);
        }
    }

    /// Replaces what a key holds (a placeholder added for it).
    #[inline]
    pub(super) fn set(&mut self, key: u32, value: Value) {
        if let Some(slot) = self.by_key.get_mut(key as usize) {
            *slot = Some(value);
        }
    }

    /// Shaped like a frame (`{name, filename, line}`, up to four items): `compact` makes it one
    /// when its name and filename are strings, and never a trace entry.
    /// A frame of compiled code that `_dump_snapshot(augment_with_fx_traces=True)` augmented
    /// carries `fx_node_op`, `fx_node_name`, `fx_node_target` and `fx_original_trace` too.
    pub(super) fn frame_shaped(&self) -> bool {
        let fx = self.get(K_FX_NODE_NAME).is_some() || self.get(K_FX_ORIGINAL_TRACE).is_some();
        (self.len <= 4 || (fx && self.len <= 10))
            && self.get(K_FILENAME).is_some()
            && self.get(K_NAME).is_some()
    }

    #[inline]
    pub(super) fn get(&self, key: u32) -> Option<Value> {
        self.by_key.get(key as usize).copied().flatten()
    }
}

/// The frames of a Python traceback's text (`File "PATH", line N, in NAME` lines, as
/// `traceback.format_stack` and FX's node `stack_trace` write them), outermost first.
pub(crate) fn traceback_frames(text: &str) -> impl Iterator<Item = (&str, u64, &str)> {
    text.lines().filter_map(|line| {
        let rest = line.trim_start().strip_prefix("File \"")?;
        let (path, rest) = rest.split_once("\", line ")?;
        let (line, name) = rest.split_once(", in ")?;
        Some((path, line.trim().parse().ok()?, name.trim()))
    })
}

/// What the machine built that the snapshot keeps.
pub(crate) struct Parts {
    pub strings: Vec<Arc<str>>,
    pub frames: Vec<Frame>,
    pub stack_frames: Vec<u32>,
    pub stack_starts: Vec<u32>,
    pub entries: Entries,
    pub behind: crate::snapshot::Behind,
    pub streams: Vec<u64>,
    pub other_actions: Vec<u32>,
}
