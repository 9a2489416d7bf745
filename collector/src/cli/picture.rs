//! Pictures for CI and bug reports: the timeline with the verdict drawn (SVG, with plotters),
//! a self-contained HTML report around it, and a Markdown summary.
//!
//! The picture shows why the verdict is what it is: the curves and phase bands the viewer draws
//! ([`collector::plot`]: thinned to the pixel columns, every spike kept), the leaking phase
//! emphasised, the step baseline the analysis judged and its trend after warm-up, the
//! device's capacity when the trend heads for it, and out-of-memory errors; a caption says what
//! it shows. A recording with nothing to draw gets a picture that says what is missing.

use std::fmt::Write as _;
use std::path::Path;

use collector::analysis::{Analysis, Basis};
use collector::format::{byte_marks, format_bytes, format_seconds};
use collector::headline::Headline;
use collector::palette::{self, Rgb};
use collector::plot::{self, Trace, TraceKind};
use collector::recording::Recording;
use collector::snapshot::{Snapshot, SnapshotVerdict, SuspectMarks};
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// The picture's size, pixels.
pub const WIDTH: u32 = 1000;
/// The picture's height, pixels.
pub const HEIGHT: u32 = 440;
/// Pixel columns of the plotting area (the width less the axis labels and margins).
const COLUMNS: usize = 880;

fn color(rgb: Rgb) -> RGBColor {
    RGBColor(rgb.0, rgb.1, rgb.2)
}

/// One curve, decimated.
struct Curve {
    label: &'static str,
    rgb: Rgb,
    points: Vec<(f64, f64)>,
}

/// The curves the picture shows, from the library's ([`plot::traces_for_one_picture`]): allocated and reserved of
/// the first device, of the process whose phases the analysis judged (else the device's first
/// process), the device's used memory, and the host memory of the whole process tree; each
/// thinned to the plot's columns ([`plot::LodSeries::visible`]: every sample when there are few,
/// else each column's lowest and highest, so every spike is kept).
fn curves(recording: &Recording, analysis: &Analysis, end_ns: u64) -> Vec<Curve> {
    let traces = plot::traces_for_one_picture(recording);
    let pid = analysis.occurrences.first().map(|o| o.pid);
    let first_device = |kind: TraceKind| {
        traces
            .iter()
            .filter(|t| t.kind == kind)
            .filter_map(|t| t.device)
            .min()
    };
    let allocator_device = first_device(TraceKind::Allocated);
    let judged = traces
        .iter()
        .any(|t| t.device == allocator_device && t.pid().is_some() && t.pid() == pid);
    let shown = |t: &&Trace| match t.kind {
        TraceKind::Allocated | TraceKind::Reserved => {
            t.device == allocator_device && (!judged || t.pid() == pid)
        }
        TraceKind::DeviceUsed => t.device == first_device(TraceKind::DeviceUsed),
        TraceKind::OutsidePytorch => t.device == allocator_device && t.origin.is_none(),
        TraceKind::Host => t.origin.is_none(),
        // The picture draws lines only; the viewer shows the pools as a part of allocated.
        TraceKind::Peak | TraceKind::PrivatePools => false,
    };
    let mut out: Vec<Curve> = Vec::new();
    // Reserved under allocated, then device used and host memory; one curve of each.
    for kind in [
        TraceKind::Reserved,
        TraceKind::Allocated,
        TraceKind::DeviceUsed,
        TraceKind::OutsidePytorch,
        TraceKind::Host,
    ] {
        if let Some(trace) = traces.iter().filter(|t| t.kind == kind).find(shown) {
            let points = trace
                .data(recording)
                .visible(0, end_ns, COLUMNS)
                .into_iter()
                .map(|(t, v)| (t as f64 / 1e9, v as f64))
                .collect();
            out.push(Curve {
                label: kind.label(),
                rgb: kind.rgb(),
                points,
            });
        }
    }
    out
}

