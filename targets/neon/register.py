"""Registry glue: every NEON kernel registered for (op, "neon", dtypes, predicate, priority).

Each adapter follows the registry convention ``fn(inputs, attrs, tiling=None) -> list[ndarray]``
with ``attrs`` already parsed by the op definition. Predicates look only at what a graph node
knows before running (dtypes, static shapes, attributes) and return True or the reason the
kernel does not apply — that reason is what the placement table prints.
"""
from __future__ import annotations

from functools import partial

import numpy as np

from edgeops.registry import register_kernel
from edgeops.targets.neon import chooser, eltwise, epilogue as ep, native, norms, pool
from edgeops.targets.neon.conv import ConvGeom, conv2d_im2col, geom_from_attrs
from edgeops.targets.neon.depthwise import conv2d_depthwise
from edgeops.targets.neon.gemm import gemm, matmul
from edgeops.targets.neon.qgemm import qconv2d, qgemm, requant_multiplier
from edgeops.targets.neon.swiglu import swiglu
from edgeops.targets.neon.winograd import conv2d_winograd

T = "neon"
FP32 = ("fp32",)
Q8 = ("uint8", "int8")


def _static(shape) -> bool:
    return shape is not None and all(isinstance(d, (int, np.integer)) and d >= 0 for d in shape)


def _geom(node) -> ConvGeom | str:
    xs, ws = node.input_shapes[0], node.input_shapes[1 if node.op_type != "QLinearConv" else 3]
    if not (_static(xs) and _static(ws)):
        return f"needs static X and W shapes, got {xs} and {ws}"
    if len(xs) != 4:
        return f"only 2-D convolutions (4-D X); X is {xs}"
    try:
        return geom_from_attrs(xs, ws, node.attrs)
    except Exception as e:  # noqa: BLE001 - a predicate reports, it does not raise
        return str(e)


def _act_of(attrs) -> tuple[int, float, float]:
    """ConvBnAct's activation attributes as an epilogue triple (none for plain Conv)."""
    name = attrs.get("activation", "none")
    if name == "clip":
        return ep.activation("clip", attrs.get("clip_min"), attrs.get("clip_max"))
    return ep.activation(name)


# ---- GEMM / MatMul --------------------------------------------------------------------------

@register_kernel("Gemm", T, dtypes=FP32, name="neon.gemm_packed", priority=10,
                 plans=native.warmer("neon.gemm"),
                 native=lambda xs, attrs, *, threads, held, tiling=None, **_:
                 native.gemm_node_step(xs, attrs, held, threads, tiling))
def _gemm(inputs, attrs, tiling=None):
    """Packed fp32 GEMM (Goto/BLIS), C as a fused epilogue."""
    a, b = inputs[0], inputs[1]
    c = inputs[2] if len(inputs) > 2 else None
    return [gemm(a, b, c, alpha=attrs["alpha"], beta=attrs["beta"], trans_a=bool(attrs["transA"]),
                 trans_b=bool(attrs["transB"]), tiling=tiling)]


@register_kernel("MatMul", T, dtypes=FP32, name="neon.matmul_packed", priority=10,
                 plans=native.warmer("neon.gemm"),
                 native=lambda xs, attrs, *, threads, held, tiling=None, **_:
                 native.matmul_step(xs[0], xs[1], held, threads, tiling))
def _matmul(inputs, attrs, tiling=None):
    """Packed fp32 batched MatMul (numpy broadcasting)."""
    return [matmul(inputs[0], inputs[1], tiling=tiling)]


# ---- convolutions -----------------------------------------------------------------------------

def _depthwise_pred(node):
    g = _geom(node)
    if isinstance(g, str):
        return g
    return True if g.is_depthwise else f"not depthwise (group={g.group}, C={g.c})"


