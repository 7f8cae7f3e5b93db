"""The peer: ``onnxruntime.quantization.quantize_static`` on the same model, the same
calibration batches and the same method, for side-by-side SQNR (tests and benchmarks)."""
from __future__ import annotations

import contextlib
import io
import logging
import os
import tempfile

PEER_METHODS = {"minmax": "MinMax", "entropy": "Entropy", "percentile": "Percentile"}


def typed(model):
    """``model`` with a type on every tensor: edgeops' loader fills what ONNX inference leaves
    unknown (GroupNormalization-21, for one)."""
    import onnx
    from edgeops import graph
    from edgeops.errors import EdgeOpsError
    try:
        return graph.load(model).model
    except EdgeOpsError:
        return onnx.shape_inference.infer_shapes(model)


def ort_quantize(model, batches, method: str = "minmax", *, per_channel: bool = True,
                 activation_type: str = "int8", ops=("Conv", "MatMul", "Gemm")):
    """ORT's QDQ model (ModelProto) for ``model`` (prepared to opset >= 13), or None when ORT
    has no such method."""
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    from edgeops.quantize.calib import ListReader
    if method not in PEER_METHODS:
        return None
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "f.onnx"), os.path.join(d, "q.onnx")
        # ORT's quantizer needs a type on every tensor (what its quant_pre_process provides)
        onnx.save(typed(model), src)
        level = logging.getLogger().level
        logging.getLogger().setLevel(logging.ERROR)   # its "consider pre-processing" chatter
        try:
            with contextlib.redirect_stdout(io.StringIO()):   # its progress prints
                quantize_static(src, dst, ListReader(batches), quant_format=QuantFormat.QDQ,
                                op_types_to_quantize=list(ops), per_channel=per_channel,
                                activation_type=QuantType.QInt8 if activation_type == "int8"
                                else QuantType.QUInt8, weight_type=QuantType.QInt8,
                                calibrate_method=getattr(CalibrationMethod, PEER_METHODS[method]))
        finally:
            logging.getLogger().setLevel(level)
        return onnx.load(dst)
