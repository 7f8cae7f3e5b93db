"""Run an operator on the emulated NPU and hold the result against the simulator.

``execute`` runs the lowered kernels on given global-memory tensors and returns the outputs,
the bytes every DMA moved per path, and the event-driven replay of the executed traces.
``emulate_op`` is what ``edgeops simulate ... --emulate`` calls: random inputs, the emulator
next to the analytic prediction (bytes and cycles) and the error against the op's float64
numpy reference.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgeops.simulator.replay import Replayer, ReplayResult, combine
from edgeops.targets.ascend import reference as R
from edgeops.targets.ascend.emulator import Emulator
from edgeops.targets.ascend.lower import lower
from edgeops.targets.ascend.machine import machine

DEFAULT_BOARD = "ascend-910b"


@dataclass
class Result:
    output: np.ndarray
    bytes: dict                 # "src->dst" -> bytes moved, every kernel and core
    replay: ReplayResult        # the kernels one after another
    kernels: list               # (name, bytes, ReplayResult) per kernel
    instructions: int
    macs: int                   # Cube multiply-accumulates executed (fractal padding included)
    offchip: str = "gm"

    @property
    def offchip_bytes(self) -> int:
        return int(sum(v for k, v in self.bytes.items() if self.offchip in k.split("->")))


def execute(sp, tiling, board, gm: dict, *, progress=None, **kw) -> Result:
    """Run ``sp`` with ``tiling`` on ``board`` over the GM tensors in ``gm`` (see ``lower``);
    ``progress(done, total, what)`` as for :func:`run_lowered`."""
    m = machine(board)
    return run_lowered(m, lower(sp, tiling, m, gm, **kw), gm, progress=progress,
                       macs=int(getattr(sp, "flops", 0) // 2))


def run_lowered(m, low, gm: dict, progress=None, macs: int = 0) -> Result:
    """Run every launch of a lowered op, one after another, and replay their traces.
    ``progress(done, total, what)``, when given, hears of the multiply-accumulates done out of
    ``macs`` (the op's; long emulations are matrix ops) every few thousand instructions."""
    total: dict = {}
    kernels, instr, done_macs = [], 0, 0
    tick = None
    if progress is not None:
        def tick(n, k):
            progress(done_macs + k, max(macs, 1), f"{instr + n:,} instructions")
    for launch in low.launches:
        emu = Emulator(m, gm, outputs=launch.outputs, tick=tick)
        rp = Replayer(m.board, launch.programs.cores)
        for core, code in launch.programs:
            rp.add(emu.run(code, core))
            emu.traces.clear()        # replayed: the trace can go
        rep = rp.result()
        kernels.append((launch.name, dict(emu.bytes), rep))
        for k, v in emu.bytes.items():
            total[k] = total.get(k, 0) + v
        instr += emu.instructions
        done_macs += emu.macs
    return Result(gm[low.output], total, combine([k[2] for k in kernels]), kernels, instr,
                  done_macs, m.offchip)


def resolve_tiling(sp, board, tiling):
    """A Tiling from None (searched), "naive", a Tiling, its dict or its JSON text."""
    from edgeops import tiling as T
    decomp = "implicit_gemm" if sp.kind == "conv2d" else None
    if tiling is None or tiling == "auto":
        return T.search(sp, board, decomposition=decomp).best.tiling
    if tiling == "naive":
        return T.naive(sp, board, decomposition=decomp)
    if isinstance(tiling, str):
        return T.Tiling.from_json(tiling)
    if isinstance(tiling, dict):
        return T.Tiling.from_dict(tiling)
    return tiling


def emulate_op(space_or_spec, tiling=None, board=DEFAULT_BOARD, *, seed: int = 0,
               check: bool = True, progress=None) -> dict:
    """Emulate one operator and compare with the analytic model. Returns a JSON-able dict:
    ``emulated`` / ``predicted`` (``offchip_bytes``, ``bytes`` per path, ``cycles``,
    ``latency_s``), ``max_abs_error`` and ``max_rel_error`` (max |y - ref| over max |ref|) of
    the outputs against the float64 reference on random inputs. ``progress(done, total, what)``
    hears how far the emulation got (:func:`run_lowered`)."""
    from edgeops import tiling as T
    from edgeops.tiling.api import as_space
    sp = as_space(space_or_spec)
    til = resolve_tiling(sp, board, tiling)
    pred = T.predict(sp, board, til).prediction if check else None
    rng = np.random.default_rng(seed)
    gm, ref = R.inputs_and_reference(sp, rng)
    res = execute(sp, til, board, gm, progress=progress)
    y = np.asarray(res.output, np.float64).reshape(ref.shape)
    err = float(np.max(np.abs(y - ref))) if ref.size else 0.0
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    hz = machine(board).hz
    out = {
        "op": sp.signature, "board": machine(board).name, "tiling": til.to_dict(),
        "emulated": {"offchip_bytes": res.offchip_bytes, "bytes": dict(sorted(res.bytes.items())),
                     "cycles": res.replay.total_s * hz, "latency_s": res.replay.total_s,
                     "unit_cycles": res.replay.unit_cycles, "instructions": res.instructions,
                     "kernels": [{"name": n, "offchip_bytes": int(sum(v for k, v in b.items()
                                                                        if "gm" in k.split("->"))),
                                  "latency_s": r.total_s} for n, b, r in res.kernels]},
        "max_abs_error": err, "max_rel_error": err / scale if scale else err,
    }
    if pred is not None:
        out["predicted"] = {"offchip_bytes": pred.offchip_bytes, "bytes": dict(sorted(pred.bytes.items())),
                            "cycles": pred.latency_s * hz, "latency_s": pred.latency_s}
        mine = {k: v for k, v in res.bytes.items() if v}
        theirs = {k: v for k, v in pred.bytes.items() if v}
        out["paths_agree"] = mine == theirs
    return out
