"""Remove Dropout (inference: it is the identity) and Identity nodes.

Dropout is never fused into a kernel: a fused kernel that draws random numbers costs more than
it saves, and at inference Dropout does nothing. A Dropout whose mask is read, or whose
training_mode is not a constant false, is left alone.
"""
from __future__ import annotations

from edgeops.passes.base import Fusion, Pass, label, register_pass
from edgeops.passes.rewrite import WorkingGraph


@register_pass
class DropDropout(Pass):
    name = "drop_dropout"
    priority = 10

    def run(self, wg: WorkingGraph) -> list[Fusion]:
        done = []
        for n in list(wg.nodes):
            if n.domain not in ("", "ai.onnx") or n.op_type not in ("Dropout", "Identity"):
                continue
            if n.op_type == "Dropout" and not _inference_only(wg, n):
                continue
            src, dst = n.input[0], n.output[0]
            if not src or dst in wg.implicit:
                continue
            if dst not in wg.graph_outputs:
                wg.replace([n], [])
                wg.rename_input(dst, src)
            elif _can_rename(wg, src):
                # the graph output keeps its name: the producer of src writes it directly
                wg.replace([n], [])
                p = wg.producer[src]
                p.output[list(p.output).index(src)] = dst
                wg.reindex()
                wg.rename_input(src, dst)
            elif n.op_type == "Dropout":
                new = wg.node("Identity", [src], [dst], n.name)
                wg.replace([n], [new])
                done.append(Fusion(self.name, "Identity", (new.name,), (label(n),)))
                continue
            else:
                continue
            done.append(Fusion(self.name, "removed", (), (label(n),)))
        return done


def _inference_only(wg: WorkingGraph, n) -> bool:
    mask = n.output[1] if len(n.output) > 1 else ""
    if mask and (wg.users(mask) or mask in wg.graph_outputs or mask in wg.implicit):
        return False
    if len(n.input) > 2 and n.input[2]:
        v = wg.const(n.input[2])
        return v is not None and not bool(v.reshape(-1)[0])
    return True


def _can_rename(wg: WorkingGraph, src: str) -> bool:
    return (src in wg.producer and src not in wg.graph_outputs and src not in wg.graph_inputs
            and src not in wg.implicit)
