"""QDQ export: QuantizeLinear/DequantizeLinear around the inputs and weights of Conv, MatMul
and Gemm, in standard ONNX (opset >= 13 for per-axis scales), before any edgeops fusion.

Activation Q/DQ pairs are made once per tensor and shared by its quantized consumers; a node
kept in float (mixed precision) simply keeps reading the float tensor.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from edgeops.errors import EdgeOpsError, ModelError
from edgeops.quantize.observers import QRANGE, quantize_bias, quantize_weight

OPS = ("Conv", "MatMul", "Gemm")
MIN_OPSET = 13


@dataclass
class QNode:
    """One node to quantize: which inputs are activations, which is the weight and its
    output-channel axis, and which is the bias (quantized to int32 when present)."""
    name: str
    op: str
    index: int
    acts: list[str]
    weight: str | None = None
    axis: int | None = None
    bias: str | None = None
    output: str = ""
    notes: list[str] = field(default_factory=list)


def prepare(model):
    """A copy of ``model`` at opset >= 13 with every node named and a type on every tensor."""
    import onnx
    from onnx import version_converter
    m = onnx.ModelProto()
    m.CopyFrom(model)
    ver = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), 0)
    if m.ir_version < 4 or ver < MIN_OPSET:
        # opset 13 needs IR 7; from IR 4 initializers need not be listed as inputs, and listed
        # they are overridable, which stops ORT from folding them
        m.ir_version = max(m.ir_version, 7)
        inits = {t.name for t in m.graph.initializer}
        ins = [v for v in m.graph.input if v.name not in inits]
        del m.graph.input[:]
        m.graph.input.extend(ins)
    if ver < MIN_OPSET:
        try:
            m = version_converter.convert_version(m, MIN_OPSET)
        except Exception as e:  # noqa: BLE001  (the converter raises bare RuntimeErrors)
            raise ModelError(f"the model is at opset {ver}; per-axis QDQ needs opset >= "
                             f"{MIN_OPSET} and converting it failed: {e}") from None
    seen = set()
    for i, n in enumerate(m.graph.node):
        if not n.name or n.name in seen:
            n.name = f"{n.op_type}_{i}"
        seen.add(n.name)
    return m


def find_nodes(model) -> list[QNode]:
    from onnx import helper
    inits = {t.name: t for t in model.graph.initializer}
    out = []
    for i, n in enumerate(model.graph.node):
        if n.op_type not in OPS or n.domain not in ("", "ai.onnx"):
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        ins = list(n.input)
        q = QNode(n.name, n.op_type, i, [], output=n.output[0])
        w = ins[1] if len(ins) > 1 else ""
        wt = inits.get(w)
        if wt is not None and wt.data_type == 1:
            q.weight = w
            nd = len(wt.dims)
            q.axis = {"Conv": 0, "MatMul": nd - 1,
                      "Gemm": 0 if attrs.get("transB", 0) else 1}[n.op_type]
        elif w:
            q.acts.append(w)
        if ins[0] not in inits:
            q.acts.insert(0, ins[0])
        if q.weight is None and not q.acts:
            continue
        if n.op_type == "Gemm" and attrs.get("transA", 0):
            q.notes.append("transA")
        b = ins[2] if len(ins) > 2 else ""
        bt = inits.get(b)
        if bt is not None and q.weight is not None and bt.data_type == 1 and len(bt.dims) == 1 and \
                q.acts and (n.op_type == "Conv" or (attrs.get("alpha", 1.0) == 1.0
                                                    and attrs.get("beta", 1.0) == 1.0)):
            q.bias = b
        out.append(q)
    return out


def _arr(t):
    from onnx import numpy_helper
    return numpy_helper.to_array(t)


def build(model, qnodes: list[QNode], act_params: dict[str, tuple], *, per_channel: bool = True,
          keep_float=(), isolated: bool = False, weight_method: str = "minmax",
          quantize_outputs: bool = False, bias_fix: dict | None = None):
    """The QDQ model. ``act_params``: {tensor: (scale, zero point, qtype)}.

    ``bias_fix``: {node: float32 per-channel delta} added to a quantized node's bias (bias
    correction, :func:`edgeops.quantize.api.correct_bias`): Conv/Gemm get it in their int32
    bias (a zero bias is added where there was none); a MatMul, which has no bias input, gets a
    float Add after it. Nodes kept in float keep their original bias.

    ``quantize_outputs``: a Q/DQ pair on each quantized node's output too (the node writes
    ``<output>_float``; the pair writes ``<output>``), the full QDQ unit that ONNX Runtime
    turns into QLinearConv/QLinearMatMul and an int8 kernel with requantisation implements.

    ``isolated``: keep every float node and add, for each quantized node, a copy reading the
    fake-quantized tensors and writing ``<output>__iso``: one session then gives each layer's
    error from its own quantization alone (its inputs exact), the sensitivity the mixed
    precision search ranks by."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    todo = {q.name: q for q in qnodes if q.name not in set(keep_float)}
    new_nodes, new_inits = [], []
    done_act, done_w = {}, {}
    weight_scales = {}
    qouts: set[str] = set()

    def act_dq(t, src=None, dst=None):
        if t in done_act:
            return done_act[t]
        if t not in act_params:
            raise EdgeOpsError(f"internal: no calibration range for tensor {t!r}")
        src, dst = src or t, dst or f"{t}_dq"
        s, z, qtype = act_params[t]
        zdt = TensorProto.INT8 if qtype == "int8" else TensorProto.UINT8
        new_inits.append(numpy_helper.from_array(np.array(s, np.float32), f"{t}_scale"))
        new_inits.append(helper.make_tensor(f"{t}_zero_point", zdt, [], [int(z)]))
        new_nodes.append(helper.make_node("QuantizeLinear", [src, f"{t}_scale", f"{t}_zero_point"],
                                          [f"{t}_quantized"], name=f"{t}_QuantizeLinear"))
        new_nodes.append(helper.make_node("DequantizeLinear", [f"{t}_quantized", f"{t}_scale",
                                          f"{t}_zero_point"], [dst], name=f"{t}_DequantizeLinear"))
        done_act[t] = dst
        return done_act[t]

    def weight_dq(q):
        key = (q.weight, q.axis if per_channel else None)
        if key in done_w:
            return done_w[key]
        w = _arr(inits[q.weight])
        axis = q.axis if per_channel else None
        qw, s, z = quantize_weight(w, axis, weight_method)
        # one name per weight; the rare weight read along two axes gets a second copy
        base = q.weight if not any(k[0] == q.weight for k in done_w) else f"{q.weight}_ax{q.axis}"
        new_inits.append(numpy_helper.from_array(qw, f"{base}_quantized"))
        new_inits.append(numpy_helper.from_array(s, f"{base}_scale"))
        new_inits.append(numpy_helper.from_array(z, f"{base}_zero_point"))
        kw = {"axis": axis} if axis is not None else {}
        new_nodes.append(helper.make_node("DequantizeLinear", [f"{base}_quantized", f"{base}_scale",
                                          f"{base}_zero_point"], [f"{base}_dq"],
                                          name=f"{base}_DequantizeLinear", **kw))
        done_w[key] = f"{base}_dq"
        weight_scales[key] = s
        return done_w[key]

    fixes = bias_fix or {}

    def bias_dq(q):
        s_in = act_params[q.acts[0]][0]
        s_w = weight_scales[(q.weight, q.axis if per_channel else None)]
        if q.bias is not None:
            b = _arr(inits[q.bias])
            base = f"{q.bias}_{q.name}"
        else:
            b = np.zeros(np.shape(fixes[q.name]), np.float32)
            base = f"{q.name}.bias"
        if q.name in fixes:
            b = (b.astype(np.float32) + np.asarray(fixes[q.name], np.float32)).astype(np.float32)
            base = f"{base}_corrected"
        qb, s = quantize_bias(b, s_in, s_w)
        new_inits.append(numpy_helper.from_array(qb, f"{base}_quantized"))
        new_inits.append(numpy_helper.from_array(np.asarray(s, np.float32), f"{base}_scale"))
        new_inits.append(numpy_helper.from_array(np.zeros(np.shape(s), np.int32), f"{base}_zero_point"))
        kw = {"axis": 0} if np.ndim(s) else {}
        new_nodes.append(helper.make_node("DequantizeLinear", [f"{base}_quantized", f"{base}_scale",
                                          f"{base}_zero_point"], [f"{base}_dq"],
                                          name=f"{base}_DequantizeLinear", **kw))
        return f"{base}_dq"

    for n in g.node:
        q = todo.get(n.name)
        if q is None:
            new_nodes.append(n)
            continue
        ins = list(n.input)
        for j, t in enumerate(ins):
            if t in q.acts:
                ins[j] = t if t in qouts else act_dq(t)   # a quantized output: already is
        if q.weight is not None:
            ins[1] = weight_dq(q)
            if q.acts and q.acts[0] == n.input[0] and (
                    q.bias is not None or (q.name in fixes and q.op in ("Conv", "Gemm")
                                           and (len(n.input) < 3 or not n.input[2]))):
                ins += [""] * (3 - len(ins))
                ins[2] = bias_dq(q)
        c = onnx.NodeProto()
        c.CopyFrom(n)
        del c.input[:]
        c.input.extend(ins)
        add_fix = q.op == "MatMul" and q.weight is not None and q.name in fixes
        if isolated:
            new_nodes.append(n)
            c.name = f"{n.name}__iso"
            outs = [f"{o}__iso" if o else "" for o in n.output]
            del c.output[:]
            c.output.extend(outs)
            final = c.output[0]
        elif quantize_outputs and q.output in act_params:
            final = c.output[0] = f"{q.output}_float"
        else:
            final = c.output[0]
        if add_fix:     # MatMul has no bias input: the correction is a float Add after it
            c.output[0] = f"{final}_uncorrected"
            new_inits.append(numpy_helper.from_array(np.asarray(fixes[q.name], np.float32),
                                                     f"{q.name}.bias_correction"))
        new_nodes.append(c)
        if add_fix:
            new_nodes.append(helper.make_node("Add", [c.output[0], f"{q.name}.bias_correction"],
                                              [final], name=f"{q.name}.bias_correction"))
        if not isolated and quantize_outputs and q.output in act_params:
            act_dq(q.output, src=f"{q.output}_float", dst=q.output)
            qouts.add(q.output)
    del g.node[:]
    g.node.extend(new_nodes)
    g.initializer.extend(new_inits)
    if not isolated:    # drop float weights no node reads any more
        used = {i for n in g.node for i in n.input} | {o.name for o in g.output}
        keep = [t for t in g.initializer if t.name in used]
        gone = {t.name for t in g.initializer} - {t.name for t in keep}
        del g.initializer[:]
        g.initializer.extend(keep)
        ins = [v for v in g.input if v.name not in gone]   # IR < 4 lists initializers as inputs
        del g.input[:]
        g.input.extend(ins)
    return m


