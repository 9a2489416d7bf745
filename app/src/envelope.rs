//! A curve drawn as one band mesh: where a plot shows more samples than it has pixel columns,
//! each column's span (lowest to highest value) joined to the next as a strip of two triangles,
//! at least a line's width tall. The same pixels a min/max polyline covers, without
//! tessellating thousands of anti-aliased segments every frame.

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
        let half = self.width / 2.0;
        let mut mesh = Mesh::default();
        mesh.reserve_vertices(2 * self.spans.len());
        mesh.reserve_triangles(2 * self.spans.len().saturating_sub(1));
        for &[x, lowest, highest] in &self.spans {
            let top = transform.position_from_point(&PlotPoint::new(x, highest));
            let bottom = transform.position_from_point(&PlotPoint::new(x, lowest));
            // Screen y grows downwards; a span thinner than the line is widened about its middle.
            let middle = (top.y + bottom.y) / 2.0;
            let (y0, y1) = (top.y.min(middle - half), bottom.y.max(middle + half));
            mesh.colored_vertex(Pos2::new(top.x, y0), self.color);
            mesh.colored_vertex(Pos2::new(top.x, y1), self.color);
        }
        for i in 1..self.spans.len() as u32 {
            let (a, b) = (2 * (i - 1), 2 * i);
            mesh.add_triangle(a, a + 1, b);
            mesh.add_triangle(a + 1, b + 1, b);
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
