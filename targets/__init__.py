"""Per-target kernels: ``ascend/`` (explicit-DMA programs on the NPU emulator), ``neon/`` (Numba
CPU kernels), ``cuda/`` (numba.cuda). Each target module registers into ``edgeops.registry``;
they are listed in ``edgeops.pipeline.targets.TARGETS`` as they land and imported from there,
each on its own: a package session imports only the targets its package uses."""
