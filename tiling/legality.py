"""Legality of tilings against a board: the rules, a vectorised mask for search, and ``check``,
which raises :class:`~edgeops.errors.TilingError` naming the violated rule and its numbers.

Rules, in the order ``check`` applies them:

1. fit: the tiling's op, decomposition, target, levels, dims, orders and roles are the problem's
   (a tiling file for another op names the first field that does not fit);
2. buffers are 1 or 2 (1 on CPUs: caches are not software managed);
3. split: split dims are outermost loops of level 0 (dims with a single tile may precede them)
   and use at most the unit's cores;
4. granule / alignment: on Ascend every tile is whole Cube fractals (16 x 16 fp16, 16 x 32 int8,
   16 x 8 fp32) and a UB row a whole number of 32-byte blocks -- except a tile covering its whole
   dim, whose ragged tail is padded;
5. nesting: a tile never exceeds its parent tile, nor (level 0) the dim rounded up to its granule;
   a GEMM-view tile never exceeds the largest block above it;
6. capacity: per memory, buffers x tile bytes (rounded up to the memory's alignment), summed over
   the operands it holds, fit the memory (its per-core share for chip-wide caches).
"""
from __future__ import annotations

import numpy as np

from edgeops.errors import TilingError
from edgeops.simulator import tilemath as tm
from edgeops.tiling.batch import Batch, batch_from_tilings, nest_plans, view_block_max
from edgeops.tiling.problem import legal_granule
from edgeops.tiling.tiling import Tiling


def fit(p, t: Tiling) -> None:
    """Rule 1. Precondition of every other rule."""
    where = f"{p.space.kind} ({p.decomposition}) on {p.hw.board.name}"
    if t.op != p.space.kind:
        raise TilingError(f"tiling.op is {t.op!r} but the op is {p.space.kind!r}")
    if t.decomposition != p.decomposition:
        raise TilingError(f"tiling.decomposition is {t.decomposition!r}, the problem is "
                          f"{p.decomposition!r}")
    target = p.hw.target if p.hw.family != "flat" else "flat"
    if t.target != target:
        raise TilingError(f"tiling.target is {t.target!r} but {where} tiles for {target!r}")
    names = [pl.name for pl in p.plans]
    if [lv.name for lv in t.levels] != names:
        raise TilingError(f"tiling.levels are {[lv.name for lv in t.levels]}; {where} has levels {names}")
    for i, (lv, pl) in enumerate(zip(t.levels, p.plans)):
        dims = [d for d, _ in lv.tile]
        if sorted(dims) != sorted(pl.dims):
            raise TilingError(f"tiling.levels[{i}].tile has dims {dims}; {where} tiles {list(pl.dims)} "
                              f"at level {pl.name} (a tiling for another op?)")
        if lv.order not in pl.perms:
            raise TilingError(f"tiling.levels[{i}].order {list(lv.order)} is not a supported loop "
                              f"order at level {pl.name}; supported: {[list(x) for x in pl.perms]}")
        for r, _ in lv.buffers:
            if r not in pl.roles:
                raise TilingError(f"tiling.levels[{i}].buffers names operand {r!r}; level {pl.name} "
                                  f"holds {list(pl.roles)}")
        hw_holds = dict(p.levels[i].holds)
        if lv.holds and dict(lv.holds) != {r: hw_holds[r] for r in dict(lv.holds) if r in hw_holds} \
                or any(r not in hw_holds for r in dict(lv.holds)):
            raise TilingError(f"tiling.levels[{i}].holds {dict(lv.holds)} is not a placement this "
                              f"target supports; level {pl.name} holds {hw_holds}")
    for d, _ in t.split:
        if d not in p.plans[0].dims:
            raise TilingError(f"tiling.split names dim {d!r}; level {p.plans[0].name} has "
                              f"{list(p.plans[0].dims)}")


