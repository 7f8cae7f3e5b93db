"""Calibrated per-node costs: the calibration file's reader and model (docs/notes/calibration.md).

A calibration (written by ``edgeops calibrate``, :mod:`edgeops.pipeline.calibrate`) holds, per
(side, kernel family, dtype, threads), a fitted cost::

    seconds = call_s * calls + flops / (peak(threads) * comp_eff)
              + activation bytes / (bandwidth * bw_eff) + weight bytes / (bandwidth * weight_bw_eff)

``side``: ``edgeops`` (the kernel through ONNX Runtime's custom-op bridge, as a lowered node runs
alone), ``kernel`` (its dispatch entry alone: what a node costs inside a region) or ``ort`` (ONNX
Runtime's own kernels for the original node(s); ``calls`` counts the ORT kernels it runs,
:func:`edgeops.simulator.peer.peer_passes`). ``peak`` and ``bandwidth`` are the board's (the rate
of the unit at ``threads`` cores and the off-chip bandwidth), so the efficiencies are fractions of
what the board file states and carry to another board; ``call_s`` scales with the clock.
A family with too few measured shapes falls back to its class (gemm, stream, view), then to the
whole side. Each entry carries its band: the 90th percentile of |measured/predicted - 1| over
the rows it was fitted on.

This module reads and applies calibration files; it never measures (the pipeline does) and
imports the core, boards and the simulator only.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgeops.errors import EdgeOpsError

FORMAT = 2     # 2: weight bytes apart from activation bytes
SIDES = ("edgeops", "kernel", "ort")
CLASSES = ("gemm", "stream", "view")
MIN_ROWS = 4            # a family needs this many measured shapes for its own fit
BAND_FLOOR = 0.05       # two identical one-node sessions differ this much (A/A)
BAND_CAP = 3.0
# no calibration for the target at all (docs/notes/calibration.md: host, before calibration,
# predicted 0.18-0.30x of measured for edgeops rows, 0.81-1.29x for ONNX Runtime's)
DEFAULT_BAND = {"edgeops": 3.0, "kernel": 3.0, "ort": 0.3}
GEMM_OPS = {"Conv", "ConvBnAct", "MatMul", "Gemm", "ConvTranspose", "MatMulInteger",
            "QLinearConv", "QLinearMatMul", "ConvInteger", "SwiGLU", "QConvBnAct", "QMatMul",
            "QGemm", "Attention", "MultiHeadAttention"}
VIEW_OPS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout", "Constant",
            "ConstantOfShape", "Shape", "Size"}


class CalibrationError(EdgeOpsError):
    """A calibration file that cannot be read or used."""


def directory() -> Path:
    from edgeops import cache
    return cache.root() / "calibration"


def path_for(board_name: str, root: Path | None = None) -> Path:
    return (root or directory()) / f"{board_name}.json"


def op_class(op: str) -> str:
    op = op.split("::")[-1]
    if op in VIEW_OPS:
        return "view"
    return "gemm" if op in GEMM_OPS else "stream"


def ort_family(node) -> str:
    """The family of ONNX Runtime's kernel for ``node``: its op, and for convolutions which of
    MLAS's paths runs it (depthwise, pointwise, general)."""
    op = node.op_type
    if op in ("Conv", "ConvBnAct"):
        try:
            a = node.attrs
            k = tuple(a.get("kernel_shape") or node.input_shapes[1][2:])
            if int(a.get("group", 1)) > 1:
                return f"{op}/dw"
            return f"{op}/1x1" if all(int(d) == 1 for d in k) else f"{op}/kxk"
        except Exception:  # noqa: BLE001  (attributes or shapes unknown: the op alone)
            return op
    return op


def node_dtype(node) -> str:
    for d in getattr(node, "input_dtypes", []) or []:
        if d:
            return {"uint8": "int8"}.get(d, d)
    return "fp32"


# ---- the board's rates and the features of a node ------------------------------------------

def rates(board, dtype: str, threads: int | None):
    """(gemm peak flop/s, stream peak flop/s, off-chip bytes/s, threads used) of a CPU or GPU
    board at ``threads`` cores (the peer model's, :func:`edgeops.simulator.peer._rates`)."""
    from edgeops.simulator.peer import _rates
    return _rates(board, dtype if dtype in ("fp32", "fp16", "int8") else "fp32", threads)


def _tbytes(t) -> int:
    return 0 if t is None or t.nbytes is None else int(t.nbytes)


