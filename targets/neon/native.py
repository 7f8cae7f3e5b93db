"""The neon kernels as native entries (:mod:`edgeops.plans`): Numba ``cfunc`` wrappers that call
the very njit kernels the Python adapters call, with the arguments those would pass, rebuilt
from a step's ``arrays`` and ``values``. Same compiled code, same thread team: the same bits as
the Python path (tests assert it). No constants are folded into an entry's code (that changed
a LayerNorm's summation order, 2.6e-6 off): one entry per kernel family serves every node.

The thread team is fixed when a step is prepared: the calling thread alone for a small call
(the kernel's serial twin, no parallel region launched), else as the kernel's own thread
choice decided from its timed Python calls (``edgeops.threads``), never re-timed afterwards.

Entries are compiled on first use and cached on disk (``cache=True``); Numba's threading layer
is started first (:func:`edgeops.plans.prepare_numba`), which a cached entry that calls
parallel kernels needs to link.
"""
from __future__ import annotations

import math

import numpy as np
from numba import carray

from edgeops.plans import NativeStep
from edgeops.targets.neon import _entries, eltwise, gemm, norms
from edgeops.targets.neon._entries import ALONE, POOL, SERIAL
from edgeops.threads import SMALL_ELEMENTS, choice, num_threads


# ---- entries ---------------------------------------------------------------------------------
# Each reads its mode from values[1] (values[2]: the team, which the runtime sets around the
# call: an entry that set Numba's thread count itself could not be cached on disk, since
# get/set_num_threads are ctypes pointers to the threading layer).

def _act(args, arrays, values, scratch):
    n, mode, k = values[0], values[1], values[3]
    x = carray(args[0], (n,), np.float32)
    y = carray(args[1], (n,), np.float32)
    ch = carray(arrays[0], (k, 3), np.float64)
    if mode == SERIAL:
        eltwise._chain_serial(x, y, ch)
    else:
        eltwise._chain_kernel(x, y, ch)
    return 0


def _binary(args, arrays, values, scratch):
    # values: n, mode, team, k, nb, inner, op, b held (1: arrays[1], 0: args[1])
    n, mode, k, nb, inner, op, held = (values[0], values[1], values[3], values[4], values[5],
                                       values[6], values[7])
    a = carray(args[0], (n,), np.float32)
    if held:
        b = carray(arrays[1], (nb,), np.float32)
        y = carray(args[1], (n,), np.float32)
    else:
        b = carray(args[1], (nb,), np.float32)
        y = carray(args[2], (n,), np.float32)
    ch = carray(arrays[0], (k, 3), np.float64)
    if mode == SERIAL:
        eltwise._binary_serial(a, b, inner, y, op, ch)
    else:
        eltwise._binary_kernel(a, b, inner, y, op, ch)
    return 0


def _softmax(args, arrays, values, scratch):
    outer, mode, length, inner = values[0], values[1], values[3], values[4]
    n = outer * length * inner
    x = carray(args[0], (n,), np.float32)
    y = carray(args[1], (n,), np.float32)
    if mode == SERIAL:
        norms._softmax_serial(x, outer, length, inner, y)
    else:
        norms._softmax_kernel(x, outer, length, inner, y)
    return 0


def _copy(args, arrays, values, scratch):
    n = values[0]
    x = carray(args[0], (n,), np.float32)
    y = carray(args[1], (n,), np.float32)
    for i in range(n):     # vectorised; a byte-wise slice copy ran at ~2 GB/s
        y[i] = x[i]
    return 0


