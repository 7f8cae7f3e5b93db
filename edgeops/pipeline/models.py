"""What a model argument may be: a path, bytes, a ModelProto, a loaded Graph, or ``"sample"``
(the bundled model, :mod:`edgeops.sample`). The layers below the pipeline take everything but the
name; the pipeline and the CLI resolve the name here, in one place."""
from __future__ import annotations

from pathlib import Path

SAMPLE = "sample"


def resolve(model):
    """(what ``edgeops.graph.load`` and ``onnx`` take, a display name) for ``model``."""
    if isinstance(model, str) and model == SAMPLE:
        from edgeops.sample import SAMPLE_MODEL_NAME, build_sample_model
        return build_sample_model(), SAMPLE_MODEL_NAME
    if isinstance(model, (str, Path)):
        return str(model), Path(model).name
    return model, "<model>"


def load_graph(model, shapes=None):
    """A :class:`edgeops.graph.Graph` of ``model`` (a Graph is returned as it is)."""
    from edgeops import graph
    if isinstance(model, graph.Graph):
        return model
    src, name = resolve(model)
    g = graph.load(src, shapes)
    if isinstance(model, str) and model == SAMPLE:
        g.source = f"{SAMPLE} ({name})"
    return g


def load_onnx(model):
    """A ModelProto of ``model`` (see :func:`edgeops.quantize.api.load_onnx` for the rest)."""
    from edgeops.quantize.api import load_onnx as load
    return load(resolve(model)[0] if isinstance(model, str) and model == SAMPLE else model)
