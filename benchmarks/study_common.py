"""Shared bits of the ``study_*.py`` scripts: flags, tables, number formats, per-tensor traffic."""
from __future__ import annotations

import argparse
import json
import os
import sys


def parser(doc: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.add_argument("--plot", metavar="DIR", help="write the study's PNG figures into DIR")
    return p


def plot_path(args, name: str) -> str | None:
    if not args.plot:
        return None
    os.makedirs(args.plot, exist_ok=True)
    return os.path.join(args.plot, name)


def emit(args, doc: dict, tables: list[tuple[str, list[str], list[list]]]) -> None:
    """--json: the document on stdout; otherwise plain-text tables."""
    if args.json:
        json.dump(doc, sys.stdout, indent=2, default=float)
        sys.stdout.write("\n")
        return
    for title, head, rows in tables:
        cells = [[str(c) for c in r] for r in rows]
        w = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(head)]
        print(f"\n{title}")
        print("  ".join(h.ljust(w[i]) for i, h in enumerate(head)))
        print("  ".join("-" * x for x in w))
        for r in cells:
            print("  ".join(c.ljust(w[i]) for i, c in enumerate(r)))
    for k in doc.get("figures", []):
        print(f"\nwrote {k}")


def mb(b) -> str:
    return "-" if b is None else f"{b / 1e6:.3f} MB"


def us(s) -> str:
    return "-" if s is None else (f"{s * 1e3:.3f} ms" if s >= 1e-3 else f"{s * 1e6:.2f} us")


def role_traffic(op, board, tiling) -> dict[str, int]:
    """Off-chip bytes per operand role (A input, B weights, C output, in/out) of one tiling,
    from the simulator's moves (fixed passes of a decomposition not included)."""
    import numpy as np
    from edgeops.tiling import problem_for
    from edgeops.tiling.batch import batch_from_tilings
    from edgeops.tiling.model import evaluate
    p = problem_for(op, board, tiling.decomposition)
    s = evaluate(p, batch_from_tilings(p, [tiling]))
    off = p.hw.offchip.name
    out: dict[str, int] = {}
    for mv in s.ev.moves:
        if off in (mv.src, mv.dst):
            out[mv.role] = out.get(mv.role, 0) + int(np.asarray(mv.bytes).reshape(-1)[0])
    return out
