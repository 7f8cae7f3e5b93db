"""drop_dropout and fold_batchnorm: standard ONNX in and out."""
import numpy as np
import pytest

from _passes_harness import N, check, f32, model, ops, scalar
from edgeops.passes import run_passes

CLEANUP = ["drop_dropout", "fold_batchnorm"]


def test_dropout_and_identity_go(rng):
    nodes = [N("Relu", ["x"], ["a"]), N("Dropout", ["a", "ratio"], ["b"]),
             N("Identity", ["b"], ["c"]), N("Sigmoid", ["c"], ["y"])]
    m = model(nodes, {"x": (3, 7)}, {"y": (3, 7)}, {"ratio": scalar(0.3)})
    out, rep = check(m, rng, CLEANUP)
    assert ops(out) == {"Relu": 1, "Sigmoid": 1}
    assert [f.result for f in rep.fusions] == ["removed", "removed"]


def test_dropout_producing_a_graph_output_keeps_the_output_name(rng):
    nodes = [N("Relu", ["x"], ["a"]), N("Dropout", ["a"], ["y"]), N("Sigmoid", ["a"], ["z"])]
    m = model(nodes, {"x": (5,)}, {"y": (5,), "z": (5,)})
    out, _ = check(m, rng, CLEANUP)
    assert [o.name for o in out.graph.output] == ["y", "z"]
    assert ops(out) == {"Relu": 1, "Sigmoid": 1}


def test_dropout_of_a_graph_input_to_a_graph_output_becomes_identity(rng):
    m = model([N("Dropout", ["x"], ["y"])], {"x": (4,)}, {"y": (4,)})
    out, rep = run_passes(m, CLEANUP)
    assert ops(out) == {"Identity": 1} and rep.fusions[0].result == "Identity"


def test_dropout_whose_mask_is_read_stays(rng):
    nodes = [N("Dropout", ["x"], ["a", "mask"]), N("Cast", ["mask"], ["m"], to=1),
             N("Mul", ["a", "m"], ["y"])]
    check(model(nodes, {"x": (4,)}, {"y": (4,)}), rng, CLEANUP, fused=False)


def test_dropout_with_a_runtime_training_mode_stays():
    from onnx import TensorProto
    m = model([N("Dropout", ["x", "", "train"], ["y"])], {"x": (4,), "train": ()}, {"y": (4,)},
              types={"train": TensorProto.BOOL})
    out, rep = run_passes(m, CLEANUP)
    assert ops(out) == {"Dropout": 1} and not rep.fusions


def _conv_bn(rng, bias=True, k=5):
    inits = {"w": f32(rng, k, 3, 3, 3), "gamma": rng.uniform(0.5, 1.5, k).astype(np.float32),
             "beta": f32(rng, k), "mean": f32(rng, k), "var": rng.uniform(0.5, 2, k).astype(np.float32)}
    if bias:
        inits["b"] = f32(rng, k)
    conv = N("Conv", ["x", "w", "b"] if bias else ["x", "w"], ["c"], pads=[1, 0, 1, 0], strides=[2, 1])
    bn = N("BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["y"], epsilon=1e-3)
    return [conv, bn], inits


@pytest.mark.parametrize("bias", [True, False])
def test_batchnorm_folds_into_conv(rng, bias):
    nodes, inits = _conv_bn(rng, bias)
    out, _ = check(model(nodes, {"x": (2, 3, 11, 9)}, {"y": None}, inits), rng, CLEANUP,
                   expect={"Conv": 1, "BatchNormalization": 0})
    assert len(out.graph.initializer) == 2    # the old weights and BN statistics are gone


def test_batchnorm_not_folded_when_conv_output_is_read_elsewhere(rng):
    nodes, inits = _conv_bn(rng)
    nodes.append(N("Relu", ["c"], ["z"]))
    check(model(nodes, {"x": (1, 3, 8, 8)}, {"y": None, "z": None}, inits), rng, CLEANUP, fused=False)


def test_batchnorm_not_folded_when_conv_output_is_a_graph_output(rng):
    nodes, inits = _conv_bn(rng)
    check(model(nodes, {"x": (1, 3, 8, 8)}, {"y": None, "c": None}, inits), rng, CLEANUP, fused=False)


def test_batchnorm_not_folded_with_runtime_weights(rng):
    nodes, inits = _conv_bn(rng)
    del inits["w"]
    m = model(nodes, {"x": (1, 3, 8, 8), "w": (5, 3, 3, 3)}, {"y": None}, inits)
    check(m, rng, CLEANUP, fused=False)


def test_input_model_is_not_modified(rng):
    nodes, inits = _conv_bn(rng)
    m = model(nodes, {"x": (1, 3, 8, 8)}, {"y": None}, inits)
    before = m.SerializeToString()
    run_passes(m)
    assert m.SerializeToString() == before
