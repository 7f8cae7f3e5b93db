"""Add, Sub, Mul, Div: elementwise with numpy (multidirectional) broadcasting. One file because
the four differ only in the numpy function."""
import numpy as np

from edgeops.ops._common import broadcast
from edgeops.ops.base import OpDef, define_op


class _Binary(OpDef):
    min_inputs, max_inputs = 2, 2
    fn = None

    @classmethod
    def shape(cls, attrs, shapes):
        return [broadcast(cls.name, shapes[0], shapes[1])]

    @classmethod
    def reference(cls, a, b):
        broadcast(cls.name, a.shape, b.shape)
        # computed in the input dtype: one rounding, exactly what an fp32 kernel must produce
        return cls.fn(a, b.astype(a.dtype, copy=False)).astype(a.dtype, copy=False)


@define_op
class Add(_Binary):
    name, fn = "Add", staticmethod(np.add)


@define_op
class Sub(_Binary):
    name, fn = "Sub", staticmethod(np.subtract)


@define_op
class Mul(_Binary):
    name, fn = "Mul", staticmethod(np.multiply)


@define_op
class Div(_Binary):
    name, fn = "Div", staticmethod(np.divide)
