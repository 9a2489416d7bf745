//! The guide against the binary: every option a `--help` offers is named in the README or a page
//! of `docs/`, so that a user who reads the guide finds each one.

use std::path::Path;
use std::process::Command;

/// The options (`--name`) of `collector` and each of its subcommands, as `--help` lists them.
fn options() -> Vec<(String, String)> {
    let mut found = Vec::new();
    for sub in ["", "report", "check", "diff", "flame", "import", "serve"] {
        let mut command = Command::new(env!("CARGO_BIN_EXE_collector"));
        if !sub.is_empty() {
            command.arg(sub);
        }
        let output = command.arg("--help").output().unwrap();
        assert!(output.status.success(), "collector {sub} --help");
        let help = String::from_utf8(output.stdout).unwrap();
        for line in help.lines() {
            // An option's line: "  -o, --out <PATH>  …" or "      --json  …".
            let line = line.trim_start();
            let line = line
                .strip_prefix('-')
                .filter(|rest| !rest.starts_with('-'))
                .map_or(line, |rest| rest.get(3..).unwrap_or("").trim_start());
            if let Some(name) = line.strip_prefix("--") {
                let name: String = name
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                    .collect();
                if !name.is_empty() && name != "help" && name != "version" {
                    found.push((sub.to_owned(), format!("--{name}")));
                }
            }
        }
    }
    found
}

#[test]
fn every_option_the_help_offers_is_in_the_guide() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut guide = std::fs::read_to_string(root.join("README.md")).unwrap();
    for page in std::fs::read_dir(root.join("docs")).unwrap() {
        let page = page.unwrap().path();
        if page.extension().is_some_and(|e| e == "md") {
            guide.push_str(&std::fs::read_to_string(&page).unwrap());
        }
    }
    let options = options();
    assert!(
        options.iter().any(|(_, o)| o == "--out") && options.len() > 40,
        "the help was not read: {options:?}"
    );
    let missing: Vec<String> = options
        .iter()
        .filter(|(_, option)| {
            // The option itself, not a longer one it begins (`--at` in `--attach`).
            !guide.match_indices(option.as_str()).any(|(i, _)| {
                !guide[i + option.len()..]
                    .starts_with(|c: char| c.is_ascii_alphanumeric() || c == '-')
            })
        })
        .map(|(sub, option)| format!("collector {sub} {option}"))
        .collect();
    assert!(
        missing.is_empty(),
        "options no page of the guide names: {missing:?}"
    );
}

/// The README and every page of `docs/`, with their names.
fn guide_pages() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut pages = vec![(
        "README.md".to_owned(),
        std::fs::read_to_string(root.join("README.md")).unwrap(),
    )];
    for page in std::fs::read_dir(root.join("docs")).unwrap() {
        let page = page.unwrap().path();
        if page.extension().is_some_and(|e| e == "md") {
            let name = format!("docs/{}", page.file_name().unwrap().to_string_lossy());
            pages.push((name, std::fs::read_to_string(&page).unwrap()));
        }
    }
    pages
}

/// The pieces of a page that are commands: each line of a fenced block, and each inline code span.
fn code_pieces(page: &str) -> Vec<String> {
    let mut pieces = Vec::new();
    let mut fenced = false;
    for line in page.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            pieces.push(line.to_owned());
        } else {
            pieces.extend(line.split('`').skip(1).step_by(2).map(str::to_owned));
        }
    }
    pieces
}

/// The other direction: every option the guide gives a `collector` command exists in the binary's
/// `--help`, and every `TIDEMARK_…` variable it names is read somewhere in the code.
#[test]
fn every_option_and_variable_the_guide_names_exists() {
    let offered: std::collections::BTreeSet<String> =
        options().into_iter().map(|(_, o)| o).collect();
    let mut unknown = Vec::new();
    for (name, page) in guide_pages() {
        for piece in code_pieces(&page) {
            // The options after the word `collector` (a command, not `collector/…` or a crate).
            let words: Vec<&str> = piece.split_whitespace().collect();
            let Some(at) = words
                .iter()
                .position(|w| *w == "collector" || w.ends_with("/collector"))
            else {
                continue;
            };
            // Up to the job's command (`--`), a pipe or the next command.
            for word in words[at + 1..]
                .iter()
                .take_while(|w| !matches!(**w, "--" | "|" | "&&" | ";" | ">" | ">>"))
            {
                let Some(flag) = word.strip_prefix("--") else {
                    continue;
                };
                let flag: String = flag
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                    .collect();
                let flag = format!("--{flag}");
                if flag != "--"
                    && flag != "--help"
                    && flag != "--version"
                    && !offered.contains(&flag)
                {
                    unknown.push(format!("{name}: `{flag}` in `{}`", piece.trim()));
                }
            }
        }
    }
    assert!(unknown.is_empty(), "options no --help offers: {unknown:#?}");

    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut code = String::new();
    let mut folders = vec![
        root.join("collector/src"),
        root.join("collector/probe"),
        root.join("app/src"),
        root.join("scripts"),
    ];
    code.push_str(&std::fs::read_to_string(root.join("check.sh")).unwrap());
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                folders.push(path);
            } else if let Ok(text) = std::fs::read_to_string(&path) {
                code.push_str(&text);
            }
        }
    }
    let mut unread = Vec::new();
    for (name, page) in guide_pages() {
        for (i, _) in page.match_indices("TIDEMARK_") {
            let variable: String = page[i..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            if !code.contains(&variable) {
                unread.push(format!("{name}: {variable}"));
            }
        }
    }
    assert!(unread.is_empty(), "variables no code reads: {unread:#?}");
}

