"""The bundled sample model: small, deterministic, built here from code.

It holds one of each pattern the passes and targets care about, so fusion and lowering always
have a default to run on::

    image 1x3x32x32
      stem   Conv 3->16 (3x3) -> BatchNormalization -> Relu                      (ConvBnAct)
      down   Conv 16->32 (3x3, stride 2) -> GroupNormalization(8) -> Sigmoid, Mul (GroupNormAct, SiLU)
      down   Conv 32->48 (3x3, stride 2) -> Reshape/Transpose to tokens 1x64x48
      block1 LayerNormalization -> 0.5*x*(1+Erf(x/sqrt 2)) -> MatMul -> Add residual (LayerNormGelu, erf)
      block2 LayerNormalization -> Gelu(tanh, opset 20) -> Dropout -> MatMul -> Add  (LayerNormGelu, tanh)
      mlp    LayerNormalization -> x@W1 -> Sigmoid, Mul; x@W2; Mul; @W3 -> Add        (SwiGLU)
      head   Transpose/Reshape back to 1x48x8x8 -> GlobalAveragePool -> Flatten -> Gemm -> logits 1x10

Opset 21 (GroupNormalization-21: scale and bias per channel), IR version 10, so ONNX Runtime
1.18 and newer run it. The same seed gives the same bytes.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

SAMPLE_MODEL_NAME = "edgeops-sample"
OPSET = 21
IR_VERSION = 10
INPUT_SHAPE = (1, 3, 32, 32)
NUM_CLASSES = 10


class _Builder:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits = [], []

    def weight(self, name, shape, fan_in=None, *, kind="normal", value=None):
        if value is not None:
            a = np.asarray(value)
        elif kind == "normal":   # He-style scale keeps activations O(1) through the stack
            a = self.rng.standard_normal(shape) * np.sqrt(1.0 / (fan_in or shape[-1]))
        elif kind == "positive":  # gammas, variances
            a = self.rng.uniform(0.5, 1.5, shape)
        else:                     # small offsets: biases, betas, running means
            a = self.rng.standard_normal(shape) * 0.1
        from onnx import numpy_helper
        if value is None:
            a = a.astype(np.float32)
        self.inits.append(numpy_helper.from_array(a, name))
        return name

    def node(self, op, inputs, name, n_out=1, **attrs):
        from onnx import helper
        outs = [name] if n_out == 1 else [f"{name}_{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op, list(inputs), outs, name=name, **attrs))
        return outs[0]

    # ---- blocks ----------------------------------------------------------------------------
    def conv(self, x, name, cin, cout, stride=1, bias=False):
        w = self.weight(f"{name}.weight", (cout, cin, 3, 3), cin * 9)
        ins = [x, w] + ([self.weight(f"{name}.bias", (cout,), kind="small")] if bias else [])
        return self.node("Conv", ins, name, kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[stride] * 2)

    def layernorm(self, x, name, d):
        return self.node("LayerNormalization", [x, self.weight(f"{name}.weight", (d,), kind="positive"),
                                                self.weight(f"{name}.bias", (d,), kind="small")],
                         name, axis=-1, epsilon=1e-5)

    def linear(self, x, name, din, dout, bias=True):
        y = self.node("MatMul", [x, self.weight(f"{name}.weight", (din, dout), din)], name)
        if not bias:
            return y
        return self.node("Add", [y, self.weight(f"{name}.bias", (dout,), kind="small")], f"{name}.add")

    def gelu_erf(self, x, name):
        """The decomposed form exporters emit: 0.5 * x * (1 + erf(x / sqrt(2)))."""
        def const(suffix, v):
            return self.weight(f"{name}.{suffix}", None, value=np.float32(v))
        d = self.node("Div", [x, const("sqrt2", np.sqrt(2.0))], f"{name}.div")
        e = self.node("Erf", [d], f"{name}.erf")
        a = self.node("Add", [e, const("one", 1.0)], f"{name}.add")
        m = self.node("Mul", [x, a], f"{name}.mul")
        return self.node("Mul", [m, const("half", 0.5)], f"{name}.mul_half")


def build_sample_model(seed: int = 0):
    """The sample model as an ``onnx.ModelProto`` (same seed, same bytes)."""
    from onnx import TensorProto, helper

    b = _Builder(seed)
    c1, c2, d, f = 16, 32, 48, 128
    # stem: Conv + BatchNormalization + Relu
    x = b.conv("image", "stem.conv", 3, c1)
    x = b.node("BatchNormalization", [x, b.weight("stem.bn.scale", (c1,), kind="positive"),
                                      b.weight("stem.bn.bias", (c1,), kind="small"),
                                      b.weight("stem.bn.mean", (c1,), kind="small"),
                                      b.weight("stem.bn.var", (c1,), kind="positive")],
               "stem.bn", epsilon=1e-5)
    x = b.node("Relu", [x], "stem.relu")
    # GroupNormalization + SiLU
    x = b.conv(x, "down1.conv", c1, c2, stride=2, bias=True)
    x = b.node("GroupNormalization", [x, b.weight("down1.gn.scale", (c2,), kind="positive"),
                                      b.weight("down1.gn.bias", (c2,), kind="small")],
               "down1.gn", num_groups=8, epsilon=1e-5)
    x = b.node("Mul", [x, b.node("Sigmoid", [x], "down1.silu.sigmoid")], "down1.silu.mul")
    # feature map -> tokens 1x64xd
    x = b.conv(x, "down2.conv", c2, d, stride=2, bias=True)
    x = b.node("Reshape", [x, b.weight("tokens.shape", None, value=np.array([1, d, -1], np.int64))],
               "tokens.reshape")
    x = b.node("Transpose", [x], "tokens.transpose", perm=[0, 2, 1])
    # block1: LayerNorm + GELU (erf, decomposed)
    h = b.gelu_erf(b.layernorm(x, "block1.ln", d), "block1.gelu")
    x = b.node("Add", [x, b.linear(h, "block1.proj", d, d)], "block1.residual")
    # block2: LayerNorm + Gelu (opset 20, tanh), then a Dropout the clean-up pass removes
    h = b.node("Gelu", [b.layernorm(x, "block2.ln", d)], "block2.gelu", approximate="tanh")
    h = b.node("Dropout", [h, b.weight("block2.dropout.ratio", None, value=np.float32(0.1))],
               "block2.dropout")
    x = b.node("Add", [x, b.linear(h, "block2.proj", d, d)], "block2.residual")
    # SwiGLU MLP: down(silu(x@W1) * (x@W2))
    h = b.layernorm(x, "mlp.ln", d)
    g = b.linear(h, "mlp.gate", d, f, bias=False)
    g = b.node("Mul", [g, b.node("Sigmoid", [g], "mlp.silu.sigmoid")], "mlp.silu.mul")
    u = b.linear(h, "mlp.up", d, f, bias=False)
    h = b.linear(b.node("Mul", [g, u], "mlp.gate_up"), "mlp.down", f, d, bias=False)
    x = b.node("Add", [x, h], "mlp.residual")
    # head
    x = b.node("Transpose", [x], "head.transpose", perm=[0, 2, 1])
    x = b.node("Reshape", [x, b.weight("head.shape", None, value=np.array([1, d, 8, 8], np.int64))],
               "head.reshape")
    x = b.node("GlobalAveragePool", [x], "head.pool")
    x = b.node("Flatten", [x], "head.flatten", axis=1)
    b.node("Gemm", [x, b.weight("head.fc.weight", (NUM_CLASSES, d), d),
                    b.weight("head.fc.bias", (NUM_CLASSES,), kind="small")], "logits", transB=1)

    graph = helper.make_graph(
        b.nodes, "edgeops_sample",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, list(INPUT_SHAPE))],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, NUM_CLASSES])],
        b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="edgeops.sample", ir_version=IR_VERSION,
                              doc_string=f"{SAMPLE_MODEL_NAME} (seed {seed}): Conv+BN+Relu, "
                                         "GroupNorm+SiLU, LayerNorm+GELU (erf, tanh), SwiGLU MLP")
    return model


def write_sample_model(path: str | os.PathLike, seed: int = 0, *, overwrite: bool = False) -> Path:
    """Write the sample model to ``path``; an existing file is an error unless ``overwrite``."""
    from edgeops.errors import EdgeOpsError
    p = Path(path)
    if p.exists() and not overwrite:
        raise EdgeOpsError(f"{p} already exists; edgeops will not overwrite it (remove it or "
                           f"choose another path)")
    p.parent.mkdir(parents=True, exist_ok=True)
    data = build_sample_model(seed).SerializeToString(deterministic=True)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, p)
    return p
