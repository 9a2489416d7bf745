//! What a snapshot answers by itself: strings, stacks and frames by id, the live blocks at any
//! time, leak suspects, the segments' state and the actions' counts.

use std::collections::BTreeMap;

use foldhash::{HashMap, HashSet};

use super::model::Lifetime;
use super::{Action, BlockState, Frame, LeakSuspect, LiveBlock, Snapshot, TraceEntry};

impl Snapshot {
    /// The CUDA stream of a trace entry.
    pub fn stream(&self, entry: &TraceEntry) -> u64 {
        self.streams
            .get(usize::from(entry.stream))
            .copied()
            .unwrap_or(0)
    }

    /// A string by id ("" when out of range).
    pub fn string(&self, id: u32) -> &str {
        self.strings.get(id as usize).map_or("", |s| s)
    }

    /// The frames of a stack, innermost first.
    pub fn stack(&self, id: u32) -> impl Iterator<Item = &Frame> {
        let i = id as usize;
        let start = self.stack_starts.get(i).copied().unwrap_or(0) as usize;
        let end = self.stack_starts.get(i + 1).copied().unwrap_or(0) as usize;
        self.stack_frames
            .get(start..end)
            .unwrap_or(&[])
            .iter()
            .filter_map(|&f| self.frames.get(f as usize))
    }

    /// A stack's frames as a person reads them: before each frame of compiled code, the frames
    /// of the user's code behind it ([`super::Behind`]), innermost first.
    pub fn stack_read(&self, id: u32) -> impl Iterator<Item = &Frame> {
        let i = id as usize;
        let start = self.stack_starts.get(i).copied().unwrap_or(0) as usize;
        let end = self.stack_starts.get(i + 1).copied().unwrap_or(0) as usize;
        let ids = self.stack_frames.get(start..end).unwrap_or(&[]);
        let behind = &self.behind;
        ids.iter()
            .flat_map(move |&f| {
                let before = if behind.is_empty() {
                    &[][..]
                } else {
                    behind.of(f)
                };
                before.iter().copied().chain(std::iter::once(f))
            })
            .filter_map(|f| self.frames.get(f as usize))
    }

    /// How many distinct stacks.
    pub fn stack_count(&self) -> usize {
        self.stack_starts.len().saturating_sub(1)
    }

    /// A frame as `name (file:line)`.
    pub fn frame_text(&self, frame: &Frame) -> String {
        let file = self.string(frame.filename);
        if frame.line > 0 && frame.line < u64::from(u32::MAX) {
            format!("{} ({file}:{})", self.string(frame.name), frame.line)
        } else if file.is_empty() || file == "??" {
            self.string(frame.name).to_owned()
        } else {
            format!("{} ({file})", self.string(frame.name))
        }
    }

    /// A frame as a site is named everywhere (the report, its JSON, `diff`, `diff --at`, the
    /// flame graph, the viewer's legends): `name (dir/file.py:line)`, the file by its last two
    /// path parts — short, and alike in two checkouts of the same code.
    pub fn frame_text_short(&self, frame: &Frame) -> String {
        spell_frame(
            self.string(frame.name),
            self.string(frame.filename),
            frame.line,
        )
    }

    /// The frames worth showing first: Python frames (a `.py` file) when the stack has any,
    /// else the C++ frames outside the allocator itself.
    pub fn user_frames(&self, stack: u32) -> Vec<&Frame> {
        let python: Vec<&Frame> = self
            .stack_read(stack)
            .filter(|f| self.string(f.filename).ends_with(".py"))
            .collect();
        if !python.is_empty() {
            return python;
        }
        self.stack(stack)
            .filter(|f| {
                let name = self.string(f.name);
                !(name.contains("CachingAllocator")
                    || name.starts_with("torch::unwind")
                    || name.starts_with("torch::CapturedTraceback")
                    || name.contains("gather_with_cpp"))
            })
            .collect()
    }

    /// The first and last time of the trace, µs since the epoch.
    pub fn time_range_us(&self) -> Option<(i64, i64)> {
        let (mut lo, mut hi) = self.entries.time_range_us().unwrap_or((i64::MAX, i64::MIN));
        for t in self
            .annotations
            .iter()
            .map(|a| a.time_us)
            .filter(|&t| t > 0)
        {
            lo = lo.min(t);
            hi = hi.max(t);
        }
        (lo <= hi).then_some((lo, hi))
    }

