#!/usr/bin/env bash
# Makes the tests' Python environment: .venv with the packages the tests use, at the versions
# scripts/python-constraints.txt pins. Installs only when the file changed since the last install
# (its hash is kept in .venv). A pin this machine cannot install (another architecture, a registry
# that lacks it) is named with the way around it, and the script exits 2.
# Usage: scripts/python-env.sh [PACKAGE ...]   (default: the packages check.sh needs)
# TIDEMARK_VENV and TIDEMARK_CONSTRAINTS name another environment and pin file (check.sh uses them
# to prove the message for a pin that cannot be installed).
set -euo pipefail
cd "$(dirname "$0")/.."
constraints=${TIDEMARK_CONSTRAINTS:-scripts/python-constraints.txt}
venv=${TIDEMARK_VENV:-.venv}
packages=("$@")
[ ${#packages[@]} -gt 0 ] || packages=(msgpack torch lightning transformers accelerate selenium pillow matplotlib ipykernel nbclient nbformat)

if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" || { echo "python-env: cannot create $venv (is python3-venv installed?)" >&2; exit 1; }
fi
stamp="$venv/.tidemark-constraints"
want="$(sha256sum "$constraints" | cut -d' ' -f1) ${packages[*]}"
if [ -f "$stamp" ] && grep -qxF "$want" "$stamp"; then
  echo "python-env: .venv already holds the pinned versions of ${packages[*]}"
  exit 0
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "python-env: installing ${packages[*]} as $constraints pins them (once; torch is large)"
if ! "$venv/bin/pip" install --progress-bar off --constraint "$constraints" "${packages[@]}" >"$log" 2>&1; then
  tail -n 20 "$log" >&2
  # pip names the pin it could not satisfy: as a constraint it cannot meet, or a version it
  # cannot find.
  missing=$(grep -oE "(requested \(constraint\)|No matching distribution found for|satisfies the requirement) [^ ]+" "$log" \
    | head -1 | awk '{print $NF}')
  if [ -n "$missing" ]; then
    printf '\npython-env: %s cannot be installed on this machine (%s, Python %s): %s pins it.\n' \
      "$missing" "$(uname -m)" "$(python3 -c 'import sys; print(sys.version.split()[0])')" "$constraints" >&2
    printf 'To run the suite with other versions, make an environment that has them and point\n' >&2
    printf 'TIDEMARK_PYTHON at its interpreter: TIDEMARK_PYTHON=/path/to/venv/bin/python ./check.sh\n' >&2
    printf '(or change that line in %s).\n' "$constraints" >&2
    exit 2
  fi
  echo "python-env: pip install failed (above)" >&2
  exit 1
fi
echo "$want" >"$stamp"
"$venv/bin/python" - <<'PY'
from importlib.metadata import PackageNotFoundError, version
found = []
for name in ["torch", "lightning", "transformers"]:
    try:
        found.append(f"{name} {version(name)}")
    except PackageNotFoundError:
        pass
print("python-env: " + ", ".join(found))
PY
