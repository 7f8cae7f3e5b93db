"""Plan and simulate: the front door of graph-level simulation (``edgeops simulate``).

``simulate_model(model, board, tiling="auto")`` chooses a tiling for every node that has an
iteration space (``"auto"``: the planner with its tuning cache; ``"naive"``: the naive tiling of
each; a plan file from ``edgeops tune MODEL --out``: its tilings) and hands the predictions to
:func:`edgeops.simulator.graph.simulate_graph`, which costs the other nodes, plans the memory and
lays out the timeline. ``simulate_op(op, board, tiling)`` does the same for one op spec.

Precision: a board whose matrix unit has no fp32 rate (Ascend's Cube, Jetson's tensor cores)
runs an fp32 model in fp16, as its compilers do by default (ATC ``allow_fp32_to_fp16``,
TensorRT fp16 mode); the simulation says so (``cast``) and sizes tensors accordingly.
"""
from __future__ import annotations

import json
import os
import time

from edgeops.errors import BoardError, TilingError
from edgeops.simulator.evaluate import Prediction
from edgeops.simulator.graph import (CONST_OPS, VIEW_OPS, GraphSim, NodeCost, simulate_graph,
                                     tiled_cost, untiled_cost)
from edgeops.tiling.api import as_space, hardware, naive, predict, problem_for
from edgeops.tiling.spaces import Space, make_space
from edgeops.tiling.tiling import Tiling

MODES = ("auto", "naive")
PLAN_VERSION = 1


def load_model(model, shapes=None):
    """A Graph from a Graph, a path, bytes or a ModelProto (the pipeline resolves named models:
    :func:`edgeops.pipeline.models.load_graph`)."""
    from edgeops import graph
    if isinstance(model, graph.Graph):
        return model
    return graph.load(model, shapes)


def board_cast(board, target: str | None = None) -> dict[str, str]:
    """Dtype map of what ``board`` runs an fp32 model in: {} or {"fp32": "fp16"}."""
    hw = hardware(board, target)
    try:
        hw.unit("matrix", "fp32").flops_per_cycle("fp32")
        return {}
    except BoardError:
        return {"fp32": "fp16"}


def cast_space(sp: Space, cast: dict) -> Space:
    dt = cast.get(sp.dtype)
    return sp if not dt else make_space(sp.kind, **{**dict(sp.params), "dtype": dt})


def _launches(sp: Space, board, decomposition: str, target) -> int:
    return 1 + len(problem_for(sp, board, decomposition, target).fixed)


def _cost(sp, board, ev_tiling, pred, target, cast, cached=False) -> NodeCost:
    note = f"runs in {sp.dtype} (the board's matrix unit has no fp32 rate)" if cast else ""
    return tiled_cost(pred, launches=_launches(sp, board, ev_tiling.decomposition, target),
                      decomposition=ev_tiling.decomposition, tiling=ev_tiling.to_dict(),
                      tiling_desc=ev_tiling.describe(), signature=sp.signature, dtype=sp.dtype,
                      note=note, cached=cached)


def read_plan(src) -> dict[str, dict]:
    """{node: tiling dict} from a plan file written by ``edgeops tune MODEL --out`` (or its dict)."""
    if isinstance(src, (str, os.PathLike)):
        try:
            with open(src) as f:
                src = json.load(f)
        except OSError as e:
            raise TilingError(f"cannot read the plan file {os.fspath(src)!r}: {e.strerror}") from None
        except json.JSONDecodeError as e:
            raise TilingError(f"plan file is not valid JSON: {e}") from None
    if not isinstance(src, dict) or not isinstance(src.get("nodes"), dict):
        raise TilingError("a model plan must be a JSON object with \"nodes\": {node name: tiling} "
                          "(as `edgeops tune MODEL --out FILE` writes); a single tiling file applies "
                          "to --op only")
    return src["nodes"]


def write_plan(path, board: str, nodes: dict[str, dict], *, force: bool = False) -> None:
    write_json(path, {"version": PLAN_VERSION, "board": board, "nodes": nodes}, force=force)


