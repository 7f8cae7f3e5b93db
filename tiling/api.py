"""The tiling package's front door: spaces from anything, problems, predictions, naive tilings.

``op`` arguments accept a spec string (``"gemm:M=64,N=64,K=64,dtype=fp16"``), a
:class:`~edgeops.tiling.spaces.Space` or an ``edgeops.graph.Node``; ``board`` a board name, a path
or a loaded :class:`~edgeops.boards.Board`.
"""
from __future__ import annotations

from dataclasses import dataclass

from edgeops.errors import OpSpecError
from edgeops.simulator.evaluate import Prediction
from edgeops.simulator.hardware import from_board
from edgeops.tiling.legality import check
from edgeops.tiling.batch import batch_from_tilings
from edgeops.tiling.model import evaluate, prediction
from edgeops.tiling.naive import naive_tiling
from edgeops.tiling.problem import Problem, get_problem, problems
from edgeops.tiling.spaces import Space, parse_spec
from edgeops.tiling.tiling import Tiling


def as_space(op) -> Space:
    if isinstance(op, Space):
        return op
    if isinstance(op, str):
        return parse_spec(op)
    if hasattr(op, "op_type"):
        from edgeops.tiling.from_node import space_from_node
        sp = space_from_node(op)
        if isinstance(sp, str):
            raise OpSpecError(f"node {op.name!r} ({op.op_type}) has no iteration space: {sp}")
        return sp
    raise OpSpecError(f"cannot describe {type(op).__name__} as an op; give a spec string such as "
                      f"gemm:M=64,N=64,K=64, a Space or a graph node")


def hardware(board, target: str | None = None):
    from edgeops import boards
    return from_board(boards.load(board), target)


def problem_for(op, board, decomposition: str | None = None, target: str | None = None) -> Problem:
    """The problem of ``op`` on ``board`` for one decomposition (default: the first listed)."""
    return get_problem(as_space(op), hardware(board, target), decomposition)


def decompositions(op, board, target: str | None = None) -> list[str]:
    return list(problems(as_space(op), hardware(board, target)))


@dataclass(frozen=True)
class Evaluated:
    """A tiling with its prediction."""
    tiling: Tiling
    prediction: Prediction

    def to_dict(self) -> dict:
        d = {"tiling": self.tiling.to_dict()}
        d.update(self.prediction.to_dict())
        return d


def predict(op, board, tiling: Tiling | str | dict, target: str | None = None) -> Evaluated:
    """Check ``tiling`` against the board and predict it.

    ``tiling`` may also be its JSON text or dict (a tiling file's content). Preconditions (each a
    TilingError naming the field or rule): the file parses (``Tiling.from_dict``), fits the op
    and board (``legality.fit``) and is legal (``legality.check``).
    """
    if isinstance(tiling, str):
        tiling = Tiling.from_json(tiling)
    elif isinstance(tiling, dict):
        tiling = Tiling.from_dict(tiling)
    p = problem_for(op, board, tiling.decomposition, target)
    check(p, tiling)
    s = evaluate(p, batch_from_tilings(p, [tiling]))
    return Evaluated(tiling, prediction(p, s, 0))


def naive(op, board, decomposition: str | None = None, target: str | None = None) -> Tiling:
    """The naive tiling (see ``edgeops.tiling.naive``).

    Precondition: ``decomposition``, when given, is one the op has here (TilingError otherwise).
    """
    return naive_tiling(problem_for(op, board, decomposition, target))
