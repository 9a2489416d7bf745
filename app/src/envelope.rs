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
        // Columns next to each other (a pixel or so apart) are one strip: each span two
        // vertices, two triangles to the next. A column far from the next (no sample in the
        // columns between) ends its strip and is joined to the next by a band a line wide
        // between their nearest values, as a line joins two samples; a column with no neighbour
        // near is a plateau a pixel wide.
        let half = self.width / 2.0;
        let xs: Vec<f32> = self
            .spans
            .iter()
            .map(|&[x, ..]| transform.position_from_point_x(x))
            .collect();
        let near = |i: usize, j: usize| match (xs.get(i), xs.get(j)) {
            (Some(a), Some(b)) => (b - a).abs() <= 1.5,
            _ => false,
        };
        let mut mesh = Mesh::default();
        mesh.reserve_vertices(2 * self.spans.len() + 8);
        mesh.reserve_triangles(2 * self.spans.len() + 8);
        let quad = |mesh: &mut Mesh, [l0, l1]: [Pos2; 2], [r0, r1]: [Pos2; 2]| {
            let at = mesh.vertices.len() as u32;
            for p in [l0, l1, r0, r1] {
                mesh.colored_vertex(p, self.color);
            }
            mesh.add_triangle(at, at + 1, at + 2);
            mesh.add_triangle(at + 1, at + 3, at + 2);
        };
        // The span before: its x, top and bottom in screen pixels.
        let mut before: Option<(f32, f32, f32)> = None;
        for (i, &[x, lowest, highest]) in self.spans.iter().enumerate() {
            let top = transform.position_from_point(&PlotPoint::new(x, highest)).y;
            let bottom = transform.position_from_point(&PlotPoint::new(x, lowest)).y;
            // Screen y grows downwards; a span thinner than the line is widened about its middle.
            let middle = (top + bottom) / 2.0;
            let (top, bottom) = (top.min(middle - half), bottom.max(middle + half));
            let x = xs[i];
            let joined = i > 0 && near(i - 1, i);
            if joined {
                let at = mesh.vertices.len() as u32;
                mesh.colored_vertex(Pos2::new(x, top), self.color);
                mesh.colored_vertex(Pos2::new(x, bottom), self.color);
                mesh.add_triangle(at - 2, at - 1, at);
                mesh.add_triangle(at - 1, at + 1, at);
            } else {
                if let Some((bx, btop, bbottom)) = before {
                    // The nearest values of the two spans, each a line wide. (`max` then `min`,
                    // not `clamp`, which panics where rounding crosses the bounds.)
                    let here = middle.max(btop + half).min(bbottom - half);
                    let there = ((btop + bbottom) / 2.0).max(top + half).min(bottom - half);
                    quad(
                        &mut mesh,
                        [Pos2::new(bx, here - half), Pos2::new(bx, here + half)],
                        [Pos2::new(x, there - half), Pos2::new(x, there + half)],
                    );
                }
                // A strip starts here; alone (the next far too), it is a plateau a pixel wide.
                let (left, right) = if near(i, i + 1) {
                    (x, x)
                } else {
                    (x - 0.5, x + 0.5)
                };
                quad(
                    &mut mesh,
                    [Pos2::new(left, top), Pos2::new(left, bottom)],
                    [Pos2::new(right, top), Pos2::new(right, bottom)],
                );
            }
            before = Some((x, top, bottom));
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
