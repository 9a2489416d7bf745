//! The curves of a recording, each with its levels of detail: the allocator's numbers per
//! process and device, device and host memory series, the ranks' host memory at their phase
//! edges; built once when a recording opens and extended, not rebuilt, as a followed file grows.

use std::collections::BTreeMap;

use crate::palette::{self, Rgb};
use crate::recording::{Recording, SeriesKind, Values};

use super::lod::{Levels, LodSeries};

mod allocator;

use self::allocator::{allocator_column, allocator_traces, grow_allocator_traces};

/// What a curve measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TraceKind {
    /// Bytes held by live tensors (the probe's allocator numbers): the staircase of a leak.
    Allocated,
    /// Bytes the caching allocator holds from the driver.
    Reserved,
    /// The allocator's peak since the last reset (per phase unless `--keep-peaks`).
    Peak,
    /// Device memory in use on the whole GPU (NVML): the sawtooth.
    DeviceUsed,
    /// A process' device memory outside PyTorch's cache: the driver's count of the process
    /// (NVML, about once a second) less what PyTorch reserved at its last reading before.
    OutsidePytorch,
    /// Resident host memory of the job's process tree.
    Host,
    /// Of allocated, the bytes in private pools (CUDA graphs, `torch.cuda.MemPool`): a snapshot's
    /// trace tells them. Drawn as the part of allocated they are: an area in its colour.
    PrivatePools,
}

impl TraceKind {
    /// Every kind, in legend order.
    pub const ALL: [Self; 7] = [
        Self::Allocated,
        Self::Reserved,
        Self::Peak,
        Self::PrivatePools,
        Self::DeviceUsed,
        Self::OutsidePytorch,
        Self::Host,
    ];

    /// The name shown in the legend and the toggles.
    pub fn label(self) -> &'static str {
        match self {
            Self::Allocated => "allocated",
            Self::Reserved => "reserved",
            Self::Peak => "peak",
            Self::DeviceUsed => "device used",
            Self::OutsidePytorch => "outside PyTorch",
            Self::Host => "host memory",
            Self::PrivatePools => "in private pools",
        }
    }

    /// Its colour in the palette.
    pub fn rgb(self) -> Rgb {
        match self {
            Self::Allocated => palette::ALLOCATED,
            Self::Reserved => palette::RESERVED,
            Self::Peak => palette::PEAK,
            Self::DeviceUsed => palette::DEVICE_USED,
            Self::OutsidePytorch => palette::OUTSIDE_PYTORCH,
            Self::Host => palette::HOST,
            // A part of allocated, in its colour (drawn as an area, not a line).
            Self::PrivatePools => palette::ALLOCATED,
        }
    }
}

/// Where a curve's samples are held.
#[derive(Clone, Debug)]
enum Source {
    /// `recording.series[i]`, already in time order: not copied.
    Series(usize),
    /// The recording's allocator readings themselves (the curve's kind picks the column), when
    /// they all come from one process about one device, in time order (a snapshot's trace, most
    /// single-GPU jobs): not copied.
    Readings,
    /// Samples built for the view (allocator numbers, or a series that needed sorting).
    Owned {
        /// Shared by the curves sampled at the same times (allocated, reserved and peak).
        times_ns: std::sync::Arc<Vec<u64>>,
        values: Values,
    },
}

/// One curve.
#[derive(Clone, Debug)]
pub struct Trace {
    /// What it measures.
    pub kind: TraceKind,
    /// The CUDA device, for device curves.
    pub device: Option<u32>,
    /// Its name (`cuda:N`, or pinned host memory in a run imported from a snapshot).
    device_name: Option<String>,
    /// The process it belongs to, when the job had several ("rank 1", "pid 4242").
    pub origin: Option<String>,
    source: Source,
    levels: Levels,
    /// How many samples the levels cover.
    covered: usize,
    /// For the allocator's curves: whose readings they are, and how many of the recording's
    /// readings they were made from.
    readings: Option<ReadingsOf>,
    /// Its place among the curves of its kind (0 for the first): its shade of the kind's colour.
    pub shade: usize,
}

/// The allocator readings an allocator curve was made from: a process' (pid, rank) on a device,
/// among the recording's first `upto`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ReadingsOf {
    key: (u32, Option<u32>, u32),
    upto: usize,
}

impl Trace {
    /// Its colour: its kind's, in its own shade when the plot has several of the kind (the
    /// process tree and each rank's host memory, several devices).
    pub fn rgb(&self) -> Rgb {
        palette::shade(self.kind.rgb(), self.shade)
    }

