#!/usr/bin/env python3
"""Reads a tidemark recording with nothing but the `msgpack` package (pip install msgpack).

    python3 read_recording.py run.msgpack          # prints a JSON summary

This is the reader collector/FORMAT.md describes, in Python: use it as a starting point for
your own scripts (pandas, notebooks). It handles format 1.x.
"""
import json
import sys

import msgpack

MAGIC = b"TIDEMARK"


def unzigzag(v):
    return (v >> 1) ^ -(v & 1)


def decode_ints(ints, n):
    """[first, order (1 or 2), scale, data]: data holds n - 1 zig-zag LEB128 varints."""
    first, order, scale, data = ints
    if n == 0:
        return []
    out = [first]
    at, value, delta = 0, first, 0
    for _ in range(n - 1):
        raw, shift = 0, 0
        while True:
            byte = data[at]
            at += 1
            raw |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                break
        stored = unzigzag(raw) * scale
        delta = delta + stored if order == 2 else stored
        value = (value + delta) % (1 << 64)
        out.append(value)
    return out


def read(path):
    """Yields (kind, body) for every record but series declarations; chunks are decoded into
    {"times": [...], "columns": [{"series": {...}, "values": [... or None]}]}."""
    series = []
    with open(path, "rb") as f:
        if f.read(8) != MAGIC:
            raise ValueError(f"not a tidemark recording: {path}")
        for kind, body in msgpack.Unpacker(f, raw=False, strict_map_key=False):
            if kind == "header" and body["format_major"] > 1:
                raise ValueError(f"made by a newer tidemark: {path}")
            if kind == "series":
                series.append(body)
                continue
            if kind == "chunk":
                n = body["n"]
                columns = []
                for series_id, ints, bits in body["c"]:
                    values = decode_ints(ints, n)
                    if bits is not None:
                        values = [v if bits[i // 8] >> (i % 8) & 1 else None for i, v in enumerate(values)]
                    columns.append({"series": series[series_id], "values": values})
                body = {"times": decode_ints(body["t"], n), "columns": columns}
            yield kind, body


def summary(path):
    out = {"series": {}, "records": {}}
    for kind, body in read(path):
        out["records"][kind] = out["records"].get(kind, 0) + 1
        if kind in ("header", "end"):
            out[kind] = body
        elif kind == "chunk":
            for column in body["columns"]:
                key = column["series"]
                name = "/".join(str(key.get(k)) for k in ("kind", "device", "pid"))
                s = out["series"].setdefault(name, {"samples": 0, "last": None, "last_t_ns": None})
                for t, v in zip(body["times"], column["values"]):
                    if v is not None:
                        s["samples"] += 1
                        s["last"], s["last_t_ns"] = v, t
    return out


if __name__ == "__main__":
    json.dump(summary(sys.argv[1]), sys.stdout, indent=1, sort_keys=True)
    print()
