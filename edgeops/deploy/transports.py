"""How edgeops reaches a board. Three transports:

- ``local:/path``: a directory standing for the board's disk, agent run with this host's Python.
- ``ssh://user@host:port/path``: the system OpenSSH client, so the user's ssh config, agent and
  jump hosts apply; host-key checking is never turned off here.
- ``qemu-arm64:SYSROOT[:BOARD_DIR]``: an emulated Cortex-A76 board. Commands run as
  ``qemu-aarch64-static -L SYSROOT SYSROOT/usr/bin/python3.11`` with ``QEMU_CPU=cortex-a76``, the
  sysroot's ``opt/edgeops/site`` (its aarch64 wheels, scripts/arm64/build_sysroot.sh) on the
  path; files move as for ``local`` (BOARD_DIR is a directory on this host, default
  ``SYSROOT/opt/edgeops/board``). An empty SYSROOT means ``$EDGEOPS_ARM64_SYSROOT`` or
  ``~/.cache/edgeops/arm64-sysroot``. Numba kernels then run as aarch64 code.

A transport knows the board root and offers: run the board's Python (``python -m edgeops.deploy.board``
or a ``-c`` probe), make a directory, put and get a file. Every command runs with
``ROOT/.edgeops/lib`` first on ``PYTHONPATH``: the board-private edgeops deploy pushes when the
board has none or another version (:mod:`edgeops.deploy`). Extra ssh options (tests, unusual
set-ups) come from ``EDGEOPS_SSH_OPTIONS`` (shell-split); the board's Python from ``?python=`` in
the URI or ``EDGEOPS_BOARD_PYTHON`` (default ``python3``).
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
QEMU_TIMEOUT_S = 3600       # a cold Numba compile under emulation takes minutes
LIB = ".edgeops/lib"        # the board-private edgeops (a pure-Python wheel, unpacked)
QEMU = "qemu-aarch64-static"
QEMU_PYTHON = "usr/bin/python3.11"
QEMU_SITE = "opt/edgeops/site"


class Transport:
    uri: str
    root: str

    def path(self, rel: str = "") -> str:
        return str(PurePosixPath(self.root) / rel) if rel else self.root

    def board(self, *args: str, check: bool = True) -> tuple[int, dict | None, str]:
        """Run the board agent; (exit status, its JSON document or None, its stderr).
        ``check``: a non-zero status raises :class:`DeployError` with the agent's message."""
        rc, out, err = self._agent(list(args))
        return self._parse(rc, out, err, check)

    def probe(self, code: str, *args: str, check: bool = True) -> tuple[int, dict | None, str]:
        """Run ``python -c code args...`` on the board (no edgeops needed); as :meth:`board`."""
        rc, out, err = self._exec(["-c", code, *args])
        return self._parse(rc, out, err, check)

    def _parse(self, rc, out, err, check):
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

    def _agent(self, args: list[str]) -> tuple[int, str, str]:
        return self._exec(["-m", "edgeops.deploy.board", *args])

    # implemented by each transport
    def _exec(self, pyargs: list[str]) -> tuple[int, str, str]:
        """Run the board's Python with ``pyargs``, ``ROOT/.edgeops/lib`` first on its path."""
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

    def _command(self) -> list[str]:
        return [self.python]

    def _env(self) -> dict:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [self.path(LIB), *filter(None, [env.get("PYTHONPATH")])])
        return env

    def _exec(self, pyargs):
        # the board root as working directory: `python -m` puts the cwd first on sys.path, and a
        # source checkout there would shadow the board's own edgeops. A root that does not exist
        # is not created here (only a deploy creates one): "/" stands in
        cwd = self.root if os.path.isdir(self.root) else "/"
        cmd = self._command()
        try:
            r = subprocess.run([*cmd, *pyargs], capture_output=True, text=True, cwd=cwd,
                               env=self._env(), timeout=self.timeout)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise DeployError(f"cannot run the board's Python ({' '.join(cmd)}): {e}") from None
        return r.returncode, r.stdout, r.stderr

    timeout = AGENT_TIMEOUT_S

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


def default_sysroot() -> str:
    return os.environ.get("EDGEOPS_ARM64_SYSROOT") or str(
        Path.home() / ".cache" / "edgeops" / "arm64-sysroot")


class QemuTransport(LocalTransport):
    """An emulated Cortex-A76 board: a directory here, its Python the sysroot's aarch64 CPython
    under qemu-user. The emulated process sees the sysroot first for every absolute path (qemu's
    ``-L``), so its /proc/cpuinfo is the sysroot's Cortex-A76 one; the board directory must not
    exist inside the sysroot under the same path, and does not (it is a host path)."""
    timeout = QEMU_TIMEOUT_S

    def __init__(self, sysroot=None, root=None, cpu: str = "cortex-a76"):
        self.sysroot = str(Path(sysroot or default_sysroot()).absolute())
        super().__init__(root or Path(self.sysroot) / "opt" / "edgeops" / "board")
        self.cpu = cpu
        self.uri = f"qemu-arm64:{self.sysroot}:{self.root}"

    def _command(self):
        qemu = shutil.which(QEMU)
        py = Path(self.sysroot) / QEMU_PYTHON
        if qemu is None:
            raise DeployError(f"--to {self.uri}: {QEMU} is not installed (Debian: apt-get install "
                              f"qemu-user-static)")
        if not py.is_file():
            raise DeployError(f"--to {self.uri}: {py} does not exist; build the arm64 sysroot "
                              f"with scripts/arm64/build_sysroot.sh {self.sysroot}")
        return [qemu, "-L", self.sysroot, str(py)]

    def _env(self):
        # the host's Python settings mean nothing to the emulated interpreter
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")
               and k not in ("VIRTUAL_ENV", "NUMBA_CACHE_DIR")}
        env["PYTHONPATH"] = os.pathsep.join([self.path(LIB), str(Path(self.sysroot) / QEMU_SITE)])
        env["QEMU_CPU"] = self.cpu
        env["EDGEOPS_UNDER_QEMU"] = "1"
        return env


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

    def _exec(self, pyargs):
        lib = shlex.quote(self.path(LIB))
        r = self._ssh(f'PYTHONPATH={lib}"${{PYTHONPATH:+:$PYTHONPATH}}" ' +
                      shlex.join([self.python, *pyargs]))
        return r.returncode, r.stdout, r.stderr

    def mkdir(self, rel):
        path = PurePosixPath(self.path(rel))
        r = self._ssh(shlex.join(["mkdir", "-p", str(path.parent)]) + " && " +
                      shlex.join(["mkdir", str(path)]))
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
    """``local:/path``, ``ssh://[user@]host[:port]/path[?python=/usr/bin/python3]`` or
    ``qemu-arm64:SYSROOT[:BOARD_DIR]``."""
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
    if uri.startswith("qemu-arm64:"):
        sysroot, _, board = uri[len("qemu-arm64:"):].partition(":")
        for what, p in (("SYSROOT", sysroot), ("BOARD_DIR", board)):
            if p and not p.startswith("/"):
                raise DeployError(f"--to {uri}: {what} must be an absolute path "
                                  f"(qemu-arm64:/path/to/sysroot[:/board/dir])")
        return QemuTransport(sysroot or None, board or None)
    raise DeployError(f"--to {uri}: unknown transport; use local:/path, "
                      f"ssh://user@host:port/path or qemu-arm64:/path/to/sysroot[:/board/dir]")
