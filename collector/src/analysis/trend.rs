//! Robust trends: Theil–Sen slope, Mann–Kendall test, a robust noise estimate, and the shape of a
//! rise (whether it keeps its pace or slows to a plateau).

use serde::Serialize;

/// Largest number of points a trend is computed on; longer series are thinned evenly, which keeps
/// the pairwise statistics (O(n²)) within a few milliseconds.
const MAX_POINTS: usize = 800;

/// The trend of a series taken at the same point of every step.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Trend {
    /// Points the trend was computed on (after thinning).
    pub points: usize,
    /// Theil–Sen slope: the median of all pairwise slopes, in bytes per step.
    pub slope_per_step: f64,
    /// Mann–Kendall two-sided p-value (normal approximation).
    pub p_value: f64,
    /// Mann–Kendall statistic S (positive: rising).
    pub kendall_s: i64,
    /// Robust noise around the fitted line (1.4826 × median absolute deviation), bytes.
    pub noise_bytes: f64,
    /// Slope × the steps spanned: how much the trend adds over the series, bytes.
    pub growth_bytes: f64,
    /// Median of the first tenth of the series, bytes.
    pub start_bytes: f64,
    /// Median of the last tenth of the series, bytes.
    pub end_bytes: f64,
}

impl Trend {
    /// Rising, with a p-value below `alpha`.
    pub fn rises(&self, alpha: f64) -> bool {
        self.kendall_s > 0 && self.slope_per_step > 0.0 && self.p_value < alpha
    }
}

fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mid = values.len() / 2;
    let (_, upper, _) = values.select_nth_unstable_by(mid, f64::total_cmp);
    let upper = *upper;
    if values.len() % 2 == 1 {
        upper
    } else {
        let lower = values[..mid]
            .iter()
            .copied()
            .fold(f64::NEG_INFINITY, f64::max);
        (lower + upper) / 2.0
    }
}

/// Indices of at most [`MAX_POINTS`] evenly spaced points.
fn thin(n: usize) -> Vec<usize> {
    if n <= MAX_POINTS {
        return (0..n).collect();
    }
    (0..MAX_POINTS)
        .map(|i| i * (n - 1) / (MAX_POINTS - 1))
        .collect()
}

/// Standard normal upper tail, via the complementary error function (Abramowitz–Stegun 7.1.26).
fn normal_two_sided_p(z: f64) -> f64 {
    let x = z.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * x);
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let erfc = poly * (-x * x).exp();
    erfc.clamp(0.0, 1.0)
}

/// The trend of `values` against `steps` (both the same length). `None` with fewer than 3 points
/// or when every step is the same.
pub fn trend(steps: &[f64], values: &[f64]) -> Option<Trend> {
    let n = steps.len().min(values.len());
    if n < 3 {
        return None;
    }
    let picked = thin(n);
    let x: Vec<f64> = picked.iter().map(|&i| steps[i]).collect();
    let y: Vec<f64> = picked.iter().map(|&i| values[i]).collect();
    let m = x.len();
    let mut slopes = Vec::with_capacity(m * (m - 1) / 2);
    let mut s: i64 = 0;
    for i in 0..m {
        for j in i + 1..m {
            let dy = y[j] - y[i];
            s += (dy > 0.0) as i64 - (dy < 0.0) as i64;
            let dx = x[j] - x[i];
            if dx != 0.0 {
                slopes.push(dy / dx);
            }
        }
    }
    if slopes.is_empty() {
        return None;
    }
    let slope = median(&mut slopes);
    let mut intercepts: Vec<f64> = x.iter().zip(&y).map(|(x, y)| y - slope * x).collect();
    let intercept = median(&mut intercepts);
    let mut residuals: Vec<f64> = x
        .iter()
        .zip(&y)
        .map(|(x, y)| (y - (intercept + slope * x)).abs())
        .collect();
    let noise = 1.4826 * median(&mut residuals);
    let mf = m as f64;
    let variance = mf * (mf - 1.0) * (2.0 * mf + 5.0) / 18.0;
    let z = if s == 0 {
        0.0
    } else {
        (s - s.signum()) as f64 / variance.sqrt()
    };
    let tenth = (n / 10).max(1);
    let mut head: Vec<f64> = values[..tenth].to_vec();
    let mut tail: Vec<f64> = values[n - tenth..n].to_vec();
    let span = steps[n - 1] - steps[0];
    Some(Trend {
        points: m,
        slope_per_step: slope,
        p_value: normal_two_sided_p(z),
        kendall_s: s,
        noise_bytes: noise,
        growth_bytes: slope * span,
        start_bytes: median(&mut head),
        end_bytes: median(&mut tail),
    })
}

/// How a rise is shaped: the Theil–Sen slope of the first half of a series and of the second. A
/// leak keeps its pace from one half to the next; memory that settles (arenas, buffers and caches
/// filling) grows ever slower to a plateau. Halves rather than thirds: a slope over half the
/// points holds its pace under noise that moves a third's by half.
#[derive(Clone, Debug, PartialEq)]
pub struct Shape {
    /// The slope of the first half, bytes per step.
    pub first_per_step: f64,
    /// The slope of the second half, bytes per step.
    pub second_per_step: f64,
}

impl Shape {
    /// Growth that does not slow: the second half's slope is positive and at least `keep` of the
    /// first half's and of `slope` (the trend over the whole series). Settling keeps a small
    /// fraction of its first half's slope, or none.
    pub fn keeps_pace(&self, slope: f64, keep: f64) -> bool {
        self.second_per_step > 0.0
            && self.second_per_step >= keep * slope
            && self.second_per_step >= keep * self.first_per_step
    }
}