def features(node, side: str, board, threads: int | None, fixed: dict | None = None) -> np.ndarray:
    """[calls, seconds at the board's peak, activation bytes and constant (weight) bytes each
    at its bandwidth] of ``node`` (an ``edgeops.graph`` node, fused or not) for ``side``: the
    model is their weighted sum. Weights apart: a kernel may pack them per call (neon's GEMMs)
    or once per session (ONNX Runtime's), at rates unlike streaming activations. ``fixed``:
    {"<dtype>|t<N>": [gemm, stream, bandwidth]} to use instead of the board's (a calibration's
    own board: ``host``'s figures are measured and may have been measured again since)."""
    dt = node_dtype(node)
    got = (fixed or {}).get(f"{dt}|t{threads}")
    gemm, stream, bw = got if got else rates(board, dt, threads)[:3]
    consts = sum(_tbytes(t) for t in node.input_tensors if t is not None and t.is_const)
    if side == "ort":
        from edgeops.simulator.peer import peer_passes
        passes = peer_passes(node)
        comp = sum(p.flops / (gemm if p.kind == "gemm" else stream) for p in passes)
        act = max(sum(p.bytes for p in passes) - consts, 0)
        return np.array([float(len(passes)), comp, act / bw, consts / bw])
    peak = gemm if op_class(node.op_type) == "gemm" else stream
    ins = [t for t in node.input_tensors if t is not None and not t.is_const]
    outs = [t for t in node.output_tensors[:1] if t is not None]
    act = sum(_tbytes(t) for t in ins + outs)
    if side == "edgeops":     # the bridge copies each activation in and the output out
        act *= 2
    return np.array([1.0, float(node.flops or 0) / peak, act / bw, consts / bw])


# ---- caches: what a node reads from off-chip memory, alone and inside a model ----------------

def llc_bytes(board) -> float:
    """The board's last on-chip cache level: its largest chip-wide memory, else the largest
    per-core one times the cores."""
    on = [m for m in board.memories if not m.offchip]
    chip = [m.size_bytes for m in on if m.scope == "chip"]
    if chip:
        return float(max(chip))
    cores = {c.name: int(c.count) for c in board.cores}
    return float(max((m.size_bytes * cores.get(m.scope, 1) for m in on), default=0))


def miss(distance: float, cache: float) -> float:
    """The share of a tensor's bytes read from off-chip memory when ``distance`` bytes were
    touched since it was last (a cache with random replacement of ``cache`` bytes: none below
    the cache, half at twice it)."""
    return 0.0 if distance <= cache or distance <= 0 else 1.0 - cache / distance


def _reads(node) -> list:
    return [t for t in node.input_tensors if t is not None]


def footprint(node) -> float:
    """Bytes a node touches once: what it reads (weights included) and its outputs."""
    return float(sum(_tbytes(t) for t in _reads(node)) +
                 sum(_tbytes(t) for t in node.output_tensors if t is not None))


def _reuse(g) -> dict:
    """Per graph (computed once): each node's position and the running sum of footprints in
    execution order, the tensor producers' positions and the total (one run's bytes)."""
    got = getattr(g, "_calibration_reuse", None)
    if got is not None:
        return got
    from edgeops.graph import CONSTANT_OPS
    order = [n for n in g.nodes if n.op_type not in CONSTANT_OPS]
    pos, prod, acc = {}, {}, [0.0]
    for i, n in enumerate(order):
        pos[n.name] = i
        acc.append(acc[-1] + footprint(n))
        for o in n.outputs:
            if o:
                prod[o] = i
    got = {"pos": pos, "prod": prod, "acc": acc, "total": acc[-1]}
    try:
        g._calibration_reuse = got
    except AttributeError:      # a graph that takes no attributes: computed every time
        pass
    return got


def cold_bytes(node, cache: float) -> tuple[float, float]:
    """(bytes ``node`` reads from off-chip memory alone, in a one-node loop; the same inside its
    graph, run after run): alone, everything it touches every call; inside the graph, its
    weights and the graph's inputs were last touched a whole run ago, an activation when its
    producer wrote it, the bytes of the nodes between since (:func:`miss`)."""
    reads = _reads(node)
    alone = miss(footprint(node), cache) * sum(_tbytes(t) for t in reads)
    g = getattr(node, "graph", None)
    r = _reuse(g) if g is not None else None
    if r is None or node.name not in r["pos"]:
        return alone, alone
    i, acc, whole = r["pos"][node.name], r["acc"], r["total"]
    inside = 0.0
    for t in reads:
        j = None if t.is_const else r["prod"].get(t.name)
        d = whole if j is None else acc[i] - acc[j + 1] + _tbytes(t)
        inside += miss(d, cache) * _tbytes(t)
    return alone, inside


# ---- fitting ------------------------------------------------------------------------------

