//! The Python interpreter the tests and benchmarks run (shared with `#[path]`).

use std::path::{Path, PathBuf};

/// The Python interpreter with the test packages (msgpack, torch): `TIDEMARK_PYTHON`, else the
/// workspace's `.venv` (which `check.sh` creates), else `python3`.
pub fn python() -> PathBuf {
    if let Some(path) = std::env::var_os("TIDEMARK_PYTHON") {
        return path.into();
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python");
    if venv.exists() {
        venv
    } else {
        "python3".into()
    }
}
