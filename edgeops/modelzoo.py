"""Benchmark models as PyTorch's two ONNX exporters write them, built with onnx.helper (no torch:
its wheels bring GBs of CUDA into CI), with seeded random weights.

Names: see :func:`names`. Spellings:

``torchscript``  ``torch.onnx.export`` (TorchScript), opset 17. Conv then BatchNormalization (a
    default eval-mode export folds BN into the Conv; kept, as exports of training-mode modules or
    with ``do_constant_folding=False`` write it, for the ConvBnAct fusion), GroupNorm as
    Reshape/InstanceNormalization/Reshape/Mul/Add (symbolic_opset9's group_norm),
    LayerNormalization (symbolic_opset17 emits it; the ReduceMean/Sub/Pow/Sqrt/Div chain is what
    opsets < 17 get), SiLU as Sigmoid+Mul, GELU as Div/Erf/Add/Mul/Mul, ReLU6 as Clip, scalar and
    shape operands as Constant nodes, folded constants (transposed Linear weights, unsqueezed
    GroupNorm affine, InstanceNormalization's ones and zeros) as ``onnx::*`` initializers, a
    repeat of an equal folded constant as an Identity over the first (what torch >= 1.12 leaves;
    onnxruntime PR 12194), scope-path node names (``/layer1/layer1.0/conv1/Conv``).
``dynamo``  ``torch.onnx.export(dynamo=True)`` (torchlib), opset 21: BatchNormalization
    (training_mode=0), GroupNormalization (21 is the first opset whose scale and bias are per
    channel, as in torch; 18's per-group form is deprecated), LayerNormalization, Gelu (torchlib's
    form from opset 20), SiLU as Sigmoid+Mul, constants as initializers (no Constant nodes),
    Linear as Gemm(transB=1) on 2-D inputs and MatMul+Add on 3-D, adaptive average pooling as
    ReduceMean, attention as torchlib's scaled_dot_product_attention (q and k^T each scaled by
    sqrt(1/sqrt(d))), Resize by sizes, every intermediate value's type in value_info.

Weights are N(0, gain/fan_in); norm scales U(0.5, 1.5), shifts and BN means N(0, 0.1), BN
variances U(0.5, 1.5).
"""
from __future__ import annotations

from collections import Counter
from contextlib import contextmanager

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from edgeops.errors import EdgeOpsError

SPELLINGS = ("torchscript", "dynamo")
_OPSET = {"torchscript": 17, "dynamo": 21}
_IR = {"torchscript": 8, "dynamo": 10}


