//! Who holds the memory: the categories at each step's start (parameters, gradients, optimizer
//! state, the rest) and the censuses of who holds the live tensors.
//!
//! A leak lives in "the rest"; growing parameters, gradients or optimizer state are findings of
//! their own, and gradients that stay allocated between steps explain memory that sits high
//! without growing. Two censuses apart in time give the holders that grew; the leak finding names
//! the one that grew by about the leaked amount.

use serde::Serialize;

use super::categories::{
    CategoryStats, category_evidence, category_stats, gradients_freed_after_forward,
    gradients_kept, state_growth,
};
use super::{Analysis, Attribution, Basis, Finding, FindingKind};
use crate::format::format_bytes;
use crate::recording::{Census, ObjectGrowth, Phase, Recording};

/// A holder must have grown by at least this share of the leak over the same steps to be named.
const NAMED_SHARE: f64 = 0.5;

/// A holder that grew between two censuses.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HolderGrowth {
    /// The holder's key in the censuses ([`crate::recording::Holder::key`]).
    #[serde(skip)]
    pub key: String,
    /// The name the user would write: `__main__.all_losses`.
    pub name: String,
    /// What it is: "list, a global of __main__".
    pub what: String,
    /// The CUDA device; `None` for the host.
    pub device: Option<u32>,
    /// The earlier census' step.
    pub from_step: u64,
    /// The later census' step.
    pub to_step: u64,
    /// What it kept alive then (tensors and their graphs), bytes.
    pub from_bytes: u64,
    /// What it keeps alive now, bytes.
    pub to_bytes: u64,
    /// Tensors it holds now.
    pub tensors: u64,
    /// Of those, how many keep their autograd graph.
    pub with_graph: u64,
    /// Bytes their graphs saved.
    pub graph_bytes: u64,
    /// The container's length.
    pub items: u64,
    /// Growth per step between the censuses, bytes.
    pub per_step_bytes: f64,
}

impl HolderGrowth {
    /// Whether a census' holder is this one (by its key, else its name, and its device).
    pub fn is(&self, holder: &crate::recording::Holder) -> bool {
        holder.is(&self.key, &self.name, self.device)
    }

    /// The growth between the censuses, bytes.
    pub fn growth_bytes(&self) -> f64 {
        self.to_bytes as f64 - self.from_bytes as f64
    }

    /// One line: name, what, how many tensors and bytes, and how it grew.
    pub fn describe(&self) -> String {
        let mut line = format!(
            "{} ({}): {} tensor{}, {}",
            self.name,
            self.what,
            self.tensors,
            if self.tensors == 1 { "" } else { "s" },
            format_bytes(self.to_bytes as f64)
        );
        if self.with_graph > 0 {
            line.push_str(&format!(
                ", {} with grad_fn: kept with its graph ({} saved by it)",
                self.with_graph,
                format_bytes(self.graph_bytes as f64)
            ));
        }
        line.push_str(&format!(
            "; grew {} from step {} to step {}",
            format_bytes(self.growth_bytes()),
            self.from_step,
            self.to_step
        ));
        line
    }
}

/// The censuses to compare: the earliest and the latest that still saw the job's objects (an
/// end census after the training function returned sees little), at distinct steps.
pub fn census_pair(recording: &Recording, pid: Option<u32>) -> Option<(&Census, &Census)> {
    let mut usable: Vec<&Census> = recording
        .censuses
        .iter()
        .filter(|c| pid.is_none_or(|p| c.origin.pid == p) && c.step.is_some())
        .collect();
    usable.sort_by_key(|c| (c.step, c.t_ns));
    let last_step_census = usable.iter().rev().find(|c| c.reason == "step").copied();
    usable.retain(|c| c.reason != "end" || last_step_census.is_none_or(|s| c.bytes >= s.bytes));
    let first = *usable.first()?;
    let last = *usable.last()?;
    (last.step > first.step).then_some((first, last))
}

/// The holders that grew between the censuses, most growth first.
pub(super) fn grown_holders(recording: &Recording, pid: Option<u32>) -> Vec<HolderGrowth> {
    let Some((from, to)) = census_pair(recording, pid) else {
        return Vec::new();
    };
    holders_between(from, to)
}