def check(p, t: Tiling) -> None:
    """Raise TilingError with the first violated rule (see the module docstring)."""
    fit(p, t)
    for i, lv in enumerate(t.levels):
        for r, n in lv.buffers:
            if p.hw.family == "cpu" and n != 1:
                raise TilingError(f"tiling.levels[{i}].buffers.{r} = {n}: a CPU level must have 1 "
                                  f"buffer (caches are not software managed)")
    _check_split(p, t)
    b = batch_from_tilings(p, [t])
    for msg in _violations(p, b, first_only=True):
        raise TilingError(msg)


def _check_split(p, t: Tiling) -> None:
    if not t.split:
        return
    lv0, pl = t.levels[0], p.plans[0]
    split = dict(t.split)
    size = p.nest.size
    for d in lv0.order:
        if d in split:
            continue
        single = lv0.size(d) >= size[d]
        later = [x for x in lv0.order[lv0.order.index(d) + 1:] if x in split]
        if later and not single:
            raise TilingError(f"tiling.split over {later[0]!r} needs it outside loop {d!r} at level "
                              f"{pl.name} (order {list(lv0.order)}): split loops must be outermost")
    cores = p.cores
    if t.cores > cores:
        raise TilingError(f"tiling.split uses {t.cores} cores ({dict(t.split)}) but "
                          f"{p.hw.unit(p.profile, p.dtype).name} runs on {cores}")


def legal_mask(p, b: Batch, ev=None) -> np.ndarray:
    """Vectorised rules 4-6 (the search builds candidates that satisfy 1-3)."""
    ok = np.ones(b.n, dtype=bool)
    for bad in _violations(p, b, first_only=False, ev=ev):
        ok &= ~bad
    return ok


def _violations(p, b: Batch, first_only: bool, ev=None):
    """Yield messages (first_only, a batch of one) or boolean arrays of violators."""
    c = b.cand
    hw, size = p.hw, p.nest.size
    G = lambda a, d: np.take(a, c.index[d]) if d in c.index and np.ndim(a) else a
    plans = nest_plans(p)
    for j, pl in enumerate(plans):
        for d in pl.dims:
            t = np.asarray(c.tiles[j][d])
            g = legal_granule(p, j, d)
            if g > 1:
                bad = G((t % g != 0) & (t < size[d]), d)
                if first_only and np.any(bad):
                    first = {x: int(np.reshape(G(np.asarray(c.tiles[j][x]), x), -1)[0]) for x in pl.dims}
                    yield _granule_msg(p, j, d, first, g)
                elif not first_only:
                    yield bad
            lim = tm.roundup(size[d], g) if j == 0 else np.asarray(c.tiles[j - 1][d])
            bad = G(t > lim, d)
            if first_only and np.any(bad):
                tv, lv = int(np.reshape(G(t, d), -1)[0]), int(np.reshape(G(lim, d), -1)[0])
                parent = f"the dim ({size[d]}" + (f", {lv} rounded up to {g})" if lv != size[d] else ")") \
                    if j == 0 else f"its parent level {plans[j - 1].name} tile {d}={lv}"
                yield f"level {pl.name} tile {d}={tv} exceeds {parent}"
            elif not first_only:
                yield bad
    if p.view is not None:
        yield from _view_violations(p, b, first_only)
    yield from _capacity(p, b, first_only, ev)


def _granule_msg(p, j, d, tiles: dict, g) -> str:
    """``L0A tile 20x32 fp16 = 1,280 B is not 512 B aligned: ...`` (``tiles``: the level's sizes)."""
    pl, lv = p.plans[j], p.levels[j]
    t = tiles[d]
    if p.profile == "vector":
        mem = lv.memory_of("in")
        return (f"{mem.upper()} tile rows of {d}={t} {p.dtype} = {t * p.elem:,} B are not 32 B "
                f"aligned: {d} must be a multiple of {g} or cover the whole dim ({p.nest.size[d]})")
    gdim = (lambda x: x) if pl.view else p.nest.gdim
    gd = gdim(d)
    role, pair = ("A", ("m", "k")) if gd in ("m", "k") else ("B", ("k", "n"))
    mem = lv.memory_of(role) or lv.memory_of("A")
    shape = [next((tiles[x] for x in tiles if gdim(x) == y), None) for y in pair]
    fr = p.hw.cube_granules(p.dtype)
    align = p.hw.memory(mem).alignment
    what = f"{mem.upper()} tile"
    if None not in shape:
        what += f" {shape[0]}x{shape[1]} {p.dtype} = {shape[0] * shape[1] * p.elem:,} B"
    return (f"{what} is not {align} B aligned: the Cube reads {fr['m']}x{fr['k']} {p.dtype} "
            f"fractals ({fr['m'] * fr['k'] * p.elem} B), so {d}={t} must be a multiple of {g} "
            f"(only the last tile of a dim may be ragged); try {d}={tm.roundup(t, g)}")


