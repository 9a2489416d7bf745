//! PyTorch memory snapshots (`torch.cuda.memory._dump_snapshot("snap.pickle")`): read them, turn
//! their trace into a [`Recording`] the analysis and the viewer understand, and answer what the
//! snapshot alone can: the live blocks at any time with their stacks, leak suspects, and the
//! segments' state (fragmentation).
//!
//! ```no_run
//! let bytes = std::fs::read("snap.pickle").unwrap();
//! let snapshot = collector::snapshot::read_snapshot(&bytes).unwrap();
//! let recording = snapshot.to_recording();
//! println!("{} trace entries, {} live blocks at the end", snapshot.entries.len(),
//!     snapshot.live_blocks_at(i64::MAX, None).len());
//! ```

mod pickle;
mod verdict;

use std::collections::{BTreeMap, HashMap};
use std::num::NonZeroU32;
use std::sync::Arc;

use crate::recording::{
    AllocatorSample, Device, Edge, Header, Note, Oom, Origin, Phase, PhaseEdge, Record, Recording,
};
pub use pickle::Frame;
use pickle::{Machine, Value};
pub use verdict::{Fragmentation, OomAtSnapshot, Site, SnapshotVerdict, TOP_SITES};

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
    /// An action this reader does not know: its place among the snapshot's unknown action names
    /// (one byte, so that a trace entry stays 48 bytes).
    Other(u8),
}

impl Action {
    /// What the action changes, (allocated, reserved) in bytes, for an entry of `size` bytes;
    /// `None` for actions that change neither.
    fn change(self, size: u64) -> Option<(i128, i128)> {
        let size = i128::from(size);
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
            Self::Other(i) => snapshot
                .other_actions
                .get(usize::from(*i))
                .map_or("?", |&name| snapshot.string(name)),
        }
    }
}

/// One entry of a device's allocator trace: 48 bytes, since a snapshot may hold millions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TraceEntry {
    /// When, in microseconds since the Unix epoch (0 when the snapshot has no times).
    pub time_us: i64,
    /// The block's or segment's address.
    pub addr: u64,
    /// Bytes.
    pub size: u64,
    /// For OOMs: the bytes free on the device.
    pub device_free: u64,
    /// The stack (index into the snapshot's stacks; 0 is empty).
    pub stack: u32,
    /// The device.
    pub device: u32,
    /// `torch.cuda.memory._set_memory_metadata` at the time: its interned string's id + 1.
    pub(crate) metadata: Option<NonZeroU32>,
    /// The CUDA stream: its place in [`Snapshot::streams`].
    pub(crate) stream: u16,
    /// What happened.
    pub action: Action,
}

impl TraceEntry {
    /// `torch.cuda.memory._set_memory_metadata` at the time (an interned string), if set.
    pub fn user_metadata(&self) -> Option<u32> {
        self.metadata.map(|m| m.get() - 1)
    }
}

// A snapshot may hold millions of trace entries: keep each at 48 bytes.
const _: () = assert!(std::mem::size_of::<TraceEntry>() == 48);

/// The state of a block inside a segment when the snapshot was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockState {
    /// Held by a tensor.
    ActiveAllocated,
    /// Freed by its tensor, waiting for other streams (`active_pending_free`, or
    /// `active_awaiting_free` in some versions).
    ActivePendingFree,
    /// Free, cached by the allocator.
    Inactive,
    /// A state this reader does not know.
    Other,
}

/// A block of a segment.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Block {
    /// Its address.
    pub address: u64,
    /// Bytes (rounded up by the allocator).
    pub size: u64,
    /// Bytes the tensor asked for.
    pub requested_size: u64,
    /// Its state.
    pub state: BlockState,
    /// Where it was allocated (0: unknown).
    pub stack: u32,
}

