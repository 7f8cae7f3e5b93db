"""Threads of native programs: a step cut into chunks for ONNX Runtime's intra-op pool gives the
bits of the step run whole; a session at 2 threads decides each cut-able step's pool while it is
made and keeps that in this machine's record, which later sessions read instead of timing;
Numba's threading layer is pinned to one that takes concurrent launches."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import edgeops.ort as eort
from edgeops import plans, threads
from edgeops.ort import native
from edgeops.targets.neon import native as neon_native

from test_native_plans import _model, _node


@pytest.fixture
def record(tmp_path, monkeypatch):
    """This machine's record of thread decisions, in a fresh cache."""
    monkeypatch.setenv("EDGEOPS_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(threads.DECISIONS_ENV, raising=False)
    monkeypatch.setattr(threads, "_decisions", None)
    yield tmp_path
    threads._decisions = None


@pytest.mark.parametrize("n", [16384, 20011, 65536 + 5, 3 * 65536 + 77])
@pytest.mark.parametrize("chunks", [2, 3, 8])
def test_a_cut_step_gives_the_bits_of_the_whole(rng, n, chunks):
    x = rng.standard_normal(n).astype(np.float32) * 4
    y = rng.standard_normal(n).astype(np.float32)
    c = np.float32([0.37])
    steps = [neon_native.act_step(x, ["sigmoid"], chunks),
             neon_native.binary_step(x, y, "Add", {}, chunks, steps=["relu"]),
             neon_native.binary_step(x, c, "Mul", {1: True}, chunks)]
    feeds = [(x,), (x, y), (x,)]
    exact = [1 / (1 + np.exp(-x.astype(np.float64))), np.maximum(x.astype(np.float64) + y, 0),
             x.astype(np.float64) * np.float64(c[0])]
    for st, f, want in zip(steps, feeds, exact):
        assert st is not None and not isinstance(st, str), st
        assert st.split is not None and st.split.chunks == chunks
        starts = [s for s, _ in st.split.chunk_values()]
        assert all(s % st.split.grain == 0 for s in starts) and len(starts) <= chunks
        whole, cut = st.run(*f)[0], st.run(*f, split=True)[0]
        np.testing.assert_array_equal(cut, whole)
        assert np.abs(cut - want).max() <= 3e-7 * max(1.0, float(np.abs(want).max()))


@pytest.mark.parametrize("shape,axis", [((3, 7, 129, 131), -1), ((2, 3, 200, 96), 2),
                                        ((1, 12, 128, 128), -1)])
@pytest.mark.parametrize("chunks", [2, 3])
def test_a_cut_softmax_gives_the_bits_of_the_whole(rng, shape, axis, chunks):
    """Chunks of whole rows (in the kernel's blocks of rows on the last axis) or of whole outer
    indices (another axis)."""
    x = rng.standard_normal(shape).astype(np.float32) * 3
    st = neon_native.softmax_step(x, axis, chunks)
    assert st is not None and not isinstance(st, str), st
    assert st.split is not None and st.split.chunks == chunks
    whole, cut = st.run(x)[0], st.run(x, split=True)[0]
    np.testing.assert_array_equal(cut, whole)
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=axis, keepdims=True))
    assert np.abs(cut - e / e.sum(axis=axis, keepdims=True)).max() <= 1e-6


def test_a_broadcast_operand_is_never_cut(rng):
    """Per-channel B: a chunk starting mid-period would read B out of phase."""
    x = rng.standard_normal((1, 64, 32, 32)).astype(np.float32)
    b = rng.standard_normal((1, 64, 1, 1)).astype(np.float32)
    st = neon_native.binary_step(x, b, "Add", {1: True}, 2)
    assert st.split is None
    with pytest.raises(ValueError, match="cannot be cut"):
        st.run(x, split=True)


def _steps_modes(sess_handles=None):
    got = []
    for h, v in list(native._published.items()):
        if sess_handles is not None and h not in sess_handles:
            continue
        for i, st in enumerate(v[4]):
            if st.split is not None:
                got.append((st.entry, st.split.mode))
    return got


