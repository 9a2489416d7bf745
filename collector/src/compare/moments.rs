//! Two moments of one recording: what each curve read at both, what each phase did between them
//! and who came to hold more ([`compare_moments`]) — the viewer's "pick two points" panel.

use serde::Serialize;

use super::Pair;
use crate::analysis::{Analysis, holders_between};
use crate::recording::{Census, Recording};

/// One curve at two moments.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MomentSeries {
    /// What it measures: `allocated`, `reserved` (PyTorch's, per device), or a sampled series'
    /// kind (`device_used`, `host_rss`, …).
    pub name: String,
    /// The device, for device memory.
    pub device: Option<u32>,
    /// The value at or before each moment (`None`: nothing read by then).
    pub value: Pair,
}

impl MomentSeries {
    /// How a person names the curve: `allocated cuda:0`, `host memory`, `device memory used
    /// cuda:1`.
    pub fn label(&self) -> String {
        let name = match self.name.as_str() {
            "device_used" => "device memory used",
            "device_reserved" => "device memory reserved by the driver",
            "process_device" => "device memory of the job's processes",
            "host_rss" => "host memory",
            other => other,
        };
        match self.device {
            Some(d) => format!("{name} cuda:{d}"),
            None => name.to_owned(),
        }
    }
}

/// What one phase did between the moments.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MomentPhase {
    /// The phase.
    pub phase: String,
    /// Its occurrences that began and ended between the moments.
    pub occurrences: usize,
    /// The sum of their net Δ (end − begin), bytes.
    pub net_bytes: f64,
    /// The largest watermark Δ (peak − begin) among them, bytes.
    pub watermark_bytes: f64,
    /// What they retained of their steps' growth, bytes (`None`: not known for any of them).
    pub retained_bytes: Option<f64>,
}

/// A holder that came to hold more between the moments.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MomentHolder {
    /// The name the user would write: `__main__.all_losses`.
    pub name: String,
    /// What it is: "list, a global of __main__".
    pub what: String,
    /// The CUDA device; `None` for the host.
    pub device: Option<u32>,
    /// What it kept alive (tensors and their graphs) at each census, bytes.
    pub held: Pair,
}

/// Two moments of one recording compared.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Moments {
    /// The earlier moment, nanoseconds after the start.
    pub from_ns: u64,
    /// The later moment.
    pub to_ns: u64,
    /// The training step at each (`None` without steps).
    pub steps: [Option<u64>; 2],
    /// Each curve at both moments.
    pub series: Vec<MomentSeries>,
    /// Per phase, in the analysis' phase order.
    pub phases: Vec<MomentPhase>,
    /// The verdict's memory changed this much between the moments outside every phase listed
    /// (the loop's own code between phases); `None` without phases or that memory's readings.
    pub between_phases_bytes: Option<f64>,
    /// The holders that grew between the census at or before each moment, most growth first.
    pub holders: Vec<MomentHolder>,
    /// The censuses compared, by step (`None`: none at or before that moment).
    pub census_steps: [Option<u64>; 2],
    /// What a reader must know.
    pub notes: Vec<String>,
}

/// The last census at or before `t_ns` (of process `pid` when given) that saw the job's objects.
fn census_at(recording: &Recording, pid: Option<u32>, t_ns: u64) -> Option<&Census> {
    recording
        .censuses
        .iter()
        .filter(|c| c.t_ns <= t_ns && pid.is_none_or(|p| c.origin.pid == p) && c.reason != "end")
        .max_by_key(|c| c.t_ns)
}