class _Net:
    """One model being written in one exporter's spelling: names, constants, parameters."""

    def __init__(self, spelling: str, seed: int):
        self.ts = spelling == "torchscript"
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: list = []
        self.scope: list[str] = []
        self.count: Counter = Counter()
        self.folded_by_value: dict = {}
        self.known: dict = {}     # value -> shape that onnx's shape inference cannot derive

    @contextmanager
    def sub(self, path: str):
        """Enter module ``path``, which names parameters and TorchScript scopes: "/" separates
        modules that each run (a Sequential and its child: "layer1/0"), "." stays within one
        (a ModuleList's child, which TorchScript shows as one scope: "layer.0")."""
        parts = path.split("/")
        self.scope += parts
        try:
            yield
        finally:
            del self.scope[-len(parts):]

    def _uniq(self, base: str) -> str:
        k = self.count[base]
        self.count[base] += 1
        return base if k == 0 else f"{base}_{k}"

    def op(self, op_type: str, inputs, n_out: int = 1, **attrs):
        if self.ts:
            path = []        # torch's scopes: a numbered child shows as its parent's name + ".0"
            for part in self.scope:
                path.append(f"{path[-1]}.{part}" if part.isdigit() and path else part)
            name = self._uniq("/" + "".join(p + "/" for p in path) + op_type)
            outs = [f"{name}_output_{i}" for i in range(n_out)]
        else:
            name = self._uniq(f"node_{op_type}")
            # FX value names: a multi-output op's values are its getitems
            outs = ([self._uniq(op_type.lower())] if n_out == 1 else
                    [self._uniq("getitem") for _ in range(n_out)])
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=name, **attrs))
        return outs[0] if n_out == 1 else outs

    def _init(self, name: str, a: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(a, name))
        return name

    def param(self, leaf: str, a) -> str:
        return self._init(".".join(self.scope + [leaf]), np.asarray(a, np.float32))

    def const(self, value, dtype=np.float32) -> str:
        """A scalar or shape operand: a Constant node (TorchScript) or an initializer (dynamo)."""
        a = np.asarray(value, dtype)
        if self.ts:
            return self.op("Constant", [], value=numpy_helper.from_array(a))
        return self._init(self._uniq("val"), a)

    def folded(self, a, consumer: str) -> str:
        """A value the exporter computed from parameters or shapes (W^T, an unsqueezed affine)."""
        a = np.ascontiguousarray(a)
        if not self.ts:
            return self._init(self._uniq("val"), a)
        key = (a.dtype.str, a.shape, a.tobytes())
        first = self.folded_by_value.get(key)
        if first is not None:
            return self.op("Identity", [first])
        self.folded_by_value[key] = self._init(self._uniq(f"onnx::{consumer}"), a)
        return self.folded_by_value[key]

    # -- parameters --------------------------------------------------------------------------
    def randn(self, shape, gain: float = 1.0):
        fan_in = int(np.prod(shape[1:]))
        return (self.rng.standard_normal(shape) * np.sqrt(gain / fan_in)).astype(np.float32)

    def affine(self, c: int):
        return (self.rng.uniform(0.5, 1.5, c).astype(np.float32),
                self.rng.normal(0, 0.1, c).astype(np.float32))

    # -- layers ------------------------------------------------------------------------------
    def conv(self, x, cin, cout, k, stride=1, groups=1, bias=False, leaf="conv", gain=2.0):
        with self.sub(leaf):
            ins = [x, self.param("weight", self.randn((cout, cin // groups, k, k), gain))]
            if bias:
                ins.append(self.param("bias", self.rng.normal(0, 0.1, cout)))
            return self.op("Conv", ins, dilations=[1, 1], group=groups, kernel_shape=[k, k],
                           pads=[k // 2] * 4, strides=[stride] * 2)

    def bn(self, x, c, leaf="bn"):
        with self.sub(leaf):
            w, b = self.affine(c)
            ps = [self.param("weight", w), self.param("bias", b),
                  self.param("running_mean", self.rng.normal(0, 0.1, c)),
                  self.param("running_var", self.rng.uniform(0.5, 1.5, c))]
            extra = {} if self.ts else {"training_mode": 0}
            return self.op("BatchNormalization", [x] + ps, epsilon=1e-5, momentum=0.9, **extra)

    def act(self, x, kind, leaf="act"):
        with self.sub(leaf):
            if kind == "relu":
                return self.op("Relu", [x])
            if kind == "relu6":
                return self.op("Clip", [x, self.const(0.0), self.const(6.0)])
            return self.op("Mul", [x, self.op("Sigmoid", [x])])        # silu

    def cba(self, x, cin, cout, k, stride=1, groups=1, act="relu", names=("conv", "bn", "act")):
        """Conv + BatchNormalization (+ activation), the CNN unit of every model here."""
        y = self.bn(self.conv(x, cin, cout, k, stride, groups, leaf=names[0]), cout, names[1])
        return y if act is None else self.act(y, act, names[2])

    def linear(self, x, cin, cout, leaf, bias=True, rank=3):
        with self.sub(leaf):
            w = self.randn((cout, cin))
            b = self.rng.normal(0, 0.02, cout).astype(np.float32) if bias else None
            if rank == 2:                                  # both exporters: Gemm on 2-D inputs
                ins = [x, self.param("weight", w)] + ([self.param("bias", b)] if bias else [])
                return self.op("Gemm", ins, alpha=1.0, beta=1.0, transB=1)
            y = self.op("MatMul", [x, self.folded(w.T, "MatMul")])
            if not bias:
                return y
            # TorchScript's linear symbolic adds the bias first, torchlib's aten_linear second
            bias = self.param("bias", b)
            return self.op("Add", [bias, y] if self.ts else [y, bias])

    def group_norm(self, x, shape, groups, leaf, eps=1e-6):
        c = shape[1]
        with self.sub(leaf):
            w, b = self.affine(c)
            if not self.ts:
                y = self.op("GroupNormalization", [x, self.param("weight", w), self.param("bias", b)],
                            num_groups=groups, epsilon=eps)
                self.known[y] = shape     # onnx infers no shape through this function op
                return y
            t = self.op("Reshape", [x, self.const([0, groups, -1], np.int64)])
            t = self.op("InstanceNormalization",
                        [t, self.folded(np.ones(groups, np.float32), "InstanceNormalization"),
                         self.folded(np.zeros(groups, np.float32), "InstanceNormalization")],
                        epsilon=eps)
            t = self.op("Reshape", [t, self.const(shape, np.int64)])
            t = self.op("Mul", [t, self.folded(w.reshape(c, 1, 1), "Mul")])
            return self.op("Add", [t, self.folded(b.reshape(c, 1, 1), "Add")])

    def layer_norm(self, x, d, leaf, eps=1e-12):
        with self.sub(leaf):
            w, b = self.affine(d)
            return self.op("LayerNormalization", [x, self.param("weight", w), self.param("bias", b)],
                           axis=-1, epsilon=eps)

    def gelu(self, x):
        if not self.ts:
            return self.op("Gelu", [x], approximate="none")
        e = self.op("Erf", [self.op("Div", [x, self.const(np.sqrt(2.0))])])
        return self.op("Mul", [self.op("Mul", [x, self.op("Add", [e, self.const(1.0)])]),
                               self.const(0.5)])

    def upsample2x(self, x, shape):
        """nn.Upsample(scale_factor=2, mode="nearest")."""
        kw = dict(coordinate_transformation_mode="asymmetric", mode="nearest", nearest_mode="floor")
        if self.ts:
            return self.op("Resize", [x, self.const(np.zeros(0)), self.const([1, 1, 2, 2])],
                           cubic_coeff_a=-0.75, **kw)
        sizes = self.const([shape[0], shape[1], 2 * shape[2], 2 * shape[3]], np.int64)
        return self.op("Resize", [x, "", "", sizes], **kw)

    def pool_flatten(self, x, n, c):
        """adaptive_avg_pool2d(x, 1) then torch.flatten(x, 1)."""
        if self.ts:
            return self.op("Flatten", [self.op("GlobalAveragePool", [x])], axis=1)
        m = self.op("ReduceMean", [x, self.const([-1, -2], np.int64)], keepdims=1)
        return self.op("Reshape", [m, self.const([n, c], np.int64)])

    def model(self, name, inputs: dict, outputs: dict, spelling: str) -> onnx.ModelProto:
        rename = {v: k for k, v in outputs.items()}     # as export's output_names= would name them
        for node in self.nodes:
            node.input[:] = [rename.get(i, i) for i in node.input]
            node.output[:] = [rename.get(o, o) for o in node.output]
        g = helper.make_graph(
            self.nodes, name,
            [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(s)) for k, s in inputs.items()],
            [helper.make_tensor_value_info(k, TensorProto.FLOAT, None) for k in outputs],
            self.inits,
            value_info=[helper.make_tensor_value_info(k, TensorProto.FLOAT, list(s))
                        for k, s in self.known.items()])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", _OPSET[spelling])],
                              ir_version=_IR[spelling], producer_name="edgeops.modelzoo",
                              doc_string=f"{name}, {spelling} exporter spelling")
        inferred = onnx.shape_inference.infer_shapes(m, strict_mode=True).graph
        shapes = {o.name: o.type for o in inferred.output}
        for o in m.graph.output:
            o.type.CopyFrom(shapes[o.name])
        if not self.ts:          # the dynamo exporter writes every intermediate value's type
            del m.graph.value_info[:]
            m.graph.value_info.extend(inferred.value_info)
        return m


# -- networks ------------------------------------------------------------------------------

def _resnet18(n: _Net, b: int, s: int):
    x = n.cba("input", 3, 64, 7, 2, names=("conv1", "bn1", "relu"))
    x = n.op("MaxPool", [x], ceil_mode=0, dilations=[1, 1], kernel_shape=[3, 3], pads=[1] * 4,
             strides=[2, 2])
    cin = 64
    for i, cout in enumerate((64, 128, 256, 512)):
        for j in range(2):
            stride = 2 if i and not j else 1
            with n.sub(f"layer{i + 1}/{j}"):
                h = n.cba(x, cin, cout, 3, stride, names=("conv1", "bn1", "relu"))
                h = n.cba(h, cout, cout, 3, act=None, names=("conv2", "bn2"))
                if stride > 1 or cin != cout:
                    x = n.cba(x, cin, cout, 1, stride, act=None,
                              names=("downsample/0", "downsample/1"))
                x = n.act(n.op("Add", [h, x]), "relu", "relu")
            cin = cout
    logits = n.linear(n.pool_flatten(x, b, 512), 512, 1000, "fc", rank=2)
    return {"input": (b, 3, s, s)}, {"output": logits}


def _mobilenetv2(n: _Net, b: int, s: int):
    x = n.cba("input", 3, 32, 3, 2, act="relu6",
              names=("features/0/0", "features/0/1", "features/0/2"))
    cin, i = 32, 1
    for t, c, reps, stride in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                               (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)):
        for r in range(reps):
            st, hid = stride if r == 0 else 1, cin * t
            with n.sub(f"features/{i}/conv"):
                h, k = x, 0
                if t != 1:                            # expand
                    h, k = n.cba(h, cin, hid, 1, act="relu6", names=("0/0", "0/1", "0/2")), 1
                h = n.cba(h, hid, hid, 3, st, groups=hid, act="relu6",
                          names=(f"{k}/0", f"{k}/1", f"{k}/2"))
                h = n.cba(h, hid, c, 1, act=None, names=(f"{k + 1}", f"{k + 2}"))
            x = n.op("Add", [x, h]) if st == 1 and cin == c else h
            cin, i = c, i + 1
    x = n.cba(x, 320, 1280, 1, act="relu6", names=("features/18/0", "features/18/1",
                                                        "features/18/2"))
    logits = n.linear(n.pool_flatten(x, b, 1280), 1280, 1000, "classifier/1", rank=2)
    return {"input": (b, 3, s, s)}, {"output": logits}


def _yolo_neck(n: _Net, b: int, s: int):
    """YOLOv8s-width neck: SPPF on P5, then the PAN top-down and bottom-up paths of C2f blocks."""
    def cv(x, cin, cout, k=1, stride=1, leaf="cv1"):        # ultralytics' Conv: conv, bn, act
        return n.cba(x, cin, cout, k, stride, act="silu",
                     names=tuple(f"{leaf}/{m}" if leaf else m for m in ("conv", "bn", "act")))

    def c2f(x, cin, cout, leaf):               # n=1 bottleneck, no shortcut (as in the neck)
        c = cout // 2
        with n.sub(leaf):
            a, h = n.op("Split", [cv(x, cin, 2 * c), n.const([c, c], np.int64)], n_out=2, axis=1)
            with n.sub("m.0"):
                m = cv(cv(h, c, c, 3, leaf="cv1"), c, c, 3, leaf="cv2")
            return cv(n.op("Concat", [a, h, m], axis=1), 3 * c, cout, leaf="cv2")

    shapes = {"p3": (b, 128, s, s), "p4": (b, 256, s // 2, s // 2), "p5": (b, 512, s // 4, s // 4)}
    with n.sub("model.9"):                      # SPPF
        y = [cv("p5", 512, 256)]
        for _ in range(3):
            y.append(n.op("MaxPool", [y[-1]], ceil_mode=0, dilations=[1, 1], kernel_shape=[5, 5],
                          pads=[2] * 4, strides=[1, 1]))
        p5 = cv(n.op("Concat", y, axis=1), 1024, 512, leaf="cv2")
    with n.sub("model.10"):
        u = n.upsample2x(p5, shapes["p5"])
    h4 = c2f(n.op("Concat", [u, "p4"], axis=1), 768, 256, "model.12")
    with n.sub("model.13"):
        u = n.upsample2x(h4, shapes["p4"][:1] + (256,) + shapes["p4"][2:])
    o3 = c2f(n.op("Concat", [u, "p3"], axis=1), 384, 128, "model.15")
    with n.sub("model.16"):
        d = cv(o3, 128, 128, 3, 2, leaf=None)
    o4 = c2f(n.op("Concat", [d, h4], axis=1), 384, 256, "model.18")
    with n.sub("model.19"):
        d = cv(o4, 256, 256, 3, 2, leaf=None)
    o5 = c2f(n.op("Concat", [d, p5], axis=1), 768, 512, "model.21")
    return shapes, {"out_p3": o3, "out_p4": o4, "out_p5": o5}


def _unet_block(n: _Net, b: int, s: int, groups: int = 32):
    """A diffusers-style UNet stage: ResNet block, stride-2 conv down, ResNet block, nearest
    upsample + conv, concat with the skip, ResNet block with a 1x1 shortcut."""
    def resblock(x, cin, cout, hw, leaf):
        with n.sub(leaf):
            h = n.act(n.group_norm(x, (b, cin, hw, hw), groups, "norm1"), "silu", "nonlinearity")
            h = n.conv(h, cin, cout, 3, bias=True, leaf="conv1", gain=1.0)
            h = n.act(n.group_norm(h, (b, cout, hw, hw), groups, "norm2"), "silu", "nonlinearity")
            h = n.conv(h, cout, cout, 3, bias=True, leaf="conv2", gain=1.0)
            sc = x if cin == cout else n.conv(x, cin, cout, 1, bias=True, leaf="conv_shortcut",
                                              gain=1.0)
            return n.op("Add", [sc, h])

    skip = resblock("input", 64, 64, s, "down_blocks.0/resnets.0")
    d = n.conv(skip, 64, 64, 3, 2, bias=True, leaf="down_blocks.0/downsamplers.0/conv", gain=1.0)
    d = resblock(d, 64, 128, s // 2, "mid_block/resnets.0")
    with n.sub("up_blocks.0/upsamplers.0"):
        u = n.conv(n.upsample2x(d, (b, 128, s // 2, s // 2)), 128, 128, 3, bias=True, gain=1.0)
    y = resblock(n.op("Concat", [u, skip], axis=1), 192, 64, s, "up_blocks.0/resnets.0")
    return {"input": (b, 64, s, s)}, {"output": y}


def _encoder_block(n: _Net, b: int, s: int, d: int = 768, heads: int = 12, ff: int = 3072):
    """A BERT-base layer (post-LayerNorm, GELU MLP); ViT's differs only in where the norms sit."""
    hd = d // heads
    with n.sub("encoder/layer.0/attention"):
        with n.sub("self"):
            def split(leaf, perm=(0, 2, 1, 3)):     # view(b, s, heads, hd).permute(0, 2, 1, 3)
                t = n.linear("input", d, d, leaf)
                t = n.op("Reshape", [t, n.const([b, s, heads, hd], np.int64)])
                return n.op("Transpose", [t], perm=list(perm))
            # TorchScript's peephole merges k's permute and transpose(-1, -2) into one Transpose
            q = split("query")
            k = split("key", (0, 2, 3, 1) if n.ts else (0, 2, 1, 3))
            v = split("value")
            if n.ts:
                att = n.op("Div", [n.op("MatMul", [q, k]), n.const(np.sqrt(hd))])
            else:                        # torchlib's scaled_dot_product_attention
                sq = n.const(np.sqrt(1 / np.sqrt(hd)))
                att = n.op("MatMul", [n.op("Mul", [q, sq]),
                                      n.op("Mul", [n.op("Transpose", [k], perm=[0, 1, 3, 2]), sq])])
            ctx = n.op("MatMul", [n.op("Softmax", [att], axis=-1), v])
            ctx = n.op("Transpose", [ctx], perm=[0, 2, 1, 3])
            ctx = n.op("Reshape", [ctx, n.const([b, s, d], np.int64)])
        with n.sub("output"):
            x = n.layer_norm(n.op("Add", [n.linear(ctx, d, d, "dense"), "input"]), d, "LayerNorm")
    with n.sub("encoder/layer.0/intermediate"):
        h = n.gelu(n.linear(x, d, ff, "dense"))
    with n.sub("encoder/layer.0/output"):
        y = n.layer_norm(n.op("Add", [n.linear(h, ff, d, "dense"), x]), d, "LayerNorm")
    return {"input": (b, s, d)}, {"output": y}


def _swiglu_mlp(n: _Net, b: int, s: int, d: int = 768, hidden: int = 2048):
    """LlamaMLP: down(silu(gate(x)) * up(x)), no biases."""
    with n.sub("mlp"):
        g = n.act(n.linear("input", d, hidden, "gate_proj", bias=False), "silu", "act_fn")
        u = n.linear("input", d, hidden, "up_proj", bias=False)
        y = n.linear(n.op("Mul", [g, u]), hidden, d, "down_proj", bias=False)
    return {"input": (b, s, d)}, {"output": y}


# name -> (builder, default size: image side, P3 side or sequence length, what size must divide by)
_MODELS = {
    "resnet18": (_resnet18, 224, 32),
    "mobilenetv2": (_mobilenetv2, 224, 32),
    "yolo_neck": (_yolo_neck, 80, 8),
    "unet_block": (_unet_block, 64, 2),
    "encoder_block": (_encoder_block, 128, 1),
    "swiglu_mlp": (_swiglu_mlp, 128, 1),
}


def names() -> list[str]:
    return list(_MODELS)


def build(name: str, spelling: str = "torchscript", *, batch: int = 1, size: int | None = None,
          seed: int = 0) -> onnx.ModelProto:
    """Model ``name`` in ``spelling``; ``size`` replaces the default spatial side (resnet18,
    mobilenetv2: 224; yolo_neck: P3's 80, P4 and P5 are 1/2 and 1/4; unet_block: 64) or sequence
    length (encoder_block, swiglu_mlp: 128). Same arguments, same bytes."""
    if name not in _MODELS:
        raise EdgeOpsError(f"no zoo model {name!r}; have: {', '.join(_MODELS)}")
    if spelling not in SPELLINGS:
        raise EdgeOpsError(f"spelling must be one of {', '.join(SPELLINGS)}, got {spelling!r}")
    fn, default, mult = _MODELS[name]
    s = default if size is None else int(size)
    if s <= 0 or s % mult or batch < 1:
        raise EdgeOpsError(f"{name}: size must be a positive multiple of {mult} and batch >= 1, "
                           f"got size={size!r}, batch={batch!r}")
    n = _Net(spelling, seed)
    ins, outs = fn(n, batch, s)
    return n.model(name, ins, outs, spelling)


def parse(spec: str) -> tuple[str, str, int | None]:
    """``"unet_block@dynamo:32"`` -> ("unet_block", "dynamo", 32); the spelling defaults to
    TorchScript, the size to the model's own (None)."""
    spec, _, size = spec.partition(":")
    name, _, spelling = spec.partition("@")
    try:
        return name, spelling or "torchscript", int(size) if size else None
    except ValueError:
        raise EdgeOpsError(f"zoo model {spec!r}: size must be an integer, got {size!r}") from None


def sample_inputs(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """N(0, 1) float32 arrays for the graph inputs (every zoo input is float32 with static dims)."""
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    return {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim])
            .astype(np.float32) for i in model.graph.input if i.name not in inits}
