"""Recognising an elementwise function of one tensor (an activation) by what it computes.

Exporters spell GELU, SiLU and HardSwish in many orders: ``0.5 * x * (1 + erf(x / sqrt 2))``,
``x * 0.5 * ...``, ``Mul(x, 0.7071)`` instead of ``Div(x, 1.4142)``, ``Pow(x, 3)`` or
``x * x * x``, ``x * HardSigmoid(x)`` ... Rather than one hand-written pattern per spelling,
:func:`find_activation` takes the *cone* of nodes that computes a tensor from ``x`` using only
elementwise ops and scalar constants, evaluates it in float64 on probe points and compares it
with the function's definition. Because every constant is a scalar and every op elementwise,
the cone is a function R -> R applied per element, so equal values on a dense probe set of
[-8, 8] mean the same function (no spelling of a different one agrees to 1e-6 there: GELU's tanh
form differs from the erf form by ~1e-3). Constants keep their float32 values, so a correctly
spelled chain agrees to ~1e-7.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np
import onnx

from edgeops.passes.rewrite import WorkingGraph, attrs_of

_PROBE = np.concatenate([np.linspace(-8.0, 8.0, 161), [-0.013, 0.0071, 0.37, -2.71, 3.3]])
_RTOL, _ATOL = 2e-6, 1e-7
MAX_CONE = 16

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def _hardsigmoid(x, alpha, beta):
    return np.clip(alpha * x + beta, 0.0, 1.0)


def gelu_erf(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


FUNCTIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "relu": lambda x: np.maximum(x, 0.0),
    "relu6": lambda x: np.clip(x, 0.0, 6.0),
    "silu": lambda x: x * _sigmoid(x),
    "hardswish": lambda x: x * _hardsigmoid(x, 1.0 / 6.0, 0.5),
    "gelu_erf": gelu_erf,
    "gelu_tanh": gelu_tanh,
}

_UNARY: dict[str, Callable] = {
    "Relu": lambda x, a: np.maximum(x, 0.0),
    "Sigmoid": lambda x, a: _sigmoid(x),
    "Tanh": lambda x, a: np.tanh(x),
    "Erf": lambda x, a: _erf(x),
    "Sqrt": lambda x, a: np.sqrt(x),
    "Neg": lambda x, a: -x,
    "Abs": lambda x, a: np.abs(x),
    "Exp": lambda x, a: np.exp(x),
    "Reciprocal": lambda x, a: 1.0 / x,
    "Identity": lambda x, a: x,
    "HardSigmoid": lambda x, a: _hardsigmoid(x, a.get("alpha", 0.2), a.get("beta", 0.5)),
    "HardSwish": lambda x, a: FUNCTIONS["hardswish"](x),
    "Gelu": lambda x, a: gelu_tanh(x) if a.get("approximate", "none") == "tanh" else gelu_erf(x),
}
_BINARY: dict[str, Callable] = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide, "Pow": np.power,
    "Min": np.minimum, "Max": np.maximum,
}
ELEMENTWISE = set(_UNARY) | set(_BINARY) | {"Clip"}


def _absorbable(wg: WorkingGraph, n: onnx.NodeProto) -> bool:
    """An elementwise standard op whose constant inputs are all scalars (so it acts per element
    and cannot broadcast the tensor to a larger shape)."""
    if n.domain not in ("", "ai.onnx") or n.op_type not in ELEMENTWISE or len(n.output) != 1:
        return False
    if n.op_type in _BINARY and len(n.input) != 2:
        return False
    for i in n.input:
        v = wg.const(i)
        if v is not None and (v.size != 1 or v.ndim > 1):
            return False
    return True


def cone(wg: WorkingGraph, out: str, root: str | None = None) -> tuple[list, str] | None:
    """(nodes in graph order, root) computing ``out`` from one non-constant tensor ``root``
    through absorbable nodes only; None when there is no such single-root cone. With ``root``
    given, the walk stops there; otherwise it stops at the first tensor it cannot absorb."""
    nodes: dict[int, onnx.NodeProto] = {}
    leaves: set[str] = set()
    stack = [out]
    while stack:
        t = stack.pop()
        if t == root or wg.const(t) is not None:
            if t == root:
                leaves.add(t)
            continue
        p = wg.producer.get(t)
        if p is None or not _absorbable(wg, p):
            leaves.add(t)
            continue
        if id(p) in nodes:
            continue
        nodes[id(p)] = p
        if len(nodes) > MAX_CONE:
            return None
        stack.extend(i for i in p.input if i)
    if len(leaves) != 1 or not nodes or (root is not None and leaves != {root}):
        return None
    order = {id(n): k for k, n in enumerate(wg.nodes)}
    return sorted(nodes.values(), key=lambda n: order[id(n)]), leaves.pop()


def evaluate(wg: WorkingGraph, nodes: list, root: str, out: str, x: np.ndarray) -> np.ndarray:
    env = {root: np.asarray(x, np.float64)}

    def val(name):
        if name in env:
            return env[name]
        return np.float64(wg.const(name).reshape(-1)[0])

    with np.errstate(all="ignore"):
        for n in nodes:
            a = attrs_of(n)
            if n.op_type == "Clip":
                lo = val(n.input[1]) if len(n.input) > 1 and n.input[1] else a.get("min", -np.inf)
                hi = val(n.input[2]) if len(n.input) > 2 and n.input[2] else a.get("max", np.inf)
                env[n.output[0]] = np.minimum(np.maximum(val(n.input[0]), lo), hi)
            elif n.op_type in _UNARY:
                env[n.output[0]] = _UNARY[n.op_type](val(n.input[0]), a)
            else:
                env[n.output[0]] = _BINARY[n.op_type](val(n.input[0]), val(n.input[1]))
    return np.broadcast_to(env[out], x.shape)


def computes(wg: WorkingGraph, nodes: list, root: str, out: str, fn: Callable) -> bool:
    y = evaluate(wg, nodes, root, out, _PROBE)
    want = fn(_PROBE)
    return bool(np.all(np.isfinite(y)) and np.allclose(y, want, rtol=_RTOL, atol=_ATOL))


def find_activation(wg: WorkingGraph, x: str, names: list[str], max_depth: int = 10):
    """The last tensor after ``x`` (in graph order, so the largest chain: ``Min(Max(x, 0), 6)``
    is relu6, not the relu its first half computes) that is one of ``FUNCTIONS[names]`` of ``x``,
    computed by nodes that read nothing else and feed nothing outside: returns (name, nodes,
    output tensor) or None. ``x`` itself must be read by those nodes only."""
    frontier, seen, cands = [x], {x}, []
    for _ in range(max_depth):
        nxt = []
        for t in frontier:
            for c in wg.users(t):
                if _absorbable(wg, c) and c.output[0] not in seen:
                    seen.add(c.output[0])
                    cands.append(c)
                    nxt.append(c.output[0])
        frontier = nxt
    order = {id(n): k for k, n in enumerate(wg.nodes)}
    for c in sorted(cands, key=lambda n: -order[id(n)]):
        out = c.output[0]
        found = cone(wg, out, root=x)
        if found is None:
            continue
        nodes, _ = found
        if not wg.only_feeds(x, nodes) or not all(
                wg.only_feeds(n.output[0], nodes) for n in nodes if n.output[0] != out):
            continue
        for name in names:
            if computes(wg, nodes, x, out, FUNCTIONS[name]):
                return name, nodes, out
    return None
