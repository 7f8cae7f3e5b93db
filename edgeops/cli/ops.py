"""``edgeops ops [--json]``: the op x target support matrix, generated from the registry."""
from __future__ import annotations

from edgeops.cli.common import console, print_json


def add(sub):
    p = sub.add_parser("ops", help="op x target support matrix from the kernel registry")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.set_defaults(func=run)


def run(args) -> int:
    from edgeops.pipeline.targets import load_targets
    from edgeops.registry import KNOWN_TARGETS, support_matrix
    load_targets()
    m = support_matrix()
    if args.json:
        print_json({"targets": list(KNOWN_TARGETS), "ops": m})
        return 0
    from rich.table import Table
    t = Table(title="edgeops kernels: op x target (dtypes)")
    t.add_column("op")
    for tg in KNOWN_TARGETS:
        t.add_column(tg)
    for op, row in m.items():
        t.add_row(op, *[",".join(row.get(tg, [])) or "-" for tg in KNOWN_TARGETS])
    console().print(t)
    return 0