def _winograd_pred(node):
    g = _geom(node)
    if isinstance(g, str):
        return g
    if chooser.winograd.applies(g) is not True:
        return chooser.winograd.applies(g)
    pick, why = chooser.choose(g, "host")
    return True if pick == chooser.WINOGRAD else f"chooser prefers {pick}: {why}"


def _im2col_pred(node):
    g = _geom(node)
    return g if isinstance(g, str) else True


def _conv_inputs(inputs):
    return inputs[0], inputs[1], (inputs[2] if len(inputs) > 2 else None)


def _conv_native(kind):
    def make(xs, attrs, *, threads, held, tiling=None, **_):
        x, w, b = _conv_inputs(xs)
        if x is None or w is None or x.ndim != 4 or w.ndim != 4:
            return "X and W must be 4-D"
        return native.conv_step(x, w, b, geom_from_attrs(x.shape, w.shape, attrs),
                                _act_of(attrs), held, threads, kind, tiling)
    return make


def _register_conv(op: str, suffix: str, doc: str):
    @register_kernel(op, T, dtypes=FP32, predicate=_depthwise_pred, priority=30,
                     name=f"neon.{suffix}_depthwise", doc=f"{doc}: direct depthwise",
                     plans=native.warmer("neon.depthwise"), native=_conv_native("depthwise"))
    def _dw(inputs, attrs, tiling=None):
        x, w, b = _conv_inputs(inputs)
        return [conv2d_depthwise(x, w, b, geom_from_attrs(x.shape, w.shape, attrs), _act_of(attrs))]

    @register_kernel(op, T, dtypes=FP32, predicate=_winograd_pred, priority=20,
                     name=f"neon.{suffix}_winograd", doc=f"{doc}: Winograd F(2x2,3x3)",
                     plans=native.warmer("neon.winograd"), native=_conv_native("winograd"))
    def _wino(inputs, attrs, tiling=None):
        x, w, b = _conv_inputs(inputs)
        return [conv2d_winograd(x, w, b, geom_from_attrs(x.shape, w.shape, attrs),
                                _act_of(attrs), tiling=tiling)]

    @register_kernel(op, T, dtypes=FP32, predicate=_im2col_pred, priority=10,
                     name=f"neon.{suffix}_im2col", doc=f"{doc}: im2col + packed GEMM",
                     plans=native.warmer("neon.conv_im2col", "neon.gemm"),
                     native=_conv_native("im2col"))
    def _i2c(inputs, attrs, tiling=None):
        x, w, b = _conv_inputs(inputs)
        return [conv2d_im2col(x, w, b, geom_from_attrs(x.shape, w.shape, attrs),
                              _act_of(attrs), tiling=tiling)]


_register_conv("Conv", "conv", "fp32 Conv2D")
_register_conv("ai.edgeops::ConvBnAct", "conv_bn_act", "ConvBnAct, activation fused in the store")


# ---- memory-bound chains ------------------------------------------------------------------

@register_kernel("ai.edgeops::SwiGLU", T, dtypes=FP32, name="neon.swiglu_fused", priority=10,
                 plans=native.warmer("neon.swiglu"),
                 native=lambda xs, attrs, *, threads, held, tiling=None, **_:
                 native.swiglu_step(xs, held, threads, tiling))
def _swiglu(inputs, attrs, tiling=None):
    """SwiGLU: gate and up from one packed [W1|W2] micro-kernel, silu*up in the store."""
    x, w1, w2 = inputs[:3]
    b1 = inputs[3] if len(inputs) > 3 else None
    b2 = inputs[4] if len(inputs) > 4 else None
    return [swiglu(x, w1, w2, b1, b2, tiling=tiling)]


def _gelu(attrs):
    """LayerNormGelu's activation (None for a plain LayerNormalization)."""
    if "approximate" not in attrs:
        return None
    return "gelu_tanh" if attrs["approximate"] == "tanh" else "gelu"


