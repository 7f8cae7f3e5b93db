"""Direct depthwise Conv2D (group == C, K = C * multiplier), NCHW, fused bias + activation.

A depthwise conv does R*S multiply-adds per output: im2col would copy R*S times the input to
feed a GEMM with K = R*S, which is all overhead. Parallel over (image, channel) planes.

* 3x3 with stride 1 or 2 along the width and no width dilation (MobileNet/EfficientNet's
  depthwise convs): straight from the input rows, no copy. Each output row is whole vectors of
  VL outputs from the ``dw3`` vector kernel; on x86 the vectors that touch the padding or the
  row's end use masked loads and stores (inputs outside the row read as zeros), so a 7- or
  14-wide row is one vector, not a scalar loop. On 4-lane NEON (no masked memory operations)
  the interior columns are vectors, the last overlapping the previous one, and the few edge
  columns scalar. Padding rows read a zero row. The three input rows of an output row stay in
  L1 across its vectors.
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

def make_dw3_kernel(vl: int, masked: bool = False):
    """An intrinsic ``dw3(d, doff, a, aoff, b, boff, c, coff, w, bias, s2, lo, hi)``
    storing ``vl`` outputs ``d[doff + q] = clamp(bias + sum_{r,t} w[3r + t] *
    row_r[off_r + q*sw + t], lo, hi)`` for q < vl, rows a, b, c, and sw = 2 if ``s2`` else 1.
    The clamp is Relu/Clip/none (+-inf) fused into the store; NaN passes through as in numpy.

    ``masked``: three more arguments ``m, ilo, ihi``: only outputs q < m are stored, and only
    inputs ``row_r[off_r + j]`` with ilo <= j < ihi are read, the others count as zeros (the
    padding). One call then makes a whole narrow row, or a row's edge columns, with masked
    vector loads and stores (``vmovups {k}`` on AVX-512) instead of a scalar loop with a test
    per tap; the pointers may start before the row (negative offsets) since masked-off lanes
    are never accessed.

    Written as vector IR for the same reason as the GEMM micro-kernel: LLVM will not vectorise
    a 16-wide constant-trip loop whose output may alias its inputs (Numba arrays carry no
    ``noalias``), and a runtime-trip loop is vectorised 4x interleaved, so rows shorter than 64
    outputs ran scalar. Stride 2 loads two vectors and de-interleaves them (``uzp1/uzp2`` on
    aarch64, ``vpermt2ps`` on AVX-512); the third tap is the even lanes shifted by one with the
    next even element inserted, so no load reaches past the last input the window uses.
    Three partial sums, one per kernel row (the first from the bias), each three fused
    multiply-adds, then added in row order: one chain of nine FMAs was latency-bound on narrow
    rows (docs/notes/neon-kernels.md)."""
    def typer(d, a, b, c):
        extra = (types.intp,) * 3 if masked else ()
        sig = types.void(d, types.intp, a, types.intp, b, types.intp, c, types.intp,
                         types.UniTuple(types.float32, 9), types.float32, types.boolean,
                         types.float32, types.float32, *extra)

        def codegen(context, builder, signature, args):
            d_, doff_, a_, aoff_, b_, boff_, c_, coff_, w_, bias_, s2_, lo_, hi_ = args[:13]
            f32, i32, i64 = ir.FloatType(), ir.IntType(32), ir.IntType(64)
            vty = ir.VectorType(f32, vl)
            mty = ir.VectorType(ir.IntType(1), vl)
            fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vty, [vty] * 3),
                                                 f"llvm.fmuladd.v{vl}f32")
            ptr = lambda k, arr, off: builder.gep(  # noqa: E731
                _data_ptr(context, builder, signature.args[k], arr), [off])
            pd = ptr(0, d_, doff_)
            rows = [ptr(2, a_, aoff_), ptr(4, b_, boff_), ptr(6, c_, coff_)]
            ws = [_splat(builder, builder.extract_value(w_, j), vty) for j in range(9)]
            bias_v = _splat(builder, bias_, vty)
            zero_v = ir.Constant(vty, [0.0] * vl)
            at = lambda p, j: builder.gep(p, [ir.Constant(i64, j)])  # noqa: E731
            if masked:
                m_, ilo_, ihi_ = args[13:]
                mload = cgutils.get_or_insert_function(
                    builder.module, ir.FunctionType(vty, [vty.as_pointer(), i32, mty, vty]),
                    f"llvm.masked.load.v{vl}f32.p0")
                # bit j of ``bits``: input j may be read; the range clamped to 0..63 (a stride-2
                # call reads inputs 0..2*vl, at most 33), so each tap's mask is a shift
                c63 = lambda v: builder.select(
                    builder.icmp_signed("<", v, ir.Constant(i64, 0)), ir.Constant(i64, 0),
                    builder.select(builder.icmp_signed(">", v, ir.Constant(i64, 63)),
                                   ir.Constant(i64, 63), v))
                one = ir.Constant(i64, 1)
                below = lambda v: builder.sub(builder.shl(one, c63(v)), one)
                bits = builder.and_(below(ihi_), builder.not_(below(ilo_)))
                ity = ir.IntType(vl)

                def inside(j0):     # lanes j0 + q with ilo <= j0 + q < ihi
                    sh = builder.trunc(builder.lshr(bits, ir.Constant(i64, j0)), ity)
                    return builder.bitcast(sh, mty)

                def load(p, j0):
                    return builder.call(mload, [builder.bitcast(at(p, j0), vty.as_pointer()),
                                                ir.Constant(i32, 4), inside(j0), zero_v])

                def load1(p, j):    # one input or 0; a safe address (the output's) otherwise
                    ok = builder.trunc(builder.lshr(bits, ir.Constant(i64, j)), ir.IntType(1))
                    v = builder.load(builder.select(ok, at(p, j), pd))
                    return builder.select(ok, v, ir.Constant(f32, 0.0))
            else:
                def load(p, j0):
                    return _vload(builder, at(p, j0), vty, 4)

                def load1(p, j):
                    return builder.load(at(p, j))
            s2_bit = context.cast(builder, s2_, signature.args[10], types.boolean)
            fn = builder.function
            b1, b2, bend = (fn.append_basic_block(n) for n in ("dw3_s1", "dw3_s2", "dw3_end"))
            builder.cbranch(s2_bit, b2, b1)
            results = []

            builder.position_at_end(b1)
            accs = [bias_v, zero_v, zero_v]
            for r, p in enumerate(rows):
                for t in range(3):
                    accs[r] = builder.call(fma, [ws[3 * r + t], load(p, t), accs[r]])
            acc = builder.fadd(builder.fadd(accs[0], accs[1]), accs[2])
            results.append((acc, builder.block))
            builder.branch(bend)

            builder.position_at_end(b2)
            even = ir.Constant(ir.VectorType(i32, vl), list(range(0, 2 * vl, 2)))
            odd = ir.Constant(ir.VectorType(i32, vl), list(range(1, 2 * vl, 2)))
            shift = ir.Constant(ir.VectorType(i32, vl), list(range(1, vl + 1)))
            accs = [bias_v, zero_v, zero_v]
            for r, p in enumerate(rows):
                lo = load(p, 0)
                hi = load(p, vl)
                ev = builder.shuffle_vector(lo, hi, even)
                od = builder.shuffle_vector(lo, hi, odd)
                nxt = builder.insert_element(ir.Constant(vty, ir.Undefined), load1(p, 2 * vl),
                                             ir.Constant(i32, 0))
                ev2 = builder.shuffle_vector(ev, nxt, shift)
                for t, v in enumerate((ev, od, ev2)):
                    accs[r] = builder.call(fma, [ws[3 * r + t], v, accs[r]])
            acc = builder.fadd(builder.fadd(accs[0], accs[1]), accs[2])
            results.append((acc, builder.block))
            builder.branch(bend)

            builder.position_at_end(bend)
            out = builder.phi(vty)
            for v, blk in results:
                out.add_incoming(v, blk)
            lo_v, hi_v = _splat(builder, lo_, vty), _splat(builder, hi_, vty)
            out = builder.select(builder.fcmp_ordered("<", out, lo_v), lo_v, out)
            out = builder.select(builder.fcmp_ordered(">", out, hi_v), hi_v, out)
            dst = builder.bitcast(pd, vty.as_pointer())
            if masked:
                mstore = cgutils.get_or_insert_function(
                    builder.module,
                    ir.FunctionType(ir.VoidType(), [vty, vty.as_pointer(), i32, mty]),
                    f"llvm.masked.store.v{vl}f32.p0")
                keep = builder.bitcast(builder.trunc(below(m_), ir.IntType(vl)), mty)
                builder.call(mstore, [out, dst, ir.Constant(i32, 4), keep])
            else:
                st = builder.store(out, dst)
                st.align = 4
            return context.get_dummy_value()
        return sig, codegen

    if masked:
        @intrinsic
        def dw3m(typingctx, d, doff, a, aoff, b, boff, c, coff, w, bias, s2, lo, hi, m, ilo,
                 ihi):
            return typer(d, a, b, c)
        return dw3m

    @intrinsic
    def dw3(typingctx, d, doff, a, aoff, b, boff, c, coff, w, bias, s2, lo, hi):
        return typer(d, a, b, c)
    return dw3

def make_dw3_pair_kernel(vl: int):
    """An intrinsic ``dw3p(d, doff, a, aoff, b, boff, c, coff, e, eoff, f, foff, g, goff, w,
    bias, lo, hi, m, ilo, ihi)``: the masked stride-1 ``dw3`` of two output rows of ``m`` <=
    vl/2 outputs in one vector, lanes q < m from rows a, b, c (``d[doff + q]``) and lanes
    m <= q < 2m from rows e, f, g (``d[doff + q]``, the next output row: rows of one plane are
    contiguous). Each tap is two masked loads, the second merged into the first; same sums in
    the same order as ``dw3``. A 7-wide row alone fills 7 of AVX-512's 16 lanes."""
    @intrinsic
    def dw3p(typingctx, d, doff, a, aoff, b, boff, c, coff, e, eoff, f, foff, g, goff, w, bias,
             lo, hi, m, ilo, ihi):
        ip, f32t = types.intp, types.float32
        sig = types.void(d, ip, a, ip, b, ip, c, ip, e, ip, f, ip, g, ip,
                         types.UniTuple(f32t, 9), f32t, f32t, f32t, ip, ip, ip)

        def codegen(context, builder, signature, args):
            f32, i32, i64 = ir.FloatType(), ir.IntType(32), ir.IntType(64)
            vty = ir.VectorType(f32, vl)
            mty = ir.VectorType(ir.IntType(1), vl)
            ity = ir.IntType(vl)
            fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vty, [vty] * 3),
                                                 f"llvm.fmuladd.v{vl}f32")
            mload = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(vty, [vty.as_pointer(), i32, mty, vty]),
                f"llvm.masked.load.v{vl}f32.p0")
            mstore = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), [vty, vty.as_pointer(), i32, mty]),
                f"llvm.masked.store.v{vl}f32.p0")
            ptrs = [builder.gep(_data_ptr(context, builder, signature.args[k], args[k]),
                                [args[k + 1]]) for k in range(0, 14, 2)]
            pd, rows_a, rows_b = ptrs[0], ptrs[1:4], ptrs[4:7]
            w_, bias_, lo_, hi_, m_, ilo_, ihi_ = args[14:]
            ws = [_splat(builder, builder.extract_value(w_, j), vty) for j in range(9)]
            zero_v = ir.Constant(vty, [0.0] * vl)
            one = ir.Constant(i64, 1)

            def c63(v):
                v = builder.select(builder.icmp_signed("<", v, ir.Constant(i64, 0)),
                                   ir.Constant(i64, 0), v)
                return builder.select(builder.icmp_signed(">", v, ir.Constant(i64, 63)),
                                      ir.Constant(i64, 63), v)

            below = lambda v: builder.sub(builder.shl(one, c63(v)), one)
            bits = builder.and_(below(ihi_), builder.not_(below(ilo_)))
            low_m = below(m_)
            as_mask = lambda v: builder.bitcast(builder.trunc(v, ity), mty)
            accs = [_splat(builder, bias_, vty), zero_v, zero_v]
            for r in range(3):
                for t in range(3):
                    tb = builder.and_(builder.lshr(bits, ir.Constant(i64, t)), low_m)
                    pa = builder.gep(rows_a[r], [ir.Constant(i64, t)])
                    pb = builder.gep(rows_b[r], [builder.sub(ir.Constant(i64, t), m_)])
                    v = builder.call(mload, [builder.bitcast(pa, vty.as_pointer()),
                                             ir.Constant(i32, 4), as_mask(tb), zero_v])
                    v = builder.call(mload, [builder.bitcast(pb, vty.as_pointer()),
                                             ir.Constant(i32, 4), as_mask(builder.shl(tb, m_)),
                                             v])
                    accs[r] = builder.call(fma, [ws[3 * r + t], v, accs[r]])
            acc = builder.fadd(builder.fadd(accs[0], accs[1]), accs[2])
            lo_v, hi_v = _splat(builder, lo_, vty), _splat(builder, hi_, vty)
            acc = builder.select(builder.fcmp_ordered("<", acc, lo_v), lo_v, acc)
            acc = builder.select(builder.fcmp_ordered(">", acc, hi_v), hi_v, acc)
            builder.call(mstore, [acc, builder.bitcast(pd, vty.as_pointer()),
                                  ir.Constant(i32, 4), as_mask(below(builder.add(m_, m_)))])
            return context.get_dummy_value()
        return sig, codegen
    return dw3p


