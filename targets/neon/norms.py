"""Memory-bound fused chains: LayerNorm(+GELU), GroupNorm(+SiLU), Softmax.

Each kernel reads its input twice (one statistics pass, one normalise pass) and writes the
output once, with the activation applied in the same pass: the unfused ONNX Runtime graph writes
and re-reads every intermediate (GroupNorm alone is Reshape/InstanceNorm/Reshape/Mul/Add there).
Statistics use shifted float32 partial sums (see ``_mean_var``); the normalise pass applies the
activation (``_vmath``: vectorisable) before its single store. Only the statistics helper uses
fastmath beyond contraction (reassociation lets the sums vectorise; the tests' 2e-5 tolerance
against float64 allows it); the activation pass does not, since reassociation would break
exp's Cody-Waite range reduction.

Hot loops index slice VIEWS with the bare loop variable (``v = x[off:off+n]; v[i]``), never
``x[off + i]``: Numba must allow a negative ``off + i`` to wrap around, and that select per
element stopped LLVM vectorising the SiLU pass (figures: docs/notes/neon-kernels.md).
"""
from __future__ import annotations

import math
import time

import numpy as np
from numba import carray, njit, prange

from edgeops.errors import EdgeOpsError
from edgeops.plans import NativeStep
from edgeops.targets.neon import _entries
from edgeops.targets.neon import _vmath as _vm
from edgeops.targets.neon import epilogue as ep
from edgeops.targets.neon._entries import ALONE, POOL, SERIAL
from edgeops.threads import SMALL_ELEMENTS, ThreadChoice, decide, launch, run

_REDUCE = {"reassoc", "contract", "nsz"}  # no nnan/ninf: NaNs in the input must propagate

# fastmath: "contract" only (mul+add -> FMA: one rounding, no reassociation, NaN/inf kept)
_FM = {"contract"}


@njit(cache=True, fastmath=_REDUCE, error_model="numpy")
def _mean_var(x, off, n):
    """Mean and variance of x[off:off+n] in ONE pass over memory, as shifted sums
    (s1 = sum(x - k), s2 = sum((x - k)^2), k = x[off]): shifting by a sample keeps the
    cancellation in s2/n - (s1/n)^2 to a few ulp of the variance for any realistic spread, where
    unshifted sums of squares would fail on offset data. float32 partial sums: reassociation gives
    LLVM 16-64 independent lanes, which keeps the rounding error near sqrt(n/64) ulp."""
    v = x[off:off + n]
    k = v[0]
    s1 = np.float32(0)
    s2 = np.float32(0)
    for i in range(n):
        d = v[i] - k
        s1 += d
        s2 += d * d
    m1 = s1 / np.float32(n)
    return k + m1, max(s2 / np.float32(n) - m1 * m1, np.float32(0))


# One function per activation for the normalise pass, called (not inlined by Numba) from
# _affine_act: with every activation's loops inlined into one body, LLVM compiled the GELU loop
# slower (figures: docs/notes/neon-kernels.md); a separate function per activation keeps each
# loop's code as if it were alone. Each holds the per-element (LayerNorm: ``a``, ``b`` arrays)
# and the per-channel (GroupNorm: ``a`` empty, scalar ``sb``) loop; one branch, loop bodies
# branch-free.
@njit(cache=True, fastmath=_FM, error_model="numpy")
def _norm_none(xv, yv, a, b, m, s, sb, n):
    if a.shape[0] > 0:
        for j in range(n):
            yv[j] = (xv[j] - m) * s * a[j] + b[j]
    else:
        for j in range(n):
            yv[j] = (xv[j] - m) * s + sb


@njit(cache=True, fastmath=_FM, error_model="numpy")
def _norm_silu(xv, yv, a, b, m, s, sb, n):
    if a.shape[0] > 0:
        for j in range(n):
            yv[j] = ep.vm.silu32((xv[j] - m) * s * a[j] + b[j])
    else:
        for j in range(n):
            yv[j] = ep.vm.silu32((xv[j] - m) * s + sb)


@njit(cache=True, fastmath=_FM, error_model="numpy")
def _norm_gelu_erf(xv, yv, a, b, m, s, sb, n):
    if a.shape[0] > 0:
        for j in range(n):
            yv[j] = ep.vm.gelu_erf32((xv[j] - m) * s * a[j] + b[j])
    else:
        for j in range(n):
            yv[j] = ep.vm.gelu_erf32((xv[j] - m) * s + sb)


