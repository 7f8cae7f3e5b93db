"""Registry glue: the cuda kernels under target "cuda", each with the CPU fallback.

Adapters follow ``fn(inputs, attrs, tiling=None) -> list[ndarray]`` (attrs parsed by the op
definition). The kernel modules (which import ``numba.cuda``) load on the first call, so
registering costs nothing. Without a GPU each adapter runs the best applicable ``neon`` kernel,
else the numpy reference, through ``device.note_fallback`` (one warning, every call counted).
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from edgeops.registry import REFERENCE, kernels, register_kernel
from edgeops.targets.cuda import device as dev

T = "cuda"
FP32 = ("fp32",)
_DT = {np.dtype(np.float32): "fp32", np.dtype(np.float64): "fp64", np.dtype(np.float16): "fp16",
       np.dtype(np.int8): "int8", np.dtype(np.uint8): "uint8", np.dtype(np.int32): "int32"}


def _fallback(name: str, op: str, inputs, attrs, tiling):
    domain, _, op_type = op.rpartition("::")
    node = SimpleNamespace(op_type=op_type, domain=domain, name=name, attrs=attrs,
                           input_dtypes=[None if x is None else _DT.get(np.asarray(x).dtype)
                                         for x in inputs],
                           input_shapes=[None if x is None else tuple(np.shape(x)) for x in inputs])
    for target in ("neon", REFERENCE):
        for k in kernels(op, target):
            if k.applies(node)[0]:
                dev.note_fallback(name, k.name)
                if target == REFERENCE:
                    return k.fn(list(inputs), attrs)
                return k.fn(list(inputs), attrs, tiling=tiling)
    raise RuntimeError(f"{name}: no GPU and no neon or reference kernel for {op}")


def cuda_kernel(op: str, name: str, *, priority: int = 10, predicate=None, doc: str = ""):
    """``register_kernel`` for target cuda, wrapping ``fn`` with the no-GPU fallback."""
    def deco(fn):
        def run(inputs, attrs, tiling=None):
            if not dev.gpu_present():
                return _fallback(name, op, inputs, attrs, tiling)
            return fn(inputs, attrs, tiling)
        run.__name__ = fn.__name__
        run.__doc__ = fn.__doc__
        run.gpu_fn = fn
        register_kernel(op, T, dtypes=FP32, predicate=predicate, priority=priority, name=name,
                        doc=doc or (fn.__doc__ or "").strip().split("\n")[0])(run)
        return run
    return deco


def _cfg(m, n, tiling, operands_b=1):
    from edgeops.targets.cuda.launch import choose
    return choose(m, n, tiling, None, operands_b)


def _static(shape) -> bool:
    return shape is not None and all(isinstance(d, (int, np.integer)) and d >= 0 for d in shape)


# ---- GEMM / MatMul / SwiGLU -----------------------------------------------------------------

def _gemm_common(inputs, attrs, tiling, naive):
    from edgeops.targets.cuda import gemm
    a, b = inputs[0], inputs[1]
    c = inputs[2] if len(inputs) > 2 else None
    m = a.shape[1] if attrs["transA"] else a.shape[0]
    n = b.shape[0] if attrs["transB"] else b.shape[1]
    return [gemm.gemm(a, b, c, alpha=attrs["alpha"], beta=attrs["beta"],
                      trans_a=bool(attrs["transA"]), trans_b=bool(attrs["transB"]),
                      cfg=None if naive else _cfg(m, n, tiling), naive=naive)]


@cuda_kernel("Gemm", "cuda.gemm_tiled", priority=20)
def _gemm_tiled(inputs, attrs, tiling=None):
    """fp32 GEMM, shared-memory tiled (block tile from the tiling), bias fused."""
    return _gemm_common(inputs, attrs, tiling, naive=False)


@cuda_kernel("Gemm", "cuda.gemm_naive", priority=5)
def _gemm_naive(inputs, attrs, tiling=None):
    """fp32 GEMM, one thread per output, no shared memory (the baseline)."""
    return _gemm_common(inputs, attrs, tiling, naive=True)


@cuda_kernel("MatMul", "cuda.matmul_tiled", priority=20)
def _matmul(inputs, attrs, tiling=None):
    """fp32 batched MatMul, shared-memory tiled, batch along gridDim.z."""
    from edgeops.targets.cuda import gemm
    a, b = inputs
    m = a.shape[-2] if a.ndim > 1 else 1
    n = b.shape[-1] if b.ndim > 1 else 1
    return [gemm.matmul(a, b, cfg=_cfg(m, n, tiling))]


@cuda_kernel("ai.edgeops::SwiGLU", "cuda.swiglu")
def _swiglu(inputs, attrs, tiling=None):
    """Fused SwiGLU: both projections share the staged X slice; silu * up in the store."""
    from edgeops.targets.cuda import gemm
    x, w1, w2 = inputs[:3]
    b1 = inputs[3] if len(inputs) > 3 else None
    b2 = inputs[4] if len(inputs) > 4 else None
    m = int(np.prod(x.shape[:-1]))
    return [gemm.swiglu(x, w1, w2, b1, b2, cfg=_cfg(m, w1.shape[1], tiling, operands_b=2))]


# ---- convolutions ---------------------------------------------------------------------------

def _conv_pred(node):
    xs, ws = node.input_shapes[0], node.input_shapes[1]
    if not (_static(xs) and _static(ws)):
        return f"needs static X and W shapes, got {xs} and {ws}"
    if len(xs) != 4:
        return f"only 2-D convolutions (4-D X); X is {xs}"
    return True


def _conv_common(inputs, attrs, tiling):
    from edgeops.targets.cuda import conv
    from edgeops.targets.cuda.eltwise import activation
    x, w = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    g = conv.geom(x.shape, w.shape, attrs)
    name = attrs.get("activation", "none")
    ep = activation(name, attrs.get("clip_min"), attrs.get("clip_max"))
    return [conv.conv2d(x, w, b, g, ep, cfg=_cfg(g.k // g.group, g.n * g.oh * g.ow, tiling))]


@cuda_kernel("Conv", "cuda.conv_implicit_gemm", predicate=_conv_pred)
def _conv(inputs, attrs, tiling=None):
    """fp32 Conv2D as implicit GEMM (no im2col buffer), bias fused."""
    return _conv_common(inputs, attrs, tiling)


@cuda_kernel("ai.edgeops::ConvBnAct", "cuda.conv_bn_act_implicit_gemm", predicate=_conv_pred)
def _conv_bn_act(inputs, attrs, tiling=None):
    """ConvBnAct as implicit GEMM, bias + activation fused in the store."""
    return _conv_common(inputs, attrs, tiling)


# ---- norms, softmax -------------------------------------------------------------------------

@cuda_kernel("LayerNormalization", "cuda.layernorm")
def _layernorm(inputs, attrs, tiling=None):
    """LayerNormalization, one block per row, shared-memory reductions."""
    from edgeops.targets.cuda import norms
    x, s = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    return [norms.layernorm(x, s, b, axis=attrs["axis"], epsilon=attrs["epsilon"])]


@cuda_kernel("ai.edgeops::LayerNormGelu", "cuda.layernorm_gelu")
def _layernorm_gelu(inputs, attrs, tiling=None):
    """LayerNorm + GELU fused: one read, one write."""
    from edgeops.targets.cuda import norms
    from edgeops.targets.cuda.eltwise import GELU, GELU_TANH
    x, s = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    code = GELU_TANH if attrs["approximate"] == "tanh" else GELU
    return [norms.layernorm(x, s, b, axis=attrs["axis"], epsilon=attrs["epsilon"], code=code)]


@cuda_kernel("GroupNormalization", "cuda.groupnorm")
def _groupnorm(inputs, attrs, tiling=None):
    """GroupNormalization, one block per (image, group)."""
    from edgeops.targets.cuda import norms
    x, s, b = inputs
    return [norms.groupnorm(x, s, b, num_groups=attrs["num_groups"], epsilon=attrs["epsilon"])]


@cuda_kernel("ai.edgeops::GroupNormAct", "cuda.groupnorm_act")
def _groupnorm_act(inputs, attrs, tiling=None):
    """GroupNorm + SiLU fused."""
    from edgeops.targets.cuda import norms
    from edgeops.targets.cuda.eltwise import NONE, SILU
    x, s, b = inputs
    code = SILU if attrs["activation"] == "silu" else NONE
    return [norms.groupnorm(x, s, b, num_groups=attrs["num_groups"], epsilon=attrs["epsilon"],
                            code=code)]


@cuda_kernel("Softmax", "cuda.softmax")
def _softmax(inputs, attrs, tiling=None):
    """Softmax along one axis, one block per row (max and sum block reductions)."""
    from edgeops.targets.cuda import norms
    return [norms.softmax(inputs[0], axis=attrs["axis"])]


# ---- elementwise activations ----------------------------------------------------------------

def _register_unary(op: str, act_of):
    @cuda_kernel(op, f"cuda.{op.lower()}", doc=f"{op}, grid-stride elementwise kernel")
    def _unary(inputs, attrs, tiling=None):
        from edgeops.targets.cuda import eltwise
        return [eltwise.chain(inputs[0], [eltwise.activation(*act_of(attrs))])]
    return _unary


_register_unary("Relu", lambda a: ("relu",))
_register_unary("Sigmoid", lambda a: ("sigmoid",))
_register_unary("Tanh", lambda a: ("tanh",))
_register_unary("HardSwish", lambda a: ("hardswish",))
_register_unary("LeakyRelu", lambda a: ("leaky_relu", a["alpha"]))
_register_unary("Gelu", lambda a: ("gelu_tanh" if a["approximate"] == "tanh" else "gelu",))
