"""The native bridge (edgeops.ort.native): ai.edgeops nodes as C custom ops that call the same
Python functions as onnxruntime-extensions' bridge, and nodes and regions run from native
programs without Python (tests/test_native_plans.py: every kernel family). Each path is
checked against the other and against numpy float64."""
from __future__ import annotations

import gc
import math

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import edgeops.ort as eort
from edgeops.lower import lower
from edgeops.ops import EDGEOPS_DOMAIN
from edgeops.ort import native


def _model(nodes, inits, inputs, outputs, opset=21):
    g = helper.make_graph(
        nodes, "m", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, s) for o, s in outputs],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset),
                                               helper.make_opsetid(EDGEOPS_DOMAIN, 1)],
                             ir_version=10)


def _norm_chain(rng, kind, n, shape):
    """n x (LayerNormalization + Gelu) over the last axis, or (GroupNormalization + SiLU)."""
    nodes, inits, x = [], {}, "x"
    c = shape[-1] if kind == "ln" else shape[1]
    for i in range(n):
        inits[f"s{i}"] = rng.uniform(0.5, 1.5, c).astype(np.float32)
        inits[f"b{i}"] = rng.uniform(-.5, .5, c).astype(np.float32)
        if kind == "ln":
            nodes += [helper.make_node("LayerNormalization", [x, f"s{i}", f"b{i}"], [f"n{i}"],
                                       name=f"ln{i}", axis=-1, epsilon=1e-5),
                      helper.make_node("Gelu", [f"n{i}"], [f"a{i}"], name=f"gelu{i}")]
        else:
            nodes += [helper.make_node("GroupNormalization", [x, f"s{i}", f"b{i}"], [f"n{i}"],
                                       name=f"gn{i}", num_groups=4, epsilon=1e-5),
                      helper.make_node("Sigmoid", [f"n{i}"], [f"g{i}"], name=f"sig{i}"),
                      helper.make_node("Mul", [f"n{i}", f"g{i}"], [f"a{i}"], name=f"mul{i}")]
        x = f"a{i}"
    return _model(nodes, inits, [("x", list(shape))], [(x, list(shape))]), inits


def _reference(kind, x, inits, n):
    """float64 numpy: the chain as ONNX defines it."""
    from math import erf
    y = x.astype(np.float64)
    verf = np.vectorize(erf)
    for i in range(n):
        s, b = inits[f"s{i}"].astype(np.float64), inits[f"b{i}"].astype(np.float64)
        if kind == "ln":
            m = y.mean(-1, keepdims=True)
            v = ((y - m) ** 2).mean(-1, keepdims=True)
            z = (y - m) / np.sqrt(v + 1e-5) * s + b
            y = 0.5 * z * (1 + verf(z / math.sqrt(2)))
        else:
            g = y.reshape(y.shape[0], 4, -1)
            m = g.mean(-1, keepdims=True)
            v = ((g - m) ** 2).mean(-1, keepdims=True)
            z = ((g - m) / np.sqrt(v + 1e-5)).reshape(y.shape)
            cs = (1, -1) + (1,) * (y.ndim - 2)
            z = z * s.reshape(cs) + b.reshape(cs)
            y = z / (1 + np.exp(-z))
    return y


def _planned_handles():
    return list(native._published)


