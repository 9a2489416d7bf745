//! Two runs side by side: two PyTorch memory snapshots by allocation site and per device, or two
//! recordings by phase, step baseline, categories, holders, peaks and out-of-memory errors; and
//! the baseline gate (`collector check RUN --baseline BASE`) judged on that difference. No I/O
//! here: the viewer can use it too.
//!
//! ```no_run
//! use collector::compare::{Gate, compare_recordings};
//! let base = collector::recording::read_file("main.msgpack".as_ref()).unwrap();
//! let run = collector::recording::read_file("branch.msgpack".as_ref()).unwrap();
//! let (ab, bb) = (collector::analysis::analyze(&base), collector::analysis::analyze(&run));
//! let diff = compare_recordings(&base, &ab, &run, &bb);
//! for row in Gate::default().judge_recordings(&diff) {
//!     println!("{} {}", row.what, if row.failed { "FAILED" } else { "ok" });
//! }
//! ```

use std::collections::{BTreeMap, BTreeSet};

use foldhash::HashMap;
use serde::Serialize;

use crate::analysis::Analysis;
use crate::format::format_bytes;
use crate::recording::{Recording, SeriesKind};
use crate::snapshot::{BlockState, Frame, LiveIndex, Snapshot};

const MIB: f64 = 1024.0 * 1024.0;

/// A quantity in A, in B, and B − A (`None` where a side lacks it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Pair {
    /// In A (the baseline).
    pub a: Option<f64>,
    /// In B (the run compared with it).
    pub b: Option<f64>,
    /// B − A, when both have it.
    pub change: Option<f64>,
}

impl Pair {
    /// A pair and its change.
    pub fn new(a: Option<f64>, b: Option<f64>) -> Self {
        let change = match (a, b) {
            (Some(a), Some(b)) => Some(b - a),
            _ => None,
        };
        Self { a, b, change }
    }

    /// Both sides have it.
    pub fn both(&self) -> bool {
        self.change.is_some()
    }
}

// ---------------------------------------------------------------------------------------------
// Snapshots.

/// Where a block was allocated, as a person names it: the stack's first frame that is the user's
/// code — not PyTorch's internals (`torch/`), not an installed library (`site-packages/`), not
/// Python's frozen modules, not a `__torch_function__` / `__torch_dispatch__` wrapper — else its
/// first frame worth showing ([`Snapshot::user_frames`]); `(no frames recorded)` without frames.
/// Files are named by their last two path components, so that two checkouts name a line alike.
pub fn site_of(snapshot: &Snapshot, stack: u32) -> String {
    let frames = snapshot.user_frames(stack);
    let user = frames.iter().find(|f| {
        let file = snapshot.string(f.filename);
        file.ends_with(".py") && !internal(file, snapshot.string(f.name))
    });
    match user.or(frames.first()) {
        Some(frame) => site_text(snapshot, frame),
        None => NO_FRAMES.to_owned(),
    }
}

/// The site of blocks whose stack holds no frame.
pub const NO_FRAMES: &str = "(no frames recorded)";

/// Whether a frame is PyTorch's or a library's rather than the user's.
fn internal(file: &str, name: &str) -> bool {
    let file = file.replace('\\', "/");
    file.contains("/torch/")
        || file.starts_with("torch/")
        || file.contains("site-packages/")
        || file.contains("dist-packages/")
        || file.starts_with("<frozen")
        || name.contains("__torch_function__")
        || name.contains("__torch_dispatch__")
}

/// `name (dir/file.py:line)`.
fn site_text(snapshot: &Snapshot, frame: &Frame) -> String {
    let file = snapshot.string(frame.filename).replace('\\', "/");
    let mut parts = file.rsplit('/');
    let last = parts.next().unwrap_or("");
    let short = match parts.next() {
        Some(dir) if !dir.is_empty() => format!("{dir}/{last}"),
        _ => last.to_owned(),
    };
    let name = snapshot.string(frame.name);
    if frame.line > 0 && frame.line < u64::from(u32::MAX) && !short.is_empty() {
        format!("{name} ({short}:{})", frame.line)
    } else if short.is_empty() || short == "??" {
        name.to_owned()
    } else {
        format!("{name} ({short})")
    }
}

