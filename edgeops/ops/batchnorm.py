"""BatchNormalization, inference mode (opset 15): Y = (X - mean) / sqrt(var + epsilon) * scale + B,
with scale, B, mean, var of shape (C,) broadcast over axis 1 of X (N, C, ...)."""
from edgeops.errors import OpDefinitionError
from edgeops.ops._common import at, wide
from edgeops.ops.base import Attr, OpDef, define_op


@define_op
class BatchNormalization(OpDef):
    name = "BatchNormalization"
    min_inputs, max_inputs = 5, 5
    # momentum only matters in training; it is accepted so exported models load unchanged
    attrs = {"epsilon": Attr("float", 1e-5), "momentum": Attr("float", 0.9),
             "training_mode": Attr("int", 0, choices=(0, 1))}
    flops_per_element = 4

    @classmethod
    def validate(cls, attrs, where=""):
        if attrs["training_mode"]:
            raise OpDefinitionError(f"{cls.name}{at(where)}: training_mode=1 is not supported; "
                                    f"edgeops runs inference only (export the model in eval mode)")

    @classmethod
    def shape(cls, attrs, shapes):
        x = shapes[0]
        bad = [tuple(s) for s in shapes[1:5] if s is not None and tuple(s) != (x[1],)]
        if len(x) < 2 or bad:
            raise OpDefinitionError(f"{cls.name}: X {tuple(x)} needs scale/B/mean/var of shape "
                                    f"(C,) = ({x[1] if len(x) > 1 else '?'},), got {bad}")
        return [tuple(x)]

    @classmethod
    def reference(cls, x, scale, b, mean, var, *, epsilon, **_):
        cls.shape({}, [x.shape, scale.shape, b.shape, mean.shape, var.shape])
        c = (-1,) + (1,) * (x.ndim - 2)
        y = (wide(x) - wide(mean).reshape(c)) / (wide(var).reshape(c) + epsilon) ** 0.5
        return (y * wide(scale).reshape(c) + wide(b).reshape(c)).astype(x.dtype, copy=False)
