"""The board lock: concurrent deploys (separate processes, good and smoke-failing mixed) leave the
board on a package that passed its smoke test and each report true; a deploy killed mid smoke
test, a dead or reused pid, a live holder and a holder on another host; reading commands never
create a board directory."""
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from edgeops import deploy as dep
from edgeops import package
from edgeops.deploy import boardlock
from edgeops.deploy.transports import LocalTransport
from edgeops.errors import DeployError

from edgeops.env import switch

FULL = switch("EDGEOPS_TEST_FULL", False)
# CI: one round of three deploys (a, bad, b); EDGEOPS_TEST_FULL: five rounds of six
ROUNDS, PER_ROUND = (5, 6) if FULL else (1, 3)


@pytest.fixture(scope="module")
def board(pkgs, tmp_path_factory):
    """A board with package a current, shared by the tests that plant locks by hand."""
    root = tmp_path_factory.mktemp("locked") / "board"
    dep.deploy(pkgs[0], LocalTransport(root), progress=False)
    return root


@pytest.fixture(scope="module")
def bad(pkgs, tmp_path_factory):
    """Package b with a wrong expected answer: it verifies, installs, and fails its smoke test."""
    import hashlib
    out = tmp_path_factory.mktemp("bad") / "bad"
    shutil.copytree(pkgs[1], out)
    with np.load(out / "reference.npz") as z:
        arrays = {k: z[k] for k in z.files}
    arrays["output_0"] = arrays["output_0"] * 2 + 1
    np.savez_compressed(out / "reference.npz", **arrays)
    m = out / package.MANIFEST
    doc = json.loads(m.read_bytes())
    data = (out / "reference.npz").read_bytes()
    doc["files"]["reference.npz"] = {"sha256": hashlib.sha256(data).hexdigest(),
                                     "bytes": len(data)}
    doc.pop("manifest_sha256")
    doc["manifest_sha256"] = hashlib.sha256(package._canonical(doc)).hexdigest()
    m.write_bytes(package._canonical(doc))
    return out


