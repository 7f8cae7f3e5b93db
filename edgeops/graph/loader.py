"""Loading a model into an :class:`edgeops.graph.Graph`: read (path, bytes, ModelProto, external
data), ``onnx.checker``, ``--shapes`` overrides, ``onnx.shape_inference`` with data propagation,
and the shapes ONNX inference leaves unknown filled from edgeops' op definitions.

Every failure is a :class:`ModelError` (or :class:`ShapeError`) that names the model and says what
to do.
"""
from __future__ import annotations

import os
import re
import warnings
from pathlib import Path
from typing import Iterable, Mapping

from edgeops.errors import ModelError, OpDefinitionError, ShapeError
from edgeops.graph.ir import Graph, _static, _vi_shape_dtype

# ---- --shapes overrides ---------------------------------------------------------------------

_DIMS_RE = re.compile(r"^\d+(?:[x,]\d+)*$")


MAX_DIM = 2**63 - 1     # an ONNX dim_value is an int64


def parse_shapes(spec: str | Mapping[str, Iterable[int]] | None) -> dict[str, tuple[int, ...]]:
    """``"x:1x3x224x224;mask:1x128"`` (``;`` or space separated) or a mapping -> {name: shape}.
    The name ends at the last ``:``, so TensorFlow-style names such as ``input:0`` work."""
    if not spec:
        return {}
    if isinstance(spec, Mapping):
        items = [(k, tuple(v)) for k, v in spec.items()]
    else:
        items = []
        for part in re.split(r"[;\s]+", spec.strip()):
            name, sep, dims = part.rpartition(":")
            dims = dims.replace(" ", "").lower()
            if not part or not sep or not name.strip() or not _DIMS_RE.match(dims):
                raise ShapeError(f"bad --shapes entry {part!r}: expected NAME:1x3x224x224 "
                                 f"(several separated by ';')")
            items.append((name.strip(), tuple(re.split(r"[x,]", dims))))
    out: dict[str, tuple[int, ...]] = {}
    for name, dims in items:
        if name in out:
            raise ShapeError(f"--shapes gives input {name!r} twice")
        try:
            shape = tuple(int(d) for d in dims)
        except (TypeError, ValueError):
            raise ShapeError(f"--shapes {name}: dims must be integers, got {dims}") from None
        if any(d <= 0 for d in shape):
            raise ShapeError(f"--shapes {name}: every dim must be a positive size, got {shape}")
        if any(d > MAX_DIM for d in shape) or len(shape) > 32:
            raise ShapeError(f"--shapes {name}: {'x'.join(map(str, shape))[:80]} is beyond what "
                             f"ONNX holds (at most 32 dims, each at most {MAX_DIM})")
        out[name] = shape
    return out


def _apply_shapes(model, shapes: dict[str, tuple[int, ...]], source: str) -> None:
    inits = {t.name for t in model.graph.initializer}
    inputs = {i.name: i for i in model.graph.input if i.name not in inits}
    for name, shape in shapes.items():
        if name not in inputs:
            raise ShapeError(f"{source}: --shapes names {name!r}, which is not a graph input; "
                             f"inputs: {list(inputs)}")
        tt = inputs[name].type.tensor_type
        dims = tt.shape.dim
        if tt.HasField("shape") and len(dims) != len(shape):
            raise ShapeError(f"{source}: input {name!r} has rank {len(dims)}, --shapes gives "
                             f"{len(shape)} dims {'x'.join(map(str, shape))}")
        for ax, (d, v) in enumerate(zip(dims, shape)):
            if d.HasField("dim_value") and d.dim_value != v:
                raise ShapeError(f"{source}: input {name!r} has fixed dim {d.dim_value} at axis {ax}, "
                                 f"--shapes gives {v}")
        if not tt.HasField("shape"):
            tt.shape.SetInParent()
            for _ in shape:
                tt.shape.dim.add()
        for d, v in zip(tt.shape.dim, shape):
            d.Clear()
            d.dim_value = int(v)
    # stale inferred shapes would keep the symbolic dims alive
    del model.graph.value_info[:]


