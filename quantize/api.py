"""``quantize_model(model, calib, ...) -> (QDQ ModelProto, report)``: collect -> compute ->
export -> analyse -> (optionally) mixed precision. Writes no file."""
from __future__ import annotations

import os
import warnings

import numpy as np

from edgeops.errors import EdgeOpsError, EdgeOpsWarning, ModelError
from edgeops.quantize.analysis import Agreement, Top1, e2e_sqnr, jsonable
from edgeops.quantize.calib import open_reader, validated_batches
from edgeops.quantize.observers import (QRANGE, activation_qparams, fake_quantize,
                                        make_observer, quantize_weight, dequantize)
from edgeops.quantize.qdq import build, find_nodes, model_inputs, prepare, session, with_outputs


def load_onnx(model):
    """A ModelProto from a path, bytes or a ModelProto (the pipeline resolves ``"sample"``)."""
    import onnx
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray)):
        return onnx.load_from_string(bytes(model))
    path = os.fspath(model)
    if not os.path.exists(path):
        raise ModelError(f"model {path!r} does not exist")
    try:
        return onnx.load(path)
    except Exception as e:  # noqa: BLE001
        raise ModelError(f"cannot load {path!r} as ONNX: {e}") from None


def calibrate(m, qnodes, batches, method="minmax", activation_type="int8", progress=None,
              outputs: bool = False, collect=None):
    """{activation tensor: (scale, zero point, qtype)} from the float model on ``batches``
    (the quantized nodes' inputs, and their outputs too when ``outputs``). ``collect(values)``
    is handed each batch's values of every quantized node's output and every graph output,
    from the same run (what bias correction and the analysis need of the float model)."""
    acts = list(dict.fromkeys([t for q in qnodes for t in q.acts]
                              + ([q.output for q in qnodes] if outputs else [])))
    obs = {t: make_observer(method, activation_type) for t in acts}
    extra = [q.output for q in qnodes] + [o.name for o in m.graph.output] if collect else []
    names = list(dict.fromkeys(acts + extra))
    sess = session(with_outputs(m, names))
    for i, b in enumerate(batches):
        vals = dict(zip(names, sess.run(names, b)))
        for t in acts:
            obs[t].update(vals[t])
        if collect:
            collect({t: vals[t] for t in extra})
        if progress:
            progress(i + 1, len(batches))
    out = {}
    for t, o in obs.items():
        s, z = activation_qparams(*o.compute(), activation_type)
        out[t] = (s, z, activation_type)
    return out


def correctable(m, q) -> bool:
    """Whether node ``q``'s output can take a per-channel bias correction: a quantized weight
    with its output channels last (MatMul: a 2-D weight) or on axis 1 (Conv), and a bias that is
    either quantized already or can be added (Gemm only with alpha = beta = 1)."""
    from onnx import helper
    if q.weight is None or not q.acts:
        return False
    n = next(n for n in m.graph.node if n.name == q.name)
    if q.acts[0] != n.input[0]:
        return False
    attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
    if q.op == "MatMul":
        return q.axis == 1          # a 2-D (K, N) weight: one channel per column of the output
    no_bias = len(n.input) < 3 or not n.input[2]
    if q.op == "Gemm" and (attrs.get("alpha", 1.0) != 1.0 or attrs.get("beta", 1.0) != 1.0):
        return False
    return q.bias is not None or no_bias


SAMPLE_BATCHES = 2        # batches the per-layer analysis looks at (end to end: all)
CORRECTION_BATCHES = 8    # batches bias correction measures each node's mean error on
SAMPLE_ELEMENTS = 1 << 16  # elements of each tensor per batch the per-layer figures look at


