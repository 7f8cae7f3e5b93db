"""edgeops.ort: ai.edgeops ops in ONNX Runtime sessions, checked against numpy in float64."""
import json
import os
import runpy
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import edgeops.ort as eort
from edgeops.errors import EdgeOpsError, EdgeOpsWarning, OpDefinitionError
from edgeops.registry import register_kernel, unregister_kernel

ROOT = Path(__file__).resolve().parents[1]
D, F = 13, 21
X = (3, 5, D)


def swiglu64(x, w1, w2, b1=None, b2=None):
    g = x.astype(np.float64) @ w1 + (0 if b1 is None else b1)
    u = x.astype(np.float64) @ w2 + (0 if b2 is None else b2)
    return g / (1 + np.exp(-g)) * u


def swiglu_model(rng, nodes=None, x_type=TensorProto.FLOAT, inits=None, **node_attrs):
    inits = inits or {k: rng.standard_normal(s).astype(np.float32)
                      for k, s in (("w1", (D, F)), ("w2", (D, F)), ("b2", (F,)))}
    nodes = nodes or [helper.make_node("SwiGLU", ["x", "w1", "w2"], ["y"], domain="ai.edgeops",
                                       name="swiglu", **node_attrs)]
    outs = [o for n in nodes for o in n.output]
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", x_type, list(X))],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, [3, 5, F]) for o in outs],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, ir_version=10, opset_imports=[helper.make_opsetid("", 21),
                                                           helper.make_opsetid("ai.edgeops", 1)])
    return m, inits


def swiglu_node(name, out, inputs=("x", "w1", "w2"), **attrs):
    return helper.make_node("SwiGLU", list(inputs), [out], domain="ai.edgeops", name=name, **attrs)


@pytest.fixture
def test_kernels():
    """Throwaway kernels for SwiGLU on the reference target, below the reference's priority so
    that only a ``kernel`` attribute selects them."""
    seen = {}

    def scaled(inputs, attrs):
        from edgeops.ops import get_op
        return [2 * get_op("SwiGLU", "ai.edgeops").run(inputs, attrs)[0]]

    def tiled(inputs, attrs, tiling=None):
        seen["tiling"] = tiling
        return scaled(inputs, attrs)

    def broken(inputs, attrs):
        raise ValueError("deliberate failure")

    made = []
    for prio, (name, fn) in enumerate([("test.swiglu_scaled", scaled), ("test.swiglu_tiled", tiled),
                                       ("test.swiglu_broken", broken)]):
        register_kernel("ai.edgeops::SwiGLU", "reference", priority=-10 - prio, name=name)(fn)
        made.append(name)
    yield seen
    for name in made:
        unregister_kernel(name)


