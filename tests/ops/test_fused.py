"""Fused ai.edgeops ops vs the unfused standard-ONNX subgraphs they replace: fp32 in ONNX Runtime
(literal graph, no ORT fusions), fp64 in onnx.reference (or an independent formula where
onnx.reference rounds through float32: Erf). Tolerances as in _ops_harness (fp32 1e-5, fp64
1e-10), also where BatchNorm is folded by hand."""
import math

import numpy as np
import pytest
from onnx import helper

from _ops_harness import TOL, erf64, graph_model, rand, run_model
from edgeops.ops import EDGEOPS_DOMAIN, get_op


def run_graph(nodes, feeds, inits, engine):
    """Graph inputs ``feeds``, initializers ``inits``, one output named "y"."""
    dt = next(iter(feeds.values())).dtype
    m = graph_model(nodes, [(n, a.dtype, a.shape) for n, a in feeds.items()], [("y", dt, None)],
                    list(inits.items()))
    return run_model(m, feeds, engine)[0]


def compare(got, want, dt):
    assert got.dtype == dt and got.shape == want.shape
    np.testing.assert_allclose(got, want, **TOL[dt])


N = helper.make_node
ACT_NODES = {  # activation -> (nodes from "z" to "y", attrs of ConvBnAct)
    "none": ([N("Identity", ["z"], ["y"])], {}),
    "relu": ([N("Relu", ["z"], ["y"])], {}),
    "relu6": ([N("Clip", ["z", "c0", "c6"], ["y"])], {}),
    "clip": ([N("Clip", ["z", "clo", "chi"], ["y"])], {"clip_min": -0.75, "clip_max": 1.5}),
    "silu": ([N("Sigmoid", ["z"], ["s"]), N("Mul", ["z", "s"], ["y"])], {}),
    "hardswish": ([N("HardSwish", ["z"], ["y"])], {}),
}
CONVS = [  # (X shape, K, group, kernel, conv attrs)
    ((2, 6, 13, 7), 4, 1, (3, 3), {"pads": [1, 1, 1, 1]}),
    ((1, 6, 11, 9), 6, 6, (3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),  # depthwise
    ((1, 4, 13, 10), 6, 2, (3, 2), {"dilations": [2, 1], "pads": [2, 0, 1, 1]}),
]


@pytest.mark.parametrize("act", list(ACT_NODES))
@pytest.mark.parametrize("xs,k,group,kernel,attrs", CONVS)
def test_conv_bn_act_matches_conv_batchnorm_act(rng, act, xs, k, group, kernel, attrs):
    x, w, b = rand(rng, *xs), rand(rng, k, xs[1] // group, *kernel), rand(rng, k)
    gamma, beta, mean, var, eps = rand(rng, k), rand(rng, k), rand(rng, k), \
        rng.uniform(0.3, 2.0, k), 1e-3
    act_nodes, act_attrs = ACT_NODES[act]
    conv_attrs = {**attrs, "group": group}
    nodes = [N("Conv", ["x", "w", "b"], ["c"], **conv_attrs),
             N("BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["z"], epsilon=eps),
             *act_nodes]
    # BN folded by hand (in float64): what the fusion pass hands to ConvBnAct
    f = gamma / np.sqrt(var + np.float32(eps))
    wf, bf = w * f.reshape(-1, 1, 1, 1), (b - mean) * f + beta
    fused = get_op("ConvBnAct", EDGEOPS_DOMAIN)
    for dt, engine in ((np.float32, "ort"), (np.float64, "ref")):
        c = lambda v: np.asarray(v, dt)  # noqa: E731
        inits = {"w": c(w), "b": c(b), "gamma": c(gamma), "beta": c(beta), "mean": c(mean),
                 "var": c(var), "c0": c(0), "c6": c(6), "clo": c(-0.75), "chi": c(1.5)}
        want = run_graph(nodes, {"x": c(x)}, inits, engine)
        got = fused.run([c(x), c(wf), c(bf)], {**conv_attrs, "activation": act, **act_attrs})[0]
        compare(got, want, dt)
    a = fused.parse_attrs({**conv_attrs, "activation": act})
    assert fused.shape(a, [xs, wf.shape, bf.shape]) == [want.shape]


def test_conv_bn_act_without_bias_is_conv_then_act(rng):
    x, w = rand(rng, 1, 3, 13, 7), rand(rng, 5, 3, 3, 3)
    nodes = [N("Conv", ["x", "w"], ["z"], strides=[2, 1]), *ACT_NODES["silu"][0]]
    want = run_graph(nodes, {"x": x.astype(np.float32)}, {"w": w.astype(np.float32)}, "ort")
    got = get_op("ConvBnAct", EDGEOPS_DOMAIN).run(
        [x.astype(np.float32), w.astype(np.float32)], {"strides": [2, 1], "activation": "silu"})[0]
    compare(got, want, np.float32)


@pytest.mark.parametrize("xs,d,f", [((7, 13), 13, 11), ((2, 7, 13), 13, 5), ((2, 3, 5, 9), 9, 17)])
@pytest.mark.parametrize("biases", [(True, True), (False, False), (True, False), (False, True)])
def test_swiglu_matches_matmul_sigmoid_mul(rng, xs, d, f, biases):
    x, w1, w2, b1, b2 = rand(rng, *xs), rand(rng, d, f), rand(rng, d, f), rand(rng, f), rand(rng, f)
    nodes = [N("MatMul", ["x", "w1"], ["g0"]), N("MatMul", ["x", "w2"], ["u0"])]
    nodes += [N("Add", ["g0", "b1"], ["g"])] if biases[0] else [N("Identity", ["g0"], ["g"])]
    nodes += [N("Add", ["u0", "b2"], ["u"])] if biases[1] else [N("Identity", ["u0"], ["u"])]
    nodes += [N("Sigmoid", ["g"], ["s"]), N("Mul", ["g", "s"], ["silu"]),
              N("Mul", ["silu", "u"], ["y"])]
    fused = get_op("SwiGLU", EDGEOPS_DOMAIN)
    for dt, engine in ((np.float32, "ort"), (np.float64, "ref")):
        c = lambda v: np.asarray(v, dt)  # noqa: E731
        inits = {"w1": c(w1), "w2": c(w2)}
        inits.update({"b1": c(b1)} if biases[0] else {})
        inits.update({"b2": c(b2)} if biases[1] else {})
        want = run_graph(nodes, {"x": c(x)}, inits, engine)
        ins = [c(x), c(w1), c(w2), c(b1) if biases[0] else None, c(b2) if biases[1] else None]
        compare(fused.run(ins, {})[0], want, dt)
        assert fused.shape({}, [None if i is None else i.shape for i in ins]) == [want.shape]


def test_swiglu_cost():
    fused = get_op("SwiGLU", EDGEOPS_DOMAIN)
    macs, flops = fused.cost({}, [(2, 7, 13), (13, 11), (13, 11), (11,), None], [(2, 7, 11)])
    assert macs == 2 * 14 * 13 * 11            # two (14 x 13) @ (13 x 11) products
    assert flops == 2 * macs + 14 * 11 * (5 + 1 + 1)


def ln_nodes(axis, eps, bias):
    return [N("LayerNormalization", ["x", "scale", "bias"] if bias else ["x", "scale"], ["n"],
              axis=axis, epsilon=eps)]


ERF_FORM = [N("Div", ["n", "sqrt2"], ["d"]), N("Erf", ["d"], ["e"]), N("Add", ["e", "one"], ["p"]),
            N("Mul", ["n", "p"], ["q"]), N("Mul", ["q", "half"], ["y"])]


@pytest.mark.parametrize("form", ["gelu20", "erf-decomposed", "gelu20-tanh"])
@pytest.mark.parametrize("xs,axis,bias", [((7, 13), -1, True), ((2, 7, 13), -1, False),
                                          ((2, 5, 3, 7), 2, True), ((2, 5, 7), -2, True)])
def test_layernorm_gelu_matches_layernorm_then_gelu(rng, form, xs, axis, bias):
    x = rand(rng, *xs) * 2 + 0.5
    scale, b = rand(rng, *xs[axis:]), rand(rng, *xs[axis:])
    approx = "tanh" if form.endswith("tanh") else "none"
    gelu = ERF_FORM if form == "erf-decomposed" else [N("Gelu", ["n"], ["y"], approximate=approx)]
    nodes = ln_nodes(axis, 1e-5, bias) + gelu
    fused = get_op("LayerNormGelu", EDGEOPS_DOMAIN)
    attrs = {"axis": axis, "approximate": approx}
    for dt in (np.float32, np.float64):
        c = lambda v: np.asarray(v, dt)  # noqa: E731
        inits = {"scale": c(scale), "sqrt2": c(math.sqrt(2)), "one": c(1), "half": c(0.5)}
        inits.update({"bias": c(b)} if bias else {})
        if dt == np.float32:
            want = run_graph(nodes, {"x": c(x)}, inits, "ort")
        elif approx == "tanh":
            want = run_graph(nodes, {"x": c(x)}, inits, "ref")
        else:  # onnx.reference's Erf rounds through float32: LN there, erf independent
            n = run_graph(ln_nodes(axis, 1e-5, bias)[:1] + [N("Identity", ["n"], ["y"])],
                          {"x": c(x)}, inits, "ref")
            want = 0.5 * n * (1 + erf64(n / math.sqrt(2)))
        got = fused.run([c(x), c(scale), c(b) if bias else None], attrs)[0]
        compare(got, want, dt)
    assert fused.shape(fused.parse_attrs(attrs), [xs, scale.shape, None]) == [want.shape]


def exporter_group_norm(g, xs):
    """PyTorch's GroupNorm export: Reshape to (N, G, -1), InstanceNormalization with unit
    scale, Reshape back, per-channel Mul and Add."""
    return [N("Reshape", ["x", "gshape"], ["r"]),
            N("InstanceNormalization", ["r", "ones", "zeros"], ["i"], epsilon=1e-5),
            N("Reshape", ["i", "xshape"], ["ib"]), N("Mul", ["ib", "scale_c"], ["m"]),
            N("Add", ["m", "bias_c"], ["n"])]


@pytest.mark.parametrize("form", ["groupnorm21", "exporter"])
@pytest.mark.parametrize("act", ["none", "silu"])
@pytest.mark.parametrize("xs,groups", [((2, 6, 7, 5), 3), ((1, 8, 13), 4), ((2, 4, 3, 5, 2), 2)])
def test_groupnorm_act_matches_unfused(rng, form, act, xs, groups):
    x, scale, bias = rand(rng, *xs) + 1, rand(rng, xs[1]), rand(rng, xs[1])
    tail = [N("Sigmoid", ["n"], ["s"]), N("Mul", ["n", "s"], ["y"])] if act == "silu" \
        else [N("Identity", ["n"], ["y"])]
    fused = get_op("GroupNormAct", EDGEOPS_DOMAIN)
    bc = (-1,) + (1,) * (len(xs) - 2)
    for dt, engine in ((np.float32, "ort"), (np.float64, "ref")):
        c = lambda v: np.asarray(v, dt)  # noqa: E731
        if form == "groupnorm21":
            # stash_type=11 in fp64: onnx.reference would compute the statistics in float32
            stash = {"stash_type": 11} if dt == np.float64 else {}
            head = [N("GroupNormalization", ["x", "scale", "bias"], ["n"], num_groups=groups,
                      epsilon=1e-5, **stash)]
            inits = {"scale": c(scale), "bias": c(bias)}
        else:
            head = exporter_group_norm(groups, xs)
            inits = {"gshape": np.array([xs[0], groups, -1]), "xshape": np.array(xs),
                     "ones": c(np.ones(groups)), "zeros": c(np.zeros(groups)),
                     "scale_c": c(scale.reshape(bc)), "bias_c": c(bias.reshape(bc))}
        want = run_graph(head + tail, {"x": c(x)}, inits, engine)
        got = fused.run([c(x), c(scale), c(bias)], {"num_groups": groups, "activation": act})[0]
        compare(got, want, dt)
    assert fused.shape(fused.parse_attrs({"num_groups": groups}),
                       [xs, (xs[1],), (xs[1],)]) == [want.shape]
