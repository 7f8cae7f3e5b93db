"""Run an edgeops custom op in your own ONNX Runtime session.

A model with one ``ai.edgeops::SwiGLU`` node, built by hand with onnx.helper::

    y = silu(x @ W1) * (x @ W2),   silu(z) = z * sigmoid(z)

Inputs of SwiGLU, in order: X (..., D), W1 (D, F), W2 (D, F), and optional biases B1, B2 (F).
Three steps make it run in a session you create yourself:

1. ``edgeops.ort.register(so)`` declares edgeops' ops to ONNX Runtime (through
   onnxruntime-extensions) and sets the thread options edgeops needs;
2. ``edgeops.ort.prepare(model)`` fills in what the Python custom-op bridge insists on (every
   input present, one dispatch attribute) and checks kernel ids and tilings;
3. after ``run``, ``edgeops.ort.raise_errors()`` raises any kernel failure (a Python exception
   inside ONNX Runtime would abort the process, so failures are reported this way).

Running it needs Python in the ONNX Runtime process. Run: ``python docs/examples/custom_op_swiglu.py``.
"""
import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import edgeops.ort

D, F = 48, 128
rng = np.random.default_rng(0)
w1 = (rng.standard_normal((D, F)) / np.sqrt(D)).astype(np.float32)
w2 = (rng.standard_normal((D, F)) / np.sqrt(D)).astype(np.float32)

node = helper.make_node("SwiGLU", ["x", "w1", "w2"], ["y"], domain="ai.edgeops", name="mlp")
graph = helper.make_graph(
    [node], "swiglu_by_hand",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 17, D])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 17, F])],
    [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
model = helper.make_model(graph, ir_version=10, opset_imports=[
    helper.make_opsetid("", 21), helper.make_opsetid("ai.edgeops", 1)])
onnx.checker.check_model(model)

so = ort.SessionOptions()
edgeops.ort.register(so, target="reference")   # the numpy reference kernels; "neon" once built
sess = ort.InferenceSession(edgeops.ort.prepare(model, session_options=so).SerializeToString(),
                            so, providers=["CPUExecutionProvider"])

x = rng.standard_normal((2, 17, D)).astype(np.float32)
(y,) = sess.run(None, {"x": x})
edgeops.ort.raise_errors()

gate, up = x @ w1, x @ w2
expected = gate / (1 + np.exp(-gate)) * up
if __name__ == "__main__":
    print(f"y {y.shape} {y.dtype}, max |y - numpy| = {np.abs(y - expected).max():.2e}")
