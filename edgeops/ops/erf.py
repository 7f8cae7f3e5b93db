"""Erf: the Gauss error function, elementwise."""
from edgeops.ops._common import erf
from edgeops.ops.base import OpDef, define_op


@define_op
class Erf(OpDef):
    name = "Erf"
    flops_per_element = 4

    @classmethod
    def reference(cls, x):
        return erf(x).astype(x.dtype, copy=False)
