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

impl Envelope {
    /// The band mesh in screen pixels. Columns next to each other (a pixel or so apart) are one
    /// strip: each span two vertices, two triangles to the next; where two such spans do not
    /// overlap (a steep rise or fall), each reaches past the middle of the gap, so that the strip
    /// is as thick across as the line. A column far from the next (no sample in the columns between)
    /// ends its strip and is joined to the next by a segment a line wide, measured across the
    /// segment (measured upright, a steep one thinned to gaps); a column with no neighbour near is
    /// a plateau a pixel wide.
    fn mesh(&self, transform: &PlotTransform) -> Mesh {
        let half = self.width / 2.0;
        // Each span's x, top and bottom in screen pixels (y grows downwards), a span thinner than
        // the line widened about its middle.
        let mut columns: Vec<[f32; 3]> = self
            .spans
            .iter()
            .map(|&[x, lowest, highest]| {
                let top = transform.position_from_point(&PlotPoint::new(x, highest)).y;
                let bottom = transform.position_from_point(&PlotPoint::new(x, lowest)).y;
                let middle = (top + bottom) / 2.0;
                [
                    transform.position_from_point_x(x),
                    top.min(middle - half),
                    bottom.max(middle + half),
                ]
            })
            .collect();
        let near = |a: &[f32; 3], b: &[f32; 3]| (b[0] - a[0]).abs() <= 1.5;
        for i in 1..columns.len() {
            let (a, b) = (columns[i - 1], columns[i]);
            if !near(&a, &b) {
                continue;
            }
            // Upright, the strip between the two is as thick as a line along it is across.
            let dx = (b[0] - a[0]).abs().max(1.0);
            let dy = ((b[1] + b[2]) - (a[1] + a[2])).abs() / 2.0;
            let past = ((self.width * dx.hypot(dy) / dx - dy) / 2.0).max(0.0);
            if a[2] < b[1] {
                // `a` lies above `b`: both reach past the middle of the gap.
                let middle = (a[2] + b[1]) / 2.0;
                columns[i - 1][2] = middle + past;
                columns[i][1] = middle - past;
            } else if b[2] < a[1] {
                let middle = (b[2] + a[1]) / 2.0;
                columns[i - 1][1] = middle - past;
                columns[i][2] = middle + past;
            }
        }
        let mut mesh = Mesh::default();
        mesh.reserve_vertices(2 * columns.len() + 8);
        mesh.reserve_triangles(2 * columns.len() + 8);
        let quad = |mesh: &mut Mesh, [l0, l1]: [Pos2; 2], [r0, r1]: [Pos2; 2]| {
            let at = mesh.vertices.len() as u32;
            for p in [l0, l1, r0, r1] {
                mesh.colored_vertex(p, self.color);
            }
            mesh.add_triangle(at, at + 1, at + 2);
            mesh.add_triangle(at + 1, at + 3, at + 2);
        };
        for (i, column) in columns.iter().enumerate() {
            let [x, top, bottom] = *column;
            let before = i.checked_sub(1).and_then(|b| columns.get(b));
            match before {
                Some(b) if near(b, column) => {
                    let at = mesh.vertices.len() as u32;
                    mesh.colored_vertex(Pos2::new(x, top), self.color);
                    mesh.colored_vertex(Pos2::new(x, bottom), self.color);
                    mesh.add_triangle(at - 2, at - 1, at);
                    mesh.add_triangle(at - 1, at + 1, at);
                    continue;
                }
                Some(&[bx, btop, bbottom]) => {
                    // The nearest values of the two spans. (`max` then `min`, not `clamp`,
                    // which panics where rounding crosses the bounds.)
                    let from = Pos2::new(bx, ((top + bottom) / 2.0).max(btop).min(bbottom));
                    let to = Pos2::new(x, ((btop + bbottom) / 2.0).max(top).min(bottom));
                    let across = (to - from).normalized().rot90() * half;
                    quad(
                        &mut mesh,
                        [from - across, from + across],
                        [to - across, to + across],
                    );
                }
                None => {}
            }
            // A strip starts here; alone (the next far too), it is a plateau a pixel wide.
            let (left, right) = if columns.get(i + 1).is_some_and(|next| near(column, next)) {
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
        mesh
    }
}

impl PlotItem for Envelope {
    fn shapes(&self, _ui: &Ui, transform: &PlotTransform, shapes: &mut Vec<Shape>) {
        shapes.push(Shape::mesh(self.mesh(transform)));
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

#[cfg(test)]
mod tests {
    use super::*;
    use egui::{Rect, pos2};

    /// The area the mesh covers, in square pixels, on a plot where one unit is one pixel.
    fn area(points: &[[f64; 2]], width: f32) -> f32 {
        let transform = PlotTransform::new(
            Rect::from_min_max(pos2(0.0, 0.0), pos2(1000.0, 1000.0)),
            PlotBounds::from_min_max([0.0, 0.0], [1000.0, 1000.0]),
            false,
        );
        let spans = points.iter().map(|&[x, y]| [x, y, y]).collect();
        let mesh = Envelope::new("allocated", spans, Color32::WHITE, width).mesh(&transform);
        mesh.indices
            .chunks(3)
            .map(|t| {
                let [a, b, c] = [0, 1, 2].map(|k| mesh.vertices[t[k] as usize].pos);
                ((b - a).x * (c - a).y - (b - a).y * (c - a).x).abs() / 2.0
            })
            .sum()
    }

    fn length(points: &[[f64; 2]]) -> f32 {
        points
            .windows(2)
            .map(|w| ((w[1][0] - w[0][0]).hypot(w[1][1] - w[0][1])) as f32)
            .sum()
    }

    /// A steep fall is drawn as thick as a flat line, a column per pixel (the strip) or a sample
    /// every ten pixels (the joins): measured upright, it was a line of gaps.
    #[test]
    fn a_steep_line_is_as_thick_as_a_flat_one() {
        let flat: Vec<[f64; 2]> = (0..100).map(|x| [f64::from(x), 500.0]).collect();
        let steep_strip: Vec<[f64; 2]> = (0..100)
            .map(|x| [f64::from(x), 900.0 - 5.0 * f64::from(x)])
            .collect();
        let steep_joins: Vec<[f64; 2]> = (0..10)
            .map(|k| [10.0 * f64::from(k), 1000.0 - 100.0 * f64::from(k)])
            .collect();
        for (name, points) in [
            ("flat", flat),
            ("strip", steep_strip),
            ("joins", steep_joins),
        ] {
            let (covered, line) = (area(&points, 1.5), 1.5 * length(&points));
            assert!(
                covered >= 0.9 * line && covered <= 1.3 * line + 20.0,
                "{name}: {covered:.0} px² drawn for a line of {line:.0} px²"
            );
        }
    }
}
