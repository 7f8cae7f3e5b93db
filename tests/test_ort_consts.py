"""Held constants and per-node kernel state in edgeops.ort (edgeops/ort/consts.py): outputs
against ONNX Runtime on the unfused model and numpy in float64; weights told apart by digest;
constants shared with standard nodes; state per node and kept across runs."""
import json

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import edgeops.ort as eort
from edgeops.ort import consts, dispatch
from edgeops.registry import register_kernel, unregister_kernel

D, F = 11, 19
X = (2, 3, D)


def swiglu64(x, w1, w2):
    g, u = x.astype(np.float64) @ w1, x.astype(np.float64) @ w2
    return g / (1 + np.exp(-g)) * u


def _model(nodes, inits, outputs, inputs=(("x", X),), extra_inputs=()):
    g = helper.make_graph(
        nodes, "t", [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s))
                     for n, s in [*inputs, *extra_inputs]],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, ir_version=10, opset_imports=[helper.make_opsetid("", 21),
                                                              helper.make_opsetid("ai.edgeops", 1)])


def _weights(rng):
    return {k: rng.standard_normal((D, F)).astype(np.float32) for k in ("w1", "w2")}


def _swiglu(name="s", out="y", ins=("x", "w1", "w2"), **attrs):
    return helper.make_node("SwiGLU", list(ins), [out], domain="ai.edgeops", name=name, **attrs)


def _specs(m):
    """{node: dispatch spec} of a prepared model, the inner nodes of regions included."""
    out = {}
    for n in m.graph.node:
        if n.domain != "ai.edgeops":
            continue
        d = json.loads(next(a.s for a in n.attribute if a.name == eort.DISPATCH_ATTR))
        for inner in d["nodes"] if "region" in d else [{"name": n.name, "spec": None}]:
            out[inner["name"]] = json.loads(inner["spec"]) if inner["spec"] else d
    return out


def _close(got, want, rtol=1e-5):
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * np.abs(want).max())


def _ort(model, feeds):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"]).run(None, feeds)


def test_weights_leave_the_node_and_come_back_unchanged(rng):
    w = _weights(rng)
    m = _model([_swiglu()], w, ["y"])
    p = eort.prepare(m, "neon")
    node = p.graph.node[0]
    assert list(node.input) == ["x"] + [eort.PLACEHOLDER] * 4   # 2 held, 2 absent biases
    assert not {"w1", "w2"} & {t.name for t in p.graph.initializer}   # no second copy in ORT
    held = _specs(p)["s"]["consts"]
    assert set(held) == {"1", "2"}
    for pos, name in (("1", "w1"), ("2", "w2")):
        a = consts.get(held[pos])
        assert not a.flags.writeable and np.array_equal(a, w[name])
    x = rng.standard_normal(X).astype(np.float32)
    want = swiglu64(x, w["w1"], w["w2"])
    for target in ("reference", "neon"):
        s = eort.session(m, target)
        for _ in range(2):
            _close(s.run(None, {"x": x})[0], want)
    # the unprepared model is untouched, and keeping the copies still works
    assert list(m.graph.node[0].input) == ["x", "w1", "w2"]
    keep = eort.prepare(m, hold_constants=False)
    assert list(keep.graph.node[0].input[:3]) == ["x", "w1", "w2"] and "consts" not in _specs(keep)["s"]
    own = ort.InferenceSession(keep.SerializeToString(), eort.register(ort.SessionOptions()))
    _close(own.run(None, {"x": x})[0], want)
    eort.raise_errors()


@pytest.mark.parametrize("target", ["reference", "neon"])
def test_alike_nodes_with_different_weights_stay_apart(rng, target):
    wa, wb = _weights(rng), _weights(rng)
    ma, mb = _model([_swiglu()], wa, ["y"]), _model([_swiglu()], wb, ["y"])
    sa, sb = eort.session(ma, target), eort.session(mb, target)
    assert _specs(eort.prepare(ma, target))["s"]["consts"] != _specs(eort.prepare(mb, target))["s"]["consts"]
    x = rng.standard_normal(X).astype(np.float32)
    for _ in range(2):   # interleaved: a kernel cache keyed by node would mix them up
        _close(sa.run(None, {"x": x})[0], swiglu64(x, wa["w1"], wa["w2"]))
        _close(sb.run(None, {"x": x})[0], swiglu64(x, wb["w1"], wb["w2"]))
    # equal bytes but another shape: a different constant
    flat = {"w1": wa["w1"].reshape(F, D), "w2": wa["w2"].reshape(F, D)}
    mc = _model([_swiglu()], flat, ["y"], inputs=(("x", (2, F)),))
    assert _specs(eort.prepare(mc))["s"]["consts"] != _specs(eort.prepare(ma))["s"]["consts"]
    xc = rng.standard_normal((2, F)).astype(np.float32)
    _close(eort.session(mc, target).run(None, {"x": xc})[0], swiglu64(xc, flat["w1"], flat["w2"]))


