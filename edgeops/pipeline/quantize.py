"""Quantization inside the pipeline: ``edgeops compile --quantize DATA`` (load, the standard-ONNX
clean-up passes: drop Dropout, fold BatchNorm into Conv; then INT8 QDQ, whose units the fusion
passes inside lowering turn into int8 kernels), compile's predicted latency as the cost of
mixed precision, and the check of a quantized package against ONNX Runtime on its QDQ model. :mod:`edgeops.quantize` itself needs only the core: these are handed to it."""
from __future__ import annotations

import numpy as np

CLEANUP_BELOW = 100       # pass priorities below this are clean-ups (edgeops.passes)
HELD_OUT = 4              # compile --quantize keeps 1 calibration batch in this many for accuracy


def cleaned(model):
    """``model`` after the clean-up passes only (no fusion into ai.edgeops ops)."""
    from edgeops.passes import all_passes, run_passes
    names = [p.name for p in all_passes() if p.priority < CLEANUP_BELOW]
    return run_passes(model, names)[0]


def quantize_for_compile(model, calib, *, method: str = "minmax", activation_type: str = "uint8",
                         **kw):
    """(QDQ ModelProto, quantization report) for ``model`` (path, "sample", bytes or
    ModelProto) calibrated on ``calib``, cleaned up first so that BatchNorm is already in the
    Conv it follows when the weights are quantized. Unless ``eval_data`` is given, the last
    1 in :data:`HELD_OUT` calibration batches is held out of calibration for the accuracy
    figures. The report adds the float model's name and sha256 (``source``). ``kw`` goes to
    :func:`edgeops.quantize.api.quantize_model`.

    Activations default to uint8 here: the package's reference run is ONNX Runtime with its
    default optimisations, and ORT 1.32's extended QDQ rewrite of a Gemm on a shape-inferred
    model inserts a QuantizeLinear with a uint8 zero point next to our int8 one and then
    refuses its own graph (TypeInferenceError on ``gemm_input_reshape_arg_q``)."""
    import hashlib

    from edgeops.pipeline.models import load_onnx, resolve
    from edgeops.quantize.api import quantize_model
    from edgeops.quantize.calib import open_reader, validated_batches
    from edgeops.quantize.qdq import model_inputs, prepare
    src = load_onnx(model)
    m = cleaned(src)
    held = 0
    if kw.get("eval_data") is None:     # accuracy on samples calibration did not see
        inputs = model_inputs(prepare(m))
        batches = validated_batches(open_reader(calib, inputs), inputs)
        held = max(1, len(batches) // HELD_OUT) if len(batches) > 1 else 0
        calib = batches[:len(batches) - held]
        kw["eval_data"] = batches[len(batches) - held:] if held else None
    q, rep = quantize_model(m, calib, method=method, activation_type=activation_type, **kw)
    rep["source"] = {"name": resolve(model)[1], "sha256": hashlib.sha256(
        src.SerializeToString(deterministic=True)).hexdigest()}
    rep["held_out_batches"] = held
    return q, rep


def manifest_section(rep: dict) -> dict:
    """What a quantized package's manifest records of how it was made and how close it is to
    its float model (``quantization``)."""
    e = rep["end_to_end"]
    return {"source": rep["source"], "method": rep["method"],
            "activation_type": rep["activation_type"], "per_channel": rep["per_channel"],
            "bias_correction": rep["bias_correction"]["enabled"],
            "accuracy": {"vs": "the float model", "of": "the QDQ model the package is checked against",
                         "on": f"{rep['eval_batches']} {rep['eval_set']} batch(es)"
                               + ("" if rep["eval_set"] == "held-out" else " (too few to hold any out)"),
                         "sqnr_db": e["sqnr_db"], "cosine": e["cosine"],
                         "top1_agreement": e["top1_agreement"]}}


def latency_cost(model, board) -> dict:
    """Compile's predicted latency of ``model`` (float or QDQ) on ``board``: the lowering compile
    does (fusions, int8 kernels, placement; no measurement), summed as ``edgeops compile``
    prints it. The cost :func:`edgeops.quantize.api.quantize_model` reports mixed precision in."""
    from edgeops.lower import lower
    lw = lower(model, board, measure=False)
    return {"board": lw.board.name, "latency_s": lw.predicted_latency_s,
            "unmodelled": lw.unmodelled,
            "lowered": sum(1 for p in lw.placements if p.target is not None)}


# ---- verifying a quantized package against ONNX Runtime on its QDQ model -------------------

STEPS_ALL, STEPS_MOST, MOST = 2.0, 1.0, 0.999   # every element within 2 steps, 99.9% within 1
E2E_MARGIN = 2.0      # a quantized package's end-to-end tolerance: this times compile's error


def is_quantized(model) -> bool:
    """Whether ``model`` (ModelProto) holds QDQ units, i.e. its package is checked in steps."""
    return any(n.op_type in ("QuantizeLinear", "DequantizeLinear") and n.domain in ("", "ai.onnx")
               for n in model.graph.node)


def constant_tensors(m) -> set[str]:
    """Tensors computed from initializers alone (a weight's DequantizeLinear): ONNX Runtime folds
    them into initializers and refuses to expose one as a graph output."""
    const = {t.name for t in m.graph.initializer} | {""}
    for node in m.graph.node:
        if all(i in const for i in node.input):
            const.update(node.output)
    return const


def steps_of(qdq, values: dict) -> dict:
    """{tensor: one quantization step} for the tensors in ``values`` (ONNX Runtime's values on
    the QDQ model ``qdq``): the scale of the QuantizeLinear that reads it or the
    DequantizeLinear that writes it; 1 for an integer tensor (steps are codes); else the step of
    an 8-bit quantization over its range on these inputs (a float output nothing quantizes)."""
    from onnx import numpy_helper
    inits = {t.name: t for t in qdq.graph.initializer}

    def scale(name):
        return float(np.max(numpy_helper.to_array(inits[name]))) if name in inits else None
    q = {}
    for n in qdq.graph.node:
        if n.op_type == "QuantizeLinear" and len(n.input) > 1:
            q.setdefault(n.input[0], scale(n.input[1]))
        elif n.op_type == "DequantizeLinear" and len(n.input) > 1:
            q.setdefault(n.output[0], scale(n.input[1]))
    out = {}
    for t, v in values.items():
        v = np.asarray(v)
        if v.dtype.kind in "iub":
            out[t] = 1.0
        elif q.get(t):
            out[t] = q[t]
        else:
            out[t] = (max(float(v.max(initial=0.0)), 0.0) - min(float(v.min(initial=0.0)), 0.0)) / 255
    return out


def check_int8(lowering, feeds: dict, errors: dict | None = None, *, threads=None) -> dict:
    """The lowered model of a QDQ source checked node by node against ONNX Runtime on the QDQ
    model: every edgeops node of the package is fed ONNX Runtime's values of its inputs (one
    run, all rewired), and each output it shares with the QDQ model must be within
    :data:`STEPS_MOST` quantization step (:func:`steps_of`) on :data:`MOST` of its elements and
    within :data:`STEPS_ALL` on all. End to end the two are not held to steps: an fp32
    difference of 1e-7 that flips one int8 rounding is amplified by every layer after it
    (GroupNorm spreads it over its whole group), so the outputs' errors (``errors``, from
    ``edgeops.package.compare``) are not judged here: they set the package's end-to-end tolerance
    for later runs (``tolerance``: :data:`E2E_MARGIN` times the worst, at least fp32's), a guard
    against regressions rather than a bound on quantization."""
    from edgeops import graph, package
    from edgeops.ort import session
    pm, src = lowering.model, lowering.source
    gm = graph.load(src, check=False, require_static=False).model   # types on every tensor
    gtypes = {v.name: v for v in [*gm.graph.value_info, *gm.graph.output]}
    const = constant_tensors(pm) | constant_tensors(gm)
    inputs = {i.name for i in pm.graph.input}
    from edgeops.ops import EDGEOPS_DOMAIN
    # only edgeops nodes: the others are ONNX Runtime on both sides, and feeding one a graph
    # input in place of its DequantizeLinear lets ORT rewrite it (a MatMul then quantizes its
    # float input dynamically)
    ours = [n for n in pm.graph.node if n.domain == EDGEOPS_DOMAIN]
    used = [t for n in ours for t in [*n.input, *n.output]]
    shared = [t for t in dict.fromkeys(used) if t in gtypes and t not in const and t not in inputs]
    if not any(t in shared for n in ours for t in n.output):   # nothing of ours to check
        shared = []
    golden = package.ort_outputs(_with_outputs(gm, shared, gtypes), feeds) if shared else {}
    forced = _teacher_forced(pm, {n.name for n in ours}, shared, gtypes)
    outs = [o.name for o in forced.graph.output]
    ins = {**feeds, **{f"{t}__golden": golden[t] for t in shared}}
    ins = {i.name: ins[i.name] for i in forced.graph.input if i.name in ins}
    got = dict(zip(outs, session(forced, target="reference", threads=threads).run(outs, ins))) \
        if outs else {}
    steps = steps_of(gm, {t: golden[t] for t in got})
    by_node = {o: n.name for n in pm.graph.node for o in n.output}
    tensors = {t: {"node": by_node[t], "step": steps[t], **within_steps(got[t], golden[t], steps[t])}
               for t in outs}
    ok = all(r["ok"] for r in tensors.values())
    worst_e2e = max((e["max_rel"] for e in (errors or {}).values()), default=0.0)
    from edgeops.package import FP32_RTOL
    return {"ok": bool(ok), "int8": {
            "criterion": f"each node vs ONNX Runtime on the QDQ model, fed the same inputs: "
                         f"<= {STEPS_MOST:g} quantization step on >= {MOST:.1%} of each output's "
                         f"elements, <= {STEPS_ALL:g} on all",
            "tensors": tensors,
            "failed": sorted({r["node"] for r in tensors.values() if not r["ok"]})},
            "tolerance": {"rel": max(FP32_RTOL, E2E_MARGIN * worst_e2e),
                          "why": f"int8: {E2E_MARGIN:g} x the error compile measured against "
                                 f"ONNX Runtime on the QDQ model (flipped roundings compound); "
                                 f"each node was checked in quantization steps"}}


def within_steps(got, want, step: float) -> dict:
    """How far ``got`` is from ``want`` in quantization steps of size ``step``, and whether that
    is within :data:`STEPS_MOST` on :data:`MOST` of the elements and :data:`STEPS_ALL` on all."""
    g, w = np.asarray(got, np.float64), np.asarray(want, np.float64)
    e = np.abs(g - w) / max(step, 1e-30)      # an all-zero output: any error is too much
    e[~np.isfinite(g)] = np.inf
    worst = float(e.max(initial=0.0))
    frac = float((e > STEPS_MOST + 1e-6).mean()) if e.size else 0.0
    return {"max_steps": worst, "over_1_step": frac,
            "ok": worst <= STEPS_ALL + 1e-6 and frac <= 1 - MOST + 1e-12}


def _with_outputs(m, names, types):
    import onnx
    c = onnx.ModelProto()
    c.CopyFrom(m)
    have = {o.name for o in c.graph.output}
    c.graph.output.extend(types[n] for n in names if n not in have)
    return c


def _teacher_forced(pm, nodes: set[str], shared: list[str], types: dict):
    """``pm`` with every input in ``shared`` of the nodes named ``nodes`` read from a new graph
    input ``<name>__golden`` and their outputs in ``shared`` the graph's outputs."""
    import onnx
    c = onnx.ModelProto()
    c.CopyFrom(pm)
    s = set(shared)
    for node in c.graph.node:
        for k, t in enumerate(node.input):
            if t in s and node.name in nodes:
                node.input[k] = f"{t}__golden"
    fed = list(dict.fromkeys(t for n in pm.graph.node if n.name in nodes for t in n.input if t in s))
    for t in fed:
        vi = onnx.ValueInfoProto()
        vi.CopyFrom(types[t])
        vi.name = f"{t}__golden"
        c.graph.input.append(vi)
    produced = [o for n in pm.graph.node if n.name in nodes for o in n.output if o in s]
    del c.graph.output[:]
    c.graph.output.extend(types[t] for t in produced)
    return c