dw3_vec = make_dw3_kernel(VL)
dw3_masked = make_dw3_kernel(VL, masked=True)
dw3_pair = make_dw3_pair_kernel(VL)


@njit(cache=True, fastmath=_FM, error_model="numpy")
def _dw3_kernel(x, w, bias, has_bias, y, N, C, H, W, K, OH, OW, sh, sw, dh, ph, pw, act, p0,
                p1):
    """3x3 depthwise, width stride ``sw`` in (1, 2), width dilation 1 (see the module doc), on
    the calling thread; :func:`_dw3_parallel` splits the planes over the pool."""
    mult = K // C
    # interior output columns: q*sw - pw >= 0 and q*sw + 2 - pw <= W - 1
    qlo = min(OW, (pw + sw - 1) // sw)
    qhi = max(qlo, min(OW, (W - 3 + pw) // sw + 1)) if W - 3 + pw >= 0 else qlo
    n_in = qhi - qlo
    s2 = sw == 2
    # Relu / Clip / none are a clamp fused into the stores; other activations run on the row
    clamp, lo, hi = ep.clamp_bounds(act, p0, p1)
    zero = np.zeros(W, np.float32)          # padding rows read this: once per call
    for t in range(N * K):
        n = t // K
        k = t % K
        base = (n * C + k // mult) * H * W
        bv = bias[k] if has_bias else np.float32(0)
        wk = w[k * 9:(k + 1) * 9]
        # the nine weights as values: loaded once per plane, splatted outside the row loop
        w9 = (wk[0], wk[1], wk[2], wk[3], wk[4], wk[5], wk[6], wk[7], wk[8])
        # stride 1, rows of at most half a vector: two output rows a vector (x86 only, above)
        pairs = OH // 2 if VL >= 8 and sw == 1 and 2 * OW <= VL else 0
        for i in range(pairs):
            ih = 2 * i * sh - ph
            r0, o0 = (x, base + ih * W) if 0 <= ih < H else (zero, 0)
            r1, o1 = (x, base + (ih + dh) * W) if 0 <= ih + dh < H else (zero, 0)
            r2, o2 = (x, base + (ih + 2 * dh) * W) if 0 <= ih + 2 * dh < H else (zero, 0)
            ih += sh
            r3, o3 = (x, base + ih * W) if 0 <= ih < H else (zero, 0)
            r4, o4 = (x, base + (ih + dh) * W) if 0 <= ih + dh < H else (zero, 0)
            r5, o5 = (x, base + (ih + 2 * dh) * W) if 0 <= ih + 2 * dh < H else (zero, 0)
            yo = ((n * K + k) * OH + 2 * i) * OW
            dw3_pair(y, yo, r0, o0 - pw, r1, o1 - pw, r2, o2 - pw, r3, o3 - pw, r4, o4 - pw, r5,
                     o5 - pw, w9, bv, lo, hi, OW, pw, W + pw)
            if not clamp:
                row = y[yo:yo + 2 * OW]
                ep.act_copy(row, row, 2 * OW, act, p0, p1)
        for oh in range(2 * pairs, OH):
            ih = oh * sh - ph
            # (buffer, offset) of the three input rows; a padding row reads zeros
            ra, oa = (x, base + ih * W) if 0 <= ih < H else (zero, 0)
            rb, ob = (x, base + (ih + dh) * W) if 0 <= ih + dh < H else (zero, 0)
            rc, oc = (x, base + (ih + 2 * dh) * W) if 0 <= ih + 2 * dh < H else (zero, 0)
            yo = ((n * K + k) * OH + oh) * OW
            # x86 has masked vector loads and stores (AVX-512 k-masks, AVX2 vmaskmovps); NEON
            # has none and LLVM would expand each into per-lane branches, so 4-lane targets
            # keep the scalar edge columns (VL, not a flag: asm.py rebinds it for aarch64)
            if VL >= 8:
                # whole vectors from column 0; those touching the padding or the row's end
                # are masked (loads outside the row read as zeros, stores stop at OW)
                for i in range((OW + VL - 1) // VL):
                    q = i * VL
                    s = q * sw - pw
                    if q >= qlo and q + VL <= qhi:
                        dw3_vec(y, yo + q, ra, oa + s, rb, ob + s, rc, oc + s, w9, bv, s2, lo,
                                hi)
                    else:
                        dw3_masked(y, yo + q, ra, oa + s, rb, ob + s, rc, oc + s, w9, bv, s2,
                                   lo, hi, min(VL, OW - q), -s, W - s)
            else:
                if n_in >= VL:
                    for i in range((n_in + VL - 1) // VL):
                        q = qlo + min(i * VL, n_in - VL)
                        s = q * sw - pw
                        dw3_vec(y, yo + q, ra, oa + s, rb, ob + s, rc, oc + s, w9, bv, s2, lo,
                                hi)
                    e0, e1 = qlo, qhi
                else:
                    e0, e1 = 0, 0
                # only the edge columns (a loop over all OW with a skip test gets if-converted
                # into masked gathers over the whole row, much slower than the vectors)
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
def _dw3_parallel(x, w, bias, has_bias, y, N, C, H, W, K, OH, OW, sh, sw, dh, ph, pw, act, p0,
                  p1):
    """:func:`_dw3_kernel` over the pool: each task a block of input channels of one image
    (with their ``K // C`` output planes each), run by the serial kernel on slices. The row
    loop written in the prange body itself compiled 2-3x slower at one thread
    (docs/notes/neon-kernels.md)."""
    mult = K // C
    # tasks of ~8K outputs or more (a call and slices cost ~0.1 us); the split does not change
    # any output bit. Not from get_num_threads(): it would keep this function out of the cache
    nb = max(1, min(C, K * OH * OW // 8192))
    cb = (C + nb - 1) // nb
    nb = (C + cb - 1) // cb
    hw, ohw = H * W, OH * OW
    for t in prange(N * nb):
        n = t // nb
        c0 = (t % nb) * cb
        c1 = min(C, c0 + cb)
        k0, k1 = c0 * mult, c1 * mult
        b = bias[k0:k1] if has_bias else bias
        _dw3_kernel(x[(n * C + c0) * hw:(n * C + c1) * hw], w[k0 * 9:k1 * 9], b, has_bias,
                    y[(n * K + k0) * ohw:(n * K + k1) * ohw], 1, c1 - c0, H, W, k1 - k0, OH,
                    OW, sh, sw, dh, ph, pw, act, p0, p1)


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
            _dw3_parallel(xf, wf, bias, b is not None, y.reshape(-1), g.n, g.c, g.h, g.w, g.k,
                          g.oh, g.ow, g.sh, g.sw, g.dh, g.ph, g.pw, act[0], float(act[1]),
                          float(act[2]))
        return y
    with serial_if(y.size < SMALL_ELEMENTS):
        _dw_kernel(xf, wf, bias, b is not None, y.reshape(-1), g.n, g.c, g.h, g.w, g.k, g.r,
                   g.s, g.oh, g.ow, g.sh, g.sw, g.dh, g.dw, g.ph, g.pw, act[0], float(act[1]),
                   float(act[2]))
    return y
