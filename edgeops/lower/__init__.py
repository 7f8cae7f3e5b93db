"""Lowering for a board: each node gets (target, kernel, tiling) or stays a standard ONNX node that
ONNX Runtime runs.

``lower(model, board, mode="auto")`` fuses (``edgeops.passes``), asks the registry for a kernel per
node, plans its tiling (``edgeops.tiling.tune``, the simulator as cost model) and decides:

* ``mode="none"``: every node stays in ONNX Runtime (no fusion either).
* ``mode="all"``: every node an edgeops kernel supports is lowered (tests, conformance).
* ``mode="auto"`` (default): on NPU boards as ``all`` (there is no other NPU kernel); on CPU and
  GPU boards a node or fused chain is lowered only when its kernel is measured (the board's
  kernel table, where one exists) or predicted (edgeops.simulator.peer models ONNX Runtime's own
  execution of the same node) to be faster than ONNX Runtime; otherwise the original nodes stay.

A lowered node keeps its op_type and attributes, moves to the ``ai.edgeops`` domain and carries
``kernel`` (kernel id) and, where the kernel takes one, ``tiling`` (Tiling JSON); edgeops.ort runs
it. A fused ``ai.edgeops`` node that is not lowered is replaced by the original nodes it fused
(ONNX Runtime cannot run it), each then judged on its own. NPU kernels that only compute in fp16
get fp32 nodes (the Cube runs fp16, as vendor converters do by default; the boundary stays fp32).
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from types import SimpleNamespace

import onnx

from edgeops.errors import EdgeOpsError

ORT = "ONNX Runtime"
MODES = ("auto", "all", "none")
FP16_NOTE = ("fp32 models run the Cube in fp16, as vendor converters do by default: inputs are "
             "converted inside each kernel, tensors at the ONNX Runtime boundary stay fp32")


class LoweringError(EdgeOpsError):
    """A lowering mode, target or model edgeops cannot lower as asked."""


@dataclass
class Placement:
    """One row of the placement table."""
    node: str
    op: str                          # "Conv", "ai.edgeops::SwiGLU"
    target: str | None               # None: stays in ONNX Runtime
    kernel: str | None
    reason: str
    latency_s: float | None          # predicted where it runs (None: not modelled)
    bound: str | None
    peer_latency_s: float | None     # ONNX Runtime's predicted latency for the same node
    tiling: str | None = None        # Tiling JSON, on the node when its kernel takes one
    plan: str | None = None          # Tiling.describe()
    precision: str = "fp32"
    fused: tuple[str, ...] = ()      # original nodes a fused node replaces
    signature: str | None = None             # op signature (tuning cache, kernel tables)
    measured_s: float | None = None          # the kernel through the bridge, measured here
    measured_peer_s: float | None = None     # ONNX Runtime on the original node(s), measured
    band: float | None = None                # latency_s is within +-band (relative), 9 in 10
    peer_band: float | None = None           # the same for peer_latency_s
    calibration: str | None = None           # what latency_s was predicted from
    # what latency_s was predicted from (edgeops.pipeline.predict simulates the same), not saved
    prediction: object = field(default=None, repr=False, compare=False)
    planned: object = field(default=None, repr=False, compare=False)     # its Tiling

    @property
    def where(self) -> str:
        return self.target or ORT

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self)
             if f.name not in ("prediction", "planned")}
        d["where"], d["fused"] = self.where, list(self.fused)
        return d


@dataclass
class Lowering:
    board: object
    mode: str
    targets: tuple[str, ...]
    placements: list[Placement]
    model: onnx.ModelProto           # the lowered model (ai.edgeops nodes carry kernel, tiling)
    source: onnx.ModelProto          # the original, with --shapes applied and shapes inferred
    passes: dict = field(default_factory=dict)

    @property
    def lowered(self) -> list[Placement]:
        return [p for p in self.placements if p.target]

    @property
    def predicted_latency_s(self) -> float:
        """Sum of per-node predictions (edgeops kernel or ONNX Runtime peer; no overlap)."""
        return sum(p.latency_s or 0.0 for p in self.placements)

    @property
    def unmodelled(self) -> list[str]:
        return [p.node for p in self.placements if p.latency_s is None]

    @property
    def precision(self) -> dict:
        fp16 = sorted({p.target for p in self.lowered if p.precision == "fp16"})
        return {"boundary": "fp32", **({t: FP16_NOTE for t in fp16})}

    def to_dict(self) -> dict:
        return {"board": self.board.name, "board_kind": self.board.kind, "mode": self.mode,
                "targets": list(self.targets), "used_targets": sorted({p.target for p in self.lowered}),
                "predicted_latency_s": self.predicted_latency_s, "unmodelled": self.unmodelled,
                "precision": self.precision, "passes": self.passes,
                "placement": [p.to_dict() for p in self.placements]}


def measured_table(board) -> dict:
    """{(kernel id, op signature): (edgeops seconds, ONNX Runtime seconds)} measured on a board.

    ADAPTER: no board file carries a measured kernel table yet (``edgeops bench`` on a board will
    write one); until then this reads an optional ``kernel_table`` attribute of the board and is
    otherwise empty. ``host`` is measured here on demand instead (``edgeops.lower.measure``), and
    ``lower(measured=...)`` injects a table."""
    return dict(getattr(board, "kernel_table", None) or {})


def lower(model, board, *, mode: str = "auto", targets=None, shapes=None, plan: bool = True,
          budget: int = 20_000, cache=True, measured: dict | None = None,
          measure: bool | None = None, exclude: dict | None = None, table=None,
          regions: bool = True, threads: int | None = None) -> Lowering:
    """Lower ``model`` (path, bytes or ModelProto) for ``board`` (name, path or Board).

    ``targets``: kernel targets in order of preference (default: the board's); ``reference``
    is only ever used when named here. ``plan``: tune tilings (off: kernels use their defaults
    and CPU/GPU ``auto`` keeps every node in ONNX Runtime). ``budget``: tilings evaluated per op.
    ``measured``: a kernel table (see :func:`measured_table`) that overrides predictions.
    ``measure``: time kernels against ONNX Runtime here under ``auto`` (default: on the ``host``
    board only, the one machine that is here). ``exclude``: {node name: why} kept in ONNX
    Runtime whatever the policy (compile puts nodes whose kernel failed its check here).
    ``table``: the :class:`edgeops.lower.measure.KernelTable` to read and fill (default: this
    machine's cached one, when measuring). ``regions``: where measured, also lower nodes that
    lose to ONNX Runtime alone only by their bridge crossing when a run of consecutive lowered
    nodes (one region at run time, :mod:`edgeops.ort.regions`) wins as a whole. ``threads``: the
    threads the package will run with (its ``runtime.threads``; default: every core), which the
    measured table's figures are taken at.
    """
    from edgeops import boards, graph
    from edgeops.passes import run_passes
    from edgeops.pipeline.targets import import_target, load_targets
    from edgeops.registry import KNOWN_TARGETS
    if mode not in MODES:
        raise LoweringError(f"unknown lowering mode {mode!r}; use one of {', '.join(MODES)}")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise LoweringError(f"threads={threads!r}: give a positive number of threads (or none: "
                            f"every core)")
    board = boards.load(board)
    targets = tuple(targets or board.targets)
    for t in targets:
        if t not in KNOWN_TARGETS:
            raise LoweringError(f"unknown target {t!r}; known: {', '.join(KNOWN_TARGETS)}")
    from edgeops.lower.policy import _where, calibration_for, place, promote_regions, unfuse
    from edgeops.lower.surgery import build, named, provenance
    load_targets()
    for t in targets:
        import_target(t)
    src = graph.load(named(model), shapes)
    if mode == "none":
        fused_model, report = src.model, None
    else:
        fused_model, report = run_passes(src.model)
    fused = graph.load(fused_model, check=False)
    if measure is None:
        measure = board.name == "host"
    if not (measure and mode == "auto" and board.kind != "npu"):
        table = None
    elif table is None:
        from edgeops.lower.measure import KernelTable
        from edgeops.package import check_memory
        check_memory(src, "measuring the nodes here")    # before anything allocates
        table = KernelTable(board, threads=threads)
    src_nodes = {n.name: n for n in src.nodes}
    ctx = SimpleNamespace(board=board, mode=mode, targets=targets, plan=plan, budget=budget,
                          cache=cache, measured={**measured_table(board), **(measured or {})},
                          table=table, src_nodes=src_nodes, opset=src.opsets.get("", 0),
                          exclude=dict(exclude or {}), threads=threads,
                          calibration=calibration_for(board))
    origin = provenance(report)
    ctx.regional = {} if (table is not None or ctx.measured) and regions else None
    first: list[tuple[object, Placement | None]] = []
    for n in fused.nodes:
        if n.op_type in graph.CONSTANT_OPS:
            first.append((n, None))
            continue
        first.append((n, place(n, ctx, origin.get(n.name, ()) if n.domain else ())))
    promoted = promote_regions(first, ctx) if ctx.regional else 0
    chosen: list[tuple[object, Placement]] = []
    for n, p in first:
        if p is not None and p.target is None and n.domain and p.fused:   # ORT cannot run it
            chosen += unfuse(p, [src_nodes[s] for s in p.fused], ctx)
        else:
            chosen.append((n, p))
    out, extra = build(chosen, fused.model, src, ctx.opset, board.name)
    rows = [p for _n, p in chosen if p is not None] + [place(n, ctx) for n in extra]
    lw = Lowering(board, mode, targets, rows, out, src.model, report.as_dict() if report else {})
    if table is not None and lw.lowered:
        # each lowered node won alone; the package must also win as a whole, else it is
        # ONNX Runtime's own graph (never slower than ORT where this machine can tell)
        from edgeops.lower.measure import WHOLE_MARGIN
        whole = table.whole_model(src.model, out)
        if whole is not None and not whole[0] < whole[1] * WHOLE_MARGIN and promoted:
            # first without the region-only nodes: the nodes that win alone may still win
            again = lower(model, board, mode=mode, targets=targets, shapes=shapes, plan=plan,
                          budget=budget, cache=cache, measured=measured, measure=measure,
                          exclude=exclude, table=table, regions=False, threads=threads)
            held = {q for p in lw.lowered if " in a region of " in p.reason
                    for q in (p.node, *p.fused)}     # fused rows come back as their originals
            _say_regions_lost(again, held,
                              f"a region with it won as measured, but the whole package measured "
                              f"{whole[0] * 1e3:.3f} ms vs ORT {whole[1] * 1e3:.3f} ms on "
                              f"{_where(ctx)}, so regions are off")
            return again
        if whole is not None and not whole[0] < whole[1] * WHOLE_MARGIN:
            said = (f"whole model measured on {_where(ctx)}: package {whole[0] * 1e3:.3f} ms vs "
                    f"ORT {whole[1] * 1e3:.3f} ms, so no node is lowered")
            kept = {p.node: f"{said} (this node alone: {p.reason})" for p in lw.lowered}
            return lower(model, board, mode=mode, targets=targets, shapes=shapes, plan=plan,
                         budget=budget, cache=cache, measured=measured, measure=measure,
                         exclude={**dict(exclude or {}), **kept}, table=table, regions=False,
                         threads=threads)
    return lw


def _say_regions_lost(lw: Lowering, names: set, why: str) -> None:
    """Append ``why`` to the rows of ``lw`` kept in ONNX Runtime that a dropped region held
    (``names``: its nodes and the original nodes fused into them)."""
    for p in lw.placements:
        if p.target is None and p.node in names:
            p.reason += f"; {why}"
