"""edgeops' on/off environment switches, read one way everywhere, and the memory this machine
has available (what resource estimates are held against)."""
from __future__ import annotations

import os

from edgeops.errors import EdgeOpsError

ON = ("1", "on", "true", "yes")
OFF = ("0", "off", "false", "no")


def switch(name: str, default: bool) -> bool:
    """Whether switch ``name`` is on: 1/on/true/yes or 0/off/false/no (any case); unset or empty
    is ``default``; anything else is an error naming the variable (a typo must not silently
    choose for the user)."""
    raw = os.environ.get(name, "")
    v = raw.strip().lower()
    if not v:
        return default
    if v in ON:
        return True
    if v in OFF:
        return False
    raise EdgeOpsError(f"environment variable {name}={raw!r} is not a switch: set it to one of "
                       f"{'/'.join(ON)} or {'/'.join(OFF)}, or unset it")


def memory_available() -> int | None:
    """Bytes of memory available to a new allocation (``MemAvailable`` in /proc/meminfo), or None
    where there is no such figure."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None
