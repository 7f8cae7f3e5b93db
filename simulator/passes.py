"""Fixed streaming passes: the extra kernels of a decomposition that are not tiled by the search.

im2col builds its column matrix, Winograd transforms its inputs and outputs, and on a separated
Ascend (910B) an activation FixPipe cannot apply reads the Cube's result back from GM through the
Vector core. Each such pass streams ``in_bytes`` (``inputs`` streams of equal size) from off-chip
through the vector profile's buffer and writes ``out_bytes`` back, double buffered, split over every
vector core: one kernel launch. ``pass_tile_bytes`` sizes its buffers; the Ascend emulator's pass
kernels take their tile from it too, so a pass the planner costs is one that fits.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from edgeops.simulator.nest import Move
from edgeops.simulator.tilemath import cdiv
from edgeops.simulator.timing import op_timing


@dataclass(frozen=True)
class PassResult:
    name: str
    hop_bytes: dict = field(hash=False)
    latency_s: float
    unit_busy_s: dict = field(hash=False)
    flops: int = 0

    @property
    def offchip_bytes(self) -> int:
        return int(sum(self.hop_bytes.values()))


PASS_BUFS = 2    # every queue of a pass is double buffered


def pass_tile_bytes(capacity: int, alignment: int, inputs: int = 1, outputs: int = 1) -> int:
    """Bytes of one buffer of a streaming pass: ``PASS_BUFS`` buffers per input and per output
    queue share the memory, each a whole number of ``alignment`` blocks.

    Precondition: the memory holds one aligned buffer per queue (ValueError otherwise).
    """
    queues = PASS_BUFS * (inputs + outputs)
    tile = capacity // queues // alignment * alignment
    if tile < alignment:
        raise ValueError(f"{queues} pass buffers of {alignment} B do not fit {capacity:,} B")
    return tile


def stream_pass(hw, name: str, in_bytes: int, out_bytes: int, flops: int, dtype: str,
                inputs: int = 1) -> PassResult:
    lvl = hw.levels("vector")[0]
    mem = hw.memory(lvl.memory_of("in"))
    tile = pass_tile_bytes(mem.capacity, mem.alignment, inputs)
    # each input queue moves its own share of in_bytes: tiles count the steps of the widest stream
    tiles = max(1, cdiv(max(cdiv(in_bytes, inputs), out_bytes), tile))
    off = hw.offchip.name
    moves = [Move("in", off, mem.name, 0, np.int64(in_bytes), np.int64(tiles * inputs),
                  np.int64(PASS_BUFS), tile),
             Move("out", mem.name, off, 0, np.int64(out_bytes), np.int64(tiles), np.int64(PASS_BUFS), tile,
                  "store")]
    u = hw.vector_unit
    cores = u.cores
    frac = cdiv(tiles, cores) / tiles
    compute = {u.name: (np.float64(flops), u.flops_per_cycle(dtype), u.hz, tiles)}
    t = op_timing(hw, moves, compute, core_frac=frac, active=min(cores, tiles), launches=1,
                  always_overlap=hw.family in ("cpu", "gpu"))
    return PassResult(name, {k: int(v) for k, v in t.hop_bytes.items()}, float(t.latency_s),
                      {k: float(v) for k, v in t.unit_busy_s.items()}, int(flops))