/// The holders that grew from one census to a later one, most growth first (the ten largest;
/// several attributes of one object that grew together also as that object).
pub fn holders_between(from: &Census, to: &Census) -> Vec<HolderGrowth> {
    let (from_step, to_step) = (from.step.unwrap_or(0), to.step.unwrap_or(0));
    let span = (to_step - from_step).max(1) as f64;
    let mut grown: Vec<HolderGrowth> = to
        .holders
        .iter()
        .filter_map(|h| {
            let earlier = from.holders.iter().find(|b| b.same_as(h));
            let before = earlier.map_or(0, |b| b.held_bytes());
            let now = h.held_bytes();
            // The shorter name of the two: a frame's local beats a path through a library.
            let named = earlier
                .filter(|b| name_length(&b.name) < name_length(&h.name))
                .unwrap_or(h);
            (now > before).then(|| HolderGrowth {
                key: h.key.clone(),
                name: named.name.clone(),
                what: named.what.clone(),
                device: h.device,
                from_step,
                to_step,
                from_bytes: before,
                to_bytes: now,
                tensors: h.tensors,
                with_graph: h.with_graph,
                graph_bytes: h.graph_bytes,
                items: h.items,
                per_step_bytes: (now - before) as f64 / span,
            })
        })
        .collect();
    let objects = grown_together(&grown);
    grown.extend(objects);
    grown.sort_by(|a, b| b.growth_bytes().total_cmp(&a.growth_bytes()));
    grown.truncate(10);
    grown
}

/// No single attribute of an object may carry more than this share of what its attributes grew
/// together, for the object to be the holder (else that attribute is).
const ONE_ATTRIBUTE_SHARE: f64 = 0.8;

/// Objects whose several attributes grew together (a torchmetrics metric's `preds` and `target`,
/// a replay buffer's `states` and `actions`): each attribute alone may hold less than the leak,
/// the object holds it all. One holder per object and device, named by the object's path; an
/// attribute that carries nearly all of it stays the holder itself.
fn grown_together(grown: &[HolderGrowth]) -> Vec<HolderGrowth> {
    /// An object's path and device, its type, and its attributes that grew.
    type Object<'a> = ((&'a str, Option<u32>), &'a str, Vec<&'a HolderGrowth>);
    let mut objects: Vec<Object> = Vec::new();
    for h in grown {
        let Some((_, owner)) = h.what.rsplit_once("an attribute of ") else {
            continue;
        };
        let Some((object, _)) = h.name.rsplit_once('.') else {
            continue;
        };
        let key = (object, h.device);
        match objects.iter_mut().find(|(k, ..)| *k == key) {
            Some((_, _, members)) => members.push(h),
            None => objects.push((key, owner, vec![h])),
        }
    }
    objects
        .into_iter()
        .filter(|(_, _, members)| members.len() > 1)
        .filter_map(|((object, device), owner, members)| {
            let growth: f64 = members.iter().map(|m| m.growth_bytes()).sum();
            let largest = members.iter().map(|m| m.growth_bytes()).fold(0.0, f64::max);
            if largest > ONE_ATTRIBUTE_SHARE * growth {
                return None;
            }
            let first = members[0];
            let sum = |f: fn(&HolderGrowth) -> u64| members.iter().map(|m| f(m)).sum::<u64>();
            let attributes: Vec<String> = members
                .iter()
                .filter_map(|m| m.name.rsplit_once('.').map(|(_, a)| format!(".{a}")))
                .collect();
            Some(HolderGrowth {
                key: format!("object:{object}"),
                name: object.to_owned(),
                what: format!("a {owner} whose {} grew together", attributes.join(", ")),
                device,
                from_step: first.from_step,
                to_step: first.to_step,
                from_bytes: sum(|m| m.from_bytes),
                to_bytes: sum(|m| m.to_bytes),
                tensors: sum(|m| m.tensors),
                with_graph: sum(|m| m.with_graph),
                graph_bytes: sum(|m| m.graph_bytes),
                items: sum(|m| m.items),
                per_step_bytes: members.iter().map(|m| m.per_step_bytes).sum(),
            })
        })
        .collect()
}

