//! A recording held in memory: its header, every sampled series whole, the probe's records by
//! column, and what the reader and the merge build on it.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{
    AllocatorReadings, Categories, Census, Chunk, Column, Dropped, End, Exit, Header, Note, Oom,
    PhaseEdge, PhaseEdges, Record, SavedFreed, SeriesKey, SeriesKind, SnapshotFile, Stall,
    Unobserved, Values, codec, wire,
};

/// One sampled series, all of it: the times at which it was measured and what it was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Series {
    /// What the series measures.
    pub key: SeriesKey,
    /// Sample times, nanoseconds after the start. Shared by the series sampled at the same
    /// instants (every device's memory is read at once): one column for all of them.
    pub times_ns: Arc<Vec<u64>>,
    /// The values, bytes. Unavailable samples are left out, never stored as zero.
    pub values: Values,
}

impl Series {
    /// Appends the samples `valid` says were measured (its own time column from here on).
    fn push_present(&mut self, times: &[u64], values: &[u64], valid: &[bool]) {
        let column = Arc::make_mut(&mut self.times_ns);
        let mut present = Vec::with_capacity(values.len());
        for ((&t, &v), &ok) in times.iter().zip(values).zip(valid) {
            if ok {
                column.push(t);
                present.push(v);
            }
        }
        self.values.extend_from_slice(&present);
    }

    /// The series sorted by time: borrowed when it already is (as the collector writes it), a
    /// sorted copy otherwise.
    pub fn sorted(&self) -> std::borrow::Cow<'_, Series> {
        if self.times_ns.windows(2).all(|w| w[0] <= w[1]) {
            return std::borrow::Cow::Borrowed(self);
        }
        let mut pairs: Vec<(u64, u64)> = self
            .times_ns
            .iter()
            .copied()
            .zip(self.values.iter())
            .collect();
        pairs.sort_by_key(|&(t, _)| t);
        let (times_ns, values): (Vec<u64>, Vec<u64>) = pairs.into_iter().unzip();
        std::borrow::Cow::Owned(Series {
            key: self.key.clone(),
            times_ns: Arc::new(times_ns),
            values: values.into(),
        })
    }
}

/// A whole recording in memory, assembled from its records.
#[derive(Clone, Debug, PartialEq)]
pub struct Recording {
    /// What the collector knew when it started.
    pub header: Header,
    /// Sampled series, in the order they first appear.
    /// Each series behind an `Arc`: a view of part of the run (one rank's) shares them instead
    /// of copying millions of samples; growing one copies it only while it is shared.
    pub series: Vec<std::sync::Arc<Series>>,
    /// The allocator's numbers, as the probe sent them.
    pub allocator: AllocatorReadings,
    /// Phase edges, as the probe sent them.
    pub phases: PhaseEdges,
    /// A notebook's cells: the edges of each cell's run ([`super::Phase::cell`]), in the order
    /// they came; in the file they are phase edges, held here apart from the phases.
    pub cells: Vec<PhaseEdge>,
    /// Out-of-memory errors.
    pub ooms: Vec<Oom>,
    /// The job's end (one per wrapped job).
    pub exits: Vec<Exit>,
    /// Probe messages lost or refused.
    pub drops: Vec<Dropped>,
    /// Remarks from the collector.
    pub notes: Vec<Note>,
    /// PyTorch memory snapshots the probe dumped next to the recording.
    pub snapshots: Vec<SnapshotFile>,
    /// Memory by category at each step's start, per process and device.
    pub categories: Vec<Categories>,
    /// Censuses of who holds the live tensors.
    pub censuses: Vec<Census>,
    /// What backwards freed of what the forwards saved for them, where measured.
    pub saved_freed: Vec<SavedFreed>,
    /// Spans of steps whose phases the probe did not observe.
    pub unobserved: Vec<Unobserved>,
    /// Stalls, each time the collector asked for the stacks.
    pub stalls: Vec<Stall>,
    /// The end record; `None` when the recording is incomplete.
    pub end: Option<End>,
    /// What the reader noticed: an incomplete file, skipped records.
    pub warnings: Vec<String>,
    series_index: BTreeMap<SeriesKey, usize>,
}