/// Why there is nothing to draw, when that is so.
fn missing(recording: &Recording, curves: &[Curve], snapshot: bool) -> Option<String> {
    let points: usize = curves.iter().map(|c| c.points.len()).max().unwrap_or(0);
    match points {
        0 | 1 if snapshot => Some(
            "Nothing to draw: the snapshot's trace holds no allocations over time (taken without torch.cuda.memory._record_memory_history, or with only its final state); the report lists its segments and live blocks".to_owned(),
        ),
        0 if recording.series.is_empty() && recording.allocator.is_empty() => Some(
            "Nothing to draw: the recording has no samples and no allocator numbers (the job ended at once, or the collector could not sample it)".to_owned(),
        ),
        0 => Some("Nothing to draw: every series of the recording is empty".to_owned()),
        1 => Some("Nothing to draw: the recording holds one sample, and a curve needs two".to_owned()),
        _ => None,
    }
}

/// A byte axis from 0 to a maximum, ticked at round binary values as the viewer's grid is
/// ([`byte_marks`]: 0, 16 MiB, 32 MiB …, never 19.1 MiB): labelled ticks at most about eight
/// apart, light grid lines at a quarter of that.
pub(super) struct ByteAxis {
    inner: RangedCoordf64,
    ticks: Vec<f64>,
    light: Vec<f64>,
}

impl ByteAxis {
    pub(super) fn new(max: f64) -> Self {
        let marks = byte_marks(0.0, max, max / 8.0);
        let step = marks.iter().map(|m| m.1).fold(f64::INFINITY, f64::min);
        let mut ticks: Vec<f64> = marks.iter().map(|m| m.0).collect();
        ticks.sort_by(f64::total_cmp);
        let light = byte_marks(0.0, max, step / 4.0)
            .into_iter()
            .map(|m| m.0)
            .filter(|v| !ticks.contains(v))
            .collect();
        Self {
            inner: (0.0..max).into(),
            ticks,
            light,
        }
    }
}

impl Ranged for ByteAxis {
    // Labels are written by the mesh's `y_label_formatter`.
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.inner.map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            self.light.clone()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.inner.range()
    }
}