/// What one snapshot holds, by device and by site: what a comparison reads off it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SnapshotFacts {
    /// Per device: (reserved, allocated) from the segments (`None` without segments).
    pub held: BTreeMap<u32, (u64, u64)>,
    /// Per device: the most allocated at any time of the trace (`None` without a trace).
    pub trace_peak: BTreeMap<u32, u64>,
    /// Per (device, site): live bytes and blocks at the snapshot.
    pub sites: BTreeMap<(u32, String), (u64, usize)>,
    /// Whether the live blocks are the segments' (else the trace's, replayed to its end).
    pub from_segments: bool,
}

impl SnapshotFacts {
    /// Reads them off a snapshot. The blocks alive are the segments' active blocks (allocated or
    /// waiting to be freed: what the allocator counts as allocated), with their sizes as the
    /// allocator rounded them; a snapshot without segments has its trace replayed to the end.
    pub fn of(snapshot: &Snapshot) -> Self {
        let mut names: HashMap<u32, String> = HashMap::default();
        let mut site = |stack: u32| {
            names
                .entry(stack)
                .or_insert_with(|| site_of(snapshot, stack))
                .clone()
        };
        let mut sites: BTreeMap<(u32, String), (u64, usize)> = BTreeMap::new();
        let mut held: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
        let from_segments = !snapshot.segments.is_empty();
        if from_segments {
            for segment in &snapshot.segments {
                let h = held.entry(segment.device).or_default();
                h.0 += segment.total_size;
                for block in &segment.blocks {
                    if block.state == BlockState::Inactive {
                        continue;
                    }
                    h.1 += block.size;
                    let s = sites
                        .entry((segment.device, site(block.stack)))
                        .or_default();
                    s.0 += block.size;
                    s.1 += 1;
                }
            }
        } else {
            for block in LiveIndex::new(snapshot).at(i64::MAX, None) {
                let s = sites.entry((block.device, site(block.stack))).or_default();
                s.0 += block.size;
                s.1 += 1;
            }
        }
        let mut trace_peak: BTreeMap<u32, u64> = BTreeMap::new();
        if !snapshot.entries.is_empty() {
            let trace = snapshot.to_recording();
            for sample in trace.allocator.iter() {
                let peak = trace_peak.entry(sample.device).or_default();
                *peak = (*peak).max(sample.allocated);
            }
        }
        Self {
            held,
            trace_peak,
            sites,
            from_segments,
        }
    }

    /// The devices it says anything about.
    pub fn devices(&self) -> BTreeSet<u32> {
        self.held
            .keys()
            .chain(self.trace_peak.keys())
            .copied()
            .chain(self.sites.keys().map(|(d, _)| *d))
            .collect()
    }

    /// Live bytes and blocks on a device.
    pub fn live(&self, device: u32) -> (u64, usize) {
        self.sites
            .iter()
            .filter(|((d, _), _)| *d == device)
            .fold((0, 0), |(b, n), (_, (bytes, blocks))| {
                (b + bytes, n + blocks)
            })
    }
}

/// One device of two snapshots.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SnapshotDevice {
    /// The device.
    pub device: u32,
    /// Bytes reserved by the allocator (its segments).
    pub reserved: Pair,
    /// Bytes allocated: held by tensors or waiting to be freed.
    pub allocated: Pair,
    /// Reserved − allocated: cached, free inside the segments.
    pub fragmentation: Pair,
    /// The most allocated at any time of the trace.
    pub trace_peak: Pair,
    /// Bytes alive at the snapshot (the sum over the sites).
    pub live_bytes: Pair,
    /// Blocks alive at the snapshot.
    pub live_blocks: Pair,
}

/// Whether a site holds memory in both snapshots or in one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SiteStatus {
    /// In both.
    Both,
    /// Only in B.
    New,
    /// Only in A.
    Gone,
}

/// One allocation site in two snapshots.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SiteChange {
    /// The device.
    pub device: u32,
    /// The site ([`site_of`]).
    pub site: String,
    /// In both, new in B or gone from it.
    pub status: SiteStatus,
    /// Live bytes.
    pub bytes: Pair,
    /// Live blocks.
    pub blocks: Pair,
}

/// Two snapshots compared.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SnapshotDiff {
    /// Per device, every device either snapshot describes.
    pub devices: Vec<SnapshotDevice>,
    /// Per site, the largest change first (a site absent from a side counts as 0 bytes there).
    pub sites: Vec<SiteChange>,
    /// What a reader must know: devices in one snapshot only, a side without segments or trace.
    pub notes: Vec<String>,
}

