//! `collector report`'s text: the verdict that leads, the findings, the phase table, the
//! evidence, the categories and holders, and what a snapshot adds (segments, live blocks by
//! site, leak suspects).

use std::fmt::Write as _;
use std::path::Path;

use collector::analysis::{Analysis, FindingKind};
use collector::format::{count, format_bytes, format_duration, format_seconds};
use collector::headline::Headline;
use collector::recording::Recording;
use collector::snapshot::{Snapshot, SnapshotVerdict};

/// The text report: the verdict that leads (`lead`, [`leading`]; for a snapshot, its own with
/// its evidence), the trace's findings, then the phase table, then the evidence. `snapshot`: the
/// recording is this snapshot's trace.
pub fn text(
    file: &Path,
    recording: &Recording,
    analysis: &Analysis,
    snapshot: Option<(&Snapshot, &SnapshotVerdict)>,
    lead: &Headline,
) -> String {
    let mut out = String::new();
    let steps = analysis.step_series.values.len();
    if let Some((s, _)) = snapshot {
        // A snapshot is no job run under the collector: what it holds, and steps only when its
        // phases repeat.
        let trace = match s.time_range_us() {
            _ if s.entries.is_empty() => "no trace".to_owned(),
            Some((a, b)) if b > a => format!(
                "{} over {}",
                count(s.entries.len(), "trace entry"),
                format_seconds((b - a) as f64 / 1e6)
            ),
            _ => count(s.entries.len(), "trace entry"),
        };
        let steps = if analysis.by_step && steps >= 2 {
            format!(", {}", count(steps, "step"))
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "{} — a PyTorch memory snapshot ({}, {trace}{steps})\n",
            file.display(),
            match s.host {
                Some(host) => format!("{} and pinned host memory", count(host as usize, "device")),
                None => count(s.devices.max(1) as usize, "device"),
            }
        );
    } else {
        let header = &recording.header;
        let pinned = header.pinned_host().is_some();
        let gpus = header.devices.len() - usize::from(pinned);
        let _ = writeln!(
            out,
            "{} — {} (host {}, {} GPU{}{}, {}, {})\n",
            file.display(),
            header.command.join(" "),
            if header.host.is_empty() {
                "?"
            } else {
                &header.host
            },
            gpus,
            if gpus == 1 { "" } else { "s" },
            if pinned {
                " and pinned host memory"
            } else {
                ""
            },
            format_duration(recording.duration_ns() as f64 / 1e9),
            count(
                steps,
                if analysis.by_step {
                    "step"
                } else {
                    "time window"
                }
            )
        );
    }
    let _ = writeln!(out, "VERDICT");
    if let Some((_, verdict)) = snapshot {
        let mark = if verdict.problem { "✗" } else { "•" };
        let _ = writeln!(out, "  {mark} {}", lead.text);
        for line in &verdict.evidence {
            let _ = writeln!(out, "      {line}");
        }
    } else if lead.problem != Some(true) {
        // A problem leads as the first finding below.
        let mark = if lead.problem.is_none() { "?" } else { "✓" };
        let _ = writeln!(out, "  {mark} {}", lead.text);
    }
    // A snapshot says what the trace is too short for in its own evidence.
    let findings = analysis
        .findings
        .iter()
        .filter(|f| snapshot.is_none() || f.kind != FindingKind::NotEnoughData);
    for finding in findings {
        let mark = if finding.kind.is_problem() {
            "✗"
        } else {
            "•"
        };
        // What cannot be told yet leads with its finding's title ("Cannot tell yet — not enough
        // data: …"), and so does a sawtooth ("No leak: a sawtooth that falls back…"): its
        // evidence and hints follow the headline, not the title again.
        let leads = snapshot.is_none()
            && lead.problem != Some(true)
            && lead
                .text
                .to_lowercase()
                .ends_with(&finding.title.to_lowercase());
        if !leads {
            let _ = writeln!(out, "  {mark} {}", finding.title);
        }
        for line in &finding.evidence {
            let _ = writeln!(out, "      {line}");
        }
        if !finding.hints.is_empty() {
            let _ = writeln!(out, "      usual causes:");
            for hint in &finding.hints {
                let _ = writeln!(out, "        - {hint}");
            }
        }
    }
    if !analysis.ranks.is_empty() {
        let _ = writeln!(out, "\nRANKS (each judged on its own memory)");
        for r in &analysis.ranks {
            let mark = match r.problem {
                Some(true) => "✗",
                Some(false) => "✓",
                None => "?",
            };
            let baseline = r
                .baseline_bytes
                .map_or("—".to_owned(), |b| format_bytes(b as f64));
            let growth = r.growth_per_step_bytes.map_or("no trend".to_owned(), |g| {
                format!("{}/step", format_bytes(g))
            });
            let _ = writeln!(
                out,
                "  {mark} rank {:<3} pid {:<8} {:>10} at a step's start, {growth:<14} {}",
                r.rank, r.pid, baseline, r.headline
            );
        }
    }
    if !analysis.phases.is_empty() {
        let whose = analysis
            .ranks
            .iter()
            .find(|r| analysis.step_series == r.step_series)
            .map_or(String::new(), |r| format!(" (rank {})", r.rank));
        let _ = writeln!(
            out,
            "\nPHASES{whose:<13}     count   net Δ (mean ± sd)        watermark Δ (mean ± sd)   retained/occ  share of growth  watermark trend"
        );
        for p in &analysis.phases {
            let share = p
                .share_of_growth
                .map_or("—".to_owned(), |s| format!("{:.0}%", 100.0 * s));
            let trend = p.watermark_trend.as_ref().map_or("—".to_owned(), |t| {
                format!(
                    "{}/occ, p={}",
                    format_bytes(t.slope_per_step),
                    collector::format::format_p(t.p_value)
                )
            });
            let _ = writeln!(
                out,
                "  {:<17} {:>9}   {:>10} ± {:<10}  {:>10} ± {:<10}   {:>12}  {:>15}  {trend}",
                p.phase.as_str(),
                p.count_text(),
                format_bytes(p.net_mean_bytes),
                format_bytes(p.net_std_bytes),
                format_bytes(p.watermark_mean_bytes),
                format_bytes(p.watermark_std_bytes),
                format_bytes(p.retained_mean_bytes),
                share
            );
        }
    }
    categories_text(&mut out, analysis);
    holders_text(&mut out, recording, analysis);
    cells_text(&mut out, analysis);
    let _ = writeln!(out, "\nEVIDENCE");
    // A snapshot without a trace has no series (its verdict says so).
    if snapshot.is_none() || steps > 0 {
        let _ = writeln!(
            out,
            "  basis: {} at the start of each {} ({})",
            analysis.basis.name(),
            if analysis.by_step {
                "step"
            } else {
                "time window"
            },
            count(steps, "point")
        );
    }
    if let Some(attribution) = analysis.attribution {
        let _ = writeln!(
            out,
            "  phases attributed with {}",
            attribution.describe(analysis.basis, recording.header.imported())
        );
    }
    if let Some(note) = &analysis.attribution_note {
        let _ = writeln!(out, "  {note}");
    }
    if let Some(t) = &analysis.trend {
        let _ = writeln!(
            out,
            "  trend after warm-up: {}/{} (Theil–Sen), Mann–Kendall p = {}, noise ±{}, from {} to {}",
            format_bytes(t.slope_per_step),
            analysis.unit(),
            collector::format::format_p(t.p_value),
            format_bytes(t.noise_bytes),
            format_bytes(t.start_bytes),
            format_bytes(t.end_bytes)
        );
    }
    if let Some(p) = &analysis.projection {
        let _ = writeln!(
            out,
            "  projected out-of-memory at step {} ({} of {} at step {})",
            p.oom_step,
            format_bytes(p.level_bytes as f64),
            format_bytes(p.capacity_bytes as f64),
            p.last_step
        );
    }
    for oom in &recording.ooms {
        let _ = writeln!(
            out,
            "  out-of-memory at {}: {}",
            format_duration(oom.t_ns as f64 / 1e9),
            oom.message
        );
    }
    if recording.dropped_total() > 0 {
        let _ = writeln!(
            out,
            "  {} probe messages were lost or refused",
            recording.dropped_total()
        );
    }
    for lack in &analysis.lacks {
        let _ = writeln!(out, "  not recorded: {lack}");
    }
    for note in &recording.notes {
        let _ = writeln!(out, "  note: {}", note.text);
    }
    for warning in &recording.warnings {
        let _ = writeln!(out, "  warning: {warning}");
    }
    out
}

