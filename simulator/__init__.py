"""edgeops.simulator: hardware model from a board, closed-form traffic and timing of tiled ops.

Layering: this package imports ``edgeops.boards`` and the core only -- never ``edgeops.tiling``.
It works on plain numbers and numpy arrays (one entry per candidate tiling)::

    from_board(board, target=None) -> HardwareModel       (levels(profile, dtype), route, units)
    Nest / Operand / Window / Candidates                   a loop nest and a batch of its tilings
    evaluate_nest(hw, levels, nest, cand, dtype=..., view=GemmView(...)) -> Evaluation
        .hop_bytes {"src->dst": bytes}, .offchip_bytes, .latency_s, .timing.bound, .usage,
        .prediction(i) -> Prediction (JSON-able: bytes, offchip_bytes, cycles, latency_s,
                                      utilisation, bound)
    pipeline(stages) / queue_pipeline(stages, queues) / op_timing(...)   the timing model
    stream_pass(hw, name, in_bytes, out_bytes, flops, dtype) -> PassResult
    tilemath: classes / count / padded_sum / window_rows_clipped ...

Graph level (the tilings come from the caller: ``edgeops.tiling.graphsim.simulate_model`` plans
and calls these)::

    simulate_graph(graph, board, costs) -> GraphSim  per-node rows (model tiled|stream|view),
        launches, total latency, peak activation memory, .trace() (Chrome trace), .to_dict()
    plan_memory(steps, sizes, inputs, outputs) -> MemoryPlan   in-place reuse, views, arena
    peer_latency(nodes_or_subgraph, board) -> PeerEstimate     ONNX Runtime's own execution
    chrome_trace(rows, board)                                  ``edgeops.simulator.plot``: PNGs
    roofline: kernel_roof / board_roof (from the board file), place(points) -> why a point is
        above its roof, roofline_data (JSON), points_from_nodes(simulate rows)

The traffic conventions (what an emulator must reproduce byte for byte) are in ``nest.py`` and
``gemmview.py``; the timing model in ``timing.py``.
"""
from edgeops.simulator.evaluate import Evaluation, Prediction, evaluate_nest
from edgeops.simulator.gemmview import GEMM_PERMS, GemmView
from edgeops.simulator.hardware import (ACC_DTYPE, ELEM_BYTES, HardwareModel, Level, Link,
                                        Memory, UnitModel, from_board)
from edgeops.simulator.nest import Candidates, Move, Nest, NestEval, Operand, Window
from edgeops.simulator.passes import PassResult, stream_pass
from edgeops.simulator.timing import BOUNDS, Timing, op_timing, pipeline, queue_pipeline
from edgeops.simulator.graph import GraphSim, NodeCost, simulate_graph
from edgeops.simulator.memplan import MemoryPlan, Step, plan_memory
from edgeops.simulator.peer import PeerEstimate, PeerPass, peer_latency
from edgeops.simulator.trace import chrome_trace

__all__ = ["ACC_DTYPE", "BOUNDS", "Candidates", "ELEM_BYTES", "Evaluation", "GEMM_PERMS", "GemmView",
           "HardwareModel", "Level", "Link", "Memory", "Move", "Nest", "NestEval", "Operand",
           "PassResult", "Prediction", "Timing", "UnitModel", "Window", "evaluate_nest",
           "from_board", "op_timing", "pipeline", "queue_pipeline", "stream_pass",
           "GraphSim", "MemoryPlan", "NodeCost", "PeerEstimate", "PeerPass", "Step",
           "chrome_trace", "peer_latency", "plan_memory", "simulate_graph"]
