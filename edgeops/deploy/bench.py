"""Benchmark the package a board runs: :func:`bench` here (through a transport), :func:`bench_here`
on the board (``python -m edgeops.deploy.board bench ROOT``, a fresh process each time).

Figures: cold start (from the agent process's start: imports, session creation, the first run
with its Numba compiles or cache loads, counted), latency p50/p90/p99 over ``runs`` warm runs,
throughput, peak RSS of the process (under qemu-user it includes the emulator's own memory),
and per-node times from ONNX Runtime's profiler (``SessionOptions.enable_profiling``; its JSON
trace's ``Node`` events) mapped back to the manifest's placement table, next to the simulator's
per-node prediction for the board the package was compiled for.
"""
from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

from edgeops.env import switch
from edgeops.errors import DeployError


def bench(pkg, to, *, runs: int = 20, profile_runs: int = 3) -> dict:
    """Bench the package ``pkg`` (path) installed on the board at ``to``; the ``--json`` doc."""
    from edgeops import package
    from edgeops.deploy.transports import open_transport
    want = package.load(pkg, check_kernels=False).manifest["manifest_sha256"]
    t = open_transport(to)
    doc = t.board("bench", t.root, "--runs", str(runs), "--profile-runs", str(profile_runs))[1]
    if doc.get("manifest_sha256") != want:
        raise DeployError(f"the board at {t.uri} runs {doc.get('installed_as')}, not {pkg}; "
                          f"deploy it first (edgeops deploy {pkg} --to {t.uri})")
    return doc | {"to": t.uri}


def numba_stats() -> dict:
    """Specialisations compiled and loaded from the disk cache so far in this process."""
    import gc
    import sys
    if "numba" not in sys.modules:
        return {"compiled": 0, "loaded_from_cache": 0}
    from numba.core.dispatcher import Dispatcher
    hits = misses = 0
    for o in gc.get_objects():
        try:
            # functions without cache=True count every compile as a miss: not what "warm" means
            if not isinstance(o, Dispatcher) or type(o._cache).__name__ == "NullCache":
                continue
        except ReferenceError:      # a dead weakref proxy among the objects
            continue
        st = o.stats
        hits += sum(st.cache_hits.values())
        misses += sum(st.cache_misses.values())
    return {"compiled": misses, "loaded_from_cache": hits}