def _require_static(model, source: str) -> None:
    inits = {t.name for t in model.graph.initializer}
    for i in model.graph.input:
        if i.name in inits:
            continue
        shape, _ = _vi_shape_dtype(i)
        if shape is None:
            raise ShapeError(f"{source}: input {i.name!r} has no shape; pass --shapes "
                             f"'{i.name}:1x3x224x224' (its real dims)")
        for ax, d in enumerate(shape):
            if not isinstance(d, int):
                what = f"symbolic dim {d!r}" if isinstance(d, str) else "an unknown dim"
                hint = "x".join(str(x) if isinstance(x, int) else "N" for x in shape)
                raise ShapeError(f"{source}: input {i.name!r} has {what} at axis {ax} (shape "
                                 f"{list(shape)}); pass --shapes '{i.name}:{hint}' with each N "
                                 f"replaced by a size")


# ---- loading ----------------------------------------------------------------------------------

def _read(src, base_dir):
    """(model, source name, path or None, folder of its external data)."""
    import onnx
    if isinstance(src, onnx.ModelProto):
        model = onnx.ModelProto()
        model.CopyFrom(src)
        return _with_external(model, base_dir), "<ModelProto>", None, base_dir
    if isinstance(src, (bytes, bytearray, memoryview)):
        try:
            model = onnx.load_model_from_string(bytes(src))
        except Exception as e:  # noqa: BLE001  (protobuf raises several types on garbage)
            raise ModelError(f"<bytes> is not an ONNX model (protobuf parse failed: {e})") from None
        return _with_external(model, base_dir), "<bytes>", None, base_dir
    if not isinstance(src, (str, os.PathLike)):
        raise ModelError(f"cannot load a model from {type(src).__name__}; give a path, bytes or "
                         f"an onnx.ModelProto")
    path = Path(src)
    if not path.exists():
        raise ModelError(f"model file {path} does not exist")
    if not path.is_file():
        raise ModelError(f"{path} is not a file; give the path of an .onnx model")
    try:
        with warnings.catch_warnings():   # "onnxtxt format is experimental" and the like
            warnings.simplefilter("ignore")
            model = onnx.load(str(path), load_external_data=False)
    except PermissionError as e:
        raise ModelError(f"{path}: cannot read the model: {e}") from None
    except Exception as e:  # noqa: BLE001  (DecodeError, json/text-format parse errors, ...)
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ModelError(f"{path} is not an ONNX model (parse failed: {msg})") from None
    _with_external(model, str(path.resolve().parent))
    return model, str(path), path, str(path.resolve().parent)


def _with_external(model, base_dir):
    """Read the external data of an in-memory model from ``base_dir`` (where its file was)."""
    from onnx import checker, external_data_helper as ext
    if base_dir:
        try:
            ext.load_external_data_for_model(model, base_dir)
        except (OSError, ValueError, checker.ValidationError) as e:  # missing, outside base_dir
            raise ModelError(f"cannot read the model's external data under {base_dir}: {e}") from None
    return model


def _check(model, source: str, path: Path | None) -> None:
    import onnx
    try:
        onnx.checker.check_model(model, full_check=False)
    except onnx.checker.ValidationError as e:
        first = next((ln for ln in str(e).splitlines() if ln.strip()), str(e))
        raise ModelError(f"{source} fails the ONNX checker: {first}") from None
    except ValueError as e:   # > 2 GB in memory: check from the file instead
        if path is None:
            raise ModelError(f"{source}: {e}; load it from its file instead") from None
        try:
            onnx.checker.check_model(str(path))
        except onnx.checker.ValidationError as e2:
            raise ModelError(f"{source} fails the ONNX checker: {str(e2).splitlines()[0]}") from None


def _infer(model, source: str) -> None:
    """Shape inference in place. Large initializers' bytes are set aside while it runs: inference
    needs only their dims, and it then works for models over protobuf's 2 GB limit too."""
    import onnx
    big = [(t, t.raw_data) for t in model.graph.initializer if len(t.raw_data) > (1 << 16)]
    for t, _ in big:
        t.ClearField("raw_data")
    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=False,
                                                     data_prop=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as e:
        raise ModelError(f"{source}: ONNX shape inference failed: {str(e).splitlines()[0]}") from None
    finally:
        for t, data in big:
            t.raw_data = data
    del model.graph.value_info[:]
    model.graph.value_info.extend(inferred.graph.value_info)
    for o, io in zip(model.graph.output, inferred.graph.output):
        o.CopyFrom(io)


