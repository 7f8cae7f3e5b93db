"""fold_batchnorm + fuse_conv_act -> ai.edgeops::ConvBnAct, each activation spelling."""
import numpy as np
import pytest

from _passes_harness import N, check, f32, model, scalar
from edgeops.passes import run_passes

PASSES = ["fold_batchnorm", "fuse_conv_act"]
CBA = "ai.edgeops::ConvBnAct"

ACTS = {  # name -> (nodes from "c" to "y", extra initializers, activation attribute expected)
    "relu": ([N("Relu", ["c"], ["y"])], {}, "relu"),
    "relu6": ([N("Clip", ["c", "zero", "six"], ["y"])], {"zero": scalar(0), "six": scalar(6)}, "relu6"),
    "clip": ([N("Clip", ["c", "lo", ""], ["y"])], {"lo": scalar(-0.37)}, "clip"),
    "silu": ([N("Sigmoid", ["c"], ["s"]), N("Mul", ["c", "s"], ["y"])], {}, "silu"),
    "silu_swapped": ([N("Sigmoid", ["c"], ["s"]), N("Mul", ["s", "c"], ["y"])], {}, "silu"),
    "hardswish": ([N("HardSwish", ["c"], ["y"])], {}, "hardswish"),
    "hardswish_decomposed": ([N("HardSigmoid", ["c"], ["h"], alpha=1 / 6, beta=0.5),
                              N("Mul", ["c", "h"], ["y"])], {}, "hardswish"),
    "hardswish_relu6_form": ([N("Add", ["c", "three"], ["t"]), N("Clip", ["t", "zero", "six"], ["r"]),
                              N("Mul", ["c", "r"], ["m"]), N("Div", ["m", "six"], ["y"])],
                             {"zero": scalar(0), "six": scalar(6), "three": scalar(3)}, "hardswish"),
    "relu6_minmax": ([N("Max", ["c", "zero"], ["m"]), N("Min", ["m", "six"], ["y"])],
                     {"zero": scalar(0), "six": scalar(6)}, "relu6"),
}


def conv_model(rng, act_nodes, extra, bn=True, x=(2, 4, 13, 10), k=6, outputs=None,
               weight_input=False, more_inputs=None):
    # weights of scale 1 put conv outputs well past the activations' knees (-3, 0, 3, 6)
    inits = {"w": f32(rng, k, x[1], 3, 3), "b": f32(rng, k), **extra}
    nodes = [N("Conv", ["x", "w", "b"], ["c0" if bn else "c"], pads=[1, 1, 1, 1], strides=[1, 2])]
    if bn:
        inits.update(gamma=rng.uniform(0.5, 1.5, k).astype(np.float32), beta=f32(rng, k),
                     mean=f32(rng, k), var=rng.uniform(0.5, 2, k).astype(np.float32))
        nodes.append(N("BatchNormalization", ["c0", "gamma", "beta", "mean", "var"], ["c"]))
    inputs = {"x": x, **(more_inputs or {})}
    if weight_input:
        inputs["w"] = inits.pop("w").shape
    return model(nodes + act_nodes, inputs, outputs or {"y": None}, inits)


@pytest.mark.parametrize("act", sorted(ACTS))
def test_conv_bn_act_fuses(rng, act):
    nodes, extra, want = ACTS[act]
    out, _ = check(conv_model(rng, nodes, extra), rng, PASSES, expect={CBA: 1, "Conv": 0})
    node = next(n for n in out.graph.node if n.op_type == "ConvBnAct")
    attrs = {a.name: a for a in node.attribute}
    assert attrs["activation"].s.decode() == want
    if act == "clip":
        assert attrs["clip_min"].f == np.float32(-0.37) and "clip_max" not in attrs
    assert len(out.graph.node) == 1


def test_conv_bn_without_activation_is_conv_bn_act_none(rng):
    out, _ = check(conv_model(rng, [N("Identity", ["c"], ["y"])], {}), rng, PASSES,
                   expect={CBA: 1, "BatchNormalization": 0})
    node = next(n for n in out.graph.node if n.op_type == "ConvBnAct")
    assert {a.name: a.s for a in node.attribute}["activation"] == b"none"


def test_activation_read_twice_stays_outside(rng):
    # the conv output also feeds Tanh: the Relu cannot be folded in (the conv output must exist)
    nodes = [N("Relu", ["c"], ["y"]), N("Tanh", ["c"], ["z"])]
    out, _ = check(conv_model(rng, nodes, {}, outputs={"y": None, "z": None}), rng, PASSES,
                   expect={CBA: 1, "Relu": 1, "Tanh": 1})
    node = next(n for n in out.graph.node if n.op_type == "ConvBnAct")
    assert {a.name: a.s for a in node.attribute}["activation"] == b"none"


def test_silu_with_intermediate_graph_output_is_not_fused(rng):
    nodes, extra, _ = ACTS["silu"]
    out, _ = check(conv_model(rng, nodes, extra, outputs={"y": None, "s": None}), rng, PASSES,
                   expect={CBA: 1, "Sigmoid": 1, "Mul": 1})


def test_conv_with_runtime_weights_is_left_alone(rng):
    nodes, extra, _ = ACTS["relu"]
    check(conv_model(rng, nodes, extra, bn=False, weight_input=True), rng, PASSES, fused=False)


def test_clip_with_runtime_bound_is_not_an_activation(rng):
    m = conv_model(rng, [N("Clip", ["c", "lo"], ["y"])], {}, bn=False, more_inputs={"lo": ()})
    out, _ = run_passes(m, PASSES)
    assert [n.op_type for n in out.graph.node] == ["ConvBnAct", "Clip"]


def test_wrong_silu_constant_is_not_silu(rng):
    # x * sigmoid(1.702 x) is the "quick GELU", not SiLU: it must not be taken as one
    nodes = [N("Mul", ["c", "k"], ["t"]), N("Sigmoid", ["t"], ["s"]), N("Mul", ["c", "s"], ["y"])]
    out, _ = check(conv_model(rng, nodes, {"k": scalar(1.702)}), rng, PASSES,
                   expect={CBA: 1, "Sigmoid": 1, "Mul": 2})
