"""edgeops.quantize: INT8 post-training quantization (calibration, observers, QDQ export).

``quantize_model(model, calib, method=..., target_sqnr=...) -> (QDQ ModelProto, report)``.
"""
from __future__ import annotations


def quantize_model(*args, **kwargs):
    from edgeops.quantize.api import quantize_model as f
    return f(*args, **kwargs)


quantize_model.__doc__ = "See :func:`edgeops.quantize.api.quantize_model`."
__all__ = ["quantize_model"]
