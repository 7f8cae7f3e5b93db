"""``edgeops boards [--json]`` lists the bundled boards; ``edgeops boards show NAME|FILE [--json]``
prints one board with the source of every figure."""
from __future__ import annotations

from edgeops.cli.common import console, print_json


def add(sub):
    p = sub.add_parser("boards", help="list boards, or show one with its cited figures")
    p.add_argument("action", nargs="?", choices=["list", "show"], default="list")
    p.add_argument("board", nargs="?", help="board name or path to a board file (for show)")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.set_defaults(func=run)


def summary(board) -> dict:
    return {"name": board.name, "description": board.description, "kind": board.kind,
            "targets": list(board.targets), "architecture": board.architecture,
            "clock_hz": board.clock_hz, "cores": {c.name: c.count for c in board.cores},
            "peak_flops": {dt: board.peak_flops(dt) for dt in ("fp32", "fp16", "int8")},
            "offchip_bandwidth_bytes_per_s": max((p.bandwidth_bytes_per_s for p in board.paths
                                                  if p.src == board.offchip.name), default=0.0),
            "memory": [m.name for m in board.memories], "sources": board.sources,
            "file": board.path_on_disk}


def run(args) -> int:
    from edgeops import boards
    from edgeops.errors import BoardError
    if args.action == "show":
        if not args.board:
            raise BoardError("edgeops boards show needs a board name or file; known: "
                             + ", ".join(boards.names()))
        b = boards.load(args.board)
        if args.json:
            print_json(b.to_dict())
        else:
            _show(b)
        return 0
    if args.board:
        raise BoardError(f"unexpected argument {args.board!r}; did you mean "
                         f"'edgeops boards show {args.board}'?")
    bs = [boards.load(n) for n in boards.names()]
    if args.json:
        print_json({"boards": [summary(b) for b in bs]})
        return 0
    from rich.table import Table
    t = Table(title="edgeops boards")
    for c in ("name", "kind", "targets", "cores", "clock", "fp32 peak", "fp16 peak", "off-chip BW"):
        t.add_column(c, no_wrap=c in ("name", "targets"))
    for b in bs:
        s = summary(b)
        t.add_row(b.name, b.kind, ",".join(b.targets),
                  " ".join(f"{k}={v}" for k, v in s["cores"].items()), f"{b.clock_hz / 1e9:.2f} GHz",
                  f"{s['peak_flops']['fp32'] / 1e9:.0f} GFLOP/s", f"{s['peak_flops']['fp16'] / 1e9:.0f} GFLOP/s",
                  f"{s['offchip_bandwidth_bytes_per_s'] / 1e9:.1f} GB/s")
    console().print(t)
    return 0


def _show(b) -> None:
    from rich.table import Table
    c = console()
    c.print(f"[bold]{b.name}[/bold] ({b.kind}, targets {', '.join(b.targets)}): {b.description}")
    t = Table(show_header=True)
    t.add_column("figure")
    t.add_column("value")
    t.add_column("source")
    d = b.to_dict()
    for key, src in b.sources.items():
        t.add_row(key, _value(d, key, b), src)
    c.print(t)


def _value(d, key, b) -> str:
    import re
    m = re.match(r"(\w+)(?:\[(\d+)\])?\.(\w+)", key)
    sec, idx, fig = m.group(1), m.group(2), m.group(3)
    table = {"core": "cores", "unit": "units", "memory": "memories", "path": "paths"}.get(sec, sec)
    if sec == "clock":
        return f"{b.clock_hz:g}"
    if sec == "launch":
        return f"{b.launch_overhead_s:g}"
    obj = d[table][int(idx)] if idx is not None else d[table]
    return str(obj[fig])
