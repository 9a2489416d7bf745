//! A curve drawn as one band mesh: where a plot shows more samples than it has pixel columns,
//! each column's span (lowest to highest value) is a plateau as wide as the column, at least a
//! line's width tall, reaching to the next span where they do not overlap, or joined to a far
//! one by a band a line wide. The pixels a min/max polyline covers, without tessellating
//! thousands of anti-aliased segments every frame.

use std::ops::RangeInclusive;

use egui::{Color32, Mesh, Pos2, Shape, Ui};
use egui_plot::{PlotBounds, PlotGeometry, PlotItem, PlotItemBase, PlotPoint, PlotTransform};

/// The spans of a curve, one a column, in plot coordinates.
pub struct Envelope {
    base: PlotItemBase,
    /// `[x, lowest, highest]`, by x.
    spans: Vec<[f64; 3]>,
    color: Color32,
    width: f32,
}

impl Envelope {
    /// A curve named `name` (its legend entry) through `spans`, `width` pixels at its thinnest.
    pub fn new(name: impl Into<String>, spans: Vec<[f64; 3]>, color: Color32, width: f32) -> Self {
        Self {
            base: PlotItemBase::new(name.into()),
            spans,
            color,
            width,
        }
    }
}

impl PlotItem for Envelope {
    fn shapes(&self, _ui: &Ui, transform: &PlotTransform, shapes: &mut Vec<Shape>) {
        // Each span is a plateau as wide as its column (at most a pixel). Next to the following
        // column it reaches to that span where the two do not overlap (the jump a line draws at
        // the column's edge); far from it (no sample in the columns between) it is joined to it
        // by a band a line wide between their nearest values, as a line joins two samples.
        let half = self.width / 2.0;
        let xs: Vec<f32> = self
            .spans
            .iter()
            .map(|&[x, ..]| transform.position_from_point_x(x))
            .collect();
        let adjacent = |i: usize| xs.get(i + 1).is_some_and(|next| next - xs[i] <= 1.5);
        // (left, right, top, bottom) in screen pixels.
        let plateaus: Vec<[f32; 4]> = self
            .spans
            .iter()
            .enumerate()
            .map(|(i, &[x, lowest, highest])| {
                let (lowest, highest) = match self.spans.get(i + 1) {
                    Some(&[_, next_lowest, next_highest]) if adjacent(i) => {
                        (lowest.min(next_highest), highest.max(next_lowest))
                    }
                    _ => (lowest, highest),
                };
                let top = transform.position_from_point(&PlotPoint::new(x, highest)).y;
                let bottom = transform.position_from_point(&PlotPoint::new(x, lowest)).y;
                // Screen y grows downwards; a span thinner than the line is widened about its
                // middle.
                let middle = (top + bottom) / 2.0;
                let reach =
                    |other: Option<&f32>| other.map_or(0.5, |o| ((o - xs[i]).abs() / 2.0).min(0.5));
                [
                    xs[i] - reach(i.checked_sub(1).and_then(|p| xs.get(p))),
                    xs[i] + reach(xs.get(i + 1)),
                    top.min(middle - half),
                    bottom.max(middle + half),
                ]
            })
            .collect();
        let mut mesh = Mesh::default();
        mesh.reserve_vertices(8 * plateaus.len());
        mesh.reserve_triangles(4 * plateaus.len());
        let quad = |mesh: &mut Mesh, [l0, l1]: [Pos2; 2], [r0, r1]: [Pos2; 2]| {
            let at = mesh.vertices.len() as u32;
            for p in [l0, l1, r0, r1] {
                mesh.colored_vertex(p, self.color);
            }
            mesh.add_triangle(at, at + 1, at + 2);
            mesh.add_triangle(at + 1, at + 3, at + 2);
        };
        for (i, &[left, right, top, bottom]) in plateaus.iter().enumerate() {
            quad(
                &mut mesh,
                [Pos2::new(left, top), Pos2::new(left, bottom)],
                [Pos2::new(right, top), Pos2::new(right, bottom)],
            );
            let Some(&[next_left, _, next_top, next_bottom]) = plateaus.get(i + 1) else {
                continue;
            };
            // The nearest values of the two spans, each a line wide.
            // (`max` then `min`, not `clamp`, which panics where rounding crosses the bounds.)
            let here = ((next_top + next_bottom) / 2.0)
                .max(top + half)
                .min(bottom - half);
            let there = ((top + bottom) / 2.0)
                .max(next_top + half)
                .min(next_bottom - half);
            let (a, b) = if adjacent(i) {
                ([top, bottom], [next_top, next_bottom])
            } else {
                ([here - half, here + half], [there - half, there + half])
            };
            quad(
                &mut mesh,
                [Pos2::new(right, a[0]), Pos2::new(right, a[1])],
                [Pos2::new(next_left, b[0]), Pos2::new(next_left, b[1])],
            );
        }
        shapes.push(Shape::mesh(mesh));
    }

    fn initialize(&mut self, _x_range: RangeInclusive<f64>) {}

    fn color(&self) -> Color32 {
        self.color
    }

    fn geometry(&self) -> PlotGeometry<'_> {
        PlotGeometry::None
    }

    fn bounds(&self) -> PlotBounds {
        let mut bounds = PlotBounds::NOTHING;
        for &[x, lowest, highest] in &self.spans {
            bounds.extend_with(&PlotPoint::new(x, lowest));
            bounds.extend_with(&PlotPoint::new(x, highest));
        }
        bounds
    }

    fn base(&self) -> &PlotItemBase {
        &self.base
    }

    fn base_mut(&mut self) -> &mut PlotItemBase {
        &mut self.base
    }
}
