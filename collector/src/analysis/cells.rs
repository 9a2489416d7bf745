//! A notebook's cells: what each run of a cell kept, and what a cell run again and again adds each
//! time (the probe marks each cell's run while a kernel records itself: [`Recording::cells`]).

use crate::recording::{Edge, Recording, SeriesKey, SeriesKind};

/// One run of a cell.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct CellRun {
    /// Its execution count (`In[N]`).
    pub count: u64,
    /// Its first line (`…` where more follow).
    pub source: String,
    /// When it began and ended, ns after the start.
    pub begin_ns: u64,
    /// When it ended; `None` where it did not (the kernel died in it, or the recording ended).
    pub end_ns: Option<u64>,
    /// The memory measured before it and after it, bytes (see [`CellRuns::measure`]).
    pub before: Option<u64>,
    /// After it.
    pub after: Option<u64>,
    /// Whether an out-of-memory error came while it ran.
    pub oom: bool,
    /// What the last census found the notebook holding for this cell: its displayed value
    /// (`Out[N]`), the locals of its frames kept by the last error's traceback; `(name, bytes)`.
    pub held_by: Vec<(String, u64)>,
}

impl CellRun {
    /// Its holders as the report and the verdict say them: `Out[3] (16.0 MiB), big (4.00 MiB)`;
    /// `None` where the notebook holds nothing of it.
    pub fn held_text(&self) -> Option<String> {
        let held: Vec<String> = self
            .held_by
            .iter()
            .map(|(name, bytes)| format!("{name} ({})", crate::format::format_bytes(*bytes as f64)))
            .collect();
        (!held.is_empty()).then(|| held.join(", "))
    }

    /// What it kept: the memory after it less before it (negative: it freed).
    pub fn kept(&self) -> Option<i64> {
        let (before, after) = (self.before?, self.after?);
        Some(i64::try_from(after).ok()? - i64::try_from(before).ok()?)
    }
}

/// A cell run more than once, each run keeping memory: what it adds each time.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Rerun {
    /// The cell's first line.
    pub source: String,
    /// Its runs' execution counts, in order.
    pub counts: Vec<u64>,
    /// The least any of its runs kept, bytes.
    pub least_kept: u64,
    /// What its runs kept in all.
    pub kept: u64,
}

/// The cells' runs of a recording, and what they say.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CellRuns {
    /// What was measured: `"allocated"` (PyTorch's allocator, once CUDA was up) or
    /// `"host memory"` (the kernel's resident memory).
    pub measure: &'static str,
    /// Each run, in order.
    pub runs: Vec<CellRun>,
    /// The cells run several times whose every run kept at least [`RERUN_FLOOR_BYTES`].
    pub reruns: Vec<Rerun>,
}

impl CellRuns {
    /// Whether no cell was marked.
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }
}

/// What a run must keep for a re-run to count as adding memory each time: above the noise of
/// resident memory between cells (pages touched, the allocator's arenas).
pub const RERUN_FLOOR_BYTES: u64 = 4 << 20;

