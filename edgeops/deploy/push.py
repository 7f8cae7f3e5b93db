"""Put a package on a board without ever leaving the board broken.

Steps of :func:`deploy`: verify the package's checksums here (and its signature, with
``verify_key``) -> take the board's lock (:mod:`edgeops.deploy.boardlock`; held to the end, so
another deploy, rollback or clean of the board waits, bounded, or is refused naming the holder)
-> make sure the board runs this edgeops (a stdlib-only ``python -c`` probe; the
wheel is pushed into ``ROOT/.edgeops/lib`` when missing or different, see :func:`ensure_edgeops`)
-> remove staging directories a dead transport left behind (untouched for :data:`STALE_S`) ->
upload into ``ROOT/staging-<id>`` -> verify the checksums on the board -> switch the ``current``
link atomically -> smoke test (the package's reference inputs on the board, compared within the
manifest's tolerance). Any failure before the switch removes the staging directory and leaves the
previous package current and untouched; a failed smoke test switches back. The previous package
is kept for :func:`rollback`. :func:`run_remote` runs the current package on the board and brings
its outputs back; :func:`status` and :func:`clean` show and remove what a failed deploy left.
Only a deploy creates a board root; the other commands refuse one that does not exist.
"""
from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from contextlib import contextmanager
from pathlib import Path

from edgeops.errors import DeployError
from edgeops.deploy.layout import NEEDS, PYTHON_MIN, REQUIRES, vtuple
from edgeops.deploy.transports import LIB, Transport, open_transport

STALE_S = 15 * 60    # a staging directory untouched this long belongs to a dead deploy


def _files(p) -> list[str]:
    from edgeops.package import MANIFEST, OPTIONAL
    names = sorted(p.manifest["files"]) + [MANIFEST]
    return names + [n for n in OPTIONAL if (p.path / n).is_file()]


def deploy(pkg, to, *, board: str | None = None, progress: bool = True,
           verify_key=None, wait_s: float | None = None) -> dict:
    """Install package ``pkg`` on the board at ``to`` (URI or Transport); the ``--json`` doc.
    ``verify_key``: an ed25519 public key file; an unsigned or tampered package is refused.
    ``wait_s``: how long to wait for another deploy's board lock (default :data:`LOCK_WAIT_S`;
    0 refuses at once)."""
    from edgeops import package
    from edgeops._version import __version__
    p = package.load(pkg)            # refuses corruption, traversal and escaping symlinks
    built_for = p.manifest["board"]["name"]
    if board is not None and board != built_for:
        raise DeployError(f"{p.path} was compiled for board {built_for!r}, not {board!r}; "
                          f"compile it with --board {board}")
    signed = None
    if verify_key is not None:
        from edgeops.deploy import signing
        signed = signing.verify(p.path, verify_key)
    t = open_transport(to)
    # the whole deploy holds the board: the wheel push, the status read before the switch, the
    # switch, the smoke test and the switch-back never interleave with another deploy's
    with board_lock(t, f"deploy {p.path.name}", wait_s, create=True) as lock:
        doc = _deploy_locked(t, p, lock["owner"], progress, __version__)
    return {"package": str(p.path), "board": built_for, "to": t.uri} | doc | {
        "signature": signed, "lock": {k: lock[k] for k in ("waited_s", "broke")}}