/// How many hops a holder's name takes (`a.b[…]` style names count their dots).
fn name_length(name: &str) -> usize {
    name.matches('.').count()
}

/// Adds what the categories and censuses say: which category the leak is in and who holds it,
/// and the findings of their own (growing state, gradients kept between steps).
pub(super) fn judge(recording: &Recording, pid: Option<u32>, analysis: &mut Analysis) {
    analysis.categories = category_stats(recording, pid);
    analysis.holders = grown_holders(recording, pid);
    let device_of_basis = |stats: &CategoryStats| match analysis.basis {
        Basis::HostRss => stats.device.is_none(),
        _ => stats.device.is_some(),
    };
    let basis_stats = analysis
        .categories
        .iter()
        .filter(|s| device_of_basis(s))
        .min_by_key(|s| s.device)
        .cloned();
    // What the phases saw freed before the backward says whether the gradients were freed only
    // where frees show in the numbers: allocated bytes and the C heap fall when memory is freed,
    // resident memory and a device's used memory (PyTorch's cache keeps it) need not.
    let frees_show = matches!(
        analysis.attribution,
        Some(Attribution::Allocator | Attribution::HostHeap)
    );
    let mut findings = Vec::new();
    for stats in &mut analysis.categories {
        findings.extend(state_growth(stats, analysis.basis));
        // What the basis saw freed before the backward is about the basis' own memory.
        let on_basis = basis_stats
            .as_ref()
            .is_some_and(|b| b.device == stats.device);
        let freed = analysis
            .freed_before_backward
            .filter(|_| on_basis && frees_show);
        findings.extend(gradients_kept(stats, analysis.basis, freed));
        stats.gradients_freed_after_forward = gradients_freed_after_forward(stats, freed);
    }
    let basis = analysis.basis;
    let holders = analysis.holders.clone();
    let censuses = census_pair(recording, pid);
    // What grew that is not tensors, said by the last census.
    let objects = recording
        .censuses
        .iter()
        .filter(|c| pid.is_none_or(|p| c.origin.pid == p))
        .filter_map(|c| c.grown.as_ref())
        .next_back();
    if let Some(leak) = analysis
        .findings
        .iter_mut()
        .find(|f| f.kind == FindingKind::Leak)
    {
        let mut in_state = None;
        let mut optimizer_rate = 0.0;
        // What the categories grow a step (all from the same total): the census counts tensor
        // bytes, as they do, where resident memory may grow faster than what is allocated.
        let mut categories_rate = None;
        if let Some(stats) = &basis_stats {
            leak.evidence.push(category_evidence(stats));
            let state: f64 = [&stats.parameters, &stats.gradients, &stats.optimizer_state]
                .iter()
                .filter(|t| t.grows)
                .map(|t| t.per_step_bytes)
                .sum();
            let rest = stats
                .rest
                .as_ref()
                .filter(|r| r.grows)
                .map_or(0.0, |r| r.per_step_bytes.max(0.0));
            // Compared by category (all from the same total), not with the leak's own basis:
            // resident memory may grow faster than what is allocated.
            if state > 0.0 && state >= NAMED_SHARE * (state + rest) {
                in_state = Some((state, state + rest));
            }
            if stats.optimizer_state.grows {
                optimizer_rate = stats.optimizer_state.per_step_bytes;
            }
            categories_rate = (state + rest > 0.0).then_some(state + rest);
        }
        if let Some((state, all)) = in_state {
            leak.evidence.push(format!(
                "the model's parameters, gradients and the optimizers' state account for {}/step of the {}/step the categories grow (the census leaves them out)",
                format_bytes(state),
                format_bytes(all)
            ));
            if optimizer_rate >= NAMED_SHARE * all {
                kept_by_the_optimizer(leak, optimizer_rate);
            }
        } else {
            // Resident memory that rises while the C heap is flat: the report's own evidence
            // says nothing the job allocates grows, unless a holder grew outside the heap.
            let flat_heap = basis_stats
                .as_ref()
                .filter(|s| {
                    basis == Basis::HostRss && categories_rate.is_none() && s.rest.is_some()
                })
                .filter(|_| censuses.is_some());
            // A holder whose growth the heap shows too (a replay buffer filling up early on)
            // grew inside the heap, which is flat: it is not what keeps rising. One that grew
            // while the heap did not holds memory outside it (shared memory, a mapped file).
            let (inside, outside): (Vec<HolderGrowth>, Vec<HolderGrowth>) = holders
                .iter()
                .cloned()
                .partition(|h| flat_heap.is_some_and(|s| heap_shows(s, h)));
            let named = name_holder(leak, basis, &outside, censuses, categories_rate)
                || basis == Basis::HostRss && objects.is_some_and(|o| name_objects(leak, o));
            if !named && flat_heap.is_some() {
                restate_as_a_question(leak, &inside);
            }
        }
    }
    analysis.findings.extend(findings);
}

