"""The graph IR over an ONNX model (:mod:`edgeops.graph.loader` makes one): nodes in
topological order, tensors (shape, dtype, initializer/constant or activation), producers and
consumers, per-node MACs/FLOPs from the op definitions' ``cost``, parameter counts and bytes.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Mapping

import numpy as np

from edgeops.dtypes import itemsize, to_short
from edgeops.errors import EdgeOpsError, ModelError, OpDefinitionError

# nodes whose outputs are constants when their inputs are: their outputs count as parameters
# (the onnx "light" zoo models and some exporters hold every weight as ConstantOfShape/Constant)
CONSTANT_OPS = ("Constant", "ConstantOfShape")


@dataclass
class Tensor:
    name: str
    shape: tuple | None          # ints for concrete dims, str for symbolic, None unknown rank/dim
    dtype: str | None            # short name, None when unknown
    kind: str                    # input | initializer | activation | output (graph output)
    _proto: Any = field(default=None, repr=False)
    _base_dir: str | None = field(default=None, repr=False)
    is_const: bool = False       # an initializer or the output of a Constant/ConstantOfShape node
    _value: Callable[[], np.ndarray] | None = field(default=None, repr=False)

    @property
    def is_static(self) -> bool:
        return _static(self.shape)

    @property
    def numel(self) -> int | None:
        return int(np.prod(self.shape, dtype=np.int64)) if self.is_static else None

    @property
    def nbytes(self) -> int | None:
        n = self.numel
        return None if n is None or self.dtype is None else n * itemsize(self.dtype)

    @cached_property
    def data(self) -> np.ndarray | None:
        """Constant value (initializer, external data read on first use, or Constant node)."""
        if self._value is not None:
            return self._value()
        if self._proto is None:
            return None
        from onnx import numpy_helper
        return numpy_helper.to_array(self._proto, base_dir=self._base_dir or "")


@dataclass
class Node:
    index: int                   # position in topological order
    name: str                    # unique within the graph (generated when the model has none)
    op_type: str
    domain: str
    inputs: list[str]            # "" for an omitted optional input
    outputs: list[str]
    raw_attrs: dict[str, Any]
    graph: "Graph" = field(repr=False)
    proto_index: int = -1        # position in model.graph.node

    @property
    def opdef(self):
        from edgeops.ops import get_op, has_op
        return get_op(self.op_type, self.domain) if has_op(self.op_type, self.domain) else None

    @cached_property
    def attrs(self) -> dict[str, Any]:
        """Attributes with defaults filled and validated by the op definition (raw if none)."""
        od = self.opdef
        return od.parse_attrs(self.raw_attrs, self.name) if od else dict(self.raw_attrs)

    def _t(self, names) -> list[Tensor | None]:
        return [self.graph.tensors.get(n) if n else None for n in names]

    @property
    def input_tensors(self) -> list[Tensor | None]:
        return self._t(self.inputs)

    @property
    def output_tensors(self) -> list[Tensor | None]:
        return self._t(self.outputs)

    @property
    def input_shapes(self) -> list[tuple | None]:
        return [t.shape if t else None for t in self.input_tensors]

    @property
    def output_shapes(self) -> list[tuple | None]:
        return [t.shape if t else None for t in self.output_tensors]

    @property
    def input_dtypes(self) -> list[str | None]:
        return [t.dtype if t else None for t in self.input_tensors]

    @cached_property
    def _cost(self) -> tuple[tuple[int, int] | None, str | None]:
        od = self.opdef
        if od is None:
            return None, f"edgeops has no definition of {self.op_type}"
        # every input and the first output must be known; a later one (Dropout's mask, an
        # optional output no value_info describes) is passed as None
        outs = [s if _static(s) else None for s in self.output_shapes]
        needed = zip(self.inputs + self.outputs[:1], self.input_shapes + self.output_shapes[:1])
        bad = {n: s for n, s in needed if n and not _static(s)}
        if bad or not outs or outs[0] is None:
            return None, "shape not static: " + ", ".join(f"{k} {v}" for k, v in bad.items())
        try:
            return tuple(int(v) for v in od.cost(self.attrs, self.input_shapes, outs)), None
        except OpDefinitionError as e:   # e.g. an attribute an older opset had
            return None, str(e)

    @property
    def cost(self) -> tuple[int, int] | None:
        """(MACs, FLOPs), or None when the op has no definition or shapes are not static."""
        return self._cost[0]

    @property
    def cost_error(self) -> str | None:
        """Why :attr:`cost` is None."""
        return self._cost[1]

    @property
    def macs(self) -> int:
        return self.cost[0] if self.cost else 0

    @property
    def flops(self) -> int:
        return self.cost[1] if self.cost else 0

    @property
    def param_tensors(self) -> list[Tensor]:
        """Constant inputs (weights, biases, shape operands), each once."""
        seen = {}
        for t in self.input_tensors:
            if t is not None and t.is_const:
                seen.setdefault(t.name, t)
        return list(seen.values())

    @property
    def param_count(self) -> int:
        return sum(t.numel or 0 for t in self.param_tensors)

    @property
    def param_bytes(self) -> int:
        return sum(t.nbytes or 0 for t in self.param_tensors)


def _static(shape) -> bool:
    return shape is not None and all(isinstance(d, int) and d >= 0 for d in shape)


def _is_constant_op(n) -> bool:
    return n.op_type in CONSTANT_OPS and n.domain in ("", "ai.onnx")


class Graph:
    def __init__(self, model, source: str = "<model>", base_dir: str | None = None):
        self.model = model
        self.source = source
        g = model.graph
        self.tensors: dict[str, Tensor] = {}
        init_names = {t.name for t in g.initializer}
        in_names, out_names = {i.name for i in g.input}, {o.name for o in g.output}
        for t in g.initializer:
            self.tensors[t.name] = Tensor(t.name, tuple(int(d) for d in t.dims), _dtype(t.data_type),
                                          "initializer", t, base_dir, is_const=True)
        for vi in list(g.input) + list(g.value_info) + list(g.output):
            if vi.name in init_names:
                continue
            kind = "input" if vi.name in in_names else "output" if vi.name in out_names else "activation"
            self.tensors[vi.name] = Tensor(vi.name, *_vi_shape_dtype(vi), kind)
        self.inputs = [self.tensors[i.name] for i in g.input if i.name not in init_names]
        self.outputs = [self.tensors[o.name] for o in g.output]
        self.opsets = {"" if o.domain == "ai.onnx" else o.domain: o.version for o in model.opset_import}
        self.nodes = self._toposort(g)
        self._by_name = {n.name: n for n in self.nodes}
        self._producer = {o: n for n in self.nodes for o in n.outputs if o}
        self._consumers: dict[str, list[Node]] = {}
        for n in self.nodes:
            for i in dict.fromkeys(x for x in n.inputs if x):
                self._consumers.setdefault(i, []).append(n)
        for n in self.nodes:   # tensors no value_info mentions (no shape known)
            for o in n.outputs:
                if o and o not in self.tensors:
                    self.tensors[o] = Tensor(o, None, None, "activation")
        self._mark_constants(g)

    def _toposort(self, g) -> list[Node]:
        """Kahn's algorithm, taking the earliest ready node first, so a graph already in
        topological order keeps its order. Tensors a subgraph (If/Loop/Scan body) reads from
        the outer scope count as inputs of the node that owns it."""
        from onnx import helper
        raw = list(g.node)
        produced = {o: i for i, n in enumerate(raw) for o in n.output if o}
        deps = [{produced[x] for x in list(n.input) + sorted(_outer_refs(n)) if x in produced}
                for n in raw]
        indeg = [len(d) for d in deps]
        users: dict[int, list[int]] = {}
        for i, d in enumerate(deps):
            for j in d:
                users.setdefault(j, []).append(i)
        ready = [i for i, k in enumerate(indeg) if k == 0]
        heapq.heapify(ready)
        order = []
        while ready:
            i = heapq.heappop(ready)
            order.append(i)
            for u in users.get(i, []):
                indeg[u] -= 1
                if indeg[u] == 0:
                    heapq.heappush(ready, u)
        if len(order) != len(raw):
            done = set(order)
            stuck = [raw[i].name or f"{raw[i].op_type}#{i}" for i in range(len(raw)) if i not in done]
            raise ModelError(f"{self.source}: the graph has a cycle (or a node reads its own output) "
                             f"through {len(stuck)} node(s), e.g. {stuck[:5]}; ONNX graphs must be "
                             f"acyclic")
        names = {n.name for n in raw if n.name}
        used: set[str] = set()
        nodes = []
        for k, i in enumerate(order):
            n = raw[i]
            name = n.name or f"{n.op_type}_{i}"
            while name in used or (not n.name and name in names):
                name += "_"
            used.add(name)
            attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
            attrs = {k2: _decode(v) for k2, v in attrs.items()}
            nodes.append(Node(k, name, n.op_type, n.domain or "", list(n.input), list(n.output),
                              attrs, self, i))
        return nodes

    def _mark_constants(self, g) -> None:
        for n in self.nodes:
            if not _is_constant_op(n) or not all(self.tensors.get(i) and self.tensors[i].is_const
                                                 for i in n.inputs if i):
                continue
            t = self.tensors[n.outputs[0]]
            t.is_const = True
            t._value = _constant_value(n, self.tensors)
            if t.dtype is None or t.shape is None:   # no value_info (inference skipped)
                t.shape, t.dtype = _shape_dtype_of(t._value())

    # ---- structure -------------------------------------------------------------------------
    def producer(self, tensor: str) -> Node | None:
        return self._producer.get(tensor)

    def consumers(self, tensor: str) -> list[Node]:
        return list(self._consumers.get(tensor, []))

    def node(self, name: str) -> Node:
        try:
            return self._by_name[name]
        except KeyError:
            raise EdgeOpsError(f"{self.source}: no node named {name!r}") from None

    @property
    def initializers(self) -> list[Tensor]:
        return [t for t in self.tensors.values() if t.kind == "initializer"]

    @property
    def params(self) -> list[Tensor]:
        """Constant tensors some computing node reads: initializers and Constant outputs, minus
        those only feeding other constant nodes (e.g. the shape operand of ConstantOfShape)."""
        return [t for t in self.tensors.values() if t.is_const and any(
            not _is_constant_op(c) for c in self._consumers.get(t.name, []))]

    # ---- summaries ---------------------------------------------------------------------------
    def op_histogram(self) -> dict[str, int]:
        h: dict[str, int] = {}
        for n in self.nodes:
            k = f"{n.domain}::{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type
            h[k] = h.get(k, 0) + 1
        return dict(sorted(h.items(), key=lambda kv: (-kv[1], kv[0])))

    @property
    def total_macs(self) -> int:
        return sum(n.macs for n in self.nodes)

    @property
    def total_flops(self) -> int:
        return sum(n.flops for n in self.nodes)

    @property
    def param_bytes(self) -> int:
        return sum(t.nbytes or 0 for t in self.params)

    @property
    def param_count(self) -> int:
        return sum(t.numel or 0 for t in self.params)


def _decode(v):
    """STRING(S) attributes arrive as bytes; op definitions and users want str."""
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, list) and v and all(isinstance(x, bytes) for x in v):
        return [x.decode() for x in v]
    return v


def _outer_refs(n) -> set[str]:
    """Names a node's subgraphs read but do not define (outer-scope inputs)."""
    from onnx import AttributeProto
    refs: set[str] = set()
    for a in n.attribute:
        subs = ([a.g] if a.type == AttributeProto.GRAPH else
                list(a.graphs) if a.type == AttributeProto.GRAPHS else [])
        for sg in subs:
            defined = ({i.name for i in sg.input} | {t.name for t in sg.initializer}
                       | {o for sn in sg.node for o in sn.output})
            for sn in sg.node:
                refs |= {x for x in list(sn.input) + list(_outer_refs(sn)) if x and x not in defined}
    return refs


