"""Ascend-style NPU target: explicit-DMA programs on a functional emulator."""
