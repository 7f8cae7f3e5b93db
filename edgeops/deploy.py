"""Put a package on a board without ever leaving the board broken.

Steps of :func:`deploy`: verify the package's checksums here -> upload into ``ROOT/staging-<id>``
-> verify the checksums on the board (and that the board's edgeops is this one) -> switch the
``current`` link atomically -> smoke test (the package's reference inputs on the board, compared
within the manifest's tolerance). Any failure before the switch removes the staging directory and
leaves the previous package current and untouched; a failed smoke test switches back. The
previous package is kept for :func:`rollback`. :func:`run_remote` runs the current package on
the board and brings its outputs back.
"""
from __future__ import annotations

import os
import secrets
import tempfile
import time
from pathlib import Path

from edgeops.errors import DeployError
from edgeops.transports import Transport, open_transport


def _files(p) -> list[str]:
    from edgeops.package import MANIFEST, OPTIONAL
    names = sorted(p.manifest["files"]) + [MANIFEST]
    return names + [n for n in OPTIONAL if (p.path / n).is_file()]


def deploy(pkg, to, *, board: str | None = None, progress: bool = True) -> dict:
    """Install package ``pkg`` on the board at ``to`` (URI or Transport); the ``--json`` doc."""
    from edgeops import package
    from edgeops._version import __version__
    p = package.load(pkg)            # refuses corruption, traversal and escaping symlinks
    built_for = p.manifest["board"]["name"]
    if board is not None and board != built_for:
        raise DeployError(f"{p.path} was compiled for board {built_for!r}, not {board!r}; "
                          f"compile it with --board {board}")
    t = open_transport(to)
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
        if v.get("edgeops") != __version__:
            raise DeployError(f"the board runs edgeops {v.get('edgeops')}, this is {__version__}"
                              f"; install edgeops {__version__} on the board (pip install "
                              f"edgeops=={__version__})")
    except BaseException:
        _cleanup(t, staging)
        raise
    after = t.board("activate", t.root, staging)[1]
    rc, smoke, err = t.board("smoke", t.root, check=False)
    if rc != 0 or smoke is None or not smoke.get("ok"):
        _switch_back(t, before)
        why = (f"max relative error {smoke['max_rel']:.3g} above tolerance {smoke['tolerance']:g}"
               if smoke else " ".join(err.split()) or f"agent exit status {rc}")
        raise DeployError(f"smoke test on {t.uri} failed ({why}); switched back to "
                          f"{before['current'] or 'no package'}")
    after = t.board("collect", t.root)[1]    # only now: the package before previous goes
    return {"package": str(p.path), "board": built_for, "to": t.uri,
            "installed_as": after["current"], "previous": after["previous"],
            "files": names, "smoke": smoke}


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


def _switch_back(t: Transport, before: dict) -> None:
    if before["current"]:
        t.board("activate", t.root, before["current"], "--previous", before["previous"] or "",
                "--collect")
    else:
        t.board("deactivate", t.root)


def rollback(to) -> dict:
    t = open_transport(to)
    return t.board("rollback", t.root)[1] | {"to": t.uri}


def status(to) -> dict:
    t = open_transport(to)
    return t.board("status", t.root)[1] | {"to": t.uri}


def run_remote(to, *, pkg=None, inputs=None, runs: int = 1, out=None) -> tuple[dict, dict]:
    """Run the board's current package (which must be ``pkg`` when given) on ``inputs`` (a local
    .npz; default: the package's reference inputs). (the board's run document, outputs)."""
    import numpy as np
    t = open_transport(to)
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
