"""A mutable view of an ONNX graph for passes: nodes in order, producers and consumers, constant
values, inferred shapes, and the rewrites passes need (replace a chain, add an initializer).

Shapes are inferred once, on the model as it arrives: later passes still know the shapes of
tensors after earlier passes put ai.edgeops nodes (which ONNX inference cannot see through) in
front of them, because every fusion keeps the name of the tensor it produces.
"""
from __future__ import annotations

from typing import Iterable

import numpy as np
import onnx
from onnx import helper, numpy_helper



class WorkingGraph:
    def __init__(self, model: onnx.ModelProto, base_dir: str = ""):
        self.model = model
        self.g = model.graph
        self.base_dir = base_dir
        self.opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version
                       for o in model.opset_import}
        # detached copies: passes hold on to node objects while the list around them changes
        self.nodes: list[onnx.NodeProto] = []
        for n in self.g.node:
            c = onnx.NodeProto()
            c.CopyFrom(n)
            self.nodes.append(c)
        self.inits = {t.name: t for t in self.g.initializer}
        self.graph_inputs = {i.name for i in self.g.input}
        self.graph_outputs = {o.name for o in self.g.output}
        self.shapes, self.dtypes = _infer(model, base_dir)
        self._cache: dict[str, np.ndarray | None] = {}
        self._names = ({t for n in self.nodes for t in [*n.input, *n.output]} | set(self.inits)
                       | self.graph_inputs | {n.name for n in self.nodes})
        self.reindex()

    # ---- structure -------------------------------------------------------------------------
    def reindex(self) -> None:
        self.producer: dict[str, onnx.NodeProto] = {}
        self.consumers: dict[str, list[onnx.NodeProto]] = {}
        self.implicit: set[str] = set()   # read from inside an If/Loop/Scan body
        for n in self.nodes:
            for o in n.output:
                if o:
                    self.producer[o] = n
            for i in dict.fromkeys(x for x in n.input if x):
                self.consumers.setdefault(i, []).append(n)
            self.implicit |= _outer_refs(n)

    def users(self, tensor: str) -> list[onnx.NodeProto]:
        return self.consumers.get(tensor, [])

    def only_feeds(self, tensor: str, allowed: Iterable[onnx.NodeProto]) -> bool:
        """True when ``tensor`` can disappear inside a fused node: every reader is among
        ``allowed`` and it is neither a graph output nor read by a subgraph."""
        ids = {id(n) for n in allowed}
        return (tensor not in self.graph_outputs and tensor not in self.implicit
                and all(id(c) in ids for c in self.users(tensor)))

    def index(self, node: onnx.NodeProto) -> int:
        for i, n in enumerate(self.nodes):
            if n is node:
                return i
        raise ValueError(f"node {node.name!r} is not in the graph")

    def replace(self, old: list[onnx.NodeProto], new: list[onnx.NodeProto]) -> None:
        """Take ``old`` out and put ``new`` where the last of them was: every input of the new
        nodes existed before the chain's first node, and every reader comes after its last."""
        ids = {id(n) for n in old}
        at = max(self.index(n) for n in old)
        head = [n for n in self.nodes[:at] if id(n) not in ids]
        tail = [n for n in self.nodes[at + 1:] if id(n) not in ids]
        self.nodes = head + list(new) + tail
        self._dedupe_names(new)
        self.reindex()

    def _dedupe_names(self, new) -> None:
        taken = {n.name for n in self.nodes if all(n is not m for m in new)}
        for n in new:
            base, k = n.name, 1
            while n.name in taken:
                n.name, k = f"{base}_{k}", k + 1
            taken.add(n.name)

    def rename_input(self, old: str, new: str) -> None:
        for n in self.users(old):
            for k, x in enumerate(n.input):
                if x == old:
                    n.input[k] = new
        self.reindex()

    # ---- values ------------------------------------------------------------------------------
    def const(self, name: str) -> np.ndarray | None:
        """The value of a tensor that is really constant: an initializer that is not also a graph
        input (those can be overridden at run time), or a Constant node's output."""
        if not name:
            return None
        if name not in self._cache:
            self._cache[name] = self._const(name)
        return self._cache[name]

    def _const(self, name: str) -> np.ndarray | None:
        if name in self.inits and name not in self.graph_inputs:
            try:
                return numpy_helper.to_array(self.inits[name], base_dir=self.base_dir)
            except (OSError, ValueError, TypeError):   # external data not at hand: not usable
                return None
        p = self.producer.get(name)
        if p is None or p.op_type != "Constant" or p.domain not in ("", "ai.onnx"):
            return None
        for a in p.attribute:
            v = helper.get_attribute_value(a)
            if a.name == "value":
                return numpy_helper.to_array(v)
            if a.name in ("value_float", "value_floats"):
                return np.asarray(v, np.float32)
            if a.name in ("value_int", "value_ints"):
                return np.asarray(v, np.int64)
        return None

    def scalar(self, name: str) -> float | None:
        v = self.const(name)
        return float(v.reshape(-1)[0]) if v is not None and v.size == 1 else None

    def is_float32(self, name: str) -> bool:
        """Known to be fp32, from a constant or from inference (the ORT boundary is fp32)."""
        v = self.const(name)
        if v is not None:
            return v.dtype == np.float32
        return self.dtypes.get(name) == "fp32"

    def rank(self, name: str) -> int | None:
        s = self.shapes.get(name)
        return None if s is None else len(s)

    # ---- building ------------------------------------------------------------------------------
    def fresh(self, hint: str) -> str:
        name, k = hint, 1
        while name in self._names:
            name, k = f"{hint}_{k}", k + 1
        self._names.add(name)
        return name

    def add_const(self, value: np.ndarray, hint: str) -> str:
        name = self.fresh(hint)
        t = numpy_helper.from_array(np.ascontiguousarray(value), name)
        self.g.initializer.append(t)
        self.inits[name] = self.g.initializer[-1]
        self.shapes[name] = tuple(value.shape)
        return name

    def node(self, op: str, inputs: list[str], outputs: list[str], name: str, domain: str = "",
             **attrs) -> onnx.NodeProto:
        """A new node named ``name``, or ``name_1``, ... when a node in the graph has it. A node
        that replaces a chain is named after it, so pass it the name of a node it replaces
        (which goes when :meth:`replace` runs) and it keeps that name exactly."""
        return helper.make_node(op, inputs, outputs, name=name or op, domain=domain, **attrs)

    def supported(self, node: onnx.NodeProto) -> bool:
        """Does edgeops' definition of the (fused) node accept its attributes and, where the
        input shapes are known, its shapes? A fusion that would not is not made."""
        from edgeops.errors import OpDefinitionError
        from edgeops.ops import get_op, has_op
        if not has_op(node.op_type, node.domain):
            return False
        od = get_op(node.op_type, node.domain)
        shapes = [self.shapes.get(i) if i else None for i in node.input]
        try:
            attrs = od.parse_attrs(attrs_of(node), node.name)
            if all(s is not None and all(isinstance(d, int) for d in s)
                   for s, i in zip(shapes, node.input) if i):
                od.shape(attrs, shapes)
        except (OpDefinitionError, ValueError, IndexError):
            return False
        return True

    # ---- finishing -------------------------------------------------------------------------------
    def finish(self) -> onnx.ModelProto:
        """Write nodes back; drop Constant/Shape nodes and initializers nothing reads any more,
        and value_info of tensors that no longer exist."""
        while True:
            dead = [n for n in self.nodes if n.op_type in ("Constant", "Shape")
                    and n.domain in ("", "ai.onnx")
                    and not any(o in self.consumers or o in self.graph_outputs or o in self.implicit
                                for o in n.output)]
            if not dead:
                break
            self.replace(dead, [])
        used = set(self.consumers) | self.graph_outputs | self.implicit
        keep = [t for t in self.g.initializer if t.name in used or t.name in self.graph_inputs]
        del self.g.initializer[:]
        self.g.initializer.extend(keep)
        del self.g.node[:]
        self.g.node.extend(self.nodes)
        alive = used | set(self.producer)
        vi = [v for v in self.g.value_info if v.name in alive]
        del self.g.value_info[:]
        self.g.value_info.extend(vi)
        return self.model


