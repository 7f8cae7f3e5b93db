"""The board-level deploy lock, stdlib only: deploy runs this file's source on the board with the
bare ``python -c`` (before edgeops may be there), and the agent imports it.

``ROOT/.edgeops/deploy.lock`` is a JSON document naming the deploy that holds the board (owner
id, host, pid and the pid's start time, what it does, since when) and, while a switched package
is being smoke-tested, the links to restore (``restore``: current and previous before the
switch). Every read-modify-write of it happens under an ``flock`` of ``deploy.lock.guard``, so
taking, breaking, journalling and releasing never interleave.

A lock whose holder ran on this host and whose process is gone (no such pid, or a pid reused by
another process: its start time differs) is broken by the next deploy: first the links in its
``restore`` are put back (a deploy killed during its smoke test never leaves an untested package
current), then the lock is taken. A lock held from another host cannot be judged here; the
refusal names it and ``edgeops deploy --unlock`` breaks it (with the same restore).
"""
from __future__ import annotations

import json
import os
import socket
import sys
import time

LOCK = os.path.join(".edgeops", "deploy.lock")
POLL_S = 0.2


class LockLost(Exception):
    """The lock is not held by the owner that claims it (broken or never taken)."""


def pid_start(pid) -> str | None:
    """The process's start time in clock ticks since boot (/proc), or None where there is none."""
    try:
        with open(f"/proc/{int(pid)}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError, ValueError):
        return None


def me(what: str) -> dict:
    """This process as a lock holder."""
    import secrets
    return {"owner": secrets.token_hex(8), "host": socket.gethostname(), "pid": os.getpid(),
            "pid_start": pid_start(os.getpid()), "what": what}


def alive(holder: dict) -> bool | None:
    """Whether the holder's process still runs; None when it ran on another host."""
    if holder.get("host") != socket.gethostname():
        return None
    pid = holder.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass                 # another user's live process
    want = holder.get("pid_start")
    return want is None or pid_start(pid) in (None, want)


class _Guard:
    def __init__(self, root):
        self.path = os.path.join(root, LOCK + ".guard")

    def __enter__(self):
        import fcntl
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        os.close(self.fd)      # closing drops the flock


def _read(root) -> dict | None:
    try:
        with open(os.path.join(root, LOCK)) as f:
            doc = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {"owner": None, "corrupt": True}    # half-written by a crash: nobody holds it
    return doc if isinstance(doc, dict) else {"owner": None, "corrupt": True}


def _write(root, doc: dict) -> None:
    path = os.path.join(root, LOCK)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(doc, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _link(root, name, target) -> None:
    tmp = os.path.join(root, f".{name}.tmp-{os.getpid()}")
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, os.path.join(root, name))


def _restore(root, held: dict) -> dict | None:
    """Put back the links a dead holder journalled before its switch; what was restored."""
    r = held.get("restore")
    if not isinstance(r, dict):
        return None
    for name in ("current", "previous"):
        target = r.get(name)
        if target and "/" not in target and os.path.isdir(os.path.join(root, target)):
            _link(root, name, target)
        elif os.path.islink(os.path.join(root, name)):
            os.unlink(os.path.join(root, name))
    return {"current": r.get("current"), "previous": r.get("previous")}


def _broken(root, held: dict, why: str) -> dict:
    restored = _restore(root, held)
    os.unlink(os.path.join(root, LOCK))
    return {"holder": {k: held.get(k) for k in ("owner", "host", "pid", "what", "since")},
            "why": why, "restored": restored}


def acquire(root, holder: dict, wait_s: float) -> dict:
    """Take the lock for ``holder`` (see :func:`me`), waiting up to ``wait_s`` seconds for a live
    holder; a dead one's lock is broken (its journal restored). ``{"acquired": bool, "broke":
    ..., "holder": the live holder when not acquired, "waited_s"}``."""
    os.makedirs(os.path.join(root, ".edgeops"), exist_ok=True)
    t0 = time.monotonic()
    broke = None
    while True:
        with _Guard(root):
            held = _read(root)
            if held is not None and held.get("owner") != holder["owner"]:
                state = False if held.get("corrupt") else alive(held)
                if state is False:
                    broke = _broken(root, held, "corrupt lock file" if held.get("corrupt")
                                    else "its process is gone")
                    held = None
            if held is None or held.get("owner") == holder["owner"]:
                _write(root, dict(holder, since=time.time()))
                return {"acquired": True, "broke": broke,
                        "waited_s": round(time.monotonic() - t0, 3)}
        if time.monotonic() - t0 >= wait_s:
            return {"acquired": False, "holder": held, "broke": broke,
                    "waited_s": round(time.monotonic() - t0, 3)}
        time.sleep(POLL_S)


def release(root, owner: str) -> dict:
    if not os.path.isdir(os.path.join(root, ".edgeops")):
        return {"released": False}
    with _Guard(root):
        held = _read(root)
        if held is None or held.get("owner") != owner:
            return {"released": False}
        os.unlink(os.path.join(root, LOCK))
        return {"released": True}


def force_break(root) -> dict:
    """Break the lock whoever holds it (``edgeops deploy --unlock``), restoring its journal."""
    if not os.path.isfile(os.path.join(root, LOCK)):
        return {"broke": None}
    with _Guard(root):
        held = _read(root)
        if held is None:
            return {"broke": None}
        return {"broke": _broken(root, held, "--unlock")}


def journal(root, owner: str, restore: dict | None) -> None:
    """Record (a dict) or clear (None) the links to restore, checking that ``owner`` still holds
    the lock; the caller switches links inside :func:`holding` so nothing interleaves."""
    held = _read(root)
    if held is None or held.get("owner") != owner:
        raise LockLost(f"the deploy lock of {root} is no longer held by this deploy "
                       f"({owner}); another deploy or --unlock broke it")
    if restore is None:
        held.pop("restore", None)
    else:
        held["restore"] = restore
    _write(root, held)


def holding(root):
    """The guard: ``with holding(root): journal(...); switch links``."""
    return _Guard(root)


if __name__ == "__main__":     # python -c SOURCE ROOT acquire|release|break JSON
    _root, _action, _arg = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    if _action == "acquire":
        _doc = acquire(_root, _arg["holder"], float(_arg["wait_s"]))
    elif _action == "release":
        _doc = release(_root, _arg["owner"])
    else:
        _doc = force_break(_root)
    print(json.dumps(_doc))
