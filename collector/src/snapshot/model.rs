//! What a snapshot holds: its segments and blocks, its trace entries, annotations and the
//! interned strings, frames and stacks they refer to.

use std::sync::Arc;

use super::{Frame, PoolId, Segment};

/// Why a snapshot cannot be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SnapshotError {
    /// The file has no bytes.
    #[error("the file is empty, not a PyTorch memory snapshot")]
    Empty,
    /// Not a pickle at all.
    #[error("not a PyTorch memory snapshot: {0}")]
    NotAPickle(String),
    /// The pickle is damaged or truncated.
    #[error("at byte {offset}: {message}")]
    Pickle {
        /// Where the machine stopped.
        offset: usize,
        /// What is wrong.
        message: String,
    },
    /// A well-formed pickle of something else, or a snapshot with a field of the wrong kind.
    #[error("{0}")]
    Schema(String),
}

/// What a trace entry records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// A block handed to a tensor.
    Alloc,
    /// A block freed by its tensor, not yet reusable (other streams may still use it).
    FreeRequested,
    /// The block is reusable.
    FreeCompleted,
    /// `cudaMalloc` of a new segment.
    SegmentAlloc,
    /// `cudaFree` of a segment.
    SegmentFree,
    /// Expandable segments: pages mapped.
    SegmentMap,
    /// Expandable segments: pages unmapped.
    SegmentUnmap,
    /// The snapshot was taken.
    Snapshot,
    /// Out of memory: `size` was asked for, `device_free` was free.
    Oom,
    /// Metadata attached to a live allocation after the fact (`_annotate_tensor`, PyTorch 2.14
    /// and later): `addr` is the allocation's, the entry's `user_metadata` the annotation.
    Annotate,
    /// An action this reader does not know: its place among the snapshot's unknown action names
    /// (at most [`Action::OTHERS`] of them, so that an entry's action is one byte).
    Other(u8),
}

impl Action {
    /// How many unknown action names a snapshot may hold.
    pub const OTHERS: usize = 246;

    /// The action as one byte (a trace entry keeps it so); `Other` beyond [`Action::OTHERS`]
    /// as the last one.
    const fn code(self) -> u8 {
        match self {
            Self::Alloc => 0,
            Self::FreeRequested => 1,
            Self::FreeCompleted => 2,
            Self::SegmentAlloc => 3,
            Self::SegmentFree => 4,
            Self::SegmentMap => 5,
            Self::SegmentUnmap => 6,
            Self::Snapshot => 7,
            Self::Oom => 8,
            Self::Annotate => 9,
            Self::Other(i) => 10u8.saturating_add(i),
        }
    }

    /// The action of [`Action::code`].
    const fn of_code(code: u8) -> Self {
        match code {
            0 => Self::Alloc,
            1 => Self::FreeRequested,
            2 => Self::FreeCompleted,
            3 => Self::SegmentAlloc,
            4 => Self::SegmentFree,
            5 => Self::SegmentMap,
            6 => Self::SegmentUnmap,
            7 => Self::Snapshot,
            8 => Self::Oom,
            9 => Self::Annotate,
            i => Self::Other(i - 10),
        }
    }

    /// What the action changes, (allocated, reserved) in bytes, for an entry of `size` bytes
    /// (beyond `i64::MAX`, as much as a level can count); `None` for actions that change
    /// neither. 64-bit, not wider: millions of entries are summed, and a browser tab's
    /// WebAssembly has no wider integers (each 128-bit step there is several).
    pub(super) fn change(self, size: u64) -> Option<(i64, i64)> {
        let size = i64::try_from(size).unwrap_or(i64::MAX);
        match self {
            Self::Alloc => Some((size, 0)),
            Self::FreeCompleted => Some((-size, 0)),
            Self::SegmentAlloc | Self::SegmentMap => Some((0, size)),
            Self::SegmentFree | Self::SegmentUnmap => Some((0, -size)),
            _ => None,
        }
    }

