//! The phase bands behind the curves: each occurrence its own band while they are few enough to
//! be told apart (at most one a column), else per column the phase running at its middle;
//! neighbouring bands of one phase joined.

use crate::analysis::Occurrence;
use crate::recording::Phase;

/// One band: a phase from `begin_ns` to `end_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Band<'a> {
    pub phase: &'a Phase,
    pub begin_ns: u64,
    pub end_ns: u64,
}

/// The bands between `t0` and `t1` (nanoseconds) on a plot `columns` wide (pixels, or groups of
/// pixels: the narrowest band worth drawing), from `occurrences` in the order they began.
pub fn phase_bands(occurrences: &[Occurrence], t0: u64, t1: u64, columns: usize) -> Vec<Band<'_>> {
    let first = occurrences.partition_point(|o| o.end_ns < t0);
    let last = occurrences.partition_point(|o| o.begin_ns <= t1);
    let columns = columns.max(1);
    let mut bands = Vec::new();
    if last.saturating_sub(first) <= columns {
        for o in &occurrences[first..last.max(first)] {
            push(&mut bands, &o.phase, o.begin_ns, o.end_ns);
        }
        return bands;
    }
    let span = t1.saturating_sub(t0).max(1);
    let n = columns as u64;
    // Each column's occurrence is looked for from where the last one was, a column further on:
    // a few reads near it instead of a binary search over millions (a cache miss at each step).
    let per_column = (last - first) / columns;
    let mut at = first;
    for c in 0..n {
        let (a, b) = (t0 + span * c / n, t0 + span * (c + 1) / n);
        let middle = a + (b - a) / 2;
        at = begun_by(occurrences, middle, at + per_column);
        if let Some(o) = innermost(&occurrences[..at], middle) {
            push(&mut bands, &o.phase, a, b);
        }
    }
    bands
}

/// The innermost occurrence running at `t_ns` (phases nest rarely: eval inside a custom phase).
pub fn running_at(occurrences: &[Occurrence], t_ns: u64) -> Option<&Occurrence> {
    let i = occurrences.partition_point(|o| o.begin_ns <= t_ns);
    innermost(&occurrences[..i], t_ns)
}

/// Among occurrences that began by `t_ns`, the last still running then.
fn innermost(begun: &[Occurrence], t_ns: u64) -> Option<&Occurrence> {
    begun.iter().rev().take(8).find(|o| o.end_ns >= t_ns)
}

/// How many occurrences began by `t_ns` (what `partition_point` answers), searched from
/// `guess` outwards in doubling steps, then by halves between the last two.
fn begun_by(occurrences: &[Occurrence], t_ns: u64, guess: usize) -> usize {
    let n = occurrences.len();
    let begun = |i: usize| occurrences[i].begin_ns <= t_ns;
    let guess = guess.min(n);
    // The answer lies in lo..=hi: every occurrence before lo began by t_ns, none from hi on.
    let (lo, hi) = if guess < n && begun(guess) {
        let (mut lo, mut step) = (guess + 1, 1);
        loop {
            let probe = lo.saturating_add(step);
            if probe >= n {
                break (lo, n);
            }
            if !begun(probe) {
                break (lo, probe);
            }
            lo = probe + 1;
            step *= 2;
        }
    } else {
        let (mut hi, mut step) = (guess, 1);
        loop {
            if hi == 0 {
                break (0, 0);
            }
            let probe = hi.saturating_sub(step);
            if begun(probe) {
                break (probe + 1, hi);
            }
            hi = probe;
            step *= 2;
        }
    };
    lo + occurrences[lo..hi].partition_point(|o| o.begin_ns <= t_ns)
}

/// Adds a band, extending the last one when it is the same phase and they touch.
fn push<'a>(bands: &mut Vec<Band<'a>>, phase: &'a Phase, begin_ns: u64, end_ns: u64) {
    match bands.last_mut() {
        Some(last) if last.phase == phase && last.end_ns >= begin_ns => {
            last.end_ns = last.end_ns.max(end_ns);
        }
        _ => bands.push(Band {
            phase,
            begin_ns,
            end_ns,
        }),
    }
}