def with_outputs(model, names):
    """``model`` with extra float graph outputs (intermediate tensors)."""
    import onnx
    from onnx import TensorProto, helper
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    m.graph.output.extend(helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
                          for n in dict.fromkeys(names) if n not in have)
    return m


def session(model, optimize: bool = False, threads: int = 0):
    """A CPU session. ``optimize=False``: as the model is written, Q/DQ computed as ONNX defines
    them (the figures the report gives). ``True``: ONNX Runtime's optimisations with Q/DQ left
    as plain ops (weights' DequantizeLinear folded, float kernels): about 1.6x faster on a QDQ
    ResNet-18, fp32 differences that flip the odd rounding, fine for a mean or a range."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 3
    # numpy works between runs: ORT's threads spinning after a run would take its cores
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if threads:
        so.intra_op_num_threads = threads
    if optimize:        # no QLinear fusion: the arithmetic stays the QDQ model's, in float
        so.add_session_config_entry("session.disable_quant_qdq", "1")
    else:               # intermediate tensors must stay as the model names them
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001  (ORT raises its own exception types)
        raise ModelError(f"ONNX Runtime cannot load the model: {e}") from None


def float_tensors(model) -> set[str]:
    """Names of the float32 tensors of ``model`` (after shape inference)."""
    from onnx import shape_inference
    try:
        inf = shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001
        inf = model
    vis = list(inf.graph.value_info) + list(inf.graph.input) + list(inf.graph.output)
    return {v.name for v in vis if v.type.tensor_type.elem_type == 1}


def model_inputs(model) -> list[tuple[str, tuple, np.dtype]]:
    from onnx import helper
    inits = {t.name for t in model.graph.initializer}
    out = []
    for v in model.graph.input:
        if v.name in inits:
            continue
        tt = v.type.tensor_type
        shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                      for d in tt.shape.dim)
        out.append((v.name, shape, np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))))
    return out


QTYPES = tuple(QRANGE)
