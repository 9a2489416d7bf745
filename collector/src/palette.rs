//! The one palette: every curve, phase and event colour that the viewer and the exported pictures
//! use, as plain RGB so that both (egui and SVG) take them from here.
//!
//! Curves take the Okabe–Ito colours (told apart with every common colour-vision deficiency),
//! phases take lighter tints of hues no curve uses, and events are neutral (black on light,
//! white on dark) so that no marker shares a curve's or a phase's hue.

/// A colour, 8 bits per channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rgb(pub u8, pub u8, pub u8);

impl Rgb {
    /// `#rrggbb`, for SVG and HTML.
    pub fn hex(self) -> String {
        format!("#{:02x}{:02x}{:02x}", self.0, self.1, self.2)
    }
}

/// PyTorch's allocated bytes (Okabe–Ito vermillion).
pub const ALLOCATED: Rgb = Rgb(0xd5, 0x5e, 0x00);
/// Bytes reserved by PyTorch's caching allocator (Okabe–Ito blue).
pub const RESERVED: Rgb = Rgb(0x00, 0x72, 0xb2);
/// The peak watermark (Okabe–Ito orange).
pub const PEAK: Rgb = Rgb(0xe6, 0x9f, 0x00);
/// The device's used memory (Okabe–Ito bluish green).
pub const DEVICE_USED: Rgb = Rgb(0x00, 0x9e, 0x73);
/// Host memory (Okabe–Ito reddish purple).
pub const HOST: Rgb = Rgb(0xcc, 0x79, 0xa7);
/// The step baseline and its trend: what the verdict judged (neutral dark).
pub const BASELINE: Rgb = Rgb(0x22, 0x22, 0x22);
/// Events: out-of-memory errors, the exit (neutral: no hue).
pub const EVENT: Rgb = Rgb(0x40, 0x40, 0x40);

/// The built-in phases, for bands behind the curves: forward, backward, optimizer, eval.
pub const FORWARD: Rgb = Rgb(0x8f, 0xa8, 0xff);
/// The backward pass.
pub const BACKWARD: Rgb = Rgb(0xff, 0xb3, 0x8a);
/// The optimizer step.
pub const OPTIMIZER: Rgb = Rgb(0x9c, 0xd8, 0x6f);
/// Evaluation.
pub const EVAL: Rgb = Rgb(0xe0, 0x9c, 0xf0);

/// The colour of a phase by name (custom names get a stable grey-ish tint from their hash).
pub fn phase(name: &str) -> Rgb {
    match name {
        "forward" => FORWARD,
        "backward" => BACKWARD,
        "optimizer" => OPTIMIZER,
        "eval" => EVAL,
        _ => {
            let hash = name.bytes().fold(2166136261u32, |h, b| {
                (h ^ u32::from(b)).wrapping_mul(16777619)
            });
            let [a, b, c, _] = hash.to_le_bytes();
            Rgb(0x90 + a / 5, 0x90 + b / 5, 0x90 + c / 5)
        }
    }
}