/// A segment: one `cudaMalloc` (or an expandable range) of the caching allocator.
#[derive(Clone, Debug, PartialEq)]
pub struct Segment {
    /// The device.
    pub device: u32,
    /// Its address.
    pub address: u64,
    /// Bytes reserved.
    pub total_size: u64,
    /// Bytes of its blocks held by tensors.
    pub allocated_size: u64,
    /// `small` (≤ 1 MiB blocks) or `large`.
    pub segment_type: String,
    /// The stream.
    pub stream: u64,
    /// Its blocks, by address.
    pub blocks: Vec<Block>,
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

/// A PyTorch memory snapshot.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Every string (interned).
    pub strings: Vec<Arc<str>>,
    /// Every distinct frame.
    pub frames: Vec<Frame>,
    stack_frames: Vec<u32>,
    stack_starts: Vec<u32>,
    /// The trace entries of every device, device by device, each in time order.
    pub entries: Vec<TraceEntry>,
    /// The segments at the time of the snapshot.
    pub segments: Vec<Segment>,
    /// `record_function` ranges.
    pub annotations: Vec<Annotation>,
    /// The allocator's settings, as `key = value` text.
    pub allocator_settings: Vec<(String, String)>,
    /// The CUDA streams trace entries name, each once.
    streams: Vec<u64>,
    /// The names of actions this reader does not know (interned), each once.
    other_actions: Vec<u32>,
    /// How many devices the snapshot describes.
    pub devices: u32,
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
    /// The allocation site.
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
}

/// The segments of one device at snapshot time.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct SegmentSummary {
    /// The device.
    pub device: u32,
    /// How many segments.
    pub segments: usize,
    /// Bytes reserved.
    pub reserved: u64,
    /// Bytes held by tensors (`active_allocated`).
    pub allocated: u64,
    /// Bytes freed but waiting for other streams.
    pub pending_free: u64,
    /// Bytes free inside segments (cached).
    pub free: u64,
    /// How many free pieces.
    pub free_pieces: usize,
    /// The largest free piece: the largest tensor that fits without a new `cudaMalloc`.
    pub largest_free: u64,
}