/// The README's sample output is what `collector report` prints of the recording it names
/// (`docs/example.msgpack`), made by the README's own first command.
#[test]
fn the_readmes_sample_is_what_report_prints_of_its_recording() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let after = readme
        .split_once("The diagnosis of [`docs/example.msgpack`](docs/example.msgpack)")
        .expect("the README names its sample's recording")
        .1;
    let sample: Vec<&str> = after
        .split("```")
        .nth(1)
        .expect("a sample block")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert!(sample.len() >= 5, "{sample:?}");
    let recording = collector::recording::read_file(&root.join("docs/example.msgpack")).unwrap();
    assert_eq!(
        recording.header.command,
        ["python3", "collector/examples/leaky_job.py"],
        "docs/example.msgpack is the README's first command's recording"
    );
    assert!(
        readme.contains("--out run.msgpack -- python3 collector/examples/leaky_job.py"),
        "the README's first command records the example job"
    );
    let output = Command::new(env!("CARGO_BIN_EXE_collector"))
        .arg("report")
        .arg(root.join("docs/example.msgpack"))
        .output()
        .unwrap();
    assert!(output.status.success());
    let report = String::from_utf8(output.stdout).unwrap();
    let lines: Vec<&str> = report.lines().collect();
    let start = lines
        .iter()
        .position(|l| *l == sample[0])
        .unwrap_or_else(|| panic!("{:?} is not in the report:\n{report}", sample[0]));
    assert_eq!(
        &lines[start..start + sample.len()],
        &sample[..],
        "the README's sample is not what the report prints:\n{report}"
    );
}

/// A file a sample's command names, found among the test data by its name.
fn test_data_file(name: &str) -> Option<std::path::PathBuf> {
    let mut folders = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data")];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).ok()? {
            let path = entry.ok()?.path();
            if path.is_dir() {
                folders.push(path);
            } else if path.file_name().is_some_and(|n| n == name) {
                return Some(path);
            }
        }
    }
    None
}

/// Every sample of `collector`'s output in the guide is what the command prints today: a block
/// whose first line is `$ collector …`, or one after a line `<!-- the output of: collector … -->`.
/// The files it names are the test data's; `…` in a line stands for any text, and the sample's
/// lines come in the output's order.
#[test]
fn every_sample_output_in_the_guide_is_what_its_command_prints() {
    let mut checked = 0;
    let mut wrong = Vec::new();
    for (name, page) in guide_pages() {
        let lines: Vec<&str> = page.lines().collect();
        let mut i = 0;
        while i < lines.len() {
            if lines[i] != "```" {
                i += if lines[i].starts_with("```") {
                    // A block of another kind: skip to its end.
                    lines[i + 1..]
                        .iter()
                        .position(|l| l.starts_with("```"))
                        .map_or(lines.len(), |k| k + 2)
                } else {
                    1
                };
                continue;
            }
            let end = i
                + 1
                + lines[i + 1..]
                    .iter()
                    .position(|l| l.starts_with("```"))
                    .expect("a closed block");
            let block = &lines[i + 1..end];
            let said = i
                .checked_sub(1)
                .and_then(|k| lines[k].strip_prefix("<!-- the output of: "))
                .and_then(|c| c.strip_suffix(" -->"));
            let (command, sample) = match (block.first().and_then(|l| l.strip_prefix("$ ")), said) {
                (Some(command), _) => (command, &block[1..]),
                (None, Some(command)) => (command, block),
                (None, None) => {
                    i = end + 1;
                    continue;
                }
            };
            i = end + 1;
            let words: Vec<&str> = command.split_whitespace().collect();
            assert_eq!(words[0], "collector", "{name}: {command}");
            let mut run = Command::new(env!("CARGO_BIN_EXE_collector"));
            for word in &words[1..] {
                match test_data_file(word) {
                    Some(path) => run.arg(path),
                    None => run.arg(word),
                };
            }
            let output = run.output().unwrap();
            let printed = String::from_utf8_lossy(&output.stdout).into_owned();
            let mut out = printed.lines();
            for line in sample.iter().filter(|l| !l.trim().is_empty()) {
                // `…` stands for any text: the pieces between come in order, the first at the
                // start (and the whole line where it has none).
                let matches = |o: &str| {
                    let mut pieces = line.split('…');
                    let first = pieces.next().unwrap_or("");
                    if !line.contains('…') {
                        return o == *line;
                    }
                    let Some(mut rest) = o.strip_prefix(first) else {
                        return false;
                    };
                    pieces.all(|piece| match rest.find(piece) {
                        Some(at) => {
                            rest = &rest[at + piece.len()..];
                            true
                        }
                        None => false,
                    })
                };
                if !out.any(matches) {
                    wrong.push(format!(
                        "{name}: `{command}` does not print {line:?} (in order); it printed:\n{printed}"
                    ));
                    break;
                }
            }
            checked += 1;
        }
    }
    assert!(checked >= 2, "{checked} samples found");
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
}

/// Every page of the guide is one a user reads through: under 1,200 words.
#[test]
fn every_page_of_the_guide_is_short_enough_to_read() {
    let long: Vec<String> = guide_pages()
        .into_iter()
        .map(|(name, page)| (name, page.split_whitespace().count()))
        .filter(|&(_, words)| words > 1_200)
        .map(|(name, words)| format!("{name}: {words} words"))
        .collect();
    assert!(long.is_empty(), "pages over 1,200 words: {long:?}");
}
