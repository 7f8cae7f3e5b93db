"""Per-dimension tiling arithmetic against enumeration."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from edgeops.simulator import tilemath as tm


def _enum_classes(D, chain):
    sizes = [D]
    for t in chain:
        sizes = [min(t, s - o) for s in sizes for o in range(0, s, min(t, s))]
    return sizes


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 300), st.lists(st.integers(1, 80), min_size=1, max_size=3), st.integers(1, 32))
def test_classes_match_enumeration(D, chain, g):
    sizes = _enum_classes(D, chain)
    assert int(tm.count(D, chain)) == len(sizes)
    assert int(tm.padded_sum(D, chain, g)) == sum(tm.roundup(s, g) for s in sizes)
    assert int(tm.padded_sum(D, chain, 1)) == D


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 60), st.integers(1, 4), st.integers(1, 7), st.integers(1, 3), st.data())
def test_window_rows_clipped_closed_form(out_extra, stride, kernel, dil, data):
    extent = (kernel - 1) * dil + 1
    pad = data.draw(st.integers(0, extent - 1))
    pad_end = data.draw(st.integers(0, extent - 1))
    H = data.draw(st.integers(max(1, extent - pad - pad_end), 80))
    out = (H + pad + pad_end - extent) // stride + 1
    if out < 1:
        return
    t = data.draw(st.integers(1, out + 3))
    assert int(tm.window_rows_clipped(out, t, stride, extent, pad, H)) == \
        tm.window_rows_clipped_enum(out, t, stride, extent, pad, H)


def test_vectorised_over_arrays():
    t = np.array([1, 7, 16, 64, 500])
    got = tm.window_rows_clipped(112, t, 2, 7, 3, 224)
    want = [tm.window_rows_clipped_enum(112, int(x), 2, 7, 3, 224) for x in t]
    assert got.tolist() == want


def test_classes_precondition_positive_tiles():
    # precondition: tile sizes >= 1 (a zero tile has no meaning; numpy raises on the division)
    with pytest.raises((ZeroDivisionError, FloatingPointError, ValueError)):
        with np.errstate(all="raise"):
            tm.classes(10, [np.array([0])])


def test_rows_used_skips_strided_gaps():
    # 1x1 stride-2 reads every other row
    assert tm.window_rows_used(5, 2, 1, 1, 0, 10) == 5
    assert tm.window_rows_used(112, 2, 1, 7, 3, 224) == 224
