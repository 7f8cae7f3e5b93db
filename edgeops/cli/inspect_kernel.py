"""``edgeops inspect-kernel NAME [--target T] [--ptx | --asm] [--variant V] [--json]``: what a
registered kernel is (op, target, dtypes, priority, doc); for cuda kernels ``--ptx`` gives the
Jetson PTX (sm_87) of each compiled variant, for neon kernels ``--asm`` the aarch64 Cortex-A76
assembly of its hot loop with the NEON instructions counted. :func:`inspect_kernel` gives the ``--json`` document.
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
    p.add_argument("--asm", action="store_true", help="neon: aarch64 (cortex-a76) assembly")
    p.add_argument("--variant", default=None, help="only this tile configuration, e.g. t32")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.set_defaults(func=run)


def inspect_kernel(name: str, target: str | None = None, ptx: bool = False,
                   variant: str | None = None, asm: bool = False) -> dict:
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
    if asm:
        if k.target != "neon":
            raise EdgeOpsError(f"--asm is for neon kernels; {name!r} is a {k.target} kernel")
        from edgeops.targets.neon.asm import neon_report
        rep = neon_report(name)
        doc["asm"] = {"triple": "aarch64-unknown-linux-gnu", "cpu": "cortex-a76",
                      "counts": rep.counts, "text": rep.asm}
    return doc


def run(args) -> int:
    doc = inspect_kernel(args.name, args.target, args.ptx, args.variant, args.asm)
    if args.json:
        print_json(doc)
        return 0
    print(f"{doc['name']}: {doc['op']} on {doc['target']} ({'/'.join(doc['dtypes'])}), "
          f"priority {doc['priority']} - {doc['doc']}", file=sys.stderr)
    for p in doc.get("ptx", []):
        print(f"// ---- {doc['name']} [{p['variant']}]  .target {p['target']}  "
              f".version {p['version']}")
        print(p["text"])
    if "asm" in doc:
        counts = ", ".join(f"{k} x{v}" for k, v in doc["asm"]["counts"].items())
        print(f"// ---- {doc['name']}  aarch64 cortex-a76: {counts}")
        print(doc["asm"]["text"])
    return 0
