//! `collector report FILE [--json]`: the analysis of a recording or a snapshot, as text or JSON.

use std::path::{Path, PathBuf};

use collector::analysis::{Analysis, analyze};
use collector::headline::{Headline, leading};
use collector::open::{Input, Kind, open_path};
use collector::recording::Recording;
use collector::snapshot::{Snapshot, SnapshotVerdict};

use super::failure::{Answer, Failure};
use super::loaded::{Loaded, judge, load_nodes};
use super::report_json::{Judged, paired};
use super::report_text::{snapshot_text, text};

/// Arguments of `collector report`.
#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// The recording (or PyTorch memory snapshot) to analyze; or a folder of per-rank snapshots
    /// (`rank0_memory_snapshot.pickle`, …) to compare.
    pub file: PathBuf,
    /// More recordings of the same run, one per node (`collector --out run-%h.msgpack`): all
    /// are aligned by wall clock and judged as one run, rank by rank.
    #[arg(value_name = "MORE")]
    pub more: Vec<PathBuf>,
    /// Print the analysis as JSON (schema 1, in docs/json.md) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Also write the timeline with the verdict drawn (the step baseline, its trend, the
    /// leaking phase, OOMs) as an SVG picture.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// Also write one self-contained HTML report (the picture inline, the findings, the phase
    /// table, the whole text report; no script, font or request) to attach to CI runs and issues.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Also write a Markdown summary for CI pages (e.g. `$GITHUB_STEP_SUMMARY`), with the
    /// picture as an SVG file beside it (the same name ending in `.svg`, or `--svg`'s file).
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
}

/// The files `--svg`, `--html` and `--markdown` write, opened before any work so that an
/// unwritable path is an error at once.
struct Outputs {
    svg: Option<(PathBuf, std::fs::File)>,
    html: Option<(PathBuf, std::fs::File)>,
    markdown: Option<(PathBuf, std::fs::File)>,
}

impl Outputs {
    fn open(args: &ReportArgs) -> Result<Self, String> {
        let create = |path: &Path| {
            std::fs::File::create(path)
                .map(|f| (path.to_path_buf(), f))
                .map_err(|err| format!("cannot write {}: {err}", path.display()))
        };
        let mut svg = args.svg.as_deref().map(create).transpose()?;
        let markdown = args.markdown.as_deref().map(create).transpose()?;
        if svg.is_none()
            && let Some((path, _)) = &markdown
        {
            svg = Some(create(&path.with_extension("svg"))?);
        }
        Ok(Self {
            svg,
            html: args.html.as_deref().map(create).transpose()?,
            markdown,
        })
    }

    fn any(&self) -> bool {
        self.svg.is_some() || self.html.is_some() || self.markdown.is_some()
    }

    /// Draws and writes what was asked for.
    fn write(
        self,
        file: &Path,
        recording: &Recording,
        analysis: &Analysis,
        text: &str,
        snapshot: Option<(&Snapshot, &SnapshotVerdict)>,
        lead: &Headline,
    ) -> Result<(), String> {
        use std::io::Write as _;
        let svg = super::picture::timeline_svg(recording, analysis, snapshot, &lead.text)?;
        let put = |(path, mut f): (PathBuf, std::fs::File), body: &str| {
            f.write_all(body.as_bytes())
                .map_err(|err| format!("cannot write {}: {err}", path.display()))
        };
        let picture = self.svg.as_ref().map(|(p, _)| p.clone());
        if let Some(out) = self.svg {
            match snapshot {
                // A snapshot's picture carries its active memory timeline too.
                Some((s, _)) => put(out, &super::memory_picture::with_timelines(&svg, s))?,
                None => put(out, &svg)?,
            }
        }
        if let Some(out) = self.html {
            let more =
                snapshot.map_or_else(String::new, |(s, _)| super::memory_picture::section(s));
            put(
                out,
                &super::picture::html(file, lead, analysis, &svg, &more, text),
            )?;
        }
        if let Some(out) = self.markdown {
            // The picture by a path relative to the summary when it is beside it.
            let name = picture.as_deref().map_or_else(String::new, |p| {
                match (p.parent(), out.0.parent()) {
                    (a, b) if a == b => p
                        .file_name()
                        .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
                    _ => p.display().to_string(),
                }
            });
            put(out, &super::picture::markdown(file, lead, analysis, &name))?;
        }
        Ok(())
    }
}

