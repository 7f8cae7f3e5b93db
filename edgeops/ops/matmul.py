"""MatMul: numpy matmul semantics — batch dimensions broadcast, a 1-D operand is promoted to a
matrix (A: (K,) -> (1, K), B: (K,) -> (K, 1)) and the added axis is dropped from the result."""
import numpy as np

from edgeops.errors import OpDefinitionError
from edgeops.ops._common import broadcast, wide
from edgeops.ops.base import OpDef, _numel, define_op


@define_op
class MatMul(OpDef):
    name = "MatMul"
    min_inputs, max_inputs = 2, 2

    @classmethod
    def _dims(cls, a, b):
        """(batch shape, M, N, K, output shape)."""
        if len(a) == 0 or len(b) == 0:
            raise OpDefinitionError(f"{cls.name}: operands must have rank >= 1, got {a} and {b}")
        a2 = (1, *a) if len(a) == 1 else tuple(a)
        b2 = (*b, 1) if len(b) == 1 else tuple(b)
        if a2[-1] != b2[-2]:
            raise OpDefinitionError(f"{cls.name}: inner dimensions differ: A {tuple(a)} has "
                                    f"K={a2[-1]}, B {tuple(b)} has K={b2[-2]}")
        batch = broadcast(cls.name, a2[:-2], b2[:-2])
        m, n, k = a2[-2], b2[-1], a2[-1]
        out = batch + ((m,) if len(a) > 1 else ()) + ((n,) if len(b) > 1 else ())
        return batch, m, n, k, out

    @classmethod
    def shape(cls, attrs, shapes):
        return [cls._dims(shapes[0], shapes[1])[-1]]

    @classmethod
    def reference(cls, a, b):
        cls._dims(a.shape, b.shape)
        return np.matmul(wide(a), wide(b)).astype(a.dtype, copy=False)

    @classmethod
    def cost(cls, attrs, in_shapes, out_shapes):
        batch, m, n, k, _ = cls._dims(in_shapes[0], in_shapes[1])
        macs = _numel(batch) * m * n * k
        return macs, 2 * macs
