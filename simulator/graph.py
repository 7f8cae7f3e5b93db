"""Graph-level simulation: a whole model on a board, node by node, on one stream.

Each node is costed by one of three models (the ``model`` field of its row):

* ``tiled`` -- the node has an iteration space and a tiling (from ``edgeops.tiling``'s planner):
  its :class:`~edgeops.simulator.evaluate.Prediction` with every launch of its kernels (the tiled
  kernel plus any fixed pass of its decomposition: im2col, Winograd transforms, an AIV epilogue).
  A fused ``ai.edgeops`` node is one such kernel: its intermediates never leave the chip, while
  the unfused chain it replaces is several nodes, each writing its output off-chip for the next
  to read back, each with its own launch.
* ``stream`` -- a data-movement node the planner does not tile (Transpose, Concat, Resize,
  Slice, ...): one streaming kernel that reads its activation inputs and writes its output at the
  board's off-chip bandwidth (:func:`~edgeops.simulator.passes.stream_pass`), one launch.
* ``view`` -- pure views and constants (Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout at
  inference, Shape, Constant): no kernel, no time; a view's output aliases its input's buffer.

Nodes run one after another (one kernel stream, as ONNX Runtime's sequential executor does), so
the total latency is the sum of the nodes'. The activation memory comes from
:mod:`edgeops.simulator.memplan` (views alias, element-wise ops reuse a dying input in place),
the timeline from :mod:`edgeops.simulator.trace`, and on CPU/GPU boards each row also carries
the ONNX Runtime peer estimate of the same node (:mod:`edgeops.simulator.peer`).

This module does not choose tilings (that is ``edgeops.tiling``, a layer above): the caller
passes the tiled nodes' predictions in; ``edgeops.tiling.graphsim.simulate_model`` does both.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from edgeops.simulator.evaluate import Prediction
from edgeops.simulator.memplan import MemoryPlan, Step, plan_memory
from edgeops.simulator.passes import stream_pass

VIEW_OPS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"}
CONST_OPS = {"Constant", "ConstantOfShape", "Shape", "Size"}
# read as much as they write: the input bytes a kernel touches are the output's
SLICING_OPS = {"Slice", "Gather", "GatherElements", "Split", "Crop"}
# element-wise ops whose output may take over the buffer of a same-size input
INPLACE_OPS = {"Relu", "Sigmoid", "Tanh", "Gelu", "Erf", "Clip", "LeakyRelu", "HardSigmoid",
               "HardSwish", "Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Exp", "Log", "Neg", "Abs",
               "Max", "Min", "BatchNormalization", "Cast", "Softplus", "Elu", "Selu", "Reciprocal",
               "QuantizeLinear", "DequantizeLinear"}
MODELS = ("tiled", "stream", "view")
COPY_TRACK = "copy host<->device"
BRIDGE_TRACK = "copy bridge"
_RATE_DTYPES = ("fp32", "fp16", "int8")


@dataclass
class NodeCost:
    """What one node costs; ``busy_s`` maps trace tracks (units, DMA engines) to seconds."""
    model: str
    latency_s: float = 0.0
    offchip_bytes: int = 0
    bound: str = "none"
    launches: int = 0
    flops: int = 0
    busy_s: dict = field(default_factory=dict)
    bytes: dict = field(default_factory=dict)
    decomposition: str | None = None
    tiling: dict | None = None
    tiling_desc: str = ""
    signature: str | None = None
    dtype: str | None = None
    note: str = ""
    cached: bool = False
    copy_s: float = 0.0         # bridge copies included in latency_s (see bridge_copies)
    copy_bytes: int = 0


def tiled_cost(pred: Prediction, *, launches: int = 1, **info) -> NodeCost:
    """A tiled node's cost from its prediction (``info``: decomposition, tiling, signature ...)."""
    busy = {u: float(f) * pred.latency_s for u, f in pred.utilisation.items() if f > 0}
    for k, v in pred.stage_busy_s.items():
        if not k.startswith("pass:") and v > 0:
            busy[f"dma {k}"] = float(v)
    return NodeCost("tiled", pred.latency_s, pred.offchip_bytes, pred.bound, launches, pred.flops,
                    busy, dict(pred.bytes), **info)


