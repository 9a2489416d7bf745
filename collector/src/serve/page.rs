//! What `collector serve` shows a browser: the page that lists the runs (rendered here, its rows
//! refreshed every few seconds by a few lines of script), and the web viewer's files: built into
//! the binary when `trunk build --release` had made them before it was compiled (see
//! `collector/build.rs`), or read from a folder named with `--web`.

use std::fmt::Write as _;
use std::path::PathBuf;

use collector::format::format_bytes;

use super::http::percent_encode_path;
use super::runs::Run;

// `WEB_DIST`: the web viewer's files (`dist/`), by name, when they were built in.
include!(concat!(env!("OUT_DIR"), "/web_dist.rs"));

/// Where the web viewer's files come from.
pub enum Viewer {
    /// Built into the binary.
    Embedded(&'static [(&'static str, &'static [u8])]),
    /// A folder on this machine (`--web`), canonical.
    Folder(PathBuf),
    /// Neither: the page says how to build it in.
    Missing,
}

impl Viewer {
    /// The viewer built in, if any, else `folder`, else none.
    pub fn new(folder: Option<PathBuf>) -> Self {
        match folder {
            Some(folder) => Self::Folder(folder),
            None if WEB_DIST.iter().any(|(name, _)| *name == "index.html") => {
                Self::Embedded(WEB_DIST)
            }
            None => Self::Missing,
        }
    }

    /// Whether runs can be opened in it.
    pub fn present(&self) -> bool {
        !matches!(self, Self::Missing)
    }
}

/// How to build the viewer in, said where it is missing.
pub const NOT_BUILT: &str = "The web viewer was not built into this collector. Build it with `trunk build --release` (it writes dist/), then build the collector again naming that folder: `TIDEMARK_WEB_DIST=$PWD/dist cargo build --release -p tidemark-collector`; or pass --web /path/to/dist. The runs can still be listed, downloaded and reported here.";

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// How long ago, in words: `12 s ago`, `5 min ago`, `3 h ago`, `2 days ago`.
fn ago(modified: u64, now: u64) -> String {
    let s = now.saturating_sub(modified);
    match s {
        0..60 => format!("{s} s ago"),
        60..3600 => format!("{} min ago", s / 60),
        3600..86400 => format!("{} h ago", s / 3600),
        _ => format!("{} days ago", s / 86400),
    }
}

/// The viewer's address of the run `name` (relative to the viewer's page), as a query value.
fn run_url(name: &str) -> String {
    let url = format!("../runs/{}", percent_encode_path(name));
    percent_encode_path(&url).replace('/', "%2F")
}

/// The link that opens `name` in the web viewer (relative to the page, so the server may sit
/// behind a proxy's prefix), with `follow` as [`follow`] says.
pub fn viewer_link(name: &str, follow: &str) -> String {
    let follow = if follow.is_empty() {
        String::new()
    } else {
        format!("&follow={follow}")
    };
    format!("viewer/?url={}{follow}", run_url(name))
}

/// The link that opens a folder of per-rank snapshots in the web viewer as one run: each file
/// fetched (`url=`, repeated), the ranks judged together under the folder's name (`ranks=`).
pub fn ranks_link(folder: &str, files: &[String]) -> String {
    let mut link = format!(
        "viewer/?ranks={}",
        percent_encode_path(folder).replace('/', "%2F")
    );
    for file in files {
        link.push_str(&format!("&url={}", run_url(file)));
    }
    link
}

/// How the viewer follows a run: a growing recording by fetching what is added to it (`1`), a
/// growing folder run by fetching it whole again when its files changed (`whole`: its bytes are
/// made anew from them), anything else not at all (``).
pub fn follow(run: &Run) -> &'static str {
    match run.kind {
        _ if !run.growing => "",
        collector::open::Kind::Recording => "1",
        collector::open::Kind::NodeRecordings | collector::open::Kind::RankTraces => "whole",
        _ => "",
    }
}

/// The table's rows.
pub fn rows(runs: &[Run], viewer: bool) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut out = String::new();
    if runs.is_empty() {
        out.push_str("<tr><td colspan=\"7\">No runs here yet: recordings, snapshots and profiler traces appear as they are written.</td></tr>");
    }
    for run in runs {
        let name = escape(&run.name);
        let raw = format!("runs/{}", percent_encode_path(&run.name));
        let report = format!("api/runs/{}/report", percent_encode_path(&run.name));
        let open = if viewer && run.error.is_none() {
            format!(
                "<a class=\"open\" href=\"{}\">{name}</a>",
                escape(&if run.kind == collector::open::Kind::RankSnapshots {
                    ranks_link(&run.name, &run.files)
                } else {
                    viewer_link(&run.name, follow(run))
                })
            )
        } else {
            name
        };
        // Runs that open on their own can be picked to open together (to compare them).
        let pick = if viewer
            && run.error.is_none()
            && run.kind != collector::open::Kind::RankSnapshots
        {
            format!(
                "<input type=\"checkbox\" class=\"pick\" title=\"open together with the other runs picked\" data-url=\"{}\">",
                escape(&format!("../runs/{}", percent_encode_path(&run.name)))
            )
        } else {
            String::new()
        };
        let state = if run.growing { "growing" } else { "finished" };
        let verdict = match (&run.error, &run.headline) {
            (Some(err), _) => format!("<span class=\"error\">{}</span>", escape(err)),
            (None, Some(h)) if run.judged_current => escape(h),
            (None, Some(h)) => format!("{} <i>(judging the newer bytes…)</i>", escape(h)),
            (None, None) => "<i>judging…</i>".to_owned(),
        };
        let _ = write!(
            out,
            "<tr data-name=\"{}\"><td>{pick}</td><td>{open}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"{state}\">{state}</td><td>{verdict} <a href=\"{}\">report</a> <a href=\"{}\">bytes</a></td></tr>",
            escape(&run.name),
            escape(kind_word(run)),
            format_bytes(run.size as f64),
            ago(run.modified, now),
            escape(&report),
            escape(&raw),
        );
    }
    out
}

