"""QMatMul (ai.edgeops): INT8 MatMul / Gemm (+ Relu) at a float boundary."""
import numpy as np

from edgeops.ops import qarith
from edgeops.ops.base import EDGEOPS_DOMAIN, Attr, OpDef, define_op
from edgeops.ops.matmul import MatMul


@define_op
class QMatMul(OpDef):
    """QMatMul (ai.edgeops, version 1): a QDQ MatMul or Gemm unit (DequantizeLinear on input,
    weight and bias -> MatMul/Gemm [-> Relu] [-> QuantizeLinear -> DequantizeLinear]) as one
    int8 op.

    Inputs, in order: A (..., K) fp32, the float activation the input QuantizeLinear read;
    B (K, N) fp32 holding symmetric int8 values (a Gemm's transB is applied by the fusion);
    B_scale (N) fp32; Bias (N) fp32 holding int32 values at scale a_scale * B_scale, optional.
    Output (..., N) fp32. Attributes: ``activation`` none | relu, ``a_scale``,
    ``a_zero_point``, ``a_type``, ``y_scale`` (0: output not quantized), ``y_zero_point``,
    ``y_type``. Arithmetic: :mod:`edgeops.ops.qarith`.
    """
    name = "QMatMul"
    domain = EDGEOPS_DOMAIN
    min_inputs, max_inputs = 3, 4
    attrs = {"activation": Attr("str", "none", choices=qarith.REQUANT_ACTS),
             **qarith.q_attrs("a")}

    @classmethod
    def validate(cls, attrs, where=""):
        qarith.validate_q(cls.qualname(), attrs, "a", where)

    @classmethod
    def shape(cls, attrs, shapes):
        return MatMul.shape({}, shapes[:2])

    @classmethod
    def reference(cls, a, b, b_scale, bias=None, **attrs):
        aq = qarith.quantize_input(a, attrs["a_scale"], attrs["a_zero_point"], attrs["a_type"])
        acc = (aq.astype(np.int64) - attrs["a_zero_point"]) @ qarith.int_weight(b, "B").astype(np.int64)
        ib = qarith.int_bias(bias)
        if ib is not None:
            acc = acc + ib
        return qarith.finish(acc.astype(np.int32), -1, attrs, "a", b_scale,
                             lambda y, at: np.maximum(y, 0.0))

    @classmethod
    def cost(cls, attrs, in_shapes, out_shapes):
        return MatMul.cost({}, in_shapes[:2], out_shapes)