def _norm_native(stage, xs, attrs, *, threads, state, held, **_):
    """A lone norm node as a one-stage chain's step (its Python path runs that chain too)."""
    ch = _one_chain(xs, attrs, state, held, stage)
    if isinstance(ch, str):
        return ch
    return ch.native_step(None, threads, np.ascontiguousarray(xs[0]))


def _one_chain(xs, attrs, state, held, stage):
    """The node's one-stage :class:`~edgeops.targets.neon.norms.Chain` for X's shape, kept in
    the node's state when its parameters are held constants (the same every call)."""
    if not all(i in held for i in range(1, len(xs)) if xs[i] is not None):
        return "parameters are runtime inputs"
    return _chain_of(xs, attrs, state, stage)


def _chain_of(xs, attrs, state, stage):
    key = ("chain", xs[0].shape)
    ch = state.get(key)
    if ch is None:
        ch = state[key] = norms.Chain([stage([None, *xs[1:]], attrs, xs[0].shape)])
    return ch


def _norm_node(xs, attrs, state, stage, direct, held=None):
    """A lone norm node: its one-stage chain when the parameters are held constants (the same
    every call: the chain keeps them; what its native step runs, so the same bits either way),
    else ``direct()``."""
    if (state is not None and held is not None and xs[0].dtype == np.float32
            and all(i in held for i in range(1, len(xs)) if xs[i] is not None)):
        return [_chain_of(xs, attrs, state, stage)(np.ascontiguousarray(xs[0]))[-1]]
    return [direct()]


def _ln_stage(inputs, attrs, shape):
    b = inputs[2] if len(inputs) > 2 else None
    return norms.layernorm_stage(shape, inputs[1], b, attrs["axis"], attrs["epsilon"], _gelu(attrs))


def _gn_stage(inputs, attrs, shape):
    return norms.groupnorm_stage(shape, inputs[1], inputs[2], attrs["num_groups"],
                                 attrs["epsilon"], attrs.get("activation"))


@register_kernel("LayerNormalization", T, dtypes=FP32, name="neon.layernorm", priority=10,
                 stage=_ln_stage, plans=native.warmer("neon.norm_chain"),
                 native=partial(_norm_native, _ln_stage))
def _layernorm(inputs, attrs, tiling=None, state=None, held=None):
    """LayerNorm, one read for statistics and one fused normalise pass."""
    b = inputs[2] if len(inputs) > 2 else None
    return _norm_node(inputs, attrs, state, _ln_stage, lambda: norms.layernorm(
        inputs[0], inputs[1], b, attrs["axis"], attrs["epsilon"]), held)


@register_kernel("ai.edgeops::LayerNormGelu", T, dtypes=FP32, name="neon.layernorm_gelu",
                 priority=10, stage=_ln_stage, plans=native.warmer("neon.norm_chain"),
                 native=partial(_norm_native, _ln_stage))
def _layernorm_gelu(inputs, attrs, tiling=None, state=None, held=None):
    """LayerNorm + GELU (erf or tanh) in one pass."""
    b = inputs[2] if len(inputs) > 2 else None
    return _norm_node(inputs, attrs, state, _ln_stage, lambda: norms.layernorm(
        inputs[0], inputs[1], b, attrs["axis"], attrs["epsilon"], _gelu(attrs)), held)


@register_kernel("GroupNormalization", T, dtypes=FP32, name="neon.groupnorm", priority=10,
                 stage=_gn_stage, plans=native.warmer("neon.norm_chain"),
                 native=partial(_norm_native, _gn_stage))
def _groupnorm(inputs, attrs, tiling=None, state=None, held=None):
    """GroupNorm, per (image, group) statistics then one fused pass."""
    return _norm_node(inputs, attrs, state, _gn_stage, lambda: norms.groupnorm(
        inputs[0], inputs[1], inputs[2], attrs["num_groups"], attrs["epsilon"]), held)


