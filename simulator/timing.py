"""Timing of one tiled operator: DMA engines, compute units, pipelining, cores, launch.

Each :class:`~edgeops.simulator.nest.Move` is routed over the board's paths (a move between
memories without a direct path crosses the intermediate levels: DRAM -> L3 -> L2 on a CPU puts
the same bytes on both hops). A hop costs ``bytes / (bandwidth x burst efficiency) + setup x
transfers``, where burst efficiency ``run / roundup(run, burst)`` applies to hops touching the
off-chip memory (``run`` = contiguous bytes per row of the tile there). A move that lists its
burst classes (``Move.runs``: number of contiguous runs and bytes per run, per size class of tile)
is charged exactly that: ``sum n_runs * roundup(run, burst) / bandwidth`` -- as the replay charges
each transfer ``runs * roundup(bytes / runs, burst)`` (a conv output's ``ow`` rows, ragged tails). A shared link's bandwidth
is divided among the active cores. Hops that use the same engine (an NPU's MTE2 queue) serialise;
on CPUs and GPUs every hop is its own stage (caches and load units are separate hardware).

Pipelining. Stages are the engines and the compute unit; ``busy_i`` is the time of stage ``i``
and ``s_i = busy_i / steps_i`` its time per tile step. Fill and drain cost one step of every stage
but the ones a bound is made of. Two disciplines:

Queues (an NPU, where every engine is its own hardware: Ascend C ``TQue`` with BUFFER_NUM
buffers). Each on-chip buffer of an operand is a queue between the engine that writes it and the
one that reads it (GM -> L1 by MTE2 is read by MTE1; L0A/L0B and a UB input by the compute unit;
L0C and a UB output are written by the compute unit and read by FixPipe / MTE3). A writer only
waits for the reader of *its* buffer: with one buffer it cannot refill the buffer before the
reader is done with it, and the reader is paced by what follows it (its own output queues), so
a single-buffered queue costs ``busy_writer + max(busy of the reader and every stage downstream
of it)``; with two buffers writer and reader overlap::

    T = max(max_i busy_i + fill, max_{q: bufs_q = 1} (busy_w(q) + downstream_r(q)) + fill)

So a single-buffered copy-in/compute/copy-out pipeline with its own input and output queue gives
period 2T per tile (three equal stages: compute busy 1/2 of the time), not 3T: CopyOut(i) overlaps
CopyIn(i+1). Only when one buffer is held by all three stages (in-place compute: ``holders`` of
one queue = all three) is it 1/3. Double buffering approaches 1 as tiles grow in number.

Serial (CPUs and GPUs, where one thread/warp issues its loads, computes and stores in turn):
a stage whose buffers are all double buffered (or that the hardware prefetches) overlaps with the
others; every other stage runs in series with compute, forming one serial super-stage::

    T = max_i busy_i + sum_i s_i - s_argmax

Latency = launch overhead x launches + T on the busiest core.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgeops.errors import BoardError
from edgeops.simulator.tilemath import roundup

BOUNDS = ("compute", "dma", "launch")


@dataclass
class Timing:
    latency_s: np.ndarray
    bound: np.ndarray                       # index into BOUNDS
    stage_busy_s: dict[str, np.ndarray]     # engine/stage -> busy seconds (busiest core)
    unit_busy_s: dict[str, np.ndarray]
    hop_bytes: dict[str, np.ndarray]        # "src->dst" -> bytes (all cores)

    def utilisation(self) -> dict[str, np.ndarray]:
        return {u: b / np.maximum(self.latency_s, 1e-30) for u, b in self.unit_busy_s.items()}


def links_for(hw, src: str, dst: str):
    try:
        return hw.route(src, dst)
    except BoardError:
        # partial sums coming back (e.g. GM -> L0C on Ascend) use the figures of the way out
        back = hw.route(dst, src)
        return tuple(type(ln)(ln.dst, ln.src, ln.engine, ln.bandwidth, ln.setup_s, ln.burst,
                              ln.shared) for ln in reversed(back))


def hop_traffic(hw, moves) -> dict[str, np.ndarray]:
    """Bytes on every hop (``"src->dst"``), summed over operands and cores."""
    out: dict[str, np.ndarray] = {}
    for mv in moves:
        if mv.kind == "param":
            out[mv.key] = out.get(mv.key, 0) + mv.bytes
            continue
        for ln in links_for(hw, mv.src, mv.dst):
            out[ln.key] = out.get(ln.key, 0) + mv.bytes
    return out


def pipeline(stages: list[tuple]) -> np.ndarray:
    """Serial discipline. ``stages`` = (busy, steps, overlapped) per stage; the serial ones fold
    into one stage."""
    groups = []
    serial_busy, serial_steps = 0.0, 1
    for busy, steps, over in stages:
        if np.all(over):
            groups.append((busy, steps))
        elif not np.any(over):
            serial_busy = serial_busy + busy
            serial_steps = np.maximum(serial_steps, steps)
        else:
            groups.append((np.where(over, busy, 0.0), steps))
            serial_busy = serial_busy + np.where(over, 0.0, busy)
            serial_steps = np.maximum(serial_steps, np.where(over, 1, steps))
    groups.append((serial_busy, serial_steps))
    top_busy, top_step, step_sum = 0.0, 0.0, 0.0
    for busy, steps in groups:
        step = busy / np.maximum(steps, 1)
        step_sum = step_sum + step
        bigger = busy > top_busy
        top_busy = np.where(bigger, busy, top_busy)
        top_step = np.where(bigger, step, top_step)
    return top_busy + step_sum - top_step


def queue_pipeline(stages: dict, queues: list[tuple]) -> np.ndarray:
    """Queue discipline. ``stages``: name -> (busy, steps); ``queues``: (holders, bufs) per
    buffer, ``holders`` the stages that hold it in turn (writer first, reader last; three for an
    in-place buffer). Buffers bound how far a writer runs ahead of its reader, so the period is
    the largest cycle ratio of that graph: (sum of the holders' busy times) / buffers per queue,
    and each stage's own busy time (a chain of queues has no longer simple cycle: a stage
    further down paces a writer only through the queues in between, already counted)."""
    step = {k: b / np.maximum(st, 1) for k, (b, st) in stages.items()}
    step_sum = sum(step.values(), 0.0)
    best = 0.0
    for k, (b, _) in stages.items():                    # the busiest stage, plus fill and drain
        best = np.maximum(best, b + step_sum - step[k])
    for holders, bufs in queues:
        if np.all(np.asarray(bufs) >= 2) or any(h not in stages for h in holders):
            continue
        base, fill = 0.0, step_sum
        for h in holders[:-1]:
            base = base + stages[h][0]
            fill = fill - step[h]
        last_b, last_s = stages[holders[-1]][0], step[holders[-1]]
        t = base + last_b + fill - last_s
        best = np.where(np.asarray(bufs) >= 2, best, np.maximum(best, t))
    return best


def engine_queues(hw, moves, unit) -> list[tuple]:
    """The buffers of an NPU program as queues ((writer, reader), buffers): a load's buffer is
    written by its engine and read by the engine that moves it on (L1 -> L0 by MTE1), else by the
    compute unit ``unit``; a store's buffer is written by ``unit`` and read by the store engine
    (a reload of partial sums is the same L0C queue, read by the Cube)."""
    eng = lambda mv: [ln.engine for ln in links_for(hw, mv.src, mv.dst)]
    onward = {}
    for mv in moves:
        if mv.kind == "load" and mv.src != hw.offchip.name:
            onward.setdefault((mv.src, mv.role), eng(mv)[0])
    qs: dict = {}
    for mv in moves:
        if mv.kind == "param":
            continue
        if mv.kind == "load":
            key, pair = (mv.dst, mv.role), (eng(mv)[-1], onward.get((mv.dst, mv.role), unit))
        elif mv.kind == "reload":
            continue                  # the store's queue (same buffer, same two stages)
        else:
            key, pair = (mv.src, mv.role), (unit, eng(mv)[0])
        if pair[0] is None or pair[1] is None or pair[0] == pair[1]:
            continue
        old = qs.get(key)
        qs[key] = (pair, np.asarray(mv.bufs) if old is None else np.minimum(old[1], mv.bufs))
    return list(qs.values())


def op_timing(hw, moves, compute: dict[str, tuple], *, core_frac, active, launches=1,
              always_overlap=False) -> Timing:
    """Time one operator.

    ``compute``: unit name -> (flops executed (padded), flops per cycle per core, hz, steps);
    the first unit is in series with the serial transfers, any other overlaps like a DMA.
    ``core_frac``: fraction of all work the busiest core does; ``active``: cores in use.
    ``always_overlap`` (bool or per candidate): every transfer overlaps compute whatever its
    buffers (CPU hardware prefetch; a GPU SM with two or more resident blocks).
    """
    per_engine = hw.family == "ascend"
    shared_bus = hw.family in ("cpu", "gpu")
    stage: dict[str, list] = {}
    hop_bytes: dict[str, np.ndarray] = {}
    for mv in moves:
        if mv.kind == "param":      # read by an engine on the way (FixPipe's bias): bytes only
            hop_bytes[mv.key] = hop_bytes.get(mv.key, 0) + mv.bytes
            continue
        for ln in links_for(hw, mv.src, mv.dst):
            hop_bytes[ln.key] = hop_bytes.get(ln.key, 0) + mv.bytes
            inv_bw = (np.maximum(active, 1) if ln.shared else 1.0) / ln.bandwidth
            bus = mv.bytes
            if hw.offchip.name in (ln.src, ln.dst):
                if mv.runs:
                    bus = 0
                    for cnt, run in mv.runs:
                        bus = bus + cnt * roundup(np.maximum(np.ceil(run), 1).astype(np.int64),
                                                  ln.burst)
                    bus = np.where(mv.bytes > 0, bus, 0)
                elif np.any(np.asarray(mv.run) > 0):
                    run = np.maximum(np.asarray(mv.run), 1)
                    inv_bw = inv_bw * (roundup(run, ln.burst) / run)
            t = (bus * inv_bw + ln.setup_s * mv.transfers) * core_frac
            # one DRAM bus: a CPU's/GPU's reads and writes of off-chip memory share a stage
            name = ln.engine if per_engine else (
                hw.offchip.name if shared_bus and hw.offchip.name in (ln.src, ln.dst) else ln.key)
            s = stage.setdefault(name, [0.0, 0, True])
            s[0] = s[0] + t
            s[1] = s[1] + mv.transfers * core_frac
            s[2] = s[2] & np.logical_or(always_overlap, np.asarray(mv.bufs) >= 2)
    stages, unit_busy = [], {}
    qstages = {}
    for i, (unit, (flops, fpc, hz, steps)) in enumerate(compute.items()):
        busy = flops * core_frac / (fpc * hz)
        unit_busy[unit] = busy
        # the first unit carries the loop nest; another one (a Vector epilogue beside the Cube,
        # CUDA cores beside tensor cores) works on the previous tile meanwhile
        stages.append((busy, np.maximum(np.asarray(steps) * core_frac, 1), i > 0))
        qstages[unit] = stages[-1][:2]
    stage_busy = {}
    for name, (busy, steps, over) in stage.items():
        stage_busy[name] = busy
        stages.append((busy, steps, over))
        qstages[name] = (busy, steps)
    if per_engine:
        body = queue_pipeline(qstages, engine_queues(hw, moves, next(iter(compute), None)))
    else:
        body = pipeline(stages)
    launch = hw.launch_s * launches
    latency = launch + body
    comp = 0.0
    for busy in unit_busy.values():
        comp = np.maximum(comp, busy)
    dma = 0.0
    for name, (busy, steps, over) in stage.items():
        dma = np.maximum(dma, busy)
    bound = np.where(launch > body, 2, np.where(comp >= dma, 0, 1))
    return Timing(np.asarray(latency, float), bound, stage_busy, unit_busy, hop_bytes)