def nnls_rel(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative coefficients minimising the squared *relative* error of ``x @ c`` against
    ``y`` (every row counts alike, small nodes too): exact over the 2^k active sets (k = 4)."""
    w = x / y[:, None]
    one = np.ones(len(y))
    best, best_err = np.zeros(x.shape[1]), float("inf")
    k = x.shape[1]
    for mask in range(1, 2 ** k):
        cols = [j for j in range(k) if mask >> j & 1]
        c, *_ = np.linalg.lstsq(w[:, cols], one, rcond=None)
        if np.any(c < 0):
            continue
        full = np.zeros(k)
        full[cols] = c
        err = float(np.sum((w @ full - 1) ** 2))
        if err < best_err:
            best, best_err = full, err
    return best


def band_of(pred: np.ndarray, meas: np.ndarray) -> float:
    """The 90th percentile of |measured/predicted - 1|, floored at the A/A spread."""
    r = np.abs(np.asarray(meas) / np.maximum(np.asarray(pred), 1e-12) - 1)
    if len(r) == 0:
        return BAND_CAP
    return float(min(max(np.quantile(r, 0.9), BAND_FLOOR), BAND_CAP))


NEGLIGIBLE = 0.01     # of a row's predicted time
MAX_EFFICIENCY = 100  # times the rate: no cache or fusion explains more


def drop_negligible(x: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``c`` with each rate term (compute, bandwidth, weights) set to zero where it implies an
    efficiency beyond MAX_EFFICIENCY and is under NEGLIGIBLE of the predicted time on every
    row: the fit's leftovers (a coefficient of 1e-13 that read as a compute efficiency of
    10^11 %) stated as what they are, no cost of that kind. The call term stays."""
    c = np.array(c, float)
    pred = np.maximum(x @ c, 1e-30)
    for j in range(1, len(c)):
        if 0 < c[j] < 1 / MAX_EFFICIENCY and np.all(x[:, j] * c[j] < NEGLIGIBLE * pred):
            c[j] = 0.0
    return c


def fit(rows: list[dict]) -> dict:
    """Entries ``{"side|level|dtype|tN": {call_s, comp_eff, bw_eff, rows, band}}`` from measured
    rows ``{side, family, op, dtype, threads, x: [calls, comp_s, bytes_s], seconds}``; ``level``
    is a family (edgeops, kernel: the registry kernel; ort: :func:`ort_family`), the op's
    ``class:<gemm|stream|view>`` or ``*`` (the whole side)."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        if not (r.get("seconds") or 0) > 0 or not math.isfinite(r["seconds"]):
            continue
        base = (r["side"], r["dtype"], int(r["threads"]))
        for level in (r["family"], "class:" + op_class(r.get("op") or r["family"]), "*"):
            groups.setdefault(f"{base[0]}|{level}|{base[1]}|t{base[2]}", []).append(r)
    out = {}
    for key, rs in groups.items():
        level = key.split("|")[1]
        if not level.startswith(("class:", "*")) and len({tuple(r["x"]) for r in rs}) < MIN_ROWS:
            continue
        x = np.array([r["x"] for r in rs], float)
        y = np.array([r["seconds"] for r in rs], float)
        c = drop_negligible(x, nnls_rel(x, y))
        inv = lambda v: float(1 / v) if v > 0 else None      # noqa: E731
        out[key] = {"call_s": float(c[0]), "comp_eff": inv(c[1]), "bw_eff": inv(c[2]),
                    "weight_bw_eff": inv(c[3]), "rows": len(rs), "band": band_of(x @ c, y)}
    return out


def _predictor(entries):
    c = Calibration.__new__(Calibration)
    c.entries = entries
    return c


def predict_row(entries: dict, row: dict, clock_ratio: float = 1.0) -> float | None:
    """A measured row's one-node prediction under fitted ``entries`` (None: nothing fits it)."""
    e, _, _ = _predictor(entries)._entry(row["side"], row["family"], row["dtype"],
                                         int(row["threads"]), row.get("op"))
    return None if e is None else apply(e, np.asarray(row["x"]), clock_ratio)


def reuse(node) -> dict:
    """What :func:`in_model_cold` needs of a node, kept with its calibration row: its footprint
    ``F`` and, per tensor it reads, [bytes, bytes touched since it was last inside the graph]."""
    g = getattr(node, "graph", None)
    r = _reuse(g) if g is not None else None
    reads = _reads(node)
    if r is None or node.name not in r["pos"]:
        return {"F": footprint(node), "reads": []}
    i, acc, whole = r["pos"][node.name], r["acc"], r["total"]
    out = []
    for t in reads:
        j = None if t.is_const else r["prod"].get(t.name)
        out.append([float(_tbytes(t)), whole if j is None else acc[i] - acc[j + 1] + _tbytes(t)])
    return {"F": footprint(node), "reads": out}


def in_model_cold(ru: dict, cache: float) -> float:
    """Bytes a node reads from off-chip memory inside its graph beyond what it read alone in a
    one-node loop (negative: fewer), for a cache of ``cache`` bytes (:func:`cold_bytes`)."""
    if not ru or not ru.get("reads"):
        return 0.0
    total = sum(b for b, _d in ru["reads"])
    return sum(miss(d, cache) * b for b, d in ru["reads"]) - miss(ru["F"], cache) * total


CACHE_SHARES = (1.0, 0.5, 0.25, 0.125)   # of the last cache level, tried by in_model_factors


def whole_terms(rows: list[dict], entries: dict, lowered: set, ov: float, cache: float,
                bw: float) -> dict:
    """Per side ("edgeops": the ``lowered`` nodes, "ort": the others, "ort_all": every node as
    ONNX Runtime's session runs them) of one model's rows: [gemm-class seconds, other seconds,
    in-model cold bytes / ``bw``], each node its one-node prediction less the session's own run
    ``ov`` (``entries`` None: its measured one-node figure); the terms
    :func:`in_model_factors` weighs."""
    by: dict[str, dict] = {}
    for r in rows:
        d = by.setdefault(r["node"], {"op": r.get("op") or r["family"], "reuse": r.get("reuse")})
        d[r["side"]] = r["seconds"] if entries is None else predict_row(entries, r)
    out = {k: np.zeros(3) for k in ("edgeops", "ort", "ort_all")}
    for node, d in by.items():
        cls = 0 if op_class(d["op"]) == "gemm" else 1
        cold = in_model_cold(d["reuse"], cache) / bw
        o = np.zeros(3)
        o[cls], o[2] = max((d.get("ort") or 0.0) - ov, 0.0), cold
        out["ort_all"] += o
        if node in lowered and d.get("edgeops") is not None:
            e = np.zeros(3)
            e[cls], e[2] = max(d["edgeops"] - ov, 0.0), cold
            out["edgeops"] += e
        else:
            out["ort"] += o
    return out


def _theil_sen(s: np.ndarray, d: np.ndarray, y: np.ndarray) -> np.ndarray:
    """[f, f, k] of y = f * s + k * d over the models, robustly: y/s = f + k * (d/s) is a line,
    its slope the median of the pairwise slopes (Theil-Sen), floored at 0, and f the median
    intercept. A median, not least squares: the grid's whole models on shared cores carry
    outliers (one package 2x its usual), and 12 points cannot outvote them."""
    ok = (s > 0) & (y > 0)
    if not ok.any():
        return np.array([1.0, 1.0, 0.0])
    u, v = d[ok] / s[ok], y[ok] / s[ok]
    slopes = [(v[j] - v[i]) / (u[j] - u[i]) for i in range(len(u)) for j in range(i + 1, len(u))
              if abs(u[j] - u[i]) > 1e-12 * max(abs(u[i]), abs(u[j]), 1e-30)]
    k = max(float(np.median(slopes)), 0.0) if slopes else 0.0
    f = float(np.median(v - k * u))
    return np.array([f, f, k])


def in_model_factors(rows: list[dict], wholes: list[dict], entries: dict, overhead: dict,
                     board=None) -> dict:
    """``{"t<N>": {"ort": [f_gemm, f_other, k_cold], "edgeops": [...], "cache": bytes,
    "models": n}}``: what nodes cost inside a whole model over their one-node figures, fitted
    per side on the measured whole models ``wholes`` (``{model, threads, lowered: [node],
    package_s, ort_s}``): ONNX Runtime's on its session of the original, edgeops' on the package
    with every node lowered it could (ONNX Runtime's terms for the nodes it keeps). A model's
    time less one run = f * its nodes' one-node seconds (f_gemm = f_other: one factor a side)
    + k_cold * the bytes they read from off-chip memory inside the model and not alone, at the
    board's bandwidth (:func:`in_model_cold`, the cache a share of the last level, the share
    that fits best); f and k by :func:`_theil_sen`. Why: packages ran 1.3-2.9x their nodes' one-node sums, more with the
    weights than a cache holds (docs/notes/calibration.md)."""
    out = {}
    llc = llc_bytes(board) if board is not None else 0.0
    for t in sorted({int(w["threads"]) for w in wholes}):
        ov = float(overhead.get(str(t), 0.0))
        bw = rates(board, "fp32", t)[2] if board is not None else 1.0
        ws = [w for w in wholes if int(w["threads"]) == t and w.get("ort_s")]
        mrows = {w["model"]: [r for r in rows if r["model"] == w["model"] and
                              int(r["threads"]) == t] for w in ws}
        best = None
        for share in CACHE_SHARES if llc else (1.0,):
            terms = [whole_terms(mrows[w["model"]], entries, set(w["lowered"]), ov, llc * share,
                                 bw) for w in ws]
            if not terms:
                break
            # one factor for every node of a side (a factor per op class overfits 12 models)
            xo = np.array([tm["ort_all"] for tm in terms])
            yo = np.array([w["ort_s"] - ov for w in ws])
            fo = _theil_sen(xo[:, 0] + xo[:, 1], xo[:, 2], yo)
            pk = [(tm, w) for tm, w in zip(terms, ws) if w.get("package_s")]
            xe = np.array([tm["edgeops"] for tm, _w in pk]).reshape(-1, 3)
            ye = np.array([w["package_s"] - ov - fo @ tm["ort"] for tm, w in pk])
            fe = _theil_sen(xe[:, 0] + xe[:, 1], xe[:, 2], ye) if len(pk) else np.ones(3)
            err = float(np.sum((xo @ fo / yo - 1) ** 2))
            if len(pk):
                tot = np.array([w["package_s"] - ov for _tm, w in pk])
                err += float(np.sum(((xe @ fe + np.array([fo @ tm["ort"] for tm, _w in pk]))
                                     / tot - 1) ** 2))
            if best is None or err < best[0]:
                best = (err, fo, fe, llc * share)
        if best is None:
            continue
        _err, fo, fe, cache = best
        out[f"t{t}"] = {"ort": fo.tolist(), "edgeops": fe.tolist(), "cache": cache,
                        "cache_share": cache / llc if llc else 0.0, "models": len(ws)}
    return out


def in_model_terms(factors: dict, side: str) -> np.ndarray:
    """[f_gemm, f_other, k_cold] of ``side`` from an in-model entry (:func:`in_model_factors`);
    an older file's one factor a side counts for both classes, with no cold term."""
    f = factors.get(side, 1.0)
    if isinstance(f, (int, float)):
        return np.array([float(f), float(f), 0.0])
    return np.asarray(f, float)


def whole_predicted(rows: list[dict], entries: dict | None, factors: dict, lowered: set,
                    ov: float, board) -> tuple[float, float]:
    """(package s, ONNX Runtime's session s) of one model predicted from its rows under the
    in-model ``factors`` of their thread count (:func:`in_model_factors`), one run on top;
    ``entries`` None: from the rows' measured one-node figures (the in-model part alone)."""
    t = int(rows[0]["threads"]) if rows else 1
    f = factors.get(f"t{t}", {})
    bw = rates(board, "fp32", t)[2]
    tm = whole_terms(rows, entries, lowered, ov, float(f.get("cache", 0.0)), bw)
    fe, fo = in_model_terms(f, "edgeops"), in_model_terms(f, "ort")
    return float(fe @ tm["edgeops"] + fo @ tm["ort"] + ov), float(fo @ tm["ort_all"] + ov)


def apply(entry: dict, x: np.ndarray, clock_ratio: float = 1.0) -> float:
    """Seconds of features ``x`` under a fitted entry; ``clock_ratio``: the calibrated board's
    clock over this board's (per-call costs are instructions at the clock)."""
    inv = lambda k: 0.0 if not entry.get(k) else 1 / entry[k]       # noqa: E731
    c = [entry["call_s"] * clock_ratio, inv("comp_eff"), inv("bw_eff"), inv("weight_bw_eff")]
    return float(np.dot(c, x))


# ---- boards: the descriptors borrowing compares ---------------------------------------------

def vector_bits(isa) -> int:
    isa = set(isa or ())
    if "avx512f" in isa:
        return 512
    if "avx2" in isa or "avx" in isa:
        return 256
    if "sve" in isa or "sve2" in isa:      # the width is implementation-defined; 128 is the floor
        return 128
    return 128


def ort_class(board) -> str:
    """Which of ONNX Runtime's CPU kernel sets (MLAS) the board's CPU runs: they differ by ISA."""
    isa = set(board.isa or ())
    if board.kind == "npu":
        return "none"
    if "x86_64" in isa or "avx2" in isa or "sse4_2" in isa:
        return "mlas-x86-avx512" if "avx512f" in isa else "mlas-x86-avx2"
    return "mlas-arm64-dot" if "asimddp" in isa else "mlas-arm64"


def descriptor(board) -> dict:
    """What borrowing compares: vector width, clock, cores, off-chip bandwidth, ORT kernel class."""
    cpu = [c for c in board.cores if c.name == "cpu"] or list(board.cores)
    off = board.offchip.name
    bw = max((p.bandwidth_bytes_per_s for p in board.paths if p.src == off), default=0.0)
    return {"name": board.name, "kind": board.kind, "vector_bits": vector_bits(board.isa),
            "clock_hz": float(cpu[0].hz or board.clock_hz), "cores": int(cpu[0].count),
            "bandwidth_bytes_per_s": float(bw), "ort_class": ort_class(board)}


def distance(a: dict, b: dict) -> float:
    """How far board ``b`` is from ``a``: the sum of |ln ratio| of vector width, clock, cores and
    bandwidth, plus 1 for another ORT kernel class."""
    d = 0.0
    for k in ("vector_bits", "clock_hz", "cores", "bandwidth_bytes_per_s"):
        if a[k] > 0 and b[k] > 0:
            d += abs(math.log(a[k] / b[k]))
    return d + (a["ort_class"] != b["ort_class"])


def transfer_factor(d: float) -> float:
    """A borrowed calibration's bands are multiplied by this (docs/notes/calibration.md)."""
    return 1.0 + d


# ---- a loaded calibration for one board ----------------------------------------------------

@dataclass
class Estimate:
    seconds: float
    band: float          # relative: the truth within seconds * (1 +- band), 9 times in 10
    source: str          # "host calibration (ConvBnAct)", "borrowed from host x2.3", "default"


class Calibration:
    """The calibration a board's predictions use: its own, one borrowed from the nearest
    calibrated board (bands times :func:`transfer_factor`), or none."""

    def __init__(self, board, doc: dict | None, borrowed_from: str | None = None,
                 factor: float = 1.0, why: str = ""):
        self.board, self.doc = board, doc
        self.borrowed_from, self.factor, self.why = borrowed_from, factor, why
        self.entries = (doc or {}).get("entries", {})
        src = ((doc or {}).get("provenance") or {}).get("board") or {}
        self.clock_ratio = 1.0
        # its own board: the rates the efficiencies were fitted against, not today's figures
        self.fixed = None if borrowed_from else ((doc or {}).get("provenance") or {}).get("rates")
        if borrowed_from and src.get("clock_hz"):
            self.clock_ratio = src["clock_hz"] / descriptor(board)["clock_hz"]

    @property
    def available(self) -> bool:
        return bool(self.entries)

    def describe(self) -> str:
        if not self.available:
            return f"no calibration ({self.why}); default bands"
        if self.borrowed_from:
            return (f"calibration borrowed from {self.borrowed_from} (bands x{self.factor:.1f})")
        return f"{self.board.name} calibration of {self.doc['provenance'].get('date', '?')}"

    def overhead_s(self, threads: int) -> float:
        """What a one-node session's ``run`` costs by itself at ``threads`` (the calibrated
        figures include it; a node inside a model does not pay it), the nearest measured."""
        ov = ((self.doc or {}).get("provenance") or {}).get("session_overhead_s") or {}
        if not ov:
            return 0.0
        t = min((int(k) for k in ov), key=lambda k: (abs(k - threads), -k))
        return float(ov[str(t)]) * self.clock_ratio

    def in_model(self, side: str, threads: int) -> dict:
        """The in-model entry (:func:`in_model_factors`) of the nearest thread count measured."""
        f = (self.doc or {}).get("in_model") or {}
        if side == "kernel" or not f:
            return {}
        t = min((int(k[1:]) for k in f), key=lambda k: (abs(k - threads), -k))
        return f[f"t{t}"]

    def _entry(self, side, family, dtype, threads, op=None):
        ts = sorted({int(k.rsplit("|t", 1)[1]) for k in self.entries if k.startswith(side + "|")},
                    key=lambda t: (abs(t - threads), -t))
        for t in ts:
            for level in (family, "class:" + op_class(op or family), "*"):
                e = self.entries.get(f"{side}|{level}|{dtype}|t{t}")
                if e is not None:
                    return e, level, t
        return None, None, None

    def estimate(self, node, side: str, threads: int | None = None,
                 kernel: str | None = None) -> Estimate | None:
        """What ``node`` adds to a model's run on ``side`` (``kernel``: the registry kernel of
        an edgeops side), or None without a calibration for it. The fitted one-node figure less
        the session's own run (:meth:`overhead_s`; not for ``kernel``, called without one); the
        band, fitted on one-node figures, is carried over in seconds."""
        if not self.available or self.board.peer is None:
            return None
        t = threads or descriptor(self.board)["cores"]
        fam = ort_family(node) if side == "ort" else (kernel or node.op_type)
        e, level, used = self._entry(side, fam, node_dtype(node), t, node.op_type)
        if e is None:
            return None
        x = features(node, side, self.board, t, self.fixed)
        raw = apply(e, x, self.clock_ratio)
        ov = 0.0 if side == "kernel" else self.overhead_s(t)
        s = max(raw - ov, 0.1 * raw)
        band = min(e["band"] * self.factor, BAND_CAP) * raw / s
        im = self.in_model(side, t)
        if im:      # inside a model: its class's factor, and what it reads cold there
            f = in_model_terms(im, side)
            s *= f[0] if op_class(node.op_type) == "gemm" else f[1]
            if f[2] and im.get("cache_share"):     # this board's cache, the share fitted
                bw = rates(self.board, node_dtype(node), t)[2]
                cache = im["cache_share"] * llc_bytes(self.board)
                s = max(s + f[2] * in_model_cold(reuse(node), cache) / bw, 0.1 * raw)
        src = f"{self.borrowed_from or self.board.name} calibration ({level}, {used} thr)"
        if self.borrowed_from:
            src += f", borrowed, band x{self.factor:.1f}"
        return Estimate(s, band, src)


def read(path: Path, kernels: str | None = None) -> tuple[dict | None, str]:
    """(the document, "") or (None, why it is not used): missing, of another format version, or
    measured with other kernels than ``kernels`` (the current kernel key, when given): stale,
    said in the reason only; unreadable or damaged (not JSON, a field of the wrong type, NaN):
    the same, with an :class:`~edgeops.errors.EdgeOpsWarning` too. A cache file is edgeops' own,
    not the user's input: predictions go on without it, as with no calibration at all."""
    try:
        doc = json.loads(Path(path).read_bytes())
    except FileNotFoundError:
        return None, f"no calibration file {path}"
    except OSError as e:
        return _damaged(path, f"cannot be read ({e.strerror})")
    except ValueError as e:     # JSONDecodeError and UnicodeDecodeError both
        return _damaged(path, f"is not JSON ({e})")
    if isinstance(doc, dict) and isinstance(doc.get("format"), int) and \
            not isinstance(doc["format"], bool) and doc["format"] != FORMAT:
        return None, (f"{path} is a format-{doc['format']} calibration, not {FORMAT}; run "
                      f"edgeops calibrate again")
    prov = doc.get("provenance", {}) if isinstance(doc, dict) else None
    if isinstance(prov, dict) and isinstance(prov.get("kernels_key", ""), str) and \
            kernels is not None and prov.get("kernels_key") != kernels:
        # stale: not used, whatever else it holds
        return None, (f"{path} was measured with other kernels or runtime "
                      f"({prov.get('kernels_key')} vs {kernels}); run edgeops calibrate again")
    why = _damage(doc)
    if why:
        return _damaged(path, why)
    return doc, ""


def _damaged(path, why: str) -> tuple[None, str]:
    import warnings

    from edgeops.errors import EdgeOpsWarning
    why = f"{path} {why}"
    warnings.warn(EdgeOpsWarning(f"ignoring the calibration file {why}: predictions use no "
                                 f"calibration from it; run edgeops calibrate again, or delete "
                                 f"it"), stacklevel=3)
    return None, f"{why}; damaged, ignored"


def _num(v, strict: bool = False) -> bool:
    """A finite number (not a bool) >= 0 (> 0 with ``strict``)."""
    return (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            and (v > 0 if strict else v >= 0))


def _thread_key(k, prefix: str = "") -> bool:
    return isinstance(k, str) and k.startswith(prefix) and k[len(prefix):].isdigit()


def _damage(doc) -> str:
    """What is wrong with a calibration document, in the fields predictions read ("" if
    nothing): every figure a finite number of the right sign, every key of its shape."""
    if not isinstance(doc, dict):
        return f"holds a JSON {type(doc).__name__}, not a calibration object"
    if doc.get("format") != FORMAT or isinstance(doc.get("format"), bool):
        return f"has format {doc.get('format')!r}, not {FORMAT}"
    entries = doc.get("entries")
    if not isinstance(entries, dict):
        return "has no entries object"
    for k, e in entries.items():
        parts = k.split("|")
        if len(parts) != 4 or parts[0] not in SIDES or not _thread_key(parts[3], "t"):
            return f"has an entry key {k!r}, not side|family|dtype|t<threads>"
        if not isinstance(e, dict) or not _num(e.get("call_s")) or not _num(e.get("band")):
            return f"entry {k!r}: call_s and band must be finite numbers >= 0"
        for f in ("comp_eff", "bw_eff", "weight_bw_eff"):
            if e.get(f) is not None and not _num(e[f], strict=True):
                return f"entry {k!r}: {f} must be null or a finite number > 0, not {e[f]!r}"
    prov = doc.get("provenance", {})
    if not isinstance(prov, dict):
        return "has a provenance that is not an object"
    if not isinstance(prov.get("kernels_key", ""), str) or \
            not isinstance(prov.get("machine_key", ""), str):
        return "has a kernels_key or machine_key that is not a string"
    if "board" in prov:
        b = prov["board"]
        if not isinstance(b, dict) or not isinstance(b.get("name"), str) or \
                not isinstance(b.get("kind"), str) or not isinstance(b.get("ort_class"), str):
            return "provenance.board needs name, kind and ort_class strings"
        for f in ("vector_bits", "clock_hz", "cores", "bandwidth_bytes_per_s"):
            if not _num(b.get(f)):      # 0: unknown, as the writer puts it (distance skips it)
                return f"provenance.board.{f} must be a finite number >= 0, not {b.get(f)!r}"
    rates_ = prov.get("rates", {})
    if not isinstance(rates_, dict) or not all(
            isinstance(v, list) and len(v) == 3 and all(_num(x, strict=True) for x in v)
            for v in rates_.values()):      # predictions divide by them
        return "provenance.rates must map dtype|t<threads> to 3 finite numbers > 0"
    ov = prov.get("session_overhead_s", {})
    if not isinstance(ov, dict) or not all(_thread_key(k) and _num(v) for k, v in ov.items()):
        return "provenance.session_overhead_s must map thread counts to finite seconds >= 0"
    im = doc.get("in_model", {})
    if not isinstance(im, dict):
        return "has an in_model that is not an object"
    for k, f in im.items():
        if not _thread_key(k, "t") or not isinstance(f, dict):
            return f"in_model {k!r} is not t<threads>: {{...}}"
        for side in ("ort", "edgeops"):
            v = f.get(side, 1.0)
            if not (_num(v) or isinstance(v, list) and len(v) == 3 and all(_num(x) for x in v)):
                return f"in_model {k!r} {side} must be a factor or 3 finite numbers >= 0"
        for g in ("cache", "cache_share"):
            if not _num(f.get(g, 0.0)):
                return f"in_model {k!r} {g} must be a finite number >= 0"
    return ""


def load(board, *, kernels: str | None = None, machine: str | None = None,
         root: Path | None = None) -> Calibration:
    """The calibration ``board`` predicts with: its own file (for ``host``, only if measured on
    this ``machine``), else the nearest calibrated board's (:func:`distance`), else none.
    ``kernels``: the current kernel key (a file of other kernels is stale and skipped)."""
    root = root or directory()
    own, why = read(path_for(board.name, root), kernels)
    if own is not None and board.name == "host" and machine is not None and \
            own.get("provenance", {}).get("machine_key") != machine:
        own, why = None, "the host calibration was measured on another machine"
    if own is not None:
        return Calibration(board, own)
    if board.kind == "npu" or board.peer is None:
        return Calibration(board, None, why=f"{board.kind} boards have no calibrated model")
    me = descriptor(board)
    best = None
    for p in sorted(root.glob("*.json")) if root.is_dir() else []:
        if p.stem == board.name:
            continue
        doc, _ = read(p, kernels)
        if doc is None:
            continue
        d = (doc.get("provenance") or {}).get("board")
        if not d or d.get("kind") != board.kind:
            continue
        dist = distance(me, d)
        if best is None or dist < best[0]:
            best = (dist, doc, d["name"])
    if best is None:
        return Calibration(board, None, why=why or "nothing calibrated to borrow from")
    return Calibration(board, best[1], borrowed_from=best[2], factor=transfer_factor(best[0]))


def default_estimate(seconds: float | None, side: str) -> Estimate | None:
    """An uncalibrated prediction with its side's :data:`DEFAULT_BAND`."""
    if seconds is None:
        return None
    return Estimate(float(seconds), DEFAULT_BAND[side], "uncalibrated simulator, default band")


def gain_exceeds_band(ours: Estimate, theirs: Estimate) -> tuple[bool, float, float]:
    """(whether ONNX Runtime's predicted time minus ours exceeds the bands, the gain s, the
    combined band s): the two bands added in quadrature (independent errors)."""
    gain = theirs.seconds - ours.seconds
    band = math.hypot(ours.band * ours.seconds, theirs.band * theirs.seconds)
    return gain > band, gain, band