/// Reads a snapshot pickle held in memory.
pub fn read_snapshot(bytes: &[u8]) -> Result<Snapshot, SnapshotError> {
    if bytes.is_empty() {
        return Err(SnapshotError::Empty);
    }
    if bytes.starts_with(b"PK\x03\x04") {
        return Err(SnapshotError::NotAPickle(
            "it is a zip archive (torch.save writes these), not a pickle from torch.cuda.memory._dump_snapshot".to_owned(),
        ));
    }
    if bytes.starts_with(b"TIDEMARK") {
        return Err(SnapshotError::NotAPickle(
            "it is a tidemark recording, not a pickle".to_owned(),
        ));
    }
    if bytes[0] != 0x80 {
        let shown: Vec<String> = bytes.iter().take(8).map(|b| format!("{b:02x}")).collect();
        return Err(SnapshotError::NotAPickle(format!(
            "it starts with the bytes {}, not a pickle of protocol 2 to 5 (0x80)",
            shown.join(" ")
        )));
    }
    let mut machine = Machine::new(bytes);
    let top = machine.run()?;
    // `pickle.dump(torch.cuda.memory_snapshot())` writes the segments alone, as a list.
    if let Some(items) = machine.list(top)
        && items.iter().all(|item| {
            machine
                .dict(*item)
                .is_some_and(|pairs| field(pairs, pickle::K_TOTAL_SIZE).is_some())
        })
    {
        let items = items.to_vec();
        let segments = read_segments(&mut machine, &items)?;
        let devices = segments.iter().map(|s| s.device + 1).max().unwrap_or(0);
        let parts = machine.into_parts();
        return Ok(Snapshot {
            strings: parts.strings,
            frames: parts.frames,
            stack_frames: parts.stack_frames,
            stack_starts: parts.stack_starts,
            segments,
            devices,
            streams: parts.streams,
            other_actions: parts.other_actions,
            ..Snapshot::default()
        });
    }
    let Some(pairs) = machine.dict(top) else {
        return Err(SnapshotError::Schema(format!(
            "the pickle holds {}, not a memory snapshot (a dict with segments and device_traces)",
            describe_top(&machine, top)
        )));
    };
    let find = |k: u32| {
        pairs
            .iter()
            .find(|(key, _)| *key == Value::Str(k))
            .map(|(_, v)| *v)
    };
    let segments_v = find(pickle::K_SEGMENTS);
    let traces_v = find(pickle::K_DEVICE_TRACES);
    if segments_v.is_none() && traces_v.is_none() {
        let keys: Vec<&str> = pairs
            .iter()
            .filter_map(|(k, _)| machine.str(*k))
            .take(6)
            .collect();
        return Err(SnapshotError::Schema(format!(
            "the pickle holds a dict without segments or device_traces (its keys: {}), not a memory snapshot",
            if keys.is_empty() {
                "none that are strings".to_owned()
            } else {
                keys.join(", ")
            }
        )));
    }
    let annotations_v = find(pickle::K_EXTERNAL_ANNOTATIONS);
    let settings_v = find(pickle::K_ALLOCATOR_SETTINGS);

    // Devices of the trace entries: device_traces[i] is device i.
    let mut device_of: Vec<(u32, u32)> = Vec::new(); // (entry, device)
    let mut devices = 0u32;
    if let Some(traces) = traces_v {
        let lists = machine.list(traces).ok_or_else(|| {
            SnapshotError::Schema(format!(
                "device_traces is {}, not a list (one list per device)",
                traces.describe(&machine.strings)
            ))
        })?;
        devices = lists.len() as u32;
        for (device, list) in lists.iter().enumerate() {
            let items = machine.list(*list).ok_or_else(|| {
                SnapshotError::Schema(format!(
                    "device_traces[{device}] is {}, not a list of trace entries",
                    list.describe(&machine.strings)
                ))
            })?;
            for item in items {
                match machine.resolve(*item) {
                    Value::Entry(e) => device_of.push((e, device as u32)),
                    other => {
                        return Err(SnapshotError::Schema(format!(
                            "device_traces[{device}] holds {}, not a trace entry (a dict with action)",
                            other.describe(&machine.strings)
                        )));
                    }
                }
            }
        }
    }

    let mut segments = Vec::new();
    if let Some(list) = segments_v {
        let items: Vec<Value> = machine
            .list(list)
            .ok_or_else(|| {
                SnapshotError::Schema(format!(
                    "segments is {}, not a list",
                    list.describe(&machine.strings)
                ))
            })?
            .to_vec();
        segments = read_segments(&mut machine, &items)?;
        devices = segments
            .iter()
            .map(|s| s.device + 1)
            .fold(devices, u32::max);
    }

    let mut annotations = Vec::new();
    if let Some(items) = annotations_v.and_then(|list| machine.list(list)) {
        for (i, item) in items.iter().enumerate() {
            let a = read_annotation(&machine, *item)
                .map_err(|e| SnapshotError::Schema(format!("external_annotations[{i}]: {e}")))?;
            annotations.push(a);
        }
    }

    let mut allocator_settings = Vec::new();
    if let Some(pairs) = settings_v.and_then(|v| machine.dict(v)) {
        for (k, v) in pairs {
            let key = machine.str(*k).unwrap_or("?").to_owned();
            let value = match v {
                Value::Str(_) => machine.str(*v).unwrap_or("").to_owned(),
                Value::Int(i) => i.to_string(),
                Value::U64(u) => u.to_string(),
                Value::Float(f) | Value::Huge(f) => f.to_string(),
                Value::Bool(b) => b.to_string(),
                Value::None => "None".to_owned(),
                _ => "…".to_owned(),
            };
            allocator_settings.push((key, value));
        }
    }

    let parts = machine.into_parts();
    let mut entries = parts.entries;
    let in_order = device_of.len() == entries.len()
        && device_of
            .iter()
            .enumerate()
            .all(|(i, (e, _))| *e as usize == i);
    if in_order {
        for (entry, (_, device)) in entries.iter_mut().zip(&device_of) {
            entry.device = *device;
        }
    } else {
        // An entry object listed twice (or out of order): the traces as they list them.
        entries = device_of
            .iter()
            .filter_map(|&(e, device)| {
                entries
                    .get(e as usize)
                    .map(|entry| TraceEntry { device, ..*entry })
            })
            .collect();
    }
    drop(device_of);
    entries.shrink_to_fit();
    Ok(Snapshot {
        strings: parts.strings,
        frames: parts.frames,
        stack_frames: parts.stack_frames,
        stack_starts: parts.stack_starts,
        entries,
        segments,
        annotations,
        allocator_settings,
        devices,
        streams: parts.streams,
        other_actions: parts.other_actions,
    })
}

fn describe_top(machine: &Machine<'_>, value: Value) -> String {
    match machine.obj(value) {
        Some(pickle::Obj::List(items)) => format!("a list of {}", count(items.len(), "item")),
        Some(pickle::Obj::Tuple(items)) => format!("a tuple of {}", count(items.len(), "item")),
        Some(pickle::Obj::Set(_)) => "a set".to_owned(),
        _ => value.describe(&machine.strings),
    }
}

