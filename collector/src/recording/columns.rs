//! The probe's records held by column, as the file stores them since format 1.3: a week of
//! phase edges and allocator readings is millions of them, and as structs they would take more
//! memory than the samples. Each column holds its numbers as [`Values`] do (in 32 bits where
//! they fit); who sent a record (and which phase, which device) is a small table that each
//! record points into.

use std::collections::HashMap;

use super::values::Values;
use super::{AllocatorSample, Edge, Origin, Phase, PhaseEdge};

/// Optional numbers: the values (0 where absent) and one bit per value that says which are there.
#[derive(Clone, Debug, Default)]
struct Optional {
    values: Values,
    present: Vec<u64>,
}

impl Optional {
    fn push(&mut self, value: Option<u64>) {
        let i = self.values.len();
        if i.is_multiple_of(64) {
            self.present.push(0);
        }
        if value.is_some()
            && let Some(word) = self.present.last_mut()
        {
            *word |= 1 << (i % 64);
        }
        self.values.push(value.unwrap_or(0));
    }

    #[inline]
    fn get(&self, i: usize) -> Option<u64> {
        (self.present[i / 64] & (1 << (i % 64)) != 0).then(|| self.values.at(i))
    }

    fn shrink_to_fit(&mut self) {
        self.values.shrink_to_fit();
        self.present.shrink_to_fit();
    }

    fn heap_bytes(&self) -> usize {
        self.values.heap_bytes() + self.present.capacity() * 8
    }
}

/// A small table of distinct things that records point into by number.
#[derive(Clone, Debug)]
struct Table<K> {
    items: Vec<K>,
    index: HashMap<K, u32>,
}

impl<K> Default for Table<K> {
    fn default() -> Self {
        Self {
            items: Vec::new(),
            index: HashMap::new(),
        }
    }
}

impl<K: Clone + Eq + std::hash::Hash> Table<K> {
    fn number(&mut self, item: &K) -> u32 {
        // A few senders, phases and devices: found by looking, not hashing.
        if let Some(n) = self.items.iter().take(16).position(|k| k == item) {
            return n as u32;
        }
        if let Some(&n) = self.index.get(item) {
            return n;
        }
        let n = self.items.len() as u32;
        self.items.push(item.clone());
        self.index.insert(item.clone(), n);
        n
    }

    /// Changes every item; items made equal stay apart (they are still read right).
    fn map(&mut self, mut f: impl FnMut(&mut K)) {
        self.items.iter_mut().for_each(&mut f);
        self.index = self
            .items
            .iter()
            .enumerate()
            .map(|(n, item)| (item.clone(), n as u32))
            .collect();
    }
}

/// The PyTorch caching allocator's numbers as the probe sent them, by column.
#[derive(Clone, Debug, Default)]
pub struct AllocatorReadings {
    t_ns: Vec<u64>,
    source: Vec<u32>,
    sources: Table<(Origin, u32)>,
    allocated: Values,
    reserved: Values,
    peak: Values,
    active: Values,
    inactive_split: Values,
    retries: Values,
    ooms: Values,
}

impl AllocatorReadings {
    /// Adds one reading.
    pub fn push(&mut self, sample: AllocatorSample) {
        self.t_ns.push(sample.t_ns);
        let source = self.sources.number(&(sample.origin, sample.device));
        self.source.push(source);
        self.allocated.push(sample.allocated);
        self.reserved.push(sample.reserved);
        self.peak.push(sample.peak);
        self.active.push(sample.active);
        self.inactive_split.push(sample.inactive_split);
        self.retries.push(sample.retries);
        self.ooms.push(sample.ooms);
    }

    /// Adds readings of one sender about one device, the columns given (the others 0): a column
    /// checked once for the batch, not at every reading.
    pub fn extend_from_one_source(
        &mut self,
        (origin, device): (Origin, u32),
        t_ns: &[u64],
        [allocated, reserved, peak]: [&[u64]; 3],
        zeros: &[u64],
    ) {
        let n = t_ns.len();
        assert!(
            allocated.len() == n && reserved.len() == n && peak.len() == n && zeros.len() >= n,
            "columns of unequal lengths"
        );
        self.t_ns.extend_from_slice(t_ns);
        let source = self.sources.number(&(origin, device));
        self.source.extend(std::iter::repeat_n(source, n));
        self.allocated.extend_from_slice(allocated);
        self.reserved.extend_from_slice(reserved);
        self.peak.extend_from_slice(peak);
        for column in [
            &mut self.active,
            &mut self.inactive_split,
            &mut self.retries,
            &mut self.ooms,
        ] {
            column.extend_from_slice(&zeros[..n]);
        }
    }

