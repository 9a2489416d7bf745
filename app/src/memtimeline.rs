//! A snapshot's active memory timeline, the view pytorch.org/memory_viz opens on: one band per
//! allocation over the trace's steps, stacked in the order the blocks were allocated (laid out
//! by `collector::snapshot::timeline`), coloured by allocation site, the blocks too small for a
//! pixel grey in their places between them (a band's place never depends on the window's size).
//! Hover names a block (size, address, stream, when it was allocated and freed, its stack); a
//! click pins it and Ctrl+C copies its stack; scroll zooms, dragging pans, a double click shows
//! the whole trace again.

use std::sync::Arc;

use collector::format::{format_bytes, format_seconds};
use collector::palette;
use collector::snapshot::Snapshot;
use collector::snapshot::timeline::{
    BlockInfo, DeviceTimeline, Hit, MemoryTimeline, NEVER, Picture,
};
use egui::{Color32, Rect, Sense, Shape, Stroke, pos2, vec2};

/// What the view shows of one snapshot: its layout (made the first time it is shown), the
/// device, the steps in view, the pinned block, and the picture last sampled.
#[derive(Default)]
pub struct MemoryState {
    layout: Option<Arc<MemoryTimeline>>,
    /// The device shown (its place in the layout's devices).
    pub device: usize,
    /// The steps in view (`None`: the whole trace).
    pub range: Option<(f64, f64)>,
    /// The pinned block: (device's place, band).
    pub pinned: Option<(usize, u32)>,
    /// Two steps marked by right-clicking (on the device shown): what changed between them is
    /// shown under the timeline.
    pub moments: crate::diff::Marks<u32>,
    /// Only these blocks drawn in colour (a frame clicked in the flame graph).
    pub filter: Option<Filter>,
    cached: Option<Cached>,
    between: crate::diff::Memo<(u32, u32, u32), collector::snapshot::timeline::Between>,
    /// The segment timeline shown instead of the blocks.
    pub segments: bool,
    /// The trace's first time (µs since the epoch; 0: no times).
    start_us: Option<i64>,
    /// The segments' view: their layout and its picture.
    pub segment_view: crate::segtimeline::SegmentView,
    /// When the pinned block's stack was last copied, and how many lines: said for a moment.
    copied: Option<(web_time::Instant, usize)>,
    /// A peak gone to from another view ([`go_to_peak`](Self::go_to_peak)): what peaked, at
    /// which step, and its bytes; said while that step is the moment marked.
    pub peak: Option<(String, u32, u64)>,
    /// Asks the app to show the memory timeline (a view went to a peak on it).
    pub open: bool,
}

/// The blocks a frame of the flame graph stands for: those its stacks allocated.
#[derive(Clone, Debug)]
pub struct Filter {
    /// The frame, as the flame graph names it.
    pub what: String,
    /// The stacks through it, sorted.
    pub stacks: Arc<Vec<u32>>,
}

/// The same filter: the same frame and the same list of stacks (compared at every frame to
/// tell whether the mesh must be made again, so by identity, not stack by stack).
impl PartialEq for Filter {
    fn eq(&self, other: &Self) -> bool {
        self.what == other.what && Arc::ptr_eq(&self.stacks, &other.stacks)
    }
}

impl Filter {
    /// Whether the block of `band` (of `device`) was allocated under the frame.
    pub(crate) fn keeps(&self, snapshot: &Snapshot, device: &DeviceTimeline, band: u32) -> bool {
        device
            .band_place(snapshot, band)
            .is_some_and(|b| self.stacks.binary_search(&b.stack).is_ok())
    }
}

/// A picture sampled for one view, and its image for one rectangle, scale and filter.
struct Cached {
    key: (usize, u32, u32, u32, u64),
    picture: Picture,
    image: Option<(Rect, f32, Option<Filter>, egui::TextureHandle)>,
}

impl MemoryState {
    /// The layout, made now if it was not yet.
    pub fn layout(&mut self, snapshot: &Snapshot) -> Arc<MemoryTimeline> {
        self.layout
            .get_or_insert_with(|| Arc::new(MemoryTimeline::new(snapshot)))
            .clone()
    }