def _deploy_locked(t: Transport, p, owner: str, progress: bool, version: str) -> dict:
    agent = ensure_edgeops(t, progress=progress)
    stale = t.board("clean", t.root, "--older-than", str(STALE_S))[1]["removed"]
    before = t.board("status", t.root)[1]
    sid = f"{time.strftime('%Y%m%d%H%M%S')}-{secrets.token_hex(4)}"
    staging = f"staging-{sid}"
    names = _files(p)
    try:
        try:
            t.mkdir(staging)
            _upload(t, p.path, names, staging, progress)
        except DeployError as e:
            raise DeployError(f"upload to {t.uri} failed, nothing was switched ({e})") from None
        except OSError as e:
            why = "the board's disk is full" if e.errno == 28 else str(e)
            raise DeployError(f"upload to {t.uri} failed: {why}; nothing was switched, "
                              f"{before['current'] or 'no package'} is still current") from None
        _, v, err = t.board("verify", t.path(staging), check=False)
        if v is None:
            raise DeployError(f"checksum verification on the board failed, nothing was switched: "
                              f"{' '.join(err.split()) or 'no answer from the agent'}")
        if v.get("edgeops") != version:
            raise DeployError(f"the board runs edgeops {v.get('edgeops')}, this is {version}"
                              f"; install edgeops {version} on the board (pip install "
                              f"edgeops=={version})")
    except BaseException:
        _cleanup(t, staging)
        raise
    t.board("activate", t.root, staging, "--owner", owner)
    rc, smoke, err = t.board("smoke", t.root, check=False)
    if rc != 0 or smoke is None or not smoke.get("ok"):
        _switch_back(t, before, owner)
        why = (f"max relative error {smoke['max_rel']:.3g} above tolerance {smoke['tolerance']:g}"
               if smoke else " ".join(err.split()) or f"agent exit status {rc}")
        raise DeployError(f"smoke test on {t.uri} failed ({why}); switched back to "
                          f"{before['current'] or 'no package'}")
    after = t.board("collect", t.root, "--owner", owner)[1]  # only now: the one before previous goes
    return {"installed_as": after["current"], "previous": after["previous"], "files": names,
            "smoke": smoke, "agent": agent, "removed_stale": stale}


LOCK_WAIT_S = 300.0     # a deploy of a small package takes seconds; a cold qemu one minutes


@contextmanager
def board_lock(t: Transport, what: str, wait_s: float | None = None, *, create: bool = False):
    """Hold the board's deploy lock (:mod:`edgeops.deploy.boardlock`) for the ``with`` block;
    yields ``{"owner", "waited_s", "broke"}``. Waits up to ``wait_s`` for a live holder, then
    refuses naming it; a dead holder's lock is broken. ``create``: the board root may be created
    (a first deploy); otherwise a missing root is refused."""
    from edgeops.deploy import boardlock
    wait_s = LOCK_WAIT_S if wait_s is None else wait_s
    if not (isinstance(wait_s, (int, float)) and 0 <= wait_s <= 86400):
        raise DeployError(f"--wait {wait_s!r}: give seconds between 0 and 86400")
    if not create:
        require_root(t)
    src = Path(boardlock.__file__).read_text()
    holder = boardlock.me(what)
    doc = t.probe(src, t.root, "acquire", json.dumps({"holder": holder, "wait_s": wait_s}))[1]
    if not doc.get("acquired"):
        h = doc.get("holder") or {}
        age = time.time() - h["since"] if isinstance(h.get("since"), (int, float)) else None
        raise DeployError(
            f"{t.uri} is locked by another deploy ({h.get('what')!s}, host {h.get('host')!s} "
            f"pid {h.get('pid')!s}{f', for {age:.0f} s' if age is not None else ''}); waited "
            f"{doc.get('waited_s', 0):.0f} s. Try again later or with a longer --wait; if that "
            f"deploy is dead on another host: edgeops deploy --unlock --to {t.uri}")
    try:
        yield {"owner": holder["owner"], "waited_s": doc.get("waited_s"), "broke": doc.get("broke")}
    finally:
        try:
            t.probe(src, t.root, "release", json.dumps({"owner": holder["owner"]}), check=False)
        except Exception:  # noqa: BLE001  (a dead link: the lock's dead pid frees it later)
            pass


_ISDIR = "import json, os, sys; print(json.dumps({'dir': os.path.isdir(sys.argv[1])}))"


def require_root(t: Transport) -> None:
    """Refuse a board root that does not exist (a typo in --to), without creating it."""
    if not t.probe(_ISDIR, t.root)[1]["dir"]:
        raise DeployError(f"{t.uri}: {t.root} does not exist on the board; nothing was ever "
                          f"deployed there (check --to, or deploy a package first)")


def unlock(to) -> dict:
    """Break the board's deploy lock whoever holds it, restoring the links its holder journalled
    before a switch (``edgeops deploy --unlock``: for a deploy that died on another host)."""
    from edgeops.deploy import boardlock
    t = open_transport(to)
    require_root(t)
    doc = t.probe(Path(boardlock.__file__).read_text(), t.root, "break", "{}")[1]
    return doc | {"to": t.uri}