    /// Makes room for exactly `n` more readings.
    pub fn reserve_exact(&mut self, n: usize) {
        self.t_ns.reserve_exact(n);
        self.source.reserve_exact(n);
        for column in self.columns_mut() {
            column.reserve_exact(n);
        }
    }

    /// Reading `i`. Panics when `i` is out of bounds, as indexing a slice does.
    pub fn get(&self, i: usize) -> AllocatorSample {
        let (origin, device) = self.sources.items[self.source[i] as usize];
        AllocatorSample {
            t_ns: self.t_ns[i],
            origin,
            device,
            allocated: self.allocated.at(i),
            reserved: self.reserved.at(i),
            peak: self.peak.at(i),
            active: self.active.at(i),
            inactive_split: self.inactive_split.at(i),
            retries: self.retries.at(i),
            ooms: self.ooms.at(i),
        }
    }

    /// Each (sender, device) the readings come from, with how many they are, in the order the
    /// pairs first came (one pass over a column of small numbers).
    pub fn source_counts(&self) -> Vec<((Origin, u32), usize)> {
        let mut counts = vec![0usize; self.sources.items.len()];
        for &n in &self.source {
            counts[n as usize] += 1;
        }
        self.sources.items.iter().copied().zip(counts).collect()
    }

    /// The one (sender, device) every reading comes from, when there is only one.
    pub fn only_source(&self) -> Option<(Origin, u32)> {
        match self.sources.items[..] {
            [only] => Some(only),
            _ => None,
        }
    }

    /// The numbers of the readings whose (sender, device) `pick` picks, in order.
    pub fn indices_of(
        &self,
        pick: impl Fn(&(Origin, u32)) -> bool,
    ) -> impl Iterator<Item = usize> + '_ {
        let picked: Vec<bool> = self.sources.items.iter().map(pick).collect();
        let all = picked.iter().all(|&p| p);
        (0..self.len()).filter(move |&i| all || picked[self.source[i] as usize])
    }

    /// Who sent reading `i`, and about which device.
    #[inline]
    pub fn source(&self, i: usize) -> (Origin, u32) {
        self.sources.items[self.source[i] as usize]
    }

    /// The device reading `i` is about.
    #[inline]
    pub fn device(&self, i: usize) -> u32 {
        self.source(i).1
    }

    /// The allocated bytes of reading `i`.
    #[inline]
    pub fn allocated(&self, i: usize) -> u64 {
        self.allocated.at(i)
    }

    /// Per device, the highest allocated bytes of its readings and the time of the first
    /// reading at it ((0, 0) for a device whose readings are all 0).
    pub fn peak_per_device(&self) -> std::collections::BTreeMap<u32, (u64, u64)> {
        let mut peaks = std::collections::BTreeMap::new();
        for i in 0..self.len() {
            let allocated = self.allocated(i);
            let peak = peaks.entry(self.device(i)).or_insert((0, 0));
            if allocated > peak.0 {
                *peak = (allocated, self.t_ns(i));
            }
        }
        peaks
    }

    /// The allocated bytes of every reading, in order.
    pub fn allocated_values(&self) -> &Values {
        &self.allocated
    }

    /// The reserved bytes of reading `i`.
    #[inline]
    pub fn reserved(&self, i: usize) -> u64 {
        self.reserved.at(i)
    }

    /// The reserved bytes of every reading, in order.
    pub fn reserved_values(&self) -> &Values {
        &self.reserved
    }

    /// The peak allocated bytes of reading `i`.
    #[inline]
    pub fn peak(&self, i: usize) -> u64 {
        self.peak.at(i)
    }

    /// The peak allocated bytes of every reading, in order.
    pub fn peak_values(&self) -> &Values {
        &self.peak
    }

    /// Changes who sent the readings (every reading of one sender alike).
    pub fn map_origins(&mut self, mut f: impl FnMut(&mut Origin)) {
        self.sources.map(|(origin, _)| f(origin));
    }

    /// Gives back memory reserved for growth.
    pub fn shrink_to_fit(&mut self) {
        self.t_ns.shrink_to_fit();
        self.source.shrink_to_fit();
        for column in self.columns_mut() {
            column.shrink_to_fit();
        }
    }

    /// Bytes of memory held by the columns.
    pub fn heap_bytes(&self) -> usize {
        self.t_ns.capacity() * 8
            + self.source.capacity() * 4
            + self.columns().iter().map(|c| c.heap_bytes()).sum::<usize>()
    }

    fn columns(&self) -> [&Values; 7] {
        [
            &self.allocated,
            &self.reserved,
            &self.peak,
            &self.active,
            &self.inactive_split,
            &self.retries,
            &self.ooms,
        ]
    }

    fn columns_mut(&mut self) -> [&mut Values; 7] {
        [
            &mut self.allocated,
            &mut self.reserved,
            &mut self.peak,
            &mut self.active,
            &mut self.inactive_split,
            &mut self.retries,
            &mut self.ooms,
        ]
    }
}