def load(src, shapes=None, *, check: bool = True, require_static: bool = True,
         base_dir: str | None = None) -> Graph:
    """Load an ONNX model from a path, bytes or ModelProto into a checked, shape-inferred Graph.

    ``shapes``: ``"x:1x3x224x224;y:1x10"`` or ``{"x": (1, 3, 224, 224)}``, fixing symbolic input
    dims. ``require_static``: every graph input must then have concrete dims, otherwise
    :class:`ShapeError` says which input and axis, and how to fix it. ``base_dir``: where the
    external data of a ModelProto/bytes model lives (a path's own folder is used otherwise).
    """
    model, source, path, base_dir = _read(src, os.fspath(base_dir) if base_dir else None)
    if not model.graph.node and not model.graph.output:
        raise ModelError(f"{source} is not an ONNX model (it has no graph); check the file")
    if check:
        _check(model, source, path)
    overrides = parse_shapes(shapes)
    if overrides:
        _apply_shapes(model, overrides, source)
    if require_static:
        _require_static(model, source)
    return _infer_all(model, source, base_dir)


def _infer_all(model, source: str, base_dir: str | None):
    """ONNX inference, then the outputs it left unknown (ai.edgeops ops; function ops such as
    GroupNormalization) from op definitions, pinned as value_info, then ONNX again downstream."""
    pinned: set[str] = set()
    while True:
        _infer(model, source)
        graph = Graph(model, source, base_dir)
        pins = {k: v for k, v in _missing_shapes(graph).items() if k not in pinned}
        if not pins:     # each round pins new tensors, so this ends
            return graph
        for name, (shape, dtype) in pins.items():
            _pin(model, name, shape, dtype)
        pinned |= set(pins)


# ops ONNX inference may leave unknown (function-defined, no inference of their own) whose
# output 0 has the shape and dtype of input 0; used only where edgeops has no op definition
_SAME_SHAPE = {"GroupNormalization"}


def _missing_shapes(graph) -> dict[str, tuple[tuple, str | None]]:
    """Shapes for unknown outputs, from op definitions, walking the nodes in order so that one
    filled shape lets the next node's definition run too (until a node edgeops cannot define)."""
    known = {n: (t.shape, t.dtype) for n, t in graph.tensors.items() if t.is_static}
    pins = {}
    for n in graph.nodes:
        ins = [known.get(i, (None, None)) if i else (None, None) for i in n.inputs]
        if all(o in known for o in n.outputs if o) or not all(
                _static(s) for i, (s, _) in zip(n.inputs, ins) if i):
            continue
        od, dt = n.opdef, next((d for _, d in ins if d), None)
        try:
            if od is not None:
                shapes = od.shape(n.attrs, [s for s, _ in ins])
            elif n.op_type in _SAME_SHAPE and n.domain in ("", "ai.onnx"):
                shapes = [ins[0][0]]
            else:
                continue
        except (OpDefinitionError, NotImplementedError):
            continue
        for o, s in zip(n.outputs, shapes):
            if o and s is not None and o not in known:
                t = graph.tensors.get(o)
                known[o] = pins[o] = (tuple(int(d) for d in s), t.dtype if t is not None and t.dtype else dt)
    return pins


def _pin(model, name: str, shape: tuple, dtype: str | None) -> None:
    from onnx import helper
    from edgeops.dtypes import to_numpy
    elem = helper.np_dtype_to_tensor_dtype(to_numpy(dtype)) if dtype else 0
    vi = helper.make_tensor_value_info(name, elem, list(shape))
    for o in model.graph.output:
        if o.name == name:
            if not elem:
                vi.type.tensor_type.elem_type = o.type.tensor_type.elem_type
            o.CopyFrom(vi)
            return
    model.graph.value_info.append(vi)
