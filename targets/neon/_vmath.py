"""Vectorisable float32 exp / sigmoid / silu / erf / gelu for the memory-bound kernels.

Numba lowers ``math.exp`` to a libm call per element unless Intel SVML is present (it is not on
ARM), and a call per element stops LLVM from vectorising the loop: GroupNorm+SiLU and
LayerNorm+GELU would be bound by libm calls instead of memory (docs/notes/neon-kernels.md).
These versions are plain arithmetic plus one bit cast (an intrinsic), so loops over them
vectorise on AVX and NEON alike.

Accuracy (float32, checked in tests against float64): exp within 1.5 ulp on [-87, 88] (softmax's
exp_nonpos32: see its docstring); erf within 3.6e-7 absolute (rational minimax, see ``erf32``);
tanh via exp within ~1e-7 absolute.
"""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from edgeops.targets.neon._microkernel import _data_ptr, _splat

_LOG2E = np.float32(1.4426950408889634)
_LN2_HI = np.float32(0.693359375)          # Cody-Waite split of ln 2: k*HI is exact
_LN2_LO = np.float32(-2.12194440e-4)
# exp(r) ~= 1 + r + E2 r^2 + ... + E6 r^6 on |r| <= ln2/2, a degree-6 relative-error minimax
# fit made for this module (Lawson-weighted least squares in float64, 2.0e-9 before rounding the
# coefficients to float32; 7.1e-8 evaluated in float32 with FMAs). Plain Horner from the top:
# six FMAs, where the earlier 1 + r + r^2 P(r) form took eight operations.
_E6, _E5, _E4, _E3, _E2 = (np.float32(v) for v in (
    0.0013843448122779528, 0.008374315425300176, 0.041668013020013696, 0.1666642942451308,
    0.49999994138868514))
# The degree-5 fit of the same kind (c1 free too), for softmax's exp: 9.3e-8 before rounding,
# 1.5e-7 in float32; one FMA fewer, 16% off the fused exp-and-sum loop (figures:
# docs/notes/neon-kernels.md), well inside the softmax's 2e-6 relative tolerance.
_F5, _F4, _F3, _F2, _F1 = (np.float32(v) for v in (
    0.008290126340593696, 0.04189883463514376, 0.16667644042442997, 0.49999142883249986,
    0.9999997036905842))
# Round-to-integer by addition: for |y| < 2^22, y + 1.5*2^23 rounds y to the nearest integer k
# in the low mantissa bits (the spacing there is 1); the extra 127 puts the exponent bias in the
# same bits, so (bits << 23) is 2^k's float32 bit pattern outright, no float->int conversion.
_SHIFTER = np.float32(12582912.0 + 127.0)
_SHIFTER_BITS = int(np.array(_SHIFTER).view(np.int32))
_LN2 = np.float32(math.log(2.0))
# erf(x) ~= x * P(x^2) / Q(x^2) on |x| <= _ERF_CLIP, a (5, 5) rational minimax fit to erf made for
# this module (weighted linearised least squares in float64, error 1.6e-8 before rounding the
# coefficients to float32). Beyond the clip erf rounds to +-1 in float32 (erfc(3.92) < 3e-8).
_ERF_CLIP = np.float32(3.92)
_ERF_CLIP2 = np.float32(3.92 * 3.92)
_EP0, _EP1, _EP2, _EP3, _EP4, _EP5 = (np.float32(v) for v in (
    1.128378987312317, 0.1927632987499237, 0.0530603788793087, 0.0038682937156409025,
    0.0002874784986488521, 2.0347392819530796e-06))
_EQ1, _EQ2, _EQ3, _EQ4, _EQ5 = (np.float32(v) for v in (
    0.5041636824607849, 0.11508430540561676, 0.015172229148447514, 0.0011881066020578146,
    3.8070636946940795e-05))
