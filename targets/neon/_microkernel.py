"""Register-blocked micro-kernels, written as LLVM vector IR through ``numba.extending.intrinsic``.

Why IR and not Numba loops: a Numba loop nest keeps the MR x NR accumulator tile in memory (LLVM
cannot prove the tile does not alias the packed panels), several times slower than the IR below
(figures: docs/notes/neon-kernels.md). The IR is target-neutral: ``<VL x float>`` with
``llvm.fmuladd`` becomes ``vfmadd231ps zmm`` on AVX-512 and ``fmla v.4s`` on aarch64, so the same
source serves the x86 test host and Cortex-A boards; only the shape constants differ per ISA.

The micro-kernel shape (MR, NR) is the only compile-time shape in the NEON target. Everything
above it (mc, nc, kc blocking) is a runtime argument of the drivers.

Packed layouts (produced by ``_pack.py``):

* A micro-panel: ``kc`` steps of ``MR`` contiguous values (``ap[aoff + p*MR + i]``).
* B micro-panel: ``kc`` steps of ``NR`` contiguous values (``bp[boff + p*NR + j]``).
* int8 kernels use int16 *pairs* along K (two consecutive k per lane) so that the multiply-add
  maps onto ``vpmaddwd`` (x86) / ``smlal`` (aarch64): A ``ap[aoff + q*2*MR + 2*i + t]``,
  B ``bp[boff + q*2*NR + 2*j + t]`` for k = 2q + t.

Each kernel stores (or adds) its MR x NR tile straight into C with a runtime row stride; ragged
edge tiles go to a scratch tile (``ldc = NR``) that the Numba epilogue copies. Bias, activation
and requantisation are applied by the Numba epilogue on the tile after the last K block.
"""
from __future__ import annotations

import platform

import llvmlite.binding as llb
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


def _host_vector_lanes() -> int:
    """fp32 lanes of the widest vector register the host has (LLVM legalises wider types anyway,
    this only sizes the tile so that the accumulators fit the register file)."""
    mach = platform.machine().lower()
    if mach in ("aarch64", "arm64"):
        return 4
    try:
        feats = llb.get_host_cpu_features()
    except RuntimeError:  # pragma: no cover - llvmlite cannot query some hosts
        return 4
    if feats.get("avx512f", False):
        return 16
    if feats.get("avx2", False) or feats.get("avx", False):
        return 8
    return 4


VL = _host_vector_lanes()
# (MR, NV): MR rows x NV vectors of VL lanes. Chosen so MR*NV accumulators + NV B vectors + one
# broadcast fit the 32 (AVX-512, aarch64) or 16 (AVX2) vector registers. Taller tiles are no
# faster in L1 (docs/notes/neon-kernels.md); 8x32 keeps ragged waste low and matches the 8x12
# shape customary on Cortex-A76 (24 accumulators of 4 lanes).
_SHAPES = {16: (8, 2), 8: (6, 2), 4: (8, 3)}
MR, NV = _SHAPES[VL]
NR = VL * NV

# int8 (int16 pairs) kernel: i32 lanes per vector equal the fp32 lanes.
QMR, QNV = MR, NV
QNR = VL * QNV


def _data_ptr(context, builder, arrty, arr):
    return cgutils.create_struct_proxy(arrty)(context, builder, value=arr).data


def _splat(builder, scalar, vty):
    lanes = vty.count
    v = builder.insert_element(ir.Constant(vty, ir.Undefined), scalar,
                               ir.Constant(ir.IntType(32), 0))
    return builder.shuffle_vector(v, ir.Constant(vty, ir.Undefined),
                                  ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes))


def _vload(builder, ptr, vty, align):
    ld = builder.load(builder.bitcast(ptr, vty.as_pointer()))
    ld.align = align
    return ld


def _vstore(builder, val, ptr, vty, align):
    st = builder.store(val, builder.bitcast(ptr, vty.as_pointer()))
    st.align = align


