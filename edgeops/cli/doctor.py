"""``edgeops doctor --to URI [--runs N] [--json]``: the board's health checklist (23 checks, listed
in :mod:`edgeops.deploy.doctor`), one line per check with ok/warn/fail; exit status 1 when any check
fails. The checks run on the board, through its agent. :func:`edgeops.deploy.doctor.doctor` is the same
in Python."""
from __future__ import annotations

from edgeops.cli.common import runs

from edgeops.cli.common import console, print_json


def add(sub):
    p = sub.add_parser("doctor", help="health checklist of a board and its package")
    p.add_argument("--to", required=True, metavar="URI", help="the board (as for edgeops deploy)")
    p.add_argument("--runs", type=runs, default=20,
                   help="runs for the memory-growth check (default 20, at least 5)")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.set_defaults(func=run)


def run(args) -> int:
    from edgeops.deploy.doctor import doctor
    doc = doctor(args.to, runs=args.runs)
    if args.json:
        print_json(doc)
    else:
        from rich.markup import escape
        c = console()
        colour = {"ok": "green", "warn": "yellow", "fail": "red"}
        for r in doc["checks"]:
            c.print(f"[{colour[r['status']]}]{r['status']:4}[/] {r['name']:20} "
                    f"{escape(r['detail'])}")
        n = doc["counts"]
        c.print(f"{doc['to']} ({doc['machine']}): {n['ok']} ok, {n['warn']} warn, "
                f"{n['fail']} fail")
    return 0 if doc["ok"] else 1
