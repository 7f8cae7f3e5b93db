"""Iteration spaces of ``edgeops.graph`` nodes.

``space_from_node(node)`` returns a :class:`~edgeops.tiling.spaces.Space`, or a string saying why
the node has none (a layout op, a non-2-D convolution, a dynamic shape, an unsupported dtype).
"""
from __future__ import annotations

import math

import numpy as np

from edgeops.errors import EdgeOpsError
from edgeops.tiling.spaces import Space, make_space

ELTWISE = {"Relu", "Sigmoid", "Tanh", "Gelu", "Erf", "Clip", "LeakyRelu", "HardSigmoid",
           "HardSwish", "Add", "Sub", "Mul", "Div", "BatchNormalization", "Identity", "Dropout",
           "Pow", "Sqrt", "Exp", "Neg", "Abs", "Max", "Min"}
_DT = {"fp32": "fp32", "fp16": "fp16", "int8": "int8", "uint8": "int8"}


def _prod(xs) -> int:
    return int(math.prod(xs))


def _static(shape) -> bool:
    return shape is not None and all(isinstance(d, int) and d > 0 for d in shape)


def space_from_node(node) -> Space | str:
    op = node.op_type
    shapes = [s for s in node.input_shapes]
    outs = node.output_shapes
    if not shapes or shapes[0] is None or not all(_static(s) for s in shapes if s is not None):
        return f"{op}: input shapes are not all static ({shapes}); pass --shapes"
    dt = _DT.get(next((d for d in node.input_dtypes if d), None) or "")
    if dt is None:
        return f"{op}: dtype {node.input_dtypes[0]} has no tiled kernel (fp32, fp16, int8)"
    try:
        return _space(node, op, shapes, outs, dt)
    except EdgeOpsError as e:
        return f"{op}: {e}"


def _space(node, op, shapes, outs, dt) -> Space | str:
    a = node.attrs
    if op == "Gemm":
        x, w = shapes[0], shapes[1]
        m, k = (x[1], x[0]) if a.get("transA") else (x[0], x[1])
        n = w[0] if a.get("transB") else w[1]
        bias = int(len(node.inputs) > 2 and bool(node.inputs[2]))
        return make_space("gemm", M=m, N=n, K=k, dtype=dt, bias=bias)
    if op == "MatMul":
        x, w = list(shapes[0]), list(shapes[1])
        x = [1] + x if len(x) == 1 else x
        bshared = int(len(w) <= 2)
        w = w + [1] if len(w) == 1 else w
        batch = _prod(np.broadcast_shapes(tuple(x[:-2]), tuple(w[:-2])))
        return make_space("matmul", B=batch, M=x[-2], N=w[-1], K=x[-1], dtype=dt, bshared=bshared)
    if op in ("Conv", "ConvBnAct"):
        x, w = shapes[0], shapes[1]
        if len(x) != 4:
            return f"{op}: only 2-D convolutions are tiled (input rank {len(x)})"
        from edgeops.ops.conv import Conv
        begin, end, _, s, d = Conv.geometry(a, x, w)
        if s[0] != s[1] or d[0] != d[1] or begin[0] != begin[1] or end[0] != end[1]:
            return f"{op}: strides {s}, dilations {d}, pads {begin}/{end} differ between H and W"
        act = a.get("activation", "none") if op == "ConvBnAct" else "none"
        return make_space("conv2d", N=x[0], C=x[1], H=x[2], W=x[3], K=w[0], R=w[2], S=w[3],
                          stride=s[0], pad=begin[0], pad_end=end[0], dilation=d[0],
                          groups=a.get("group", 1), dtype=dt, act=act)
    if op == "SwiGLU":
        x, w1 = shapes[0], shapes[1]
        return make_space("swiglu", M=_prod(x[:-1]), D=w1[0], F=w1[1], dtype=dt)
    if op in ("LayerNormalization", "LayerNormGelu"):
        x = shapes[0]
        ax = a.get("axis", -1) % len(x)
        return make_space("layernorm", M=_prod(x[:ax]), D=_prod(x[ax:]), dtype=dt,
                          act="gelu" if op == "LayerNormGelu" else "none")
    if op in ("GroupNormalization", "GroupNormAct", "InstanceNormalization"):
        x = shapes[0]
        groups = x[1] if op == "InstanceNormalization" else a["num_groups"]
        act = a.get("activation", "none") if op == "GroupNormAct" else "none"
        return make_space("groupnorm", N=x[0], C=x[1], H=_prod(x[2:]), W=1, groups=groups,
                          dtype=dt, act=act)
    if op == "Softmax":
        x = shapes[0]
        ax = a.get("axis", -1) % len(x)
        return make_space("softmax", M=_prod(x) // x[ax], D=x[ax], dtype=dt)
    if op in ("MaxPool", "AveragePool", "GlobalAveragePool"):
        x = shapes[0]
        if len(x) != 4:
            return f"{op}: only 2-D pooling is tiled"
        if op == "GlobalAveragePool":
            return make_space("pool", N=x[0], C=x[1], H=x[2], W=x[3], R=x[2], S=x[3], mode="avg",
                              dtype=dt)
        k = a["kernel_shape"]
        s = a.get("strides") or (1, 1)
        p = a.get("pads") or (0, 0, 0, 0)
        if k[0] != k[1] or s[0] != s[1] or len(set(p)) > 1:
            return f"{op}: non-square kernels, strides or asymmetric pads are not tiled"
        return make_space("pool", N=x[0], C=x[1], H=x[2], W=x[3], R=k[0], S=k[1], stride=s[0],
                          pad=p[0], mode="max" if op == "MaxPool" else "avg", dtype=dt)
    if op in ELTWISE:
        try:
            n = _prod(np.broadcast_shapes(*[tuple(s) for s in shapes if s is not None]))
        except ValueError:     # per-channel parameters (BatchNormalization): the output's size
            n = _prod(outs[0]) if outs and _static(outs[0]) and outs[0] else _prod(shapes[0])
        ins = sum(1 for s in shapes if s is not None and _prod(s) == n) or 1
        od = node.opdef
        ops = int(round(getattr(od, "flops_per_element", 1) if od else 1))
        return make_space("eltwise", numel=n, inputs=ins, ops=ops, dtype=dt)
    if op in ("QConvBnAct", "QMatMul"):     # not a layout op: say what is missing
        return (f"{op}: int8 {'convolution' if op == 'QConvBnAct' else 'matmul'} has no "
                f"iteration space in edgeops.tiling yet, so no prediction on this board")
    return (f"{op} has no iteration space in edgeops.tiling (a layout or data-movement op; it is "
            f"folded or stays in ONNX Runtime)")