/// The timeline with the verdict drawn, as an SVG document, its caption led by `lead` (the
/// sentence the report leads with). `snapshot`: the recording is this PyTorch snapshot's trace
/// (then nothing to draw means no trace, and its leak suspects' blocks are marked).
pub fn timeline_svg(
    recording: &Recording,
    analysis: &Analysis,
    snapshot: Option<(&Snapshot, &SnapshotVerdict)>,
    lead: &str,
) -> Result<String, String> {
    let end_ns = recording.duration_ns().max(1);
    let curves = curves(recording, analysis, end_ns);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        let err = |e: DrawingAreaErrorKind<_>| format!("cannot draw the picture: {e}");
        root.fill(&WHITE).map_err(err)?;
        if let Some(why) = missing(recording, &curves, snapshot.is_some()) {
            root.draw_text(
                &why,
                &TextStyle::from(("sans-serif", 18).into_font()).color(&BLACK),
                (30, (HEIGHT / 2) as i32),
            )
            .map_err(err)?;
            root.present().map_err(err)?;
            drop(root);
            return Ok(svg);
        }
        let marks = snapshot.map_or(Vec::new(), |(s, v)| v.suspect_marks(s, recording));
        let caption = wrap(
            &(collector::analysis::caption(lead, recording, analysis)
                + &SuspectMarks::caption(&marks)),
            CAPTION_CHARS,
        );
        let caption_height = 16 + 18 * caption.len() as u32;
        let (plot_area, caption_area) = root.split_vertically(HEIGHT - caption_height);
        let projected = analysis.projected_oom().filter(|o| o.near);
        let x_max = projected.map_or(end_ns, |o| o.at_ns.max(end_ns)) as f64 / 1e9;
        let capacity = recording
            .header
            .devices
            .iter()
            .map(|d| d.total_bytes)
            .find(|&b| b > 0)
            .filter(|_| analysis.basis != Basis::HostRss);
        let mut y_max = curves
            .iter()
            .flat_map(|c| c.points.iter().map(|p| p.1))
            .chain(analysis.step_series.values.iter().map(|&v| v as f64))
            .fold(0.0, f64::max);
        let show_capacity =
            capacity.filter(|&c| analysis.projection.is_some() || y_max >= 0.5 * c as f64);
        if let Some(c) = show_capacity {
            y_max = y_max.max(c as f64);
        }
        let y_max = (y_max * 1.08).max(1.0);
        let mut chart = ChartBuilder::on(&plot_area)
            .margin(12)
            .x_label_area_size(34)
            .y_label_area_size(76)
            .build_cartesian_2d(0f64..x_max, ByteAxis::new(y_max))
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("time since start")
            .x_label_formatter(&|v| format_seconds(*v))
            .y_label_formatter(&|v| format_bytes(*v))
            .light_line_style(RGBColor(0xee, 0xee, 0xee))
            .draw()
            .map_err(err)?;

        // The phases, the leaking one emphasised.
        let leak_phase = analysis.problem_phase().map(|p| p.as_str().to_owned());
        // Columns of 4 pixels, as the viewer's: narrower bands cannot be told apart. Under them,
        // the steps the probe did not observe (a sample of a long loop's short steps is), so
        // that a stretch without bands is not read as time outside the phases.
        let unobserved = collector::analysis::unobserved(recording, &analysis.occurrences);
        for (from, to) in plot::spans_in(&unobserved, 0, end_ns, COLUMNS / 4) {
            let (a, b) = (from as f64 / 1e9, to as f64 / 1e9);
            let style = color(palette::UNOBSERVED).mix(0.12).filled();
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(a, 0.0), (b, y_max)],
                    style,
                )))
                .map_err(err)?;
        }
        for band in plot::phase_bands(&analysis.occurrences, 0, end_ns, COLUMNS / 4) {
            let phase = band.phase.as_str();
            let (a, b) = (band.begin_ns as f64 / 1e9, band.end_ns as f64 / 1e9);
            let alpha = match &leak_phase {
                Some(l) if l == phase => 0.45,
                Some(_) => 0.10,
                None => 0.22,
            };
            let style = color(palette::phase(phase)).mix(alpha).filled();
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(a, 0.0), (b, y_max)],
                    style,
                )))
                .map_err(err)?;
        }
        for curve in &curves {
            let c = color(curve.rgb);
            chart
                .draw_series(LineSeries::new(
                    curve.points.iter().copied(),
                    c.stroke_width(2),
                ))
                .map_err(err)?
                .label(curve.label)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                });
        }
        if let Some(c) = show_capacity {
            let style = color(palette::EVENT).stroke_width(1);
            chart
                .draw_series(DashedLineSeries::new(
                    [(0.0, c as f64), (x_max, c as f64)],
                    6,
                    4,
                    style,
                ))
                .map_err(err)?
                .label(format!("capacity {}", format_bytes(c as f64)))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
        }
        // The step baseline the verdict judged, and its trend.
        let s = &analysis.step_series;
        if !s.values.is_empty() {
            let base = color(palette::BASELINE);
            let points: Vec<(f64, f64)> = (0..s.values.len())
                .map(|i| (s.times_ns[i] as f64 / 1e9, s.values[i] as f64))
                .collect();
            chart
                .draw_series(
                    collector::plot::thin_min_max(&points)
                        .into_iter()
                        .map(|point| Circle::new(point, 2, base.filled())),
                )
                .map_err(err)?
                .label("step baseline")
                .legend(move |(x, y)| Circle::new((x + 9, y), 3, base.filled()));
        }
        if let Some(line) = analysis.trend_line() {
            let line = line.map(|(t, v)| (t as f64 / 1e9, v));
            let style = color(palette::BASELINE).stroke_width(2);
            let slope = analysis.trend.as_ref().map_or(0.0, |t| t.slope_per_step);
            chart
                .draw_series(LineSeries::new(line, style))
                .map_err(err)?
                .label(format!("trend {}/step", format_bytes(slope)))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
        }
        if let Some(o) = projected {
            let (x0, x1) = (o.from.0 as f64 / 1e9, o.at_ns as f64 / 1e9);
            let style = color(palette::BASELINE).stroke_width(2);
            chart
                .draw_series(DashedLineSeries::new(
                    [(x0, o.from.1), (x1, o.capacity)],
                    8,
                    5,
                    style,
                ))
                .map_err(err)?
                .label(format!("projected out of memory at step {}", o.step))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
            chart
                .draw_series([Cross::new(
                    (x1, o.capacity),
                    6,
                    color(palette::EVENT).stroke_width(2),
                )])
                .map_err(err)?;
            chart
                .draw_series(std::iter::once(Text::new(
                    format!("out of memory at step {}", o.step),
                    (x1, o.capacity * 0.94),
                    ("sans-serif", 13)
                        .into_font()
                        .color(&color(palette::EVENT))
                        .pos(Pos::new(HPos::Right, VPos::Top)),
                )))
                .map_err(err)?;
        }
        // A snapshot's leak suspects: their blocks alive at the end, where they were allocated.
        let c = color(palette::SUSPECT);
        for (i, m) in marks.iter().enumerate() {
            let at = |&(t, y): &(u64, f64)| (t as f64 / 1e9, y);
            // One shape per suspect, so that they are told apart without colour.
            let series = if i % 2 == 0 {
                chart.draw_series(
                    m.points
                        .iter()
                        .map(|p| TriangleMarker::new(at(p), 5, c.filled())),
                )
            } else {
                chart.draw_series(
                    m.points
                        .iter()
                        .map(|p| Cross::new(at(p), 5, c.stroke_width(2))),
                )
            };
            let legend = series.map_err(err)?.label(m.label.clone());
            if i % 2 == 0 {
                legend.legend(move |(x, y)| TriangleMarker::new((x + 9, y), 5, c.filled()));
            } else {
                legend.legend(move |(x, y)| Cross::new((x + 9, y), 5, c.stroke_width(2)));
            }
        }
        let ooms = plot::events(recording, analysis);
        for oom in ooms.iter().filter(|e| e.kind == plot::EventKind::Oom) {
            let x = oom.t_ns as f64 / 1e9;
            let style = color(palette::EVENT).stroke_width(2);
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(x, 0.0), (x, y_max)],
                    style,
                )))
                .map_err(err)?;
            chart
                .draw_series(std::iter::once(Text::new(
                    oom.label.clone(),
                    (x, y_max * 0.97),
                    ("sans-serif", 13).into_font().color(&color(palette::EVENT)),
                )))
                .map_err(err)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(0xbb, 0xbb, 0xbb))
            .label_font(("sans-serif", 13))
            .draw()
            .map_err(err)?;
        for (i, line) in caption.iter().enumerate() {
            caption_area
                .draw_text(
                    line,
                    &TextStyle::from(("sans-serif", 14).into_font()).color(&BLACK),
                    (14, 8 + 18 * i as i32),
                )
                .map_err(err)?;
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// How many characters of the caption fit on one line of the picture (14 px sans-serif).
const CAPTION_CHARS: usize = 155;

/// `text` in lines of at most `width` characters, broken between words (a longer word gets a
/// line of its own); at most four lines (a snapshot's verdict leads with a whole stack frame), the
/// last one ending in `…` when cut.
pub(super) fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split(' ') {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    if lines.len() > 4 {
        lines.truncate(4);
        lines[3].push_str(" …");
    }
    lines
}

pub(super) fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The start of a self-contained HTML page (no script, font or request): its style, a heading,
/// the file(s) it is about, and the line it leads with, marked `problem`, `ok` or `unknown`.
pub(super) fn page_start(heading: &str, files: &str, line: &str, mark: &str) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">\
<title>tidemark: {title}</title><style>\
body{{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px;max-width:1060px;color:#222;background:#fff}}\
h1{{font-size:20px;margin:0 0 4px}} .file{{color:#666;font-size:13px;margin-bottom:12px}}\
.verdict{{font-size:17px;font-weight:600;padding:8px 12px;border-radius:6px;margin:8px 0}}\
.problem{{background:#fde8dc;color:#8a2c00}} .ok{{background:#dcf3ea;color:#00583f}} .unknown{{background:#eee}}\
table{{border-collapse:collapse;font-size:13px;margin:8px 0}} td,th{{padding:3px 10px;border-bottom:1px solid #ddd;text-align:right}}\
td:first-child,th:first-child{{text-align:left}} ul{{font-size:14px}} li{{margin:2px 0}}\
pre{{font-size:12px;background:#f6f6f6;padding:10px;overflow-x:auto}} svg{{max-width:100%;height:auto}}\
</style></head><body>\n<h1>{heading}</h1><div class=\"file\">{files}</div>\n<div class=\"verdict {mark}\">{title}</div>\n",
        title = escape(line),
        heading = escape(heading),
        files = escape(files),
    );
    out
}