    /// Goes to where the blocks `keep` chooses (of device `device`, its place in the layout)
    /// held the most: that step marked as moment A, the view a tenth of the trace around it (the
    /// blocks, not the segments), the app asked to show it (`open`). `what` names them. Nothing
    /// happens where `keep` chooses no block.
    pub fn go_to_peak(
        &mut self,
        snapshot: &Snapshot,
        device: usize,
        what: String,
        keep: impl FnMut(&collector::snapshot::timeline::BandPlace) -> bool,
    ) {
        let layout = self.layout(snapshot);
        let Some(timeline) = layout.devices.get(device) else {
            return;
        };
        let Some((step, bytes)) = timeline.peak_where(snapshot, keep) else {
            return;
        };
        if device != self.device {
            self.device = device;
            self.pinned = None;
        }
        let end = f64::from(timeline.end());
        let span = (end / 10.0).max(40.0).min(end);
        let x0 = (f64::from(step) - span / 2.0).clamp(0.0, end - span);
        self.range = (span < end).then_some((x0, x0 + span));
        self.moments = crate::diff::Marks {
            a: Some(step),
            b: None,
        };
        self.segments = false;
        self.peak = Some((what, step, bytes));
        self.open = true;
    }
}

pub(crate) const fn color(c: palette::Rgb) -> Color32 {
    Color32::from_rgb(c.0, c.1, c.2)
}

/// A site's colour, by its rank.
pub fn site_color(layout: &MemoryTimeline, site: u32) -> Color32 {
    layout
        .sites
        .get(site as usize)
        .map_or(color(palette::OTHER_SITES), |s| {
            color(palette::site(s.rank))
        })
}

/// The colour of the site of blocks allocated by `stack`, as the memory timeline draws them
/// (the flame graph, the Blocks tab and the segments take it from here): `None` where no block
/// of the timeline has that site.
pub fn stack_color(layout: &MemoryTimeline, snapshot: &Snapshot, stack: u32) -> Option<Color32> {
    layout
        .site_of_stack(snapshot, stack)
        .map(|site| site_color(layout, site))
}

/// A legend's swatch of `c`, outlined (pale ones stay seen on the light theme).
pub(crate) fn swatch(ui: &mut egui::Ui, c: Color32) {
    let (r, _) = ui.allocate_exact_size(vec2(12.0, 12.0), Sense::hover());
    ui.painter().rect_filled(r, 2.0, c);
    ui.painter().rect_stroke(
        r,
        2.0,
        ui.visuals().widgets.noninteractive.fg_stroke,
        egui::StrokeKind::Inside,
    );
}

/// A block of a segment as the segment timeline colours it: allocated in its site's colour,
/// waiting to be freed, or free (cached).
pub fn segment_block_color(
    layout: &MemoryTimeline,
    snapshot: &Snapshot,
    state: collector::snapshot::BlockState,
    stack: u32,
) -> Color32 {
    use collector::snapshot::BlockState;
    match state {
        BlockState::ActiveAllocated => {
            stack_color(layout, snapshot, stack).unwrap_or(color(palette::OTHER_SITES))
        }
        BlockState::ActivePendingFree => color(palette::SEGMENT_PENDING),
        BlockState::Inactive => color(palette::SEGMENT_FREE),
        BlockState::Other => Color32::GRAY,
    }
}

/// `c` darker by `factor` (opaque, on any background).
fn darker(c: Color32, factor: f32) -> Color32 {
    let f = |v: u8| (f32::from(v) * factor) as u8;
    Color32::from_rgb(f(c.r()), f(c.g()), f(c.b()))
}

/// The stack of a block as text, innermost frame first.
pub fn stack_text(snapshot: &Snapshot, stack: u32) -> String {
    let frames: Vec<String> = snapshot
        .stack(stack)
        .map(|f| snapshot.frame_text(f))
        .collect();
    if frames.is_empty() {
        // The bucket's one name, as every view and the report give it.
        format!(
            "{} (no frames: or recorded without stacks)",
            collector::snapshot::BEFORE_HISTORY
        )
    } else {
        frames.join("\n")
    }
}

