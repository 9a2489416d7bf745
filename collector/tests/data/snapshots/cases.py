"""Snapshot pickles for the importer's tests, and what Python's own pickle reads from them.

  python3 cases.py generate DIR      writes the edge cases (protocols 2, 3, 4, 5) into DIR
  python3 cases.py facts FILE...     prints, per file, what pickle.load finds (JSON lines)
  python3 cases.py big FILE N        writes a snapshot of N trace entries with ~20 frames each

Only the standard library: the files are what torch.cuda.memory._dump_snapshot writes (a dict of
lists and dicts), made without a GPU.
"""

import json
import pickle
import random
import sys
from pathlib import Path

MIB = 1 << 20


def frame(name, filename, line):
    return {"name": name, "filename": filename, "line": line}


# Shared frame objects, as PyTorch shares them (the pickle memoizes them once).
CPP = [
    frame("torch::unwind::unwind()", "??", 0),
    frame("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(unsigned long, CUstream_st*)", "CUDACachingAllocator.cpp", 0),
]
PY = {
    "forward": frame("forward", "/work/model.py", 42),
    "backward": frame("backward", "/usr/lib/python3/site-packages/torch/_tensor.py", 626),
    "step": frame("step", "/usr/lib/python3/site-packages/torch/optim/adam.py", 213),
    "train": frame("train", "/work/train.py", 17),
    "keep": frame("remember", "/work/train.py", 88),
}


def stack(*names):
    return CPP + [PY[n] for n in names] + [PY["train"]]


def edge_snapshot(state_spelling="active_pending_free", legacy_history=False, with_optional=True):
    """Two devices; addresses above 2**63; big integers; every action; phases both ways."""
    base = (1 << 63) + 0x1000  # needs 9 bytes in a pickle: LONG1 with a zero top byte
    t = 1_771_267_191_000_000
    traces = [[], []]
    segments = []
    for device in (0, 1):
        seg = base + device * (1 << 40)
        trace = traces[device]

        def entry(action, addr, size, dt, frames, meta=""):
            e = {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t + dt}
            if with_optional:
                e["frames"] = frames
                e["compile_context"] = "N/A"
                e["user_metadata"] = meta
            return e

        trace.append(entry("segment_alloc", seg, 64 * MIB, 0, stack("forward")))
        # Three steps: forward allocates 4 MiB and keeps 1 MiB of it (the leak), backward
        # allocates and frees 8 MiB.
        addr = seg
        leaked = []
        for step in range(3):
            t0 = 100 * step + 10
            kept = addr
            trace.append(entry("alloc", kept, 1 * MIB, t0 + 1, stack("keep", "forward"), "forward"))
            leaked.append(kept)
            tmp = seg + 40 * MIB + step * MIB  # freed again: away from the blocks below
            trace.append(entry("alloc", tmp, 3 * MIB, t0 + 2, stack("forward"), "forward"))
            trace.append(entry("free_requested", tmp, 3 * MIB, t0 + 3, stack("forward"), "forward"))
            trace.append(entry("free_completed", tmp, 3 * MIB, t0 + 4, stack("forward"), "forward"))
            g = seg + 48 * MIB
            trace.append(entry("alloc", g, 8 * MIB, t0 + 20, stack("backward"), "backward"))
            trace.append(entry("free_requested", g, 8 * MIB, t0 + 21, stack("backward"), "backward"))
            trace.append(entry("free_completed", g, 8 * MIB, t0 + 22, stack("backward"), "backward"))
            addr += MIB
        trace.append(entry("segment_map", seg + 64 * MIB, 2 * MIB, 400, stack("step")))
        trace.append(entry("segment_unmap", seg + 64 * MIB, 2 * MIB, 401, stack("step")))
        oom = entry("oom", 0, 80 * 1024 * MIB, 402, stack("forward"))
        oom["device_free"] = 5 * MIB
        trace.append(oom)
        trace.append(entry("snapshot", 0, 0, 403, []))

        blocks = []
        for i, a in enumerate(leaked):
            block = {"address": a, "size": MIB, "requested_size": MIB - 512, "state": "active_allocated"}
            if legacy_history:
                block["history"] = [{"addr": a, "real_size": MIB - 512, "frames": stack("keep", "forward")}]
                del block["requested_size"]
            else:
                block["frames"] = stack("keep", "forward")
            blocks.append(block)
        blocks.append({"address": seg + 3 * MIB, "size": 2 * MIB, "requested_size": 2 * MIB,
                       "state": state_spelling, "frames": [] if not legacy_history else None})
        if legacy_history:
            blocks[-1].pop("frames")
        blocks.append({"address": seg + 5 * MIB, "size": 20 * MIB, "requested_size": 0, "state": "inactive",
                       **({} if legacy_history else {"frames": []})})
        blocks.append({"address": seg + 25 * MIB, "size": 39 * MIB, "requested_size": 0, "state": "inactive",
                       **({} if legacy_history else {"frames": []})})
        segments.append({
            "device": device, "address": seg, "total_size": 64 * MIB, "allocated_size": 5 * MIB,
            "active_size": 5 * MIB, "requested_size": 5 * MIB, "stream": 0, "segment_type": "large",
            "segment_pool_id": (0, 0), "is_expandable": False, "frames": [], "blocks": blocks,
        })
    snapshot = {"segments": segments, "device_traces": traces}
    if with_optional:
        snapshot["allocator_settings"] = {
            "PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1, "huge_number": 2**100,
            "negative_huge": -(2**70), "roundup_power2_divisions": {"1": 0},
        }
        snapshot["external_annotations"] = [
            {"device": 0, "stage": stage, "name": "forward", "time_us": t + 100 * s + dt}
            for s in range(3) for stage, dt in (("START", 5), ("END", 9))
        ]
    return snapshot


