"""Faults during deploy: each time the previous package still runs, nothing half-installed is
left current, and the error says what happened."""
import errno
import os
import random
import shutil

import pytest

from edgeops import deploy as dep
from edgeops.deploy import push
from edgeops.errors import DeployError, PackageError
from edgeops.deploy.transports import LocalTransport

TRIALS = 30


@pytest.fixture(scope="module")
def board(pkgs, tmp_path_factory):
    """A board with package a current (and b previous) that every fault test attacks."""
    root = tmp_path_factory.mktemp("board")
    dep.deploy(pkgs[1], LocalTransport(root), progress=False)
    dep.deploy(pkgs[0], LocalTransport(root), progress=False)
    return root


def _state(root):
    return (os.readlink(root / "current"), os.readlink(root / "previous"),
            sorted(p.name for p in root.iterdir()))


class Dies(LocalTransport):
    """Writes ``budget`` bytes of the upload, then fails with ``exc``; with ``dead``, every later
    call fails too (the link is gone, cleanup cannot reach the board)."""

    def __init__(self, root, budget, exc, dead=False):
        super().__init__(root)
        self.budget, self.exc, self.dead, self.died = budget, exc, dead, False

    def _write(self, f, chunk):
        if len(chunk) > self.budget:
            f.write(chunk[:self.budget])
            self.died = True
            raise self.exc
        self.budget -= len(chunk)
        f.write(chunk)

    def _agent(self, args):
        if self.died and self.dead:
            raise DeployError("connection lost")
        return super()._agent(args)


def _upload_bytes(pkg):
    from edgeops import package
    p = package.load(pkg, check_kernels=False)
    return sum((p.path / n).stat().st_size for n in push._files(p))


def test_transport_dies_mid_upload(pkgs, board, current_ok):
    total = _upload_bytes(pkgs[1])
    before = _state(board)
    rnd = random.Random(7)
    lost = 0
    for i in range(TRIALS):
        n = rnd.randrange(0, total)
        had = set(_state(board)[2])
        t = Dies(board, n, ConnectionResetError(errno.ECONNRESET, "connection reset"),
                 dead=i % 2 == 1)
        with pytest.raises(DeployError, match="upload to .* failed") as e:
            dep.deploy(pkgs[1], t, progress=False)
        assert "connection reset" in str(e.value) and "still current" in str(e.value)
        cur, prev, names = _state(board)
        lost += (cur, prev) != before[:2]
        assert (cur, prev) == before[:2]
        if not t.dead:                       # cleanup reached the board: no staging left
            assert set(names) == had
    assert lost == 0
    assert current_ok(board) == before[0]
    for p in board.glob("staging-*"):        # what dead links left behind
        shutil.rmtree(p)