def correct_bias(m, qnodes, act_params, batches, *, progress=None, fmeans=None,
                 **build_kw) -> dict:
    """Empirical bias correction, in graph order: the mean error each quantized node's output
    has over the calibration set (its own weight rounding and everything quantized upstream,
    corrected already) is subtracted from its bias, per output channel. Quantization noise is
    zero-mean only per element; summed over a channel's K terms its mean shifts, and that
    shift passes through every later layer. ORT's quantize_static leaves it in.

    One run per batch (the first :data:`CORRECTION_BATCHES`) does every node in order: the QDQ
    model computes each corrected node's channel means and adds what they lack of the float
    model's on this batch (fed as an input) before the next node reads it (:func:`_hooked`);
    each node's correction is the mean of what was added. A session per node, or all nodes at
    once and then the residual, cost 10x or lose up to 3 dB (docs/notes/quantize-speed.md).
    ``fmeans``: the float model's channel means per batch, {output: array} (calibration's run
    has them: :func:`float_means`); computed here when None."""
    outs = [q.output for q in qnodes if correctable(m, q)]
    if not outs:
        return {}
    batches = batches[:CORRECTION_BATCHES]
    axis = {q.output: (1 if q.op == "Conv" else -1) for q in qnodes}
    if fmeans is None:
        fsess = session(with_outputs(m, outs), optimize=True)
        fmeans = [float_means(qnodes, dict(zip(outs, fsess.run(outs, b)))) for b in batches]
    fmeans = [{t: v for t, v in fm.items() if t in outs} for fm in fmeans[:len(batches)]]
    todo = [q for q in qnodes if q.output in fmeans[0]]
    ranks = {t: v.ndim for t, v in fmeans[0].items()}
    hooked = _hooked(build(m, qnodes, act_params, **build_kw), todo, axis, ranks)
    deltas = [f"{q.name}__delta" for q in todo]
    sess = session(hooked, optimize=True)
    acc = {q.name: 0.0 for q in todo}
    for i, (b, fm) in enumerate(zip(batches, fmeans)):
        feed = {**b, **{f"{q.name}__float_mean": fm[q.output] for q in todo}}
        for q, d in zip(todo, sess.run(deltas, feed)):
            acc[q.name] = acc[q.name] + np.asarray(d, np.float64).reshape(-1)
        if progress:
            progress(i + 1, len(batches))
    return {n: (a / len(batches)).astype(np.float32) for n, a in acc.items()}


def float_means(qnodes, values: dict) -> dict:
    """{node output: channel means} of the float values of one batch (Conv: axis 1, else -1)."""
    return {q.output: _channel_mean(values[q.output], 1 if q.op == "Conv" else -1)
            for q in qnodes if q.output in values}


def _channel_mean(v, axis: int) -> np.ndarray:
    """Mean over every axis but ``axis``, keeping them (float32, as the graph's ReduceMean)."""
    v = np.asarray(v, np.float64)
    ax = tuple(a for a in range(v.ndim) if a != axis % v.ndim)
    return v.mean(axis=ax, keepdims=True).astype(np.float32)


def _hooked(qdq, todo, axis: dict, ranks: dict):
    """``qdq`` where each node in ``todo`` adds to its output, per channel, what its mean lacks
    of the float model's (graph input ``<node>__float_mean``); what it added is the graph
    output ``<node>__delta``. ``ranks``: {output: rank} (ONNX's inference loses some)."""
    from onnx import TensorProto, helper
    opset = max(o.version for o in qdq.opset_import if o.domain in ("", "ai.onnx"))
    # hooked where q.output is written: the node, or the DequantizeLinear of its output pair
    # (then the mean error of the output rounding is corrected too)
    by_out = {q.output: q for q in todo}
    nodes, inits, ins, outs = [], [], [], []
    for n in qdq.graph.node:
        nodes.append(n)
        q = by_out.get(n.output[0]) if n.output else None
        if q is None:
            continue
        o = n.output[0]
        rank = ranks[o]
        ax = [a for a in range(rank) if a != axis[q.output] % rank]
        name = q.name
        n.output[0] = f"{o}__unfixed"
        if opset >= 18:
            inits.append(helper.make_tensor(f"{name}__axes", TensorProto.INT64, [len(ax)], ax))
            nodes.append(helper.make_node("ReduceMean", [n.output[0], f"{name}__axes"],
                                          [f"{name}__mean"], keepdims=1))
        else:
            nodes.append(helper.make_node("ReduceMean", [n.output[0]], [f"{name}__mean"],
                                          axes=ax, keepdims=1))
        nodes.append(helper.make_node("Sub", [f"{name}__float_mean", f"{name}__mean"],
                                      [f"{name}__delta"]))
        nodes.append(helper.make_node("Add", [n.output[0], f"{name}__delta"], [o]))
        ins.append(helper.make_tensor_value_info(f"{name}__float_mean", TensorProto.FLOAT, None))
        outs.append(helper.make_tensor_value_info(f"{name}__delta", TensorProto.FLOAT, None))
    del qdq.graph.node[:]
    qdq.graph.node.extend(nodes)
    qdq.graph.initializer.extend(inits)
    qdq.graph.input.extend(ins)
    qdq.graph.output.extend(outs)
    return qdq