impl SnapshotDiff {
    /// Why nothing can be compared (no device in common), or `None` when something can.
    pub fn nothing_comparable(&self) -> Option<String> {
        let common = self
            .devices
            .iter()
            .any(|d| d.live_bytes.both() || d.reserved.both() || d.trace_peak.both());
        (!common).then(|| {
            let list = |pick: fn(&SnapshotDevice) -> Option<f64>| {
                let names: Vec<String> = self
                    .devices
                    .iter()
                    .filter(|d| pick(d).is_some())
                    .map(|d| format!("cuda:{}", d.device))
                    .collect();
                if names.is_empty() {
                    "no device".to_owned()
                } else {
                    names.join(", ")
                }
            };
            format!(
                "no device in common: A holds {}, B holds {}",
                list(|d| d.live_bytes.a),
                list(|d| d.live_bytes.b)
            )
        })
    }
}

/// Compares two snapshots.
pub fn compare_snapshots(a: &SnapshotFacts, b: &SnapshotFacts) -> SnapshotDiff {
    let (da, db) = (a.devices(), b.devices());
    let mut notes = Vec::new();
    let only = |x: &BTreeSet<u32>, y: &BTreeSet<u32>| -> Vec<String> {
        x.difference(y).map(|d| format!("cuda:{d}")).collect()
    };
    let only_a = only(&da, &db);
    let only_b = only(&db, &da);
    if !only_a.is_empty() {
        notes.push(format!(
            "devices only in A: {} (not compared)",
            only_a.join(", ")
        ));
    }
    if !only_b.is_empty() {
        notes.push(format!(
            "devices only in B: {} (not compared)",
            only_b.join(", ")
        ));
    }
    for (side, facts) in [("A", a), ("B", b)] {
        if !facts.from_segments {
            notes.push(format!("{side} has no segments: what is alive is its trace replayed to the end, and reserved memory is unknown"));
        }
        if facts.trace_peak.is_empty() {
            notes.push(format!(
                "{side} has no trace: its peak is unknown (record one with torch.cuda.memory._record_memory_history())"
            ));
        }
    }
    let devices = da
        .union(&db)
        .map(|&device| {
            let in_a = da.contains(&device);
            let in_b = db.contains(&device);
            let held = |f: &SnapshotFacts, pick: fn((u64, u64)) -> u64| {
                f.held.get(&device).map(|&h| pick(h) as f64)
            };
            let live = |f: &SnapshotFacts, present: bool| {
                let (bytes, blocks) = f.live(device);
                (
                    present.then_some(bytes as f64),
                    present.then_some(blocks as f64),
                )
            };
            let (la, na) = live(a, in_a);
            let (lb, nb) = live(b, in_b);
            let frag = |f: &SnapshotFacts| f.held.get(&device).map(|&(r, al)| r as f64 - al as f64);
            SnapshotDevice {
                device,
                reserved: Pair::new(held(a, |h| h.0), held(b, |h| h.0)),
                allocated: Pair::new(held(a, |h| h.1), held(b, |h| h.1)),
                fragmentation: Pair::new(frag(a), frag(b)),
                trace_peak: Pair::new(
                    a.trace_peak.get(&device).map(|&p| p as f64),
                    b.trace_peak.get(&device).map(|&p| p as f64),
                ),
                live_bytes: Pair::new(la, lb),
                live_blocks: Pair::new(na, nb),
            }
        })
        .collect();
    let common: BTreeSet<u32> = da.intersection(&db).copied().collect();
    let keys: BTreeSet<&(u32, String)> = a
        .sites
        .keys()
        .chain(b.sites.keys())
        .filter(|(d, _)| common.contains(d))
        .collect();
    let mut sites: Vec<SiteChange> = keys
        .into_iter()
        .map(|key| {
            let sa = a.sites.get(key);
            let sb = b.sites.get(key);
            let status = match (sa, sb) {
                (Some(_), None) => SiteStatus::Gone,
                (None, Some(_)) => SiteStatus::New,
                _ => SiteStatus::Both,
            };
            let side = |s: Option<&(u64, usize)>| s.copied().unwrap_or_default();
            let (ba, na) = side(sa);
            let (bb, nb) = side(sb);
            SiteChange {
                device: key.0,
                site: key.1.clone(),
                status,
                bytes: Pair::new(Some(ba as f64), Some(bb as f64)),
                blocks: Pair::new(Some(na as f64), Some(nb as f64)),
            }
        })
        .collect();
    sites.sort_by(|x, y| {
        let size = |s: &SiteChange| s.bytes.change.unwrap_or(0.0).abs();
        size(y)
            .total_cmp(&size(x))
            .then(x.device.cmp(&y.device))
            .then(x.site.cmp(&y.site))
    });
    SnapshotDiff {
        devices,
        sites,
        notes,
    }
}

