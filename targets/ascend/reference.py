"""Random inputs for an operator in the NPU's global-memory layouts, and its float64 reference.

The references are the ``edgeops.ops`` numpy oracles (Conv, pooling, the norms, Softmax,
SwiGLU) applied to exactly the values the NPU sees (inputs already rounded to the op's dtype).
"""
from __future__ import annotations

import numpy as np

from edgeops.ops._common import sigmoid
from edgeops.ops.conv import Conv
from edgeops.ops.gelu import Gelu
from edgeops.ops.groupnorm import group_norm
from edgeops.ops.layernorm import layer_norm
from edgeops.ops.softmax import Softmax
from edgeops.targets.ascend.cube import NP

QUANT_SCALE = 1 / 64


def activation(y: np.ndarray, act: str) -> np.ndarray:
    """float64 activation, as the spec strings name them (clip is 0..6)."""
    f = {"none": lambda v: v, "relu": lambda v: np.maximum(v, 0),
         "relu6": lambda v: np.clip(v, 0, 6), "clip": lambda v: np.clip(v, 0, 6),
         "silu": lambda v: v * sigmoid(v), "sigmoid": sigmoid, "tanh": np.tanh,
         "hardswish": lambda v: v * np.clip(v / 6 + 0.5, 0, 1),
         "gelu": lambda v: Gelu.reference(v), "quant": lambda v: np.clip(np.rint(v * QUANT_SCALE), -128, 127)}
    return f[act](y)


def _rand(rng, shape, dtype, scale=1.0):
    if dtype == "int8":
        return rng.integers(-8, 8, size=shape).astype(np.int8)
    return (rng.standard_normal(shape) * scale).astype(NP[dtype])


def _w(a):
    return np.asarray(a, np.float64)


def inputs_and_reference(sp, rng) -> tuple[dict, np.ndarray]:
    k, dt = sp.kind, sp.dtype
    acc_np = np.int32 if dt == "int8" else np.float32
    if k in ("gemm", "matmul"):
        B, M, N, K = sp.get("B", 1), sp["M"], sp["N"], sp["K"]
        a = _rand(rng, (B, M, K), dt)
        b = _rand(rng, (K, N) if sp.get("bshared", 0) else (B, K, N), dt, 1 / np.sqrt(K))
        gm = {"A": a, "B": b if b.ndim == 3 or sp.get("bshared", 0) else b[None]}
        y = _w(a) @ _w(b)
        if sp.get("bias", 0):
            gm["bias"] = _rand(rng, (N,), dt).astype(acc_np)
            y = y + _w(gm["bias"])
        return gm, activation(y, sp.get("act", "none"))
    if k == "conv2d":
        G = sp["groups"]
        x = _rand(rng, (sp["N"], sp["C"], sp["H"], sp["W"]), dt)
        fan = sp["C"] // G * sp["R"] * sp["S"]
        w = _rand(rng, (sp["K"], sp["C"] // G, sp["R"], sp["S"]), dt, 1 / np.sqrt(fan))
        y = Conv.reference(_w(x), _w(w), group=G, strides=(sp["stride"],) * 2,
                           pads=(sp["pad"], sp["pad"], sp["pad_end"], sp["pad_end"]),
                           dilations=(sp["dilation"],) * 2, auto_pad="NOTSET", kernel_shape=None)
        return {"X": x, "W": w}, activation(y, sp.get("act", "none"))
    if k == "groupnorm":
        N, C, H, W, G = sp["N"], sp["C"], sp["H"], sp["W"], sp["groups"]
        x = _rand(rng, (N, C, H, W), dt)
        gamma, beta = _rand(rng, (C,), dt), _rand(rng, (C,), dt)
        y = activation(group_norm(_w(x), _w(gamma), _w(beta), G, 1e-5), sp["act"])
        return {"X": x.reshape(N * G, -1), "P": np.concatenate([gamma, beta])}, y.reshape(N * G, -1)
    if k in ("layernorm", "softmax"):
        M, D = sp["M"], sp["D"]
        x = _rand(rng, (M, D), dt)
        if k == "softmax":
            return {"X": x}, Softmax.reference(_w(x), axis=-1)
        gamma, beta = _rand(rng, (D,), dt), _rand(rng, (D,), dt)
        y = activation(layer_norm(_w(x), _w(gamma), _w(beta), -1, 1e-5), sp["act"])
        return {"X": x, "P": np.stack([gamma, beta])}, y
    if k == "eltwise":
        n, nin = sp["numel"], sp["inputs"]
        xs = [_rand(rng, (n,), dt) for _ in range(nin)]
        y = sum(_w(v) for v in xs)
        if sp["ops"] > nin - 1:
            y = np.maximum(y, 0)
        return {f"X{i}": v for i, v in enumerate(xs)}, y
    if k == "pool":
        from edgeops.ops.averagepool import AveragePool
        from edgeops.ops.maxpool import MaxPool
        N, C = sp["N"], sp["C"]
        x = _rand(rng, (N, C, sp["H"], sp["W"]), dt)
        attrs = dict(kernel_shape=(sp["R"], sp["S"]), strides=(sp["stride"],) * 2,
                     pads=(sp["pad"],) * 4, ceil_mode=0, auto_pad="NOTSET", dilations=None)
        if sp["mode"] == "max":
            y = MaxPool.reference(_w(x), storage_order=0, **attrs)
        else:
            y = AveragePool.reference(_w(x), count_include_pad=0, **attrs)
        return {"X": x.reshape(N * C, sp["H"], sp["W"])}, y.reshape(N * C, *y.shape[2:])
    if k == "swiglu":
        M, D, F = sp["M"], sp["D"], sp["F"]
        x = _rand(rng, (M, D), dt)
        w1, w2 = (_rand(rng, (D, F), dt, 1 / np.sqrt(D)) for _ in range(2))
        gate, up = _w(x) @ _w(w1), _w(x) @ _w(w2)
        return {"A": x[None], "W1": w1, "W2": w2}, gate * sigmoid(gate) * up
    raise ValueError(f"no reference for {k!r}")
