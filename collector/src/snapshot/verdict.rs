//! What a snapshot answers, in the order a person asks: did it die of an out-of-memory error,
//! what is held (and by whom), is the cache fragmented, which sites leak — and only then the
//! trend, when the trace is long enough to have one.

use foldhash::HashMap;

use serde::Serialize;

use super::{Action, LeakSuspect, LiveBlock, LiveIndex, SegmentSummary, Snapshot, SuspectMarks};
use crate::analysis::{Analysis, FindingKind};
use crate::format::count;
use crate::format::format_bytes;
use crate::recording::Recording;

/// The out-of-memory error a snapshot was taken at (its last `oom` trace entry).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OomAtSnapshot {
    /// The device.
    pub device: u32,
    /// Bytes asked for.
    pub requested_bytes: u64,
    /// Bytes the device had free (`device_free`).
    pub device_free_bytes: u64,
    /// When, µs since the epoch (0: unknown).
    pub time_us: i64,
}

/// An allocation site ([`Snapshot::site`]) and the live memory it holds at the snapshot.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Site {
    /// The device.
    pub device: u32,
    /// The site: the first frame of the user's code, [`super::CPP_ONLY`] or
    /// [`super::BEFORE_HISTORY`].
    pub site: String,
    /// The private pool its blocks are in (a CUDA graph's, a `torch.cuda.MemPool`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool: Option<super::PoolId>,
    /// The stack of its largest block (index into the snapshot's stacks).
    #[serde(skip)]
    pub stack: u32,
    /// How many distinct stacks reach the site.
    pub stacks: usize,
    /// How many live blocks.
    pub blocks: usize,
    /// Their bytes.
    pub bytes: u64,
    /// The whole stack of its largest block as a person reads it (its Python frames when there
    /// are any, else its C++ frames outside the allocator), innermost first.
    pub frames: Vec<String>,
}

/// The most a device's tensors held in the trace, when, and whose blocks were alive then.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SnapshotPeak {
    /// The device.
    pub device: u32,
    /// Bytes allocated at the peak.
    pub allocated_bytes: u64,
    /// When: µs after the trace's first entry.
    pub after_us: i64,
    /// Bytes allocated at the snapshot, counted as the peak is (the bytes the blocks alive then
    /// asked for: the memory timeline's and the live blocks' total).
    pub at_snapshot_bytes: u64,
    /// The sites whose blocks were alive then, largest first (at most [`PEAK_SITES`]).
    pub sites: Vec<Site>,
}

/// How many sites a peak names.
pub const PEAK_SITES: usize = 4;

/// Free memory inside the segments against what the job asks for.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Fragmentation {
    /// The device.
    pub device: u32,
    /// Bytes free inside segments (cached, reusable).
    pub free_bytes: u64,
    /// How many free pieces.
    pub free_pieces: usize,
    /// The largest free piece: the largest tensor that fits without a new `cudaMalloc`.
    pub largest_free_bytes: u64,
    /// The largest request in the trace (an allocation or an out-of-memory request), if any.
    pub largest_request_bytes: Option<u64>,
    /// Whether the free memory is scattered: a request that fits in the free total does not fit
    /// in any piece, or the largest piece is under half of the free total.
    pub fragmented: bool,
}