def stream_cost(hw, name: str, in_bytes: int, out_bytes: int, dtype: str | None,
                note: str = "") -> NodeCost:
    """One streaming kernel moving ``in_bytes`` + ``out_bytes`` off-chip (memory-bound estimate)."""
    dt = dtype if dtype in _RATE_DTYPES else "fp32"
    r = stream_pass(hw, name, int(in_bytes), int(out_bytes), 0, dt)
    busy = {u: float(b) for u, b in r.unit_busy_s.items() if b > 0}
    body = r.latency_s - hw.launch_s
    bound = "launch" if hw.launch_s > body else "dma"
    # only the hops that touch off-chip memory (on a CPU the same bytes also cross L3 -> L2)
    off = sum(v for k, v in r.hop_bytes.items() if hw.offchip.name in k.split("->"))
    return NodeCost("stream", r.latency_s, int(off), bound, 1, 0, busy, dict(r.hop_bytes),
                    dtype=dtype, note=note or "memory-bound estimate: bytes at the off-chip bandwidth")


CPU_TARGETS = ("neon",)


def bridge_copies(node, board, target: str | None, cast: dict | None = None) -> tuple[float, int]:
    """(seconds, bytes) of the copies one call of ``node`` makes through the ONNX Runtime Python
    bridge when it runs on ``target`` (:mod:`edgeops.ort.bridge`; the kernel's own time is
    separate):

    * ``cuda`` on a gpu-kind board: every input (weights too) host->device and every output
      device->host at ``[gpu] host_device_bandwidth_bytes_per_s``.
    * a CPU target (``neon``) on a CPU or GPU board: the bridge hands each activation input to
      Python as a numpy copy and copies each output back into ONNX Runtime's buffer (measured on
      the host: an ``ai.edgeops`` op returning its input costs about two of ONNX Runtime's
      Identity copies, benchmarks/ort_boundary.py); constant inputs are held in the process
      (:func:`edgeops.ort.prepare`) and do not cross. Each copy reads and writes its bytes at
      the bandwidth of the innermost memory level that holds both (:func:`copy_bandwidth`).
    * otherwise (NPU boards, whose emulator stands in for the device): nothing.
    """
    if target == "cuda":
        if board.kind == "gpu" and getattr(board, "gpu", None) is not None and \
                board.gpu.host_device_bandwidth_bytes_per_s > 0:
            nb = node_copy_bytes(node, cast)
            return nb / board.gpu.host_device_bandwidth_bytes_per_s, nb
        return 0.0, 0
    if target not in CPU_TARGETS or board.kind not in ("cpu", "gpu"):
        return 0.0, 0
    secs, total = 0.0, 0
    tensors = [t for t in node.input_tensors if t is not None and not t.is_const]
    for t in tensors + [t for t in node.output_tensors if t is not None]:
        nb = tensor_bytes(t, cast)
        if nb:
            secs += 2 * nb / copy_bandwidth(board, 2 * nb)
            total += nb
    return secs, total


def copy_bandwidth(board, working_set: int) -> float:
    """Bytes per second (read + write counted) of a CPU copy whose source and destination
    (``working_set`` bytes) sit in the innermost memory level that holds them: the bandwidth of
    the board's cache path out of that level (the host measures these as copies, boards/host.py),
    the off-chip path when no cache holds them (a per-core level holds one core's share)."""
    levels = sorted((m for m in board.memories if not m.offchip), key=lambda m: m.size_bytes)
    by_src = {p.src: p.bandwidth_bytes_per_s for p in board.paths if p.engine == "cache"}
    for m in levels:
        if m.size_bytes >= working_set and m.name in by_src:
            return by_src[m.name]
    off = board.offchip
    if off.name in by_src:
        return by_src[off.name]
    return min(p.bandwidth_bytes_per_s for p in board.paths)


def node_copy_bytes(node, cast: dict | None = None) -> int:
    """Bytes a bridge call of ``node`` copies: every input (weights too: the bridge hands them as
    host arrays) host->device, every output device->host."""
    ins = sum(tensor_bytes(t, cast) for t in node.input_tensors if t is not None)
    return ins + sum(tensor_bytes(t, cast) for t in node.output_tensors if t is not None)


