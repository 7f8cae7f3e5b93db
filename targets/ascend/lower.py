"""From an operator and a ``Tiling`` to the kernels that run it on the NPU.

Each ``lower_*`` takes the inputs already in ``gm`` (the global memory: name -> array, layouts
below), adds the outputs and workspaces, and returns the launches: one Cube or Vector kernel,
plus -- on a separated core (A2 / 910B) -- the Vector kernel that applies what FixPipe cannot
(SiLU, GELU, ... and SwiGLU's gating), reading the Cube's result back through GM. That round
trip is what the fused op costs there, and the emulator moves it. On a combined core the same
work happens on chip (L0C -> UB -> Vector -> UB -> GM).

GM layouts: GEMM A (B, M, K), B (B, K, N) or shared (K, N), [bias (N,)] -> C (B, M, N);
conv X (N, C, H, W), W (K, C/G, R, S), [bias (K,)] -> Y (N, K, OH, OW); stream ops as in
``stream.py``; SwiGLU A (1, M, D), W1, W2 (D, F), [b1, b2 (F,)] -> Y (M, F).
``lower(space, ...)`` does the same from an ``edgeops.tiling`` Space.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from edgeops.simulator.passes import PASS_BUFS, pass_tile_bytes
from edgeops.targets.ascend.conv import ConvGeom, conv_programs
from edgeops.targets.ascend.cube import FIXPIPE_ACTS, NP, Epilogue
from edgeops.targets.ascend.gemm import GemmGeom, gemm_nest, gemm_programs
from edgeops.targets.ascend.isa import GmRef, Vec
from edgeops.targets.ascend.machine import ACC, ELEM, EmulatorError
from edgeops.targets.ascend.program import cdiv
from edgeops.targets.ascend.stream import Eltwise, Pool, RowNorm, stream_programs


@dataclass
class Launch:
    name: str
    programs: object                  # iterable of (core type, instructions)
    outputs: tuple = ()               # GM tensors it writes


@dataclass
class Lowered:
    launches: list = field(default_factory=list)
    output: str = "Y"


@dataclass(frozen=True)
class Act:
    """An epilogue activation: name and its arguments (clip bounds, leaky/hard-sigmoid alpha)."""
    name: str = "none"
    args: tuple = ()

    @property
    def kw(self) -> dict:
        return dict(self.args)


def _epilogue(m, act: Act, out: str, bias, scale) -> tuple[Epilogue, Act | None]:
    """(the Cube kernel's epilogue, an activation left for a Vector kernel over GM)."""
    epi = Epilogue(out, bias=bias, scale=scale)
    if act.name in FIXPIPE_ACTS:
        epi.act = act.name
        if act.name == "clip":
            epi.lo, epi.hi = act.kw.get("lo", -np.inf), act.kw.get("hi", np.inf)
        return epi, None
    if m.separated:
        return epi, act
    epi.act, epi.on_vector = act.name, True
    return epi, None


def pass_programs(m, op, n: int, dtype: str):
    """A streaming pass over ``n`` elements on every Vector core, its UB buffers sized by the
    planner's own rule (``pass_tile_bytes``: a queue per input, one for the output)."""
    tile_b = pass_tile_bytes(m.capacity["ub"], m.alignment["ub"], len(op.inputs))
    t = max(1, tile_b // ELEM[dtype])
    cores = m.cores[m.vector_core]
    split = {"e": min(cores, cdiv(n, t))} if cdiv(n, t) > 1 else {}
    return stream_programs(m, op, {"e": t}, ("e",), {"in": PASS_BUFS, "out": PASS_BUFS}, split)


def _tail(m, gm, low: Lowered, src: str, dst: str, act: Act, dtype: str):
    """Separated core: the activation as an element-wise Vector kernel (AIV) over GM."""
    gm[src + "_flat"], gm[dst + "_flat"] = gm[src].reshape(-1), gm[dst].reshape(-1)
    op = Eltwise(gm[src].size, 1, [(act.name, act.kw)], dtype)
    op.inputs, op.output = (src + "_flat",), dst + "_flat"
    low.launches.append(Launch(f"{act.name} epilogue (AIV via GM)",
                               pass_programs(m, op, gm[src].size, dtype), (dst + "_flat",)))


def lower_gemm(m, g: GemmGeom, tiling, gm, *, act: Act = Act(), out: str | None = None,
               bias: str | None = None, scale: float | None = None) -> Lowered:
    out = out or (g.dtype if g.dtype != "int8" else "int32")
    gm["C"] = np.zeros((g.B, g.M, g.N), NP[out])
    gm["Cws"] = np.zeros((g.B, g.M, g.N), NP[ACC[g.dtype]])
    epi, tail = _epilogue(m, act, out, bias, scale)
    low = Lowered(output="C")
    dst = "Cpre" if tail else "C"
    if tail:
        gm["Cpre"] = np.zeros_like(gm["C"])
    low.launches.append(Launch("gemm", gemm_programs(m, g, tiling, epi, out=dst), (dst, "Cws")))
    if tail:
        _tail(m, gm, low, "Cpre", "C", tail, out)
    return low


def lower_conv(m, g: ConvGeom, tiling, gm, *, act: Act = Act(), out: str | None = None,
               bias: str | None = None, scale: float | None = None) -> Lowered:
    if tiling.decomposition != "implicit_gemm":
        raise EmulatorError(f"the Ascend emulator runs conv2d as implicit_gemm; the tiling is for "
                            f"{tiling.decomposition!r} (plan with decomposition='implicit_gemm')")
    out = out or (g.dtype if g.dtype != "int8" else "int32")
    oh, ow = g.out
    gm["Y"] = np.zeros((g.N, g.K, oh, ow), NP[out])
    gm["Yws"] = np.zeros((g.N, g.K, oh, ow), NP[ACC[g.dtype]])
    epi, tail = _epilogue(m, act, out, bias, scale)
    low = Lowered()
    dst = "Ypre" if tail else "Y"
    if tail:
        gm["Ypre"] = np.zeros_like(gm["Y"])
    low.launches.append(Launch("conv2d", conv_programs(m, g, tiling, epi, out=dst), (dst, "Yws")))
    if tail:
        _tail(m, gm, low, "Ypre", "Y", tail, out)
    return low


def lower_stream(m, op, tiling, gm, out_shape) -> Lowered:
    lv = tiling.levels[0]
    gm[op.output] = np.zeros(out_shape, NP[op.out_dtype])
    return Lowered([Launch(type(op).__name__.lower(), stream_programs(
        m, op, dict(lv.tile), lv.order, dict(lv.buffers), dict(tiling.split)), (op.output,))],
        op.output)


def lower_swiglu(m, M: int, D: int, F: int, dtype: str, tiling, gm, *, biases=False) -> Lowered:
    """GEMM with N = 2F. Combined core: B is packed so that every L0C tile holds matching gate
    and up columns and the Vector unit gates them in UB (half the columns reach GM).
    Separated: the Cube writes [gate | up] to GM and a Vector kernel gates them."""
    g = GemmGeom(M, 2 * F, D, 1, False, dtype)
    w1, w2 = gm.pop("W1"), gm.pop("W2")
    b1, b2 = (gm.pop("b1"), gm.pop("b2")) if biases else (None, None)
    gm["Cws"] = np.zeros((1, M, 2 * F), np.float32)
    gm["C"] = np.zeros((1, M, 2 * F), w1.dtype)
    gm["Y"] = np.zeros((M, F), w1.dtype)
    low = Lowered(output="Y")
    if m.separated:
        gm["B"] = np.concatenate([w1, w2], axis=1)[None]
        if biases:
            gm["bias"] = np.concatenate([b1, b2])
        low.launches.append(Launch("swiglu gemm", gemm_programs(
            m, g, tiling, Epilogue(dtype, bias="bias" if biases else None)), ("C", "Cws")))
        gm["Cgate"] = gm["Cup"] = gm["C"]          # two views of one tensor
        gm["Y_flat"] = gm["Y"].reshape(-1)
        low.launches.append(Launch("swiglu gate (AIV via GM)",
                                   pass_programs(m, _Gate(M, F, dtype), M * F, dtype), ("Y_flat",)))
        return low
    cols = np.empty(2 * F, np.int64)       # packed column -> column of [W1 | W2]
    for n0, ne in _n_tiles(gemm_nest(g, tiling)):
        h, f0 = ne // 2, n0 // 2
        cols[n0:n0 + h], cols[n0 + h:n0 + ne] = np.arange(f0, f0 + h), F + np.arange(f0, f0 + h)
    gm["B"] = np.concatenate([w1, w2], axis=1)[:, cols][None]
    if biases:
        gm["bias"] = np.concatenate([b1, b2])[cols]

    def gate(p, u, out):
        """UB tile [gate | up] -> silu(gate) * up in its first half, stored to Y's columns."""
        rows, ncol = u.shape
        h = ncol // 2
        res = u.at(0, (rows, h))
        p.emit(Vec("swiglu", res, [u], 0, half=h))
        _, ms, ns = out.index
        return res, GmRef("Y", (ms, slice(ns.start // 2, ns.start // 2 + h)))

    epi = Epilogue(dtype, on_vector=True, bias="bias" if biases else None)
    low.launches.append(Launch("swiglu", gemm_programs(m, g, tiling, epi, ub_store=gate), ("Y", "Cws")))
    return low


def _n_tiles(nest) -> list:
    """The level-1 tiles of n over the whole dim, as (start, extent)."""
    N, (t0, t1) = nest.sizes["n"], (nest.eff[0]["n"], nest.eff[1]["n"])
    out = []
    for s0 in range(0, N, t0):
        e0 = min(t0, N - s0)
        out += [(s, min(t1, s0 + e0 - s)) for s in range(s0, s0 + e0, t1)]
    return out


class _Gate(Eltwise):
    """SwiGLU gating over GM [gate | up] (M, 2F): Y = silu(gate) * up, flat over M*F."""

    def __init__(self, M, F, dtype):
        super().__init__(M * F, 2, [("swiglu", {})], dtype)
        self.inputs, self.output, self.F = ("Cgate", "Cup"), "Y_flat", F

    def in_index(self, blk, name):
        e0, ee = blk["e"]
        e = np.arange(e0, e0 + ee)
        return (np.zeros_like(e), e // self.F, e % self.F + (0 if name == "Cgate" else self.F))


# ---- from an edgeops.tiling Space -----------------------------------------------------------------

def out_dtype(sp) -> str:
    if sp.dtype == "int8":
        return "int8" if sp.get("act") == "quant" else "int32"
    return sp.dtype


def conv_geom(sp) -> ConvGeom:
    two = lambda v: (v, v)
    return ConvGeom(sp["N"], sp["C"], sp["H"], sp["W"], sp["K"], sp["R"], sp["S"], two(sp["stride"]),
                    two(sp["pad"]), two(sp["pad_end"]), two(sp["dilation"]), sp["groups"], sp.dtype)


def eltwise_steps(n_inputs: int, ops: int) -> list:
    """The chain an ``eltwise`` spec stands for: adds that fold the inputs, then ReLUs."""
    return [("add", {})] * (n_inputs - 1) + [("relu", {})] * max(0, ops - (n_inputs - 1))


def lower(sp, tiling, m, gm: dict, *, quant_scale: float = 1 / 64) -> Lowered:
    """Lower a Space (spec string semantics, see ``edgeops.tiling.spaces``)."""
    k, act = sp.kind, sp.get("act", "none")
    scale = quant_scale if act == "quant" else None
    a = Act("clip", (("lo", 0.0), ("hi", 6.0))) if act == "clip" else \
        Act("none" if act == "quant" else act)
    if k in ("gemm", "matmul"):
        g = GemmGeom(sp["M"], sp["N"], sp["K"], sp.get("B", 1), bool(sp.get("bshared", 0)), sp.dtype)
        return lower_gemm(m, g, tiling, gm, act=a, out=out_dtype(sp), scale=scale,
                          bias="bias" if "bias" in gm else None)
    if k == "conv2d":
        return lower_conv(m, conv_geom(sp), tiling, gm, act=a, out=out_dtype(sp), scale=scale,
                          bias="bias" if "bias" in gm else None)
    if k == "swiglu":
        return lower_swiglu(m, sp["M"], sp["D"], sp["F"], sp.dtype, tiling, gm)
    if k in ("groupnorm", "layernorm", "softmax"):
        if k == "groupnorm":
            G = sp["groups"]
            op = RowNorm(k, sp["N"] * G, sp["C"] // G * sp["H"] * sp["W"], sp.dtype, act=act,
                         groups=G, channels=sp["C"], hw=sp["H"] * sp["W"])
        else:
            op = RowNorm(k, sp["M"], sp["D"], sp.dtype, act=act)
        return lower_stream(m, op, tiling, gm, gm["X"].shape)
    if k == "eltwise":
        op = Eltwise(sp["numel"], sp["inputs"], eltwise_steps(sp["inputs"], sp["ops"]), sp.dtype)
        return lower_stream(m, op, tiling, gm, (sp["numel"],))
    if k == "pool":
        oh, ow = sp.conv_out
        op = Pool(sp["N"] * sp["C"], sp["H"], sp["W"], oh, ow, sp["R"], sp["S"], (sp["stride"],) * 2,
                  (sp["pad"],) * 2, (1, 1), sp["mode"], sp.dtype)
        return lower_stream(m, op, tiling, gm, (sp["N"] * sp["C"], oh, ow))
    raise EmulatorError(f"the Ascend emulator has no program for {sp.kind!r}")
