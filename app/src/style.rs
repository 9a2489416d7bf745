//! The viewer's look in one place: the palette (curves, phases, block states, verdict colours,
//! markers) and the few layout numbers the views share.

use collector::recording::Phase;
use collector::snapshot::BlockState;
use egui::Color32;

use crate::view::TraceKind;

/// PyTorch's allocated bytes; live (active) blocks; the late steps of a step shape.
pub const RED: Color32 = Color32::from_rgb(0xd6, 0x45, 0x45);
/// Reserved bytes; free cached blocks; the early steps of a step shape.
pub const BLUE: Color32 = Color32::from_rgb(0x3b, 0x7d, 0xd8);
/// The peak watermark; blocks waiting to be freed.
pub const AMBER: Color32 = Color32::from_rgb(0xe0, 0x9a, 0x1f);
/// The device's used memory; a verdict with no problem; a followed file's status.
pub const GREEN: Color32 = Color32::from_rgb(0x2f, 0xa3, 0x6b);
/// Host memory.
pub const PURPLE: Color32 = Color32::from_rgb(0x9a, 0x6b, 0xd0);
/// The time pinned by a click on the timeline.
pub const PINNED: Color32 = Color32::from_rgb(0x20, 0xa0, 0xc0);
/// An out-of-memory error marker.
pub const OOM: Color32 = Color32::from_rgb(0xe0, 0x20, 0x20);
/// Lost probe messages.
pub const DROPPED: Color32 = Color32::from_rgb(0xc0, 0x90, 0x00);
/// The OK colour of a verdict.
pub const OK_GREEN: Color32 = GREEN;

/// Rows of the tables (phase table, run info) alternate their background.
pub const STRIPED: bool = true;

/// The colour of a curve.
pub fn trace_color(kind: TraceKind) -> Color32 {
    match kind {
        TraceKind::Allocated => RED,
        TraceKind::Reserved => BLUE,
        TraceKind::Peak => AMBER,
        TraceKind::DeviceUsed => GREEN,
        TraceKind::Host => PURPLE,
    }
}

/// The colour of a category stacked under the curves: parameters, gradients, optimizer state,
/// and the C heap's total line (host categories only).
pub fn category_color(category: usize, alpha: u8) -> Color32 {
    let (r, g, b) = match category {
        0 => (0x70, 0x70, 0x78),
        1 => (0x2a, 0x9d, 0x8f),
        2 => (0xc9, 0xb2, 0x3a),
        _ => (0xa0, 0x50, 0x90),
    };
    Color32::from_rgba_unmultiplied(r, g, b, alpha)
}

/// The colour of a phase, opaque (`alpha` 255) or for a band behind curves.
pub fn phase_color(phase: &Phase, alpha: u8) -> Color32 {
    let (r, g, b) = match phase {
        Phase::Forward => (0x4c, 0x9b, 0xe8),
        Phase::Backward => (0xf0, 0x8c, 0x3c),
        Phase::Optimizer => (0x4c, 0xb8, 0x72),
        Phase::Eval => (0xb0, 0x6c, 0xd8),
        Phase::Custom(name) => {
            let hash = name.bytes().fold(2166136261u32, |h, b| {
                (h ^ u32::from(b)).wrapping_mul(16777619)
            });
            let [a, b, c, _] = hash.to_le_bytes();
            (0x60 + a / 3, 0x60 + b / 3, 0x60 + c / 3)
        }
    };
    Color32::from_rgba_unmultiplied(r, g, b, alpha)
}

/// The colour of a block in the segments' map.
pub fn block_color(state: BlockState) -> Color32 {
    match state {
        BlockState::ActiveAllocated => RED,
        BlockState::ActivePendingFree => AMBER,
        BlockState::Inactive => BLUE,
        BlockState::Other => Color32::GRAY,
    }
}
