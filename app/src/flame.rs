//! A snapshot's flame graph (`collector::snapshot::flame`), drawn as an icicle: the root on top,
//! each frame under its caller, as wide as the bytes its stacks hold. The live bytes at the end
//! of the trace, at its peak, or at moment B of the memory timeline, or over the whole trace
//! bytes × the steps they lived; library frames folded under the user's line unless unfolded.
//! Hover names a frame and its bytes; a click zooms into it (and the memory timeline shows only
//! its blocks in colour), a click on the frame zoomed into zooms out. The block pinned on the
//! memory timeline has its stack's frames outlined.

use collector::format::format_bytes;
use collector::snapshot::flame::{Flame, Label, Weigh};
use collector::snapshot::timeline::MemoryTimeline;
use collector::snapshot::{SiteKey, Snapshot};
use egui::{Color32, Rect, Sense, Stroke, pos2, vec2};

use crate::memtimeline::{Filter, MemoryState};

/// When the flame graph weighs the memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum When {
    /// The bytes alive at the end of the trace (the snapshot).
    #[default]
    End,
    /// The bytes alive at the trace's peak.
    Peak,
    /// The bytes alive at moment B marked on the memory timeline (or A when only A is).
    Marked,
    /// Each block's bytes × the steps it was alive.
    Lifetime,
}

/// What the view shows: when, folded or not, the frame zoomed into, and the graph made for them.
#[derive(Default)]
pub struct FlameState {
    /// When the memory is weighed.
    pub when: When,
    /// Every frame shown (else library frames are folded under the user's line).
    pub unfold: bool,
    /// The node zoomed into (0: the root).
    pub zoom: u32,
    cached: Option<((usize, Weigh, bool), Flame)>,
}

const ROW: f32 = 20.0;

/// A frame's colour: a site's frame (and the stacks without one) in that site's colour on the
/// memory timeline, the frames that call them a neutral grey, the root darker.
pub fn color(flame: &Flame, layout: &MemoryTimeline, node: u32) -> Color32 {
    let site = match flame.nodes.get(node as usize).map(|n| n.label) {
        Some(Label::Frame(frame)) => layout.site_of(SiteKey::Frame(frame)),
        Some(Label::CppOnly) => layout.site_of(SiteKey::CppOnly),
        Some(Label::BeforeHistory) => layout.site_of(SiteKey::NoFrames),
        Some(Label::Root) | None => return Color32::from_gray(90),
    };
    site.map_or(CALLER, |site| crate::memtimeline::site_color(layout, site))
}

/// A frame that is no site's: it calls them.
const CALLER: Color32 = Color32::from_gray(128);

/// A frame's name on its bar: the file's name only (the tooltip has the whole path).
fn short_name(flame: &Flame, snapshot: &Snapshot, node: u32) -> String {
    match flame.nodes.get(node as usize).map(|n| n.label) {
        Some(Label::Frame(frame)) => snapshot.frame_text_short(&frame),
        _ => flame.name(snapshot, node),
    }
}

