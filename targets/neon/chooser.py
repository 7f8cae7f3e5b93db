"""Which decomposition runs a Conv2D: im2col+GEMM, direct depthwise, or Winograd F(2x2,3x3).

Order of authority:

1. the measured override table for the board (``OVERRIDES[board][signature]``, filled by
   ``benchmarks/neon_conv_chooser.py --write`` or by hand);
2. the simulator's cost through the cost hook (``set_cost_hook``); importing
   ``edgeops.targets.neon`` installs ``simcost.simulator_cost``: the simulator's predicted latency
   (board CPU model) of the planner's best tiling per decomposition;
3. the built-in model ``estimate``, for shapes the planner cannot express (or no hook): GEMM
   time from its micro-tile count (ragged and short
   dimensions cost what they waste) plus per-element costs of the data-movement passes (im2col,
   Winograd transforms, depthwise taps), measured on the host and scaled by the board's peak.

The model is deliberately simple and documented so the chooser benchmark can say how often it
picks the measured fastest (``benchmarks/neon_conv_chooser.py``).
"""
from __future__ import annotations

from typing import Callable

from edgeops.targets.neon import winograd
from edgeops.targets.neon._microkernel import MR, NR
from edgeops.threads import num_threads
from edgeops.targets.neon.conv import ConvGeom

IM2COL, DEPTHWISE, WINOGRAD = "im2col", "depthwise", "winograd"
DECOMPOSITIONS = (IM2COL, DEPTHWISE, WINOGRAD)

# board name -> {signature: decomposition}; see signature(). Seeded from the measured table in
# overrides.py (a copy: tests and callers may edit this one freely)
from edgeops.targets.neon.overrides import OVERRIDES as _MEASURED  # noqa: E402

OVERRIDES: dict[str, dict[str, str]] = {b: dict(t) for b, t in _MEASURED.items()}
_COST_HOOK: Callable[[ConvGeom, str, object], float | None] | None = None

# Host figures (AMD EPYC Zen 4, one core, measured with benchmarks/neon_*.py), also the
# fallbacks when a board lacks a figure. Per-element costs are seconds on this host.
_PEAK_FLOPS = 1.15e11   # fp32 micro-kernel in L1
_BW = 2.0e10
_GEMM_EFF = 0.85        # packed GEMM / micro-kernel peak at large sizes
_T_TILE = 2.0e-8        # fixed cost per MR x NR micro-tile (store, epilogue, set-up)
_T_COPY = 4.0e-10       # im2col / padded-plane copy, per element
_T_WINO_IN = 7.5e-10    # Winograd input transform, per transformed value
_T_WINO_OUT = 2.5e-10   # Winograd output transform, per transformed value
_T_EPI = 2.0e-11        # bias + activation in the GEMM store, per output
_T_DW_TAP = 1.0e-10     # direct depthwise, per multiply-add (row-vectorised)


def signature(g: ConvGeom) -> str:
    return (f"n{g.n}c{g.c}h{g.h}w{g.w}k{g.k}r{g.r}s{g.s}g{g.group}"
            f"st{g.sh}x{g.sw}d{g.dh}x{g.dw}p{g.ph}x{g.pw}")


def set_cost_hook(fn: Callable[[ConvGeom, str, object], float | None] | None) -> None:
    """Install ``fn(geom, decomposition, board) -> seconds or None`` (None: no opinion). The
    simulator registers its per-decomposition latency here."""
    global _COST_HOOK
    _COST_HOOK = fn


def cost_hook() -> Callable[[ConvGeom, str, object], float | None] | None:
    return _COST_HOOK


def candidates(g: ConvGeom) -> list[str]:
    out = [IM2COL]
    if g.is_depthwise:
        out.append(DEPTHWISE)
    if winograd.applies(g) is True:
        out.append(WINOGRAD)
    return out


def _board_figures(board) -> tuple[float, float, int]:
    """(fp32 peak FLOP/s of one core, off-chip bandwidth B/s, cores) from a Board, or defaults."""
    try:
        unit = max(board.units, key=lambda u: u.flops_per_cycle.get("fp32", 0.0))
        peak = unit.flops_per_cycle.get("fp32", 0.0) * unit.per_core * board.clock_hz
        off = next(m.name for m in board.memories if m.offchip)
        bw = max(p.bandwidth_bytes_per_s for p in board.paths if off in (p.src, p.dst))
        cores = max(c.count for c in board.cores)
        return (peak or _PEAK_FLOPS), (bw or _BW), cores
    except Exception:  # noqa: BLE001 - no board / partial board: use the defaults
        return _PEAK_FLOPS, _BW, 1