def _gemm(args, arrays, values, scratch):
    # values: M, N, K, mode, team, ars, acs, brs, bcs, ldc, accumulate, bias mode, act, mc, nc,
    # kc, rch, cch, batch entries, A held, B held, A length, B length, bias length, C length
    M, N, K, mode = values[0], values[1], values[2], values[3]
    ars, acs, brs, bcs, ldc = values[5], values[6], values[7], values[8], values[9]
    accumulate = values[10] != 0
    bias_mode, act, mc, nc, kc = values[11], values[12], values[13], values[14], values[15]
    rch, cch, nbt = values[16], values[17], values[18]
    a_held, b_held = values[19], values[20]
    a_len, b_len, bias_len, c_len = values[21], values[22], values[23], values[24]
    a_offs = carray(arrays[0], (nbt,), np.int64)
    b_offs = carray(arrays[1], (nbt,), np.int64)
    c_offs = carray(arrays[2], (nbt,), np.int64)
    bias = carray(arrays[3], (bias_len,), np.float32)
    bias_offs = carray(arrays[4], (nbt,), np.int64)
    fv = carray(arrays[5], (3,), np.float64)
    i = 0
    if a_held:
        a = carray(arrays[6], (a_len,), np.float32)
    else:
        a = carray(args[i], (a_len,), np.float32)
        i += 1
    if b_held:
        b = carray(arrays[7], (b_len,), np.float32)
    else:
        b = carray(args[i], (b_len,), np.float32)
        i += 1
    c = carray(args[i], (c_len,), np.float32)
    if accumulate:
        pre = carray(arrays[8], (c_len,), np.float32)
        for j in range(c_len):
            c[j] = pre[j]
    alpha = np.float32(fv[0])
    if mode == SERIAL:
        gemm._gemm_block(0, M, 0, N, K, a, a_offs[0], ars, acs, b, b_offs[0], brs, bcs, c,
                         c_offs[0], ldc, alpha, accumulate, bias, bias_offs[0], bias_mode, act,
                         fv[1], fv[2], mc, nc, kc)
    else:
        gemm._gemm_par(M, N, K, a, a_offs, ars, acs, b, b_offs, brs, bcs, c, c_offs, ldc, alpha,
                       accumulate, bias, bias_offs, bias_mode, act, fv[1], fv[2], mc, nc, kc,
                       rch, cch)
    return 0


_BODIES = {"neon.act": _act, "neon.binary": _binary, "neon.softmax": _softmax,
           "neon.copy": _copy, "neon.gemm": _gemm}


def entry(name: str) -> int:
    """The address of entry ``name``, compiled (or loaded from Numba's cache) on first use."""
    return _entries.address(name, _BODIES[name])


def warm() -> None:
    """Compile (or load) every entry now: while a session is made, not inside a run."""
    for name in _BODIES:
        entry(name)
    norms.chain_entry()


# ---- preparing steps -------------------------------------------------------------------------

def team(key, elements: int, threads: int, trial=None):
    """(mode, team) of a call of ``elements`` on at most ``threads`` threads, as the Python
    path's :func:`edgeops.threads.run` runs it once decided. A thread choice (``key``) still
    timing is settled now by ``trial()`` calls (the Python path's kernel call, which times
    itself: a dozen calls, while the step is made, not while serving); None if it is not."""
    threads = max(1, min(threads, num_threads()))
    if elements < SMALL_ELEMENTS:
        return SERIAL, 1
    if threads == 1:
        return ALONE, 1
    pool = choice(key).settle(threads, trial)
    if pool is None:
        return None
    return (POOL, threads) if pool else (ALONE, 1)


def _f32(x) -> bool:
    return isinstance(x, np.ndarray) and x.dtype == np.float32


def act_step(x, steps, threads: int, reads=(0,)):
    """An activation chain over X as a step."""
    if not _f32(x):
        return "X is not fp32"
    ch = steps if isinstance(steps, np.ndarray) else eltwise.make_chain(steps)
    ch = np.ascontiguousarray(ch, np.float64)
    how = team(eltwise.chain_key(x.size, ch), x.size, threads, lambda: eltwise.chain(x, ch))
    if how is None:
        return None
    shape = tuple(x.shape)
    return NativeStep("neon.act", entry("neon.act"), tuple(reads), (("float32", shape),),
                      (("float32", shape),), (ch,),
                      np.array([x.size, how[0], how[1], ch.shape[0]], np.int64), 0, how[1])


