//! A snapshot's trace as a [`Recording`]: allocated and reserved curves per device, OOMs, and
//! phases from annotations and `user_metadata`.

use std::collections::{BTreeMap, HashMap};

use super::{Action, BlockState, Snapshot};
use crate::recording::{
    AllocatorReadings, Device, Edge, Header, Note, Oom, Origin, Phase, PhaseEdge, Record, Recording,
};

/// A phase of a snapshot: a `record_function` range (START to END) or a run of equal
/// `user_metadata`, on one device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PhaseSpan {
    /// The device.
    pub device: u32,
    /// When it starts, µs since the epoch.
    pub start_us: i64,
    /// When it ends, µs since the epoch.
    pub end_us: i64,
    /// The range's name or the metadata string.
    pub name: String,
}

impl Snapshot {
    /// Per device, allocated and reserved bytes at the start of the trace: what the segments hold
    /// at snapshot time minus what the trace added (the trace is a ring buffer: it may start
    /// long after the first allocation). A block counts the bytes it was asked for, as the
    /// trace's entries count them (and the memory timeline): the curve and the timeline are one
    /// quantity, their peaks one number.
    fn baselines(&self) -> BTreeMap<u32, (i128, i128)> {
        let mut end: BTreeMap<u32, (i128, i128)> = BTreeMap::new();
        for s in &self.segments {
            let e = end.entry(s.device).or_default();
            e.1 += i128::from(s.total_size);
            e.0 += s
                .blocks
                .iter()
                .filter(|b| b.state != BlockState::Inactive)
                .map(|b| i128::from(b.asked()))
                .sum::<i128>();
        }
        // Summed a run of one device's entries at a time (they come device after device), each
        // run in 64 bits (saturating: no real run comes near), the runs in 128.
        let mut net: BTreeMap<u32, (i128, i128)> = BTreeMap::new();
        let mut run: Option<(u32, i64, i64)> = None;
        let mut add = |(device, a, r): (u32, i64, i64)| {
            let n = net.entry(device).or_default();
            n.0 += i128::from(a);
            n.1 += i128::from(r);
        };
        // Entries all of one device (most snapshots): their sums were kept as they were read.
        let one = self.entries.only_device();
        if let Some(device) = one.filter(|_| self.entries.readings() > 0) {
            let (a, r) = self.entries.net();
            run = Some((device, a, r));
        }
        for e in one.is_none().then_some(&self.entries).into_iter().flatten() {
            if let Some((a, r)) = e.action().change(e.size) {
                match &mut run {
                    Some((device, na, nr)) if *device == e.device() => {
                        *na = na.saturating_add(a);
                        *nr = nr.saturating_add(r);
                    }
                    _ => {
                        if let Some(done) = run.replace((e.device(), a, r)) {
                            add(done);
                        }
                    }
                }
            }
        }
        if let Some(done) = run {
            add(done);
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

    /// Phase spans per device, from `external_annotations` START/END pairs and from runs of equal
    /// `user_metadata`, by start.
    pub fn phase_spans(&self) -> Vec<PhaseSpan> {
        let span = |device, start_us, end_us, name| PhaseSpan {
            device,
            start_us,
            end_us,
            name,
        };
        let mut spans = Vec::new();
        let mut open: HashMap<(u32, &str), Vec<i64>> = HashMap::new();
        for a in &self.annotations {
            if a.start {
                open.entry((a.device, &a.name)).or_default().push(a.time_us);
            } else if let Some(start) = open
                .get_mut(&(a.device, a.name.as_str()))
                .and_then(Vec::pop)
            {
                spans.push(span(a.device, start, a.time_us, a.name.clone()));
            }
        }
        // A run of entries one after another with equal metadata on one device; the entries
        // without metadata (most, in most snapshots) end a run. The run: its device, start and
        // metadata, its last entry and that one's time.
        let mut current: Option<(u32, i64, u32, u32, i64)> = None;
        for &(i, m) in self.entries.with_user_metadata() {
            let Some(e) = self.entries.get(i as usize) else {
                continue;
            };
            match &mut current {
                Some((d, _, cm, last, end))
                    if last.checked_add(1) == Some(i) && *d == e.device() && *cm == m =>
                {
                    (*last, *end) = (i, e.time_us);
                }
                _ => {
                    let run = (e.device(), e.time_us, m, i, e.time_us);
                    if let Some((d, start, m, _, end)) = current.replace(run) {
                        spans.push(span(d, start, end, self.string(m).to_owned()));
                    }
                }
            }
        }
        if let Some((d, start, m, _, end)) = current {
            spans.push(span(d, start, end, self.string(m).to_owned()));
        }
        spans.sort_by_key(|s| (s.start_us, s.device));
        spans
    }

    /// How many allocator readings [`Snapshot::to_recording`] makes: the entries that change
    /// allocated or reserved memory.
    pub fn reading_count(&self) -> usize {
        self.entries.readings()
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
            vec![crate::recording::Imported::Snapshot.command().to_owned()],
        );
        header.devices = (0..self.devices.max(1))
            .map(|index| Device {
                index,
                name: self.device_name(index),
                uuid: String::new(),
                total_bytes: 0,
            })
            .collect();
        let mut recording = Recording::new(header);
        let origin = Origin { pid: 0, rank: None };
        let base = self.baselines();
        // Allocated, reserved and peak bytes per device, in 64 bits (see `Action::change`).
        let narrow = |v: i128| i64::try_from(v).unwrap_or(i64::MAX);
        let mut level: BTreeMap<u32, Level> = base
            .iter()
            .map(|(d, (a, r))| (*d, (narrow(*a), narrow(*r), narrow(*a))))
            .collect();
        // Exactly as many as there will be: for millions, a vector that grows by copying (or
        // is reserved for every entry) costs a browser tab hundreds of megabytes.
        recording.allocator.reserve_exact(self.reading_count());
        // The readings go into the columns a batch at a time (entries come device after
        // device): millions of them, each column checked once a batch.
        let mut batch = ReadingBatch::default();
        for (i, e) in self.entries.iter().enumerate() {
            if e.action() == Action::Oom {
                let l = if batch.device == Some(e.device()) {
                    batch.level
                } else {
                    level.get(&e.device()).copied().unwrap_or_default()
                };
                let free = self.entries.device_free(i);
                recording.push(Record::Oom(Oom {
                    t_ns: t_ns(e.time_us),
                    device: Some(e.device()),
                    rank: None,
                    tried_bytes: Some(e.size),
                    capacity_bytes: None,
                    free_bytes: Some(free),
                    allocated_bytes: u64::try_from(l.0).ok(),
                    reserved_unallocated_bytes: u64::try_from(l.1.saturating_sub(l.0)).ok(),
                    private_pools_bytes: None,
                    process_bytes: None,
                    other_processes_bytes: None,
                    message: format!(
                        "out of memory on {}: tried to allocate {} bytes with {} bytes free",
                        self.device_name(e.device()),
                        e.size,
                        free
                    ),
                }));
                continue;
            }
            let Some((a, r)) = e.action().change(e.size) else {
                continue;
            };
            if batch.device != Some(e.device()) || batch.is_full() {
                batch.flush(&mut recording.allocator, &mut level, origin);
                batch.device = Some(e.device());
                batch.level = level.get(&e.device()).copied().unwrap_or_default();
            }
            let l = &mut batch.level;
            l.0 = l.0.saturating_add(a);
            l.1 = l.1.saturating_add(r);
            l.2 = l.2.max(l.0);
            let clamp = |v: i64| v.max(0).unsigned_abs();
            let (allocated, reserved, peak) = (clamp(l.0), clamp(l.1), clamp(l.2));
            batch.push(t_ns(e.time_us), allocated, reserved, peak);
        }
        batch.flush(&mut recording.allocator, &mut level, origin);
        for PhaseSpan {
            device,
            start_us: start,
            end_us: end,
            name,
        } in self.phase_spans()
        {
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
        for chunk in self.private_pool_chunks(&t_ns) {
            recording.push(Record::Chunk(chunk));
        }
        // Entries come device after device: the readings in time order, each device's kept.
        recording.allocator = merge_devices(std::mem::take(&mut recording.allocator));
        recording.phases = std::mem::take(&mut recording.phases).sorted_by_time();
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
}

impl Snapshot {
    /// Per device with memory in private pools (CUDA graphs, `torch.cuda.MemPool`), the bytes
    /// allocated in them over the trace (a series of [`SeriesKind::PrivatePools`], of which the
    /// allocated curve counts them too): a reading at the first entry and at each entry that
    /// changes them, ending at what the pools' segments hold at the snapshot. An entry's pool is
    /// its `pool_id` (PyTorch 2.14 and later), else the pool whose segment holds its address at
    /// the snapshot. Nothing where no entry or segment is in a private pool.
    fn private_pool_chunks(&self, t_ns: &impl Fn(i64) -> u64) -> Vec<crate::recording::Chunk> {
        use crate::recording::{Chunk, Column, SeriesKey, SeriesKind};
        // The entries in a private pool, by index (in order: found by walking along them).
        let by_entry = self.entries.in_pools();
        let mut next = 0;
        let mut end: BTreeMap<u32, i64> = BTreeMap::new();
        for segment in self.segments.iter().filter(|s| s.pool.is_some()) {
            let held: u64 = segment
                .blocks
                .iter()
                .filter(|b| b.state != BlockState::Inactive)
                .map(|b| b.asked())
                .sum();
            *end.entry(segment.device).or_default() += i64::try_from(held).unwrap_or(i64::MAX);
        }
        if by_entry.is_empty() && end.is_empty() {
            return Vec::new();
        }
        let segments = self.private_segments();
        let mut in_pool = |i: usize, device: u32, addr: u64| {
            if by_entry.is_empty() {
                return segments.pool_at(device, addr).is_some();
            }
            let i = u32::try_from(i).unwrap_or(u32::MAX);
            while by_entry.get(next).is_some_and(|&(e, _)| e < i) {
                next += 1;
            }
            by_entry.get(next).is_some_and(|&(e, _)| e == i)
        };
        // Per device: (time, change) of each entry in a pool, and when its first entry was.
        let mut changes: BTreeMap<u32, (i64, Vec<(u64, i64)>)> = BTreeMap::new();
        for (i, e) in self.entries.iter().enumerate() {
            let device = e.device();
            let (_, list) = changes
                .entry(device)
                .or_insert_with(|| (e.time_us, Vec::new()));
            if let Some((allocated, _)) = e.action().change(e.size)
                && allocated != 0
                && in_pool(i, device, e.addr)
            {
                list.push((t_ns(e.time_us), allocated));
            }
        }
        let mut chunks = Vec::new();
        for (device, (first_us, list)) in changes {
            let held = end.get(&device).copied().unwrap_or(0);
            if list.is_empty() && held == 0 {
                continue;
            }
            let net: i64 = list.iter().map(|&(_, c)| c).sum();
            let mut level = held.saturating_sub(net).max(0);
            let (mut times_ns, mut values) = (vec![t_ns(first_us)], vec![level.unsigned_abs()]);
            for (t, change) in list {
                level = level.saturating_add(change).max(0);
                // Times never go back within a chunk (a device's clock may step back).
                times_ns.push(t.max(times_ns.last().copied().unwrap_or(0)));
                values.push(level.unsigned_abs());
            }
            chunks.push(Chunk {
                times_ns,
                columns: vec![Column {
                    series: SeriesKey {
                        device: Some(device),
                        ..SeriesKey::new(SeriesKind::PrivatePools)
                    },
                    values,
                    valid: None,
                }],
            });
        }
        chunks
    }
}

/// A device's allocated, reserved and peak bytes.
type Level = (i64, i64, i64);

/// Allocator readings of one device waiting to go into the recording's columns together, and
/// the device's allocated, reserved and peak bytes after them.
#[derive(Default)]
struct ReadingBatch {
    device: Option<u32>,
    level: Level,
    t_ns: Vec<u64>,
    columns: [Vec<u64>; 3],
    zeros: Vec<u64>,
}

impl ReadingBatch {
    const LEN: usize = 4096;

    fn is_full(&self) -> bool {
        self.t_ns.len() >= Self::LEN
    }

    #[inline]
    fn push(&mut self, t_ns: u64, allocated: u64, reserved: u64, peak: u64) {
        self.t_ns.push(t_ns);
        let [a, r, p] = &mut self.columns;
        a.push(allocated);
        r.push(reserved);
        p.push(peak);
    }

    /// Moves the readings into `readings` and the device's level into `level`.
    fn flush(
        &mut self,
        readings: &mut AllocatorReadings,
        level: &mut BTreeMap<u32, Level>,
        origin: Origin,
    ) {
        let Some(device) = self.device else {
            return;
        };
        level.insert(device, self.level);
        if self.t_ns.is_empty() {
            return;
        }
        self.zeros.resize(self.t_ns.len(), 0);
        let [a, r, p] = &self.columns;
        readings.extend_from_one_source((origin, device), &self.t_ns, [a, r, p], &self.zeros);
        self.t_ns.clear();
        self.columns.iter_mut().for_each(Vec::clear);
    }
}

/// Readings that come device after device, merged by time; each device's own order is kept
/// (also where its clock stepped back), ties going to the device that came first.
fn merge_devices(readings: AllocatorReadings) -> AllocatorReadings {
    use std::cmp::Reverse;
    let mut runs: Vec<std::ops::Range<usize>> = Vec::new();
    for i in 0..readings.len() {
        match runs.last_mut() {
            Some(run) if readings.device(run.start) == readings.device(i) => run.end = i + 1,
            _ => runs.push(i..i + 1),
        }
    }
    if runs.len() < 2 {
        return readings;
    }
    let mut heads: std::collections::BinaryHeap<Reverse<(u64, usize)>> = runs
        .iter()
        .enumerate()
        .map(|(k, run)| Reverse((readings.t_ns(run.start), k)))
        .collect();
    let mut next: Vec<usize> = runs.iter().map(|run| run.start).collect();
    let mut out = AllocatorReadings::new();
    out.reserve_exact(readings.len());
    while let Some(Reverse((_, k))) = heads.pop() {
        out.push(readings.get(next[k]));
        next[k] += 1;
        if next[k] < runs[k].end {
            heads.push(Reverse((readings.t_ns(next[k]), k)));
        }
    }
    out
}
