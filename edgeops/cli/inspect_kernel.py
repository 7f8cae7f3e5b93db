"""``edgeops inspect-kernel NAME [--target T] [--ptx | --asm] [--variant V] [--json]``: what a
registered kernel is (op, target, dtypes, priority, doc); for cuda kernels ``--ptx`` gives the
Jetson PTX (sm_87) of each compiled variant, for neon kernels ``--asm`` the aarch64 Cortex-A76
assembly of its hot loop with the NEON instructions counted. 
:func:`edgeops.pipeline.inspect.inspect_kernel` gives the ``--json`` document.
"""
from __future__ import annotations

import sys

from edgeops.cli.common import print_json
from edgeops.pipeline.inspect import inspect_kernel


def add(sub):
    p = sub.add_parser("inspect-kernel", help="a registered kernel; --ptx: its Jetson PTX (cuda)")
    p.add_argument("name", help="kernel name, e.g. cuda.gemm_tiled (see `edgeops ops`)")
    p.add_argument("--target", default=None, help="check the kernel belongs to this target")
    p.add_argument("--ptx", action="store_true", help="cuda: print PTX for sm_87 (compile_ptx)")
    p.add_argument("--asm", action="store_true", help="neon: aarch64 (cortex-a76) assembly")
    p.add_argument("--variant", default=None, help="only this tile configuration, e.g. t32")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.set_defaults(func=run)


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