# GELU's erf(x / sqrt 2) as the same rational in u = x^2 with the 1/sqrt 2 folded into its
# coefficients (P(u/2)/sqrt 2 and Q(u/2), each taken from the float32 coefficients above, in
# float64, then rounded): one multiply less per element (see gelu_erf32)
_GP0, _GP1, _GP2, _GP3, _GP4, _GP5 = (np.float32(float(c) * (1 / math.sqrt(2.0)) / 2.0 ** k)
                                      for k, c in enumerate((_EP0, _EP1, _EP2, _EP3, _EP4, _EP5)))
_GQ1, _GQ2, _GQ3, _GQ4, _GQ5 = (np.float32(float(c) / 2.0 ** k)
                                for k, c in enumerate((_EQ1, _EQ2, _EQ3, _EQ4, _EQ5), start=1))
_GELU_CLIP2 = np.float32(2 * float(_ERF_CLIP2))     # u's clip: (x / sqrt 2)^2 at erf's clip
_SQRT2_PI = np.float32(math.sqrt(2.0 / math.pi))
_GELU_C = np.float32(0.044715)
_ONE = np.float32(1.0)
_HALF = np.float32(0.5)

# fastmath: "contract" only (mul+add -> FMA: one rounding, no reassociation, NaN/inf kept)
_FM = {"contract"}


@intrinsic
def _pow2_of_shifted(typingctx, t):
    """2**k from t = k + _SHIFTER (a float32, k an integer in [-126, 127]): t's low 9 bits are
    k + 127, so shifting its bit pattern left by 23 leaves exactly 2**k's."""
    if t != types.float32:
        return None

    def codegen(context, builder, sig, args):
        i32 = ir.IntType(32)
        bits = builder.bitcast(args[0], i32)
        return builder.bitcast(builder.shl(bits, ir.Constant(i32, 23)), ir.FloatType())
    return types.float32(types.float32), codegen


# Lanes of the row intrinsics below: two 512-bit registers on AVX-512, eight 128-bit ones on
# NEON; enough independent chains to hide an add's latency.
_LANES = 32


def _const(ty, v: float):
    return ir.Constant(ty, v) if isinstance(ty, ir.FloatType) else ir.Constant(ty, [v] * ty.count)


def _loop(builder, start, stop, step: int, inits, body):
    """Emit ``for i in range(start, stop, step)`` carrying values: ``body(builder, i, carried)``
    returns the new ones; the final ones are returned. ``stop - start`` must be a multiple of
    ``step``."""
    i64 = ir.IntType(64)
    fn = builder.function
    head, blk, done = (fn.append_basic_block(f"row.{b}") for b in ("head", "body", "done"))
    entry = builder.block
    builder.branch(head)
    builder.position_at_end(head)
    i = builder.phi(i64)
    i.add_incoming(start, entry)
    phis = []
    for v in inits:
        phis.append(builder.phi(v.type))
        phis[-1].add_incoming(v, entry)
    builder.cbranch(builder.icmp_signed("<", i, stop), blk, done)
    builder.position_at_end(blk)
    new = body(builder, i, phis)
    end = builder.block
    i.add_incoming(builder.add(i, ir.Constant(i64, step)), end)
    for phi, v in zip(phis, new):
        phi.add_incoming(v, end)
    builder.branch(head)
    builder.position_at_end(done)
    return phis


