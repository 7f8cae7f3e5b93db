"""``edgeops simulate (MODEL | --op SPEC) --board NAME [--lower auto|all|none] [--unfused
[--tiling auto|naive|FILE]] [--shapes ...] [--json] [--plot PNG] [--trace FILE] [--emulate]``:
predicted traffic, latency and bound of every node, launches, fusion, peak activation memory and
the total latency of a model (or one op).

A model is predicted as ``edgeops compile`` would build it (its passes and lowering, the same
per-node costs: :func:`edgeops.pipeline.predict.simulate_compiled`), so the total is compile's
predicted latency. ``--unfused`` gives the tiling study of the unfused graph instead
(:func:`edgeops.tiling.graphsim.simulate_model`), where ``--tiling``, ``--objective`` and
``--budget`` choose the tilings; ``--op`` is one op (:func:`~edgeops.tiling.graphsim.simulate_op`).
``--tiling FILE``: a tiling JSON for ``--op`` (``edgeops tune --op ... --out``), a plan for a
model with ``--unfused`` (``edgeops tune MODEL --out``). ``--trace`` writes a Chrome trace (open it in
https://ui.perfetto.dev); ``--plot`` a roofline PNG. ``--emulate`` (``--op`` on an Ascend board)
also runs the op on the functional NPU emulator and prints measured next to predicted.
"""
from __future__ import annotations

from edgeops.cli.common import budget

from edgeops.cli.common import console, print_json
from edgeops.cli.common import fmt_bytes, fmt_s
from edgeops.cli.tune import one_of, progress_bar
from edgeops.errors import EdgeOpsError