impl Recording {
    /// An empty recording with this header.
    pub fn new(header: Header) -> Self {
        Self {
            header,
            series: Vec::new(),
            allocator: AllocatorReadings::new(),
            phases: PhaseEdges::new(),
            cells: Vec::new(),
            ooms: Vec::new(),
            exits: Vec::new(),
            drops: Vec::new(),
            notes: Vec::new(),
            snapshots: Vec::new(),
            categories: Vec::new(),
            censuses: Vec::new(),
            saved_freed: Vec::new(),
            unobserved: Vec::new(),
            stalls: Vec::new(),
            end: None,
            warnings: Vec::new(),
            series_index: BTreeMap::new(),
        }
    }

    /// Adds one record.
    pub fn push(&mut self, record: Record) {
        match record {
            Record::Chunk(chunk) => self.push_chunk(chunk),
            Record::Allocator(sample) => self.allocator.push(sample),
            Record::Phase(edge) if edge.phase.cell().is_some() => self.cells.push(edge),
            Record::Phase(edge) => self.phases.push(edge),
            Record::Allocators(samples) => self.allocator.extend(samples),
            Record::Phases(edges) if edges.iter().any(|e| e.phase.cell().is_some()) => {
                let (cells, phases): (Vec<PhaseEdge>, Vec<PhaseEdge>) =
                    edges.into_iter().partition(|e| e.phase.cell().is_some());
                self.cells.extend(cells);
                self.phases.extend(phases);
            }
            Record::Phases(edges) => self.phases.extend(edges),
            Record::Oom(oom) => self.ooms.push(oom),
            Record::Exit(exit) => self.exits.push(exit),
            Record::Dropped(dropped) => self.drops.push(dropped),
            Record::Note(note) => self.notes.push(note),
            Record::Snapshot(file) => self.snapshots.push(file),
            Record::Categories(categories) => self.categories.push(categories),
            Record::Census(census) => self.censuses.push(census),
            Record::SavedFreed(freed) => self.saved_freed.push(freed),
            Record::Unobserved(unobserved) => self.unobserved.push(unobserved),
            Record::Stall(stall) => self.stalls.push(stall),
            Record::End(end) => self.end = Some(end),
        }
    }

    fn push_chunk(&mut self, chunk: Chunk) {
        let Chunk {
            mut times_ns,
            columns,
        } = chunk;
        // The series that take every time of the chunk; the others take theirs here.
        let mut whole: Vec<usize> = Vec::with_capacity(columns.len());
        for column in columns {
            let Column {
                series: key,
                values,
                valid,
            } = column;
            let index = self.series_place(&key);
            let series = Arc::make_mut(&mut self.series[index]);
            match valid {
                None => {
                    series.values.extend_from_slice(&values);
                    whole.push(index);
                }
                Some(valid) => series.push_present(&times_ns, &values, &valid),
            }
        }
        self.extend_times(&whole, &mut times_ns);
    }

