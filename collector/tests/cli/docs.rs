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
