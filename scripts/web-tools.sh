#!/usr/bin/env bash
# Installs the web build's tools at the versions Trunk.toml and Cargo.lock name, unless they are
# already on PATH: trunk 0.21.14 (the last release for rustc 1.95) and wasm-bindgen-cli (exactly
# the wasm-bindgen version in Cargo.lock). They are built as debug binaries without TLS or update
# checks (the build is offline): about half the time of a release install; they only move files
# and call rustc, so their own speed does not matter.
set -euo pipefail
cd "$(dirname "$0")/.."

trunk_version=0.21.14
bindgen_version=$(sed -n 's/^wasm_bindgen = "\(.*\)"/\1/p' Trunk.toml)
locked=$(grep -A1 '^name = "wasm-bindgen"$' Cargo.lock | sed -n 's/^version = "\(.*\)"/\1/p')
if [ "$bindgen_version" != "$locked" ]; then
  echo "Trunk.toml names wasm-bindgen $bindgen_version but Cargo.lock has $locked: make them equal" >&2
  exit 1
fi

if [ "$(trunk --version 2>/dev/null)" != "trunk $trunk_version" ]; then
  echo "installing trunk $trunk_version"
  cargo install trunk --version "$trunk_version" --locked --no-default-features --debug
fi
if [ "$(wasm-bindgen --version 2>/dev/null)" != "wasm-bindgen $bindgen_version" ]; then
  echo "installing wasm-bindgen-cli $bindgen_version"
  # Not --locked: its lockfile pins a crate version this registry lacks.
  cargo install wasm-bindgen-cli --version "$bindgen_version" --debug
fi
trunk --version
wasm-bindgen --version