    /// The process whose allocator numbers it draws (allocator curves only).
    pub fn pid(&self) -> Option<u32> {
        self.readings.map(|r| r.key.0)
    }

    /// The legend name: kind, device and process.
    pub fn name(&self) -> String {
        let mut name = self.kind.label().to_owned();
        if let Some(device) = &self.device_name {
            name.push(' ');
            name.push_str(device);
        }
        if let Some(origin) = &self.origin {
            name.push_str(&format!(" ({origin})"));
        }
        name
    }

    /// The samples, with their levels of detail.
    pub fn data<'a>(&'a self, recording: &'a Recording) -> LodSeries<'a> {
        let (times_ns, values) = match &self.source {
            Source::Series(i) => (
                &recording.series[*i].times_ns[..],
                &recording.series[*i].values,
            ),
            Source::Readings => (
                recording.allocator.times_ns(),
                allocator_column(&recording.allocator, self.kind),
            ),
            Source::Owned { times_ns, values } => (&times_ns[..], values),
        };
        LodSeries {
            times_ns,
            values,
            levels: &self.levels,
        }
    }
}

/// The curves of a recording with their levels of detail: the part of the view that does
/// not need the analysis, so that both can be computed at the same time.
pub fn traces(recording: &Recording) -> Vec<Trace> {
    grow(Vec::new(), recording)
}

/// The same curves without levels of detail, for one picture of a few of them (`collector report
/// --svg`): drawing a curve walks its samples once, less than building its levels would take,
/// and the curves not drawn cost nothing.
pub fn traces_for_one_picture(recording: &Recording) -> Vec<Trace> {
    build(Vec::new(), recording, false)
}

/// The curves of a recording that grew from the one `old` was drawn from (a followed
/// file): a series' levels of detail are extended by what arrived, not rebuilt, and so are
/// the allocator's curves while the readings that arrived are later than those before, of
/// the same processes and devices; the ranks' host memory is made again (a reading per
/// phase edge of each rank).
pub fn grow(old: Vec<Trace>, recording: &Recording) -> Vec<Trace> {
    build(old, recording, true)
}

/// [`grow`], with levels of detail or (`detail` false) without.
fn build(old: Vec<Trace>, recording: &Recording, detail: bool) -> Vec<Trace> {
    let levels = |times: &[u64], values: &Values| {
        if detail {
            Levels::new(times, values)
        } else {
            Levels::default()
        }
    };
    let (mut grown, mut allocator) = (BTreeMap::new(), Vec::new());
    for trace in old {
        match (&trace.source, trace.readings) {
            (Source::Series(i), _) => {
                grown.insert(*i, trace);
            }
            (Source::Readings | Source::Owned { .. }, Some(_)) => allocator.push(trace),
            (Source::Readings | Source::Owned { .. }, None) => {}
        }
    }
    let mut traces = grow_allocator_traces(allocator, recording)
        .unwrap_or_else(|| allocator_traces(recording, &levels));
    for (i, series) in recording.series.iter().enumerate() {
        let kind = match series.key.kind {
            SeriesKind::DeviceUsed => TraceKind::DeviceUsed,
            SeriesKind::HostRss => TraceKind::Host,
            SeriesKind::PrivatePools => TraceKind::PrivatePools,
            _ => continue,
        };
        if series.values.is_empty() {
            continue;
        }
        let times = &series.times_ns;
        if let Some(mut trace) = grown.remove(&i) {
            // Still in time order where it grew: extended.
            let from = trace.covered.min(times.len());
            if times[from.saturating_sub(1)..].is_sorted() {
                trace.levels.extend(times, &series.values, from);
                trace.covered = times.len();
                traces.push(trace);
                continue;
            }
        }
        let (source, levels) = match series.sorted() {
            std::borrow::Cow::Borrowed(_) => (Source::Series(i), levels(times, &series.values)),
            std::borrow::Cow::Owned(sorted) => {
                let levels = levels(&sorted.times_ns, &sorted.values);
                let source = Source::Owned {
                    times_ns: sorted.times_ns,
                    values: sorted.values,
                };
                (source, levels)
            }
        };
        traces.push(Trace {
            kind,
            device: series.key.device,
            device_name: series.key.device.map(|d| recording.header.device_name(d)),
            origin: None,
            source,
            levels,
            covered: series.values.len(),
            readings: None,
            shade: 0,
        });
    }
    traces.extend(rank_host_traces(recording, &levels));
    traces.extend(outside_pytorch_traces(recording, &levels));
    if !detail {
        // Their levels cover no sample: curves grown from these are made again (the
        // allocator's: as from more readings than there are) or extended from the first sample.
        for trace in &mut traces {
            trace.covered = 0;
            if let Some(r) = &mut trace.readings {
                r.upto = usize::MAX;
            }
        }
    }
    traces.sort_by(|a, b| (a.kind, a.device, &a.origin).cmp(&(b.kind, b.device, &b.origin)));
    // Several curves of one kind (ranks, devices): each its own shade.
    let mut previous = None;
    let mut nth = 0;
    for trace in &mut traces {
        nth = if previous == Some(trace.kind) {
            nth + 1
        } else {
            0
        };
        previous = Some(trace.kind);
        trace.shade = nth;
    }
    traces
}