def _cli(*argv):
    return subprocess.Popen([sys.executable, "-m", "edgeops", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _sha(pkg_dir) -> str:
    return package.load(pkg_dir, check_kernels=False).manifest["manifest_sha256"]


def _chain_anomalies(start, reports):
    """The successful reports must form one chain start -> ... (each one's previous is the one
    before it) and every smoke failure must name a package of that chain as the one switched
    back to; the chain's end is what must be current. (anomalies, expected current)."""
    ok = [r for r in reports if r["rc"] == 0]
    by_prev = {}
    anomalies = []
    for r in ok:
        if r["doc"]["previous"] in by_prev:
            anomalies.append(f"two deploys report previous {r['doc']['previous']}")
        by_prev[r["doc"]["previous"]] = r["doc"]["installed_as"]
    chain, cur = [start], start
    while cur in by_prev:
        cur = by_prev.pop(cur)
        chain.append(cur)
    if by_prev:
        anomalies.append(f"reports outside the chain from {start}: {by_prev}")
    for r in reports:
        if r["rc"] != 0:
            back = r["err"].rsplit("switched back to ", 1)[-1].strip()
            if back not in chain:
                anomalies.append(f"a failed deploy switched back to {back}, not in {chain}")
    return anomalies, cur


def test_concurrent_deploys_good_and_failing(pkgs, bad, tmp_path, current_ok):
    a, b = pkgs
    good = {_sha(a), _sha(b)}
    board = tmp_path / "board"
    dep.deploy(a, LocalTransport(board), progress=False)
    rnd = random.Random(27)
    anomalies = []
    for rnd_i in range(ROUNDS):
        start = os.readlink(board / "current")
        plan = [a, bad, b, bad, a, b][:PER_ROUND]
        rnd.shuffle(plan)
        procs = [(p, _cli("deploy", str(p), "--to", f"local:{board}", "--json", "--wait", "600"))
                 for p in plan]
        reports = []
        for p, proc in procs:
            out, err = proc.communicate(timeout=900)
            reports.append({"pkg": p, "rc": proc.returncode, "err": err,
                            "doc": json.loads(out) if proc.returncode == 0 else None})
        for r in reports:
            if r["pkg"] == bad:
                if r["rc"] != 2 or "smoke test" not in r["err"] or "Traceback" in r["err"]:
                    anomalies.append(f"round {rnd_i}: smoke-failing deploy: rc {r['rc']}, "
                                     f"{r['err'][-300:]}")
            elif r["rc"] != 0 or not r["doc"]["smoke"]["ok"]:
                anomalies.append(f"round {rnd_i}: good deploy failed: {r['err'][-300:]}")
        bad_chain, want = _chain_anomalies(start, reports)
        anomalies += [f"round {rnd_i}: {x}" for x in bad_chain]
        cur = os.readlink(board / "current")
        if cur != want:
            anomalies.append(f"round {rnd_i}: current is {cur}, the reports say {want}")
        if _sha(board / "current") not in good:
            anomalies.append(f"round {rnd_i}: current {cur} is not a package that passed")
        assert current_ok(board) == cur
        if (board / boardlock.LOCK).exists() or list(board.glob("staging-*")):
            anomalies.append(f"round {rnd_i}: lock or staging left: {sorted(os.listdir(board))}")
    assert anomalies == []


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _holder(**kw):
    h = boardlock.me("deploy test-holder")
    h.update(kw)
    return h


def test_deploy_killed_during_its_smoke_test_is_undone(pkgs, bad, tmp_path, current_ok):
    a, _ = pkgs
    board = tmp_path / "board"
    first = dep.deploy(a, LocalTransport(board), progress=False)["installed_as"]
    proc = _cli("deploy", str(bad), "--to", f"local:{board}", "--json")
    lock = board / boardlock.LOCK
    t0 = time.monotonic()
    while time.monotonic() - t0 < 300:    # wait for the switch: the journal names what to restore
        try:
            if "restore" in json.loads(lock.read_text()):
                break
        except (OSError, ValueError):
            pass
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.01)
    else:
        pytest.fail("the deploy never switched")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert os.readlink(board / "current") != first      # killed with the untested one current
    doc = dep.deploy(a, LocalTransport(board), progress=False)
    broke = doc["lock"]["broke"]
    assert broke["why"] == "its process is gone" and broke["holder"]["pid"] == proc.pid
    assert broke["restored"]["current"] == first
    assert doc["previous"] == first and current_ok(board) == doc["installed_as"]


def test_dead_pid_reused_pid_and_corrupt_locks_are_broken(board):
    cur = os.readlink(board / "current")
    for held in (_holder(pid=_dead_pid()),
                 _holder(pid_start="1"),        # our own pid, but another process's start
                 None):                         # a lock file half-written by a crash
        if held is None:
            (board / boardlock.LOCK).write_text('{"owner": "x", "pi')
        else:
            boardlock._write(str(board), held | {"since": time.time()})
        with dep.board_lock(LocalTransport(board), "test", 0) as lock:
            assert lock["broke"] is not None and lock["broke"]["restored"] is None
        assert not (board / boardlock.LOCK).exists() and os.readlink(board / "current") == cur


def test_live_holder_is_waited_for_then_refused(pkgs, board):
    a, _ = pkgs
    boardlock._write(str(board), _holder() | {"since": time.time()})   # this process: alive
    t0 = time.monotonic()
    with pytest.raises(DeployError, match=r"is locked by another deploy \(deploy test-holder, "
                       rf"host {socket.gethostname()} pid {os.getpid()}.*waited") as e:
        dep.deploy(a, LocalTransport(board), progress=False, wait_s=1.0)
    assert 1.0 <= time.monotonic() - t0 < 60 and "\n" not in str(e.value)
    # a holder on another host cannot be judged: refused, and --unlock breaks it (restoring)
    boardlock._write(str(board), _holder(host="elsewhere.invalid") | {
        "since": time.time(), "restore": {"current": os.readlink(board / "current"),
                                          "previous": None}})
    with pytest.raises(DeployError, match="edgeops deploy --unlock"):
        dep.rollback(LocalTransport(board), wait_s=0)
    doc = dep.unlock(f"local:{board}")
    assert doc["broke"]["holder"]["host"] == "elsewhere.invalid"
    assert not (board / boardlock.LOCK).exists()


def test_switching_requires_holding_the_lock(board):
    """An agent switch by a deploy whose lock was broken meanwhile is refused (its report would
    be false)."""
    t = LocalTransport(board)
    rc, _, err = t.board("activate", str(board), os.readlink(board / "current"), "--owner",
                         "nobody", check=False)
    assert rc == 2 and "no longer held by this deploy" in err


def test_reading_commands_never_create_the_board(tmp_path, capsys):
    from edgeops.cli import main
    missing = tmp_path / "no" / "board"
    for argv in (["deploy", "--status", "--to", f"local:{missing}"],
                 ["deploy", "--rollback", "--to", f"local:{missing}"],
                 ["deploy", "--clean", "--to", f"local:{missing}"],
                 ["deploy", "--unlock", "--to", f"local:{missing}"],
                 ["doctor", "--to", f"local:{missing}"],
                 ["run", "x", "--to", f"local:{missing}"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "does not exist" in err, (argv, err)
        assert not (tmp_path / "no").exists(), argv
