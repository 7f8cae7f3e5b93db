"""Compiling the neon kernels' native entries (:mod:`edgeops.plans`): each body a Numba
``cfunc`` of the entries' signature, compiled or loaded from Numba's disk cache on first use,
after Numba's threading layer is started (a cached entry that calls parallel kernels needs its
symbols to link). The bodies live beside their kernels (``native``, ``norms``)."""
from __future__ import annotations

from edgeops.plans import entry_signature, prepare_numba

SERIAL, POOL, ALONE = 0, 1, 2     # how a step's kernel runs: serial twin, pool, one-thread team
_FM = {"contract"}
_compiled: dict = {}


def address(name: str, body) -> int:
    """The address of entry ``name`` (``body`` compiled on first use)."""
    f = _compiled.get(name)
    if f is None:
        from numba import cfunc
        prepare_numba()
        f = _compiled[name] = cfunc(entry_signature(), nopython=True, cache=True, fastmath=_FM,
                                    error_model="numpy")(body)
    return f.address