    /// The name PyTorch uses.
    pub fn name<'a>(&self, snapshot: &'a Snapshot) -> &'a str {
        match self {
            Self::Alloc => "alloc",
            Self::FreeRequested => "free_requested",
            Self::FreeCompleted => "free_completed",
            Self::SegmentAlloc => "segment_alloc",
            Self::SegmentFree => "segment_free",
            Self::SegmentMap => "segment_map",
            Self::SegmentUnmap => "segment_unmap",
            Self::Snapshot => "snapshot",
            Self::Oom => "oom",
            Self::Annotate => "annotate",
            Self::Other(i) => snapshot
                .other_actions
                .get(usize::from(*i))
                .map_or("?", |&name| snapshot.string(name)),
        }
    }
}

/// One entry of a device's allocator trace: 32 bytes, since a snapshot may hold millions (what
/// few entries have is kept beside them: an out-of-memory entry's `device_free`
/// ([`Entries::device_free`]), `user_metadata` ([`Entries::user_metadata`]), `compile_context`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TraceEntry {
    /// When, in microseconds since the Unix epoch (0 when the snapshot has no times).
    pub time_us: i64,
    /// The block's or segment's address.
    pub addr: u64,
    /// Bytes.
    pub size: u64,
    /// The stack (index into the snapshot's stacks; 0 is empty).
    pub stack: u32,
    /// The CUDA stream: its place in [`Snapshot::streams`].
    pub(crate) stream: u16,
    /// The device (PyTorch's device index is 8 bits).
    device: u8,
    /// What happened: [`Action::code`].
    action: u8,
}

impl TraceEntry {
    /// An entry on the default stream (for snapshots built in memory: tests, benchmarks); a
    /// device beyond [`TraceEntry::MAX_DEVICE`] is that one.
    pub fn new(
        action: Action,
        addr: u64,
        size: u64,
        time_us: i64,
        stack: u32,
        device: u32,
    ) -> Self {
        Self {
            time_us,
            addr,
            size,
            stack,
            stream: 0,
            device: u8::try_from(device).unwrap_or(u8::MAX),
            action: action.code(),
        }
    }

    /// The highest device an entry can be on.
    pub const MAX_DEVICE: u32 = u8::MAX as u32;

    /// What happened.
    #[inline]
    pub fn action(&self) -> Action {
        Action::of_code(self.action)
    }

    /// The device.
    #[inline]
    pub fn device(&self) -> u32 {
        u32::from(self.device)
    }

    /// The entry on `stream` (its place in [`Snapshot::streams`]).
    pub(crate) fn with_stream(self, stream: u16) -> Self {
        Self { stream, ..self }
    }

    /// The entry on `device` (at most [`TraceEntry::MAX_DEVICE`]: beyond, that one).
    pub(crate) fn on(self, device: u32) -> Self {
        Self {
            device: u8::try_from(device).unwrap_or(u8::MAX),
            ..self
        }
    }
}

// A snapshot may hold millions of trace entries: keep each at 32 bytes.
const _: () = assert!(std::mem::size_of::<TraceEntry>() == 32);

/// The frames of the user's code behind frames of compiled code: a frame of a graph FX generated
/// (`fx_generated_….py`), augmented by `_dump_snapshot(augment_with_fx_traces=True)`, carries the
/// stack its node was traced from (`fx_original_trace`): the model's code that made the tensor.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Behind {
    /// The frames, innermost first, of every compiled frame in `of`.
    pub(super) frames: Vec<u32>,
    /// (compiled frame, start, end) in `frames`, by frame.
    pub(super) of: Vec<(u32, u32, u32)>,
}

impl Behind {
    /// The frames (ids, innermost first) behind compiled frame `frame`; empty when none.
    pub fn of(&self, frame: u32) -> &[u32] {
        self.of
            .binary_search_by_key(&frame, |&(f, _, _)| f)
            .ok()
            .and_then(|at| {
                let (_, start, end) = self.of[at];
                self.frames.get(start as usize..end as usize)
            })
            .unwrap_or(&[])
    }

    /// Whether any frame has frames behind it.
    pub fn is_empty(&self) -> bool {
        self.of.is_empty()
    }
}

