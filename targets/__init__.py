"""Per-target kernels: ``ascend/`` (explicit-DMA programs on the NPU emulator), ``neon/`` (Numba
CPU kernels), ``cuda/`` (numba.cuda). Each target module registers into ``edgeops.registry``;
they are imported here explicitly as they land."""

from edgeops.targets import ascend  # noqa: F401,E402  (registers the "ascend" kernels)
from edgeops.targets import neon  # noqa: F401,E402  (registers the "neon" kernels)
from edgeops.targets import cuda  # noqa: F401,E402  (registers the "cuda" kernels; CPU fallback without a GPU)
