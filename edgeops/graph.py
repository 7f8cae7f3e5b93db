"""Graph IR over an ONNX model: load, check, infer shapes, and expose nodes and tensors.

``load(path | bytes | ModelProto, shapes={"x": (1, 3, 224, 224)})`` runs ``onnx.checker`` and
``onnx.shape_inference`` (with data propagation), fills the shapes of ``ai.edgeops`` nodes from
their op definitions, and gives a :class:`Graph` with producers/consumers, topological order,
per-node MACs/FLOPs and parameter bytes. Every failure is a :class:`ModelError` that names the
model and says what to do.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from edgeops.dtypes import to_short
from edgeops.errors import EdgeOpsError, ModelError, OpDefinitionError, ShapeError

Dim = "int | str | None"


@dataclass
class Tensor:
    name: str
    shape: tuple | None          # ints for concrete dims, str for symbolic, None unknown rank
    dtype: str | None            # short name, None when unknown
    kind: str                    # input | initializer | activation | output(graph output)
    _proto: Any = field(default=None, repr=False)
    _base_dir: str | None = field(default=None, repr=False)

    @property
    def is_static(self) -> bool:
        return self.shape is not None and all(isinstance(d, int) and d >= 0 for d in self.shape)

    @property
    def numel(self) -> int | None:
        return int(np.prod(self.shape, dtype=np.int64)) if self.is_static else None

    @property
    def nbytes(self) -> int | None:
        from edgeops.dtypes import itemsize
        n = self.numel
        return None if n is None or self.dtype is None else n * itemsize(self.dtype)

    @cached_property
    def data(self) -> np.ndarray | None:
        """Initializer value (loads external data on first use)."""
        if self._proto is None:
            return None
        from onnx import numpy_helper
        return numpy_helper.to_array(self._proto, base_dir=self._base_dir or "")


@dataclass
class Node:
    index: int                   # position in topological order
    name: str
    op_type: str
    domain: str
    inputs: list[str]            # "" for an omitted optional input
    outputs: list[str]
    raw_attrs: dict[str, Any]
    graph: "Graph" = field(repr=False)

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
    def cost(self) -> tuple[int, int] | None:
        """(MACs, FLOPs), or None when the op has no definition or shapes are not static."""
        od = self.opdef
        if od is None:
            return None
        ins, outs = self.input_shapes, self.output_shapes
        if any(s is not None and not _static(s) for s in ins + outs) or not outs or outs[0] is None:
            return None
        return od.cost(self.attrs, ins, outs)

    @property
    def macs(self) -> int:
        return self.cost[0] if self.cost else 0

    @property
    def flops(self) -> int:
        return self.cost[1] if self.cost else 0

    @property
    def param_bytes(self) -> int:
        return sum(t.nbytes or 0 for t in self.input_tensors if t is not None and t.kind == "initializer")


def _static(shape) -> bool:
    return shape is not None and all(isinstance(d, int) and d >= 0 for d in shape)


class Graph:
    def __init__(self, model, source: str = "<model>", base_dir: str | None = None):
        self.model = model
        self.source = source
        g = model.graph
        self.tensors: dict[str, Tensor] = {}
        init_names = {t.name for t in g.initializer}
        for t in g.initializer:
            self.tensors[t.name] = Tensor(t.name, tuple(int(d) for d in t.dims), _dtype(t.data_type),
                                          "initializer", t, base_dir)
        for vi in list(g.input) + list(g.value_info) + list(g.output):
            if vi.name in init_names:
                continue
            kind = ("input" if any(vi.name == i.name for i in g.input) else
                    "output" if any(vi.name == o.name for o in g.output) else "activation")
            self.tensors[vi.name] = Tensor(vi.name, *_vi_shape_dtype(vi), kind)
        self.inputs = [self.tensors[i.name] for i in g.input if i.name not in init_names]
        self.outputs = [self.tensors[o.name] for o in g.output]
        self.opsets = {o.domain or "": o.version for o in model.opset_import}
        self.nodes = self._toposort(g)
        self._producer = {o: n for n in self.nodes for o in n.outputs if o}
        self._consumers: dict[str, list[Node]] = {}
        for n in self.nodes:
            for i in n.inputs:
                if i:
                    self._consumers.setdefault(i, []).append(n)
        for n in self.nodes:   # tensors no value_info mentions (no shape known)
            for o in n.outputs:
                if o and o not in self.tensors:
                    self.tensors[o] = Tensor(o, None, None, "activation")

    def _toposort(self, g) -> list[Node]:
        from onnx import helper
        raw = list(g.node)
        produced = {o: i for i, n in enumerate(raw) for o in n.output if o}
        deps = [{produced[x] for x in n.input if x in produced} for n in raw]
        order, done, indeg = [], set(), [len(d) for d in deps]
        users: dict[int, list[int]] = {}
        for i, d in enumerate(deps):
            for j in d:
                users.setdefault(j, []).append(i)
        ready = [i for i, k in enumerate(indeg) if k == 0]
        while ready:
            i = ready.pop(0)
            order.append(i)
            done.add(i)
            for u in users.get(i, []):
                indeg[u] -= 1
                if indeg[u] == 0:
                    ready.append(u)
        if len(order) != len(raw):
            stuck = [raw[i].name or raw[i].op_type for i in range(len(raw)) if i not in done][:5]
            raise ModelError(f"{self.source}: the graph has a cycle through node(s) {stuck}")
        nodes = []
        for k, i in enumerate(order):
            n = raw[i]
            attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
            attrs = {k2: (v.decode() if isinstance(v, bytes) else v) for k2, v in attrs.items()}
            nodes.append(Node(k, n.name or f"{n.op_type}_{i}", n.op_type, n.domain or "",
                              list(n.input), list(n.output), attrs, self))
        return nodes

    # ---- structure -------------------------------------------------------------------------
    def producer(self, tensor: str) -> Node | None:
        return self._producer.get(tensor)

    def consumers(self, tensor: str) -> list[Node]:
        return list(self._consumers.get(tensor, []))

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise EdgeOpsError(f"{self.source}: no node named {name!r}")

    @property
    def initializers(self) -> list[Tensor]:
        return [t for t in self.tensors.values() if t.kind == "initializer"]

    # ---- summaries ---------------------------------------------------------------------------
    def op_histogram(self) -> dict[str, int]:
        h: dict[str, int] = {}
        for n in self.nodes:
            k = f"{n.domain}::{n.op_type}" if n.domain else n.op_type
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
        return sum(t.nbytes or 0 for t in self.initializers)

    @property
    def param_count(self) -> int:
        return sum(t.numel or 0 for t in self.initializers)


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


# ------------------------------------------------------------------------------------------
# shapes overrides

_SHAPE_RE = re.compile(r"^\s*([^:,]+?)\s*:\s*(\d+(?:\s*[x,]\s*\d+)*)\s*$")


def parse_shapes(spec: str | Mapping[str, Iterable[int]] | None) -> dict[str, tuple[int, ...]]:
    """``"x:1x3x224x224;mask:1x128"`` (``;`` or space separated) or a mapping -> {name: shape}."""
    if not spec:
        return {}
    if isinstance(spec, Mapping):
        return {k: tuple(int(d) for d in v) for k, v in spec.items()}
    out = {}
    for part in re.split(r"[;\s]+", spec.strip()):
        if not part:
            continue
        m = _SHAPE_RE.match(part)
        if not m:
            raise ShapeError(f"bad --shapes entry {part!r}: expected NAME:1x3x224x224 "
                             f"(several separated by ';')")
        out[m.group(1)] = tuple(int(d) for d in re.split(r"\s*[x,]\s*", m.group(2)))
    return out


def _apply_shapes(model, shapes: dict[str, tuple[int, ...]], source: str) -> None:
    inputs = {i.name: i for i in model.graph.input}
    inits = {t.name for t in model.graph.initializer}
    for name, shape in shapes.items():
        if name not in inputs or name in inits:
            real = [n for n in inputs if n not in inits]
            raise ShapeError(f"{source}: --shapes names {name!r}, which is not a graph input; "
                             f"inputs: {real}")
        dims = inputs[name].type.tensor_type.shape.dim
        if len(dims) and len(dims) != len(shape):
            raise ShapeError(f"{source}: input {name!r} has rank {len(dims)}, --shapes gives "
                             f"{len(shape)} dims {shape}")
        for d, v in zip(dims, shape):
            if d.HasField("dim_value") and d.dim_value != v:
                raise ShapeError(f"{source}: input {name!r} has fixed dim {d.dim_value}, --shapes "
                                 f"gives {v}")
        if not len(dims):
            for v in shape:
                inputs[name].type.tensor_type.shape.dim.add()
            dims = inputs[name].type.tensor_type.shape.dim
        for d, v in zip(dims, shape):
            d.Clear()
            d.dim_value = int(v)
    # stale inferred shapes would keep the symbolic dims alive
    del model.graph.value_info[:]


# ------------------------------------------------------------------------------------------
# loading

def load(src, shapes=None, *, check: bool = True, require_static: bool = True) -> Graph:
    """Load an ONNX model from a path, bytes or ModelProto into a checked, shape-inferred Graph.

    ``require_static``: every graph input must have concrete dims (after ``shapes`` overrides),
    otherwise :class:`ShapeError` says which input and dim, and how to fix it.
    """
    import onnx
    from google.protobuf.message import DecodeError

    base_dir, path = None, None
    if isinstance(src, onnx.ModelProto):
        model, source = onnx.ModelProto(), "<ModelProto>"
        model.CopyFrom(src)
    elif isinstance(src, (bytes, bytearray)):
        source = "<bytes>"
        try:
            model = onnx.load_model_from_string(bytes(src))
        except (DecodeError, RuntimeWarning, ValueError) as e:
            raise ModelError(f"{source} is not an ONNX model (protobuf parse failed: {e})") from None
    elif isinstance(src, (str, os.PathLike)):
        path = Path(src)
        source = str(path)
        if not path.is_file():
            raise ModelError(f"model file {source} does not exist")
        base_dir = str(path.resolve().parent)
        try:
            model = onnx.load(str(path), load_external_data=True)
        except (DecodeError, RuntimeWarning, ValueError, UnicodeDecodeError) as e:
            raise ModelError(f"{source} is not an ONNX model (protobuf parse failed: "
                             f"{str(e).splitlines()[0] if str(e) else type(e).__name__})") from None
        except (FileNotFoundError, OSError) as e:
            raise ModelError(f"{source}: cannot read the model or its external data: {e}") from None
    else:
        raise ModelError(f"cannot load a model from {type(src).__name__}; give a path, bytes or "
                         f"an onnx.ModelProto")
    if not model.graph.node and not model.graph.output:
        raise ModelError(f"{source} is not an ONNX model (it has no graph); check the file")

    if check:
        try:
            onnx.checker.check_model(model, full_check=False)
        except onnx.checker.ValidationError as e:
            first = next((ln for ln in str(e).splitlines() if ln.strip()), str(e))
            raise ModelError(f"{source} fails the ONNX checker: {first}") from None
        except ValueError as e:   # > 2 GB in memory: check from the file instead
            if path is None:
                raise ModelError(f"{source}: {e}") from None
            try:
                onnx.checker.check_model(str(path))
            except onnx.checker.ValidationError as e2:
                raise ModelError(f"{source} fails the ONNX checker: {str(e2).splitlines()[0]}") from None

    overrides = parse_shapes(shapes)
    if overrides:
        _apply_shapes(model, overrides, source)
    if require_static:
        inits = {t.name for t in model.graph.initializer}
        for i in model.graph.input:
            if i.name in inits:
                continue
            shape, _ = _vi_shape_dtype(i)
            if shape is None:
                raise ShapeError(f"{source}: input {i.name!r} has no shape; pass --shapes "
                                 f"{i.name}:1x3x224x224 (its real dims)")
            for ax, d in enumerate(shape):
                if not isinstance(d, int) or d <= 0:
                    raise ShapeError(f"{source}: input {i.name!r} has symbolic dim {d!r} at axis {ax} "
                                     f"(shape {list(shape)}); pass --shapes {i.name}:"
                                     + "x".join(str(x) if isinstance(x, int) and x > 0 else "N" for x in shape)
                                     + " with N replaced by a size")
    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=False,
                                                     data_prop=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as e:
        raise ModelError(f"{source}: ONNX shape inference failed: {str(e).splitlines()[0]}") from None
    except ValueError:  # > 2 GB: infer without inlining data
        inferred = model
    graph = Graph(inferred, source, base_dir)
    _infer_custom_shapes(graph)
    return graph


def _infer_custom_shapes(graph: Graph) -> None:
    """ONNX shape inference does not know ai.edgeops ops: fill their outputs from op definitions."""
    for n in graph.nodes:
        if all(t is not None and t.shape is not None for t in n.output_tensors):
            continue
        od = n.opdef
        if od is None or not all(s is None or _static(s) for s in n.input_shapes):
            continue
        try:
            shapes = od.shape(n.attrs, [s for s in n.input_shapes])
        except (OpDefinitionError, NotImplementedError):
            continue
        dt = next((d for d in n.input_dtypes if d), None)
        for o, s in zip(n.outputs, shapes):
            if o:
                t = graph.tensors.get(o)
                if t is None or t.shape is None:
                    graph.tensors[o] = Tensor(o, tuple(s), t.dtype if t and t.dtype else dt,
                                              t.kind if t else "activation")