/// `1 block`, `3 blocks`, `2 entries`.
pub fn count(n: usize, what: &str) -> String {
    match (n, what.strip_suffix('y')) {
        (1, _) => format!("1 {what}"),
        (_, Some(stem)) => format!("{n} {stem}ies"),
        _ => format!("{n} {what}s"),
    }
}

fn field(pairs: &[(Value, Value)], key: u32) -> Option<Value> {
    pairs
        .iter()
        .find(|(k, _)| *k == Value::Str(key))
        .map(|(_, v)| *v)
}

fn number(machine: &Machine<'_>, pairs: &[(Value, Value)], key: u32) -> Result<u64, String> {
    match field(pairs, key) {
        None | Some(Value::None) => Ok(0),
        Some(v) => v.as_u64().ok_or_else(|| {
            format!(
                "{} is {}, not a non-negative 64-bit integer",
                pickle::KEYS[key as usize],
                v.describe(&machine.strings)
            )
        }),
    }
}

fn read_segments(
    machine: &mut Machine<'_>,
    items: &[Value],
) -> Result<Vec<Segment>, SnapshotError> {
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            read_segment(machine, *item)
                .map_err(|e| SnapshotError::Schema(format!("segments[{i}]: {e}")))
        })
        .collect()
}

/// A number the schema requires.
fn required(machine: &Machine<'_>, pairs: &[(Value, Value)], key: u32) -> Result<u64, String> {
    if field(pairs, key).is_none() {
        return Err(format!("{} is missing", pickle::KEYS[key as usize]));
    }
    number(machine, pairs, key)
}

fn read_segment(machine: &mut Machine<'_>, value: Value) -> Result<Segment, String> {
    let pairs = machine
        .dict(value)
        .ok_or_else(|| format!("{}, not a dict", value.describe(&machine.strings)))?
        .to_vec();
    let device = u32::try_from(number(machine, &pairs, pickle::K_DEVICE)?)
        .map_err(|_| "device is out of range".to_owned())?;
    let segment_type = field(&pairs, pickle::K_SEGMENT_TYPE)
        .and_then(|v| machine.str(v))
        .unwrap_or("")
        .to_owned();
    let address = number(machine, &pairs, pickle::K_ADDRESS)?;
    let mut blocks = Vec::new();
    if let Some(list) = field(&pairs, pickle::K_BLOCKS) {
        let items = machine
            .list(list)
            .ok_or_else(|| format!("blocks is {}, not a list", list.describe(&machine.strings)))?
            .to_vec();
        // Blocks tile their segment in address order; older snapshots give no address (or
        // only in `history`), so a block without one starts where the one before it ends.
        let mut next = address;
        for (i, item) in items.into_iter().enumerate() {
            let block = read_block(machine, item, next).map_err(|e| format!("blocks[{i}]: {e}"))?;
            next = block.address.saturating_add(block.size);
            blocks.push(block);
        }
    }
    Ok(Segment {
        device,
        address,
        total_size: required(machine, &pairs, pickle::K_TOTAL_SIZE)?,
        allocated_size: number(machine, &pairs, pickle::K_ALLOCATED_SIZE)?,
        segment_type,
        stream: number(machine, &pairs, pickle::K_STREAM).unwrap_or(0),
        blocks,
    })
}

/// `next`: where the block starts if it names no address.
fn read_block(machine: &mut Machine<'_>, value: Value, next: u64) -> Result<Block, String> {
    let pairs = machine
        .dict(value)
        .ok_or_else(|| format!("{}, not a dict", value.describe(&machine.strings)))?
        .to_vec();
    let state = match field(&pairs, pickle::K_STATE).and_then(|v| machine.str(v)) {
        Some("active_allocated") => BlockState::ActiveAllocated,
        Some("active_pending_free" | "active_awaiting_free") => BlockState::ActivePendingFree,
        Some("inactive") => BlockState::Inactive,
        _ => BlockState::Other,
    };
    // Frames: on the block (current PyTorch), or in the newest entry of its `history` (older).
    let mut frames = field(&pairs, pickle::K_FRAMES);
    let mut requested = number(machine, &pairs, pickle::K_REQUESTED_SIZE)?;
    let mut address = field(&pairs, pickle::K_ADDRESS)
        .is_some()
        .then(|| number(machine, &pairs, pickle::K_ADDRESS))
        .transpose()?;
    if frames.is_none()
        && let Some(history) = field(&pairs, pickle::K_HISTORY)
    {
        let last = machine
            .list(history)
            .ok_or_else(|| {
                format!(
                    "history is {}, not a list",
                    history.describe(&machine.strings)
                )
            })?
            .last()
            .copied();
        if let Some(last) = last {
            let h = machine
                .dict(last)
                .ok_or_else(|| "history holds something that is not a dict".to_owned())?
                .to_vec();
            frames = field(&h, pickle::K_FRAMES);
            if requested == 0 {
                requested = number(machine, &h, pickle::K_REAL_SIZE)?;
            }
            if address.is_none() && field(&h, pickle::K_ADDR).is_some() {
                address =
                    Some(number(machine, &h, pickle::K_ADDR).map_err(|e| format!("history: {e}"))?);
            }
        }
    }
    let stack = machine.stack_of(0, frames).map_err(|e| match e {
        SnapshotError::Pickle { message, .. } => message,
        other => other.to_string(),
    })?;
    Ok(Block {
        address: address.unwrap_or(next),
        size: required(machine, &pairs, pickle::K_SIZE)?,
        requested_size: requested,
        state,
        stack,
    })
}

