//! The active memory timeline of a snapshot of 8,000,000 trace entries (~2.7 M allocations, the
//! shape `cases.py big` writes, built in memory by `tidemark_tests::snapshots`): the time to lay
//! it out, the bytes it holds per allocation, the time to answer a hover, and the time to sample
//! a picture 1,500 columns wide. Budgets: ≤ 1.5 s, ≤ 32 B per allocation, ≤ 1 ms a hover.
//!
//! `cargo bench -p tidemark-collector --bench timeline` (`TIMELINE_BENCH_ENTRIES=N` for another
//! size).

use std::sync::atomic::Ordering;
use std::time::Instant;

use collector::snapshot::timeline::MemoryTimeline;

#[path = "support/counting.rs"]
mod counting;
use counting::{Counting, LIVE, PEAK};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("timeline: bench");
        return;
    }
    let entries: usize = std::env::var("TIMELINE_BENCH_ENTRIES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8_000_000);
    let snapshot = tidemark_tests::snapshots::big_snapshot(entries);
    let allocations = snapshot
        .entries
        .iter()
        .filter(|e| e.action() == collector::snapshot::Action::Alloc)
        .count();
    println!(
        "snapshot: {} trace entries, {allocations} allocations, {} stacks",
        snapshot.entries.len(),
        snapshot.stack_count()
    );
    let mut times = Vec::new();
    let mut timeline = MemoryTimeline::default();
    for round in 0..3 {
        drop(std::mem::take(&mut timeline));
        let before = LIVE.load(Ordering::Relaxed);
        PEAK.store(before, Ordering::Relaxed);
        let start = Instant::now();
        timeline = MemoryTimeline::new(&snapshot);
        let took = start.elapsed().as_secs_f64();
        let held = LIVE.load(Ordering::Relaxed) - before;
        let peak = PEAK.load(Ordering::Relaxed) - before;
        println!(
            "round {round}: laid out in {took:.2} s; holds {:.1} MB = {:.1} B per allocation (heap_bytes says {:.1}); peak while laying out {:.0} MB",
            held as f64 / 1e6,
            held as f64 / allocations as f64,
            timeline.heap_bytes() as f64 / allocations as f64,
            peak as f64 / 1e6
        );
        times.push(took);
    }
    let best = times.iter().copied().fold(f64::INFINITY, f64::min);
    println!("layout: best of 3 {best:.2} s (budget ≤ 1.5 s)");

    let Some(device) = timeline.devices.first() else {
        return;
    };
    let sites = timeline.ranked_sites();
    let end = device.end();
    // A picture of the whole trace, 1,500 columns by 600 rows.
    let threshold = device.peak / 600;
    let start = Instant::now();
    let picture = device.picture(0, end, 1500, threshold, &sites);
    let whole = start.elapsed().as_secs_f64();
    let points: usize = picture.bands.iter().map(|b| b.points.len()).sum();
    println!(
        "picture of the whole trace (1,500 columns, bands ≥ {} B): {:.0} ms, {} bands of their own, {points} points",
        threshold,
        whole * 1e3,
        picture.bands.len()
    );
    // Zoomed to a thousandth of the trace.
    let from = end / 2;
    let start = Instant::now();
    let zoomed = device.picture(from, from + end / 1000, 1500, threshold, &sites);
    println!(
        "picture of a thousandth of it: {:.1} ms, {} bands",
        start.elapsed().as_secs_f64() * 1e3,
        zoomed.bands.len()
    );
    // Hovers at spread steps and heights.
    let n = 2000u32;
    let mut took = Vec::with_capacity(n as usize);
    let mut found = 0;
    for i in 0..n {
        let step = (u64::from(end) * u64::from(i) / u64::from(n)) as u32;
        let y = device.peak / 3 + (u64::from(i) * 7919) % (device.peak / 3).max(1);
        let start = Instant::now();
        let hit = device.hit(&snapshot, &picture, step, y);
        took.push(start.elapsed().as_secs_f64() * 1e3);
        found += usize::from(hit.is_some());
    }
    // The slowest point asked again: on a machine shared with other work, a hover that was
    // preempted shows as an outlier that a repeat does not.
    let slowest = (0..took.len())
        .max_by(|&a, &b| took[a].total_cmp(&took[b]))
        .unwrap_or(0) as u32;
    let step = (u64::from(end) * u64::from(slowest) / u64::from(n)) as u32;
    let y = device.peak / 3 + (u64::from(slowest) * 7919) % (device.peak / 3).max(1);
    let start = Instant::now();
    let _ = device.hit(&snapshot, &picture, step, y);
    let repeat = start.elapsed().as_secs_f64() * 1e3;
    took.sort_by(f64::total_cmp);
    let at = |q: f64| took[((took.len() - 1) as f64 * q) as usize];
    println!(
        "hover: median {:.3} ms, 99th percentile {:.3} ms, worst {:.3} ms ({repeat:.3} ms asked again) over {n} points ({found} on a band) (budget ≤ 1 ms)",
        at(0.5),
        at(0.99),
        at(1.0)
    );
}