/// The frames a pinned block's panel shows first, as text, and how many its whole stack has:
/// `None` when they are the whole stack.
pub fn pinned_frames(snapshot: &Snapshot, stack: u32) -> Option<(String, usize)> {
    let all = snapshot.stack(stack).count();
    let first: Vec<String> = snapshot
        .user_frames(stack)
        .iter()
        .map(|f| snapshot.frame_text(f))
        .collect();
    (!first.is_empty() && first.len() < all).then(|| (first.join("\n"), all))
}

/// Seconds since the trace's start at `step`, as text.
pub(crate) fn when(
    snapshot: &Snapshot,
    device: &DeviceTimeline,
    step: u32,
    start_us: i64,
) -> String {
    match device.time_at(snapshot, step) {
        Some(t) if start_us > 0 => format!(
            "entry {step} (+{})",
            format_seconds((t - start_us) as f64 / 1e6)
        ),
        _ => format!("entry {step}"),
    }
}

/// What one block is, for the tooltip and the pinned panel.
pub(crate) fn block_lines(
    snapshot: &Snapshot,
    layout: &MemoryTimeline,
    device: &DeviceTimeline,
    b: &BlockInfo,
    start_us: i64,
) -> Vec<String> {
    let allocated = if b.allocated_us.is_none() && b.alloc_step == 0 {
        "before the trace began".to_owned()
    } else {
        when(snapshot, device, b.alloc_step, start_us)
    };
    let freed = if b.free_step == NEVER {
        "alive at the snapshot".to_owned()
    } else {
        when(snapshot, device, b.free_step, start_us)
    };
    let mut lines = vec![
        format!("{} at 0x{:x}", format_bytes(b.size as f64), b.addr),
        format!(
            "stream 0x{:x}, {}",
            b.stream,
            snapshot.device_name(device.device)
        ),
        format!("allocated: {allocated}"),
        format!("freed: {freed}"),
        format!("site: {}", layout.site_name(snapshot, b.site)),
    ];
    if let Some(m) = device.metadata(snapshot, b.band) {
        lines.push(format!(
            "metadata: {}",
            collector::snapshot::metadata_text(m)
        ));
    }
    if let Some(context) = device.compile_context(snapshot, b.band) {
        lines.push(format!("compiling: {context}"));
    }
    if let Some(pool) = device.pool(snapshot, b.band, b.addr) {
        lines.push(format!("in {}", pool.describe()));
    }
    for (step, text) in device.annotations(snapshot, b.band).into_iter().take(6) {
        lines.push(format!(
            "annotated at {}: {}",
            when(snapshot, device, step, start_us),
            collector::snapshot::metadata_text(text)
        ));
    }
    lines
}

