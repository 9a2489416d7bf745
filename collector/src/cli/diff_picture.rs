//! `collector diff --html`: the page, and its pictures in the report's conventions (its size,
//! palette and byte axis): two recordings' step baselines on one step axis, or the allocation
//! sites whose live bytes changed most, as bars.

use std::path::Path;

use collector::analysis::StepSeries;
use collector::compare::signed_bytes;
use collector::format::format_bytes;
use collector::palette;
use plotters::prelude::*;

use super::diff::{Compared, Form, Unit, number, render};
use super::picture::{ByteAxis, HEIGHT, WIDTH};

fn rgb(c: palette::Rgb) -> RGBColor {
    RGBColor(c.0, c.1, c.2)
}

/// Draws into an SVG string, naming what failed.
fn svg(
    draw: impl FnOnce(&DrawingArea<SVGBackend, plotters::coord::Shift>) -> Result<(), String>,
) -> Result<String, String> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE)
            .map_err(|e| format!("cannot draw the picture: {e}"))?;
        draw(&root)?;
        root.present()
            .map_err(|e| format!("cannot draw the picture: {e}"))?;
    }
    Ok(out)
}

/// A's and B's memory at the same point of every step, on one step axis: A (the baseline) grey
/// and dashed, B in the colour of what it measures.
pub fn steps_svg(a: &StepSeries, b: &StepSeries, what: &str) -> Result<String, String> {
    let points = |s: &StepSeries| -> Vec<(f64, f64)> {
        let points: Vec<(f64, f64)> = (0..s.values.len())
            .map(|i| (s.steps[i] as f64, s.values[i] as f64))
            .collect();
        collector::plot::thin_min_max(&points)
    };
    let (pa, pb) = (points(a), points(b));
    if pa.is_empty() && pb.is_empty() {
        return svg(|root| {
            root.draw_text(
                "neither run has steps (or time windows) to compare",
                &TextStyle::from(("sans-serif", 18).into_font()).color(&BLACK),
                (30, (HEIGHT / 2) as i32),
            )
            .map_err(|e| format!("cannot draw the picture: {e}"))
        });
    }
    let x_max = pa.iter().chain(&pb).map(|p| p.0).fold(1.0, f64::max);
    let y_max = (pa.iter().chain(&pb).map(|p| p.1).fold(0.0, f64::max) * 1.08).max(1.0);
    svg(|root| {
        let err = |e: DrawingAreaErrorKind<_>| format!("cannot draw the picture: {e}");
        let mut chart = ChartBuilder::on(root)
            .margin(12)
            .caption(
                format!("{what} at the same point of every step: A dashed, B solid"),
                ("sans-serif", 15),
            )
            .x_label_area_size(34)
            .y_label_area_size(76)
            .build_cartesian_2d(0f64..x_max, ByteAxis::new(y_max))
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("step")
            .x_label_formatter(&|v| format!("{v:.0}"))
            .y_label_formatter(&|v| format_bytes(*v))
            .light_line_style(RGBColor(0xee, 0xee, 0xee))
            .draw()
            .map_err(err)?;
        let grey = rgb(palette::EVENT).stroke_width(2);
        chart
            .draw_series(DashedLineSeries::new(pa, 6, 4, grey))
            .map_err(err)?
            .label("A (baseline)")
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], grey));
        let solid = rgb(palette::ALLOCATED).stroke_width(2);
        chart
            .draw_series(LineSeries::new(pb, solid))
            .map_err(err)?
            .label("B")
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], solid));
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(0xcc, 0xcc, 0xcc))
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(err)
    })
}

/// Bars of changes, one per row (a label and bytes), the largest first: growth in the colour of
/// allocated memory, shrinking in that of reserved memory.
pub fn bars_svg(title: &str, rows: &[(String, f64)]) -> Result<String, String> {
    let rows: Vec<&(String, f64)> = rows.iter().take(12).collect();
    let most = rows.iter().map(|r| r.1.abs()).fold(0.0, f64::max).max(1.0);
    svg(|root| {
        let err = |e: DrawingAreaErrorKind<_>| format!("cannot draw the picture: {e}");
        let font = ("sans-serif", 13).into_font();
        root.draw_text(
            title,
            &("sans-serif", 15).into_font().color(&BLACK),
            (12, 10),
        )
        .map_err(err)?;
        if rows.is_empty() {
            return root
                .draw_text("nothing changed", &font.color(&BLACK), (12, 40))
                .map_err(err);
        }
        let (left, right, top) = (430i32, WIDTH as i32 - 110, 40i32);
        let zero = (left + right) / 2;
        let half = f64::from(right - zero);
        let row_height = ((HEIGHT as i32 - top - 10) / rows.len() as i32).min(32);
        for (i, (label, bytes)) in rows.iter().enumerate() {
            let y = top + i as i32 * row_height;
            let width = (bytes.abs() / most * half) as i32;
            let (x0, x1, color) = if *bytes >= 0.0 {
                (zero, zero + width.max(1), rgb(palette::ALLOCATED))
            } else {
                (zero - width.max(1), zero, rgb(palette::RESERVED))
            };
            root.draw(&Rectangle::new(
                [(x0, y + 4), (x1, y + row_height - 4)],
                color.filled(),
            ))
            .map_err(err)?;
            let mut shown = label.clone();
            if shown.chars().count() > 62 {
                shown = format!(
                    "…{}",
                    shown
                        .chars()
                        .rev()
                        .take(61)
                        .collect::<String>()
                        .chars()
                        .rev()
                        .collect::<String>()
                );
            }
            root.draw_text(&shown, &font.color(&BLACK), (12, y + row_height / 2 - 7))
                .map_err(err)?;
            let text_x = if *bytes >= 0.0 { x1 + 4 } else { zero + 4 };
            root.draw_text(
                &signed_bytes(*bytes),
                &font.color(&BLACK),
                (text_x, y + row_height / 2 - 7),
            )
            .map_err(err)?;
        }
        root.draw(&PathElement::new(
            vec![(zero, top), (zero, top + rows.len() as i32 * row_height)],
            rgb(palette::BASELINE).stroke_width(1),
        ))
        .map_err(err)
    })
}

