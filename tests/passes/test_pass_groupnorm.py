"""fuse_groupnorm_act: GroupNormalization (opset 21 and 18) and the exporters'
Reshape/InstanceNormalization/Reshape/Mul/Add form, with and without SiLU."""
import numpy as np
import pytest

from _passes_harness import N, check, f32, model, scalar

GNA = "ai.edgeops::GroupNormAct"
SILU = [N("Sigmoid", ["g"], ["s"]), N("Mul", ["s", "g"], ["y"])]
X = (2, 12, 5, 7)   # C = 12, groups of 3 channels


def _activation(out):
    node = next(n for n in out.graph.node if n.op_type == "GroupNormAct")
    return {a.name: a for a in node.attribute}["activation"].s.decode()


@pytest.mark.parametrize("silu", [True, False])
def test_groupnormalization_21(rng, silu):
    inits = {"scale": f32(rng, 12), "bias": f32(rng, 12)}
    nodes = [N("GroupNormalization", ["x", "scale", "bias"], ["g" if silu else "y"], num_groups=4,
               epsilon=1e-4)] + (SILU if silu else [])
    out, _ = check(model(nodes, {"x": X}, {"y": X}, inits), rng, expect={GNA: 1}, drop=silu)
    assert len(out.graph.node) == 1 and _activation(out) == ("silu" if silu else "none")


def test_groupnormalization_18_per_group_scale(rng):
    inits = {"scale": f32(rng, 4), "bias": f32(rng, 4)}
    nodes = [N("GroupNormalization", ["x", "scale", "bias"], ["g"], num_groups=4)] + SILU
    # onnx's checker calls GroupNormalization-18 deprecated; ONNX Runtime still runs it
    m = model(nodes, {"x": X}, {"y": X}, inits, opset=18, checked=False)
    out, _ = check(m, rng, expect={GNA: 1})
    assert _activation(out) == "silu"


def exporter_form(rng, *, shape_node=True, affine=True, silu=True, inst_identity=False):
    """What torch.onnx emits for nn.GroupNorm(4, 12) below opset 18 (+ SiLU)."""
    g, c = 4, X[1]
    inits = {"s1": np.array([0, g, -1], np.int64),
             "inst_s": np.ones(g, np.float32) if inst_identity else f32(rng, g),
             "inst_b": np.zeros(g, np.float32) if inst_identity else f32(rng, g),
             "gamma": f32(rng, c, 1, 1), "beta": f32(rng, c, 1, 1)}
    nodes = [N("Reshape", ["x", "s1"], ["r1"]),
             N("InstanceNormalization", ["r1", "inst_s", "inst_b"], ["n"], epsilon=1e-5)]
    if shape_node:
        nodes.append(N("Shape", ["x"], ["s2"]))
    else:
        inits["s2"] = np.array(X, np.int64)
    end = "g" if silu else "y"
    nodes.append(N("Reshape", ["n", "s2"], ["r2"] if affine else [end]))
    if affine:
        nodes += [N("Mul", ["r2", "gamma"], ["m"]), N("Add", ["beta", "m"], [end])]
    return model(nodes + (SILU if silu else []), {"x": X}, {"y": X}, inits, opset=17)


@pytest.mark.parametrize("kw", [{}, {"shape_node": False}, {"affine": False},
                                {"silu": False, "inst_identity": True}])
def test_exporter_form(rng, kw):
    out, rep = check(exporter_form(rng, **kw), rng, expect={GNA: 1})
    assert len(out.graph.node) == 1, rep.summary()   # the Shape node goes too
    assert _activation(out) == ("silu" if kw.get("silu", True) else "none")


def test_exporter_form_with_intermediate_read_twice_is_left(rng):
    m = exporter_form(rng)
    m.graph.node.append(N("Relu", ["n"], ["z"]))   # the instance-norm output is read elsewhere
    from onnx import TensorProto, helper
    m.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 4, 105]))
    check(m, rng, ["fuse_groupnorm_act"], fused=False)


def test_exporter_form_with_runtime_gamma_stops_before_the_mul(rng):
    m = exporter_form(rng)
    gamma = next(t for t in m.graph.initializer if t.name == "gamma")
    m.graph.initializer.remove(gamma)
    from onnx import TensorProto, helper
    m.graph.input.append(helper.make_tensor_value_info("gamma", TensorProto.FLOAT, [12, 1, 1]))
    out, _ = check(m, rng, ["fuse_groupnorm_act"], expect={GNA: 1, "Mul": 2, "Add": 1, "Sigmoid": 1})
    assert _activation(out) == "none"


def test_groupnorm_then_silu_with_sigmoid_read_elsewhere_keeps_silu_outside(rng):
    inits = {"scale": f32(rng, 12), "bias": f32(rng, 12), "two": scalar(2)}
    nodes = [N("GroupNormalization", ["x", "scale", "bias"], ["g"], num_groups=4), *SILU,
             N("Mul", ["s", "two"], ["z"])]
    check(model(nodes, {"x": X}, {"y": X, "z": X}, inits), rng,
          expect={GNA: 1, "Sigmoid": 1, "Mul": 2}, drop=False)
