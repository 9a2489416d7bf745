//! Levels of detail for long series: the lowest and highest value of every run of 8, 64, 512, …
//! samples, so that the minimum and maximum of any range of samples costs a few dozen reads.
//!
//! A plot draws at most two points per pixel column (the column's minimum and maximum), so the
//! sawtooth of the caching allocator survives at every zoom level and the points drawn per frame
//! are bounded by the plot's width, not by the recording's length.

use crate::recording::Values;

/// How many samples (or buckets of the level below) one bucket covers.
const FANOUT: usize = 8;

/// Minimum and maximum of every bucket, level by level. Level 1 covers 8 samples per bucket,
/// level 2 covers 64, and so on; level 0 is the samples themselves, which are not copied.
///
/// Beside them, every 64th sample time: a binary search for a time runs in that small index
/// (which stays in the cache) and then within one block of 64 times, instead of jumping across
/// the whole series and missing the cache at every step.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Levels {
    /// `levels[k]` holds the buckets of level `k + 1`.
    levels: Vec<Buckets>,
    /// `index[j]` is the time of sample `j * INDEX_STRIDE`.
    index: Vec<u64>,
    /// `starts[k][b]` is the first time of bucket `b` of level `k + 3` (512, 4096, … samples):
    /// a view that draws buckets that large reads them in order, where the index, a bucket of
    /// level 2 an entry, would be read thousands of entries apart and miss the cache each time.
    starts: Vec<Vec<u64>>,
}

/// The buckets of one level: each bucket's minimum and maximum, one after the other, held as
/// compactly as the samples are (in their page unit: 1 byte per sample at level 1).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Buckets(Values);

impl Buckets {
    fn len(&self) -> usize {
        self.0.len() / 2
    }

    #[inline]
    fn get(&self, b: usize) -> (u64, u64) {
        (self.0.at(2 * b), self.0.at(2 * b + 1))
    }

    /// Keeps the first `n` buckets.
    fn truncate(&mut self, n: usize) {
        self.0.truncate(2 * n);
    }

    fn extend(&mut self, buckets: impl Iterator<Item = (u64, u64)>) {
        self.0.extend(buckets.flat_map(|(min, max)| [min, max]));
    }

    /// The buckets above these: each over `FANOUT` of them, from bucket `from` (of the level
    /// above) on.
    fn above(&self, from: usize) -> impl Iterator<Item = (u64, u64)> + '_ {
        (from * FANOUT..self.len()).step_by(FANOUT).map(|b| {
            (b..(b + FANOUT).min(self.len()))
                .map(|j| self.get(j))
                .fold((u64::MAX, 0), |(lo, hi), (l, h)| (lo.min(l), hi.max(h)))
        })
    }
}

/// The buckets of level 1 over `values`, from bucket `from` on.
fn first_level(values: &Values, from: usize) -> impl Iterator<Item = (u64, u64)> + '_ {
    (from * FANOUT..values.len()).step_by(FANOUT).map(|i| {
        values
            .range(i..(i + FANOUT).min(values.len()))
            .fold((u64::MAX, 0), |(lo, hi), v| (lo.min(v), hi.max(v)))
    })
}

/// Samples per entry of the time index.
const INDEX_STRIDE: usize = 64;

impl Levels {
    /// Builds the levels over `values` and the index over `times` (not decreasing, one per
    /// value): about 1.3 bytes per sample for values in pages.
    pub fn new(times: &[u64], values: &Values) -> Self {
        let mut levels = Self::default();
        levels.extend(times, values, 0);
        levels
    }