/// The Theil–Sen slope (the median of the pairwise slopes) of at most [`MAX_POINTS`] evenly
/// spaced points; `None` when every step is the same.
fn theil_sen(steps: &[f64], values: &[f64]) -> Option<f64> {
    let picked = thin(steps.len().min(values.len()));
    let mut slopes = Vec::with_capacity(picked.len() * picked.len().saturating_sub(1) / 2);
    for (k, &i) in picked.iter().enumerate() {
        for &j in &picked[k + 1..] {
            let dx = steps[j] - steps[i];
            if dx != 0.0 {
                slopes.push((values[j] - values[i]) / dx);
            }
        }
    }
    (!slopes.is_empty()).then(|| median(&mut slopes))
}

/// The [`Shape`] of `values` against `steps` (both the same length). `None` with fewer than 3
/// points a half, or when the steps of a half are all the same.
pub fn shape(steps: &[f64], values: &[f64]) -> Option<Shape> {
    let n = steps.len().min(values.len());
    let half = n / 2;
    if half < 3 {
        return None;
    }
    Some(Shape {
        first_per_step: theil_sen(&steps[..half], &values[..half])?,
        second_per_step: theil_sen(&steps[n - half..n], &values[n - half..n])?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clean_line_has_its_slope_and_a_tiny_p_value() {
        let x: Vec<f64> = (0..50).map(f64::from).collect();
        let y: Vec<f64> = x.iter().map(|x| 100.0 + 3.0 * x).collect();
        let t = trend(&x, &y).unwrap();
        assert!((t.slope_per_step - 3.0).abs() < 1e-9);
        assert!(t.p_value < 1e-6);
        assert!(t.rises(0.01));
        assert!((t.growth_bytes - 147.0).abs() < 1e-9);
    }

    #[test]
    fn a_flat_series_does_not_rise() {
        let x: Vec<f64> = (0..50).map(f64::from).collect();
        let y = vec![7.0; 50];
        let t = trend(&x, &y).unwrap();
        assert_eq!(t.slope_per_step, 0.0);
        assert_eq!(t.kendall_s, 0);
        assert!(!t.rises(0.01));
    }

    #[test]
    fn an_outlier_does_not_move_the_slope() {
        let x: Vec<f64> = (0..30).map(f64::from).collect();
        let mut y: Vec<f64> = x.iter().map(|x| 2.0 * x).collect();
        y[10] = 1e12;
        let t = trend(&x, &y).unwrap();
        assert!((t.slope_per_step - 2.0).abs() < 1e-9);
    }

    #[test]
    fn the_normal_tail_is_right() {
        assert!((normal_two_sided_p(1.96) - 0.05).abs() < 1e-3);
        assert!((normal_two_sided_p(0.0) - 1.0).abs() < 1e-6);
    }

    /// A rise that decays to a plateau: 200 units approached with a time constant of a tenth of
    /// the series.
    fn settling(x: f64) -> f64 {
        200.0 * (1.0 - (-x / 10.0).exp())
    }

    #[test]
    fn a_steady_rise_keeps_its_pace_and_a_settling_one_does_not() {
        let x: Vec<f64> = (0..100).map(f64::from).collect();
        let steady: Vec<f64> = x.iter().map(|x| 5.0 + 2.0 * x).collect();
        let s = shape(&x, &steady).unwrap();
        assert!((s.first_per_step - 2.0).abs() < 1e-9, "{s:?}");
        assert!((s.second_per_step - 2.0).abs() < 1e-9, "{s:?}");
        assert!(s.keeps_pace(2.0, 0.35));

        let settled: Vec<f64> = x.iter().map(|&x| settling(x)).collect();
        let t = trend(&x, &settled).unwrap();
        let s = shape(&x, &settled).unwrap();
        assert!(s.second_per_step < 0.1 * s.first_per_step, "{s:?}");
        assert!(!s.keeps_pace(t.slope_per_step, 0.35), "{s:?}");

        // The same rise, then a steady climb of 2 a step: the second half's slope is the climb's.
        let both: Vec<f64> = x.iter().map(|&x| settling(x) + 2.0 * x).collect();
        let t = trend(&x, &both).unwrap();
        let s = shape(&x, &both).unwrap();
        assert!((s.second_per_step - 2.0).abs() < 0.1, "{s:?}");
        assert!(s.keeps_pace(t.slope_per_step, 0.35), "{s:?} {t:?}");
    }

    #[test]
    fn a_rise_that_starts_late_keeps_its_pace() {
        let x: Vec<f64> = (0..90).map(f64::from).collect();
        let late: Vec<f64> = x.iter().map(|&x| 3.0 * (x - 60.0).max(0.0)).collect();
        let t = trend(&x, &late).unwrap();
        let s = shape(&x, &late).unwrap();
        assert_eq!(s.first_per_step, 0.0);
        assert!(s.keeps_pace(t.slope_per_step, 0.35), "{s:?} {t:?}");
    }

    #[test]
    fn too_few_points_give_no_shape() {
        let x: Vec<f64> = (0..5).map(f64::from).collect();
        assert_eq!(shape(&x, &x), None);
        assert!(shape(&x[..0], &x[..0]).is_none());
        assert_eq!(shape(&[1.0; 8], &[0.0; 8]), None);
    }

    #[test]
    fn too_few_points_give_no_trend() {
        assert_eq!(trend(&[1.0, 2.0], &[1.0, 2.0]), None);
        assert_eq!(trend(&[1.0; 5], &[1.0, 2.0, 3.0, 4.0, 5.0]), None);
    }
}
