"""``edgeops inspect-kernel NAME [--target cuda] [--ptx] [--variant V] [--json]``: what a
registered kernel is (op, target, dtypes, priority, doc) and, for cuda kernels with ``--ptx``, the
Jetson PTX (sm_87) of each compiled variant. :func:`inspect_kernel` gives the ``--json`` document.
"""
from __future__ import annotations

import sys

from edgeops.cli.common import print_json
from edgeops.errors import EdgeOpsError


def add(sub):
    p = sub.add_parser("inspect-kernel", help="a registered kernel; --ptx: its Jetson PTX (cuda)")
    p.add_argument("name", help="kernel name, e.g. cuda.gemm_tiled (see `edgeops ops`)")
    p.add_argument("--target", default=None, help="check the kernel belongs to this target")
    p.add_argument("--ptx", action="store_true", help="cuda: print PTX for sm_87 (compile_ptx)")
    p.add_argument("--variant", default=None, help="only this tile configuration, e.g. t32")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.set_defaults(func=run)


def inspect_kernel(name: str, target: str | None = None, ptx: bool = False,
                   variant: str | None = None) -> dict:
    from edgeops.registry import kernel_by_name
    k = kernel_by_name(name)
    if target is not None and k.target != target:
        raise EdgeOpsError(f"kernel {name!r} is a {k.target} kernel, not {target}; list the "
                           f"{target} kernels with `edgeops ops`")
    doc = {"name": k.name, "op": k.op, "target": k.target, "dtypes": list(k.dtypes),
           "priority": k.priority, "doc": k.doc}
    if ptx:
        if k.target != "cuda":
            raise EdgeOpsError(f"--ptx is for cuda kernels; {name!r} is a {k.target} kernel")
        from edgeops.targets.cuda import ptx as P
        why = P.toolchain_problem()
        if why:
            raise EdgeOpsError(why)
        doc["ptx"] = [{"variant": p.variant, "target": p.target, "version": p.version,
                       "text": p.text} for p in P.compile_kernel(name, variant)]
    return doc


def run(args) -> int:
    doc = inspect_kernel(args.name, args.target, args.ptx, args.variant)
    if args.json:
        print_json(doc)
        return 0
    print(f"{doc['name']}: {doc['op']} on {doc['target']} ({'/'.join(doc['dtypes'])}), "
          f"priority {doc['priority']} - {doc['doc']}", file=sys.stderr)
    for p in doc.get("ptx", []):
        print(f"// ---- {doc['name']} [{p['variant']}]  .target {p['target']}  "
              f".version {p['version']}")
        print(p["text"])
    return 0
