"""Activations and the output-tile epilogue shared by every NEON kernel.

An activation is a runtime code plus two float parameters, not a compile-time function: one
compiled GEMM/Conv serves every fused activation (Numba would specialise per function object).
The branch is per element of the stored tile only, i.e. once per kc*MR*NR multiply-adds.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from edgeops.errors import EdgeOpsError
from edgeops.targets.neon import _vmath as vm

(NONE, RELU, CLIP, SILU, HARDSWISH, LEAKY, GELU_ERF, GELU_TANH, SIGMOID, TANH,
 HARDSIGMOID) = range(11)

ACTIVATIONS = {
    "none": NONE, "identity": NONE, "relu": RELU, "clip": CLIP, "relu6": CLIP, "silu": SILU,
    "swish": SILU, "hardswish": HARDSWISH, "leakyrelu": LEAKY, "leaky_relu": LEAKY,
    "gelu": GELU_ERF, "gelu_erf": GELU_ERF, "gelu_tanh": GELU_TANH, "sigmoid": SIGMOID,
    "tanh": TANH, "hardsigmoid": HARDSIGMOID,
}

# bias modes of the GEMM store
BIAS_NONE, BIAS_ROW, BIAS_COL = 0, 1, 2

_SIXTH = float(np.float32(1 / 6))  # ONNX HardSwish: HardSigmoid with alpha = float32(1/6)

# fastmath: "contract" only (mul+add -> FMA: one rounding, no reassociation, NaN/inf kept)
_FM = {"contract"}


def activation(name: str | None, alpha: float | None = None, beta: float | None = None):
    """(code, p0, p1) for an activation name. relu6 is clip(0, 6); clip takes (min, max);
    leakyrelu takes alpha (default 0.01); hardsigmoid takes (alpha=0.2, beta=0.5) as ONNX."""
    key = (name or "none").lower()
    if key not in ACTIVATIONS:
        raise EdgeOpsError(f"activation {name!r} is not supported by the neon epilogue; "
                           f"supported: {', '.join(sorted(ACTIVATIONS))}")
    code = ACTIVATIONS[key]
    if key == "relu6":
        return code, 0.0, 6.0
    if code == CLIP:
        lo = -np.inf if alpha is None else float(alpha)
        hi = np.inf if beta is None else float(beta)
        return code, lo, hi
    if code == LEAKY:
        return code, 0.01 if alpha is None else float(alpha), 0.0
    if code == HARDSIGMOID:
        return code, 0.2 if alpha is None else float(alpha), 0.5 if beta is None else float(beta)
    return code, 0.0, 0.0


@njit(cache=True, inline="always", fastmath=_FM, error_model="numpy")
def apply_act(x, code, p0, p1):
    """Activation ``code`` of float32 ``x``, as float32 (exp-based ones through ``_vmath``:
    vectorisable, within ~5e-7 absolute of the float64 definitions)."""
    x = np.float32(x)
    if code == NONE:
        return x
    if code == RELU:
        return max(x, np.float32(0))
    if code == CLIP:
        return np.float32(min(max(x, p0), p1))
    if code == SILU:
        return vm.silu32(x)
    if code == HARDSWISH:
        return x * min(max(x * np.float32(_SIXTH) + np.float32(0.5), np.float32(0)), np.float32(1))
    if code == LEAKY:
        return x if x >= 0 else x * np.float32(p0)
    if code == GELU_ERF:
        return vm.gelu_erf32(x)
    if code == GELU_TANH:
        return vm.gelu_tanh32(x)
    if code == SIGMOID:
        return vm.sigmoid32(x)
    if code == TANH:
        return vm.tanh32(x)
    if code == HARDSIGMOID:
        return np.float32(min(max(p0 * x + p1, 0.0), 1.0))
    return x


@njit(cache=True, inline="always", error_model="numpy")
def clamp_bounds(act, p0, p1):
    """(whether ``act`` is a clamp that a kernel can fuse into its stores, lo, hi): Relu and
    Clip are clamps, none is the clamp to +-inf; other activations run on the stored row."""
    clamp = act == NONE or act == RELU or act == CLIP
    lo = np.float32(-np.inf)
    hi = np.float32(np.inf)
    if act == RELU:
        lo = np.float32(0)
    elif act == CLIP:
        lo, hi = np.float32(p0), np.float32(p1)
    return clamp, lo, hi


@njit(cache=True, inline="always", fastmath=_FM, error_model="numpy")
def store_tile(ct, ldt, c, coff, ldc, mr, nr, alpha, add, last, bias, boff, bias_mode,
               row0, col0, act, p0, p1):
    """C[i, j] (+)= alpha * ct[i, j] for the valid mr x nr corner of the tile; on the last K block
    add the bias (per row or per column) and apply the activation. ``add`` means C already holds
    a partial sum (an earlier K block, or beta*C prepared by the caller)."""
    al = np.float32(alpha)
    for i in range(mr):
        cr = c[coff + i * ldc:coff + i * ldc + nr]
        tr = ct[i * ldt:i * ldt + nr]
        if add:
            for j in range(nr):
                cr[j] += al * tr[j]
        else:
            for j in range(nr):
                cr[j] = al * tr[j]
    if last:
        finish_tile(c, coff, ldc, mr, nr, bias, boff, bias_mode, row0, col0, act, p0, p1)


@njit(cache=True, inline="always", fastmath=_FM, error_model="numpy")
def finish_tile(c, coff, ldc, mr, nr, bias, boff, bias_mode, row0, col0, act, p0, p1):
    """In place on a stored tile after its last K block: + bias (per row/column), activation.
    One dispatch per TILE with branch-free inner loops: a per-element or per-row dispatch costs
    as much as a 1x1 conv's arithmetic (figures: docs/notes/neon-kernels.md)."""
    if bias_mode == BIAS_ROW:
        for i in range(mr):
            cr = c[coff + i * ldc:coff + i * ldc + nr]
            bv = bias[boff + row0 + i]
            for j in range(nr):
                cr[j] += bv
    elif bias_mode == BIAS_COL:
        br = bias[boff + col0:boff + col0 + nr]
        for i in range(mr):
            cr = c[coff + i * ldc:coff + i * ldc + nr]
            for j in range(nr):
                cr[j] += br[j]
    if act == NONE:
        return
    if act == RELU:
        for i in range(mr):
            cr = c[coff + i * ldc:coff + i * ldc + nr]
            for j in range(nr):
                cr[j] = max(cr[j], np.float32(0))
    elif act == CLIP:
        lo, hi = np.float32(p0), np.float32(p1)
        for i in range(mr):
            cr = c[coff + i * ldc:coff + i * ldc + nr]
            for j in range(nr):
                cr[j] = min(max(cr[j], lo), hi)
    else:
        for i in range(mr):
            cr = c[coff + i * ldc:coff + i * ldc + nr]
            act_copy(cr, cr, nr, act, p0, p1)


@njit(cache=True, inline="always", fastmath=_FM, error_model="numpy")
def act_copy(src, dst, n, act, p0, p1):
    """dst[:n] = act(src[:n]) with ONE dispatch per call: a branch chain per element (what
    ``apply_act`` in a loop is) does not vectorise."""
    if act == NONE:
        for i in range(n):
            dst[i] = src[i]
    elif act == RELU:
        for i in range(n):
            dst[i] = max(src[i], np.float32(0))
    elif act == CLIP:
        lo, hi = np.float32(p0), np.float32(p1)
        for i in range(n):
            dst[i] = min(max(src[i], lo), hi)
    elif act == SILU:
        for i in range(n):
            dst[i] = vm.silu32(src[i])
    elif act == HARDSWISH:
        for i in range(n):
            v = src[i]
            dst[i] = v * min(max(v * np.float32(_SIXTH) + np.float32(0.5), np.float32(0)),
                             np.float32(1))
    elif act == GELU_ERF:
        for i in range(n):
            dst[i] = vm.gelu_erf32(src[i])
    else:
        for i in range(n):
            dst[i] = apply_act(src[i], act, p0, p1)
