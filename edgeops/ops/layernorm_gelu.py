"""LayerNormGelu (ai.edgeops): LayerNormalization followed by Gelu."""
from edgeops.ops.base import Attr, EDGEOPS_DOMAIN, OpDef, define_op
from edgeops.ops.gelu import Gelu
from edgeops.ops.layernorm import LayerNormalization, layer_norm


@define_op
class LayerNormGelu(OpDef):
    """LayerNormGelu (ai.edgeops, version 1): Y = gelu(LayerNormalization(X, Scale, Bias)).

    Inputs, in order: X; Scale and Bias (optional) broadcasting to X.shape[axis:], as for
    LayerNormalization. Attributes: axis (-1), epsilon (1e-5), approximate none | tanh (as Gelu).
    """
    name = "LayerNormGelu"
    domain = EDGEOPS_DOMAIN
    min_inputs, max_inputs = 2, 3
    attrs = {"axis": Attr("int", -1), "epsilon": Attr("float", 1e-5), **Gelu.attrs}
    flops_per_element = LayerNormalization.flops_per_element + Gelu.flops_per_element

    @classmethod
    def shape(cls, attrs, shapes):
        return LayerNormalization.shape(attrs, shapes)

    @classmethod
    def reference(cls, x, scale, bias=None, *, axis, epsilon, approximate):
        cls.shape({"axis": axis}, [x.shape, scale.shape, None if bias is None else bias.shape])
        y = Gelu.reference(layer_norm(x, scale, bias, axis, epsilon), approximate=approximate)
        return y.astype(x.dtype, copy=False)
