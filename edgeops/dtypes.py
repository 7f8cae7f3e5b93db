"""Short dtype names (``fp32``, ``fp16``, ``int8``, ``int32``) as used on the command line and in
board files, and their mapping to numpy and ONNX element types."""
from __future__ import annotations

import numpy as np

from edgeops.errors import EdgeOpsError

_SHORT = {
    "fp32": np.dtype(np.float32),
    "fp16": np.dtype(np.float16),
    "fp64": np.dtype(np.float64),
    "int8": np.dtype(np.int8),
    "uint8": np.dtype(np.uint8),
    "int32": np.dtype(np.int32),
    "int64": np.dtype(np.int64),
    "bool": np.dtype(np.bool_),
}
_ALIASES = {"float32": "fp32", "float": "fp32", "float16": "fp16", "half": "fp16", "float64": "fp64",
            "double": "fp64"}

# ONNX TensorProto element type -> short name (numbers from onnx.TensorProto; kept here so that
# this module does not import onnx)
_ONNX = {1: "fp32", 10: "fp16", 11: "fp64", 3: "int8", 2: "uint8", 6: "int32", 7: "int64", 9: "bool"}


def short_names() -> list[str]:
    return list(_SHORT)


def to_numpy(name) -> np.dtype:
    """``"fp16"`` (or a numpy dtype) -> ``np.dtype('float16')``."""
    if isinstance(name, str):
        key = _ALIASES.get(name.lower(), name.lower())
        if key not in _SHORT:
            raise EdgeOpsError(f"unknown dtype {name!r}; use one of {', '.join(_SHORT)}")
        return _SHORT[key]
    return np.dtype(name)


def to_short(dtype) -> str:
    """numpy dtype, short name or ONNX element type number -> short name."""
    if isinstance(dtype, (int, np.integer)) and not isinstance(dtype, bool):
        if int(dtype) not in _ONNX:
            raise EdgeOpsError(f"ONNX element type {int(dtype)} is not supported by edgeops")
        return _ONNX[int(dtype)]
    dt = to_numpy(dtype)
    for k, v in _SHORT.items():
        if v == dt:
            return k
    raise EdgeOpsError(f"dtype {dt} has no edgeops short name; supported: {', '.join(_SHORT)}")


def itemsize(name) -> int:
    return to_numpy(name).itemsize