/// The verdict on a snapshot.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SnapshotVerdict {
    /// One sentence: what a person reads first.
    pub headline: String,
    /// Whether the headline names a problem (an out-of-memory error, a leak suspect,
    /// fragmentation) rather than a description.
    pub problem: bool,
    /// The kind of problem the headline names (`oom`, `leak` for a leak or a leak suspect,
    /// `fragmentation`): what `collector check` fails on.
    pub problem_kind: Option<FindingKind>,
    /// The out-of-memory error it was taken at.
    pub taken_at_oom: Option<OomAtSnapshot>,
    /// Whether the trace ends with a `snapshot` entry (older PyTorch writes one when the
    /// snapshot is taken, e.g. from an out-of-memory handler).
    pub legacy_snapshot_entry: bool,
    /// Per device, the trace's peak and who held it (none without a timed trace).
    pub peaks: Vec<SnapshotPeak>,
    /// What is held per device: reserved, allocated, waiting to be freed, free.
    #[serde(skip)]
    pub held: Vec<SegmentSummary>,
    /// The allocation sites holding the most live memory, largest first.
    pub top_sites: Vec<Site>,
    /// Per device: the free memory's pieces against the largest request.
    pub fragmentation: Vec<Fragmentation>,
    /// Sites whose blocks, from several occurrences of a repeating phase, are still alive.
    #[serde(skip)]
    pub suspects: Vec<LeakSuspect>,
    /// The blocks alive at the end, largest first (what the suspects and sites are found among).
    #[serde(skip)]
    pub live: Vec<LiveBlock>,
    /// The evidence, one sentence each, in the order of the headline's questions.
    pub evidence: Vec<String>,
}

/// How many allocation sites the verdict lists.
pub const TOP_SITES: usize = 10;