def _row(name, n_arrays: int, n_scalars: int, lane, combine=None, init=0.0):
    """An intrinsic ``f(a0, .. a[n_arrays-1], n, s0, ..) [-> float32]`` over the float32 1-D
    arrays' first ``n`` elements: ``lane(builder, ty, loaded, scalars)`` maps element values of
    IR type ``ty`` (a _LANES vector, then a float for the tail) to ``(stored, contribution)``:
    ``stored`` goes to the last array (None: nothing is stored), ``contribution`` is reduced with
    ``combine`` (None: nothing is reduced). The reduction keeps lane j % _LANES's partial, then a
    fixed tree of halves, then the tail in order; nothing here carries fast-math flags, so no
    compiler may reorder it: the result has the same bits wherever the intrinsic is inlined (a
    native entry, the Python path), where a loop left to the vectoriser was reassociated
    differently in each. Unlike such a loop, no alias checks or remainder set-up per call: these
    run once per row of short softmax rows."""
    def typer(args):
        arrays, rest = args[:n_arrays], args[n_arrays:]
        if len(rest) != 1 + n_scalars or not all(
                isinstance(a, types.Array) and a.ndim == 1 and a.dtype == types.float32
                for a in arrays) or not isinstance(rest[0], types.Integer) or not all(
                s == types.float32 for s in rest[1:]):
            return None
        ret = types.float32 if combine is not None else types.none

        def codegen(context, builder, sig, vals):
            i64, f32 = ir.IntType(64), ir.FloatType()
            vt = ir.VectorType(f32, _LANES)
            data = [_data_ptr(context, builder, t, v)
                    for t, v in zip(sig.args[:n_arrays], vals[:n_arrays])]
            n = context.cast(builder, vals[n_arrays], sig.args[n_arrays], types.int64)
            scalars = list(vals[n_arrays + 1:])
            body_n = builder.and_(n, ir.Constant(i64, ~(_LANES - 1)))

            def step(ty, ptr_of, acc):
                def go(b, i, carried):
                    loaded = [b.load(ptr_of(b, d, i), align=4) for d in data[:n_arrays]]
                    vec = [s if ty is f32 else _splat(b, s, ty) for s in scalars]
                    stored, part = lane(b, ty, loaded, vec)
                    if stored is not None:
                        b.store(stored, ptr_of(b, data[-1], i), align=4)
                    return [combine(b, carried[0], part)] if acc else []
                return go

            def vptr(b, d, i):
                return b.bitcast(b.gep(d, [i]), vt.as_pointer())

            def sptr(b, d, i):
                return b.gep(d, [i])

            acc = combine is not None
            got = _loop(builder, ir.Constant(i64, 0), body_n, _LANES,
                        [_const(vt, init)] if acc else [], step(vt, vptr, acc))
            first = None
            if acc:
                r, w = got[0], _LANES
                while w > 1:
                    h = w // 2
                    half = [ir.Constant(ir.VectorType(ir.IntType(32), h), list(range(k, k + h)))
                            for k in (0, h)]
                    r = combine(builder, builder.shuffle_vector(r, r, half[0]),
                                builder.shuffle_vector(r, r, half[1]))
                    w = h
                first = builder.extract_element(r, ir.Constant(ir.IntType(32), 0))
            got = _loop(builder, body_n, n, 1, [first] if acc else [], step(f32, sptr, acc))
            return got[0] if acc else context.get_dummy_value()
        return ret(*args), codegen

    # intrinsics take no *args: one signature per arity in use
    if (n_arrays, n_scalars) == (1, 0):
        def row(typingctx, a, n):
            return typer((a, n))
    elif (n_arrays, n_scalars) == (2, 1):
        def row(typingctx, a, b, n, s):
            return typer((a, b, n, s))
    else:
        raise ValueError(f"no row intrinsic of {n_arrays} arrays and {n_scalars} scalars")
    row.__name__ = name
    return intrinsic(row)


def _fma(b, x, y, z):
    ty = x.type
    name = "llvm.fma." + (f"v{ty.count}f32" if isinstance(ty, ir.VectorType) else "f32")
    fn = b.module.globals.get(name) or ir.Function(b.module, ir.FunctionType(ty, [ty] * 3), name)
    return b.call(fn, [x, y, z])


def _max(b, x, y):
    # x > y ? x : y is one vmaxps / fmax; an unordered pair gives y
    return b.select(b.fcmp_ordered(">", x, y), x, y)