/// A START or END of a `record_function` range (`external_annotations`).
#[derive(Clone, Debug, PartialEq)]
pub struct Annotation {
    /// The device.
    pub device: u32,
    /// True for START.
    pub start: bool,
    /// The range's name.
    pub name: String,
    /// When, in microseconds since the Unix epoch.
    pub time_us: i64,
}

/// Trace entries, in blocks of fixed size: millions of them are read without the vector that
/// holds them ever being moved to grow (in a browser tab, a vector of a gigabyte that grows by
/// copying leaves holes as large, and a tab has 4 GB).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Entries {
    blocks: Vec<Vec<TraceEntry>>,
    len: usize,
    /// `device_free` of the entries that have one (out-of-memory entries), by entry, in order.
    device_free: Vec<(u32, u64)>,
    /// `compile_context` of the entries that have one (an interned string), by entry, in order:
    /// few have one, so it is not a field of every entry.
    compile_context: Vec<(u32, u32)>,
    /// `user_metadata` of the entries that have one (an interned string), by entry, in order.
    metadata: Vec<(u32, u32)>,
    /// `pool_id` of the entries in a private pool (not the default `(0, 0)`), by entry, in order.
    pools: Vec<(u32, PoolId)>,
    /// The earliest and the latest time of the entries that have one, kept as they are pushed:
    /// the report, the verdict and the pictures ask for it, and millions of entries are a pass
    /// of a tenth of a second each time.
    times_us: Option<(i64, i64)>,
    /// How many entries change allocated or reserved memory (the recording's readings).
    readings: usize,
    /// What the entries change in all, (allocated, reserved) bytes (saturating), the largest
    /// request (an alloc's or an out-of-memory entry's size), the last out-of-memory entry, and
    /// the device they are all on: kept as they are pushed, so that a snapshot of one device
    /// (most) is judged without passes over millions of entries for them.
    net: (i64, i64),
    largest_request: Option<u64>,
    last_oom: Option<usize>,
    on: On,
}

/// Which devices the entries are on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum On {
    /// There are none.
    #[default]
    Nothing,
    /// Every one is on this device.
    One(u32),
    /// More than one device.
    Many,
}

/// Entries per block (2 MiB).
const ENTRY_BLOCK: usize = 1 << 16;

impl Entries {
    /// No entries.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds one at the end.
    pub fn push(&mut self, entry: TraceEntry) {
        let t = entry.time_us;
        if t > 0 {
            self.times_us = Some(
                self.times_us
                    .map_or((t, t), |(lo, hi)| (lo.min(t), hi.max(t))),
            );
        }
        let action = entry.action();
        if let Some((a, r)) = action.change(entry.size) {
            self.readings += 1;
            self.net = (self.net.0.saturating_add(a), self.net.1.saturating_add(r));
        }
        if matches!(action, Action::Alloc | Action::Oom) {
            self.largest_request = Some(self.largest_request.unwrap_or(0).max(entry.size));
            if action == Action::Oom {
                self.last_oom = Some(self.len);
            }
        }
        self.on = match self.on {
            On::Nothing => On::One(entry.device()),
            On::One(d) if d == entry.device() => On::One(d),
            _ => On::Many,
        };
        match self.blocks.last_mut() {
            Some(block) if block.len() < ENTRY_BLOCK => block.push(entry),
            _ => {
                let mut block = Vec::with_capacity(ENTRY_BLOCK);
                block.push(entry);
                self.blocks.push(block);
            }
        }
        self.len += 1;
    }

    /// Adds one at the end, with the bytes free on the device that it names (an out-of-memory
    /// entry's `device_free`; 0: none).
    pub fn push_with_free(&mut self, entry: TraceEntry, device_free: u64) {
        if device_free != 0
            && let Ok(i) = u32::try_from(self.len)
        {
            self.device_free.push((i, device_free));
        }
        self.push(entry);
    }

    /// The bytes free on the device that entry `i` names (`device_free`, which PyTorch writes
    /// in out-of-memory entries); 0 when it names none.
    pub fn device_free(&self, i: usize) -> u64 {
        let Ok(i) = u32::try_from(i) else {
            return 0;
        };
        self.device_free
            .binary_search_by_key(&i, |&(e, _)| e)
            .map_or(0, |at| self.device_free[at].1)
    }

