"""The QConvBnAct / QMatMul pipeline in one Numba call per node: quantise the fp32 input, pack
both GEMM operands as int16 pairs (the layout of ``_microkernel.mk_i16``), run the micro-kernel
over the packed panels, requantise / dequantise into the fp32 output.

Why one call and packed-once operands: at the sizes of a small CNN layer (~1e5 MACs) the
arithmetic takes a few microseconds, while each Numba call costs microseconds of argument
unboxing, each parallel region a fork/join, and the generic GEMM driver (:mod:`qgemm`) re-packs
a strided int8 im2col matrix element by element. Here the activation is quantised once (not
once per window position: a 3x3 conv reads each input 9 times), im2col writes straight into the
packed B panels with the zero point already subtracted (padding is then 0), and the weights
are packed once per node and blocking by the caller (``pack_pairs``) and reused.

Packed layout of a (rows x K) operand (rows: the GEMM's M for A, N for B), blocked along K by
``kc`` (even): block ``pc`` starts at ``pc * npan * pr`` (pr = QMR or QNR, npan = panels of pr
rows); inside it panel ``p`` starts at ``p * kq * 2 * pr`` (kq = pairs in the block) and holds
``v[row, pc + 2q + t]`` at ``q * 2 * pr + 2 * i + t``. Rows past the end and an odd K's last
step are 0. Total size ``npan * pr * K2`` (K2 = K rounded up to even).

Float arithmetic follows :mod:`edgeops.ops.qarith` exactly (no fastmath: ``x / scale`` stays a
division; rounding half to even by the 1.5 * 2**23 trick on clamped values, as ``qgemm``).
"""
from __future__ import annotations

import types

import numpy as np
from numba import njit, prange

from edgeops.targets.neon._microkernel import QMR, QNR, mk_i16

FIN_FLOAT, FIN_REQUANT = 0, 1     # finish: fp32 scale per channel / requantise then dequantise
_MAGIC = np.float32(12582912.0)
_NJ = {"cache": True, "error_model": "numpy"}


