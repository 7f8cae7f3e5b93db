"""SwiGLU (ai.edgeops): the gated half of a SwiGLU MLP."""
from edgeops.errors import OpDefinitionError
from edgeops.ops._common import sigmoid, wide
from edgeops.ops.base import EDGEOPS_DOMAIN, OpDef, _numel, define_op


@define_op
class SwiGLU(OpDef):
    """SwiGLU (ai.edgeops, version 1): the gated half of a SwiGLU MLP,
    Y = silu(X @ W1 + B1) * (X @ W2 + B2), silu(z) = z * sigmoid(z).

    Inputs, in order: X (..., D); W1 (D, F) gate weight; W2 (D, F) up weight; B1 (F) and B2 (F)
    optional (an empty name skips B1). Output (..., F). Weights are (in, out) as MatMul takes them;
    the down projection stays a separate MatMul.
    """
    name = "SwiGLU"
    domain = EDGEOPS_DOMAIN
    min_inputs, max_inputs = 3, 5

    @classmethod
    def _dims(cls, shapes):
        """(M rows, D, F) after checking every input against X."""
        x, w1, w2 = (tuple(s) for s in shapes[:3])
        biases = [tuple(s) for s in shapes[3:5] if s is not None]
        if (len(x) < 1 or len(w1) != 2 or w1 != w2 or x[-1] != w1[0]
                or any(b != (w1[1],) for b in biases)):
            raise OpDefinitionError(f"{cls.qualname()}: need X (..., D), W1 = W2 (D, F), "
                                    f"B1/B2 (F,); got X {x}, W1 {w1}, W2 {w2}, biases {biases}")
        return _numel(x[:-1]), w1[0], w1[1]

    @classmethod
    def shape(cls, attrs, shapes):
        return [tuple(shapes[0][:-1]) + (cls._dims(shapes)[2],)]

    @classmethod
    def reference(cls, x, w1, w2, b1=None, b2=None):
        cls._dims([x.shape, w1.shape, w2.shape] + [None if b is None else b.shape
                                                   for b in (b1, b2)])
        gate, up = wide(x) @ wide(w1), wide(x) @ wide(w2)
        gate = gate if b1 is None else gate + wide(b1)
        up = up if b2 is None else up + wide(b2)
        return (gate * sigmoid(gate) * up).astype(x.dtype, copy=False)

    @classmethod
    def cost(cls, attrs, in_shapes, out_shapes):
        m, d, f = cls._dims(in_shapes)
        nb = sum(s is not None for s in in_shapes[3:5])
        macs = 2 * m * d * f
        return macs, 2 * macs + m * f * (5 + 1 + nb)  # silu 5, gating mul 1, bias adds
