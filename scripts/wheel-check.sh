#!/usr/bin/env bash
# Checks the wheels as a user gets them: installs this machine's wheel into a clean virtual
# environment (no torch, nothing else), then runs `collector --version`, imports `tidemark`
# outside the collector (a true no-op), records and reports the example job with the installed
# collector, and checks that a platform without a wheel gets pip's own "no matching distribution"
# (there is no source distribution to build with Rust by surprise).
# Usage: scripts/wheel-check.sh [WHEEL_DIR]   (default target/wheels, from scripts/build-wheels.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
wheels=$(realpath -m "${1:-target/wheels}")
fail() { echo "wheel-check: $*" >&2; exit 1; }

arch=$(uname -m)
for want in x86_64 aarch64; do
  ls "$wheels"/tidemark_torch-*-py3-none-manylinux2014_"$want".manylinux_2_17_"$want".whl >/dev/null 2>&1 \
    || fail "no manylinux2014 $want wheel in $wheels (scripts/build-wheels.sh makes them)"
done
# The aarch64 wheel holds an aarch64 executable (ELF machine 183).
.venv/bin/python - "$wheels" <<'PY' || fail "the aarch64 wheel's collector is not an aarch64 executable"
import glob, sys, zipfile
wheel = glob.glob(f"{sys.argv[1]}/tidemark_torch-*_aarch64.whl")[0]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith("/scripts/collector"))
    head = z.read(name)[:20]
assert head[:4] == b"\x7fELF" and int.from_bytes(head[18:20], "little") == 183, head
PY

# The package promises Python ≥ 3.8: its grammar must be 3.8's (this machine's Python is newer).
python3 - collector/probe/tidemark/*.py collector/probe/sitecustomize.py <<'PY' \
  || fail "the probe uses syntax newer than Python 3.8"
import ast, sys
for path in sys.argv[1:]:
    ast.parse(open(path, encoding="utf-8").read(), path, feature_version=(3, 8))
PY

# The distribution is the one the README names for PyPI (`tidemark` on PyPI is someone
# else's project), and its module is still `tidemark`.
readme_name=$(grep -m1 -oE '`pip install [a-z][a-z0-9-]*` will install' README.md | awk '{print $3}' | tr -d '`')
[ "$readme_name" = "tidemark-torch" ] || fail "the README installs ${readme_name:-nothing}, not tidemark-torch"
.venv/bin/python - "$wheels" "$readme_name" <<'PY' || fail "the wheel's name is not the README's"
import glob, sys, zipfile
for wheel in glob.glob(f"{sys.argv[1]}/*.whl"):
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        name = next(l.split(":", 1)[1].strip() for l in z.read(meta).decode().splitlines() if l.startswith("Name:"))
        assert name == sys.argv[2], f"{wheel}: Name: {name}, the README says pip install {sys.argv[2]}"
        assert "tidemark/__init__.py" in z.namelist(), f"{wheel} has no tidemark module"
print(f"the wheels are {sys.argv[2]}, as the README says, with the module tidemark")
PY

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m venv "$tmp/venv" || fail "cannot create a virtual environment"
venv="$tmp/venv/bin"
"$venv/pip" install --quiet --no-index --find-links "$wheels" "$readme_name" \
  || fail "pip install $readme_name from $wheels"

version=$("$venv/collector" --version) || fail "collector --version"
[[ "$version" == "collector "* ]] || fail "collector --version printed: $version"
echo "installed: $version ($("$venv/python" -c 'import tidemark; print(tidemark.__file__)'))"

# Outside the collector: every call is a no-op, nothing is started, torch is not imported.
env -u TIDEMARK_SOCKET "$venv/python" - <<'PY' || fail "import tidemark outside the collector"
import sys, threading
import tidemark
assert not tidemark.enabled()
tidemark.step(3)
tidemark.step("not a number")
with tidemark.phase("forward"):
    pass
tidemark.begin("eval")
tidemark.end("eval")
assert threading.active_count() == 1, threading.enumerate()
assert "torch" not in sys.modules
print("import tidemark outside the collector: a no-op")
PY

# The installed collector records and reports the example job (pure Python, no torch).
(cd "$tmp" && "$venv/collector" --out run.msgpack -- "$venv/python" \
  "$OLDPWD/collector/examples/leaky_job.py" >/dev/null) || fail "collector on the example job"
report=$("$venv/collector" report "$tmp/run.msgpack") || fail "collector report"
grep -q "leak" <<<"$report" || fail "the report names no leak: $report"
echo "recorded and reported the example job: $(grep -m1 '✗' <<<"$report" | sed 's/^ *//')"

# A platform without a wheel: pip's usual message, no build from source.
if out=$("$venv/pip" download --quiet --no-index --find-links "$wheels" --only-binary=:all: \
  --platform win_amd64 --dest "$tmp/other" "$readme_name" 2>&1); then
  fail "pip found a $readme_name for win_amd64: $out"
fi
grep -q "No matching distribution found for $readme_name" <<<"$out" \
  || fail "pip on another platform said: $out"
echo "on win_amd64 pip says: $(grep -o "No matching distribution found for $readme_name" <<<"$out")"
echo "wheel check passed"