    /// Gives the last entry pushed, `i`, what `torch.compile` was compiling (an interned
    /// string) when it was recorded.
    pub(crate) fn set_compile_context(&mut self, i: usize, string: u32) {
        if let Ok(i) = u32::try_from(i) {
            self.compile_context.push((i, string));
        }
    }

    /// What `torch.compile` was compiling when entry `i` was recorded (`compile_context`, an
    /// interned string), if the trace says.
    pub fn compile_context(&self, i: usize) -> Option<u32> {
        beside(&self.compile_context, i)
    }

    /// Gives the last entry pushed, `i`, `user_metadata` (an interned string): what
    /// `torch.cuda.memory._set_memory_metadata` had set when it was recorded.
    pub(crate) fn set_user_metadata(&mut self, i: usize, string: u32) {
        if let Ok(i) = u32::try_from(i) {
            self.metadata.push((i, string));
        }
    }

    /// Gives the last entry pushed, `i`, the private pool it was in (`pool_id`, PyTorch 2.14 and
    /// later; the default pool is not kept).
    pub(crate) fn set_pool(&mut self, i: usize, pool: PoolId) {
        if let Ok(i) = u32::try_from(i)
            && pool.is_private()
        {
            self.pools.push((i, pool));
        }
    }

    /// The private pool entry `i` was in, if any.
    pub fn pool(&self, i: usize) -> Option<PoolId> {
        let i = u32::try_from(i).ok()?;
        self.pools
            .binary_search_by_key(&i, |&(e, _)| e)
            .ok()
            .map(|at| self.pools[at].1)
    }

    /// The entries in a private pool, in order: (entry, pool).
    pub fn in_pools(&self) -> &[(u32, PoolId)] {
        &self.pools
    }

    /// `torch.cuda.memory._set_memory_metadata` when entry `i` was recorded (an interned string),
    /// if set.
    pub fn user_metadata(&self, i: usize) -> Option<u32> {
        beside(&self.metadata, i)
    }

    /// The entries that have `user_metadata`, in order: (entry, interned string).
    pub fn with_user_metadata(&self) -> &[(u32, u32)] {
        &self.metadata
    }

    /// Entry `i`.
    pub fn get(&self, i: usize) -> Option<&TraceEntry> {
        self.blocks.get(i / ENTRY_BLOCK)?.get(i % ENTRY_BLOCK)
    }

    /// The first.
    pub fn first(&self) -> Option<&TraceEntry> {
        self.get(0)
    }

    /// The last.
    pub fn last(&self) -> Option<&TraceEntry> {
        self.blocks.last()?.last()
    }

    /// In order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &TraceEntry> + Clone {
        self.blocks.iter().flatten()
    }

    /// The earliest and the latest time of the entries that have one (`time_us` > 0).
    pub fn time_range_us(&self) -> Option<(i64, i64)> {
        self.times_us
    }

    /// How many entries change allocated or reserved memory.
    pub fn readings(&self) -> usize {
        self.readings
    }

    /// Gives the entries their devices, each device's trace a run of entries in order: the first
    /// `lens[0]` device 0, the next `lens[1]` device 1, and so on. The first device's run is left
    /// as it is (entries are read on device 0: most snapshots' every entry).
    pub(crate) fn give_devices(&mut self, lens: &[usize]) {
        let first = lens.first().copied().unwrap_or(0);
        let devices = lens
            .iter()
            .enumerate()
            .skip(1)
            .flat_map(|(device, &len)| std::iter::repeat_n(device as u32, len));
        // One pass over the entries after the first run, however many devices there are.
        for (entry, device) in self.blocks.iter_mut().flatten().skip(first).zip(devices) {
            *entry = entry.on(device);
        }
        let mut on = lens.iter().enumerate().filter(|&(_, &len)| len > 0);
        self.on = match (on.next(), on.next()) {
            (None, _) => On::Nothing,
            (Some((device, _)), None) => On::One(device as u32),
            _ => On::Many,
        };
    }

    /// The device every entry is on, if they are all on one.
    pub fn only_device(&self) -> Option<u32> {
        match self.on {
            On::One(device) => Some(device),
            On::Nothing | On::Many => None,
        }
    }

    /// What the entries change in all, (allocated, reserved) bytes (saturating).
    pub fn net(&self) -> (i64, i64) {
        self.net
    }

    /// The largest size asked for (by an alloc or an out-of-memory entry), if any entry asked.
    pub fn largest_request(&self) -> Option<u64> {
        self.largest_request
    }

    /// The last out-of-memory entry.
    pub fn last_oom(&self) -> Option<usize> {
        self.last_oom
    }

    /// Releases what the last block holds beyond its entries.
    pub fn shrink_to_fit(&mut self) {
        if let Some(block) = self.blocks.last_mut() {
            block.shrink_to_fit();
        }
        self.blocks.shrink_to_fit();
        self.device_free.shrink_to_fit();
        self.compile_context.shrink_to_fit();
        self.metadata.shrink_to_fit();
    }
}