    /// The levels over `values` that grew from `from` samples (the length the levels were
    /// built or last extended over) by appending: the last, partial bucket of every level is
    /// recomputed and the new ones appended, so following a growing file costs what arrived,
    /// not the whole series. The same as [`Levels::new`] over the whole.
    pub fn extend(&mut self, times: &[u64], values: &Values, from: usize) {
        // Level 1 from the samples, from the bucket that held sample `from` on.
        let mut start = from.min(values.len()) / FANOUT;
        if values.len() > FANOUT {
            if self.levels.is_empty() {
                self.levels.push(Buckets::default());
                start = 0;
            }
            let first = &mut self.levels[0];
            first.truncate(start);
            first.0.reserve(2 * (values.len().div_ceil(FANOUT) - start));
            first.extend(first_level(values, start));
        }
        // Each level above from the one below, again from the bucket that changed.
        let mut k = 1;
        while self.levels[..].get(k - 1).is_some_and(|l| l.len() > FANOUT) {
            start /= FANOUT;
            if self.levels.len() == k {
                self.levels.push(Buckets::default());
                start = 0;
            }
            let (below, above) = self.levels.split_at_mut(k);
            let level = &mut above[0];
            level.truncate(start);
            level.extend(below[k - 1].above(start));
            k += 1;
        }
        let kept = from.min(times.len()).div_ceil(INDEX_STRIDE);
        self.index.truncate(kept);
        self.index
            .extend(times.iter().skip(kept * INDEX_STRIDE).step_by(INDEX_STRIDE));
        let mut stride = INDEX_STRIDE * FANOUT;
        let mut k = 0;
        while stride < times.len() {
            if self.starts.len() == k {
                self.starts.push(Vec::new());
            }
            let starts = &mut self.starts[k];
            // A level made now (the series just grew past its stride) kept nothing.
            let kept = from.min(times.len()).div_ceil(stride).min(starts.len());
            starts.truncate(kept);
            starts.extend(times.iter().skip(kept * stride).step_by(stride));
            stride *= FANOUT;
            k += 1;
        }
    }

    /// The first time of bucket `b` of the level whose buckets are `size` samples, when an
    /// index holds it.
    #[inline]
    fn bucket_start(&self, size: usize, b: usize) -> Option<u64> {
        match size {
            INDEX_STRIDE => self.index.get(b).copied(),
            _ if size > INDEX_STRIDE => {
                let k = (size / (INDEX_STRIDE * FANOUT)).trailing_zeros() / FANOUT.trailing_zeros();
                self.starts.get(k as usize)?.get(b).copied()
            }
            _ => None,
        }
    }

    /// The first index in `times` (the times the levels were built over) whose time is not
    /// below `t`, as `times.partition_point(|&x| x < t)`.
    ///
    /// Times beyond those the index was built over (a series that grew since) are searched
    /// too, directly.
    pub fn find(&self, times: &[u64], t: u64) -> usize {
        let j = self.index.partition_point(|&x| x < t);
        if j == 0 && !self.index.is_empty() {
            return 0;
        }
        let start = (j.saturating_sub(1) * INDEX_STRIDE + usize::from(j > 0)).min(times.len());
        let end = match j < self.index.len() {
            true => (j * INDEX_STRIDE).min(times.len()),
            false => times.len(),
        };
        start + times[start..end].partition_point(|&x| x < t)
    }

    /// The minimum and maximum of `values[lo..hi]` (`values` being the slice the levels were
    /// built over); `None` for an empty range.
    pub fn min_max(&self, values: &Values, lo: usize, hi: usize) -> Option<(u64, u64)> {
        let hi = hi.min(values.len());
        if lo >= hi {
            return None;
        }
        let (mut min, mut max) = (u64::MAX, 0);
        let mut take = |(l, h): (u64, u64)| {
            min = min.min(l);
            max = max.max(h);
        };
        let (mut lo, mut hi) = (lo, hi);
        let mut level = 0;
        while lo < hi {
            let get = |i: usize| match level {
                0 => (values.at(i), values.at(i)),
                k => self.levels[k - 1].get(i),
            };
            if level == self.levels.len() {
                (lo..hi).for_each(|i| take(get(i)));
                break;
            }
            while lo < hi && lo % FANOUT != 0 {
                take(get(lo));
                lo += 1;
            }
            while hi > lo && hi % FANOUT != 0 {
                hi -= 1;
                take(get(hi));
            }
            lo /= FANOUT;
            hi /= FANOUT;
            level += 1;
        }
        Some((min, max))
    }
}

/// A series' samples with their levels of detail, borrowed from where they are held.
#[derive(Clone, Copy, Debug)]
pub struct LodSeries<'a> {
    /// Sample times, nanoseconds after the start, not decreasing.
    pub times_ns: &'a [u64],
    /// Values, one per time.
    pub values: &'a Values,
    /// Levels built over `values`.
    pub levels: &'a Levels,
}