impl SnapshotVerdict {
    /// Judges a snapshot whose blocks' lives are swept in `index`; `analysis` is the analysis
    /// of its trace as a recording. Only [`super::Judged::new`] calls it: a snapshot is judged
    /// there, once, for the report, `check`, the viewer and a folder of ranks alike.
    pub(super) fn with_index(
        snapshot: &Snapshot,
        recording: &Recording,
        analysis: &Analysis,
        index: &LiveIndex,
    ) -> Self {
        let held = snapshot.segment_summary();
        let peaks = peaks(snapshot, recording, index);
        let live = index.at(i64::MAX, None);
        let suspects = snapshot.leak_suspects_among(&live);
        let top_sites = sites(snapshot, &live);
        let entries = &snapshot.entries;
        // One pass: the last out-of-memory entry, and each device's largest request (taken a
        // run of one device's entries at a time: they come device after device).
        let mut last_oom = None;
        let mut largest_request: HashMap<u32, u64> = HashMap::default();
        let mut run: Option<(u32, u64)> = None;
        // Entries all of one device (most snapshots): both were kept as they were read.
        let one = entries.only_device();
        if let Some(device) = one {
            last_oom = entries.last_oom();
            run = entries.largest_request().map(|most| (device, most));
        }
        for (i, e) in one
            .is_none()
            .then_some(entries)
            .into_iter()
            .flatten()
            .enumerate()
        {
            if !matches!(e.action(), Action::Alloc | Action::Oom) {
                continue;
            }
            if e.action() == Action::Oom {
                last_oom = Some(i);
            }
            match &mut run {
                Some((device, most)) if *device == e.device() => *most = (*most).max(e.size),
                _ => {
                    if let Some((device, most)) = run.replace((e.device(), e.size)) {
                        let r = largest_request.entry(device).or_default();
                        *r = (*r).max(most);
                    }
                }
            }
        }
        if let Some((device, most)) = run {
            let r = largest_request.entry(device).or_default();
            *r = (*r).max(most);
        }
        let taken_at_oom = last_oom.map(|i| OomAtSnapshot {
            device: entries[i].device(),
            requested_bytes: entries[i].size,
            device_free_bytes: entries.device_free(i),
            time_us: entries[i].time_us,
        });
        let legacy_snapshot_entry = snapshot
            .entries
            .last()
            .is_some_and(|e| e.action() == Action::Snapshot);
        let fragmentation: Vec<Fragmentation> = held
            .iter()
            .map(|h| {
                let request = largest_request.get(&h.device).copied();
                let fits_total_not_piece =
                    request.is_some_and(|r| r > h.largest_free && r <= h.free);
                Fragmentation {
                    device: h.device,
                    free_bytes: h.free,
                    free_pieces: h.free_pieces,
                    largest_free_bytes: h.largest_free,
                    largest_request_bytes: request,
                    // The pinned host allocator never splits a segment: its free pieces are
                    // whole cached buffers, not fragments.
                    fragmented: Some(h.device) != snapshot.host
                        && h.free > 0
                        && (fits_total_not_piece || h.largest_free < h.free / 2),
                }
            })
            .collect();

        let mut evidence = Vec::new();
        if let Some(oom) = &taken_at_oom {
            evidence.push(format!(
                "taken at an out-of-memory error on {}: {} asked for, {} free on the device",
                snapshot.device_name(oom.device),
                format_bytes(oom.requested_bytes as f64),
                format_bytes(oom.device_free_bytes as f64)
            ));
        } else if legacy_snapshot_entry {
            evidence.push(
                "the trace ends with a `snapshot` entry: older PyTorch writes one when the snapshot is taken (an out-of-memory handler is the usual caller); no `oom` entry says why".to_owned(),
            );
        }
        for p in &peaks {
            evidence.push(peak_sentence(snapshot, p));
        }
        for h in &held {
            evidence.push(format!(
                "held on {}: {} reserved in {} — {} allocated, {} waiting to be freed, {} free in {}{}",
                snapshot.device_name(h.device),
                format_bytes(h.reserved as f64),
                count(h.segments, "segment"),
                format_bytes(h.allocated as f64),
                format_bytes(h.pending_free as f64),
                format_bytes(h.free as f64),
                count(h.free_pieces, "piece"),
                h.free_in_pools_text()
            ));
            if let Some(pools) = h.pools_text() {
                evidence.push(format!("{pools} (on {})", snapshot.device_name(h.device)));
            }
        }
        for site in top_sites.iter().take(3) {
            evidence.push(format!(
                "{} in {} on {} {}",
                format_bytes(site.bytes as f64),
                count(site.blocks, "live block"),
                snapshot.device_name(site.device),
                super::in_pool(whence("from", &site.site), site.pool)
            ));
        }
        for f in fragmentation.iter().filter(|f| f.fragmented) {
            let request = f.largest_request_bytes.map_or(String::new(), |r| {
                format!(
                    "; the largest request in the trace was {}",
                    format_bytes(r as f64)
                )
            });
            evidence.push(format!(
                "fragmented on {}: the largest free piece is {} of {} free ({:.0}%){request}",
                snapshot.device_name(f.device),
                format_bytes(f.largest_free_bytes as f64),
                format_bytes(f.free_bytes as f64),
                100.0 * f.largest_free_bytes as f64 / f.free_bytes.max(1) as f64
            ));
        }
        for s in suspects.iter().take(3) {
            evidence.push(suspect_sentence(snapshot, s));
        }
        if snapshot.entries.is_empty() {
            evidence.push("no trace: the snapshot holds the segments only, so there is no timeline; call `torch.cuda.memory._record_memory_history()` before the steps you want to see, then take the snapshot".to_owned());
        } else if let Some(entries) = snapshot.ring_overflowed() {
            evidence.push(super::timeline::overflow_sentence(entries));
        }
        let stepless = analysis
            .finding(FindingKind::NotEnoughData)
            .is_some_and(|f| f.title == crate::analysis::STEPLESS_SNAPSHOT);
        if snapshot.entries.is_empty() {
            // "no trace" says it already.
        } else if stepless {
            evidence.push("the trace has no steps (no phase that repeats): no trend is judged or drawn, and what one step holds (activations saved for backward) cannot be told from a leak".to_owned());
        } else if analysis.finding(FindingKind::NotEnoughData).is_some() {
            evidence.push(format!(
                "the trace ({}) is too short for a trend: {}, at least {} are needed",
                count(snapshot.entries.len(), "entry"),
                count(analysis.step_series.values.len(), "point"),
                crate::analysis::MIN_STEPS
            ));
        }

        let (mut headline, problem_kind) = headline(
            snapshot,
            &held,
            &top_sites,
            &fragmentation,
            &suspects,
            taken_at_oom.as_ref(),
            analysis,
        );
        // With no problem to name and a timed trace, what made the peak leads.
        if problem_kind.is_none()
            && let Some(peak) = peak_headline(snapshot, &held, &peaks)
        {
            headline = peak;
        }
        Self {
            headline,
            problem: problem_kind.is_some(),
            problem_kind,
            taken_at_oom,
            legacy_snapshot_entry,
            peaks,
            held,
            top_sites,
            fragmentation,
            suspects,
            live,
            evidence,
        }
    }
}