def _counted_loop(builder, trip, n_acc, vty, body):
    """Emit ``for p in range(trip): accs = body(p, accs)`` with accumulators as SSA phis (this is
    what keeps them in registers). Returns the final accumulators (zeros when trip <= 0)."""
    i64 = ir.IntType(64)
    zero = ir.Constant(vty, None)
    pre = builder.block
    fn = builder.function
    loop = fn.append_basic_block("mk_loop")
    done = fn.append_basic_block("mk_done")
    builder.cbranch(builder.icmp_signed(">", trip, ir.Constant(i64, 0)), loop, done)
    builder.position_at_end(loop)
    p = builder.phi(i64)
    p.add_incoming(ir.Constant(i64, 0), pre)
    accs = []
    for _ in range(n_acc):
        ph = builder.phi(vty)
        ph.add_incoming(zero, pre)
        accs.append(ph)
    new = body(p, accs)
    p1 = builder.add(p, ir.Constant(i64, 1))
    end = builder.block
    p.add_incoming(p1, end)
    for ph, v in zip(accs, new):
        ph.add_incoming(v, end)
    builder.cbranch(builder.icmp_signed("<", p1, trip), loop, done)
    builder.position_at_end(done)
    out = []
    for v in new:
        ph = builder.phi(vty)
        ph.add_incoming(zero, pre)
        ph.add_incoming(v, end)
        out.append(ph)
    return out


def _store_tile(builder, outs, pc, ldc, add, mr, nv, vl, vty, combine):
    """C[i*ldc + k*vl : +vl] = acc (add=False) or C + acc (add=True), one vector at a time.
    Storing straight from registers (rather than through a scratch tile that Numba code copies)
    saves a copy of every tile (figures: docs/notes/neon-kernels.md)."""
    i64 = ir.IntType(64)
    fn = builder.function
    b_add = fn.append_basic_block("mk_add")
    b_set = fn.append_basic_block("mk_set")
    b_end = fn.append_basic_block("mk_end")
    builder.cbranch(add, b_add, b_set)
    for blk, accumulate in ((b_add, True), (b_set, False)):
        builder.position_at_end(blk)
        for i in range(mr):
            row = builder.gep(pc, [builder.mul(ir.Constant(i64, i), ldc)])
            for k in range(nv):
                ptr = builder.gep(row, [ir.Constant(i64, k * vl)])
                v = outs[i * nv + k]
                if accumulate:
                    v = combine(builder, _vload(builder, ptr, vty, 4), v)
                _vstore(builder, v, ptr, vty, 4)
        builder.branch(b_end)
    builder.position_at_end(b_end)


def _store_tile_epi(builder, outs, pc, ldc, add, mr, nv, vl, vty, rbias, cbias, lo, hi):
    """Like ``_store_tile`` for the last K block, with the ConvBnAct epilogue in registers:
    (acc [+ C]) + row bias[i] + column bias[j], clamped to [lo, hi] (Relu/Clip; +-inf for none;
    NaN passes). Saves the re-read of the stored tile that a separate epilogue pass costs
    (figures: docs/notes/neon-kernels.md)."""
    i64 = ir.IntType(64)
    lo_v, hi_v = _splat(builder, lo, vty), _splat(builder, hi, vty)
    cb = [_vload(builder, builder.gep(cbias, [ir.Constant(i64, k * vl)]), vty, 4)
          for k in range(nv)]
    fn = builder.function
    b_add = fn.append_basic_block("mk_add")
    b_set = fn.append_basic_block("mk_set")
    b_end = fn.append_basic_block("mk_end")
    builder.cbranch(add, b_add, b_set)
    for blk, accumulate in ((b_add, True), (b_set, False)):
        builder.position_at_end(blk)
        for i in range(mr):
            row = builder.gep(pc, [builder.mul(ir.Constant(i64, i), ldc)])
            rb = _splat(builder, builder.load(builder.gep(rbias, [ir.Constant(i64, i)])), vty)
            for k in range(nv):
                ptr = builder.gep(row, [ir.Constant(i64, k * vl)])
                v = outs[i * nv + k]
                if accumulate:
                    v = builder.fadd(_vload(builder, ptr, vty, 4), v)
                v = builder.fadd(builder.fadd(v, rb), cb[k])
                v = builder.select(builder.fcmp_ordered("<", v, lo_v), lo_v, v)
                v = builder.select(builder.fcmp_ordered(">", v, hi_v), hi_v, v)
                _vstore(builder, v, ptr, vty, 4)
        builder.branch(b_end)
    builder.position_at_end(b_end)