/// The optimizers' state carries the leak: only an optimizer step, or code on it (a step hook,
/// custom code writing `optimizer.state`), adds to it, so the optimizer keeps it, whichever phase
/// the levels at the edges pointed at (an optimizer step that also frees more than it keeps, as
/// LBFGS frees its temporaries, shows no rise of its own).
fn kept_by_the_optimizer(leak: &mut Finding, optimizer_rate: f64) {
    if leak.phase == Some(Phase::Optimizer) {
        return;
    }
    let seemed = leak.phase.as_ref().map_or_else(
        || "the phases looked flat".to_owned(),
        |p| format!("{p} seemed to keep it"),
    );
    leak.evidence.retain(|e| {
        !e.contains("of what the phases keep")
            && !e.contains("of the growth came between the phases")
    });
    leak.evidence.push(format!(
        "the optimizers' state grows {}/step, and only an optimizer step or code on it (a step hook, custom code that writes `optimizer.state`) adds to it: the optimizer keeps it (by the levels at the phase edges {seemed}: a step that frees more than it keeps shows no rise of its own)",
        format_bytes(optimizer_rate)
    ));
    if let Some((_, rate)) = leak.title.split_once(": +") {
        leak.title = format!(
            "{} leak in {}: +{rate}",
            super::rules::capitalize(leak.basis.name()),
            Phase::Optimizer
        );
    }
    leak.phase = Some(Phase::Optimizer);
    leak.hints = super::rules::leak_hints(leak.basis, Some(&Phase::Optimizer));
    leak.hints.insert(0, "code on the optimizer step that stores tensors (a step hook, a subclass' `step`, `optimizer.state[p][…] = …`): keep only what the next step needs".to_owned());
}

/// Whether the C heap at the step starts rose between the holder's censuses by at least the
/// share of its growth that names a holder: its tensors are in the heap.
fn heap_shows(stats: &CategoryStats, h: &HolderGrowth) -> bool {
    // The last reading of the heap at or before the step (a step start where the probe did not
    // read the heap, over its share of the job's time, has none), else the first.
    let rest_at = |step: u64| {
        let read = || {
            stats
                .points
                .iter()
                .filter_map(|c| Some((c.step, c.rest()?)))
        };
        read()
            .rfind(|&(s, _)| s.is_some_and(|s| s <= step))
            .or_else(|| read().next())
            .map(|(_, rest)| rest)
    };
    match (rest_at(h.from_step), rest_at(h.to_step)) {
        (Some(from), Some(to)) => to as f64 - from as f64 >= NAMED_SHARE * h.growth_bytes(),
        _ => false,
    }
}

/// A rise of resident memory that nothing the job allocates explains, said as the question it
/// is; `grew_inside` are holders that grew, but inside the heap that is flat.
fn restate_as_a_question(leak: &mut Finding, grew_inside: &[HolderGrowth]) {
    let rate = format_bytes(leak.growth_per_step_bytes.unwrap_or(0.0));
    leak.kind = FindingKind::ResidentGrowth;
    leak.title = format!(
        "Host memory rises {rate}/step, but nothing the job allocates grows: outside malloc, or kept after it was freed?"
    );
    leak.phase = None;
    leak.evidence.retain(|e| {
        !e.contains("of what the phases keep")
            && (grew_inside.is_empty() || !e.starts_with("no holder the census reached grew"))
    });
    let holders = if grew_inside.is_empty() {
        "no holder the census reached grew".to_owned()
    } else {
        let names: Vec<&str> = grew_inside.iter().map(|h| h.name.as_str()).collect();
        format!(
            "what the holders that grew keep ({}) is in that heap, which rose with them and not since",
            names.join(", ")
        )
    };
    leak.evidence.push(format!("the C heap in use (every tensor on the CPU, and what C code allocates) is flat at each step's start, and {holders}: this is not memory the job keeps hold of through malloc"));
    leak.hints = vec![
        "Python objects that pile up (lists of numbers, dicts, strings) live in Python's own arenas, not in the C heap: look for what the loop appends to".to_owned(),
        "memory freed but kept resident by glibc's arenas (one per thread): `MALLOC_ARENA_MAX=2`, or `ctypes.CDLL(None).malloc_trim(0)` now and then, shows whether it is given back".to_owned(),
        "memory-mapped files (datasets, `np.memmap`) counted as they are touched for the first time".to_owned(),
    ];
}

