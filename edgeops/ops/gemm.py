"""Gemm: Y = alpha * op(A) @ op(B) + beta * C, op() transposing when transA/transB is 1."""
import numpy as np

from edgeops.errors import OpDefinitionError
from edgeops.ops.base import Attr, OpDef, define_op


@define_op
class Gemm(OpDef):
    name = "Gemm"
    min_inputs, max_inputs = 2, 3
    attrs = {"alpha": Attr("float", 1.0), "beta": Attr("float", 1.0),
             "transA": Attr("int", 0, choices=(0, 1)), "transB": Attr("int", 0, choices=(0, 1))}

    @classmethod
    def _mnk(cls, attrs, a, b):
        m, k = (a[1], a[0]) if attrs["transA"] else (a[0], a[1])
        kb, n = (b[1], b[0]) if attrs["transB"] else (b[0], b[1])
        if k != kb:
            raise OpDefinitionError(f"Gemm: inner dimensions differ (A gives K={k}, B gives K={kb})")
        return m, n, k

    @classmethod
    def shape(cls, attrs, shapes):
        m, n, _ = cls._mnk(attrs, shapes[0], shapes[1])
        return [(m, n)]

    @classmethod
    def reference(cls, a, b, c=None, *, alpha, beta, transA, transB):
        y = alpha * ((a.T if transA else a) @ (b.T if transB else b))
        if c is not None:
            y = y + beta * c
        return y.astype(a.dtype, copy=False)

    @classmethod
    def cost(cls, attrs, in_shapes, out_shapes):
        m, n, k = cls._mnk(attrs, in_shapes[0], in_shapes[1])
        extra = m * n if len(in_shapes) > 2 and in_shapes[2] is not None else 0  # "" = no C
        return m * n * k, 2 * m * n * k + extra