/// Writes `html` to `path`, naming the file when it cannot.
fn write_page(path: &Path, html: &str) -> Result<(), String> {
    std::fs::write(path, html).map_err(|err| format!("cannot write {}: {err}", path.display()))
}

/// The sentence a comparison leads with: the largest change.
fn lead(compared: &Compared) -> (String, &'static str) {
    match compared {
        Compared::Snapshots { diff, .. } => match diff.sites.first() {
            Some(s) => {
                let change = s.bytes.change.unwrap_or(0.0);
                (
                    format!(
                        "The largest change: {} at {} {}",
                        signed_bytes(change),
                        collector::compare::device_name(s.device),
                        s.site
                    ),
                    if change > 0.0 { "problem" } else { "ok" },
                )
            }
            None => (
                "No allocation site holds memory in either".to_owned(),
                "unknown",
            ),
        },
        Compared::Recordings { diff, .. } => match diff.baseline.change {
            Some(change) => (
                format!(
                    "The step baseline moved {} ({} in A, {} in B)",
                    signed_bytes(change),
                    number(diff.baseline.a, Unit::Bytes),
                    number(diff.baseline.b, Unit::Bytes)
                ),
                if change > 0.0 { "problem" } else { "ok" },
            ),
            None => (
                "The step baselines cannot be compared (see the notes)".to_owned(),
                "unknown",
            ),
        },
    }
}

/// `--html`: the comparison as one self-contained page with its picture.
pub(super) fn write_html(path: &Path, compared: &Compared, max_sites: usize) -> Result<(), String> {
    let (a, b) = match compared {
        Compared::Snapshots { a, b, .. } | Compared::Recordings { a, b, .. } => (a, b),
    };
    let (line, mark) = lead(compared);
    let mut page = super::picture::page_start(
        "tidemark: memory compared",
        &format!("A = {a}, B = {b}; change = B − A"),
        &line,
        mark,
    );
    let svg = match compared {
        Compared::Snapshots { diff, .. } => {
            let rows: Vec<(String, f64)> = diff
                .sites
                .iter()
                .map(|s| {
                    (
                        format!("{} {}", collector::compare::device_name(s.device), s.site),
                        s.bytes.change.unwrap_or(0.0),
                    )
                })
                .collect();
            bars_svg("live bytes by allocation site, B − A", &rows)?
        }
        Compared::Recordings { diff, steps, .. } => steps_svg(&steps[0], &steps[1], diff.basis[1])?,
    };
    super::picture::push_svg(&mut page, &svg);
    page.push_str(&render(compared, Form::Html, max_sites));
    page.push_str("</body></html>\n");
    write_page(path, &page)
}

/// `--html` of two moments of a trace: what was kept between them by site, and the text.
pub(super) fn write_moments_html(
    path: &Path,
    m: &super::moments::Moments,
    max_sites: usize,
) -> Result<(), String> {
    let kept: u64 = m.devices.iter().map(|d| d.kept).sum();
    let mut page = super::picture::page_start(
        "tidemark: what grew between two moments",
        &format!("{}, --at {} and --at {}", m.file, m.at[0], m.at[1]),
        &format!(
            "{} allocated between the moments and still alive at the later one",
            format_bytes(kept as f64)
        ),
        if kept > 0 { "problem" } else { "ok" },
    );
    let rows: Vec<(String, f64)> = m
        .devices
        .iter()
        .flat_map(|d| {
            d.sites
                .iter()
                .map(move |s| (format!("{} {}", d.name, s.site), s.bytes as f64))
        })
        .collect();
    let svg = bars_svg(
        "allocated between the moments and alive at the later one, by site",
        &rows,
    )?;
    super::picture::push_svg(&mut page, &svg);
    let text = super::moments::render(m, false, max_sites);
    page.push_str(&format!(
        "<pre>{}</pre>\n</body></html>\n",
        super::picture::escape(&text)
    ));
    write_page(path, &page)
}

/// `--html` of two moments of a recording: the tables.
pub(super) fn write_run_moments_html(
    path: &Path,
    r: &super::run_moments::RunMoments,
) -> Result<(), String> {
    let mut page = super::picture::page_start(
        "tidemark: two moments of a run",
        &format!("{}, --at {} and --at {}", r.file, r.at[0], r.at[1]),
        &format!(
            "From {} to {} after the start",
            collector::format::format_seconds(r.moments.from_ns as f64 / 1e9),
            collector::format::format_seconds(r.moments.to_ns as f64 / 1e9)
        ),
        "unknown",
    );
    page.push_str(&super::run_moments::render(r, Form::Html));
    page.push_str("</body></html>\n");
    write_page(path, &page)
}