    /// The blocks alive at `time_us` (µs since the epoch; `i64::MAX` for the end), largest
    /// first, on `device` or on all devices: one sweep of the trace (to ask again and again,
    /// keep a [`LiveIndex`]).
    pub fn live_blocks_at(&self, time_us: i64, device: Option<u32>) -> Vec<LiveBlock> {
        LiveIndex::new(self).at(time_us, device)
    }

    /// Every block's life, from one pass over the trace: an allocation opens one, its
    /// `free_completed` closes it (an allocation at an address still open closes the older);
    /// a block freed without being allocated in the trace, or active in the segments without
    /// either, was allocated before the trace began.
    ///
    /// The pass keeps only the blocks open (a few thousand), not every address the trace ever
    /// named (millions in a long trace: a map of them took a fifth of a big snapshot's report in
    /// page faults and rehashing). What that would answer is asked afterwards, for the few
    /// addresses it matters to: a free that found no block open was taken for one allocated
    /// before the trace, and is a second free instead where its address came earlier; a
    /// segment's active block is one from before the trace where the trace never names it.
    fn lifetimes(&self) -> Vec<Lifetime> {
        let mut open: HashMap<(u32, u64), usize> = HashMap::default();
        let mut lifetimes: Vec<Lifetime> = Vec::with_capacity(self.entries.len() / 2);
        // The lifetimes made by frees that found no block open, in order.
        let mut unmatched: Vec<usize> = Vec::new();
        for e in &self.entries {
            let key = (e.device(), e.addr);
            match e.action() {
                Action::Alloc => {
                    if let Some(older) = open.insert(key, lifetimes.len()) {
                        lifetimes[older].freed_us = lifetimes[older].freed_us.min(e.time_us);
                    }
                    lifetimes.push(Lifetime {
                        device: e.device(),
                        stack: e.stack,
                        addr: e.addr,
                        size: e.size,
                        allocated_us: e.time_us,
                        freed_us: i64::MAX,
                    });
                }
                Action::FreeCompleted => match open.remove(&key) {
                    Some(at) => lifetimes[at].freed_us = lifetimes[at].freed_us.min(e.time_us),
                    None => {
                        unmatched.push(lifetimes.len());
                        lifetimes.push(Lifetime {
                            device: e.device(),
                            stack: e.stack,
                            addr: e.addr,
                            size: e.size,
                            allocated_us: i64::MIN,
                            freed_us: e.time_us,
                        });
                    }
                },
                _ => {}
            }
        }
        let from_segments: Vec<(u32, &super::Block)> = self
            .segments
            .iter()
            .flat_map(|s| s.blocks.iter().map(move |b| (s.device, b)))
            .filter(|(_, b)| b.state != BlockState::Inactive)
            .collect();
        // The latest lifetime so far at each address asked about, in one pass.
        let mut latest: HashMap<(u32, u64), Option<usize>> = unmatched
            .iter()
            .map(|&i| ((lifetimes[i].device, lifetimes[i].addr), None))
            .chain(from_segments.iter().map(|(d, b)| ((*d, b.address), None)))
            .collect();
        let mut second_frees = Vec::new();
        if !latest.is_empty() {
            let mut next_unmatched = unmatched.iter().peekable();
            for i in 0..lifetimes.len() {
                let was_unmatched = next_unmatched.next_if_eq(&&i).is_some();
                let key = (lifetimes[i].device, lifetimes[i].addr);
                let Some(before) = latest.get_mut(&key) else {
                    continue;
                };
                match *before {
                    // Freed again: the earliest free ends the block it freed.
                    Some(freed) if was_unmatched => {
                        let again = lifetimes[i].freed_us;
                        lifetimes[freed].freed_us = lifetimes[freed].freed_us.min(again);
                        second_frees.push(i);
                    }
                    _ => *before = Some(i),
                }
            }
        }
        if !second_frees.is_empty() {
            let mut i = 0;
            let mut next = second_frees.iter().peekable();
            lifetimes.retain(|_| {
                let keep = next.next_if_eq(&&i).is_none();
                i += 1;
                keep
            });
        }
        for (device, b) in from_segments {
            let seen = latest.get_mut(&(device, b.address));
            if seen.as_ref().is_some_and(|s| s.is_some()) {
                continue;
            }
            if let Some(seen) = seen {
                *seen = Some(lifetimes.len());
            }
            lifetimes.push(Lifetime {
                device,
                stack: b.stack,
                addr: b.address,
                size: b.asked(),
                allocated_us: i64::MIN,
                freed_us: i64::MAX,
            });
        }
        lifetimes.shrink_to_fit();
        lifetimes
    }

