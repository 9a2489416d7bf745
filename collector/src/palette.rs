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
/// The peak watermark (Okabe–Ito orange, lighter: on the dark theme the thin peak line beside
/// allocated's vermillion read as one orange).
pub const PEAK: Rgb = Rgb(0xfc, 0xb0, 0x00);
/// The device's used memory (Okabe–Ito bluish green).
pub const DEVICE_USED: Rgb = Rgb(0x00, 0x9e, 0x73);
/// Host memory (Okabe–Ito reddish purple).
pub const HOST: Rgb = Rgb(0xcc, 0x79, 0xa7);
/// A process' device memory outside PyTorch's cache (magenta: apart from every other colour,
/// and as light as the curves, for both themes).
pub const OUTSIDE_PYTORCH: Rgb = Rgb(0xdd, 0x22, 0xdd);
/// The step baseline and its trend: what the verdict judged (neutral dark).
pub const BASELINE: Rgb = Rgb(0x22, 0x22, 0x22);
/// Events in pictures on white: out-of-memory errors, the exit (neutral: no hue).
pub const EVENT: Rgb = Rgb(0x40, 0x40, 0x40);
/// Events on screen, readable on the dark and the light theme (neutral: no hue).
pub const EVENT_ON_SCREEN: Rgb = Rgb(0xa8, 0xa8, 0xa8);

/// Under the phase bands, the steps whose phases the probe did not observe: a neutral grey (no
/// phase's hue), drawn faint.
pub const UNOBSERVED: Rgb = Rgb(0x80, 0x80, 0x80);
/// A snapshot's leak suspects, marked where their live blocks were allocated (deep magenta;
/// one suspect from the next told apart by the marker's shape).
pub const SUSPECT: Rgb = Rgb(0x80, 0x00, 0xb0);

/// The built-in phases, for bands behind the curves, in hues no curve uses: forward (sky).
pub const FORWARD: Rgb = Rgb(0x8c, 0xd3, 0xf2);
/// The backward pass (straw).
pub const BACKWARD: Rgb = Rgb(0xe8, 0xd8, 0x6a);
/// The optimizer step (leaf).
pub const OPTIMIZER: Rgb = Rgb(0x9f, 0xd6, 0x7a);
/// Evaluation (lavender).
pub const EVAL: Rgb = Rgb(0xb8, 0xa6, 0xf0);

/// The categories stacked under the curves: parameters (slate).
pub const PARAMETERS: Rgb = Rgb(0x70, 0x70, 0x78);
/// Gradients (umber).
pub const GRADIENTS: Rgb = Rgb(0x7a, 0x50, 0x30);
/// Optimizer state (ochre).
pub const OPTIMIZER_STATE: Rgb = Rgb(0xa0, 0x80, 0x40);
/// The C heap's total, over the host categories (salmon, dashed).
pub const HEAP: Rgb = Rgb(0xf0, 0x90, 0x90);

/// The categories, bottom of the stack first, then the heap's line.
pub const CATEGORIES: [(&str, Rgb); 4] = [
    ("parameters", PARAMETERS),
    ("gradients", GRADIENTS),
    ("optimizer state", OPTIMIZER_STATE),
    ("C heap", HEAP),
];

/// The curves, with their names (for tests and legends).
pub const CURVES: [(&str, Rgb); 6] = [
    ("allocated", ALLOCATED),
    ("reserved", RESERVED),
    ("peak", PEAK),
    ("device used", DEVICE_USED),
    ("outside PyTorch", OUTSIDE_PYTORCH),
    ("host memory", HOST),
];

/// The built-in phases, with their names.
pub const PHASES: [(&str, Rgb); 4] = [
    ("forward", FORWARD),
    ("backward", BACKWARD),
    ("optimizer", OPTIMIZER),
    ("eval", EVAL),
];

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

