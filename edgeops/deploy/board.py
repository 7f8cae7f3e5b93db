"""Board-side agent: ``python -m edgeops.deploy.board info|status|verify|activate|rollback|run|smoke|
clean|bench|doctor|...`` (bench: :mod:`edgeops.deploy.bench`, doctor: :mod:`edgeops.deploy.doctor`).

It runs on the board (through a transport: a local directory, ssh) and prints one JSON document
on stdout per command; a user error is one line on stderr and exit status 2; a failed smoke test
exits 1. The board root's layout: :mod:`edgeops.deploy.layout`.

Pure Python on top of edgeops; numpy/onnxruntime are only needed for run/smoke/verify.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path

from edgeops.deploy import boardlock
from edgeops.deploy.layout import (CURRENT, NEEDS, PREVIOUS, BoardError, current_dir, link_target,
                                   mem_available, require_root, status, touched)

_STARTED = time.perf_counter()     # bench's cold start counts from the agent's start


# ---- commands (each returns the JSON document) ------------------------------------------------

def info(root=None) -> dict:
    import importlib
    from edgeops._version import __version__
    mods = {}
    for name, hint in NEEDS.items():
        try:
            m = importlib.import_module(name)
            mods[name] = {"version": getattr(m, "__version__", "unknown")}
        except Exception as e:  # noqa: BLE001  (a broken install is reported, not raised)
            mods[name] = {"version": None, "missing": f"{type(e).__name__}: {e}",
                          "install": hint}
    where = require_root(root) if root else Path.cwd()
    du = shutil.disk_usage(where)
    return {"python": platform.python_version(), "executable": sys.executable,
            "edgeops": __version__, "modules": mods, "machine": platform.machine(),
            "system": platform.system(), "disk_free_bytes": du.free,
            "memory_available_bytes": mem_available(), "root": str(where)}


def clean(root, older_than: float = 0) -> dict:
    """Remove what dead deploys left: ``staging-*`` directories and pushes untouched for
    ``older_than`` seconds, half-made links. Packages and the current/previous links stay."""
    root = Path(root)
    removed = []
    if root.is_dir():
        now = time.time()
        leftovers = [*root.glob("staging-*"), *root.glob(".edgeops/push-*"),
                     *root.glob(".edgeops/lib-*.tmp-*")]
        for p in leftovers:
            if p.is_dir() and not p.is_symlink() and now - touched(p) >= older_than:
                shutil.rmtree(p, ignore_errors=True)
                removed.append(str(p.relative_to(root)))
        for p in [*root.glob(f".{CURRENT}.tmp-*"), *root.glob(f".{PREVIOUS}.tmp-*")]:
            if p.is_symlink() and now - p.lstat().st_mtime >= older_than:
                os.unlink(p)
                removed.append(p.name)
    return status(root) | {"removed": sorted(removed)}


def verify(path) -> dict:
    from edgeops import package
    from edgeops._version import __version__
    try:
        p = package.load(path)
    except Exception as e:  # PackageError and friends: the message names the file
        raise BoardError(f"verify {path}: {e}") from None
    return {"path": str(p.path), "ok": True, "files": sorted(p.manifest["files"]),
            "edgeops": __version__}


def activate(root, name, previous: str | None = None, collect: bool = False,
             owner: str | None = None) -> dict:
    """Make ROOT/NAME current (a ``staging-*`` directory is first renamed to ``pkg-*``); the old
    current becomes previous (or ``previous``, when given; "" removes it). ``collect``: remove
    the ``pkg-*`` directories neither link names afterwards (deploy does so only once the smoke
    test passed, so that switching back finds the package before the previous one).
    ``owner``: the deploy lock's holder (edgeops.deploy.boardlock), checked under the lock's
    guard; switching to a staged package journals the links to restore should that deploy die
    before its smoke test passed, switching back clears the journal."""
    if owner is None:
        return _activate(Path(root), name, previous, collect)
    root = Path(root)
    with boardlock.holding(root):
        staged = name.startswith("staging-")
        if staged:
            boardlock.journal(root, owner, {"current": link_target(root / CURRENT),
                                            "previous": link_target(root / PREVIOUS)})
        else:
            boardlock.journal(root, owner, None)   # checks the lock; a switch-back is complete
        return _activate(root, name, previous, collect)


def _activate(root: Path, name, previous, collect) -> dict:
    src = root / name
    if not src.is_dir() or src.is_symlink() or "/" in name or name in ("", ".", ".."):
        raise BoardError(f"{src} is not a package directory on the board")
    if name.startswith("staging-"):
        name = "pkg-" + name[len("staging-"):]
        os.rename(src, root / name)
    old = link_target(root / CURRENT)
    _link(root, CURRENT, name)
    prev = old if previous is None else previous
    if prev and prev != name:
        _link(root, PREVIOUS, prev)
    elif (root / PREVIOUS).is_symlink():
        os.unlink(root / PREVIOUS)
    if collect:
        _collect(root)
    return status(root)


def collect(root, owner: str | None = None) -> dict:
    """Remove packages neither link names; with ``owner``, first commit that lock holder's switch
    (its smoke test passed: nothing to restore any more)."""
    if owner is not None:
        with boardlock.holding(root):
            boardlock.journal(root, owner, None)
    _collect(Path(root))
    return status(root)


def deactivate(root, owner: str | None = None) -> dict:
    """No package current (undoing the very first install)."""
    root = require_root(root)
    if owner is not None:
        with boardlock.holding(root):
            boardlock.journal(root, owner, None)
            return _deactivate(root)
    return _deactivate(root)


def _deactivate(root: Path) -> dict:
    for n in (CURRENT, PREVIOUS):
        if (root / n).is_symlink():
            os.unlink(root / n)
    _collect(root)
    return status(root)


def rollback(root) -> dict:
    root = Path(root)
    cur, prev = link_target(root / CURRENT), link_target(root / PREVIOUS)
    if not prev or not (root / prev).is_dir():
        raise BoardError(f"{root} has no previous package to go back to")
    _link(root, CURRENT, prev)
    if cur:
        _link(root, PREVIOUS, cur)
    return status(root)


def remove(root, name) -> dict:
    """Remove a staging directory (a failed upload)."""
    root = Path(root)
    if not name.startswith("staging-") or "/" in name:
        raise BoardError(f"only staging-* directories are removed, not {name!r}")
    shutil.rmtree(root / name, ignore_errors=True)
    return status(root)


def run(root, inputs=None, out=None, runs: int = 1) -> dict:
    from edgeops import package
    from edgeops.run import run_package
    import numpy as np
    cur = current_dir(root)
    p = package.load(cur)
    doc = run_package(p, inputs=inputs, runs=runs)
    if out is not None:
        outs = _outputs(p, inputs if inputs is not None else p.reference()[0])
        tmp = Path(str(out) + ".tmp.npz")
        np.savez(tmp, **outs)
        os.replace(tmp, out)
    doc["installed_as"] = Path(cur).name
    doc["manifest_sha256"] = p.manifest.get("manifest_sha256")
    return doc


def _outputs(p, inputs) -> dict:
    import numpy as np
    if isinstance(inputs, (str, Path)):
        from edgeops.run import read_inputs
        inputs = read_inputs(inputs, p)
    sess = p.session()
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, (np.asarray(v) for v in sess.run(names, inputs))))


def smoke(root) -> dict:
    from edgeops import package
    cur = current_dir(root)
    p = package.load(cur)
    ref_in, ref_out = p.reference()
    t0 = time.perf_counter()
    got = _outputs(p, ref_in)
    errs = package.compare(got, ref_out)
    worst = max((e["max_rel"] for e in errs.values()), default=0.0)
    return {"installed_as": Path(cur).name, "ok": bool(worst <= p.tolerance), "max_rel": worst,
            "tolerance": p.tolerance, "outputs": errs, "seconds": time.perf_counter() - t0}


# ---- helpers ----------------------------------------------------------------------------------

def _link(root: Path, linkname: str, target: str) -> None:
    # relative target, so the root can be moved or seen through a mount
    tmp = root / f".{linkname}.tmp-{os.getpid()}"
    if tmp.is_symlink() or tmp.exists():
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, root / linkname)
    _fsync_dir(root)


def _fsync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _collect(root: Path) -> None:
    keep = {link_target(root / CURRENT), link_target(root / PREVIOUS)}
    for p in root.glob("pkg-*"):
        if p.name not in keep and p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)


# ---- command line ---------------------------------------------------------------------------

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m edgeops.deploy.board")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("info")
    s.add_argument("root", nargs="?")
    sub.add_parser("status").add_argument("root")
    sub.add_parser("verify").add_argument("dir")
    s = sub.add_parser("activate")
    s.add_argument("root")
    s.add_argument("name")
    s.add_argument("--previous")
    s.add_argument("--collect", action="store_true")
    s.add_argument("--owner")
    for cmd in ("collect", "deactivate"):     # --owner: the deploy lock's holder
        s = sub.add_parser(cmd)
        s.add_argument("root")
        s.add_argument("--owner")
    sub.add_parser("rollback").add_argument("root")
    s = sub.add_parser("remove")
    s.add_argument("root")
    s.add_argument("name")
    s = sub.add_parser("run")
    s.add_argument("root")
    s.add_argument("--inputs")
    s.add_argument("--out")
    s.add_argument("--runs", type=int, default=1)
    sub.add_parser("smoke").add_argument("root")
    s = sub.add_parser("clean")
    s.add_argument("root")
    s.add_argument("--older-than", type=float, default=0)
    s = sub.add_parser("bench")
    s.add_argument("root")
    s.add_argument("--runs", type=int, default=20)
    s.add_argument("--profile-runs", type=int, default=3)
    s = sub.add_parser("doctor")
    s.add_argument("root")
    s.add_argument("--expect-version")
    s.add_argument("--runs", type=int, default=20)
    a = ap.parse_args(argv)
    from edgeops.errors import EdgeOpsError
    try:
        doc = {"info": lambda: info(a.root), "status": lambda: status(a.root),
               "verify": lambda: verify(a.dir),
               "activate": lambda: activate(a.root, a.name, a.previous, a.collect, a.owner),
               "collect": lambda: collect(a.root, a.owner),
               "deactivate": lambda: deactivate(a.root, a.owner),
               "rollback": lambda: rollback(a.root), "remove": lambda: remove(a.root, a.name),
               "run": lambda: run(a.root, a.inputs, a.out, a.runs),
               "smoke": lambda: smoke(a.root),
               "clean": lambda: clean(a.root, a.older_than),
               "bench": lambda: _bench(a.root, a.runs, a.profile_runs),
               "doctor": lambda: _doctor(a.root, a.expect_version, a.runs)}[a.cmd]()
    except (BoardError, EdgeOpsError, OSError, boardlock.LockLost) as e:
        print(f"edgeops.deploy.board {a.cmd}: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    json.dump(doc, sys.stdout, default=_jsonable)
    sys.stdout.write("\n")
    return 1 if a.cmd == "smoke" and not doc["ok"] else 0


def _bench(root, runs, profile_runs):
    from edgeops.deploy.bench import bench_here
    return bench_here(current_dir(root), runs=runs, profile_runs=profile_runs, started=_STARTED)


def _doctor(root, expect_version, runs):
    from edgeops.deploy.doctor import checks_here
    return checks_here(root, expect_version=expect_version, runs=runs)


def _jsonable(o):
    import numpy as np
    if isinstance(o, (np.integer, np.floating)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


if __name__ == "__main__":
    sys.exit(main())
