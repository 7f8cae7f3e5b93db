"""Fold an inference BatchNormalization into the Conv before it (standard ONNX in, out).

    W' = W * s[k],  B' = (B - mean) * s + beta,  s = gamma / sqrt(var + eps)

computed in float64 and rounded once to the weights' dtype. New initializers are written (the
old ones may be shared with other nodes); the Conv keeps its attributes and takes over the
BatchNormalization's output name.
"""
from __future__ import annotations

import numpy as np

from edgeops.passes.base import Fusion, Pass, label, register_pass
from edgeops.passes.rewrite import WorkingGraph, attrs_of


@register_pass
class FoldBatchNorm(Pass):
    name = "fold_batchnorm"
    priority = 20

    def run(self, wg: WorkingGraph) -> list[Fusion]:
        done = []
        for bn in list(wg.nodes):
            if bn.op_type != "BatchNormalization" or bn.domain not in ("", "ai.onnx"):
                continue
            conv = wg.producer.get(bn.input[0])
            if conv is None or conv.op_type != "Conv" or conv.domain not in ("", "ai.onnx"):
                continue
            folded = _fold(wg, conv, bn)
            if folded is None:
                continue
            w, b = folded
            new = wg.node("Conv", [conv.input[0], wg.add_const(w, f"{conv.name}.folded_weight"),
                                   wg.add_const(b, f"{conv.name}.folded_bias")],
                          [bn.output[0]], conv.name)
            new.attribute.extend(conv.attribute)
            wg.replace([conv, bn], [new])
            done.append(Fusion(self.name, "Conv", (new.name,),
                               (label(conv), label(bn))))
        return done


def _fold(wg: WorkingGraph, conv, bn):
    """(W', B') or None when the pair cannot be folded."""
    a = attrs_of(bn)
    if a.get("training_mode", 0) or any(o and (wg.users(o) or o in wg.graph_outputs)
                                        for o in bn.output[1:]):
        return None     # training statistics are read: not an inference BatchNorm
    if not wg.only_feeds(conv.output[0], [bn]) or len(bn.input) != 5:
        return None
    w = wg.const(conv.input[1])
    b = wg.const(conv.input[2]) if len(conv.input) > 2 and conv.input[2] else None
    params = [wg.const(i) for i in bn.input[1:5]]
    if w is None or w.dtype != np.float32 or w.ndim < 3 or (len(conv.input) > 2 and conv.input[2]
                                                            and b is None):
        return None
    k = w.shape[0]
    if any(p is None or p.size != k for p in params) or (b is not None and b.size != k):
        return None
    gamma, beta, mean, var = (p.astype(np.float64).reshape(k) for p in params)
    eps = float(np.float32(a.get("epsilon", 1e-5)))
    s = gamma / np.sqrt(var + eps)
    w2 = w.astype(np.float64) * s.reshape(k, *[1] * (w.ndim - 1))
    b0 = np.zeros(k) if b is None else b.astype(np.float64).reshape(k)
    return w2.astype(np.float32), ((b0 - mean) * s + beta).astype(np.float32)