def test_example_runs_and_matches_numpy():
    g = runpy.run_path(str(ROOT / "docs/examples/custom_op_swiglu.py"))
    want = swiglu64(g["x"], g["w1"].astype(np.float64), g["w2"].astype(np.float64))
    assert g["y"].dtype == np.float32 and g["y"].shape == want.shape
    np.testing.assert_allclose(g["y"], want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_optional_inputs_are_padded_and_prepare_is_idempotent(rng):
    m, w = swiglu_model(rng, [swiglu_node("s", "y", ("x", "w1", "w2", "", "b2"))])
    p = eort.prepare(m)
    node = p.graph.node[0]
    assert len(node.input) == 5 and node.input[3] == eort.PLACEHOLDER
    spec = json.loads(next(a.s for a in node.attribute if a.name == eort.DISPATCH_ATTR))
    assert spec["present"] == [True, True, True, False, True] and spec["target"] == "reference"
    assert eort.prepare(p).SerializeToString() == p.SerializeToString()
    x = rng.standard_normal(X).astype(np.float32)
    (y,) = eort.session(m).run(None, {"x": x})
    want = swiglu64(x, w["w1"], w["w2"], b2=w["b2"])
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_kernel_attribute_is_per_node_not_a_global_switch(rng, test_kernels):
    nodes = [swiglu_node("a", "ya", kernel="test.swiglu_scaled"), swiglu_node("b", "yb")]
    m, w = swiglu_model(rng, nodes)
    plain, _ = swiglu_model(rng, inits=w)
    s1, s2 = eort.session(m), eort.session(plain)
    for _ in range(2):   # interleaved sessions each keep their own choice
        x = rng.standard_normal(X).astype(np.float32)
        ya, yb = s1.run(None, {"x": x})
        (y2,) = s2.run(None, {"x": x})
        want = swiglu64(x, w["w1"], w["w2"])
        np.testing.assert_allclose(ya, 2 * want, rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(yb, want, rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(y2, want, rtol=1e-5, atol=1e-4)


TILING = {"version": 1, "op": "gemm", "decomposition": "gemm", "target": "neon",
          "levels": [{"name": "l2", "tile": {"m": 8, "n": 16, "k": 13}, "order": ["m", "n", "k"],
                      "buffers": {}, "holds": {}}], "split": {}}


def test_tiling_json_reaches_the_kernel(rng, test_kernels):
    from edgeops.tiling import Tiling
    m, _ = swiglu_model(rng, kernel="test.swiglu_tiled", tiling=json.dumps(TILING))
    eort.session(m).run(None, {"x": rng.standard_normal(X).astype(np.float32)})
    got = test_kernels["tiling"]
    assert isinstance(got, Tiling) and got == Tiling.from_dict(TILING)


@pytest.mark.parametrize("attrs,error,match", [
    ({"kernel": "nope"}, eort.OrtIntegrationError, "kernel='nope'.*no kernel named 'nope'; known:"),
    ({"kernel": "reference.Relu"}, eort.OrtIntegrationError, "implements Relu, not ai.edgeops::SwiGLU"),
    ({"kernel": "test.swiglu_tiled", "tiling": "{M: 8"}, eort.OrtIntegrationError, "not valid JSON"),
    ({"kernel": "test.swiglu_tiled", "tiling": '{"M": 8}'}, eort.OrtIntegrationError,
     "attribute tiling: .*unknown field"),
    ({"tiling": '{"M": 8}'}, eort.OrtIntegrationError, "without a kernel attribute"),
    ({"kernel": "test.swiglu_scaled", "tiling": "{}"}, eort.OrtIntegrationError, "takes no tiling"),
    ({"alpha": 1.0}, OpDefinitionError, "unknown attribute"),
])
def test_bad_nodes_are_refused_before_the_session(rng, test_kernels, attrs, error, match):
    m, _ = swiglu_model(rng, **attrs)
    with pytest.raises(error, match=match) as e:
        eort.session(m)
    assert isinstance(e.value, EdgeOpsError) and "'swiglu'" in str(e.value)


def test_unknown_op_and_wrong_arity(rng):
    m, _ = swiglu_model(rng, [helper.make_node("Frobnicate", ["x"], ["y"], domain="ai.edgeops")])
    with pytest.raises(OpDefinitionError, match="no definition of op ai.edgeops::Frobnicate"):
        eort.prepare(m)
    m, _ = swiglu_model(rng, [swiglu_node("s", "y", ("x", "w1"))])
    with pytest.raises(eort.OrtIntegrationError, match="takes 3..5 inputs, got 2"):
        eort.prepare(m)
    with pytest.raises(eort.OrtIntegrationError, match="unknown target 'tpu'"):
        eort.register(None, target="tpu")


def test_kernel_failure_is_raised_after_run_and_the_process_survives(rng, test_kernels, capfd):
    m, _ = swiglu_model(rng, kernel="test.swiglu_broken")
    s = eort.session(m)
    x = rng.standard_normal(X).astype(np.float32)
    with pytest.raises(eort.KernelRuntimeError, match="node 'swiglu'.*ValueError: deliberate") as ei:
        s.run(None, {"x": x})
    # structured: compile's repair moves exactly these nodes, reading no message text
    assert list(ei.value.failures) == ["swiglu"] and "deliberate" in ei.value.failures["swiglu"]
    assert "deliberate failure" in capfd.readouterr().err
    # in a session of one's own the NaN outputs come back and raise_errors reports
    so = eort.register(ort.SessionOptions())
    own = ort.InferenceSession(eort.prepare(m).SerializeToString(), so)
    (y,) = own.run(None, {"x": x})
    assert y.shape == (3, 5, F) and np.isnan(y).all()
    with pytest.raises(eort.KernelRuntimeError):
        eort.raise_errors()
    eort.raise_errors()   # reported once


def test_fp16_input_is_refused_when_the_session_is_made(rng):
    m, _ = swiglu_model(rng, x_type=TensorProto.FLOAT16)
    with pytest.raises(Exception, match="float16"):   # not a process abort
        eort.session(m)


def test_register_sets_threads_and_is_idempotent(rng, monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")     # the user's choice is kept
    so = ort.SessionOptions()
    so.add_session_config_entry("session.intra_op.allow_spinning", "1")   # the caller's choice
    assert eort.register(so, threads=1) is so
    eort.register(so)    # a second registration of the library would fail session creation
    assert so.get_session_config_entry("session.intra_op.allow_spinning") == "1"
    assert so.get_session_config_entry("session.inter_op.allow_spinning") == "0"
    assert so.intra_op_num_threads == 1 and so.execution_mode == ort.ExecutionMode.ORT_SEQUENTIAL
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"
    monkeypatch.delenv("OMP_WAIT_POLICY")
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    gomp = "libgomp" in Path("/proc/self/maps").read_text()   # another test ran OpenMP already?
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        eort.register(ort.SessionOptions())
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE" and "GOMP_SPINCOUNT" not in os.environ
    assert any(issubclass(w.category, EdgeOpsWarning) for w in caught) == gomp
    m, w = swiglu_model(rng)
    s = ort.InferenceSession(eort.prepare(m, session_options=so).SerializeToString(), so)
    x = rng.standard_normal(X).astype(np.float32)
    np.testing.assert_allclose(s.run(None, {"x": x})[0], swiglu64(x, w["w1"], w["w2"]),
                               rtol=1e-5, atol=1e-4)


def test_outputs_come_back_as_arrays_and_foreign_python_ops_still_run(rng):
    """edgeops' ops hand arrays back through onnxruntime-extensions' own invocation (nothing of
    it replaced): exact outputs, and another library's Python op in the same process still runs
    and returns through its stock list path."""
    from onnx import TensorProto, helper
    from onnxruntime_extensions import PyOp, get_library_path, onnx_op
    from edgeops.ort import bridge

    m, w = swiglu_model(rng)
    x = rng.standard_normal(X).astype(np.float32)
    (y,) = eort.session(m).run(None, {"x": x})
    np.testing.assert_allclose(y, swiglu64(x, w["w1"], w["w2"]), rtol=1e-5, atol=1e-4)
    out = bridge._for_bridge(lambda a: a * 2)(x)
    assert type(out.flatten().tolist()) is np.ndarray
    np.testing.assert_array_equal(out.flatten().tolist(), (x * 2).reshape(-1))

    @onnx_op(op_type="EdgeopsTestHalfPlusOne", inputs=[PyOp.dt_float],
             outputs=[PyOp.dt_float])
    def half_plus_one(a):
        return a / 2 + 1

    g = helper.make_graph(
        [helper.make_node("EdgeopsTestHalfPlusOne", ["a"], ["b"], domain="ai.onnx.contrib")],
        "foreign", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [3, 5])],
        [helper.make_tensor_value_info("b", TensorProto.FLOAT, [3, 5])])
    fm = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                             helper.make_opsetid("ai.onnx.contrib", 1)])
    so = ort.SessionOptions()
    so.register_custom_ops_library(get_library_path())
    a = rng.standard_normal((3, 5)).astype(np.float32)
    (b,) = ort.InferenceSession(fm.SerializeToString(), so).run(None, {"a": a})
    np.testing.assert_array_equal(b, a / 2 + 1)
    (y2,) = eort.session(m).run(None, {"x": x})      # and edgeops' ops after it
    np.testing.assert_array_equal(y2, y)


