"""The peer model: how long ONNX Runtime itself takes to run a node or a subgraph on a CPU or GPU
board, so that lowering can compare an edgeops kernel with the kernel it would replace.

ONNX Runtime runs every node as its own kernel: one pass over memory per node, intermediates
written to and re-read from off-chip memory, a fixed per-node cost. A fused ``ai.edgeops`` node
is costed as the unfused passes ORT would run in its place (after ORT's own default fusions:
Conv+BatchNorm+Relu/Clip/Sigmoid, LayerNormalization and the erf Gelu pattern are single ORT
kernels; GroupNorm + SiLU and SwiGLU's gating are not). Each pass takes::

    gemm pass:   max(flops / (peak x gemm_efficiency), bytes / (bandwidth x stream_efficiency))
    stream pass: max(flops / peak,                     bytes / (bandwidth x stream_efficiency))
    + op_overhead_s                         (view ops -- Reshape, Flatten, ... -- cost only this)

``peak`` is the board's rate for the dtype on the unit ORT uses (CPU: the SIMD unit of the big
cores times ``threads``; GPU: tensor cores for fp16/int8, CUDA cores for fp32), ``bandwidth``
the off-chip bandwidth, and the efficiencies and overhead come from the board's ``[peer]`` table
(on ``host`` the peak and the bandwidth are measured at load time; see ``boards/host.py``).
NPU boards have no ``[peer]`` table: ORT does not run there.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from edgeops.errors import BoardError

GEMM_OPS = {"Conv", "ConvBnAct", "MatMul", "Gemm", "ConvTranspose", "MatMulInteger",
            "QLinearConv", "QLinearMatMul", "ConvInteger"}
VIEW_OPS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout", "Constant",
            "ConstantOfShape", "Shape", "Size"}
TWO_READ_OPS = {"GroupNormalization", "InstanceNormalization"}
# activation -> extra ORT element-wise passes after a fused Conv (FusedConv takes the rest)
_CONV_ACT_PASSES = {"silu": ("Sigmoid", "Mul"), "gelu": ("Gelu",), "hardswish": ("HardSwish",)}


@dataclass(frozen=True)
class PeerPass:
    """One ORT kernel: what it computes and the bytes it moves off-chip."""
    node: str
    op: str
    kind: str            # gemm | stream | view
    flops: int
    bytes: int


@dataclass
class PeerEstimate:
    board: str
    latency_s: float
    passes: list[PeerPass]
    pass_latency_s: list[float]
    per_node_s: dict[str, float] = field(default_factory=dict)
    threads: int = 1

    def to_dict(self) -> dict:
        return {"board": self.board, "latency_s": self.latency_s, "threads": self.threads,
                "kernels": len(self.passes), "per_node_s": self.per_node_s,
                "passes": [{"node": p.node, "op": p.op, "kind": p.kind, "flops": p.flops,
                            "bytes": p.bytes, "latency_s": t}
                           for p, t in zip(self.passes, self.pass_latency_s)]}


def _nbytes(t, cast: dict | None = None) -> int:
    if t is None or t.nbytes is None:
        return 0
    if cast and t.dtype in cast:
        from edgeops.dtypes import itemsize
        return t.numel * itemsize(cast[t.dtype])
    return int(t.nbytes)


def peer_passes(node, cast: dict | None = None) -> list[PeerPass]:
    """The ORT kernels that run ``node`` (an ``edgeops.graph`` node), with flops and bytes."""
    op, name = node.op_type, node.name
    ins = [_nbytes(t, cast) for t in node.input_tensors]
    out = sum(_nbytes(t, cast) for t in node.output_tensors[:1])
    flops = int(node.flops)
    o = node.output_tensors[0] if node.output_tensors else None
    n = int(o.numel or 0) if o is not None else 0       # output elements
    if op in VIEW_OPS:
        return [PeerPass(name, op, "view", 0, 0)]
    x = ins[0] if ins else 0
    act = node.attrs.get("activation", "none") if op in ("ConvBnAct", "GroupNormAct") else "none"
    if op == "GroupNormAct":
        # GroupNormalization reads x twice (statistics, normalise); SiLU is Sigmoid then Mul
        passes = [PeerPass(name, "GroupNormalization", "stream", flops - 5 * n * (act == "silu"),
                           2 * x + sum(ins[1:]) + out)]
        if act == "silu":
            passes += [PeerPass(name, "Sigmoid", "stream", 4 * n, 2 * out),
                       PeerPass(name, "Mul", "stream", n, 3 * out)]
        return passes
    if op == "LayerNormGelu":
        return [PeerPass(name, "LayerNormalization", "stream", max(flops - 8 * n, 0),
                         x + sum(ins[1:]) + out),
                PeerPass(name, "Gelu", "stream", 8 * n, 2 * out)]
    if op == "SwiGLU":
        w = sum(ins[1:3])
        mm = flops - 6 * n
        biases = sum(ins[3:])
        return [PeerPass(name, "MatMul", "gemm", mm // 2, x + w // 2 + out),
                PeerPass(name, "MatMul", "gemm", mm // 2, x + w // 2 + out),
                PeerPass(name, "Sigmoid", "stream", 4 * n, 2 * out + biases),
                PeerPass(name, "Mul", "stream", n, 3 * out),
                PeerPass(name, "Mul", "stream", n, 3 * out)]
    kind = "gemm" if op in GEMM_OPS else "stream"
    # a group/instance norm reads x twice: statistics first, then normalise
    again = x if op in TWO_READ_OPS else 0
    passes = [PeerPass(name, op, kind, flops, sum(ins) + again + out)]
    for extra in _CONV_ACT_PASSES.get(act, ()):
        passes.append(PeerPass(name, extra, "stream", n, (3 if extra == "Mul" else 2) * out))
    return passes


def _rates(board, dtype: str, threads: int | None):
    """(peak flops/s for gemm passes, peak for stream passes, off-chip bytes/s, threads)."""
    if board.peer is None:
        raise BoardError(f"board {board.name!r} ({board.kind}) has no [peer] table: ONNX Runtime "
                         f"does not run there, so there is no peer kernel to compare with")
    from edgeops.simulator.hardware import from_board
    if "cuda" in board.targets:
        hw = from_board(board, "cuda")
        mats = [hw.matrix_unit, hw.vector_unit]
    else:
        hw = from_board(board, "neon" if "neon" in board.targets else None)
        mats = [hw.matrix_unit]

    def rate(u, per_core_cap):
        try:
            fpc = u.flops_per_cycle(dtype)
        except BoardError:
            return 0.0
        return fpc * u.hz * per_core_cap

    cores = hw.matrix_unit.cores
    use = cores if threads is None or hw.family == "gpu" else max(1, min(int(threads), cores))
    gemm = max(rate(u, use if u.cores == cores else u.cores) for u in mats)
    stream = rate(hw.vector_unit, use if hw.vector_unit.cores == cores else hw.vector_unit.cores) \
        or gemm
    off = board.offchip.name
    bw = max((p.bandwidth_bytes_per_s for p in board.paths if p.src == off), default=0.0)
    if gemm <= 0 or bw <= 0:
        raise BoardError(f"board {board.name!r}: no {dtype} rate or off-chip bandwidth for the peer model")
    return gemm, stream, bw, use


def pass_latency(p: PeerPass, board, gemm_peak: float, stream_peak: float, bw: float) -> float:
    peer = board.peer
    if p.kind == "view":
        return peer.op_overhead_s
    mem = p.bytes / (bw * peer.stream_efficiency)
    comp = p.flops / (gemm_peak * peer.gemm_efficiency) if p.kind == "gemm" else p.flops / stream_peak
    return max(mem, comp) + peer.op_overhead_s


def peer_latency(nodes_or_subgraph, board, *, threads: int | None = None, dtype: str | None = None,
                 cast: dict | None = None) -> PeerEstimate:
    """Predicted latency of ONNX Runtime running ``nodes_or_subgraph`` on ``board``.

    ``nodes_or_subgraph``: an ``edgeops.graph`` Graph, one node, a list of nodes or a list of
    :class:`PeerPass`. ``threads``: CPU threads ORT uses (default every big core). ``dtype``:
    the rate to use (default: the first node's input dtype, fp32 when unknown); ``cast``: a
    dtype map applied to tensor sizes (e.g. ``{"fp32": "fp16"}``).
    Precondition: the board has a ``[peer]`` table (CPU and GPU boards; BoardError otherwise).
    """
    from edgeops import boards
    board = boards.load(board)
    items = nodes_or_subgraph
    if hasattr(items, "nodes") and not isinstance(items, (list, tuple)):
        items = list(items.nodes)
    elif not isinstance(items, (list, tuple)):
        items = [items]
    passes: list[PeerPass] = []
    for it in items:
        passes.extend([it] if isinstance(it, PeerPass) else peer_passes(it, cast))
    if dtype is None:
        dtype = "fp32"
        for it in items:
            dts = [d for d in getattr(it, "input_dtypes", []) if d]
            if dts:
                dtype = {"uint8": "int8"}.get(dts[0], dts[0])
                break
        if cast:
            dtype = cast.get(dtype, dtype)
    gemm, stream, bw, used = _rates(board, dtype if dtype in ("fp32", "fp16", "int8") else "fp32",
                                    threads)
    lats = [pass_latency(p, board, gemm, stream, bw) for p in passes]
    per: dict[str, float] = {}
    for p, t in zip(passes, lats):
        per[p.node] = per.get(p.node, 0.0) + t
    return PeerEstimate(board.name, float(sum(lats)), passes, lats, per, used)
