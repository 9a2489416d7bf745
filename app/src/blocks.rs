//! What a PyTorch memory snapshot adds: the live blocks at a chosen time (largest first, with
//! their stacks), leak suspects, and the segments' state (fragmentation made visible).

use collector::format::{count, format_bytes, format_duration};
use collector::palette;
use collector::snapshot::timeline::MemoryTimeline;
use collector::snapshot::{Judged, LiveBlock, LiveIndex, SiteGroup, Snapshot, SnapshotVerdict};

use crate::memtimeline::MemoryState;

/// A snapshot with what the views show, computed once when it is opened.
pub struct SnapshotView {
    /// The snapshot.
    pub snapshot: Snapshot,
    /// What the snapshot answers first (the headline the app shows), with its leak suspects
    /// and the segments' state per device.
    pub verdict: SnapshotVerdict,
    /// The first and last time of the trace (µs since the epoch).
    pub range_us: (i64, i64),
    /// Every block's life, swept once: the blocks alive at any time picked are read off it.
    pub index: collector::snapshot::LiveIndex,
    /// For a snapshot dumped next to a recording (`collector --history`): the file and why it
    /// was dumped; `None` when the opened file is the snapshot.
    pub paired: Option<(String, String)>,
    /// What a comparison reads off it, made the first time it is compared.
    facts: std::sync::OnceLock<collector::compare::SnapshotFacts>,
}

impl SnapshotView {
    /// The views of a snapshot judged ([`Judged`]), from its parts: the snapshot, its blocks'
    /// index and its verdict (the run holds its trace and analysis).
    pub fn new(snapshot: Snapshot, index: LiveIndex, verdict: SnapshotVerdict) -> Self {
        Self {
            range_us: snapshot.time_range_us().unwrap_or((0, 0)),
            index,
            verdict,
            snapshot,
            paired: None,
            facts: std::sync::OnceLock::new(),
        }
    }

    /// A snapshot the probe dumped next to a recording, `reason` being `oom` or `end`: judged as
    /// the report judges it ([`Judged::new`]), its trace left to the recording.
    pub fn paired(snapshot: Snapshot, file: String, reason: String) -> Self {
        let Judged {
            snapshot,
            index,
            verdict,
            ..
        } = Judged::new(snapshot);
        Self {
            paired: Some((file, reason)),
            ..Self::new(snapshot, index, verdict)
        }
    }

    /// What `collector diff` reads off the snapshot (its sites, devices and trace peak), made
    /// once.
    pub fn facts(&self) -> &collector::compare::SnapshotFacts {
        self.facts
            .get_or_init(|| collector::compare::SnapshotFacts::of(&self.snapshot))
    }

    /// Whether the snapshot has a trace with times (a timeline to show).
    pub fn has_timeline(&self) -> bool {
        self.range_us.1 > self.range_us.0
    }
}

/// The blocks view's state: the time shown and the blocks alive then.
#[derive(Default)]
pub struct BlocksState {
    /// Time since the trace's start, µs; `None` is the end (the snapshot itself).
    pub at_us: Option<i64>,
    /// The pinned block whose site was opened for it.
    opened_for: Option<Pinned>,
    cache: Option<(Option<i64>, Vec<LiveBlock>, Vec<SiteGroup>)>,
}

impl BlocksState {
    /// The live blocks at the chosen time, and the same grouped by allocation site as the
    /// report groups them ([`collector::snapshot::group_by_site`]), largest first (computed when
    /// the time changes).
    pub fn blocks<'a>(&'a mut self, view: &SnapshotView) -> (&'a [LiveBlock], &'a [SiteGroup]) {
        let at = self.at_us;
        if self.cache.as_ref().is_none_or(|(t, _, _)| *t != at) {
            let absolute = at.map_or(i64::MAX, |t| view.range_us.0.saturating_add(t));
            let blocks = view.index.at(absolute, None);
            let sites = collector::snapshot::group_by_site(&view.snapshot, &blocks);
            self.cache = Some((at, blocks, sites));
        }
        self.cache
            .as_ref()
            .map_or((&[], &[]), |(_, b, s)| (b.as_slice(), s.as_slice()))
    }
}

/// How many site rows are listed (the largest), and how many blocks under one site; the
/// totals are always stated.
const ROWS: usize = 200;

/// Times chosen on the timeline, nanoseconds since its start.
#[derive(Clone, Copy, Default)]
pub struct TimelineTimes {
    /// Pinned by a click on the plot.
    pub pinned_ns: Option<u64>,
    /// The last time the pointer was over the plot.
    pub last_hovered_ns: Option<u64>,
}

