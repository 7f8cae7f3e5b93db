"""Helpers the op files share: axis normalisation, broadcasting, float64 accumulation, erf.

Not an op (no ``@define_op``); the leading underscore keeps it out of the explicit import list.
"""
import math

import numpy as np

from edgeops.errors import OpDefinitionError


def at(where: str) -> str:
    return f" in node {where!r}" if where else ""


def wide(x) -> np.ndarray:
    """float64 copy of an input: references accumulate in float64 so that they stay a better
    oracle than the fp32/fp16 kernels they judge; each op casts its result back."""
    return np.asarray(x, dtype=np.float64)


def axis_of(op: str, axis: int, rank: int, allow_end: bool = False) -> int:
    """Normalise a possibly negative axis; ``allow_end`` admits axis == rank (Flatten)."""
    hi = rank if allow_end else rank - 1
    if not -rank <= axis <= hi:
        raise OpDefinitionError(f"{op}: axis={axis} is out of range for a rank-{rank} input "
                                f"(allowed {-rank}..{hi})")
    return axis + rank if axis < 0 else axis


def broadcast(op: str, *shapes) -> tuple[int, ...]:
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        raise OpDefinitionError(f"{op}: input shapes {[tuple(s) for s in shapes]} do not "
                                f"broadcast (numpy rules)") from None


def need_values(op: str, what: str, values, index: int):
    """The value of a shape-carrying input (Reshape's shape, Resize's sizes, ...), or an error
    saying that the output shape depends on it."""
    v = values[index] if values is not None and index < len(values) else None
    if v is None:
        raise OpDefinitionError(f"{op}: the output shape depends on the value of input "
                                f"{what!r}; pass it as values[{index}] to shape()")
    return np.asarray(v)


_erf = np.frompyfunc(math.erf, 1, 1)


def erf(x) -> np.ndarray:
    # numpy has no erf and scipy is not a dependency; math.erf is correctly rounded enough
    # for a float64 oracle, and reference tensors are small
    return _erf(wide(x)).astype(np.float64)


def sigmoid(x) -> np.ndarray:
    """float64 logistic without overflow warnings for large |x|."""
    x = wide(x)
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))
