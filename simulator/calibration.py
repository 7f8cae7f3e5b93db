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


def features(node, side: str, board, threads: int | None) -> np.ndarray:
    """[calls, seconds at the board's peak, activation bytes and constant (weight) bytes each
    at its bandwidth] of ``node`` (an ``edgeops.graph`` node, fused or not) for ``side``: the
    model is their weighted sum. Weights apart: a kernel may pack them per call (neon's GEMMs)
    or once per session (ONNX Runtime's), at rates unlike streaming activations."""
    dt = node_dtype(node)
    gemm, stream, bw, _ = rates(board, dt, threads)
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
        c = nnls_rel(x, y)
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


def whole_parts(rows: list[dict], entries: dict, lowered: set, ov: float) -> tuple[float, float]:
    """(edgeops s of the ``lowered`` nodes, ONNX Runtime s of the others) of one model's rows,
    each node its one-node prediction less the session's own run ``ov``."""
    by: dict[str, dict] = {}
    for r in rows:
        by.setdefault(r["node"], {})[r["side"]] = predict_row(entries, r)
    e_sum = o_sum = 0.0
    for node, sides in by.items():
        if node in lowered and sides.get("edgeops") is not None:
            e_sum += max(sides["edgeops"] - ov, 0.0)
        else:
            o_sum += max((sides.get("ort") or 0.0) - ov, 0.0)
    return e_sum, o_sum


def in_model_factors(rows: list[dict], wholes: list[dict], entries: dict,
                     overhead: dict) -> dict:
    """``{"t<N>": {"ort": f, "edgeops": f, "models": n}}``: what a node costs inside a whole
    model over its one-node figure, the median over the measured whole models ``wholes``
    (``{model, threads, lowered: [node], package_s, ort_s}``): ONNX Runtime's from its session
    of the original, edgeops' from the package with every node lowered it could
    (docs/notes/calibration.md: packages ran 1.3-2.9x their nodes' one-node sums)."""
    out = {}
    for t in sorted({int(w["threads"]) for w in wholes}):
        ov = float(overhead.get(str(t), 0.0))
        ws = [w for w in wholes if int(w["threads"]) == t and w.get("ort_s")]
        mrows = {w["model"]: [r for r in rows if r["model"] == w["model"] and
                              int(r["threads"]) == t] for w in ws}
        fo = []
        for w in ws:
            _, o_all = whole_parts(mrows[w["model"]], entries, set(), ov)
            if o_all > 0:
                fo.append((w["ort_s"] - ov) / o_all)
        if not fo:
            continue
        f_o = float(np.median(fo))
        fe = []
        for w in ws:
            e_sum, o_rest = whole_parts(mrows[w["model"]], entries, set(w["lowered"]), ov)
            if e_sum > 0 and w.get("package_s"):
                fe.append((w["package_s"] - ov - f_o * o_rest) / e_sum)
        out[f"t{t}"] = {"ort": f_o, "edgeops": float(np.median(fe)) if fe else 1.0,
                        "models": len(ws)}
    return out


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

    def in_model(self, side: str, threads: int) -> float:
        """The in-model factor of ``side`` (:func:`in_model_factors`), the nearest threads'."""
        f = (self.doc or {}).get("in_model") or {}
        if side == "kernel" or not f:
            return 1.0
        t = min((int(k[1:]) for k in f), key=lambda k: (abs(k - threads), -k))
        return float(f[f"t{t}"].get(side, 1.0))

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
        x = features(node, side, self.board, t)
        raw = apply(e, x, self.clock_ratio)
        ov = 0.0 if side == "kernel" else self.overhead_s(t)
        s = max(raw - ov, 0.1 * raw)
        band = min(e["band"] * self.factor, BAND_CAP) * raw / s
        s *= self.in_model(side, t)
        src = f"{self.borrowed_from or self.board.name} calibration ({level}, {used} thr)"
        if self.borrowed_from:
            src += f", borrowed, band x{self.factor:.1f}"
        return Estimate(s, band, src)


def read(path: Path, kernels: str | None = None) -> tuple[dict | None, str]:
    """(the document, "") or (None, why it is not used): missing, unreadable, another format,
    or measured with other kernels than ``kernels`` (the current kernel key, when given)."""
    try:
        doc = json.loads(Path(path).read_text())
    except OSError:
        return None, f"no calibration file {path}"
    except ValueError as e:
        return None, f"{path} is not JSON ({e})"
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or "entries" not in doc:
        return None, f"{path} is not a format-{FORMAT} calibration; run edgeops calibrate again"
    prov = doc.get("provenance") or {}
    if kernels is not None and prov.get("kernels_key") != kernels:
        return None, (f"{path} was measured with other kernels or runtime "
                      f"({prov.get('kernels_key')} vs {kernels}); run edgeops calibrate again")
    return doc, ""


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
