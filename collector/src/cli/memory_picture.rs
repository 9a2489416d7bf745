//! The active memory timeline of a snapshot for the HTML report: per device with a trace, the
//! bytes alive over the trace's entries, stacked by allocation site (the largest sites each a
//! band, the rest one band), as memory_viz stacks its bands (`collector::snapshot::timeline`),
//! with the most alive between two columns as a line over them and the device's memory when an
//! out-of-memory entry tells it. Written by hand as SVG (one path per band).

use std::fmt::Write as _;

use collector::format::{byte_marks, format_bytes, format_seconds};
use collector::palette;
use collector::snapshot::Snapshot;
use collector::snapshot::timeline::{MemoryTimeline, SUMMARY_SITES};

/// The picture's size, and the plot's margins.
const WIDTH: f64 = 1000.0;
const HEIGHT: f64 = 300.0;
const LEFT: f64 = 74.0;
const RIGHT: f64 = 12.0;
const TOP: f64 = 10.0;
const BOTTOM: f64 = 26.0;
/// Columns sampled across the plot.
const COLUMNS: u32 = 450;

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// One device's active memory timeline, drawn: what the HTML section and the SVG both show.
struct DevicePicture {
    heading: String,
    about: String,
    lacks: Vec<String>,
    svg: String,
    /// (colour, name): the largest sites, then the rest.
    legend: Vec<(palette::Rgb, String)>,
}

/// The pictures of every device with trace entries.
fn pictures(snapshot: &Snapshot) -> Vec<DevicePicture> {
    let layout = MemoryTimeline::new(snapshot);
    let sites: Vec<u32> = layout
        .ranked_sites()
        .into_iter()
        .take(SUMMARY_SITES)
        .collect();
    let start_us = snapshot.time_range_us().map_or(0, |r| r.0);
    let mut pictures = Vec::new();
    for device in layout.devices.iter().filter(|d| d.steps() > 0) {
        let end = device.end();
        // Every block summed by site: no band of its own.
        let picture = device.picture(0, end, COLUMNS, u64::MAX, &sites);
        let y_max = (picture.top().max(device.capacity.unwrap_or(0)) as f64 * 1.05).max(1.0);
        let sx =
            |step: u32| LEFT + f64::from(step) / f64::from(end.max(1)) * (WIDTH - LEFT - RIGHT);
        let sy = |bytes: u64| HEIGHT - BOTTOM - bytes as f64 / y_max * (HEIGHT - TOP - BOTTOM);
        let mut out = String::new();
        let _ = write!(
            out,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" font-family=\"sans-serif\" font-size=\"11\">\
<rect x=\"{LEFT}\" y=\"{TOP}\" width=\"{}\" height=\"{}\" fill=\"#f7f7f7\"/>",
            WIDTH - LEFT - RIGHT,
            HEIGHT - TOP - BOTTOM
        );
        // The y axis at round binary values (0, 32 MiB, 64 MiB …), about five of them.
        let max = y_max / 1.05;
        let mut marks: Vec<f64> = byte_marks(0.0, max, max / 5.0)
            .into_iter()
            .map(|m| m.0)
            .collect();
        marks.sort_by(f64::total_cmp);
        for v in marks {
            let y = sy(v as u64);
            let _ = write!(
                out,
                "<line x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#ddd\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
                WIDTH - RIGHT,
                LEFT - 4.0,
                y + 4.0,
                format_bytes(v)
            );
        }
        // One path per band: along its top, back along its bottom.
        let n = picture.summary_sites.len() + 2;
        for k in 0..n - 1 {
            let mut d = String::new();
            for (i, &x) in picture.samples.iter().enumerate() {
                let top = picture.levels_at(i)[k + 1];
                let _ = write!(
                    d,
                    "{}{:.1},{:.1}",
                    if i == 0 { "M" } else { "L" },
                    sx(x),
                    sy(top)
                );
            }
            for (i, &x) in picture.samples.iter().enumerate().rev() {
                let bottom = picture.levels_at(i)[k];
                let _ = write!(d, "L{:.1},{:.1}", sx(x), sy(bottom));
            }
            let fill = picture
                .summary_sites
                .get(k)
                .map_or(palette::OTHER_SITES, |&s| {
                    palette::site(layout.sites[s as usize].rank)
                });
            let _ = write!(out, "<path d=\"{d}Z\" fill=\"{}\"/>", fill.hex());
        }
        // The most alive between columns.
        let peaks: Vec<String> = picture
            .samples
            .iter()
            .zip(&picture.peaks)
            .map(|(&x, &p)| format!("{:.1},{:.1}", sx(x), sy(p)))
            .collect();
        let _ = write!(
            out,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"0.8\"/>",
            peaks.join(" "),
            palette::BASELINE.hex()
        );
        if let Some(cap) = device.capacity {
            let y = sy(cap);
            let _ = write!(
                out,
                "<line x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"{}\" stroke-dasharray=\"6 4\"/><text x=\"{:.1}\" y=\"{:.1}\">device memory {}</text>",
                WIDTH - RIGHT,
                palette::BASELINE.hex(),
                LEFT + 4.0,
                y - 3.0,
                format_bytes(cap as f64)
            );
        }
        // The x axis: entries and times at both ends.
        let when = |step: u32| match device.time_at(snapshot, step) {
            Some(t) if start_us > 0 => format!(
                "entry {step} (+{})",
                format_seconds((t - start_us) as f64 / 1e6)
            ),
            _ => format!("entry {step}"),
        };
        let _ = writeln!(
            out,
            "<text x=\"{LEFT}\" y=\"{:.1}\">{}</text><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text></svg>",
            HEIGHT - 8.0,
            escape(&when(0)),
            WIDTH - RIGHT,
            HEIGHT - 8.0,
            escape(&when(device.steps()))
        );
        let mut legend: Vec<(palette::Rgb, String)> = picture
            .summary_sites
            .iter()
            .map(|&s| {
                (
                    palette::site(layout.sites[s as usize].rank),
                    layout.site_name(snapshot, s),
                )
            })
            .collect();
        if layout.sites.len() > picture.summary_sites.len() {
            legend.push((
                palette::OTHER_SITES,
                format!(
                    "the {} other sites",
                    layout.sites.len() - picture.summary_sites.len()
                ),
            ));
        }
        pictures.push(DevicePicture {
            heading: format!(
                "Active memory timeline of {}",
                snapshot.device_name(device.device)
            ),
            about: format!(
                "The bytes alive over the trace's {} entries, stacked by allocation site as memory_viz stacks its blocks (largest sites first); peak {}, {} alive at the snapshot.",
                device.steps(),
                format_bytes(device.peak as f64),
                format_bytes(device.end_bytes as f64)
            ),
            lacks: device.lacks.describe(),
            svg: out,
            legend,
        });
    }
    pictures
}