def add(sub):
    p = sub.add_parser("simulate", help="predict traffic, latency, memory and a timeline of a model or op")
    p.add_argument("model", nargs="?", help="path to an .onnx model, or 'sample' (or use --op)")
    p.add_argument("--op", metavar="SPEC", help="one operator, e.g. conv2d:N=1,C=3,H=224,W=224,K=64,R=7,S=7,stride=2,pad=3")
    p.add_argument("--board", required=True, help="board name or board file")
    p.add_argument("--target", help="target of the board (default: its first)")
    p.add_argument("--tiling", default="auto", metavar="auto|naive|FILE",
                   help="searched (auto, default), naive, or a tiling/plan JSON file")
    p.add_argument("--objective", choices=["latency", "traffic"], default="latency",
                   help="what --tiling auto optimises")
    p.add_argument("--budget", type=budget, default=None,
                   help="search budget per op (default: 250000 for --op and --unfused, compile's "
                        "for a compiled model)")
    p.add_argument("--lower", default="auto", choices=("auto", "all", "none"),
                   help="a model's placement, as edgeops compile --lower (on host: predicted, "
                        "not measured)")
    p.add_argument("--unfused", action="store_true",
                   help="a model: the unfused graph, every node tiled (a tiling study), not what "
                        "compile would build")
    p.add_argument("--shapes", action="append", metavar="NAME:1x3x224x224[;...]",
                   help="concrete sizes for model inputs with symbolic dims")
    p.add_argument("--no-cache", action="store_true", help="neither read nor write the tuning cache")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.add_argument("--plot", metavar="PNG", help="write a roofline of the nodes as PNG")
    p.add_argument("--trace", metavar="FILE", help="write the timeline as Chrome trace JSON (Perfetto)")
    p.add_argument("--emulate", action="store_true",
                   help="--op on an Ascend board: also run the functional NPU emulator")
    p.add_argument("--force", action="store_true", help="--emulate even when its estimate is "
                   "minutes (it refuses ops above %d GFLOP otherwise)" % (EMULATE_MAX_FLOPS // 10**9))
    p.set_defaults(func=run)


def emulator():
    """``edgeops.targets.ascend.emulate_op``, or a clear error when this build has none."""
    try:
        from edgeops.targets.ascend import emulate_op
        return emulate_op
    except ImportError:
        pass
    try:
        from edgeops.targets.ascend.emulate import emulate_op
        return emulate_op
    except ImportError as e:
        raise EdgeOpsError(f"--emulate: the Ascend emulator is not available in this installation "
                           f"(edgeops.targets.ascend.emulate_op: {e})") from None


# The emulator interprets every instruction in Python: about 0.2-0.4 GMAC/s on the 2-core test
# host (docs/notes/validation.md), so 40 GFLOP is a minute or two and 4096^3 GEMM ~4 minutes
EMULATE_MAX_FLOPS = 40 * 10**9
EMULATE_FLOPS_PER_S = 0.6e9


def check_emulation(spec: str, force: bool) -> None:
    """Refuse, before anything runs, an emulation whose estimate is minutes (unless ``force``)."""
    from edgeops.tiling.spaces import parse_spec
    flops = parse_spec(spec).flops
    if flops > EMULATE_MAX_FLOPS and not force:
        raise EdgeOpsError(f"--emulate on {spec}: {flops / 1e9:,.0f} GFLOP would take about "
                           f"{flops / EMULATE_FLOPS_PER_S / 60:,.0f} min in the emulator (it "
                           f"refuses above {EMULATE_MAX_FLOPS / 1e9:.0f} GFLOP); emulate a smaller "
                           f"op, or pass --force to run it anyway")


def run(args) -> int:
    one_of(args)
    if args.emulate and not args.op:
        raise EdgeOpsError("--emulate runs one operator: use it with --op SPEC")
    emulate_op = None
    if args.emulate:
        from edgeops import boards
        b = boards.load(args.board)
        if "ascend" not in b.targets:
            raise EdgeOpsError(f"--emulate needs an Ascend board; {b.name} is a {b.kind} board "
                               f"(targets {', '.join(b.targets)})")
        emulate_op = emulator()
        check_emulation(args.op, args.force)
    doc = simulate(args)
    if emulate_op is not None:
        with progress_bar(not args.json, "emulating") as bar:
            doc["emulated"] = emulate_op(args.op, doc["nodes"][0]["tiling"], args.board,
                                         progress=bar)
    if args.json:
        print_json(doc)
    else:
        print_report(doc)
    return 0


def simulate(args) -> dict:
    """The ``--json`` document; writes --trace and --plot."""
    from edgeops.pipeline.models import load_graph
    from edgeops.tiling.graphsim import simulate_model, simulate_op
    shapes = ";".join(args.shapes) if args.shapes else None
    study = args.op or args.unfused
    if not study and (args.tiling != "auto" or args.objective != "latency"):
        raise EdgeOpsError("--tiling and --objective choose the tilings of the unfused graph: add "
                           "--unfused (a compiled model's tilings are the lowering's own)")
    budget = args.budget if args.budget is not None or not study else 250_000
    with progress_bar(not args.json, "planning") as bar:
        if args.op:
            sim = simulate_op(args.op, args.board, tiling=args.tiling, target=args.target,
                              objective=args.objective, budget=budget, progress=bar)
        elif args.unfused:
            sim = simulate_model(load_graph(args.model, shapes), args.board, tiling=args.tiling,
                                 objective=args.objective, cache=not args.no_cache,
                                 target=args.target, budget=budget, progress=bar)
        else:
            from edgeops.pipeline.predict import simulate_compiled
            sim = simulate_compiled(args.model, args.board, mode=args.lower, shapes=shapes,
                                    targets=[args.target] if args.target else None,
                                    budget=budget, cache=not args.no_cache)
    doc = sim.to_dict()
    if args.trace:
        from edgeops.simulator.trace import write_trace
        try:
            write_trace(args.trace, sim.trace())
        except OSError as e:
            raise EdgeOpsError(f"cannot write the trace {args.trace}: {e.strerror}") from None
        doc["trace"] = args.trace
    if args.plot:
        from edgeops import boards
        from edgeops.simulator.plot import roofline
        from edgeops.simulator.roofline import points_from_nodes, roofline_data
        pts = points_from_nodes(doc["nodes"])
        dtype = next((r["dtype"] for r in doc["nodes"] if r.get("dtype")), "fp16")
        board = boards.load(args.board)
        doc["plot"] = roofline(pts, board, args.plot, dtype=dtype, target=args.target,
                               title=f"{doc['model']} on {doc['board']}")
        doc["roofline"] = roofline_data(pts, board, dtype=dtype, target=args.target)
    return doc


def print_report(doc: dict) -> None:
    from rich.markup import escape as e
    from rich.table import Table
    c = console()
    peer = doc.get("peer")
    view = (f"as compiled, --lower {doc['mode']}" if doc.get("view") == "compiled"
            else f"tiling {doc['tiling']}")
    t = Table(title=f"{e(doc['model'])} on {doc['board']} ({doc['target']}, {view})")
    cols = ["node", "op", "model", "off-chip", "latency", "bound", "launches", "tiling / note"]
    if peer:
        cols.insert(6, "ORT peer")
    for col in cols:
        t.add_column(col, overflow="fold")
    for r in doc["nodes"]:
        cells = [e(r["node"]), e(r["op"]), r["model"], fmt_bytes(r["offchip_bytes"]),
                 fmt_s(r["latency_s"]), r["bound"], str(r["launches"]),
                 e(r["tiling_desc"] or r["note"])]
        if peer:
            cells.insert(6, fmt_s(r.get("peer_latency_s")))
        t.add_row(*cells)
    c.print(t)
    c.print(f"total {fmt_s(doc['total_latency_s'])} over {doc['launches']} launches "
            f"({fmt_s(doc['launch_s'])} of launch overhead); off-chip {fmt_bytes(doc['offchip_bytes'])}; "
            f"peak activation memory {fmt_bytes(doc['peak_memory_bytes'])} (arena "
            f"{fmt_bytes(doc['arena_bytes'])})"
            + (f"; ONNX Runtime peer {fmt_s(peer['latency_s'])}" if peer else "")
            + (f"; fp32 runs as {doc['cast']['fp32']}" if doc.get("cast") else ""))
    if doc.get("unmodelled"):
        c.print(f"edgeops compile predicts {fmt_s(doc['compile_predicted_latency_s'])}: it leaves "
                f"{len(doc['unmodelled'])} node(s) unmodelled, estimated here from their bytes")
    em = doc.get("emulated")
    if em:
        c.print(f"emulated: off-chip {fmt_bytes(em['emulated']['offchip_bytes'])}, latency "
                f"{fmt_s(em['emulated']['latency_s'])}; max rel error {em.get('max_rel_error', 0):.2e}")
    for k in ("trace", "plot"):
        if doc.get(k):
            c.print(f"wrote {e(doc[k])}")
