"""QDQ units -> ai.edgeops::QConvBnAct / ai.edgeops::QMatMul (int8 kernels).

Pattern (what ``edgeops.quantize`` and ONNX Runtime's quantize_static write)::

    x -> QuantizeLinear -> DequantizeLinear -+
    int8 W -> DequantizeLinear (per channel) +-> Conv | MatMul | Gemm [-> act]
    int32 B -> DequantizeLinear (optional) --+        [-> QuantizeLinear -> DequantizeLinear]

The fused node reads ``x`` (the float the QuantizeLinear read) and writes what the unit's last
node wrote, so the boundary stays fp32 (the custom-op bridge's contract) while the kernel
quantises, accumulates in int32 and requantises inside exactly as the Q/DQ nodes define
(:mod:`edgeops.ops.qarith`). Weights become fp32 constants holding their int8 values; the bias
its int32 values (only below 2**24, where fp32 is exact; otherwise the unit is left alone).
With an output Q/DQ only none/relu may sit in the unit (relu before or after the pair); with
none, any ConvBnAct activation after a Conv is taken in (it runs in float on the output).
The input QuantizeLinear/DequantizeLinear go when nothing else reads them.
"""
from __future__ import annotations

import numpy as np

from edgeops.ops import EDGEOPS_DOMAIN
from edgeops.ops.qarith import BIAS_LIMIT
from edgeops.passes.base import Fusion, Pass, label, register_pass
from edgeops.passes.rewrite import WorkingGraph, attrs_of

QTYPE = {np.dtype(np.int8): "int8", np.dtype(np.uint8): "uint8"}


@register_pass
class FuseQDQ(Pass):
    name = "fuse_qdq"
    priority = 105      # before fuse_conv_act (110): a Relu after a QDQ Conv belongs to the unit

    def run(self, wg: WorkingGraph) -> list[Fusion]:
        done = []
        for n in list(wg.nodes):
            if n.op_type not in ("Conv", "MatMul", "Gemm") or n.domain not in ("", "ai.onnx"):
                continue
            if not any(n is m for m in wg.nodes):     # taken by an earlier fusion
                continue
            f = _fuse(wg, n)
            if f is not None:
                new, old = f
                wg.replace(old, [new])
                done.append(Fusion(self.name, f"{EDGEOPS_DOMAIN}::{new.op_type}", (new.name,),
                                   tuple(map(label, old))))
        return done