/// The block pinned on the memory timeline (or here): its device, address, size, when it was
/// allocated (µs since the epoch), its stack.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Pinned {
    device: u32,
    addr: u64,
    size: u64,
    allocated_us: Option<i64>,
    stack: u32,
}

impl Pinned {
    /// The pinned block of the memory timeline's state, if any.
    fn of(snapshot: &Snapshot, memory: &mut MemoryState) -> Option<Self> {
        let (d, band) = memory.pinned?;
        let layout = memory.layout(snapshot);
        let device = layout.devices.get(d)?;
        let b = device.block(snapshot, band)?;
        Some(Self {
            device: device.device,
            addr: b.addr,
            size: b.size,
            allocated_us: b.allocated_us,
            stack: b.stack,
        })
    }

    fn is(&self, b: &LiveBlock) -> bool {
        b.device == self.device && b.addr == self.addr && b.allocated_us == self.allocated_us
    }
}

/// Pins `b` (alive at `at_us`) on the memory timeline: its band there, found among those alive
/// at that time on its device.
fn pin(snapshot: &Snapshot, memory: &mut MemoryState, b: &LiveBlock, at_us: i64) {
    let layout = memory.layout(snapshot);
    let Some((d, device)) = layout
        .devices
        .iter()
        .enumerate()
        .find(|(_, d)| d.device == b.device)
    else {
        return;
    };
    let step = device.step_at_time(snapshot, at_us);
    let mut live = Vec::new();
    device.live_at(step, &mut live);
    if let Some(&band) = live.iter().find(|&&band| {
        device
            .block(snapshot, band)
            .is_some_and(|x| x.addr == b.addr && x.allocated_us == b.allocated_us)
    }) {
        memory.device = d;
        memory.pinned = Some((d, band));
    }
}

