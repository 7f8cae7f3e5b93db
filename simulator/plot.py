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


def roofline(points: list[dict], board, path, *, dtype: str = "fp16", title: str = "",
             target: str | None = None, threads: int | None = None) -> str:
    """Roofline PNG: each point {label, flops, offchip_bytes, latency_s} at (flops / off-chip
    byte, flops / latency) under the roof of the kernels' cores and the board total (see
    ``edgeops.simulator.roofline``; rows of ``points_from_nodes`` also say why a point is above).
    A point above its roof is drawn hollow and its reason listed under the plot."""
    from edgeops.simulator.roofline import board_roof, kernel_roof, place
    plt = _plt()
    roof, total = kernel_roof(board, dtype, target, threads), board_roof(board, dtype)
    pts = place(points, roof, board)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    bw = roof.bytes_s
    lo = min([0.1] + [p.ai / 4 for p in pts])
    hi = max([4 * total.flops_s / bw if bw else 100.0] + [p.ai * 4 for p in pts])
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    for r, style in ((roof, dict(color="black", lw=1.5)), (total, dict(color="gray", lw=1, ls="--"))):
        ax.plot(xs, [r.at(x) for x in xs], **style,
                label=f"{r.label}: {_flops(r.flops_s)} ({dtype}), {bw / 1e9:.0f} GB/s")
    notes = []
    for p in pts:
        if p.above:
            notes.append(f"{p.label}: {p.reason}")
            ax.scatter([p.ai], [p.achieved], s=36, zorder=3, facecolors="none", edgecolors="red")
        else:
            ax.scatter([p.ai], [p.achieved], s=28, zorder=3)
        ax.annotate(p.label + (" *" if p.above else ""), (p.ai, p.achieved), fontsize=7,
                    xytext=(3, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per off-chip byte)")
    ax.set_ylabel("achieved FLOP/s (FLOPs / predicted latency)")
    ax.set_title(title or f"roofline on {board.name}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    if notes:
        fig.text(0.01, -0.02, "* above the roof: " + "\n".join(notes[:12])
                 + (f"\n... {len(notes) - 12} more" if len(notes) > 12 else ""),
                 fontsize=6, va="top", wrap=True)
    return _save(fig, path)


def _flops(v: float) -> str:
    return f"{v / 1e12:.2f} TFLOP/s" if v >= 1e12 else f"{v / 1e9:.1f} GFLOP/s"


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