/// An SVG as plotters wrote it, inline, without the XML prolog if any.
pub(super) fn push_svg(out: &mut String, svg: &str) {
    let body = svg.trim_start_matches(|c| c != '<');
    out.push_str(
        body.strip_prefix("<?xml version=\"1.0\" encoding=\"UTF-8\"?>")
            .unwrap_or(body),
    );
}

/// One self-contained HTML file: the verdict, the picture (inline SVG), `more` (a snapshot's
/// active memory timeline), the findings with their evidence, the phase table and the whole
/// text report. No script, font or request.
pub fn html(
    file: &Path,
    lead: &Headline,
    analysis: &Analysis,
    svg: &str,
    more: &str,
    text_report: &str,
) -> String {
    let line = &lead.text;
    let mark = match lead.problem {
        Some(true) => "problem",
        Some(false) if lead.snapshot => "unknown",
        Some(false) => "ok",
        None => "unknown",
    };
    let mut out = page_start("tidemark report", &file.display().to_string(), line, mark);
    push_svg(&mut out, svg);
    out.push_str(more);
    out.push_str("\n<h2>Findings</h2>\n");
    for f in &analysis.findings {
        let _ = write!(out, "<h3>{}</h3><ul>", escape(&f.title));
        for e in &f.evidence {
            let _ = write!(out, "<li>{}</li>", escape(e));
        }
        out.push_str("</ul>");
        if !f.hints.is_empty() {
            out.push_str("<p>Usual causes:</p><ul>");
            for h in &f.hints {
                let _ = write!(out, "<li>{}</li>", escape(h));
            }
            out.push_str("</ul>");
        }
    }
    if !analysis.phases.is_empty() {
        out.push_str("<h2>Phases</h2><table><tr><th>phase</th><th>count</th><th>net Δ (mean)</th><th>watermark Δ (mean)</th><th>retained/occ</th><th>share of growth</th></tr>");
        for p in &analysis.phases {
            let share = p
                .share_of_growth
                .map_or("—".to_owned(), |s| format!("{:.0}%", 100.0 * s));
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{share}</td></tr>",
                escape(p.phase.as_str()),
                p.count_text(),
                format_bytes(p.net_mean_bytes),
                format_bytes(p.watermark_mean_bytes),
                format_bytes(p.retained_mean_bytes)
            );
        }
        out.push_str("</table>");
    }
    let _ = write!(
        out,
        "<h2>The whole report</h2><pre>{}</pre>\n</body></html>\n",
        escape(text_report)
    );
    out
}

