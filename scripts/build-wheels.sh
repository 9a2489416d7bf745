#!/usr/bin/env bash
# Builds the wheels `pip install tidemark-torch` installs: the `collector` binary and the `tidemark`
# Python package, for Linux x86_64 and aarch64, tagged manylinux2014 (glibc ≥ 2.17). maturin
# builds them (collector/pyproject.toml, bindings = "bin"); zig links against the old glibc and
# cross-links aarch64, so no Docker image is needed. Both come from PyPI into .venv.
# Usage: scripts/build-wheels.sh [OUT_DIR]   (default target/wheels)
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-target/wheels}")
python=${TIDEMARK_PYTHON:-.venv/bin/python}
bin=$(cd "$(dirname "$python")" && pwd)

"$python" -c 'import maturin, ziglang' 2>/dev/null \
  || "$python" -m pip install --quiet --constraint scripts/python-constraints.txt maturin ziglang \
  || { echo "build-wheels: cannot pip install maturin and ziglang" >&2; exit 1; }
rustup target add x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu >/dev/null

rm -f "$out"/tidemark_torch-*.whl
for target in x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu; do
  # maturin finds zig through the environment's bin folder.
  (cd collector && PATH="$bin:$PATH" "$bin/maturin" build --release --locked --zig \
    --target "$target" --compatibility manylinux2014 --out "$out" --quiet)
done
ls -l "$out"/tidemark_torch-*.whl