def binary_step(a, b, op: str, held: dict, threads: int, steps=()):
    """``chain(A op B)`` as a step: A a runtime input of the output's shape, B runtime (read in
    place: the same shape, a scalar or per-channel) or held (any broadcast, laid out now)."""
    if op not in eltwise.BINARY or not (_f32(a) and _f32(b)):
        return "inputs are not fp32"
    if 0 in held:
        return "A is a held constant"
    try:
        shape = np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        return f"{a.shape} and {b.shape} do not broadcast"
    if tuple(shape) != tuple(a.shape):
        return "A is broadcast"
    if 1 in held:
        bflat, inner = eltwise.b_operand(np.ascontiguousarray(b), shape)
    else:
        inner = eltwise.b_layout(b.shape, shape)
        if inner is None:
            return f"B {b.shape} would be materialised on every call"
        bflat = None
    nb = b.size if bflat is None else bflat.size
    ch = np.ascontiguousarray(steps if isinstance(steps, np.ndarray)
                              else eltwise.make_chain(steps), np.float64)
    n = int(np.prod(shape, dtype=np.int64))
    how = team(eltwise.binary_key(shape, op, nb, inner, ch), n, threads,
               lambda: eltwise.binary(a, b, op, ch))
    if how is None:
        return None
    arrays = (ch,) if bflat is None else (ch, bflat)
    reads = (0,) if bflat is not None else (0, 1)
    ins = (("float32", tuple(a.shape)),) + ((("float32", tuple(b.shape)),) if bflat is None
                                            else ())
    values = [n, how[0], how[1], ch.shape[0], nb, inner, eltwise.BINARY[op], bflat is not None]
    return NativeStep("neon.binary", entry("neon.binary"), reads, ins,
                      (("float32", tuple(shape)),), arrays, np.array(values, np.int64), 0,
                      how[1])


def softmax_step(x, axis: int, threads: int):
    if not _f32(x):
        return "X is not fp32"
    ax = axis + x.ndim if axis < 0 else axis
    if not 0 <= ax < x.ndim or x.size == 0:
        return f"axis {axis} of {x.shape}"
    how = team(norms.softmax_key(x.shape, ax), x.size, threads, lambda: norms.softmax(x, axis))
    if how is None:
        return None
    outer, inner = math.prod(x.shape[:ax]), math.prod(x.shape[ax + 1:])
    shape = tuple(x.shape)
    return NativeStep("neon.softmax", entry("neon.softmax"), (0,), (("float32", shape),),
                      (("float32", shape),), (),
                      np.array([outer, how[0], how[1], x.shape[ax], inner], np.int64), 0, how[1])


def copy_step(x):
    if not _f32(x):
        return "X is not fp32"
    shape = tuple(x.shape)
    return NativeStep("neon.copy", entry("neon.copy"), (0,), (("float32", shape),),
                      (("float32", shape),), (), np.array([x.size], np.int64))


_EMPTY_F32 = np.zeros(1, np.float32)


def _gemm_step(lay, a_src, b_src, a_run, b_run, out_shape, strides, bias_vec, bias_mode, pre,
               alpha: float, act, threads: int, reads):
    """A :func:`~edgeops.targets.neon.gemm.gemm_flat` call as a step: ``lay`` its layout (made
    on the calling thread capped at ``threads``, as the Python path makes it), ``a_src`` /
    ``b_src`` the flat held operand or None (then ``a_run`` / ``b_run``: the runtime input's
    (shape, flat length))."""
    M, N, K = lay["M"], lay["N"], lay["K"]
    ars, acs, brs, bcs = strides
    if lay["items"] == 1:
        mode, team = SERIAL, 1
    elif lay["serial"]:
        mode, team = ALONE, 1
    else:
        mode, team = POOL, max(1, min(threads, num_threads()))
    c_len = int(np.prod(out_shape, dtype=np.int64))
    bias = _EMPTY_F32 if bias_vec is None else np.ascontiguousarray(bias_vec, np.float32)
    a_len = a_src.size if a_src is not None else a_run[1]
    b_len = b_src.size if b_src is not None else b_run[1]
    values = [M, N, K, mode, team, ars, acs, brs, bcs, N, pre is not None, bias_mode, act[0],
              lay["mc"], lay["nc"], lay["kc"], lay["rch"], lay["cch"], len(lay["a_offs"]),
              a_src is not None, b_src is not None, a_len, b_len, bias.size, c_len]
    fv = np.array([alpha, act[1], act[2]], np.float64)
    arrays = (lay["a_offs"], lay["b_offs"], lay["c_offs"], bias, lay["bias_offs"], fv,
              _EMPTY_F32 if a_src is None else np.ascontiguousarray(a_src),
              _EMPTY_F32 if b_src is None else np.ascontiguousarray(b_src),
              _EMPTY_F32 if pre is None else np.ascontiguousarray(pre, np.float32).reshape(-1))
    ins = tuple(("float32", tuple(r[0])) for r in (a_run, b_run) if r is not None)
    return NativeStep("neon.gemm", entry("neon.gemm"), tuple(reads), ins,
                      (("float32", tuple(out_shape)),), arrays, np.array(values, np.int64), 0,
                      team)


