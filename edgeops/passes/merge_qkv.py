"""Three (or more) MatMuls reading one input with constant weights -> one MatMul with the weights
concatenated along N, then a Split (standard ONNX in, out).

Attention's Q, K and V projections read the same x: one GEMM with N = Fq + Fk + Fv reads x once
instead of three times and keeps a small-M GEMM's cores busy. Runs after ``fuse_swiglu`` so that
a SwiGLU's two projections are not merged first.
"""
from __future__ import annotations

import numpy as np

from edgeops.passes.base import Fusion, Pass, label, register_pass
from edgeops.passes.rewrite import WorkingGraph

MIN_GROUP = 3


@register_pass
class MergeQKV(Pass):
    name = "merge_qkv"
    priority = 140

    def run(self, wg: WorkingGraph) -> list[Fusion]:
        done = []
        for x in list(wg.consumers):
            group = _group(wg, x)
            if len(group) < MIN_GROUP:
                continue
            ws = [wg.const(m.input[1]) for m in group]
            sizes = [w.shape[1] for w in ws]
            first = group[0]
            base = first.name or "qkv"
            w = wg.add_const(np.concatenate(ws, axis=1), f"{base}.merged_weight")
            y = wg.fresh(f"{base}.merged")
            mm = wg.node("MatMul", [x, w], [y], f"{base}.merged")
            outs = [m.output[0] for m in group]
            if wg.opsets.get("", 1) >= 13:   # Split-13 takes the sizes as an input
                split = wg.node("Split", [y, wg.add_const(np.array(sizes, np.int64),
                                                          f"{base}.split_sizes")],
                                outs, f"{base}.split", axis=-1)
            else:
                split = wg.node("Split", [y], outs, f"{base}.split", axis=-1, split=sizes)
            # at the first MatMul's place: before the first reader of any output
            wg.replace([first], [mm, split])
            wg.replace(group[1:], [])
            if x in wg.shapes and wg.shapes[x] is not None:
                wg.shapes[y] = (*wg.shapes[x][:-1], sum(sizes))
            done.append(Fusion(self.name, "MatMul+Split", (mm.name, split.name),
                               tuple(map(label, group))))
        return done


def _group(wg: WorkingGraph, x: str) -> list:
    """MatMuls taking x as A with a constant 2-D fp32 B of one shared D, in graph order."""
    if wg.const(x) is not None:
        return []
    cands = []
    for m in wg.users(x):
        if m.op_type != "MatMul" or m.domain not in ("", "ai.onnx") or m.input[0] != x:
            continue
        w = wg.const(m.input[1])
        if w is not None and w.dtype == np.float32 and w.ndim == 2 and m.input[1] != x:
            cands.append((m, w.shape[0]))
    if not cands:
        return []
    d = cands[0][1]
    return [m for m, k in cands if k == d]