/// The view.
pub fn memory_ui(ui: &mut egui::Ui, snapshot: &Snapshot, state: &mut MemoryState) {
    let layout = state.layout(snapshot);
    if layout.devices.is_empty() {
        ui.weak("The snapshot has no trace and no segments: there is no timeline to draw.");
        return;
    }
    state.device = state.device.min(layout.devices.len() - 1);
    // The trace's start, found once (a scan of every entry: too slow for every frame).
    let start_us = *state
        .start_us
        .get_or_insert_with(|| snapshot.time_range_us().map_or(0, |r| r.0));
    ui.horizontal_wrapped(|ui| {
        if layout.devices.len() > 1 {
            egui::ComboBox::from_label("device")
                .selected_text(snapshot.device_name(layout.devices[state.device].device))
                .show_ui(ui, |ui| {
                    for (i, d) in layout.devices.iter().enumerate() {
                        if ui
                            .selectable_value(&mut state.device, i, snapshot.device_name(d.device))
                            .changed()
                        {
                            state.range = None;
                            state.pinned = None;
                            state.moments = crate::diff::Marks::default();
                        }
                    }
                });
        }
        ui.selectable_value(&mut state.segments, false, "Allocations")
            .on_hover_text("One band per allocation, stacked in the order they were made");
        ui.selectable_value(&mut state.segments, true, "Segments")
            .on_hover_text("The allocator's segments over time, and the blocks inside them");
        let d = &layout.devices[state.device];
        if state.segments {
            ui.label(crate::segtimeline::caption(snapshot, &layout, state));
        } else {
            ui.label(format!(
                "Active memory timeline of {}: {} over {}, peak {}, {} alive at the snapshot",
                snapshot.device_name(d.device),
                collector::format::count(d.band_count(), "band"),
                collector::format::count(d.steps() as usize, "trace entry"),
                format_bytes(d.peak as f64),
                format_bytes(d.end_bytes as f64)
            ));
        }
    });
    if let Some(filter) = &state.filter {
        let mut clear = false;
        ui.horizontal_wrapped(|ui| {
            ui.strong(format!(
                "Only the blocks allocated under {} are in colour (a frame clicked in the flame graph; blocks smaller than a pixel are grey)",
                filter.what
            ));
            clear = ui.small_button("Show every block").clicked();
        });
        if clear {
            state.filter = None;
        }
    }
    if let Some((what, step, bytes)) = &state.peak
        && state.moments.a == Some(*step)
    {
        ui.strong(format!(
            "{what} held the most at {}: {} (marked A)",
            when(snapshot, &layout.devices[state.device], *step, start_us),
            format_bytes(*bytes as f64)
        ));
    }
    if state.segments {
        crate::segtimeline::segments_ui(ui, snapshot, state, &layout, start_us);
    } else {
        blocks_ui(ui, snapshot, state, &layout, start_us);
    }
    pinned_panel(ui, snapshot, state, &layout, start_us);
}

/// The height the pinned block's panel takes under a view.
pub(crate) fn pinned_height(state: &MemoryState) -> f32 {
    if state.pinned.is_some() { 170.0 } else { 0.0 }
}

