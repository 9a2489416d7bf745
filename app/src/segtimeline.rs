//! A snapshot's segment timeline: the caching allocator's segments over the trace's steps
//! (stacked as they were made, laid out by `collector::snapshot::segments_timeline`) and the
//! blocks inside them at their offsets — allocated (the site's colour), waiting to be freed
//! (dark), free (pale) — so a person sees how the cache grew and where it fragmented. The
//! picture is a grid of one cell a pixel, drawn as one texture. It shares the active memory
//! timeline's device, zoom and pinned block: a block pinned in one view is outlined in the other.

use std::sync::Arc;

use collector::format::format_bytes;
use collector::palette;
use collector::snapshot::Snapshot;
use collector::snapshot::segments_timeline::{Fill, SegmentHit, SegmentPicture, SegmentTimeline};
use collector::snapshot::timeline::{DeviceTimeline, MemoryTimeline, NEVER};
use egui::{Color32, Rect, Sense, Stroke, pos2, vec2};

use crate::memtimeline::{MemoryState, color, site_color, when};

/// The segments' layout (made the first time they are shown) and the picture last drawn.
#[derive(Default)]
pub struct SegmentView {
    layout: Option<Arc<SegmentTimeline>>,
    cached: Option<Cached>,
}

/// A picture for one view (device, steps, columns, rows), its texture, and the pinned block's
/// track in it.
struct Cached {
    key: (usize, u32, u32, u32, u32),
    filter: Option<crate::memtimeline::Filter>,
    picture: SegmentPicture,
    texture: Option<egui::TextureHandle>,
    track: Option<(u32, Vec<(u32, u64)>)>,
}

impl SegmentView {
    fn layout(&mut self, snapshot: &Snapshot, blocks: &MemoryTimeline) -> Arc<SegmentTimeline> {
        self.layout
            .get_or_insert_with(|| Arc::new(SegmentTimeline::new(snapshot, blocks)))
            .clone()
    }
}

/// The line over the view: what the device's segments did.
pub fn caption(snapshot: &Snapshot, blocks: &MemoryTimeline, state: &mut MemoryState) -> String {
    let layout = state.segment_view.layout(snapshot, blocks);
    let Some(d) = layout.devices.get(state.device) else {
        return String::new();
    };
    let end = blocks
        .devices
        .get(state.device)
        .map_or(0, DeviceTimeline::steps);
    let at_end: u64 = d
        .segments()
        .iter()
        .filter(|s| s.free == NEVER)
        .map(|s| s.size)
        .sum();
    let mapped = d.segments().iter().any(|s| s.mapped);
    format!(
        "Segments of {}: {} over {}, at most {} reserved, {} at the snapshot",
        snapshot.device_name(d.device),
        collector::format::count(
            d.segments().len(),
            if mapped { "mapped range" } else { "segment" }
        ),
        collector::format::count(end as usize, "trace entry"),
        format_bytes(d.peak as f64),
        format_bytes(at_end as f64)
    )
}

/// The colour of a cell.
fn fill_color(blocks: &MemoryTimeline, fill: Fill) -> Color32 {
    match fill {
        Fill::Empty => Color32::TRANSPARENT,
        Fill::Free => color(palette::SEGMENT_FREE),
        Fill::Pending => color(palette::SEGMENT_PENDING),
        Fill::Site(site) => site_color(blocks, site),
        Fill::Filtered => crate::memtimeline::FILTERED_OUT,
    }
}

/// The picture as an image, top row first.
fn image(blocks: &MemoryTimeline, picture: &SegmentPicture) -> egui::ColorImage {
    let (w, h) = (picture.samples.len().max(1), picture.rows as usize);
    let mut pixels = vec![Color32::TRANSPARENT; w * h];
    for x in 0..picture.samples.len() {
        for (row, &fill) in picture.column(x).iter().enumerate() {
            pixels[(h - 1 - row) * w + x] = fill_color(blocks, fill);
        }
    }
    for &(x, row) in &picture.edges {
        if let Some(p) = pixels.get_mut((h - 1 - row as usize) * w + x as usize) {
            *p = color(palette::SEGMENT_EDGE);
        }
    }
    egui::ColorImage::new([w, h], pixels)
}