/// The HTML section: a heading, and per device with trace entries an SVG and its legend; empty
/// when no device has any.
pub fn section(snapshot: &Snapshot) -> String {
    let mut out = String::new();
    for p in pictures(snapshot) {
        let _ = write!(out, "<h2>{}</h2>\n<p>{}</p>\n", p.heading, escape(&p.about));
        for line in &p.lacks {
            let _ = writeln!(out, "<p><em>{}</em></p>", escape(line));
        }
        out.push_str(&p.svg);
        out.push_str("<ul class=\"sites\">");
        for (colour, name) in &p.legend {
            let _ = write!(
                out,
                "<li><span style=\"color:{}\">■</span> {}</li>",
                colour.hex(),
                escape(name)
            );
        }
        out.push_str("</ul>\n");
    }
    out
}

/// `curves` (the report's SVG picture) with each device's active memory timeline under it, its
/// heading, what it lacks and its legend, as one SVG: what `report --svg` writes for a snapshot
/// with a trace, so a bug report carries the timeline too. `curves` alone when no device has
/// trace entries.
pub fn with_timelines(curves: &str, snapshot: &Snapshot) -> String {
    let pictures = pictures(snapshot);
    if pictures.is_empty() {
        return curves.to_owned();
    }
    let curves_height = curves
        .split_once("height=\"")
        .and_then(|(_, rest)| rest.split_once('"'))
        .and_then(|(h, _)| h.parse::<f64>().ok())
        .unwrap_or(f64::from(super::picture::HEIGHT));
    let mut body = String::new();
    let mut y = curves_height;
    for p in &pictures {
        let mut lines = vec![(
            16.0,
            format!(
                "<tspan font-weight=\"bold\" font-size=\"15\">{}</tspan>",
                escape(&p.heading)
            ),
        )];
        lines.extend(
            super::picture::wrap(&p.about, 150)
                .into_iter()
                .map(|l| (15.0, escape(&l))),
        );
        lines.extend(p.lacks.iter().map(|l| {
            (
                15.0,
                format!("<tspan font-style=\"italic\">{}</tspan>", escape(l)),
            )
        }));
        for (h, text) in lines {
            y += h + 4.0;
            let _ = write!(body, "<text x=\"12\" y=\"{y:.1}\">{text}</text>");
        }
        y += 6.0;
        let _ = write!(
            body,
            "<svg x=\"0\" y=\"{y:.1}\"{}",
            p.svg.trim_start_matches("<svg")
        );
        y += HEIGHT;
        for (colour, name) in &p.legend {
            y += 16.0;
            let _ = write!(
                body,
                "<rect x=\"{LEFT}\" y=\"{:.1}\" width=\"10\" height=\"10\" fill=\"{}\"/><text x=\"{:.1}\" y=\"{y:.1}\">{}</text>",
                y - 9.0,
                colour.hex(),
                LEFT + 16.0,
                escape(name)
            );
        }
        y += 10.0;
    }
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{y:.0}\" viewBox=\"0 0 {WIDTH} {y:.0}\" font-family=\"sans-serif\" font-size=\"12\"><rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>{}{body}</svg>\n",
        curves.trim_start_matches(|c: char| c != '<')
    )
}
