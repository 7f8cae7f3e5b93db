"""User-facing failures. Each message says what is wrong, where, and what to do.

The CLI prints these in one line and exits 2; anything else that escapes is an internal bug
and keeps its traceback.
"""


class EdgeOpsError(Exception):
    """Base of every error a user can cause (bad model, bad flag, bad board file, ...)."""


class ModelError(EdgeOpsError):
    """The ONNX model cannot be loaded, checked or shape-inferred."""


class ShapeError(ModelError):
    """A tensor shape is symbolic/unknown where a concrete one is needed, or does not fit."""


class BoardError(EdgeOpsError):
    """A board name is unknown or a board file is malformed."""


class OpSpecError(EdgeOpsError):
    """An op spec string such as ``gemm:M=64,N=64,K=64`` is malformed."""


class OpDefinitionError(EdgeOpsError):
    """A node's attributes or inputs violate the operator's definition."""


class KernelNotFoundError(EdgeOpsError):
    """No kernel is registered for an (op, target, dtype) combination."""


class TilingError(EdgeOpsError):
    """A tiling is illegal for an op on a board (capacity, alignment, divisibility)."""


class PackageError(EdgeOpsError):
    """A compiled package is corrupted, tampered with or incompatible."""


class DeployError(EdgeOpsError):
    """A transport or a board-side step failed."""


class EdgeOpsWarning(UserWarning):
    """Something worked, but not the way the user asked (a fallback, a meaningless figure)."""