def _exp_nonpos_ir(b, ty, x):
    """exp_nonpos32's arithmetic as IR, element for element the same operations (the same bits
    as the Numba function compiled with contraction)."""
    d = b.select(b.fcmp_ordered("<", x, _const(ty, -87.3)), _const(ty, -87.3), x)    # NaN kept
    t = _fma(b, d, _const(ty, float(_LOG2E)), _const(ty, float(_SHIFTER)))
    r = _fma(b, b.fsub(t, _const(ty, float(_SHIFTER))), _const(ty, -float(_LN2)), d)
    p = _const(ty, float(_F5))
    for c in (_F4, _F3, _F2, _F1, _ONE):
        p = _fma(b, p, r, _const(ty, float(c)))
    it = ir.IntType(32) if isinstance(ty, ir.FloatType) else ir.VectorType(ir.IntType(32),
                                                                         ty.count)
    two_k = b.bitcast(b.shl(b.bitcast(t, it), ir.Constant(it, 23) if isinstance(
        ty, ir.FloatType) else ir.Constant(it, [23] * ty.count)), ty)
    return b.fmul(p, two_k)


def _exp_sum_lane(b, ty, loaded, sc):
    e = _exp_nonpos_ir(b, ty, b.fsub(loaded[0], sc[0]))
    return e, e


# row_sum(a, n): sum of a[:n] in the fixed order of _row
row_sum = _row("row_sum", 1, 0, lambda b, ty, ld, sc: (None, ld[0]),
               lambda b, acc, v: b.fadd(acc, v), 0.0)
# row_max(a, n): max of a[:n]. A NaN is skipped or kept depending on where it sits: softmax's
# exp(x - m) turns the row into NaN either way.
row_max = _row("row_max", 1, 0, lambda b, ty, ld, sc: (None, ld[0]), _max, float("-inf"))
# exp_sum(x, y, n, m): y[:n] = exp_nonpos32(x[:n] - m); returns their sum (row_sum's order)
exp_sum = _row("exp_sum", 2, 1, _exp_sum_lane, lambda b, acc, v: b.fadd(acc, v), 0.0)
# scale(y, y, n, s): y[:n] *= s (the array twice: read, then written)
scale = _row("scale", 2, 1, lambda b, ty, ld, sc: (b.fmul(ld[0], sc[0]), None))


@intrinsic
def stack_f32(typingctx, n):
    """A pointer to ``n`` float32 (a compile-time constant) on the calling function's stack,
    allocated once in its entry block: per-call scratch with no allocator and nothing shared
    between threads (each prange worker runs its own frame). Wrap it with ``carray``."""
    if not isinstance(n, types.IntegerLiteral):
        return None
    count = n.literal_value

    def codegen(context, builder, sig, args):
        return cgutils.alloca_once(builder, ir.FloatType(), size=count)
    return types.CPointer(types.float32)(n), codegen


@njit(cache=True, inline="always", fastmath=_FM, error_model="numpy")
def _exp_reduced(x):
    """exp(x) for x already clamped to [-87.3, 88.7] (or NaN): k = round(x / ln 2) by the
    shifter addition, r = x - k ln 2 (Cody-Waite: k * _LN2_HI is exact), exp(r) by the
    polynomial, times 2**k from the shifted sum's bits: twelve vector operations after the clamps,
    no conversions.
    The shifter sum must not be reassociated away (contract only: see _FM)."""
    t = x * _LOG2E + _SHIFTER
    k = t - _SHIFTER
    r = x - k * _LN2_HI - k * _LN2_LO
    p = ((((_E6 * r + _E5) * r + _E4) * r + _E3) * r + _E2) * r + _ONE
    p = p * r + _ONE
    return p * _pow2_of_shifted(t)


@njit(cache=True, inline="always", fastmath=_FM, error_model="numpy")
def exp32(x):
    return _exp_reduced(min(max(np.float32(x), np.float32(-87.3)), np.float32(88.7)))


