"""The measured kernel table of a model on this machine (``edgeops tune MODEL --measure-table``):
every node an edgeops kernel could take, timed against ONNX Runtime (edgeops.lower.measure)."""
from __future__ import annotations


def measure_table(model, board: str = "host", *, remeasure: bool = False, shapes=None,
                  threads: int | None = None) -> dict:
    """Measure (or read from the cache) the kernel table entries of every node of ``model``
    that an edgeops kernel could take on ``board`` (only ``host``: this machine)."""
    from edgeops import boards
    from edgeops.errors import EdgeOpsError
    from edgeops.lower import lower
    from edgeops.lower.measure import MARGIN, KernelTable
    b = boards.load(board)
    if b.name != "host":
        raise EdgeOpsError(f"board {b.name!r} is not this machine: only 'host' can be measured "
                           f"here (a table for {b.name} has to be measured on it)")
    from edgeops.pipeline.models import resolve
    model = resolve(model)[0]
    table = KernelTable(b, remeasure=remeasure, threads=threads)
    lw = lower(model, b, mode="auto", shapes=shapes, measure=True, table=table, threads=threads)
    rows = table.rows(table.used)
    for r in rows:
        e, o = r["edgeops_s"], r["ort_s"]
        r["ratio"] = None if e is None or o is None or e == 0 else o / e
        r["lowered"] = e is not None and o is not None and e < o * MARGIN
    return {"board": b.name, "table": str(table.path), "machine": table.machine, "margin": MARGIN,
            "threads": table.threads,
            "entries": rows, "measured_now": len(table.measured_now),
            "cached": len(rows) - len([k for k in table.measured_now if k in table.used]),
            "lowered": [p.node for p in lw.lowered]}