def _sample(a):
    """At most :data:`SAMPLE_ELEMENTS` of ``a``, the same ones for every array of its size: a
    tensor's SQNR from 65536 of its elements is within about 0.05 dB of the whole one's."""
    a = np.asarray(a).reshape(-1)
    if a.size <= SAMPLE_ELEMENTS:
        return a
    idx = _SAMPLES.get(a.size)
    if idx is None:
        idx = _SAMPLES[a.size] = np.sort(np.random.default_rng(a.size).choice(
            a.size, SAMPLE_ELEMENTS, replace=False))
    return a[idx]


_SAMPLES: dict[int, np.ndarray] = {}


def analyse(m, qdq, qnodes, act_params, batches, *, per_channel=True, weight_method="minmax",
            quantize_outputs=False, bias_fix=None, float_outputs=None) -> dict:
    """Per-tensor and per-layer SQNR/cosine (worst first) on the first :data:`SAMPLE_BATCHES`
    of ``batches`` and :data:`SAMPLE_ELEMENTS` of each tensor; end to end on all of them
    (``float_outputs``: the float model's graph outputs per batch, when known)."""
    outputs = [o.name for o in m.graph.output]
    acts = list(act_params)
    # the isolated copies quantize inputs and weights only: outputs are measured, not quantized
    iso_params = {t: v for t, v in act_params.items() if t in {a for q in qnodes for a in q.acts}}
    node_outs = [q.output for q in qnodes]
    # the isolated copies carry the bias correction too: each is the layer as deployed
    iso = build(m, qnodes, iso_params, per_channel=per_channel, isolated=True,
                weight_method=weight_method, bias_fix=bias_fix)
    iso_names = acts + node_outs + [f"{o}__iso" for o in node_outs] + outputs
    iso_sess = session(with_outputs(iso, iso_names))
    q_sess = session(with_outputs(qdq, node_outs + outputs))
    f_sess = None
    ag_t = {t: Agreement() for t in acts}
    ag_iso = {o: Agreement() for o in node_outs}
    ag_cum = {o: Agreement() for o in node_outs}
    ag_e2e = {o: Agreement() for o in outputs}
    top1 = {o: Top1() for o in outputs}
    ref_outs = []
    for k, b in enumerate(batches):
        if k >= SAMPLE_BATCHES:     # past the sample: the end-to-end figure only
            if float_outputs is not None:
                f = float_outputs[k]
            else:
                f_sess = f_sess or session(m)
                f = dict(zip(outputs, f_sess.run(outputs, b)))
            qv = dict(zip(outputs, q_sess.run(outputs, b)))
        else:
            f = dict(zip(iso_names, iso_sess.run(iso_names, b)))
            qv = dict(zip(node_outs + outputs, q_sess.run(node_outs + outputs, b)))
            for t in acts:
                s, z, qt = act_params[t]
                lo, hi = QRANGE[qt]
                x = _sample(f[t])
                ag_t[t].update(x, fake_quantize(x, s, z, lo, hi))
            for o in node_outs:
                ag_iso[o].update(_sample(f[o]), _sample(f[f"{o}__iso"]))
                ag_cum[o].update(_sample(f[o]), _sample(qv[o]))
        for o in outputs:
            ag_e2e[o].update(f[o], qv[o])
            top1[o].update(f[o], qv[o])
        ref_outs.append({o: f[o] for o in outputs})
    inits = {t.name: t for t in m.graph.initializer}
    from onnx import numpy_helper
    tensors = [{"tensor": t, "kind": "activation", "scale": float(act_params[t][0]),
                "zero_point": int(act_params[t][1]), "sqnr_db": jsonable(a.sqnr_db),
                "cosine": a.cosine} for t, a in ag_t.items()]
    for q in qnodes:
        if q.weight is None:
            continue
        w = numpy_helper.to_array(inits[q.weight])
        axis = q.axis if per_channel else None
        qw, s, z = quantize_weight(w, axis, weight_method)
        a = Agreement().update(w, dequantize(qw, s, z, axis))
        tensors.append({"tensor": q.weight, "kind": "weight", "axis": axis,
                        "sqnr_db": jsonable(a.sqnr_db), "cosine": a.cosine})
    tensors.sort(key=lambda r: r["sqnr_db"])
    layers = [{"node": q.name, "op": q.op, "output": q.output,
               "isolated_sqnr_db": jsonable(ag_iso[q.output].sqnr_db),
               "cumulative_sqnr_db": jsonable(ag_cum[q.output].sqnr_db),
               "cosine": ag_cum[q.output].cosine, "isolated_cosine": ag_iso[q.output].cosine}
              for q in qnodes]
    layers.sort(key=lambda r: r["isolated_sqnr_db"])
    return {"end_to_end": _e2e_doc(ag_e2e, top1), "layers": layers, "tensors": tensors,
            "_ref_outs": ref_outs}


