//! `collector flame SNAPSHOT`: the flame graph of a snapshot's memory by allocating stack, per
//! device (see [`collector::snapshot::flame`]): folded stacks on standard output, for speedscope,
//! inferno or `flamegraph.pl`, or an SVG of its own (`--svg`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use collector::format::format_bytes;
use collector::snapshot::Snapshot;
use collector::snapshot::flame::{Flame, Label, Weigh};
use collector::snapshot::timeline::MemoryTimeline;

use super::failure::{Answer, Failure};
use super::moments::{Moment, no_trace, read_snapshot, trace_start};
use super::picture::escape;

/// Arguments of `collector flame`.
#[derive(Debug, clap::Args)]
pub struct FlameArgs {
    /// A PyTorch memory snapshot with a trace (`torch.cuda.memory._record_memory_history`).
    pub file: PathBuf,
    /// The moment whose live bytes are weighed: a step of the trace (`1200`), a share of it
    /// (`50%`), a time after its first entry (`2.5s`), or `peak` (what made up the most memory
    /// alive at once). Default: the trace's end.
    #[arg(long, value_name = "MOMENT", conflicts_with = "lifetime")]
    pub at: Option<String>,
    /// Weigh each block by its bytes × the steps it lived over the whole trace, instead of the
    /// bytes alive at one moment.
    #[arg(long)]
    pub lifetime: bool,
    /// Show the library frames (PyTorch's, an installed package's) inside each site, instead of
    /// folding them into the first frame of your own code.
    #[arg(long)]
    pub unfold: bool,
    /// Only this device (default: every device with a trace); pinned host memory, when the
    /// snapshot recorded it, is the device after the CUDA ones.
    #[arg(long, value_name = "N")]
    pub device: Option<u32>,
    /// Write the flame graph as an SVG to this file instead of printing folded stacks.
    #[arg(long, value_name = "PATH")]
    pub svg: Option<PathBuf>,
}

/// `collector flame`: the folded stacks printed (or the SVG written), or why the file cannot be
/// read or has no trace.
pub fn flame(args: &FlameArgs) -> Result<Answer, Failure> {
    run(args)?;
    Ok(Answer::Done)
}

fn run(args: &FlameArgs) -> Result<(), String> {
    let moment = args.at.as_deref().map(Moment::parse).transpose()?;
    let snapshot = read_snapshot(
        &args.file,
        "a flame graph is drawn from a PyTorch memory snapshot's stacks; this is a tidemark recording",
    )?;
    let flames = flames(&snapshot, moment, args);
    if flames.is_empty() {
        return Err(match args.device {
            Some(d) => format!(
                "{}: no trace of {}",
                args.file.display(),
                snapshot.device_name(d)
            ),
            None => no_trace(&args.file),
        });
    }
    match &args.svg {
        Some(path) => write_svg(path, &snapshot, &flames, &args.file),
        None => {
            let mut out = String::new();
            for (device, _, flame) in &flames {
                for line in flame.folded(&snapshot).lines() {
                    let _ = writeln!(out, "{};{line}", snapshot.device_name(*device));
                }
            }
            super::out(format_args!("{out}"));
            Ok(())
        }
    }
}

/// Per device with a trace (or the one asked for): the device, the step weighed, the graph.
fn flames(
    snapshot: &Snapshot,
    moment: Option<Moment>,
    args: &FlameArgs,
) -> Vec<(u32, Option<u32>, Flame)> {
    let timeline = MemoryTimeline::new(snapshot);
    let start_us = trace_start(snapshot);
    timeline
        .devices
        .iter()
        .filter(|d| d.steps() > 0 && args.device.is_none_or(|w| w == d.device))
        .map(|d| {
            let (step, weigh) = if args.lifetime {
                (None, Weigh::BytesTimesLifetime)
            } else {
                let step = moment.map_or(d.steps(), |m| m.step(snapshot, d, start_us));
                (Some(step), Weigh::LiveAt(step))
            };
            (d.device, step, Flame::new(snapshot, d, weigh, args.unfold))
        })
        .collect()
}