impl LodSeries<'_> {
    /// The value at `t_ns`: the last sample at or before it.
    pub fn value_at(&self, t_ns: u64) -> Option<u64> {
        // The first sample after `t_ns`, found through the time index.
        let i = match t_ns.checked_add(1) {
            Some(after) => self.levels.find(self.times_ns, after),
            None => self.times_ns.len(),
        };
        i.checked_sub(1).map(|i| self.values.at(i))
    }

    /// The points to draw between `t0` and `t1` (nanoseconds) on a plot `columns` pixels wide,
    /// as `(time, value)`: every sample when there are few, else the minimum and the maximum of
    /// each column ([`Self::shown`], as one line). The samples just outside the range are
    /// included so the line runs to the plot's edges.
    pub fn visible(&self, t0: u64, t1: u64, columns: usize) -> Vec<(u64, u64)> {
        match self.shown(t0, t1, columns) {
            Shown::Samples(points) => points,
            Shown::Columns(spans) => {
                let mut out = Vec::with_capacity(2 * spans.len());
                for (t, min, max) in spans {
                    out.push((t, min));
                    if max != min {
                        out.push((t, max));
                    }
                }
                out
            }
        }
    }

    /// What is drawn between `t0` and `t1` on a plot `columns` pixels wide: every sample when
    /// there are at most four a column, else the lowest and highest value of each column (at its
    /// middle), between the samples just outside the range.
    pub fn shown(&self, t0: u64, t1: u64, columns: usize) -> Shown {
        let times = self.times_ns;
        let start = times.partition_point(|&t| t < t0).saturating_sub(1);
        let end = (times.partition_point(|&t| t <= t1) + 1).min(times.len());
        if start >= end {
            return Shown::Samples(Vec::new());
        }
        let columns = columns.max(1);
        if end - start <= 4 * columns {
            return Shown::Samples(
                (start..end)
                    .map(|i| (times[i], self.values.at(i)))
                    .collect(),
            );
        }
        let mut out = Vec::with_capacity(columns + 2);
        let first = self.values.at(start);
        out.push((times[start], first, first));
        let span = t1.saturating_sub(t0).max(1) as u128;
        // Many samples per column: walk the samples, or the coarsest level whose buckets are at
        // most half a column wide, in order (each sample or bucket to the column its first
        // sample falls in). Every sample is in one bucket, so no peak or trough is lost, and the
        // reads are sequential.
        let per_column = (end - start) / columns;
        let (mut level, mut size) = (0, 1);
        while level < self.levels.levels.len() && size * FANOUT * 2 <= per_column {
            level += 1;
            size *= FANOUT;
        }
        let (buckets, count) = match level {
            0 => (None, self.values.len()),
            k => (
                Some(&self.levels.levels[k - 1]),
                self.levels.levels[k - 1].len(),
            ),
        };
        let bucket = |b: usize| match buckets {
            Some(buckets) => buckets.get(b),
            None => (self.values.at(b), self.values.at(b)),
        };
        // A bucket's first time from the indexes when they have it (buckets of 64 samples and
        // more), read in order: reading the times themselves, thousands of samples apart,
        // missed the cache at every bucket.
        let first_time = |b: usize| {
            self.levels
                .bucket_start(size, b)
                .unwrap_or_else(|| times[b * size])
        };
        // A column's middle, `t0 + ⌊(2c + 1) · span / (2 · columns)⌋`, for rising columns.
        let mut mid = Stepped::new(span, 2 * span, 2 * columns as u128);
        let mut flush = |out: &mut Vec<(u64, u64, u64)>, (c, min, max): (usize, u64, u64)| {
            out.push((t0 + mid.at(c) as u64, min, max));
        };
        let mut column: Option<(usize, u64, u64)> = None;
        let mut walk = ColumnWalk::new(t0, span as u64, columns);
        for b in (start + 1) / size..(end - 1).div_ceil(size).min(count) {
            let (min, max) = bucket(b);
            let c = walk.column(first_time(b));
            column = match column {
                Some((cc, lo, hi)) if cc == c => Some((c, lo.min(min), hi.max(max))),
                Some(done) => {
                    flush(&mut out, done);
                    Some((c, min, max))
                }
                None => Some((c, min, max)),
            };
        }
        if let Some(done) = column {
            flush(&mut out, done);
        }
        let last = self.values.at(end - 1);
        out.push((times[end - 1], last, last));
        Shown::Columns(out)
    }
}

