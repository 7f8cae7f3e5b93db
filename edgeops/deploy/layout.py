"""The board side's fixed facts: the layout of a board root, what a board needs installed, and
reading the layout (shared by the agent, the doctor and deploy; imports no other deploy module).

Layout of a board root::

    ROOT/pkg-<id>/       installed packages (at most current and previous are kept)
    ROOT/staging-<id>/   an upload in progress (never run)
    ROOT/current         symlink to the package that runs, switched with os.replace (atomic)
    ROOT/previous        symlink to the one before, for rollback
    ROOT/.edgeops/       the pushed edgeops (lib), the deploy lock (deploy.lock, boardlock.py)
"""
from __future__ import annotations

import itertools
import os
import time
from pathlib import Path

from edgeops.env import memory_available

CURRENT, PREVIOUS = "current", "previous"
# import name -> (distribution, minimum version), as pyproject.toml requires them: the board's
# own wheels (deploy pushes edgeops only, and says how to install what is missing)
REQUIRES = {"numpy": ("numpy", "1.24"), "numba": ("numba", "0.59"),
            "onnxruntime": ("onnxruntime", "1.17"),
            "onnxruntime_extensions": ("onnxruntime-extensions", "0.12"), "onnx": ("onnx", "1.16")}
NEEDS = {m: f"pip install '{d}>={v}'" for m, (d, v) in REQUIRES.items()}
PYTHON_MIN = (3, 10)


class BoardError(Exception):
    """A user-facing failure on the board (one line on stderr, exit 2)."""


def vtuple(v) -> tuple:
    """(major, minor, patch) of a version string; what is not a number counts 0."""
    out = []
    for part in str(v).split(".")[:3]:
        digits = "".join(itertools.takewhile(str.isdigit, part))
        out.append(int(digits or 0))
    return tuple(out)


def mem_available():
    return memory_available()


def require_root(root) -> Path:
    """The board root, which must exist: reading commands never create it."""
    root = Path(root)
    if not root.is_dir():
        raise BoardError(f"{root} does not exist on the board; nothing was ever deployed there "
                         f"(check --to, or deploy a package first)")
    return root


def status(root) -> dict:
    root = require_root(root)
    now = time.time()
    staging = sorted(root.glob("staging-*"))
    lib = root / ".edgeops" / "lib"
    return {"root": str(root), "current": link_target(root / CURRENT),
            "previous": link_target(root / PREVIOUS),
            "installed": sorted(p.name for p in root.glob("pkg-*")),
            "staging": [p.name for p in staging],
            "staging_idle_s": {p.name: round(now - touched(p), 1) for p in staging},
            "pushed_edgeops": link_target(lib) if lib.is_symlink() else None,
            "lock": lock_holder(root)}


def lock_holder(root) -> dict | None:
    """Who holds the board's deploy lock (edgeops.deploy.boardlock), if anyone."""
    import json
    try:
        doc = json.loads((Path(root) / ".edgeops" / "deploy.lock").read_text())
    except (OSError, ValueError):
        return None
    return {k: doc.get(k) for k in ("what", "host", "pid", "since")} if isinstance(doc, dict) \
        else None


def touched(d: Path) -> float:
    """When anything in ``d`` last changed (an upload in progress keeps touching it)."""
    t = 0.0
    for p in [d, *d.rglob("*")]:
        try:
            t = max(t, p.lstat().st_mtime)
        except OSError:
            pass
    return t


def link_target(link: Path) -> str | None:
    return os.readlink(link) if link.is_symlink() else None


def current_dir(root) -> Path:
    root = Path(root)
    name = link_target(root / CURRENT)
    if not name or not (root / name).is_dir():
        raise BoardError(f"{root} has no current package; deploy one first")
    return root / name
