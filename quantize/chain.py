"""``edgeops compile --quantize DATA``: the data flow of DESIGN.md — load, the standard-ONNX
clean-up passes (drop Dropout, fold BatchNorm into Conv), then INT8 quantization to QDQ; the
fusion passes that run inside lowering turn each QDQ unit into its int8 kernel
(``fuse_qdq``)."""
from __future__ import annotations

CLEANUP_BELOW = 100       # pass priorities below this are clean-ups (edgeops.passes)


def cleaned(model):
    """``model`` after the clean-up passes only (no fusion into ai.edgeops ops)."""
    from edgeops.passes import all_passes, run_passes
    names = [p.name for p in all_passes() if p.priority < CLEANUP_BELOW]
    return run_passes(model, names)[0]


def quantize_for_compile(model, calib, *, method: str = "minmax", activation_type: str = "uint8",
                         **kw):
    """(QDQ ModelProto, quantization report) for ``model`` (path, "sample", bytes or
    ModelProto) calibrated on ``calib``, cleaned up first so that BatchNorm is already in the
    Conv it follows when the weights are quantized. ``kw`` goes to
    :func:`edgeops.quantize.api.quantize_model`.

    Activations default to uint8 here: the package's reference run is ONNX Runtime with its
    default optimisations, and ORT 1.32's extended QDQ rewrite of a Gemm on a shape-inferred
    model inserts a QuantizeLinear with a uint8 zero point next to our int8 one and then
    refuses its own graph (TypeInferenceError on ``gemm_input_reshape_arg_q``)."""
    from edgeops.quantize.api import load_onnx, quantize_model
    return quantize_model(cleaned(load_onnx(model)), calib, method=method,
                          activation_type=activation_type, **kw)