impl SnapshotVerdict {
    /// The leading leak suspects' blocks still alive at the end, where a picture marks them: at
    /// their allocation times on `recording`'s allocated curve (`recording` is the snapshot's
    /// trace, [`Snapshot::to_recording`]).
    pub fn suspect_marks(&self, snapshot: &Snapshot, recording: &Recording) -> Vec<SuspectMarks> {
        let t0 = snapshot.time_range_us().map_or(0, |r| r.0);
        self.suspects
            .iter()
            .take(SuspectMarks::MAX_SUSPECTS)
            .map(|s| {
                let stride = s
                    .allocated_us
                    .len()
                    .div_ceil(SuspectMarks::MAX_POINTS)
                    .max(1);
                let points = s
                    .allocated_us
                    .iter()
                    .step_by(stride)
                    .map(|&us| {
                        let t_ns = u64::try_from(us.saturating_sub(t0))
                            .unwrap_or(0)
                            .saturating_mul(1000);
                        (t_ns, allocated_after(recording, s.device, t_ns))
                    })
                    .collect();
                let site = snapshot.site_name(snapshot.site(s.stack));
                let held = format!(
                    "{} in {}",
                    format_bytes(s.bytes as f64),
                    count(s.blocks, "block")
                );
                SuspectMarks {
                    label: match s.phase {
                        Some(_) => format!("leak suspect: {site} ({held} alive)"),
                        None => format!(
                            "allocated at {} times, alive at the end: {site} ({held})",
                            s.occurrences
                        ),
                    },
                    leak: s.phase.is_some(),
                    device: s.device,
                    points,
                }
            })
            .collect()
    }
}

impl SuspectMarks {
    /// What a caption adds when suspects are marked (empty when none are).
    pub fn caption(marks: &[SuspectMarks]) -> String {
        if marks.is_empty() {
            return String::new();
        }
        if marks.iter().any(|m| m.leak) {
            format!(
                "; marked: where the blocks of {} still alive at the end were allocated",
                count(marks.len(), "leak suspect")
            )
        } else {
            format!(
                "; marked: where the blocks of {} still alive at the end were allocated (the trace has no steps: what one step holds and a leak look alike)",
                count(marks.len(), "site")
            )
        }
    }
}

/// Allocated bytes on `device` at the last reading at or before `t_ns` (the allocation itself).
fn allocated_after(recording: &Recording, device: u32, t_ns: u64) -> f64 {
    let readings = &recording.allocator;
    let end = readings.times_ns().partition_point(|&t| t <= t_ns);
    (0..end)
        .rev()
        .find(|&i| readings.device(i) == device)
        .map_or(0.0, |i| readings.allocated(i) as f64)
}

/// The [`TOP_SITES`] allocation sites holding the most of `live` (largest first).
fn sites(snapshot: &Snapshot, live: &[super::LiveBlock]) -> Vec<Site> {
    super::group_by_site(snapshot, live)
        .into_iter()
        .take(TOP_SITES)
        .map(|g| Site {
            device: g.device,
            site: snapshot.site_name(g.site),
            pool: g.pool,
            stack: g.stack,
            stacks: g.stacks,
            blocks: g.blocks.len(),
            bytes: g.bytes,
            frames: snapshot
                .user_frames(g.stack)
                .iter()
                .map(|f| snapshot.frame_text(f))
                .collect(),
        })
        .collect()
}