def _qparams(wg, node):
    """(scale, zero point, qtype) of a per-tensor Q or DQ node with constant parameters."""
    s = wg.const(node.input[1])
    z = wg.const(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    if s is None or s.size != 1 or s.dtype != np.float32 or z is None or z.size != 1:
        return None
    if z.dtype not in QTYPE:
        return None
    return float(s.reshape(())), int(z.reshape(())), QTYPE[z.dtype]


def _producer(wg, t, op):
    p = wg.producer.get(t)
    return p if p is not None and p.op_type == op and p.domain in ("", "ai.onnx") else None


def _input_unit(wg, t):
    """(float x, (scale, zp, type), [DQ, Q]) for a tensor written by Q -> DQ with equal params."""
    dq = _producer(wg, t, "DequantizeLinear")
    q = _producer(wg, dq.input[0], "QuantizeLinear") if dq is not None else None
    if q is None:
        return None
    pd, pq = _qparams(wg, dq), _qparams(wg, q)
    if pd is None or pd != pq:
        return None
    return q.input[0], pd, [dq, q]


def _weight(wg, t, axis):
    """(int8 weights, per-channel scales, DQ node) for a constant symmetric int8 DQ."""
    dq = _producer(wg, t, "DequantizeLinear")
    if dq is None:
        return None
    w, s = wg.const(dq.input[0]), wg.const(dq.input[1])
    z = wg.const(dq.input[2]) if len(dq.input) > 2 and dq.input[2] else np.zeros(1, np.int8)
    if w is None or s is None or z is None or w.dtype != np.int8 or np.any(z != 0):
        return None
    if s.dtype != np.float32:
        return None
    if s.size == 1:
        s = np.full(w.shape[axis], s.reshape(()), np.float32)
    elif s.ndim != 1 or attrs_of(dq).get("axis", 1) % w.ndim != axis % w.ndim:
        return None
    return w, s, dq


def _bias(wg, t, scale):
    dq = _producer(wg, t, "DequantizeLinear")
    if dq is None:
        return None
    b, s = wg.const(dq.input[0]), wg.const(dq.input[1])
    z = wg.const(dq.input[2]) if len(dq.input) > 2 and dq.input[2] else np.zeros(1, np.int32)
    if b is None or s is None or b.dtype != np.int32 or np.any(z != 0):
        return None
    if np.abs(b.astype(np.int64)).max(initial=0) >= BIAS_LIMIT:
        return None
    # the bias scale must be the one the int32 accumulators have
    if not np.array_equal(np.broadcast_to(s, scale.shape).astype(np.float32), scale):
        return None
    return b, dq


def _output_unit(wg, y):
    """(activation, (scale, zp, type) or None, nodes, output tensor) after the node's output."""
    users = wg.users(y)
    relu = None
    if len(users) == 1 and users[0].op_type == "Relu" and y not in wg.graph_outputs:
        relu, y2 = users[0], users[0].output[0]
        users = wg.users(y2)
    else:
        y2 = y
    if len(users) == 1 and users[0].op_type == "QuantizeLinear" and y2 not in wg.graph_outputs:
        q = users[0]
        dqs = wg.users(q.output[0])
        if len(dqs) == 1 and dqs[0].op_type == "DequantizeLinear" \
                and q.output[0] not in wg.graph_outputs:
            dq = dqs[0]
            p = _qparams(wg, q)
            # a pair that also quantizes the input of a later unit stays for that unit
            feeds_unit = any(u.op_type in ("Conv", "MatMul", "Gemm") for u in wg.users(dq.output[0]))
            if p is not None and p == _qparams(wg, dq) and not feeds_unit:
                out, nodes = dq.output[0], [q, dq]
                after = wg.users(out)
                if relu is None and len(after) == 1 and after[0].op_type == "Relu" \
                        and out not in wg.graph_outputs:
                    relu, out = after[0], after[0].output[0]
                    nodes.append(relu)
                return ("relu" if relu else "none"), p, ([relu] if relu and relu not in nodes
                                                         else []) + nodes, out
    return None


def _fuse(wg, n):
    a = attrs_of(n)
    if n.op_type == "Gemm" and (a.get("transA", 0) or a.get("alpha", 1.0) != 1.0
                                or a.get("beta", 1.0) != 1.0):
        return None
    unit = _input_unit(wg, n.input[0])
    if unit is None:
        return None
    x, (xs, xz, xt), in_nodes = unit
    if n.op_type == "Conv":
        axis = 0
    elif n.op_type == "Gemm":
        axis = 0 if a.get("transB", 0) else 1
    else:
        axis = 1
    wq = _weight(wg, n.input[1], axis)
    if wq is None or (n.op_type != "Conv" and wq[0].ndim != 2):
        return None
    w, ws, wdq = wq
    old = [n, wdq]
    bias = None
    if len(n.input) > 2 and n.input[2]:
        if n.op_type == "MatMul":
            return None
        bb = _bias(wg, n.input[2], (np.float32(xs) * ws).astype(np.float32))
        if bb is None:
            return None
        bias, bdq = bb
        old.append(bdq)
    y = n.output[0]
    out_unit = _output_unit(wg, y)
    extra = {}
    if out_unit is not None:
        act, (ys, yz, yt), chain, out = out_unit
    else:
        act, ys, yz, yt, chain, out = "none", 0.0, 0, "int8", [], y
        if n.op_type == "Conv":
            from edgeops.passes.fuse_conv_act import _activation
            act, extra, chain, out = _activation(wg, y)
    if n.op_type == "Gemm" and a.get("transB", 0):
        w = w.T
    pre = "x" if n.op_type == "Conv" else "a"
    ins = [x, wg.add_const(w.astype(np.float32), f"{n.name}.weight_int8"),
           wg.add_const(ws, f"{n.name}.weight_scale")]
    if bias is not None:
        ins.append(wg.add_const(bias.astype(np.float32), f"{n.name}.bias_int32"))
    q = {f"{pre}_scale": xs, f"{pre}_zero_point": xz, f"{pre}_type": xt, "y_scale": ys,
         "y_zero_point": yz, "y_type": yt}
    if n.op_type == "Conv":
        new = wg.node("QConvBnAct", ins, [out], n.name, EDGEOPS_DOMAIN, activation=act, **extra, **q)
        new.attribute.extend(n.attribute)
    else:
        new = wg.node("QMatMul", ins, [out], n.name, EDGEOPS_DOMAIN, activation=act, **q)
    if not wg.supported(new):
        return None
    old += chain
    # the input pair and shared weight DQs go only when nothing outside the unit reads them
    for t, node in ((n.input[1], wdq), *(((n.input[2], old[2]),) if bias is not None else ())):
        if not wg.only_feeds(t, [n]):
            old.remove(node)
    dq, qn = in_nodes
    if wg.only_feeds(dq.output[0], [n]):
        old.append(dq)
        if wg.only_feeds(qn.output[0], [dq]):
            old.append(qn)
    if any(not wg.only_feeds(t.output[0], old) for t in old if t.output[0] != out):
        return None
    return new, old
