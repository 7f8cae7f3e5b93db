"""The bundled sample model: deterministic, small, valid, the patterns later passes look for,
and ONNX Runtime agreeing with the ONNX reference evaluator on it."""
import hashlib

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx.reference import ReferenceEvaluator

from edgeops import graph
from edgeops.errors import EdgeOpsError
from edgeops.sample import SAMPLE_MODEL_NAME, build_sample_model, write_sample_model


@pytest.fixture(scope="module")
def model():
    return build_sample_model()


@pytest.fixture(scope="module")
def g(model):
    return graph.load(model)


def test_deterministic_small_and_valid(model, tmp_path):
    data = model.SerializeToString()
    assert build_sample_model().SerializeToString() == data
    assert build_sample_model(seed=0).SerializeToString() == data
    assert build_sample_model(seed=1).SerializeToString() != data
    assert 50_000 < len(data) < 1_000_000
    onnx.checker.check_model(model, full_check=True)
    assert SAMPLE_MODEL_NAME == "edgeops-sample"
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 21)]
    # written bytes are the built bytes, every time
    a, b = write_sample_model(tmp_path / "a.onnx"), write_sample_model(tmp_path / "b.onnx")
    assert hashlib.sha256(a.read_bytes()).digest() == hashlib.sha256(b.read_bytes()).digest()
    assert onnx.load(a) == model


def test_io(g):
    assert [(t.name, t.shape, t.dtype) for t in g.inputs] == [("image", (1, 3, 32, 32), "fp32")]
    assert [(t.name, t.shape, t.dtype) for t in g.outputs] == [("logits", (1, 10), "fp32")]


def test_weights_are_finite_and_not_degenerate(g):
    for t in g.initializers:
        a = t.data
        assert np.isfinite(a).all(), t.name
        if a.size > 1:
            assert a.std() > 0, t.name


def _chain(g, start, *ops):
    """Follow single-consumer edges from node ``start`` through ``ops``; return the node names."""
    n, names = g.node(start), [start]
    for op in ops:
        nxt = [c for o in n.outputs for c in g.consumers(o) if c.op_type == op]
        assert nxt, f"{n.name} ({n.op_type}) is not followed by {op}"
        n = nxt[0]
        names.append(n.name)
    return names


def test_contains_the_patterns_fusion_looks_for(g):
    hist = g.op_histogram()
    for op in ("Conv", "BatchNormalization", "Relu", "GroupNormalization", "Sigmoid", "Mul",
               "LayerNormalization", "Erf", "Gelu", "MatMul", "Dropout", "Gemm"):
        assert op in hist, op
    _chain(g, "stem.conv", "BatchNormalization", "Relu")
    # GroupNorm + SiLU: x * sigmoid(x) on the GroupNorm output
    gn = g.node("down1.gn")
    assert sorted(c.op_type for c in g.consumers(gn.outputs[0])) == ["Mul", "Sigmoid"]
    assert g.node("down1.gn").attrs["num_groups"] == 8
    # LayerNorm + GELU, decomposed erf form and opset-20 Gelu (tanh)
    _chain(g, "block1.ln", "Div", "Erf", "Add", "Mul", "Mul")
    _chain(g, "block2.ln", "Gelu", "Dropout", "MatMul")
    assert g.node("block2.gelu").attrs["approximate"] == "tanh"
    # SwiGLU on tokens: the same normalised tokens feed gate and up projections
    ln = g.node("mlp.ln")
    gate, up = g.consumers(ln.outputs[0])
    assert gate.op_type == up.op_type == "MatMul"
    assert g.tensors[gate.inputs[1]].shape == g.tensors[up.inputs[1]].shape == (48, 128)
    _chain(g, gate.name, "Sigmoid", "Mul", "Mul", "MatMul")
    assert g.tensors[ln.outputs[0]].shape == (1, 64, 48)
    # Dropout in inference form: ratio given, no training_mode
    d = g.node("block2.dropout")
    assert len(d.inputs) == 2 and float(g.tensors[d.inputs[1]].data) == pytest.approx(0.1)


def test_runs_in_onnxruntime_like_the_reference_evaluator(model, rng):
    x = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    y_ort = sess.run(None, {"image": x})[0]
    y_ref = ReferenceEvaluator(model).run(None, {"image": x})[0]
    assert y_ort.shape == (1, 10) and np.isfinite(y_ort).all()
    assert 0.05 < np.abs(y_ort).max() < 100       # sensibly scaled: neither vanishing nor exploding
    np.testing.assert_allclose(y_ort, y_ref, rtol=1e-4, atol=1e-4)
    # a different input gives a different answer (the model is not constant)
    y2 = sess.run(None, {"image": -x})[0]
    assert not np.allclose(y_ort, y2)


def test_write_refuses_to_overwrite(tmp_path):
    p = tmp_path / "m.onnx"
    p.write_bytes(b"user's file")
    with pytest.raises(EdgeOpsError, match="already exists"):
        write_sample_model(p)
    assert p.read_bytes() == b"user's file"
    write_sample_model(p, overwrite=True)
    assert onnx.load(p).graph.name == "edgeops_sample"
    assert not list(tmp_path.glob("*.tmp"))
