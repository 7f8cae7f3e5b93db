"""INT8 Conv2D and MatMul at the float boundary of QConvBnAct / QMatMul: one Numba call per node
(:mod:`edgeops.targets.neon.qfused`) quantises the input (ONNX QuantizeLinear), writes it as
packed int16-pair GEMM panels (through im2col for a conv), runs the int16-pair micro-kernel with
int32 accumulation against the node's packed weights and requantises / dequantises per
:mod:`edgeops.ops.qarith` into the fp32 output. Small problems take a serial twin of the kernel.

Prepared weights. Each node keeps its int8 weights, int32 bias, per-channel scales and
per-input-shape plans (geometry, blocking, thread split) in a ``_Node``. Under ONNX Runtime the
dispatch hands the kernel its node's ``state`` dict (:mod:`edgeops.ort.dispatch`), which holds
it; and it hands weights, bias and scales that are graph constants as the same read-only arrays
on every call (:mod:`edgeops.ort.consts`). So with ``state``, a call whose weights, bias and
scales are the very (read-only) objects the node was prepared from uses the prepared weights
with no further check; the entry keeps those objects alive, so their identity cannot pass to
another array.

Otherwise (a direct call, or a weight input that is not a constant and so arrives as a fresh
copy, at an address the allocator reuses) nothing identifies the weights but their content:
the ``_Node`` lives under ``id(attrs)`` (the dispatch parses ``attrs`` once per node; the entry
holds ``attrs`` so that id cannot be reused while it lives, at most ``_MAX_NODES`` nodes, first
in, first out), and every call checks in one vectorised pass that the fp32 weights, bias and
scales it was given equal the prepared ones (a mismatch prepares them again).
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
from numba import njit

from edgeops.errors import EdgeOpsError
from edgeops.ops import qarith
from edgeops.targets.neon._microkernel import QMR, QNR
from edgeops.threads import SMALL_FLOPS
from edgeops.targets.neon.blocking import from_tiling
from edgeops.targets.neon.gemm import split_work
from edgeops.targets.neon.qfused import (FIN_FLOAT, FIN_REQUANT, QCONV, QMM, pack_pairs,
                                         packed_size)
from edgeops.targets.neon.qgemm import PER_COL, PER_ROW, default_blocking

# x_type / y_type names -> numpy dtypes
DT = {k: v[2] for k, v in qarith.QTYPES.items()}
_COLS_BUDGET = 64 * 1024 * 1024    # bytes of quantised im2col buffer per chunk of images
_MAX_NODES = 2048


@njit(cache=True, error_model="numpy")
def _eq(x, y):
    """x == y elementwise (flat arrays, any numeric dtypes). Blocks of 256 with no early exit
    inside, so the comparisons vectorise."""
    n = x.size
    if y.size != n:
        return False
    for i0 in range(0, n, 256):
        bad = False
        for i in range(i0, min(n, i0 + 256)):
            bad |= x[i] != y[i]
        if bad:
            return False
    return True


@njit(cache=True, error_model="numpy")
def _same(w, wq, b, bq, s, sq):
    return _eq(w, wq) and _eq(b, bq) and _eq(s, sq)


@dataclass
class _Node:
    attrs: dict
    weights: tuple | None = None         # see _weights
    plans: dict = field(default_factory=dict)


_nodes: OrderedDict[int, _Node] = OrderedDict()
_STATE_KEY = "neon.int8"
_lock = threading.Lock()


def _node(attrs, state) -> _Node:
    if state is not None:
        e = state.get(_STATE_KEY)
        if e is None:
            e = state[_STATE_KEY] = _Node(attrs)
        return e
    e = _nodes.get(id(attrs))
    if e is None or e.attrs is not attrs:
        with _lock:
            e = _nodes[id(attrs)] = _Node(attrs)
            while len(_nodes) > _MAX_NODES:
                _nodes.popitem(last=False)
    return e


def _flat32(a):
    return np.ascontiguousarray(a, np.float32).reshape(-1)


def _frozen(*arrays) -> bool:
    return all(a is None or (isinstance(a, np.ndarray) and not a.flags.writeable) for a in arrays)


def _weights(e: _Node, w, bias, w_scale, what, nch, state=None):
    """The node's prepared weights (w shape, int8 weights, int32 bias (zeros if none), the fp32
    scales as given, one per channel, and with ``state`` the read-only arrays they were made
    from), checked against this call's inputs or made anew."""
    p = e.weights
    if p is not None and p[5] is not None and p[5][0] is w and p[5][1] is bias \
            and p[5][2] is w_scale:   # the same held constants: unchanged (see the docstring)
        return p
    wf, ws = _flat32(w), _flat32(w_scale)
    bf = _flat32(np.zeros(nch, np.float32) if bias is None or np.size(bias) == 0 else bias)
    if p is not None and p[0] == w.shape and _same(wf, p[1], bf, p[2], ws, p[3]):
        return p
    try:
        wq, bq = qarith.int_weight(w, what), qarith.int_bias(bias)
    except EdgeOpsError as err:  # an OpDefinitionError: the user's model
        raise EdgeOpsError(f"neon int8: {err}") from None
    bq = np.zeros(nch, np.int32) if bq is None else np.ascontiguousarray(bq).reshape(-1)
    if bq.size != nch or ws.size not in (1, nch):
        raise EdgeOpsError(f"neon int8: {bq.size} biases and {ws.size} weight scales for {nch} "
                           f"output channels")
    src = (w, bias, w_scale) if state is not None and _frozen(w, bias, w_scale) else None
    p = (w.shape, np.ascontiguousarray(wq).reshape(-1), bq, ws.copy(),
         np.ascontiguousarray(np.broadcast_to(ws, (nch,)), np.float32), src)
    e.weights = p     # one assignment: a concurrent caller sees the old tuple or the new one
    return p


