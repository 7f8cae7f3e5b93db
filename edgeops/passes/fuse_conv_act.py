"""Conv (BatchNorm already folded by ``fold_batchnorm``) + activation -> ai.edgeops::ConvBnAct.

Activations: Relu, Clip with constant bounds (0..6 is relu6), SiLU (x * sigmoid(x) in any
order), HardSwish (the op or x * HardSigmoid(x)); any other spelling of those functions
matches too (see :mod:`edgeops.passes.eltwise`). A Conv with no activation after it becomes
ConvBnAct with activation "none". Weights and bias must be constants: target kernels pack them
ahead of time.
"""
from __future__ import annotations

import numpy as np

from edgeops.ops import EDGEOPS_DOMAIN
from edgeops.passes.base import Fusion, Pass, label, register_pass
from edgeops.passes.eltwise import find_activation
from edgeops.passes.rewrite import WorkingGraph, attrs_of


@register_pass
class FuseConvAct(Pass):
    name = "fuse_conv_act"
    priority = 110

    def run(self, wg: WorkingGraph) -> list[Fusion]:
        done = []
        for conv in list(wg.nodes):
            if conv.op_type != "Conv" or conv.domain not in ("", "ai.onnx"):
                continue
            if not _constant_weights(wg, conv):
                continue
            act, extra, chain, out = _activation(wg, conv.output[0])
            new = wg.node("ConvBnAct", list(conv.input), [out], conv.name, EDGEOPS_DOMAIN,
                          activation=act, **extra)
            new.attribute.extend(conv.attribute)
            if not wg.supported(new):   # e.g. an attribute ConvBnAct does not take
                continue
            wg.replace([conv, *chain], [new])
            done.append(Fusion(self.name, f"{EDGEOPS_DOMAIN}::ConvBnAct", (new.name,),
                               tuple(map(label, [conv, *chain]))))
        return done


def _constant_weights(wg: WorkingGraph, conv) -> bool:
    w = wg.const(conv.input[1])
    if w is None or w.dtype != np.float32 or w.ndim < 3:
        return False
    return len(conv.input) < 3 or not conv.input[2] or wg.const(conv.input[2]) is not None


def _activation(wg: WorkingGraph, y: str):
    """(activation, extra attrs, nodes to take in, output tensor) for what follows Conv output y."""
    users = wg.users(y)
    if len(users) == 1 and users[0].op_type == "Clip" and wg.only_feeds(y, users):
        clip = users[0]
        bounds = _clip_bounds(wg, clip)
        if bounds is not None:
            lo, hi = bounds
            if (lo, hi) == (0.0, 6.0):
                return "relu6", {}, [clip], clip.output[0]
            extra = {k: v for k, v in (("clip_min", lo), ("clip_max", hi)) if np.isfinite(v)}
            return "clip", extra, [clip], clip.output[0]
    found = find_activation(wg, y, ["relu", "relu6", "silu", "hardswish"])
    if found is not None:
        name, nodes, out = found
        return name, {}, nodes, out
    return "none", {}, [], y


def _clip_bounds(wg: WorkingGraph, clip) -> tuple[float, float] | None:
    """Constant (min, max) of a Clip, from inputs (opset 11+) or attributes (older)."""
    a = attrs_of(clip)
    bounds = []
    for k, key, default in ((1, "min", -np.inf), (2, "max", np.inf)):
        if len(clip.input) > k and clip.input[k]:
            v = wg.const(clip.input[k])
            if v is None or v.size != 1:
                return None
            bounds.append(float(np.float32(v.reshape(-1)[0])))
        else:
            bounds.append(float(a.get(key, default)))
    return bounds[0], bounds[1]