@njit(cache=True, inline="always", fastmath=_FM, error_model="numpy")
def exp_nonpos32(x):
    """exp(x) for x <= 0 or NaN (softmax's x - max): the reduction is one FMA (callers compile
    with contraction: a separate multiply and subtract measured 6.6e-7) with ln 2 rounded to
    float32, then the degree-5 polynomial (_F*). Relative error 1.8e-7 on [-10, 0], growing as
    |k| * 1.9e-9 (the rounded ln 2) while the value shrinks as 2**k: 3.9e-7 at -87, far below
    anything a softmax row's sum can see. Below -87.3 the result is exp(-87.3), as exp32's.
    2**k multiplies (not an exponent-bits add, one op less) so that a NaN carrying a payload
    stays NaN. The softmax kernel runs the same operations as IR (exp_sum); this one is the
    reference that tests hold it to."""
    d = max(np.float32(x), np.float32(-87.3))
    t = d * _LOG2E + _SHIFTER
    r = d - (t - _SHIFTER) * _LN2
    p = ((((_F5 * r + _F4) * r + _F3) * r + _F2) * r + _F1) * r + _ONE
    return p * _pow2_of_shifted(t)


@njit(cache=True, inline="always", fastmath=_FM, error_model="numpy")
def sigmoid32(x):
    return _ONE / (_ONE + exp32(-x))


@njit(cache=True, inline="always", fastmath=_FM, error_model="numpy")
def silu32(x):
    return x / (_ONE + exp32(-x))


@njit(cache=True, inline="always", fastmath=_FM, error_model="numpy")
def erf32(x):
    # One divide and ten FMAs, no exp: faster in the LayerNorm+GELU pass than Abramowitz &
    # Stegun 7.1.26 (divide + exp), and more accurate (the float32 evaluation, not the fit, sets
    # the error; figures: docs/notes/neon-kernels.md). Positive coefficients: Horner is stable.
    # The result is clamped to [-1, 1]: rounding lifts it to 1.0000002 near the clip, and GELU's
    # h + h*erf must be exactly 0 for large negative x (it was 7.6e22 at x=-1e30 unclamped).
    # Only u = x^2 is clipped, one op where clipping x took two (the loop is bound by its vector
    # ops): beyond the clip x * P/Q is x/clip times erf(clip) ~ 1,
    # which the clamp takes to +-1 (an infinite x too). NaN propagates: Numba's min/max return NaN
    # for a NaN operand.
    u = min(x * x, _ERF_CLIP2)
    p = ((((_EP5 * u + _EP4) * u + _EP3) * u + _EP2) * u + _EP1) * u + _EP0
    q = ((((_EQ5 * u + _EQ4) * u + _EQ3) * u + _EQ2) * u + _EQ1) * u + _ONE
    return min(max(x * p / q, -_ONE), _ONE)


@njit(cache=True, inline="always", fastmath=_FM, error_model="numpy")
def tanh32(x):
    # 1 - 2/(e^{2x}+1): exact limits at +-inf, ~1e-7 absolute near 0 (fine for GELU)
    return _ONE - np.float32(2.0) / (exp32(np.float32(2.0) * x) + _ONE)


@njit(cache=True, inline="always", fastmath=_FM, error_model="numpy")
def gelu_erf32(x):
    # erf32(x / sqrt 2) with the scaling folded into the coefficients (_GP*, _GQ*): one multiply
    # fewer of ~20 vector ops, same accuracy, the same clamps and tails
    u = min(x * x, _GELU_CLIP2)
    p = ((((_GP5 * u + _GP4) * u + _GP3) * u + _GP2) * u + _GP1) * u + _GP0
    q = ((((_GQ5 * u + _GQ4) * u + _GQ3) * u + _GQ2) * u + _GQ1) * u + _ONE
    h = _HALF * x
    return h + h * min(max(x * p / q, -_ONE), _ONE)


@njit(cache=True, inline="always", fastmath=_FM, error_model="numpy")
def gelu_tanh32(x):
    return _HALF * x * (_ONE + tanh32(_SQRT2_PI * (x + _GELU_C * x * x * x)))
