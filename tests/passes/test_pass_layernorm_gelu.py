"""fuse_layernorm_gelu: LayerNormalization + Gelu (op, erf and tanh decompositions)."""
import math

import numpy as np
import pytest

from _passes_harness import N, check, f32, model, scalar

LNG = "ai.edgeops::LayerNormGelu"
C = {"half": scalar(0.5), "one": scalar(1.0), "sqrt2": scalar(math.sqrt(2)),
     "isqrt2": scalar(1 / math.sqrt(2)), "three": scalar(3.0), "k": scalar(0.044715),
     "c": scalar(math.sqrt(2 / math.pi)), "two": scalar(2.0)}

GELUS = {  # name -> (nodes from "h" to "y", approximate expected)
    "op_none": ([N("Gelu", ["h"], ["y"])], "none"),
    "op_tanh": ([N("Gelu", ["h"], ["y"], approximate="tanh")], "tanh"),
    # torch.onnx: ((x * 0.5) * (1 + erf(x / sqrt 2)))
    "erf_torch": ([N("Div", ["h", "sqrt2"], ["d"]), N("Erf", ["d"], ["e"]),
                   N("Add", ["e", "one"], ["a"]), N("Mul", ["h", "half"], ["p"]),
                   N("Mul", ["p", "a"], ["y"])], "none"),
    # tf2onnx / HF: 0.5 * x * (1 + erf(x * 0.7071)), constants first
    "erf_mul_const_first": ([N("Mul", ["isqrt2", "h"], ["d"]), N("Erf", ["d"], ["e"]),
                             N("Add", ["one", "e"], ["a"]), N("Mul", ["h", "a"], ["p"]),
                             N("Mul", ["half", "p"], ["y"])], "none"),
    # x * ((1 + erf) / 2)
    "erf_div_two": ([N("Div", ["h", "sqrt2"], ["d"]), N("Erf", ["d"], ["e"]),
                     N("Add", ["e", "one"], ["a"]), N("Div", ["a", "two"], ["p"]),
                     N("Mul", ["h", "p"], ["y"])], "none"),
    "tanh_pow": ([N("Pow", ["h", "three"], ["c3"]), N("Mul", ["c3", "k"], ["t1"]),
                  N("Add", ["h", "t1"], ["t2"]), N("Mul", ["t2", "c"], ["t3"]),
                  N("Tanh", ["t3"], ["t4"]), N("Add", ["t4", "one"], ["t5"]),
                  N("Mul", ["h", "half"], ["p"]), N("Mul", ["p", "t5"], ["y"])], "tanh"),
    "tanh_cube_by_muls": ([N("Mul", ["h", "h"], ["sq"]), N("Mul", ["sq", "h"], ["c3"]),
                           N("Mul", ["k", "c3"], ["t1"]), N("Add", ["t1", "h"], ["t2"]),
                           N("Mul", ["c", "t2"], ["t3"]), N("Tanh", ["t3"], ["t4"]),
                           N("Add", ["one", "t4"], ["t5"]), N("Mul", ["t5", "h"], ["p"]),
                           N("Mul", ["p", "half"], ["y"])], "tanh"),
}
X = (2, 9, 37)


def ln_model(rng, gelu, *, outputs=None, bias=True, axis=-1, inputs=None, extra=()):
    d = X[axis:] if axis != -1 else X[-1:]
    inits = {"scale": f32(rng, *d), **({"bias": f32(rng, *d)} if bias else {}), **C}
    ln = N("LayerNormalization", ["x", "scale", "bias"][:3 if bias else 2], ["h"], axis=axis,
           epsilon=1e-3)
    return model([ln, *gelu, *extra], {"x": X, **(inputs or {})}, outputs or {"y": X}, inits)


def _attr(out, key):
    node = next(n for n in out.graph.node if n.op_type == "LayerNormGelu")
    a = {a.name: a for a in node.attribute}[key]
    return a.s.decode() if a.s else a.i


@pytest.mark.parametrize("form", sorted(GELUS))
def test_layernorm_gelu_fuses(rng, form):
    nodes, approximate = GELUS[form]
    out, _ = check(ln_model(rng, nodes), rng, ["fuse_layernorm_gelu"], expect={LNG: 1})
    assert len(out.graph.node) == 1 and _attr(out, "approximate") == approximate


def test_layernorm_gelu_without_bias_and_with_axis(rng):
    out, _ = check(ln_model(rng, GELUS["erf_torch"][0], bias=False, axis=-2), rng,
                   ["fuse_layernorm_gelu"], expect={LNG: 1})
    assert _attr(out, "axis") == -2


def test_layernorm_output_read_elsewhere_is_not_fused(rng):
    m = ln_model(rng, GELUS["erf_torch"][0], outputs={"y": X, "z": X},
                 extra=[N("Relu", ["h"], ["z"])])
    check(m, rng, ["fuse_layernorm_gelu"], fused=False)


def test_gelu_intermediate_graph_output_is_not_fused(rng):
    m = ln_model(rng, GELUS["erf_torch"][0], outputs={"y": X, "e": X})
    check(m, rng, ["fuse_layernorm_gelu"], fused=False)


def test_runtime_constant_is_not_fused(rng):
    nodes = [N("Div", ["h", "s2"], ["d"]), *GELUS["erf_torch"][0][1:]]
    m = ln_model(rng, nodes, inputs={"s2": ()})
    check(m, rng, ["fuse_layernorm_gelu"], fused=False)


def test_wrong_constant_is_not_gelu(rng):
    nodes = [N("Mul", ["h", "k"], ["d"]), *GELUS["erf_torch"][0][1:]]   # erf(0.044715 x)
    check(ln_model(rng, nodes), rng, ["fuse_layernorm_gelu"], fused=False)


def test_layernorm_with_mean_output_read_is_not_fused(rng):
    inits = {"scale": f32(rng, 37), **C}
    ln = N("LayerNormalization", ["x", "scale"], ["h", "mean"], axis=-1)
    m = model([ln, N("Gelu", ["h"], ["y"])], {"x": X}, {"y": X, "mean": (2, 9, 1)}, inits)
    check(m, rng, ["fuse_layernorm_gelu"], fused=False)


def test_constants_from_constant_nodes(rng):
    from onnx import helper, numpy_helper
    consts = [helper.make_node("Constant", [], [k], value=numpy_helper.from_array(v))
              for k, v in C.items()]
    inits = {"scale": f32(rng, 37)}
    ln = N("LayerNormalization", ["x", "scale"], ["h"])
    m = model([*consts, ln, *GELUS["tanh_pow"][0]], {"x": X}, {"y": X}, inits)
    out, _ = check(m, rng, ["fuse_layernorm_gelu"], expect={LNG: 1})
    assert len(out.graph.node) == 1     # the now-unread Constant nodes went too
    assert np.isclose(float(np.float32(1e-5)), _attr_f(out, "epsilon"))


def _attr_f(out, key):
    node = next(n for n in out.graph.node if n.op_type == "LayerNormGelu")
    return {a.name: a for a in node.attribute}[key].f
