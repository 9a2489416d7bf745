#!/usr/bin/env bash
# Re-records the corpus with the collector. The recordings are committed; re-record only when the
# jobs change, and check that the analysis tests still pass.
set -euo pipefail
cd "$(dirname "$0")"
collector="${COLLECTOR:-../../../../target/debug/collector}"
python="${TIDEMARK_PYTHON:-../../../../.venv/bin/python}"
for job in eval_keeps_predictions forward_keeps_losses healthy; do
  "$collector" --out "$job.msgpack" -- "$python" "$job.py"
done
