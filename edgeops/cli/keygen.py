"""``edgeops keygen KEY [--force] [--json]``: an ed25519 key pair for signing packages (``KEY``
private, mode 0600; ``KEY.pub`` public). ``edgeops compile --sign KEY`` signs, ``edgeops deploy
--verify-key KEY.pub`` checks. :func:`edgeops.deploy.signing.keygen` is the same in Python."""
from __future__ import annotations

from edgeops.cli.common import console, print_json


def add(sub):
    p = sub.add_parser("keygen", help="make an ed25519 key pair to sign packages")
    p.add_argument("key", metavar="KEY", help="private key file to write (KEY.pub beside it)")
    p.add_argument("--force", action="store_true", help="replace existing key files")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.set_defaults(func=run)


def run(args) -> int:
    from edgeops.deploy.signing import keygen
    doc = keygen(args.key, force=args.force)
    if args.json:
        print_json(doc)
    else:
        console().print(f"wrote {doc['private_key']} (keep it private) and {doc['public_key']} "
                        f"(key id {doc['key_id']})", markup=False)
    return 0
