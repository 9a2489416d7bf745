"""Shared by the corpus jobs: host memory that behaves exactly (fresh pages, given back on close)."""
import mmap
import time


def allocate(mib):
    block = mmap.mmap(-1, mib << 20)
    block.write(b"x" * (mib << 20))  # touch every page: resident now
    return block


def work(seconds=0.004):
    time.sleep(seconds)
