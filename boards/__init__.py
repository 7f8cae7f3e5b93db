"""edgeops.boards: one TOML file per board and the typed loader that validates them.

``load("rpi5")`` or ``load("path/to/board.toml")`` gives a frozen :class:`Board`; ``names()``
lists the bundled boards. See ``schema.py`` for the file format.
"""
from __future__ import annotations

import os
import sys
from functools import lru_cache
from pathlib import Path as _P

from edgeops.boards.schema import Board, Core, GpuLimits, Memory, Path, Peer, Unit, file_hash, parse_board
from edgeops.errors import BoardError

if sys.version_info >= (3, 11):
    import tomllib
else:  # JetPack 6 boards ship Python 3.10
    import tomli as tomllib

BOARD_DIR = _P(__file__).resolve().parent

__all__ = ["Board", "Core", "GpuLimits", "Memory", "Path", "Peer", "Unit", "load", "names", "BOARD_DIR"]


def names() -> list[str]:
    return sorted(p.stem for p in BOARD_DIR.glob("*.toml"))


def _resolve_path(name_or_path: str | os.PathLike) -> _P:
    s = os.fspath(name_or_path)
    if s.endswith(".toml") or os.sep in s or "/" in s:
        p = _P(s)
        if not p.is_file():
            raise BoardError(f"board file {s} does not exist")
        return p.resolve()
    p = BOARD_DIR / f"{s}.toml"
    if not p.is_file():
        raise BoardError(f"unknown board {s!r}; known: {', '.join(names())}, or a path to a board "
                         f"file (add one in boards/, see boards/schema.py)")
    return p


def load(name_or_path: str | os.PathLike | Board) -> Board:
    """Board by name (a file in boards/) or path. Cached per file content."""
    if isinstance(name_or_path, Board):
        return name_or_path
    p = _resolve_path(name_or_path)
    data = p.read_bytes()
    return _load_cached(str(p), data)


@lru_cache(maxsize=64)
def _load_cached(path: str, data: bytes) -> Board:
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise BoardError(f"board file {path}: not valid TOML: {e}") from None
    resolve = None
    if doc.get("name") == "host":
        from edgeops.boards import host
        resolve = host.resolver()
    stem = _P(path).stem
    board = parse_board(doc, path, resolve=resolve,
                        expected_name=stem if _P(path).parent == BOARD_DIR else None)
    h = file_hash(data)
    if resolve is not None:
        # the measured figures are part of what the tuning cache must key on
        h = file_hash(data + repr(sorted(board.sources.items())).encode()
                      + repr(board.to_dict()).encode())
    object.__setattr__(board, "file_sha256", h)
    return board