def matmul_step(a, b, held, threads: int, tiling=None):
    """MatMul (numpy broadcasting) as a step: A runtime, B held or runtime."""
    from edgeops.targets.neon.blocking import from_tiling
    from edgeops.threads import capped
    if 0 in held:
        return "A is a held constant"
    if not (_f32(a) and _f32(b)):
        return "inputs are not fp32"
    M, N, K, batch, (af, a_offs, ars, acs), (bf, b_offs, brs, bcs) = gemm.matmul_operands(a, b)
    nbt = int(np.prod(batch, dtype=np.int64))
    if K == 0 or nbt == 0 or M == 0 or N == 0:
        return "an empty product"
    if not a.flags.c_contiguous or (1 not in held and not b.flags.c_contiguous):
        return "a runtime operand is not laid out as ONNX Runtime hands it"
    lay = capped(threads, gemm.flat_layout, M, N, K, a_offs, b_offs,
                 np.arange(nbt, dtype=np.int64) * (M * N), None, from_tiling(tiling))
    out = batch + (M, N)
    shape = out[:-2] + (out[-1],) if a.ndim == 1 else out
    shape = shape[:-1] if b.ndim == 1 else shape
    b_src = bf if 1 in held else None
    return _gemm_step(lay, None, b_src, (a.shape, a.size), None if b_src is not None
                      else (b.shape, b.size), shape, (ars, acs, brs, bcs), None, 0, None, 1.0,
                      (0, 0.0, 0.0), threads, (0,) if b_src is not None else (0, 1))


def gemm_node_step(xs, attrs, held, threads: int, tiling=None):
    """ONNX Gemm as a step: A runtime, B held or runtime, C absent or held."""
    from edgeops.targets.neon.blocking import from_tiling
    from edgeops.threads import capped
    a, b = xs[0], xs[1]
    c = xs[2] if len(xs) > 2 else None
    if 0 in held:
        return "A is a held constant"
    if c is not None and 2 not in held:
        return "C is a runtime input"
    if not (_f32(a) and _f32(b)) or a.ndim != 2 or b.ndim != 2:
        return "inputs are not 2-D fp32"
    ta, tb = bool(attrs["transA"]), bool(attrs["transB"])
    av, bv = (a.T if ta else a), (b.T if tb else b)
    M, K = av.shape
    N = bv.shape[1]
    if K == 0 or bv.shape[0] != K or M == 0 or N == 0:
        return "an empty or mismatched product"
    bias_vec, mode, pre = gemm.epilogue(M, N, c, attrs["beta"], None)
    _af, ars, acs = gemm.operand(av)
    bf, brs, bcs = gemm.operand(bv)
    lay = capped(threads, gemm.flat_layout, M, N, K, [0], [0], [0], None, from_tiling(tiling))
    b_src = bf if 1 in held else None
    if not a.flags.c_contiguous or (b_src is None and not b.flags.c_contiguous):
        return "a runtime operand is not laid out as ONNX Runtime hands it"
    return _gemm_step(lay, None, b_src, (a.shape, a.size), None if b_src is not None
                      else (b.shape, b.size), (M, N), (ars, acs, brs, bcs), bias_vec, mode, pre,
                      float(attrs["alpha"]), (0, 0.0, 0.0), threads,
                      (0,) if b_src is not None else (0, 1))