/// The stretches of `spans` (from, to; sorted: the steps the probe did not observe) between `t0`
/// and `t1`, cut to them, on a plot `columns` wide: those less than a column apart joined, so that
/// a long loop observed one step in eight is one stretch with the observed steps' bands in it,
/// not a band a step.
pub fn spans_in(spans: &[(u64, u64)], t0: u64, t1: u64, columns: usize) -> Vec<(u64, u64)> {
    let column = t1.saturating_sub(t0) / columns.max(1) as u64;
    let first = spans.partition_point(|&(_, to)| to < t0);
    let mut out: Vec<(u64, u64)> = Vec::new();
    for &(from, to) in spans[first..].iter().take_while(|&&(from, _)| from <= t1) {
        let (from, to) = (from.max(t0), to.min(t1));
        match out.last_mut() {
            Some(last) if from <= last.1.saturating_add(column) => last.1 = last.1.max(to),
            _ => out.push((from, to)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spans a column or less apart become one; farther ones stay apart; all are cut to the range.
    #[test]
    fn spans_less_than_a_column_apart_are_joined_and_cut_to_the_range() {
        let spans = [(0, 90), (100, 190), (200, 290), (600, 700), (950, 1200)];
        // 1000 ns on 100 columns: 10 ns a column.
        assert_eq!(
            spans_in(&spans, 50, 1000, 95),
            [(50, 290), (600, 700), (950, 1000)]
        );
        // Wider columns (100 ns): the gap of 310 ns still shows, the ones of 10 ns do not.
        assert_eq!(
            spans_in(&spans, 0, 1000, 10),
            [(0, 290), (600, 700), (950, 1000)]
        );
        assert_eq!(spans_in(&spans, 300, 590, 10), []);
        assert_eq!(spans_in(&[], 0, 1000, 10), []);
    }

    fn occurrence(phase: Phase, begin_ns: u64, end_ns: u64) -> Occurrence {
        Occurrence {
            phase,
            step: None,
            pid: 1,
            begin_ns,
            end_ns,
            piece_of: None,
        }
    }

    proptest::proptest! {
        /// The search from a guess answers what a binary search over all of them does,
        /// wherever the guess is.
        #[test]
        fn begun_by_is_partition_point_from_any_guess(
            mut begins in proptest::collection::vec(0u64..1000, 0..300),
            t in 0u64..1100,
            guess in 0usize..400,
        ) {
            begins.sort_unstable();
            let occurrences: Vec<Occurrence> =
                begins.iter().map(|&b| occurrence(Phase::Forward, b, b + 5)).collect();
            let expected = occurrences.partition_point(|o| o.begin_ns <= t);
            proptest::prop_assert_eq!(begun_by(&occurrences, t, guess), expected);
        }
    }

    /// Steps of forward, backward and optimizer, 100 ns each phase, one after the other.
    fn steps(n: u64) -> Vec<Occurrence> {
        (0..n)
            .flat_map(|s| {
                [Phase::Forward, Phase::Backward, Phase::Optimizer]
                    .into_iter()
                    .enumerate()
                    .map(move |(k, p)| {
                        let begin = 300 * s + 100 * k as u64;
                        occurrence(p, begin, begin + 100)
                    })
            })
            .collect()
    }

    #[test]
    fn few_occurrences_are_a_band_each_and_touching_runs_of_one_phase_are_joined() {
        let mut occurrences = steps(2);
        // A second forward right after the first (a microbatch): one band with it.
        occurrences.insert(1, occurrence(Phase::Forward, 100, 100));
        let bands = phase_bands(&occurrences, 0, 600, 100);
        let got: Vec<(&str, u64, u64)> = bands
            .iter()
            .map(|b| (b.phase.as_str(), b.begin_ns, b.end_ns))
            .collect();
        assert_eq!(
            got,
            [
                ("forward", 0, 100),
                ("backward", 100, 200),
                ("optimizer", 200, 300),
                ("forward", 300, 400),
                ("backward", 400, 500),
                ("optimizer", 500, 600),
            ]
        );
        // Only those in the range.
        let later = phase_bands(&occurrences, 350, 450, 100);
        assert_eq!(later.len(), 2);
        assert_eq!(later[0].phase, &Phase::Forward);
    }

    #[test]
    fn more_occurrences_than_columns_are_a_band_per_column_at_most_of_what_runs_at_its_middle() {
        let occurrences = steps(10_000);
        let end = 3_000_000;
        for columns in [1, 7, 250, 1000] {
            let bands = phase_bands(&occurrences, 0, end, columns);
            assert!(!bands.is_empty() && bands.len() <= columns, "{columns}");
            for b in &bands {
                let middle = b.begin_ns + (b.end_ns - b.begin_ns) / 2;
                // A band is whole columns of its phase: its middle's column ran it.
                let column = middle * columns as u64 / end;
                let at = end * column / columns as u64 + end / columns as u64 / 2;
                assert_eq!(
                    running_at(&occurrences, at).map(|o| &o.phase),
                    Some(b.phase)
                );
            }
            // Consecutive bands are of different phases (touching ones were joined).
            assert!(bands.windows(2).all(|w| w[0].phase != w[1].phase));
        }
    }

    #[test]
    fn the_innermost_phase_runs_at_a_time_inside_another() {
        let occurrences = vec![
            occurrence(Phase::Custom("validate".to_owned()), 0, 1000),
            occurrence(Phase::Eval, 100, 200),
        ];
        assert_eq!(
            running_at(&occurrences, 150).map(|o| &o.phase),
            Some(&Phase::Eval)
        );
        assert_eq!(
            running_at(&occurrences, 500).map(|o| o.phase.as_str()),
            Some("validate")
        );
        assert!(running_at(&occurrences, 2000).is_none());
    }
}