/// The cells' runs in `recording`, each with the memory before and after it: PyTorch's allocated
/// bytes where the kernel used CUDA (its readings at the cell's edges), else its resident memory
/// (as the edges read it, else the collector's samples nearest outside the cell). Empty where no
/// cell was marked.
pub fn cells(recording: &Recording) -> CellRuns {
    let mut runs: Vec<CellRun> = Vec::new();
    for edge in &recording.cells {
        let Some((count, source)) = edge.phase.cell() else {
            continue;
        };
        match edge.edge {
            // Resident memory as the edge read it, for where the kernel has no allocator numbers.
            Edge::Begin => runs.push(CellRun {
                count,
                source: source.to_owned(),
                begin_ns: edge.t_ns,
                end_ns: None,
                before: edge.host_rss,
                after: None,
                oom: false,
                held_by: Vec::new(),
            }),
            // Cells do not nest: an end closes the run still open. Its count is the end's (the
            // execution count is certain once the cell ran; some IPythons have counted it
            // already when the cell starts, some not).
            Edge::End => {
                if let Some(run) = runs.last_mut().filter(|r| r.end_ns.is_none()) {
                    run.count = count;
                    run.end_ns = Some(edge.t_ns);
                    run.after = edge.host_rss;
                }
            }
        }
    }
    if runs.is_empty() {
        return CellRuns::default();
    }
    let allocated = allocated_readings(recording);
    let measure = if allocated.is_empty() {
        "host memory"
    } else {
        "allocated"
    };
    let resident = recording.series(&SeriesKey::new(SeriesKind::HostRss));
    // The last reading at or before `t` (the first after, where none is before), and the first
    // at or after `t` (the last before, where none is after).
    let at_or_before = |times: &[u64], t: u64| times.partition_point(|&x| x <= t).checked_sub(1);
    let at_or_after = |times: &[u64], t: u64| {
        let i = times.partition_point(|&x| x < t);
        (i < times.len()).then_some(i)
    };
    let allocated_times: Vec<u64> = allocated.iter().map(|&(t, _)| t).collect();
    let value = |t: u64, after: bool| -> Option<u64> {
        if !allocated.is_empty() {
            let times = &allocated_times;
            let i = at_or_before(times, t).or_else(|| at_or_after(times, t))?;
            return Some(allocated[i].1);
        }
        let series = resident?;
        let times: &[u64] = &series.times_ns;
        let i = if after {
            at_or_after(times, t).or_else(|| at_or_before(times, t))
        } else {
            at_or_before(times, t).or_else(|| at_or_after(times, t))
        }?;
        series.values.get(i)
    };
    for run in &mut runs {
        if measure == "allocated" || run.before.is_none() {
            run.before = value(run.begin_ns, false);
        }
        if measure == "allocated" || run.after.is_none() {
            run.after = run.end_ns.and_then(|t| value(t, true));
        }
        let end = run.end_ns.unwrap_or(u64::MAX);
        run.oom = recording
            .ooms
            .iter()
            .any(|o| (run.begin_ns..=end).contains(&o.t_ns));
        // The census names a cell's holders as the notebook knows them: "Out[N]", and "(cell
        // [N], line L)" in what a traceback's local is.
        let (output, place) = (
            format!("Out[{}]", run.count),
            format!("(cell [{}],", run.count),
        );
        if let Some(census) = recording.censuses.last() {
            run.held_by = census
                .holders
                .iter()
                .filter(|h| h.name == output || h.what.contains(&place))
                .map(|h| (h.name.clone(), h.bytes))
                .collect();
        }
    }
    CellRuns {
        measure,
        reruns: reruns(&runs),
        runs,
    }
}

/// A finding for each cell that keeps memory every time it runs: a notebook's leak, in the cell
/// the user runs again.
pub(super) fn judge(analysis: &mut super::Analysis) {
    use crate::format::format_bytes;
    let basis = analysis.basis;
    let mut findings = Vec::new();
    for rerun in &analysis.cells.reruns {
        let counts: Vec<String> = rerun.counts.iter().map(|c| format!("[{c}]")).collect();
        let evidence = analysis
            .cells
            .runs
            .iter()
            .filter(|r| r.source == rerun.source)
            .map(|r| {
                format!(
                    "cell [{}] kept {} ({} before it, {} after){}",
                    r.count,
                    format_bytes(r.kept().unwrap_or(0) as f64),
                    format_bytes(r.before.unwrap_or(0) as f64),
                    format_bytes(r.after.unwrap_or(0) as f64),
                    r.held_text()
                        .map_or(String::new(), |held| format!(", held by {held}"))
                )
            })
            .collect();
        findings.push(super::Finding {
            kind: super::FindingKind::CellKeeps,
            title: format!(
                "Each run of cell `{}` keeps memory: at least {} a run, {} in {} runs ({})",
                rerun.source,
                format_bytes(rerun.least_kept as f64),
                format_bytes(rerun.kept as f64),
                rerun.counts.len(),
                counts.join(", ")
            ),
            phase: None,
            basis,
            growth_per_step_bytes: None,
            evidence,
            hints: vec![
                "a cell that adds to a global (a list, a dict) or whose value the notebook displays keeps what it made each time it runs: `del` what you no longer need, `%reset -f out` for the displayed values, or run the cell once".to_owned(),
            ],
        });
    }
    analysis.findings.extend(findings);
}

/// The allocated bytes of the process that marked the cells, `(time, bytes)` in time order, on its
/// first device.
fn allocated_readings(recording: &Recording) -> Vec<(u64, u64)> {
    let Some(pid) = recording.cells.first().map(|e| e.origin.pid) else {
        return Vec::new();
    };
    let readings = &recording.allocator;
    let Some(device) = readings
        .indices_of(|(origin, _)| origin.pid == pid)
        .map(|i| readings.device(i))
        .min()
    else {
        return Vec::new();
    };
    let mut out: Vec<(u64, u64)> = readings
        .indices_of(|&(origin, d)| origin.pid == pid && d == device)
        .map(|i| (readings.t_ns(i), readings.allocated(i)))
        .collect();
    out.sort_by_key(|&(t, _)| t);
    out
}