/// The active memory timeline: the blocks' bands.
fn blocks_ui(
    ui: &mut egui::Ui,
    snapshot: &Snapshot,
    state: &mut MemoryState,
    layout: &Arc<MemoryTimeline>,
    start_us: i64,
) {
    let device = &layout.devices[state.device];
    for line in device.lacks.describe() {
        ui.colored_label(ui.visuals().warn_fg_color, line);
    }
    ui.weak(
        "Scroll to zoom, drag to pan, double-click for the whole trace; click a block to pin it, Ctrl+C copies its stack; right-click two moments to compare them.",
    );
    legend(ui, snapshot, layout);
    let pinned_height = pinned_height(state)
        + if state.moments.both().is_some() {
            crate::diff::PANEL_HEIGHT
        } else {
            0.0
        };
    let size = vec2(
        ui.available_width(),
        (ui.available_height() - pinned_height - 28.0).max(160.0),
    );
    let (rect, response) = ui.allocate_exact_size(size, Sense::click_and_drag());
    let plot = Rect::from_min_max(
        pos2(rect.left() + 72.0, rect.top() + 4.0),
        pos2(rect.right() - 8.0, rect.bottom() - 22.0),
    );
    let end = f64::from(device.end());
    let (x0, x1) = crate::memaxes::zoom_pan(ui, &response, plot, end, &mut state.range);
    let per_px = (x1 - x0) / f64::from(plot.width().max(1.0));
    let y_max = (device.peak.max(device.capacity.unwrap_or(0)) as f64 * 1.05).max(1.0);
    // The picture for this view: bands of at least a pixel's bytes on their own.
    let columns = plot.width().max(1.0) as u32;
    let threshold = (y_max / f64::from(plot.height().max(1.0))) as u64;
    let key = (
        state.device,
        x0.floor() as u32,
        x1.ceil() as u32,
        columns,
        threshold,
    );
    if state.cached.as_ref().is_none_or(|c| c.key != key) {
        state.cached = Some(Cached {
            key,
            // The smaller blocks are drawn in their places, not summed by site.
            picture: device.picture(key.1, key.2, columns, threshold, &[]),
            image: None,
        });
    }
    let Some(cached) = state.cached.as_mut() else {
        return;
    };
    let sx =
        move |step: f64| plot.left() + ((step - x0) / (x1 - x0).max(1e-9)) as f32 * plot.width();
    let sy = move |bytes: f64| plot.bottom() - (bytes / y_max) as f32 * plot.height();
    // The picture as one image at the screen's pixels, made when the view, its size or the
    // filter change: a frame then draws one texture, however many bands there are.
    let scale = ui.ctx().pixels_per_point();
    if cached
        .image
        .as_ref()
        .is_none_or(|(r, k, f, _)| *r != plot || *k != scale || *f != state.filter)
    {
        let keep = |band: u32| {
            state
                .filter
                .as_ref()
                .is_none_or(|f| f.keeps(snapshot, device, band))
        };
        let (w, h) = (
            (plot.width() * scale).round().max(1.0) as usize,
            (plot.height() * scale).round().max(1.0) as usize,
        );
        let px = move |step: f64| ((step - x0) / (x1 - x0).max(1e-9)) * w as f64;
        let py = move |bytes: f64| (1.0 - bytes / y_max) * h as f64;
        let image = raster(
            layout,
            &cached.picture,
            (w, h),
            (&px, &py),
            &keep,
            state.filter.is_some(),
        );
        let texture =
            ui.ctx()
                .load_texture("memory timeline", image, egui::TextureOptions::NEAREST);
        cached.image = Some((plot, scale, state.filter.clone(), texture));
    }
    let painter = ui.painter_at(rect);
    painter.rect_filled(plot, 0.0, ui.visuals().extreme_bg_color);
    crate::memaxes::axes(ui, &painter, plot, y_max, &sy);
    if let Some((_, _, _, texture)) = &cached.image {
        ui.painter_at(plot).image(
            texture.id(),
            plot,
            Rect::from_min_max(pos2(0.0, 0.0), pos2(1.0, 1.0)),
            Color32::WHITE,
        );
    }
    crate::memaxes::capacity_and_ends(
        ui,
        &painter,
        plot,
        (&sx, &sy),
        snapshot,
        device,
        (x0, x1),
        start_us,
    );
    // A block outlined where it is drawn (`None`: it has no band of its own in this picture).
    let outline = |band: u32, stroke: Stroke| {
        let drawn = cached.picture.bands.iter().find(|b| b.band == band)?;
        let points: Vec<egui::Pos2> = drawn
            .points
            .iter()
            .map(|&(x, b)| pos2(sx(f64::from(x)), sy(b as f64)))
            .chain(
                drawn
                    .points
                    .iter()
                    .rev()
                    .map(|&(x, b)| pos2(sx(f64::from(x)), sy((b + drawn.size) as f64))),
            )
            .collect();
        Some(ui.painter_at(plot).add(Shape::closed_line(points, stroke)))
    };
    // The pinned block.
    if let Some((d, band)) = state.pinned
        && d == state.device
    {
        outline(band, Stroke::new(2.0, ui.visuals().strong_text_color()));
    }
    // What is under the pointer.
    let hit = response
        .hover_pos()
        .filter(|p| plot.contains(*p))
        .and_then(|p| {
            let step = x0 + f64::from(p.x - plot.left()) * per_px;
            let step = cached.picture.sample_near(step)?;
            let y = ((f64::from(plot.bottom() - p.y) / f64::from(plot.height())) * y_max).max(0.0);
            device.hit(snapshot, &cached.picture, step, y as u64)
        });
    // The block under the pointer, outlined: the tooltip beside it covers part of it.
    if let Some(Hit::Block(b)) = &hit
        && state.pinned != Some((state.device, b.band))
    {
        outline(b.band, Stroke::new(1.5, ui.visuals().text_color()));
    }
    // The moments marked, and a new one.
    if response.secondary_clicked()
        && let Some(p) = response
            .interact_pointer_pos()
            .filter(|p| plot.contains(*p))
    {
        let step = (x0 + f64::from(p.x - plot.left()) * per_px)
            .round()
            .clamp(0.0, end);
        state.moments.mark(step as u32);
    }
    for (label, step) in state.moments.labelled() {
        let x = sx(f64::from(step));
        if (plot.left()..=plot.right()).contains(&x) {
            let stroke = Stroke::new(1.5, crate::style::MOMENT);
            painter.add(Shape::dashed_line(
                &[pos2(x, plot.top()), pos2(x, plot.bottom())],
                stroke,
                5.0,
                3.0,
            ));
            painter.text(
                pos2(x + 3.0, plot.top() + 2.0),
                egui::Align2::LEFT_TOP,
                label,
                egui::FontId::proportional(13.0),
                crate::style::MOMENT,
            );
        }
    }
    if response.clicked() {
        state.pinned = match &hit {
            Some(Hit::Block(b)) => Some((state.device, b.band)),
            _ => None,
        };
    }
    if let Some(hit) = &hit {
        let text = match hit {
            Hit::Block(b) => {
                let mut lines = block_lines(snapshot, layout, device, b, start_us);
                let frames: Vec<String> = snapshot
                    .user_frames(b.stack)
                    .iter()
                    .take(8)
                    .map(|f| snapshot.frame_text(f))
                    .collect();
                lines.push(String::new());
                lines.extend(frames);
                lines.join("\n")
            }
            Hit::Small {
                site,
                bytes,
                blocks,
            } => format!(
                "{} in {} blocks each smaller than a pixel, in their places between the bands{}",
                format_bytes(*bytes as f64),
                blocks,
                site.map_or(String::new(), |s| format!(
                    "; the most of it from {}",
                    layout.site_name(snapshot, s)
                ))
            ),
        };
        response.on_hover_ui_at_pointer(|ui| {
            // Long frames wrap rather than run off the window.
            ui.set_max_width(560.0);
            ui.label(text);
        });
    }
    crate::diff::snapshot_moments_panel(
        ui,
        &|site| layout.site_name(snapshot, site),
        device,
        &mut state.moments,
        &mut state.between,
    );
}