/// Per device, the peak of the allocated curve of the trace (the first time it is reached) and
/// the sites of the blocks alive then: what made the peak. None for a snapshot whose trace has no
/// times (its curve is by entry, not by time).
fn peaks(snapshot: &Snapshot, recording: &Recording, index: &LiveIndex) -> Vec<SnapshotPeak> {
    let Some((t0, _)) = snapshot.time_range_us().filter(|r| r.0 > 0) else {
        return Vec::new();
    };
    recording
        .allocator
        .peak_per_device()
        .into_iter()
        .filter(|&(_, (bytes, _))| bytes > 0)
        .map(|(device, (bytes, t_ns))| {
            let after_us = i64::try_from(t_ns / 1000).unwrap_or(i64::MAX);
            let alive = index.at(t0.saturating_add(after_us), Some(device));
            let mut sites = sites(snapshot, &alive);
            sites.truncate(PEAK_SITES);
            SnapshotPeak {
                device,
                allocated_bytes: bytes,
                after_us,
                at_snapshot_bytes: allocated_after(recording, device, u64::MAX) as u64,
                sites,
            }
        })
        .collect()
}

/// "peak on cuda:0: 4.20 GiB allocated, 31 ms into the trace (2.86 GiB at the snapshot); alive
/// then, largest first: …".
fn peak_sentence(snapshot: &Snapshot, p: &SnapshotPeak) -> String {
    let now = format!(
        " ({} at the snapshot)",
        format_bytes(p.at_snapshot_bytes as f64)
    );
    let alive: Vec<String> = p
        .sites
        .iter()
        .map(|s| {
            format!(
                "{} {}",
                format_bytes(s.bytes as f64),
                super::in_pool(whence("from", &s.site), s.pool)
            )
        })
        .collect();
    format!(
        "peak on {}: {} allocated, {} into the trace{now}; alive then, largest first: {}",
        snapshot.device_name(p.device),
        format_bytes(p.allocated_bytes as f64),
        crate::format::format_duration(p.after_us as f64 / 1e6),
        alive.join(", ")
    )
}

/// The device a headline speaks of: the GPU that reserves the most; pinned host memory only
/// when no GPU holds anything.
fn leading<'h>(snapshot: &Snapshot, held: &'h [SegmentSummary]) -> Option<&'h SegmentSummary> {
    let on_gpu = held.iter().filter(|h| Some(h.device) != snapshot.host);
    on_gpu.max_by_key(|h| h.reserved).or_else(|| held.first())
}

/// The headline of a snapshot with a timed trace and no problem: what made the leading device's
/// peak, the site alive then that the trace allocated (what was there before the history is not
/// what rose).
fn peak_headline(
    snapshot: &Snapshot,
    held: &[SegmentSummary],
    peaks: &[SnapshotPeak],
) -> Option<String> {
    let h = leading(snapshot, held)?;
    let p = peaks.iter().find(|p| p.device == h.device)?;
    let made = p
        .sites
        .iter()
        .find(|s| s.site != super::BEFORE_HISTORY)
        .map_or(String::new(), |s| {
            format!(
                ", the most of it allocated in the trace {} ({} in {})",
                super::in_pool(whence("by", &s.site), s.pool),
                format_bytes(s.bytes as f64),
                count(s.blocks, "block")
            )
        });
    Some(format!(
        "Peak: {} allocated on {}, {} into the trace{made}; {} at the snapshot",
        format_bytes(p.allocated_bytes as f64),
        snapshot.device_name(p.device),
        crate::format::format_duration(p.after_us as f64 / 1e6),
        format_bytes(p.at_snapshot_bytes as f64)
    ))
}

/// A site in a sentence: `from step (…)`, `by step (…)`; `allocated before the history was
/// recorded`, `from C++ code only`.
fn whence(preposition: &str, site: &str) -> String {
    match site {
        super::BEFORE_HISTORY => site.to_owned(),
        super::CPP_ONLY => format!("{preposition} C++ code only"),
        _ => format!("{preposition} {site}"),
    }
}