/// The blocks tab. The block pinned on the memory timeline is named, marked in its site's list,
/// and its allocation time one click away; a block pinned here is pinned there.
pub fn blocks_ui(
    ui: &mut egui::Ui,
    view: &SnapshotView,
    state: &mut BlocksState,
    times: TimelineTimes,
    memory: &mut MemoryState,
) {
    let s = &view.snapshot;
    let pinned = Pinned::of(s, memory);
    let span_us = (view.range_us.1 - view.range_us.0).max(0);
    if let Some((file, reason)) = &view.paired {
        let when = if reason == "oom" {
            "at the out-of-memory error"
        } else {
            "at the end of the job"
        };
        ui.strong(format!("The allocator {when}: {file}"));
        ui.label(&view.verdict.headline);
    }
    if !view.has_timeline() {
        // No trace with times: the blocks at the snapshot are all there is.
        state.at_us = None;
    }
    ui.horizontal_wrapped(|ui| {
        if !view.has_timeline() {
            ui.label("Live blocks at the snapshot (it has no trace with times to go back in)");
            return;
        }
        ui.label("Live blocks at");
        let mut at_end = state.at_us.is_none();
        let mut t = state.at_us.unwrap_or(span_us) as f64 / 1e6;
        let slider = ui.add_enabled(
            !at_end,
            egui::Slider::new(&mut t, 0.0..=span_us as f64 / 1e6)
                .suffix(" s")
                .text("since the trace's start"),
        );
        if slider.changed() {
            state.at_us = Some((t * 1e6) as i64);
        }
        if ui
            .checkbox(&mut at_end, "at the snapshot (the end)")
            .changed()
        {
            state.at_us = if at_end { None } else { Some(span_us) };
        }
        for (t, what) in [
            (times.pinned_ns, "pinned on the timeline"),
            (times.last_hovered_ns, "last pointed at on the timeline"),
        ] {
            if let Some(t) = t
                && ui
                    .button(format!(
                        "at the time {what} ({})",
                        format_duration(t as f64 / 1e9)
                    ))
                    .clicked()
            {
                state.at_us = Some((t / 1000) as i64);
            }
        }
    });
    if let Some(p) = pinned {
        ui.horizontal_wrapped(|ui| {
            ui.strong("Pinned on the memory timeline:");
            ui.label(format!(
                "{} at 0x{:x} on {}, {}",
                format_bytes(p.size as f64),
                p.addr,
                s.device_name(p.device),
                s.site_name(s.site(p.stack))
            ));
            if let Some(t) = p.allocated_us.filter(|_| view.has_timeline())
                && ui.button("live blocks when it was allocated").clicked()
            {
                state.at_us = Some((t - view.range_us.0).max(0));
            }
        });
    }
    let end_us = state
        .at_us
        .map_or(view.range_us.1, |t| view.range_us.0.saturating_add(t));
    let mut pin_this: Option<LiveBlock> = None;
    // A site whose peak was asked for: (its device, its stack, its name).
    let mut its_peak: Option<(u32, u32, String)> = None;
    let newly_pinned = state.opened_for != pinned;
    // Each site in its colour on the memory timeline and the flame graph.
    let layout = memory.layout(s);
    let (blocks, sites) = state.blocks(view);
    let total: u64 = blocks.iter().map(|b| b.size).sum();
    ui.label(format!(
        "{} in {} from {} allocation site{}, the largest first{}",
        format_bytes(total as f64),
        count(blocks.len(), "block"),
        sites.len(),
        if sites.len() == 1 { "" } else { "s" },
        if sites.len() > ROWS {
            format!(" (the {ROWS} largest listed)")
        } else {
            String::new()
        }
    ));
    egui::ScrollArea::vertical()
        .id_salt("blocks")
        .max_height(ui.available_height() * 0.55)
        .show(ui, |ui| {
            for (i, site) in sites.iter().take(ROWS).enumerate() {
                // Looked for only when the pin is new (its site is opened once).
                let opens = newly_pinned
                    && pinned.is_some_and(|p| {
                        site.blocks
                            .iter()
                            .filter_map(|&b| blocks.get(b))
                            .any(|b| p.is(b))
                    });
                // Room for the site's swatch, painted once the header is laid out.
                let title = format!(
                    "      {:>10}   {:>11}   {}   {}",
                    format_bytes(site.bytes as f64),
                    count(site.blocks.len(), "block"),
                    s.device_name(site.device),
                    site.name(s)
                );
                let header = egui::CollapsingHeader::new(title)
                    .id_salt(("site", i, site.device, site.stack))
                    .open(opens.then_some(true))
                    .show(ui, |ui| {
                        if site.stacks > 1 {
                            ui.weak(format!(
                                "{} stacks reach this site; the largest block's:",
                                site.stacks
                            ));
                        }
                        frames_ui(ui, s, site.stack);
                        if view.has_timeline()
                            && ui
                                .small_button("its peak")
                                .on_hover_text(
                                    "The moment this site's blocks held the most, on the memory timeline",
                                )
                                .clicked()
                        {
                            its_peak = Some((site.device, site.stack, site.name(s)));
                        }
                        ui.add_space(4.0);
                        for &b in site.blocks.iter().take(ROWS) {
                            let Some(b) = blocks.get(b) else { continue };
                            let age =
                                b.allocated_us
                                    .map_or("since before the trace".to_owned(), |t| {
                                        format!(
                                            "age {}",
                                            format_duration((end_us - t).max(0) as f64 / 1e6)
                                        )
                                    });
                            ui.horizontal(|ui| {
                                let text = format!(
                                    "{:>10}  at 0x{:x}  {age}",
                                    format_bytes(b.size as f64),
                                    b.addr
                                );
                                if pinned.is_some_and(|p| p.is(b)) {
                                    ui.label(egui::RichText::new(text).monospace().strong());
                                    ui.strong("(pinned)");
                                } else {
                                    ui.monospace(text);
                                    if ui
                                        .small_button("pin")
                                        .on_hover_text(
                                            "Pin it on the memory timeline and the flame graph",
                                        )
                                        .clicked()
                                    {
                                        pin_this = Some(*b);
                                    }
                                }
                            });
                        }
                        if site.blocks.len() > ROWS {
                            ui.weak(format!("… and {} more", site.blocks.len() - ROWS));
                        }
                    });
                let r = header.header_response.rect;
                let x = r.left() + ui.spacing().icon_width + ui.spacing().icon_spacing + 2.0;
                ui.painter().rect_filled(
                    egui::Rect::from_center_size(
                        egui::pos2(x + 6.0, r.center().y),
                        egui::vec2(12.0, 12.0),
                    ),
                    2.0,
                    crate::memtimeline::stack_color(&layout, s, site.stack)
                        .unwrap_or(crate::memtimeline::FILTERED_OUT),
                );
                // The whole stack under the pointer, without expanding.
                header
                    .header_response
                    .on_hover_ui(|ui| frames_ui(ui, s, site.stack));
            }
        });
    // The pinned block's site is opened once (then it may be closed).
    state.opened_for = pinned;
    if let Some(b) = pin_this {
        pin(s, memory, &b, end_us);
    }
    if let Some((device, stack, name)) = its_peak
        && let Some(d) = layout.devices.iter().position(|d| d.device == device)
        && let Some(site) = layout.site_of_stack(s, stack)
    {
        memory.go_to_peak(s, d, format!("The blocks of {name}"), |p| p.site == site);
    }
    ui.separator();
    ui.columns(2, |cols| {
        suspects_ui(&mut cols[0], view);
        segments_ui(&mut cols[1], view, &layout);
    });
}

