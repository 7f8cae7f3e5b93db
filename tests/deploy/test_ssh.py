"""Deploy over ssh to a throwaway sshd on 127.0.0.1 (its own host key, authorized_keys and
known_hosts: host-key checking stays on)."""
import getpass
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from edgeops import deploy as dep
from edgeops.errors import DeployError
from edgeops.transports import open_transport

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def sshd(tmp_path_factory, unavailable):
    if not os.path.exists(SSHD):
        unavailable(f"{SSHD} is not installed (Debian: apt-get install -y openssh-server)")
    if shutil.which("ssh") is None or shutil.which("scp") is None:
        unavailable("the OpenSSH client (ssh, scp) is not installed")
    d = tmp_path_factory.mktemp("sshd")
    for key in ("host_key", "id"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / key)],
                       check=True)
    shutil.copyfile(d / "id.pub", d / "authorized_keys")
    port = _free_port()
    (d / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d / 'host_key'}\n"
        f"AuthorizedKeysFile {d / 'authorized_keys'}\nStrictModes no\nUsePAM no\n"
        f"PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        f"PermitRootLogin prohibit-password\nPidFile {d / 'sshd.pid'}\n"
        f"Subsystem sftp internal-sftp\nSetEnv EDGEOPS_CACHE_DIR={d / 'cache'}\n")
    host_pub = (d / "host_key.pub").read_text().split()
    (d / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}\n")
    try:
        os.makedirs("/run/sshd", exist_ok=True)      # privilege separation dir Debian's sshd wants
    except OSError:
        pass
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(d / "sshd_config")],
                            stderr=open(d / "sshd.log", "wb"))
    opts = (f"-F /dev/null -i {d / 'id'} -o IdentitiesOnly=yes -o StrictHostKeyChecking=yes "
            f"-o UserKnownHostsFile={d / 'known_hosts'} -o ConnectTimeout=5")
    try:
        for _ in range(100):
            if proc.poll() is not None:
                unavailable(f"sshd exited at start: {(d / 'sshd.log').read_text()[-300:]}")
            r = subprocess.run(["ssh", "-o", "BatchMode=yes", "-p", str(port), *shlex.split(opts),
                                f"{getpass.getuser()}@127.0.0.1", "true"],
                               capture_output=True, text=True)
            if r.returncode == 0:
                break
            time.sleep(0.1)
        else:
            unavailable(f"sshd on 127.0.0.1:{port} did not accept the test key: {r.stderr[-300:]}")
        yield {"port": port, "opts": opts, "dir": d}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


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
