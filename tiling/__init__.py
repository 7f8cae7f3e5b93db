"""edgeops.tiling: iteration spaces of operators, the ``Tiling`` value, legality, search, bounds.

Public API (see each module's docstring for the conventions)::

    parse_spec("gemm:M=1024,N=1024,K=1024,dtype=fp16") -> Space      make_space(kind, **params)
    space_from_node(node) -> Space | str(reason)
    problem_for(op, board, decomposition=None) -> Problem            decompositions(op, board)
    Tiling / LevelTiling (frozen; to_json / from_json, TILING_VERSION)
    check(problem, tiling)  -> None or TilingError(rule and numbers)
    predict(op, board, tiling) -> Evaluated(tiling, prediction)
    naive(op, board, decomposition=None) -> Tiling
    search(op, board, objective="latency"|"traffic", top=5, decomposition=None, budget, progress)
        -> SearchResult(.best, .top, .pareto, .candidates_evaluated, .seconds,
                        .compulsory_bytes, .lower_bound_bytes, .to_dict())
    exhaustive(op, board, ...) -> (Evaluated, n)                     (small spaces only)
    compulsory_bytes(space), smith_bound_words(M, N, K, S), lower_bound_bytes(problem)
    tune(op, board, cache=True) -> (entry, cached)
    plan_graph(graph, board) / plan_ops([(name, op_type, op)], board) -> Plan
    TuningCache, COST_MODEL_VERSION

``op`` is a spec string, a Space or a graph node; ``board`` a name, a path or a Board.
"""
from edgeops.tiling.api import Evaluated, as_space, decompositions, naive, predict, problem_for
from edgeops.tiling.bounds import compulsory_bytes, lower_bound_bytes, smith_bound_words
from edgeops.tiling.cache import (COST_MODEL_VERSION, NodePlan, Plan, TuningCache, plan_graph,
                                  plan_ops, tune)
from edgeops.tiling.from_node import space_from_node
from edgeops.tiling.legality import check, fit
from edgeops.tiling.search import SearchResult, exhaustive, search
from edgeops.tiling.spaces import KINDS, Space, make_space, parse_spec
from edgeops.tiling.tiling import TILING_VERSION, LevelTiling, Tiling

__all__ = ["COST_MODEL_VERSION", "Evaluated", "KINDS", "LevelTiling", "NodePlan", "Plan",
           "SearchResult", "Space", "TILING_VERSION", "Tiling", "TuningCache", "as_space", "check",
           "compulsory_bytes", "decompositions", "exhaustive", "fit", "lower_bound_bytes",
           "make_space", "naive", "parse_spec", "plan_graph", "plan_ops", "predict", "problem_for", "search",
           "smith_bound_words", "space_from_node", "tune"]
