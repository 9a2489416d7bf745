#!/usr/bin/env bash
# Proves the GPU path on a machine with an NVIDIA GPU and PyTorch (CUDA build):
# records train.py with and without planted leaks, and prints what was recorded.
# Usage: collector/gpu-check/run.sh [OUT_DIR]    (from the repository root)
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${1:-gpu-check-out}"
mkdir -p "$out"
python="${TIDEMARK_PYTHON:-python3}"
cargo build --release -p tidemark-collector --locked
for leak in none losses eval; do
  echo "=== leak: $leak"
  ./target/release/collector --out "$out/$leak.msgpack" -- "$python" collector/gpu-check/train.py --leak "$leak" --steps 200
  "$python" collector/examples/read_recording.py "$out/$leak.msgpack" | "$python" -c '
import json, sys
s = json.load(sys.stdin)
print("devices:", [(d["index"], d["name"], d["total_bytes"] >> 20) for d in s["header"]["devices"]])
print("records:", s["records"])
for name, series in sorted(s["series"].items()):
    print(f"  {name}: {series[\"samples\"]} samples, last {series[\"last\"] >> 20 if series[\"last\"] is not None else None} MiB")
'
  if ./target/release/collector report --help >/dev/null 2>&1; then
    ./target/release/collector report "$out/$leak.msgpack" || true
  fi
done

# The job that dies: a leak-driven OOM, with the allocator's history. The snapshot at the OOM
# (oom.rank0.oom.pickle) opens with the recording; the verdict names the cause. The CATEGORIES
# table shows cuda:0 (parameters, gradients, AdamW's state, the rest = allocated minus them), and
# the census taken at the OOM (from the allocator's out-of-memory observer) and at exit (with the
# frames the uncaught error left) names `__main__.kept_activations` in HOLDERS. The steps/s of
# "none" with and without --history is the history's cost.
echo "=== leak: oom, --history"
./target/release/collector --out "$out/oom.msgpack" --history -- "$python" collector/gpu-check/train.py --leak oom --steps 100000 || true
ls -l "$out"/oom.*.pickle || echo "no snapshot was dumped"
./target/release/collector report "$out/oom.msgpack" || true
"$python" - "$out/oom.msgpack" <<'PY' || true
import sys, msgpack
data = open(sys.argv[1], "rb").read()[8:]
unpacker = msgpack.Unpacker(raw=False)
unpacker.feed(data)
for kind, body in unpacker:
    if kind == "census":
        top = body["holders"][0] if body["holders"] else {}
        print(f"census {body['reason']} at step {body['step']}: {body['cost_ns'] / 1e6:.1f} ms, "
              f"top holder {top.get('name')} {top.get('bytes', 0) >> 20} MiB on {top.get('device')}, "
              f"unreached {body['unreached_tensors']} tensors")
PY
echo "=== the probe's cost on a GPU job (steps/s of the same job: alone, under the collector (a sample of short steps observed past the first 100), with every step observed, with --history; twice, alternated)"
for round in 1 2; do
    echo "alone: $("$python" collector/gpu-check/train.py --steps 300 | grep steps/s)"
    echo "collector: $(./target/release/collector --out "$out/plain.msgpack" -- "$python" collector/gpu-check/train.py --steps 300 | grep steps/s)"
    ./target/release/collector report "$out/plain.msgpack" | grep "observed the phases" || echo "  (every step observed)"
    echo "collector --observe-every-step: $(./target/release/collector --out "$out/every.msgpack" --observe-every-step -- "$python" collector/gpu-check/train.py --steps 300 | grep steps/s)"
    echo "collector --history: $(./target/release/collector --out "$out/history.msgpack" --history -- "$python" collector/gpu-check/train.py --steps 300 | grep steps/s)"
done

# Pinned host memory (PyTorch 2.14+): a snapshot with `record_pinned_host_memory=True` holds
# `host_segments` and `host_traces`; the report shows them as the device `pinned host` (four of
# the eight 2 MiB pinned buffers kept alive). The shape PyTorch wrote is printed beside it.
echo "=== pinned host memory in a snapshot"
"$python" - "$out/pinned.pickle" <<'PY' || true
import sys, torch
if "record_pinned_host_memory" not in torch.cuda.memory._record_memory_history.__doc__:
    sys.exit(f"torch {torch.__version__} cannot record pinned host memory (2.14 and later can)")
torch.cuda.memory._record_memory_history(max_entries=100000, record_pinned_host_memory=True)
kept = []
for step in range(8):
    batch = torch.empty(2 << 20, dtype=torch.uint8).pin_memory()
    on_gpu = batch.to("cuda", non_blocking=True)
    if step % 2 == 0:
        kept.append(batch)
torch.cuda.synchronize()
torch.cuda.memory._dump_snapshot(sys.argv[1])
s = torch.cuda.memory._snapshot()
segments, traces = s.get("host_segments", []), s.get("host_traces", [])
print("host_segments:", len(segments), "first:", sorted(segments[0]) if segments else None)
print("host_traces:", type(traces).__name__, len(traces),
      "first:", sorted(traces[0]) if traces and isinstance(traces[0], dict) else traces[:1])
PY
./target/release/collector report "$out/pinned.pickle" || true

# Device memory outside PyTorch's cache: a new NCCL communicator every step (the verdict should
# lead with "Device memory outside PyTorch's cache leaks on GPU 0: +N/step"), then a second
# process holding 2 GiB of the device ("Other processes use 2.0 GiB on GPU 0"). The numbers the
# driver gave per process are printed beside it.
echo "=== memory outside PyTorch: NCCL communicators made every step"
./target/release/collector --out "$out/outside.msgpack" -- "$python" collector/gpu-check/outside.py --steps 60 || true
./target/release/collector report "$out/outside.msgpack" | head -20 || true
echo "=== another process on the GPU"
"$python" -c "import torch, time; x = torch.empty(2048 << 20, dtype=torch.uint8, device='cuda'); time.sleep(600)" &
holder=$!
sleep 10
./target/release/collector --out "$out/other.msgpack" -- "$python" collector/gpu-check/outside.py --steps 30 --no-leak || true
kill "$holder" || true
./target/release/collector report "$out/other.msgpack" | head -20 || true
