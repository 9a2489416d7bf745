//! Reading a snapshot pickle: the unpickler ([`super::pickle`]) runs over the bytes, then the
//! snapshot's shapes (a dict with `segments` and `device_traces`, or a bare list of segments) are
//! read out of what it built.

use std::mem::MaybeUninit;

use super::pickle::{self, Machine, Value};
use super::{Annotation, Block, BlockState, Entries, Segment, Snapshot, SnapshotError, TraceEntry};
use crate::format::count;

/// Reads a snapshot pickle held in memory.
pub fn read_snapshot(bytes: &[u8]) -> Result<Snapshot, SnapshotError> {
    read_with(bytes, true)
}

/// [`read_snapshot`] without the trace entry's fast path: for the tests that hold both paths
/// to one answer.
#[doc(hidden)]
pub fn read_snapshot_general(bytes: &[u8]) -> Result<Snapshot, SnapshotError> {
    read_with(bytes, false)
}

fn read_with(bytes: &[u8], fast: bool) -> Result<Snapshot, SnapshotError> {
    check_start(bytes)?;
    let mut machine = Machine::new(bytes);
    machine.fast = fast;
    let top = machine.run()?;
    snapshot_of(machine, top)
}

/// Reads a snapshot pickle part by part, as it arrives (from a file, or from the network in a
/// browser tab): it holds what the parser has found and the bytes of one window (4 MiB, or
/// the one opcode that is longer), never the whole file. The same snapshot as
/// [`read_snapshot`] of all the parts together, whatever the parts' sizes.
pub struct SnapshotReader {
    /// The machine between windows (reading no bytes); `None` only while it runs.
    machine: Option<Machine<'static>>,
    /// Bytes that arrived, those from `start` on not read yet.
    waiting: Vec<u8>,
    /// Where the bytes not read yet begin in `waiting`.
    start: usize,
    /// Where `waiting[start..]` starts in the pickle.
    base: u64,
    /// The top-level value, once STOP was read (bytes after it are ignored, as Python does).
    top: Option<Value>,
    /// The first bytes were checked to be a pickle.
    started: bool,
    /// The parser runs once this many bytes wait.
    window: usize,
}

/// What [`SnapshotReader::read_all`] could not do: read its source, or parse what came.
#[cfg(not(target_arch = "wasm32"))] // Files are read natively only.
#[derive(Debug)]
pub(crate) enum SourceError {
    Io(std::io::Error),
    Snapshot(SnapshotError),
}

/// The parser runs once this much has arrived.
const WINDOW: usize = 4 << 20;

/// What writes `len` bytes into the room it is given, and returns them written (as
/// `js_sys::Uint8Array::copy_to_uninit` and `<[MaybeUninit<u8>]>::write_copy_of_slice` do).
pub trait Fill: for<'a> FnOnce(&'a mut [MaybeUninit<u8>]) -> &'a mut [u8] {}

impl<F: for<'a> FnOnce(&'a mut [MaybeUninit<u8>]) -> &'a mut [u8]> Fill for F {}

/// Appends `len` bytes to `bytes`, written by `fill` straight into its spare room: neither
/// zeroed first nor copied again (hundreds of megabytes arriving in a tab).
pub fn append_filled(bytes: &mut Vec<u8>, len: usize, fill: impl Fill) {
    bytes.reserve(len);
    let at = bytes.len();
    let room = &mut bytes.spare_capacity_mut()[..len];
    let start = room.as_ptr().cast::<u8>();
    let written = fill(room);
    if written.as_ptr() == start && written.len() == len {
        // SAFETY: `written`, a `&mut [u8]` over exactly the `len` bytes after `at`, holds
        // them initialized.
        unsafe { bytes.set_len(at + len) };
    } else {
        // What `fill` wrote lies elsewhere: copied.
        let written = written.to_vec();
        bytes.extend_from_slice(&written);
    }
}

impl Default for SnapshotReader {
    fn default() -> Self {
        Self::new()
    }
}