def _finish_args(attrs, prefix, w_scale, act):
    """(mode, per-channel float32 scale or multiplier, f = relu, zp, lo, hi, y_scale; whether
    the float activation still has to be applied on the host)."""
    if attrs["y_scale"] > 0:
        lo, hi, _ = qarith.QTYPES[attrs["y_type"]]
        f = np.array([attrs["activation"] == "relu", attrs["y_zero_point"], lo, hi,
                      attrs["y_scale"]], np.float32)
        return FIN_REQUANT, qarith.multiplier(attrs[f"{prefix}_scale"], w_scale,
                                              attrs["y_scale"]), f, False
    scale = (np.float32(attrs[f"{prefix}_scale"]) * w_scale.astype(np.float32)).astype(np.float32)
    relu = attrs["activation"] == "relu"
    return FIN_FLOAT, scale, np.array([relu, 0, 0, 0, 0], np.float32), \
        attrs["activation"] not in ("none", "relu")


def _qparams(attrs, prefix):
    lo, hi, _ = qarith.QTYPES[attrs[f"{prefix}_type"]]
    return np.array([attrs[f"{prefix}_scale"], attrs[f"{prefix}_zero_point"], lo, hi], np.float32)


def _host_act(y, attrs, act):
    """The reference's float activation (float64) for activations the kernel does not fuse."""
    return act(y.astype(np.float64), attrs).astype(np.float32)


def _blocking(tiling, M, N, K):
    blk = from_tiling(tiling) if tiling is not None else default_blocking()
    return blk.fitted(M, N, max(K, 1))


def _prepared(plan, wts, make):
    """(packed weights, finish arguments) for this plan's kc, made once per (weights, plan)."""
    got = plan["prep"]
    if got is None or got[0] is not wts:
        got = plan["prep"] = (wts, *make())
    return got