/// What a table beside the entries, (entry, value) in order, holds for entry `i`.
fn beside(table: &[(u32, u32)], i: usize) -> Option<u32> {
    let i = u32::try_from(i).ok()?;
    table
        .binary_search_by_key(&i, |&(e, _)| e)
        .ok()
        .map(|at| table[at].1)
}

impl std::ops::Index<usize> for Entries {
    type Output = TraceEntry;

    fn index(&self, i: usize) -> &TraceEntry {
        &self.blocks[i / ENTRY_BLOCK][i % ENTRY_BLOCK]
    }
}

impl<'a> IntoIterator for &'a Entries {
    type Item = &'a TraceEntry;
    type IntoIter = std::iter::Flatten<std::slice::Iter<'a, Vec<TraceEntry>>>;

    fn into_iter(self) -> Self::IntoIter {
        self.blocks.iter().flatten()
    }
}

impl FromIterator<TraceEntry> for Entries {
    fn from_iter<I: IntoIterator<Item = TraceEntry>>(iter: I) -> Self {
        let mut entries = Self::new();
        iter.into_iter().for_each(|e| entries.push(e));
        entries
    }
}

impl From<Vec<TraceEntry>> for Entries {
    fn from(entries: Vec<TraceEntry>) -> Self {
        entries.into_iter().collect()
    }
}

/// A PyTorch memory snapshot.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Every string (interned).
    pub strings: Vec<Arc<str>>,
    /// Every distinct frame.
    pub frames: Vec<Frame>,
    pub(super) stack_frames: Vec<u32>,
    pub(super) stack_starts: Vec<u32>,
    /// The frames of the user's code behind frames of compiled code.
    pub behind: Behind,
    /// The trace entries of every device, device by device, each in time order.
    pub entries: Entries,
    /// The segments at the time of the snapshot.
    pub segments: Vec<Segment>,
    /// `record_function` ranges.
    pub annotations: Vec<Annotation>,
    /// The allocator's settings, as `key = value` text.
    pub allocator_settings: Vec<(String, String)>,
    /// The CUDA streams trace entries name, each once.
    pub(super) streams: Vec<u64>,
    /// The names of actions this reader does not know (interned), each once.
    pub(super) other_actions: Vec<u32>,
    /// How many devices the snapshot describes: the CUDA devices, then pinned host memory when
    /// it was recorded ([`Snapshot::host`]).
    pub devices: u32,
    /// The device that is the CUDA pinned host memory (`host_segments` and `host_traces`, written
    /// since PyTorch 2.14 with `_record_memory_history(record_pinned_host_memory=True)`): the one
    /// after the CUDA devices, when the snapshot holds any.
    pub host: Option<u32>,
}

impl Snapshot {
    /// Whether the snapshot says its history's ring buffer wrapped (`allocator_settings`'
    /// `trace_alloc_overflowed`, PyTorch 2.1 and later): `Some` with the buffer's size
    /// (`trace_alloc_max_entries`) when given.
    pub fn ring_overflowed(&self) -> Option<Option<u64>> {
        let setting = |key: &str| {
            self.allocator_settings
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        };
        (setting("trace_alloc_overflowed") == Some("true"))
            .then(|| setting("trace_alloc_max_entries").and_then(|v| v.parse().ok()))
    }

