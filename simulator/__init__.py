"""edgeops.simulator: hardware model from a board, closed-form traffic and timing of tiled ops.

Layering: this package imports ``edgeops.boards`` and the core only -- never ``edgeops.tiling``.
It works on plain numbers and numpy arrays (one entry per candidate tiling)::

    from_board(board, target=None) -> HardwareModel       (levels(profile, dtype), route, units)
    Nest / Operand / Window / Candidates                   a loop nest and a batch of its tilings
    evaluate_nest(hw, levels, nest, cand, dtype=..., view=GemmView(...)) -> Evaluation
        .hop_bytes {"src->dst": bytes}, .offchip_bytes, .latency_s, .timing.bound, .usage,
        .prediction(i) -> Prediction (JSON-able: bytes, offchip_bytes, cycles, latency_s,
                                      utilisation, bound)
    pipeline(stages) / op_timing(...)                      the timing model
    stream_pass(hw, name, in_bytes, out_bytes, flops, dtype) -> PassResult
    tilemath: classes / count / padded_sum / window_rows_clipped ...

The traffic conventions (what an emulator must reproduce byte for byte) are in ``nest.py`` and
``gemmview.py``; the timing model in ``timing.py``.
"""
from edgeops.simulator.evaluate import Evaluation, Prediction, evaluate_nest
from edgeops.simulator.gemmview import GEMM_PERMS, GemmView
from edgeops.simulator.hardware import (ACC_DTYPE, ELEM_BYTES, HardwareModel, Level, Link,
                                        Memory, UnitModel, from_board)
from edgeops.simulator.nest import Candidates, Move, Nest, NestEval, Operand, Window
from edgeops.simulator.passes import PassResult, stream_pass
from edgeops.simulator.timing import BOUNDS, Timing, op_timing, pipeline

__all__ = ["ACC_DTYPE", "BOUNDS", "Candidates", "ELEM_BYTES", "Evaluation", "GEMM_PERMS", "GemmView",
           "HardwareModel", "Level", "Link", "Memory", "Move", "Nest", "NestEval", "Operand",
           "PassResult", "Prediction", "Timing", "UnitModel", "Window", "evaluate_nest",
           "from_board", "op_timing", "pipeline", "stream_pass"]