/// With several ranks: each rank's own host memory, as its probe read it at its phase edges
/// (the sampled host series is the whole process tree, every rank summed).
fn rank_host_traces(
    recording: &Recording,
    levels: &impl Fn(&[u64], &Values) -> Levels,
) -> Vec<Trace> {
    let mut groups: BTreeMap<(u32, u32), (Vec<u64>, Vec<u64>)> = BTreeMap::new();
    for e in &recording.phases {
        if let (Some(rank), Some(rss)) = (e.origin.rank, e.host_rss) {
            let (times, values) = groups.entry((rank, e.origin.pid)).or_default();
            times.push(e.t_ns);
            values.push(rss);
        }
    }
    let ranks: std::collections::BTreeSet<u32> = groups.keys().map(|k| k.0).collect();
    if ranks.len() < 2 {
        return Vec::new();
    }
    groups
        .into_iter()
        .map(|((rank, _), (mut times_ns, mut values))| {
            if !times_ns.windows(2).all(|w| w[0] <= w[1]) {
                let mut pairs: Vec<(u64, u64)> = times_ns.into_iter().zip(values).collect();
                pairs.sort_unstable();
                (times_ns, values) = pairs.into_iter().unzip();
            }
            (rank, times_ns, values)
        })
        .map(|(rank, times_ns, values)| {
            let origin = Some(format!("rank {rank}"));
            owned(
                TraceKind::Host,
                None,
                None,
                origin,
                times_ns,
                values.into(),
                levels,
            )
        })
        .collect()
}

/// A curve of samples made for the view (not one of the recording's columns), with its levels.
fn owned(
    kind: TraceKind,
    device: Option<u32>,
    device_name: Option<String>,
    origin: Option<String>,
    times_ns: Vec<u64>,
    values: Values,
    levels: &impl Fn(&[u64], &Values) -> Levels,
) -> Trace {
    Trace {
        kind,
        device,
        device_name,
        origin,
        levels: levels(&times_ns, &values),
        covered: values.len(),
        readings: None,
        shade: 0,
        source: Source::Owned {
            times_ns: std::sync::Arc::new(times_ns),
            values,
        },
    }
}

/// A process in a legend: its rank, else its pid.
fn process_name(pid: u32, rank: Option<u32>) -> String {
    match rank {
        Some(rank) => format!("rank {rank}"),
        None => format!("pid {pid}"),
    }
}

