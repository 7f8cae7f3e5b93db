"""InstanceNormalization: each (n, c) of X (N, C, ...) is normalised over its spatial positions,
then Y = norm * scale[c] + B[c]."""
from edgeops.errors import OpDefinitionError
from edgeops.ops.base import Attr, OpDef, define_op
from edgeops.ops.groupnorm import group_norm


@define_op
class InstanceNormalization(OpDef):
    name = "InstanceNormalization"
    min_inputs, max_inputs = 3, 3
    attrs = {"epsilon": Attr("float", 1e-5)}
    flops_per_element = 8

    @classmethod
    def shape(cls, attrs, shapes):
        x = tuple(shapes[0])
        if len(x) < 3 or any(s is not None and tuple(s) != (x[1],) for s in shapes[1:3]):
            got = [None if s is None else tuple(s) for s in shapes]
            raise OpDefinitionError(f"{cls.name}: needs X (N, C, spatial...) and scale, B of shape "
                                    f"(C,); got {got}")
        return [x]

    @classmethod
    def reference(cls, x, scale, b, *, epsilon):
        cls.shape({}, [x.shape, scale.shape, b.shape])
        # instance norm is group norm with one channel per group
        return group_norm(x, scale, b, x.shape[1], epsilon).astype(x.dtype, copy=False)