def generate(directory):
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for protocol in (2, 3, 4, 5):
        (directory / f"edge_p{protocol}.pickle").write_bytes(pickle.dumps(edge_snapshot(), protocol=protocol))
    (directory / "awaiting_free.pickle").write_bytes(pickle.dumps(edge_snapshot("active_awaiting_free"), protocol=4))
    (directory / "legacy_history.pickle").write_bytes(pickle.dumps(edge_snapshot(legacy_history=True), protocol=2))
    (directory / "minimal.pickle").write_bytes(pickle.dumps(edge_snapshot(with_optional=False), protocol=5))
    (directory / "empty_trace.pickle").write_bytes(pickle.dumps({"segments": [], "device_traces": [[]]}, protocol=4))
    whole = pickle.dumps(edge_snapshot(), protocol=4)
    (directory / "truncated.pickle").write_bytes(whole[: len(whole) // 2])
    (directory / "a_list.pickle").write_bytes(pickle.dumps([1, 2, 3], protocol=4))

    class Tensor:  # what a dict of tensors pickles as: instances of a class
        def __reduce__(self):
            return (Tensor, ())

    Tensor.__module__ = "torch"
    Tensor.__qualname__ = "Tensor"
    globals()["Tensor"] = Tensor
    sys.modules["torch"] = sys.modules[__name__]
    (directory / "tensor_dict.pickle").write_bytes(pickle.dumps({"weight": Tensor(), "bias": Tensor()}, protocol=4))
    (directory / "zip.pickle").write_bytes(b"PK\x03\x04" + b"\0" * 60)
    (directory / "not_a_pickle.pickle").write_bytes(b"step,allocated\n1,2\n")
    (directory / "unknown_opcode.pickle").write_bytes(b"\x80\x04\xff")
    (directory / "huge_length.pickle").write_bytes(b"\x80\x04\x8d" + (1 << 62).to_bytes(8, "little") + b"x")
    (directory / "bad_memo.pickle").write_bytes(b"\x80\x04h\x07.")
    # 200,000 nested lists: the reader must not recurse.
    depth = 200_000
    (directory / "deep.pickle").write_bytes(b"\x80\x04" + b"(" * depth + b"l" * depth + b".")
    # A snapshot with a field of the wrong type.
    bad = edge_snapshot()
    bad["device_traces"][0][1]["size"] = "big"
    (directory / "wrong_type.pickle").write_bytes(pickle.dumps(bad, protocol=4))


def facts(path):
    with open(path, "rb") as f:
        s = pickle.load(f)
    actions = {}
    devices = max(len(s.get("device_traces", [])), max((g["device"] + 1 for g in s["segments"]), default=0))
    final = {}
    for g in s["segments"]:
        a, r = final.get(g["device"], (0, 0))
        a += sum(b["size"] for b in g["blocks"] if b["state"] != "inactive")
        r += g["total_size"]
        final[g["device"]] = (a, r)
    for trace in s.get("device_traces", []):
        for e in trace:
            actions[e["action"]] = actions.get(e["action"], 0) + 1
    # The curves' last values, replayed as the importer does: the trace's net change on top of
    # a start level (what the segments hold at the end minus that net change, at least 0).
    curve = {}
    for device, trace in enumerate(s.get("device_traces", [])):
        na = sum(e["size"] for e in trace if e["action"] == "alloc") - sum(
            e["size"] for e in trace if e["action"] == "free_completed")
        nr = sum(e["size"] for e in trace if e["action"] in ("segment_alloc", "segment_map")) - sum(
            e["size"] for e in trace if e["action"] in ("segment_free", "segment_unmap"))
        ea, er = final.get(device, (0, 0))
        known = bool(s["segments"])
        curve[str(device)] = [(max(ea - na, 0) if known else 0) + na, (max(er - nr, 0) if known else 0) + nr]
    frames = set()
    for trace in s.get("device_traces", []):
        for e in trace:
            for fr in e.get("frames", []):
                frames.add((fr["name"], fr["filename"], fr["line"]))
    first = None
    for trace in s.get("device_traces", []):
        if trace:
            first = [[fr["name"], fr["filename"], fr["line"]] for fr in trace[0].get("frames", [])]
            break
    return {
        "file": str(path),
        "segments": len(s["segments"]),
        "blocks": sum(len(g["blocks"]) for g in s["segments"]),
        "entries": sum(len(t) for t in s.get("device_traces", [])),
        "actions": actions,
        "devices": devices,
        "final": {str(d): list(v) for d, v in sorted(final.items())},
        "curve_final": curve,
        "distinct_trace_frames": len(frames),
        "first_entry_frames": first,
    }


def big(path, n):
    """N trace entries, ~20 frames each from 500 call sites, as a training loop makes them."""
    rng = random.Random(7)
    pool = [frame(f"fn_{i}", f"/work/pkg/module_{i % 40}.py", 10 + i) for i in range(300)]
    sites = [CPP + rng.sample(pool, 18) for _ in range(500)]
    t = 1_771_267_191_000_000
    trace = []
    live = []
    addr = 0x7F00_0000_0000
    for i in range(n):
        if live and (len(live) > 200 or rng.random() < 0.45):
            a, size, site = live.pop(rng.randrange(len(live)))
            trace.append({"action": "free_completed", "addr": a, "size": size, "stream": 0, "time_us": t + i,
                          "frames": list(sites[site]), "compile_context": "N/A", "user_metadata": ""})
        else:
            site = rng.randrange(len(sites))
            size = 512 * rng.randrange(1, 4096)
            addr += size
            live.append((addr, size, site))
            trace.append({"action": "alloc", "addr": addr, "size": size, "stream": 0, "time_us": t + i,
                          "frames": list(sites[site]), "compile_context": "N/A", "user_metadata": ""})
    snapshot = {"segments": [], "device_traces": [trace], "allocator_settings": {}}
    with open(path, "wb") as f:
        pickle.dump(snapshot, f, protocol=4)


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if command == "generate":
        generate(sys.argv[2])
    elif command == "facts":
        for p in sys.argv[2:]:
            print(json.dumps(facts(p)))
    elif command == "big":
        big(sys.argv[2], int(sys.argv[3]))
    else:
        print(__doc__)
        sys.exit(2)