/// A Markdown summary for CI pages (`$GITHUB_STEP_SUMMARY`): the verdict, the picture (a
/// separate SVG file, referenced by `picture`), the problems and the phase table.
pub fn markdown(file: &Path, lead: &Headline, analysis: &Analysis, picture: &str) -> String {
    let line = &lead.text;
    let mark = match lead.problem {
        Some(true) => "✗",
        Some(false) if lead.snapshot => "•",
        Some(false) => "✓",
        None => "?",
    };
    let mut out = format!(
        "### tidemark: {mark} {line}\n\n`{}`\n\n![memory timeline with the verdict]({picture})\n\n",
        file.display()
    );
    for f in analysis.findings.iter().filter(|f| f.kind.is_problem()) {
        let _ = writeln!(out, "- **{}**", f.title);
        for e in &f.evidence {
            let _ = writeln!(out, "  - {e}");
        }
    }
    if !analysis.phases.is_empty() {
        out.push_str("\n| phase | count | net Δ (mean) | retained/occ | share of growth |\n|---|---:|---:|---:|---:|\n");
        for p in &analysis.phases {
            let share = p
                .share_of_growth
                .map_or("—".to_owned(), |s| format!("{:.0}%", 100.0 * s));
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {share} |",
                p.phase.as_str(),
                p.count_text(),
                format_bytes(p.net_mean_bytes),
                format_bytes(p.retained_mean_bytes)
            );
        }
    }
    out
}
