//! The categories at each step's start — parameters, gradients, optimizer state, the rest — per
//! device: their trends, the gradients freed between steps, and the findings of their own
//! (state that grows, gradients kept between steps).

use serde::Serialize;

use super::trend::{self, Trend};
use super::{ALPHA, Basis, Finding, FindingKind, GROWTH_FLOOR_BYTES, KEEPS_PACE, MIB};
use crate::format::format_bytes;
use crate::recording::{Categories, Recording};

/// One category over the steps.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CategoryTrend {
    /// At the first step start measured, bytes.
    pub first_bytes: u64,
    /// At the last one, bytes.
    pub last_bytes: u64,
    /// The median over all step starts, bytes.
    pub median_bytes: u64,
    /// Growth per step (Theil–Sen), bytes; 0 when there are too few points.
    pub per_step_bytes: f64,
    /// Whether it rises significantly (Mann–Kendall) by more than the leak floor.
    pub grows: bool,
}

/// One device's memory by category at every step start of the training process.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CategoryStats {
    /// The CUDA device; `None` for host memory.
    pub device: Option<u32>,
    /// Step starts measured.
    pub steps: usize,
    /// The root models' parameters.
    pub parameters: CategoryTrend,
    /// Their gradients.
    pub gradients: CategoryTrend,
    /// All optimizers' state.
    pub optimizer_state: CategoryTrend,
    /// The rest: activations and whatever the job keeps (`None` when the total was unknown).
    pub rest: Option<CategoryTrend>,
    /// What the total is: "allocated GPU memory" or "the C heap in use".
    pub total_is: &'static str,
    /// The gradients of the step before are alive at most step starts and freed before the
    /// backward (`zero_grad()` after the forward, as Lightning's closure does): freed, not kept,
    /// but the forward runs with them, and its peak includes them ([`gradients_kept`]'s other
    /// answer, set where it could tell).
    pub gradients_freed_after_forward: bool,
    /// The values at each step start, for views.
    #[serde(skip)]
    pub points: Vec<Categories>,
}

/// The categories of the training process `pid`, per device.
pub(super) fn category_stats(recording: &Recording, pid: Option<u32>) -> Vec<CategoryStats> {
    let mine: Vec<&Categories> = recording
        .categories
        .iter()
        .filter(|c| pid.is_none_or(|p| c.origin.pid == p))
        .collect();
    let mut devices: Vec<Option<u32>> = mine.iter().map(|c| c.device).collect();
    devices.sort_unstable();
    devices.dedup();
    devices
        .into_iter()
        .map(|device| {
            let mut points: Vec<Categories> = mine
                .iter()
                .filter(|c| c.device == device)
                .map(|c| (*c).clone())
                .collect();
            points.sort_by_key(|c| (c.step, c.t_ns));
            points.dedup_by_key(|c| c.step);
            let of = |pick: &dyn Fn(&Categories) -> Option<u64>| -> Option<CategoryTrend> {
                let values: Vec<(f64, u64)> = points
                    .iter()
                    .filter_map(|c| Some((c.step? as f64, pick(c)?)))
                    .collect();
                (!values.is_empty()).then(|| category_trend(&values))
            };
            CategoryStats {
                device,
                steps: points.len(),
                parameters: of(&|c| Some(c.parameters)).unwrap_or_default(),
                gradients: of(&|c| Some(c.gradients)).unwrap_or_default(),
                optimizer_state: of(&|c| Some(c.optimizer_total())).unwrap_or_default(),
                rest: of(&|c| c.rest()),
                total_is: if device.is_some() {
                    "allocated GPU memory"
                } else {
                    "the C heap in use"
                },
                gradients_freed_after_forward: false,
                points,
            }
        })
        .collect()
}