// ---------------------------------------------------------------------------------------------
// Recordings.

/// One phase in two recordings.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PhaseChange {
    /// The phase's name.
    pub phase: String,
    /// Occurrences measured.
    pub occurrences: Pair,
    /// Mean net Δ per occurrence (what it leaves behind), bytes.
    pub net: Pair,
    /// Mean watermark Δ per occurrence (what it needs transiently above its start), bytes.
    pub watermark: Pair,
    /// Mean retained per occurrence: what no later phase of the step gives back, bytes.
    pub retained: Pair,
}

/// One device in two recordings.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DeviceChange {
    /// The device (`cuda:N` as the job numbers it).
    pub device: u32,
    /// Its product name in A and in B, where the header names it.
    pub name_a: Option<String>,
    /// See `name_a`.
    pub name_b: Option<String>,
    /// The most PyTorch allocated on it (the probe's peak), bytes.
    pub allocated_peak: Pair,
    /// The most device memory in use (NVML), bytes.
    pub device_used_peak: Pair,
}

/// One category of memory (at the step starts, the median) in two recordings.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CategoryChange {
    /// The device (`None`: host memory).
    pub device: Option<u32>,
    /// The parameters.
    pub parameters: Pair,
    /// The gradients.
    pub gradients: Pair,
    /// The optimizer's state.
    pub optimizer_state: Pair,
    /// The rest: activations and whatever the job keeps.
    pub rest: Pair,
}

/// A holder that grew between the censuses of either recording.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HolderChange {
    /// Its name (`__main__.kept`).
    pub name: String,
    /// What it is.
    pub what: String,
    /// Its device (`None`: host).
    pub device: Option<u32>,
    /// Its growth between the first and the last census, bytes.
    pub growth: Pair,
}

/// Two recordings compared.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RecordingDiff {
    /// What memory the step series measure, in A and in B.
    pub basis: [&'static str; 2],
    /// Points in the step series (steps, or time windows without steps).
    pub steps: Pair,
    /// The step baseline: the median of the memory at the same point of every step, bytes
    /// (`None` on both sides when A and B measure different memory).
    pub baseline: Pair,
    /// Its trend: Theil–Sen slope, bytes per step.
    pub slope: Pair,
    /// Per phase, in A's order, then B's new ones.
    pub phases: Vec<PhaseChange>,
    /// Per device.
    pub devices: Vec<DeviceChange>,
    /// The most resident host memory of the job's process tree, bytes.
    pub host_peak: Pair,
    /// Memory by category at the step starts.
    pub categories: Vec<CategoryChange>,
    /// The holders that grew, in either.
    pub holders: Vec<HolderChange>,
    /// Out-of-memory errors.
    pub ooms: Pair,
    /// Their causes, in A and in B.
    pub oom_causes: [Vec<String>; 2],
    /// What a reader must know: devices that differ, series measured differently.
    pub notes: Vec<String>,
}

impl RecordingDiff {
    /// Why nothing can be compared, or `None` when something can.
    pub fn nothing_comparable(&self) -> Option<String> {
        let any = self.baseline.both()
            || self.phases.iter().any(|p| p.watermark.both())
            || self
                .devices
                .iter()
                .any(|d| d.allocated_peak.both() || d.device_used_peak.both())
            || self.host_peak.both();
        (!any).then(|| {
            let mut why = "no phase, step series, device or host memory in common".to_owned();
            if let Some(note) = self.notes.first() {
                why.push_str(&format!(" ({note})"));
            }
            why
        })
    }
}