    /// How a device is named to a person: `cuda:N`, or `pinned host` for pinned host memory.
    pub fn device_name(&self, device: u32) -> String {
        crate::format::device_name(device, self.host)
    }

    /// Adds a stack of `frames` (indices into [`Snapshot::frames`], innermost first) and returns
    /// its id (for snapshots built in memory: tests, benchmarks; a read snapshot interns its own).
    pub fn add_stack(&mut self, frames: &[u32]) -> u32 {
        // Stack 0 is the empty one.
        while self.stack_starts.len() < 2 {
            self.stack_starts.push(0);
        }
        self.stack_frames.extend_from_slice(frames);
        self.stack_starts.push(self.stack_frames.len() as u32);
        self.stack_starts.len() as u32 - 2
    }
}

/// One block's life: allocated in the trace (or before it began), freed in it (or alive at the
/// end). `i64::MIN` and `i64::MAX` stand for before the trace and never.
#[derive(Clone, Copy, Debug)]
pub(super) struct Lifetime {
    pub device: u32,
    pub stack: u32,
    pub addr: u64,
    pub size: u64,
    pub allocated_us: i64,
    pub freed_us: i64,
}

/// A block alive at some time, with where it was allocated.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LiveBlock {
    /// The device.
    pub device: u32,
    /// Its address.
    pub addr: u64,
    /// Bytes.
    pub size: u64,
    /// When it was allocated (µs since the epoch); `None` when before the trace starts.
    pub allocated_us: Option<i64>,
    /// The stack of its allocation.
    pub stack: u32,
}

/// Blocks from one allocation site that a repeating phase leaves behind.
#[derive(Clone, Debug, PartialEq)]
pub struct LeakSuspect {
    /// The device.
    pub device: u32,
    /// The stack of its largest block; the site is this stack's ([`Snapshot::site`]), which
    /// other stacks may share.
    pub stack: u32,
    /// The phase they were allocated in (`None`: the snapshot has no phases).
    pub phase: Option<String>,
    /// How many occurrences of the phase left a block from this site alive.
    pub occurrences: usize,
    /// Of how many occurrences in all.
    pub of: usize,
    /// Blocks still alive at the end.
    pub blocks: usize,
    /// Their bytes.
    pub bytes: u64,
    /// When they were allocated, µs since the epoch, in time order.
    pub allocated_us: Vec<i64>,
}

/// Where a picture marks a leak suspect's blocks: at their allocation, on the allocated curve.
#[derive(Clone, Debug, PartialEq)]
pub struct SuspectMarks {
    /// What the legend says: the site, its bytes and blocks.
    pub label: String,
    /// A leak suspect (its blocks left alive by several occurrences of a repeating phase), not
    /// a site whose blocks a trace without steps saw allocated at many moments and alive at its
    /// end (what one step holds looks so too).
    pub leak: bool,
    /// The device.
    pub device: u32,
    /// (nanoseconds since the trace's start, allocated bytes on the device just after), at most
    /// [`SuspectMarks::MAX_POINTS`], evenly thinned.
    pub points: Vec<(u64, f64)>,
}

impl SuspectMarks {
    /// The most points one suspect is marked with.
    pub const MAX_POINTS: usize = 400;
    /// The most suspects marked.
    pub const MAX_SUSPECTS: usize = 5;
}

/// A trace entry's `user_metadata` as a person reads it: a JSON object (PyTorch 2.14 and later
/// store a dict given to `_set_memory_metadata` as its JSON) as `key: value` pairs, anything else
/// as it is.
pub fn metadata_text(metadata: &str) -> String {
    match serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(metadata) {
        Ok(map) => map
            .iter()
            .map(|(k, v)| match v {
                serde_json::Value::String(s) => format!("{k}: {s}"),
                other => format!("{k}: {other}"),
            })
            .collect::<Vec<_>>()
            .join(", "),
        _ => metadata.to_owned(),
    }
}