@njit(cache=True, fastmath=_FM, error_model="numpy")
def _norm_gelu_tanh(xv, yv, a, b, m, s, sb, n):
    if a.shape[0] > 0:
        for j in range(n):
            yv[j] = ep.vm.gelu_tanh32((xv[j] - m) * s * a[j] + b[j])
    else:
        for j in range(n):
            yv[j] = ep.vm.gelu_tanh32((xv[j] - m) * s + sb)


@njit(cache=True, fastmath=_FM, error_model="numpy")
def _norm_act(xv, yv, a, b, m, s, sb, n, act, p0, p1):
    per = a.shape[0] > 0
    for j in range(n):
        v = (xv[j] - m) * s * a[j] + b[j] if per else (xv[j] - m) * s + sb
        yv[j] = ep.apply_act(v, act, p0, p1)


@njit(cache=True, inline="always", fastmath=_FM, error_model="numpy")
def _affine_act(xv, yv, a, b, m, s, sb, n, act, p0, p1):
    """yv = act((xv - m) * s * a[j] + b[j]) (LayerNorm: per-element scale/bias) or
    act((xv - m) * s + sb) when ``a`` is empty (GroupNorm: one channel), in ONE pass: the
    normalised value never round-trips through memory. Centre first: folding the mean into an
    offset (x*s - m*s) cancels catastrophically on offset data unless mul+add fuse."""
    if act == ep.NONE:
        _norm_none(xv, yv, a, b, m, s, sb, n)
    elif act == ep.SILU:
        _norm_silu(xv, yv, a, b, m, s, sb, n)
    elif act == ep.GELU_ERF:
        _norm_gelu_erf(xv, yv, a, b, m, s, sb, n)
    elif act == ep.GELU_TANH:
        _norm_gelu_tanh(xv, yv, a, b, m, s, sb, n)
    else:
        _norm_act(xv, yv, a, b, m, s, sb, n, act, p0, p1)


@njit(cache=True, inline="always", fastmath=_FM, error_model="numpy")
def _layernorm_vec(xv, scale, bias, d, eps, yv, act, p0, p1):
    """One normalised row: ``xv`` and ``yv`` are views of ``d`` elements."""
    mean, var = _mean_var(xv, 0, d)
    rstd = np.float32(1.0) / np.sqrt(var + np.float32(eps))
    _affine_act(xv, yv, scale, bias, mean, rstd, np.float32(0), d, act, p0, p1)


@njit(cache=True, inline="always", fastmath=_FM, error_model="numpy")
def _layernorm_row(x, scale, bias, d, eps, y, act, p0, p1, r):
    off = r * d
    _layernorm_vec(x[off:off + d], scale, bias, d, eps, y[off:off + d], act, p0, p1)


@njit(cache=True, inline="always", fastmath=_FM, error_model="numpy")
def _groupnorm_block(xb, scale, bias, cg, spatial, g, eps, yb, act, p0, p1, empty):
    """One (image, group) block of ``cg * spatial`` elements, ``xb`` and ``yb`` its views."""
    mean, var = _mean_var(xb, 0, cg * spatial)
    rstd = np.float32(1.0) / np.sqrt(var + np.float32(eps))
    for ci in range(cg):
        ch = g * cg + ci
        o = ci * spatial
        _affine_act(xb[o:o + spatial], yb[o:o + spatial], empty, empty, mean,
                    rstd * scale[ch], bias[ch], spatial, act, p0, p1)


@njit(cache=True, inline="always", fastmath=_FM, error_model="numpy")
def _groupnorm_task(x, scale, bias, cg, spatial, groups, eps, y, act, p0, p1, empty, t):
    blk = cg * spatial
    off = t * blk
    _groupnorm_block(x[off:off + blk], scale, bias, cg, spatial, t % groups, eps,
                     y[off:off + blk], act, p0, p1, empty)


# Each kernel twice, parallel and serial (separate functions, not one py_func compiled twice:
# Numba's disk cache keys entries by function and signature, not by the parallel flag). The
# serial one serves small inputs: it launches no parallel region (a cost even on a one-thread
# team) and needs no set_num_threads round trip; larger calls that run alone take the parallel
# one on a one-thread team, whose loop body Numba compiles with noalias arrays
# (edgeops.threads.launch; figures: docs/notes/threads.md).
@njit(parallel=True, cache=True, fastmath=_FM, error_model="numpy")
def _layernorm_kernel(x, scale, bias, rows, d, eps, y, act, p0, p1):
    for r in prange(rows):
        _layernorm_row(x, scale, bias, d, eps, y, act, p0, p1, r)