fn median(values: &[u64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let n = sorted.len();
    Some(if n % 2 == 1 {
        sorted[n / 2] as f64
    } else {
        (sorted[n / 2 - 1] as f64 + sorted[n / 2] as f64) / 2.0
    })
}

/// Per device, the most allocated (the probe's peaks included).
fn allocated_peaks(recording: &Recording) -> BTreeMap<u32, u64> {
    let mut peaks: BTreeMap<u32, u64> = BTreeMap::new();
    for s in recording.allocator.iter() {
        let p = peaks.entry(s.device).or_default();
        *p = (*p).max(s.allocated).max(s.peak);
    }
    peaks
}

/// Per device, the most of a sampled kind (`None` key: without a device).
fn series_peaks(recording: &Recording, kind: &SeriesKind) -> BTreeMap<Option<u32>, u64> {
    let mut peaks: BTreeMap<Option<u32>, u64> = BTreeMap::new();
    for s in recording.series.iter().filter(|s| &s.key.kind == kind) {
        if kind == &SeriesKind::HostRss && s.key.pid.is_some() {
            continue;
        }
        if let Some(max) = s.values.iter().max() {
            let p = peaks.entry(s.key.device).or_default();
            *p = (*p).max(max);
        }
    }
    peaks
}

fn category_medians(analysis: &Analysis) -> BTreeMap<Option<u32>, [Option<f64>; 4]> {
    analysis
        .categories
        .iter()
        .map(|c| {
            (
                c.device,
                [
                    Some(c.parameters.median_bytes as f64),
                    Some(c.gradients.median_bytes as f64),
                    Some(c.optimizer_state.median_bytes as f64),
                    c.rest.as_ref().map(|r| r.median_bytes as f64),
                ],
            )
        })
        .collect()
}

/// Compares two recordings with their analyses (`collector::analysis::analyze`).
pub fn compare_recordings(
    a: &Recording,
    analysis_a: &Analysis,
    b: &Recording,
    analysis_b: &Analysis,
) -> RecordingDiff {
    let mut notes = Vec::new();
    let same_basis = analysis_a.basis == analysis_b.basis;
    if !same_basis {
        notes.push(format!(
            "A's steps are measured in {}, B's in {}: their step baselines are not compared",
            analysis_a.basis.name(),
            analysis_b.basis.name()
        ));
    }
    if analysis_a.by_step != analysis_b.by_step {
        notes.push(
            "one recording has steps and the other only time windows: the step series differ in kind"
                .to_owned(),
        );
    }
    let series = |x: &Analysis| median(&x.step_series.values);
    let baseline = if same_basis {
        Pair::new(series(analysis_a), series(analysis_b))
    } else {
        Pair::new(None, None)
    };
    let slope = |x: &Analysis| x.trend.as_ref().map(|t| t.slope_per_step);
    let slope = if same_basis {
        Pair::new(slope(analysis_a), slope(analysis_b))
    } else {
        Pair::new(None, None)
    };

    // Phases: A's order, then B's new ones.
    let mut names: Vec<String> = Vec::new();
    for p in analysis_a.phases.iter().chain(&analysis_b.phases) {
        let name = p.phase.as_str().to_owned();
        if !names.contains(&name) {
            names.push(name);
        }
    }
    let phase_of =
        |x: &'_ Analysis, name: &str| x.phases.iter().find(|p| p.phase.as_str() == name).cloned();
    let phases = names
        .into_iter()
        .map(|name| {
            let (pa, pb) = (phase_of(analysis_a, &name), phase_of(analysis_b, &name));
            let pick = |f: fn(&crate::analysis::PhaseStats) -> f64| {
                Pair::new(pa.as_ref().map(f), pb.as_ref().map(f))
            };
            PhaseChange {
                occurrences: pick(|p| p.occurrences as f64),
                net: pick(|p| p.net_mean_bytes),
                watermark: pick(|p| p.watermark_mean_bytes),
                retained: pick(|p| p.retained_mean_bytes),
                phase: name,
            }
        })
        .collect();

    // Devices.
    let (pa, pb) = (allocated_peaks(a), allocated_peaks(b));
    let (ua, ub) = (
        series_peaks(a, &SeriesKind::DeviceUsed),
        series_peaks(b, &SeriesKind::DeviceUsed),
    );
    let name = |r: &Recording, d: u32| {
        r.header
            .devices
            .iter()
            .find(|x| x.index == d)
            .map(|x| x.name.clone())
    };
    let in_a: BTreeSet<u32> = pa
        .keys()
        .copied()
        .chain(ua.keys().filter_map(|d| *d))
        .chain(a.header.devices.iter().map(|d| d.index))
        .collect();
    let in_b: BTreeSet<u32> = pb
        .keys()
        .copied()
        .chain(ub.keys().filter_map(|d| *d))
        .chain(b.header.devices.iter().map(|d| d.index))
        .collect();
    let devices: Vec<DeviceChange> = in_a
        .union(&in_b)
        .map(|&d| DeviceChange {
            device: d,
            name_a: name(a, d),
            name_b: name(b, d),
            allocated_peak: Pair::new(pa.get(&d).map(|&v| v as f64), pb.get(&d).map(|&v| v as f64)),
            device_used_peak: Pair::new(
                ua.get(&Some(d)).map(|&v| v as f64),
                ub.get(&Some(d)).map(|&v| v as f64),
            ),
        })
        .collect();
    for d in &devices {
        match (&d.name_a, &d.name_b) {
            (Some(x), Some(y)) if x != y => notes.push(format!(
                "cuda:{} is a {x} in A and a {y} in B: its numbers differ for that alone",
                d.device
            )),
            _ => {}
        }
    }
    let only_a: Vec<String> = in_a
        .difference(&in_b)
        .map(|d| format!("cuda:{d}"))
        .collect();
    let only_b: Vec<String> = in_b
        .difference(&in_a)
        .map(|d| format!("cuda:{d}"))
        .collect();
    if !only_a.is_empty() {
        notes.push(format!(
            "devices only in A: {} (not compared)",
            only_a.join(", ")
        ));
    }
    if !only_b.is_empty() {
        notes.push(format!(
            "devices only in B: {} (not compared)",
            only_b.join(", ")
        ));
    }
    let host = |r: &Recording| {
        series_peaks(r, &SeriesKind::HostRss)
            .get(&None)
            .map(|&v| v as f64)
    };

    // Categories and holders.
    let (ca, cb) = (category_medians(analysis_a), category_medians(analysis_b));
    let keys: BTreeSet<Option<u32>> = ca.keys().chain(cb.keys()).copied().collect();
    let categories = keys
        .into_iter()
        .map(|device| {
            let (x, y) = (ca.get(&device), cb.get(&device));
            let pick = |i: usize| Pair::new(x.and_then(|v| v[i]), y.and_then(|v| v[i]));
            CategoryChange {
                device,
                parameters: pick(0),
                gradients: pick(1),
                optimizer_state: pick(2),
                rest: pick(3),
            }
        })
        .collect();
    let mut holders: Vec<HolderChange> = Vec::new();
    for (side, x) in [(0, analysis_a), (1, analysis_b)] {
        for h in &x.holders {
            let at = match holders
                .iter()
                .position(|c| c.name == h.name && c.device == h.device)
            {
                Some(at) => at,
                None => {
                    holders.push(HolderChange {
                        name: h.name.clone(),
                        what: h.what.clone(),
                        device: h.device,
                        growth: Pair::default(),
                    });
                    holders.len() - 1
                }
            };
            let g = &mut holders[at].growth;
            let (ga, gb) = if side == 0 {
                (Some(h.growth_bytes()), g.b)
            } else {
                (g.a, Some(h.growth_bytes()))
            };
            *g = Pair::new(ga, gb);
        }
    }
    let causes = |x: &Analysis| {
        x.ooms
            .iter()
            .map(|o| o.cause_name().to_owned())
            .collect::<Vec<_>>()
    };
    RecordingDiff {
        basis: [analysis_a.basis.name(), analysis_b.basis.name()],
        steps: Pair::new(
            Some(analysis_a.step_series.values.len() as f64),
            Some(analysis_b.step_series.values.len() as f64),
        ),
        baseline,
        slope,
        phases,
        devices,
        host_peak: Pair::new(host(a), host(b)),
        categories,
        holders,
        ooms: Pair::new(
            Some(analysis_a.ooms.len() as f64),
            Some(analysis_b.ooms.len() as f64),
        ),
        oom_causes: [causes(analysis_a), causes(analysis_b)],
        notes,
    }
}

// ---------------------------------------------------------------------------------------------
// The gate.

/// How much growth a quantity may show over the baseline: a share of it, or bytes.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Threshold {
    /// Percent of the baseline's value. Growth under [`PERCENT_FLOOR_BYTES`] never exceeds it.
    Percent(f64),
    /// Bytes.
    Bytes(f64),
}

