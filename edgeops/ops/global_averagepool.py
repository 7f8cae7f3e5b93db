"""GlobalAveragePool: mean over all spatial axes of X (N, C, ...), kept as size-1 axes."""
from edgeops.errors import OpDefinitionError
from edgeops.ops._common import wide
from edgeops.ops.base import OpDef, _numel, define_op


@define_op
class GlobalAveragePool(OpDef):
    name = "GlobalAveragePool"

    @classmethod
    def shape(cls, attrs, shapes):
        x = tuple(shapes[0])
        if len(x) < 3:
            raise OpDefinitionError(f"{cls.name}: X must be (N, C, spatial...), got {x}")
        return [x[:2] + (1,) * (len(x) - 2)]

    @classmethod
    def reference(cls, x):
        cls.shape({}, [x.shape])
        return wide(x).mean(axis=tuple(range(2, x.ndim)), keepdims=True).astype(x.dtype, copy=False)

    @classmethod
    def cost(cls, attrs, in_shapes, out_shapes):
        return 0, _numel(in_shapes[0])  # one add per input element (the divide is noise)