def test_constant_shared_with_standard_nodes_and_constant_nodes(rng):
    w = _weights(rng)
    c = helper.make_node("Constant", [], ["w2c"], value=numpy_helper.from_array(w["w2"]))
    nodes = [c, _swiglu(ins=("x", "w1", "w2c")), helper.make_node("MatMul", ["x", "w1"], ["g"]),
             helper.make_node("Add", ["g", "w2c_row"], ["h"])]
    inits = {"w1": w["w1"], "w2c_row": w["w2"][0]}
    m = _model(nodes, inits, ["y", "h"])
    p = eort.prepare(m)
    assert "w1" in {t.name for t in p.graph.initializer}          # MatMul still reads it
    assert not any(n.op_type == "Constant" for n in p.graph.node)  # only SwiGLU read it
    assert set(_specs(p)["s"]["consts"]) == {"1", "2"}
    x = rng.standard_normal(X).astype(np.float32)
    y, h = eort.session(m).run(None, {"x": x})
    _close(y, swiglu64(x, w["w1"], w["w2"]))
    _close(h, x.astype(np.float64) @ w["w1"] + w["w2"][0])


def test_overridable_initializer_is_not_held(rng):
    w = _weights(rng)
    m = _model([_swiglu()], w, ["y"], extra_inputs=(("w2", (D, F)),))
    p = eort.prepare(m)
    assert set(_specs(p)["s"]["consts"]) == {"1"} and p.graph.node[0].input[2] == "w2"
    x = rng.standard_normal(X).astype(np.float32)
    other = rng.standard_normal((D, F)).astype(np.float32)
    _close(eort.session(m).run(None, {"x": x, "w2": other})[0], swiglu64(x, w["w1"], other))


def test_prepared_model_needs_the_process_that_prepared_it(rng, monkeypatch):
    p = eort.prepare(_model([_swiglu()], _weights(rng), ["y"]))
    monkeypatch.setattr(consts, "_store", {})       # as in another process
    monkeypatch.setattr(dispatch, "_cache", {})
    with pytest.raises(eort.OrtIntegrationError, match="not in this process.*prepare the unprepared"):
        eort.prepare(p)


def test_held_constants_go_with_the_last_session_that_uses_them(rng):
    """session() gives its constants back when the session is collected; weights two sessions
    share stay until both are gone, and the survivor keeps running on them."""
    import gc
    w = _weights(rng)
    w["w1"][0, 0] = rng.standard_normal() + 1e3     # digests no other test can share
    m = _model([_swiglu(), _swiglu("t", "z", ("y", "w3", "w3"))],
               {**w, "w3": rng.standard_normal((F, F)).astype(np.float32)}, ["z"])
    gc.collect()
    base = consts.held_bytes()
    a = eort.session(m)
    held = consts.held_bytes() - base
    assert held == 2 * w["w1"].nbytes + F * F * 4     # w3 read twice by one node: held once
    b = eort.session(m)
    assert consts.held_bytes() - base == held          # same bytes: shared, not copied
    x = rng.standard_normal(X).astype(np.float32)
    (want,) = a.run(None, {"x": x})
    del a
    gc.collect()
    assert consts.held_bytes() - base == held          # b still uses them
    _close(b.run(None, {"x": x})[0], want)
    specs = [k for k in dispatch._cache if consts.digest(w["w1"]) in k]
    assert specs
    del b
    gc.collect()
    assert consts.held_bytes() == base
    assert not any(k in dispatch._cache for k in specs)   # their dispatch entries went too
    c = eort.session(m)                                # and a new session holds them again
    _close(c.run(None, {"x": x})[0], want)


@pytest.fixture
def stateful():
    """A SwiGLU kernel on the reference target that records its state and inputs."""
    seen = []

    def kernel(inputs, attrs, state=None):
        state["calls"] = state.get("calls", 0) + 1
        seen.append((state, inputs[1], inputs[2]))
        from edgeops.ops import get_op
        return get_op("SwiGLU", "ai.edgeops").run(inputs, attrs)

    register_kernel("ai.edgeops::SwiGLU", "reference", priority=-20, name="test.swiglu_state")(kernel)
    yield seen
    unregister_kernel("test.swiglu_state")