def make_f32_epi_kernel(mr: int, vl: int, nv: int):
    """``mk(kc, ap, aoff, bp, boff, ldb, c, coff, ldc, add, rb, rboff, cb, cboff, lo, hi)``: the
    ``make_f32_kernel`` tile for the LAST K block, storing ``clamp((acc [+ C]) + rb[rboff + i] +
    cb[cboff + j], lo, hi)`` (pass zero vectors for an absent bias, +-inf for no clamp)."""

    @intrinsic
    def mk(typingctx, kc, ap, aoff, bp, boff, ldb, c, coff, ldc, add, rb, rboff, cb, cboff, lo,
           hi):
        sig = types.void(types.intp, ap, types.intp, bp, types.intp, types.intp, c, types.intp,
                         types.intp, types.boolean, rb, types.intp, cb, types.intp,
                         types.float32, types.float32)

        def codegen(context, builder, signature, args):
            (kc_, ap_, aoff_, bp_, boff_, ldb_, c_, coff_, ldc_, add_, rb_, rboff_, cb_, cboff_,
             lo_, hi_) = args
            vty = ir.VectorType(ir.FloatType(), vl)
            outs = _f32_loop(context, builder, signature, kc_, ap_, aoff_, bp_, boff_, ldb_, mr,
                             vl, nv)
            pc = builder.gep(_data_ptr(context, builder, signature.args[6], c_), [coff_])
            prb = builder.gep(_data_ptr(context, builder, signature.args[10], rb_), [rboff_])
            pcb = builder.gep(_data_ptr(context, builder, signature.args[12], cb_), [cboff_])
            add_bit = context.cast(builder, add_, signature.args[9], types.boolean)
            _store_tile_epi(builder, outs, pc, ldc_, add_bit, mr, nv, vl, vty, prb, pcb, lo_, hi_)
            return context.get_dummy_value()
        return sig, codegen
    return mk


def _f32_loop(context, builder, signature, kc_, ap_, aoff_, bp_, boff_, ldb_, mr, vl, nv,
              lda_=None):
    """The K loop of the fp32 micro-kernel: MR x NV accumulators of <VL x float> as SSA phis.
    A is a packed panel (``ap[aoff + p*mr + i]``), or with ``lda_`` row-major A read in place
    (``ap[aoff + i*lda + p]``)."""
    f32 = ir.FloatType()
    i64 = ir.IntType(64)
    vty = ir.VectorType(f32, vl)
    fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vty, [vty] * 3),
                                         f"llvm.fmuladd.v{vl}f32")
    pa = builder.gep(_data_ptr(context, builder, signature.args[1], ap_), [aoff_])
    pb = builder.gep(_data_ptr(context, builder, signature.args[3], bp_), [boff_])

    rows = None if lda_ is None else \
        [builder.gep(pa, [builder.mul(ir.Constant(i64, i), lda_)]) for i in range(mr)]

    def a_ptr(p, i):
        if rows is not None:
            return builder.gep(rows[i], [p])
        return builder.gep(builder.gep(pa, [builder.mul(p, ir.Constant(i64, mr))]),
                           [ir.Constant(i64, i)])

    def body(p, accs):
        pbp = builder.gep(pb, [builder.mul(p, ldb_)])
        bv = [_vload(builder, builder.gep(pbp, [ir.Constant(i64, k * vl)]), vty, 4)
              for k in range(nv)]
        new = []
        for i in range(mr):
            a = _splat(builder, builder.load(a_ptr(p, i)), vty)
            new.extend(builder.call(fma, [a, bv[k], accs[i * nv + k]]) for k in range(nv))
        return new

    return _counted_loop(builder, kc_, mr * nv, vty, body)


def make_f32_kernel_ra(mr: int, vl: int, nv: int):
    """``mk(kc, a, aoff, lda, bp, boff, ldb, c, coff, ldc, add)``: ``make_f32_kernel`` with A
    read in place, row-major (``a[aoff + i*lda + p]``): no per-call packing of A, which cost
    ~6% of a 128x768x768 MatMul (docs/notes/neon-kernels.md). Same FMAs in the same order."""

    @intrinsic
    def mk(typingctx, kc, a, aoff, lda, bp, boff, ldb, c, coff, ldc, add):
        sig = types.void(types.intp, a, types.intp, types.intp, bp, types.intp, types.intp, c,
                         types.intp, types.intp, types.boolean)

        def codegen(context, builder, signature, args):
            kc_, a_, aoff_, lda_, bp_, boff_, ldb_, c_, coff_, ldc_, add_ = args
            vty = ir.VectorType(ir.FloatType(), vl)
            pc = builder.gep(_data_ptr(context, builder, signature.args[7], c_), [coff_])
            sig2 = types.void(types.intp, signature.args[1], types.intp, signature.args[4])
            outs = _f32_loop(context, builder, sig2, kc_, a_, aoff_, bp_, boff_, ldb_, mr, vl,
                             nv, lda_)
            add_bit = context.cast(builder, add_, signature.args[10], types.boolean)
            _store_tile(builder, outs, pc, ldc_, add_bit, mr, nv, vl, vty,
                        lambda b, old, new: b.fadd(old, new))
            return context.get_dummy_value()
        return sig, codegen
    return mk