/// What [`LodSeries::shown`] gives: the samples themselves, or a span a column.
#[derive(Debug, PartialEq, Eq)]
pub enum Shown {
    /// `(time, value)` of every sample.
    Samples(Vec<(u64, u64)>),
    /// `(time, lowest, highest)` of each pixel column, the samples just outside the range first
    /// and last (a span of one value).
    Columns(Vec<(u64, u64, u64)>),
}

/// The plot column of each of a rising sequence of times, `⌊(t − t0) · columns / span⌋` (at
/// most the last column), found by walking the columns' edges as the times rise instead of
/// dividing at every bucket.
struct ColumnWalk {
    t0: u64,
    columns: usize,
    /// The column of the last time.
    at: usize,
    /// The first offset from `t0` in column `at + 1`: `⌈(at + 1) · span / columns⌉`.
    next: Stepped,
}

impl ColumnWalk {
    fn new(t0: u64, span: u64, columns: usize) -> Self {
        let span = u128::from(span.max(1));
        let columns = columns.max(1);
        Self {
            t0,
            columns,
            at: 0,
            next: Stepped::new(span + columns as u128 - 1, span, columns as u128),
        }
    }

    /// The column of `t`, which is not below the time asked before.
    #[inline]
    fn column(&mut self, t: u64) -> usize {
        let offset = u128::from(t.saturating_sub(self.t0));
        while self.at + 1 < self.columns && offset >= self.next.value() {
            self.at += 1;
            self.next.step();
        }
        self.at
    }
}

/// `⌊(a + k · step) / divisor⌋` for `k` = 0, 1, 2, …, one step at a time without dividing: a
/// frame asks it for every column of every curve, and a 128-bit division at each was most of
/// what a curve cost to draw.
struct Stepped {
    whole: u128,
    rest: u128,
    step_whole: u128,
    step_rest: u128,
    divisor: u128,
    k: usize,
}

impl Stepped {
    /// At `k` = 0; `divisor` at least 1.
    fn new(a: u128, step: u128, divisor: u128) -> Self {
        let divisor = divisor.max(1);
        Self {
            whole: a / divisor,
            rest: a % divisor,
            step_whole: step / divisor,
            step_rest: step % divisor,
            divisor,
            k: 0,
        }
    }

    #[inline]
    fn value(&self) -> u128 {
        self.whole
    }

    #[inline]
    fn step(&mut self) {
        self.whole += self.step_whole;
        self.rest += self.step_rest;
        if self.rest >= self.divisor {
            self.rest -= self.divisor;
            self.whole += 1;
        }
        self.k += 1;
    }

    /// The value at `k`, which is not below the `k` asked before.
    #[inline]
    fn at(&mut self, k: usize) -> u128 {
        while self.k < k {
            self.step();
        }
        self.whole
    }
}

/// How many points a step baseline is drawn with, at most, on every face (the viewer, the
/// report's picture, `diff`'s).
pub const BASELINE_POINTS: usize = 1000;