/// A stack, innermost first: the Python frames (or the C++ ones outside the allocator).
fn frames_ui(ui: &mut egui::Ui, s: &Snapshot, stack: u32) {
    let frames = s.user_frames(stack);
    if frames.is_empty() {
        ui.weak(format!(
            "no frames: {} (`torch.cuda.memory._record_memory_history()` records them from then on)",
            collector::snapshot::BEFORE_HISTORY
        ));
    }
    for f in frames {
        ui.monospace(s.frame_text(f));
    }
}

fn suspects_ui(ui: &mut egui::Ui, view: &SnapshotView) {
    let s = &view.snapshot;
    // Without steps (no phase that repeats), sites alive from many moments are shown as such.
    let stepless = view.verdict.suspects.iter().all(|x| x.phase.is_none());
    ui.heading(if stepless && !view.verdict.suspects.is_empty() {
        "Alive at the end, allocated at many moments (the trace has no steps)"
    } else {
        "Leak suspects"
    });
    if view.verdict.suspects.is_empty() {
        ui.label("None: no allocation site left blocks alive from several occurrences of a repeating phase.");
        return;
    }
    egui::ScrollArea::vertical()
        .id_salt("suspects")
        .show(ui, |ui| {
            for (i, x) in view.verdict.suspects.iter().take(50).enumerate() {
                let within = match &x.phase {
                    Some(p) => format!("in {p}: {} of {} occurrences", x.occurrences, x.of),
                    None => format!("allocated at {} times, alive at the end", x.occurrences),
                };
                egui::CollapsingHeader::new(
                    egui::RichText::new(format!(
                        "{} in {} blocks, {}, {}, {within}",
                        format_bytes(x.bytes as f64),
                        x.blocks,
                        s.device_name(x.device),
                        s.site_name(s.site(x.stack))
                    ))
                    .color(ui.visuals().warn_fg_color),
                )
                .id_salt(("suspect", i))
                .default_open(i == 0)
                .show(ui, |ui| frames_ui(ui, s, x.stack));
            }
        });
}

fn segments_ui(ui: &mut egui::Ui, view: &SnapshotView, layout: &MemoryTimeline) {
    ui.heading("Segments at the snapshot");
    for g in &view.verdict.held {
        ui.label(format!(
            "{}: {} segments, {} reserved: {} allocated, {} waiting to be freed, {} free in {} pieces (largest {}){}",
            view.snapshot.device_name(g.device),
            g.segments,
            format_bytes(g.reserved as f64),
            format_bytes(g.allocated as f64),
            format_bytes(g.pending_free as f64),
            format_bytes(g.free as f64),
            g.free_pieces,
            format_bytes(g.largest_free as f64),
            g.free_in_pools_text()
        ));
        if let Some(pools) = g.pools_text() {
            ui.label(pools);
        }
    }
    if view.verdict.held.is_empty() {
        ui.weak("The snapshot holds no segments.");
        return;
    }
    // The colours of the segment timeline.
    ui.horizontal(|ui| {
        for (fill, label) in [
            (palette::site(0), "allocated (by site)"),
            (palette::SEGMENT_PENDING, "waiting to be freed"),
            (palette::SEGMENT_FREE, "free (cached)"),
        ] {
            crate::memtimeline::swatch(ui, crate::memtimeline::color(fill));
            ui.label(label);
        }
    });
    // One bar per segment, its blocks in address order, widths by size.
    egui::ScrollArea::vertical()
        .id_salt("segments")
        .show(ui, |ui| {
            for seg in view.snapshot.segments.iter().take(300) {
                let width = ui.available_width().max(100.0);
                let (rect, response) =
                    ui.allocate_exact_size(egui::vec2(width, 14.0), egui::Sense::hover());
                let painter = ui.painter();
                painter.rect_filled(rect, 0.0, ui.visuals().extreme_bg_color);
                let total = seg.total_size.max(1) as f64;
                let mut x = rect.left();
                for b in &seg.blocks {
                    let w = (b.size as f64 / total * rect.width() as f64) as f32;
                    let r = egui::Rect::from_min_size(
                        egui::pos2(x, rect.top()),
                        egui::vec2(w.max(1.0), rect.height()),
                    );
                    painter.rect_filled(
                        r,
                        0.0,
                        crate::memtimeline::segment_block_color(
                            layout,
                            &view.snapshot,
                            b.state,
                            b.stack,
                        ),
                    );
                    x += w;
                }
                response.on_hover_text(format!(
                    "{} {} segment at 0x{:x}: {}, {} blocks",
                    view.snapshot.device_name(seg.device),
                    seg.segment_type,
                    seg.address,
                    format_bytes(seg.total_size as f64),
                    seg.blocks.len()
                ));
            }
        });
}