def with_copies(c: NodeCost, nbytes: int, cs: float, track: str = COPY_TRACK) -> NodeCost:
    """``c`` with ``nbytes`` of bridge copies taking ``cs`` seconds added to its latency (and a
    ``track`` busy track); ``copy_s``/``copy_bytes`` record them."""
    from dataclasses import replace
    busy = dict(c.busy_s)
    if cs > 0:
        busy[track] = busy.get(track, 0.0) + cs
    return replace(c, latency_s=c.latency_s + cs, busy_s=busy, copy_s=c.copy_s + cs,
                   copy_bytes=c.copy_bytes + int(nbytes))


def view_cost(note: str) -> NodeCost:
    return NodeCost("view", note=note)


# ---- tensors ------------------------------------------------------------------------------

def tensor_bytes(t, cast: dict | None = None) -> int:
    """Bytes of tensor ``t`` as the board stores it (``cast`` maps dtypes, e.g. fp32 -> fp16)."""
    if t is None or t.numel is None or t.dtype is None:
        return 0
    from edgeops.dtypes import itemsize
    dt = (cast or {}).get(t.dtype, t.dtype)
    return int(t.numel) * itemsize(dt)


def run_dtype(dtype: str | None, cast: dict | None) -> str | None:
    return (cast or {}).get(dtype, dtype) if dtype else dtype


def _activation_inputs(node) -> list:
    return [t for t in node.input_tensors if t is not None and not t.is_const]


def untiled_cost(node, hw, cast: dict | None = None, reason: str = "") -> NodeCost:
    """``view`` or ``stream`` cost of a node the planner does not tile."""
    op = node.op_type
    if op in CONST_OPS or (node.inputs and not _activation_inputs(node)):
        return view_cost("constant: folded before execution")
    if op in VIEW_OPS:
        return view_cost(f"{op} is a view: no kernel, the output aliases the input buffer")
    outs = sum(tensor_bytes(t, cast) for t in node.output_tensors if t is not None)
    ins = outs if op in SLICING_OPS else sum(tensor_bytes(t, cast) for t in _activation_inputs(node))
    dt = run_dtype(next((t.dtype for t in node.output_tensors if t is not None and t.dtype), None), cast)
    note = "memory-bound estimate: bytes at the off-chip bandwidth" + (f" ({reason})" if reason else "")
    return stream_cost(hw, node.name, ins, outs, dt, note)


# ---- memory ------------------------------------------------------------------------------

def memory_steps(graph, costs: dict[str, NodeCost] | None = None) -> list[Step]:
    """The memplan schedule of ``graph``: views alias, same-size element-wise ops may go in place."""
    steps = []
    for n in graph.nodes:
        c = (costs or {}).get(n.name)
        if n.op_type in VIEW_OPS or (c is not None and c.model == "view" and n.op_type not in CONST_OPS):
            kind = "view"
        elif n.op_type in INPLACE_OPS:
            kind = "inplace"
        else:
            kind = "other"
        steps.append(Step(n.name, tuple(x for x in n.inputs if x), tuple(x for x in n.outputs if x),
                          kind))
    return steps


def plan_graph_memory(graph, cast: dict | None = None, costs=None, inplace: bool = True) -> MemoryPlan:
    """Activation memory of ``graph``: every non-constant tensor, sized as the board stores it."""
    sizes = {name: tensor_bytes(t, cast) for name, t in graph.tensors.items()
             if not t.is_const and t.numel is not None and t.dtype is not None}
    return plan_memory(memory_steps(graph, costs), sizes, [t.name for t in graph.inputs],
                       [t.name for t in graph.outputs], inplace=inplace)


# ---- the simulation ------------------------------------------------------------------------