const WIDTH: f64 = 1200.0;
const ROW: f64 = 18.0;

/// The flame graphs as one SVG: an icicle per device (the root at the top), a frame's width its
/// share, hover titles with the numbers.
fn write_svg(
    path: &Path,
    snapshot: &Snapshot,
    flames: &[(u32, Option<u32>, Flame)],
    file: &Path,
) -> Result<(), String> {
    let mut body = String::new();
    let mut y = 10.0;
    for (device, step, flame) in flames {
        let total = flame.total();
        let what = match (step, flame.weigh) {
            (_, Weigh::BytesTimesLifetime) => "bytes × steps alive over the whole trace".to_owned(),
            (Some(s), _) => format!("{} alive at step {s}", format_bytes(total)),
            (None, _) => String::new(),
        };
        y += 16.0;
        let _ = writeln!(
            body,
            r#"<text x="10" y="{y}" font-size="14" font-weight="bold">{}: {}{}</text>"#,
            snapshot.device_name(*device),
            escape(&what),
            if flame.unfolded {
                ""
            } else {
                " (library frames folded into the first frame of your code)"
            }
        );
        y += 8.0;
        let depth = flame.nodes.iter().map(|n| n.depth).max().unwrap_or(0);
        if total > 0.0 {
            draw(&mut body, snapshot, flame, 0, 10.0, y, WIDTH - 20.0);
        }
        y += f64::from(depth + 1) * ROW + 10.0;
    }
    let svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{h}" font-family="sans-serif" font-size="11">
<title>tidemark flame graph: {title}</title>
<rect width="100%" height="100%" fill="white"/>
{body}</svg>
"#,
        h = y + 10.0,
        title = escape(&file.display().to_string()),
    );
    std::fs::write(path, svg).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Draws `node` at (x, y), `width` wide, and its children below it.
fn draw(
    out: &mut String,
    snapshot: &Snapshot,
    flame: &Flame,
    node: u32,
    x: f64,
    y: f64,
    width: f64,
) {
    let n = &flame.nodes[node as usize];
    let name = flame.name(snapshot, node);
    let share = 100.0 * n.weight / flame.total();
    let amount = match flame.weigh {
        Weigh::LiveAt(_) => format_bytes(n.weight),
        Weigh::BytesTimesLifetime => format!("{} × steps", format_bytes(n.weight)),
    };
    let fill = match n.label {
        Label::Root => "#d0d0d0".to_owned(),
        Label::Frame(f) if snapshot.string(f.filename).ends_with(".py") => {
            collector::palette::site(hash(&name) % 8).hex()
        }
        _ => "#b8b8c8".to_owned(),
    };
    let _ = writeln!(
        out,
        r#"<g><title>{} — {amount} ({share:.1}%), {} block{}</title><rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h}" fill="{fill}" stroke="white" stroke-width="0.5"/>"#,
        escape(&name),
        n.blocks,
        if n.blocks == 1 { "" } else { "s" },
        w = width.max(0.5),
        h = ROW - 1.0,
    );
    // About 6 px a character at this size.
    let fits = ((width - 6.0) / 6.0).floor() as usize;
    if fits >= 4 {
        let text: String = if name.chars().count() > fits {
            name.chars()
                .take(fits.saturating_sub(1))
                .chain(['…'])
                .collect()
        } else {
            name.clone()
        };
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}">{}</text>"#,
            x + 3.0,
            y + ROW - 6.0,
            escape(&text)
        );
    }
    out.push_str("</g>\n");
    let mut at = x;
    for &child in &n.children {
        let w = width * flame.nodes[child as usize].weight / n.weight.max(f64::MIN_POSITIVE);
        if w >= 0.5 {
            draw(out, snapshot, flame, child, at, y + ROW, w);
        }
        at += w;
    }
}

fn hash(text: &str) -> u32 {
    text.bytes().fold(2166136261u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(16777619)
    })
}