/// `collector report FILE [MORE…] [--json]`.
pub fn report(args: &ReportArgs) -> Result<Answer, Failure> {
    // A folder is looked into first: per-rank snapshots are reported as a table, without pictures.
    let mut opened = None;
    if args.more.is_empty() && args.file.is_dir() {
        match open_path(&args.file) {
            Ok(Input::RankSnapshots(folder)) => {
                if args.svg.is_some() || args.html.is_some() || args.markdown.is_some() {
                    return Err(Failure::Cannot(format!(
                        "{}: pictures are drawn for recordings; report a folder of snapshots as text or --json",
                        args.file.display()
                    )));
                }
                return super::ranks::report_folder(&args.file, &folder, args.json);
            }
            Ok(input) => opened = Some(input),
            Err(err) => return Err(err.into()),
        }
    }
    let outputs = Outputs::open(args)?;
    let loaded = if args.more.is_empty() {
        let input = match opened {
            Some(input) => input,
            None => open_path(&args.file)?,
        };
        judge(&args.file, input)
    } else {
        let recording = load_nodes(&args.file, &args.more)?;
        let analysis = analyze(&recording);
        Loaded {
            kind: Kind::NodeRecordings,
            recording,
            analysis,
            judged: None,
            beside: args.file.clone(),
        }
    };
    let Loaded {
        kind,
        recording,
        analysis,
        judged,
        beside,
    } = loaded;
    let (snapshot, verdict) = judged.unzip();
    let lead = leading(Some(&analysis), verdict.as_ref(), None);
    // A recording made with --history names the snapshots dumped next to it: the one at the OOM
    // says what was alive when the job died.
    let paired = paired(snapshot.is_some(), &beside, &recording);
    let report = text(
        &args.file,
        &recording,
        &analysis,
        snapshot.as_ref().zip(verdict.as_ref()),
        &lead,
    );
    if outputs.any() {
        outputs.write(
            &args.file,
            &recording,
            &analysis,
            &report,
            snapshot.as_ref().zip(verdict.as_ref()),
            &lead,
        )?;
    }
    if args.json {
        let judged = Judged {
            kind,
            recording: &recording,
            analysis: &analysis,
            snapshot: snapshot.as_ref(),
            verdict,
            paired,
        };
        let json = judged
            .json(&args.file)
            .map_err(|err| Failure::Cannot(format!("cannot write the report as JSON: {err}")))?;
        super::out(format_args!("{json}\n"));
    } else {
        super::out(format_args!("{report}"));
        if let (Some(snapshot), Some(verdict)) = (&snapshot, &verdict) {
            super::out(format_args!("\n{}", snapshot_text(snapshot, verdict, 10)));
        }
        if let Some(super::report_json::Paired {
            path,
            reason,
            judged,
        }) = &paired
        {
            let when = if reason == "oom" {
                "AT THE OUT-OF-MEMORY ERROR"
            } else {
                "AT THE END OF THE JOB"
            };
            super::out(format_args!("\n{when}: {}\n", path.display()));
            match judged {
                Ok((snapshot, verdict)) => {
                    super::out(format_args!("  {}\n", verdict.headline));
                    super::out(format_args!("{}", snapshot_text(snapshot, verdict, 10)));
                }
                Err(err) => super::out(format_args!("  cannot be read: {err}\n")),
            }
        }
    }
    Ok(Answer::Done)
}
