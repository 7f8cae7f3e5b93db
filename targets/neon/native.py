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
from numba import carray, njit

from edgeops.plans import ORT_POOL, PREPARED, TRIAL, NativeStep, Split
from edgeops.targets.neon import (_entries, conv, depthwise, eltwise, gemm, norms, pool, swiglu,
                                  winograd)
from edgeops.targets.neon._entries import ALONE, POOL, SERIAL
from edgeops.threads import (SMALL_ELEMENTS, choice, decision, forced_pool, num_threads,
                             pool_safe, remember, size_class)

_FM = {"contract"}


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
    if nb < 0:                  # a chunk of a same-shaped A op B (edgeops.plans.Split)
        nb = n
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


@njit(cache=True, inline="always", fastmath=_FM, error_model="numpy")
def _gemm_core(a, b, c, arrays, values):
    """gemm_flat's kernel call from a step's data: values[0:25] and arrays[0:6] as
    :func:`_gemm_step` lays them out (C pre-stored from arrays[8] when accumulating)."""
    M, N, K, mode = values[0], values[1], values[2], values[3]
    ars, acs, brs, bcs, ldc = values[5], values[6], values[7], values[8], values[9]
    accumulate = values[10] != 0
    bias_mode, act, mc, nc, kc = values[11], values[12], values[13], values[14], values[15]
    rch, cch, nbt = values[16], values[17], values[18]
    bias_len, c_len = values[23], values[24]
    a_offs = carray(arrays[0], (nbt,), np.int64)
    b_offs = carray(arrays[1], (nbt,), np.int64)
    c_offs = carray(arrays[2], (nbt,), np.int64)
    bias = carray(arrays[3], (bias_len,), np.float32)
    bias_offs = carray(arrays[4], (nbt,), np.int64)
    fv = carray(arrays[5], (3,), np.float64)
    if accumulate:
        pre = carray(arrays[8], (c_len,), np.float32)
        for j in range(c_len):
            c[j] = pre[j]
    alpha = np.float32(fv[0])
    # values[20] == 2: B is held packed whole (gemm.prepack_b), read by the kernel as packed
    pk = values[20] == 2
    if mode == SERIAL:
        gemm._gemm_block(0, M, 0, N, K, a, a_offs[0], ars, acs, b, b_offs[0], brs, bcs, b, pk,
                         c, c_offs[0], ldc, alpha, accumulate, bias, bias_offs[0], bias_mode, act,
                         fv[1], fv[2], mc, nc, kc)
    else:
        gemm._gemm_par(M, N, K, a, a_offs, ars, acs, b, b_offs, brs, bcs, b, pk, c, c_offs, ldc,
                       alpha, accumulate, bias, bias_offs, bias_mode, act, fv[1], fv[2], mc, nc,
                       kc, rch, cch)


def _gemm(args, arrays, values, scratch):
    # values[19:25]: A held, B held, A length, B length, bias length, C length
    a_held, b_held, a_len, b_len, c_len = values[19], values[20], values[21], values[22], \
        values[24]
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
    _gemm_core(a, b, carray(args[i], (c_len,), np.float32), arrays, values)
    return 0


def _conv_im2col(args, arrays, values, scratch):
    # the GEMM of values[0:25] (A: the held weights, B: the columns in scratch), then
    # values[25:]: X length, columns length, images, C, H, W, G, Cg, R, S, OH, OW, sh, sw, dh,
    # dw, ph, pw, one output pixel (1: conv._gemv instead of the GEMM)
    v = values
    x = carray(args[0], (v[25],), np.float32)
    cols = carray(scratch, (v[26],), np.float32)
    conv._im2col(x, 0, v[27], v[28], v[29], v[30], v[31], v[32], v[33], v[34], v[35], v[36],
                 v[37], v[38], v[39], v[40], v[41], v[42], cols, 0)
    w = carray(arrays[6], (v[21],), np.float32)
    y = carray(args[1], (v[24],), np.float32)
    if v[43] == 1:
        # one output pixel: conv._gemv, as conv2d_im2col does
        nbt = v[18]
        fv = carray(arrays[5], (3,), np.float64)
        conv._gemv(v[0], v[2], w, carray(arrays[0], (nbt,), np.int64), cols,
                   carray(arrays[1], (nbt,), np.int64), y, carray(arrays[2], (nbt,), np.int64),
                   carray(arrays[3], (v[23],), np.float32), carray(arrays[4], (nbt,), np.int64),
                   v[11], v[12], fv[1], fv[2])
        return 0
    _gemm_core(w, cols, y, arrays, values)
    return 0