/// Compares two moments of `recording` (nanoseconds after its start, in either order) with its
/// analysis (`collector::analysis::analyze`).
pub fn compare_moments(recording: &Recording, analysis: &Analysis, a: u64, b: u64) -> Moments {
    let (from_ns, to_ns) = (a.min(b), a.max(b));
    let mut notes = Vec::new();
    let step_at = |t: u64| {
        let i = analysis.step_starts.partition_point(|s| s.t_ns <= t);
        i.checked_sub(1).map(|i| analysis.step_starts[i].step)
    };

    // The curves: PyTorch's numbers per device, then every sampled series of the whole job.
    let mut series = Vec::new();
    let readings = &recording.allocator;
    let mut devices: Vec<u32> = readings.iter().map(|r| r.device).collect();
    devices.sort_unstable();
    devices.dedup();
    let times = readings.times_ns();
    for device in devices {
        let at = |t: u64| {
            let end = times.partition_point(|&x| x <= t);
            (0..end).rev().find(|&i| readings.device(i) == device)
        };
        let (ia, ib) = (at(from_ns), at(to_ns));
        let allocated = |i: Option<usize>| i.map(|i| readings.allocated(i) as f64);
        let reserved = |i: Option<usize>| i.map(|i| readings.reserved(i) as f64);
        series.push(MomentSeries {
            name: "allocated".to_owned(),
            device: Some(device),
            value: Pair::new(allocated(ia), allocated(ib)),
        });
        series.push(MomentSeries {
            name: "reserved".to_owned(),
            device: Some(device),
            value: Pair::new(reserved(ia), reserved(ib)),
        });
    }
    for s in recording.series.iter().filter(|s| s.key.pid.is_none()) {
        let at = |t: u64| {
            let end = s.times_ns.partition_point(|&x| x <= t);
            end.checked_sub(1).map(|i| s.values.at(i) as f64)
        };
        series.push(MomentSeries {
            name: s.key.kind.as_str().to_owned(),
            device: s.key.device,
            value: Pair::new(at(from_ns), at(to_ns)),
        });
    }

    // The phases: occurrences wholly between the moments.
    let mut phases: Vec<MomentPhase> = analysis
        .phases
        .iter()
        .map(|p| MomentPhase {
            phase: p.phase.as_str().to_owned(),
            occurrences: 0,
            net_bytes: 0.0,
            watermark_bytes: 0.0,
            retained_bytes: None,
        })
        .collect();
    let occurrences = analysis.occurrences.as_slice();
    let lo = occurrences.partition_point(|o| o.begin_ns < from_ns);
    let mut last_whole = None;
    for (i, o) in occurrences.iter().enumerate().skip(lo) {
        if o.begin_ns > to_ns {
            break;
        }
        let Some(Some((net, watermark))) = analysis.changes.get(i) else {
            continue;
        };
        if o.end_ns > to_ns {
            continue;
        }
        let Some(p) = phases.iter_mut().find(|p| p.phase == o.phase.as_str()) else {
            continue;
        };
        // Pieces of one occurrence count once.
        if o.piece_of.is_none() || o.piece_of != last_whole {
            p.occurrences += 1;
        }
        last_whole = o.piece_of;
        p.net_bytes += net;
        p.watermark_bytes = p.watermark_bytes.max(*watermark);
        if let Some(Some(r)) = analysis.retained.get(i) {
            *p.retained_bytes.get_or_insert(0.0) += r;
        }
    }
    phases.retain(|p| p.occurrences > 0);
    let basis = series.iter().find(|s| match analysis.basis {
        crate::analysis::Basis::Allocated => s.name == "allocated",
        crate::analysis::Basis::DeviceUsed => s.name == "device_used",
        crate::analysis::Basis::HostRss => s.name == "host_rss" && s.device.is_none(),
    });
    let between_phases_bytes = basis
        .and_then(|s| s.value.change)
        .filter(|_| !phases.is_empty())
        .map(|change| change - phases.iter().map(|p| p.net_bytes).sum::<f64>());
    if phases.is_empty() && !analysis.phases.is_empty() {
        notes.push("no phase began and ended between these moments".to_owned());
    }

    // Holders: the census at or before each moment, of the process the analysis leads with.
    let pid = occurrences.first().map(|o| o.pid);
    let (ca, cb) = (
        census_at(recording, pid, from_ns),
        census_at(recording, pid, to_ns),
    );
    let holders = match (ca, cb) {
        (Some(x), Some(y)) if y.t_ns > x.t_ns => holders_between(x, y)
            .into_iter()
            .map(|h| MomentHolder {
                held: Pair::new(Some(h.from_bytes as f64), Some(h.to_bytes as f64)),
                name: h.name,
                what: h.what,
                device: h.device,
            })
            .collect(),
        _ => {
            if !recording.censuses.is_empty() {
                notes.push(
                    "no census was taken between these moments: holders are compared from census to census (the probe takes one every few steps)".to_owned(),
                );
            }
            Vec::new()
        }
    };
    Moments {
        from_ns,
        to_ns,
        steps: [step_at(from_ns), step_at(to_ns)],
        series,
        phases,
        between_phases_bytes,
        holders,
        census_steps: [ca.and_then(|c| c.step), cb.and_then(|c| c.step)],
        notes,
    }
}