@dataclass
class GraphSim:
    model: str
    board: str
    target: str
    rows: list[dict]
    memory: MemoryPlan | None
    cast: dict = field(default_factory=dict)
    peer: dict | None = None
    extra: dict = field(default_factory=dict)

    @property
    def total_latency_s(self) -> float:
        return float(sum(r["latency_s"] for r in self.rows))

    @property
    def offchip_bytes(self) -> int:
        return int(sum(r["offchip_bytes"] for r in self.rows))

    @property
    def launches(self) -> int:
        return int(sum(r["launches"] for r in self.rows))

    @property
    def peak_memory_bytes(self) -> int:
        return self.memory.peak_bytes if self.memory else 0

    def busy_s(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for r in self.rows:
            for k, v in r["busy_s"].items():
                out[k] = out.get(k, 0.0) + v
        return out

    def trace(self) -> dict:
        from edgeops.simulator.trace import chrome_trace
        return chrome_trace(self.rows, self.board, title=self.model)

    def to_dict(self) -> dict:
        counts = {m: sum(1 for r in self.rows if r["model"] == m) for m in MODELS}
        d = {"model": self.model, "board": self.board, "target": self.target,
             "total_latency_s": self.total_latency_s, "offchip_bytes": self.offchip_bytes,
             "launches": self.launches, "launch_s": float(sum(r["launch_s"] for r in self.rows)),
             "flops": int(sum(r["flops"] for r in self.rows)),
             "copy_s": float(sum(r.get("copy_s", 0.0) for r in self.rows)),
             "copy_bytes": int(sum(r.get("copy_bytes", 0) for r in self.rows)),
             "peak_memory_bytes": self.peak_memory_bytes,
             "arena_bytes": self.memory.arena_bytes if self.memory else 0,
             "peak_memory_node": (self.rows[self.memory.peak_step]["node"]
                                  if self.memory and self.rows else None),
             "busy_s": self.busy_s(), "counts": counts, "cast": self.cast,
             "memory": self.memory.to_dict() if self.memory else None,
             "peer": self.peer, "nodes": self.rows}
        d.update(self.extra)
        return d


def _row(name: str, op: str, c: NodeCost, start: float, launch_s: float) -> dict:
    return {"node": name, "op": op, "model": c.model, "signature": c.signature,
            "decomposition": c.decomposition, "tiling": c.tiling, "tiling_desc": c.tiling_desc,
            "dtype": c.dtype, "offchip_bytes": int(c.offchip_bytes), "latency_s": float(c.latency_s),
            "bound": c.bound, "launches": int(c.launches), "launch_s": launch_s * c.launches,
            "flops": int(c.flops), "start_s": start, "end_s": start + c.latency_s,
            "busy_s": dict(c.busy_s), "bytes": dict(c.bytes), "note": c.note, "cached": c.cached,
            "copy_s": float(c.copy_s), "copy_bytes": int(c.copy_bytes)}


def op_name(node) -> str:
    return f"{node.domain}::{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type


def simulate_graph(graph, board, costs: dict[str, NodeCost], *, target: str | None = None,
                   cast: dict | None = None, peer: bool = True, inplace: bool = True,
                   title: str | None = None, copies: bool = True) -> GraphSim:
    """Simulate ``graph`` on ``board``: ``costs`` gives the tiled nodes (node name ->
    :class:`NodeCost`); every other node gets :func:`untiled_cost`. ``cast`` maps the model's
    dtypes to the ones the board runs (sizes of stream nodes and of activations follow it).
    ``peer``: add ONNX Runtime's predicted latency per node (CPU/GPU boards). ``copies``: every
    node with a kernel also pays the copies of its call through ONNX Runtime's Python bridge
    (:func:`bridge_copies`: host<->device on the cuda target of a gpu-kind board, activations in
    and out on a CPU target; the row's ``copy_s``, included in its ``latency_s``)."""
    from edgeops import boards
    from edgeops.simulator.hardware import from_board
    board = boards.load(board)
    hw = from_board(board, target)
    cast = dict(cast or {})
    track = COPY_TRACK if hw.target == "cuda" else BRIDGE_TRACK
    rows, t = [], 0.0
    all_costs: dict[str, NodeCost] = {}
    for n in graph.nodes:
        c = costs.get(n.name) or untiled_cost(n, hw, cast)
        if copies and c.model != "view":
            cs, nb = bridge_copies(n, board, hw.target, cast)
            if nb:
                c = with_copies(c, nb, cs, track)
        all_costs[n.name] = c
        rows.append(_row(n.name, op_name(n), c, t, hw.launch_s))
        t += c.latency_s
    mem = plan_graph_memory(graph, cast, all_costs, inplace)
    peer_doc = None
    if peer and board.peer is not None:
        from edgeops.simulator.peer import peer_latency
        est = peer_latency(graph, board)
        for r in rows:
            r["peer_latency_s"] = est.per_node_s.get(r["node"], 0.0)
        peer_doc = {"engine": "onnxruntime", "latency_s": est.latency_s, "threads": est.threads,
                    "kernels": len(est.passes)}
    return GraphSim(title or getattr(graph, "source", "<model>"), board.name, hw.target, rows, mem,
                    cast, peer_doc)