/// Growth this small never exceeds a percentage: the allocator's rounding and caching move
/// small numbers by that much from one run of a job to the next.
pub const PERCENT_FLOOR_BYTES: f64 = MIB;

impl Threshold {
    /// Parses `5%`, `64MiB`, `512 KiB`, `1MiB/step`, `2GB`, `4096`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let body = text.trim().trim_end_matches("/step").trim();
        if let Some(percent) = body.strip_suffix('%') {
            let value: f64 = percent
                .trim()
                .parse()
                .map_err(|_| format!("{text:?} is not a percentage: expected e.g. 5%"))?;
            return if value.is_finite() && value >= 0.0 {
                Ok(Self::Percent(value))
            } else {
                Err(format!("{text:?}: a percentage is 0 or more"))
            };
        }
        let split = body
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(body.len());
        let (number, unit) = body.split_at(split);
        let number: f64 = number.parse().map_err(|_| {
            format!("{text:?} is neither a size nor a percentage: expected e.g. 64MiB or 5%")
        })?;
        let factor = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1.0,
            "k" | "kib" => 1024.0,
            "m" | "mib" => MIB,
            "g" | "gib" => 1024.0 * MIB,
            "kb" => 1e3,
            "mb" => 1e6,
            "gb" => 1e9,
            other => {
                return Err(format!(
                    "unknown unit {other:?} in {text:?}: use B, KiB, MiB, GiB or %"
                ));
            }
        };
        Ok(Self::Bytes(number * factor))
    }

    /// The most `run` may be, given `base`.
    pub fn limit(&self, base: f64) -> f64 {
        match *self {
            Self::Percent(p) => base + (base.abs() * p / 100.0).max(PERCENT_FLOOR_BYTES),
            Self::Bytes(b) => base + b,
        }
    }

    /// `+5%` or `+64 MiB`.
    pub fn describe(&self) -> String {
        match *self {
            Self::Percent(p) => format!("+{p}%"),
            Self::Bytes(b) => format!("+{}", format_bytes(b)),
        }
    }
}