def _winograd(args, arrays, values, scratch):
    # the GEMM of values[0:25] (A: the transformed weights, B: v, C: m, both in scratch), then
    # values[25:]: X length, v length, m length, images, C, H, W, TH, TW, ph, pw, K, OH, OW,
    # has bias, act, bias length; arrays[9]: the bias, arrays[10]: p0, p1 (float64)
    v = values
    x = carray(args[0], (v[25],), np.float32)
    tv = carray(scratch, (v[26],), np.float32)
    m = carray(scratch, (v[26] + v[27],), np.float32)[v[26]:]
    winograd._input_transform(x, 0, v[28], v[29], v[30], v[31], v[32], v[33], v[34], v[35], tv)
    u = carray(arrays[6], (v[21],), np.float32)
    _gemm_core(u, tv, m, arrays, values)
    bias = carray(arrays[9], (v[41],), np.float32)
    fp = carray(arrays[10], (2,), np.float64)
    y = carray(args[1], (v[28] * v[36] * v[37] * v[38],), np.float32)
    winograd._output_transform(m, 0, v[28], v[36], v[37], v[38], v[32], v[33], bias, v[39] != 0,
                               y, v[40], fp[0], fp[1])
    return 0


def _depthwise(args, arrays, values, scratch):
    # values: X length, Y length, W length, bias length, has bias, act, 3x3 kernel, N, C, H, W,
    # K, R, S, OH, OW, sh, sw, dh, dw, ph, pw; arrays: W, bias, (p0, p1)
    v = values
    x = carray(args[0], (v[0],), np.float32)
    y = carray(args[1], (v[1],), np.float32)
    w = carray(arrays[0], (v[2],), np.float32)
    bias = carray(arrays[1], (v[3],), np.float32)
    fp = carray(arrays[2], (2,), np.float64)
    if v[6]:
        depthwise._dw3_parallel(x, w, bias, v[4] != 0, y, v[7], v[8], v[9], v[10], v[11], v[14],
                                v[15], v[16], v[17], v[18], v[20], v[21], v[5], fp[0], fp[1])
    else:
        depthwise._dw_kernel(x, w, bias, v[4] != 0, y, v[7], v[8], v[9], v[10], v[11], v[12],
                             v[13], v[14], v[15], v[16], v[17], v[18], v[19], v[20], v[21], v[5],
                             fp[0], fp[1])
    return 0


def _pool(args, arrays, values, scratch):
    # values: X length, Y length, then the kernel's integer arguments as pool._call lays them
    # out (planes, H, W, OH, OW, R, S, sh, sw, dh, dw, ph, pw, eh, max, include pad, act),
    # columns length, wp; arrays: columns, (p0, p1)
    v = values
    x = carray(args[0], (v[0],), np.float32)
    y = carray(args[1], (v[1],), np.float32)
    cols = carray(arrays[0], (v[19],), np.float32)
    fp = carray(arrays[1], (2,), np.float64)
    pool._pool_kernel(x, y, v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10], v[11], v[12],
                      v[13], v[14], v[15], v[16] != 0, v[17] != 0, v[18], fp[0], fp[1], cols,
                      v[20])
    return 0


def _gap(args, arrays, values, scratch):
    planes, size = values[0], values[3]
    x = carray(args[0], (planes * size,), np.float32)
    y = carray(args[1], (planes,), np.float32)
    pool._gap_kernel(x, y, planes, size)
    return 0