def _constant_value(n: Node, tensors: Mapping[str, Tensor]) -> Callable[[], np.ndarray]:
    from onnx import numpy_helper

    def value():
        a = n.raw_attrs
        if n.op_type == "ConstantOfShape":
            fill = numpy_helper.to_array(a["value"]).reshape(-1) if "value" in a else np.zeros(1, np.float32)
            return np.full(tuple(int(d) for d in tensors[n.inputs[0]].data), fill[0], fill.dtype)
        for key, v in a.items():
            if key == "value":
                return numpy_helper.to_array(v)
            if key in ("value_float", "value_floats"):
                return np.asarray(v, np.float32)
            if key in ("value_int", "value_ints"):
                return np.asarray(v, np.int64)
        raise ModelError(f"Constant node {n.name!r}: no value attribute edgeops can read "
                         f"({sorted(a)})")
    return value


def _shape_dtype_of(a: np.ndarray) -> tuple[tuple, str | None]:
    try:
        return tuple(a.shape), to_short(a.dtype)
    except EdgeOpsError:
        return tuple(a.shape), None


def _dtype(elem_type: int) -> str | None:
    try:
        return to_short(int(elem_type))
    except EdgeOpsError:
        return None


def _vi_shape_dtype(vi) -> tuple[tuple | None, str | None]:
    tt = vi.type.tensor_type
    dtype = _dtype(tt.elem_type) if tt.elem_type else None
    if not tt.HasField("shape"):
        return None, dtype
    dims = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param"):
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return tuple(dims), dtype

__all__ = ["CONSTANT_OPS", "Graph", "Node", "Tensor"]