/// The thresholds of `collector check RUN --baseline BASE`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Gate {
    /// The peak per device (allocated; device memory in use without allocator numbers; a
    /// snapshot's peak in its trace).
    pub peak: Threshold,
    /// A phase's watermark (mean per occurrence).
    pub watermark: Threshold,
    /// The step baseline (a snapshot: what is alive at its end).
    pub baseline: Threshold,
    /// A phase's retained bytes per occurrence: what no later phase of the step gives back.
    pub retained: Threshold,
}

impl Default for Gate {
    /// Defaults that a rerun of the same job does not trip.
    fn default() -> Self {
        Self {
            peak: Threshold::Percent(5.0),
            watermark: Threshold::Percent(10.0),
            baseline: Threshold::Bytes(64.0 * MIB),
            retained: Threshold::Bytes(MIB),
        }
    }
}

/// One quantity the gate compared.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GateRow {
    /// What: `peak allocated on cuda:0`, `forward's watermark`, `step baseline`.
    pub what: String,
    /// The phase it belongs to, if any.
    pub phase: Option<String>,
    /// In the baseline, bytes.
    pub base: f64,
    /// In the run, bytes.
    pub run: f64,
    /// The threshold, as the user gave it.
    pub threshold: String,
    /// The most the run may be, bytes.
    pub limit: f64,
    /// Whether the run is over it.
    pub failed: bool,
}

impl GateRow {
    fn new(what: String, phase: Option<String>, base: f64, run: f64, t: Threshold) -> Self {
        let limit = t.limit(base);
        Self {
            what,
            phase,
            base,
            run,
            threshold: t.describe(),
            limit,
            failed: run > limit,
        }
    }

    /// One line: `forward's watermark grew 12.0 MiB → 24.0 MiB (+12.0 MiB, +100%), over +10%`.
    pub fn sentence(&self) -> String {
        let change = self.run - self.base;
        let percent = if self.base.abs() > 0.0 {
            format!(", {:+.1}%", 100.0 * change / self.base.abs())
        } else {
            String::new()
        };
        format!(
            "{} {} {} → {} ({}{percent}), {} {}",
            self.what,
            if change > 0.0 { "grew" } else { "went" },
            format_bytes(self.base),
            format_bytes(self.run),
            signed_bytes(change),
            if self.failed { "over" } else { "within" },
            self.threshold
        )
    }
}

/// Bytes with their sign: `+12.0 MiB`, `-3.00 MiB`, `0 B`.
pub fn signed_bytes(bytes: f64) -> String {
    if bytes > 0.0 {
        format!("+{}", format_bytes(bytes))
    } else {
        format_bytes(bytes)
    }
}