def _upload(t: Transport, src: Path, names, staging: str, progress: bool) -> None:
    total = sum((src / n).stat().st_size for n in names)
    if not progress:
        for n in names:
            t.put_file(src / n, f"{staging}/{n}")
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn
    with Progress(TextColumn("upload {task.description}"), BarColumn(), DownloadColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(t.uri, total=total)
        for n in names:
            t.put_file(src / n, f"{staging}/{n}", lambda k: bar.advance(task, k))


def _cleanup(t: Transport, staging: str) -> None:
    try:
        t.board("remove", t.root, staging, check=False)
    except Exception:  # noqa: BLE001  (a dead transport: the next deploy's status shows it)
        pass


def _switch_back(t: Transport, before: dict, owner: str) -> None:
    if before["current"]:
        t.board("activate", t.root, before["current"], "--previous", before["previous"] or "",
                "--collect", "--owner", owner)
    else:
        t.board("deactivate", t.root, "--owner", owner)


def rollback(to, wait_s: float | None = None) -> dict:
    t = open_transport(to)
    with board_lock(t, "rollback", wait_s):
        return t.board("rollback", t.root)[1] | {"to": t.uri}


def status(to) -> dict:
    """What is on the board: current, previous, installed packages, staging directories (with
    how long each has been untouched), the board-private edgeops and the deploy lock, if any."""
    t = open_transport(to)
    return t.board("status", t.root)[1] | {"to": t.uri}


def clean(to, older_than: float = 0, wait_s: float | None = None) -> dict:
    """Remove staging directories untouched for ``older_than`` seconds (0: all of them); holds
    the board lock, so no deploy's upload is removed under it."""
    t = open_transport(to)
    with board_lock(t, "clean", wait_s):
        return t.board("clean", t.root, "--older-than", str(older_than))[1] | {"to": t.uri}


def run_remote(to, *, pkg=None, inputs=None, runs: int = 1, out=None) -> tuple[dict, dict]:
    """Run the board's current package (which must be ``pkg`` when given) on ``inputs`` (a local
    .npz; default: the package's reference inputs). (the board's run document, outputs)."""
    import numpy as np
    t = open_transport(to)
    require_root(t)              # never create a board directory as a side effect
    want = None
    if pkg is not None:
        from edgeops import package
        want = package.load(pkg, check_kernels=False).manifest["manifest_sha256"]
    work = f"staging-run-{secrets.token_hex(4)}"
    t.mkdir(work)
    try:
        args = ["run", t.root, "--runs", str(runs), "--out", t.path(f"{work}/out.npz")]
        if inputs is not None:
            t.put_file(Path(inputs), f"{work}/in.npz")
            args += ["--inputs", t.path(f"{work}/in.npz")]
        doc = t.board(*args)[1]
        with tempfile.TemporaryDirectory() as d:
            local = Path(d) / "out.npz"
            t.get_file(f"{work}/out.npz", local)
            with np.load(local) as z:
                outs = {k: z[k] for k in z.files}
    finally:
        _cleanup(t, work)
    if want is not None and doc.get("manifest_sha256") != want:
        raise DeployError(f"the board at {t.uri} runs {doc.get('installed_as')}, not {pkg}; "
                          f"deploy it first (edgeops deploy {pkg} --to {t.uri})")
    if out is not None:
        tmp = Path(f"{out}.tmp-{os.getpid()}.npz")
        np.savez(tmp, **outs)
        os.replace(tmp, out)
    doc["to"] = t.uri
    return doc, outs


# ---- edgeops on the board -----------------------------------------------------------------------
# The probe and the installer run with the board's bare Python (no edgeops, maybe no numpy), so
# they are stdlib-only and self-contained; each prints one JSON document.

_PROBE = r"""
import importlib.metadata as md, importlib.util as iu, json, os, platform, sys
lib, needs = sys.argv[1], json.loads(sys.argv[2])
d = {"python": platform.python_version(), "machine": platform.machine(), "modules": {}}
try:
    import edgeops, edgeops._version as v
    d["edgeops"] = v.__version__
    d["private"] = os.path.realpath(edgeops.__file__).startswith(os.path.realpath(lib) + os.sep)
except Exception as e:
    d["edgeops"], d["why"] = None, type(e).__name__ + ": " + str(e)
try:
    d["lib_sha256"] = open(os.path.join(lib, "WHEEL.sha256")).read().strip()
except OSError:
    d["lib_sha256"] = None
for mod, dist in needs.items():
    try:
        d["modules"][mod] = md.version(dist) if iu.find_spec(mod) else None
    except Exception:
        d["modules"][mod] = None
print(json.dumps(d))
"""

_INSTALL = r"""
import hashlib, json, os, shutil, sys, zipfile
root, whl, sha = sys.argv[1:4]
base = os.path.join(root, ".edgeops")
if hashlib.sha256(open(whl, "rb").read()).hexdigest() != sha:
    sys.exit("the edgeops wheel arrived corrupted (sha256 mismatch); deploy again")
name = "lib-" + sha[:16]
tmp = os.path.join(base, name + ".tmp-%d" % os.getpid())
with zipfile.ZipFile(whl) as z:
    for n in z.namelist():
        parts = n.split("/")
        if n.startswith("/") or ".." in parts or "\\" in n:
            sys.exit("the edgeops wheel holds %r, a path outside its folder; refused" % n)
    z.extractall(tmp)
# Numba keys its disk cache on each source's (mtime, size): an mtime that is a function of the
# content keeps the previous push's compiled kernels valid for every file that did not change
for d, _, fs in os.walk(tmp):
    for f in fs:
        p = os.path.join(d, f)
        m = 10**9 + int(hashlib.sha256(open(p, "rb").read()).hexdigest()[:7], 16)
        os.utime(p, (m, m))
old = os.path.realpath(os.path.join(base, "lib"))
if os.path.isdir(old):
    for d, _, fs in os.walk(old):
        if os.path.basename(d) != "__pycache__":
            continue
        to = os.path.join(tmp, os.path.relpath(d, old))
        if not os.path.isdir(os.path.dirname(to)):
            continue
        os.makedirs(to, exist_ok=True)
        for f in fs:
            if f.endswith((".nbi", ".nbc")) or f == "neon_sources.sha256":
                shutil.copy2(os.path.join(d, f), os.path.join(to, f))
with open(os.path.join(tmp, "WHEEL.sha256"), "w") as f:
    f.write(sha + "\n")
dst = os.path.join(base, name)
shutil.rmtree(dst, ignore_errors=True)
os.rename(tmp, dst)
link = os.path.join(base, "lib.tmp-%d" % os.getpid())
os.symlink(name, link)
os.replace(link, os.path.join(base, "lib"))
for n in os.listdir(base):
    if n.startswith("lib-") and n != name or n.startswith("push-"):
        shutil.rmtree(os.path.join(base, n), ignore_errors=True)
print(json.dumps({"installed": dst}))
"""


def push_reason(probe: dict, version: str, wheel_sha: str | None) -> str | None:
    """Why the board needs this edgeops pushed (None: it has it). ``wheel_sha``: the wheel's
    sha256, compared with a board-private install (its content, not only its version)."""
    have = probe.get("edgeops")
    if have is None:
        return f"the board has no edgeops ({probe.get('why', 'not importable')})"
    if probe.get("private"):
        if wheel_sha is not None and probe.get("lib_sha256") != wheel_sha:
            return "the board's pushed edgeops is another build"
        return None
    if have != version:
        return f"the board has edgeops {have}, this is {version}"
    return None


def ensure_edgeops(t: Transport, *, progress: bool = False) -> dict:
    """Check the board's Python, its edgeops and its third-party modules (a ``python -c``
    probe); push this edgeops (a pure-Python wheel, built once per source content) into
    ``ROOT/.edgeops/lib`` when it is missing or different. Raises :class:`DeployError` naming
    what the board lacks and the pip command that installs it."""
    from edgeops._version import __version__
    needs = {m: d for m, (d, _) in REQUIRES.items()}
    lib = t.path(LIB)
    probe = t.probe(_PROBE, lib, json.dumps(needs))[1]
    if vtuple(probe["python"]) < PYTHON_MIN:
        raise DeployError(f"the board's Python is {probe['python']}; edgeops needs "
                          f"{'.'.join(map(str, PYTHON_MIN))} or newer (?python=PATH in the URI "
                          f"picks another interpreter)")
    bad = [m for m, (_, vmin) in REQUIRES.items()
           if probe["modules"].get(m) is None or vtuple(probe["modules"][m]) < vtuple(vmin)]
    if bad:
        have = ", ".join(f"{m} {probe['modules'].get(m) or 'missing'}" for m in bad)
        pips = " ".join(NEEDS[m].split(" ", 2)[2] for m in bad)
        raise DeployError(f"the board ({probe['machine']}, Python {probe['python']}) lacks "
                          f"what edgeops runs on: {have}; install them there with pip install "
                          f"{pips} (deploy pushes edgeops only)")
    wheel = sha = None
    if probe.get("private") or probe.get("edgeops") != __version__:
        wheel = edgeops_wheel()
        sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    why = push_reason(probe, __version__, sha)
    doc = {"edgeops": probe.get("edgeops"), "python": probe["python"],
           "machine": probe["machine"], "modules": probe["modules"], "pushed": None}
    if why is None:
        return doc
    push = f".edgeops/push-{secrets.token_hex(4)}"
    t.mkdir(push)
    _upload(t, wheel.parent, [wheel.name], push, progress)
    t.probe(_INSTALL, t.root, t.path(f"{push}/{wheel.name}"), sha)
    after = t.probe(_PROBE, lib, json.dumps(needs))[1]
    if after.get("edgeops") != __version__ or not after.get("private"):
        raise DeployError(f"pushed edgeops {__version__} to {t.uri}, but its Python still "
                          f"imports {after.get('edgeops')} ({after.get('why', 'another copy')})")
    return doc | {"edgeops": __version__, "pushed": {"why": why, "wheel": wheel.name,
                                                      "sha256": sha, "into": lib}}


def _source_tree() -> tuple[Path, dict] | None:
    """(checkout, {import name: folder}) when edgeops runs from a source checkout."""
    import edgeops
    root = Path(edgeops.__file__).resolve().parent.parent
    pp = root / "pyproject.toml"
    if not pp.is_file():
        return None
    try:
        import tomllib
    except ImportError:      # Python 3.10
        import tomli as tomllib
    doc = tomllib.loads(pp.read_text())
    if doc.get("project", {}).get("name") != "edgeops":
        return None
    return root, doc["tool"]["setuptools"]["package-dir"]


def edgeops_wheel() -> Path:
    """This edgeops as a wheel in ``$EDGEOPS_CACHE_DIR/wheels/<content hash>/``: ``pip wheel
    --no-deps`` of a copy of the checkout's sources (so stale build/ folders never leak in); an
    installed (non-checkout) edgeops is zipped as it is installed."""
    import edgeops
    src = _source_tree()
    if src is not None:
        root, dirs = src
        files = {n: root / n for n in ("pyproject.toml", "README.md") if (root / n).is_file()}
        for folder in sorted(set(dirs.values())):
            for f in sorted((root / folder).rglob("*")):
                if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc":
                    files[f.relative_to(root).as_posix()] = f
    else:
        pkg = Path(edgeops.__file__).resolve().parent
        files = {f"edgeops/{f.relative_to(pkg).as_posix()}": f for f in sorted(pkg.rglob("*"))
                 if f.is_file() and "__pycache__" not in f.parts}
    h = hashlib.sha256()
    for name, f in sorted(files.items()):
        h.update(name.encode() + b"\0" + f.read_bytes() + b"\0")
    from edgeops import cache
    out = cache.root() / "wheels" / h.hexdigest()[:16]
    found = sorted(out.glob("edgeops-*.whl"))
    if found:
        return found[0]
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        built = d / "wheel"
        built.mkdir()
        if src is not None:
            for name, f in files.items():
                (d / "src" / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(f, d / "src" / name)
            r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                                str(built), str(d / "src")], capture_output=True, text=True)
            if r.returncode != 0:
                last = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode
                raise DeployError(f"building the edgeops wheel to push failed: {last}")
        else:
            with zipfile.ZipFile(built / f"edgeops-{edgeops.__version__}-py3-none-any.whl",
                                 "w", zipfile.ZIP_DEFLATED) as z:
                for name, f in files.items():
                    z.write(f, name)
        out.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(built, out)
        except OSError:       # another process built it meanwhile
            pass
    return sorted(out.glob("edgeops-*.whl"))[0]