/// A short series (a step baseline: one point a step) thinned to at most [`BASELINE_POINTS`]
/// points as the curves are: consecutive points in buckets, each bucket's lowest and highest kept
/// in their order, so that a spike between the points kept is not lost (as an every-n-th stride
/// loses it). All of them when there are few.
pub fn thin_min_max<X: Copy>(points: &[(X, f64)]) -> Vec<(X, f64)> {
    let per_bucket = points.len().div_ceil(BASELINE_POINTS / 2).max(1);
    if per_bucket == 1 {
        return points.to_vec();
    }
    let mut out = Vec::with_capacity(BASELINE_POINTS);
    for bucket in points.chunks(per_bucket) {
        let (mut lo, mut hi) = (0, 0);
        for (i, p) in bucket.iter().enumerate() {
            if p.1 < bucket[lo].1 {
                lo = i;
            }
            if p.1 > bucket[hi].1 {
                hi = i;
            }
        }
        out.push(bucket[lo.min(hi)]);
        if lo != hi {
            out.push(bucket[lo.max(hi)]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` pseudo-random values below 2^24.
    fn noise(n: usize, mut x: u64) -> Vec<u64> {
        (0..n)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                x >> 40
            })
            .collect()
    }

    fn brute(values: &[u64], lo: usize, hi: usize) -> Option<(u64, u64)> {
        let slice = values.get(lo..hi.min(values.len()))?;
        Some((*slice.iter().min()?, *slice.iter().max()?))
    }

    #[test]
    fn min_max_matches_a_scan_for_every_range() {
        // Values held in 32 bits, and values too large for that.
        for scale in [1, (1 << 40) + 1] {
            let values: Vec<u64> = noise(700, 12345).iter().map(|v| v * scale).collect();
            let column = Values::from(values.clone());
            assert_eq!(column.is_narrow(), scale == 1);
            let times: Vec<u64> = (0..values.len() as u64).collect();
            let levels = Levels::new(&times, &column);
            // Also with levels built over part of the times (a series that grew since), or
            // none of them.
            let part = Levels::new(&times[..300], &Values::from(values[..300].to_vec()));
            for t in 0..702 {
                let expected = times.partition_point(|&x| x < t);
                assert_eq!(levels.find(&times, t), expected, "{t}");
                assert_eq!(part.find(&times, t), expected, "{t}, levels over 300 times");
                assert_eq!(
                    Levels::default().find(&times, t),
                    expected,
                    "{t}, no levels"
                );
            }
            for lo in (0..700).step_by(7) {
                for hi in lo..=700 {
                    assert_eq!(
                        levels.min_max(&column, lo, hi),
                        brute(&values, lo, hi),
                        "{lo}..{hi}"
                    );
                }
            }
        }
    }

    #[test]
    fn levels_extended_as_a_series_grows_are_the_levels_of_the_whole() {
        let values = noise(5000, 99);
        let times: Vec<u64> = (0..values.len() as u64).map(|t| t * 3).collect();
        // Grown in steps of every size: one sample, a bucket, across levels, from nothing.
        for step in [1, 7, 8, 9, 63, 64, 65, 600, 4999] {
            let mut levels = Levels::new(&times[..0], &Values::new());
            let mut len = 0;
            while len < values.len() {
                let next = (len + step).min(values.len());
                levels.extend(&times[..next], &Values::from(&values[..next]), len);
                len = next;
                let whole = Levels::new(&times[..len], &Values::from(&values[..len]));
                assert_eq!(levels.levels, whole.levels, "step {step}, at {len}");
                assert_eq!(levels.index, whole.index, "step {step}, at {len}");
                assert_eq!(levels.starts, whole.starts, "step {step}, at {len}");
            }
        }
    }

    #[test]
    fn a_sawtooth_keeps_its_peaks_and_troughs_at_every_zoom() {
        // A 1 GiB sawtooth of period 1000 samples, 1 ms apart, over 2 million samples.
        let n = 2_000_000u64;
        let times: Vec<u64> = (0..n).map(|i| i * 1_000_000).collect();
        let values: Values = (0..n).map(|i| (i % 1000) << 20).collect();
        let levels = Levels::new(&times, &values);
        let series = LodSeries {
            times_ns: &times,
            values: &values,
            levels: &levels,
        };
        for columns in [100, 800, 1600] {
            let points = series.visible(0, (n - 1) * 1_000_000, columns);
            assert!(points.len() <= 2 * columns + 2, "{}", points.len());
            let min = points.iter().map(|p| p.1).min().unwrap();
            let max = points.iter().map(|p| p.1).max().unwrap();
            assert_eq!((min, max), (0, 999 << 20));
        }
        // Zoomed in to 50 samples: every sample, in order.
        let points = series.visible(10_000_000_000, 10_049_000_000, 800);
        assert_eq!(points.len(), 52);
        assert!(points.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn each_column_draws_the_samples_of_its_own_time_at_every_zoom() {
        // Samples at irregular times whose value is their time: a column's points must hold
        // values from about its own stretch of time (a bucket placed in the wrong column, by
        // a wrong first time, would bring values from far away).
        let mut t = 0;
        let times: Vec<u64> = noise(3_000_000, 11)
            .into_iter()
            .map(|d| {
                t += 1 + d % 2_000;
                t
            })
            .collect();
        let values: Values = times.iter().copied().collect();
        let levels = Levels::new(&times, &values);
        let series = LodSeries {
            times_ns: &times,
            values: &values,
            levels: &levels,
        };
        let last = times[times.len() - 1];
        for (t0, t1) in [(0, last), (last / 3, last / 3 + last / 50), (0, last / 7)] {
            for columns in [97, 800, 1600] {
                let points = series.visible(t0, t1, columns);
                let half = (t1 - t0) / (2 * columns as u64);
                // A column draws the samples (or the buckets of them) that begin in it: none
                // from before it (but the first, whose bucket may begin before the view);
                // after it, at most a bucket's width (less than a column).
                for &(at, v) in &points[1..points.len() - 1] {
                    let first = at - half <= t0 + 2;
                    assert!(
                        (first || v + 2 >= at - half) && v <= at + 3 * half + 2_000,
                        "{t0}..{t1} in {columns} columns: value {v} drawn at {at}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_column_of_a_rising_time_is_its_share_of_the_span() {
        for (t0, span, columns) in [(0, 1_000_000, 1600), (5_000, 999_983, 97), (7, 3, 800)] {
            let mut walk = ColumnWalk::new(t0, span, columns);
            let mut t = 0;
            for d in noise(20_000, span ^ 5) {
                t += d % (span / 5_000 + 2);
                let expected = ((t.saturating_sub(t0) as u128 * columns as u128) / span as u128)
                    .min(columns as u128 - 1) as usize;
                assert_eq!(
                    walk.column(t),
                    expected,
                    "t {t}, span {span}, {columns} columns"
                );
            }
        }
    }

    #[test]
    fn a_bucket_starts_where_its_first_sample_is() {
        let mut t = 0;
        let times: Vec<u64> = noise(300_000, 99)
            .into_iter()
            .map(|d| {
                t += d % 1_000;
                t
            })
            .collect();
        let values = Values::from(noise(times.len(), 7));
        let levels = Levels::new(&times, &values);
        assert_eq!(
            levels.starts.len(),
            4,
            "512, 4,096, 32,768 and 262,144 samples a bucket"
        );
        let mut size = 1;
        let mut indexed = 0;
        for _ in 0..=levels.levels.len() {
            for b in 0..times.len().div_ceil(size) {
                match levels.bucket_start(size, b) {
                    Some(start) => {
                        assert_eq!(start, times[b * size], "bucket {b} of {size}");
                        indexed += 1;
                    }
                    None => assert!(size < INDEX_STRIDE, "bucket {b} of {size}"),
                }
            }
            size *= FANOUT;
        }
        assert!(indexed > 4_000, "{indexed}");
    }

    #[test]
    fn a_stepped_ratio_is_the_division() {
        for (a, step, divisor) in [
            (0u128, 1u128, 1u128),
            (7, 3, 800),
            (1_000_000 + 1599, 1_000_000, 1600),
            (u64::MAX as u128, 2 * u64::MAX as u128, 2 * 97),
            (999_983, 2 * 999_983, 194),
        ] {
            let mut stepped = Stepped::new(a, step, divisor);
            let mut k = 0;
            for d in noise(3_000, (a as u64) ^ 11) {
                k += (d % 3) as usize;
                assert_eq!(
                    stepped.at(k),
                    (a + k as u128 * step) / divisor,
                    "a {a}, step {step}, divisor {divisor}, k {k}"
                );
            }
        }
    }

    #[test]
    fn empty_and_tiny_series() {
        let levels = Levels::default();
        let series = LodSeries {
            times_ns: &[],
            values: &Values::new(),
            levels: &levels,
        };
        assert!(series.visible(0, 10, 100).is_empty());
        assert_eq!(series.value_at(5), None);
        let series = LodSeries {
            times_ns: &[5],
            values: &Values::from(vec![7]),
            levels: &levels,
        };
        assert_eq!(series.visible(0, 10, 100), vec![(5, 7)]);
        assert_eq!(series.value_at(4), None);
        assert_eq!(series.value_at(5), Some(7));
    }

    /// A spike at one step of 10,000 is kept, whichever step it falls on; the order holds, and
    /// at most BASELINE_POINTS points come out.
    #[test]
    fn a_thinned_baseline_keeps_its_spikes() {
        for spike in [0, 1, 4_999, 9_998, 9_999] {
            let points: Vec<(u64, f64)> = (0..10_000u64)
                .map(|i| (i, if i == spike { 9.0 } else { (i % 7) as f64 }))
                .collect();
            let thin = thin_min_max(&points);
            assert!(thin.len() <= BASELINE_POINTS, "{}", thin.len());
            assert!(thin.contains(&(spike, 9.0)), "spike at {spike}");
            assert!(thin.windows(2).all(|w| w[0].0 < w[1].0));
        }
        let few: Vec<(u64, f64)> = (0..10).map(|i| (i, i as f64)).collect();
        assert_eq!(thin_min_max(&few), few);
    }
}