impl Gate {
    /// Every quantity of two recordings (A the baseline, B the run) against its threshold.
    pub fn judge_recordings(&self, diff: &RecordingDiff) -> Vec<GateRow> {
        let mut rows = Vec::new();
        for d in &diff.devices {
            let (what, pair) = if d.allocated_peak.both() {
                ("peak allocated", d.allocated_peak)
            } else {
                ("peak device memory in use", d.device_used_peak)
            };
            if let (Some(a), Some(b)) = (pair.a, pair.b) {
                rows.push(GateRow::new(
                    format!("{what} on cuda:{}", d.device),
                    None,
                    a,
                    b,
                    self.peak,
                ));
            }
        }
        for p in &diff.phases {
            if let (Some(a), Some(b)) = (p.watermark.a, p.watermark.b) {
                rows.push(GateRow::new(
                    format!("{}'s watermark", p.phase),
                    Some(p.phase.clone()),
                    a,
                    b,
                    self.watermark,
                ));
            }
            if let (Some(a), Some(b)) = (p.retained.a, p.retained.b) {
                rows.push(GateRow::new(
                    format!("{}'s retained per step", p.phase),
                    Some(p.phase.clone()),
                    a,
                    b,
                    self.retained,
                ));
            }
        }
        if let (Some(a), Some(b)) = (diff.baseline.a, diff.baseline.b) {
            rows.push(GateRow::new(
                format!("step baseline ({})", diff.basis[1]),
                None,
                a,
                b,
                self.baseline,
            ));
        }
        rows
    }

    /// Every quantity of two snapshots (A the baseline, B the run): the peak in the trace and
    /// what is alive at the end, per device.
    pub fn judge_snapshots(&self, diff: &SnapshotDiff) -> Vec<GateRow> {
        let mut rows = Vec::new();
        for d in &diff.devices {
            if let (Some(a), Some(b)) = (d.trace_peak.a, d.trace_peak.b) {
                rows.push(GateRow::new(
                    format!("peak allocated in the trace on cuda:{}", d.device),
                    None,
                    a,
                    b,
                    self.peak,
                ));
            }
            if let (Some(a), Some(b)) = (d.live_bytes.a, d.live_bytes.b) {
                rows.push(GateRow::new(
                    format!("alive at the end on cuda:{}", d.device),
                    None,
                    a,
                    b,
                    self.baseline,
                ));
            }
        }
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_parse_and_limit() {
        assert_eq!(Threshold::parse("5%"), Ok(Threshold::Percent(5.0)));
        assert_eq!(Threshold::parse("64MiB"), Ok(Threshold::Bytes(64.0 * MIB)));
        assert_eq!(Threshold::parse("1MiB/step"), Ok(Threshold::Bytes(MIB)));
        assert_eq!(Threshold::parse("2GB"), Ok(Threshold::Bytes(2e9)));
        assert!(Threshold::parse("lots").is_err());
        assert!(Threshold::parse("-5%").is_err());
        assert!(Threshold::parse("3 parsecs").is_err());
        // 5% of 1 GiB, and the floor for small numbers.
        assert_eq!(Threshold::Percent(5.0).limit(1024.0 * MIB), 1075.2 * MIB);
        assert_eq!(Threshold::Percent(5.0).limit(MIB), 2.0 * MIB);
        assert_eq!(Threshold::Bytes(MIB).limit(0.0), MIB);
    }

    #[test]
    fn a_row_fails_only_over_its_limit() {
        let t = Threshold::Percent(10.0);
        let within = GateRow::new("x".into(), None, 100.0 * MIB, 110.0 * MIB, t);
        assert!(!within.failed, "{}", within.sentence());
        let over = GateRow::new(
            "forward's watermark".into(),
            None,
            100.0 * MIB,
            111.0 * MIB,
            t,
        );
        assert!(over.failed);
        assert!(
            over.sentence().contains("100 MiB → 111 MiB") && over.sentence().contains("over +10%"),
            "{}",
            over.sentence()
        );
        let shrank = GateRow::new("x".into(), None, 100.0 * MIB, 50.0 * MIB, t);
        assert!(!shrank.failed);
    }

    #[test]
    fn pairs_change_only_with_both_sides() {
        assert_eq!(Pair::new(Some(1.0), Some(3.0)).change, Some(2.0));
        assert_eq!(Pair::new(None, Some(3.0)).change, None);
    }

    #[test]
    fn frames_of_torch_and_libraries_are_not_the_user_s() {
        assert!(internal("/x/site-packages/torch/functional.py", "einsum"));
        assert!(internal(
            "/usr/lib/python3/dist-packages/einops/einops.py",
            "einsum"
        ));
        assert!(internal("<frozen runpy>", "_run_code"));
        assert!(internal("/home/me/model.py", "__torch_function__"));
        assert!(internal(
            "/src/pytorch/torch/nn/modules/module.py",
            "_call_impl"
        ));
        assert!(!internal("/home/me/cs336_basics/model.py", "forward"));
    }
}
