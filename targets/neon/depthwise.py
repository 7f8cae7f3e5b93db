"""Direct depthwise Conv2D (group == C, K = C * multiplier), NCHW, fused bias + activation.

A depthwise conv does R*S multiply-adds per output: im2col would copy R*S times the input to
feed a GEMM with K = R*S, which is all overhead. Parallel over (image, channel) planes.

* 3x3 with stride 1 or 2 along the width and no width dilation (MobileNet/EfficientNet's
  depthwise convs): straight from the input rows, no copy. Per output row, the interior columns
  (all three taps inside the row) are whole vectors of VL outputs from the ``dw3`` vector
  kernel, the last vector overlapping the previous one instead of a scalar remainder; the few
  edge columns that touch the left/right padding are scalar; padding rows read a zero row.
  The three input rows of an output row stay in L1 across its vectors.
* anything else: the input plane is copied once, zero-padded and split into stride phases, and
  each output row is R*S contiguous vector passes (one per tap) into a row buffer.

Bias + activation are applied on the way out.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from edgeops.errors import EdgeOpsError
from edgeops.targets.neon import epilogue as ep
from edgeops.targets.neon._microkernel import VL, _data_ptr, _splat, _vload
from edgeops.threads import SMALL_ELEMENTS, serial_if
from edgeops.targets.neon.conv import ConvGeom, check_conv_inputs

# fastmath: "contract" only (mul+add -> FMA: one rounding, no reassociation, NaN/inf kept)
_FM = {"contract"}


# ---- 3x3, dilation-1 width, stride 1 or 2: direct from the input rows, explicit vectors ----

def make_dw3_kernel(vl: int):
    """An intrinsic ``dw3(d, doff, a, aoff, b, boff, c, coff, w, woff, bias, s2, lo, hi)``
    storing ``vl`` outputs ``d[doff + q] = clamp(bias + sum_{r,t} w[woff + 3r + t] *
    row_r[off_r + q*sw + t], lo, hi)`` for q < vl, rows a, b, c, and sw = 2 if ``s2`` else 1.
    The clamp is Relu/Clip/none (+-inf) fused into the store; NaN passes through as in numpy.

    Written as vector IR for the same reason as the GEMM micro-kernel: LLVM will not vectorise
    a 16-wide constant-trip loop whose output may alias its inputs (Numba arrays carry no
    ``noalias``), and a runtime-trip loop is vectorised 4x interleaved, so rows shorter than 64
    outputs ran scalar. Stride 2 loads two vectors and de-interleaves them (``uzp1/uzp2`` on
    aarch64, ``vpermt2ps`` on AVX-512); the third tap is the even lanes shifted by one with the
    next even element inserted, so no load reaches past the last input the window uses.
    Accumulation order is bias, then taps row-major, each a fused multiply-add."""
    @intrinsic
    def dw3(typingctx, d, doff, a, aoff, b, boff, c, coff, w, woff, bias, s2, lo, hi):
        sig = types.void(d, types.intp, a, types.intp, b, types.intp, c, types.intp, w,
                         types.intp, types.float32, types.boolean, types.float32, types.float32)

        def codegen(context, builder, signature, args):
            d_, doff_, a_, aoff_, b_, boff_, c_, coff_, w_, woff_, bias_, s2_, lo_, hi_ = args
            f32, i32, i64 = ir.FloatType(), ir.IntType(32), ir.IntType(64)
            vty = ir.VectorType(f32, vl)
            fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vty, [vty] * 3),
                                                 f"llvm.fmuladd.v{vl}f32")
            ptr = lambda k, arr, off: builder.gep(  # noqa: E731
                _data_ptr(context, builder, signature.args[k], arr), [off])
            pd = ptr(0, d_, doff_)
            rows = [ptr(2, a_, aoff_), ptr(4, b_, boff_), ptr(6, c_, coff_)]
            pw = ptr(8, w_, woff_)
            ws = [_splat(builder, builder.load(builder.gep(pw, [ir.Constant(i64, j)])), vty)
                  for j in range(9)]
            bias_v = _splat(builder, bias_, vty)
            s2_bit = context.cast(builder, s2_, signature.args[11], types.boolean)
            fn = builder.function
            b1, b2, bend = (fn.append_basic_block(n) for n in ("dw3_s1", "dw3_s2", "dw3_end"))
            builder.cbranch(s2_bit, b2, b1)
            results = []
            at = lambda p, j: builder.gep(p, [ir.Constant(i64, j)])  # noqa: E731

            builder.position_at_end(b1)
            acc = bias_v
            for r, p in enumerate(rows):
                for t in range(3):
                    acc = builder.call(fma, [ws[3 * r + t], _vload(builder, at(p, t), vty, 4),
                                             acc])
            results.append((acc, builder.block))
            builder.branch(bend)

            builder.position_at_end(b2)
            even = ir.Constant(ir.VectorType(i32, vl), list(range(0, 2 * vl, 2)))
            odd = ir.Constant(ir.VectorType(i32, vl), list(range(1, 2 * vl, 2)))
            shift = ir.Constant(ir.VectorType(i32, vl), list(range(1, vl + 1)))
            acc = bias_v
            for r, p in enumerate(rows):
                lo = _vload(builder, p, vty, 4)
                hi = _vload(builder, at(p, vl), vty, 4)
                ev = builder.shuffle_vector(lo, hi, even)
                od = builder.shuffle_vector(lo, hi, odd)
                nxt = builder.insert_element(ir.Constant(vty, ir.Undefined),
                                             builder.load(at(p, 2 * vl)), ir.Constant(i32, 0))
                ev2 = builder.shuffle_vector(ev, nxt, shift)
                for t, v in enumerate((ev, od, ev2)):
                    acc = builder.call(fma, [ws[3 * r + t], v, acc])
            results.append((acc, builder.block))
            builder.branch(bend)

            builder.position_at_end(bend)
            out = builder.phi(vty)
            for v, blk in results:
                out.add_incoming(v, blk)
            lo_v, hi_v = _splat(builder, lo_, vty), _splat(builder, hi_, vty)
            out = builder.select(builder.fcmp_ordered("<", out, lo_v), lo_v, out)
            out = builder.select(builder.fcmp_ordered(">", out, hi_v), hi_v, out)
            st = builder.store(out, builder.bitcast(pd, vty.as_pointer()))
            st.align = 4
            return context.get_dummy_value()
        return sig, codegen
    return dw3

dw3_vec = make_dw3_kernel(VL)


@njit(parallel=True, cache=True, fastmath=_FM, error_model="numpy")
def _dw3_kernel(x, w, bias, has_bias, y, N, C, H, W, K, OH, OW, sh, sw, dh, ph, pw, act, p0,
                p1):
    """3x3 depthwise, width stride ``sw`` in (1, 2), width dilation 1 (see the module doc)."""
    mult = K // C
    # interior output columns: q*sw - pw >= 0 and q*sw + 2 - pw <= W - 1
    qlo = min(OW, (pw + sw - 1) // sw)
    qhi = max(qlo, min(OW, (W - 3 + pw) // sw + 1)) if W - 3 + pw >= 0 else qlo
    n_in = qhi - qlo
    s2 = sw == 2
    # Relu / Clip / none are a clamp fused into the stores; other activations run on the row
    clamp, lo, hi = ep.clamp_bounds(act, p0, p1)
    for t in prange(N * K):
        n = t // K
        k = t % K
        base = (n * C + k // mult) * H * W
        zero = np.zeros(W, np.float32)
        bv = bias[k] if has_bias else np.float32(0)
        wk = w[k * 9:(k + 1) * 9]
        for oh in range(OH):
            ih = oh * sh - ph
            # (buffer, offset) of the three input rows; a padding row reads zeros
            ra, oa = (x, base + ih * W) if 0 <= ih < H else (zero, 0)
            rb, ob = (x, base + (ih + dh) * W) if 0 <= ih + dh < H else (zero, 0)
            rc, oc = (x, base + (ih + 2 * dh) * W) if 0 <= ih + 2 * dh < H else (zero, 0)
            yo = ((n * K + k) * OH + oh) * OW
            if n_in >= VL:
                for i in range((n_in + VL - 1) // VL):
                    q = qlo + min(i * VL, n_in - VL)
                    s = q * sw - pw
                    dw3_vec(y, yo + q, ra, oa + s, rb, ob + s, rc, oc + s, w, k * 9, bv, s2, lo,
                            hi)
                e0, e1 = qlo, qhi
            else:
                e0, e1 = 0, 0
            # only the edge columns (a loop over all OW with a skip test gets if-converted into
            # masked gathers over the whole row, much slower than the vectors themselves)
            for e in range(OW - (e1 - e0)):
                q = e if e < e0 else e + e1 - e0
                acc = bv
                for j in range(3):
                    iw = q * sw + j - pw
                    if 0 <= iw < W:
                        acc += wk[j] * ra[oa + iw]
                        acc += wk[3 + j] * rb[ob + iw]
                        acc += wk[6 + j] * rc[oc + iw]
                y[yo + q] = min(max(acc, lo), hi) if acc == acc else acc
            if not clamp:
                row = y[yo:yo + OW]
                ep.act_copy(row, row, OW, act, p0, p1)


@njit(parallel=True, cache=True, fastmath=_FM, error_model="numpy")
def _dw_kernel(x, w, bias, has_bias, y, N, C, H, W, K, R, S, OH, OW, sh, sw, dh, dw, ph, pw,
               act, p0, p1):
    mult = K // C
    # the row buffer and every tap run are padded to whole vectors: no scalar remainder loop
    # (a 56-wide row is 3.5 AVX-512 vectors; the remainder cost as much as the rest)
    owp = ((OW + VL - 1) // VL) * VL
    hp = (OH - 1) * sh + (R - 1) * dh + 1                    # padded rows the windows touch
    wq = ((S - 1) * dw) // sw + owp                          # columns per stride phase
    for t in prange(N * K):
        n = t // K
        k = t % K
        c = k // mult
        xp = x[(n * C + c) * H * W:(n * C + c + 1) * H * W]
        # zero-padded copy split into sw column phases: xq[f, i, j] = xpad[i, j*sw + f]. Every
        # tap then reads a CONTIGUOUS run of its phase (stride-2 convs included) with no bounds
        # tests; the copy is one pass over an L1/L2-sized plane.
        xq = np.zeros((sw, hp, wq), np.float32)
        for i in range(hp):
            ih = i - ph
            if ih < 0 or ih >= H:
                continue
            xr = xp[ih * W:(ih + 1) * W]
            if sw == 1:
                lo = max(0, pw)
                cnt = min(W, wq - pw) - max(0, -pw)
                if cnt > 0:
                    dst = xq[0, i, lo:lo + cnt]
                    src = xr[max(0, -pw):max(0, -pw) + cnt]
                    for j in range(cnt):
                        dst[j] = src[j]
            else:
                for f in range(sw):
                    dst = xq[f, i]
                    for j in range(wq):
                        iw = j * sw + f - pw
                        if 0 <= iw < W:
                            dst[j] = xr[iw]
        yp = y[(n * K + k) * OH * OW:(n * K + k + 1) * OH * OW]
        wk = w[k * R * S:(k + 1) * R * S]
        bv = bias[k] if has_bias else np.float32(0)
        row = np.empty(owp, np.float32)
        for oh in range(OH):
            if R == 3 and S == 3:
                # the common 3x3 case: all nine taps per vector in registers, one store
                i0, i1, i2 = oh * sh, oh * sh + dh, oh * sh + 2 * dh
                f1, c1 = dw % sw, dw // sw
                f2, c2 = (2 * dw) % sw, (2 * dw) // sw
                a0, a1, a2 = xq[0, i0, 0:owp], xq[f1, i0, c1:c1 + owp], xq[f2, i0, c2:c2 + owp]
                b0, b1, b2 = xq[0, i1, 0:owp], xq[f1, i1, c1:c1 + owp], xq[f2, i1, c2:c2 + owp]
                d0, d1, d2 = xq[0, i2, 0:owp], xq[f1, i2, c1:c1 + owp], xq[f2, i2, c2:c2 + owp]
                w0, w1, w2, w3, w4, w5, w6, w7, w8 = (wk[0], wk[1], wk[2], wk[3], wk[4], wk[5],
                                                      wk[6], wk[7], wk[8])
                for q in range(owp):
                    row[q] = (bv + w0 * a0[q] + w1 * a1[q] + w2 * a2[q] + w3 * b0[q]
                              + w4 * b1[q] + w5 * b2[q] + w6 * d0[q] + w7 * d1[q] + w8 * d2[q])
            else:
                for q in range(owp):
                    row[q] = bv
                for r in range(R):
                    for s in range(S):
                        col = s * dw
                        src = xq[col % sw, oh * sh + r * dh, col // sw:col // sw + owp]
                        wv = wk[r * S + s]
                        for q in range(owp):
                            row[q] += wv * src[q]
            ep.act_copy(row, yp[oh * OW:(oh + 1) * OW], OW, act, p0, p1)


def uses_dw3(g: ConvGeom) -> bool:
    """Whether the direct-from-rows 3x3 kernel runs this depthwise conv."""
    return (g.r, g.s, g.dw) == (3, 3, 1) and g.sw in (1, 2)


def conv2d_depthwise(x, w, b, g: ConvGeom, act=(0, 0.0, 0.0), tiling=None) -> np.ndarray:
    """Y = act(depthwise_conv(X, W) + B). ``tiling`` is accepted for a uniform signature; the
    direct loop's only blocking is one output row, which always fits L1."""
    if not g.is_depthwise:
        raise EdgeOpsError(f"neon depthwise: needs group == C and K a multiple of C, got "
                           f"group={g.group}, C={g.c}, K={g.k}; use conv2d_im2col")
    check_conv_inputs(x, w, b, g, who="neon depthwise")
    y = np.empty((g.n, g.k, g.oh, g.ow), np.float32)
    bias = np.zeros(1, np.float32) if b is None else np.ascontiguousarray(b, np.float32).reshape(-1)
    xf, wf = np.ascontiguousarray(x).reshape(-1), np.ascontiguousarray(w).reshape(-1)
    if uses_dw3(g):
        with serial_if(y.size < SMALL_ELEMENTS):
            _dw3_kernel(xf, wf, bias, b is not None, y.reshape(-1), g.n, g.c, g.h, g.w, g.k,
                        g.oh, g.ow, g.sh, g.sw, g.dh, g.ph, g.pw, act[0], float(act[1]),
                        float(act[2]))
        return y
    with serial_if(y.size < SMALL_ELEMENTS):
        _dw_kernel(xf, wf, bias, b is not None, y.reshape(-1), g.n, g.c, g.h, g.w, g.k, g.r,
                   g.s, g.oh, g.ow, g.sh, g.sw, g.dh, g.dw, g.ph, g.pw, act[0], float(act[1]),
                   float(act[2]))
    return y