/// The view.
pub fn segments_ui(
    ui: &mut egui::Ui,
    snapshot: &Snapshot,
    state: &mut MemoryState,
    blocks: &Arc<MemoryTimeline>,
    start_us: i64,
) {
    let layout = state.segment_view.layout(snapshot, blocks);
    let (Some(device), Some(timeline)) = (
        layout.devices.get(state.device),
        blocks.devices.get(state.device),
    ) else {
        return;
    };
    for line in device.lacks.describe() {
        ui.colored_label(ui.visuals().warn_fg_color, line);
    }
    ui.horizontal_wrapped(|ui| {
        for (what, fill) in [
            ("allocated (by site)", color(palette::site(0))),
            ("waiting to be freed", color(palette::SEGMENT_PENDING)),
            ("free in a segment", color(palette::SEGMENT_FREE)),
        ] {
            crate::memtimeline::swatch(ui, fill);
            ui.label(what);
        }
        ui.weak(
            "· scroll to zoom, drag to pan, double-click for the whole trace; click a block to pin it (it stays pinned in Allocations).",
        );
    });
    let size = vec2(
        ui.available_width(),
        (ui.available_height() - crate::memtimeline::pinned_height(state) - 28.0).max(160.0),
    );
    let (rect, response) = ui.allocate_exact_size(size, Sense::click_and_drag());
    let plot = Rect::from_min_max(
        pos2(rect.left() + 72.0, rect.top() + 4.0),
        pos2(rect.right() - 8.0, rect.bottom() - 22.0),
    );
    let end = f64::from(timeline.end());
    let (x0, x1) = crate::memaxes::zoom_pan(ui, &response, plot, end, &mut state.range);
    let per_px = (x1 - x0) / f64::from(plot.width().max(1.0));
    let y_max = (device.peak.max(timeline.capacity.unwrap_or(0)) as f64 * 1.05).max(1.0);
    let key = (
        state.device,
        x0.floor() as u32,
        x1.ceil() as u32,
        plot.width().max(1.0) as u32,
        plot.height().max(1.0) as u32,
    );
    let view = &mut state.segment_view;
    if view
        .cached
        .as_ref()
        .is_none_or(|c| c.key != key || c.filter != state.filter)
    {
        // A frame clicked in the flame graph: only its blocks in colour.
        let keep = |band: u32| {
            state
                .filter
                .as_ref()
                .is_none_or(|f| f.keeps(snapshot, timeline, band))
        };
        let filter: Option<&dyn Fn(u32) -> bool> = state.filter.as_ref().map(|_| &keep as _);
        view.cached = Some(Cached {
            key,
            filter: state.filter.clone(),
            picture: device.picture(
                snapshot,
                timeline,
                (key.1, key.2),
                key.3,
                key.4,
                y_max as u64,
                filter,
            ),
            texture: None,
            track: None,
        });
    }
    let Some(cached) = view.cached.as_mut() else {
        return;
    };
    let texture = cached.texture.get_or_insert_with(|| {
        ui.ctx().load_texture(
            "segment timeline",
            image(blocks, &cached.picture),
            egui::TextureOptions::NEAREST,
        )
    });
    let sx =
        move |step: f64| plot.left() + ((step - x0) / (x1 - x0).max(1e-9)) as f32 * plot.width();
    let sy = move |bytes: f64| plot.bottom() - (bytes / y_max) as f32 * plot.height();
    let painter = ui.painter_at(rect);
    painter.rect_filled(plot, 0.0, ui.visuals().extreme_bg_color);
    crate::memaxes::axes(ui, &painter, plot, y_max, &sy);
    let first = cached.picture.samples.first().copied().unwrap_or(0);
    let image_rect = Rect::from_min_max(
        pos2(sx(f64::from(first)), plot.top()),
        pos2(sx(f64::from(key.2)), plot.bottom()),
    );
    ui.painter_at(plot).image(
        texture.id(),
        image_rect,
        Rect::from_min_max(pos2(0.0, 0.0), pos2(1.0, 1.0)),
        Color32::WHITE,
    );
    crate::memaxes::capacity_and_ends(
        ui,
        &painter,
        plot,
        (&sx, &sy),
        snapshot,
        timeline,
        (x0, x1),
        start_us,
    );
    // The pinned block, outlined where it sits at each column.
    if let Some((d, band)) = state.pinned
        && d == state.device
    {
        if cached.track.as_ref().is_none_or(|(b, _)| *b != band) {
            let track = device.block_track(snapshot, timeline, band, &cached.picture.samples);
            cached.track = Some((band, track));
        }
        if let (Some((_, track)), Some(b)) = (&cached.track, timeline.band_place(snapshot, band)) {
            let stroke = Stroke::new(2.0, ui.visuals().strong_text_color());
            let step_width = (x1 - x0) / f64::from(key.3.max(1)).max(1.0);
            for &(step, bottom) in track {
                let (l, r) = (
                    sx(f64::from(step)),
                    sx(f64::from(step) + step_width.max(1.0)),
                );
                let (lo, hi) = (sy(bottom as f64), sy((bottom + b.size) as f64));
                ui.painter_at(plot).rect_stroke(
                    Rect::from_min_max(pos2(l, hi), pos2(r.max(l + 1.0), lo)),
                    0.0,
                    stroke,
                    egui::StrokeKind::Middle,
                );
            }
        }
    }
    // What is under the pointer.
    let hit = response
        .hover_pos()
        .filter(|p| plot.contains(*p))
        .and_then(|p| {
            let step = (x0 + f64::from(p.x - plot.left()) * per_px)
                .floor()
                .max(0.0) as u32;
            let y = ((f64::from(plot.bottom() - p.y) / f64::from(plot.height())) * y_max).max(0.0);
            Some(step).zip(device.hit(snapshot, timeline, step, y as u64))
        });
    if response.clicked() {
        state.pinned = hit
            .as_ref()
            .and_then(|(_, h)| h.block)
            .map(|b| (state.device, b.band));
    }
    if let Some((step, hit)) = &hit {
        let text = hit_text(snapshot, blocks, timeline, device, *step, hit, start_us);
        response.on_hover_ui_at_pointer(|ui| {
            ui.label(text);
        });
    }
}

