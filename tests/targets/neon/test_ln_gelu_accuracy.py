"""Accuracy of the rational erf / GELU in ``_vmath`` and of the fused LayerNorm+GELU kernel
(serial and parallel paths) against float64 numpy with ``math.erf``, over the whole float range."""
import math

import numba
import numpy as np
import pytest
from numba import njit

from edgeops.targets.neon import _vmath as vm, norms

_ERF = np.vectorize(math.erf, otypes=[np.float64])
_BIG = np.finfo(np.float32).max
_EXTREMES = np.array([0.0, -0.0, 1e-30, -1e-30, 1e-6, -1e-6, 3.9, -3.9, 3.92, -3.92, 5.5, -5.5,
                      40.0, -40.0, 1e30, -1e30, _BIG, -_BIG, np.inf, -np.inf], np.float32)


@njit(error_model="numpy")
def _apply(x, erf, gelu):
    for i in range(x.size):
        erf[i] = vm.erf32(x[i])
        gelu[i] = vm.gelu_erf32(x[i])


def _run(x):
    erf, gelu = np.empty_like(x), np.empty_like(x)
    _apply(x, erf, gelu)
    return erf, gelu


def _gelu64(z):
    return 0.5 * z * (1.0 + _ERF(z / math.sqrt(2.0)))


def test_erf32_whole_range():
    x = np.concatenate([np.linspace(-8, 8, 400_001, dtype=np.float32), _EXTREMES])
    erf, _ = _run(x)
    assert np.max(np.abs(erf - _ERF(x.astype(np.float64)))) < 4.5e-7   # 3.6e-7 measured
    assert np.all(np.abs(erf) <= 1.0)              # clamped: GELU's 1 + erf never goes negative
    neg, _ = _run(-x)
    np.testing.assert_array_equal(neg, -erf)        # odd, bit for bit
    assert np.isnan(_run(np.array([np.nan], np.float32))[0][0])


def test_gelu_erf32_whole_range():
    x = np.concatenate([np.linspace(-12, 12, 400_001, dtype=np.float32), _EXTREMES[:-2]])
    _, gelu = _run(x)
    x64 = x.astype(np.float64)
    # erf's absolute error scales with |x| in x * Phi(x); the positive side is x to ~1 ulp
    assert np.all(np.abs(gelu - _gelu64(x64)) <= 3e-7 * np.maximum(1.0, np.abs(x64)))
    v = np.array([0.0, -1e30, -_BIG, 1e30, _BIG, np.inf, np.nan], np.float32)
    _, g = _run(v)
    np.testing.assert_array_equal(g[:6], [0, 0, 0, v[3], v[4], v[5]])   # exact tails
    assert np.isnan(g[6])


def _ln_gelu64(x, scale, bias, axis, eps):
    x = x.astype(np.float64)
    axes = tuple(range(axis % x.ndim, x.ndim))
    z = (x - x.mean(axis=axes, keepdims=True)) / np.sqrt(x.var(axis=axes, keepdims=True) + eps)
    return _gelu64(z * scale.astype(np.float64) + bias.astype(np.float64))


@pytest.mark.parametrize("shape,axis", [((3, 7, 33), -1), ((5, 1), -1), ((4, 17), -1),
                                        ((2, 3, 4, 5), 1), ((2, 9, 23), -2), ((1, 128, 768), -1)])
@pytest.mark.parametrize("threads", [1, None])
def test_layernorm_gelu_vs_float64(rng, shape, axis, threads):
    x = rng.standard_normal(shape, dtype=np.float32) * 3 + 1
    rows = x.reshape(-1, math.prod(shape[axis % len(shape):]))
    rows[0] = 0.0                                              # zero variance: output gelu(B)
    if rows.shape[0] > 1:
        # huge values, same z. (Offset rows are test_neon_memory_bound's: the float32 mean
        # rounds to ulp(offset), which a 5e-6 tolerance would not allow at offset 1000.)
        rows[1] *= 1e4
    tail = shape[axis % len(shape):]
    # scale up to ~8: normalised values reach |z| ~ 30, past erf's clip on both sides
    scale = rng.standard_normal(tail, dtype=np.float32) * 3
    bias = rng.standard_normal(tail[-1:], dtype=np.float32) * 2
    before = numba.get_num_threads()
    if threads:
        numba.set_num_threads(threads)                         # the serial kernel
    try:
        y = norms.layernorm(x, scale, bias, axis=axis, epsilon=1e-5, act="gelu")
    finally:
        numba.set_num_threads(before)
    ref = _ln_gelu64(x, scale, bias, axis, 1e-5)
    np.testing.assert_allclose(y, ref, rtol=5e-6, atol=5e-6)   # 2e-6 measured
