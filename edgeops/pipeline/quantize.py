"""Quantization inside the pipeline: ``edgeops compile --quantize DATA`` (load, the standard-ONNX
clean-up passes: drop Dropout, fold BatchNorm into Conv; then INT8 QDQ, whose units the fusion
passes inside lowering turn into int8 kernels), and the simulator's latency cost of the layers
kept in float. :mod:`edgeops.quantize` itself needs only the core: these are handed to it."""
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
    from edgeops.pipeline.models import load_onnx
    from edgeops.quantize.api import quantize_model
    return quantize_model(cleaned(load_onnx(model)), calib, method=method,
                          activation_type=activation_type, **kw)


def latency_cost(m, qnodes, keep: list[str], board) -> dict:
    """Predicted latency (simulator, naive tilings) of each quantized node in float and int8 on
    ``board``, and what keeping ``keep`` in float costs."""
    from edgeops import boards
    from edgeops.errors import EdgeOpsError
    from edgeops.tiling.api import naive, predict
    from edgeops.tiling.graphsim import board_cast, cast_space, load_model
    from edgeops.tiling.from_node import space_from_node
    b = boards.load(board)
    g = load_model(m)
    cast = board_cast(b)     # "float" is what the board runs fp32 in (fp16 on Cube/tensor cores)
    rows, unavailable = {}, {}
    for q in qnodes:
        try:
            sp = space_from_node(g.node(q.name))
            if isinstance(sp, str):
                raise EdgeOpsError(sp)
            sf = cast_space(sp, cast)
            f = predict(sf, b, naive(sf, b)).prediction.latency_s
            s8 = cast_space(sp, {sp.dtype: "int8"})
            i8 = predict(s8, b, naive(s8, b)).prediction.latency_s
            rows[q.name] = {"float_dtype": sf.dtype, "float_s": f, "int8_s": i8}
        except Exception as e:  # noqa: BLE001  (a node the simulator cannot cost: say so)
            unavailable[q.name] = f"{type(e).__name__}: {e}"
    all_int8 = sum(r["int8_s"] for r in rows.values())
    mixed = sum(r["float_s"] if n in keep else r["int8_s"] for n, r in rows.items())
    return {"board": b.name, "tiling": "naive", "nodes": rows, "unavailable": unavailable,
            "quantized_nodes_int8_s": all_int8, "mixed_s": mixed, "cost_s": mixed - all_int8,
            "kept_unavailable": [n for n in keep if n in unavailable]}