/// What a phase edge is, apart from when: begin or end, which phase, who sent it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EdgeKind {
    /// Begin or end.
    pub edge: Edge,
    /// Which phase.
    pub phase: Phase,
    /// Who sent it.
    pub origin: Origin,
}

/// Phase edges as the probe sent them, by column.
#[derive(Clone, Debug, Default)]
pub struct PhaseEdges {
    t_ns: Vec<u64>,
    kind: Vec<u32>,
    kinds: Table<EdgeKind>,
    step: Optional,
    host_heap: Optional,
    host_rss: Optional,
}

impl PhaseEdges {
    /// Adds one edge.
    pub fn push(&mut self, edge: PhaseEdge) {
        let PhaseEdge {
            t_ns,
            edge,
            phase,
            step,
            origin,
            host_heap,
            host_rss,
        } = edge;
        self.t_ns.push(t_ns);
        let kind = self.kinds.number(&EdgeKind {
            edge,
            phase,
            origin,
        });
        self.kind.push(kind);
        self.step.push(step);
        self.host_heap.push(host_heap);
        self.host_rss.push(host_rss);
    }

    /// Edge `i`. Panics when `i` is out of bounds, as indexing a slice does.
    pub fn get(&self, i: usize) -> PhaseEdge {
        let kind = self.kind(i);
        PhaseEdge {
            t_ns: self.t_ns[i],
            edge: kind.edge,
            phase: kind.phase.clone(),
            step: self.step(i),
            origin: kind.origin,
            host_heap: self.host_heap(i),
            host_rss: self.host_rss(i),
        }
    }

    /// What edge `i` is: begin or end of which phase, from whom.
    #[inline]
    pub fn kind(&self, i: usize) -> &EdgeKind {
        &self.kinds.items[self.kind[i] as usize]
    }

    /// The step of edge `i`, if known.
    #[inline]
    pub fn step(&self, i: usize) -> Option<u64> {
        self.step.get(i)
    }

    /// The sender's C heap at edge `i`, if read.
    #[inline]
    pub fn host_heap(&self, i: usize) -> Option<u64> {
        self.host_heap.get(i)
    }

    /// The sender's resident memory at edge `i`, if read.
    #[inline]
    pub fn host_rss(&self, i: usize) -> Option<u64> {
        self.host_rss.get(i)
    }

    /// Changes who sent the edges (every edge of one sender alike).
    pub fn map_origins(&mut self, mut f: impl FnMut(&mut Origin)) {
        self.kinds.map(|kind| f(&mut kind.origin));
    }

    /// Gives back memory reserved for growth.
    pub fn shrink_to_fit(&mut self) {
        self.t_ns.shrink_to_fit();
        self.kind.shrink_to_fit();
        self.step.shrink_to_fit();
        self.host_heap.shrink_to_fit();
        self.host_rss.shrink_to_fit();
    }

    /// Bytes of memory held by the columns.
    pub fn heap_bytes(&self) -> usize {
        self.t_ns.capacity() * 8
            + self.kind.capacity() * 4
            + self.step.heap_bytes()
            + self.host_heap.heap_bytes()
            + self.host_rss.heap_bytes()
    }
}

