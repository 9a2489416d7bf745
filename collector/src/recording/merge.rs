//! Several recordings of one run (one collector per node: `srun collector --out run-%h.msgpack
//! …`) as one: aligned by wall clock, each node's series kept apart, every rank's records in
//! one place, and the files that do not belong named with the reason.

use super::{Chunk, Column, Record, Recording, SeriesKey};

/// How far apart two nodes' recordings may start and still be one run.
const SAME_RUN_NS: u64 = 10 * 60 * 1_000_000_000;
/// Nodes of one run record at the same time: one that began this long after the first ended is
/// another run (a node's job that died at its start, and another node's collector that a
/// scheduler started late, still overlap within it).
const OVERLAP_GRACE_NS: u64 = 60 * 1_000_000_000;

/// Whether recordings with these headers look like the nodes of one run (one collector per node):
/// at least two, each from its own host, of one command, started within ten minutes of each
/// other. (Two runs of one job on one machine, compared before and after a fix, are not.)
pub fn are_nodes_of_one_run(headers: &[&super::Header]) -> bool {
    let Some(first) = headers.first() else {
        return false;
    };
    let mut hosts: Vec<&str> = headers.iter().map(|h| h.host.as_str()).collect();
    hosts.sort_unstable();
    hosts.dedup();
    let (lo, hi) = headers.iter().fold((u64::MAX, 0), |(lo, hi), h| {
        (lo.min(h.start_unix_ns), hi.max(h.start_unix_ns))
    });
    headers.len() >= 2
        && hosts.len() == headers.len()
        && !hosts.contains(&"")
        && headers.iter().all(|h| h.command == first.command)
        && hi - lo <= SAME_RUN_NS
}

/// One run from several nodes' recordings, and what did not fit.
#[derive(Debug)]
pub struct Merged {
    /// The run: the first recording's header (its start is the earliest), times from it.
    pub recording: Recording,
    /// The files merged, by index in the input, with their hosts.
    pub hosts: Vec<String>,
    /// Files left out, by index in the input, and why.
    pub left_out: Vec<(usize, String)>,
}

