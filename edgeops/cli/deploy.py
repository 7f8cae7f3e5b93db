"""``edgeops deploy PKG --board NAME --to URI [--verify-key PUB] [--json]``, ``edgeops deploy
--rollback|--status|--clean --to URI``: put a package on a board (``edgeops.deploy``), smoke-test
it there, go back to the previous one, show what is on the board, or remove what dead deploys
left (every staging directory). A deploy itself removes staging directories untouched for 15
minutes. Deploys, rollbacks and cleans of one board hold its lock one at a time (``--wait S``
bounds the wait; a lock left by a dead deploy on this host is broken, ``--unlock`` breaks one
left by a deploy that died on another host). :func:`edgeops.deploy.deploy`,
``rollback``, ``status`` and ``clean`` are the same in Python."""
from __future__ import annotations

from edgeops.cli.common import console, print_json, seconds
from edgeops.errors import DeployError


def add(sub):
    p = sub.add_parser("deploy", help="install a package on a board, smoke-test it, or roll back")
    p.add_argument("package", metavar="PKG", nargs="?", help="package directory (edgeops compile)")
    p.add_argument("--board", help="board the package must have been compiled for")
    p.add_argument("--to", required=True, metavar="URI",
                   help="local:/path, ssh://user@host:port/path or "
                        "qemu-arm64:/path/to/sysroot[:/board/dir]")
    p.add_argument("--verify-key", metavar="PUB", help="refuse a package not signed by this "
                   "ed25519 public key (edgeops keygen, compile --sign)")
    p.add_argument("--rollback", action="store_true", help="make the previous package current")
    p.add_argument("--status", action="store_true", help="show the board's packages and "
                   "leftover staging directories")
    p.add_argument("--clean", action="store_true", help="remove every staging directory a "
                   "failed deploy left on the board")
    p.add_argument("--unlock", action="store_true", help="break the board's deploy lock (a "
                   "deploy that died on another host), restoring the links it switched")
    p.add_argument("--wait", type=seconds, metavar="S", help="wait this long for another "
                   "deploy's board lock (default 300; 0: refuse at once)")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.set_defaults(func=run)


def run(args) -> int:
    from edgeops import deploy
    modes = [m for m in ("rollback", "status", "clean", "unlock") if getattr(args, m)]
    if len(modes) > 1:
        raise DeployError(f"--{modes[0]} and --{modes[1]} do not go together; give one")
    if modes and args.package:
        raise DeployError(f"--{modes[0]} takes no PKG: it acts on the board at --to")
    if args.unlock:
        doc = deploy.unlock(args.to)
        b = doc["broke"]
        msg = (f"{doc['to']}: no deploy lock" if b is None else
               f"{doc['to']}: broke the lock of {b['holder']['what']} (host {b['holder']['host']}"
               f", pid {b['holder']['pid']})" + (f"; restored current {b['restored']['current']}"
                                                 if b["restored"] else ""))
    elif args.rollback:
        doc = deploy.rollback(args.to, wait_s=args.wait)
        msg = f"rolled back {doc['to']}: current {doc['current']}, previous {doc['previous']}"
    elif args.status:
        doc = deploy.status(args.to)
        left = ", ".join(f"{n} (idle {s:.0f} s)" for n, s in doc["staging_idle_s"].items())
        lock = doc.get("lock")
        msg = (f"{doc['to']}: current {doc['current']}, previous {doc['previous']}; staging: "
               f"{left or 'none'}; pushed edgeops: {doc['pushed_edgeops'] or 'none'}"
               + (f"; locked by {lock['what']} (host {lock['host']}, pid {lock['pid']})"
                  if lock else ""))
    elif args.clean:
        doc = deploy.clean(args.to, wait_s=args.wait)
        msg = f"{doc['to']}: removed {', '.join(doc['removed']) or 'nothing'}"
    else:
        if not args.package:
            raise DeployError("give the package to deploy (edgeops deploy PKG --to URI), or "
                              "--rollback, --status or --clean")
        doc = deploy.deploy(args.package, args.to, board=args.board,
                            verify_key=args.verify_key, wait_s=args.wait)
        s = doc["smoke"]
        pushed = doc["agent"]["pushed"]
        msg = (f"deployed {doc['package']} to {doc['to']} as {doc['installed_as']} (previous: "
               f"{doc['previous']}); smoke test ok, max rel error {s['max_rel']:.2e}"
               + (f"; pushed edgeops ({pushed['why']})" if pushed else "")
               + ("; signature ok" if doc["signature"] else ""))
    if args.json:
        print_json(doc)
    else:
        console().print(msg, markup=False)
    return 0
