"""Ascend-style NPU target: operators lowered from a ``Tiling`` into explicit-DMA AI Core
programs (Ascend C style: MTE2/MTE1/FixPipe/MTE3 data movers, the Cube on 16x16x16 fractals,
the Vector unit on UB, queues with BUFFER_NUM 1 or 2, set_flag/wait_flag between pipes) and a
functional emulator that runs them on buffers of the board's exact sizes.

The emulator counts the bytes its DMA instructions move, per path, independently of the
analytic traffic model (``edgeops.simulator``) it keeps honest; its executed traces are
replayed by ``edgeops.simulator.replay`` for event-driven timing. Modules:

    machine    the board as the emulator sees it; EmulatorError
    isa        instructions and operand references        emulator   executes them
    program    queues, flags and the tiled loop nest       vector     what the Vector unit computes
    cube, gemm, conv   Cube programs (GEMM / implicit-GEMM Conv2D)
    stream     Vector programs (norms, softmax, element-wise, pooling)
    lower      op + tiling -> kernel launches               emulate    run them; emulate_op
    kernels    the registered ``ascend`` kernels            sweep      random legal tilings
"""
from edgeops.targets.ascend.emulate import DEFAULT_BOARD, emulate_op, execute, run_lowered
from edgeops.targets.ascend.machine import EmulatorError, machine
from edgeops.targets.ascend import kernels  # noqa: F401,E402  (registers the ascend kernels)
from edgeops.targets.ascend import register_int8  # noqa: F401,E402  (QConvBnAct / QMatMul)
from edgeops.targets.ascend.kernels import set_board

__all__ = ["DEFAULT_BOARD", "EmulatorError", "emulate_op", "execute", "machine", "run_lowered",
           "set_board"]