def packed_size(rows: int, K: int, pr: int) -> int:
    return -(-rows // pr) * pr * (K + (K & 1))


@njit(**_NJ)
def _quant(v, scale, zp, lo, hi):
    """ONNX QuantizeLinear of one float32 minus the zero point (the clamp keeps the magic
    rounding exact and does not change saturation)."""
    f = min(max(v / scale, lo - zp - np.float32(1)), hi - zp + np.float32(1))
    return min(max(((f + _MAGIC) - _MAGIC) + zp, lo), hi) - zp


@njit(**_NJ)
def _quant_span(x, i0, i1, q, out):
    scale, zp, lo, hi = q[0], q[1], q[2], q[3]
    for i in range(i0, i1):
        out[i] = np.int16(_quant(x[i], scale, zp, lo, hi))


@njit(**_NJ)
def pack_pairs(src, soff, rs, cs, rows, K, kc, pr, p0, p1, out, ooff):
    """Panels [p0, p1) of ``src[soff + i*rs + k*cs]`` (rows x K, any integer dtype) packed into
    ``out[ooff:]`` in the layout of the module docstring."""
    npan = (rows + pr - 1) // pr
    for pc in range(0, K, kc):
        kb = min(kc, K - pc)
        kq = (kb + 1) // 2
        for p in range(p0, p1):
            base = ooff + pc * npan * pr + p * kq * 2 * pr
            for i in range(pr):
                r = p * pr + i
                for k in range(2 * kq):
                    v = 0
                    if r < rows and k < kb:
                        v = src[soff + r * rs + (pc + k) * cs]
                    out[base + (k >> 1) * 2 * pr + 2 * i + (k & 1)] = v


@njit(**_NJ)
def _im2col_row(xq, src, H, W, r, s, OH, OW, sh, sw, dh, dw, ph, pw, row):
    """One im2col row (channel plane at ``xq[src:]``, kernel offset r, s) into ``row`` (P
    int16, padding 0). Indices are cast to unsigned: no negative-index wrap-around select, and
    no slice views (each costs an atomic reference count, noticeable per row at these sizes)."""
    off = s * dw - pw
    lo_w = 0 if off >= 0 else (-off + sw - 1) // sw
    hi_w = min(OW, (W - 1 - off) // sw + 1) if W - 1 - off >= 0 else 0
    lo_w = min(lo_w, hi_w)
    for oh in range(OH):
        ro = oh * OW
        ih = oh * sh + r * dh - ph
        if ih < 0 or ih >= H:
            for q in range(OW):
                row[np.uintp(ro + q)] = 0
            continue
        xo = src + ih * W + off
        for q in range(lo_w):
            row[np.uintp(ro + q)] = 0
        if sw == 1:
            for q in range(lo_w, hi_w):
                row[np.uintp(ro + q)] = xq[np.uintp(xo + q)]
        else:
            for q in range(lo_w, hi_w):
                row[np.uintp(ro + q)] = xq[np.uintp(xo + q * sw)]
        for q in range(hi_w, OW):
            row[np.uintp(ro + q)] = 0


@njit(**_NJ)
def _im2col_pack(xq, img, C, H, W, g, Cg, R, S, OH, OW, sh, sw, dh, dw, ph, pw, kc, q0, q1,
                 out, ooff):
    """K-pairs [q0, q1) (rows 2q, 2q+1) of image ``img``/group ``g``'s im2col matrix (K =
    Cg*R*S rows, P = OH*OW pixels) written into B panels (pr = QNR: the pixels are B's panel
    rows) at ``out[ooff:]``. ``xq`` is the quantised input minus the zero point, so padding is
    0. Two rows are built contiguously, then interleaved into the pairs of each panel."""
    P = OH * OW
    K = Cg * R * S
    npan = (P + QNR - 1) // QNR
    r0 = np.zeros(npan * QNR, np.int16)     # the tail past P stays 0: the last panel's pad
    r1 = np.zeros(npan * QNR, np.int16)
    for qq in range(q0, q1):
        t0 = 2 * qq
        pc = (t0 // kc) * kc
        kq = (min(kc, K - pc) + 1) // 2
        c, r, s = t0 // (R * S), (t0 // S) % R, t0 % S
        _im2col_row(xq, ((img * C + g * Cg + c) * H) * W, H, W, r, s, OH, OW, sh, sw, dh, dw,
                    ph, pw, r0)
        t = t0 + 1
        if t < K:
            c, r, s = t // (R * S), (t // S) % R, t % S
            _im2col_row(xq, ((img * C + g * Cg + c) * H) * W, H, W, r, s, OH, OW, sh, sw, dh,
                        dw, ph, pw, r1)
        else:
            r1[:] = 0
        base = ooff + pc * npan * QNR + ((t0 - pc) >> 1) * 2 * QNR
        for jp in range(npan):
            o = base + jp * kq * 2 * QNR
            for j in range(QNR):
                out[np.uintp(o + 2 * j)] = r0[np.uintp(jp * QNR + j)]
                out[np.uintp(o + 2 * j + 1)] = r1[np.uintp(jp * QNR + j)]


@njit(**_NJ)
def _gemm_packed(r0, r1, c0, c1, K, kc, mc, nc, ap, aoff, npa, bp, boff, npb, c, coff, ldc):
    """C[r0:r1, c0:c1] (int32, row stride ldc) = A @ B from packed operands with npa / npb
    panels in all (r0 a multiple of QMR, c0 of QNR)."""
    ct = np.empty(QMR * QNR, np.int32)
    for jc in range(c0, c1, nc):
        for pc in range(0, K, kc):
            kq = (min(kc, K - pc) + 1) // 2
            add = pc > 0
            for ic in range(r0, r1, mc):
                for jr in range(jc, min(jc + nc, c1), QNR):
                    nr = min(QNR, c1 - jr)
                    bo = boff + pc * npb * QNR + (jr // QNR) * kq * 2 * QNR
                    for ir in range(ic, min(ic + mc, r1), QMR):
                        mr = min(QMR, r1 - ir)
                        ao = aoff + pc * npa * QMR + (ir // QMR) * kq * 2 * QMR
                        co = coff + ir * ldc + jr
                        if mr == QMR and nr == QNR:
                            mk_i16(kq, ap, ao, bp, bo, c, co, ldc, add)
                        else:
                            mk_i16(kq, ap, ao, bp, bo, ct, 0, QNR, False)
                            for i in range(mr):
                                for j in range(nr):
                                    if add:
                                        c[co + i * ldc + j] += ct[i * QNR + j]
                                    else:
                                        c[co + i * ldc + j] = ct[i * QNR + j]


@njit(**_NJ)
def _finish(acc, r0, r1, cols, nch, per_row, bias, scale, mode, f, y):
    """int32 acc rows [r0, r1) + bias -> fp32 y; the channel is row % nch (``per_row``) or the
    column. FIN_FLOAT: f32(acc) * scale[ch], then relu if f[0]. FIN_REQUANT: yq = clip(rint(
    f32(acc) * scale[ch]) + zp, lo, hi), relu: max(yq, zp), y = (yq - zp) * ys; f = (relu, zp,
    lo, hi, ys). The branches are hoisted out of the inner loops so those vectorise."""
    relu, zp, lo, hi, ys = f[0] != 0, f[1], f[2], f[3], f[4]
    clo, chi = lo - zp - np.float32(1), hi - zp + np.float32(1)
    lo = max(lo, zp) if relu else lo       # max(clip(v, lo, hi), zp) == clip(v, max(lo, zp), hi)
    zero = np.float32(0) if relu else np.float32(-np.inf)
    for i in range(r0, r1):
        o = i * cols       # unsigned indices below: see _im2col_row
        if per_row:
            bv = bias[i % nch]
            m = scale[i % nch]
            if mode == FIN_FLOAT:
                for j in range(cols):
                    y[np.uintp(o + j)] = max(np.float32(acc[np.uintp(o + j)] + bv) * m, zero)
            else:
                for j in range(cols):
                    v = min(max(np.float32(acc[np.uintp(o + j)] + bv) * m, clo), chi)
                    y[np.uintp(o + j)] = (min(max(((v + _MAGIC) - _MAGIC) + zp, lo), hi) - zp) * ys
        elif mode == FIN_FLOAT:
            for j in range(cols):
                y[np.uintp(o + j)] = max(np.float32(acc[np.uintp(o + j)] + bias[j]) * scale[j],
                                         zero)
        else:
            for j in range(cols):
                v = min(max(np.float32(acc[np.uintp(o + j)] + bias[j]) * scale[j], clo), chi)
                y[np.uintp(o + j)] = (min(max(((v + _MAGIC) - _MAGIC) + zp, lo), hi) - zp) * ys


@njit(**_NJ)
def _spans(n, parts):
    return max(1, (n + parts - 1) // parts)


def _qconv_body(x, n0, nimg, C, H, W, G, Cg, R, S, OH, OW, sh, sw, dh, dw, ph, pw, q, xq, bp,
                ap, K, kc, mc, nc, rch, cch, acc, bias, scale, mode, f, y):
    """Images [n0, n0 + nimg): quantise -> im2col into packed B -> GEMM with
    the packed weights ``ap`` per (image, group) -> finish. ``xq`` holds nimg images."""
    CHW = C * H * W
    n = nimg * CHW
    xs = x[n0 * CHW:n0 * CHW + n]
    step = _spans(n, 16)
    for b in prange((n + step - 1) // step):
        _quant_span(xs, b * step, min(n, (b + 1) * step), q, xq)
    P, KK, Kg = OH * OW, Cg * R * S, K // G
    bsz = ((P + QNR - 1) // QNR) * QNR * (KK + (KK & 1))
    asz = ((Kg + QMR - 1) // QMR) * QMR * (KK + (KK & 1))
    KQ = (KK + 1) // 2
    step = _spans(KQ, 8)
    nb = (KQ + step - 1) // step
    for it in prange(nimg * G * nb):
        bt, b = it // nb, it % nb
        _im2col_pack(xq, bt // G, C, H, W, bt % G, Cg, R, S, OH, OW, sh, sw, dh, dw, ph, pw,
                     kc, b * step, min(KQ, (b + 1) * step), bp, bt * bsz)
    rstep = ((Kg + rch - 1) // rch + QMR - 1) // QMR * QMR
    cstep = ((P + cch - 1) // cch + QNR - 1) // QNR * QNR
    per = rch * cch
    for it in prange(nimg * G * per):
        bt = it // per
        r0, c0 = ((it % per) // cch) * rstep, (it % cch) * cstep
        if r0 < Kg and c0 < P:
            _gemm_packed(r0, min(Kg, r0 + rstep), c0, min(P, c0 + cstep), KK, kc, mc, nc, ap,
                         (bt % G) * asz, (Kg + QMR - 1) // QMR, bp, bt * bsz,
                         (P + QNR - 1) // QNR, acc, (n0 * G + bt) * Kg * P, P)
    rows = nimg * K
    step = _spans(rows, 16)
    for b in prange((rows + step - 1) // step):
        _finish(acc, n0 * K + b * step, n0 * K + min(rows, (b + 1) * step), P, K, True, bias,
                scale, mode, f, y)


def _qmm_body(a, M, K, N, q, aq, ap, bp, kc, mc, nc, rch, cch, acc, bias, scale, mode, f, y):
    """QMatMul: quantise A (M x K) -> pack -> GEMM with the packed weights ``bp`` -> finish."""
    n = M * K
    step = _spans(n, 16)
    for b in prange((n + step - 1) // step):
        _quant_span(a, b * step, min(n, (b + 1) * step), q, aq)
    npa = (M + QMR - 1) // QMR
    step = _spans(npa, 16)
    for b in prange((npa + step - 1) // step):
        pack_pairs(aq, 0, K, 1, M, K, kc, QMR, b * step, min(npa, (b + 1) * step), ap, 0)
    rstep = ((M + rch - 1) // rch + QMR - 1) // QMR * QMR
    cstep = ((N + cch - 1) // cch + QNR - 1) // QNR * QNR
    for it in prange(rch * cch):
        r0, c0 = (it // cch) * rstep, (it % cch) * cstep
        if r0 < M and c0 < N:
            _gemm_packed(r0, min(M, r0 + rstep), c0, min(N, c0 + cstep), K, kc, mc, nc, ap, 0,
                         npa, bp, 0, (N + QNR - 1) // QNR, acc, 0, N)
    step = _spans(M, 16)
    for b in prange((M + step - 1) // step):
        _finish(acc, b * step, min(M, (b + 1) * step), N, N, False, bias, scale, mode, f, y)


def _jit(fn, parallel):
    """The parallel kernel, or its serial twin (prange is range there: no parallel-region entry
    for small problems). The twin gets its own name: Numba's disk cache is keyed by it."""
    if not parallel:
        fn = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__ + "_serial")
        fn.__qualname__ = fn.__name__
    return njit(parallel=parallel, **_NJ)(fn)


QCONV = {p: _jit(_qconv_body, p) for p in (False, True)}
QMM = {p: _jit(_qmm_body, p) for p in (False, True)}