impl SnapshotReader {
    /// A reader that has read nothing yet.
    pub fn new() -> Self {
        Self::with_window(WINDOW)
    }

    /// A reader whose parser runs each time `window` bytes (at least 1) have arrived.
    pub fn with_window(window: usize) -> Self {
        Self {
            machine: Some(Machine::new(&[])),
            waiting: Vec::new(),
            start: 0,
            base: 0,
            top: None,
            started: false,
            window: window.max(1),
        }
    }

    /// Reads the next part of the pickle. An error is the file's (the reader is done then).
    pub fn push(&mut self, bytes: &[u8]) -> Result<(), SnapshotError> {
        self.push_from(bytes.len(), |room| room.write_copy_of_slice(bytes))
    }

    /// Reads the next `len` bytes of the pickle, which `fill` writes straight into the reader's
    /// window (a browser's part, copied into the tab's memory once, not into a buffer and then
    /// again here). An error is the file's (the reader is done then).
    pub fn push_from(&mut self, len: usize, fill: impl Fill) -> Result<(), SnapshotError> {
        if self.top.is_some() {
            return Ok(());
        }
        self.compact();
        append_filled(&mut self.waiting, len, fill);
        if self.waiting.len() >= self.window {
            self.run(true)?;
        }
        Ok(())
    }

    /// Moves the bytes not read yet to the front of `waiting`.
    fn compact(&mut self) {
        if self.start > 0 {
            self.waiting.drain(..self.start);
            self.start = 0;
        }
    }

    /// Reads the whole pickle from `source`, which a thread of its own reads part after part
    /// while the parser runs over the part before: the file's bytes are copied once, by the
    /// kernel, into parts that take turns (each with room in front for what the part before
    /// left unread: an opcode cut in two).
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn read_all(
        mut self,
        source: impl std::io::Read + Send,
    ) -> Result<Snapshot, SourceError> {
        use std::io::Read as _;
        use std::sync::mpsc;
        let (window, head) = (self.window, (self.window / 16).max(16));
        std::thread::scope(|scope| {
            let (full, arriving) = mpsc::sync_channel::<std::io::Result<Vec<u8>>>(1);
            let (spent, reusable) = mpsc::channel::<Vec<u8>>();
            scope.spawn(move || {
                let mut source = source;
                loop {
                    let mut part = reusable
                        .try_recv()
                        .unwrap_or_else(|_| Vec::with_capacity(head + window));
                    part.clear();
                    part.resize(head, 0);
                    let read = (&mut source).take(window as u64).read_to_end(&mut part);
                    // Nobody listens once the parser is done (or failed): stop reading.
                    match read {
                        Ok(0) => return,
                        Ok(_) => {
                            if full.send(Ok(part)).is_err() {
                                return;
                            }
                        }
                        Err(err) => {
                            let _ = full.send(Err(err));
                            return;
                        }
                    }
                }
            });
            for part in arriving {
                let part = part.map_err(SourceError::Io)?;
                let part = self.push_part(part, head).map_err(SourceError::Snapshot)?;
                let _ = spent.send(part);
                if self.top.is_some() {
                    break;
                }
            }
            Ok(())
        })?;
        self.finish().map_err(SourceError::Snapshot)
    }

    /// Takes a part whose first `head` bytes are room for the bytes the last part left unread;
    /// gives back a buffer to read into again.
    #[cfg(not(target_arch = "wasm32"))]
    fn push_part(&mut self, mut part: Vec<u8>, head: usize) -> Result<Vec<u8>, SnapshotError> {
        if self.top.is_some() {
            return Ok(part);
        }
        let unread = self.waiting.len() - self.start;
        let spent = if unread <= head {
            let at = head - unread;
            part[at..head].copy_from_slice(&self.waiting[self.start..]);
            self.start = at;
            std::mem::replace(&mut self.waiting, part)
        } else {
            // An opcode longer than the room (a long string): copied after it.
            self.compact();
            self.waiting.extend_from_slice(&part[head..]);
            part
        };
        if self.waiting.len() - self.start >= self.window {
            self.run(true)?;
        }
        Ok(spent)
    }