def _swiglu(args, arrays, values, scratch):
    # values: M, D, F, has B1, has B2, mc, panels per block, kc, packed length, B1 length,
    # B2 length; arrays: packed [W1|W2], B1, B2
    v = values
    x = carray(args[0], (v[0] * v[1],), np.float32)
    y = carray(args[1], (v[0] * v[2],), np.float32)
    bp = carray(arrays[0], (v[8],), np.float32)
    b1 = carray(arrays[1], (v[9],), np.float32)
    b2 = carray(arrays[2], (v[10],), np.float32)
    swiglu._swiglu_kernel(x, v[0], v[1], v[2], bp, b1, b2, v[3] != 0, v[4] != 0, y, v[5], v[6],
                          v[7])
    return 0


_BODIES = {"neon.act": _act, "neon.binary": _binary, "neon.softmax": _softmax,
           "neon.copy": _copy, "neon.gemm": _gemm, "neon.conv_im2col": _conv_im2col,
           "neon.winograd": _winograd, "neon.depthwise": _depthwise, "neon.pool": _pool,
           "neon.gap": _gap, "neon.swiglu": _swiglu}


def entry(name: str) -> int:
    """The address of entry ``name``, compiled (or loaded from Numba's cache) on first use."""
    return _entries.address(name, _BODIES[name])


def warm() -> None:
    """Compile (or load) every entry now."""
    for name in _BODIES:
        entry(name)
    norms.chain_entry()


def warmer(*names):
    """A kernel's :attr:`~edgeops.registry.Kernel.plans` hook: compile (or load) the entries
    its steps use, while a session is made, not inside a run (only those: a cold Numba cache
    compiles each entry with the kernels it inlines, tens of seconds apiece)."""
    def warm_these():
        for name in names:
            if name == "neon.norm_chain":
                norms.chain_entry()
            else:
                entry(name)
    return warm_these


# ---- preparing steps -------------------------------------------------------------------------

def team(key, elements: int, threads: int, trial=None, family: str | None = None):
    """(mode, team) of a call of ``elements`` on at most ``threads`` threads, as the Python
    path's :func:`edgeops.threads.run` runs it once decided. What this machine decided for the
    kernel ``family`` at this size class is read from edgeops.threads' record; else a thread
    choice (``key``) still timing is settled now by ``trial()`` calls (the Python path's kernel
    call, which times itself: a dozen calls, while the step is made, not while serving) and
    recorded; None if it is not."""
    threads = max(1, min(threads, num_threads()))
    if elements < SMALL_ELEMENTS:
        return SERIAL, 1
    if threads == 1 or not pool_safe():
        return ALONE, 1
    kept = f"{family}:numba:{size_class(elements)}" if family else None
    got = decision(kept, threads) if kept else None
    if got in ("pool", "alone"):
        choice(key).fix(threads, got == "pool")     # the Python path's calls follow it
        return (POOL, threads) if got == "pool" else (ALONE, 1)
    pool = choice(key).settle(threads, trial)
    if pool is None:
        return None
    if kept:
        remember(kept, threads, "pool" if pool else "alone")
    return (POOL, threads) if pool else (ALONE, 1)


SPLIT_MIN = 1 << 14          # below it a chunk's hand-off to another thread cannot pay
SPLIT_GRAIN = 16             # elements: chunks start on 64-byte lines