/// The colour of the `rank`-th allocation site (sites ranked by bytes, largest first) in the
/// active memory timeline: twelve tints of distinct hues for the largest sites, then the same
/// hues again, a step darker, so neighbouring bands stay apart; never a neutral (the summary of
/// the sites beyond them is [`OTHER_SITES`]).
pub fn site(rank: u32) -> Rgb {
    const HUES: [Rgb; 12] = [
        Rgb(0x4e, 0x79, 0xa7),
        Rgb(0xf2, 0x8e, 0x2b),
        Rgb(0x59, 0xa1, 0x4f),
        Rgb(0xe1, 0x57, 0x59),
        Rgb(0x76, 0xb7, 0xb2),
        Rgb(0xed, 0xc9, 0x48),
        Rgb(0xb0, 0x7a, 0xa1),
        Rgb(0xff, 0x9d, 0xa7),
        Rgb(0x9c, 0x75, 0x5f),
        Rgb(0x8c, 0xd1, 0x7d),
        Rgb(0x49, 0x98, 0xd6),
        Rgb(0xd4, 0xa6, 0xc8),
    ];
    let Rgb(r, g, b) = HUES[rank as usize % HUES.len()];
    // Each further round of the hues a fifth darker, wrapping after four.
    let shade = (rank as usize / HUES.len()) % 4;
    let dim = |c: u8| (u32::from(c) * (10 - 2 * shade as u32) / 10) as u8;
    Rgb(dim(r), dim(g), dim(b))
}

/// The colour of the `nth` curve of one kind on one plot (`base` its kind's colour): several
/// ranks' host memory, or several devices' allocated memory, each a shade of its own — the
/// first the kind's colour, then alternately darker and lighter, each step further from it, so
/// the legend tells them apart and the kind is still read from the hue.
pub fn shade(base: Rgb, nth: usize) -> Rgb {
    if nth == 0 {
        return base;
    }
    const DARKER: [f64; 3] = [0.3, 0.6, 0.8];
    const LIGHTER: [f64; 3] = [0.35, 0.65, 0.85];
    let step = (nth.div_ceil(2) - 1).min(2);
    let (towards, amount) = if nth % 2 == 1 {
        (0.0, DARKER[step])
    } else {
        (255.0, LIGHTER[step])
    };
    let mix = |c: u8| (f64::from(c) + (towards - f64::from(c)) * amount).round() as u8;
    let Rgb(r, g, b) = base;
    Rgb(mix(r), mix(g), mix(b))
}

/// The band of the small blocks of every site beyond the ranked ones (neutral grey).
pub const OTHER_SITES: Rgb = Rgb(0xb4, 0xb4, 0xb4);

/// The segment timeline: a segment's free (cached) bytes, a pale blue-grey.
pub const SEGMENT_FREE: Rgb = Rgb(0xd8, 0xe0, 0xe8);
/// The segment timeline: blocks freed by their tensor, waiting for other streams (black on the
/// sites' tints, so never mistaken for one).
pub const SEGMENT_PENDING: Rgb = Rgb(0x20, 0x20, 0x20);
/// The segment timeline: the line where a segment begins.
pub const SEGMENT_EDGE: Rgb = Rgb(0x58, 0x60, 0x68);

#[cfg(test)]
mod tests {
    //! The palette's colours must stay apart: pairwise ΔE (CIE76, in CIELAB) with normal vision
    //! and with deuteranopia (Machado, Oliveira & Fernandes 2009, severity 1), and no phase may
    //! share a curve's hue.
    use super::*;

    fn linear(c: u8) -> f64 {
        let c = f64::from(c) / 255.0;
        if c <= 0.04045 {
            c / 12.92
        } else {
            ((c + 0.055) / 1.055).powf(2.4)
        }
    }

    fn lab(rgb: [f64; 3]) -> [f64; 3] {
        let [r, g, b] = rgb;
        let x = 0.4124 * r + 0.3576 * g + 0.1805 * b;
        let y = 0.2126 * r + 0.7152 * g + 0.0722 * b;
        let z = 0.0193 * r + 0.1192 * g + 0.9505 * b;
        let f = |t: f64| {
            if t > 0.008856 {
                t.cbrt()
            } else {
                7.787 * t + 16.0 / 116.0
            }
        };
        let (fx, fy, fz) = (f(x / 0.95047), f(y), f(z / 1.08883));
        [116.0 * fy - 16.0, 500.0 * (fx - fy), 200.0 * (fy - fz)]
    }

    fn normal(c: Rgb) -> [f64; 3] {
        lab([linear(c.0), linear(c.1), linear(c.2)])
    }