@pytest.mark.parametrize("kind,shape", [("ln", (3, 37, 130)), ("gn", (2, 12, 9, 23))])
def test_a_chain_region_runs_from_a_native_plan_with_the_bits_of_its_python_path(
        bridge, rng, kind, shape):
    m, inits = _norm_chain(rng, kind, 3, shape)
    lw = lower(m, "rpi5", mode="all")
    before = set(native._kernels)
    s = eort.session(lw.model, "neon")
    assert set(native._kernels) - before, "the session's nodes did not go to the native bridge"
    x = rng.standard_normal(shape).astype(np.float32) * 3 + 1
    outs = [s.run(None, {"x": x})[0] for _ in range(40)]
    assert _planned_handles(), f"no plan was made: {native.plan_failures}"
    first = outs[0]          # through Python: the region's chain pass
    for o in outs[1:]:       # later ones from the plan once the chain's thread choice was made
        np.testing.assert_array_equal(o, first)
    want = _reference(kind, x, inits, 3)
    np.testing.assert_allclose(first, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


def test_the_bridges_agree_on_regions_lone_nodes_and_held_constants(bridge, rng, monkeypatch):
    """Standard ops lowered to edgeops kernels, a two-input node with a held constant, and a
    region of several nodes: the native bridge and onnxruntime-extensions' give the same bits,
    and both match onnx's reference implementation."""
    from onnx.reference import ReferenceEvaluator
    w = rng.standard_normal((17, 9)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"], name="mm"),
             helper.make_node("Relu", ["mm"], ["r"], name="relu"),
             helper.make_node("Sigmoid", ["r"], ["sg"], name="sig"),
             helper.make_node("Add", ["sg", "x2"], ["y"], name="add"),
             helper.make_node("Tanh", ["y"], ["t"], name="tanh")]
    m = _model(nodes, {"w": w}, [("x", [5, 17]), ("x2", [5, 9])], [("t", [5, 9]), ("y", [5, 9])])
    feeds = {"x": rng.standard_normal((5, 17)).astype(np.float32),
             "x2": rng.standard_normal((5, 9)).astype(np.float32)}
    lw = lower(m, "rpi5", mode="all").model
    assert sum(n.domain == EDGEOPS_DOMAIN for n in lw.graph.node) >= 3
    got = {}
    for way in ("1", "0"):
        monkeypatch.setenv(native.ENV, way)
        s = eort.session(lw, "neon")
        got[way] = [s.run(None, feeds) for _ in range(3)]
    for a, b in zip(got["1"], got["0"]):
        for u, v in zip(a, b):
            np.testing.assert_array_equal(u, v)
    want = ReferenceEvaluator(m).run(None, feeds)
    for u, v in zip(got["1"][0], want):
        np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-6)