def split(family: str, n: int, values, strides, threads: int, mode_word: int = 1,
          count_word: int = 0, per_unit: int = 1, grain: int = SPLIT_GRAIN):
    """How a step over ``n`` units of ``per_unit`` elements (elements by default, or rows) may
    be cut for ONNX Runtime's pool, in chunks of whole ``grain``s: chunks run ``values`` with
    the calling thread alone (word ``mode_word``: SERIAL or ALONE by the chunk's size; the team
    word after it 1), args advanced by ``strides`` bytes a unit. Its mode as this machine
    decided (edgeops.threads' record), else timed at session start."""
    threads = max(1, threads)
    elements = n * per_unit
    if threads < 2 or elements < SPLIT_MIN or n < 2:
        return None
    cv = np.array(values, np.int64)
    cv[mode_word] = SERIAL if -(-n // threads) * per_unit < SMALL_ELEMENTS else ALONE
    cv[mode_word + 1] = 1
    key = f"{family}:ort:{size_class(elements)}"
    forced = forced_pool()
    if forced is not None:
        mode = ORT_POOL if forced else PREPARED
    else:
        got = decision(key, threads)
        mode = TRIAL if got is None else ORT_POOL if got == "ort" else PREPARED
    return Split(n, count_word, grain, tuple(strides), cv, key, threads, mode)


def _f32(x) -> bool:
    return isinstance(x, np.ndarray) and x.dtype == np.float32


def act_step(x, steps, threads: int, reads=(0,)):
    """An activation chain over X as a step."""
    if not _f32(x):
        return "X is not fp32"
    ch = steps if isinstance(steps, np.ndarray) else eltwise.make_chain(steps)
    ch = np.ascontiguousarray(ch, np.float64)
    how = team(eltwise.chain_key(x.size, ch), x.size, threads, lambda: eltwise.chain(x, ch),
               "neon.act")
    if how is None:
        return None
    shape = tuple(x.shape)
    values = [x.size, how[0], how[1], ch.shape[0]]
    return NativeStep("neon.act", entry("neon.act"), tuple(reads), (("float32", shape),),
                      (("float32", shape),), (ch,), np.array(values, np.int64), 0, how[1],
                      split=split("neon.act", x.size, values, (4, 4), threads))


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
               lambda: eltwise.binary(a, b, op, ch), "neon.binary")
    if how is None:
        return None
    arrays = (ch,) if bflat is None else (ch, bflat)
    reads = (0,) if bflat is not None else (0, 1)
    ins = (("float32", tuple(a.shape)),) + ((("float32", tuple(b.shape)),) if bflat is None
                                            else ())
    values = [n, how[0], how[1], ch.shape[0], nb, inner, eltwise.BINARY[op], bflat is not None]
    # cut only where every chunk reads B as the whole call does: the same shape, or one value
    cut = None
    if nb == n and bflat is None:
        values[4] = -1          # B's length follows the chunk's (the entry reads nb < 0 so)
        cut = split("neon.binary", n, values, (4, 4, 4), threads)
        values[4] = nb
    elif nb == 1:
        cut = split("neon.binary", n, values, (4, 4) if bflat is not None else (4, 0, 4),
                    threads)
    return NativeStep("neon.binary", entry("neon.binary"), reads, ins,
                      (("float32", tuple(shape)),), arrays, np.array(values, np.int64), 0,
                      how[1], split=cut)


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
    values = [outer, how[0], how[1], x.shape[ax], inner]
    # chunks of whole outer indices (rows), in the kernel's blocks of rows where they are rows
    row = x.shape[ax] * inner
    cut = split("neon.softmax", outer, values, (4 * row, 4 * row), threads, per_unit=row,
                grain=norms.SOFTMAX_ROWS if inner == 1 else 1)
    return NativeStep("neon.softmax", entry("neon.softmax"), (0,), (("float32", shape),),
                      (("float32", shape),), (), np.array(values, np.int64), 0, how[1],
                      split=cut)


def copy_step(x):
    if not _f32(x):
        return "X is not fp32"
    shape = tuple(x.shape)
    return NativeStep("neon.copy", entry("neon.copy"), (0,), (("float32", shape),),
                      (("float32", shape),), (), np.array([x.size], np.int64))


_EMPTY_F32 = np.zeros(1, np.float32)


