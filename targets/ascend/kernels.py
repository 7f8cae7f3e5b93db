"""The ``ascend`` target's kernels: ONNX / ai.edgeops nodes executed on the emulated NPU.

Each adapter follows the registry convention ``fn(inputs, attrs, tiling=None, board=None)``:
inputs arrive as the model has them (fp32 at the ONNX Runtime boundary), are rounded to the
NPU's dtype (fp16; the Cube accumulates in fp32), laid out in global memory, run through the
lowered programs, and the output comes back in the input's dtype. Without a tiling the op is
planned on the board with ``edgeops.tiling.search`` (cached per op signature and board); the
board is ``board=`` or the module default ``BOARD`` (``set_board``).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from edgeops.errors import TilingError
from edgeops.ops import _window as win
from edgeops.ops.conv import Conv
from edgeops.registry import register_kernel
from edgeops.targets.ascend.conv import ConvGeom
from edgeops.targets.ascend.emulate import run_lowered
from edgeops.targets.ascend.gemm import GemmGeom
from edgeops.targets.ascend.lower import (Act, lower_conv, lower_gemm, lower_stream,
                                          lower_swiglu)
from edgeops.targets.ascend.machine import machine
from edgeops.targets.ascend.stream import Eltwise, Pool, RowNorm

T = "ascend"
FLOAT = ("fp32", "fp16")
NPU = "fp16"
BOARD = "ascend-910b"


def set_board(name: str) -> None:
    """Board the kernels plan for and emulate when none is passed."""
    global BOARD
    machine(name)           # fails early on a board without an NPU
    BOARD = name


@lru_cache(maxsize=512)
def plan(spec: str, board: str):
    """Searched tiling of ``spec`` on ``board`` (the naive one if the search finds none)."""
    from edgeops import tiling as TL
    decomp = "implicit_gemm" if spec.startswith("conv2d") else None
    try:
        return TL.search(spec, board, decomposition=decomp, top=1).best.tiling
    except TilingError:
        return TL.naive(spec, board, decomposition=decomp)


def _run(low_fn, spec: str, tiling, board, gm, *args, **kw):
    b = board or BOARD
    m = machine(b)
    til = tiling or plan(spec, m.board.name)
    return run_lowered(m, low_fn(m, *args, til, gm, **kw) if args else low_fn(m, til, gm, **kw), gm).output


def _h(x):
    return np.ascontiguousarray(x, dtype=np.float16)


# ---- GEMM / MatMul -------------------------------------------------------------------------------

@register_kernel("Gemm", T, dtypes=FLOAT, name="ascend.gemm", priority=10)
def _gemm(inputs, attrs, tiling=None, board=None):
    """Cube GEMM; alpha and a per-column C (beta * C) applied by FixPipe, a full C by Vector."""
    a, b = inputs[0], inputs[1]
    a = a.T if attrs["transA"] else a
    b = b.T if attrs["transB"] else b
    c = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
    M, K, N = a.shape[0], a.shape[1], b.shape[1]
    if attrs["alpha"] == 0.0:              # nothing for the Cube to do
        y = np.zeros((M, N), a.dtype)
        return [y if c is None else (y + attrs["beta"] * np.asarray(c)).astype(a.dtype)]
    gm = {"A": _h(a)[None], "B": _h(b)[None]}
    full_c = c is not None and np.broadcast_shapes(np.shape(c), (1, N)) != (1, N)
    if c is not None and not full_c:
        gm["bias"] = np.broadcast_to(np.asarray(c, np.float32).reshape(-1) * attrs["beta"]
                                     / attrs["alpha"], (N,)).astype(np.float32)
    spec = f"gemm:M={M},N={N},K={K},dtype={NPU}" + (",bias=1" if "bias" in gm else "")
    y = _run(lower_gemm, spec, tiling, board, gm, GemmGeom(M, N, K, dtype=NPU),
             bias="bias" if "bias" in gm else None,
             scale=attrs["alpha"] if attrs["alpha"] != 1.0 else None)[0].astype(a.dtype)
    if full_c:
        y = _binary(y, (attrs["beta"] * np.asarray(c)).astype(a.dtype), "add", board)
    return [y]


@register_kernel("MatMul", T, dtypes=FLOAT, name="ascend.matmul", priority=10)
def _matmul(inputs, attrs, tiling=None, board=None):
    """Batched Cube MatMul (numpy broadcasting; a 2-D B is shared by every batch)."""
    a, b = inputs
    a2 = a[None] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    M, K, N = a2.shape[-2], a2.shape[-1], b2.shape[-1]
    if b2.ndim == 2:                       # one B for every batch entry of A
        batch = a2.shape[:-2]
        B = int(np.prod(batch, dtype=np.int64))
        A3, B3 = a2.reshape(B, M, K), (b2 if B > 1 else b2[None])
    else:
        batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
        B = int(np.prod(batch, dtype=np.int64))
        A3 = np.broadcast_to(a2, batch + (M, K)).reshape(B, M, K)
        B3 = np.broadcast_to(b2, batch + (K, N)).reshape(B, K, N)
    shared = B3.ndim == 2
    gm = {"A": _h(A3), "B": _h(B3)}
    spec = f"matmul:B={B},M={M},N={N},K={K},bshared={int(shared)},dtype={NPU}"
    y = _run(lower_gemm, spec, tiling, board, gm, GemmGeom(M, N, K, B, shared, NPU))
    out = y.reshape(batch + (M, N)).astype(a.dtype)
    if a.ndim == 1:
        out = out[..., 0, :]
    if b.ndim == 1:
        out = out[..., 0]
    return [out]


# ---- convolutions ----------------------------------------------------------------------------------

def _conv_pred(node):
    xs, ws = node.input_shapes[0], node.input_shapes[1]
    if xs is None or ws is None or len(xs) != 4 or not all(isinstance(d, int) for d in xs + ws):
        return f"needs static 4-D X and W, got {xs} and {ws}"
    return True


def _conv(inputs, attrs, act: Act, tiling, board):
    x, w = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
    begin, end, (oh, ow), s, d = Conv.geometry(attrs, x.shape, w.shape)
    g = ConvGeom(x.shape[0], x.shape[1], x.shape[2], x.shape[3], w.shape[0], w.shape[2],
                 w.shape[3], tuple(s), tuple(begin), tuple(end), tuple(d), attrs["group"], NPU)
    gm = {"X": _h(x), "W": _h(w)}
    if b is not None:
        gm["bias"] = np.asarray(b, np.float32)
    spec = (f"conv2d:N={g.N},C={g.C},H={g.H},W={g.W},K={g.K},R={g.R},S={g.S},stride={s[0]},"
            f"pad={begin[0]},pad_end={end[0]},dilation={d[0]},groups={g.groups},dtype={NPU}")
    y = _run(lower_conv, spec, tiling, board, gm, g, act=act, bias="bias" if b is not None else None)
    return [y.astype(x.dtype)]


@register_kernel("Conv", T, dtypes=FLOAT, predicate=_conv_pred, name="ascend.conv", priority=10)
def _conv_plain(inputs, attrs, tiling=None, board=None):
    """Implicit-GEMM Conv2D: input windows in L1, img2col into L0A, bias on FixPipe."""
    return _conv(inputs, attrs, Act(), tiling, board)


@register_kernel("ai.edgeops::ConvBnAct", T, dtypes=FLOAT, predicate=_conv_pred,
                 name="ascend.conv_bn_act", priority=10)
def _conv_bn_act(inputs, attrs, tiling=None, board=None):
    """ConvBnAct: bias/Relu/Relu6/Clip on FixPipe; SiLU/HardSwish on the Vector unit (through GM
    on a separated core)."""
    a = attrs["activation"]
    act = Act("clip", (("lo", 0.0), ("hi", 6.0))) if a == "relu6" else \
        Act("clip", (("lo", attrs["clip_min"]), ("hi", attrs["clip_max"]))) if a == "clip" else Act(a)
    return _conv(inputs, attrs, act, tiling, board)


# ---- Vector-unit ops ---------------------------------------------------------------------------------

def _stream(op, spec, shape, tiling, board, gm):
    return _run(lower_stream, spec, tiling, board, gm, op, out_shape=shape)


def _norm(kind, x, rows, D, params, act, eps, tiling, board, **kw):
    op = RowNorm(kind, rows, D, NPU, eps=eps, act=act, **kw)
    gm = {"X": _h(x.reshape(rows, D))}
    if params is not None:
        gm["P"] = _h(params)
    if kind == "groupnorm":
        spec = (f"groupnorm:N={x.shape[0]},C={kw['channels']},H={kw['hw']},W=1,"
                f"groups={kw['groups']},dtype={NPU}")
    else:
        spec = f"{kind}:M={rows},D={D},dtype={NPU}"
    return _stream(op, spec, (rows, D), tiling, board, gm).reshape(x.shape).astype(x.dtype)


def _groupnorm(inputs, attrs, act, tiling, board):
    x, scale, bias = inputs
    N, C, G = x.shape[0], x.shape[1], attrs["num_groups"]
    hw = int(np.prod(x.shape[2:], dtype=np.int64))
    per_c = [np.repeat(np.asarray(p).reshape(-1), C // np.asarray(p).size) for p in (scale, bias)]
    return [_norm("groupnorm", x, N * G, C // G * hw, np.concatenate(per_c), act, attrs["epsilon"],
                  tiling, board, groups=G, channels=C, hw=hw)]


@register_kernel("GroupNormalization", T, dtypes=FLOAT, name="ascend.groupnorm", priority=10)
def _gn(inputs, attrs, tiling=None, board=None):
    """GroupNorm: statistics per (image, group) row, one normalise pass (two if rows split)."""
    return _groupnorm(inputs, attrs, "none", tiling, board)


@register_kernel("ai.edgeops::GroupNormAct", T, dtypes=FLOAT, name="ascend.groupnorm_act", priority=10)
def _gn_act(inputs, attrs, tiling=None, board=None):
    """GroupNorm + SiLU in the normalise pass."""
    return _groupnorm(inputs, attrs, attrs["activation"], tiling, board)


def _layernorm(inputs, attrs, act, tiling, board):
    x, scale = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 and inputs[2] is not None else np.zeros(1, x.dtype)
    ax = attrs["axis"] % x.ndim
    rows, D = int(np.prod(x.shape[:ax], dtype=np.int64)), int(np.prod(x.shape[ax:], dtype=np.int64))
    tail = x.shape[ax:]
    p = np.stack([np.broadcast_to(scale, tail).reshape(-1), np.broadcast_to(bias, tail).reshape(-1)])
    return [_norm("layernorm", x, rows, D, p, act, attrs["epsilon"], tiling, board)]


@register_kernel("LayerNormalization", T, dtypes=FLOAT, name="ascend.layernorm", priority=10)
def _ln(inputs, attrs, tiling=None, board=None):
    """LayerNorm over the trailing axes from ``axis``."""
    return _layernorm(inputs, attrs, "none", tiling, board)


@register_kernel("ai.edgeops::LayerNormGelu", T, dtypes=FLOAT, name="ascend.layernorm_gelu", priority=10)
def _ln_gelu(inputs, attrs, tiling=None, board=None):
    """LayerNorm + GELU (erf or tanh form) in the normalise pass."""
    return _layernorm(inputs, attrs, "gelu_tanh" if attrs["approximate"] == "tanh" else "gelu",
                      tiling, board)


@register_kernel("Softmax", T, dtypes=FLOAT, name="ascend.softmax", priority=10)
def _softmax(inputs, attrs, tiling=None, board=None):
    """Softmax along one axis (moved last on the host when it is not)."""
    x = inputs[0]
    ax = attrs["axis"] % x.ndim
    xt = np.moveaxis(x, ax, -1)
    D = xt.shape[-1]
    rows = xt.size // D
    y = _norm("softmax", np.ascontiguousarray(xt), rows, D, None, "none", 0.0, tiling, board)
    return [np.moveaxis(y, -1, ax)]


def _pool_pred(node):
    xs = node.input_shapes[0]
    return True if xs is not None and len(xs) == 4 else f"only 2-D pooling (4-D X); X is {xs}"


def _pool_spec(N, C, H, W, ks, s, d, b, e, out, mode):
    """The tiling spec to plan a pooling with. A pool spec is square-strided, undilated and
    symmetric-padded; for other geometries (asymmetric or end pads, ceil_mode tails, dilation)
    plan a stand-in whose window and stride are at least as large (so the planned UB tiles are
    never smaller than the real ones) and whose output is at least as large."""
    st = max(s)
    R, S = ((k - 1) * di + 1 for k, di in zip(ks, d))
    pad = max(*b, *e, 0)
    while True:
        po = ((H + 2 * pad - R) // st + 1, (W + 2 * pad - S) // st + 1)
        if min(H, W) + 2 * pad >= max(R, S) and po[0] >= out[0] and po[1] >= out[1]:
            break
        pad += 1
    return f"pool:N={N},C={C},H={H},W={W},R={R},S={S},stride={st},pad={pad},mode={mode},dtype={NPU}"


def _pool(x, mode, attrs, tiling, board):
    ks = attrs["kernel_shape"]
    b, e, (oh, ow), s, d = win.geometry("Pool", attrs, x.shape[2:], ks, bool(attrs.get("ceil_mode", 0)))
    N, C, H, W = x.shape
    op = Pool(N * C, H, W, oh, ow, ks[0], ks[1], tuple(s), tuple(b), tuple(d), mode, NPU,
              include_pad=bool(attrs.get("count_include_pad", 0)), pads_end=tuple(e))
    spec = _pool_spec(N, C, H, W, ks, s, d, b, e, (oh, ow), mode)
    y = _stream(op, spec, (N * C, oh, ow), tiling, board, {"X": _h(x.reshape(N * C, H, W))})
    return [y.reshape(N, C, oh, ow).astype(x.dtype)]


@register_kernel("MaxPool", T, dtypes=FLOAT, predicate=_pool_pred, name="ascend.maxpool", priority=10)
def _maxpool(inputs, attrs, tiling=None, board=None):
    """2-D max pooling; the Vector unit supplies the padding of each window."""
    return _pool(inputs[0], "max", attrs, tiling, board)


@register_kernel("AveragePool", T, dtypes=FLOAT, predicate=_pool_pred, name="ascend.avgpool", priority=10)
def _avgpool(inputs, attrs, tiling=None, board=None):
    """2-D average pooling (count_include_pad honoured)."""
    return _pool(inputs[0], "avg", attrs, tiling, board)


@register_kernel("GlobalAveragePool", T, dtypes=FLOAT, predicate=_pool_pred, name="ascend.global_avgpool",
                 priority=10)
def _gap(inputs, attrs, tiling=None, board=None):
    """Mean over H x W: one window per channel."""
    H, W = inputs[0].shape[2:]
    at = {"kernel_shape": (H, W), "strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1),
          "auto_pad": "NOTSET", "ceil_mode": 0, "count_include_pad": 0}
    return _pool(inputs[0], "avg", at, tiling, board)


def _eltwise(xs, steps, tiling, board):
    n = xs[0].size
    op = Eltwise(n, len(xs), steps, NPU)
    gm = {f"X{i}": _h(x.reshape(-1)) for i, x in enumerate(xs)}
    spec = f"eltwise:numel={n},inputs={len(xs)},ops={len(steps)},dtype={NPU}"
    return _stream(op, spec, (n,), tiling, board, gm).reshape(xs[0].shape).astype(xs[0].dtype)


def _binary(a, b, vop, board=None, tiling=None):
    shape = np.broadcast_shapes(a.shape, b.shape)   # broadcast on the host, stream on the NPU
    return _eltwise([np.broadcast_to(a, shape), np.broadcast_to(b, shape)], [(vop, {})], tiling, board)


def _register_unary(op: str, steps):
    @register_kernel(op, T, dtypes=FLOAT, name=f"ascend.{op.lower()}", priority=10,
                     doc=f"{op} on the Vector unit, streamed through UB")
    def _unary(inputs, attrs, tiling=None, board=None):
        return [_eltwise([inputs[0]], steps(attrs), tiling, board)]


_register_unary("Relu", lambda a: [("relu", {})])
_register_unary("Sigmoid", lambda a: [("sigmoid", {})])
_register_unary("Tanh", lambda a: [("tanh", {})])
_register_unary("HardSwish", lambda a: [("hardswish", {})])
_register_unary("LeakyRelu", lambda a: [("leakyrelu", {"alpha": a["alpha"]})])
_register_unary("HardSigmoid", lambda a: [("hardsigmoid", {"alpha": a["alpha"], "beta": a["beta"]})])
_register_unary("Gelu", lambda a: [("gelu_tanh" if a["approximate"] == "tanh" else "gelu", {})])


@register_kernel("Clip", T, dtypes=FLOAT, name="ascend.clip", priority=10)
def _clip(inputs, attrs, tiling=None, board=None):
    """Clip(min, max) on the Vector unit (an omitted bound does not bound)."""
    lo = float(np.asarray(inputs[1]).reshape(())) if len(inputs) > 1 and inputs[1] is not None else -np.inf
    hi = float(np.asarray(inputs[2]).reshape(())) if len(inputs) > 2 and inputs[2] is not None else np.inf
    if lo > hi:
        return [np.full_like(inputs[0], hi)]
    return [_eltwise([inputs[0]], [("clip", {"lo": lo, "hi": hi})], tiling, board)]


def _register_binary(op: str):
    @register_kernel(op, T, dtypes=FLOAT, name=f"ascend.{op.lower()}", priority=10,
                     doc=f"{op} on the Vector unit (broadcast operands expanded on the host)")
    def _bin(inputs, attrs, tiling=None, board=None):
        return [_binary(inputs[0], inputs[1], op.lower(), board, tiling)]


for _op in ("Add", "Sub", "Mul", "Div"):
    _register_binary(_op)


@register_kernel("ai.edgeops::SwiGLU", T, dtypes=FLOAT, name="ascend.swiglu", priority=10)
def _swiglu(inputs, attrs, tiling=None, board=None):
    """SwiGLU: X @ [W1 | W2] on the Cube, silu(gate) * up on the Vector unit."""
    x, w1, w2 = inputs[:3]
    b1 = inputs[3] if len(inputs) > 3 else None
    b2 = inputs[4] if len(inputs) > 4 else None
    D, F = w1.shape
    M = x.size // D
    gm = {"A": _h(x.reshape(1, M, D)), "W1": _h(w1), "W2": _h(w2)}
    biases = b1 is not None or b2 is not None
    if biases:
        gm["b1"] = np.zeros(F, np.float32) if b1 is None else np.asarray(b1, np.float32)
        gm["b2"] = np.zeros(F, np.float32) if b2 is None else np.asarray(b2, np.float32)
    spec = f"swiglu:M={M},D={D},F={F},dtype={NPU}"
    y = _run(lower_swiglu, spec, tiling, board, gm, M, D, F, NPU, biases=biases)
    return [y.reshape(x.shape[:-1] + (F,)).astype(x.dtype)]