pub(super) fn category_trend(values: &[(f64, u64)]) -> CategoryTrend {
    let mut sorted: Vec<u64> = values.iter().map(|v| v.1).collect();
    sorted.sort_unstable();
    let steps: Vec<f64> = values.iter().map(|v| v.0).collect();
    let bytes: Vec<f64> = values.iter().map(|v| v.1 as f64).collect();
    // Skip the warm-up, as the verdict does (the optimizer's state appears at its first step).
    let warmup = (values.len() / 10)
        .max(1)
        .min(values.len().saturating_sub(1));
    let t: Option<Trend> = trend::trend(&steps[warmup..], &bytes[warmup..]);
    CategoryTrend {
        first_bytes: values.first().map_or(0, |v| v.1),
        last_bytes: values.last().map_or(0, |v| v.1),
        median_bytes: sorted[sorted.len() / 2],
        per_step_bytes: t.as_ref().map_or(0.0, |t| t.slope_per_step),
        // A category that rose and settled (a replay buffer filling to its `maxlen`, caches
        // warming) does not grow, as the verdict's own leak does not: it must keep its pace.
        grows: t.is_some_and(|t| {
            t.rises(ALPHA)
                && t.growth_bytes >= GROWTH_FLOOR_BYTES.max(3.0 * t.noise_bytes)
                && trend::shape(&steps[warmup..], &bytes[warmup..])
                    .is_none_or(|s| s.keeps_pace(t.slope_per_step, KEEPS_PACE))
        }),
    }
}

/// The gradients around one step start, as the categories read them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GradientsRead {
    /// Alive at the end of the step before, bytes.
    pub at_last_end: f64,
    /// What of them was freed by the time the categories were read (the step's first training
    /// forward): `zero_grad(set_to_none=True)` at the top of the loop, or in the step before its
    /// forward; 0 where none were.
    pub freed: f64,
}

/// By step, where the categories were read: the gradients at the end of the step before and
/// what of them was freed by this step's reading, on the first device (`on_device`, when the
/// model has parameters there) or on the host.
pub(super) fn freed_gradients(
    recording: &Recording,
    pid: Option<u32>,
    on_device: bool,
) -> std::collections::BTreeMap<u64, GradientsRead> {
    // The model's own memory: on the device the verdict measures, else (no parameters there:
    // the model is on the CPU while the allocator's numbers come from elsewhere) on the host.
    let has_model = |device_side: bool| {
        recording.categories.iter().any(|c| {
            pid.is_none_or(|p| c.origin.pid == p)
                && c.device.is_some() == device_side
                && c.parameters > 0
        })
    };
    let on_device = on_device && (has_model(true) || !has_model(false));
    let mine =
        |c: &&Categories| pid.is_none_or(|p| c.origin.pid == p) && c.device.is_some() == on_device;
    let device = recording
        .categories
        .iter()
        .filter(mine)
        .map(|c| c.device)
        .min();
    recording
        .categories
        .iter()
        .filter(mine)
        .filter(|c| Some(c.device) == device)
        .filter_map(|c| {
            let before = c.gradients_at_last_end?;
            Some((
                c.step?,
                GradientsRead {
                    at_last_end: before as f64,
                    freed: before.saturating_sub(c.gradients) as f64,
                },
            ))
        })
        .collect()
}

pub(super) fn category_evidence(stats: &CategoryStats) -> String {
    let part = |name: &str, t: &CategoryTrend| {
        if t.grows {
            format!("{name} rose {}/step", format_bytes(t.per_step_bytes))
        } else {
            format!("{name} flat at {}", format_bytes(t.median_bytes as f64))
        }
    };
    let mut line = format!(
        "by category at each step's start ({}): {}, {}, {}",
        where_(stats.device),
        part("parameters", &stats.parameters),
        part("gradients", &stats.gradients),
        part("optimizer state", &stats.optimizer_state)
    );
    if let Some(rest) = &stats.rest {
        line.push_str(&format!(", {}", part("the rest", rest)));
        if rest.grows
            && !stats.parameters.grows
            && !stats.gradients.grows
            && !stats.optimizer_state.grows
        {
            line.push_str(
                ": the leak lives in the rest (activations and what the job keeps), not in the model or optimizer",
            );
        }
    }
    line
}

fn where_(device: Option<u32>) -> String {
    device.map_or_else(|| "host".to_owned(), |d| format!("cuda:{d}"))
}