    /// Adds `times` to the series `whole`, which take every time of a chunk: those that shared a
    /// time column before it (or had none yet) share one after it, extended once, not copied.
    /// (`times` may be moved into a series that had none.)
    fn extend_times(&mut self, whole: &[usize], times: &mut Vec<u64>) {
        let Some(&first) = whole.first() else {
            return;
        };
        let twice = repeats(whole);
        let column = |i: usize| {
            let times = &self.series[i].times_ns;
            (!times.is_empty()).then_some(Arc::as_ptr(times))
        };
        if !twice && whole.iter().all(|&i| column(i) == column(first)) {
            // The usual chunk: every series sampled together, already sharing one column.
            with_shared_times(&mut self.series, whole, |column| {
                if column.is_empty() {
                    *column = std::mem::take(times);
                } else {
                    column.extend_from_slice(times);
                }
            });
            return;
        }
        let groups = if twice {
            // A series twice in one chunk (a corrupt file): each column on its own.
            whole.iter().map(|&i| vec![i]).collect()
        } else {
            by_time_column(&self.series, whole.iter().copied())
        };
        let last = groups.len().saturating_sub(1);
        for (k, members) in groups.iter().enumerate() {
            with_shared_times(&mut self.series, members, |column| {
                if column.is_empty() && k == last {
                    // A whole series at once (a projection, a conversion): moved, not copied.
                    *column = std::mem::take(times);
                } else {
                    column.extend_from_slice(times);
                }
            });
        }
    }

    /// The place of the series `key`, added (empty) if it is new.
    fn series_place(&mut self, key: &SeriesKey) -> usize {
        match self.series_index.get(key) {
            Some(&index) => index,
            None => {
                self.series_index.insert(key.clone(), self.series.len());
                self.series.push(Arc::new(Series {
                    key: key.clone(),
                    times_ns: Arc::default(),
                    values: Values::new(),
                }));
                self.series.len() - 1
            }
        }
    }