/// The CATEGORIES section: each device's parameters, gradients, optimizer state and the rest at
/// the steps' starts.
fn categories_text(out: &mut String, analysis: &Analysis) {
    if analysis.categories.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\nCATEGORIES (at each step's start: median, or first → last when it grows)\n  {:<8} {:>26} {:>26} {:>26} {:>34}",
        "", "parameters", "gradients", "optimizer state", "the rest"
    );
    let cell = |t: &collector::analysis::CategoryTrend| {
        if t.grows {
            format!(
                "{} → {} (+{}/step)",
                format_bytes(t.first_bytes as f64),
                format_bytes(t.last_bytes as f64),
                format_bytes(t.per_step_bytes)
            )
        } else {
            format_bytes(t.median_bytes as f64)
        }
    };
    for c in &analysis.categories {
        let place = c.device.map_or("host".to_owned(), |d| format!("cuda:{d}"));
        let rest = c.rest.as_ref().map_or("—".to_owned(), cell);
        let _ = writeln!(
            out,
            "  {place:<8} {:>26} {:>26} {:>26} {rest:>34}",
            cell(&c.parameters),
            cell(&c.gradients),
            cell(&c.optimizer_state)
        );
    }
    let totals: Vec<&str> = analysis.categories.iter().map(|c| c.total_is).collect();
    let _ = writeln!(
        out,
        "  the rest = {} minus the others: activations and whatever the job keeps",
        if totals.iter().all(|t| *t == totals[0]) {
            totals[0]
        } else {
            "allocated GPU memory (host: the C heap in use)"
        }
    );
    for c in analysis
        .categories
        .iter()
        .filter(|c| c.gradients_freed_after_forward)
    {
        let place = c.device.map_or("host".to_owned(), |d| format!("cuda:{d}"));
        let _ = writeln!(
            out,
            "  {place}: the step before's gradients ({}) live through each forward and are freed before the backward (`zero_grad()` after the forward, as Lightning's closure calls it): freed, not kept, but the forward's peak includes them; `zero_grad()` before the forward would free them first",
            format_bytes(c.gradients.median_bytes as f64)
        );
    }
}

