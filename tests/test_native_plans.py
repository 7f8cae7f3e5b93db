"""Native programs (edgeops.plans, edgeops.ort.native): every kernel family with a native entry
runs in a package-style session without Python after its first call, with the bits of its
Python path (EDGEOPS_NATIVE_PLANS=0: the same compiled kernels, called from Python) and within
float32 rounding of numpy float64; inputs of other shapes go through Python; the library's
counters stay flat over 100,000 calls; a session's programs go with it."""
from __future__ import annotations

import gc
import json
import math

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import edgeops.ort as eort
from edgeops.ops import EDGEOPS_DOMAIN
from edgeops.ort import native


def _model(nodes, inputs, inits, outputs=("y",)):
    g = helper.make_graph(
        nodes, "m", [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape))
                     for k, v in inputs.items()],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18),
                                               helper.make_opsetid(EDGEOPS_DOMAIN, 1)])


def _node(op, ins, out="y", **attrs):
    return helper.make_node(op, ins, [out], domain=EDGEOPS_DOMAIN, name=f"{op}_{out}", **attrs)


def _both(monkeypatch, model, feeds, runs=4):
    """(outputs through Python, outputs of the native session, its calls run natively)."""
    monkeypatch.setenv("EDGEOPS_NATIVE_PLANS", "0")
    py = eort.session(model, "neon")
    monkeypatch.setenv("EDGEOPS_NATIVE_PLANS", "1")
    nat = eort.session(model, "neon")
    want = [py.run(None, feeds) for _ in range(runs)]
    c0 = native.counters()
    got = [nat.run(None, feeds) for _ in range(runs)]
    c1 = native.counters()
    return want[-1], got, c1["native_calls"] - c0["native_calls"]


def _erf(z):
    return np.vectorize(math.erf)(z)


