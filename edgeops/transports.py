"""How edgeops reaches a board: ``local:/path`` (a directory standing for the board's disk, agent
run with this host's Python) and ``ssh://user@host:port/path`` (the system OpenSSH client, so the
user's ssh config, agent and jump hosts apply; host-key checking is never turned off here).

A transport knows the board root and offers: run the board agent (``python -m edgeops.board``),
make a directory, put and get a file. Everything else (staging, verify, switch) is in
:mod:`edgeops.deploy`. Extra ssh options (tests, unusual set-ups) come from the environment
variable ``EDGEOPS_SSH_OPTIONS`` (shell-split); the board's Python from ``?python=`` in the URI
or ``EDGEOPS_BOARD_PYTHON`` (default ``python3``).
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path, PurePosixPath
from urllib.parse import parse_qs, urlsplit

from edgeops.errors import DeployError

CHUNK = 1 << 16
AGENT_TIMEOUT_S = 600


class Transport:
    uri: str
    root: str

    def path(self, rel: str = "") -> str:
        return str(PurePosixPath(self.root) / rel) if rel else self.root

    def board(self, *args: str, check: bool = True) -> tuple[int, dict | None, str]:
        """Run the board agent; (exit status, its JSON document or None, its stderr).
        ``check``: a non-zero status raises :class:`DeployError` with the agent's message."""
        rc, out, err = self._agent(list(args))
        doc = None
        if out.strip():
            try:
                doc = json.loads(out)
            except ValueError:
                doc = None
        if check and (rc != 0 or doc is None):
            msg = err.strip().splitlines()[-1] if err.strip() else f"exit status {rc}"
            raise DeployError(f"on the board ({self.uri}): {msg}")
        return rc, doc, err

    # implemented by each transport
    def _agent(self, args: list[str]) -> tuple[int, str, str]:
        raise NotImplementedError

    def mkdir(self, rel: str) -> None:
        raise NotImplementedError

    def put_file(self, src: Path, rel: str, advance=lambda n: None) -> None:
        raise NotImplementedError

    def get_file(self, rel: str, dst: Path) -> None:
        raise NotImplementedError


class LocalTransport(Transport):
    def __init__(self, root, python: str | None = None):
        self.root = str(Path(root).absolute())
        self.uri = f"local:{self.root}"
        self.python = python or sys.executable

    def _agent(self, args):
        try:
            r = subprocess.run([self.python, "-m", "edgeops.board", *args], capture_output=True,
                               text=True, timeout=AGENT_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise DeployError(f"cannot run the board agent with {self.python}: {e}") from None
        return r.returncode, r.stdout, r.stderr

    def mkdir(self, rel):
        os.makedirs(self.path(rel), exist_ok=False)

    def put_file(self, src, rel, advance=lambda n: None):
        with open(src, "rb") as fin, open(self.path(rel), "wb") as fout:
            while chunk := fin.read(CHUNK):
                self._write(fout, chunk)
                advance(len(chunk))
            fout.flush()
            os.fsync(fout.fileno())

    def _write(self, f, chunk: bytes) -> None:     # the fault tests hook in here
        f.write(chunk)

    def get_file(self, rel, dst):
        shutil.copyfile(self.path(rel), dst)


class SshTransport(Transport):
    def __init__(self, user, host, port, root, python: str | None = None, options=None):
        self.user, self.host, self.port, self.root = user, host, port, root
        self.python = python or os.environ.get("EDGEOPS_BOARD_PYTHON", "python3")
        self.options = list(options if options is not None else
                            shlex.split(os.environ.get("EDGEOPS_SSH_OPTIONS", "")))
        self.dest = f"{user}@{host}" if user else host
        self.uri = f"ssh://{self.dest}{f':{port}' if port else ''}{root}"

    def _base(self, prog: str) -> list[str]:
        port = ["-p" if prog == "ssh" else "-P", str(self.port)] if self.port else []
        return [prog, "-o", "BatchMode=yes", *port, *self.options]

    def _ssh(self, remote_cmd: str, timeout=AGENT_TIMEOUT_S):
        try:
            r = subprocess.run([*self._base("ssh"), self.dest, "--", remote_cmd],
                               capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise DeployError(f"ssh to {self.dest} failed: {e}") from None
        if r.returncode == 255:     # ssh's own failure (connection, auth, host key)
            last = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "exit status 255"
            raise DeployError(f"ssh to {self.dest} failed: {last}")
        return r

    def _agent(self, args):
        r = self._ssh(shlex.join([self.python, "-m", "edgeops.board", *args]))
        return r.returncode, r.stdout, r.stderr

    def mkdir(self, rel):
        r = self._ssh(shlex.join(["mkdir", "-p", self.root]) + " && " +
                      shlex.join(["mkdir", self.path(rel)]))
        if r.returncode != 0:
            raise DeployError(f"cannot create {self.path(rel)} on {self.dest}: {r.stderr.strip()}")

    def _scp(self, a: str, b: str) -> None:
        try:
            r = subprocess.run([*self._base("scp"), "-q", a, b], capture_output=True, text=True,
                               timeout=AGENT_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise DeployError(f"scp to {self.dest} failed: {e}") from None
        if r.returncode != 0:
            raise DeployError(f"scp {a} -> {b} failed: {' '.join(r.stderr.split()) or r.returncode}")

    def put_file(self, src, rel, advance=lambda n: None):
        self._scp(str(src), f"{self.dest}:{self.path(rel)}")
        advance(Path(src).stat().st_size)

    def get_file(self, rel, dst):
        self._scp(f"{self.dest}:{self.path(rel)}", str(dst))


def open_transport(uri) -> Transport:
    """``local:/path`` or ``ssh://[user@]host[:port]/path[?python=/usr/bin/python3]``."""
    if isinstance(uri, Transport):
        return uri
    uri = str(uri)
    if uri.startswith("local:"):
        path = uri[len("local:"):]
        if path.startswith("//"):
            path = path[2:]
        if not path:
            raise DeployError(f"--to {uri}: give a directory, e.g. local:/tmp/board")
        return LocalTransport(path)
    if uri.startswith("ssh://"):
        u = urlsplit(uri)
        if not u.hostname or not u.path or u.path == "/":
            raise DeployError(f"--to {uri}: expected ssh://user@host:port/path/on/board")
        q = parse_qs(u.query)
        return SshTransport(u.username, u.hostname, u.port, u.path,
                            python=q.get("python", [None])[0])
    raise DeployError(f"--to {uri}: unknown transport; use local:/path or "
                      f"ssh://user@host:port/path (qemu-arm64: is not implemented yet)")
