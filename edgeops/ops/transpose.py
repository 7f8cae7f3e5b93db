"""Transpose: output axis i is input axis perm[i]; no perm reverses the axes."""
import numpy as np

from edgeops.errors import OpDefinitionError
from edgeops.ops._common import at
from edgeops.ops.base import Attr, OpDef, define_op


@define_op
class Transpose(OpDef):
    name = "Transpose"
    attrs = {"perm": Attr("ints", None)}
    flops_per_element = 0

    @classmethod
    def validate(cls, attrs, where=""):
        p = attrs["perm"]
        if p is not None and sorted(p) != list(range(len(p))):
            raise OpDefinitionError(f"{cls.name}{at(where)}: perm={list(p)} is not a permutation "
                                    f"of 0..{len(p) - 1}")

    @classmethod
    def _perm(cls, perm, rank):
        if perm is None:
            return tuple(reversed(range(rank)))
        if len(perm) != rank:
            raise OpDefinitionError(f"{cls.name}: perm={list(perm)} does not fit a rank-{rank} "
                                    f"input")
        return perm

    @classmethod
    def shape(cls, attrs, shapes):
        x = tuple(shapes[0])
        return [tuple(x[p] for p in cls._perm(attrs["perm"], len(x)))]

    @classmethod
    def reference(cls, x, *, perm):
        return np.ascontiguousarray(np.transpose(x, cls._perm(perm, x.ndim)))