# family -> (nodes, inputs as shapes, initializers as shapes, float64 reference)
def _cases(rng):
    f = lambda *s: rng.standard_normal(s).astype(np.float32)          # noqa: E731
    c = {}
    x = f(3, 7, 11, 13)
    c["add same shape"] = ([_node("Add", ["x", "x2"])], {"x": x, "x2": f(3, 7, 11, 13)}, {},
                           lambda i, w: i["x"] + i["x2"])
    c["add held per-channel"] = ([_node("Add", ["x", "b"])], {"x": x}, {"b": f(7, 1, 1)},
                                 lambda i, w: i["x"] + w["b"])
    c["sub held trailing"] = ([_node("Sub", ["x", "b"])], {"x": x}, {"b": f(13)},
                              lambda i, w: i["x"] - w["b"])
    c["mul runtime per-channel"] = ([_node("Mul", ["x", "s"])], {"x": x, "s": f(7, 1, 1)}, {},
                                    lambda i, w: i["x"] * i["s"])
    c["div held materialised"] = ([_node("Div", ["x", "d"])], {"x": x},
                                  {"d": (np.abs(f(3, 1, 11, 1)) + .5).astype(np.float32)},
                                  lambda i, w: i["x"] / w["d"])
    big = f(2, 40, 30, 29)          # above SMALL_ELEMENTS: the parallel kernels' path
    c["relu large"] = ([_node("Relu", ["x"])], {"x": big}, {}, lambda i, w: np.maximum(i["x"], 0))
    c["sigmoid"] = ([_node("Sigmoid", ["x"])], {"x": x}, {},
                    lambda i, w: 1 / (1 + np.exp(-i["x"].astype(np.float64))))
    c["leakyrelu"] = ([_node("LeakyRelu", ["x"], alpha=0.07)], {"x": x}, {},
                      lambda i, w: np.where(i["x"] > 0, i["x"], 0.07 * i["x"]))
    c["tanh"] = ([_node("Tanh", ["x"])], {"x": x}, {}, lambda i, w: np.tanh(i["x"]))
    c["identity"] = ([_node("Identity", ["x"])], {"x": x}, {}, lambda i, w: i["x"])

    def softmax(v, ax):
        v = v.astype(np.float64)
        e = np.exp(v - v.max(ax, keepdims=True))
        return e / e.sum(ax, keepdims=True)
    c["softmax last"] = ([_node("Softmax", ["x"], axis=-1)], {"x": x}, {},
                         lambda i, w: softmax(i["x"], -1))
    c["softmax middle"] = ([_node("Softmax", ["x"], axis=1)], {"x": x}, {},
                           lambda i, w: softmax(i["x"], 1))
    # above SMALL_ELEMENTS (the parallel kernel, which the entry inlines), rows long enough
    # that a vectorised sum's order shows in the bits
    c["softmax large"] = ([_node("Softmax", ["x"], axis=-1)], {"x": 3 * f(3, 7, 1601)}, {},
                          lambda i, w: softmax(i["x"], -1))
    xl = f(2, 19, 97)

    def ln(v, g, b, eps=1e-5):
        v = v.astype(np.float64)
        m = v.mean(-1, keepdims=True)
        return (v - m) / np.sqrt(((v - m) ** 2).mean(-1, keepdims=True) + eps) * g + b
    c["layernorm"] = ([_node("LayerNormalization", ["x", "g", "b"], axis=-1, epsilon=1e-5)],
                      {"x": xl}, {"g": f(97), "b": f(97)},
                      lambda i, w: ln(i["x"], w["g"], w["b"]))

    def gn(v, g, b, groups=4, eps=1e-5):
        v = v.astype(np.float64)
        r = v.reshape(v.shape[0], groups, -1)
        m = r.mean(-1, keepdims=True)
        z = ((r - m) / np.sqrt(((r - m) ** 2).mean(-1, keepdims=True) + eps)).reshape(v.shape)
        return z * g.reshape(1, -1, 1, 1) + b.reshape(1, -1, 1, 1)
    c["groupnorm"] = ([_node("GroupNormalization", ["x", "g", "b"], num_groups=4, epsilon=1e-5)],
                      {"x": f(2, 12, 9, 7)}, {"g": f(12), "b": f(12)},
                      lambda i, w: gn(i["x"], w["g"], w["b"]))
    c["matmul held"] = ([_node("MatMul", ["x", "w"])], {"x": f(2, 37, 96)}, {"w": f(96, 70)},
                        lambda i, w: i["x"].astype(np.float64) @ w["w"])
    c["matmul large held"] = ([_node("MatMul", ["x", "w"])], {"x": f(131, 300)},
                              {"w": f(300, 190)}, lambda i, w: i["x"].astype(np.float64) @ w["w"])
    c["matmul runtime batched"] = ([_node("MatMul", ["q", "k"])],
                                   {"q": f(2, 3, 33, 16), "k": f(2, 3, 16, 29)}, {},
                                   lambda i, w: i["q"].astype(np.float64) @ i["k"])
    c["gemm transB bias"] = ([_node("Gemm", ["a", "w", "c"], transB=1, alpha=0.5, beta=2.0)],
                             {"a": f(50, 96)}, {"w": f(70, 96), "c": f(70)},
                             lambda i, w: 0.5 * i["a"].astype(np.float64) @ w["w"].T
                             + 2 * w["c"])
    c["gemm full C"] = ([_node("Gemm", ["a", "w", "c"], transA=1)], {"a": f(40, 23)},
                        {"w": f(40, 31), "c": f(23, 31)},
                        lambda i, w: i["a"].astype(np.float64).T @ w["w"] + w["c"])
    def conv(v, wt, b, stride=1, pad=0, group=1):
        v = np.pad(v.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
        n, c, h, ww = v.shape
        k, cg, r, t = wt.shape
        oh, ow = (h - r) // stride + 1, (ww - t) // stride + 1
        y = np.zeros((n, k, oh, ow))
        kg = k // group
        for g in range(group):
            xs = v[:, g * cg:(g + 1) * cg]
            for i in range(r):
                for j in range(t):
                    patch = xs[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
                    y[:, g * kg:(g + 1) * kg] += np.einsum(
                        "nchw,kc->nkhw", patch, wt[g * kg:(g + 1) * kg, :, i, j])
        return y + b.reshape(1, -1, 1, 1)
    xc = f(1, 8, 13, 11)
    for kern, attrs, wshape in (("im2col", {"pads": [1, 1, 1, 1], "strides": [2, 2], "group": 2},
                                 (6, 4, 3, 3)),
                                ("im2col", {}, (10, 8, 1, 1)),
                                ("winograd", {"pads": [1, 1, 1, 1]}, (6, 8, 3, 3)),
                                ("depthwise", {"pads": [1, 1, 1, 1], "group": 8, "strides": [2, 2]},
                                 (8, 1, 3, 3)),
                                ("depthwise", {"pads": [2, 2, 2, 2], "group": 8}, (16, 1, 5, 5))):
        name = f"conv {kern} {wshape} {attrs.get('strides', [1])[0]}"
        c[name] = ([_node("Conv", ["x", "w", "b"], kernel=f"neon.conv_{kern}", **attrs)],
                   {"x": xc}, {"w": f(*wshape), "b": f(wshape[0])},
                   lambda i, w, a=attrs: conv(i["x"], w["w"], w["b"], a.get("strides", [1])[0],
                                              a.get("pads", [0])[0], a.get("group", 1)))
    # one output pixel: the entry's matrix-vector branch (conv._gemv)
    c["conv im2col one pixel"] = (
        [_node("Conv", ["x", "w", "b"], kernel="neon.conv_im2col", pads=[1, 1, 1, 1])],
        {"x": f(2, 21, 1, 1)}, {"w": f(19, 21, 3, 3), "b": f(19)},
        lambda i, w: conv(i["x"], w["w"], w["b"], 1, 1, 1))
    xp = f(2, 5, 17, 14)

    def pool(v, k, s, p, kind, include=False):
        v = v.astype(np.float64)
        fill = -np.inf if kind == "max" else 0.0
        vp = np.pad(v, ((0, 0), (0, 0), (p, p), (p, p)), constant_values=fill)
        ones = np.pad(np.ones_like(v), ((0, 0), (0, 0), (p, p), (p, p)),
                      constant_values=1.0 if include else 0.0)
        oh, ow = (vp.shape[2] - k) // s + 1, (vp.shape[3] - k) // s + 1
        win = [vp[:, :, i:i + s * oh:s, j:j + s * ow:s] for i in range(k) for j in range(k)]
        if kind == "max":
            return np.max(win, axis=0)
        cnt = sum(ones[:, :, i:i + s * oh:s, j:j + s * ow:s] for i in range(k) for j in range(k))
        return np.sum(win, axis=0) / cnt
    c["maxpool"] = ([_node("MaxPool", ["x"], kernel_shape=[3, 3], strides=[2, 2],
                           pads=[1, 1, 1, 1])], {"x": xp}, {},
                    lambda i, w: pool(i["x"], 3, 2, 1, "max"))
    c["avgpool include pad"] = ([_node("AveragePool", ["x"], kernel_shape=[3, 3],
                                       pads=[1, 1, 1, 1], count_include_pad=1)], {"x": xp}, {},
                                lambda i, w: pool(i["x"], 3, 1, 1, "avg", True))
    c["global average pool"] = ([_node("GlobalAveragePool", ["x"])], {"x": xp}, {},
                                lambda i, w: i["x"].astype(np.float64).mean((2, 3),
                                                                            keepdims=True))
    def silu(z):
        return z / (1 + np.exp(-z))
    c["swiglu"] = ([helper.make_node("SwiGLU", ["x", "w1", "w2", "b1"], ["y"], domain=EDGEOPS_DOMAIN,
                                     name="swiglu")], {"x": f(2, 7, 40)},
                   {"w1": f(40, 37), "w2": f(40, 37), "b1": f(37)},
                   lambda i, w: silu(i["x"].astype(np.float64) @ w["w1"] + w["b1"])
                   * (i["x"].astype(np.float64) @ w["w2"]))
    chain_in = f(3, 5, 64)
    c["region add relu softmax"] = ([_node("Add", ["x", "b"], "s"), _node("Relu", ["s"], "r"),
                                     _node("Softmax", ["r"], axis=-1)],
                                    {"x": chain_in}, {"b": f(64)},
                                    lambda i, w: softmax(np.maximum(i["x"].astype(np.float64)
                                                                    + w["b"], 0), -1))
    c["region matmul gelu layernorm"] = (
        [_node("MatMul", ["x", "w"], "m"), _node("Gelu", ["m"], "a"),
         _node("LayerNormalization", ["a", "g", "b"], axis=-1, epsilon=1e-5)],
        {"x": f(9, 48)}, {"w": f(48, 40), "g": f(40), "b": f(40)},
        lambda i, w: ln(0.5 * (z := i["x"].astype(np.float64) @ w["w"])
                        * (1 + _erf(z / np.sqrt(2))), w["g"], w["b"]))
    return c


CASES = list(_cases(np.random.default_rng(0)))


@pytest.mark.parametrize("family", CASES)
def test_a_family_runs_natively_with_the_bits_of_its_python_path(bridge, monkeypatch, family):
    nodes, inputs, inits, ref = _cases(np.random.default_rng(sum(map(ord, family))))[family]
    m = _model(nodes, inputs, inits)
    want, got, ran = _both(monkeypatch, m, inputs)
    assert ran >= 3, f"{family}: {ran} of 4 calls natively; {list(native.plan_failures)[-3:]}"
    for g in got:
        np.testing.assert_array_equal(g[0], want[0])
    exact = ref(inputs, inits)
    scale = max(float(np.abs(exact).max()), 1.0)
    assert np.abs(got[-1][0] - exact).max() <= 3e-6 * scale, family


def test_inputs_of_another_shape_go_through_python(bridge, rng):
    x = rng.standard_normal((4, 7, 32)).astype(np.float32)
    m = _model([_node("Add", ["x", "b"])], {"x": x}, {"b": rng.standard_normal(32).astype(
        np.float32)})
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "n"
    s = eort.session(m, "neon")
    for _ in range(3):
        s.run(None, {"x": x})
    b = numpy_helper.to_array(m.graph.initializer[0])
    c0 = native.counters()
    for n in (1, 6, 4):
        xb = rng.standard_normal((n, 7, 32)).astype(np.float32)
        np.testing.assert_array_equal(s.run(None, {"x": xb})[0], xb + b)
    c1 = native.counters()
    assert c1["mismatched_calls"] - c0["mismatched_calls"] == 2
    assert c1["native_calls"] - c0["native_calls"] == 1


def test_a_step_run_from_python_gives_the_sessions_bits(bridge, rng):
    """The debug path: a published step's entry called from Python (NativeStep.run)."""
    x = rng.standard_normal((5, 33)).astype(np.float32)
    w = rng.standard_normal((33, 21)).astype(np.float32)
    s = eort.session(_model([_node("MatMul", ["x", "w"])], {"x": x}, {"w": w}), "neon")
    for _ in range(2):
        y = s.run(None, {"x": x})[0]
    steps = [v[4] for v in native._published.values()
             if v[4][0].entry == "neon.gemm" and v[4][0].inputs[0][1] == (5, 33)]
    assert steps, list(native.plan_failures)
    (again,) = steps[-1][0].run(x)
    np.testing.assert_array_equal(again, y)
    described = native.programs()
    json.dumps(described)           # data only: what an ahead-of-time runtime would load
    assert any(d[0]["entry"] == "neon.gemm" and d[0]["inputs"] == [["float32", [5, 33]]]
               for d in described.values())


def test_counters_stay_flat_over_100k_calls_and_programs_go_with_their_session(bridge, rng):
    x = rng.standard_normal((16, 16)).astype(np.float32)
    m = _model([_node("Add", ["x", "b"], "s"), _node("Relu", ["s"], "r"),
                _node("Mul", ["r", "x"])], {"x": x},
               {"b": rng.standard_normal(16).astype(np.float32)})
    gc.collect()
    base = native.counters()
    s = eort.session(m, "neon")
    feeds = {"x": x}
    want = s.run(None, feeds)[0]
    s.run(None, feeds)
    live = native.counters()
    assert live["programs"] == base["programs"] + 1
    assert live["pool_bytes"] > base["pool_bytes"]      # the region's intermediates' arena
    run = s.run
    for _ in range(100_000):
        run(None, feeds)
    after = native.counters()
    for k in ("programs", "pool_bytes", "overflow_arenas", "entry_failures"):
        assert after[k] == live[k], (k, live, after)
    assert after["native_calls"] - live["native_calls"] == 100_000
    assert after["python_calls"] == live["python_calls"]
    np.testing.assert_array_equal(run(None, feeds)[0], want)
    del s, run
    gc.collect()
    eort.session(m, "neon")      # making a kernel drains the destroyed ones (Python's side)
    gone = native.counters()
    assert gone["programs"] <= base["programs"] and gone["pool_bytes"] <= base["pool_bytes"]


def test_a_static_session_is_prepared_while_it_is_made(bridge, rng):
    """Every input static: the session's nodes are programs before its first run, which then
    runs natively; a dynamic input leaves the preparing to the first call."""
    x = rng.standard_normal((4, 9, 32)).astype(np.float32)
    b = rng.standard_normal(32).astype(np.float32)
    m = _model([_node("Add", ["x", "b"], "s"), _node("Relu", ["s"])], {"x": x}, {"b": b})
    c0 = native.counters()
    s = eort.session(m, "neon", prepare_programs=True)
    c1 = native.counters()
    assert c1["programs"] == c0["programs"] + 1, list(native.plan_failures)[-3:]
    np.testing.assert_array_equal(s.run(None, {"x": x})[0], np.maximum(x + b, 0))
    c2 = native.counters()
    assert c2["native_calls"] - c1["native_calls"] == 1 and c2["python_calls"] == c1["python_calls"]
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "n"
    eort.session(m, "neon", prepare_programs=True)
    assert native.counters()["programs"] == c2["programs"]