/// What every kind of record held by column offers alike: its length, its times, the records
/// one by one (as [`Records::record`] makes them), sorting by time, equality record by record,
/// and building from records.
macro_rules! by_column {
    ($columns:ident, $record:ident) => {
        impl $columns {
            /// None.
            pub fn new() -> Self {
                Self::default()
            }

            /// The number of records.
            pub fn len(&self) -> usize {
                self.t_ns.len()
            }

            /// Whether there is none.
            pub fn is_empty(&self) -> bool {
                self.t_ns.is_empty()
            }

            /// The time of record `i`.
            #[inline]
            pub fn t_ns(&self, i: usize) -> u64 {
                self.t_ns[i]
            }

            /// The records' times, in their order.
            pub fn times_ns(&self) -> &[u64] {
                &self.t_ns
            }

            /// The records, in order.
            pub fn iter(&self) -> Iter<'_, Self> {
                Iter {
                    of: self,
                    range: 0..self.len(),
                }
            }

            /// The last record.
            pub fn last(&self) -> Option<$record> {
                self.len().checked_sub(1).map(|i| self.get(i))
            }

            /// The records sorted by time (stable).
            pub fn sorted_by_time(self) -> Self {
                if self.t_ns.is_sorted() {
                    return self;
                }
                let mut order: Vec<usize> = (0..self.len()).collect();
                order.sort_by_key(|&i| self.t_ns[i]);
                order.into_iter().map(|i| self.get(i)).collect()
            }
        }

        impl Records for $columns {
            type Record = $record;
            fn record(&self, i: usize) -> $record {
                self.get(i)
            }
        }

        impl PartialEq for $columns {
            fn eq(&self, other: &Self) -> bool {
                self.len() == other.len() && self.iter().eq(other.iter())
            }
        }

        impl<'a> IntoIterator for &'a $columns {
            type Item = $record;
            type IntoIter = Iter<'a, $columns>;
            fn into_iter(self) -> Self::IntoIter {
                self.iter()
            }
        }

        impl Extend<$record> for $columns {
            fn extend<I: IntoIterator<Item = $record>>(&mut self, iter: I) {
                iter.into_iter().for_each(|r| self.push(r));
            }
        }

        impl FromIterator<$record> for $columns {
            fn from_iter<I: IntoIterator<Item = $record>>(iter: I) -> Self {
                let mut columns = Self::new();
                columns.extend(iter);
                columns
            }
        }

        impl From<Vec<$record>> for $columns {
            fn from(records: Vec<$record>) -> Self {
                records.into_iter().collect()
            }
        }
    };
}

by_column!(AllocatorReadings, AllocatorSample);
by_column!(PhaseEdges, PhaseEdge);

/// Records held by column, read one by one.
pub trait Records {
    /// One record.
    type Record;
    /// Record `i`.
    fn record(&self, i: usize) -> Self::Record;
}

/// The records of [`AllocatorReadings`] or [`PhaseEdges`], in order.
#[derive(Clone, Debug)]
pub struct Iter<'a, R> {
    of: &'a R,
    range: std::ops::Range<usize>,
}

impl<R: Records> Iterator for Iter<'_, R> {
    type Item = R::Record;

    fn next(&mut self) -> Option<R::Record> {
        self.range.next().map(|i| self.of.record(i))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.range.size_hint()
    }

    fn nth(&mut self, n: usize) -> Option<R::Record> {
        self.range.nth(n).map(|i| self.of.record(i))
    }
}

impl<R: Records> DoubleEndedIterator for Iter<'_, R> {
    fn next_back(&mut self) -> Option<R::Record> {
        self.range.next_back().map(|i| self.of.record(i))
    }
}