/// The cells run more than once whose every run kept at least [`RERUN_FLOOR_BYTES`], in the order
/// of their first run.
fn reruns(runs: &[CellRun]) -> Vec<Rerun> {
    let mut out: Vec<Rerun> = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    for run in runs {
        if seen.contains(&run.source.as_str()) {
            continue;
        }
        seen.push(&run.source);
        let same: Vec<&CellRun> = runs.iter().filter(|r| r.source == run.source).collect();
        let kept: Option<Vec<u64>> = same
            .iter()
            .map(|r| r.kept().and_then(|k| u64::try_from(k).ok()))
            .collect();
        let Some(kept) = kept else { continue };
        let least = kept.iter().copied().min().unwrap_or(0);
        if same.len() >= 2 && least >= RERUN_FLOOR_BYTES {
            out.push(Rerun {
                source: run.source.clone(),
                counts: same.iter().map(|r| r.count).collect(),
                least_kept: least,
                kept: kept.iter().sum(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recording::{AllocatorSample, Origin, Phase, PhaseEdge, Record};

    const MIB: u64 = 1 << 20;

    fn cell(recording: &mut Recording, t_ns: u64, edge: Edge, count: u64, source: &str) {
        recording.push(Record::Phase(PhaseEdge {
            t_ns,
            edge,
            phase: Phase::from(format!("cell [{count}]: {source}")),
            step: None,
            origin: Origin { pid: 7, rank: None },
            host_heap: None,
            host_rss: None,
        }));
    }

    /// A cell run three times that keeps 64 MiB each time, and one that frees what it made: the
    /// runs' allocated bytes before and after, the re-run found, the other not; the cells are not
    /// phases.
    #[test]
    fn a_cell_run_again_and_again_adds_what_each_run_kept() {
        let mut recording = Recording::new(crate::recording::Header::new(
            0,
            "host".into(),
            vec!["ipykernel".into()],
        ));
        let mut allocated = 100 * MIB;
        let mut t = 0;
        let reading = |recording: &mut Recording, t: u64, allocated: u64| {
            recording.push(Record::Allocator(AllocatorSample {
                t_ns: t,
                origin: Origin { pid: 7, rank: None },
                device: 0,
                allocated,
                reserved: 1 << 30,
                peak: allocated,
                ..Default::default()
            }));
        };
        for (count, source, keeps) in [
            (3, "outputs.append(model(x))", 64 * MIB),
            (4, "tmp = model(x); del tmp", 0),
            (5, "outputs.append(model(x))", 64 * MIB),
            (6, "outputs.append(model(x))", 64 * MIB),
        ] {
            reading(&mut recording, t, allocated);
            cell(&mut recording, t + 1, Edge::Begin, count, source);
            reading(&mut recording, t + 2, allocated + 512 * MIB);
            allocated += keeps;
            reading(&mut recording, t + 3, allocated);
            cell(&mut recording, t + 4, Edge::End, count, source);
            t += 10;
        }
        // An out-of-memory error in cell [5]'s run (at 21 ns: its run spans 21 to 24).
        recording.push(Record::Oom(crate::recording::Oom {
            t_ns: 22,
            ..Default::default()
        }));
        assert!(recording.phases.is_empty(), "cells are not phases");
        // Written and read again (as `collector import` and a merge write them): the same cells.
        let mut bytes = Vec::new();
        crate::recording::write_to(&mut bytes, &recording).unwrap();
        let again = crate::recording::read_recording(&bytes).unwrap();
        assert_eq!(again.cells, recording.cells);
        assert!(again.phases.is_empty());
        let cells = cells(&recording);
        assert_eq!(cells.measure, "allocated");
        let kept: Vec<(u64, Option<i64>)> =
            cells.runs.iter().map(|r| (r.count, r.kept())).collect();
        let mib = i64::try_from(MIB).unwrap();
        assert_eq!(
            kept,
            [
                (3, Some(64 * mib)),
                (4, Some(0)),
                (5, Some(64 * mib)),
                (6, Some(64 * mib))
            ]
        );
        let ran_out: Vec<u64> = cells
            .runs
            .iter()
            .filter(|r| r.oom)
            .map(|r| r.count)
            .collect();
        assert_eq!(ran_out, [5]);
        assert_eq!(
            cells.reruns,
            [Rerun {
                source: "outputs.append(model(x))".into(),
                counts: vec![3, 5, 6],
                least_kept: 64 * MIB,
                kept: 192 * MIB,
            }]
        );
        // A cell named as the probe names it; other phases are not cells.
        assert_eq!(
            Phase::from("cell [12]: train(model, 3) …".to_owned()).cell(),
            Some((12, "train(model, 3) …"))
        );
        assert_eq!(Phase::from("cellular".to_owned()).cell(), None);
        assert_eq!(Phase::Forward.cell(), None);
    }
}
