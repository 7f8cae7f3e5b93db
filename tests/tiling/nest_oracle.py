"""A literal executor of tiled loop nests: the independent oracle for the closed-form traffic.

It walks every loop of a tiling (ragged tails, degenerate loops, core ranges, the GEMM view of
an implicit-GEMM convolution), issues each operand's load at the start of every iteration of
its innermost relevant non-degenerate loop, tracks accumulator visits, and adds up the bytes
each move carries -- window rows clipped by position, fractal padding tile by tile. It shares no
traffic code with ``edgeops.simulator`` (only the problem description), which is what makes the
comparison worth something; it is also a readable statement of the semantics an emulator's DMA
program must follow.
"""
from __future__ import annotations

import itertools
from collections import defaultdict


def _ru(x, g):
    return -(-x // g) * g


def _tiles(start, size, t):
    return [(s, min(t, start + size - s)) for s in range(start, start + size, t)]


def _parent(levels, j, role, offchip):
    for i in range(j - 1, -1, -1):
        m = dict(levels[i].holds).get(role)
        if m is not None:
            return m
    return offchip


def run(nest, levels, tiles, orders, parts=None, offchip="gm", view=None, view_tiles=None,
        view_order=None):
    """Bytes per (src, dst) for one tiling. ``levels``: the hardware Levels (nest levels, plus
    the view level last when ``view``); ``tiles[j]``: dim -> size; ``orders[j]``: loop order."""
    size = dict(nest.dims)
    dims = list(size)
    parts = parts or {}
    L = len(tiles)
    # effective tiles and degeneracy (uniform per level and dim)
    eff, prev = [], dict(size)
    for j in range(L):
        e = {d: min(tiles[j][d], prev[d]) for d in dims}
        eff.append(e)
        prev = e
    nondeg = [{d: eff[j][d] < (size[d] if j == 0 else eff[j - 1][d]) for d in dims} for j in range(L)]
    vlev = len(levels) - 1 if view is not None else None
    if view is not None:
        mmax = 1
        for d in view.m_dims:
            mmax *= eff[-1][d] if L else size[d]
        vmax = {"m": mmax, "k": (eff[-1][view.k_dim] if L else size[view.k_dim]) * view.taps,
                "n": eff[-1][view.n_dim] if L else size[view.n_dim]}
        vnd = {x: view_tiles[x] < vmax[x] for x in "mnk"}
        vrel = {"A": "mk", "B": "kn", "C": "mn"}
        # the per-block loop over a block's groups: a view loop outside m/n/k, relevant to all
        g_live = bool(view.g_dim) and (eff[-1][view.g_dim] if L else size[view.g_dim]) > 1
    totals = defaultdict(int)
    acc_visits = defaultdict(list)     # (role, level, tile key) -> visit count placeholder

    def trigger(role, rel, j, is_view):
        """(level, dim) of the innermost relevant non-degenerate loop, or None."""
        if is_view:
            best = None
            for k, x in enumerate(view_order):
                if x in vrel[role] and vnd[x]:
                    best = (vlev, x)
            if best:
                return best
            if g_live:
                return (vlev, "gi")
            j = L - 1
        for l in range(j, -1, -1):
            best = None
            for k, d in enumerate(orders[l]):
                if d in rel and nondeg[l][d]:
                    best = (l, d)
            if best:
                return best
        return None

    ops = []
    for op in nest.operands:
        for j, lv in enumerate(levels):
            mem = dict(lv.holds).get(op.role)
            if mem is None:
                continue
            is_view = view is not None and j == vlev
            src = _parent(levels, j, op.role, offchip)
            ops.append((op, j, mem, src, is_view, trigger(op.role, set(op.dims), j, is_view)))

    def footprint(op, j, mem, src, is_view, ext, vext):
        lv = levels[j]
        real = src == offchip or not lv.padded
        g = dict(lv.granule)
        groups = 1
        if is_view and vext == "gi":    # the group loop: one group, the whole block
            mb = 1
            for d in view.m_dims:
                mb *= ext[d][1]
            vext = {"m": (0, mb), "k": (0, ext[view.k_dim][1] * view.taps), "n": (0, ext[view.n_dim][1])}
        elif is_view and vext is None:   # fired above the view: the view tile is the whole block
            mb = 1
            for d in view.m_dims:
                mb *= ext[d][1]
            vext = {"m": (0, mb), "k": (0, ext[view.k_dim][1] * view.taps), "n": (0, ext[view.n_dim][1])}
            groups = ext[view.g_dim][1] if view.g_dim else 1
        if is_view:
            return groups * _view_fp(op.role, vext, real, g)
        return _conv_fp(op, j, ext, real, g)

    def _view_fp(role, vext, real, g):
        if True:
            if role == "A":
                return _ru(vext["m"][1], 1 if real else g.get("m", 1)) * _ru(vext["k"][1], 1 if real else g.get("k", 1))
            if role == "B":
                return _ru(vext["k"][1], 1 if real else g.get("k", 1)) * _ru(vext["n"][1], 1 if real else g.get("n", 1))
            return _ru(vext["m"][1], 1 if real else g.get("m", 1)) * _ru(vext["n"][1], 1 if real else g.get("n", 1))

    def _conv_fp(op, j, ext, real, g):
        n = op.const
        for d in op.dims:
            s, t = ext[d]
            w = op.window(d)
            if w is None:
                n *= t if real else _ru(t, g.get(nest.gdim(d), 1))
            else:
                lo = s * w.stride - w.pad_begin
                hi = (s + t - 1) * w.stride - w.pad_begin + w.extent - 1
                if real and j == 0:
                    n *= max(0, min(hi, w.in_size - 1) - max(lo, 0) + 1)
                else:
                    n *= hi - lo + 1
        return n

    def fire(point, ext, vext, gi=0):
        for op, j, mem, src, is_view, trig in ops:
            if trig != point:
                continue
            n = footprint(op, j, mem, src, is_view, ext, vext)
            passes = 2 if (op.passes_dim and j == 0 and eff[0][op.passes_dim] < size[op.passes_dim]) else 1
            if not op.acc:
                totals[(src, mem)] += n * op.elem * passes
                continue
            if is_view and vext == "gi":
                key = (j, tuple(ext[d] for d in sorted(ext) if d in op.dims) + (gi, "all"))
            elif is_view and vext is not None:
                key = (j, tuple(ext[d] for d in sorted(ext) if d in op.dims) + (gi, vext["m"], vext["n"]))
            elif is_view:
                key = (j, tuple(ext[d] for d in sorted(ext) if d in op.dims))
            else:
                key = (j, tuple(ext[d] for d in op.dims))
            acc_visits[(op.role, mem, src, key)].append(n)

    def walk_view(ext):
        mb = 1
        for d in view.m_dims:
            mb *= ext[d][1]
        vb = {"m": (0, mb), "k": (0, ext[view.k_dim][1] * view.taps), "n": (0, ext[view.n_dim][1])}
        groups = ext[view.g_dim][1] if view.g_dim else 1
        for gi in range(groups):
            fire((vlev, "gi"), ext, "gi", gi)

            def rec(k, vext):
                if k == 3:
                    return
                x = view_order[k]
                for t in _tiles(vb[x][0], vb[x][1], view_tiles[x]):
                    v2 = dict(vext, **{x: t})
                    fire((vlev, x), ext, _complete(v2, vb), gi)
                    rec(k + 1, v2)
            rec(0, {})

    def walk(j, block, ext):
        if j == L:
            if view is not None:
                walk_view(ext)
            return
        order = orders[j]

        def rec(k, ext2):
            if k == len(order):
                walk(j + 1, {d: ext2[d] for d in dims}, ext2)
                return
            d = order[k]
            s, t = block[d]
            ranges = _tiles(s, t, eff[j][d])
            for tile in ranges:
                e = dict(ext2)
                e[d] = tile
                fire((j, d), _complete_ext(e, block), None)
                rec(k + 1, e)
        rec(0, {})

    def _complete_ext(e, block):
        return {d: e.get(d, block[d]) for d in dims}

    # cores: contiguous ranges of the split dims' level-0 tiles
    core_ranges = []
    for d in dims:
        p = parts.get(d, 1)
        tl = _tiles(0, size[d], eff[0][d]) if L else [(0, size[d])]
        if p > 1:
            n = len(tl)
            chunks = [tl[i * n // p:(i + 1) * n // p] for i in range(p)]
            core_ranges.append([(c[0][0], sum(x[1] for x in c)) for c in chunks if c])
        else:
            core_ranges.append([(0, size[d])])
    for combo in itertools.product(*core_ranges):
        block = dict(zip(dims, combo))
        fire(None, dict(block), None)
        walk(0, block, {})
    for (role, mem, src, key), visits in acc_visits.items():
        op = next(o for o in nest.operands if o.role == role)
        final = op.elem if src == offchip else op.acc_elem
        for i, n in enumerate(visits):
            last = i == len(visits) - 1
            totals[(mem, src)] += n * (final if last else op.acc_elem) // (op.out_div if last and src == offchip else 1)
            if i > 0:
                totals[(src, mem)] += n * op.acc_elem
    return {f"{a}->{b}": v for (a, b), v in totals.items() if v}


def _complete(v2, vb):
    return {x: v2.get(x, vb[x]) for x in "mnk"}