impl<R: Records> ExactSizeIterator for Iter<'_, R> {}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> impl Strategy<Value = AllocatorSample> {
        (
            any::<u64>(),
            0u32..3,
            proptest::option::of(0u32..2),
            0u32..2,
            prop_oneof![any::<u64>(), (0u64..1 << 30).prop_map(|v| v << 9)],
            (0u64..1 << 30).prop_map(|v| v << 9),
            any::<u64>(),
            0u64..5,
        )
            .prop_map(
                |(t_ns, pid, rank, device, allocated, reserved, peak, retries)| AllocatorSample {
                    t_ns,
                    origin: Origin { pid, rank },
                    device,
                    allocated,
                    reserved,
                    peak,
                    active: allocated / 2,
                    inactive_split: reserved / 3,
                    retries,
                    ooms: retries / 2,
                },
            )
    }

    fn edge() -> impl Strategy<Value = PhaseEdge> {
        (
            any::<u64>(),
            any::<bool>(),
            prop_oneof![
                Just(Phase::Forward),
                Just(Phase::Backward),
                Just(Phase::Optimizer),
                "[a-z]{1,6}".prop_map(Phase::Custom)
            ],
            proptest::option::of(any::<u64>()),
            0u32..3,
            proptest::option::of(any::<u64>()),
            proptest::option::of((0u64..1 << 30).prop_map(|v| v << 12)),
        )
            .prop_map(
                |(t_ns, begin, phase, step, pid, host_heap, host_rss)| PhaseEdge {
                    t_ns,
                    edge: if begin { Edge::Begin } else { Edge::End },
                    phase,
                    step,
                    origin: Origin {
                        pid,
                        rank: Some(pid),
                    },
                    host_heap,
                    host_rss,
                },
            )
    }

    proptest! {
        #[test]
        fn readings_are_kept_as_they_were_sent(samples in proptest::collection::vec(sample(), 0..200)) {
            let readings = AllocatorReadings::from(samples.clone());
            prop_assert_eq!(readings.len(), samples.len());
            prop_assert_eq!(readings.iter().collect::<Vec<_>>(), samples.clone());
            prop_assert_eq!(readings.last(), samples.last().copied());
            let mut sorted = samples.clone();
            sorted.sort_by_key(|s| s.t_ns);
            prop_assert_eq!(readings.sorted_by_time().iter().collect::<Vec<_>>(), sorted);
        }

        #[test]
        fn edges_are_kept_as_they_were_sent(edges in proptest::collection::vec(edge(), 0..200)) {
            let columns = PhaseEdges::from(edges.clone());
            prop_assert_eq!(columns.len(), edges.len());
            prop_assert_eq!(columns.iter().collect::<Vec<_>>(), edges.clone());
            for (i, e) in edges.iter().enumerate() {
                prop_assert_eq!(columns.kind(i).phase.clone(), e.phase.clone());
                prop_assert_eq!(columns.step(i), e.step);
                prop_assert_eq!(columns.host_rss(i), e.host_rss);
            }
            let mut sorted = edges.clone();
            sorted.sort_by_key(|e| e.t_ns);
            prop_assert_eq!(columns.sorted_by_time().iter().collect::<Vec<_>>(), sorted);
        }
    }

    #[test]
    fn a_changed_origin_changes_every_record_of_its_sender() {
        let mut readings: AllocatorReadings = (0..4)
            .map(|i| AllocatorSample {
                t_ns: i,
                origin: Origin {
                    pid: (i % 2) as u32,
                    rank: None,
                },
                ..Default::default()
            })
            .collect();
        readings.map_origins(|o| o.rank = Some(o.pid + 10));
        let ranks: Vec<_> = readings.iter().map(|s| s.origin.rank).collect();
        assert_eq!(ranks, vec![Some(10), Some(11), Some(10), Some(11)]);
        readings.push(AllocatorSample {
            t_ns: 9,
            origin: Origin {
                pid: 0,
                rank: Some(10),
            },
            ..Default::default()
        });
        assert_eq!(readings.source(4), readings.source(0));
    }

    #[test]
    fn many_senders_are_told_apart() {
        // More senders than the table looks through before hashing.
        let samples: Vec<AllocatorSample> = (0..400u64)
            .map(|i| AllocatorSample {
                t_ns: i,
                origin: Origin {
                    pid: (i % 40) as u32,
                    rank: Some((i % 40) as u32),
                },
                device: (i % 3) as u32,
                allocated: i << 9,
                ..Default::default()
            })
            .collect();
        let mut readings = AllocatorReadings::from(samples.clone());
        assert_eq!(readings.iter().collect::<Vec<_>>(), samples);
        readings.map_origins(|o| o.rank = o.rank.map(|r| r + 100));
        readings.push(AllocatorSample {
            t_ns: 400,
            origin: Origin {
                pid: 39,
                rank: Some(139),
            },
            device: 0,
            ..Default::default()
        });
        let (origin, device) = readings.source(400);
        assert_eq!((origin.pid, origin.rank, device), (39, Some(139), 0));
        assert!((0..400).all(|i| readings.source(i).0.rank == Some(samples[i].origin.pid + 100)));
    }

    #[test]
    fn a_week_of_readings_takes_a_fraction_of_the_structs() {
        let mut readings: AllocatorReadings = (0..10_000u64)
            .map(|i| AllocatorSample {
                t_ns: i * 100_000_000,
                origin: Origin {
                    pid: 4242,
                    rank: Some(0),
                },
                device: (i % 8) as u32,
                allocated: (1 << 30) + (i % 97) * 512,
                reserved: 2 << 30,
                peak: (3 << 30) + i * 512,
                active: 1 << 30,
                inactive_split: (i % 5) << 20,
                retries: 0,
                ooms: 0,
            })
            .collect();
        readings.shrink_to_fit();
        let per = readings.heap_bytes() as f64 / readings.len() as f64;
        assert!(
            per <= 44.0,
            "{per:.1} B per reading (a struct is {})",
            std::mem::size_of::<AllocatorSample>()
        );
    }
}
