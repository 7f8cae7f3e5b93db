"""fuse_swiglu (-> ai.edgeops::SwiGLU) and merge_qkv (-> MatMul + Split)."""
import pytest

from _passes_harness import N, check, f32, model, ops
from edgeops.passes import run_passes

SWI = "ai.edgeops::SwiGLU"
X, D, F = (2, 7, 19), 19, 23


def swiglu_model(rng, *, b1=False, b2=False, swapped=False, silu_swapped=False, extra=(),
                 outputs=None, runtime_w2=False, second_x=False):
    inits = {"w1": f32(rng, D, F), "w2": f32(rng, D, F), "wd": f32(rng, F, D)}
    nodes = [N("MatMul", ["x", "w1"], ["g0" if b1 else "g"])]
    if b1:
        inits["b1"] = f32(rng, F)
        nodes.append(N("Add", ["b1", "g0"], ["g"]))
    nodes += [N("Sigmoid", ["g"], ["s"]),
              N("Mul", ["s", "g"] if silu_swapped else ["g", "s"], ["a"]),
              N("MatMul", ["x2" if second_x else "x", "w2"], ["u0" if b2 else "u"])]
    if b2:
        inits["b2"] = f32(rng, 1, F)
        nodes.append(N("Add", ["u0", "b2"], ["u"]))
    nodes += [N("Mul", ["u", "a"] if swapped else ["a", "u"], ["h"]),
              N("MatMul", ["h", "wd"], ["y"]), *extra]
    inputs = {"x": X}
    if second_x:
        inputs["x2"] = X
    if runtime_w2:
        inputs["w2"] = inits.pop("w2").shape
    return model(nodes, inputs, outputs or {"y": X}, inits)


@pytest.mark.parametrize("kw", [{}, {"swapped": True, "silu_swapped": True}, {"b1": True},
                                {"b2": True}, {"b1": True, "b2": True, "swapped": True}])
def test_swiglu_fuses(rng, kw):
    out, rep = check(swiglu_model(rng, **kw), rng, ["fuse_swiglu"], expect={SWI: 1, "MatMul": 1})
    assert ops(out) == {SWI: 1, "MatMul": 1}, rep.summary()
    node = next(n for n in out.graph.node if n.op_type == "SwiGLU")
    want = ["x", "w1", "w2"] + (["b1" if kw.get("b1") else ""] if kw.get("b1") or kw.get("b2") else [])
    assert list(node.input)[:len(want)] == want
    assert len(node.input) == 3 + (2 if kw.get("b2") else 1 if kw.get("b1") else 0)


def test_gate_read_elsewhere_is_not_fused(rng):
    m = swiglu_model(rng, extra=[N("Relu", ["g"], ["z"])], outputs={"y": X, "z": (2, 7, F)})
    check(m, rng, ["fuse_swiglu"], fused=False)


def test_up_projection_as_graph_output_is_not_fused(rng):
    check(swiglu_model(rng, outputs={"y": X, "u": (2, 7, F)}), rng, ["fuse_swiglu"], fused=False)


def test_runtime_weight_is_not_fused(rng):
    check(swiglu_model(rng, runtime_w2=True), rng, ["fuse_swiglu"], fused=False)


def test_projections_of_different_inputs_are_not_fused(rng):
    check(swiglu_model(rng, second_x=True), rng, ["fuse_swiglu"], fused=False)


def qkv_model(rng, n=3, runtime=None, opset=21):
    inits = {f"w{i}": f32(rng, D, F + 4 * i) for i in range(n)}
    inputs = {"x": X}
    if runtime is not None:
        inputs[f"w{runtime}"] = inits.pop(f"w{runtime}").shape
    nodes = [N("MatMul", ["x", f"w{i}"], [f"q{i}"], name=f"proj{i}") for i in range(n)]
    nodes += [N("Relu", [f"q{i}"], [f"y{i}"]) for i in range(n)]
    return model(nodes, inputs, {f"y{i}": (2, 7, F + 4 * i) for i in range(n)}, inits, opset=opset)


@pytest.mark.parametrize("opset", [11, 21])     # Split's sizes: attribute before 13, input after
def test_qkv_merge(rng, opset):
    out, rep = check(qkv_model(rng, opset=opset), rng, ["merge_qkv"],
                     expect={"MatMul": 1, "Split": 1})
    assert rep.fusions[0].new_nodes == ("proj0.merged", "proj0.split")


def test_qkv_with_runtime_weight_is_not_merged(rng):
    check(qkv_model(rng, runtime=1), rng, ["merge_qkv"], fused=False)


def test_two_matmuls_are_not_merged(rng):
    check(qkv_model(rng, n=2), rng, ["merge_qkv"], fused=False)


def test_swiglu_runs_before_qkv_merge(rng):
    # x feeds gate, up and a third projection: SwiGLU takes two, so nothing is left to merge
    m = swiglu_model(rng)
    m.graph.initializer.append(__import__("onnx").numpy_helper.from_array(f32(rng, D, 5), "w3"))
    m.graph.node.append(N("MatMul", ["x", "w3"], ["z"]))
    from onnx import TensorProto, helper
    m.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 7, 5]))
    out, rep = run_passes(m)
    assert ops(out) == {SWI: 1, "MatMul": 2}, rep.summary()
    assert all(f.pass_name == "fuse_swiglu" for f in rep.fusions)
