"""Operator semantic layer: one op per file, each with attributes, shape rule, numpy reference
and cost. Ops register with ``@define_op``; this module imports every op file explicitly."""
from edgeops.ops.base import EDGEOPS_DOMAIN, Attr, OpDef, all_ops, define_op, get_op, has_op

# Explicit list: adding an op means adding its file here (no directory scanning).
from edgeops.ops import relu, gemm  # noqa: F401,E402

__all__ = ["EDGEOPS_DOMAIN", "Attr", "OpDef", "all_ops", "define_op", "get_op", "has_op"]