fn read_annotation(machine: &Machine<'_>, value: Value) -> Result<Annotation, String> {
    let pairs = machine
        .dict(value)
        .ok_or_else(|| format!("{}, not a dict", value.describe(&machine.strings)))?;
    let stage = field(pairs, pickle::K_STAGE).and_then(|v| machine.str(v));
    let start = match stage {
        Some("START") => true,
        Some("END") => false,
        other => return Err(format!("stage is {other:?}, not START or END")),
    };
    let name = field(pairs, pickle::K_NAME)
        .and_then(|v| machine.str(v))
        .unwrap_or("")
        .to_owned();
    let time_us = field(pairs, pickle::K_TIME_US)
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let device = field(pairs, pickle::K_DEVICE)
        .and_then(Value::as_u64)
        .map_or(0, |d| u32::try_from(d).unwrap_or(0));
    Ok(Annotation {
        device,
        start,
        name,
        time_us,
    })
}

impl Snapshot {
    /// The CUDA stream of a trace entry.
    pub fn stream(&self, entry: &TraceEntry) -> u64 {
        self.streams
            .get(usize::from(entry.stream))
            .copied()
            .unwrap_or(0)
    }

    /// A string by id ("" when out of range).
    pub fn string(&self, id: u32) -> &str {
        self.strings.get(id as usize).map_or("", |s| s)
    }

    /// The frames of a stack, innermost first.
    pub fn stack(&self, id: u32) -> impl Iterator<Item = &Frame> {
        let i = id as usize;
        let start = self.stack_starts.get(i).copied().unwrap_or(0) as usize;
        let end = self.stack_starts.get(i + 1).copied().unwrap_or(0) as usize;
        self.stack_frames
            .get(start..end)
            .unwrap_or(&[])
            .iter()
            .filter_map(|&f| self.frames.get(f as usize))
    }

    /// How many distinct stacks.
    pub fn stack_count(&self) -> usize {
        self.stack_starts.len().saturating_sub(1)
    }

    /// A frame as `name (file:line)`.
    pub fn frame_text(&self, frame: &Frame) -> String {
        let file = self.string(frame.filename);
        if frame.line > 0 && frame.line < u64::from(u32::MAX) {
            format!("{} ({file}:{})", self.string(frame.name), frame.line)
        } else if file.is_empty() || file == "??" {
            self.string(frame.name).to_owned()
        } else {
            format!("{} ({file})", self.string(frame.name))
        }
    }

    /// The frames worth showing first: Python frames (a `.py` file) when the stack has any,
    /// else the C++ frames outside the allocator itself.
    pub fn user_frames(&self, stack: u32) -> Vec<&Frame> {
        let python: Vec<&Frame> = self
            .stack(stack)
            .filter(|f| self.string(f.filename).ends_with(".py"))
            .collect();
        if !python.is_empty() {
            return python;
        }
        self.stack(stack)
            .filter(|f| {
                let name = self.string(f.name);
                !(name.contains("CachingAllocator")
                    || name.starts_with("torch::unwind")
                    || name.starts_with("torch::CapturedTraceback")
                    || name.contains("gather_with_cpp"))
            })
            .collect()
    }

