"""Blocked, packed fp32 GEMM / batched MatMul (Goto/BLIS loop nest) with a fused epilogue.

Loop nest per work item (rows r0:r1, cols c0:c1 of one batch entry)::

    for jc in cols, step nc:            B block kc x nc   -> L3 (packed once per jc, pc)
      for pc in K, step kc:
        for ic in rows, step mc:        A block mc x kc   -> L2 (packed)
          for jr in block, step NR:     B micro-panel     -> L1
            for ir in block, step MR:   MR x NR tile in registers (``_microkernel``)

mc, nc, kc are runtime arguments (``blocking.Blocking``). Threads split the batch first, then the
rows, then the columns, into about one work item per thread; each item packs its own panels (the
extra B packing is O(K*N) per thread against O(M*N*K/threads) of arithmetic).

No ``fastmath``: the contraction is ``llvm.fmuladd`` in a fixed order, so results are
deterministic for a given blocking and do not depend on the thread count.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from edgeops.errors import EdgeOpsError
from edgeops.targets.neon import epilogue as ep
from edgeops.targets.neon._microkernel import (MR, NR, mk_f32, mk_f32_epi, mk_f32_epi_ra,
                                               mk_f32_ra)
from edgeops.targets.neon._pack import pack_a, pack_b, pack_b_all, packed_b_size
from edgeops.threads import SMALL_FLOPS, num_threads, serial_if
from edgeops.targets.neon.blocking import Blocking, from_tiling

_EMPTY_F32 = np.zeros(1, np.float32)

# fastmath: "contract" only (mul+add -> FMA: one rounding, no reassociation, NaN/inf kept)
_FM = {"contract"}


@njit(cache=True, fastmath=_FM, error_model="numpy")
def _gemm_block(r0, r1, c0, c1, K, a, aoff, ars, acs, b, boff, brs, bcs, bpk, pk, c, coff,
                ldc, alpha, accumulate, bias, bias_off, bias_mode, act, p0, p1, mc, nc, kc):
    # pk: B is held packed whole in ``bpk`` (``_pack.pack_b_all`` with this kc): no B packing
    # per call, which cost ~30% of a 128x768x768 MatMul (docs/notes/neon-kernels.md)
    npad = bpk.shape[0] // K if pk else 0
    ap = np.empty(((mc + MR - 1) // MR) * MR * kc, np.float32)
    bp = np.empty(NR if pk else ((nc + NR - 1) // NR) * NR * kc, np.float32)
    ct = np.empty(MR * NR, np.float32)
    # bias + Relu/Clip are applied by the micro-kernel's store on the last K block (zero vectors
    # stand in for an absent bias, +-inf for no clamp); other activations run on the stored tile
    zr = np.zeros(MR, np.float32)
    zc = np.zeros(NR, np.float32)
    clamp, lo, hi = ep.clamp_bounds(act, p0, p1)
    # B is packed only when a packed block is reused by more than one A block (rows > mc);
    # otherwise the micro-kernel reads row-major B in place (only a ragged edge panel is
    # packed): packing is O(K*N) per call and short-M GEMMs (conv, Winograd) cannot amortise it.
    # Not when B's row stride is a multiple of 1 KiB: the kc rows of a panel then fall into a
    # few cache sets and thrash L1/L2 (figures: docs/notes/neon-kernels.md).
    direct = bcs == 1 and r1 - r0 <= mc and brs % 256 != 0 and not pk
    # Row-major A is read in place by the micro-kernel (its MR rows as MR streams; only a ragged
    # last panel is packed): saves the per-call packing of A (figures: neon-kernels.md). Not
    # when A's row stride is a multiple of 4 KiB (the MR rows would share one L1 set).
    arow = acs == 1 and ars % 1024 != 0
    for jc in range(c0, c1, nc):
        nb = min(nc, c1 - jc)
        full = nb // NR * NR
        for pc in range(0, K, kc):
            kb = min(kc, K - pc)
            if pk:
                pass
            elif not direct:
                pack_b(b, boff, brs, bcs, pc, kb, jc, nb, bp, NR)
            elif full < nb:
                pack_b(b, boff, brs, bcs, pc, kb, jc + full, nb - full, bp, NR)
            add = accumulate or pc > 0
            last = pc + kb >= K
            for ic in range(r0, r1, mc):
                mb = min(mc, r1 - ic)
                afull = mb // MR * MR if arow else 0
                if afull < mb:
                    pack_a(a, aoff, ars, acs, ic + afull, mb - afull, pc, kb, ap, MR)
                for jr in range(0, nb, NR):
                    nr = min(NR, nb - jr)
                    if pk:
                        src, soff, ldb = bpk, pc * npad + (jc + jr) * kb, NR
                    elif not direct:
                        src, soff, ldb = bp, jr * kb, NR
                    elif jr < full:
                        src, soff, ldb = b, boff + pc * brs + jc + jr, brs
                    else:
                        src, soff, ldb = bp, 0, NR
                    for ir in range(0, mb, MR):
                        mr = min(MR, mb - ir)
                        co = coff + (ic + ir) * ldc + jc + jr
                        inplace = ir < afull
                        ao = aoff + (ic + ir) * ars + pc if inplace else (ir - afull) * kb
                        if mr == MR and nr == NR and alpha == 1:
                            # interior tile: the micro-kernel stores into C itself
                            if not last:
                                if inplace:
                                    mk_f32_ra(kb, a, ao, ars, src, soff, ldb, c, co, ldc, add)
                                else:
                                    mk_f32(kb, ap, ao, src, soff, ldb, c, co, ldc, add)
                                continue
                            rb, rbo = (bias, bias_off + ic + ir) if bias_mode == ep.BIAS_ROW \
                                else (zr, 0)
                            cb, cbo = (bias, bias_off + jc + jr) if bias_mode == ep.BIAS_COL \
                                else (zc, 0)
                            if inplace:
                                mk_f32_epi_ra(kb, a, ao, ars, src, soff, ldb, c, co, ldc, add, rb,
                                              rbo, cb, cbo, lo, hi)
                            else:
                                mk_f32_epi(kb, ap, ao, src, soff, ldb, c, co, ldc, add, rb, rbo,
                                           cb, cbo, lo, hi)
                            if not clamp:
                                ep.finish_tile(c, co, ldc, mr, nr, bias, bias_off, ep.BIAS_NONE,
                                               ic + ir, jc + jr, act, p0, p1)
                        else:
                            if inplace:
                                mk_f32_ra(kb, a, ao, ars, src, soff, ldb, ct, 0, NR, False)
                            else:
                                mk_f32(kb, ap, ao, src, soff, ldb, ct, 0, NR, False)
                            ep.store_tile(ct, NR, c, co, ldc, mr, nr, alpha, add, last, bias,
                                          bias_off, bias_mode, ic + ir, jc + jr, act, p0, p1)


@njit(parallel=True, cache=True, fastmath=_FM, error_model="numpy")
def _gemm_par(M, N, K, a, a_offs, ars, acs, b, b_offs, brs, bcs, bpk, pk, c, c_offs, ldc,
              alpha, accumulate, bias, bias_offs, bias_mode, act, p0, p1, mc, nc, kc, rch, cch):
    nbt = a_offs.shape[0]
    rstep = (((M + rch - 1) // rch + MR - 1) // MR) * MR
    cstep = (((N + cch - 1) // cch + NR - 1) // NR) * NR
    per = rch * cch
    for it in prange(nbt * per):
        bt = it // per
        ri = (it % per) // cch
        ci = it % cch
        r0 = ri * rstep
        c0 = ci * cstep
        if r0 < M and c0 < N:
            _gemm_block(r0, min(M, r0 + rstep), c0, min(N, c0 + cstep), K, a, a_offs[bt], ars,
                        acs, b, b_offs[bt], brs, bcs, bpk, pk, c, c_offs[bt], ldc, alpha,
                        accumulate,
                        bias, bias_offs[bt], bias_mode, act, p0, p1, mc, nc, kc)


def split_work(nbatch: int, M: int, N: int, K: int, threads: int | None = None) -> tuple[int, int]:
    """(row chunks, column chunks) per batch entry so that there is about one item per thread;
    problems too small to amortise a thread hand-off stay in one item."""
    t = num_threads() if threads is None else threads
    if t <= 1 or nbatch >= t or 2.0 * nbatch * M * N * K < 4e6:
        return 1, 1
    need = -(-t // nbatch)
    rch = max(1, min(need, -(-M // MR)))
    cch = max(1, min(-(-need // rch), -(-N // NR)))
    return rch, cch


def gemm_flat(M, N, K, a, a_offs, ars, acs, b, b_offs, brs, bcs, c, c_offs, ldc, *, alpha=1.0,
              accumulate=False, bias=None, bias_offs=None, bias_mode=ep.BIAS_NONE,
              act=(0, 0.0, 0.0),
              blocking: Blocking | None = None):
    """The driver for callers that have already laid out flat operands (conv, winograd, matmul):
    C[c_off + i*ldc + j] = act(alpha * sum_k A[i,k] B[k,j] (+ C) + bias) for every batch entry.
    A[i, k] is ``a[a_off + i*ars + k*acs]``; likewise B. No checks beyond dtypes: internal use."""
    if K == 0:
        raise EdgeOpsError("neon gemm: K == 0 is not handled by the packed kernel")
    lay = flat_layout(M, N, K, a_offs, b_offs, c_offs, bias_offs, blocking)
    bias_arr = _EMPTY_F32 if bias is None else bias
    run_flat(lay, a, ars, acs, b, brs, bcs, c, ldc, np.float32(alpha), bool(accumulate),
             bias_arr, bias_mode, act[0], float(act[1]), float(act[2]))


def flat_layout(M, N, K, a_offs, b_offs, c_offs, bias_offs, blocking) -> dict:
    """What a :func:`gemm_flat` call fixes from its shapes and the calling thread's team: the
    batch offsets, the blocking fitted to the shape and the work split (a native step holds
    these, edgeops.targets.neon.native)."""
    nbt = len(a_offs)
    mc, nc, kc = (blocking or from_tiling(None)).fitted(M, N, K)
    rch, cch = split_work(nbt, M, N, K)
    return {"M": M, "N": N, "K": K, "a_offs": np.asarray(a_offs, np.int64),
            "b_offs": np.asarray(b_offs, np.int64), "c_offs": np.asarray(c_offs, np.int64),
            "bias_offs": np.zeros(nbt, np.int64) if bias_offs is None
            else np.asarray(bias_offs, np.int64), "mc": mc, "nc": nc, "kc": kc,
            "rch": rch, "cch": cch, "items": nbt * rch * cch,
            "serial": nbt * rch * cch == 1 or 2.0 * nbt * M * N * K < SMALL_FLOPS}


def run_flat(lay, a, ars, acs, b, brs, bcs, c, ldc, alpha, accumulate, bias, bias_mode, act,
             p0, p1, bpk=None) -> None:
    """One :func:`flat_layout` call; ``bpk``: B packed whole by :func:`prepack_b` (then ``b`` is
    not read) or None."""
    M, N, K = lay["M"], lay["N"], lay["K"]
    pk = bpk is not None
    bpk = _EMPTY_F32 if bpk is None else bpk
    if lay["items"] == 1:      # one work item: the block itself, no parallel region launched
        _gemm_block(0, M, 0, N, K, a, lay["a_offs"][0], ars, acs, b, lay["b_offs"][0], brs, bcs,
                    bpk, pk, c, lay["c_offs"][0], ldc, alpha, accumulate, bias,
                    lay["bias_offs"][0], bias_mode, act, p0, p1, lay["mc"], lay["nc"], lay["kc"])
        return
    with serial_if(lay["serial"]):
        _gemm_par(M, N, K, a, lay["a_offs"], ars, acs, b, lay["b_offs"], brs, bcs, bpk, pk, c,
                  lay["c_offs"], ldc, alpha, accumulate, bias, lay["bias_offs"], bias_mode, act,
                  p0, p1, lay["mc"], lay["nc"], lay["kc"], lay["rch"], lay["cch"])


def prepack_b(lay, b, brs, bcs) -> np.ndarray | None:
    """B packed whole for ``lay`` (its kc), for a B that every batch entry shares (held weights:
    packed once when a step is made), else None."""
    if np.any(lay["b_offs"] != lay["b_offs"][0]):
        return None
    K, N = lay["K"], lay["N"]
    bpk = np.empty(packed_b_size(K, N), np.float32)
    pack_b_all(b, int(lay["b_offs"][0]), brs, bcs, K, N, lay["kc"], bpk)
    return bpk


def operand(x: np.ndarray) -> tuple[np.ndarray, int, int]:
    """A 2-D fp32 array as (flat buffer, row stride, col stride) without copying C- or
    F-contiguous views (a transposed weight stays a view); anything else is copied once."""
    if x.flags.c_contiguous:
        return x.reshape(-1), x.shape[1], 1
    if x.flags.f_contiguous:
        return x.T.reshape(-1), 1, x.shape[0]
    x = np.ascontiguousarray(x)
    return x.reshape(-1), x.shape[1], 1


def _check_f32(name: str, x, ndim: tuple[int, ...]) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise EdgeOpsError(f"neon gemm: {name} must be a numpy array, got {type(x).__name__}")
    if x.dtype != np.float32:
        raise EdgeOpsError(f"neon gemm: {name} has dtype {x.dtype}; this kernel takes float32 "
                           f"(cast, or use the int8 kernel for quantized data)")
    if x.ndim not in ndim:
        raise EdgeOpsError(f"neon gemm: {name} must have rank {' or '.join(map(str, ndim))}, "
                           f"got shape {x.shape}")
    return x


def gemm(a, b, c=None, *, alpha=1.0, beta=1.0, trans_a=False, trans_b=False, bias=None,
         act=None, blocking=None, tiling=None) -> np.ndarray:
    """ONNX Gemm plus a fused epilogue: ``act(alpha * op(A) @ op(B) + beta * C + bias)``.

    ``C`` broadcasts to (M, N) as in ONNX; ``bias`` is a length-N vector; ``act`` is a name or a
    ``(code, p0, p1)`` triple from ``epilogue.activation``. ``blocking``/``tiling`` set (mc,nc,kc).
    """
    a = _check_f32("A", a, (2,))
    b = _check_f32("B", b, (2,))
    av = a.T if trans_a else a
    bv = b.T if trans_b else b
    M, K = av.shape
    K2, N = bv.shape
    if K != K2:
        raise EdgeOpsError(f"neon gemm: inner dimensions differ: op(A) is {av.shape}, "
                           f"op(B) is {bv.shape}")
    actt = act if isinstance(act, tuple) else ep.activation(act)
    out = np.empty((M, N), np.float32)
    bias_vec, mode, pre = epilogue(M, N, c, beta, bias)
    accumulate = pre is not None
    if accumulate:
        out[...] = pre
    if K == 0:
        acc = out if accumulate else np.zeros((M, N), np.float32)
        if bias_vec is not None:
            acc = acc + (bias_vec[None, :] if mode == ep.BIAS_COL else bias_vec[:, None])
        return _act_numpy(acc, actt)
    af, ars, acs = operand(av)
    bf, brs, bcs = operand(bv)
    gemm_flat(M, N, K, af, [0], ars, acs, bf, [0], brs, bcs, out.reshape(-1), [0], N,
              alpha=alpha, accumulate=accumulate, bias=bias_vec, bias_mode=mode, act=actt,
              blocking=blocking or from_tiling(tiling))
    return out


def epilogue(M: int, N: int, c, beta: float, bias):
    """(bias vector, its mode, C pre-stored or None) for ``beta * C + bias``: the cheapest
    epilogue that is exact: a per-column vector (C of shape (N,)/(1, N)/scalar, plus the bias), a
    per-row vector (C of shape (M, 1) alone), or else ``beta * C`` pre-stored in the output and
    accumulated into."""
    col = np.zeros(N, np.float32) if bias is not None else None
    row, pre = None, None
    if c is not None and beta != 0.0:
        c = np.asarray(c, np.float32)
        try:
            cb = np.broadcast_to(c, (M, N))
        except ValueError:
            raise EdgeOpsError(f"neon gemm: C of shape {c.shape} does not broadcast to "
                               f"({M}, {N})") from None
        if c.ndim <= 1 or c.shape[0] == 1:
            col = (beta * cb[0]).astype(np.float32) if col is None else col + beta * cb[0]
        elif c.shape[-1] == 1 and col is None:
            row = np.ascontiguousarray(beta * cb[:, 0], np.float32)
        else:
            pre = np.ascontiguousarray(beta * cb, np.float32)
    if bias is not None:
        bias = np.asarray(bias, np.float32).reshape(-1)
        if bias.size != N:
            raise EdgeOpsError(f"neon gemm: bias has {bias.size} entries, need N={N}")
        col += bias
    bias_vec, mode = ((col, ep.BIAS_COL) if col is not None else
                      (row, ep.BIAS_ROW) if row is not None else (None, ep.BIAS_NONE))
    return bias_vec, mode, pre


def _act_numpy(x, actt):
    from edgeops.targets.neon.eltwise import activation_inplace
    x = np.ascontiguousarray(x, np.float32)
    activation_inplace(x.reshape(-1), *actt)
    return x


def matmul(a, b, *, blocking=None, tiling=None) -> np.ndarray:
    """numpy/ONNX MatMul (batch dims broadcast, 1-D operands promoted) in float32."""
    M, N, K, batch, (af, a_offs, ars, acs), (bf, b_offs, brs, bcs) = matmul_operands(a, b)
    nbt = int(np.prod(batch, dtype=np.int64))
    out = np.empty(batch + (M, N), np.float32)
    if nbt and M and N:
        if K == 0:
            out[...] = 0
        else:
            gemm_flat(M, N, K, af, a_offs, ars, acs, bf, b_offs, brs, bcs, out.reshape(-1),
                      np.arange(nbt, dtype=np.int64) * (M * N), N,
                      blocking=blocking or from_tiling(tiling))
    if a.ndim == 1:
        out = out[..., 0, :]
    if b.ndim == 1:
        out = out[..., 0]
    return out


def matmul_operands(a, b):
    """(M, N, K, batch shape, A as (flat, batch offsets, row stride, col stride), B likewise):
    how :func:`matmul` lays its operands out for :func:`gemm_flat`."""
    a = _check_f32("A", a, tuple(range(1, 9)))
    b = _check_f32("B", b, tuple(range(1, 9)))
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    M, K = a2.shape[-2:]
    K2, N = b2.shape[-2:]
    if K != K2:
        raise EdgeOpsError(f"neon matmul: inner dimensions differ: A {a.shape} has K={K}, "
                           f"B {b.shape} has K={K2}")
    try:
        batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    except ValueError:
        raise EdgeOpsError(f"neon matmul: batch dimensions of A {a.shape} and B {b.shape} do not "
                           f"broadcast") from None
    if a2.ndim == 2 and b2.ndim == 2:
        af, ars, acs = operand(a2)
        bf, brs, bcs = operand(b2)
        return M, N, K, batch, (af, [0], ars, acs), (bf, [0], brs, bcs)
    return M, N, K, batch, _batched(a2, batch), _batched(b2, batch)


def _batched(x, batch):
    """Flat buffer + per-batch offsets for a (..., R, C) operand broadcast to ``batch``."""
    x = np.ascontiguousarray(x)
    r, cdim = x.shape[-2:]
    own = x.shape[:-2]
    idx = np.arange(int(np.prod(own, dtype=np.int64)), dtype=np.int64).reshape(own)
    idx = np.broadcast_to(idx.reshape((1,) * (len(batch) - len(own)) + own), batch)
    return x.reshape(-1), np.ascontiguousarray(idx).reshape(-1) * (r * cdim), cdim, 1
