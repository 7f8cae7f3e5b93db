"""Chrome trace (Trace Event Format) of a graph-level simulation, viewable in Perfetto or
chrome://tracing.

One process per simulated board; one track (thread) per stream: ``kernels`` (each node's whole
latency, back to back: the model runs on one stream), ``launch`` (the launch overhead of each of
the node's kernels), then one track per compute unit (``cube``, ``vector``, ``simd`` ...) and per
DMA engine or cache link (``dma mte2``, ``dma dram->l3`` ...). A unit/engine event starts after
the node's launch and lasts the unit's busy time, so the durations on a track add up to that
unit's busy time over the whole model. Times are in microseconds (``"ts"``, ``"dur"``), events are
complete events (``"ph": "X"``), track names are metadata events (``"ph": "M"``).
"""
from __future__ import annotations

import json
import os

KERNELS, LAUNCH = "kernels", "launch"


def chrome_trace(rows: list[dict], board: str, *, title: str = "") -> dict:
    """The trace document of simulated ``rows`` (each with ``node``, ``op``, ``start_s``,
    ``latency_s``, ``launch_s`` and ``busy_s`` {track: seconds})."""
    tracks = [KERNELS, LAUNCH]
    for r in rows:
        for t in r.get("busy_s", {}):
            if t not in tracks:
                tracks.append(t)
    tid = {t: i + 1 for i, t in enumerate(tracks)}
    pid = 1
    ev = [{"ph": "M", "pid": pid, "tid": 0, "name": "process_name",
           "args": {"name": f"{title or 'edgeops simulate'} on {board}"}}]
    for t, i in tid.items():
        ev.append({"ph": "M", "pid": pid, "tid": i, "name": "thread_name", "args": {"name": t}})
        ev.append({"ph": "M", "pid": pid, "tid": i, "name": "thread_sort_index",
                   "args": {"sort_index": i}})
    us = 1e6
    for r in rows:
        start, lat, launch = r["start_s"], r["latency_s"], r.get("launch_s", 0.0)
        args = {k: r[k] for k in ("op", "model", "offchip_bytes", "bound", "decomposition", "tiling")
                if r.get(k) is not None}
        if lat > 0:
            ev.append({"ph": "X", "pid": pid, "tid": tid[KERNELS], "name": r["node"], "cat": r["model"],
                       "ts": start * us, "dur": lat * us, "args": args})
        if launch > 0:
            ev.append({"ph": "X", "pid": pid, "tid": tid[LAUNCH], "name": r["node"], "cat": "launch",
                       "ts": start * us, "dur": launch * us,
                       "args": {"launches": r.get("launches", 1)}})
        for t, busy in r.get("busy_s", {}).items():
            if busy > 0:
                ev.append({"ph": "X", "pid": pid, "tid": tid[t], "name": r["node"], "cat": t,
                           "ts": (start + launch) * us, "dur": busy * us})
    return {"traceEvents": ev, "displayTimeUnit": "ns",
            "otherData": {"board": board, "generator": "edgeops.simulator.trace"}}


def track_busy_s(doc: dict) -> dict[str, float]:
    """Seconds of ``X`` events per track name (the inverse of :func:`chrome_trace`, for checks)."""
    names = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    out: dict[str, float] = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "X":
            n = names[e["tid"]]
            out[n] = out.get(n, 0.0) + e["dur"] / 1e6
    return out


def write_trace(path, doc: dict) -> None:
    with open(os.fspath(path), "w") as f:
        json.dump(doc, f)