def _e2e_doc(ag, top1):
    t1 = {o: t.agreement for o, t in top1.items() if t.agreement is not None}
    return {"sqnr_db": jsonable(e2e_sqnr(ag)),
            "cosine": min(a.cosine for a in ag.values()),
            "top1_agreement": min(t1.values()) if t1 else None,
            "outputs": {o: {"sqnr_db": jsonable(a.sqnr_db), "cosine": a.cosine,
                            "top1_agreement": top1[o].agreement} for o, a in ag.items()}}


def e2e_of(model, batches, ref_outs) -> dict:
    outputs = [o.name for o in model.graph.output]
    sess = session(model)
    ag = {o: Agreement() for o in outputs}
    top1 = {o: Top1() for o in outputs}
    for b, ref in zip(batches, ref_outs):
        for o, v in zip(outputs, sess.run(outputs, b)):
            ag[o].update(ref[o], v)
            top1[o].update(ref[o], v)
    return _e2e_doc(ag, top1)


def mixed_precision(m, qnodes, act_params, batches, ref_outs, layers, target_db, *, per_channel=True,
                    weight_method="minmax", quantize_outputs=False, bias_fix=None):
    """Greedy: un-quantize the layer with the worst isolated SQNR, re-measure, until the
    end-to-end SQNR reaches ``target_db`` (or every layer is float). Layers kept in float get
    their original bias back; the others keep their correction (each step is measured, so a
    stale correction shows in the figure rather than hiding)."""
    keep: list[str] = []
    steps = []
    kw = {"per_channel": per_channel, "weight_method": weight_method,
          "quantize_outputs": quantize_outputs, "bias_fix": bias_fix}
    model = build(m, qnodes, act_params, **kw)
    cur = e2e_of(model, batches, ref_outs)["sqnr_db"]
    steps.append({"kept_float": [], "sqnr_db": cur})
    for r in layers:
        if cur >= target_db:
            break
        keep.append(r["node"])
        model = build(m, qnodes, act_params, keep_float=keep, **kw)
        cur = e2e_of(model, batches, ref_outs)["sqnr_db"]
        steps.append({"kept_float": list(keep), "sqnr_db": cur})
    return model, {"target_sqnr_db": target_db, "reached": cur >= target_db, "sqnr_db": cur,
                   "kept_float": keep, "steps": steps}