def make_f32_epi_kernel_ra(mr: int, vl: int, nv: int):
    """``make_f32_epi_kernel`` with A read in place (see ``make_f32_kernel_ra``):
    ``mk(kc, a, aoff, lda, bp, boff, ldb, c, coff, ldc, add, rb, rboff, cb, cboff, lo, hi)``."""

    @intrinsic
    def mk(typingctx, kc, a, aoff, lda, bp, boff, ldb, c, coff, ldc, add, rb, rboff, cb, cboff,
           lo, hi):
        sig = types.void(types.intp, a, types.intp, types.intp, bp, types.intp, types.intp, c,
                         types.intp, types.intp, types.boolean, rb, types.intp, cb, types.intp,
                         types.float32, types.float32)

        def codegen(context, builder, signature, args):
            (kc_, a_, aoff_, lda_, bp_, boff_, ldb_, c_, coff_, ldc_, add_, rb_, rboff_, cb_,
             cboff_, lo_, hi_) = args
            vty = ir.VectorType(ir.FloatType(), vl)
            sig2 = types.void(types.intp, signature.args[1], types.intp, signature.args[4])
            outs = _f32_loop(context, builder, sig2, kc_, a_, aoff_, bp_, boff_, ldb_, mr, vl,
                             nv, lda_)
            pc = builder.gep(_data_ptr(context, builder, signature.args[7], c_), [coff_])
            prb = builder.gep(_data_ptr(context, builder, signature.args[11], rb_), [rboff_])
            pcb = builder.gep(_data_ptr(context, builder, signature.args[13], cb_), [cboff_])
            add_bit = context.cast(builder, add_, signature.args[10], types.boolean)
            _store_tile_epi(builder, outs, pc, ldc_, add_bit, mr, nv, vl, vty, prb, pcb, lo_, hi_)
            return context.get_dummy_value()
        return sig, codegen
    return mk


def make_f32_kernel(mr: int, vl: int, nv: int):
    """An intrinsic ``mk(kc, ap, aoff, bp, boff, ldb, c, coff, ldc, add)`` computing one
    mr x (vl*nv) fp32 tile and storing (or adding) it at ``c[coff + i*ldc + j]``; the caller
    guarantees the whole tile is inside ``c`` (edge tiles go through a scratch tile).

    ``ldb`` is the distance between consecutive K steps of B: NR for a packed panel, or the row
    stride of an unpacked row-major B whose NR columns are contiguous. The latter lets short-M
    GEMMs (conv with few output channels, Winograd's 16 small GEMMs) skip packing B, which
    costs O(K*N) and is amortised over only M/MR tiles."""

    @intrinsic
    def mk(typingctx, kc, ap, aoff, bp, boff, ldb, c, coff, ldc, add):
        sig = types.void(types.intp, ap, types.intp, bp, types.intp, types.intp, c, types.intp,
                         types.intp, types.boolean)

        def codegen(context, builder, signature, args):
            kc_, ap_, aoff_, bp_, boff_, ldb_, c_, coff_, ldc_, add_ = args
            vty = ir.VectorType(ir.FloatType(), vl)
            pc = builder.gep(_data_ptr(context, builder, signature.args[6], c_), [coff_])
            outs = _f32_loop(context, builder, signature, kc_, ap_, aoff_, bp_, boff_, ldb_, mr,
                             vl, nv)
            add_bit = context.cast(builder, add_, signature.args[9], types.boolean)
            _store_tile(builder, outs, pc, ldc_, add_bit, mr, nv, vl, vty,
                        lambda b, old, new: b.fadd(old, new))
            return context.get_dummy_value()
        return sig, codegen
    return mk