def qconv_bn_act(x, w, w_scale, bias, attrs, act, tiling=None, state=None) -> np.ndarray:
    """QConvBnAct on NCHW fp32 ``x`` (``attrs`` parsed by the op); ``act(y, attrs)`` the float
    activation, used only when the output is not quantized and it is neither none nor relu.
    ``state``: the node's dispatch state (see the module docstring)."""
    e = _node(attrs, state)
    wts = _weights(e, w, bias, w_scale, "W", w.shape[0], state)
    key = (x.shape, w.shape, None if tiling is None else id(tiling))   # blocking: speed only
    plan = e.plans.get(key)
    if plan is None:
        plan = e.plans[key] = _conv_plan(x.shape, w.shape, attrs, tiling)
    g, (kc, mc, nc, rch, cch), chunk = plan["g"], plan["blk"], plan["chunk"]
    KK, asz = g.cg * g.r * g.s, plan["asz"]

    def make():
        ap = np.empty(g.group * asz, np.int16)
        for gi in range(g.group):
            pack_pairs(wts[1], gi * g.kg * KK, KK, 1, g.kg, KK, kc, QMR, 0, -(-g.kg // QMR), ap,
                       gi * asz)
        return ap, _finish_args(attrs, "x", wts[4], act)
    _, ap, (mode, scale, f, on_host) = _prepared(plan, wts, make)
    acc = np.empty(g.n * g.k * g.oh * g.ow, np.int32)
    y = np.empty((g.n, g.k, g.oh, g.ow), np.float32)
    xq = np.empty(min(chunk, g.n) * g.c * g.h * g.w, np.int16)
    xf = _flat32(x)
    fn = QCONV[not plan["small"]]   # the serial twin enters no parallel region: no thread setup
    for n0 in range(0, g.n, chunk):
        ni = min(chunk, g.n - n0)
        fn(xf, n0, ni, g.c, g.h, g.w, g.group, g.cg, g.r, g.s, g.oh, g.ow, g.sh, g.sw, g.dh,
           g.dw, g.ph, g.pw, plan["q"], xq, np.empty(ni * plan["bsz"], np.int16), ap, g.k, kc,
           mc, nc, rch, cch, acc, wts[2], scale, mode, f, y.reshape(-1))
    return _host_act(y, attrs, act) if on_host else y


def _conv_plan(x_shape, w_shape, attrs, tiling) -> dict:
    from edgeops.targets.neon.conv import geom_from_attrs
    g = geom_from_attrs(x_shape, w_shape, attrs)
    if g.oh < 1 or g.ow < 1:
        raise EdgeOpsError(f"neon int8 conv: empty output {g.oh}x{g.ow}")
    P, KK = g.oh * g.ow, g.cg * g.r * g.s
    mc, nc, kc = _blocking(tiling, g.kg, P, KK)
    per_img = g.group * packed_size(P, KK, QNR)
    return {"g": g, "blk": (kc, mc, nc, *split_work(g.n * g.group, g.kg, P, KK)),
            "chunk": max(1, min(g.n, _COLS_BUDGET // max(2 * per_img, 1))), "prep": None,
            "small": 2.0 * g.macs < SMALL_FLOPS, "q": _qparams(attrs, "x"),
            "asz": packed_size(g.kg, KK, QMR), "bsz": per_img}


def qmatmul(a, b, b_scale, bias, attrs, tiling=None, state=None) -> np.ndarray:
    """QMatMul: A (..., K) fp32, B (K, N) fp32 holding int8; batched over A's leading axes.
    ``state``: the node's dispatch state (see the module docstring)."""
    if b.ndim != 2 or a.shape[-1] != b.shape[0]:
        raise EdgeOpsError(f"neon int8 matmul: A {a.shape} and B {b.shape} do not multiply")
    e = _node(attrs, state)
    K, N = b.shape
    wts = _weights(e, b, bias, b_scale, "B", N, state)
    M = int(np.prod(a.shape[:-1], dtype=np.int64))
    key = (a.shape, b.shape, None if tiling is None else id(tiling))
    plan = e.plans.get(key)
    if plan is None:
        mc, nc, kc = _blocking(tiling, M, N, K)
        plan = e.plans[key] = {"blk": (kc, mc, nc, *split_work(1, M, N, K)), "prep": None,
                               "small": 2.0 * M * N * K < SMALL_FLOPS, "q": _qparams(attrs, "a")}
    kc, mc, nc, rch, cch = plan["blk"]

    def make():
        bp = np.empty(packed_size(N, K, QNR), np.int16)
        pack_pairs(wts[1], 0, 1, N, N, K, kc, QNR, 0, -(-N // QNR), bp, 0)
        return bp, _finish_args(attrs, "a", wts[4], None)
    _, bp, (mode, scale, f, _) = _prepared(plan, wts, make)
    acc = np.zeros(M * N, np.int32) if K == 0 else np.empty(M * N, np.int32)
    y = np.empty(a.shape[:-1] + (N,), np.float32)
    QMM[not plan["small"]](_flat32(a), M, K, N, plan["q"], np.empty(M * K, np.int16),
                           np.empty(packed_size(M, K, QMR), np.int16), bp, kc, mc, nc, rch, cch,
                           acc, wts[2], scale, mode, f, y.reshape(-1))
    return y


__all__ = ["qconv_bn_act", "qmatmul", "PER_ROW", "PER_COL"]