@njit(cache=True, fastmath=_FM, error_model="numpy")
def _layernorm_serial(x, scale, bias, rows, d, eps, y, act, p0, p1):
    for r in range(rows):
        _layernorm_row(x, scale, bias, d, eps, y, act, p0, p1, r)


@njit(parallel=True, cache=True, fastmath=_FM, error_model="numpy")
def _groupnorm_kernel(x, scale, bias, n, c, spatial, groups, eps, y, act, p0, p1):
    empty = np.empty(0, np.float32)
    for t in prange(n * groups):
        _groupnorm_task(x, scale, bias, c // groups, spatial, groups, eps, y, act, p0, p1,
                        empty, t)


@njit(cache=True, fastmath=_FM, error_model="numpy")
def _groupnorm_serial(x, scale, bias, n, c, spatial, groups, eps, y, act, p0, p1):
    empty = np.empty(0, np.float32)
    for t in range(n * groups):
        _groupnorm_task(x, scale, bias, c // groups, spatial, groups, eps, y, act, p0, p1,
                        empty, t)


# Chains: consecutive norms over the same partition (LayerNorm rows, GroupNorm (image, group)
# blocks) in ONE loop, each row or block taken through every stage before the next: one
# fork/join of the thread team for the chain instead of one per norm, and the intermediate row
# still in L1 when the next stage reads it. ``y`` is one flat buffer: (kept stages) x (elements),
# then two scratch rows (blocks) per chunk of rows. Stage s writes output row slot[s], or, when
# slot[s] < 0 (an intermediate nothing outside the chain reads), a scratch row of its chunk, which
# the next stage reads back from L1: materialising every intermediate of four LayerNorm+GELU
# stages on 128x768 writes ~1.5 MB a call, beyond L2 where measured. One buffer, so every view
# has the same (contiguous) type: views of two arrays would unify to a strided layout, which
# vectorised worse (measured). Chunks: one per thread, each running its rows in order.
@njit(cache=True, inline="always", fastmath=_FM, error_model="numpy")
def _chain_dst(slot, s, n, off, blk, scr):
    """Offset in ``y`` of stage s's output for the row (block) at ``off``."""
    return slot[s] * n + off if slot[s] >= 0 else scr + (s & 1) * blk


@njit(cache=True, inline="always", fastmath=_FM, error_model="numpy")
def _layernorm_chain_rows(x, scales, biases, rows, d, eps, y, slot, act, p0, p1, r0, r1, w):
    """Rows [r0, r1) through every stage; ``w``: which scratch pair (one per worker)."""
    n = rows * d
    scr = (slot.max() + 1) * n + w * 2 * d
    for r in range(r0, r1):
        off = r * d
        src = x[off:off + d]
        for s in range(slot.shape[0]):
            o = _chain_dst(slot, s, n, off, d, scr)
            dst = y[o:o + d]
            _layernorm_vec(src, scales[s], biases[s], d, eps[s], dst, act[s], p0[s], p1[s])
            src = dst


@njit(cache=True, inline="always", fastmath=_FM, error_model="numpy")
def _groupnorm_chain_tasks(x, scales, biases, n, c, spatial, groups, eps, y, slot, act, p0, p1,
                           empty, t0, t1, w):
    """(image, group) blocks [t0, t1) through every stage; ``w`` as above."""
    cg = c // groups
    blk = cg * spatial
    tasks = n * groups
    scr = (slot.max() + 1) * tasks * blk + w * 2 * blk
    for t in range(t0, t1):
        off = t * blk
        src = x[off:off + blk]
        for s in range(slot.shape[0]):
            o = _chain_dst(slot, s, tasks * blk, off, blk, scr)
            dst = y[o:o + blk]
            _groupnorm_block(src, scales[s], biases[s], cg, spatial, t % groups, eps[s], dst,
                             act[s], p0[s], p1[s], empty)
            src = dst