    /// Allocation sites ([`Snapshot::site`]) whose blocks, allocated inside a phase that repeats,
    /// are still alive at the end — from several occurrences of that phase. Without phases: sites that left blocks
    /// alive at three or more different times. Largest first.
    pub fn leak_suspects(&self) -> Vec<LeakSuspect> {
        self.leak_suspects_among(&self.live_blocks_at(i64::MAX, None))
    }

    /// [`Snapshot::leak_suspects`] among blocks already found alive at the end.
    pub fn leak_suspects_among(&self, alive: &[LiveBlock]) -> Vec<LeakSuspect> {
        let spans = self.phase_spans();
        // Occurrences per (device, phase name), in time order.
        let mut occurrences: BTreeMap<(u32, &str), Vec<(i64, i64)>> = BTreeMap::new();
        for span in &spans {
            occurrences
                .entry((span.device, span.name.as_str()))
                .or_default()
                .push((span.start_us, span.end_us));
        }
        // Each phase's occurrences by start, with the latest end so far: the first occurrence
        // holding a time is found by two binary searches, not a pass over all of them (a block
        // each: hundreds of thousands of blocks, thousands of occurrences).
        let mut latest_end: BTreeMap<(u32, &str), Vec<i64>> = BTreeMap::new();
        for (key, occ) in &mut occurrences {
            occ.sort_unstable();
            let ends = occ
                .iter()
                .scan(i64::MIN, |most, &(_, end)| {
                    *most = (*most).max(end);
                    Some(*most)
                })
                .collect();
            latest_end.insert(*key, ends);
        }
        let holding = |key: &(u32, &str), occ: &[(i64, i64)], t: i64| {
            first_holding(occ, latest_end.get(key)?, t)
        };
        // The one grouping by allocation site ([`super::sites::group_by_site`]), each site's
        // blocks then split by the phase occurrence that allocated them; each group shown with
        // the stack of its largest block (the first: `alive` comes largest first).
        type Group = (HashSet<usize>, Vec<i64>, u64, u32);
        let mut groups: HashMap<(u32, usize, Option<&str>), Group> = HashMap::default();
        for (g, site) in super::sites::group_by_site(self, alive).iter().enumerate() {
            for b in site.blocks.iter().map(|&i| &alive[i]) {
                let Some(t) = b.allocated_us else { continue };
                // The phase (repeated at least twice on the device) whose occurrence holds t.
                let phase = occurrences.iter().find_map(|(key @ (d, name), occ)| {
                    (*d == b.device && occ.len() >= 2)
                        .then(|| holding(key, occ, t))
                        .flatten()
                        .map(|i| (*name, i))
                });
                let (phase, occurrence) = match phase {
                    Some((name, i)) => (Some(name), i),
                    // Without phases, distinct allocation times (coarsely, per millisecond).
                    None if occurrences.is_empty() => {
                        (None, usize::try_from(t / 1000).unwrap_or(0))
                    }
                    None => continue,
                };
                let group = groups
                    .entry((site.device, g, phase))
                    .or_insert_with(|| (HashSet::default(), Vec::new(), 0, b.stack));
                group.0.insert(occurrence);
                group.1.push(t);
                group.2 += b.size;
            }
        }
        let mut suspects: Vec<LeakSuspect> = groups
            .into_iter()
            .filter(|((_, _, phase), (occ, _, _, _))| {
                occ.len() >= if phase.is_some() { 2 } else { 3 }
            })
            .map(|((device, _, phase), (occ, mut times, bytes, stack))| {
                times.sort_unstable();
                LeakSuspect {
                    device,
                    stack,
                    of: phase
                        .and_then(|p| occurrences.get(&(device, p)))
                        .map_or(0, Vec::len),
                    phase: phase.map(str::to_owned),
                    occurrences: occ.len(),
                    blocks: times.len(),
                    bytes,
                    allocated_us: times,
                }
            })
            .collect();
        // Ties in a fixed order (the groups come out of a hash map: two reads of one snapshot
        // must list them alike).
        suspects.sort_by(|a, b| {
            b.bytes
                .cmp(&a.bytes)
                .then(a.stack.cmp(&b.stack))
                .then(a.device.cmp(&b.device))
                .then(a.phase.cmp(&b.phase))
        });
        suspects
    }