def make_i16pair_kernel(mr: int, vl: int, nv: int, form: str | None = None):
    """An intrinsic ``mk(kq, ap, aoff, bp, boff, c, coff, ldc, add)``: int32 mr x (vl*nv) tile
    from int16 pairs along K (kq = number of pairs), stored/added into int32 ``c``.

    ``form="pairs"`` (x86): ``acc + (a0*b0 + a1*b1)`` on widened vectors, the shape LLVM turns
    into ``pmaddwd``/``vpdpwssd``. ``form="narrow"`` (aarch64): de-interleave the i16 pairs
    first (``uzp1``/``uzp2``), then ``acc + a0*b0`` and ``+ a1*b1`` separately, each a widening
    multiply-accumulate, i.e. ``smlal`` by element. Products of int8-range values (zero point
    already subtracted, |v| <= 255) cannot overflow i32, nor can their pairwise sum."""
    nr = vl * nv
    form = form or ("narrow" if platform.machine().lower() in ("aarch64", "arm64") else "pairs")

    @intrinsic
    def mk(typingctx, kq, ap, aoff, bp, boff, c, coff, ldc, add):
        sig = types.void(types.intp, ap, types.intp, bp, types.intp, c, types.intp, types.intp,
                         types.boolean)

        def codegen(context, builder, signature, args):
            kq_, ap_, aoff_, bp_, boff_, c_, coff_, ldc_, add_ = args
            i16, i32, i64 = ir.IntType(16), ir.IntType(32), ir.IntType(64)
            v16 = ir.VectorType(i16, 2 * vl)   # vl lanes x (k even, k odd)
            v32w = ir.VectorType(i32, 2 * vl)
            vacc = ir.VectorType(i32, vl)
            even = ir.Constant(ir.VectorType(i32, vl), list(range(0, 2 * vl, 2)))
            odd = ir.Constant(ir.VectorType(i32, vl), list(range(1, 2 * vl, 2)))
            pa = builder.gep(_data_ptr(context, builder, signature.args[1], ap_), [aoff_])
            pb = builder.gep(_data_ptr(context, builder, signature.args[3], bp_), [boff_])
            pc = builder.gep(_data_ptr(context, builder, signature.args[5], c_), [coff_])

            def body(q, accs):
                pbq = builder.gep(pb, [builder.mul(q, ir.Constant(i64, 2 * nr))])
                paq = builder.gep(pa, [builder.mul(q, ir.Constant(i64, 2 * mr))])
                bw = [builder.sext(_vload(builder, builder.gep(pbq, [ir.Constant(i64, 2 * k * vl)]),
                                          v16, 2), v32w) for k in range(nv)]
                new = []
                if form == "narrow":
                    v16n = ir.VectorType(i16, vl)
                    braw = [_vload(builder, builder.gep(pbq, [ir.Constant(i64, 2 * k * vl)]),
                                   v16, 2) for k in range(nv)]
                    bev = [builder.sext(builder.shuffle_vector(b, b, even), vacc) for b in braw]
                    bod = [builder.sext(builder.shuffle_vector(b, b, odd), vacc) for b in braw]
                    for i in range(mr):
                        a0 = builder.load(builder.gep(paq, [ir.Constant(i64, 2 * i)]))
                        a1 = builder.load(builder.gep(paq, [ir.Constant(i64, 2 * i + 1)]))
                        a0v = builder.sext(_splat(builder, a0, v16n), vacc)
                        a1v = builder.sext(_splat(builder, a1, v16n), vacc)
                        for k in range(nv):
                            acc = builder.add(accs[i * nv + k], builder.mul(a0v, bev[k]))
                            new.append(builder.add(acc, builder.mul(a1v, bod[k])))
                    return new
                for i in range(mr):
                    # the (a_even, a_odd) pair as one i32, broadcast, viewed back as i16 pairs
                    pair = builder.load(builder.bitcast(builder.gep(paq, [ir.Constant(i64, 2 * i)]),
                                                        i32.as_pointer()))
                    pair.align = 2
                    aw = builder.sext(builder.bitcast(_splat(builder, pair, vacc), v16), v32w)
                    for k in range(nv):
                        prod = builder.mul(aw, bw[k])
                        s = builder.add(builder.shuffle_vector(prod, prod, even),
                                        builder.shuffle_vector(prod, prod, odd))
                        new.append(builder.add(accs[i * nv + k], s))
                return new

            outs = _counted_loop(builder, kq_, mr * nv, vacc, body)
            add_bit = context.cast(builder, add_, signature.args[8], types.boolean)
            _store_tile(builder, outs, pc, ldc_, add_bit, mr, nv, vl, vacc,
                        lambda b, old, new: b.add(old, new))
            return context.get_dummy_value()
        return sig, codegen
    return mk


mk_f32 = make_f32_kernel(MR, VL, NV)
mk_f32_epi = make_f32_epi_kernel(MR, VL, NV)
mk_f32_ra = make_f32_kernel_ra(MR, VL, NV)
mk_f32_epi_ra = make_f32_epi_kernel_ra(MR, VL, NV)
# SwiGLU: gate and up share the A broadcast; B packs [gate NR | up NR] per panel, so the tile is
# MR x 2NR and needs 2*MR*NV accumulators (still within 32 registers for the shapes above when
# MR is halved).
SMR = max(MR // 2, 4) if VL >= 8 else 4
mk_f32_glu = make_f32_kernel(SMR, VL, 2 * NV)
mk_i16 = make_i16pair_kernel(QMR, VL, QNV)