def quantize_model(model, calib, *, method: str = "minmax", per_channel: bool = True,
                   activation_type: str = "int8", weight_method: str = "minmax",
                   quantize_outputs: bool = False, bias_correction: bool = True,
                   target_sqnr: float | None = None,
                   eval_data=None, latency_cost=None, progress=None,
                   mean=(0.0,), std=(1.0,), layout: str = "NCHW", resize: str = "stretch"):
    """Quantize ``model`` (path, bytes or ModelProto) with calibration data
    ``calib`` (a reader, a list of {input: array}, an .npz, a folder, image paths, or
    ``"random"``; the formats: docs/calibration.md). Returns (QDQ ModelProto, report dict).
    ``mean``, ``std``, ``layout``, ``resize``: how images become inputs
    (:func:`edgeops.quantize.calib.image_reader`).

    ``method``: the activation observer (minmax, percentile, entropy, mse); ``weight_method``:
    minmax (max|w| / 127 per channel) or mse; ``target_sqnr``: dB the end-to-end output must
    reach, keeping the least tolerant layers in float; ``eval_data``: held-out data for the
    analysis (default: the calibration set); ``latency_cost(model) -> {"latency_s": ...}``:
    the predicted latency of a model, to cost the float, all-int8 and written models in
    (``report["latency"]``, :func:`latency_report`; the pipeline's
    :func:`edgeops.pipeline.quantize.latency_cost`, compile's predictor, with a board bound); ``quantize_outputs``: Q/DQ on the quantized nodes' outputs too (the full QDQ
    unit ORT runs as QLinearConv/QLinearMatMul); ``bias_correction``: subtract each quantized
    node's mean output error on the calibration set from its bias (:func:`correct_bias`; off:
    the plain QDQ model ORT's quantize_static would write); ``progress(done, total)`` after
    each calibration batch."""
    if weight_method not in ("minmax", "mse"):
        raise EdgeOpsError(f"weight method must be minmax or mse, not {weight_method!r}")
    if activation_type not in QRANGE:
        raise EdgeOpsError(f"--activation-type must be int8 or uint8, not {activation_type!r}")
    src = load_onnx(model)
    m = prepare(src)
    inputs = model_inputs(m)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", EdgeOpsWarning)
        batches = validated_batches(open_reader(calib, inputs, mean=mean, std=std, layout=layout,
                                                   resize=resize), inputs)
        evals = batches if eval_data is None else validated_batches(
            open_reader(eval_data, inputs, mean=mean, std=std, layout=layout, resize=resize), inputs)
    for w in caught:
        warnings.warn(w.message, w.category, stacklevel=2)
    qnodes = find_nodes(m)
    if not qnodes:
        raise EdgeOpsError("the model has no Conv, MatMul or Gemm node to quantize")
    fmeans, fouts = [], []      # of the float model, per calibration batch

    def collect(values):
        if len(fmeans) < CORRECTION_BATCHES:
            fmeans.append(float_means(qnodes, values))
        fouts.append({o.name: values[o.name] for o in m.graph.output})
    act_params = calibrate(m, qnodes, batches, method, activation_type, progress, quantize_outputs,
                           collect=collect)
    kw = {"per_channel": per_channel, "weight_method": weight_method,
          "quantize_outputs": quantize_outputs}
    fixes = correct_bias(m, qnodes, act_params, batches, fmeans=fmeans, **kw) \
        if bias_correction else {}
    qdq = build(m, qnodes, act_params, bias_fix=fixes, **kw)
    rep = analyse(m, qdq, qnodes, act_params, evals, bias_fix=fixes,
                  float_outputs=fouts if eval_data is None else None, **kw)
    ref_outs = rep.pop("_ref_outs")
    report = {"method": method, "weight_method": weight_method, "per_channel": per_channel,
              "quantize_outputs": quantize_outputs,
              "activation_type": activation_type,
              "bias_correction": {"enabled": bias_correction, "nodes": {
                  n: {"max_abs_delta": float(np.abs(d).max(initial=0.0)),
                      "mean_abs_delta": float(np.abs(d).mean()) if d.size else 0.0}
                  for n, d in fixes.items()}},
              "calibration_batches": len(batches), "eval_batches": len(evals),
              "eval_set": "calibration" if eval_data is None else "held-out",
              "opset": max(o.version for o in m.opset_import if o.domain in ("", "ai.onnx")),
              "quantized_nodes": [q.name for q in qnodes],
              "warnings": [str(w.message) for w in caught], **rep, "mixed_precision": None}
    if target_sqnr is not None:
        qdq, mp = mixed_precision(m, qnodes, act_params, evals, ref_outs, rep["layers"],
                                  float(target_sqnr), bias_fix=fixes, **kw)
        report["mixed_precision"] = mp
        report["end_to_end_mixed"] = e2e_of(qdq, evals, ref_outs)
    if latency_cost is not None:
        report["latency"] = latency_report(latency_cost, m, qdq, qnodes, act_params, fixes, kw,
                                           report["mixed_precision"])
    return qdq, report


def latency_report(cost, m, qdq, qnodes, act_params, fixes, kw, mp) -> dict:
    """The predicted latency (``cost(model) -> {"latency_s", "board", ...}``, compile's
    predictor injected by the pipeline) of the float model, the all-int8 model and, with mixed
    precision, the model written; what keeping layers in float costs over all int8."""
    f, q = cost(m), cost(build(m, qnodes, act_params, bias_fix=fixes, **kw) if mp else qdq)
    doc = {"board": q.get("board"), "how": "compile's predicted latency (edgeops compile)",
           "float_s": f["latency_s"], "int8_s": q["latency_s"], "written_s": q["latency_s"],
           "cost_s": 0.0, "unmodelled": {"float": f.get("unmodelled", []),
                                         "int8": q.get("unmodelled", [])}}
    if mp and mp["kept_float"]:
        w = cost(qdq)
        doc.update(written_s=w["latency_s"], cost_s=w["latency_s"] - q["latency_s"])
        doc["unmodelled"]["written"] = w.get("unmodelled", [])
    return doc
