"""edgeops: take ONNX models onto edge hardware and predict how each operator's tiling uses it.

Kept light on purpose: importing ``edgeops`` pulls in no onnx, onnxruntime or numba. The
subpackages (``edgeops.graph``, ``edgeops.tiling``, ``edgeops.simulator``, ...) load on use.
"""
from edgeops._version import __version__
from edgeops.errors import EdgeOpsError

__all__ = ["__version__", "EdgeOpsError"]
