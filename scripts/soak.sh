#!/usr/bin/env bash
# Runs the collector's CLI test binary (collector/tests/cli) N times, as CI runs it (cargo test's
# default parallelism), and prints every failure with its message, then how often each test
# failed. A test that fails once in N is a flake that keeps a submission from landing: run this
# before stopping on any change to the analysis or the probe.
#
# Usage: scripts/soak.sh N [FILTER] [--busy K]
#   N        how many runs
#   FILTER   a test name filter, as cargo test takes it (e.g. holders::a_metric); all when left out
#   --busy K K busy loops run beside the tests (a loaded machine), stopped at the end
# Exits 0 when every run passed, 1 when one failed, 2 on bad arguments.
# The Python interpreter is TIDEMARK_PYTHON, else .venv (scripts/python-env.sh makes it).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '8,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

runs="" filter="" busy=0
while [ $# -gt 0 ]; do
  case "$1" in
    --busy) [ $# -ge 2 ] || usage; busy=$2; shift 2 ;;
    -h|--help) usage ;;
    *) if [ -z "$runs" ]; then runs=$1; elif [ -z "$filter" ]; then filter=$1; else usage; fi; shift ;;
  esac
done
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || usage
[[ "$busy" =~ ^[0-9]+$ ]] || usage

# The test binary, built once.
binary=$(cargo test -p tidemark-collector --test cli --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "cli" and m.get("executable"):
        print(m["executable"])')
[ -x "$binary" ] || { echo "soak: the CLI test binary did not build (cargo test -p tidemark-collector --test cli --no-run)" >&2; exit 1; }

loops=()
stop_loops() { for pid in "${loops[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap stop_loops EXIT
for ((b = 0; b < busy; b++)); do
  (while :; do :; done) &
  loops+=("$!")
done

out=$(mktemp -d)
failed_runs=0
declare -A failures=()
for ((i = 1; i <= runs; i++)); do
  log="$out/run-$i.log"
  start=$SECONDS
  status=0
  (cd collector && "$binary" ${filter:+"$filter"}) >"$log" 2>&1 || status=$?
  summary=$(grep -m1 '^test result:' "$log" || echo "no result (exit $status)")
  echo "run $i/$runs ($((SECONDS - start)) s): $summary"
  if [ "$status" != 0 ]; then
    failed_runs=$((failed_runs + 1))
    # Each failing test's own section: its name and what it printed (the panic message).
    python3 - "$log" <<'PY'
import re, sys
text = open(sys.argv[1], errors="replace").read()
for name, body in re.findall(r"^---- (\S+) stdout ----\n(.*?)(?=^---- |^failures:$)", text, re.S | re.M):
    lines = []
    for line in body.splitlines():
        if line.startswith("stack backtrace:"):
            break
        if line.strip():
            lines.append(line)
    lines = lines[:40]
    print(f"  FAILED {name}")
    for line in lines:
        print(f"    {line}")
PY
    while read -r name; do
      failures[$name]=$(( ${failures[$name]:-0} + 1 ))
    done < <(sed -n 's/^test \(.*\) \.\.\. FAILED$/\1/p' "$log")
  fi
done

echo
echo "soak: $((runs - failed_runs)) of $runs runs passed${filter:+ (filter: $filter)}, $busy busy loop(s) beside them; logs in $out"
for name in "${!failures[@]}"; do
  echo "  ${failures[$name]} of $runs: $name"
done
[ "$failed_runs" = 0 ]