    /// Adds a stored chunk (`n` samples: its times and its columns) with each column decoded
    /// straight into its series (no [`Chunk`] is built): what pushing the chunk
    /// [`wire::decode_chunk`] makes does, with the same errors. `keys` are the series declared
    /// so far; `buffers` are kept between chunks. The times of chunk after chunk of the same
    /// series are gathered and added to their shared column once the series change, or at
    /// [`Recording::finish_chunks`]. After an error the recording holds part of the chunk (the
    /// reader of whole files then gives up on it).
    pub(crate) fn push_wire_chunk(
        &mut self,
        n: u64,
        times_ns: &wire::WireInts<'_>,
        columns: &[wire::WireColumn<'_>],
        keys: &[SeriesKey],
        buffers: &mut ChunkBuffers,
    ) -> Result<(), String> {
        let ChunkBuffers {
            places,
            times,
            values: decoded,
            whole,
            pending,
            pending_series,
        } = buffers;
        times.clear();
        times_ns
            .decode_into(n, times)
            .map_err(|err| format!("time column: {err}"))?;
        whole.clear();
        for (i, wire::WireColumn(id, values, valid)) in columns.iter().enumerate() {
            let key = keys
                .get(*id as usize)
                .ok_or_else(|| format!("column {i} refers to series {id}, never declared"))?;
            let place = match places.get(*id as usize).copied().flatten() {
                Some(place) => place,
                None => {
                    let place = self.series_place(key);
                    if places.len() <= *id as usize {
                        places.resize(*id as usize + 1, None);
                    }
                    places[*id as usize] = Some(place);
                    place
                }
            };
            let named = |err: String| format!("column {i} ({}): {err}", key.kind.as_str());
            if valid.is_some() && pending_series.contains(&place) {
                // It takes its own times from here on: its shared column first gets those gathered.
                self.add_gathered_times(pending_series, pending);
            }
            let series = Arc::make_mut(&mut self.series[place]);
            match valid {
                None => {
                    decoded.clear();
                    values
                        .decode_into(n, decoded)
                        .map_err(|err| named(err.to_string()))?;
                    series.values.extend_from_slice(decoded);
                    whole.push(place);
                }
                Some(bits) => {
                    let decoded = values.decode(n).map_err(|err| named(err.to_string()))?;
                    let valid = codec::unpack_bits(bits, times.len()).ok_or_else(|| {
                        named(format!("validity has {} bytes for {n} values", bits.len()))
                    })?;
                    series.push_present(times, &decoded, &valid);
                }
            }
        }
        let twice = repeats(whole);
        if !twice && !whole.is_empty() && whole == pending_series {
            pending.extend_from_slice(times);
            return Ok(());
        }
        self.add_gathered_times(pending_series, pending);
        if twice {
            // A series twice in one chunk (a corrupt file): its times added chunk by chunk.
            self.extend_times(whole, times);
        } else {
            // The run of chunks of these series grows their time column itself, taken out of
            // them meanwhile: their times are not copied once more when the run ends.
            *pending = self.take_times(whole);
            pending.extend_from_slice(times);
            pending_series.clone_from(whole);
        }
        Ok(())
    }

    /// The time column the series `members` share, taken out of them (they then hold an empty
    /// one, until [`Recording::extend_times`] gives it back); empty when they hold different
    /// columns.
    fn take_times(&mut self, members: &[usize]) -> Vec<u64> {
        let mut taken = Vec::new();
        let Some(&first) = members.first() else {
            return taken;
        };
        let column = |i: usize| Arc::as_ptr(&self.series[i].times_ns);
        if !self.series[first].times_ns.is_empty()
            && !repeats(members)
            && members.iter().all(|&i| column(i) == column(first))
        {
            with_shared_times(&mut self.series, members, |column| {
                taken = std::mem::take(column);
            });
        }
        taken
    }

    /// Adds the times [`Recording::push_wire_chunk`] gathered to their series.
    pub(crate) fn finish_chunks(&mut self, buffers: &mut ChunkBuffers) {
        self.add_gathered_times(&mut buffers.pending_series, &mut buffers.pending);
    }

    fn add_gathered_times(&mut self, series: &mut Vec<usize>, times: &mut Vec<u64>) {
        self.extend_times(series, times);
        series.clear();
        times.clear();
    }

    /// Adds a whole series held elsewhere too (a view of part of a run shares it, no copy).
    /// A series of the same key already here is extended by its samples instead.
    pub fn share_series(&mut self, series: std::sync::Arc<Series>) {
        match self.series_index.get(&series.key) {
            Some(&i) => {
                let into = Arc::make_mut(&mut self.series[i]);
                Arc::make_mut(&mut into.times_ns).extend_from_slice(&series.times_ns);
                into.values.extend_from(&series.values);
            }
            None => {
                self.series_index
                    .insert(series.key.clone(), self.series.len());
                self.series.push(series);
            }
        }
    }

    /// Gives back memory reserved for growth (a finished recording no longer grows).
    pub fn shrink_to_fit(&mut self) {
        let mut unique = Vec::new();
        for (index, series) in self.series.iter_mut().enumerate() {
            if let Some(series) = Arc::get_mut(series) {
                series.values.shrink_to_fit();
                unique.push(index);
            }
        }
        for members in by_time_column(&self.series, unique.into_iter()) {
            with_shared_times(&mut self.series, &members, Vec::shrink_to_fit);
        }
        self.allocator.shrink_to_fit();
        self.phases.shrink_to_fit();
    }

    /// The series with this key, if it was recorded.
    pub fn series(&self, key: &SeriesKey) -> Option<&Series> {
        self.series_index.get(key).map(|&i| &*self.series[i])
    }

    /// Process `pid`'s memory on `device` as the driver counted it (its `ProcessDevice` series),
    /// each reading with what PyTorch reserved there at the process' last allocator reading at or
    /// before it: `(time, the driver's count, reserved)`, in time order. The difference is the
    /// process' device memory outside PyTorch's cache. Readings before the process' first
    /// allocator reading are left out.
    pub fn driver_and_cache(&self, pid: u32, device: u32) -> Vec<(u64, u64, u64)> {
        let key = SeriesKey {
            kind: SeriesKind::ProcessDevice,
            device: Some(device),
            pid: Some(pid),
        };
        let Some(used) = self.series(&key) else {
            return Vec::new();
        };
        let readings = &self.allocator;
        let times = readings.times_ns();
        let mut reserved: Vec<(u64, u64)> = readings
            .indices_of(|&(origin, d)| origin.pid == pid && d == device)
            .map(|i| (times[i], readings.reserved(i)))
            .collect();
        if !reserved.is_sorted() {
            reserved.sort_unstable();
        }
        let used = used.sorted();
        let mut out = Vec::new();
        let mut k = 0;
        for (&t, value) in used.times_ns.iter().zip(used.values.iter()) {
            while reserved.get(k).is_some_and(|&(r, _)| r <= t) {
                k += 1;
            }
            if let Some(&(_, cache)) = k.checked_sub(1).and_then(|i| reserved.get(i)) {
                out.push((t, value, cache));
            }
        }
        out
    }

    /// Samples held, summed over all series.
    pub fn sample_count(&self) -> u64 {
        self.series.iter().map(|s| s.values.len() as u64).sum()
    }

    /// Probe messages dropped, malformed or refused, in total.
    pub fn dropped_total(&self) -> u64 {
        self.drops
            .iter()
            .map(|d| d.dropped + d.malformed + d.refused)
            .sum()
    }

    /// The last time anything was recorded, nanoseconds after the start.
    pub fn duration_ns(&self) -> u64 {
        let last_sample = self
            .series
            .iter()
            .filter_map(|s| s.times_ns.last().copied());
        let last_event = self
            .phases
            .last()
            .map(|p| p.t_ns)
            .into_iter()
            .chain(self.allocator.last().map(|a| a.t_ns))
            .chain(self.exits.last().map(|e| e.t_ns))
            .chain(self.end.as_ref().map(|e| e.t_ns));
        last_sample.chain(last_event).max().unwrap_or(0)
    }
}

/// Whether a series is in `whole` twice (one chunk with two columns of it: a corrupt file).
fn repeats(whole: &[usize]) -> bool {
    whole
        .iter()
        .enumerate()
        .any(|(k, i)| whole[..k].contains(i))
}

/// What reading chunk after chunk straight into a recording keeps between them: where each
/// declared series is in the recording, and buffers for a chunk's times, one column's values and
/// the series that take every time of the chunk.
#[derive(Debug, Default)]
pub(crate) struct ChunkBuffers {
    places: Vec<Option<usize>>,
    times: Vec<u64>,
    values: Vec<u64>,
    whole: Vec<usize>,
    /// Times gathered for the series `pending_series`, whose values are already added.
    pending: Vec<u64>,
    pending_series: Vec<usize>,
}

/// The series `indices` grouped by the time column they hold (those with none yet together).
fn by_time_column(series: &[Arc<Series>], indices: impl Iterator<Item = usize>) -> Vec<Vec<usize>> {
    let mut groups: Vec<(*const Vec<u64>, Vec<usize>)> = Vec::new();
    for index in indices {
        let column = &series[index].times_ns;
        let key = if column.is_empty() {
            std::ptr::null()
        } else {
            Arc::as_ptr(column)
        };
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, members)) => members.push(index),
            None => groups.push((key, vec![index])),
        }
    }
    groups.into_iter().map(|(_, members)| members).collect()
}

/// Runs `f` on the time column the series `members` share (one series, or several that hold
/// the same column), with the others' hold on it let go meanwhile, so that it is changed in
/// place rather than copied (it is copied only when something else holds it too: a view of
/// part of the run); then all of them hold the result.
fn with_shared_times(series: &mut [Arc<Series>], members: &[usize], f: impl FnOnce(&mut Vec<u64>)) {
    let Some((&first, rest)) = members.split_first() else {
        return;
    };
    let none: Arc<Vec<u64>> = Arc::default();
    for &m in rest {
        Arc::make_mut(&mut series[m]).times_ns = Arc::clone(&none);
    }
    let owner = Arc::make_mut(&mut series[first]);
    f(Arc::make_mut(&mut owner.times_ns));
    let shared = Arc::clone(&owner.times_ns);
    for &m in rest {
        Arc::make_mut(&mut series[m]).times_ns = Arc::clone(&shared);
    }
}