/// The flame graph tab of a snapshot, for the memory timeline's device (`memory`), at the step
/// marked on it when asked; a frame clicked filters the memory timeline to its blocks.
pub fn flame_ui(
    ui: &mut egui::Ui,
    snapshot: &Snapshot,
    memory: &mut MemoryState,
    state: &mut FlameState,
) {
    let layout = memory.layout(snapshot);
    let device = memory.device;
    let moment = memory.moments.b.or(memory.moments.a);
    let Some(timeline) = layout.devices.get(device) else {
        ui.weak("The snapshot has no trace and no segments: there is no flame graph to draw.");
        return;
    };
    ui.horizontal_wrapped(|ui| {
        ui.label(snapshot.device_name(timeline.device));
        ui.selectable_value(&mut state.when, When::End, "at the snapshot");
        ui.selectable_value(&mut state.when, When::Peak, "at the peak");
        if moment.is_some() {
            ui.selectable_value(&mut state.when, When::Marked, "at the moment marked");
        }
        ui.selectable_value(&mut state.when, When::Lifetime, "bytes × lifetime");
        ui.separator();
        ui.checkbox(&mut state.unfold, "every frame (unfold library frames)");
        if state.zoom != 0 && ui.button("Whole graph").clicked() {
            state.zoom = 0;
            memory.filter = None;
        }
        if let Some(filter) = memory.filter.clone()
            && ui
                .button("Its peak")
                .on_hover_text(
                    "The moment the blocks allocated under this frame held the most, on the memory timeline",
                )
                .clicked()
        {
            memory.go_to_peak(
                snapshot,
                device,
                format!("The blocks allocated under {}", filter.what),
                |p| filter.stacks.binary_search(&p.stack).is_ok(),
            );
        }
    });
    let weigh = match (state.when, moment) {
        (When::End, _) | (When::Marked, None) => Weigh::LiveAt(timeline.end()),
        (When::Peak, _) => Weigh::LiveAt(timeline.peak_step),
        (When::Marked, Some(step)) => Weigh::LiveAt(step),
        (When::Lifetime, _) => Weigh::BytesTimesLifetime,
    };
    let key = (device, weigh, state.unfold);
    if state.cached.as_ref().is_none_or(|(k, _)| *k != key) {
        // Another graph: its frames are other nodes.
        state.cached = Some((key, Flame::new(snapshot, timeline, weigh, state.unfold)));
        state.zoom = 0;
        memory.filter = None;
    }
    let Some((_, flame)) = &state.cached else {
        return;
    };
    let amount = |w: f64| match weigh {
        Weigh::LiveAt(_) => format_bytes(w),
        Weigh::BytesTimesLifetime => format!("{} × entries", format_bytes(w)),
    };
    let total = flame.total();
    ui.label(match weigh {
        Weigh::LiveAt(step) => format!(
            "{} alive at trace entry {step} in {} blocks, by the stack that allocated them (hover for a frame, click to zoom in)",
            format_bytes(total),
            flame.nodes[0].blocks
        ),
        Weigh::BytesTimesLifetime => format!(
            "{} over the trace in {} blocks: each block's bytes × the trace entries it lived through",
            amount(total),
            flame.nodes[0].blocks
        ),
    });
    if total <= 0.0 {
        ui.weak("Nothing is alive then.");
        return;
    }
    let zoom = if (state.zoom as usize) < flame.nodes.len() {
        state.zoom
    } else {
        0
    };
    // The frames above the zoomed one, full width; then its subtree.
    let above = flame.path_to(zoom);
    let depth_max = flame.nodes.iter().map(|n| n.depth).max().unwrap_or(0);
    let rows = above.len() as f32 + (depth_max - flame.nodes[zoom as usize].depth + 1) as f32;
    let width = ui.available_width();
    egui::ScrollArea::vertical().show(ui, |ui| {
        let (rect, response) =
            ui.allocate_exact_size(vec2(width, rows.max(1.0) * ROW), Sense::click());
        let painter = ui.painter_at(rect);
        let mut hovered: Option<u32> = None;
        let pointer = response.hover_pos();
        // The block pinned on the memory timeline: the frames of its stack are outlined.
        let pinned: Vec<u32> = memory
            .pinned
            .filter(|&(d, _)| d == device)
            .and_then(|(_, band)| timeline.block(snapshot, band))
            .and_then(|b| {
                let i = flame.leaves.binary_search_by_key(&b.stack, |l| l.0).ok()?;
                Some(flame.path_to(flame.leaves[i].1))
            })
            .unwrap_or_default();
        let mut draw = |node: u32, x0: f32, x1: f32, row: f32, painter: &egui::Painter| {
            let r = Rect::from_min_max(
                pos2(x0, rect.top() + row * ROW),
                pos2(x1, rect.top() + (row + 1.0) * ROW - 1.0),
            );
            painter.rect_filled(r, 2.0, color(flame, &layout, node));
            if x1 - x0 > 40.0 {
                let text = format!(
                    "{}  {}",
                    short_name(flame, snapshot, node),
                    amount(flame.nodes[node as usize].weight)
                );
                let clipped = ui.painter().with_clip_rect(r.shrink(2.0));
                clipped.text(
                    pos2(r.left() + 4.0, r.center().y),
                    egui::Align2::LEFT_CENTER,
                    text,
                    egui::FontId::proportional(12.0),
                    Color32::BLACK,
                );
            }
            if pinned.contains(&node) {
                painter.rect_stroke(
                    r,
                    2.0,
                    Stroke::new(2.0, Color32::BLACK),
                    egui::StrokeKind::Inside,
                );
            }
            if pointer.is_some_and(|p| r.contains(p)) {
                hovered = Some(node);
                painter.rect_stroke(
                    r,
                    2.0,
                    Stroke::new(1.5, Color32::WHITE),
                    egui::StrokeKind::Inside,
                );
            }
        };
        // The root and the frames above the zoomed one.
        let mut row = 0.0;
        draw(0, rect.left(), rect.right(), row, &painter);
        for &node in above.iter().filter(|&&n| n != zoom) {
            row += 1.0;
            draw(node, rect.left(), rect.right(), row, &painter);
        }
        // The zoomed frame's subtree, children heaviest first from the left.
        if zoom != 0 {
            row += 1.0;
            draw(zoom, rect.left(), rect.right(), row, &painter);
        }
        let mut stack = vec![(zoom, rect.left(), rect.right(), row)];
        while let Some((node, x0, x1, row)) = stack.pop() {
            let n = &flame.nodes[node as usize];
            let mut x = x0;
            for &child in &n.children {
                let w = flame.nodes[child as usize].weight;
                let dx = (x1 - x0) * (w / n.weight.max(f64::MIN_POSITIVE)) as f32;
                if dx >= 0.5 {
                    draw(child, x, x + dx, row + 1.0, &painter);
                    stack.push((child, x, x + dx, row + 1.0));
                }
                x += dx;
            }
        }
        if let Some(node) = hovered {
            let n = &flame.nodes[node as usize];
            let share = 100.0 * n.weight / total;
            let name = if node == 0 {
                "all".to_owned()
            } else {
                flame.name(snapshot, node)
            };
            let text = format!(
                "{name}\n{} ({share:.1}%) in {} blocks",
                amount(n.weight),
                n.blocks
            );
            if response.clicked() {
                state.zoom = if node == zoom { n.parent } else { node };
                // The memory timeline shows the zoomed frame's blocks in colour.
                memory.filter = (state.zoom != 0).then(|| Filter {
                    what: short_name(flame, snapshot, state.zoom),
                    stacks: std::sync::Arc::new(flame.stacks_under(state.zoom)),
                });
            }
            response.on_hover_text_at_pointer(text);
        }
    });
}