def _gemm_step(lay, a_src, b_src, a_run, b_run, out_shape, strides, bias_vec, bias_mode, pre,
               alpha: float, act, threads: int, reads, *, name="neon.gemm", extra=(),
               extra_arrays=(), scratch=0, ldc=None, team=None, b_packed=False):
    """A :func:`~edgeops.targets.neon.gemm.gemm_flat` call as a step: ``lay`` its layout (made
    on the calling thread capped at ``threads``, as the Python path makes it), ``a_src`` /
    ``b_src`` the flat held operand or None (then ``a_run`` / ``b_run``: the runtime input's
    (shape, flat length)); ``b_packed``: ``b_src`` is B packed whole (``gemm.prepack_b``)."""
    M, N, K = lay["M"], lay["N"], lay["K"]
    ars, acs, brs, bcs = strides
    if lay["items"] == 1:
        mode, t = SERIAL, 1
    elif lay["serial"]:
        mode, t = ALONE, 1
    else:
        mode, t = POOL, max(1, min(threads, num_threads()))
    team = t if team is None else team
    c_len = int(np.prod(out_shape, dtype=np.int64))
    bias = _EMPTY_F32 if bias_vec is None else np.ascontiguousarray(bias_vec, np.float32)
    a_len = a_src.size if a_src is not None else a_run[1]
    b_len = b_src.size if b_src is not None else b_run[1]
    values = [M, N, K, mode, team, ars, acs, brs, bcs, N if ldc is None else ldc,
              pre is not None, bias_mode, act[0],
              lay["mc"], lay["nc"], lay["kc"], lay["rch"], lay["cch"], len(lay["a_offs"]),
              a_src is not None, 2 if b_packed else b_src is not None, a_len, b_len, bias.size,
              c_len, *extra]
    fv = np.array([alpha, act[1], act[2]], np.float64)
    arrays = (lay["a_offs"], lay["b_offs"], lay["c_offs"], bias, lay["bias_offs"], fv,
              _EMPTY_F32 if a_src is None else np.ascontiguousarray(a_src),
              _EMPTY_F32 if b_src is None else np.ascontiguousarray(b_src),
              _EMPTY_F32 if pre is None else np.ascontiguousarray(pre, np.float32).reshape(-1),
              *extra_arrays)
    ins = tuple(("float32", tuple(r[0])) for r in (a_run, b_run) if r is not None)
    return NativeStep(name, entry(name), tuple(reads), ins, (("float32", tuple(out_shape)),),
                      arrays, np.array(values, np.int64), scratch, team)


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
    # held weights packed once here, not per call (docs/notes/neon-kernels.md)
    bpk = gemm.prepack_b(lay, bf, brs, bcs) if 1 in held else None
    b_src = bpk if bpk is not None else bf if 1 in held else None
    return _gemm_step(lay, None, b_src, (a.shape, a.size), None if b_src is not None
                      else (b.shape, b.size), shape, (ars, acs, brs, bcs), None, 0, None, 1.0,
                      (0, 0.0, 0.0), threads, (0,) if b_src is not None else (0, 1),
                      b_packed=bpk is not None)


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
    if not a.flags.c_contiguous or (1 not in held and not b.flags.c_contiguous):
        return "a runtime operand is not laid out as ONNX Runtime hands it"
    bpk = gemm.prepack_b(lay, bf, brs, bcs) if 1 in held else None
    b_src = bpk if bpk is not None else bf if 1 in held else None
    return _gemm_step(lay, None, b_src, (a.shape, a.size), None if b_src is not None
                      else (b.shape, b.size), (M, N), (ars, acs, brs, bcs), bias_vec, mode, pre,
                      float(attrs["alpha"]), (0, 0.0, 0.0), threads,
                      (0,) if b_src is not None else (0, 1), b_packed=bpk is not None)


