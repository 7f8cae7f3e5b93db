"""Graph IR over an ONNX model: load, check, infer shapes, and expose nodes and tensors.

``load(path | bytes | ModelProto, shapes={"x": (1, 3, 224, 224)})`` runs ``onnx.checker`` and
``onnx.shape_inference`` and gives a :class:`Graph`. The classes live in :mod:`edgeops.graph.ir`,
loading in :mod:`edgeops.graph.loader` (which imports the classes, never the other way).
"""
from edgeops.graph.ir import CONSTANT_OPS, Graph, Node, Tensor
from edgeops.graph.loader import load, parse_shapes

__all__ = ["CONSTANT_OPS", "Graph", "Node", "Tensor", "load", "parse_shapes"]