    fn deuteranopia(c: Rgb) -> [f64; 3] {
        let [r, g, b] = [linear(c.0), linear(c.1), linear(c.2)];
        let m = [
            [0.367322, 0.860646, -0.227968],
            [0.280085, 0.672501, 0.047413],
            [-0.011820, 0.042940, 0.968881],
        ];
        let apply = |row: [f64; 3]| (row[0] * r + row[1] * g + row[2] * b).clamp(0.0, 1.0);
        lab([apply(m[0]), apply(m[1]), apply(m[2])])
    }

    fn delta_e(a: [f64; 3], b: [f64; 3]) -> f64 {
        ((a[0] - b[0]).powi(2) + (a[1] - b[1]).powi(2) + (a[2] - b[2]).powi(2)).sqrt()
    }

    fn hue(c: Rgb) -> f64 {
        let [_, a, b] = normal(c);
        b.atan2(a).to_degrees().rem_euclid(360.0)
    }

    fn all() -> Vec<(&'static str, Rgb)> {
        let mut all: Vec<(&str, Rgb)> = CURVES.to_vec();
        all.extend(PHASES);
        all.extend(CATEGORIES);
        all.push(("event", EVENT));
        all.push(("baseline", BASELINE));
        all.push(("suspect", SUSPECT));
        all
    }

    #[test]
    fn every_pair_is_apart_with_normal_vision_and_with_deuteranopia() {
        let all = all();
        for (i, (a, ca)) in all.iter().enumerate() {
            for (b, cb) in &all[i + 1..] {
                // The step baseline and the events are both neutral and never drawn alike
                // (dots and a line vs. vertical markers): only their lightness must differ.
                let (floor_normal, floor_deutan) = if (*a, *b) == ("event", "baseline") {
                    (6.0, 6.0)
                } else {
                    (20.0, 10.0)
                };
                let n = delta_e(normal(*ca), normal(*cb));
                let d = delta_e(deuteranopia(*ca), deuteranopia(*cb));
                assert!(
                    n >= floor_normal,
                    "{a} vs {b}: ΔE {n:.1} with normal vision"
                );
                assert!(d >= floor_deutan, "{a} vs {b}: ΔE {d:.1} with deuteranopia");
            }
        }
    }

    /// Up to five curves of one kind on one plot (the process tree and four ranks): each apart
    /// from the others, with normal vision and with deuteranopia.
    #[test]
    fn the_shades_of_one_kind_are_apart() {
        for (name, base) in CURVES {
            let shades: Vec<Rgb> = (0..5).map(|n| shade(base, n)).collect();
            for (i, a) in shades.iter().enumerate() {
                for (j, b) in shades.iter().enumerate().skip(i + 1) {
                    let n = delta_e(normal(*a), normal(*b));
                    let d = delta_e(deuteranopia(*a), deuteranopia(*b));
                    assert!(n >= 10.0, "{name} shades {i} and {j}: ΔE {n:.1}");
                    assert!(
                        d >= 8.0,
                        "{name} shades {i} and {j}: ΔE {d:.1} with deuteranopia"
                    );
                }
            }
        }
    }

    /// The peak is drawn beside allocated, thinner: apart in lightness (on the dark theme, hue
    /// alone did not tell the thin line from the thick) and with deuteranopia.
    #[test]
    fn the_peak_stands_apart_from_allocated() {
        let (peak, allocated) = (normal(PEAK), normal(ALLOCATED));
        assert!(
            peak[0] - allocated[0] >= 20.0,
            "lightness {:.0} vs {:.0}",
            peak[0],
            allocated[0]
        );
        let d = delta_e(deuteranopia(PEAK), deuteranopia(ALLOCATED));
        assert!(d >= 25.0, "ΔE {d:.1} with deuteranopia");
    }

    #[test]
    fn no_phase_shares_a_curves_hue_and_events_have_none() {
        for (p, cp) in PHASES {
            for (c, cc) in CURVES {
                let apart = (hue(cp) - hue(cc)).abs();
                let apart = apart.min(360.0 - apart);
                assert!(apart >= 20.0, "{p} and {c}: hues {apart:.0}° apart");
            }
        }
        for neutral in [EVENT, EVENT_ON_SCREEN, BASELINE] {
            let [_, a, b] = normal(neutral);
            assert!(a.hypot(b) < 3.0, "{neutral:?} has a hue");
        }
    }
}