def test_target_without_kernels_falls_back_to_reference(rng, tmp_path):
    m, w = swiglu_model(rng)
    (tmp_path / "pkg").mkdir()
    onnx.save(m, tmp_path / "pkg" / "model.onnx")
    onnx.save(m, tmp_path / "m.onnx")
    x = rng.standard_normal(X).astype(np.float32)
    want = swiglu64(x, w["w1"], w["w2"])
    for src in (tmp_path / "pkg", str(tmp_path / "m.onnx"), m.SerializeToString()):
        (y,) = eort.session(src, target="cuda").run(None, {"x": x})
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-4)


def test_kernels_use_at_most_the_sessions_threads(rng):
    """A session made with threads=N runs its kernels on at most N Numba threads (alone and
    inside a region), restores the caller's count after, and leaves Numba's default without."""
    import numba
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("one core here: a thread limit cannot be told from the default")
    seen = []

    def counting(inputs, attrs):
        from edgeops.ops import get_op
        from edgeops.threads import num_threads
        seen.append(num_threads())
        return get_op("SwiGLU", "ai.edgeops").run(inputs, attrs)
    register_kernel("ai.edgeops::SwiGLU", "reference", priority=-20, name="test.swiglu_threads")(counting)
    try:
        w2 = rng.standard_normal((F, F)).astype(np.float32)   # a second node reads the first's output
        nodes = [swiglu_node("a", "h", kernel="test.swiglu_threads"),
                 swiglu_node("b", "y", ("h", "w3", "w3"), kernel="test.swiglu_threads")]
        m, w = swiglu_model(rng, nodes, inits={**{k: rng.standard_normal((D, F)).astype(np.float32)
                                                   for k in ("w1", "w2")}, "w3": w2})
        del m.graph.output[:]
        m.graph.output.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 5, F]))
        x = rng.standard_normal(X).astype(np.float32)
        so = eort.register(threads=1)     # before Numba's pool starts (it sets OpenMP's policy)
        before = numba.get_num_threads()
        for regions in (True, False):
            seen.clear()
            p = eort.prepare(m, regions=regions, threads=1)
            assert any(n.op_type.startswith("Region_") for n in p.graph.node) == regions
            s = ort.InferenceSession(p.SerializeToString(), so)
            (y,) = s.run(None, {"x": x})
            assert seen == [1, 1] and numba.get_num_threads() == before
        h = swiglu64(x, w["w1"], w["w2"])
        np.testing.assert_allclose(y, swiglu64(h.astype(np.float32), w2, w2), rtol=1e-4,
                                   atol=1e-4 * np.abs(y).max())
        seen.clear()
        eort.session(m).run(None, {"x": x})
        assert seen == [before, before]
    finally:
        unregister_kernel("test.swiglu_threads")