    /// Trace entries per action name, in a stable order.
    pub fn action_counts(&self) -> BTreeMap<String, usize> {
        // Counted by action first: a name per entry would be an allocation per entry.
        let mut by_action: HashMap<Action, usize> = HashMap::default();
        for e in &self.entries {
            *by_action.entry(e.action()).or_insert(0) += 1;
        }
        let mut counts = BTreeMap::new();
        for (action, n) in by_action {
            *counts.entry(action.name(self).to_owned()).or_insert(0) += n;
        }
        counts
    }
}

/// The first of `spans` (sorted by start; `latest_end[i]` the latest end among the first `i + 1`)
/// that holds `t`, ends included.
fn first_holding(spans: &[(i64, i64)], latest_end: &[i64], t: i64) -> Option<usize> {
    let began = spans.partition_point(|&(start, _)| start <= t);
    let first = latest_end.get(..began)?.partition_point(|&end| end < t);
    (first < began).then_some(first)
}

/// Every block's life in a snapshot's trace, swept once: the blocks alive at any time are then
/// read off it (the viewer's Blocks tab asks at every time the user picks).
#[derive(Clone, Debug)]
pub struct LiveIndex {
    lifetimes: Vec<Lifetime>,
}

impl LiveIndex {
    /// Sweeps the trace once.
    pub fn new(snapshot: &Snapshot) -> Self {
        Self {
            lifetimes: snapshot.lifetimes(),
        }
    }

    /// The blocks alive at `time_us` (µs since the epoch; `i64::MAX` for the end), largest
    /// first, on `device` or on all devices.
    pub fn at(&self, time_us: i64, device: Option<u32>) -> Vec<LiveBlock> {
        let mut blocks: Vec<LiveBlock> = self
            .lifetimes
            .iter()
            .filter(|l| device.is_none_or(|d| d == l.device))
            .filter(|l| {
                l.allocated_us <= time_us && (l.freed_us == i64::MAX || time_us < l.freed_us)
            })
            .map(|l| LiveBlock {
                device: l.device,
                addr: l.addr,
                size: l.size,
                allocated_us: (l.allocated_us != i64::MIN).then_some(l.allocated_us),
                stack: l.stack,
            })
            .collect();
        blocks.sort_unstable_by(|a, b| {
            (b.size.cmp(&a.size))
                .then(a.addr.cmp(&b.addr))
                .then(a.device.cmp(&b.device))
        });
        blocks
    }
}

/// How every face spells a frame: `name (dir/file.py:line)`, the file by its last two path parts
/// (the line left out where unknown, the file where there is none).
pub fn spell_frame(name: &str, file: &str, line: u64) -> String {
    let file = file.replace('\\', "/");
    let mut parts = file.rsplit('/');
    let last = parts.next().unwrap_or("");
    let short = match parts.next() {
        Some(dir) if !dir.is_empty() => format!("{dir}/{last}"),
        _ => last.to_owned(),
    };
    if line > 0 && line < u64::from(u32::MAX) && !short.is_empty() {
        format!("{name} ({short}:{line})")
    } else if short.is_empty() || short == "??" {
        name.to_owned()
    } else {
        format!("{name} ({short})")
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    proptest! {
        /// The binary searches find what a pass over the spans finds, overlapping or not.
        #[test]
        fn the_first_span_holding_a_time_is_found_by_search(
            mut spans in proptest::collection::vec((0i64..200, 0i64..60), 0..40),
            t in -5i64..270,
        ) {
            let mut spans: Vec<(i64, i64)> =
                spans.drain(..).map(|(start, len)| (start, start + len)).collect();
            spans.sort_unstable();
            let latest_end: Vec<i64> = spans
                .iter()
                .scan(i64::MIN, |most, &(_, end)| {
                    *most = (*most).max(end);
                    Some(*most)
                })
                .collect();
            let pass = spans.iter().position(|&(s, e)| s <= t && t <= e);
            prop_assert_eq!(super::first_holding(&spans, &latest_end, t), pass);
        }
    }
}
