"""Plots of simulator results as PNG files: rooflines, heatmaps over tile sizes, bar charts.

matplotlib is imported lazily (the ``plot`` extra) with the Agg backend, so nothing here needs a
display, and importing ``edgeops.simulator`` never loads it.
"""
from __future__ import annotations

import math
import os

from edgeops.errors import EdgeOpsError


def _plt():
    try:
        import matplotlib
    except ImportError:
        raise EdgeOpsError("plotting needs matplotlib: pip install 'edgeops[plot]'") from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    return plt


def _save(fig, path) -> str:
    path = os.fspath(path)
    try:
        fig.savefig(path, dpi=120, bbox_inches="tight")
    except OSError as e:
        raise EdgeOpsError(f"cannot write the plot {path}: {e.strerror}") from None
    finally:
        import matplotlib.pyplot as plt
        plt.close(fig)
    return path


def roofs(board, dtype: str = "fp16", target: str | None = None) -> tuple[float, float, str]:
    """(peak flops/s of the matrix unit for ``dtype`` over all its cores, off-chip bytes/s, unit)."""
    from edgeops.errors import BoardError
    from edgeops.simulator.hardware import from_board
    hw = from_board(board, target)
    peak, name = 0.0, hw.matrix_unit.name
    for u in (hw.matrix_unit, *hw.matrix_alts, hw.vector_unit):
        try:
            r = u.flops_per_cycle(dtype) * u.hz * u.cores
        except BoardError:
            continue
        if r > peak:
            peak, name = r, u.name
    off = board.offchip.name
    bw = max((p.bandwidth_bytes_per_s for p in board.paths if p.src == off), default=0.0)
    return peak, bw, name


def roofline(points: list[dict], board, path, *, dtype: str = "fp16", title: str = "",
             target: str | None = None) -> str:
    """Roofline PNG: each point {label, flops, offchip_bytes, latency_s} at (flops / off-chip
    byte, flops / latency) under the board's compute roof and off-chip bandwidth slope."""
    plt = _plt()
    peak, bw, unit = roofs(board, dtype, target)
    pts = [p for p in points if p.get("flops") and p.get("latency_s") and p.get("offchip_bytes")]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ai = [p["flops"] / p["offchip_bytes"] for p in pts]
    lo = min([0.1] + [a / 4 for a in ai])
    hi = max([4 * peak / bw if bw else 100.0] + [a * 4 for a in ai])
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(xs, [min(peak, x * bw) for x in xs], color="black", lw=1.5,
            label=f"roof: {peak / 1e12:.2f} TFLOP/s ({unit}, {dtype}), {bw / 1e9:.0f} GB/s")
    for p, a in zip(pts, ai):
        ax.scatter([a], [p["flops"] / p["latency_s"]], s=28, zorder=3)
        ax.annotate(p.get("label", ""), (a, p["flops"] / p["latency_s"]), fontsize=7,
                    xytext=(3, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per off-chip byte)")
    ax.set_ylabel("achieved FLOP/s (FLOPs / predicted latency)")
    ax.set_title(title or f"roofline on {board.name}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return _save(fig, path)


def heatmap(grid, path, *, title: str = "", value: str = "offchip_bytes") -> str:
    """Heatmap PNG of a :class:`edgeops.tiling.grid.Grid` (log10 of the value; white = illegal)."""
    import numpy as np
    plt = _plt()
    z = np.asarray(getattr(grid, value), float)
    with np.errstate(divide="ignore", invalid="ignore"):
        lz = np.log10(z)
    fig, ax = plt.subplots(figsize=(7, 5.5))
    im = ax.imshow(lz, origin="lower", aspect="auto", cmap="viridis_r")
    ax.set_xticks(range(len(grid.xs)), [str(v) for v in grid.xs], rotation=90, fontsize=7)
    ax.set_yticks(range(len(grid.ys)), [str(v) for v in grid.ys], fontsize=7)
    ax.set_xlabel(f"{grid.level} tile {grid.x_dim}")
    ax.set_ylabel(f"{grid.level} tile {grid.y_dim}")
    bx, by = grid.best
    ix = int(np.argmin(np.abs(np.asarray(grid.xs) - bx)))
    iy = int(np.argmin(np.abs(np.asarray(grid.ys) - by)))
    ax.scatter([ix], [iy], marker="*", s=160, color="red", label=f"tiling ({bx}, {by})")
    ax.legend(fontsize=8, loc="upper right")
    unit = "bytes" if value == "offchip_bytes" else "s"
    fig.colorbar(im, ax=ax, label=f"log10 {value.replace('_', ' ')} ({unit})")
    ax.set_title(title or f"{value.replace('_', ' ')}: {grid.op} on {grid.board}", fontsize=8)
    return _save(fig, path)


def bars(groups: dict[str, dict[str, float]], path, *, ylabel: str, title: str = "",
         log: bool = False) -> str:
    """Grouped bar chart: {group: {series: value}}."""
    plt = _plt()
    series = []
    for g in groups.values():
        for s in g:
            if s not in series:
                series.append(s)
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(groups) * max(1, len(series)) / 2), 4.5))
    w = 0.8 / max(1, len(series))
    for i, s in enumerate(series):
        xs = [j + i * w for j in range(len(groups))]
        ax.bar(xs, [g.get(s, math.nan) for g in groups.values()], w, label=s)
    ax.set_xticks([j + w * (len(series) - 1) / 2 for j in range(len(groups))], list(groups),
                  fontsize=8)
    if log:
        ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    return _save(fig, path)


def lines(series: dict[str, tuple[list, list]], path, *, xlabel: str, ylabel: str, title: str = "",
          logx: bool = False) -> str:
    """Line chart: {label: (xs, ys)}."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, (xs, ys) in series.items():
        ax.plot(xs, ys, marker="o", ms=3, label=label)
    if logx:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)
