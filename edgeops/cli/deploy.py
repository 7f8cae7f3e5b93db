"""``edgeops deploy PKG --board NAME --to URI [--json]`` and ``edgeops deploy --rollback --to URI``:
put a package on a board (``edgeops.deploy``), smoke-test it there, or go back to the previous
one. :func:`edgeops.deploy.deploy` and :func:`edgeops.deploy.rollback` are the same in Python."""
from __future__ import annotations

from edgeops.cli.common import console, print_json
from edgeops.errors import DeployError


def add(sub):
    p = sub.add_parser("deploy", help="install a package on a board, smoke-test it, or roll back")
    p.add_argument("package", metavar="PKG", nargs="?", help="package directory (edgeops compile)")
    p.add_argument("--board", help="board the package must have been compiled for")
    p.add_argument("--to", required=True, metavar="URI",
                   help="local:/path or ssh://user@host:port/path")
    p.add_argument("--rollback", action="store_true", help="make the previous package current")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.set_defaults(func=run)


def run(args) -> int:
    from edgeops import deploy
    if args.rollback:
        if args.package:
            raise DeployError("--rollback takes no PKG: it goes back to the board's previous package")
        doc = deploy.rollback(args.to)
        msg = f"rolled back {doc['to']}: current {doc['current']}, previous {doc['previous']}"
    else:
        if not args.package:
            raise DeployError("give the package to deploy (edgeops deploy PKG --to URI) or --rollback")
        doc = deploy.deploy(args.package, args.to, board=args.board)
        s = doc["smoke"]
        msg = (f"deployed {doc['package']} to {doc['to']} as {doc['installed_as']} (previous: "
               f"{doc['previous']}); smoke test ok, max rel error {s['max_rel']:.2e}")
    if args.json:
        print_json(doc)
    else:
        console().print(msg, markup=False)
    return 0