    /// The snapshot, once every part has been pushed.
    pub fn finish(mut self) -> Result<Snapshot, SnapshotError> {
        if self.top.is_none() {
            self.run(false)?;
        }
        match (self.machine, self.top) {
            (Some(machine), Some(top)) => snapshot_of(machine, top),
            _ => Err(SnapshotError::Pickle {
                offset: usize::try_from(self.base).unwrap_or(usize::MAX),
                message: "the reader stopped at an earlier error".to_owned(),
            }),
        }
    }

    /// Runs the parser over the bytes waiting; `more`: others will follow.
    fn run(&mut self, more: bool) -> Result<(), SnapshotError> {
        let unread = &self.waiting[self.start..];
        if !self.started {
            if more && unread.len() < 8 {
                return Ok(());
            }
            check_start(unread)?;
            self.started = true;
        }
        let Some(parked) = self.machine.take() else {
            return Ok(());
        };
        let mut machine = parked.over(unread, self.base, more);
        // After an error the machine is gone: the reader is done (`finish` says so).
        let ran = machine.run_window()?;
        let read = machine.read_to();
        self.machine = Some(machine.over(&[], 0, false));
        match ran {
            Some(top) => {
                self.top = Some(top);
                self.base += read as u64;
                self.waiting = Vec::new();
                self.start = 0;
            }
            None => {
                self.start += read;
                self.base += read as u64;
            }
        }
        Ok(())
    }
}

/// Refuses what is not a pickle from its first bytes, naming what it is.
fn check_start(bytes: &[u8]) -> Result<(), SnapshotError> {
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
    Ok(())
}

