"""Snapshot pickles for the importer's tests, and what Python's own pickle reads from them.

  python3 cases.py generate DIR      writes the edge cases (protocols 2, 3, 4, 5) into DIR
  python3 cases.py facts FILE...     prints, per file, what pickle.load finds (JSON lines)
  python3 cases.py random DIR N SEED writes N random snapshot-shaped pickles with random sharing
  python3 cases.py big FILE N        writes a snapshot of N trace entries with ~20 frames each,
                                     shared the way PyTorch shares them
  python3 cases.py pair DIR          writes before.pickle and after.pickle: one site grows by
                                     12 MiB, one is new, one is gone, one stays (for `diff`);
                                     and other_device.pickle: after's blocks on cuda:1
  python3 cases.py sites FILE...     prints, per file, the live bytes and blocks per device and
                                     per allocation site (the first frame of the user's code)
  python3 cases.py flame FILE DEVICE STEP
                                     the bytes alive at STEP by whole stack, outermost frame first
                                     (folded stacks, every frame as `collector flame --unfold`)
  python3 cases.py moments FILE DEVICE FROM TO
                                     replays the device's trace: the blocks allocated after step
                                     FROM (the state after that many entries) and alive at TO, in
                                     all and per site

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
                # What torch.compile was compiling, where it was (else PyTorch writes N/A).
                e["compile_context"] = "torch/_dynamo/convert_frame.py:[0/1]" if (device, meta) == (1, "backward") else "N/A"
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


def shared_snapshot(segments_first=True, devices=3):
    """Objects shared the way PyTorch shares them: one frames list per allocation, handed to the
    live block, to its alloc entry and to the entries that free it (and a segment shares its
    first block's list); frame dicts shared by every stack that passes through them. Also the
    other shapes real files have: entries without time_us, segment_alloc without frames, oom
    without addr, non-zero streams, devices with empty traces, expandable segments, thousands
    of annotations, C++ frames in ``??``."""
    t = 1_771_267_191_000_000
    cpp = [frame("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc", "??", 0),
           frame("at::empty_strided", "??", 0)]
    fwd = frame("forward", "/work/model.py", 42)
    keep = frame("remember", "/work/train.py", 88)
    loop = frame("<module>", "/work/train.py", 12)
    traces = [[] for _ in range(devices)]
    segments = []
    stream = 0x55D5_1E6F_0A00  # a real cudaStream_t handle
    seg = 0x7F00_0000_0000
    segment_frames = cpp + [fwd, loop]
    trace = traces[0]
    trace.append({"action": "segment_alloc", "addr": seg, "size": 64 * MIB, "stream": stream,
                  "time_us": t})  # no frames key
    blocks = []
    addr = seg
    for step in range(12):
        kept = cpp + [keep, fwd, loop] if step % 3 else segment_frames  # one list per allocation
        e = {"action": "alloc", "addr": addr, "size": MIB, "stream": stream, "time_us": t + 10 * step + 1,
             "frames": kept, "compile_context": "N/A", "user_metadata": "forward"}
        trace.append(e)
        blocks.append({"address": addr, "size": MIB, "requested_size": MIB, "state": "active_allocated",
                       "frames": kept})
        tmp = cpp + [fwd, loop]
        for action in ("alloc", "free_requested", "free_completed"):
            trace.append({"action": action, "addr": seg + 40 * MIB, "size": 2 * MIB, "stream": stream,
                          "time_us": t + 10 * step + 2, "frames": tmp, "user_metadata": "forward"})
        addr += MIB
    blocks.append({"address": addr, "size": 64 * MIB - 12 * MIB, "requested_size": 0, "state": "inactive",
                   "frames": []})
    trace.append({"action": "segment_map", "addr": seg + 64 * MIB, "size": 2 * MIB, "stream": stream,
                  "time_us": t + 200, "frames": segment_frames})
    trace.append({"action": "segment_unmap", "addr": seg + 64 * MIB, "size": 2 * MIB, "stream": stream,
                  "time_us": t + 201, "frames": segment_frames})
    trace.append({"action": "oom", "size": 80 * 1024 * MIB, "device_free": 3 * MIB, "stream": stream,
                  "time_us": t + 202, "frames": blocks[0]["frames"]})  # no addr
    trace.append({"action": "free_completed", "addr": seg + 50 * MIB, "size": MIB, "stream": stream,
                  "frames": []})  # no time_us
    segments.append({"device": 0, "address": seg, "total_size": 64 * MIB, "allocated_size": 12 * MIB,
                     "active_size": 12 * MIB, "requested_size": 12 * MIB, "stream": stream,
                     "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": True,
                     "frames": segment_frames, "blocks": blocks})
    annotations = [{"stage": stage, "name": f"forward#{i % 7}", "device": 0, "time_us": t + i + d}
                   for i in range(1500) for stage, d in (("START", 0), ("END", 1))]
    snapshot = {}
    order = ["segments", "device_traces", "allocator_settings", "external_annotations"]
    if not segments_first:
        order = ["external_annotations", "device_traces", "allocator_settings", "segments"]
    values = {"segments": segments, "device_traces": traces,
              "allocator_settings": {"expandable_segments": True}, "external_annotations": annotations}
    for key in order:
        snapshot[key] = values[key]
    return snapshot


def random_snapshot(rng):
    """A snapshot-shaped object with random sharing of lists, frame dicts, strings and blocks."""
    frames = [frame(rng.choice(["f", "g", "forward", "h" * rng.randrange(1, 5)]),
                    rng.choice(["??", "/a.py", "/b/c.py"]), rng.randrange(0, 3000)) for _ in range(rng.randrange(1, 12))]
    lists = [[rng.choice(frames) for _ in range(rng.randrange(0, 8))] for _ in range(rng.randrange(1, 10))]

    def some_frames():
        r = rng.random()
        if r < 0.6:
            return rng.choice(lists)  # shared object
        if r < 0.8:
            return [rng.choice(frames) for _ in range(rng.randrange(0, 5))]
        return list(rng.choice(lists))  # equal, not shared

    pools = [(0, 0), (rng.randrange(1, 4), 0), (0, rng.randrange(1, 1 << 40))]

    def some_pool():
        r = rng.random()
        if r < 0.5:
            return rng.choice(pools)  # shared object, with the segments' too
        if r < 0.9:
            return tuple([rng.choice([0, 1, 2]), rng.choice([0, 5])])  # a tuple per entry
        return list(rng.choice(pools))  # a list, as a JSON round trip leaves it

    devices = rng.randrange(1, 4)
    traces = [[] for _ in range(devices)]
    entries = []
    for device in range(devices):
        for _ in range(rng.randrange(0, 30)):
            if entries and rng.random() < 0.1:
                traces[device].append(rng.choice(entries))  # a whole entry shared
                continue
            e = {"action": rng.choice(["alloc", "free_requested", "free_completed", "segment_alloc",
                                       "segment_free", "segment_map", "segment_unmap", "oom", "snapshot"]),
                 "size": rng.randrange(0, 1 << 34)}
            for key, value in (("addr", rng.randrange(0, 1 << 64)), ("stream", rng.randrange(0, 1 << 48)),
                               ("time_us", rng.randrange(1 << 50, 1 << 51)), ("frames", None),
                               ("user_metadata", rng.choice(["", "fwd", "bwd"])), ("compile_context", "N/A"),
                               ("device_free", rng.randrange(0, 1 << 30)), ("pool_id", None)):
                if rng.random() < 0.8:
                    e[key] = some_frames() if key == "frames" else some_pool() if key == "pool_id" else value
            entries.append(e)
            traces[device].append(e)
    segments = []
    all_blocks = []
    for _ in range(rng.randrange(0, 6)):
        blocks = []
        for _ in range(rng.randrange(0, 6)):
            if all_blocks and rng.random() < 0.1:
                blocks.append(rng.choice(all_blocks))
                continue
            b = {"size": rng.randrange(1, 1 << 30), "state": rng.choice(["active_allocated", "inactive", "active_pending_free"])}
            if rng.random() < 0.8:
                b["address"] = rng.randrange(0, 1 << 63)
            if rng.random() < 0.2:
                b["history"] = [{"addr": rng.randrange(0, 1 << 40), "real_size": 5, "frames": some_frames()}
                                for _ in range(rng.randrange(1, 3))]
            elif rng.random() < 0.9:
                b["frames"] = some_frames()
            blocks.append(b)
            all_blocks.append(b)
        seg = {"device": rng.randrange(devices), "address": rng.randrange(0, 1 << 63),
               "total_size": rng.randrange(0, 1 << 36), "stream": rng.randrange(0, 1 << 48),
               "segment_type": rng.choice(["small", "large"]), "blocks": blocks}
        if rng.random() < 0.7:
            seg["segment_pool_id"] = some_pool()
        if rng.random() < 0.5:
            seg["frames"] = blocks[0].get("frames", []) if blocks else some_frames()
        segments.append(seg)
    if rng.random() < 0.1:
        return segments  # the segments alone, as memory_snapshot() returns them
    items = [("segments", segments), ("device_traces", traces)]
    if rng.random() < 0.5:
        items.reverse()
    return dict(items)


def generate_random(directory, n, seed):
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    for i in range(n):
        protocol = rng.randrange(2, 6)
        (directory / f"random_{i}.pickle").write_bytes(pickle.dumps(random_snapshot(rng), protocol=protocol))


def pinned_host_snapshot():
    """What PyTorch 2.14+ writes with ``_record_memory_history(record_pinned_host_memory=True)``
    (read from torch 2.15's ``THCPModule_memorySnapshot``): beside one CUDA device, the pinned
    host allocator's ``host_segments`` (``device`` -1, stream 0, one block covering each segment:
    it never splits them) and ``host_traces``, one flat list (not one per device) of entries
    without a ``device``, each with a ``pool_id``. Pinned buffers of a data loader: 8 of 2 MiB
    made and handed back each step, one kept every step (the leak), one 32 MiB staging buffer
    freed back to the system at the end."""
    t = 1_771_267_191_000_000
    pin = "/usr/lib/python3/site-packages/torch/utils/data/_utils/pin_memory.py"
    loader = [frame("at::CachingHostAllocatorImpl::allocate(unsigned long)", "??", 0),
              frame("pin_memory", pin, 64), frame("_pin_memory_loop", pin, 38)]
    keep = stack("keep")
    cuda_seg = 0x7F00_0000_0000
    cuda = [{"action": "segment_alloc", "addr": cuda_seg, "size": 20 * MIB, "stream": 0, "time_us": t,
             "frames": stack("forward")},
            {"action": "alloc", "addr": cuda_seg, "size": 2 * MIB, "stream": 0, "time_us": t + 1,
             "frames": stack("forward")}]
    host = []

    def entry(action, addr, size, dt, frames):
        return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t + dt,
                "compile_context": "", "user_metadata": "", "pool_id": (0, 0), "frames": frames}

    base = 0x7A00_0000_0000
    kept = []
    for step in range(4):
        for i in range(8):
            addr = base + (step * 8 + i) * 4 * MIB
            host.append(entry("segment_alloc", addr, 2 * MIB, 100 * step + 2 * i, loader))
            host.append(entry("alloc", addr, 2 * MIB, 100 * step + 2 * i, loader))
            if i == 0:
                kept.append(addr)  # held by the job: never handed back
                continue
            host.append(entry("free_requested", addr, 2 * MIB, 100 * step + 2 * i + 1, loader))
            host.append(entry("free_completed", addr, 2 * MIB, 100 * step + 2 * i + 1, loader))
    staging = base + 0x100 * MIB
    host.append(entry("segment_alloc", staging, 32 * MIB, 500, keep))
    host.append(entry("alloc", staging, 32 * MIB, 500, keep))
    host.append(entry("free_requested", staging, 32 * MIB, 501, keep))
    host.append(entry("free_completed", staging, 32 * MIB, 501, keep))
    host.append(entry("segment_free", staging, 32 * MIB, 502, keep))
    host_segments = []
    for step in range(4):
        for i in range(8):
            addr = base + (step * 8 + i) * 4 * MIB
            state = "active_allocated" if addr in kept else "inactive"
            frames = loader
            size = 2 * MIB
            host_segments.append({
                "device": -1, "address": addr, "total_size": size,
                "allocated_size": size if state != "inactive" else 0,
                "active_size": size if state != "inactive" else 0, "requested_size": size,
                "stream": 0, "segment_type": "small", "segment_pool_id": (0, 0), "is_expandable": False,
                "frames": frames,
                "blocks": [{"address": addr, "size": size, "requested_size": size, "state": state,
                            "frames": frames}]})
    segments = [{"device": 0, "address": cuda_seg, "total_size": 20 * MIB, "allocated_size": 2 * MIB,
                 "active_size": 2 * MIB, "requested_size": 2 * MIB, "stream": 0, "segment_type": "large",
                 "segment_pool_id": (0, 0), "is_expandable": False, "frames": [],
                 "blocks": [{"address": cuda_seg, "size": 2 * MIB, "requested_size": 2 * MIB,
                             "state": "active_allocated", "frames": stack("forward")},
                            {"address": cuda_seg + 2 * MIB, "size": 18 * MIB, "requested_size": 0,
                             "state": "inactive", "frames": []}]}]
    return {"segments": segments, "device_traces": [cuda], "allocator_settings": {},
            "external_annotations": [], "host_segments": host_segments, "host_traces": host}


def pools_snapshot():
    """A step captured in a CUDA graph, as PyTorch 2.14+ writes it: segments carry their
    ``segment_pool_id`` and trace entries their ``pool_id`` (``(0, 0)``: the default pool). The
    graph's own pool ``(1, 0)`` (a capture given no pool) keeps 40 MiB of static tensors with
    three free pieces of 8 MiB between them; the job's pool ``(0, 1)``
    (``torch.cuda.MemPool()``), 8 MiB of communication buffers; the default pool 4 MiB of a
    20 MiB segment, its free 16 MiB in one piece."""
    t = 1_771_267_191_000_000
    graph = [frame("capture_begin", "/usr/lib/python3/site-packages/torch/cuda/graphs.py", 122)]
    base = {(0, 0): 0x7F00_0000_0000, (1, 0): 0x7F10_0000_0000, (0, 1): 0x7F20_0000_0000}
    trace = []

    def entry(action, pool, offset, size, frames):
        return {"action": action, "addr": base[pool] + offset, "size": size, "stream": 0,
                "time_us": t + len(trace), "compile_context": "", "user_metadata": "",
                "pool_id": pool, "frames": frames}

    trace.append(entry("segment_alloc", (0, 0), 0, 20 * MIB, stack("forward")))
    trace.append(entry("alloc", (0, 0), 0, 4 * MIB, stack("forward")))
    trace.append(entry("segment_alloc", (1, 0), 0, 64 * MIB, stack("forward") + graph))
    layout = [(8, True), (8, False), (16, True), (8, False), (16, True), (8, False)]
    offset = 0
    for size, kept in layout:
        trace.append(entry("alloc", (1, 0), offset * MIB, size * MIB, stack("forward") + graph))
        if not kept:
            trace.append(entry("free_requested", (1, 0), offset * MIB, size * MIB, stack("forward") + graph))
            trace.append(entry("free_completed", (1, 0), offset * MIB, size * MIB, stack("forward") + graph))
        offset += size
    trace.append(entry("segment_alloc", (0, 1), 0, 8 * MIB, stack("step")))
    trace.append(entry("alloc", (0, 1), 0, 8 * MIB, stack("step")))

    def segment(pool, size, blocks):
        allocated = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
        return {"device": 0, "address": base[pool], "total_size": size, "allocated_size": allocated,
                "active_size": allocated, "requested_size": allocated, "stream": 0,
                "segment_type": "large", "segment_pool_id": pool, "is_expandable": False,
                "frames": [], "blocks": blocks}

    def block(pool, offset, size, active, frames):
        return {"address": base[pool] + offset, "size": size, "requested_size": size if active else 0,
                "state": "active_allocated" if active else "inactive", "frames": frames if active else []}

    graph_blocks = []
    offset = 0
    for size, kept in layout:
        graph_blocks.append(block((1, 0), offset * MIB, size * MIB, kept, stack("forward") + graph))
        offset += size
    segments = [
        segment((0, 0), 20 * MIB, [block((0, 0), 0, 4 * MIB, True, stack("forward")),
                                   block((0, 0), 4 * MIB, 16 * MIB, False, [])]),
        segment((1, 0), 64 * MIB, graph_blocks),
        segment((0, 1), 8 * MIB, [block((0, 1), 0, 8 * MIB, True, stack("step"))]),
    ]
    return {"segments": segments, "device_traces": [trace], "allocator_settings": {},
            "external_annotations": []}


def fx_snapshot():
    """A compiled model's snapshot as ``_dump_snapshot(augment_with_fx_traces=True)`` writes it
    (read from torch 2.15's ``_augment_frames``): the frame of the graph FX generated
    (``fx_generated_….py``) carries ``fx_node_op``, ``fx_node_name``, ``fx_node_target`` and
    ``fx_original_trace``, the stack its node was traced from. Inductor's kernel wrapper and
    Dynamo's frames around it; the model's code only behind the generated frame."""
    t = 1_771_267_191_000_000
    trace = ('  File "/work/model.py", line 30, in forward\n    x = self.block(x)\n'
             '  File "/work/model.py", line 12, in forward\n    return F.gelu(self.fc(x))\n')
    fx = {"name": "forward", "filename": "/tmp/fx_generated_7f3a9c.py", "line": 15,
          "fx_node_op": "call_function", "fx_node_name": "gelu", "fx_node_target": "aten.gelu.default",
          "fx_original_trace": trace}
    frames = CPP + [frame("call", "/tmp/torchinductor_u/ab/cabxyz.py", 120), fx,
                    frame("_fn", "/usr/lib/python3/site-packages/torch/_dynamo/eval_frame.py", 655),
                    PY["train"]]
    base = 0x7F00_0000_0000
    entries = [{"action": "segment_alloc", "addr": base, "size": 8 * MIB, "stream": 0, "time_us": t,
                "frames": frames, "compile_context": "", "user_metadata": "", "pool_id": (0, 0)}]
    for i in range(3):
        entries.append({"action": "alloc", "addr": base + i * MIB, "size": MIB, "stream": 0,
                        "time_us": t + 1 + i, "frames": frames, "compile_context": "[0/0]",
                        "user_metadata": "", "pool_id": (0, 0)})
    blocks = [{"address": base + i * MIB, "size": MIB, "requested_size": MIB, "state": "active_allocated",
               "frames": frames} for i in range(3)]
    blocks.append({"address": base + 3 * MIB, "size": 5 * MIB, "requested_size": 0, "state": "inactive",
                   "frames": []})
    segments = [{"device": 0, "address": base, "total_size": 8 * MIB, "allocated_size": 3 * MIB,
                 "active_size": 3 * MIB, "requested_size": 3 * MIB, "stream": 0, "segment_type": "large",
                 "segment_pool_id": (0, 0), "is_expandable": False, "frames": frames, "blocks": blocks}]
    return {"segments": segments, "device_traces": [entries], "allocator_settings": {},
            "external_annotations": []}


def with_host(s):
    """A snapshot as tidemark reads it: pinned host memory, when it holds anything, one more
    device after the CUDA ones."""
    host_traces, host_segments = s.get("host_traces") or [], s.get("host_segments") or []
    if not host_traces and not host_segments:
        return s, None
    traces = list(s.get("device_traces", []))
    host = max(len(traces), max((g["device"] + 1 for g in s["segments"]), default=0))
    traces += [[] for _ in range(host - len(traces))] + [host_traces]
    segments = s["segments"] + [dict(g, device=host) for g in host_segments]
    return dict(s, device_traces=traces, segments=segments), host


def generate(directory):
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for protocol in (2, 3, 4, 5):
        (directory / f"edge_p{protocol}.pickle").write_bytes(pickle.dumps(edge_snapshot(), protocol=protocol))
    (directory / "awaiting_free.pickle").write_bytes(pickle.dumps(edge_snapshot("active_awaiting_free"), protocol=4))
    (directory / "legacy_history.pickle").write_bytes(pickle.dumps(edge_snapshot(legacy_history=True), protocol=2))
    (directory / "minimal.pickle").write_bytes(pickle.dumps(edge_snapshot(with_optional=False), protocol=5))
    for protocol in (2, 3, 4, 5):
        (directory / f"shared_p{protocol}.pickle").write_bytes(pickle.dumps(shared_snapshot(), protocol=protocol))
        (directory / f"shared_last_p{protocol}.pickle").write_bytes(
            pickle.dumps(shared_snapshot(segments_first=False), protocol=protocol))
    (directory / "segments_list.pickle").write_bytes(pickle.dumps(shared_snapshot()["segments"], protocol=4))
    no_size = shared_snapshot()
    del no_size["segments"][0]["blocks"][2]["size"]
    (directory / "block_without_size.pickle").write_bytes(pickle.dumps(no_size, protocol=4))
    negative = shared_snapshot()
    negative["segments"][0]["blocks"][1]["address"] = -4096
    (directory / "negative_address.pickle").write_bytes(pickle.dumps(negative, protocol=4))
    (directory / "empty_trace.pickle").write_bytes(pickle.dumps({"segments": [], "device_traces": [[]]}, protocol=4))
    whole = pickle.dumps(edge_snapshot(), protocol=4)
    (directory / "truncated.pickle").write_bytes(whole[: len(whole) // 2])
    (directory / "a_list.pickle").write_bytes(pickle.dumps([1, 2, 3], protocol=4))
    (directory / "pinned_host.pickle").write_bytes(pickle.dumps(pinned_host_snapshot(), protocol=4))
    (directory / "pools.pickle").write_bytes(pickle.dumps(pools_snapshot(), protocol=4))
    (directory / "fx.pickle").write_bytes(pickle.dumps(fx_snapshot(), protocol=4))
    # Pinned host memory's lists of the wrong shape.
    (directory / "host_not_a_list.pickle").write_bytes(
        pickle.dumps(dict(shared_snapshot(), host_traces="none"), protocol=4))
    (directory / "host_not_entries.pickle").write_bytes(
        pickle.dumps(dict(shared_snapshot(), host_traces=[1, 2]), protocol=4))
    # A snapshot of PyTorch 2.14+ that did not record pinned memory: both keys, empty.
    (directory / "host_empty.pickle").write_bytes(
        pickle.dumps(dict(shared_snapshot(), host_segments=[], host_traces=[]), protocol=4))

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
    # Every memo reference to one huge object: a 20,000-frame list shared by 20,000 entries.
    huge = [frame(f"f{i}", "/work/deep.py", i + 1) for i in range(20_000)]
    t0 = 1_771_267_191_000_000
    one = [{"action": "alloc", "addr": 4096 * (i + 1), "size": 512, "stream": 0, "time_us": t0 + i,
            "frames": huge} for i in range(20_000)]
    (directory / "one_huge_object.pickle").write_bytes(
        pickle.dumps({"segments": [], "device_traces": [one]}, protocol=4))
    # 200,000 nested lists: the reader must not recurse.
    depth = 200_000
    (directory / "deep.pickle").write_bytes(b"\x80\x04" + b"(" * depth + b"l" * depth + b".")
    # The most devices and unknown actions a snapshot may hold (a trace entry keeps its device
    # and its action in a byte each), and one more of each: refused.
    def entry_of(action):
        return {"action": action, "addr": 4096, "size": 512, "stream": 0, "time_us": t0}

    for name, devices, actions in (("most_devices", 256, 1), ("too_many_devices", 257, 1),
                                   ("most_actions", 1, 246), ("too_many_actions", 1, 247)):
        traces = [[entry_of(f"action_{i}") for i in range(actions)] for _ in range(devices)]
        (directory / f"{name}.pickle").write_bytes(
            pickle.dumps({"segments": [], "device_traces": traces}, protocol=4))
    # A snapshot with a field of the wrong type.
    bad = edge_snapshot()
    bad["device_traces"][0][1]["size"] = "big"
    (directory / "wrong_type.pickle").write_bytes(pickle.dumps(bad, protocol=4))
    # Pools of the wrong shape: an entry's pool_id of three items, a segment's of a string.
    bad = pools_snapshot()
    bad["device_traces"][0][1]["pool_id"] = (0, 1, 2)
    (directory / "bad_pool_id.pickle").write_bytes(pickle.dumps(bad, protocol=4))
    bad = pools_snapshot()
    bad["segments"][1]["segment_pool_id"] = "graph"
    (directory / "bad_segment_pool_id.pickle").write_bytes(pickle.dumps(bad, protocol=4))


def fnv(frames):
    """FNV-1a (64 bits) of a stack: name, filename and line of each frame, each ended by a NUL."""
    h = 0xCBF29CE484222325
    for fr in frames or []:
        for part in (fr["name"], fr["filename"], str(fr["line"])):
            for b in part.encode() + b"\0":
                h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return str(h)


def block_frames(b):
    if "frames" in b:
        return b["frames"]
    history = b.get("history") or []
    return history[-1].get("frames", []) if history else []


def block_asked(b):
    """The bytes a block asked for, as the importer reads them: `requested_size`, else the last
    history entry's `real_size` (older snapshots), else the block's size."""
    history = b.get("history") or []
    return b.get("requested_size") or (history[-1].get("real_size", 0) if history else 0) or b["size"]


def facts(path):
    with open(path, "rb") as f:
        s = pickle.load(f)
    if isinstance(s, list):  # pickle.dump(torch.cuda.memory_snapshot()): the segments alone
        s = {"segments": s, "device_traces": []}
    s, host = with_host(s)
    actions = {}
    devices = max(len(s.get("device_traces", [])), max((g["device"] + 1 for g in s["segments"]), default=0))
    final = {}
    asked = {}  # the bytes the live blocks asked for, as the trace counts a block (else its size)
    for g in s["segments"]:
        a, r = final.get(g["device"], (0, 0))
        a += sum(b["size"] for b in g["blocks"] if b["state"] != "inactive")
        r += g["total_size"]
        final[g["device"]] = (a, r)
        asked[g["device"]] = asked.get(g["device"], 0) + sum(
            block_asked(b) for b in g["blocks"] if b["state"] != "inactive")
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
        ea, er = asked.get(device, 0), final.get(device, (0, 0))[1]
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
    # Every block and every trace entry, with a digest of its frames: any object read from the
    # wrong place shows here.
    blocks = []
    live = {}
    for g in s["segments"]:
        nxt = g.get("address", 0)
        for b in g["blocks"]:
            history = b.get("history") or []
            addr = b.get("address", history[-1].get("addr") if history and "addr" in history[-1] else nxt)
            nxt = addr + b["size"]
            state = {"active_awaiting_free": "active_pending_free"}.get(b["state"], b["state"])
            blocks.append([g["device"], str(addr), b["size"], state, len(block_frames(b)), fnv(block_frames(b))])
            if b["state"] != "inactive":
                live[str(g["device"])] = live.get(str(g["device"]), 0) + b["size"]
    entries = []
    for device, trace in enumerate(s.get("device_traces", [])):
        for e in trace:
            entries.append([device, e["action"], str(e.get("addr", 0)), e.get("size", 0), str(e.get("stream", 0)),
                            e.get("time_us", 0), len(e.get("frames", [])), fnv(e.get("frames")),
                            str(e.get("device_free") or 0),
                            e.get("compile_context") if e.get("compile_context") not in (None, "", "N/A") else "",
                            list(e.get("pool_id") or (0, 0))])
    return {
        "file": str(path),
        "host": host,
        "block_list": blocks,
        "entry_list": entries,
        "live_bytes": live,
        "annotations": len(s.get("external_annotations", [])),
        "segments": len(s["segments"]),
        "segment_pools": [list(g.get("segment_pool_id") or (0, 0)) for g in s["segments"]],
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
    """N trace entries, ~20 frames each from 500 call sites, shared the way PyTorch shares them:
    each allocation's frames list is one object, handed to its alloc entry, to the entries that
    free it and, while it is alive at the end, to its block; frame dicts are shared by every
    stack that passes through them. Segments come first, as PyTorch writes them."""
    rng = random.Random(7)
    pool = [frame(f"fn_{i}", f"/work/pkg/module_{i % 40}.py", 10 + i) for i in range(300)]
    sites = [CPP + rng.sample(pool, 18) for _ in range(500)]
    t = 1_771_267_191_000_000
    trace = []
    live = []
    addr = 0x7F00_0000_0000
    for i in range(n):
        if live and (len(live) > 200 or rng.random() < 0.45):
            a, size, frames = live.pop(rng.randrange(len(live)))
            for action in ("free_requested", "free_completed"):
                trace.append({"action": action, "addr": a, "size": size, "stream": 0, "time_us": t + i,
                              "frames": frames, "compile_context": "N/A", "user_metadata": ""})
        else:
            frames = list(sites[rng.randrange(len(sites))])  # one list object per allocation
            size = 512 * rng.randrange(1, 4096)
            addr += size
            live.append((addr, size, frames))
            trace.append({"action": "alloc", "addr": addr, "size": size, "stream": 0, "time_us": t + i,
                          "frames": frames, "compile_context": "N/A", "user_metadata": ""})
    blocks = [{"address": a, "size": size, "requested_size": size, "state": "active_allocated", "frames": frames}
              for a, size, frames in sorted(live)]
    total = sum(b["size"] for b in blocks)
    segments = [{"device": 0, "address": blocks[0]["address"] if blocks else 0, "total_size": total,
                 "allocated_size": total, "stream": 0, "segment_type": "large", "blocks": blocks}]
    snapshot = {"segments": segments, "device_traces": [trace], "allocator_settings": {}}
    with open(path, "wb") as f:
        pickle.dump(snapshot, f, protocol=4)


def pair_snapshot(sites, temporary, device=0):
    """One device, one 128 MiB segment: each site's blocks (allocated in the trace, alive at the
    snapshot), then a temporary block allocated and freed last (so the trace's peak is what is
    alive plus it)."""
    t = 1_771_267_191_000_000
    seg = 0x7F00_0000_0000
    total = 128 * MIB
    lib = frame("einsum", "/venv/lib/python3.12/site-packages/torch/functional.py", 407)
    wrapper = frame("__torch_function__", "/work/tensors.py", 10)
    call = frame("_call_impl", "/venv/lib/python3.12/site-packages/torch/nn/modules/module.py", 1750)
    loop = frame("<module>", "/work/train.py", 12)
    trace = [{"action": "segment_alloc", "addr": seg, "size": total, "stream": 0, "time_us": t,
              "frames": []}]
    blocks = []
    addr = seg
    dt = 1
    for (name, line), count, size in sites:
        user = frame(name, "/work/train.py", line)
        frames = CPP + [lib, wrapper, user, call, loop]
        for _ in range(count):
            trace.append({"action": "alloc", "addr": addr, "size": size, "stream": 0,
                          "time_us": t + dt, "frames": frames})
            blocks.append({"address": addr, "size": size, "requested_size": size,
                           "state": "active_allocated", "frames": frames})
            addr += size
            dt += 1
    tmp = frames = CPP + [frame("forward", "/work/model.py", 42), loop]
    for action in ("alloc", "free_requested", "free_completed"):
        trace.append({"action": action, "addr": addr, "size": temporary, "stream": 0,
                      "time_us": t + dt, "frames": tmp})
        dt += 1
    blocks.append({"address": addr, "size": seg + total - addr, "requested_size": 0,
                   "state": "inactive", "frames": []})
    segment = {"device": device, "address": seg, "total_size": total, "allocated_size": addr - seg,
               "active_size": addr - seg, "requested_size": addr - seg, "stream": 0,
               "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
               "frames": [], "blocks": blocks}
    return {"segments": [segment], "device_traces": [[]] * device + [trace]}


def pair(directory):
    """before: steady 8 MiB, remember 3 MiB, old 2 MiB, a 16 MiB temporary; after: steady
    8 MiB, remember 15 MiB (+12 MiB), fresh 4 MiB, a 32 MiB temporary."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    before = [(("steady", 20), 2, 4 * MIB), (("remember", 88), 3, MIB), (("old", 50), 1, 2 * MIB)]
    after = [(("steady", 20), 2, 4 * MIB), (("remember", 88), 5, 3 * MIB), (("fresh", 60), 2, 2 * MIB)]
    for name, sites, temporary in (("before", before, 16 * MIB), ("after", after, 32 * MIB)):
        with open(out / f"{name}.pickle", "wb") as f:
            pickle.dump(pair_snapshot(sites, temporary), f, protocol=4)
    with open(out / "other_device.pickle", "wb") as f:
        pickle.dump(pair_snapshot(after, 32 * MIB, device=1), f, protocol=4)


def owner(f):
    """Who wrote a Python frame: 0 the user, 1 an installed package, 2 PyTorch (and the code
    Inductor generates), Python's standard library, `<…>` code or a `__torch_function__` wrapper."""
    path = f["filename"].replace("\\", "/")
    name = f["name"]
    torch = "/torch/" in path or path.startswith("torch/") or "/torchinductor_" in path
    if (torch or path.startswith("<") or standard_library(path)
            or "__torch_function__" in name or "__torch_dispatch__" in name):
        return 2
    if "/site-packages/" in path or "/dist-packages/" in path:
        return 1
    return 0


def standard_library(path):
    """Under `lib/python3.x/` (or `lib64/`), or a Windows installation's `Lib/`, and not in an
    installed package."""
    if "/site-packages/" in path or "/dist-packages/" in path:
        return False
    parts = path.split("/")
    for a, b in zip(parts, parts[1:]):
        version = b[len("python"):] if b.startswith("python") else ""
        if (a in ("lib", "lib64") and version and all(c.isdigit() or c == "." for c in version)) or a == "Lib":
            return True
    return False


def site(frames):
    """The allocation site as every face of tidemark names it: the first Python frame of the
    user's code, else of an installed package, else the first Python frame; "C++ only" without
    one; "allocated before the history was recorded" without frames; spelled by `frame_text`."""
    frames = frames or []
    pick = None
    for f in frames:
        if not f["filename"].endswith(".py"):
            continue
        if pick is None or owner(f) < owner(pick):
            pick = f
            if owner(f) == 0:
                break
    if pick is None:
        return "C++ only" if frames else "allocated before the history was recorded"
    return frame_text(pick)


def sites(path):
    """Live bytes and blocks at the snapshot per device and per site: the segments' blocks that
    are not inactive, as pickle.load reads them."""
    with open(path, "rb") as f:
        snapshot = pickle.load(f)
    per_device, per_site = {}, {}
    for segment in snapshot["segments"]:
        d = str(segment["device"])
        for block in segment["blocks"]:
            if block["state"] == "inactive":
                continue
            dev = per_device.setdefault(d, [0, 0])
            dev[0] += block["size"]
            dev[1] += 1
            key = f"{d} {site(block.get('frames'))}"
            one = per_site.setdefault(key, [0, 0])
            one[0] += block["size"]
            one[1] += 1
    return {"devices": per_device, "sites": per_site}


def moments(path, device, start, stop):
    """A plain replay of one device's trace to step `stop`: a block is its address from its
    alloc until a free that ends it (`free_completed`, or the older `free`)."""
    with open(path, "rb") as f:
        snapshot = pickle.load(f)
    trace = snapshot["device_traces"][device]
    alive = {}
    for k, entry in enumerate(trace[:stop]):
        if entry["action"] == "alloc":
            alive[entry["addr"]] = (k, entry)
        elif entry["action"] in ("free_completed", "free"):
            alive.pop(entry["addr"], None)
    kept = [e for k, e in alive.values() if k >= start]
    per_site = {}
    for e in kept:
        one = per_site.setdefault(site(e.get("frames")), [0, 0])
        one[0] += e["size"]
        one[1] += 1
    return {
        "bytes": sum(e["size"] for e in kept),
        "blocks": len(kept),
        "sites": per_site,
    }


def frame_text(f):
    """A frame as tidemark names it everywhere: `name (dir/file:line)`, the file by the last two
    parts of its path."""
    parts = f["filename"].replace("\\", "/").split("/")
    short = "/".join(parts[-2:]) if len(parts) >= 2 and parts[-2] else parts[-1]
    if 0 < f["line"] < 2**32 and short:
        return f"{f['name']} ({short}:{f['line']})"
    if short in ("", "??"):
        return f["name"]
    return f"{f['name']} ({short})"


def flame(path, device, step):
    """A plain replay of one device's trace to `step`; the blocks alive then by their whole
    stack, outermost first."""
    with open(path, "rb") as f:
        snapshot = pickle.load(f)
    alive = {}
    for entry in snapshot["device_traces"][device][:step]:
        if entry["action"] == "alloc":
            alive[entry["addr"]] = entry
        elif entry["action"] in ("free_completed", "free"):
            alive.pop(entry["addr"], None)
    out = {}
    for e in alive.values():
        key = ";".join(frame_text(f).replace(";", ":") for f in reversed(e["frames"]))
        out[key] = out.get(key, 0) + e["size"]
    return out


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if command == "generate":
        generate(sys.argv[2])
    elif command == "facts":
        for p in sys.argv[2:]:
            print(json.dumps(facts(p)))
    elif command == "random":
        generate_random(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif command == "big":
        big(sys.argv[2], int(sys.argv[3]))
    elif command == "pair":
        pair(sys.argv[2])
    elif command == "flame":
        print(json.dumps(flame(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))))
    elif command == "moments":
        print(json.dumps(moments(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))))
    elif command == "sites":
        for p in sys.argv[2:]:
            print(json.dumps(sites(p)))
    else:
        print(__doc__)
        sys.exit(2)