def test_disk_full_mid_copy(pkgs, board, current_ok):
    before = _state(board)
    total = _upload_bytes(pkgs[1])
    for n in (0, total // 3, total - 1):
        t = Dies(board, n, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
        with pytest.raises(DeployError, match="disk is full"):
            dep.deploy(pkgs[1], t, progress=False)
        assert _state(board) == before
    assert current_ok(board) == before[0]


class Corrupts(LocalTransport):
    """The upload succeeds but a byte of model.onnx is flipped on the board's disk."""

    def put_file(self, src, rel, advance=lambda n: None):
        super().put_file(src, rel, advance)
        if rel.endswith("/model.onnx"):
            p = self.path(rel)
            data = bytearray(open(p, "rb").read())
            data[len(data) // 2] ^= 0x01
            open(p, "wb").write(bytes(data))


def test_corrupted_on_the_board(pkgs, board, current_ok):
    before = _state(board)
    with pytest.raises(DeployError, match="checksum verification on the board failed") as e:
        dep.deploy(pkgs[1], Corrupts(board), progress=False)
    assert "model.onnx does not match its sha256" in str(e.value)
    assert _state(board) == before and current_ok(board) == before[0]


def test_smoke_test_failure_switches_back(pkgs, board, tmp_path, reseal, current_ok):
    import numpy as np
    bad = tmp_path / "bad"
    shutil.copytree(pkgs[1], bad)
    with np.load(bad / "reference.npz") as z:
        arrays = {k: z[k] for k in z.files}
    arrays["output_0"] = arrays["output_0"] * 2 + 1       # a wrong "expected" answer
    np.savez_compressed(bad / "reference.npz", **arrays)
    reseal(bad)
    before = _state(board)
    with pytest.raises(DeployError, match="smoke test .* failed .* switched back to " +
                       before[0]):
        dep.deploy(bad, LocalTransport(board), progress=False)
    assert _state(board) == before and current_ok(board) == before[0]
    # on an empty board, a failed smoke test leaves no package current
    empty = tmp_path / "empty"
    with pytest.raises(DeployError, match="switched back to no package"):
        dep.deploy(bad, LocalTransport(empty), progress=False)
    assert not (empty / "current").is_symlink() and not list(empty.glob("pkg-*"))


def test_traversal_and_escaping_symlinks_are_refused(pkgs, board, tmp_path, reseal):
    import json
    before = _state(board)
    trav = tmp_path / "trav"
    shutil.copytree(pkgs[1], trav)
    doc = json.loads((trav / "manifest.json").read_text())
    doc["files"]["../x"] = doc["files"]["reference.npz"]
    (trav / "manifest.json").write_text(json.dumps(doc))
    reseal(trav)
    with pytest.raises(PackageError, match="leaves the package"):
        dep.deploy(trav, LocalTransport(board), progress=False)
    link = tmp_path / "link"
    shutil.copytree(pkgs[1], link)
    outside = tmp_path / "outside.npz"
    shutil.copyfile(link / "reference.npz", outside)
    (link / "reference.npz").unlink()
    (link / "reference.npz").symlink_to(outside)
    with pytest.raises(PackageError, match="outside the package"):
        dep.deploy(link, LocalTransport(board), progress=False)
    assert _state(board) == before


class DiesAt(LocalTransport):
    """The link dies at the ``n``-th command on the board (probe or agent): before it reaches
    the board, or after it ran there but before its answer came back."""

    def __init__(self, root, n, after):
        super().__init__(root)
        self.n, self.after, self.calls = n, after, 0

    def _exec(self, pyargs):
        self.calls += 1
        if self.calls == self.n and not self.after:
            raise DeployError("connection lost")
        r = super()._exec(pyargs)
        if self.calls == self.n and self.after:
            raise DeployError("connection lost")
        return r


@pytest.mark.parametrize("trials", [pytest.param(10, id="ci"),
                                    pytest.param(60, id="many", marks=pytest.mark.full)])
def test_transport_killed_at_random_points(pkgs, tmp_path, current_ok, trials):
    """Each trial deploys the package that is not current and kills the link at a random
    command of the deploy (7 of them; 8 means it survives). Afterwards the board's current
    package loads and reproduces its reference outputs, every time."""
    root = tmp_path / "board"
    dep.deploy(pkgs[0], LocalTransport(root), progress=False)
    rnd = random.Random(11)
    lost = died = 0
    for i in range(trials):
        cur = os.readlink(root / "current")
        other = pkgs[1] if package_of(root / cur) == package_of(pkgs[0]) else pkgs[0]
        t = DiesAt(root, rnd.randint(1, 8), rnd.random() < 0.5)
        try:
            dep.deploy(other, t, progress=False)
        except DeployError as e:
            died += 1
            assert "connection lost" in str(e)
        try:
            current_ok(root)
        except Exception:  # noqa: BLE001  (counted, then failed below)
            lost += 1
    print(f"killed at random points: {trials} trials, {died} died, {lost} packages lost")
    assert lost == 0 and died > 0
    dep.deploy(pkgs[0], LocalTransport(root), progress=False)   # and the board takes a deploy
    assert len(list(root.glob("pkg-*"))) == 2


def package_of(d):
    import json
    return json.loads((d / "manifest.json").read_text())["manifest_sha256"]


def test_stale_staging_is_cleaned(pkgs, tmp_path, capsys):
    import json
    import time
    from edgeops.cli import main
    root = tmp_path / "board"
    dep.deploy(pkgs[0], LocalTransport(root), progress=False)
    for _ in range(2):                 # total transport death mid-upload: staging stays
        t = Dies(root, _upload_bytes(pkgs[1]) // 2, ConnectionResetError("gone"), dead=True)
        with pytest.raises(DeployError):
            dep.deploy(pkgs[1], t, progress=False)
    left = sorted(p.name for p in root.glob("staging-*"))
    assert len(left) == 2
    assert main(["deploy", "--status", "--to", f"local:{root}", "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert st["staging"] == left and all(s >= 0 for s in st["staging_idle_s"].values())
    old = time.time() - dep.STALE_S - 60                   # one of them dead for long enough
    for p in [root / left[0], *(root / left[0]).rglob("*")]:
        os.utime(p, (old, old))
    doc = dep.deploy(pkgs[1], LocalTransport(root), progress=False)
    assert doc["removed_stale"] == [left[0]]
    assert [p.name for p in root.glob("staging-*")] == [left[1]]     # the recent one stays
    assert main(["deploy", "--clean", "--to", f"local:{root}", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["removed"] == [left[1]]
    assert not list(root.glob("staging-*"))


def test_disk_full_on_a_small_tmpfs(pkgs, tmp_path, current_ok):
    """A real full disk: a tmpfs with room for one package and half of another."""
    import subprocess
    root = tmp_path / "board"
    root.mkdir()
    size = _upload_bytes(pkgs[0]) + _upload_bytes(pkgs[1]) // 2
    size = (size // 4096 + 8) * 4096        # tmpfs counts pages, and the dirs take some
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(root)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"mounting a tmpfs needs root here ({r.stderr.strip()}); "
                    f"test_disk_full_mid_copy covers ENOSPC with a stand-in")
    try:
        first = dep.deploy(pkgs[0], LocalTransport(root), progress=False)["installed_as"]
        with pytest.raises(DeployError, match="disk is full.*still current"):
            dep.deploy(pkgs[1], LocalTransport(root), progress=False)
        assert current_ok(root) == first and not list(root.glob("staging-*"))
    finally:
        subprocess.run(["umount", str(root)], check=False)
