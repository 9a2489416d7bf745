//! Builds the web viewer into the `collector` binary, so that `collector serve` downloads
//! nothing at run time: when the binary is built (feature `cli`) and `TIDEMARK_WEB_DIST` names a
//! folder, or `<repository>/dist` (what `trunk build --release` writes) holds an `index.html`,
//! its files are embedded (`WEB_DIST` in `$OUT_DIR/web_dist.rs`); otherwise the list is empty and
//! `collector serve` says how to build the viewer in. A `dist/` made after the collector was
//! built is picked up by building again with `TIDEMARK_WEB_DIST` set (or after `cargo clean`):
//! Cargo cannot be told to watch a folder that does not exist yet without rebuilding every time.

use std::path::{Path, PathBuf};

fn main() {
    println!("cargo::rerun-if-env-changed=TIDEMARK_WEB_DIST");
    println!("cargo::rerun-if-changed=build.rs");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default()).join("web_dist.rs");
    let dist = std::env::var_os("CARGO_FEATURE_CLI").and_then(|_| find_dist());
    let mut files = Vec::new();
    if let Some(dist) = &dist {
        println!("cargo::rerun-if-changed={}", dist.display());
        collect(dist, dist, &mut files);
        files.sort();
    }
    let mut code = String::from(
        "/// The web viewer's files (`trunk build --release`'s `dist/`) by name, `/`-separated; empty when it was not built in.\npub static WEB_DIST: &[(&str, &[u8])] = &[\n",
    );
    for (name, path) in &files {
        code.push_str(&format!(
            "    ({name:?}, include_bytes!({:?})),\n",
            path.display().to_string()
        ));
    }
    code.push_str("];\n");
    if let Err(err) = std::fs::write(&out, code) {
        println!("cargo::error=cannot write {}: {err}", out.display());
    }
}

/// The folder of the web build: `TIDEMARK_WEB_DIST`, else `dist/` beside the workspace's
/// `Cargo.toml`, when it holds an `index.html`.
fn find_dist() -> Option<PathBuf> {
    let named = std::env::var_os("TIDEMARK_WEB_DIST").map(PathBuf::from);
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR")?);
    let beside = manifest.parent().map(|repo| repo.join("dist"));
    let dist = named.or(beside)?;
    if dist.join("index.html").is_file() {
        std::fs::canonicalize(dist).ok()
    } else {
        if std::env::var_os("TIDEMARK_WEB_DIST").is_some() {
            println!(
                "cargo::warning=TIDEMARK_WEB_DIST={} holds no index.html: the web viewer is not built in",
                dist.display()
            );
        }
        None
    }
}

/// Every file under `dir`, by its name relative to `root`.
fn collect(root: &Path, dir: &Path, files: &mut Vec<(String, PathBuf)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let path = entry.path();
        if path.is_dir() {
            collect(root, &path, files);
        } else if let Ok(name) = path.strip_prefix(root) {
            let name = name
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            files.push((name, path));
        }
    }
}