/// Names the holder that grew by about the leaked amount, or says that none did. The amount is
/// the categories' growth when they grow (`categories_rate`, a step: what is allocated, as the
/// census counts it), else the leak's own.
fn name_holder(
    leak: &mut Finding,
    basis: Basis,
    holders: &[HolderGrowth],
    censuses: Option<(&Census, &Census)>,
    categories_rate: Option<f64>,
) -> bool {
    let Some((from, to)) = censuses else {
        return false;
    };
    let span = to.step.unwrap_or(0).saturating_sub(from.step.unwrap_or(0)) as f64;
    let rate = categories_rate.unwrap_or(leak.growth_per_step_bytes.unwrap_or(0.0));
    let leaked = rate * span;
    let on_basis = |h: &&HolderGrowth| match basis {
        Basis::HostRss => h.device.is_none(),
        _ => h.device.is_some(),
    };
    let best = holders.iter().find(on_basis);
    let named = match best {
        Some(h) if leaked > 0.0 && h.growth_bytes() >= NAMED_SHARE * leaked => {
            leak.title.push_str(&format!(", held by {}", h.name));
            leak.evidence.push(format!(
                "held by {} — the leak over those steps: {}",
                h.describe(),
                format_bytes(leaked)
            ));
            leak.hints.insert(0, holder_hint(h));
            true
        }
        _ => {
            let mut line = format!(
                "no holder the census reached grew by the leaked amount ({} from step {} to {})",
                format_bytes(leaked),
                from.step.unwrap_or(0),
                to.step.unwrap_or(0)
            );
            if let Some(h) = best {
                line.push_str(&format!("; the most: {}", h.describe()));
            }
            if to.unreached_counted && to.unreached_tensors > 0 {
                line.push_str(&format!(
                    "; {} tensors ({}) were alive that no name reaches (held from C++ or by a library's internals)",
                    to.unreached_tensors,
                    format_bytes(to.unreached_bytes as f64)
                ));
            }
            leak.evidence.push(line);
            false
        }
    };
    leak.evidence.extend(cut_short(from, to));
    named
}

/// The least number of objects of one type a container must hold of what grew to be named.
const OBJECTS_NAMED: u64 = 8;

/// Where no tensor holder grew by the leaked amount: the module-level container that holds the
/// objects that grew (pyplot's figures, a registry), named as the leak's holder with the types
/// that grew; else those types alone. Whether a container was named.
fn name_objects(leak: &mut Finding, grown: &ObjectGrowth) -> bool {
    let since = grown
        .since_step
        .map_or_else(|| "they were counted".to_owned(), |s| format!("step {s}"));
    let types: Vec<String> = grown
        .types
        .iter()
        .filter(|t| t.now > t.before)
        .take(6)
        .map(|t| format!("{} +{}", short_type(&t.name), t.now - t.before))
        .collect();
    let container = grown
        .containers
        .iter()
        .filter(|c| c.items.min(c.grew) >= OBJECTS_NAMED)
        .max_by_key(|c| c.items.min(c.grew));
    let Some(c) = container else {
        if !types.is_empty() {
            leak.evidence.push(format!(
                "objects that are not tensors grew since {since} (no container of a module held them): {}",
                types.join(", ")
            ));
        }
        return false;
    };
    leak.title.push_str(&format!(", held by {}", c.name));
    leak.evidence.push(format!(
        "held by {} ({}: {} items, mostly {}) — objects, not tensors: {} more {} since {since}; the types that grew most: {}",
        c.name,
        c.what,
        c.items,
        short_type(&c.holds),
        c.grew,
        short_type(&c.holds),
        types.join(", ")
    ));
    let fix = if c.name.starts_with("matplotlib._pylab_helpers.Gcf") {
        "pyplot keeps every figure it makes until it is closed: `plt.close(fig)` once it is saved or logged (or make it with `matplotlib.figure.Figure()`, which pyplot does not keep)"
    } else {
        "it keeps every object added to it: remove what is no longer needed, or keep only the last few"
    };
    leak.hints.insert(0, format!("{}: {fix}", c.name));
    true
}

