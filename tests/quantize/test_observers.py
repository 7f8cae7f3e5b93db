"""Observers against independent computations."""
from __future__ import annotations

import numpy as np
import pytest

from edgeops.quantize.observers import (EntropyObserver, MSEObserver, PercentileObserver,
                                        activation_qparams, fake_quantize, kl_for_bins,
                                        make_observer, entropy_threshold)
from edgeops.errors import EdgeOpsError


def _batches(rng, n=5):
    return [rng.standard_normal((2, 7, 13)).astype(np.float32) * (i + 1) for i in range(n)]


def test_minmax():
    rng = np.random.default_rng(0)
    bs = _batches(rng)
    o = make_observer("minmax")
    for b in bs:
        o.update(b)
    allv = np.concatenate([b.ravel() for b in bs])
    assert o.compute() == (allv.min(), allv.max())


def test_percentile_matches_numpy():
    rng = np.random.default_rng(1)
    bs = _batches(rng)
    o = PercentileObserver(percentile=99.5)
    for b in bs:
        o.update(b)
    allv = np.concatenate([b.ravel() for b in bs])
    lo, hi = o.compute()
    np.testing.assert_allclose([lo, hi], np.percentile(allv, [0.5, 99.5]), rtol=1e-6)


def test_entropy_clips_heavy_tail_and_beats_max_in_kl():
    rng = np.random.default_rng(2)
    x = rng.standard_t(df=2, size=200_000).astype(np.float32)    # heavy tails
    o = EntropyObserver()
    o.update(x)
    lo, hi = o.compute()
    amax = np.abs(x).max()
    assert hi < amax and lo > -amax
    # independently: the TensorRT histogram, the chosen bin count vs keeping everything
    hist, edges = np.histogram(np.abs(x), bins=2048, range=(0, amax))
    t, kls = entropy_threshold(hist, edges, 128)
    i = int(round(t / (edges[1] - edges[0])))
    assert kl_for_bins(hist, i) <= kl_for_bins(hist, 2048) + 1e-12
    assert kls.min() == pytest.approx(kl_for_bins(hist, i))
    assert t < amax


def test_kl_is_zero_when_quantization_loses_nothing():
    hist = np.zeros(2048)
    hist[:128] = 5.0     # 128 populated bins: 128 levels represent them exactly
    assert kl_for_bins(hist, 128) == pytest.approx(0.0, abs=1e-12)


def test_mse_observer_not_worse_than_minmax():
    rng = np.random.default_rng(3)
    x = rng.laplace(size=50_000).astype(np.float32)
    o = MSEObserver()
    o.update(x)

    def mse(lo, hi):
        s, z = activation_qparams(lo, hi)
        return np.mean((fake_quantize(x, s, z, -128, 127) - x) ** 2)
    assert mse(*o.compute()) <= mse(x.min(), x.max())


def test_unknown_method_refused():
    with pytest.raises(EdgeOpsError, match="minmax"):
        make_observer("kl")


def test_mse_weights_symmetric_and_not_worse():
    from edgeops.quantize.observers import dequantize, quantize_weight
    rng = np.random.default_rng(6)
    w = rng.standard_t(3, (8, 30)).astype(np.float32)
    q0, s0, _ = quantize_weight(w, 0)
    q1, s1, z1 = quantize_weight(w, 0, "mse")
    assert not z1.any() and np.all(s1 <= s0 + 1e-12)
    e0 = ((dequantize(q0, s0, 0, 0) - w) ** 2).sum(axis=1)
    e1 = ((dequantize(q1, s1, 0, 0) - w) ** 2).sum(axis=1)
    assert np.all(e1 <= e0 + 1e-9)