/// Each process' device memory outside PyTorch's cache, where the driver counts the process'
/// memory and the probe read its cache on that device: the CUDA context, NCCL's buffers,
/// cuBLAS's and cuDNN's workspaces, other libraries' own allocations. Made again as a followed
/// file grows (a sample a second).
fn outside_pytorch_traces(
    recording: &Recording,
    levels: &impl Fn(&[u64], &Values) -> Levels,
) -> Vec<Trace> {
    let readings = &recording.allocator;
    let mut found = Vec::new();
    for series in recording
        .series
        .iter()
        .filter(|s| s.key.kind == SeriesKind::ProcessDevice && !s.values.is_empty())
    {
        let (Some(device), Some(pid)) = (series.key.device, series.key.pid) else {
            continue;
        };
        let Some(rank) = readings
            .indices_of(|&(origin, d)| origin.pid == pid && d == device)
            .next()
            .map(|i| readings.source(i).0.rank)
        else {
            continue;
        };
        // Less than the cache held (the cache gave memory back after its reading, or numbers
        // that do not go together): nothing to say of that moment.
        let (times_ns, values): (Vec<u64>, Vec<u64>) = recording
            .driver_and_cache(pid, device)
            .into_iter()
            .filter(|&(_, used, cache)| used >= cache)
            .map(|(t, used, cache)| (t, used - cache))
            .unzip();
        if !times_ns.is_empty() {
            found.push((pid, rank, device, times_ns, Values::from(values)));
        }
    }
    let several = found.len() > 1;
    found
        .into_iter()
        .map(|(pid, rank, device, times_ns, values)| {
            owned(
                TraceKind::OutsidePytorch,
                Some(device),
                Some(recording.header.device_name(device)),
                several.then(|| process_name(pid, rank)),
                times_ns,
                values,
                levels,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recording::{AllocatorSample, Origin, Record};

    /// The driver's count of each process less what PyTorch reserved at the reading before it;
    /// a sample before the process' first reading, or below what the cache held, is left out;
    /// two processes, each its own.
    #[test]
    fn memory_outside_pytorch_is_the_drivers_count_less_the_cache_before_it() {
        use crate::recording::{Chunk, Column, SeriesKey};
        const MIB: u64 = 1 << 20;
        let mut recording = Recording::new(crate::recording::Header::new(
            0,
            "test".to_owned(),
            vec!["python".to_owned()],
        ));
        for (t_ns, pid, reserved) in [(10, 7, 100), (30, 7, 200), (12, 8, 50), (31, 8, 50)] {
            recording.push(Record::Allocator(AllocatorSample {
                t_ns,
                origin: Origin {
                    pid,
                    rank: Some(pid - 7),
                },
                device: 0,
                reserved: reserved * MIB,
                ..Default::default()
            }));
        }
        let column = |pid: u32, values: [u64; 4]| Column {
            series: SeriesKey {
                kind: SeriesKind::ProcessDevice,
                device: Some(0),
                pid: Some(pid),
            },
            values: values.map(|v| v * MIB).to_vec(),
            valid: None,
        };
        recording.push(Record::Chunk(Chunk {
            times_ns: vec![5, 20, 30, 40],
            columns: vec![
                column(7, [90, 400, 500, 520]),
                column(8, [60, 350, 40, 370]),
            ],
        }));
        let traces = super::traces(&recording);
        let outside: Vec<(Option<&str>, Vec<u64>, Vec<u64>)> = traces
            .iter()
            .filter(|t| t.kind == TraceKind::OutsidePytorch)
            .map(|t| {
                let data = t.data(&recording);
                (
                    t.origin.as_deref(),
                    data.times_ns.to_vec(),
                    data.values.iter().map(|v| v / MIB).collect(),
                )
            })
            .collect();
        assert_eq!(
            outside,
            vec![
                (Some("rank 0"), vec![20, 30, 40], vec![300, 300, 320]),
                (Some("rank 1"), vec![20, 40], vec![300, 320]),
            ]
        );
        assert_eq!(
            traces
                .iter()
                .find(|t| t.kind == TraceKind::OutsidePytorch)
                .map(|t| t.name()),
            Some("outside PyTorch cuda:0 (rank 0)".to_owned())
        );
    }

    #[test]
    fn allocator_curves_grown_as_readings_arrive_are_those_made_from_all() {
        let reading = |t_ns: u64, pid: u32, device: u32| {
            Record::Allocator(AllocatorSample {
                t_ns,
                origin: Origin { pid, rank: None },
                device,
                allocated: (t_ns % 7) << 20,
                reserved: (t_ns % 11) << 21,
                peak: t_ns << 9,
                ..Default::default()
            })
        };
        let records: Vec<Record> = (0..3000u64)
            .map(|t| reading(t, 7, (t % 2) as u32))
            .chain((3000..3100).map(|t| reading(t, 7, 1)))
            .collect();
        let whole_of = |n: usize| {
            let mut recording = Recording::new(crate::recording::Header::new(
                0,
                "test".to_owned(),
                vec!["python".to_owned(), "train.py".to_owned()],
            ));
            records[..n].iter().cloned().for_each(|r| recording.push(r));
            recording
        };
        let same = |a: &[Trace], b: &[Trace], recording: &Recording, what: &str| {
            assert_eq!(a.len(), b.len(), "{what}");
            for (a, b) in a.iter().zip(b) {
                assert_eq!((a.kind, a.device, &a.origin), (b.kind, b.device, &b.origin));
                let (da, db) = (a.data(recording), b.data(recording));
                assert_eq!(da.times_ns, db.times_ns, "{what}");
                assert_eq!(da.values, db.values, "{what}");
                assert_eq!(a.levels, b.levels, "{what}");
            }
        };
        // The time column of the first allocator curve: the same one while it is extended.
        let column = |traces: &[Trace]| {
            traces.iter().find_map(|t| match (&t.source, t.readings) {
                (Source::Owned { times_ns, .. }, Some(_)) => Some(std::sync::Arc::as_ptr(times_ns)),
                _ => None,
            })
        };
        // Grown in steps of every size: one reading, a few, across buckets of the levels.
        for step in [1, 5, 64, 700] {
            let mut traces = super::traces(&whole_of(0));
            let mut n = 0;
            while n < records.len() {
                let had = n;
                n = (n + step).min(records.len());
                let recording = whole_of(n);
                let before = column(&traces);
                traces = grow(traces, &recording);
                if had >= 2 {
                    // Both devices' curves were there: extended, not made again.
                    assert_eq!(column(&traces), before, "{step}: {n}");
                }
                same(
                    &traces,
                    &super::traces(&recording),
                    &recording,
                    &format!("{step}: {n}"),
                );
            }
        }
        // A reading earlier than its curve's last, and one from another process: made again.
        let mut recording = whole_of(records.len());
        let traces = super::traces(&recording);
        let before = column(&traces);
        recording.push(reading(5, 7, 0));
        recording.push(reading(9000, 8, 0));
        let grown = grow(traces, &recording);
        assert_ne!(column(&grown), before);
        same(&grown, &super::traces(&recording), &recording, "made again");
        assert!(grown.iter().any(|t| t.origin.as_deref() == Some("pid 8")));
        // Curves made for one picture (no levels) and grown: their levels are built whole.
        for n in [1000, 3000] {
            let picture = traces_for_one_picture(&whole_of(n));
            assert!(picture.iter().all(|t| t.levels == Levels::default()));
            let recording = whole_of(records.len());
            let grown = grow(picture, &recording);
            same(
                &grown,
                &super::traces(&recording),
                &recording,
                "from a picture's",
            );
        }
    }

    #[test]
    fn the_curves_of_one_process_on_one_device_are_its_columns_and_grow_with_them() {
        let reading = |t_ns: u64, device: u32| {
            Record::Allocator(AllocatorSample {
                t_ns,
                origin: Origin { pid: 7, rank: None },
                device,
                allocated: (t_ns % 13) << 20,
                reserved: (t_ns % 17) << 22,
                peak: t_ns << 10,
                ..Default::default()
            })
        };
        let whole_of = |records: &[Record]| {
            let mut recording = Recording::new(crate::recording::Header::new(
                0,
                "test".to_owned(),
                vec!["python".to_owned(), "train.py".to_owned()],
            ));
            records.iter().cloned().for_each(|r| recording.push(r));
            recording
        };
        let records: Vec<Record> = (0..5000u64).map(|t| reading(t, 0)).collect();
        let of_columns = |traces: &[Trace]| {
            traces
                .iter()
                .filter(|t| matches!(t.source, Source::Readings))
                .count()
        };
        let mut traces = super::traces(&whole_of(&[]));
        for n in [1, 2, 100, 1000, 4321, 5000] {
            let recording = whole_of(&records[..n]);
            traces = grow(traces, &recording);
            let made = super::traces(&recording);
            assert_eq!(
                of_columns(&traces),
                3,
                "{n}: allocated, reserved, peak over the columns"
            );
            assert_eq!(of_columns(&made), 3, "{n}");
            for (grown, made) in traces.iter().zip(&made) {
                let (g, m) = (grown.data(&recording), made.data(&recording));
                assert_eq!(g.times_ns, recording.allocator.times_ns(), "{n}");
                assert_eq!(g.values, m.values, "{n}");
                assert_eq!(grown.levels, made.levels, "{n}: grown as made whole");
            }
            let peak = traces.iter().find(|t| t.kind == TraceKind::Peak);
            let values = peak.map(|t| t.data(&recording).values.to_vec());
            assert_eq!(
                values,
                Some((0..n as u64).map(|t| t << 10).collect()),
                "{n}"
            );
        }
        // A second device, or a reading earlier than the last: its own copy, made again.
        for late in [reading(9000, 1), reading(3, 0)] {
            let mut more = records.clone();
            more.push(late);
            let recording = whole_of(&more);
            let grown = grow(super::traces(&whole_of(&records)), &recording);
            let made = super::traces(&recording);
            assert_eq!(of_columns(&grown), 0);
            assert_eq!(grown.len(), made.len());
            for (g, m) in grown.iter().zip(&made) {
                assert_eq!(g.data(&recording).times_ns, m.data(&recording).times_ns);
                assert_eq!(g.data(&recording).values, m.data(&recording).values);
                assert_eq!(g.levels, m.levels);
            }
        }
    }
}