def write_json(path, doc: dict, *, force: bool = False) -> None:
    """Write ``doc``; refuse to replace an existing file unless ``force``."""
    from edgeops.errors import EdgeOpsError
    path = os.fspath(path)
    if os.path.exists(path) and not force:
        raise EdgeOpsError(f"{path} already exists; pass --force to overwrite it")
    try:
        with open(path, "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
    except OSError as e:
        raise EdgeOpsError(f"cannot write {path}: {e.strerror}") from None


def plan_items(g, cast: dict) -> list[tuple]:
    """(node, Space or '!' + reason) for every node, the Space cast to the board's dtype."""
    from edgeops.tiling.from_node import space_from_node
    out = []
    for n in g.nodes:
        if n.op_type in VIEW_OPS or n.op_type in CONST_OPS:
            out.append((n, "!view"))
            continue
        sp = space_from_node(n)
        out.append((n, "!" + sp if isinstance(sp, str) else cast_space(sp, cast)))
    return out


def simulate_model(model, board, *, tiling="auto", shapes=None, objective: str = "latency",
                   cache=True, target: str | None = None, budget: int = 250_000, progress=None,
                   peer: bool = True, inplace: bool = True) -> GraphSim:
    """Simulate a whole model on ``board`` (see the module docstring).

    ``tiling``: ``"auto"``, ``"naive"``, or a plan ({node: tiling} dict, the plan document, or
    its path); nodes a plan does not name are planned as ``"auto"``. ``progress(done, total,
    node)`` after each node. Raises ModelError for a model that cannot be loaded and
    TilingError for a plan tiling that does not fit its node.
    """
    from edgeops import boards
    from edgeops.tiling.cache import TuningCache, tune
    t0 = time.perf_counter()
    board = boards.load(board)
    g = load_model(model, shapes)
    cast = board_cast(board, target)
    items = plan_items(g, cast)
    given: dict[str, dict] = {}
    mode = tiling if isinstance(tiling, str) and tiling in MODES else "plan"
    if mode == "plan":
        given = read_plan(tiling if not isinstance(tiling, dict) or "nodes" in tiling
                          else {"nodes": tiling})
        names = {n.name for n in g.nodes}
        unknown = sorted(set(given) - names)
        if unknown:
            raise TilingError(f"the plan names node {unknown[0]!r}, which the model does not have")
    costs: dict[str, NodeCost] = {}
    todo = []
    for n, sp in items:
        if isinstance(sp, str):
            continue
        if n.name in given:
            try:
                ev = predict(sp, board, given[n.name], target)
            except TilingError as e:
                raise TilingError(f"plan tiling of node {n.name!r}: {e}") from None
            costs[n.name] = _cost(sp, board, ev.tiling, ev.prediction, target, cast)
        elif mode == "naive":
            t = naive(sp, board, target=target)
            costs[n.name] = _cost(sp, board, t, predict(sp, board, t, target).prediction, target, cast)
        else:
            todo.append((n.name, n.op_type, sp))
    hw = hardware(board, target)
    if todo:
        if cache is True:
            cache = TuningCache()
        seen: dict[str, tuple] = {}
        for i, (name, _, sp) in enumerate(todo):
            if sp.signature not in seen:
                try:
                    seen[sp.signature] = tune(sp, board, objective=objective, cache=cache,
                                              target=target, budget=budget)
                except TilingError as e:    # e.g. too large for every buffer: stream estimate
                    seen[sp.signature] = e
            hit = seen[sp.signature]
            if isinstance(hit, TilingError):
                costs[name] = untiled_cost(g.node(name), hw, cast, f"no legal tiling: {hit}")
            else:
                entry, cached = hit
                costs[name] = _cost(sp, board, Tiling.from_dict(entry["tiling"]),
                                    Prediction.from_dict(entry["prediction"]), target, cast, cached)
            if progress is not None:
                progress(i + 1, len(todo), name)
    for n, sp in items:     # no iteration space: a stream or view estimate
        if isinstance(sp, str) and sp != "!view":
            costs[n.name] = untiled_cost(n, hw, cast)
    sim = simulate_graph(g, board, costs, target=target, cast=cast, peer=peer, inplace=inplace,
                         title=getattr(g, "source", None))
    sim.extra = {"tiling": mode, "seconds": time.perf_counter() - t0}
    return sim


def resolve_tiling(sp: Space, board, tiling, *, target=None, objective="latency",
                   budget: int = 250_000, progress=None,
                   decomposition: str | None = None) -> tuple[Tiling, dict]:
    """The tiling ``tiling`` names for one op: ``"auto"`` (searched), ``"naive"``, a Tiling, its
    dict or JSON text, or a path to a tiling file. Returns (tiling, search info).
    ``decomposition`` restricts auto and naive to one decomposition (TilingError if the op has
    no such decomposition)."""
    from edgeops.tiling.search import search
    if isinstance(tiling, Tiling):
        return tiling, {}
    if tiling == "auto":
        r = search(sp, board, objective=objective, target=target, budget=budget, progress=progress,
                   decomposition=decomposition)
        return r.best.tiling, {"candidates_evaluated": r.candidates_evaluated,
                               "search_seconds": r.seconds, "compulsory_bytes": r.compulsory_bytes,
                               "lower_bound_bytes": r.lower_bound_bytes}
    if tiling == "naive":
        return naive(sp, board, decomposition, target=target), {}
    if isinstance(tiling, dict):
        return Tiling.from_dict(tiling), {}
    text = tiling
    if isinstance(tiling, (str, os.PathLike)) and not str(tiling).lstrip().startswith("{"):
        try:
            with open(tiling) as f:
                text = f.read()
        except OSError as e:
            raise TilingError(f"--tiling: cannot read {os.fspath(tiling)!r} ({e.strerror}); give auto, "
                              f"naive or a tiling JSON file") from None
    d = _json(text)
    if isinstance(d, dict) and "nodes" in d and "levels" not in d:
        raise TilingError("this is a model plan (\"nodes\"); with --op give a single tiling file "
                          "(as `edgeops tune --op SPEC --out FILE` writes)")
    return Tiling.from_dict(d), {}


def check_kind(sp: Space, board, til: Tiling, target=None) -> None:
    """A tiling file for another op fails on its first field that differs (op, decomposition)."""
    from edgeops.tiling.api import decompositions
    if til.op != sp.kind:
        raise TilingError(f"tiling.op is {til.op!r} but the op is {sp.kind!r} (a tiling for "
                          f"another op?)")
    ds = decompositions(sp, board, target)
    if til.decomposition not in ds:
        raise TilingError(f"tiling.decomposition is {til.decomposition!r}; {sp.kind} has "
                          f"{', '.join(ds)} here")


def _json(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise TilingError(f"tiling file is not valid JSON: {e}") from None


def simulate_op(op, board, *, tiling="auto", target: str | None = None, objective: str = "latency",
                budget: int = 250_000, progress=None, peer: bool = True,
                decomposition: str | None = None) -> GraphSim:
    """Simulate one operator (spec string or Space) as a one-node model (``tiling`` as in
    :func:`resolve_tiling`)."""
    from edgeops import boards
    from edgeops.simulator.peer import PeerPass, peer_latency
    from edgeops.tiling.bounds import compulsory_bytes
    t0 = time.perf_counter()
    board = boards.load(board)
    sp = as_space(op)
    til, info = resolve_tiling(sp, board, tiling, target=target, objective=objective,
                               budget=budget, progress=progress, decomposition=decomposition)
    check_kind(sp, board, til, target)
    ev = predict(sp, board, til, target)
    c = _cost(sp, board, ev.tiling, ev.prediction, target, {})
    hw = hardware(board, target)
    row = {"node": sp.kind, "op": sp.signature, "model": c.model, "signature": sp.signature,
           "decomposition": c.decomposition, "tiling": c.tiling, "tiling_desc": c.tiling_desc,
           "dtype": sp.dtype, "offchip_bytes": c.offchip_bytes, "latency_s": c.latency_s,
           "bound": c.bound, "launches": c.launches, "launch_s": hw.launch_s * c.launches,
           "flops": c.flops, "start_s": 0.0, "end_s": c.latency_s, "busy_s": c.busy_s,
           "bytes": c.bytes, "note": "", "cached": False}
    peer_doc = None
    if peer and board.peer is not None:
        kind = "gemm" if sp.kind in ("gemm", "matmul", "conv2d", "swiglu") else "stream"
        est = peer_latency([PeerPass(sp.kind, sp.kind, kind, sp.flops, compulsory_bytes(sp))], board,
                           dtype=sp.dtype)
        row["peer_latency_s"] = est.latency_s
        peer_doc = {"engine": "onnxruntime", "latency_s": est.latency_s, "threads": est.threads,
                    "kernels": len(est.passes)}
    sim = GraphSim(sp.signature, board.name, hw.target, [row], None, {}, peer_doc)
    mode = tiling if isinstance(tiling, str) and tiling in MODES else "file"
    # one op holds its inputs, weights and output: that is its activation footprint
    sim.extra = {"tiling": mode, "peak_memory_bytes": int(compulsory_bytes(sp)),
                 "arena_bytes": int(compulsory_bytes(sp)), "seconds": time.perf_counter() - t0,
                 "compulsory_bytes": int(compulsory_bytes(sp)), **info}
    return sim


def tune_model(model, board, *, objective: str = "latency", cache=True, shapes=None,
               target: str | None = None, budget: int = 250_000, progress=None) -> dict:
    """Best tiling of every node of a model (one search per distinct op, through the tuning
    cache): the ``edgeops tune MODEL --json`` document, one entry per node plus totals."""
    from edgeops import boards
    from edgeops.tiling.cache import TuningCache, tune
    t0 = time.perf_counter()
    board = boards.load(board)
    g = load_model(model, shapes)
    cast = board_cast(board, target)
    items = plan_items(g, cast)
    if cache is True:
        cache = TuningCache()
    seen: dict[str, tuple] = {}
    nodes, n_done = [], 0
    todo = sum(1 for _, sp in items if not isinstance(sp, str))
    for n, sp in items:
        row = {"node": n.name, "op": n.op_type, "signature": None, "reason": ""}
        if isinstance(sp, str):
            row["reason"] = ("a view: no kernel" if sp == "!view" else sp[1:])
            nodes.append(row)
            continue
        row["signature"] = sp.signature
        if sp.signature not in seen:
            try:
                seen[sp.signature] = tune(sp, board, objective=objective, cache=cache,
                                          target=target, budget=budget)
            except TilingError as e:
                seen[sp.signature] = e
        hit = seen[sp.signature]
        n_done += 1
        if progress is not None:
            progress(n_done, todo, n.name)
        if isinstance(hit, TilingError):
            row["reason"] = f"no legal tiling: {hit}"
            nodes.append(row)
            continue
        e, cached = hit
        pr = e["prediction"]
        lb = e.get("lower_bound_bytes")
        row.update({
            "decomposition": e["decomposition"], "cached": cached, "dtype": sp.dtype,
            "best": {"tiling": e["tiling"], "offchip_bytes": pr["offchip_bytes"],
                     "latency_s": pr["latency_s"], "bound": pr["bound"]},
            "compulsory_bytes": e["compulsory_bytes"], "lower_bound_bytes": lb,
            "ratio_to_bound": pr["offchip_bytes"] / lb if lb else None,
            "candidates_evaluated": e["candidates_evaluated"], "seconds": e["seconds"]})
        nodes.append(row)
    tuned = [r for r in nodes if "best" in r]
    totals = {"nodes": len(nodes), "tuned": len(tuned),
              "cached": sum(1 for r in tuned if r["cached"]),
              "untiled": len(nodes) - len(tuned),
              "latency_s": float(sum(r["best"]["latency_s"] for r in tuned)),
              "offchip_bytes": int(sum(r["best"]["offchip_bytes"] for r in tuned)),
              "compulsory_bytes": int(sum(r["compulsory_bytes"] for r in tuned)),
              # each distinct op is searched once
              "candidates_evaluated": int(sum(v[0]["candidates_evaluated"] for v in seen.values()
                                              if isinstance(v, tuple) and not v[1])),
              "seconds": time.perf_counter() - t0}
    return {"model": getattr(g, "source", "<model>"), "board": board.name, "objective": objective,
            "cast": cast, "nodes": nodes, "totals": totals}