pub(super) fn state_growth(stats: &CategoryStats, basis: Basis) -> Option<Finding> {
    let growing: Vec<(&str, &CategoryTrend)> = [
        ("optimizer state", &stats.optimizer_state),
        ("gradients", &stats.gradients),
        ("parameters", &stats.parameters),
    ]
    .into_iter()
    .filter(|(_, t)| t.grows)
    .collect();
    let &(name, t) = growing.first()?;
    let hints = match name {
        "optimizer state" => vec![
            "parameters or parameter groups added to the optimizer as the run goes (`add_param_group` every epoch), or a new optimizer made while the old one lives on".to_owned(),
            "custom code that stores tensors in `optimizer.state`".to_owned(),
        ],
        "gradients" => vec![
            "gradients of more and more parameters: parameters added as the run goes, or `retain_grad()` on intermediate tensors".to_owned(),
        ],
        _ => vec![
            "parameters added to the model as the run goes (modules created inside `forward`, or `copy.deepcopy(model)` kept)".to_owned(),
        ],
    };
    Some(Finding {
        kind: FindingKind::StateGrowth,
        title: format!(
            "{} grow{} on {}: +{}/step",
            super::rules::capitalize(name),
            if name == "optimizer state" { "s" } else { "" },
            where_(stats.device),
            format_bytes(t.per_step_bytes)
        ),
        phase: None,
        basis,
        growth_per_step_bytes: Some(t.per_step_bytes),
        evidence: vec![format!(
            "{name} at each step's start rose from {} to {} over {} steps",
            format_bytes(t.first_bytes as f64),
            format_bytes(t.last_bytes as f64),
            stats.steps
        )],
        hints,
    })
}

/// Whether gradients as large as half the parameters (and a MiB) are alive at most step starts,
/// and flat.
fn gradients_alive_at_step_starts(stats: &CategoryStats) -> bool {
    let g = &stats.gradients;
    let p = &stats.parameters;
    stats.steps >= 3
        && !g.grows
        && p.median_bytes > 0
        && (g.median_bytes as f64) >= 0.5 * p.median_bytes as f64
        && (g.median_bytes as f64) >= MIB
}

/// Gradients alive at most step starts that the step frees before its backward (at least half
/// of them, by `freed_before_backward`, measured where frees show): `zero_grad()` after the
/// forward.
pub(super) fn gradients_freed_after_forward(
    stats: &CategoryStats,
    freed_before_backward: Option<f64>,
) -> bool {
    gradients_alive_at_step_starts(stats)
        && freed_before_backward.is_some_and(|f| f >= 0.5 * stats.gradients.median_bytes as f64)
}

/// Gradients allocated at most step starts and never freed in the step before the backward
/// makes them again (`zero_grad(set_to_none=False)`, or no `zero_grad` at all): flat, not a
/// leak, but it holds the memory of a second copy of the parameters through the forward.
///
/// Gradients alive at the step's start are not enough: the most common loop calls
/// `zero_grad(set_to_none=True)` between the forward and the backward, so they are alive through
/// the forward and freed before the backward. `freed_before_backward` is what the step freed
/// there (the median over the steps, on the same memory as `stats`); when it holds half the
/// gradients or more, they are freed, not kept. Without it (no backward seen, the verdict
/// measures another memory than the one the gradients are in, or the phases were read in memory
/// that need not fall when memory is freed: resident memory, a device's used memory) nothing is
/// claimed.
pub(super) fn gradients_kept(
    stats: &CategoryStats,
    basis: Basis,
    freed_before_backward: Option<f64>,
) -> Option<Finding> {
    if !gradients_alive_at_step_starts(stats)
        || freed_before_backward.is_none_or(|f| f >= 0.5 * stats.gradients.median_bytes as f64)
    {
        return None;
    }
    let g = &stats.gradients;
    let p = &stats.parameters;
    Some(Finding {
        kind: FindingKind::GradientsKept,
        title: format!(
            "Gradients stay allocated between steps on {}: {} through every forward",
            where_(stats.device),
            format_bytes(g.median_bytes as f64)
        ),
        phase: None,
        basis,
        growth_per_step_bytes: None,
        evidence: vec![format!(
            "at the median step start the gradients hold {} ({:.0}% of the parameters' {}): they are zeroed in place, not freed",
            format_bytes(g.median_bytes as f64),
            100.0 * g.median_bytes as f64 / p.median_bytes as f64,
            format_bytes(p.median_bytes as f64)
        )],
        hints: vec![
            "`optimizer.zero_grad(set_to_none=True)` (the default since PyTorch 2.0) frees them between steps, so the forward has that much more room".to_owned(),
        ],
    })
}
