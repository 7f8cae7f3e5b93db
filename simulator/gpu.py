"""The GPU side of the simulator: occupancy, GEMM DRAM traffic naive vs tiled, host<->device
copies (Jetson: the ONNX Runtime bridge hands host arrays, so every cuda kernel call copies).

Plain numbers in, plain numbers out; nothing here imports ``edgeops.tiling`` (the caller reads the
tile sizes out of a ``Tiling``) or any CUDA library.

Occupancy is the standard CUDA calculation (the occupancy calculator of the CUDA toolkit,
``cudaOccupancyMaxActiveBlocksPerMultiprocessor``): resident blocks per SM are the minimum of the
warp, block, register and shared-memory limits. Allocation granularities are those of compute
capability 8.x: registers per warp in units of 256 (8 per thread), shared memory in 128-byte
units plus 1 KiB the runtime reserves per block.

GEMM traffic (fp32 unless ``elem_bytes`` says otherwise; C = M x N, reduction K):

- naive, one thread per output, no reuse through caches: every output reads a row of A and a
  column of B, ``(2 M N K + M N) * elem`` bytes — the upper bound the L2 can only improve.
- tiled with a bm x bn block tile staged in shared memory: A is read once per column of blocks,
  B once per row of blocks, C written once:
  ``(M K ceil(N / bn) + K N ceil(M / bm) + M N) * elem``; bk changes the staging, not the bytes.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

REG_ALLOC_UNIT = 256          # registers, per warp (cc 8.x)
SMEM_ALLOC_UNIT = 128         # bytes
SMEM_RESERVED_PER_BLOCK = 1024  # bytes the CUDA runtime keeps per block on cc 8.x


@dataclass(frozen=True)
class Occupancy:
    threads_per_block: int
    warps_per_block: int
    blocks_per_sm: int
    active_warps: int
    max_warps: int
    occupancy: float          # active warps / max warps per SM
    limiter: str              # warps | blocks | registers | shared_memory
    limits: dict              # each limit's blocks per SM

    def to_dict(self) -> dict:
        return asdict(self)


def occupancy(gpu, threads_per_block: int, smem_bytes_per_block: int = 0,
              registers_per_thread: int = 32) -> Occupancy:
    """Resident blocks and warps per SM for a kernel on ``gpu`` (a board's ``[gpu]`` limits).

    Preconditions (ValueError otherwise): 1 <= threads <= max_threads_per_block, registers <=
    max_registers_per_thread, shared memory <= shared_memory_per_block_bytes."""
    if not 1 <= threads_per_block <= gpu.max_threads_per_block:
        raise ValueError(f"block of {threads_per_block} threads: must be "
                         f"1..{gpu.max_threads_per_block}")
    if not 0 <= registers_per_thread <= gpu.max_registers_per_thread:
        raise ValueError(f"{registers_per_thread} registers per thread: at most "
                         f"{gpu.max_registers_per_thread}")
    if not 0 <= smem_bytes_per_block <= gpu.shared_memory_per_block_bytes:
        raise ValueError(f"{smem_bytes_per_block} bytes of shared memory per block: at most "
                         f"{gpu.shared_memory_per_block_bytes}")
    ws = gpu.warp_size
    wpb = math.ceil(threads_per_block / ws)
    max_warps = gpu.max_threads_per_sm // ws
    limits = {"warps": max_warps // wpb, "blocks": gpu.max_blocks_per_sm}
    if registers_per_thread > 0:
        regs_per_warp = math.ceil(registers_per_thread * ws / REG_ALLOC_UNIT) * REG_ALLOC_UNIT
        limits["registers"] = (gpu.registers_per_sm // regs_per_warp) // wpb
    else:
        limits["registers"] = limits["blocks"]
    if smem_bytes_per_block > 0:
        per_block = (math.ceil(smem_bytes_per_block / SMEM_ALLOC_UNIT) * SMEM_ALLOC_UNIT
                     + SMEM_RESERVED_PER_BLOCK)
        limits["shared_memory"] = gpu.shared_memory_per_sm_bytes // per_block
    else:
        limits["shared_memory"] = limits["blocks"]
    limiter = min(limits, key=lambda k: (limits[k], list(limits).index(k)))
    blocks = limits[limiter]
    return Occupancy(threads_per_block, wpb, blocks, blocks * wpb, max_warps,
                     blocks * wpb / max_warps, limiter, dict(limits))


def gemm_dram_bytes_naive(m: int, n: int, k: int, elem_bytes: int = 4) -> int:
    return (2 * m * n * k + m * n) * elem_bytes


def gemm_dram_bytes_tiled(m: int, n: int, k: int, bm: int, bn: int, elem_bytes: int = 4) -> int:
    """Precondition: bm, bn >= 1 (ValueError)."""
    if bm < 1 or bn < 1:
        raise ValueError(f"block tile {bm} x {bn}: both sizes must be >= 1")
    return (m * k * math.ceil(n / bn) + k * n * math.ceil(m / bm) + m * n) * elem_bytes


def tile_from_tiling(tiling) -> tuple[int, int, int]:
    """(bm, bn, bk) of a cuda tiling's ``smem`` level (a ``Tiling`` duck: ``.level(name)``)."""
    lv = tiling.level("smem")
    return lv.size("m"), lv.size("n"), lv.size("k")


def dram_bandwidth(board) -> float:
    """Bytes/s of the GPU's off-chip path (the path out of the off-chip memory into the L2)."""
    off = {m.name for m in board.memories if m.offchip}
    paths = [p for p in board.paths if p.src in off]
    gpu_paths = [p for p in paths if p.dst == "l2"] or paths
    if not gpu_paths:
        raise ValueError(f"board {board.name!r} has no path out of an off-chip memory")
    return max(p.bandwidth_bytes_per_s for p in gpu_paths)


def copy_seconds(board, nbytes: int) -> float:
    """Host<->device copy time of ``nbytes`` on a board with a ``[gpu]`` table."""
    if board.gpu is None:
        raise ValueError(f"board {board.name!r} has no [gpu] table")
    return nbytes / board.gpu.host_device_bandwidth_bytes_per_s


def fp32_peak_flops(board) -> float:
    sms = sum(c.count for c in board.cores if c.name == "sm")
    for u in board.units:
        if u.core == "sm" and "fp32" in u.flops_per_cycle:
            return sms * u.per_core * u.flops_per_cycle["fp32"] * board.clock_hz
    raise ValueError(f"board {board.name!r} has no fp32 unit on its SMs")


@dataclass(frozen=True)
class GemmCall:
    """One cuda GEMM call as the ORT bridge runs it: copy in, kernel, copy out."""
    dram_bytes: int
    copy_bytes: int
    copy_s: float
    dram_s: float
    compute_s: float
    launch_s: float
    latency_s: float
    bound: str

    def to_dict(self) -> dict:
        return asdict(self)


def gemm_call(board, m: int, n: int, k: int, tile: tuple[int, int] | None = None,
              elem_bytes: int = 4, copies: bool = True) -> GemmCall:
    """Predicted latency of a GEMM call on a Jetson: host->device copies of A and B, the kernel
    (roofline of DRAM traffic and fp32 FLOPs; ``tile=None`` is the naive kernel), the copy of C
    back, and one launch."""
    dram = (gemm_dram_bytes_naive(m, n, k, elem_bytes) if tile is None
            else gemm_dram_bytes_tiled(m, n, k, tile[0], tile[1], elem_bytes))
    cbytes = (m * k + k * n + m * n) * elem_bytes if copies else 0
    cs = copy_seconds(board, cbytes) if copies else 0.0
    ds = dram / dram_bandwidth(board)
    fs = 2.0 * m * n * k / fp32_peak_flops(board)
    return GemmCall(dram, cbytes, cs, ds, fs, board.launch_overhead_s,
                    cs + max(ds, fs) + board.launch_overhead_s, "memory" if ds >= fs else "compute")