/// A type's name without its module (`matplotlib.figure.Figure`: `Figure`).
fn short_type(name: &str) -> &str {
    name.rsplit('.').next().unwrap_or(name)
}

/// What a census cut at its time limit reached, said with the holders it named: breadth first
/// from the job's names, it stopped before the holders furthest from them, and a holder the
/// earlier census did not reach counts as grown from nothing.
fn cut_short(from: &Census, to: &Census) -> Option<String> {
    let cut: Vec<&Census> = [from, to].into_iter().filter(|c| c.truncated).collect();
    let first = cut.first()?;
    let steps: Vec<String> = cut
        .iter()
        .map(|c| c.step.unwrap_or(0).to_string())
        .collect();
    let reached: Vec<String> = cut
        .iter()
        .map(|c| {
            format!(
                "{} ({}, {})",
                crate::format::count(c.objects as usize, "object"),
                crate::format::count(c.tensors as usize, "tensor"),
                format_bytes(c.bytes as f64)
            )
        })
        .collect();
    let (censuses, limits) = if cut.len() == 1 {
        ("census", "its time limit")
    } else {
        ("censuses", "their time limit")
    };
    Some(format!(
        "the {censuses} at step{} {} stopped at {limits} after {}{}: a holder further from the job's names was not looked at (`collector --census-limit SECONDS` gives them longer)",
        if cut.len() == 1 { "" } else { "s" },
        steps.join(" and "),
        reached.join(" and "),
        if first.step == from.step {
            ", and a holder the first did not reach counts as grown from nothing"
        } else {
            ""
        }
    ))
}

/// How the probe's census says a holder keeps caught exceptions (`_census.py`'s `exception`).
const KEPT_BY_TRACEBACKS: &str = "whose traceback keeps the frames of";

