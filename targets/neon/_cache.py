"""Invalidate the NEON kernels' Numba disk cache when ANY of this package's sources changes.

Numba keys a cached function on its own file's timestamp only. The kernels here inline code from
sibling modules (``epilogue``, ``_vmath``, ``_pack``, the micro-kernel intrinsics), so editing
``epilogue.py`` would leave ``gemm.py``'s cached machine code stale -- silently wrong results.
On import, a hash of every ``*.py`` in this package is compared with the stamp stored next to
the cache; on a mismatch the package's ``*.nbi``/``*.nbc`` files are removed first.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

_PKG = Path(__file__).resolve().parent


def _cache_dirs() -> list[Path]:
    """Every directory Numba may keep this package's cache in, asked of Numba's own locators
    (in-tree __pycache__, NUMBA_CACHE_DIR, the per-user fallback for read-only installs)."""
    from numba.core import caching, config

    def probe():  # the locators only read the function's first line number
        pass
    py_file = str(_PKG / "gemm.py")
    classes = [caching.InTreeCacheLocator, caching.UserWideCacheLocator]
    if config.CACHE_DIR:
        classes.insert(0, caching.UserProvidedCacheLocator)
    dirs = []
    for cls in classes:
        try:
            dirs.append(Path(cls(probe, py_file).get_cache_path()))
        except Exception:  # noqa: BLE001 - a locator that does not apply here
            continue
    return dirs


def sources_hash() -> str:
    h = hashlib.sha256()
    for p in sorted(_PKG.glob("*.py")):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def ensure_fresh() -> None:
    """Wipe this package's cache entries wherever the stamp is missing or differs, and stamp
    every candidate directory BEFORE Numba writes to it (an unstamped directory full of entries
    would otherwise be wiped once on the next start, costing a full recompile)."""
    digest = sources_hash()
    for d in _cache_dirs():
        stamp = d / "neon_sources.sha256"
        try:
            if stamp.is_file() and stamp.read_text().strip() == digest:
                continue
            if d.is_dir():
                for f in list(d.glob("*.nbi")) + list(d.glob("*.nbc")):
                    f.unlink(missing_ok=True)
            d.mkdir(parents=True, exist_ok=True)
            stamp.write_text(digest)
        except OSError:
            pass  # read-only location: Numba falls back to another one itself