/// The CELLS section of a notebook's recording: what each run of a cell kept (the memory after it
/// less before it; the cells that keep memory each time they run are findings of the verdict).
fn cells_text(out: &mut String, analysis: &Analysis) {
    const LISTED: usize = 20;
    let cells = &analysis.cells;
    if cells.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\nCELLS ({} after each run less before it)",
        cells.measure
    );
    for run in cells.runs.iter().take(LISTED) {
        let kept = run.kept().map_or("—".to_owned(), |k| {
            collector::compare::signed_bytes(k as f64)
        });
        let oom = if run.oom { "  (ran out of memory)" } else { "" };
        let held = run
            .held_text()
            .map_or(String::new(), |held| format!("  — held by {held}"));
        let label = format!("[{}]", run.count);
        let _ = writeln!(
            out,
            "  cell {label:<6} {kept:>11}   {}{oom}{held}",
            run.source
        );
    }
    if cells.runs.len() > LISTED {
        let _ = writeln!(out, "  … and {} more runs", cells.runs.len() - LISTED);
    }
}

/// The HOLDERS section: who holds the live tensors at the last census, and who grew.
fn holders_text(out: &mut String, recording: &Recording, analysis: &Analysis) {
    let pid = analysis.occurrences.first().map(|o| o.pid);
    let censuses: Vec<_> = recording
        .censuses
        .iter()
        .filter(|c| pid.is_none_or(|p| c.origin.pid == p))
        .collect();
    // The later of the two censuses the growth is judged on, else the last with holders.
    let compared = collector::analysis::census_pair(recording, pid).map(|(_, to)| to);
    let Some(last) = compared.or_else(|| {
        censuses
            .iter()
            .filter(|c| !c.holders.is_empty())
            .max_by_key(|c| (c.step, c.t_ns))
            .copied()
    }) else {
        return;
    };
    let step = last.step.map_or("?".to_owned(), |s| s.to_string());
    let _ = writeln!(
        out,
        "\nHOLDERS (census at step {step}, parameters, gradients and optimizer state left out)"
    );
    for h in last.holders.iter().take(8) {
        let grown = analysis.holders.iter().find(|g| g.is(h));
        let grew = grown.map_or(String::new(), |g| {
            format!(
                "  +{} since step {}",
                format_bytes(g.growth_bytes()),
                g.from_step
            )
        });
        let (name, what) = grown.map_or((&h.name, &h.what), |g| (&g.name, &g.what));
        let graph = if h.with_graph > 0 {
            format!(" ({} with grad_fn)", h.with_graph)
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "  {name:<36} {:>10} in {:>4} tensor{}{graph}  {what}{grew}",
            format_bytes(h.held_bytes() as f64),
            h.tensors,
            if h.tensors == 1 { " " } else { "s" },
        );
    }
    let cost: u64 = censuses.iter().map(|c| c.cost_ns).sum();
    let run = recording.duration_ns().max(1);
    let _ = writeln!(
        out,
        "  {} census{} took {:.1} ms in all ({:.2}% of the run){}",
        censuses.len(),
        if censuses.len() == 1 { "" } else { "es" },
        cost as f64 / 1e6,
        100.0 * cost as f64 / run as f64,
        if last.skipped > 0 {
            format!(
                "; {} objects skipped (they errored when looked at)",
                last.skipped
            )
        } else {
            String::new()
        }
    );
    let cut: Vec<String> = censuses
        .iter()
        .filter(|c| c.truncated)
        .map(|c| match c.step {
            Some(step) => format!("step {step} ({} objects)", c.objects),
            None => format!("{} ({} objects)", c.reason, c.objects),
        })
        .collect();
    if !cut.is_empty() {
        let _ = writeln!(
            out,
            "  cut at their time limit, holders further from the job's names not looked at: {} (`--census-limit SECONDS` gives them longer)",
            cut.join(", ")
        );
    }
}