fn holder_hint(h: &HolderGrowth) -> String {
    let fix = if h.what.contains(KEPT_BY_TRACEBACKS) {
        "it keeps caught exceptions, and each one's traceback keeps the frames it passed through with their locals (what the failed code had made): keep `str(err)`, or recover after the `except` clause, not inside it (PyTorch's FAQ)"
    } else if h.key.starts_with("object:") {
        "it keeps every value it is given in several attributes: clear it once they are used (a torchmetrics metric: `reset()` after `compute()`)"
    } else if h.with_graph > 0 {
        "it keeps tensors with their autograd graph: keep `.item()` (a number) or `.detach().cpu()` instead"
    } else if h.device.is_some() {
        "it keeps GPU tensors: keep `.detach().cpu()` copies, or only the numbers the job needs"
    } else {
        "it keeps every tensor it is given: keep only what is needed (a number, the last few), or clear it"
    };
    format!("{}: {fix}", h.name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::MIB;

    fn grew(name: &str, what: &str, device: Option<u32>, mib: u64) -> HolderGrowth {
        HolderGrowth {
            key: format!("#{name}"),
            name: name.to_owned(),
            what: what.to_owned(),
            device,
            from_step: 16,
            to_step: 64,
            from_bytes: 0,
            to_bytes: mib * MIB as u64,
            tensors: mib,
            with_graph: 0,
            graph_bytes: 0,
            items: mib,
            per_step_bytes: (mib * MIB as u64) as f64 / 48.0,
        }
    }

    #[test]
    fn attributes_that_grow_together_are_their_object() {
        let attr = "list, an attribute of BinaryAUROC";
        let objects = grown_together(&[
            grew("metric.preds", attr, None, 48),
            grew("metric.target", attr, None, 96),
            // Another device's attribute is another holder.
            grew("metric.preds", attr, Some(0), 8),
        ]);
        assert_eq!(objects.len(), 1, "{objects:#?}");
        let metric = &objects[0];
        assert_eq!(metric.name, "metric");
        assert_eq!(
            metric.what,
            "a BinaryAUROC whose .preds, .target grew together"
        );
        assert_eq!(metric.device, None);
        assert_eq!(metric.to_bytes, 144 * MIB as u64);
        assert_eq!(metric.per_step_bytes, 3.0 * MIB);
        assert_eq!(metric.items, 144);
    }

    #[test]
    fn an_attribute_that_holds_nearly_all_of_it_stays_the_holder() {
        let attr = "an attribute of Net";
        let objects = grown_together(&[
            grew("model.bank", attr, None, 90),
            grew("model.seen", attr, None, 10),
        ]);
        assert!(objects.is_empty(), "{objects:#?}");
    }

    fn growth(containers: Vec<crate::recording::ObjectContainer>) -> ObjectGrowth {
        let count = |name: &str, before, now| crate::recording::TypeCount {
            name: name.to_owned(),
            before,
            now,
        };
        ObjectGrowth {
            since_step: Some(16),
            types: vec![
                count("matplotlib.path.Path", 199, 4674),
                count("builtins.dict", 6516, 21428),
                count("matplotlib.figure.Figure", 1, 26),
            ],
            containers,
        }
    }

    fn container(
        name: &str,
        items: u64,
        holds: &str,
        grew: u64,
    ) -> crate::recording::ObjectContainer {
        crate::recording::ObjectContainer {
            name: name.to_owned(),
            what: "OrderedDict, a class attribute of Gcf".to_owned(),
            items,
            holds: holds.to_owned(),
            grew,
        }
    }

    fn leak() -> Finding {
        Finding {
            kind: FindingKind::Leak,
            title: "Host memory leak in eval: +623 KiB/step".to_owned(),
            phase: Some(Phase::Eval),
            basis: Basis::HostRss,
            growth_per_step_bytes: Some(623.0 * 1024.0),
            evidence: Vec::new(),
            hints: Vec::new(),
        }
    }

    #[test]
    fn the_container_that_holds_the_objects_that_grew_is_the_holder() {
        let figs = container(
            "matplotlib._pylab_helpers.Gcf.figs",
            26,
            "matplotlib.backend_bases.FigureManagerBase",
            25,
        );
        // A cache whose last items are of a type that grew by one is not it.
        let cache = container("re._cache", 254, "re.Pattern", 1);
        let mut finding = leak();
        assert!(name_objects(
            &mut finding,
            &growth(vec![cache.clone(), figs])
        ));
        assert_eq!(
            finding.title,
            "Host memory leak in eval: +623 KiB/step, held by matplotlib._pylab_helpers.Gcf.figs"
        );
        assert_eq!(
            finding.evidence,
            [
                "held by matplotlib._pylab_helpers.Gcf.figs (OrderedDict, a class attribute of Gcf: 26 items, mostly FigureManagerBase) — objects, not tensors: 25 more FigureManagerBase since step 16; the types that grew most: Path +4475, dict +14912, Figure +25"
            ]
        );
        assert!(finding.hints[0].starts_with("matplotlib._pylab_helpers.Gcf.figs: pyplot keeps every figure it makes until it is closed: `plt.close(fig)`"), "{:?}", finding.hints);

        // Only the cache: the types that grew are said, and no holder is named.
        let mut finding = leak();
        assert!(!name_objects(&mut finding, &growth(vec![cache])));
        assert_eq!(finding.title, leak().title);
        assert_eq!(
            finding.evidence,
            [
                "objects that are not tensors grew since step 16 (no container of a module held them): Path +4475, dict +14912, Figure +25"
            ]
        );
    }

    #[test]
    fn globals_of_a_module_are_not_one_object() {
        let objects = grown_together(&[
            grew("__main__.losses", "list, a global of __main__", None, 50),
            grew("__main__.outputs", "list, a global of __main__", None, 50),
        ]);
        assert!(objects.is_empty(), "{objects:#?}");
    }
}