def conv_step(x, w, b, g, act, held, threads: int, kernel: str, tiling=None):
    """A Conv / ConvBnAct node as a step, the way its Python path (conv2d_im2col,
    conv2d_winograd, conv2d_depthwise) runs it: X runtime, W and B held."""
    from edgeops.targets.neon.blocking import from_tiling
    from edgeops.threads import capped
    if 0 in held or 1 not in held or (b is not None and 2 not in held):
        return "X must be a runtime input, W and B held constants"
    if not (_f32(x) and _f32(w)) or not x.flags.c_contiguous:
        return "inputs are not fp32"
    bias = None if b is None else np.ascontiguousarray(b, np.float32).reshape(-1)
    out = (g.n, g.k, g.oh, g.ow)
    threads = max(1, min(threads, num_threads()))
    if kernel == "depthwise":
        return _depthwise_step(x, w, bias, g, act, out, threads)
    if kernel == "winograd":
        return _winograd_step(x, w, bias, g, act, out, threads, from_tiling(tiling))
    blocking = from_tiling(tiling)
    G, P, KK = g.group, g.oh * g.ow, g.cg * g.r * g.s
    wf = np.ascontiguousarray(w).reshape(-1)
    from edgeops.targets.neon import epilogue as ep
    mode = ep.BIAS_NONE if bias is None else ep.BIAS_ROW
    ng = np.arange(g.n * G, dtype=np.int64)
    if g.is_pointwise:
        lay = capped(threads, gemm.flat_layout, g.kg, P, KK, (ng % G) * g.kg * KK,
                     ng * (g.cg * P), ng * (g.kg * P), (ng % G) * g.kg, blocking)
        return _gemm_step(lay, wf, None, None, (x.shape, x.size), out, (KK, 1, P, 1), bias,
                          mode, None, 1.0, act, threads, (0,), ldc=P)
    per_img = G * KK * P * 4
    if max(1, min(g.n, conv._COLS_BUDGET // max(per_img, 1))) < g.n:
        return "its im2col runs in chunks of images"
    cols = g.n * G * KK * P
    lay = capped(threads, gemm.flat_layout, g.kg, P, KK, (ng % G) * g.kg * KK, ng * (KK * P),
                 ng * (g.kg * P), (ng % G) * g.kg, blocking)
    extra = (x.size, cols, g.n, g.c, g.h, g.w, G, g.cg, g.r, g.s, g.oh, g.ow, g.sh, g.sw, g.dh,
             g.dw, g.ph, g.pw, int(P == 1))
    return _gemm_step(lay, wf, None, None, (x.shape, x.size), out, (KK, 1, P, 1), bias, mode,
                      None, 1.0, act, threads, (0,), name="neon.conv_im2col", extra=extra,
                      scratch=cols * 4, ldc=P,
                      team=max(1, threads) if cols >= SMALL_ELEMENTS else None)


def _winograd_step(x, w, bias, g, act, out, threads, blocking):
    from edgeops.threads import capped
    TH, TW = (g.oh + 1) // 2, (g.ow + 1) // 2
    per_img = 16 * (g.c + g.k) * TH * TW * 4
    if max(1, min(g.n, winograd._BUDGET // max(per_img, 1))) < g.n:
        return "its transforms run in chunks of images"
    u = winograd.cached_weights(w, w.flags.c_contiguous)
    P = g.n * TH * TW
    e = np.arange(16, dtype=np.int64)
    nv, nm = 16 * g.c * P, 16 * g.k * P
    lay = capped(threads, gemm.flat_layout, g.k, P, g.c, e * (g.k * g.c), e * (g.c * P),
                 e * (g.k * P), None, blocking)
    b = np.zeros(1, np.float32) if bias is None else bias
    extra = (x.size, nv, nm, g.n, g.c, g.h, g.w, TH, TW, g.ph, g.pw, g.k, g.oh, g.ow,
             bias is not None, act[0], b.size)
    from edgeops.targets.neon import epilogue as ep
    return _gemm_step(lay, np.ascontiguousarray(u).reshape(-1), None, None, (x.shape, x.size),
                      out, (g.c, 1, P, 1), None, ep.BIAS_NONE, None, 1.0, (0, 0.0, 0.0),
                      threads, (0,), name="neon.winograd", extra=extra,
                      extra_arrays=(b, np.array([act[1], act[2]], np.float64)),
                      scratch=(nv + nm) * 4, ldc=P,
                      team=threads if max(nv, nm) >= SMALL_ELEMENTS else None)


def _depthwise_step(x, w, bias, g, act, out, threads):
    if not g.is_depthwise:
        return "not depthwise"
    ysize = g.n * g.k * g.oh * g.ow
    b = np.zeros(1, np.float32) if bias is None else bias
    wf = np.ascontiguousarray(w).reshape(-1)
    values = [x.size, ysize, wf.size, b.size, bias is not None, act[0],
              depthwise.uses_dw3(g), g.n, g.c, g.h, g.w, g.k, g.r, g.s, g.oh, g.ow, g.sh, g.sw,
              g.dh, g.dw, g.ph, g.pw]
    team = 1 if ysize < SMALL_ELEMENTS else threads
    return NativeStep("neon.depthwise", entry("neon.depthwise"), (0,),
                      (("float32", tuple(x.shape)),), (("float32", out),),
                      (wf, b, np.array([act[1], act[2]], np.float64)),
                      np.array(values, np.int64), 0, team)


def pool_step(x, kind: str, attrs, threads: int):
    """MaxPool / AveragePool (2-D) as a step, with the arguments its Python path works out."""
    if not _f32(x) or x.ndim != 4:
        return "X is not 4-D fp32"
    k = pool.pool_call(x.shape, kind, attrs)
    how = team(k["key"], x.size, threads, lambda: pool.pool_from_attrs(x, kind, attrs))
    if how is None:
        return None
    a = k["args"]
    cols = np.ascontiguousarray(a[19], np.float32)
    values = [x.size, math.prod(k["y_shape"]), *a[:16], a[16], cols.size, a[20]]
    return NativeStep("neon.pool", entry("neon.pool"), (0,), (("float32", tuple(x.shape)),),
                      (("float32", tuple(k["y_shape"])),),
                      (cols, np.array([a[17], a[18]], np.float64)),
                      np.array(values, np.int64), 0, how[1])


def gap_step(x, threads: int):
    if not _f32(x) or x.ndim < 3:
        return "X is not fp32 (N, C, spatial...)"
    size = int(np.prod(x.shape[2:], dtype=np.int64))
    how = team(("gap", x.shape), x.size, threads, lambda: pool.global_avgpool(x))
    if how is None:
        return None
    out = x.shape[:2] + (1,) * (x.ndim - 2)
    return NativeStep("neon.gap", entry("neon.gap"), (0,), (("float32", tuple(x.shape)),),
                      (("float32", out),), (),
                      np.array([x.shape[0] * x.shape[1], how[0], how[1], size], np.int64), 0,
                      how[1])


def swiglu_step(xs, held, threads: int, tiling=None):
    """SwiGLU with held W1, W2 (and biases) as a step: the packed [W1|W2] its Python path packs,
    the same blocking."""
    from edgeops.targets.neon.blocking import from_tiling
    from edgeops.threads import SMALL_FLOPS
    x, w1, w2 = xs[:3]
    b1 = xs[3] if len(xs) > 3 else None
    b2 = xs[4] if len(xs) > 4 else None
    if 0 in held or any(i not in held for i, t in enumerate(xs) if i and t is not None):
        return "X must be a runtime input, the weights and biases held constants"
    if not all(_f32(t) for t in (x, w1, w2)) or w1.ndim != 2 or w1.shape != w2.shape \
            or x.shape[-1] != w1.shape[0] or not (w1.flags.c_contiguous and w2.flags.c_contiguous):
        return "not X (..., D) with contiguous W1 = W2 (D, F)"
    D, F = w1.shape
    M = int(np.prod(x.shape[:-1], dtype=np.int64))
    if M == 0 or F == 0 or D == 0:
        return "an empty product"
    bl = from_tiling(tiling).normalized()
    mc = max(swiglu.SMR, min(bl.mc, 64) // swiglu.SMR * swiglu.SMR)
    pan_blk = max(1, min(bl.nc, 256) // swiglu.NR)
    bp = swiglu.packed_weights(w1, w2, bl.kc, True)
    z = np.zeros(1, np.float32)
    bb1 = z if b1 is None else np.ascontiguousarray(b1, np.float32).reshape(-1)
    bb2 = z if b2 is None else np.ascontiguousarray(b2, np.float32).reshape(-1)
    team = 1 if 4.0 * M * D * F < SMALL_FLOPS else max(1, min(threads, num_threads()))
    values = [M, D, F, b1 is not None, b2 is not None, mc, pan_blk, bl.kc, bp.size, bb1.size,
              bb2.size]
    return NativeStep("neon.swiglu", entry("neon.swiglu"), (0,), (("float32", tuple(x.shape)),),
                      (("float32", tuple(x.shape[:-1]) + (F,)),), (bp, bb1, bb2),
                      np.array(values, np.int64), 0, team, keep=(w1, w2))
