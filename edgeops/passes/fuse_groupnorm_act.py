"""GroupNorm (+ SiLU) -> ai.edgeops::GroupNormAct.

Two sources of a GroupNorm:

* ``GroupNormalization`` (opset 18: scale/bias per group; opset 21: per channel).
* What exporters emit for ``torch.nn.GroupNorm`` below opset 18::

      Reshape(x, [N|0, G, -1]) -> InstanceNormalization(s[G], b[G]) -> Reshape(-> x.shape)
        -> Mul(gamma[C,1,..]) -> Add(beta[C,1,..])        (Mul/Add absent when affine=False)

  The instance-norm affine folds into the per-channel one:
  scale[c] = s[g(c)] * gamma[c], bias[c] = b[g(c)] * gamma[c] + beta[c], g(c) = c // (C/G).

Then an optional SiLU (any spelling). GroupNormAct takes per-channel Scale and Bias (C).
"""
from __future__ import annotations

import numpy as np

from edgeops.ops import EDGEOPS_DOMAIN
from edgeops.passes.base import Fusion, Pass, label, register_pass
from edgeops.passes.eltwise import find_activation
from edgeops.passes.rewrite import WorkingGraph, attrs_of

STD = ("", "ai.onnx")


@register_pass
class FuseGroupNormAct(Pass):
    name = "fuse_groupnorm_act"
    priority = 100

    def run(self, wg: WorkingGraph) -> list[Fusion]:
        done = []
        for n in list(wg.nodes):
            if n.domain not in STD:
                continue
            if n.op_type == "GroupNormalization":
                found = _from_groupnorm(wg, n)
            elif n.op_type == "InstanceNormalization":
                found = _from_instancenorm(wg, n)
            else:
                continue
            if found is None:
                continue
            x, scale, bias, groups, eps, chain, y = found
            act = find_activation(wg, y, ["silu"])
            activation = "none"
            if act is not None:
                activation, extra, y = act[0], act[1], act[2]
                chain = chain + extra
            new = wg.node("GroupNormAct", [x, scale, bias], [y], chain[0].name, EDGEOPS_DOMAIN,
                          num_groups=groups, epsilon=eps, activation=activation)
            if not wg.supported(new):
                continue
            wg.replace(chain, [new])
            done.append(Fusion(self.name, f"{EDGEOPS_DOMAIN}::GroupNormAct", (new.name,),
                               tuple(map(label, chain))))
        return done


def _from_groupnorm(wg: WorkingGraph, n):
    a = attrs_of(n)
    g, eps = int(a["num_groups"]), float(a.get("epsilon", 1e-5))
    if a.get("stash_type", 1) != 1 or len(n.output) != 1 or not wg.is_float32(n.input[0]):
        return None
    c = _channels(wg, n.input[0])
    if c is None or c % g:
        return None
    scale, bias = n.input[1], n.input[2]
    if wg.opsets.get("", 21) < 21 and g != c:
        # GroupNormalization-18: one scale/bias per group; expand to the per-channel form
        s, b = wg.const(scale), wg.const(bias)
        if s is None or b is None or s.size != g or b.size != g:
            return None
        rep = c // g
        scale = wg.add_const(np.repeat(s.reshape(g), rep).astype(np.float32), f"{n.name}.scale")
        bias = wg.add_const(np.repeat(b.reshape(g), rep).astype(np.float32), f"{n.name}.bias")
    elif wg.shapes.get(scale) not in (None, (c,)) or wg.shapes.get(bias) not in (None, (c,)):
        return None
    return n.input[0], scale, bias, g, eps, [n], n.output[0]


def _from_instancenorm(wg: WorkingGraph, inorm):
    r1 = wg.producer.get(inorm.input[0])
    if r1 is None or r1.op_type != "Reshape" or r1.domain not in STD:
        return None
    x = r1.input[0]
    shape = wg.shapes.get(x)
    s1, inst_s, inst_b = wg.const(r1.input[1]), wg.const(inorm.input[1]), wg.const(inorm.input[2])
    if (shape is None or len(shape) < 3 or not all(isinstance(d, int) for d in shape[1:])
            or s1 is None or inst_s is None or inst_b is None or not wg.is_float32(x)):
        return None
    c, g = shape[1], (int(s1[1]) if s1.size == 3 else 0)
    rest = int(np.prod(shape[1:])) // g if g and c % g == 0 else None
    if (rest is None or int(s1[0]) not in (0, shape[0]) or int(s1[2]) not in (-1, rest)
            or inst_s.size != g or inst_b.size != g or not wg.only_feeds(r1.output[0], [inorm])):
        return None
    users = wg.users(inorm.output[0])
    r2 = users[0] if len(users) == 1 else None
    if (r2 is None or r2.op_type != "Reshape" or r2.input[0] != inorm.output[0]
            or not wg.only_feeds(inorm.output[0], [r2]) or not _restores(wg, r2.input[1], x, shape)):
        return None
    chain, y = [r1, inorm, r2], r2.output[0]
    gamma, beta = np.ones(c), np.zeros(c)
    for op in ("Mul", "Add"):
        nxt = _affine(wg, y, op, c, len(shape))
        if nxt is None:
            continue
        node, v = nxt
        if op == "Mul":
            gamma, beta = v, beta * v
        else:
            beta = beta + v
        chain.append(node)
        y = node.output[0]
    per = np.arange(c) // (c // g)
    s64, b64 = inst_s.astype(np.float64).reshape(g), inst_b.astype(np.float64).reshape(g)
    scale = wg.add_const((s64[per] * gamma).astype(np.float32), f"{inorm.name}.scale")
    bias = wg.add_const((b64[per] * gamma + beta).astype(np.float32), f"{inorm.name}.bias")
    eps = float(attrs_of(inorm).get("epsilon", 1e-5))
    return x, scale, bias, g, eps, chain, y


def _channels(wg: WorkingGraph, x: str) -> int | None:
    s = wg.shapes.get(x)
    return s[1] if s is not None and len(s) >= 2 and isinstance(s[1], int) else None


def _restores(wg: WorkingGraph, target: str, x: str, shape: tuple) -> bool:
    """Does Reshape's shape operand ``target`` give back x's shape? Shape(x), or a constant
    equal to it (0 or -1 allowed for the batch dim)."""
    p = wg.producer.get(target)
    if p is not None and p.op_type == "Shape" and p.input[0] == x and not p.attribute:
        return True
    v = wg.const(target)
    if v is None or v.size != len(shape):
        return False
    v = [int(d) for d in v.reshape(-1)]
    return v[1:] == list(shape[1:]) and (v[0] in (0, -1) or v[0] == shape[0])


def _affine(wg: WorkingGraph, y: str, op: str, c: int, rank: int):
    """(node, per-channel float64 vector) when y's only reader is ``op`` with a constant that
    broadcasts per channel; None otherwise."""
    users = wg.users(y)
    if len(users) != 1 or users[0].op_type != op or users[0].domain not in STD:
        return None
    n = users[0]
    if not wg.only_feeds(y, [n]) or len(n.input) != 2:
        return None
    other = n.input[1] if n.input[0] == y else n.input[0]
    v = wg.const(other)
    if v is None or other == y or v.ndim > rank:
        return None
    if v.size == 1:
        return n, np.full(c, float(v.reshape(-1)[0]))
    dims = (1,) * (rank - v.ndim) + v.shape       # as broadcast against (N, C, spatial...)
    if dims[1] != c or any(d != 1 for i, d in enumerate(dims) if i != 1):
        return None
    return n, v.astype(np.float64).reshape(c)
