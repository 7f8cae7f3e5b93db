"""LayerNormalization (opset 17): normalise over axes [axis, rank) then Y = norm * Scale + B, with
Scale and B broadcast to X.shape[axis:]. Only Y is produced (Mean and InvStdDev are training
outputs); statistics are computed in float64 whatever stash_type says."""
import numpy as np

from edgeops.errors import OpDefinitionError
from edgeops.ops._common import axis_of, wide
from edgeops.ops.base import Attr, OpDef, define_op


def layer_norm(x, scale, bias, axis, epsilon):
    """float64 layer norm shared with LayerNormGelu."""
    axes = tuple(range(axis_of("LayerNormalization", axis, x.ndim), x.ndim))
    xw = wide(x)
    xc = xw - xw.mean(axis=axes, keepdims=True)
    y = xc / np.sqrt((xc * xc).mean(axis=axes, keepdims=True) + epsilon) * wide(scale)
    return y if bias is None else y + wide(bias)


def _fits(s, tail):
    try:
        return np.broadcast_shapes(s, tail) == tail
    except ValueError:
        return False


@define_op
class LayerNormalization(OpDef):
    name = "LayerNormalization"
    min_inputs, max_inputs = 2, 3
    attrs = {"axis": Attr("int", -1), "epsilon": Attr("float", 1e-5),
             "stash_type": Attr("int", 1)}
    flops_per_element = 8

    @classmethod
    def shape(cls, attrs, shapes):
        x = tuple(shapes[0])
        tail = x[axis_of(cls.name, attrs["axis"], len(x)):]
        for s in shapes[1:3]:
            if s is not None and not _fits(tuple(s), tail):
                raise OpDefinitionError(f"{cls.name}: Scale/B of shape {tuple(s)} do not broadcast "
                                        f"to the normalised shape {tail} of X {x}")
        return [x]

    @classmethod
    def reference(cls, x, scale, bias=None, *, axis, epsilon, **_):
        cls.shape({"axis": axis}, [x.shape, scale.shape, None if bias is None else bias.shape])
        return layer_norm(x, scale, bias, axis, epsilon).astype(x.dtype, copy=False)
