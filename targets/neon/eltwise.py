"""Elementwise kernels: activation chains and binary ops with a fused activation chain.

A chain is a (k, 3) float64 array of (code, p0, p1) rows (codes from ``epilogue``), applied in
order in ONE pass over memory: Relu -> Clip -> ... costs one read and one write of the tensor,
where ONNX Runtime runs one kernel (one pass) per op. Chains are data, so one compiled kernel
serves every chain.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from edgeops.errors import EdgeOpsError
from edgeops.targets.neon import epilogue as ep
from edgeops.threads import alone_or_pool, run

ADD, SUB, MUL, DIV = range(4)
BINARY = {"Add": ADD, "Sub": SUB, "Mul": MUL, "Div": DIV}
_BLOCK = 16384  # elements per parallel work item: large enough to amortise the hand-off

# fastmath: "contract" only (mul+add -> FMA: one rounding, no reassociation, NaN/inf kept)
_FM = {"contract"}


@njit(cache=True, inline="always", fastmath=_FM, error_model="numpy")
def _run_chain(v, chain):
    for s in range(chain.shape[0]):
        v = ep.apply_act(v, int(chain[s, 0]), chain[s, 1], chain[s, 2])
    return v


# Sigmoid and Tanh get loops of their own, compiled apart: reached through act_copy's generic
# branch (apply_act per element) LLVM vectorised every activation's code into the one loop and
# blended the results, half the speed of a loop over the one function (figures:
# docs/notes/neon-kernels.md).
@njit(cache=True, fastmath=_FM, error_model="numpy")
def _sigmoid_copy(src, dst, n):
    for i in range(n):
        dst[i] = ep.vm.sigmoid32(src[i])


@njit(cache=True, fastmath=_FM, error_model="numpy")
def _tanh_copy(src, dst, n):
    for i in range(n):
        dst[i] = ep.vm.tanh32(src[i])


@njit(cache=True, inline="always", fastmath=_FM, error_model="numpy")
def _act_copy(src, dst, n, act, p0, p1):
    """dst[:n] = act(src[:n]), one dispatch per call (see ``ep.act_copy``)."""
    if act == ep.SIGMOID:
        _sigmoid_copy(src, dst, n)
    elif act == ep.TANH:
        _tanh_copy(src, dst, n)
    else:
        ep.act_copy(src, dst, n, act, p0, p1)


@njit(parallel=True, cache=True, fastmath=_FM, error_model="numpy")
def _chain_kernel(x, y, chain):
    n = x.shape[0]
    for blk in prange((n + _BLOCK - 1) // _BLOCK):
        _chain_block(x, y, chain, blk)


# serial twins (see norms.py: a separate function, not the parallel one compiled again): small
# calls without a parallel-region launch
@njit(cache=True, fastmath=_FM, error_model="numpy")
def _chain_serial(x, y, chain):
    n = x.shape[0]
    for blk in range((n + _BLOCK - 1) // _BLOCK):
        _chain_block(x, y, chain, blk)


@njit(cache=True, inline="always", fastmath=_FM, error_model="numpy")
def _chain_block(x, y, chain, blk):
    n = x.shape[0]
    lo = blk * _BLOCK
    hi = min(n, lo + _BLOCK)
    xv = x[lo:hi]  # views + bare counters: vectorisable (see norms.py)
    yv = y[lo:hi]
    if chain.shape[0] == 1:  # the common single activation: one dispatch per block
        _act_copy(xv, yv, hi - lo, int(chain[0, 0]), chain[0, 1], chain[0, 2])
    else:
        for i in range(hi - lo):
            yv[i] = _run_chain(xv[i], chain)


@njit(cache=True, inline="always", fastmath=_FM, error_model="numpy")
def _binop(a, b, y, m, op):
    """y[:m] = a[:m] op b[:m]: one loop per op, so each vectorises."""
    if op == ADD:
        for i in range(m):
            y[i] = a[i] + b[i]
    elif op == SUB:
        for i in range(m):
            y[i] = a[i] - b[i]
    elif op == MUL:
        for i in range(m):
            y[i] = a[i] * b[i]
    else:
        for i in range(m):
            y[i] = a[i] / b[i]


@njit(cache=True, inline="always", fastmath=_FM, error_model="numpy")
def _binop_scalar(a, bv, y, m, op):
    """y[:m] = a[:m] op bv."""
    if op == ADD:
        for i in range(m):
            y[i] = a[i] + bv
    elif op == SUB:
        for i in range(m):
            y[i] = a[i] - bv
    elif op == MUL:
        for i in range(m):
            y[i] = a[i] * bv
    else:
        for i in range(m):
            y[i] = a[i] / bv


@njit(parallel=True, cache=True, fastmath=_FM, error_model="numpy")
def _binary_kernel(a, b, inner, y, op, chain):
    """y = chain(a op b) where b repeats with period ``inner`` * len(b) (b broadcast along the
    leading axes, and along a trailing block of ``inner`` elements: per-channel NCHW operands).
    Each block runs a op b over the longest stretches with one b layout (same-shape, or one b
    value) and then the chain over the block: no index arithmetic per element."""
    n = a.shape[0]
    for blk in prange((n + _BLOCK - 1) // _BLOCK):
        _binary_block(a, b, inner, y, op, chain, blk)


@njit(cache=True, fastmath=_FM, error_model="numpy")
def _binary_serial(a, b, inner, y, op, chain):
    n = a.shape[0]
    for blk in range((n + _BLOCK - 1) // _BLOCK):
        _binary_block(a, b, inner, y, op, chain, blk)


@njit(cache=True, inline="always", fastmath=_FM, error_model="numpy")
def _binary_block(a, b, inner, y, op, chain, blk):
    n = a.shape[0]
    nb = b.shape[0]
    lo = blk * _BLOCK
    hi = min(n, lo + _BLOCK)
    yv = y[lo:hi]
    if nb == n:
        _binop(a[lo:hi], b[lo:hi], yv, hi - lo, op)
    elif nb == 1:
        _binop_scalar(a[lo:hi], b[0], yv, hi - lo, op)
    elif inner == 1:     # b along the trailing axes: whole periods of b
        i = lo
        while i < hi:
            j = i % nb
            end = min(hi, i - j + nb)
            _binop(a[i:end], b[j:j + end - i], y[i:end], end - i, op)
            i = end
    else:                           # one b value per run of ``inner`` elements
        i = lo
        while i < hi:
            q = i // inner
            end = min(hi, (q + 1) * inner)
            _binop_scalar(a[i:end], b[q % nb], y[i:end], end - i, op)
            i = end
    if chain.shape[0] == 1:
        _act_copy(yv, yv, hi - lo, int(chain[0, 0]), chain[0, 1], chain[0, 2])
    elif chain.shape[0] > 1:
        for i in range(hi - lo):
            yv[i] = _run_chain(yv[i], chain)


def make_chain(steps) -> np.ndarray:
    """``["relu", ("clip", 0, 6), ...]`` -> the (k, 3) chain array."""
    rows = []
    for s in steps:
        if isinstance(s, str):
            rows.append(ep.activation(s))
        elif len(s) == 3 and isinstance(s[0], (int, np.integer)):
            rows.append(tuple(s))
        else:
            rows.append(ep.activation(s[0], *s[1:]))
    return np.asarray(rows, np.float64).reshape(-1, 3)


def _f32(name, x):
    if not isinstance(x, np.ndarray) or x.dtype != np.float32:
        raise EdgeOpsError(f"neon eltwise: {name} must be a float32 numpy array, got "
                           f"{getattr(x, 'dtype', type(x).__name__)}")
    return np.ascontiguousarray(x)


def activation_inplace(flat: np.ndarray, code: int, p0: float, p1: float) -> None:
    if code != ep.NONE:
        with alone_or_pool(("act", flat.size, code, p0, p1), flat.size):
            _chain_kernel(flat, flat, np.asarray([[code, p0, p1]], np.float64))


def chain(x: np.ndarray, steps) -> np.ndarray:
    """Apply an activation chain in one pass: ``chain(x, ["relu", ("clip", 0, 6)])``."""
    x = _f32("X", x)
    ch = steps if isinstance(steps, np.ndarray) else make_chain(steps)
    y = np.empty_like(x)
    run(chain_key(x.size, ch), _chain_kernel, _chain_serial, x.size, x.reshape(-1),
        y.reshape(-1), ch)
    return y


def chain_key(n: int, ch: np.ndarray) -> tuple:
    """The thread-choice key of a chain call (edgeops.threads.choice)."""
    return ("chain", n, ch.tobytes())


def binary_key(shape, op: str, nb: int, inner: int, ch: np.ndarray) -> tuple:
    """The thread-choice key of a binary call."""
    return ("binary", tuple(shape), op, nb, inner, ch.tobytes())


def binary(a: np.ndarray, b: np.ndarray, op: str, steps=()) -> np.ndarray:
    """``chain(a op b)`` for Add/Sub/Mul/Div. The fast path takes B equal in shape to A, a scalar,
    or a per-channel operand (B's shape is A's with leading/trailing axes of size 1 —
    e.g. (C,1,1) against (N,C,H,W)); other broadcasts are materialised first."""
    if op not in BINARY:
        raise EdgeOpsError(f"neon eltwise: unknown binary op {op!r}; supported: {sorted(BINARY)}")
    a = _f32("A", a)
    b = _f32("B", np.asarray(b, dtype=np.float32) if not isinstance(b, np.ndarray) else b)
    try:
        shape = np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise EdgeOpsError(f"neon {op}: shapes {a.shape} and {b.shape} do not broadcast") from None
    if shape != a.shape:
        a = np.ascontiguousarray(np.broadcast_to(a, shape))
    bflat, inner = b_operand(b, shape)
    ch = steps if isinstance(steps, np.ndarray) else make_chain(steps)
    y = np.empty(shape, np.float32)
    run(binary_key(shape, op, bflat.size, inner, ch), _binary_kernel, _binary_serial, y.size,
        a.reshape(-1), bflat, inner, y.reshape(-1), BINARY[op], ch)
    return y


def b_layout(b_shape, shape) -> int | None:
    """B's period ``inner`` against an output of ``shape`` (see :func:`_binary_kernel`), or None
    when B's broadcast is none the kernel reads in place (it must be materialised)."""
    bs = (1,) * (len(shape) - len(b_shape)) + tuple(b_shape)
    nz = [i for i, d in enumerate(bs) if d != 1]
    if nz and (any(bs[i] != shape[i] for i in nz) or nz != list(range(nz[0], nz[-1] + 1))):
        return None
    return max(int(np.prod(shape[nz[-1] + 1:], dtype=np.int64)) if nz else 1, 1)


def b_operand(b: np.ndarray, shape) -> tuple[np.ndarray, int]:
    """(B as the flat operand the kernel reads, its period ``inner``) against ``shape``."""
    inner = b_layout(b.shape, shape)
    if inner is None:
        bb = b.reshape((1,) * (len(shape) - b.ndim) + b.shape)
        return np.ascontiguousarray(np.broadcast_to(bb, shape)).reshape(-1), 1
    return np.ascontiguousarray(b).reshape(-1), inner