def _session(model, way, monkeypatch, **kw):
    if way is None:
        monkeypatch.delenv(threads.DECISIONS_ENV, raising=False)
    else:
        monkeypatch.setenv(threads.DECISIONS_ENV, way)
    before = set(native._published)
    s = eort.session(model, "neon", threads=2, prepare_programs=True, **kw)
    return s, set(native._published) - before


def test_steps_on_onnx_runtimes_pool_give_the_bits_of_numbas(bridge, rng, monkeypatch):
    x = rng.standard_normal((2, 40, 30, 29)).astype(np.float32)
    x2 = rng.standard_normal(x.shape).astype(np.float32)
    m = _model([_node("Add", ["x", "x2"], "s"), _node("Relu", ["s"], "r"),
                _node("Sigmoid", ["x"], "g"), _node("Mul", ["r", "g"])], {"x": x, "x2": x2}, {})
    feeds = {"x": x, "x2": x2}
    out = {}
    for way in ("numba", "ort"):
        s, mine = _session(m, way, monkeypatch)
        assert mine, list(native.plan_failures)[-3:]
        modes = {mo for _e, mo in _steps_modes(mine)}
        assert modes == {plans.ORT_POOL if way == "ort" else plans.PREPARED}, modes
        c0 = native.counters()
        out[way] = [s.run(None, feeds)[0] for _ in range(3)]
        c1 = native.counters()
        assert c1["native_calls"] - c0["native_calls"] >= 3
        assert c1["entry_failures"] == c0["entry_failures"]
    for a, b in zip(out["numba"], out["ort"]):
        np.testing.assert_array_equal(a, b)
    x64 = x.astype(np.float64)
    exact = np.maximum(x64 + x2, 0) / (1 + np.exp(-x64))
    assert np.abs(out["ort"][0] - exact).max() <= 1e-6


def test_a_session_decides_while_made_and_later_ones_read_the_record(bridge, rng, monkeypatch,
                                                                     record):
    if not native._lib.edgeops_native_parallel_for():
        pytest.skip("this ONNX Runtime has no KernelContext_ParallelFor (before 1.16)")
    x = rng.standard_normal((1, 64, 56, 56)).astype(np.float32)
    m = _model([_node("Sigmoid", ["x"])], {"x": x}, {})
    s, mine = _session(m, None, monkeypatch)
    first = _steps_modes(mine)
    assert first and all(mo == plans.TRIAL for _e, mo in first), first   # as published
    # by the end of the session's making every step decided, and the decision was kept
    kept = json.loads(threads._decisions_path().read_text())
    ort_keys = [k for k in kept if k.startswith("neon.act:ort:")]
    assert ort_keys and kept[ort_keys[0]] in ("ort", "numba"), kept
    assert not native._trials.keys() & mine          # nothing left timing while serving
    np.testing.assert_array_equal(s.run(None, {"x": x})[0], s.run(None, {"x": x})[0])
    # a later session reads the record: its step is published decided, nothing is timed
    s2, mine2 = _session(m, None, monkeypatch)
    second = _steps_modes(mine2)
    want = plans.ORT_POOL if kept[ort_keys[0]] == "ort" else plans.PREPARED
    assert second and all(mo == want for _e, mo in second), (second, kept)


def test_the_record_is_kept_per_machine_and_can_be_turned_off(record, monkeypatch):
    threads.remember("fam:ort:17", 2, "ort")
    assert threads.decision("fam:ort:17", 2) == "ort"
    assert threads.decision("fam:ort:17", 4) is None
    assert threads._decisions_path().parent == record / "threads"
    monkeypatch.setenv(threads.DECISIONS_ENV, "off")
    assert threads.decision("fam:ort:17", 2) is None
    monkeypatch.setenv(threads.DECISIONS_ENV, "ort")
    assert threads.forced_pool() is True


def test_the_threading_layer_is_pinned_to_one_safe_under_concurrent_launches():
    code = ("from edgeops.plans import prepare_numba; prepare_numba(); "
            "import numba; print(numba.threading_layer())")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_THREADING_LAYER"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() in ("omp", "tbb"), r.stdout