/// Merges `recordings` (at least one). A recording of another job (another command, or started
/// more than ten minutes from the others) is left out and named; ranks claimed by two files are
/// kept and said in a warning.
pub fn merge(recordings: Vec<Recording>) -> Merged {
    let mut left_out = Vec::new();
    // The run is where most recordings start together (a stray file from another day is the odd
    // one out, even when it is the earliest); its earliest recording gives the header and t = 0.
    let starts: Vec<u64> = recordings.iter().map(|r| r.header.start_unix_ns).collect();
    let together = |i: usize| {
        starts
            .iter()
            .filter(|&&s| s.abs_diff(starts[i]) <= SAME_RUN_NS)
            .count()
    };
    let anchor = (0..starts.len()).max_by_key(|&i| (together(i), std::cmp::Reverse(starts[i])));
    let Some(first) = anchor.and_then(|a| {
        (0..starts.len())
            .filter(|&i| starts[a].abs_diff(starts[i]) <= SAME_RUN_NS)
            .min_by_key(|&i| starts[i])
    }) else {
        return Merged {
            recording: Recording::new(super::Header::new(0, String::new(), Vec::new())),
            hosts: Vec::new(),
            left_out,
        };
    };
    let start = recordings[first].header.start_unix_ns;
    let command = recordings[first].header.command.clone();
    let first_ends = start.saturating_add(recordings[first].duration_ns());
    let mut merged = Recording::new(recordings[first].header.clone());
    let mut hosts = Vec::new();
    let mut rank_files: std::collections::BTreeMap<u32, Vec<usize>> = Default::default();
    let mut ends = Vec::new();
    for (index, recording) in recordings.into_iter().enumerate() {
        let offset = recording.header.start_unix_ns.saturating_sub(start);
        if recording.header.command != command {
            left_out.push((
                index,
                format!(
                    "another job: its command is `{}`, not `{}`",
                    recording.header.command.join(" "),
                    command.join(" ")
                ),
            ));
            continue;
        }
        let before = start.saturating_sub(recording.header.start_unix_ns);
        if offset > SAME_RUN_NS || before > 0 {
            let (apart, when) = if before > 0 {
                (before, "before")
            } else {
                (offset, "after")
            };
            left_out.push((
                index,
                format!(
                    "another run: it started {:.0} s {when} the others",
                    apart as f64 / 1e9
                ),
            ));
            continue;
        }
        // (None begins before the first: those were left out above.)
        let began = starts[index];
        if began > first_ends.saturating_add(OVERLAP_GRACE_NS) {
            left_out.push((
                index,
                format!(
                    "another run: it began {:.0} s after the first recording ended, so they never recorded at the same time (two runs are compared with `collector diff A B`)",
                    (began - first_ends) as f64 / 1e9
                ),
            ));
            continue;
        }
        hosts.push(recording.header.host.clone());
        let node = hosts.len() - 1;
        let mut ranks: Vec<u32> = recording
            .phases
            .iter()
            .filter_map(|e| e.origin.rank)
            .collect();
        ranks.sort_unstable();
        ranks.dedup();
        for rank in ranks {
            rank_files.entry(rank).or_default().push(index);
        }
        // Each node's series stay its own: its host memory is that node's process tree.
        for series in &recording.series {
            let key = if node == 0 {
                series.key.clone()
            } else {
                SeriesKey {
                    pid: series.key.pid.or(Some(u32::MAX - node as u32)),
                    ..series.key.clone()
                }
            };
            merged.push(Record::Chunk(Chunk {
                times_ns: series.times_ns.iter().map(|t| t + offset).collect(),
                columns: vec![Column {
                    series: key,
                    values: series.values.to_vec(),
                    valid: None,
                }],
            }));
        }
        if node > 0 {
            for device in &recording.header.devices {
                if !merged.header.devices.iter().any(|d| d.uuid == device.uuid) {
                    merged.header.devices.push(device.clone());
                }
            }
        }
        let shift = |t: u64| t + offset;
        merged.phases.extend(recording.phases.iter().map(|mut e| {
            e.t_ns = shift(e.t_ns);
            e
        }));
        merged
            .cells
            .extend(recording.cells.iter().cloned().map(|mut e| {
                e.t_ns = shift(e.t_ns);
                e
            }));
        merged
            .allocator
            .extend(recording.allocator.iter().map(|mut a| {
                a.t_ns = shift(a.t_ns);
                a
            }));
        merged.ooms.extend(recording.ooms.into_iter().map(|mut o| {
            o.t_ns = shift(o.t_ns);
            o
        }));
        merged
            .exits
            .extend(recording.exits.into_iter().map(|mut x| {
                x.t_ns = shift(x.t_ns);
                x
            }));
        merged.drops.extend(recording.drops);
        merged.notes.extend(recording.notes);
        merged
            .snapshots
            .extend(recording.snapshots.into_iter().map(|mut f| {
                f.t_ns = shift(f.t_ns);
                f
            }));
        merged
            .categories
            .extend(recording.categories.into_iter().map(|mut c| {
                c.t_ns = shift(c.t_ns);
                c
            }));
        merged
            .censuses
            .extend(recording.censuses.into_iter().map(|mut c| {
                c.t_ns = shift(c.t_ns);
                c
            }));
        merged
            .saved_freed
            .extend(recording.saved_freed.into_iter().map(|mut f| {
                f.t_ns = shift(f.t_ns);
                f
            }));
        merged
            .unobserved
            .extend(recording.unobserved.into_iter().map(|mut u| {
                u.t_ns = shift(u.t_ns);
                u.since_ns = shift(u.since_ns);
                u
            }));
        merged.warnings.extend(
            recording
                .warnings
                .into_iter()
                .map(|w| format!("{}: {w}", recording.header.host)),
        );
        ends.push(recording.end.map(|mut end| {
            end.t_ns += offset;
            end
        }));
    }
    // Complete when every node's recording is.
    merged.end = ends.iter().all(Option::is_some).then(|| super::End {
        t_ns: ends.iter().flatten().map(|e| e.t_ns).max().unwrap_or(0),
        records: ends.iter().flatten().map(|e| e.records).sum(),
        samples: ends.iter().flatten().map(|e| e.samples).sum(),
        dropped: ends.iter().flatten().map(|e| e.dropped).sum(),
    });
    for (rank, files) in rank_files {
        if files.len() > 1 {
            merged.warnings.push(format!(
                "rank {rank} is claimed by {} recordings: the process with the most phase edges is judged as rank {rank}",
                files.len()
            ));
        }
    }
    merged.phases = std::mem::take(&mut merged.phases).sorted_by_time();
    merged.allocator = std::mem::take(&mut merged.allocator).sorted_by_time();
    merged.ooms.sort_by_key(|o| o.t_ns);
    merged.exits.sort_by_key(|x| x.t_ns);
    merged.saved_freed.sort_by_key(|f| f.t_ns);
    merged.unobserved.sort_by_key(|u| u.t_ns);
    Merged {
        recording: merged,
        hosts,
        left_out,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // In tests a panic is how a failure is reported.

    use super::*;
    use crate::recording::{Header, Origin, SavedFreed, Unobserved};

    /// Every node's records of what backwards freed and of the steps not observed are kept,
    /// on the merged clock.
    #[test]
    fn what_backwards_freed_and_the_steps_not_observed_survive_a_merge() {
        let node = |host: &str, start_unix_ns: u64, pid: u32| {
            let command = vec!["python".to_owned(), "train.py".to_owned()];
            let mut recording =
                Recording::new(Header::new(start_unix_ns, host.to_owned(), command));
            let origin = Origin {
                pid,
                rank: Some(pid),
            };
            recording.push(Record::SavedFreed(SavedFreed {
                t_ns: 5_000,
                origin,
                step: Some(3),
                device: Some(0),
                bytes: 64 << 20,
            }));
            recording.push(Record::Unobserved(Unobserved {
                t_ns: 9_000,
                origin,
                since_ns: 7_000,
                first_step: Some(100),
                steps: 7,
            }));
            recording
        };
        let start = 1_764_400_000_000_000_000;
        let merged = merge(vec![
            node("node-a", start, 0),
            node("node-b", start + 1_000_000, 1),
        ]);
        assert!(merged.left_out.is_empty(), "{:?}", merged.left_out);
        let run = merged.recording;
        let freed: Vec<(u64, u32)> = run
            .saved_freed
            .iter()
            .map(|f| (f.t_ns, f.origin.pid))
            .collect();
        assert_eq!(freed, vec![(5_000, 0), (1_005_000, 1)]);
        let spans: Vec<(u64, u64, u32)> = run
            .unobserved
            .iter()
            .map(|u| (u.since_ns, u.t_ns, u.origin.pid))
            .collect();
        assert_eq!(spans, vec![(7_000, 9_000, 0), (1_007_000, 1_009_000, 1)]);
    }
}
