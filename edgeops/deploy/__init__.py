"""The deploy side: taking packages to boards and looking after them there.

- :mod:`~edgeops.deploy.transports`: how a board is reached (``local:``, ``ssh://``, ``qemu-arm64:``).
- :mod:`~edgeops.deploy.push`: deploy, rollback, status, clean, run on the board; pushing edgeops.
- :mod:`~edgeops.deploy.layout`: the board root's layout and what a board needs installed.
- :mod:`~edgeops.deploy.boardlock`: the board-level deploy lock (stdlib only: it also runs on a
  board that has no edgeops yet).
- :mod:`~edgeops.deploy.board`: the agent that runs on the board (``python -m edgeops.deploy.board``).
- :mod:`~edgeops.deploy.doctor` (with :mod:`~edgeops.deploy.checks` and
  :mod:`~edgeops.deploy.doctor_package`), :mod:`~edgeops.deploy.bench`: health checks and
  benchmarks on the board; :mod:`~edgeops.deploy.signing`: ed25519 package signatures.

The modules import one way: layout and transports first, the agent last; nothing here imports the
CLI. The host-side calls are re-exported here.
"""
from edgeops.deploy.push import (LOCK_WAIT_S, STALE_S, board_lock, clean, deploy, edgeops_wheel,
                                 ensure_edgeops, push_reason, rollback, run_remote, status, unlock)

__all__ = ["LOCK_WAIT_S", "STALE_S", "board_lock", "clean", "deploy", "edgeops_wheel",
           "ensure_edgeops", "push_reason", "rollback", "run_remote", "status", "unlock"]