def _view_violations(p, b: Batch, first_only: bool):
    """Granules of the view tiles; with ``first_only`` (a tiling file) also: within the block.
    Search batches may hold view tiles beyond a block: they stand for the whole block."""
    j = len(nest_plans(p))
    vi = b.view_index or {}
    for d in "mnk":
        t = np.asarray(b.view_tiles[d])
        g = legal_granule(p, j, d)
        if g > 1:
            bad = t % g != 0
            bad = np.take(bad, vi[d]) if d in vi and bad.ndim else bad
            if first_only and np.any(bad):
                yield _granule_msg(p, j, d, {x: int(np.reshape(b.view_tiles[x], -1)[0]) for x in "mnk"}, g)
            elif not first_only:
                yield bad
    if not first_only:
        return
    blocks = view_block_max(p, b)
    plans = nest_plans(p)
    for d in "mnk":
        t = int(np.reshape(b.view_tiles[d], -1)[0])
        g = legal_granule(p, j, d)
        blk = int(np.reshape(blocks[d], -1)[0])
        if t > tm.roundup(blk, g):
            what = {"m": "pixels", "k": "reduction elements (C x R x S)", "n": "output channels"}[d]
            yield (f"level {p.plans[-1].name} tile {d}={t} exceeds the largest block of level "
                   f"{plans[-1].name if plans else 'the op'}: {blk} {what}, "
                   f"{tm.roundup(blk, g)} rounded up to {g}")


def _capacity(p, b: Batch, first_only: bool, ev=None):
    usage = _usage(p, b, ev)
    for (lname, mem), entries in usage.items():
        m = p.hw.memory(mem)
        total = 0
        for _, by, n in entries:
            total = total + n * tm.roundup(by, m.alignment)
        bad = total > m.capacity
        if first_only and np.any(bad):
            parts = []
            for role, by, n in entries:
                by, n = int(np.reshape(tm.roundup(by, m.alignment), -1)[0]), int(np.reshape(n, -1)[0])
                lab = "" if len(entries) == 1 else f"{role}: "
                parts.append(f"{lab}{n} buffer{'s' if n > 1 else ''} x {by:,} B")
            tot = int(np.reshape(total, -1)[0])
            yield (f"{mem.upper()} holds {' + '.join(parts)} = {tot:,} B > {m.capacity:,} B "
                   f"(level {lname})")
        elif not first_only:
            yield np.broadcast_to(bad, (b.n,))


def _usage(p, b: Batch, ev=None) -> dict:
    if ev is not None:
        return ev.usage
    from edgeops.simulator.gemmview import view_moves
    from edgeops.simulator.nest import NestEval
    plans = nest_plans(p)
    nev = NestEval(p.nest, b.cand, p.levels[:len(plans)], p.hw.offchip.name)
    usage: dict = {}
    for j, pl in enumerate(plans):
        for mem, entries in nev.capacity(j).items():
            usage.setdefault((pl.name, mem), []).extend(entries)
    if p.view is not None:
        _, cap, _, _ = view_moves(p.view, nev, len(plans), b.view_tiles, b.view_order,
                                  b.view_bufs or {}, p.levels[-1], {}, b.view_index)
        for mem, entries in cap.items():
            usage.setdefault((p.plans[-1].name, mem), []).extend(entries)
    return usage