def test_an_input_of_another_size_goes_through_python(bridge, rng):
    """A plan is made for one input size; a run with another (a dynamic batch) is served by the
    region's Python path, correctly, and the plan stays for the size it was made for."""
    m, inits = _norm_chain(rng, "ln", 2, (4, 7, 64))
    for v in (m.graph.input[0], m.graph.output[0]):
        v.type.tensor_type.shape.dim[0].dim_param = "batch"
    lm = lower(m, "rpi5", mode="all", shapes={"x": [4, 7, 64]}).model
    del lm.graph.value_info[:]          # the batch free again: the lowered nodes take any
    for v in (lm.graph.input[0], lm.graph.output[0]):
        v.type.tensor_type.shape.dim[0].dim_param = "batch"
    s = eort.session(lm, "neon")
    x = rng.standard_normal((4, 7, 64)).astype(np.float32)
    for _ in range(30):
        s.run(None, {"x": x})
    assert _planned_handles()
    for b in (1, 6, 4):
        xb = rng.standard_normal((b, 7, 64)).astype(np.float32)
        (y,) = s.run(None, {"x": xb})
        want = _reference("ln", xb, inits, 2)
        np.testing.assert_allclose(y, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


def test_a_program_once_published_serves_every_call_and_is_never_retimed(bridge, rng):
    """Thread teams are fixed when a program is made: from then on every call of the region
    runs natively (none through Python), with the same bits."""
    m, inits = _norm_chain(rng, "ln", 2, (3, 5, 48))
    s = eort.session(lower(m, "rpi5", mode="all").model, "neon")
    x = rng.standard_normal((3, 5, 48)).astype(np.float32)
    first = [s.run(None, {"x": x})[0] for _ in range(30)]
    assert _planned_handles(), list(native.plan_failures)
    c0 = native.counters()
    outs = [s.run(None, {"x": x})[0] for _ in range(500)]
    c1 = native.counters()
    assert c1["python_calls"] == c0["python_calls"]
    assert c1["native_calls"] - c0["native_calls"] == 500
    for o in outs:
        np.testing.assert_array_equal(o, first[0])


def _swiglu_session(rng, kernel):
    inits = {k: rng.standard_normal(s).astype(np.float32)
             for k, s in (("w1", (13, 21)), ("w2", (13, 21)))}
    node = helper.make_node("SwiGLU", ["x", "w1", "w2"], ["y"], domain=EDGEOPS_DOMAIN,
                            name="swiglu", kernel=kernel)
    m = _model([node], inits, [("x", [3, 5, 13])], [("y", [3, 5, 21])])
    return eort.session(m), inits


def _sometimes_broken(inputs, attrs):
    """SwiGLU, except that an input whose first element is above 100 fails."""
    x, w1, w2 = (np.asarray(a, np.float64) for a in inputs[:3])
    if x.flat[0] > 100:
        raise ValueError("deliberate failure")
    a = x @ w1
    return (a / (1 + np.exp(-a)) * (x @ w2)).astype(np.float32)


@pytest.fixture
def broken_kernel():
    from edgeops.registry import register_kernel, unregister_kernel
    register_kernel("ai.edgeops::SwiGLU", "reference", priority=-50,
                    name="test.native_broken")(_sometimes_broken)
    yield "test.native_broken"
    unregister_kernel("test.native_broken")


def test_a_failing_kernel_fails_run_with_its_node_and_the_session_works_after(
        bridge, rng, broken_kernel, capfd):
    """ONNX Runtime >= 1.16: the status-returning compute stops the run at the failing node
    with edgeops' message (no NaN outputs said on stderr), and the next run of the same session is right."""
    s, inits = _swiglu_session(rng, broken_kernel)
    assert bridge._status_compute()
    x = rng.standard_normal((3, 5, 13)).astype(np.float32)
    bad = x.copy()
    bad.flat[0] = 1000
    for _ in range(2):
        with pytest.raises(eort.KernelRuntimeError,
                           match="node 'swiglu'.*ValueError: deliberate failure.*stopped") as e:
            s.run(None, {"x": bad})
        assert e.value.failures == {"swiglu": "kernel raised ValueError: deliberate failure"}
        assert "deliberate failure" in str(e.value.__cause__)     # ONNX Runtime's own error
        (y,) = s.run(None, {"x": x})
        want = _sometimes_broken((x, inits["w1"], inits["w2"]), {})
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    assert "outputs set to NaN" not in capfd.readouterr().err    # (ONNX Runtime logs its own)
    assert eort.take_errors() == []


def test_without_the_status_compute_a_failure_raises_after_run(bridge, rng, broken_kernel,
                                                                capfd, monkeypatch):
    """Older runtimes' path (version 1 ops, forced here): NaN outputs, said on stderr, raised
    once the run returns."""
    monkeypatch.setenv("EDGEOPS_NATIVE_STATUS", "0")
    try:
        s, _ = _swiglu_session(rng, broken_kernel)
        assert not bridge._status_compute()
        x = rng.standard_normal((3, 5, 13)).astype(np.float32)
        x.flat[0] = 1000
        with pytest.raises(eort.KernelRuntimeError,
                           match="node 'swiglu'.*ValueError: deliberate.*outputs were NaN"):
            s.run(None, {"x": x})
        assert "deliberate failure" in capfd.readouterr().err
    finally:
        monkeypatch.delenv("EDGEOPS_NATIVE_STATUS")
        del s
        _swiglu_session(rng, broken_kernel)      # registers the ops with the status compute again
    assert bridge._status_compute()


def test_destroyed_kernels_are_forgotten(bridge, rng):
    m, _ = _norm_chain(rng, "ln", 2, (2, 3, 16))
    lw = lower(m, "rpi5", mode="all").model
    x = {"x": rng.standard_normal((2, 3, 16)).astype(np.float32)}
    s = eort.session(lw, "neon")
    s.run(None, x)
    del s
    gc.collect()
    for _ in range(5):
        s = eort.session(lw, "neon")
        s.run(None, x)
        del s
        gc.collect()
    s = eort.session(lw, "neon")      # making a kernel drains the destroyed ones
    live = len(native._kernels)
    assert live <= 3, f"{live} kernels kept for one live session"


def test_without_a_compiler_the_reason_is_given(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEOPS_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with pytest.raises(native._Unavailable, match="no C compiler .*no-such-cc"):
        native._build()


def test_a_failed_self_test_is_remembered_and_said(tmp_path, monkeypatch):
    lib = tmp_path / "edgeops_native-x.so"
    lib.write_bytes(b"")
    lib.with_suffix(".checked").write_text("its self-test failed (exit -11): ")
    with pytest.raises(native._Unavailable, match="self-test failed"):
        native._check(lib)


def test_a_library_that_does_not_load_is_refused(tmp_path):
    lib = tmp_path / "edgeops_native-y.so"
    lib.write_bytes(b"not an ELF file")
    with pytest.raises(native._Unavailable, match="cannot be loaded"):
        native._loadable(lib)


_CONCURRENT = r'''
import sys, threading
import numpy as np
sys.path.insert(0, sys.argv[1])
from test_ort_native import _model, _norm_chain, helper
import edgeops.ort as eort
from edgeops.lower import lower

rng = np.random.default_rng(7)
m, _ = _norm_chain(rng, "ln", 3, (4, 33, 96))
g = m.graph     # then ONNX Runtime's Neg, so the chain is a region of its own (planned),
#                 and a MatMul with a held weight and an Add of a second input after it
w = rng.standard_normal((96, 40)).astype(np.float32)
from onnx import numpy_helper, TensorProto
g.initializer.append(numpy_helper.from_array(w, "w"))
last = g.output[0].name
g.node.extend([helper.make_node("Neg", [last], ["neg"], name="neg"),
               helper.make_node("MatMul", ["neg", "w"], ["mm"], name="mm"),
               helper.make_node("Add", ["mm", "x2"], ["y"], name="add")])
g.input.append(helper.make_tensor_value_info("x2", TensorProto.FLOAT, [4, 33, 40]))
del g.output[:]
g.output.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 33, 40]))
s = eort.session(lower(m, "rpi5", mode="all").model, "neon")
feeds = [{"x": rng.standard_normal((4, 33, 96)).astype(np.float32) * (1 + i),
          "x2": rng.standard_normal((4, 33, 40)).astype(np.float32)} for i in range(8)]
for _ in range(30):        # past the chains' thread choice, so plans are in use
    want = [s.run(None, f)[0] for f in feeds]
bad, runs = [], [0]
def worker(i):
    for _ in range(40):
        y = s.run(None, feeds[i])[0]
        runs[0] += 1
        if not np.allclose(y, want[i], rtol=1e-6, atol=1e-6 * np.abs(want[i]).max()):
            bad.append((i, float(np.abs(y - want[i]).max())))
ts = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
[t.start() for t in ts]
[t.join() for t in ts]
from edgeops.ort import native
print(runs[0], len(bad), bad[:3], native.status()["used"], bool(native._published))
'''


def test_one_session_run_from_8_threads_at_once_is_correct_every_time(bridge, tmp_path):
    """ONNX Runtime lets threads share a session: 8 of them, each with its own inputs, through
    a planned norm-chain region and lone nodes on the native bridge, get the outputs a serial
    run gives, every time (a fresh process: a crash must not take the test runner with it)."""
    import os
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    r = subprocess.run([sys.executable, "-c", _CONCURRENT, here], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    line = r.stdout.strip().splitlines()[-1]
    # 320 runs, none wrong; the native bridge in use and the chain planned
    assert line == "320 0 [] True True", line
