"""The gated half of a SwiGLU MLP -> ai.edgeops::SwiGLU::

    g = x @ W1 [+ B1]       u = x @ W2 [+ B2]       y = silu(g) * u

silu spelled any way (``g * Sigmoid(g)`` in either order, ...); the final Mul in either order.
W1 and W2 are constant (D, F) matrices on the same x; biases constant with F entries (shape
(F,) or (1, .., F)). The down projection stays a MatMul.
"""
from __future__ import annotations

import numpy as np

from edgeops.ops import EDGEOPS_DOMAIN
from edgeops.passes.base import Fusion, Pass, label, register_pass
from edgeops.passes.eltwise import FUNCTIONS, computes, cone
from edgeops.passes.rewrite import WorkingGraph

STD = ("", "ai.onnx")


@register_pass
class FuseSwiGLU(Pass):
    name = "fuse_swiglu"
    priority = 130

    def run(self, wg: WorkingGraph) -> list[Fusion]:
        done = []
        for mul in list(wg.nodes):
            if mul.op_type != "Mul" or mul.domain not in STD or len(mul.input) != 2:
                continue
            a, b = mul.input
            found = _match(wg, mul, a, b) or _match(wg, mul, b, a)
            if found is None:
                continue
            inputs, chain = found
            new = wg.node("SwiGLU", inputs, [mul.output[0]], chain[0].name, EDGEOPS_DOMAIN)
            if not wg.supported(new):
                continue
            wg.replace(chain, [new])
            done.append(Fusion(self.name, f"{EDGEOPS_DOMAIN}::SwiGLU", (new.name,),
                               tuple(map(label, chain))))
        return done


def _match(wg: WorkingGraph, mul, gated: str, up: str):
    """(SwiGLU inputs, nodes replaced) when ``gated`` is silu(x @ W1 [+ B1]) and ``up`` is
    x @ W2 [+ B2]; None otherwise."""
    if gated == up or not wg.only_feeds(gated, [mul]) or not wg.only_feeds(up, [mul]):
        return None
    found = cone(wg, gated)
    if found is None:
        return None
    silu_nodes, g = found
    if not computes(wg, silu_nodes, g, gated, FUNCTIONS["silu"]):
        return None
    if not wg.only_feeds(g, silu_nodes) or not all(
            wg.only_feeds(n.output[0], silu_nodes) for n in silu_nodes if n.output[0] != gated):
        return None
    gate, upp = _projection(wg, g), _projection(wg, up)
    if gate is None or upp is None:
        return None
    (x1, w1, b1, gnodes), (x2, w2, b2, unodes) = gate, upp
    v1, v2 = wg.const(w1), wg.const(w2)
    if x1 != x2 or v1.shape != v2.shape or not wg.is_float32(x1):
        return None
    f = v1.shape[1]
    biases = []
    for b, hint in ((b1, "gate"), (b2, "up")):
        if b is None:
            biases.append("")
            continue
        v = wg.const(b)
        if v.size != f or v.shape[-1] != f:
            return None
        # SwiGLU takes (F,) biases: a (1, F) one gets a reshaped copy
        biases.append(b if v.shape == (f,) else wg.add_const(v.reshape(f), f"{mul.name}.{hint}_bias"))
    while biases and not biases[-1]:
        biases.pop()
    return [x1, w1, w2, *biases], [*gnodes, *silu_nodes, *unodes, mul]


def _projection(wg: WorkingGraph, t: str):
    """(x, W, B or None, nodes) when t = x @ W or x @ W + B with constant fp32 W (D, F) and
    constant B, whose intermediates nothing else reads; None otherwise."""
    p = wg.producer.get(t)
    bias, nodes = None, []
    if p is not None and p.op_type == "Add" and p.domain in STD and len(p.input) == 2:
        for mm_out, b in ((p.input[0], p.input[1]), (p.input[1], p.input[0])):
            v = wg.const(b)
            q = wg.producer.get(mm_out)
            if (v is not None and v.dtype == np.float32 and q is not None and q.op_type == "MatMul"
                    and wg.only_feeds(mm_out, [p])):
                bias, nodes, p = b, [p], q
                break
        else:
            return None
    if p is None or p.op_type != "MatMul" or p.domain not in STD:
        return None
    w = wg.const(p.input[1])
    if w is None or w.dtype != np.float32 or w.ndim != 2 or wg.const(p.input[0]) is not None:
        return None
    if bias is not None and wg.const(bias).ndim > max(wg.rank(t) or 1, 1):
        return None   # the bias would broadcast the output to a higher rank
    return p.input[0], p.input[1], bias, [p, *nodes]
