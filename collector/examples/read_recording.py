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
    """[first, order (0, 1 or 2), scale, data]: data holds n - 1 zig-zag LEB128 varints; order 0
    (in `allocators` and `phases` records) means every value is `first`."""
    first, order, scale, data = ints
    if n == 0:
        return []
    if order == 0:
        return [first] * n
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


def decode_optional(column, n):
    """nil (every value absent), or [ints, validity bits or nil]."""
    if column is None:
        return [None] * n
    ints, bits = column
    values = decode_ints(ints, n)
    if bits is None:
        return values
    return [v if bits[i // 8] >> (i % 8) & 1 else None for i, v in enumerate(values)]


def bit(bits, i):
    return bool(bits[i // 8] >> (i % 8) & 1)


ALLOCATOR_FIELDS = ("device", "allocated", "reserved", "peak", "active", "inactive_split", "retries", "ooms")


def expand(kind, body):
    """A 1.3 batch (`allocators`, `phases`) as the `allocator` and `phase` records it holds."""
    n = body["n"]
    t = decode_ints(body["t"], n)
    pid = decode_ints(body["pid"], n)
    rank = decode_optional(body["rank"], n)
    if kind == "allocators":
        columns = {f: decode_ints(body[f], n) for f in ALLOCATOR_FIELDS}
        for i in range(n):
            record = {"t_ns": t[i], "pid": pid[i], "rank": rank[i]}
            record.update({f: columns[f][i] for f in ALLOCATOR_FIELDS})
            yield "allocator", record
    else:
        phase = decode_ints(body["phase"], n)
        optional = {f: decode_optional(body[f], n) for f in ("step", "host_heap", "host_rss")}
        for i in range(n):
            record = {
                "t_ns": t[i],
                "edge": "end" if bit(body["end"], i) else "begin",
                "phase": body["names"][phase[i]],
                "pid": pid[i],
                "rank": rank[i],
            }
            record.update({f: optional[f][i] for f in optional})
            yield "phase", record


def read(path):
    """Yields (kind, body) for every record but series declarations; chunks are decoded into
    {"times": [...], "columns": [{"series": {...}, "values": [... or None]}]}, and 1.3's batches
    into one `allocator` or `phase` record per entry, as 1.2 and before wrote them."""
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
            if kind in ("allocators", "phases"):
                yield from expand(kind, body)
                continue
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