def _pct(xs, q) -> float:
    s = sorted(xs)
    k = (len(s) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def bench_here(pkg_dir, *, runs: int = 20, profile_runs: int = 3, started=None) -> dict:
    """On the board: the bench document of the package at ``pkg_dir``. ``started``: the
    ``perf_counter`` value at the process's start (cold start counts from there)."""
    import resource
    import numpy as np
    from edgeops import package
    t0 = started if started is not None else time.perf_counter()
    p = package.load(pkg_dir)
    ins, _ = p.reference()
    t_load = time.perf_counter()
    sess = p.session()
    names = [o.name for o in sess.get_outputs()]
    t_sess = time.perf_counter()
    sess.run(names, ins)
    t_first = time.perf_counter()
    cold = numba_stats()
    lat = []
    for _ in range(max(1, runs)):
        a = time.perf_counter()
        sess.run(names, ins)
        lat.append(time.perf_counter() - a)
    first_in = next(iter(ins.values()))
    batch = int(first_in.shape[0]) if np.ndim(first_in) else 1
    mean = statistics.fmean(lat)
    nodes = profile_nodes(p, ins, profile_runs)
    return {
        "installed_as": Path(pkg_dir).name, "manifest_sha256": p.manifest["manifest_sha256"],
        "board": p.manifest["board"]["name"], "runs": len(lat),
        "cold_start": {"since_process_start_s": t_first - t0, "import_and_load_s": t_load - t0,
                       "session_s": t_sess - t_load, "first_run_s": t_first - t_sess,
                       "numba": cold},
        "latency_s": {"p50": _pct(lat, 50), "p90": _pct(lat, 90), "p99": _pct(lat, 99),
                      "mean": mean, "min": min(lat), "max": max(lat)},
        "throughput": {"inferences_per_s": 1.0 / mean, "samples_per_s": batch / mean,
                       "batch": batch},
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "predicted_latency_s": p.manifest["predicted"]["latency_s"],
        "nodes": nodes["rows"], "unmapped_nodes": nodes["unmapped"],
        "profile_runs": nodes["runs"],
        "under_qemu": switch("EDGEOPS_UNDER_QEMU", False),
    }


def profile_nodes(p, feeds: dict, runs: int = 3) -> dict:
    """ONNX Runtime's per-node kernel times (median over ``runs`` runs after one warm-up) by
    placement row: ``rows`` (every row, measured None when the profiler saw no such node) and
    ``unmapped`` (nodes ONNX Runtime made itself, e.g. by its own fusions)."""
    import onnxruntime as ort
    from edgeops.ort import regions, session
    runs = max(1, runs)
    with tempfile.TemporaryDirectory() as d:
        so = ort.SessionOptions()
        so.enable_profiling = True
        so.profile_file_prefix = str(Path(d) / "edgeops-bench")
        p.apply_wait_policy()
        # ONNX Runtime sees a region as one node: time its inner nodes (from before the session
        # is made, so its regions stay on the Python path instead of becoming native programs)
        regions.timing = {}
        try:
            sess = session(p.model_path, target="reference",
                           threads=p.manifest["runtime"]["threads"], session_options=so)
            names = [o.name for o in sess.get_outputs()]
            for _ in range(runs + 1):
                sess.run(names, feeds)
            inner = regions.timing
        finally:
            regions.timing = None
        trace = json.loads(Path(sess.end_profiling()).read_text())
    return map_profile(trace, p.manifest["placement"], runs, inner)


def map_profile(trace: list, placement: list, runs: int, inner: dict | None = None) -> dict:
    """Per placement row, the median per-run time of the profiler's ``<node>_kernel_time``
    events (the first occurrence of each node, the warm-up, dropped). ``inner``: {node: [s per
    run]} of nodes inside regions (:mod:`edgeops.ort.regions`), timed by the region itself; the
    region's own event stays in ``unmapped`` (its time minus its nodes' is the bridge crossing)."""
    times: dict[str, list] = {n: list(ts) for n, ts in (inner or {}).items()}
    ops: dict[str, str] = {n: "in region" for n in times}
    for ev in trace:
        if ev.get("cat") != "Node" or not ev.get("name", "").endswith("_kernel_time"):
            continue
        node = ev["name"][:-len("_kernel_time")]
        times.setdefault(node, []).append(ev["dur"] * 1e-6)
        ops[node] = ev.get("args", {}).get("op_name", "?")
    times = {n: ts[1:] if len(ts) > 1 else ts for n, ts in times.items()}
    owner = {}
    for r in placement:
        for n in [r["node"], *(r.get("fused") or [])]:
            owner.setdefault(n, r["node"])
    per_row: dict[str, float] = {}
    unmapped = []
    for node, ts in times.items():
        row = owner.get(node) or next((o for n, o in owner.items() if node.startswith(n)), None)
        if row is None:
            unmapped.append({"node": node, "op": ops[node], "measured_s": statistics.median(ts)})
        else:
            per_row[row] = per_row.get(row, 0.0) + statistics.median(ts)
    rows = []
    for r in placement:
        m, pred = per_row.get(r["node"]), r.get("latency_s")
        rows.append({"node": r["node"], "op": r["op"], "where": r["where"],
                     "kernel": r.get("kernel"), "measured_s": m, "predicted_s": pred,
                     "measured_over_predicted": m / pred if m and pred else None})
    return {"rows": rows, "unmapped": unmapped, "runs": runs}
