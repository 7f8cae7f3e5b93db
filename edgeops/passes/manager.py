"""Run the registered passes in priority order on a model: a new model and a report back."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

import onnx

from edgeops.ops import EDGEOPS_DOMAIN
from edgeops.passes.base import Fusion, PassError, all_passes, get_pass
from edgeops.passes.rewrite import WorkingGraph


@dataclass
class PassReport:
    passes: list[str]
    nodes_before: int
    nodes_after: int
    fusions: list[Fusion] = field(default_factory=list)

    def by_result(self) -> dict[str, int]:
        return dict(Counter(f.result for f in self.fusions))

    def as_dict(self) -> dict:
        return {"passes": self.passes, "nodes_before": self.nodes_before,
                "nodes_after": self.nodes_after, "fusions": [f.as_dict() for f in self.fusions]}

    def summary(self) -> str:
        lines = [f"{self.nodes_before} -> {self.nodes_after} nodes"]
        for f in self.fusions:
            new = ", ".join(f.new_nodes) or "-"
            lines.append(f"  {f.pass_name:<20} {f.result:<26} {new:<24} <- {', '.join(f.fused)}")
        return "\n".join(lines)


def run_passes(model: onnx.ModelProto, passes: Iterable[str] | None = None, *,
               exclude: Iterable[str] = (), base_dir: str = "") -> tuple[onnx.ModelProto, PassReport]:
    """Apply ``passes`` (names; default every registered pass) in priority order to a copy of
    ``model``. ``base_dir``: where the model's external data lives, if it has any."""
    if not isinstance(model, onnx.ModelProto):
        raise PassError(f"run_passes takes an onnx.ModelProto, got {type(model).__name__}; load "
                        f"the file with onnx.load first")
    chosen = [get_pass(p) for p in passes] if passes is not None else all_passes()
    skip = {get_pass(p).name for p in exclude}
    chosen = sorted({p.name: p for p in chosen if p.name not in skip}.values(),
                    key=lambda p: p.priority)
    m = onnx.ModelProto()
    m.CopyFrom(model)
    before = len(m.graph.node)
    wg = WorkingGraph(m, base_dir)
    fusions: list[Fusion] = []
    for p in chosen:
        fusions += p().run(wg)
    out = wg.finish()
    if any(n.domain == EDGEOPS_DOMAIN for n in out.graph.node) and not any(
            o.domain == EDGEOPS_DOMAIN for o in out.opset_import):
        out.opset_import.append(onnx.helper.make_opsetid(EDGEOPS_DOMAIN, 1))
    return out, PassReport([p.name for p in chosen], before, len(out.graph.node), fusions)
