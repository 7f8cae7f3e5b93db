"""``edgeops infer --url URL --inputs FILE.npz [--priority P] [--out OUT.npz] [--json]``: send
one request to a running ``edgeops serve`` and print (or save) the outputs.
:func:`edgeops.serve.client.infer` is the same in Python."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from edgeops.cli.common import console, print_json


def add(sub):
    p = sub.add_parser("infer", help="send inputs to a running edgeops serve")
    p.add_argument("--url", required=True, help="http://HOST:PORT of edgeops serve")
    p.add_argument("--inputs", required=True, metavar="FILE.npz", help="inputs by name")
    p.add_argument("--priority", default="normal", choices=("high", "normal", "low"))
    p.add_argument("--out", metavar="OUT.npz", help="save the outputs here")
    p.add_argument("--force", action="store_true", help="replace an existing --out file")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.set_defaults(func=run)


def run(args) -> int:
    from edgeops.errors import EdgeOpsError
    from edgeops.serve.client import Client
    from edgeops.serve.protocol import encode
    if args.out and Path(args.out).exists() and not args.force:
        raise EdgeOpsError(f"--out {args.out} already exists; use --force to replace it")
    try:
        with np.load(args.inputs, allow_pickle=False) as z:
            feeds = {k: z[k] for k in z.files}
    except (OSError, ValueError) as e:
        raise EdgeOpsError(f"--inputs {args.inputs}: not a readable .npz ({e})") from None
    with Client(args.url) as c:
        outs = c.infer(feeds, args.priority)
        version = c.last_version
    if args.out:
        np.savez(args.out, **outs)
    if args.json:
        print_json({"url": args.url, "version": version, "outputs": {
            n: encode(v) | {"mean": float(v.mean()) if v.size else None}
            for n, v in outs.items()}})
        return 0
    c = console()
    for n, v in outs.items():
        c.print(f"{n}: {v.dtype} {list(v.shape)}", markup=False)
        c.print(np.array2string(v, threshold=20, edgeitems=3), markup=False)
    return 0
