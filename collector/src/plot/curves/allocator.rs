//! The allocator's curves (allocated, reserved, peak) per process and device: the recording's
//! columns themselves where one process on one device sent them in time order, else copies per
//! process and device; extended, not rebuilt, as a followed recording grows.

use std::collections::BTreeMap;

use crate::recording::{AllocatorReadings, Recording, Values};

use super::{Levels, ReadingsOf, Source, Trace, TraceKind, process_name};

/// Allocated, reserved and peak curves per process and device, from the probe's numbers.
pub(super) fn allocator_traces(
    recording: &Recording,
    levels: &impl Fn(&[u64], &Values) -> Levels,
) -> Vec<Trace> {
    let readings = &recording.allocator;
    if let Some((origin, device)) = readings.only_source()
        && readings.times_ns().is_sorted()
    {
        // The curves are the columns themselves: no copy of millions of readings.
        return [TraceKind::Allocated, TraceKind::Reserved, TraceKind::Peak]
            .into_iter()
            .map(|kind| Trace {
                kind,
                device: Some(device),
                device_name: Some(recording.header.device_name(device)),
                origin: None,
                levels: levels(readings.times_ns(), allocator_column(readings, kind)),
                covered: readings.len(),
                shade: 0,
                readings: Some(ReadingsOf {
                    key: (origin.pid, origin.rank, device),
                    upto: readings.len(),
                }),
                source: Source::Readings,
            })
            .collect();
    }
    let mut groups: BTreeMap<(u32, Option<u32>, u32), Vec<usize>> = BTreeMap::new();
    for i in 0..readings.len() {
        let (origin, device) = readings.source(i);
        groups
            .entry((origin.pid, origin.rank, device))
            .or_default()
            .push(i);
    }
    let several = groups
        .keys()
        .map(|k| k.0)
        .collect::<std::collections::BTreeSet<_>>()
        .len()
        > 1;
    let mut traces = Vec::new();
    for ((pid, rank, device), mut indices) in groups {
        if !indices.is_sorted_by_key(|&i| readings.t_ns(i)) {
            indices.sort_by_key(|&i| readings.t_ns(i));
        }
        let origin = several.then(|| process_name(pid, rank));
        let times_ns = std::sync::Arc::new(
            indices
                .iter()
                .map(|&i| readings.t_ns(i))
                .collect::<Vec<u64>>(),
        );
        for kind in [TraceKind::Allocated, TraceKind::Reserved, TraceKind::Peak] {
            let mut values = Values::new();
            values.reserve_exact(indices.len());
            values.extend(indices.iter().map(|&i| allocator_value(readings, kind, i)));
            traces.push(Trace {
                kind,
                device: Some(device),
                device_name: Some(recording.header.device_name(device)),
                origin: origin.clone(),
                levels: levels(&times_ns, &values),
                covered: values.len(),
                shade: 0,
                readings: Some(ReadingsOf {
                    key: (pid, rank, device),
                    upto: readings.len(),
                }),
                source: Source::Owned {
                    times_ns: std::sync::Arc::clone(&times_ns),
                    values,
                },
            });
        }
    }
    traces
}

/// The column of the readings that the allocator curve of `kind` draws.
pub(super) fn allocator_column(readings: &AllocatorReadings, kind: TraceKind) -> &Values {
    match kind {
        TraceKind::Reserved => readings.reserved_values(),
        TraceKind::Peak => readings.peak_values(),
        _ => readings.allocated_values(),
    }
}

/// What the allocator curve of `kind` draws of reading `i`.
fn allocator_value(readings: &AllocatorReadings, kind: TraceKind, i: usize) -> u64 {
    allocator_column(readings, kind).at(i)
}

/// The allocator's curves `old` (made by [`allocator_traces`] from fewer readings) extended by
/// the readings that arrived since; `None` when they must be made again: a reading from a new
/// process or device, or one earlier than its curve's last.
pub(super) fn grow_allocator_traces(
    mut old: Vec<Trace>,
    recording: &Recording,
) -> Option<Vec<Trace>> {
    let readings = &recording.allocator;
    let upto = old.first()?.readings?.upto;
    if upto > readings.len() || old.iter().any(|t| t.readings.map(|r| r.upto) != Some(upto)) {
        return None;
    }
    if old.iter().any(|t| matches!(t.source, Source::Readings)) {
        // Curves over the columns: extended while the readings still come from that one
        // process and device, in time order.
        let (origin, device) = readings.only_source()?;
        let times = readings.times_ns();
        if old.iter().any(|t| {
            !matches!(t.source, Source::Readings)
                || t.readings.map(|r| r.key) != Some((origin.pid, origin.rank, device))
        }) || !times[upto.saturating_sub(1)..].is_sorted()
        {
            return None;
        }
        for trace in &mut old {
            let values = allocator_column(readings, trace.kind);
            trace.levels.extend(times, values, trace.covered);
            trace.covered = values.len();
            if let Some(r) = &mut trace.readings {
                r.upto = readings.len();
            }
        }
        return Some(old);
    }
    // The new readings of each curve's process and device, in order.
    let mut new: BTreeMap<(u32, Option<u32>, u32), Vec<usize>> = BTreeMap::new();
    for i in upto..readings.len() {
        let (origin, device) = readings.source(i);
        new.entry((origin.pid, origin.rank, device))
            .or_default()
            .push(i);
    }
    for (key, indices) in &new {
        let trace = old
            .iter()
            .find(|t| t.readings.is_some_and(|r| r.key == *key))?;
        let Source::Owned { times_ns, .. } = &trace.source else {
            return None;
        };
        let last = times_ns.last().copied().unwrap_or(0);
        let times = indices.iter().map(|&i| readings.t_ns(i));
        if !times.clone().is_sorted() || times.clone().next().is_some_and(|t| t < last) {
            return None;
        }
    }
    for (key, indices) in new {
        // The three curves of one process and device share one time column: let go of it in
        // all but the first, extend it in place there, share it again.
        let mine: Vec<usize> = (0..old.len())
            .filter(|&k| old[k].readings.is_some_and(|r| r.key == key))
            .collect();
        let none = std::sync::Arc::new(Vec::new());
        for &k in &mine[1..] {
            if let Source::Owned { times_ns, .. } = &mut old[k].source {
                *times_ns = std::sync::Arc::clone(&none);
            }
        }
        let mut shared = None;
        for &k in &mine {
            let trace = &mut old[k];
            let Source::Owned { times_ns, values } = &mut trace.source else {
                continue;
            };
            match &shared {
                None => {
                    std::sync::Arc::make_mut(times_ns)
                        .extend(indices.iter().map(|&i| readings.t_ns(i)));
                    shared = Some(std::sync::Arc::clone(times_ns));
                }
                Some(column) => *times_ns = std::sync::Arc::clone(column),
            }
            values.extend(
                indices
                    .iter()
                    .map(|&i| allocator_value(readings, trace.kind, i)),
            );
            trace.levels.extend(times_ns, values, trace.covered);
            trace.covered = values.len();
        }
    }
    for trace in &mut old {
        if let Some(r) = &mut trace.readings {
            r.upto = readings.len();
        }
    }
    Some(old)
}