fn kind_word(run: &Run) -> &'static str {
    use collector::open::Kind;
    match run.kind {
        Kind::Recording => "recording",
        Kind::Snapshot => "snapshot",
        Kind::Trace => "profiler trace",
        Kind::MemoryTimeline => "memory timeline",
        Kind::NodeRecordings => "nodes' recordings",
        Kind::RankSnapshots => "per-rank snapshots",
        Kind::RankTraces => "per-rank profiler traces",
        Kind::Compressed | Kind::Unknown => "unknown",
    }
}

/// The whole page.
pub fn page(folder: &str, runs: &[Run], viewer: bool) -> String {
    let missing = if viewer {
        String::new()
    } else {
        format!("<p class=\"missing\">{}</p>", escape(NOT_BUILT))
    };
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,"><title>tidemark — {folder}</title>
<style>
body {{ font: 14px system-ui, sans-serif; margin: 1.5em; color: #222; }}
table {{ border-collapse: collapse; width: 100%; }}
th, td {{ text-align: left; padding: 4px 10px; border-bottom: 1px solid #ddd; vertical-align: top; }}
.growing {{ color: #0a6; font-weight: 600; }} .error {{ color: #b00; }} .missing {{ background: #fff3cd; padding: 8px; }}
</style></head>
<body><h1>tidemark — runs in {folder}</h1>{missing}
{together}
<table><thead><tr><th></th><th>run</th><th>kind</th><th>size</th><th>modified</th><th>state</th><th>verdict</th></tr></thead>
<tbody id="runs">{rows}</tbody></table>
<script>
// The runs picked to open together, kept while the rows are made again.
const picked = new Set();
const runs = document.getElementById("runs");
function mark() {{
  for (const box of runs.querySelectorAll("input.pick")) box.checked = picked.has(box.dataset.url);
  const open = document.getElementById("together");
  if (open) open.disabled = picked.size < 2;
}}
runs.addEventListener("change", (e) => {{
  if (!e.target.classList.contains("pick")) return;
  if (e.target.checked) picked.add(e.target.dataset.url); else picked.delete(e.target.dataset.url);
  mark();
}});
const together = document.getElementById("together");
if (together) together.addEventListener("click", () => {{
  location.href = "viewer/?" + [...picked].map((u) => "url=" + encodeURIComponent(u)).join("&");
}});
// The rows again every 2 s: new runs, growing ones, verdicts as they are judged. Only what changed
// is replaced, so a link or box being clicked is not swept away under the pointer.
function update(html) {{
  const fresh = document.createElement("tbody");
  fresh.innerHTML = html;
  const old = new Map([...runs.children].map((row) => [row.dataset.name, row]));
  let at = runs.firstElementChild;
  for (const row of [...fresh.children]) {{
    let use = old.get(row.dataset.name);
    old.delete(row.dataset.name);
    if (use && use.cells.length === row.cells.length) {{
      // A run shown before keeps its row: only the cells that changed (its age, size, verdict) are new.
      const now = [...row.cells];
      [...use.cells].forEach((cell, i) => {{ if (cell.innerHTML !== now[i].innerHTML) cell.replaceWith(now[i]); }});
    }} else {{
      if (use) {{ if (use === at) at = at.nextElementSibling; use.remove(); }}
      use = row;
    }}
    if (use !== at) runs.insertBefore(use, at); else at = at.nextElementSibling;
  }}
  for (const row of old.values()) row.remove();
}}
setInterval(async () => {{
  try {{
    const r = await fetch("?part=rows", {{ credentials: "same-origin" }});
    if (r.ok) {{ update(await r.text()); mark(); }}
  }} catch (e) {{}}
}}, 2000);
mark();
</script></body></html>
"#,
        folder = escape(folder),
        rows = rows(runs, viewer),
        together = if viewer {
            "<p><button id=\"together\" disabled>Open the runs picked together (to compare them)</button></p>"
        } else {
            ""
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_viewer_link_is_relative_and_encoded() {
        assert_eq!(
            viewer_link("a b/run.msgpack", ""),
            "viewer/?url=..%2Fruns%2Fa%2520b%2Frun.msgpack"
        );
        assert_eq!(
            viewer_link("live.msgpack", "1"),
            "viewer/?url=..%2Fruns%2Flive.msgpack&follow=1"
        );
        assert_eq!(
            ranks_link(
                "r",
                &["r/rank0.pickle".to_owned(), "r/rank1.pickle".to_owned()]
            ),
            "viewer/?ranks=r&url=..%2Fruns%2Fr%2Frank0.pickle&url=..%2Fruns%2Fr%2Frank1.pickle"
        );
        assert_eq!(escape("<a & \"b\">"), "&lt;a &amp; &quot;b&quot;&gt;");
        assert_eq!(ago(100, 130), "30 s ago");
        assert_eq!(ago(0, 7200), "2 h ago");
    }
}
