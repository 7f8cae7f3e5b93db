"""From an iteration space and a board to a tileable loop nest: one :class:`Problem` per
decomposition.

Decompositions that change the loop nest are separate problems with their own FLOP and byte
counts:

* ``gemm`` -- GEMM / batched MatMul / SwiGLU (GEMM with N = 2F and a gating epilogue).
* ``implicit_gemm`` -- convolution on the matrix unit: the outer levels tile the convolution
  (N, K, C, OH, OW; R x S windows are never split) with halo re-reads of the input, the innermost
  level is a GEMM over each block (``edgeops.simulator.gemmview``).
* ``direct`` -- convolution on the vector unit (depthwise is its natural home on an NPU).
* ``im2col`` -- a streaming pass writes the (N*OH*OW) x (C*R*S) column matrix off-chip, then a GEMM.
* ``winograd`` -- F(2x2, 3x3): input transform pass, 16 GEMMs over the 4x4 tiles, output
  transform pass (the weights are transformed once, offline).
* ``stream`` -- element-wise chains, normalisations (a split row costs a second read pass),
  softmax, pooling (halo re-reads of the window).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace

from edgeops.errors import TilingError
from edgeops.simulator.gemmview import GEMM_PERMS, GemmView
from edgeops.simulator.hardware import ACC_DTYPE, ELEM_BYTES, FIXPIPE_EPILOGUES
from edgeops.simulator.nest import Nest, Operand, Window
from edgeops.simulator.passes import PassResult, stream_pass
from edgeops.tiling.spaces import ACT_FLOPS, Space, make_space


@dataclass(frozen=True)
class LevelPlan:
    """What one tiling level cuts: its loop dims, allowed orders and the roles it buffers."""
    name: str
    dims: tuple[str, ...]
    perms: tuple[tuple[str, ...], ...]
    roles: tuple[str, ...]
    view: bool = False


@dataclass(frozen=True)
class Problem:
    space: Space
    decomposition: str
    profile: str                      # matrix | vector
    hw: object = field(repr=False, compare=False)
    levels: tuple = ()                # hardware Level per tiling level
    plans: tuple[LevelPlan, ...] = ()
    nest: Nest | None = None
    view: GemmView | None = None
    mac_unit: str = "matrix"
    mac_granules: tuple = ()
    mac_const: int = 1
    mac_flops: int = 2
    vector_flops: int = 0
    fixed: tuple[PassResult, ...] = ()
    split_dims: tuple[str, ...] = ()  # dims the search may split across cores (level 0)
    cores: int = 1
    gemm_dims: tuple = ()             # (M, N, K, batch) of the GEMM this problem computes, if any

    @property
    def dtype(self) -> str:
        return self.space.dtype

    @property
    def elem(self) -> int:
        return ELEM_BYTES[self.dtype]


def _out_dtype(sp: Space) -> str:
    # int8 accumulates in int32 and writes int32 unless a fused quantise epilogue narrows it
    if sp.dtype == "int8":
        return "int8" if sp.get("act") == "quant" else "int32"
    return sp.dtype


def _gemm_nest(sp: Space, M, N, K, B=1, bshared=False, out_div=1) -> Nest:
    e, oe, ae = ELEM_BYTES[sp.dtype], ELEM_BYTES[_out_dtype(sp)], ELEM_BYTES[ACC_DTYPE[sp.dtype]]
    bdim = ("b",) if B > 1 else ()
    dims = ((("b", B),) if B > 1 else ()) + (("m", M), ("n", N), ("k", K))
    ops = (Operand("A", bdim + ("m", "k"), e),
           Operand("B", (() if bshared else bdim) + ("k", "n"), e),
           # SwiGLU (out_div 2): the gating epilogue halves the columns that reach memory
           Operand("C", bdim + ("m", "n"), oe, acc=True, acc_elem=ae, out_div=out_div,
                   bias=bdim + ("n",) if sp.get("bias", 0) else ()))
    return Nest(dims, ops, (("b", "b"), ("m", "m"), ("n", "n"), ("k", "k")))


def _gemm_perms(dims) -> tuple:
    lead = tuple(d for d in dims if d == "b")
    return tuple(lead + p for p in itertools.permutations([d for d in dims if d != "b"]))


def _conv_perms(dims) -> tuple:
    blocks = [("k",), ("c",), tuple(d for d in ("n", "oh", "ow") if d in dims)]
    return tuple(("g",) + sum(p, ()) for p in itertools.permutations(blocks))


def _matrix_plans(hw, dims, perms_fn, view: bool):
    levels = hw.levels("matrix")
    plans = []
    for i, lv in enumerate(levels):
        roles = tuple(r for r, _ in lv.holds)
        if view and i == len(levels) - 1:
            plans.append(LevelPlan(lv.name, ("m", "n", "k"), GEMM_PERMS, roles, True))
        else:
            plans.append(LevelPlan(lv.name, dims, perms_fn(dims), roles))
    return tuple(plans)


def gemm_problem(sp: Space, hw, *, M, N, K, B=1, bshared=False, decomposition="gemm",
                 fixed=(), extra_vector=0, out_div=1) -> Problem:
    nest = _gemm_nest(sp, M, N, K, B, bshared, out_div)
    dims = tuple(d for d, _ in nest.dims)
    levels = hw.levels("matrix", sp.dtype)
    g = hw.cube_granules(sp.dtype) if hw.family == "ascend" else dict(levels[-1].granule)
    return Problem(sp, decomposition, "matrix", hw, levels, _matrix_plans(hw, dims, _gemm_perms, False),
                   nest, None, "matrix", tuple(g.items()), 1, 2, extra_vector, tuple(fixed),
                   split_dims=("b", "m", "n") if B > 1 else ("m", "n"), cores=hw.matrix_unit.cores,
                   gemm_dims=(M, N, K, B))


def _epilogue(sp: Space, hw, out_elems: int):
    """(fixed passes, vector flops) of a fused activation after a matrix-unit op."""
    act = sp.get("act", "none")
    flops = out_elems * ACT_FLOPS.get(act, 0)
    if hw.family == "ascend" and act not in FIXPIPE_EPILOGUES and hw.separated:
        ob = out_elems * ELEM_BYTES[_out_dtype(sp)]
        return (stream_pass(hw, f"{act} epilogue (AIV via GM)", ob, ob, flops, sp.dtype),), 0
    if hw.family == "ascend" and act in FIXPIPE_EPILOGUES:
        return (), 0
    return (), flops


def conv_problems(sp: Space, hw) -> dict[str, Problem]:
    N, C, H, W, K, R, S = (sp[k] for k in ("N", "C", "H", "W", "K", "R", "S"))
    G, st, d, pb, pe = sp["groups"], sp["stride"], sp["dilation"], sp["pad"], sp["pad_end"]
    OH, OW = sp.conv_out
    e, oe, ae = ELEM_BYTES[sp.dtype], ELEM_BYTES[_out_dtype(sp)], ELEM_BYTES[ACC_DTYPE[sp.dtype]]
    dims = (("g", G), ("n", N), ("k", K // G), ("c", C // G), ("oh", OH), ("ow", OW))
    wins = (Window("oh", H, st, d, R, pb, pe), Window("ow", W, st, d, S, pb, pe))
    ops = (Operand("A", ("n", "g", "c", "oh", "ow"), e, windows=wins),
           Operand("B", ("g", "k", "c"), e, const=R * S),
           Operand("C", ("n", "g", "k", "oh", "ow"), oe, acc=True, acc_elem=ae))
    # pixels map to "p": the Cube's m granule applies to the flattened pixels of the GEMM view,
    # not to each of n, oh, ow of a feature-map block in L1
    nest = Nest(dims, ops, (("g", "b"), ("n", "p"), ("oh", "p"), ("ow", "p"), ("k", "n"), ("c", "k")))
    names = tuple(x for x, _ in dims)
    out_elems = N * K * OH * OW
    fixed, vflops = _epilogue(sp, hw, out_elems)
    probs = {}
    levels = hw.levels("matrix", sp.dtype)
    view = hw.family in ("ascend", "cpu")
    gv = GemmView(("n", "oh", "ow"), "c", "k", "g", R * S, e, e, oe, ae) if view else None
    g = hw.cube_granules(sp.dtype) if hw.family == "ascend" else dict(levels[-1].granule)
    split = ("g", "oh", "k", "n")
    probs["implicit_gemm"] = Problem(
        sp, "implicit_gemm", "matrix", hw, levels, _matrix_plans(hw, names, _conv_perms, view),
        nest, gv, "matrix", tuple(g.items()), 1 if view else R * S, 2, vflops, fixed, split,
        hw.matrix_unit.cores)
    vlv = hw.levels("vector", sp.dtype)
    probs["direct"] = Problem(
        sp, "direct", "vector", hw, vlv,
        tuple(LevelPlan(lv.name, names, _conv_perms(names), ("A", "B", "C")) for lv in vlv),
        nest, None, "vector", (), R * S, 2, out_elems * ACT_FLOPS.get(sp.get("act", "none"), 0),
        (), split, hw.vector_unit.cores)
    # im2col: a pass builds the column matrix, then one GEMM per group
    Mg, Kg = N * OH * OW, (C // G) * R * S
    col = stream_pass(hw, "im2col", N * C * H * W * e, G * Mg * Kg * e, 0, sp.dtype)
    gs = make_space("matmul", B=G, M=Mg, N=K // G, K=Kg, dtype=sp.dtype)
    probs["im2col"] = replace(gemm_problem(gs, hw, M=Mg, N=K // G, K=Kg, B=G, decomposition="im2col",
                                           fixed=(col,) + fixed, extra_vector=vflops), space=sp)
    if R == S == 3 and st == 1 and d == 1 and G == 1:
        T = N * math.ceil(OH / 2) * math.ceil(OW / 2)
        tin = stream_pass(hw, "winograd input transform", N * C * H * W * e, 16 * T * C * e,
                          32 * T * C, sp.dtype)
        tout = stream_pass(hw, "winograd output transform", 16 * T * K * oe, out_elems * oe,
                           24 * T * K, sp.dtype)
        ws = make_space("matmul", B=16, M=T, N=K, K=C, dtype=sp.dtype)
        probs["winograd"] = replace(gemm_problem(ws, hw, M=T, N=K, K=C, B=16, decomposition="winograd",
                                                 fixed=(tin, tout) + fixed, extra_vector=vflops), space=sp)
    return probs


def stream_problem(sp: Space, hw) -> Problem:
    e = ELEM_BYTES[sp.dtype]
    k = sp.kind
    act = ACT_FLOPS.get(sp.get("act", "none"), 0)
    if k == "eltwise":
        dims = (("e", sp["numel"]),)
        ops = tuple(Operand("in", ("e",), e) for _ in range(sp["inputs"]))
        ops += (Operand("out", ("e",), e, acc=True, acc_elem=e),)
        perms, per, split = (("e",),), sp["ops"], ("e",)
    elif k == "pool":
        OH, OW = sp.conv_out
        wins = (Window("oh", sp["H"], sp["stride"], 1, sp["R"], sp["pad"], sp["pad"]),
                Window("ow", sp["W"], sp["stride"], 1, sp["S"], sp["pad"], sp["pad"]))
        dims = (("nc", sp["N"] * sp["C"]), ("oh", OH), ("ow", OW))
        ops = (Operand("in", ("nc", "oh", "ow"), e, windows=wins),
               Operand("out", ("nc", "oh", "ow"), e, acc=True, acc_elem=e))
        perms, per, split = (("nc", "oh", "ow"), ("oh", "ow", "nc")), sp["R"] * sp["S"], ("nc", "oh")
    else:
        if k == "groupnorm":
            G = sp["groups"]
            rows, D = sp["N"] * G, (sp["C"] // G) * sp["H"] * sp["W"]
            params = Operand("in", (), e, const=2 * sp["C"])      # per-channel gamma, beta
        else:
            rows, D = sp["M"], sp["D"]
            params = Operand("in", ("d",), e, const=2) if k == "layernorm" else None
        dims = (("r", rows), ("d", D))
        ops = (Operand("in", ("r", "d"), e, passes_dim="d"),) + ((params,) if params else ())
        ops += (Operand("out", ("r", "d"), e, acc=True, acc_elem=e),)
        perms, per, split = (("r", "d"), ("d", "r")), {"softmax": 5}.get(k, 8) + act, ("r",)
    nest = Nest(dims, ops, tuple((x, "n") for x, _ in dims))
    lv = hw.levels("vector", sp.dtype)
    plans = tuple(LevelPlan(v.name, tuple(x for x, _ in dims), perms, ("in", "out")) for v in lv)
    return Problem(sp, "stream", "vector", hw, lv, plans, nest, None, "vector", (), 1, per, 0, (),
                   split, hw.vector_unit.cores)


def problems(sp: Space, hw) -> dict[str, Problem]:
    """Every decomposition of ``sp`` on ``hw``, by name."""
    k = sp.kind
    if k == "gemm":
        fixed, vf = _epilogue(sp, hw, sp["M"] * sp["N"])
        return {"gemm": gemm_problem(sp, hw, M=sp["M"], N=sp["N"], K=sp["K"], fixed=fixed,
                                     extra_vector=vf)}
    if k == "matmul":
        return {"gemm": gemm_problem(sp, hw, M=sp["M"], N=sp["N"], K=sp["K"], B=sp["B"],
                                     bshared=bool(sp["bshared"]))}
    if k == "swiglu":
        M, D, F = sp["M"], sp["D"], sp["F"]
        fl = 6 * M * F
        if hw.family == "ascend" and hw.separated:   # gate|up leave the Cube, AIV gates them
            ob = M * 2 * F * ELEM_BYTES[sp.dtype]
            p = stream_pass(hw, "swiglu gate (AIV via GM)", ob, ob // 2, fl, sp.dtype, inputs=2)
            return {"gemm": gemm_problem(sp, hw, M=M, N=2 * F, K=D, fixed=(p,))}
        return {"gemm": gemm_problem(sp, hw, M=M, N=2 * F, K=D, extra_vector=fl, out_div=2)}
    if k == "conv2d":
        return conv_problems(sp, hw)
    return {"stream": stream_problem(sp, hw)}


def get_problem(sp: Space, hw, decomposition: str | None = None) -> Problem:
    probs = problems(sp, hw)
    if decomposition is None:
        return next(iter(probs.values()))
    if decomposition not in probs:
        raise TilingError(f"{sp.kind} has no decomposition {decomposition!r} here; available: "
                          f"{', '.join(probs)}")
    return probs[decomposition]


def legal_granule(p: Problem, level: int, d: str) -> int:
    """Granule a tile of ``d`` at ``level`` must be a multiple of (unless it spans the dim).

    Ascend's Cube reads whole fractals (16 x 512/16/elem elements); a UB row is moved in 32-byte
    blocks. Elsewhere any tile size is legal (caches, shared memory and registers pad).
    """
    hw = p.hw
    if hw.family != "ascend":
        return 1
    if p.profile == "vector":
        return max(1, 32 // p.elem) if d == p.nest.dims[-1][0] else 1
    g = hw.cube_granules(p.dtype)
    if p.plans[level].view:
        return g[d]
    return g.get(p.nest.gdim(d), 1)