    /// The first and last time of the trace, µs since the epoch.
    pub fn time_range_us(&self) -> Option<(i64, i64)> {
        let times = self
            .entries
            .iter()
            .map(|e| e.time_us)
            .chain(self.annotations.iter().map(|a| a.time_us))
            .filter(|&t| t > 0);
        let (mut lo, mut hi) = (i64::MAX, i64::MIN);
        for t in times {
            lo = lo.min(t);
            hi = hi.max(t);
        }
        (lo <= hi).then_some((lo, hi))
    }

    /// Per device, allocated and reserved bytes at the start of the trace: what the segments hold
    /// at snapshot time minus what the trace added (the trace is a ring buffer: it may start
    /// long after the first allocation).
    fn baselines(&self) -> BTreeMap<u32, (i128, i128)> {
        let mut end: BTreeMap<u32, (i128, i128)> = BTreeMap::new();
        for s in &self.segments {
            let e = end.entry(s.device).or_default();
            e.1 += i128::from(s.total_size);
            e.0 += s
                .blocks
                .iter()
                .filter(|b| b.state != BlockState::Inactive)
                .map(|b| i128::from(b.size))
                .sum::<i128>();
        }
        let mut net: BTreeMap<u32, (i128, i128)> = BTreeMap::new();
        for e in &self.entries {
            if let Some((a, r)) = e.action.change(e.size) {
                let n = net.entry(e.device).or_default();
                n.0 += a;
                n.1 += r;
            }
        }
        let known = !self.segments.is_empty();
        let mut base = BTreeMap::new();
        for device in end.keys().chain(net.keys()) {
            let (ea, er) = end.get(device).copied().unwrap_or_default();
            let (na, nr) = net.get(device).copied().unwrap_or_default();
            let a = if known { (ea - na).max(0) } else { 0 };
            let r = if known { (er - nr).max(0) } else { 0 };
            base.insert(*device, (a, r));
        }
        base
    }

    /// Phase spans per device: (start µs, end µs, name), from `external_annotations` START/END
    /// pairs and from runs of equal `user_metadata`.
    pub fn phase_spans(&self) -> Vec<(u32, i64, i64, String)> {
        let mut spans = Vec::new();
        let mut open: HashMap<(u32, &str), Vec<i64>> = HashMap::new();
        for a in &self.annotations {
            if a.start {
                open.entry((a.device, &a.name)).or_default().push(a.time_us);
            } else if let Some(start) = open
                .get_mut(&(a.device, a.name.as_str()))
                .and_then(Vec::pop)
            {
                spans.push((a.device, start, a.time_us, a.name.clone()));
            }
        }
        let mut current: Option<(u32, i64, u32)> = None; // device, start, metadata
        let mut last_time = 0i64;
        for e in &self.entries {
            let changed = match (current, e.user_metadata()) {
                (Some((d, _, m)), Some(n)) => d != e.device || m != n,
                (Some(_), None) | (None, Some(_)) => true,
                (None, None) => false,
            };
            if changed {
                if let Some((d, start, m)) = current.take() {
                    spans.push((d, start, last_time, self.string(m).to_owned()));
                }
                current = e.user_metadata().map(|m| (e.device, e.time_us, m));
            }
            last_time = e.time_us;
        }
        if let Some((d, start, m)) = current {
            spans.push((d, start, last_time, self.string(m).to_owned()));
        }
        spans.sort_by_key(|s| (s.1, s.0));
        spans
    }