/// How many sites the legend names (the largest by bytes × time alive).
const LEGEND_SITES: usize = 6;

/// The colours: the largest sites (each in the colour the flame graph, the Blocks tab and the
/// segments give it too), and the grey of the blocks smaller than a pixel.
fn legend(ui: &mut egui::Ui, snapshot: &Snapshot, layout: &MemoryTimeline) {
    ui.horizontal_wrapped(|ui| {
        let sites = layout.ranked_sites();
        ui.weak("The sites, the largest (bytes × time alive) first:");
        for (i, &site) in sites.iter().take(LEGEND_SITES).enumerate() {
            swatch(ui, site_color(layout, site));
            ui.label(format!("{}. {}", i + 1, layout.site_name(snapshot, site)));
        }
        if sites.len() > LEGEND_SITES {
            ui.weak(format!("… {} more sites", sites.len() - LEGEND_SITES));
        }
        swatch(ui, color(palette::OTHER_SITES));
        ui.label("blocks smaller than a pixel, in their places");
    });
}

/// The pinned block's details, and Ctrl+C (under either view).
fn pinned_panel(
    ui: &mut egui::Ui,
    snapshot: &Snapshot,
    state: &mut MemoryState,
    layout: &MemoryTimeline,
    start_us: i64,
) {
    if let Some((d, band)) = state.pinned
        && let Some(pinned_device) = layout.devices.get(d)
        && let Some(b) = pinned_device.block(snapshot, band)
    {
        let stack = stack_text(snapshot, b.stack);
        let mut copy = ui.input(|i| i.events.iter().any(|e| matches!(e, egui::Event::Copy)));
        ui.horizontal(|ui| {
            ui.strong("Pinned block");
            copy |= ui.small_button("Copy stack").clicked();
            if ui.small_button("Unpin").clicked() {
                state.pinned = None;
            }
            if copy {
                ui.ctx().copy_text(stack.clone());
                state.copied = Some((web_time::Instant::now(), stack.lines().count()));
            }
            // Said for two seconds, so that a copy is never silent.
            if let Some((at, lines)) = state.copied {
                let shown = std::time::Duration::from_secs(2);
                if at.elapsed() < shown {
                    ui.weak(format!("copied the stack ({lines} lines)"));
                    ui.ctx()
                        .request_repaint_after(shown.saturating_sub(at.elapsed()));
                } else {
                    state.copied = None;
                }
            }
        });
        ui.label(block_lines(snapshot, layout, pinned_device, &b, start_us).join("  ·  "));
        // The user's frames first (Python's, innermost first), the whole stack folded under
        // them: a stack starts with the allocator's C++ frames, the user's line far below.
        let first = pinned_frames(snapshot, b.stack);
        egui::ScrollArea::vertical()
            .id_salt("pinned stack")
            .max_height(110.0)
            .show(ui, |ui| match first {
                Some((shown, all)) => {
                    ui.monospace(shown);
                    egui::CollapsingHeader::new(format!(
                        "the whole stack: {all} frames, the C++ and the allocator's included"
                    ))
                    .id_salt("pinned whole stack")
                    .show(ui, |ui| {
                        ui.monospace(stack);
                    });
                }
                None => {
                    ui.monospace(stack);
                }
            });
    }
}