@njit(parallel=True, cache=True, fastmath=_FM, error_model="numpy")
def _layernorm_chain(x, scales, biases, rows, d, eps, y, slot, act, p0, p1, chunks):
    for c in prange(chunks):
        _layernorm_chain_rows(x, scales, biases, rows, d, eps, y, slot, act, p0, p1,
                              c * rows // chunks, (c + 1) * rows // chunks, c)


@njit(cache=True, fastmath=_FM, error_model="numpy")
def _layernorm_chain_serial(x, scales, biases, rows, d, eps, y, slot, act, p0, p1, chunks):
    _layernorm_chain_rows(x, scales, biases, rows, d, eps, y, slot, act, p0, p1, 0, rows, 0)


@njit(parallel=True, cache=True, fastmath=_FM, error_model="numpy")
def _groupnorm_chain(x, scales, biases, n, c, spatial, groups, eps, y, slot, act, p0, p1, chunks):
    empty = np.empty(0, np.float32)
    tasks = n * groups
    for k in prange(chunks):
        _groupnorm_chain_tasks(x, scales, biases, n, c, spatial, groups, eps, y, slot, act, p0,
                               p1, empty, k * tasks // chunks, (k + 1) * tasks // chunks, k)


@njit(cache=True, fastmath=_FM, error_model="numpy")
def _groupnorm_chain_serial(x, scales, biases, n, c, spatial, groups, eps, y, slot, act, p0, p1,
                            chunks):
    empty = np.empty(0, np.float32)
    _groupnorm_chain_tasks(x, scales, biases, n, c, spatial, groups, eps, y, slot, act, p0, p1,
                           empty, 0, n * groups, 0)


# Rows of a last-axis softmax taken a block at a time, pass by pass (every row's max, then every
# row's exp and sum, then every row's scale): the rows' reductions and reciprocals overlap where
# row after row of all three passes waited on each one. 16 rows of 128 floats stay in L1.
SOFTMAX_ROWS = 16


@njit(cache=True, inline="always", fastmath=_FM, error_model="numpy")
def _softmax_rows(x, r0, r1, length, y):
    """Softmax of rows [r0, r1) (at most SOFTMAX_ROWS) of a (rows, length) x, last axis, from
    the row intrinsics of _vmath: the same bits wherever this is inlined, and no per-row loop
    set-up."""
    m = carray(_vm.stack_f32(SOFTMAX_ROWS), (SOFTMAX_ROWS,))
    inv = carray(_vm.stack_f32(SOFTMAX_ROWS), (SOFTMAX_ROWS,))
    for r in range(r0, r1):
        m[r - r0] = _vm.row_max(x[r * length:(r + 1) * length], length)
    for r in range(r0, r1):
        inv[r - r0] = np.float32(1.0) / _vm.exp_sum(x[r * length:(r + 1) * length],
                                                    y[r * length:(r + 1) * length], length,
                                                    m[r - r0])
    for r in range(r0, r1):
        yv = y[r * length:(r + 1) * length]
        _vm.scale(yv, yv, length, inv[r - r0])


@njit(cache=True, inline="always", fastmath=_FM, error_model="numpy")
def _softmax_outer(x, o, length, inner, y):
    """Softmax of outer index ``o`` over the middle axis of (outer, length, inner), inner > 1 (a
    non-last axis): vector lanes run along ``inner``."""
    base = o * length * inner
    xv = x[base:base + length * inner]
    yv = y[base:base + length * inner]
    mx = xv[0:inner].copy()
    sm = np.zeros(inner, np.float32)
    for j in range(1, length):
        xr = xv[j * inner:(j + 1) * inner]
        for i in range(inner):
            mx[i] = max(mx[i], xr[i])
    for j in range(length):
        xr = xv[j * inner:(j + 1) * inner]
        yr = yv[j * inner:(j + 1) * inner]
        for i in range(inner):
            e = _vm.exp_nonpos32(xr[i] - mx[i])
            yr[i] = e
            sm[i] += e
    for i in range(inner):
        sm[i] = np.float32(1.0) / sm[i]
    for j in range(length):
        yr = yv[j * inner:(j + 1) * inner]
        for i in range(inner):
            yr[i] *= sm[i]


@njit(cache=True, inline="always", fastmath=_FM, error_model="numpy")
def _softmax_units(outer, inner):
    """The kernels' units of work: blocks of SOFTMAX_ROWS rows on the last axis, else outer
    indices (see _softmax_unit)."""
    return (outer + SOFTMAX_ROWS - 1) // SOFTMAX_ROWS if inner == 1 else outer


@njit(cache=True, inline="always", fastmath=_FM, error_model="numpy")
def _softmax_unit(x, u, outer, length, inner, y):
    if inner == 1:
        _softmax_rows(x, u * SOFTMAX_ROWS, min(outer, (u + 1) * SOFTMAX_ROWS), length, y)
    else:
        _softmax_outer(x, u, length, inner, y)


@njit(parallel=True, cache=True, fastmath=_FM, error_model="numpy")
def _softmax_kernel(x, outer, length, inner, y):
    for u in prange(_softmax_units(outer, inner)):
        _softmax_unit(x, u, outer, length, inner, y)


@njit(cache=True, fastmath=_FM, error_model="numpy")
def _softmax_serial(x, outer, length, inner, y):
    for u in range(_softmax_units(outer, inner)):
        _softmax_unit(x, u, outer, length, inner, y)


def _f32(who, name, t):
    if not isinstance(t, np.ndarray) or t.dtype != np.float32:
        raise EdgeOpsError(f"neon {who}: {name} must be a float32 numpy array, got "
                           f"{getattr(t, 'dtype', type(t).__name__)}")
    return np.ascontiguousarray(t)


def _act(act):
    return act if isinstance(act, tuple) else ep.activation(act)


def _ln_param(name, p, tail):
    """Scale/B flattened to the normalised shape; the usual full-shape, contiguous parameter is
    used as is (broadcast_to + copy is a noticeable share of a small LayerNorm)."""
    p = _f32("layernorm", name, p)
    if p.shape == tail and p.flags.c_contiguous:
        return p.reshape(-1)
    return np.ascontiguousarray(np.broadcast_to(p, tail)).reshape(-1)


def layernorm(x, scale, bias=None, axis=-1, epsilon=1e-5, act=None) -> np.ndarray:
    """LayerNormalization over axes [axis, rank) (+ fused activation, e.g. "gelu"/"gelu_tanh")."""
    x = _f32("layernorm", "X", x)
    st = layernorm_stage(x.shape, scale, bias, axis, epsilon, act)
    y = np.empty_like(x)
    if x.size:
        run(("layernorm", x.shape, st.act), _layernorm_kernel, _layernorm_serial, x.size,
            x.reshape(-1), st.scale, st.bias, *st.part, st.eps, y.reshape(-1), *st.act)
    return y


def groupnorm(x, scale, bias, num_groups, epsilon=1e-5, act=None) -> np.ndarray:
    """GroupNormalization (per-channel scale/bias as opset 21; per-group ones are expanded)
    (+ fused activation, e.g. "silu")."""
    x = _f32("groupnorm", "X", x)
    st = groupnorm_stage(x.shape, scale, bias, num_groups, epsilon, act)
    y = np.empty_like(x)
    if x.size:
        run(("groupnorm", x.shape, st.part, st.act), _groupnorm_kernel, _groupnorm_serial, x.size,
            x.reshape(-1), st.scale, st.bias, *st.part, st.eps, y.reshape(-1), *st.act)
    return y


class NormStage:
    """One norm (+ activation) as a stage of a fused chain (:func:`run_chain`): what
    :func:`layernorm` / :func:`groupnorm` check and prepare of their parameters, for an input of
    ``shape``. ``part``: the partition it is computed over (LayerNorm: rows x normalised size;
    GroupNorm: images, channels, spatial size, groups); stages chain when kind and partition match."""
    __slots__ = ("kind", "shape", "part", "scale", "bias", "eps", "act")

    def __init__(self, kind, shape, part, scale, bias, eps, act):
        self.kind, self.shape, self.part = kind, tuple(shape), part
        self.scale, self.bias, self.eps, self.act = scale, bias, float(eps), _act(act)

    def follows(self, prev: "NormStage") -> bool:
        """Whether this stage can take ``prev``'s output inside one fused pass."""
        return (isinstance(prev, NormStage) and self.kind == prev.kind and self.part == prev.part
                and self.shape == prev.shape)

    @staticmethod
    def chain(stages) -> "Chain":
        return Chain(stages)


def layernorm_stage(shape, scale, bias=None, axis=-1, epsilon=1e-5, act=None) -> NormStage:
    """:func:`layernorm` of an input of ``shape`` as a chain stage (its checks and parameters)."""
    ax = axis + len(shape) if axis < 0 else axis
    if not 0 <= ax < len(shape):
        raise EdgeOpsError(f"neon layernorm: axis={axis} out of range for X {tuple(shape)}")
    tail = tuple(shape[ax:])
    d = math.prod(tail)
    try:
        sc = _ln_param("Scale", scale, tail)
        bs = np.zeros(d, np.float32) if bias is None else _ln_param("B", bias, tail)
    except ValueError:
        raise EdgeOpsError(f"neon layernorm: Scale/B do not broadcast to {tail}") from None
    return NormStage("layernorm", shape, (math.prod(shape) // max(d, 1), d), sc, bs, epsilon, act)


def groupnorm_stage(shape, scale, bias, num_groups, epsilon=1e-5, act=None) -> NormStage:
    """:func:`groupnorm` of an input of ``shape`` as a chain stage (its checks and parameters)."""
    if len(shape) < 2 or shape[1] % num_groups:
        raise EdgeOpsError(f"neon groupnorm: num_groups={num_groups} must divide C of X "
                           f"{tuple(shape)}")
    c = shape[1]
    par = []
    for name, p in (("Scale", scale), ("Bias", bias)):
        p = _f32("groupnorm", name, p).reshape(-1)
        if p.size not in (c, num_groups):
            raise EdgeOpsError(f"neon groupnorm: {name} has {p.size} entries; need C={c} or "
                               f"num_groups={num_groups}")
        par.append(np.repeat(p, c // p.size).astype(np.float32))
    return NormStage("groupnorm", shape, (shape[0], c, math.prod(shape[2:]), num_groups),
                     par[0], par[1], epsilon, act)


class Chain:
    """Stages (:class:`NormStage`, each taking the previous one's output) as one fused pass over
    their common partition, parameters stacked once: calling it with X returns every stage's
    output (views of one buffer). The fork/join of the thread team is paid once for all stages;
    whether it pays at all is timed on the chain's first calls (:class:`ThreadChoice`: keep a
    Chain for a recurring shape, as a region does), except below ``SMALL_ELEMENTS`` element
    visits over all stages, which always run on the calling thread."""

    def __init__(self, stages):
        stages = list(stages)
        if not stages or any(not s.follows(p) for p, s in zip(stages, stages[1:])):
            raise EdgeOpsError(f"neon chain: stages {[(s.kind, s.shape) for s in stages]} do not "
                               f"chain (one kind over one partition)")
        self.kind, self.shape, self.part, self.k = stages[0].kind, stages[0].shape, stages[0].part, len(stages)
        self.scale = np.stack([s.scale for s in stages])
        self.bias = np.stack([s.bias for s in stages])
        self.eps = np.array([s.eps for s in stages])
        self.act = np.array([s.act[0] for s in stages], np.int64)
        self.p0 = np.array([s.act[1] for s in stages])
        self.p1 = np.array([s.act[2] for s in stages])
        self.threads = ThreadChoice()    # alone or on the pool: timed on the first calls
        ln = self.kind == "layernorm"
        self.units = self.part[0] * (1 if ln else self.part[3])   # rows, or (image, group) blocks
        self._fns = ((_layernorm_chain, _layernorm_chain_serial) if ln else
                     (_groupnorm_chain, _groupnorm_chain_serial))      # (parallel, serial)
        self._layouts: dict = {}
        self._native: dict = {}          # (kept, chunks, threads, parallel) -> NativePlan

    def _layout(self, keep) -> tuple:
        """(output slot per stage (-1: scratch), kept flags, number kept) for ``keep``, once."""
        got = self._layouts.get(keep)
        if got is None:
            kept = [True] * self.k if keep is None else [bool(f) for f in keep]
            if len(kept) != self.k:
                raise EdgeOpsError(f"neon chain: keep has {len(kept)} flags for {self.k} stages")
            kept[-1] = True
            slot, n = [], 0
            for f in kept:
                slot.append(n if f else -1)
                n += f
            got = self._layouts[keep] = (np.array(slot, np.int64), tuple(kept), n)
        return got

    def _buffer(self, n: int, n_out: int, chunks: int) -> int:
        """Floats of the one buffer a pass writes: the kept outputs, then two scratch rows
        (blocks) per chunk when some stage's output is not kept."""
        return n_out * n + (chunks * 2 * (n // max(self.units, 1)) if n_out < self.k else 0)

    def __call__(self, x, keep=None) -> list:
        """Every stage's output for X (views of one buffer); with ``keep`` (a flag per stage),
        only the flagged stages' and the last one's, None for the others: their values then
        stay in per-thread scratch rows and never reach memory."""
        if type(x) is not np.ndarray or x.dtype != np.float32 or not x.flags.c_contiguous:
            x = _f32(self.kind, "X", x)
        if x.shape != self.shape:
            raise EdgeOpsError(f"neon chain: X is {x.shape}, the chain was made for {self.shape}")
        slot, kept, n_out = self._layout(keep if keep is None else tuple(keep))
        n, units = x.size, self.units
        tc, threads, pool = decide(self.threads, n * self.k if units > 1 else 0)
        chunks = min(units, threads) if pool else 1
        y = np.empty(self._buffer(n, n_out, chunks), np.float32)
        if n:
            t = time.perf_counter()
            launch(*self._fns, pool, n * self.k, x.reshape(-1), self.scale, self.bias,
                   *self.part, self.eps, y, slot, self.act, self.p0, self.p1, chunks)
            if tc is not None:
                tc.record(threads, pool, time.perf_counter() - t)
        shape = x.shape
        return [y[j * n:(j + 1) * n].reshape(shape) if f else None
                for j, f in zip(slot.tolist(), kept)]


    def native_step(self, keep, threads: int, x=None):
        """This chain for ``keep`` as a native step (:mod:`edgeops.plans`), its thread choice
        settled now by calls on ``x`` if it is still timing (None if that cannot be); a string
        when it cannot be one."""
        plan = self.native_plan(keep, threads)
        if plan is None and x is not None:
            self.threads.settle(threads, lambda: self(x, keep))
            plan = self.native_plan(keep, threads)
        if plan is None or plan is False:
            return None if plan is None else "a stage's output besides the last is kept"
        return chain_step(plan, self.shape)

    def native_plan(self, keep, threads: int):
        """This chain for ``keep`` as a :class:`NativePlan` on at most ``threads`` threads: the
        pass :meth:`__call__` makes, as the data of its native entry. It runs the way the chain's :class:`ThreadChoice` chose: None
        while that is still timing; False when it cannot be planned (more than the last
        stage's output kept). Made once per way of running it."""
        slot, kept, n_out = self._layout(keep if keep is None else tuple(keep))
        n = math.prod(self.shape)
        if n_out != 1 or n == 0:
            return False
        units = self.units
        work = n * self.k if units > 1 else 0
        pool = False
        if threads > 1 and work >= SMALL_ELEMENTS:
            pool = self.threads.decided(threads)
            if pool is None:
                return None
        chunks = min(units, threads) if pool else 1
        team = threads if pool else 1
        size = self._buffer(n, n_out, chunks)
        # as launch(): the pool; alone, the serial twin below SMALL_ELEMENTS, else the parallel
        # one on a one-thread team
        par = pool or n * self.k >= SMALL_ELEMENTS
        key = (kept, chunks, team, par)
        plan = self._native.get(key)
        if plan is not None:
            return plan
        want = ((self.scale, np.float32, 2), (self.bias, np.float32, 2), (self.eps, np.float64, 1),
                (slot, np.int64, 1), (self.act, np.int64, 1), (self.p0, np.float64, 1),
                (self.p1, np.float64, 1))
        if any(a.dtype != t or a.ndim != d or not a.flags.c_contiguous for a, t, d in want):
            return False       # the plan's cfunc is typed for these
        plan = self._native[key] = NativePlan(self, slot, n, size, chunks, team, par, pool)
        return plan


class NativePlan:
    """A :class:`Chain` call for one input size, as the data its native entry runs with
    (``neon.norm_chain`` in :mod:`edgeops.targets.neon.native`): the chain's held parameters and
    the arguments :meth:`Chain.__call__` passes its kernel, so the entry calls the very kernels
    with arguments of the same types (the same compiled code, the same bits). No state:
    concurrent calls are safe."""
    __slots__ = ("elements", "pool", "threads", "parallel", "chain", "slot", "held", "values")

    def __init__(self, chain: Chain, slot, n: int, size: int, chunks: int, team: int,
                 parallel: bool, pool: bool):
        self.chain, self.slot, self.elements, self.pool, self.threads = chain, slot, n, pool, team
        self.parallel = parallel
        self.held = (chain.scale, chain.bias, chain.eps, slot, chain.act, chain.p0, chain.p1)
        part = (*chain.part, 0, 0)[:4]       # LayerNorm's two, GroupNorm's four
        self.values = np.array([n, size, chunks, team, chain.k, chain.scale.shape[1],
                                _PLAN_KERNELS[(chain.kind, parallel)], *part], np.int64)


_PLAN_KERNELS = {("layernorm", True): 0, ("layernorm", False): 1, ("groupnorm", True): 2,
                 ("groupnorm", False): 3}


def run_chain(x, stages) -> list:
    """Every stage's output, stage s applied to stage s-1's (the first to ``x``): :class:`Chain`."""
    return Chain(stages)(x)


def softmax(x, axis=-1) -> np.ndarray:
    x = _f32("softmax", "X", x)
    ax = axis + x.ndim if axis < 0 else axis
    if not 0 <= ax < x.ndim:
        raise EdgeOpsError(f"neon softmax: axis={axis} out of range for X {x.shape}")
    y = np.empty_like(x)
    if x.size:
        outer = math.prod(x.shape[:ax])
        inner = math.prod(x.shape[ax + 1:])
        # exp per element: the pool can pay from SMALL_ELEMENTS even when passive, so it is timed
        run(softmax_key(x.shape, ax), _softmax_kernel, _softmax_serial, x.size, x.reshape(-1),
            outer, x.shape[ax], inner, y.reshape(-1))
    return y


def softmax_key(shape, axis: int) -> tuple:
    """The thread-choice key of a softmax call (edgeops.threads.choice)."""
    return ("softmax", tuple(shape), axis)


# ---- the chains' native entry (edgeops.plans) --------------------------------------------------

def _chain_entry(args, arrays, values, scratch):
    # values: n, mode, team, size, chunks, k, w, which, part[4]; the chain's buffer is the
    # output itself when it holds only the output (size == n), else scratch
    n, mode, size, chunks, k, w, which = (values[0], values[1], values[3], values[4], values[5],
                                          values[6], values[7])
    x = carray(args[0], (n,), np.float32)
    out = carray(args[1], (n,), np.float32)
    y = out if size == n else carray(scratch, (size,), np.float32)
    scales = carray(arrays[0], (k, w), np.float32)
    biases = carray(arrays[1], (k, w), np.float32)
    eps = carray(arrays[2], (k,), np.float64)
    slot = carray(arrays[3], (k,), np.int64)
    act = carray(arrays[4], (k,), np.int64)
    p0 = carray(arrays[5], (k,), np.float64)
    p1 = carray(arrays[6], (k,), np.float64)
    q0, q1, q2, q3 = values[8], values[9], values[10], values[11]
    if which == 0:
        if mode == SERIAL:
            _layernorm_chain_serial(x, scales, biases, q0, q1, eps, y, slot, act, p0, p1,
                                          chunks)
        else:
            _layernorm_chain(x, scales, biases, q0, q1, eps, y, slot, act, p0, p1, chunks)
    else:
        if mode == SERIAL:
            _groupnorm_chain_serial(x, scales, biases, q0, q1, q2, q3, eps, y, slot, act,
                                          p0, p1, chunks)
        else:
            _groupnorm_chain(x, scales, biases, q0, q1, q2, q3, eps, y, slot, act, p0, p1,
                                   chunks)
    if size != n:
        for i in range(n):
            out[i] = y[i]
    return 0


def chain_entry() -> int:
    """The chains' native entry's address (compiled or loaded on first use)."""
    return _entries.address("neon.norm_chain", _chain_entry)


def chain_step(plan, shape, reads=(0,)):
    """A fused norm chain's :class:`~edgeops.targets.neon.norms.NativePlan` as a step."""
    v = plan.values
    n, size = int(v[0]), int(v[1])
    mode = SERIAL if not plan.parallel else POOL if plan.pool else ALONE
    values = np.array([n, mode, plan.threads, size, v[2], v[4], v[5], v[6] // 2, *v[7:11]],
                      np.int64)
    held = tuple(plan.held)
    return NativeStep("neon.norm_chain", chain_entry(), tuple(reads),
                      (("float32", tuple(shape)),), (("float32", tuple(shape)),), held, values,
                      0 if size == n else size * 4, plan.threads, keep=plan)