/// The snapshot in what the machine built, `top` its top-level value.
fn snapshot_of(mut machine: Machine<'_>, top: Value) -> Result<Snapshot, SnapshotError> {
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
            behind: parts.behind,
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
    let host_segments_v = find(pickle::K_HOST_SEGMENTS);
    let host_traces_v = find(pickle::K_HOST_TRACES);

    // Devices of the trace entries: device_traces[i] is device i. A device's trace is a run of
    // entries in order (what PyTorch writes), or any list of them.
    let mut runs: Vec<(u32, u32)> = Vec::new(); // per device: (first entry, count)
    let mut device_of: Vec<(u32, u32)> = Vec::new(); // (entry, device), when not runs
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
            if let Some(run) = machine.entry_run(*list) {
                runs.push(run);
                continue;
            }
            let items = machine.list(*list).ok_or_else(|| {
                SnapshotError::Schema(format!(
                    "device_traces[{device}] is {}, not a list of trace entries",
                    list.describe(&machine.strings)
                ))
            })?;
            runs.push((0, 0));
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

    // Pinned host memory (PyTorch 2.14+): one flat trace and segments of `device` -1, present
    // (and empty) in every snapshot of those versions; when it holds anything, it is one more
    // device, after the CUDA ones.
    let mut host = None;
    let host_trace = host_list(&machine, host_traces_v, "host_traces")?;
    let host_segments = host_list(&machine, host_segments_v, "host_segments")?;
    if host_trace.is_some() || host_segments.is_some() {
        let device = devices;
        host = Some(device);
        devices += 1;
        runs.resize(device as usize, (0, 0));
        match host_trace {
            Some(HostList::Run(run)) => runs.push(run),
            Some(HostList::Items(items)) => {
                runs.push((0, 0));
                for item in items {
                    match machine.resolve(item) {
                        Value::Entry(e) => device_of.push((e, device)),
                        other => {
                            return Err(SnapshotError::Schema(format!(
                                "host_traces holds {}, not a trace entry (a dict with action)",
                                other.describe(&machine.strings)
                            )));
                        }
                    }
                }
            }
            None => {}
        }
        if let Some(HostList::Items(items)) = host_segments {
            for (i, item) in items.into_iter().enumerate() {
                let segment = read_segment(&mut machine, item, Some(device))
                    .map_err(|e| SnapshotError::Schema(format!("host_segments[{i}]: {e}")))?;
                segments.push(segment);
            }
        }
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
    if devices > TraceEntry::MAX_DEVICE + 1 {
        return Err(SnapshotError::Schema(format!(
            "the snapshot has traces of {devices} devices; at most {} are read (PyTorch's device index is 8 bits)",
            TraceEntry::MAX_DEVICE + 1
        )));
    }
    // The runs, device after device, are every entry in order: each entry gets its device.
    let mut next = 0u64;
    let in_order = device_of.is_empty()
        && runs.iter().all(|&(first, len)| {
            let follows = len == 0 || u64::from(first) == next;
            next += u64::from(len);
            follows
        })
        && next == entries.len() as u64;
    if in_order {
        let lens: Vec<usize> = runs.iter().map(|&(_, len)| len as usize).collect();
        entries.give_devices(&lens);
    } else {
        // Entries listed twice, out of order or mixed with lists: the traces as they list them.
        let mut listed: Vec<(u32, u32)> = Vec::new();
        let mut lists = device_of.into_iter().peekable();
        for (device, &(first, len)) in runs.iter().enumerate() {
            listed.extend((first..first.saturating_add(len)).map(|e| (e, device as u32)));
            while let Some(&(e, d)) = lists.peek() {
                if d as usize != device {
                    break;
                }
                listed.push((e, d));
                lists.next();
            }
        }
        let mut traces = Entries::new();
        for &(e, device) in &listed {
            if let Some(entry) = entries.get(e as usize) {
                let free = entries.device_free(e as usize);
                traces.push_with_free(entry.on(device), free);
                if let Some(context) = entries.compile_context(e as usize) {
                    traces.set_compile_context(traces.len() - 1, context);
                }
                if let Some(metadata) = entries.user_metadata(e as usize) {
                    traces.set_user_metadata(traces.len() - 1, metadata);
                }
                if let Some(pool) = entries.pool(e as usize) {
                    traces.set_pool(traces.len() - 1, pool);
                }
            }
        }
        entries = traces;
    }
    entries.shrink_to_fit();
    Ok(Snapshot {
        strings: parts.strings,
        frames: parts.frames,
        stack_frames: parts.stack_frames,
        stack_starts: parts.stack_starts,
        behind: parts.behind,
        entries,
        segments,
        annotations,
        allocator_settings,
        devices,
        host,
        streams: parts.streams,
        other_actions: parts.other_actions,
    })
}

/// One of the pinned host memory's lists (`host_traces`, `host_segments`) with something in it.
enum HostList {
    /// Trace entries in order, as the machine keeps a list of them: (first entry, count).
    Run((u32, u32)),
    /// Any other list's items.
    Items(Vec<Value>),
}

/// `value` (`what` in the snapshot) as a [`HostList`]; `None` when it is absent or empty.
fn host_list(
    machine: &Machine<'_>,
    value: Option<Value>,
    what: &str,
) -> Result<Option<HostList>, SnapshotError> {
    let Some(value) = value else {
        return Ok(None);
    };
    if let Some(run) = machine.entry_run(value) {
        return Ok((run.1 > 0).then_some(HostList::Run(run)));
    }
    match machine.list(value) {
        Some([]) => Ok(None),
        Some(items) => Ok(Some(HostList::Items(items.to_vec()))),
        None => Err(SnapshotError::Schema(format!(
            "{what} is {}, not a list",
            value.describe(&machine.strings)
        ))),
    }
}

fn describe_top(machine: &Machine<'_>, value: Value) -> String {
    match machine.obj(value) {
        Some(pickle::Obj::List(items)) => format!("a list of {}", count(items.len(), "item")),
        Some(pickle::Obj::EntryRun { len, .. }) => {
            format!("a list of {}", count(*len as usize, "item"))
        }
        Some(pickle::Obj::Tuple(items)) => format!("a tuple of {}", count(items.len(), "item")),
        Some(pickle::Obj::Set(_)) => "a set".to_owned(),
        _ => value.describe(&machine.strings),
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
            read_segment(machine, *item, None)
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

/// `device`: the device it is on, when not its own `device` (pinned host memory's say -1).
fn read_segment(
    machine: &mut Machine<'_>,
    value: Value,
    device: Option<u32>,
) -> Result<Segment, String> {
    let pairs = machine
        .dict(value)
        .ok_or_else(|| format!("{}, not a dict", value.describe(&machine.strings)))?
        .to_vec();
    let device = match device {
        Some(device) => device,
        None => u32::try_from(number(machine, &pairs, pickle::K_DEVICE)?)
            .map_err(|_| "device is out of range".to_owned())?,
    };
    let segment_type = field(&pairs, pickle::K_SEGMENT_TYPE)
        .and_then(|v| machine.str(v))
        .unwrap_or("")
        .to_owned();
    let address = number(machine, &pairs, pickle::K_ADDRESS)?;
    let pool = match field(&pairs, pickle::K_SEGMENT_POOL_ID) {
        None | Some(Value::None) => None,
        Some(v) => Some(machine.pool_id(v).ok_or_else(|| {
            format!(
                "segment_pool_id is {}, not a pair of non-negative integers",
                v.describe(&machine.strings)
            )
        })?),
    }
    .filter(|p| p.is_private());
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
        pool,
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

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;

    fn data(name: &str) -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/snapshots")
            .join(name)
    }

    /// Read on a thread of its own, part after part, in parts of every size (small ones leave
    /// more unread than the room in front of the next part): the snapshot of the whole file.
    #[test]
    fn a_snapshot_read_on_a_thread_is_the_snapshot_of_its_bytes() {
        for name in [
            "mini_snapshot.pickle",
            "pinned_host.pickle",
            "real/bcrafton_cs336_training_step.pickle",
            "real/flexgen_oom_legacy_history.pickle",
            "real/verl_rollout_state.pickle",
        ] {
            let bytes = std::fs::read(data(name)).unwrap();
            let whole = format!("{:?}", read_snapshot(&bytes).unwrap());
            let smallest = if bytes.len() < 100_000 { 1 } else { 61 };
            for window in [smallest, 61, 4096, 1 << 16, WINDOW] {
                let file = std::fs::File::open(data(name)).unwrap();
                let read = SnapshotReader::with_window(window).read_all(file).unwrap();
                assert_eq!(format!("{read:?}"), whole, "{name} in windows of {window}");
            }
            // Bytes after the pickle's end are left unread, as Python leaves them.
            let mut longer = bytes.clone();
            longer.extend(std::iter::repeat_n(0xff, 3 << 20));
            let read = SnapshotReader::with_window(4096)
                .read_all(std::io::Cursor::new(longer))
                .unwrap();
            assert_eq!(format!("{read:?}"), whole, "{name} with bytes after it");
        }
    }

    /// A source that fails half way, and a file cut short: the error, not a snapshot.
    #[test]
    fn a_source_that_fails_or_ends_early_is_an_error() {
        struct Failing(std::io::Cursor<Vec<u8>>);
        impl std::io::Read for Failing {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                if self.0.position() > 5000 {
                    return Err(std::io::Error::other("the disk went away"));
                }
                self.0.read(buf)
            }
        }
        let bytes = std::fs::read(data("mini_snapshot.pickle")).unwrap();
        let failing = Failing(std::io::Cursor::new(bytes.clone()));
        match SnapshotReader::with_window(1000).read_all(failing) {
            Err(SourceError::Io(err)) => assert!(err.to_string().contains("went away"), "{err}"),
            other => panic!("{other:?}"),
        }
        let cut = std::io::Cursor::new(bytes[..bytes.len() / 2].to_vec());
        match SnapshotReader::with_window(1000).read_all(cut) {
            Err(SourceError::Snapshot(err)) => {
                assert!(err.to_string().contains("truncated"), "{err}")
            }
            other => panic!("{other:?}"),
        }
    }
}