/// What the tooltip says of a segment and the block under the pointer.
fn hit_text(
    snapshot: &Snapshot,
    blocks: &MemoryTimeline,
    timeline: &DeviceTimeline,
    device: &collector::snapshot::segments_timeline::DeviceSegments,
    step: u32,
    hit: &SegmentHit,
    start_us: i64,
) -> String {
    let s = &hit.segment.band;
    let made = if s.alloc == 0 {
        "before the trace began".to_owned()
    } else {
        when(snapshot, timeline, s.alloc, start_us)
    };
    let gone = if s.free == NEVER {
        "alive at the snapshot".to_owned()
    } else {
        when(snapshot, timeline, s.free, start_us)
    };
    let mut lines = vec![
        format!(
            "{} {} at 0x{:x}, stream 0x{:x}",
            if s.mapped { "Mapped range" } else { "Segment" },
            format_bytes(s.size as f64),
            s.addr,
            s.stream
        ),
        format!("made: {made}; released: {gone}"),
        format!(
            "at {}: {} in {}, {} free",
            when(snapshot, timeline, step, start_us),
            format_bytes(hit.allocated as f64),
            collector::format::count(hit.blocks, "block"),
            format_bytes(s.size.saturating_sub(hit.allocated) as f64)
        ),
    ];
    if let Some(placed) = hit.block
        && let Some(b) = timeline.block(snapshot, placed.band)
    {
        lines.push(String::new());
        lines.extend(crate::memtimeline::block_lines(
            snapshot, blocks, timeline, &b, start_us,
        ));
        if placed.pending {
            lines.push(format!(
                "waiting to be freed since {}",
                when(
                    snapshot,
                    timeline,
                    device.requested_free(placed.band),
                    start_us
                )
            ));
        }
        lines.push(String::new());
        lines.extend(
            snapshot
                .user_frames(b.stack)
                .iter()
                .take(8)
                .map(|f| snapshot.frame_text(f)),
        );
    }
    lines.join("\n")
}
