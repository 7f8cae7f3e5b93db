"""Identity: y = x."""
from edgeops.ops.base import OpDef, define_op


@define_op
class Identity(OpDef):
    name = "Identity"
    flops_per_element = 0

    @classmethod
    def reference(cls, x):
        return x.copy()