    /// The trace as a recording: allocated and reserved curves per device (one allocator
    /// reading per entry that changes them), OOMs, and phases from annotations and
    /// `user_metadata`. Times are relative to the first entry.
    pub fn to_recording(&self) -> Recording {
        let (t0, _) = self.time_range_us().unwrap_or((0, 0));
        let t_ns = |us: i64| {
            u64::try_from(us.saturating_sub(t0))
                .unwrap_or(0)
                .saturating_mul(1000)
        };
        let mut header = Header::new(
            u64::try_from(t0).unwrap_or(0).saturating_mul(1000),
            String::new(),
            vec!["torch.cuda.memory._dump_snapshot".to_owned()],
        );
        header.devices = (0..self.devices.max(1))
            .map(|index| Device {
                index,
                name: format!("cuda:{index}"),
                uuid: String::new(),
                total_bytes: 0,
            })
            .collect();
        let mut recording = Recording::new(header);
        let origin = Origin { pid: 0, rank: None };
        let base = self.baselines();
        let mut level: BTreeMap<u32, (i128, i128, i128)> =
            base.iter().map(|(d, (a, r))| (*d, (*a, *r, *a))).collect();
        recording.allocator.reserve(self.entries.len());
        for e in &self.entries {
            let l = level.entry(e.device).or_default();
            if e.action == Action::Oom {
                recording.push(Record::Oom(Oom {
                    t_ns: t_ns(e.time_us),
                    device: Some(e.device),
                    rank: None,
                    tried_bytes: Some(e.size),
                    capacity_bytes: None,
                    free_bytes: Some(e.device_free),
                    allocated_bytes: u64::try_from(l.0).ok(),
                    reserved_unallocated_bytes: u64::try_from(l.1 - l.0).ok(),
                    message: format!(
                        "out of memory on cuda:{}: tried to allocate {} bytes with {} bytes free",
                        e.device, e.size, e.device_free
                    ),
                }));
                continue;
            }
            let Some((a, r)) = e.action.change(e.size) else {
                continue;
            };
            l.0 += a;
            l.1 += r;
            l.2 = l.2.max(l.0);
            let clamp = |v: i128| u64::try_from(v.max(0)).unwrap_or(u64::MAX);
            recording.allocator.push(AllocatorSample {
                t_ns: t_ns(e.time_us),
                origin,
                device: e.device,
                allocated: clamp(l.0),
                reserved: clamp(l.1),
                peak: clamp(l.2),
                ..AllocatorSample::default()
            });
        }
        for (device, start, end, name) in self.phase_spans() {
            let phase = Phase::from(name);
            for (edge, t) in [(Edge::Begin, start), (Edge::End, end)] {
                recording.phases.push(PhaseEdge {
                    t_ns: t_ns(t),
                    edge,
                    phase: phase.clone(),
                    step: None,
                    origin: Origin {
                        pid: 0,
                        rank: Some(device),
                    },
                    host_heap: None,
                    host_rss: None,
                });
            }
        }
        recording.phases.sort_by_key(|p| p.t_ns);
        recording.push(Record::Note(Note {
            t_ns: 0,
            text: format!(
                "imported from a PyTorch memory snapshot: {} trace entries on {} device(s), {} segments",
                self.entries.len(),
                self.devices,
                self.segments.len()
            ),
        }));
        recording.shrink_to_fit();
        recording
    }

    /// The blocks alive at `time_us` (µs since the epoch; `i64::MAX` for the end), largest
    /// first, on `device` or on all devices.
    pub fn live_blocks_at(&self, time_us: i64, device: Option<u32>) -> Vec<LiveBlock> {
        let mut live: HashMap<(u32, u64), LiveBlock> = HashMap::new();
        // Blocks alive before the trace starts: freed in the trace without being allocated in
        // it, or still active at the end without an allocation in the trace.
        let mut allocated_in_trace: HashMap<(u32, u64), bool> = HashMap::new();
        for e in &self.entries {
            if device.is_some_and(|d| d != e.device) {
                continue;
            }
            let key = (e.device, e.addr);
            match e.action {
                Action::Alloc => {
                    allocated_in_trace.insert(key, true);
                    if e.time_us <= time_us {
                        live.insert(
                            key,
                            LiveBlock {
                                device: e.device,
                                addr: e.addr,
                                size: e.size,
                                allocated_us: Some(e.time_us),
                                stack: e.stack,
                            },
                        );
                    }
                }
                Action::FreeCompleted => {
                    let seen = allocated_in_trace.contains_key(&key);
                    if e.time_us <= time_us {
                        live.remove(&key);
                    } else if !seen {
                        // Allocated before the trace, freed after `time_us`: alive then.
                        live.entry(key).or_insert(LiveBlock {
                            device: e.device,
                            addr: e.addr,
                            size: e.size,
                            allocated_us: None,
                            stack: e.stack,
                        });
                    }
                    allocated_in_trace.entry(key).or_insert(false);
                }
                _ => {}
            }
        }
        for s in &self.segments {
            if device.is_some_and(|d| d != s.device) {
                continue;
            }
            for b in &s.blocks {
                let key = (s.device, b.address);
                if b.state != BlockState::Inactive && !allocated_in_trace.contains_key(&key) {
                    live.entry(key).or_insert(LiveBlock {
                        device: s.device,
                        addr: b.address,
                        size: b.size,
                        allocated_us: None,
                        stack: b.stack,
                    });
                }
            }
        }
        let mut blocks: Vec<LiveBlock> = live.into_values().collect();
        blocks.sort_by(|a, b| b.size.cmp(&a.size).then(a.addr.cmp(&b.addr)));
        blocks
    }

