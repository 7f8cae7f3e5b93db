"""Accuracy analysis: SQNR and cosine similarity of quantized tensors and layer outputs against
the float model, and end-to-end; the greedy mixed-precision search that keeps the least
tolerant layers in float until the end-to-end SQNR reaches a target."""
from __future__ import annotations

import math

import numpy as np


class Agreement:
    """Accumulates signal and noise power (and the cosine terms) over batches."""

    def __init__(self):
        self.sig = self.noise = self.dot = self.xx = self.yy = 0.0

    def update(self, ref, got):
        x = np.asarray(ref, np.float64).reshape(-1)
        y = np.asarray(got, np.float64).reshape(-1)
        d = x - y
        # sums of products, not BLAS dot: OpenBLAS's threads stall for milliseconds per call
        # when the cores are busy (15 ms for 65536 elements on a loaded 2-core machine)
        self.sig += float(np.sum(x * x))
        self.noise += float(np.sum(d * d))
        self.dot += float(np.sum(x * y))
        self.xx += float(np.sum(x * x))
        self.yy += float(np.sum(y * y))
        return self

    @property
    def sqnr_db(self) -> float:
        return sqnr_db_from(self.sig, self.noise)

    @property
    def cosine(self) -> float:
        d = math.sqrt(self.xx * self.yy)
        return 1.0 if d == 0 and self.noise == 0 else (self.dot / d if d else 0.0)


class Top1:
    """How often the quantized model's arg-max class is the float model's, for an output that
    looks like class scores (N x C, C > 1); None for any other."""

    def __init__(self):
        self.same = self.total = 0
        self.applies = True

    def update(self, ref, got):
        ref, got = np.asarray(ref), np.asarray(got)
        if ref.ndim != 2 or ref.shape[1] < 2:
            self.applies = False
            return self
        self.same += int((ref.argmax(1) == got.argmax(1)).sum())
        self.total += ref.shape[0]
        return self

    @property
    def agreement(self):
        return self.same / self.total if self.applies and self.total else None


def sqnr_db_from(sig: float, noise: float) -> float:
    if noise == 0:
        return math.inf
    if sig == 0:
        return -math.inf
    return 10.0 * math.log10(sig / noise)


def sqnr_db(ref, got) -> float:
    """10 log10(sum ref^2 / sum (ref - got)^2)."""
    return Agreement().update(ref, got).sqnr_db


def cosine(ref, got) -> float:
    return Agreement().update(ref, got).cosine


def run_all(sess, batches, names=None):
    """Yield {output name: array} per batch."""
    names = names or [o.name for o in sess.get_outputs()]
    for b in batches:
        yield dict(zip(names, sess.run(names, b)))


def end_to_end(float_outs: list[dict], sess, batches, outputs: list[str]) -> dict[str, Agreement]:
    ag = {o: Agreement() for o in outputs}
    for ref, got in zip(float_outs, run_all(sess, batches, outputs)):
        for o in outputs:
            ag[o].update(ref[o], got[o])
    return ag


def e2e_sqnr(ag: dict[str, Agreement]) -> float:
    """One figure for several outputs: the worst."""
    return min(a.sqnr_db for a in ag.values())


def _finite(x: float):
    return x if math.isfinite(x) else (None if math.isnan(x) else (1e9 if x > 0 else -1e9))


def fmt_db(x) -> str:
    return "inf" if x is None or x >= 1e9 else f"{x:.2f}"


def jsonable(x: float):
    return _finite(float(x))


def plot_layers(layers: list[dict], path, title: str = "") -> None:
    """Per-layer bars: isolated and cumulative SQNR (dB), worst first."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = [r["node"] for r in layers]
    iso = [min(r["isolated_sqnr_db"] or 0, 100) for r in layers]
    cum = [min(r["cumulative_sqnr_db"] or 0, 100) for r in layers]
    fig, ax = plt.subplots(figsize=(max(6, 0.45 * len(names) + 2), 4.5))
    x = np.arange(len(names))
    ax.bar(x - 0.2, iso, 0.4, label="isolated (this layer only)")
    ax.bar(x + 0.2, cum, 0.4, label="cumulative (in the int8 model)")
    ax.set_xticks(x, names, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("SQNR (dB)")
    ax.set_title(title or "per-layer SQNR vs float, worst first")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