fn suspect_sentence(snapshot: &Snapshot, s: &LeakSuspect) -> String {
    let site = whence("from", &snapshot.site_name(snapshot.site(s.stack)));
    match &s.phase {
        Some(p) => format!(
            "leak suspect: {} in {} on {} {site}, left alive by {} of {} occurrences of {p}",
            format_bytes(s.bytes as f64),
            count(s.blocks, "block"),
            snapshot.device_name(s.device),
            s.occurrences,
            s.of
        ),
        None => format!(
            "alive at the end: {} in {} on {} {site}, allocated at {} different times",
            format_bytes(s.bytes as f64),
            count(s.blocks, "block"),
            snapshot.device_name(s.device),
            s.occurrences
        ),
    }
}

fn headline(
    snapshot: &Snapshot,
    held: &[SegmentSummary],
    sites: &[Site],
    fragmentation: &[Fragmentation],
    suspects: &[LeakSuspect],
    oom: Option<&OomAtSnapshot>,
    analysis: &Analysis,
) -> (String, Option<FindingKind>) {
    if let Some(oom) = oom {
        let h = held.iter().find(|h| h.device == oom.device);
        let cached = h.map_or(0, |h| h.free);
        let largest = h.map_or(0, |h| h.largest_free);
        let cause = if cached >= oom.requested_bytes && largest < oom.requested_bytes {
            format!(
                "fragmentation: {} is free in the cache but its largest piece is {}",
                format_bytes(cached as f64),
                format_bytes(largest as f64)
            )
        } else {
            format!(
                "{} allocated by tensors, {} cached",
                format_bytes(h.map_or(0, |h| h.allocated) as f64),
                format_bytes(cached as f64)
            )
        };
        return (
            format!(
                "Out of memory on {} asking for {} with {} free — {cause}",
                snapshot.device_name(oom.device),
                format_bytes(oom.requested_bytes as f64),
                format_bytes(oom.device_free_bytes as f64)
            ),
            Some(FindingKind::Oom),
        );
    }
    if let Some(leak) = analysis.finding(FindingKind::Leak) {
        return (leak.title.clone(), Some(FindingKind::Leak));
    }
    // A suspect leads only with a repeating phase behind it: most of its occurrences left blocks.
    if let Some(s) = suspects
        .iter()
        .find(|s| s.phase.is_some() && s.occurrences >= 3 && 2 * s.occurrences >= s.of)
    {
        let mut text = suspect_sentence(snapshot, s);
        if let Some(first) = text.get_mut(0..1) {
            first.make_ascii_uppercase();
        }
        return (text, Some(FindingKind::Leak));
    }
    if let Some(f) = fragmentation.iter().find(|f| {
        f.fragmented
            && f.largest_request_bytes
                .is_some_and(|r| r > f.largest_free_bytes && r <= f.free_bytes)
    }) {
        return (
            format!(
                "Fragmented on {}: {} is free in {}, but the largest is {} — smaller than the largest request ({})",
                snapshot.device_name(f.device),
                format_bytes(f.free_bytes as f64),
                count(f.free_pieces, "piece"),
                format_bytes(f.largest_free_bytes as f64),
                format_bytes(f.largest_request_bytes.unwrap_or(0) as f64)
            ),
            Some(FindingKind::Fragmentation),
        );
    }
    let Some(h) = leading(snapshot, held) else {
        return (
            "An empty snapshot: no segments and no trace".to_owned(),
            None,
        );
    };
    let now = format_bytes(h.in_use() as f64);
    let holder = sites
        .iter()
        .find(|s| s.device == h.device)
        .map_or(String::new(), |s| {
            format!(
                "; the most {} ({} in {})",
                super::in_pool(whence("by", &s.site), s.pool),
                format_bytes(s.bytes as f64),
                count(s.blocks, "block")
            )
        });
    (
        format!(
            "At the snapshot: {now} in use of {} reserved on {}{holder}",
            format_bytes(h.reserved as f64),
            snapshot.device_name(h.device)
        ),
        None,
    )
}
