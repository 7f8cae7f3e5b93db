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
from numba.extending import intrinsic

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


@intrinsic
def f32_from_bits(typingctx, i):
    """The float32 whose bits are the int32 ``i``."""
    if i != types.int32:
        return None

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(types.int32), codegen


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


@intrinsic
def _k_of_shifted(typingctx, t):
    """k as a float32 from t = k + _SHIFTER, through t's bits: unlike t - _SHIFTER, no
    reassociation can fold this back into the sum that rounded k."""
    if t != types.float32:
        return None

    def codegen(context, builder, sig, args):
        i32 = ir.IntType(32)
        k = builder.sub(builder.bitcast(args[0], i32), ir.Constant(i32, _SHIFTER_BITS))
        return builder.sitofp(k, ir.FloatType())
    return types.float32(types.float32), codegen


@njit(cache=True, inline="always", fastmath=_FM, error_model="numpy")
def exp_nonpos32(x):
    """exp(x) for x <= 0 or NaN (softmax's x - max), safe to inline into code compiled with
    reassociation (so that a row sum beside it vectorises): k's rounding is undone through
    bits, and the reduction is one FMA (callers compile with contraction: a separate multiply
    and subtract measured 6.6e-7) with ln 2 rounded to float32 (reassociation would fold
    Cody-Waite's two constants into one anyway). The degree-5 polynomial (_F*). Relative error
    1.8e-7 on [-10, 0], growing as |k| * 1.9e-9 (the rounded ln 2) while the value shrinks as
    2**k: 3.9e-7 at -87, far below anything a softmax row's sum can see. Below -87.3 the
    result is exp(-87.3), as exp32's. 2**k multiplies (not an exponent-bits add, one op less)
    so that a NaN carrying a payload stays NaN."""
    d = max(np.float32(x), np.float32(-87.3))
    t = d * _LOG2E + _SHIFTER
    r = d - _k_of_shifted(t) * _LN2
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
