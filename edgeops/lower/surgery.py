"""Model surgery for lowering: unique node names, the passes' provenance (which original nodes a
fused node replaces), and the lowered ModelProto (lowered nodes moved to ai.edgeops with their
kernel and tiling, unfused chains put back, producers the passes removed taken back)."""
from __future__ import annotations

import onnx
from onnx import helper

from edgeops.lower import LoweringError


def named(model):
    """A copy whose nodes all have unique names: the placement table, the passes' fusion records
    and the unfusing of chains refer to nodes by name."""
    from edgeops.graph.loader import _read
    m = _read(model, None)[0] if not isinstance(model, onnx.ModelProto) else _copy(model)
    seen: set[str] = set()
    for i, n in enumerate(m.graph.node):
        name = n.name or f"{n.op_type}_{i}"
        while name in seen:
            name += "_"
        n.name = name
        seen.add(name)
    return m


def _copy(m):
    c = onnx.ModelProto()
    c.CopyFrom(m)
    return c


def provenance(report) -> dict[str, tuple[str, ...]]:
    """{node after the passes: the original nodes it replaces}, replaying fusions in order (a
    ConvBnAct over a BatchNorm-folded Conv goes back to the Conv and the BatchNorm)."""
    out: dict[str, tuple[str, ...]] = {}
    for f in (report.fusions if report else []):
        srcs: list[str] = []
        for label in f.fused:
            name = label.rsplit(" (", 1)[0]
            srcs += out.get(name, (name,))
        for new in f.new_nodes:
            out[new] = tuple(dict.fromkeys(srcs))
    return out


def build(chosen, fused_model, src, opset, board=None):
    """The lowered ModelProto from [(graph node, placement)], and the source nodes it had to take
    back (producers of tensors an unfused chain reads that the passes had removed)."""
    from edgeops.ops import EDGEOPS_DOMAIN
    m = _copy(fused_model)
    g = m.graph
    nodes = []
    for n, p in chosen:
        proto = onnx.NodeProto()
        proto.CopyFrom(n.graph.model.graph.node[n.proto_index])   # unfused ones: from the source
        if p is not None and p.target:
            lowered(proto, n, p, opset, board)
        nodes.append(proto)
    inits = {t.name for t in g.initializer}
    src_inits = {t.name: t for t in src.model.graph.initializer}
    extra = []
    while True:       # tensors an unfused chain reads that the passes removed: take them back
        have = inits | {i.name for i in g.input} | {o for x in nodes for o in x.output}
        missing = [x for x in dict.fromkeys(i for x in nodes for i in x.input if i) if x not in have]
        if not missing:
            break
        for x in missing:
            if x in src_inits:
                g.initializer.append(src_inits[x])
                inits.add(x)
                continue
            sn = src.producer(x)
            if sn is None:
                raise LoweringError(f"internal: tensor {x!r} has no producer after lowering")
            proto = onnx.NodeProto()
            proto.CopyFrom(src.model.graph.node[sn.proto_index])
            nodes.insert(0, proto)
            extra.append(sn)
    del g.node[:]
    g.node.extend(_toposort(nodes))
    used = {i for x in g.node for i in x.input} | {o.name for o in g.output}
    keep = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(keep)
    alive = {o for x in g.node for o in x.output}
    vis = [v for v in g.value_info if v.name in alive]
    known = {v.name for v in vis}
    vis += [v for v in src.model.graph.value_info if v.name in alive and v.name not in known]
    del g.value_info[:]
    g.value_info.extend(vis)
    if any(x.domain == EDGEOPS_DOMAIN for x in g.node):
        if not any(o.domain == EDGEOPS_DOMAIN for o in m.opset_import):
            m.opset_import.append(helper.make_opsetid(EDGEOPS_DOMAIN, 1))
    else:
        keep_ops = [o for o in m.opset_import if o.domain != EDGEOPS_DOMAIN]
        del m.opset_import[:]
        m.opset_import.extend(keep_ops)
    return m, [n for n in extra if n.op_type not in ("Constant", "ConstantOfShape")]


def lowered(proto, n, p, opset, board=None) -> None:
    from edgeops.ops import EDGEOPS_DOMAIN
    proto.domain = EDGEOPS_DOMAIN
    if n.op_type == "Softmax" and not n.domain and opset < 13:   # its default axis was 1
        _set_attr(proto, "axis", -1)
    drop = {o for o in proto.output[1:]}
    if drop:
        outs = [proto.output[0]]
        del proto.output[:]
        proto.output.extend(outs)
    for a in ("kernel", "tiling"):
        v = getattr(p, a)
        if v:
            _set_attr(proto, a, v)
    if board:       # the board the node was lowered for: kernels that take ``board=`` get it
        _set_attr(proto, "board", board)


def _set_attr(proto, name, value) -> None:
    keep = [a for a in proto.attribute if a.name != name]
    del proto.attribute[:]
    proto.attribute.extend(keep + [helper.make_attribute(name, value)])


def _toposort(nodes):
    """Stable Kahn sort: the given order wherever the dependencies allow it."""
    import heapq
    produced = {o: i for i, x in enumerate(nodes) for o in x.output if o}
    users: dict[int, list[int]] = {}
    indeg = []
    for i, x in enumerate(nodes):
        deps = {produced[t] for t in x.input if t in produced and produced[t] != i}
        indeg.append(len(deps))
        for j in deps:
            users.setdefault(j, []).append(i)
    ready = [i for i, d in enumerate(indeg) if d == 0]
    heapq.heapify(ready)
    out = []
    while ready:
        i = heapq.heappop(ready)
        out.append(nodes[i])
        for u in users.get(i, []):
            indeg[u] -= 1
            if indeg[u] == 0:
                heapq.heappush(ready, u)
    if len(out) != len(nodes):
        raise LoweringError("internal: the lowered graph has a cycle")
    return out
