"""NEON (Numba) CPU kernels: blocked/packed GEMM, Conv2D (im2col, depthwise, Winograd), fused
memory-bound chains, SwiGLU and INT8 GEMM/Conv.

The kernels are Numba ``njit`` functions compiled for the machine they run on: AVX-512/AVX2 on
the x86 test host, NEON (``fmla v.4s``) on Cortex-A boards; only the micro-kernel shape differs
(``_microkernel``). Tile sizes are runtime arguments (``blocking``; the planner's tiling reaches
the kernels that declare it through ``accepts_tiling``), compiled code is cached on
disk (``cache=True``), and importing this package compiles nothing.

Modules are imported explicitly (no directory scan); ``register`` puts every kernel in
``edgeops.registry`` under target "neon".
"""
from edgeops.targets.neon import _cache, _isa

_isa.apply()           # vector width (AVX-512 hosts), before Numba builds its code generator
_cache.ensure_fresh()  # before any kernel module loads a possibly stale cache entry

from edgeops.targets.neon import (  # noqa: F401,E402
    _microkernel, _pack, _vmath, blocking, epilogue, gemm, conv, depthwise, winograd, chooser,
    eltwise, norms, pool, swiglu, qgemm, overrides,
)
from edgeops.targets.neon import register  # noqa: F401,E402  (registers the kernels)
from edgeops.targets.neon.blocking import accepts_tiling  # noqa: F401,E402  (edgeops.lower's hook)
from edgeops.targets.neon import register_int8  # noqa: F401,E402  (QDQ-unit int8 kernels)
from edgeops.targets.neon import simcost  # noqa: E402

chooser.set_cost_hook(simcost.simulator_cost)  # the chooser's pick: override, else the simulator

__all__ = ["accepts_tiling", "blocking", "chooser", "conv", "depthwise", "eltwise", "epilogue",
           "gemm", "norms", "pool", "qgemm", "simcost", "swiglu", "winograd"]
