"""Build small models with onnx.helper, run a pass, and compare ONNX Runtime on the model before
(the independent reference) with ONNX Runtime + edgeops.ort on the model after."""
from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import edgeops.ort as eort
from edgeops.passes import run_passes

N = helper.make_node
RTOL = 1e-5   # fp32, relative to the output's scale


def model(nodes, inputs, outputs, inits=None, opset=21, types=None, checked=True):
    """``inputs``/``outputs``: {name: shape}; ``inits``: {name: array}; ``types``: {input name:
    TensorProto type} for inputs that are not fp32."""
    types = types or {}
    g = helper.make_graph(
        nodes, "test",
        [helper.make_tensor_value_info(k, types.get(k, TensorProto.FLOAT), list(s))
         for k, s in inputs.items()],
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, s) for k, s in outputs.items()],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    if checked:
        inferred = onnx.shape_inference.infer_shapes(m)   # outputs given as None get a shape
        for o, io in zip(m.graph.output, inferred.graph.output):
            if not o.type.tensor_type.HasField("shape") and io.type.tensor_type.HasField("shape"):
                o.CopyFrom(io)
        onnx.checker.check_model(m)
    return m


def f32(rng, *shape, scale=1.0):
    return np.asarray(rng.standard_normal(shape) * scale, np.float32)


def scalar(v):
    return np.asarray(v, np.float32)


def feeds_for(m, rng):
    return {i.name: f32(rng, *[d.dim_value for d in i.type.tensor_type.shape.dim])
            for i in m.graph.input if i.name not in {t.name for t in m.graph.initializer}}


def ops(m) -> Counter:
    return Counter(f"{n.domain}::{n.op_type}" if n.domain else n.op_type for n in m.graph.node)


def run_ort(m, feeds):
    return ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)


def check(m, rng, passes=None, *, expect=None, fused=True, drop=True):
    """Run ``passes`` on ``m``; with ``fused`` the node count must drop (unless not ``drop``:
    a lone op renamed to its ai.edgeops form) and ``expect``, a {op: count} subset, hold;
    otherwise the model must come back unchanged. Either way ORT on the result equals ORT on
    ``m`` on random inputs. Returns (new model, report)."""
    out, report = run_passes(m, passes)
    onnx.checker.check_model(out)
    if fused:
        assert report.fusions, report.summary()
        if drop:
            assert len(out.graph.node) < len(m.graph.node), report.summary()
        for op, k in (expect or {}).items():
            assert ops(out)[op] == k, (op, ops(out), report.summary())
    else:
        assert ops(out) == ops(m) and not report.fusions, report.summary()
    feeds = feeds_for(m, rng)
    want = run_ort(m, feeds)
    got = eort.session(out).run(None, feeds)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=RTOL * float(np.abs(w).max()))
    return out, report