@register_kernel("ai.edgeops::GroupNormAct", T, dtypes=FP32, name="neon.groupnorm_act",
                 priority=10, stage=_gn_stage, plans=native.warmer("neon.norm_chain"),
                 native=partial(_norm_native, _gn_stage))
def _groupnorm_act(inputs, attrs, tiling=None, state=None, held=None):
    """GroupNorm + SiLU in one pass."""
    return _norm_node(inputs, attrs, state, _gn_stage, lambda: norms.groupnorm(
        inputs[0], inputs[1], inputs[2], attrs["num_groups"], attrs["epsilon"],
        attrs["activation"]), held)


@register_kernel("Softmax", T, dtypes=FP32, name="neon.softmax", priority=10,
                 plans=native.warmer("neon.softmax"),
                 native=lambda xs, attrs, *, threads, **_: native.softmax_step(
                     xs[0], attrs["axis"], threads))
def _softmax(inputs, attrs, tiling=None):
    """Softmax along one axis, vectorised exp."""
    return [norms.softmax(inputs[0], attrs["axis"])]


def _pool_pred(node):
    xs = node.input_shapes[0]
    if xs is not None and len(xs) != 4:
        return f"only 2-D pooling (4-D X); X is {xs}"
    return True


@register_kernel("MaxPool", T, dtypes=FP32, predicate=_pool_pred, name="neon.maxpool", priority=10,
                 plans=native.warmer("neon.pool"), native=lambda xs, attrs, *, threads, **_:
                 native.pool_step(xs[0], "max", attrs, threads))
def _maxpool(inputs, attrs, tiling=None):
    """2-D max pooling (pads, strides, dilations, ceil_mode)."""
    return [pool.pool_from_attrs(inputs[0], "max", attrs)]


@register_kernel("AveragePool", T, dtypes=FP32, predicate=_pool_pred, name="neon.avgpool",
                 priority=10, plans=native.warmer("neon.pool"),
                 native=lambda xs, attrs, *, threads, **_:
                 native.pool_step(xs[0], "avg", attrs, threads))
def _avgpool(inputs, attrs, tiling=None):
    """2-D average pooling (count_include_pad, ceil_mode)."""
    return [pool.pool_from_attrs(inputs[0], "avg", attrs)]


@register_kernel("GlobalAveragePool", T, dtypes=FP32, name="neon.global_avgpool", priority=10,
                 plans=native.warmer("neon.gap"),
                 native=lambda xs, attrs, *, threads, **_: native.gap_step(xs[0], threads))
def _gap(inputs, attrs, tiling=None):
    """Mean over the spatial axes."""
    return [pool.global_avgpool(inputs[0])]


def _register_unary(op: str, steps):
    def _native(xs, attrs, *, threads, **_):
        return native.act_step(xs[0], steps(attrs), threads)

    @register_kernel(op, T, dtypes=FP32, name=f"neon.{op.lower()}", priority=10,
                     doc=f"{op} as a one-pass activation chain", plans=native.warmer("neon.act"),
                     native=_native)
    def _unary(inputs, attrs, tiling=None):
        return [eltwise.chain(inputs[0], steps(attrs))]


_register_unary("Relu", lambda a: ["relu"])
_register_unary("Sigmoid", lambda a: ["sigmoid"])
_register_unary("Tanh", lambda a: ["tanh"])
_register_unary("HardSwish", lambda a: ["hardswish"])
_register_unary("LeakyRelu", lambda a: [("leakyrelu", a["alpha"])])
_register_unary("HardSigmoid", lambda a: [("hardsigmoid", a["alpha"], a["beta"])])
_register_unary("Gelu", lambda a: ["gelu_tanh" if a["approximate"] == "tanh" else "gelu"])