    /// Allocation sites whose blocks, allocated inside a phase that repeats, are still alive at
    /// the end — from several occurrences of that phase. Without phases: sites that left blocks
    /// alive at three or more different times. Largest first.
    pub fn leak_suspects(&self) -> Vec<LeakSuspect> {
        self.leak_suspects_among(&self.live_blocks_at(i64::MAX, None))
    }

    /// [`Snapshot::leak_suspects`] among blocks already found alive at the end.
    pub fn leak_suspects_among(&self, alive: &[LiveBlock]) -> Vec<LeakSuspect> {
        let spans = self.phase_spans();
        // Occurrences per (device, phase name), in time order.
        let mut occurrences: BTreeMap<(u32, &str), Vec<(i64, i64)>> = BTreeMap::new();
        for (d, s, e, name) in &spans {
            occurrences
                .entry((*d, name.as_str()))
                .or_default()
                .push((*s, *e));
        }
        type Key<'a> = (u32, u32, Option<&'a str>);
        let mut groups: HashMap<Key<'_>, (std::collections::HashSet<usize>, usize, u64)> =
            HashMap::new();
        for b in alive {
            let Some(t) = b.allocated_us else { continue };
            let mut found = false;
            for ((d, name), occ) in &occurrences {
                if *d != b.device || occ.len() < 2 {
                    continue;
                }
                // The innermost occurrence containing t.
                if let Some(i) = occ.iter().position(|(s, e)| *s <= t && t <= *e) {
                    let g = groups.entry((b.device, b.stack, Some(name))).or_default();
                    g.0.insert(i);
                    g.1 += 1;
                    g.2 += b.size;
                    found = true;
                    break;
                }
            }
            if !found && occurrences.is_empty() {
                let g = groups.entry((b.device, b.stack, None)).or_default();
                // Without phases, count distinct allocation times (coarsely, per millisecond).
                let ms = usize::try_from(t / 1000).unwrap_or(0);
                g.0.insert(ms);
                g.1 += 1;
                g.2 += b.size;
            }
        }
        let mut suspects: Vec<LeakSuspect> = groups
            .into_iter()
            .filter(|((_, _, phase), (occ, _, _))| occ.len() >= if phase.is_some() { 2 } else { 3 })
            .map(
                |((device, stack, phase), (occ, blocks, bytes))| LeakSuspect {
                    device,
                    stack,
                    of: phase
                        .and_then(|p| occurrences.get(&(device, p)))
                        .map_or(0, Vec::len),
                    phase: phase.map(str::to_owned),
                    occurrences: occ.len(),
                    blocks,
                    bytes,
                },
            )
            .collect();
        suspects.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.stack.cmp(&b.stack)));
        suspects
    }

    /// The segments' state per device at snapshot time.
    pub fn segment_summary(&self) -> Vec<SegmentSummary> {
        let mut out: BTreeMap<u32, SegmentSummary> = BTreeMap::new();
        for s in &self.segments {
            let sum = out.entry(s.device).or_insert_with(|| SegmentSummary {
                device: s.device,
                ..SegmentSummary::default()
            });
            sum.segments += 1;
            sum.reserved += s.total_size;
            for b in &s.blocks {
                match b.state {
                    BlockState::ActiveAllocated => sum.allocated += b.size,
                    BlockState::ActivePendingFree => sum.pending_free += b.size,
                    BlockState::Inactive => {
                        sum.free += b.size;
                        sum.free_pieces += 1;
                        sum.largest_free = sum.largest_free.max(b.size);
                    }
                    BlockState::Other => {}
                }
            }
        }
        out.into_values().collect()
    }

    /// Trace entries per action name, in a stable order.
    pub fn action_counts(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for e in &self.entries {
            *counts.entry(e.action.name(self).to_owned()).or_insert(0) += 1;
        }
        counts
    }
}

/// Whether `bytes` look like a pickle (protocol 2 or newer) rather than a recording.
pub fn is_pickle(bytes: &[u8]) -> bool {
    bytes.len() >= 2 && bytes[0] == 0x80 && (2..=5).contains(&bytes[1])
}
