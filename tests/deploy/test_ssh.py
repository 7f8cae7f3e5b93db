"""Deploy over ssh to a throwaway sshd on 127.0.0.1 (its own host key, authorized_keys and
known_hosts: host-key checking stays on)."""
import getpass
import os
import sys

import pytest

from edgeops import deploy as dep
from edgeops.errors import DeployError
from edgeops.deploy.transports import open_transport


def test_deploy_and_run_over_ssh(sshd, pkgs, tmp_path, monkeypatch, capsys):
    import numpy as np
    from edgeops.cli import main
    monkeypatch.setenv("EDGEOPS_SSH_OPTIONS", sshd["opts"])
    root = tmp_path / "board"
    to = f"ssh://{getpass.getuser()}@127.0.0.1:{sshd['port']}{root}?python={sys.executable}"
    doc = dep.deploy(pkgs[0], to, board="host", progress=True)
    assert doc["smoke"]["ok"] and os.readlink(root / "current") == doc["installed_as"]
    out = tmp_path / "out.npz"
    assert main(["run", str(pkgs[0]), "--to", to, "--out", str(out), "--json", "--runs", "1"]) == 0
    assert '"ok": true' in capsys.readouterr().out
    from edgeops import package
    ins, want = package.load(pkgs[0]).reference()
    with np.load(out) as z:
        np.testing.assert_allclose(z["logits"], want["logits"], atol=1e-4 * np.abs(want["logits"]).max())
    with pytest.raises(DeployError, match="no previous package"):    # agent errors come back
        dep.rollback(to)
    assert not list(root.glob("staging-*"))

def test_host_key_checking_stays_on(sshd, pkgs, tmp_path, monkeypatch):
    (tmp_path / "kh").write_text("")
    monkeypatch.setenv("EDGEOPS_SSH_OPTIONS",
                       sshd["opts"].replace(str(sshd["dir"] / "known_hosts"), str(tmp_path / "kh"))
                       .replace("StrictHostKeyChecking=yes", "StrictHostKeyChecking=ask"))
    to = f"ssh://{getpass.getuser()}@127.0.0.1:{sshd['port']}{tmp_path / 'b'}?python={sys.executable}"
    with pytest.raises(DeployError, match="Host key verification failed"):
        dep.deploy(pkgs[0], to, progress=False)
    assert not (tmp_path / "b").exists()


def test_uri_parsing():
    t = open_transport("ssh://pi@board.local:2222/srv/edge?python=/usr/bin/python3.11")
    assert (t.user, t.host, t.port, t.root, t.python) == ("pi", "board.local", 2222, "/srv/edge",
                                                         "/usr/bin/python3.11")
    assert t._base("scp")[:5] == ["scp", "-o", "BatchMode=yes", "-P", "2222"]
    with pytest.raises(DeployError, match="expected ssh://"):
        open_transport("ssh://host")


def test_bench_and_doctor_over_ssh(sshd, pkgs, tmp_path, monkeypatch):
    from edgeops.deploy.bench import bench
    from edgeops.deploy.doctor import doctor
    monkeypatch.setenv("EDGEOPS_SSH_OPTIONS", sshd["opts"])
    to = (f"ssh://{getpass.getuser()}@127.0.0.1:{sshd['port']}{tmp_path / 'board'}"
          f"?python={sys.executable}")
    dep.deploy(pkgs[0], to, progress=False)
    b = bench(pkgs[0], to, runs=3, profile_runs=1)
    assert b["latency_s"]["p50"] > 0 and any(r["measured_s"] for r in b["nodes"])
    d = doctor(to, runs=5)
    assert len(d["checks"]) == 23 and d["ok"], [r for r in d["checks"] if r["status"] == "fail"]
