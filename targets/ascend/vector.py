"""What the Vector unit computes: each op's numpy semantics and its cost in lane-ops per element.

Operands arrive as float32 arrays (UB tiles are read in their dtype and widened; per-row
register values as (rows, 1) columns), results are rounded to the destination's dtype when
written -- as the hardware rounds every fp16 vector result. The cost is what the replay charges:
``elems x cost / (flops per cycle)`` cycles, one lane-op per element per elementary step.
"""
from __future__ import annotations

import numpy as np


def _sigmoid(x):
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _erf(x):
    # Abramowitz-Stegun 7.1.26 (|err| < 1.5e-7): the Vector unit has no erf either
    s = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    y = 1.0 - ((((1.061405429 * t - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t
               + 0.254829592) * t * np.exp(-a * a)
    return s * y


ACT = {  # name -> (fn(x, **args), cost)
    "none": (lambda x, **a: x, 0),
    "relu": (lambda x, **a: np.maximum(x, 0), 1),
    "relu6": (lambda x, **a: np.minimum(np.maximum(x, 0), 6), 2),
    "clip": (lambda x, lo=-np.inf, hi=np.inf, **a: np.minimum(np.maximum(x, lo), hi), 2),
    "sigmoid": (lambda x, **a: _sigmoid(x), 4),
    "silu": (lambda x, **a: x * _sigmoid(x), 5),
    "tanh": (lambda x, **a: np.tanh(x), 4),
    "gelu": (lambda x, **a: 0.5 * x * (1.0 + _erf(x / np.sqrt(2.0))), 8),
    "gelu_tanh": (lambda x, **a: 0.5 * x * (1.0 + np.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3))), 8),
    "hardswish": (lambda x, **a: x * np.clip(x / 6.0 + 0.5, 0, 1), 5),
    "hardsigmoid": (lambda x, alpha=0.2, beta=0.5, **a: np.clip(alpha * x + beta, 0, 1), 3),
    "leakyrelu": (lambda x, alpha=0.01, **a: np.where(x >= 0, x, alpha * x), 2),
    "exp": (lambda x, **a: np.exp(x), 1),
    "copy": (lambda x, **a: x, 1),
}

BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
    "max": np.maximum, "min": np.minimum,
}


def _rowstat(x, prev, op, acc):
    r = {"sum": lambda: x.sum(axis=1, keepdims=True), "sumsq": lambda: (x * x).sum(axis=1, keepdims=True),
         "max": lambda: x.max(axis=1, keepdims=True)}[op]()
    if acc and prev is not None:
        r = np.maximum(prev, r) if op == "max" else prev + r
    return r


def _softmax_update(x, m, s, first):
    """Online softmax statistics over row tiles: running max m and sum of exp(x - m)."""
    mt = x.max(axis=1, keepdims=True)
    if first:
        return mt, np.exp(x - mt).sum(axis=1, keepdims=True)
    mn = np.maximum(m, mt)
    return mn, s * np.exp(m - mn) + np.exp(x - mn).sum(axis=1, keepdims=True)


def _pool(x, mode, R, S, stride, dil, oh, ow, pt, pl, wr, wc, include_pad=False, counted=None):
    """x: (c, rows, cols), the real part of a window of ``wr x wc`` that starts ``pt`` rows and
    ``pl`` columns into the padding; the padding is materialised here, as load3d does.
    ``stride`` / ``dil``: (rows, cols). ``counted``: ((r0, r1), (c0, c1)), the part of the window
    inside the explicit padding, which count_include_pad=1 divides by (all of it when None)."""
    full = np.full((x.shape[0], wr, wc), -np.inf if mode == "max" else 0.0, dtype=x.dtype)
    full[:, pt:pt + x.shape[1], pl:pl + x.shape[2]] = x
    acc = _taps(full, mode, R, S, stride, dil, oh, ow)
    if mode == "max":
        return acc
    if include_pad and counted is None:
        return acc / (R * S)
    ones = np.zeros((1, wr, wc), dtype=x.dtype)
    if include_pad:
        (r0, r1), (c0, c1) = counted
        ones[:, r0:r1, c0:c1] = 1.0
    else:
        ones[:, pt:pt + x.shape[1], pl:pl + x.shape[2]] = 1.0
    return acc / _taps(ones, "avg", R, S, stride, dil, oh, ow)


def _taps(x, mode, R, S, stride, dil, oh, ow):
    (sh, sw), (dh, dw) = stride, dil
    acc = None
    for r in range(R):
        for s in range(S):
            v = x[:, r * dh: r * dh + (oh - 1) * sh + 1: sh, s * dw: s * dw + (ow - 1) * sw + 1: sw]
            acc = v.copy() if acc is None else (np.maximum(acc, v) if mode == "max" else acc + v)
    return acc


def run(vop: str, srcs: list, args: dict):
    """Result of one vector instruction (array, or a tuple for multi-output register ops)."""
    if vop in ACT:
        return ACT[vop][0](srcs[0], **args)
    if vop in BINARY:
        return BINARY[vop](srcs[0], srcs[1])
    if vop == "scale_shift":                      # x * a + b (a, b scalars or row registers)
        return srcs[0] * srcs[1] + srcs[2]
    if vop == "rowstat":
        return _rowstat(srcs[0], srcs[1] if len(srcs) > 1 else None, args["stat"], args.get("acc", False))
    if vop == "moments":                          # (sum, sumsq) -> (mean, rstd)
        n, eps = args["n"], args["eps"]
        mean = srcs[0] / n
        var = np.maximum(srcs[1] / n - mean * mean, 0.0)
        return mean, 1.0 / np.sqrt(var + eps)
    if vop == "softmax_update":
        first = args.get("first", False)
        return _softmax_update(srcs[0], None if first else srcs[1], None if first else srcs[2], first)
    if vop == "normalize":                        # (x - mean) * rstd
        return (srcs[0] - srcs[1]) * srcs[2]
    if vop == "softmax_out":                      # exp(x - m) / s
        return np.exp(srcs[0] - srcs[1]) / srcs[2]
    if vop == "gather_affine":                    # x * p[gi] + p[bi] (per-channel parameters)
        p = srcs[1].reshape(-1)
        y = srcs[0] * p[args["gi"]] + p[args["bi"]]
        return ACT[args.get("act", "none")][0](y)
    if vop == "pool":
        return _pool(srcs[0], **args)
    if vop == "swiglu":                           # silu(gate) * up (or one tile [gate | up])
        g, u = (srcs[0][:, :args["half"]], srcs[0][:, args["half"]:]) if len(srcs) == 1 else srcs
        return g * _sigmoid(g) * u
    raise KeyError(f"unknown vector op {vop!r}")


COST = {"scale_shift": 2, "rowstat": 1, "moments": 4, "softmax_update": 4, "normalize": 2,
        "softmax_out": 3, "gather_affine": 2, "swiglu": 6, **{k: 1 for k in BINARY}}


def cost(vop: str, args: dict) -> float:
    """Lane-ops per element (pooling: one per window tap)."""
    if vop in ACT:
        return max(1, ACT[vop][1])
    if vop == "pool":
        return args["R"] * args["S"]
    if vop == "rowstat" and args.get("stat") == "sumsq":
        return 2
    if vop == "gather_affine":
        return COST[vop] + ACT[args.get("act", "none")][1]
    return COST[vop]
