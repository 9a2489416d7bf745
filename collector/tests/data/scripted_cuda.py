"""The allocator's path without a GPU: `install(torch)` makes the job's `torch.cuda` say that CUDA
is initialised and report, as the allocator's allocated bytes, the C heap in use (glibc's
mallinfo2: where CPU tensors live). The probe then sends allocator numbers at every edge, as for a
GPU job, and they follow the job's real tensors. The tests write this file next to a job that
imports it.
"""
import ctypes
import os
import time


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd",
            "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
        )
    ]


def install(torch):
    mallinfo2 = ctypes.CDLL(None).mallinfo2
    mallinfo2.restype = _Mallinfo2
    # SCRIPTED_CUDA_READ_S: how long reading the statistics takes (a GPU's are slower to read).
    read_s = float(os.environ.get("SCRIPTED_CUDA_READ_S", "0"))

    def stats(device=None):
        if read_s:
            time.sleep(read_s)
        info = mallinfo2()
        in_use = info.uordblks + info.hblkhd
        return {
            "allocated_bytes": {"all": {"current": in_use, "peak": in_use}},
            "reserved_bytes": {"all": {"current": info.arena + info.hblkhd}},
            "active_bytes": {"all": {"current": in_use}},
            "inactive_split_bytes": {"all": {"current": 0}},
            "num_alloc_retries": 0,
            "num_ooms": 0,
        }

    torch.cuda.is_initialized = lambda: True
    torch.cuda.is_available = lambda: True
    torch.cuda.current_device = lambda: 0
    torch.cuda.device_count = lambda: 1
    torch.cuda.memory_stats_as_nested_dict = stats
    torch.cuda.reset_peak_memory_stats = lambda device=None: None
