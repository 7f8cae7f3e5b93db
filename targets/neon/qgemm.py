"""INT8 GEMM and Conv2D: int8/uint8 operands, int32 accumulation, ONNX-exact requantisation.

Convention (:mod:`edgeops.ops.qarith`, shared with ``edgeops.quantize``): weights symmetric int8 per output
channel (zero point 0); activations int8 or uint8 per tensor with a zero point; int32 bias;
requantisation as ONNX QuantizeLinear defines it::

    y = saturate(round_half_to_even(float32(acc + bias) * multiplier[ch]) + y_zero_point)
    multiplier[ch] = float32(float32(a_scale) * float32(w_scale[ch]) / float32(y_scale))

(float32 arithmetic in that order, the way ONNX Runtime's QLinearConv/QLinearMatMul compute the
output scale). ``reference_qgemm`` in the tests is the integer specification; results are
bit-exact against it.

The zero point is subtracted while packing (operands become int16 in [-255, 255]), so the
micro-kernel is a plain int16-pair dot product: ``vpdpwssd`` (AVX512-VNNI) / ``pmaddwd`` on x86,
``smlal`` on aarch64 — about 2x the fp32 FMA rate per instruction.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from edgeops.errors import EdgeOpsError
from edgeops.targets.neon._microkernel import QMR, QNR, mk_i16
from edgeops.targets.neon._pack import pack_a_pairs, pack_b_pairs
from edgeops.threads import SMALL_ELEMENTS, SMALL_FLOPS, serial_if
from edgeops.targets.neon.blocking import Blocking, blocking_for, from_tiling
from edgeops.targets.neon.gemm import split_work

PER_ROW, PER_COL = 1, 2   # which GEMM axis the output channels run along


@njit(cache=True, error_model="numpy")
def _qgemm_block(r0, r1, c0, c1, K, a, aoff, ars, acs, a_shift, b, boff, brs, bcs, b_shift,
                 c, coff, ldc, mc, nc, kc):
    ap = np.empty(((mc + QMR - 1) // QMR) * QMR * kc, np.int16)
    bp = np.empty(((nc + QNR - 1) // QNR) * QNR * kc, np.int16)
    ct = np.empty(QMR * QNR, np.int32)
    for jc in range(c0, c1, nc):
        nb = min(nc, c1 - jc)
        for pc in range(0, K, kc):
            kb = min(kc, K - pc)
            kq = (kb + 1) // 2
            pack_b_pairs(b, boff, brs, bcs, pc, kb, jc, nb, bp, QNR, b_shift)
            add = pc > 0
            for ic in range(r0, r1, mc):
                mb = min(mc, r1 - ic)
                pack_a_pairs(a, aoff, ars, acs, ic, mb, pc, kb, ap, QMR, a_shift)
                for jr in range(0, nb, QNR):
                    nr = min(QNR, nb - jr)
                    for ir in range(0, mb, QMR):
                        mr = min(QMR, mb - ir)
                        co = coff + (ic + ir) * ldc + jc + jr
                        if mr == QMR and nr == QNR:
                            mk_i16(kq, ap, ir * 2 * kq, bp, jr * 2 * kq, c, co, ldc, add)
                        else:
                            mk_i16(kq, ap, ir * 2 * kq, bp, jr * 2 * kq, ct, 0, QNR, False)
                            for i in range(mr):
                                for j in range(nr):
                                    if add:
                                        c[co + i * ldc + j] += ct[i * QNR + j]
                                    else:
                                        c[co + i * ldc + j] = ct[i * QNR + j]


@njit(parallel=True, cache=True, error_model="numpy")
def _qgemm_par(M, N, K, a, a_offs, ars, acs, a_shift, b, b_offs, brs, bcs, b_shift, c, c_offs,
               ldc, mc, nc, kc, rch, cch):
    nbt = a_offs.shape[0]
    rstep = (((M + rch - 1) // rch + QMR - 1) // QMR) * QMR
    cstep = (((N + cch - 1) // cch + QNR - 1) // QNR) * QNR
    per = rch * cch
    for it in prange(nbt * per):
        bt = it // per
        r0 = ((it % per) // cch) * rstep
        c0 = (it % cch) * cstep
        if r0 < M and c0 < N:
            _qgemm_block(r0, min(M, r0 + rstep), c0, min(N, c0 + cstep), K, a, a_offs[bt], ars,
                         acs, a_shift, b, b_offs[bt], brs, bcs, b_shift, c, c_offs[bt], ldc, mc,
                         nc, kc)


_MAGIC = np.float32(12582912.0)  # 1.5 * 2**23: (v + M) - M rounds half to even for |v| < 2**22


@njit(parallel=True, cache=True, error_model="numpy")
def _requant(acc, rows, cols, bias, has_bias, mult, axis, zp, lo, hi, y):
    """y = clip(rint(float32(acc + bias) * mult) + zp, lo, hi); per-channel along ``axis``.
    The product is clamped to just outside the output range first (saturation is unchanged by
    it) so the magic-number rounding is exact; unlike ``np.rint`` (a libm call) it vectorises.
    No fastmath here: reassociation would fold the magic add/subtract away."""
    clo = lo - zp - np.float32(1)
    chi = hi - zp + np.float32(1)
    for i in prange(rows):
        base = i * cols
        if axis == PER_ROW:  # one channel per row: hoist its bias and multiplier
            bv = bias[i] if has_bias else 0
            m = mult[i]
            for j in range(cols):
                f = min(max(np.float32(acc[base + j] + bv) * m, clo), chi)
                y[base + j] = min(max(((f + _MAGIC) - _MAGIC) + zp, lo), hi)
        else:
            for j in range(cols):
                bv = bias[j] if has_bias else 0
                f = min(max(np.float32(acc[base + j] + bv) * mult[j], clo), chi)
                y[base + j] = min(max(((f + _MAGIC) - _MAGIC) + zp, lo), hi)


def default_blocking() -> Blocking:
    """Packed int8 operands are int16 pairs: 2 bytes per element in the cache rules."""
    return blocking_for("host", dtype_bytes=2)


def requant_multiplier(a_scale, w_scale, y_scale) -> np.ndarray:
    """float32 per-channel multiplier, in the float32 operation order the spec above fixes."""
    w = np.atleast_1d(np.asarray(w_scale, np.float32))
    return (np.float32(a_scale) * w / np.float32(y_scale)).astype(np.float32)


def _int_operand(name, x, ndim=2):
    if not isinstance(x, np.ndarray) or x.dtype not in (np.int8, np.uint8) or x.ndim != ndim:
        raise EdgeOpsError(f"neon int8: {name} must be a {ndim}-D int8 or uint8 array, got "
                           f"{getattr(x, 'dtype', type(x).__name__)} {getattr(x, 'shape', '')}")
    return x


def _zp(name, zp, dtype):
    z = int(np.asarray(zp).reshape(-1)[0]) if np.size(zp) else 0
    info = np.iinfo(dtype)
    if np.size(zp) > 1 or not info.min <= z <= info.max:
        raise EdgeOpsError(f"neon int8: {name} zero point must be one {dtype.name} value "
                           f"(per-tensor), got {zp!r}")
    return z


def qgemm_int32(M, N, K, a, a_offs, ars, acs, a_zp, b, b_offs, brs, bcs, b_zp, c, c_offs, ldc,
                blocking: Blocking | None = None):
    """Flat-operand driver: C (int32) = sum_k (A - a_zp)(B - b_zp) for every batch entry."""
    mc, nc, kc = (blocking or default_blocking()).fitted(M, N, K)
    rch, cch = split_work(len(a_offs), M, N, K)
    with serial_if(len(a_offs) * rch * cch == 1 or 2.0 * len(a_offs) * M * N * K < SMALL_FLOPS):
        _qgemm_par(M, N, K, a, np.asarray(a_offs, np.int64), ars, acs, a_zp, b,
                   np.asarray(b_offs, np.int64), brs, bcs, b_zp, c, np.asarray(c_offs, np.int64),
                   ldc, mc, nc, kc, rch, cch)


def requantize(acc: np.ndarray, multiplier, y_zp: int, out_dtype, bias=None,
               axis: int = PER_COL) -> np.ndarray:
    """int32 (rows, cols) accumulators -> int8/uint8 per the spec in the module docstring."""
    out_dtype = np.dtype(out_dtype)
    if out_dtype not in (np.int8, np.uint8):
        raise EdgeOpsError(f"neon int8: output dtype must be int8 or uint8, got {out_dtype}")
    rows, cols = acc.shape
    nch = rows if axis == PER_ROW else cols
    mult = np.asarray(multiplier, np.float32).reshape(-1)
    if mult.size == 1:
        mult = np.full(nch, mult[0], np.float32)
    if mult.size != nch:
        raise EdgeOpsError(f"neon int8: {mult.size} multipliers for {nch} output channels")
    b = np.zeros(1, np.int32) if bias is None else np.asarray(bias, np.int32).reshape(-1)
    if bias is not None and b.size != nch:
        raise EdgeOpsError(f"neon int8: bias has {b.size} entries for {nch} output channels")
    info = np.iinfo(out_dtype)
    y = np.empty((rows, cols), out_dtype)
    with serial_if(y.size < SMALL_ELEMENTS):
        _requant(np.ascontiguousarray(acc).reshape(-1), rows, cols, b, bias is not None, mult,
                 axis, np.float32(_zp("Y", y_zp, out_dtype)), np.float32(info.min),
                 np.float32(info.max), y.reshape(-1))
    return y


def qgemm(a, b, *, a_zero_point=0, b_zero_point=0, bias=None, multiplier=None, y_zero_point=0,
          out_dtype=np.uint8, blocking=None, tiling=None) -> np.ndarray:
    """INT8 GEMM: A (M, K) int8/uint8 activations, B (K, N) int8 weights (per-column channels).

    ``multiplier=None`` returns the int32 accumulators (+ bias); otherwise the requantised
    int8/uint8 output (``requant_multiplier`` builds the multipliers from the scales)."""
    a, b = _int_operand("A", a), _int_operand("B", b)
    (M, K), (K2, N) = a.shape, b.shape
    if K != K2:
        raise EdgeOpsError(f"neon int8 gemm: inner dimensions differ: A {a.shape}, B {b.shape}")
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    # every element is stored by the first K block, so no zero fill (4 MB of page faults at
    # 1024^2) unless K == 0
    acc = np.empty((M, N), np.int32) if K else np.zeros((M, N), np.int32)
    if M and N and K:
        qgemm_int32(M, N, K, a.reshape(-1), [0], K, 1, _zp("A", a_zero_point, a.dtype),
                    b.reshape(-1), [0], N, 1, _zp("B", b_zero_point, b.dtype), acc.reshape(-1),
                    [0], N, blocking or (from_tiling(tiling) if tiling is not None else None))
    if multiplier is None:
        return acc if bias is None else acc + np.asarray(bias, np.int32).reshape(1, -1)
    return requantize(acc, multiplier, y_zero_point, out_dtype, bias, PER_COL)


def qconv2d(x, x_zero_point, w, bias, g, multiplier=None, y_zero_point=0, out_dtype=np.uint8,
            blocking=None, tiling=None) -> np.ndarray:
    """INT8 Conv2D (NCHW) as im2col (padding with the zero point) + int8 GEMM, requantised per
    output channel. W (K, C/group, R, S) int8 symmetric; ``multiplier=None`` returns int32."""
    from edgeops.targets.neon.conv import _COLS_BUDGET, _im2col
    x = _int_operand("X", x, 4)
    w = _int_operand("W", w, 4)
    if x.shape != (g.n, g.c, g.h, g.w) or w.shape != (g.k, g.cg, g.r, g.s):
        raise EdgeOpsError(f"neon int8 conv: X {x.shape} / W {w.shape} do not match the geometry")
    xzp = _zp("X", x_zero_point, x.dtype)
    G, P, KK = g.group, g.oh * g.ow, g.cg * g.r * g.s
    blocking = blocking or (from_tiling(tiling) if tiling is not None else None)
    acc = np.empty((g.n, g.k, g.oh, g.ow), np.int32)
    wf = np.ascontiguousarray(w).reshape(-1)
    xf = np.ascontiguousarray(x).reshape(-1)
    chunk = g.n if g.is_pointwise else max(1, min(g.n, _COLS_BUDGET // max(G * KK * P, 1)))
    cols = None if g.is_pointwise else np.empty(chunk * G * KK * P, x.dtype)
    for n0 in range(0, g.n, chunk):
        nimg = min(chunk, g.n - n0)
        ng = np.arange(nimg * G, dtype=np.int64)
        if g.is_pointwise:
            src, b_offs = xf, (n0 * G + ng) * (g.cg * P)
        else:
            _im2col(xf, n0, nimg, g.c, g.h, g.w, G, g.cg, g.r, g.s, g.oh, g.ow, g.sh, g.sw,
                    g.dh, g.dw, g.ph, g.pw, cols, xzp)
            src, b_offs = cols, ng * (KK * P)
        qgemm_int32(g.kg, P, KK, wf, (ng % G) * g.kg * KK, KK, 1, 0, src, b_offs, P, 1, xzp,
                    acc.reshape(-1), (n0 * G + ng) * (g.kg * P), P, blocking)
    if multiplier is None:
        return acc if bias is None else acc + np.asarray(bias, np.int32).reshape(1, -1, 1, 1)
    # channels are rows of the (N*K, OH*OW) view; repeat per image
    rows = acc.reshape(g.n * g.k, P)
    mult = np.tile(np.broadcast_to(np.asarray(multiplier, np.float32).reshape(-1), (g.k,)), g.n)
    b = None if bias is None else np.tile(np.asarray(bias, np.int32).reshape(-1), g.n)
    return requantize(rows, mult, y_zero_point, out_dtype, b, PER_ROW).reshape(acc.shape)
