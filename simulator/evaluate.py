"""One call from a tiled loop nest to traffic, buffer usage, compute and time (vectorised), and the
JSON-able :class:`Prediction` of a single tiling.

``evaluate_nest`` is what the tiling package's evaluator and search call; it knows nothing about
operators: the caller describes the op as a :class:`~edgeops.simulator.nest.Nest` (plus an
optional :class:`~edgeops.simulator.gemmview.GemmView` for the innermost level of an implicit
GEMM) and passes candidate tilings as arrays.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from edgeops.simulator.gemmview import view_moves
from edgeops.simulator import tilemath as tm
from edgeops.simulator.nest import Candidates, Move, Nest, NestEval
from edgeops.simulator.timing import BOUNDS, Timing, op_timing


@dataclass
class Evaluation:
    """Arrays over a batch of candidates."""
    moves: list[Move]
    usage: dict[tuple[str, str], list]      # (level, memory) -> [(role, tile bytes, buffers)]
    flops: dict[str, np.ndarray]            # unit -> flops executed (padding included)
    timing: Timing
    offchip_bytes: np.ndarray
    hop_bytes: dict[str, np.ndarray]

    @property
    def latency_s(self) -> np.ndarray:
        return self.timing.latency_s

    def prediction(self, i: int, useful_flops: int = 0) -> "Prediction":
        pick = lambda a: np.asarray(a).reshape(-1)[i] if np.ndim(a) else a
        util = self.timing.utilisation()
        units = self.timing.unit_busy_s
        return Prediction(
            bytes={k: int(pick(v)) for k, v in sorted(self.hop_bytes.items()) if int(pick(v))},
            offchip_bytes=int(pick(self.offchip_bytes)),
            cycles={u: float(pick(b)) * self._hz.get(u, 1.0) for u, b in units.items()},
            latency_s=float(pick(self.latency_s)),
            utilisation={u: float(pick(v)) for u, v in util.items()},
            bound=BOUNDS[int(pick(self.timing.bound))],
            flops=int(useful_flops),
            stage_busy_s={k: float(pick(v)) for k, v in self.timing.stage_busy_s.items()
                          if float(pick(v)) > 0},
        )

    _hz: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Prediction:
    """What the simulator predicts for one tiled operator (all figures for the whole op)."""
    bytes: dict[str, int]             # "src->dst" -> bytes, all cores
    offchip_bytes: int
    cycles: dict[str, float]          # unit -> busy cycles of the busiest core
    latency_s: float
    utilisation: dict[str, float]     # unit -> busy fraction of the latency
    bound: str                        # compute | dma | launch
    flops: int = 0                    # useful flops (no padding)
    stage_busy_s: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Prediction":
        return cls(**d)


def split_share(ev: NestEval, parts: dict) -> tuple:
    """(busiest core's share of the work, active cores) for a Cartesian split of level-0 loops."""
    frac, active = 1.0, 1
    for d, p in parts.items():
        t = ev.nt(0, d) if ev.ntiles else np.int64(1)
        p = np.maximum(np.asarray(p), 1)
        # the busiest core holds the first ceil(t/p) tiles (full ones): its share of the dim's
        # elements, not of its tiles (a ragged split 10 + 3 gives one core 10/13 of the work)
        size = ev.size[d]
        full = ev.g(d, ("eff", 0), lambda: ev.eff[0][d]) if ev.ntiles else np.int64(size)
        frac = frac * (np.minimum(-(-t // p) * full, size) / size)
        active = active * np.minimum(p, t)
    return frac, active


def evaluate_nest(hw, levels, nest: Nest, cand: Candidates, *, dtype: str, view=None,
                  view_tiles=None, view_order=None, view_bufs=None, view_index=None,
                  mac_unit: str = "matrix",
                  mac_granules: dict | None = None, mac_const: int = 1, mac_flops: int = 2,
                  vector_flops=0, vector_steps=1, launches: int = 1) -> Evaluation:
    """Evaluate a batch of tilings of ``nest`` on ``levels`` (from ``hw.levels(profile, dtype)``).

    With ``view`` the last level is the GEMM view (``view_tiles`` = {m, n, k} arrays,
    ``view_order`` indexes ``gemmview.GEMM_PERMS``); ``cand`` then tiles the levels above it.
    ``mac_unit`` (matrix/vector/None) executes ``mac_flops`` per padded multiply-accumulate;
    ``vector_flops`` more run on the vector unit (epilogues, element-wise work).

    Preconditions: every tile size >= 1; ``cand.tiles`` has one dict per level of ``levels``
    (without the view level), each with every nest dim; every operand role a level holds maps
    to a memory of ``hw``; the units have a rate for ``dtype`` (BoardError otherwise).
    """
    nest_levels = levels[:-1] if view is not None else levels
    ev = NestEval(nest, cand, nest_levels, hw.offchip.name)
    moves = ev.moves()
    usage: dict = {}
    for j, lvl in enumerate(nest_levels):
        for mem, entries in ev.capacity(j).items():
            usage.setdefault((lvl.name, mem), []).extend(entries)
    granules = mac_granules or {}
    if view is not None:
        vm, cap, macs, steps = view_moves(view, ev, len(nest_levels), view_tiles, view_order,
                                          view_bufs or {}, levels[-1], granules, view_index)
        moves += vm
        for mem, entries in cap.items():
            usage.setdefault((levels[-1].name, mem), []).extend(entries)
    else:
        macs = ev.compute_macs(granules, mac_const)
        steps = ev.steps()
    frac, active = split_share(ev, cand.parts)
    compute, flops, hz = {}, {}, {}
    if mac_unit:
        u = hw.unit(mac_unit, dtype)
        flops[u.name] = macs * mac_flops
        compute[u.name] = (flops[u.name], u.flops_per_cycle(dtype), u.hz, steps)
        hz[u.name] = u.hz
    if np.any(np.asarray(vector_flops) > 0):
        u = hw.vector_unit
        prev = compute.get(u.name)
        vf = np.asarray(vector_flops)
        if prev:   # same unit: fold the extra work into its busy time
            compute[u.name] = (prev[0] + vf, prev[1], prev[2], prev[3])
        else:
            compute[u.name] = (vf, u.flops_per_cycle(dtype), u.hz, vector_steps)
        flops[u.name] = flops.get(u.name, 0) + vf
        hz[u.name] = u.hz
    overlap = hw.family == "cpu"
    occupancy = None
    if hw.family == "gpu":
        occupancy = gpu_occupancy(hw, usage)
        overlap = occupancy >= 2          # another resident block hides this one's loads
    timing = op_timing(hw, moves, compute, core_frac=frac, active=active, launches=launches,
                       always_overlap=overlap)
    off = hw.offchip.name
    offchip = sum((b for k, b in timing.hop_bytes.items() if off in k.split("->")), np.int64(0))
    ev_out = Evaluation(moves, usage, flops, timing, offchip, timing.hop_bytes)
    ev_out._hz = hz
    ev_out.nest_eval = ev
    ev_out.occupancy = occupancy
    return ev_out


def gpu_occupancy(hw, usage) -> np.ndarray:
    """Thread blocks resident per SM: limited by the board's [gpu] block count, shared memory
    per SM and the register file (the block's accumulators, 4-byte registers)."""
    g = hw.board.gpu
    smem = regs = 0
    for (_, mem), entries in usage.items():
        m = hw.memory(mem)
        tot = sum(n * tm.roundup(b, m.alignment) for _, b, n in entries)
        if mem == "reg":
            regs = regs + tot
        else:
            smem = smem + tot
    occ = np.minimum(g.max_blocks_per_sm, g.shared_memory_per_sm_bytes // np.maximum(smem, 1))
    return np.minimum(occ, (g.registers_per_sm * 4) // np.maximum(regs, 1))