/// What the snapshot adds to a report: the segments' state, the live memory at the end by
/// allocation site, and the leak suspects. `limit` rows per table.
pub fn snapshot_text(snapshot: &Snapshot, verdict: &SnapshotVerdict, limit: usize) -> String {
    let mut out = String::new();
    let mb = |b: u64| format_bytes(b as f64);
    let _ = writeln!(out, "SNAPSHOT");
    let counts: Vec<String> = snapshot
        .action_counts()
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    let _ = writeln!(
        out,
        "  {} trace entries ({}), {} distinct stacks, {} frames",
        snapshot.entries.len(),
        if counts.is_empty() {
            "none".to_owned()
        } else {
            counts.join(", ")
        },
        snapshot.stack_count().saturating_sub(1),
        snapshot.frames.len()
    );
    for s in snapshot.segment_summary() {
        let _ = writeln!(
            out,
            "  {}: {} segments, {} reserved: {} allocated, {} waiting to be freed, {} free in {} pieces (largest {}){}",
            snapshot.device_name(s.device),
            s.segments,
            mb(s.reserved),
            mb(s.allocated),
            mb(s.pending_free),
            mb(s.free),
            s.free_pieces,
            mb(s.largest_free),
            s.free_in_pools_text()
        );
        if let Some(pools) = s.pools_text() {
            let _ = writeln!(out, "    {pools}");
        }
        // Fragmented as the verdict judges it (one rule: the largest free piece under half the
        // free memory, or a request of the trace that fits the free memory but no piece).
        let fragmented = verdict
            .fragmentation
            .iter()
            .find(|f| f.device == s.device && f.fragmented);
        if let Some(f) = fragmented {
            let request = f.largest_request_bytes.map_or(String::new(), |r| {
                format!(" (the largest request in the trace was {})", mb(r))
            });
            let _ = writeln!(
                out,
                "    fragmented: the largest free piece is {:.0}% of the free memory; a tensor larger than {} needs a new cudaMalloc{request}",
                100.0 * f.largest_free_bytes as f64 / f.free_bytes.max(1) as f64,
                mb(f.largest_free_bytes)
            );
        }
    }
    let live = &verdict.live;
    let total: u64 = live.iter().map(|b| b.size).sum();
    let _ = writeln!(
        out,
        "\nLIVE BLOCKS AT THE END ({} blocks, {}; by allocation site, largest first)",
        live.len(),
        mb(total)
    );
    for s in verdict.top_sites.iter().take(limit) {
        let stacks = if s.stacks > 1 {
            format!(" ({} stacks)", s.stacks)
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "  {:>10}  {:>11}  {}  {}{stacks}",
            mb(s.bytes),
            count(s.blocks, "block"),
            snapshot.device_name(s.device),
            collector::snapshot::in_pool(s.site.clone(), s.pool)
        );
    }
    let suspects = &verdict.suspects;
    let _ = writeln!(out, "\nLEAK SUSPECTS");
    if suspects.is_empty() {
        let _ = writeln!(
            out,
            "  none: no allocation site left blocks alive from several occurrences of a repeating phase"
        );
    }
    for s in suspects.iter().take(limit) {
        let within = match &s.phase {
            Some(p) => format!(
                "in {p}: {} of {} occurrences left blocks alive",
                s.occurrences, s.of
            ),
            None => format!(
                "allocated at {} different times and never freed",
                s.occurrences
            ),
        };
        let _ = writeln!(
            out,
            "  {} in {} blocks, {}, from {}, {within}",
            mb(s.bytes),
            s.blocks,
            snapshot.device_name(s.device),
            snapshot.site_name(snapshot.site(s.stack))
        );
        for f in snapshot.user_frames(s.stack).iter().take(6) {
            let _ = writeln!(out, "      {}", snapshot.frame_text(f));
        }
    }
    out
}
