"""Operator semantic layer: one op per file, each with attributes, shape rule, numpy reference
and cost. Ops register with ``@define_op``; this module imports every op file explicitly."""
from edgeops.ops.base import EDGEOPS_DOMAIN, Attr, OpDef, all_ops, define_op, get_op, has_op

# Explicit list: adding an op means adding its file here (no directory scanning).
from edgeops.ops import (  # noqa: F401,E402
    relu, gemm, conv, batchnorm, matmul, binary, leaky_relu, clip, sigmoid, hard_sigmoid,
    hard_swish, tanh, erf, gelu, softmax, layernorm, groupnorm, instancenorm, maxpool,
    averagepool, global_averagepool, reshape, flatten, transpose, concat, split, resize,
    identity, dropout,
    conv_bn_act, swiglu, layernorm_gelu, groupnorm_act,  # fused ai.edgeops ops
    qconv_bn_act, qmatmul,  # int8 (QDQ units) at a float boundary
)

__all__ = ["EDGEOPS_DOMAIN", "Attr", "OpDef", "all_ops", "define_op", "get_op", "has_op"]