def attrs_of(node: onnx.NodeProto) -> dict:
    out = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        out[a.name] = v.decode() if isinstance(v, bytes) else v
    return out


def _outer_refs(n: onnx.NodeProto) -> set[str]:
    refs: set[str] = set()
    for a in n.attribute:
        subs = [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)
        for sg in subs:
            defined = ({i.name for i in sg.input} | {t.name for t in sg.initializer}
                       | {o for sn in sg.node for o in sn.output})
            for sn in sg.node:
                refs |= {x for x in [*sn.input, *_outer_refs(sn)] if x and x not in defined}
    return refs


def _infer(model: onnx.ModelProto, base_dir: str) -> tuple[dict[str, tuple], dict[str, str]]:
    """{tensor: shape (ints, str for symbolic, None unknown)}, {tensor: short dtype}, through
    edgeops.graph, whose op definitions fill what ONNX inference leaves unknown (function ops
    such as GroupNormalization-21 stop ONNX inference for everything after them). Best effort: a
    model nothing can infer still gets passes, which then skip what needs shapes."""
    from edgeops.errors import EdgeOpsError
    from edgeops.graph import load
    try:
        graph = load(model, check=False, require_static=False, base_dir=base_dir or None)
    except EdgeOpsError:
        return {}, {}
    shapes = {k: t.shape for k, t in graph.tensors.items() if t.shape is not None}
    return shapes, {k: t.dtype for k, t in graph.tensors.items() if t.dtype is not None}
