#!/usr/bin/env bash
# Runs every check CI runs: formatting, clippy (native and wasm32), the tests, the desktop app in
# a real window, the wheels in a clean virtual environment, the web build in a real browser.
# Sets up what it needs on first use: the system packages (as root; otherwise it prints the one
# apt-get line and exits 2), the wasm32 target, a Python virtual environment (.venv) with the
# packages the tests use at the versions scripts/python-constraints.txt pins, and trunk + wasm-bindgen-cli at the versions Trunk.toml names.
# Usage: ./check.sh [--quick]   (--quick: skip the web build and its browser test)
# TIDEMARK_PYTHON=/path/to/python ./check.sh runs the suite with that interpreter's packages.
set -euo pipefail
cd "$(dirname "$0")"

step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
fail() { printf '\n\033[31mFAILED: %s\033[0m\n' "$*" >&2; exit 1; }

quick=false
[ "${1:-}" = "--quick" ] && quick=true

step "system packages (scripts/setup-system.sh)"
status=0
scripts/setup-system.sh || status=$?
[ "$status" = 0 ] || exit "$status"

step "toolchain: wasm32 target, rustfmt, clippy"
rustup target add wasm32-unknown-unknown >/dev/null
rustup component add rustfmt clippy >/dev/null

step "python environment: the versions scripts/python-constraints.txt pins"
if [ -n "${TIDEMARK_PYTHON:-}" ]; then
  # The user's own interpreter, as it is: how the suite runs against other versions.
  "$TIDEMARK_PYTHON" - <<'PY' || fail "TIDEMARK_PYTHON=$TIDEMARK_PYTHON cannot import msgpack, torch, selenium and PIL"
import msgpack, torch, selenium, PIL
from importlib.metadata import version
print("TIDEMARK_PYTHON: torch", version("torch"), "(not the pinned versions: installing nothing)")
PY
else
  status=0
  scripts/python-env.sh || status=$?
  [ "$status" = 0 ] || exit "$status"
  export TIDEMARK_PYTHON="$PWD/.venv/bin/python"
  # A pin this machine cannot install is named, with the way around it, and exits 2.
  scratch=$(mktemp -d)
  printf 'msgpack==0.0.999\n' >"$scratch/pins.txt"
  status=0
  TIDEMARK_VENV="$scratch/venv" TIDEMARK_CONSTRAINTS="$scratch/pins.txt" scripts/python-env.sh msgpack \
    >"$scratch/out" 2>&1 || status=$?
  { [ "$status" = 2 ] && grep -q "msgpack==0.0.999 cannot be installed" "$scratch/out" \
    && grep -q "TIDEMARK_PYTHON=" "$scratch/out"; } \
    || { cat "$scratch/out"; fail "scripts/python-env.sh on a pin that cannot be installed (exit $status)"; }
  rm -rf "$scratch"
  echo "a pin that cannot be installed: named, exit 2"
fi
# The README names the versions the suite proves: the pins.
for package in torch lightning transformers matplotlib; do
  pinned=$(grep -m1 "^$package==" scripts/python-constraints.txt | cut -d= -f3)
  grep -qi "$package $pinned" README.md \
    || fail "README.md does not say the suite proves $package $pinned (scripts/python-constraints.txt)"
done

step "cargo fmt --check"
cargo fmt --all -- --check || fail "formatting: run cargo fmt --all"

step "cargo clippy (native)"
cargo clippy --workspace --all-targets --locked -- -D warnings || fail "clippy (native)"

step "cargo clippy (wasm32: app, and the collector library without default features)"
cargo clippy -p tidemark-app --all-targets --target wasm32-unknown-unknown --locked -- -D warnings \
  || fail "clippy (wasm32, app)"
cargo clippy -p tidemark-collector --lib --no-default-features --target wasm32-unknown-unknown \
  --locked -- -D warnings || fail "clippy (wasm32, collector library)"

step "cargo test"
# The viewer's snapshots render with software Vulkan; it wants a private runtime folder.
XDG_RUNTIME_DIR=$(mktemp -d)
chmod 700 "$XDG_RUNTIME_DIR"
export XDG_RUNTIME_DIR
cargo test --workspace --locked || fail "tests (a failed viewer snapshot leaves app/tests/snapshots/*.diff.png)"

step "the HTML report in headless Chromium (scripts/html-check.py)"
.venv/bin/python scripts/html-check.py target/debug/collector test-output/html \
  || fail "HTML report check (screenshots in test-output/html/)"

step "wheels: scripts/build-wheels.sh (x86_64, aarch64), scripts/wheel-check.sh (a clean venv)"
scripts/build-wheels.sh || fail "building the wheels"
scripts/wheel-check.sh || fail "wheel check"

step "the desktop app in a real window (Xvfb)"
scripts/window-check.sh target/debug/tidemark || fail "window check (see test-output/)"

if ! $quick; then
  step "web build: trunk build --release (tools: scripts/web-tools.sh)"
  scripts/web-tools.sh || fail "installing trunk and wasm-bindgen-cli"
  trunk build --release || fail "trunk build --release"
  ls -l dist/

  step "the web build in headless Chromium (scripts/web-check.py)"
  # `cargo test` built the example (with the workspace's features: no rebuild here).
  target/debug/examples/synthetic target/web-check-1M.msgpack 1000000 \
    || fail "writing the 1-million-sample recording"
  .venv/bin/python scripts/web-check.py dist target/web-check-1M.msgpack test-output/web \
    || fail "web check (screenshots in test-output/web/)"

  step "collector serve in headless Chromium (scripts/serve-check.py)"
  .venv/bin/python scripts/serve-check.py target/debug/collector dist test-output/serve \
    || fail "serve check (screenshots in test-output/serve/)"

  step "%tidemark view in a real kernel, its cell in headless Chromium (scripts/notebook-check.py)"
  .venv/bin/python scripts/notebook-check.py target/debug/collector dist test-output/notebook \
    || fail "notebook check (screenshots in test-output/notebook/)"
fi

step "all checks passed"