@register_kernel("Clip", T, dtypes=FP32, name="neon.clip", priority=10)
def _clip(inputs, attrs, tiling=None):
    """Clip(min, max) in one pass (an omitted bound does not bound)."""
    lo = inputs[1] if len(inputs) > 1 and inputs[1] is not None else None
    hi = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
    lo = -np.inf if lo is None else float(np.asarray(lo).reshape(()))
    hi = np.inf if hi is None else float(np.asarray(hi).reshape(()))
    if lo > hi:  # ONNX: every element becomes max
        return [np.full_like(inputs[0], hi)]
    return [eltwise.chain(inputs[0], [("clip", lo, hi)])]


def _register_binary(op: str):
    def _native(xs, attrs, *, threads, held, **_):
        return native.binary_step(xs[0], xs[1], op, held, threads)

    @register_kernel(op, T, dtypes=FP32, name=f"neon.{op.lower()}", priority=10,
                     doc=f"{op} with broadcasting (fast path: same shape, scalar, per-channel)",
                     plans=native.warmer("neon.binary"), native=_native)
    def _bin(inputs, attrs, tiling=None):
        return [eltwise.binary(inputs[0], inputs[1], op)]


for _op in ("Add", "Sub", "Mul", "Div"):
    _register_binary(_op)


@register_kernel("Identity", T, dtypes=FP32, name="neon.identity", priority=10,
                 plans=native.warmer("neon.copy"),
                 native=lambda xs, attrs, **_: native.copy_step(xs[0]))
def _identity(inputs, attrs, tiling=None):
    """Identity: one copy (the output is a new tensor)."""
    return [np.array(inputs[0], np.float32, copy=True)]


# ---- INT8 (ONNX QLinear* operators; requantisation per edgeops.ops.qarith) ------------------

def _scalar_zp(t, who):
    from edgeops.errors import EdgeOpsError
    if t is None:
        return 0
    arr = np.asarray(t).reshape(-1)
    if arr.size > 1 and np.any(arr != arr[0]):
        raise EdgeOpsError(f"neon int8: {who} zero point must be per-tensor (weights symmetric "
                           f"per channel), got {arr.size} different values")
    return int(arr[0]) if arr.size else 0


@register_kernel("QLinearConv", T, dtypes=Q8, predicate=_im2col_pred, name="neon.qlinearconv",
                 priority=10)
def _qconv(inputs, attrs, tiling=None):
    """INT8 Conv2D: im2col (zero-point padding) + int16-pair GEMM, int32 acc, requantised."""
    x, xs, xz, w, ws, wz, ys, yz = inputs[:8]
    b = inputs[8] if len(inputs) > 8 else None
    g = geom_from_attrs(x.shape, w.shape, attrs)
    mult = requant_multiplier(np.asarray(xs).reshape(()), np.asarray(ws),
                              np.asarray(ys).reshape(()))
    if _scalar_zp(wz, "W") != 0:
        from edgeops.errors import EdgeOpsError
        raise EdgeOpsError("neon int8 conv: weights must be symmetric (zero point 0)")
    yz = np.asarray(yz)
    return [qconv2d(x, _scalar_zp(xz, "X"), w, b, g, mult, int(yz.reshape(())), yz.dtype,
                    tiling=tiling)]


@register_kernel("QLinearMatMul", T, dtypes=Q8, name="neon.qlinearmatmul", priority=10)
def _qmatmul(inputs, attrs, tiling=None):
    """INT8 MatMul (2-D, or batched over leading axes of A)."""
    a, as_, az, b, bs, bz, ys, yz = inputs[:8]
    yz = np.asarray(yz)
    mult = requant_multiplier(np.asarray(as_).reshape(()), np.asarray(bs),
                              np.asarray(ys).reshape(()))
    a2 = a.reshape(-1, a.shape[-1])
    y = qgemm(a2, b, a_zero_point=_scalar_zp(az, "A"), b_zero_point=_scalar_zp(bz, "B"),
              multiplier=mult, y_zero_point=int(yz.reshape(())), out_dtype=yz.dtype)
    return [y.reshape(a.shape[:-1] + (b.shape[-1],))]