/// A block left out by the filter: drawn, for the stack's shape, but without colour.
pub(crate) const FILTERED_OUT: Color32 = Color32::from_gray(70);

/// The bands and the smaller blocks as one image of `w × h` pixels, top row first; `px` and `py`
/// place a step and a byte count in it. Each band between two of its samples fills, in every
/// pixel column it spans, the rows from its bottom (moving linearly between the samples) to its
/// top, at least one column and one row; under them, grey from 0 to the bytes alive: the blocks
/// smaller than a pixel between the bands.
fn raster(
    layout: &MemoryTimeline,
    picture: &Picture,
    (w, h): (usize, usize),
    (px, py): (&dyn Fn(f64) -> f64, &dyn Fn(f64) -> f64),
    keep: &dyn Fn(u32) -> bool,
    filtered: bool,
) -> egui::ColorImage {
    let mut pixels = vec![Color32::TRANSPARENT; w * h];
    // Fills the span from (xa, bottom a) to (xb, bottom b), `size` bytes tall.
    let mut fill = |(xa, ba): (f64, f64), (xb, bb): (f64, f64), size: (f64, f64), c: Color32| {
        let first = xa.floor().max(0.0) as usize;
        let last = (xb.ceil() as usize).max(first + 1).min(w);
        for col in first..last {
            let t = if xb > xa {
                ((col as f64 + 0.5 - xa) / (xb - xa)).clamp(0.0, 1.0)
            } else {
                0.0
            };
            let bottom = ba + t * (bb - ba);
            let height = size.0 + t * (size.1 - size.0);
            let top_row = py(bottom + height).floor().max(0.0) as usize;
            let bottom_row = (py(bottom).round() as usize).max(top_row + 1).min(h);
            for row in top_row..bottom_row {
                pixels[row * w + col] = c;
            }
        }
    };
    // Under the bands, every byte alive: what shows between them are the blocks smaller than
    // a pixel, in their places (a filter cannot pick them out).
    let small = if filtered {
        FILTERED_OUT
    } else {
        color(palette::OTHER_SITES)
    };
    for i in 1..picture.samples.len() {
        let top = |i: usize| picture.levels_at(i).last().copied().unwrap_or(0) as f64;
        if top(i - 1) == 0.0 && top(i) == 0.0 {
            continue;
        }
        fill(
            (px(f64::from(picture.samples[i - 1])), 0.0),
            (px(f64::from(picture.samples[i])), 0.0),
            (top(i - 1), top(i)),
            small,
        );
    }
    for band in &picture.bands {
        // Neighbours from one site told apart by a slightly different shade.
        let shade = [1.0, 0.86, 0.93][(band.band % 3) as usize];
        let c = if keep(band.band) {
            darker(site_color(layout, band.site), shade)
        } else {
            FILTERED_OUT
        };
        let size = band.size as f64;
        for w2 in band.points.windows(2) {
            fill(
                (px(f64::from(w2[0].0)), w2[0].1 as f64),
                (px(f64::from(w2[1].0)), w2[1].1 as f64),
                (size, size),
                c,
            );
        }
    }
    egui::ColorImage::new([w, h], pixels)
}