def test_state_is_per_node_and_kept_across_runs(rng, stateful):
    w = _weights(rng)
    nodes = [_swiglu("a", "ya", kernel="test.swiglu_state"),
             _swiglu("b", "yb", kernel="test.swiglu_state")]
    s = eort.session(_model(nodes, w, ["ya", "yb"]))
    x = rng.standard_normal(X).astype(np.float32)
    for _ in range(3):
        ya, yb = s.run(None, {"x": x})
        _close(ya, swiglu64(x, w["w1"], w["w2"]))
        np.testing.assert_array_equal(ya, yb)
    states = {id(st): st for st, _, _ in stateful}
    assert sorted(st["calls"] for st in states.values()) == [3, 3]      # two nodes, three runs
    # the kernel gets the same read-only weight objects on every call: no copy per call
    assert len({(id(a), id(b)) for _, a, b in stateful}) == 1
    assert not stateful[0][1].flags.writeable


def _qconv_model(rng):
    """QDQ Conv-Relu-Conv made by edgeops' quantizer, fused to QConvBnAct by fuse_qdq."""
    from edgeops.passes import run_passes
    from edgeops.quantize import quantize_model
    from edgeops.quantize.qdq import prepare

    def w(*shape):
        return (rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)
    N = helper.make_node
    nodes = [N("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]), N("Relu", ["c1"], ["r1"]),
             N("Conv", ["r1", "w2"], ["y"], strides=[2, 2])]
    m = _model(nodes, {"w1": w(6, 3, 3, 3), "b1": w(6), "w2": w(5, 6, 3, 3)}, ["y"],
               inputs=(("x", (1, 3, 11, 9)),))
    calib = [{"x": rng.standard_normal((1, 3, 11, 9)).astype(np.float32)} for _ in range(4)]
    q, _ = quantize_model(prepare(m), calib)
    fused, rep = run_passes(q, ["fuse_qdq"])
    assert [f.result for f in rep.fusions].count("ai.edgeops::QConvBnAct") == 2
    return q, fused


def test_qconv_state_skips_the_weight_check_and_matches_ort(rng):
    q, fused = _qconv_model(rng)
    s = eort.session(fused, "neon")
    entries = [eort.dispatch.resolve(json.dumps(sp, sort_keys=True))
               for sp in _specs(eort.prepare(fused, "neon")).values()]
    assert all(len(e.held) >= 2 for e in entries)      # weights and scales (and bias) held
    prepared = None
    for seed in range(3):
        x = {"x": np.random.default_rng(seed).standard_normal((1, 3, 11, 9)).astype(np.float32)}
        want, got = _ort(q, x)[0], s.run(None, x)[0]
        _close(got, want, rtol=1e-5)
        now = [e.state["neon.int8"].weights for e in entries]
        assert all(p[5] is not None for p in now)       # prepared from the held objects
        assert prepared is None or all(a is b for a, b in zip(now, prepared))   # not remade
        prepared = now


def test_qconv_with_state_still_checks_writable_weights(rng):
    """A weight that is not a held constant (writable) is compared on every call, state or not."""
    from edgeops.ops import get_op
    from edgeops.targets.neon.qconv import qconv_bn_act
    op = get_op("QConvBnAct", "ai.edgeops")
    attrs = op.parse_attrs({"x_scale": 0.05, "x_zero_point": 0, "pads": [1, 1, 1, 1]}, "t")
    x = rng.standard_normal((1, 3, 7, 6)).astype(np.float32)
    wt = rng.integers(-100, 100, (4, 3, 3, 3)).astype(np.float32)
    ws = np.full(4, 0.01, np.float32)
    state = {}
    for _ in range(2):
        got = qconv_bn_act(x, wt, ws, None, attrs, None, state=state)
        np.testing.assert_array_equal(got, op.reference(x, wt, ws, None, **attrs))
        wt[0] = -wt[0]     # changed in place: must be seen
    assert state["neon.int8"].weights[5] is None


def test_lowered_sample_model_matches_ort_on_the_unfused_model():
    """Conv, ConvBnAct, SwiGLU, norms lowered onto neon kernels, weights held."""
    from edgeops.lower import lower
    from edgeops.package import random_inputs
    from edgeops.sample import build_sample_model
    lw = lower(build_sample_model(), "rpi5", mode="all")
    specs = _specs(eort.prepare(lw.model))
    ops = {sp["op"] for sp in specs.values() if sp.get("consts")}
    assert {"ConvBnAct", "SwiGLU"} <= ops, ops
    feeds = random_inputs(lw.source, seed=5)
    want = _ort(lw.source, feeds)
    for _ in range(2):
        for g, w in zip(eort.session(lw.model).run(None, feeds), want):
            _close(g, w, rtol=1e-4)