def _gemm_time(batches: int, m: int, n: int, k: int, peak: float) -> float:
    """Packed-GEMM seconds as micro-tiles x (arithmetic of a full MR x NR x k tile + a fixed
    per-tile cost). The tile count captures ragged/short M and N (a 16-column GEMM wastes half of
    a 32-wide tile), the fixed cost captures short K (store, epilogue, loop set-up)."""
    tiles = batches * (-(-m // MR)) * (-(-n // NR))
    return tiles * (2.0 * MR * NR * k / (peak * _GEMM_EFF) + _T_TILE)


def estimate(g: ConvGeom, decomposition: str, board=None, threads: int = 1) -> float:
    """Model seconds for one decomposition (the documented fallback cost). Per-element costs of
    the data-movement passes were measured on the host and are scaled by the board's fp32 peak
    relative to the host's (they are instruction-bound loops, not DRAM-bound)."""
    peak, bw, cores = _board_figures(board)
    scale = _PEAK_FLOPS / peak
    par = max(1, min(threads, cores))
    peak *= par
    p_out = g.n * g.oh * g.ow
    if decomposition == DEPTHWISE:
        taps = g.n * g.k * g.oh * g.ow * g.r * g.s
        return (taps * _T_DW_TAP + g.n * g.c * g.h * g.w * _T_COPY) * scale / par
    if decomposition == WINOGRAD:
        tiles = g.n * ((g.oh + 1) // 2) * ((g.ow + 1) // 2)
        trans = 16 * tiles * (g.c * _T_WINO_IN + g.k * _T_WINO_OUT) * scale / par
        return _gemm_time(16, g.k, tiles, g.c, peak) + trans
    cols = 0 if g.is_pointwise else g.n * g.cg * g.group * g.r * g.s * g.oh * g.ow
    return (_gemm_time(g.n * g.group, g.kg, g.oh * g.ow, g.cg * g.r * g.s, peak)
            + cols * _T_COPY * scale / par + p_out * g.k * _T_EPI * scale / par)


def choose(g: ConvGeom, board=None, threads: int = 1) -> tuple[str, str]:
    """(decomposition, why) for a conv on a board (a Board or a board name)."""
    cands = candidates(g)
    name = getattr(board, "name", board)
    if isinstance(board, str):
        try:
            from edgeops import boards
            board = boards.load(board)
        except Exception:  # noqa: BLE001 - unknown board: the estimate uses defaults
            board = None
    if name in OVERRIDES and signature(g) in OVERRIDES[name]:
        pick = OVERRIDES[name][signature(g)]
        if pick in cands:
            return pick, f"measured override for {name}"
    costs = {}
    if _COST_HOOK is not None:
        for c in cands:
            t = _COST_HOOK(g, c, board)
            if t is not None:
                costs[c] = float(t)
        if len(costs) == len(cands):
            best = min(costs, key=costs.get)
            return best, f"simulator cost {costs[best]:.3g} s"
    costs = {c: estimate(g, c, board, threads) for c in cands}
    best = min(costs, key=costs.get)
    others = ", ".join(f"{c} {t:.3g}s" for c, t in sorted(costs.items(), key=lambda kv: kv[1]))
    return best, f"cost model ({others})"


def _choose_cached(g: ConvGeom, board, threads: int) -> str:
    """choose() per (shape, board, threads), memoised: its board lookup and estimates are a
    noticeable share of a 1x1 conv. Keyed on the override table and hook too, so changing them
    takes effect."""
    key = (g, getattr(board, "name", board), threads, id(_COST_HOOK),
           tuple(sorted(OVERRIDES.get(getattr(board, "name", board), {}).items())))
    hit = _CHOICES.get(key)
    if hit is None:
        if len(_CHOICES) > 4096:
            _CHOICES.clear()
        hit = _CHOICES[key] = choose(g, board, threads)[0]
    return hit


_CHOICES: dict[tuple, str] = {}


def conv2d(x, w, b, g: ConvGeom, act=(0, 0.0, 0.0), method: str | None = None, board=None,
           blocking=None, tiling=None):
    """Run a conv with the chosen (or the given) decomposition."""
    from edgeops.errors import EdgeOpsError
    from edgeops.targets.neon.conv import conv2d_im2col
    from edgeops.targets.neon.depthwise import conv2d_depthwise
    if method is None:
        method = _choose_cached(g, board if board is not None else "host", num_threads())
    if method not in candidates(g):
        raise EdgeOpsError(f"neon conv: decomposition {method!r} does not apply to this conv; "
                           f"candidates: {candidates(g)}")
    if method == DEPTHWISE:
        return conv2d_depthwise(x, w, b, g, act)
    if method == WINOGRAD:
        return winograd.conv2d_winograd(x, w, b, g, act, blocking=blocking, tiling=tiling)
    return conv2d_im2col(x, w, b, g, act, blocking=blocking, tiling=tiling)
