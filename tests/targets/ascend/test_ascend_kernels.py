"""Registered ``ascend`` kernels against the ops' float64 numpy references, on both boards.

Tolerance. Inputs are drawn as fp16-representable values, so the NPU's cast to fp16 is exact
and the reference sees the same numbers. What remains is (a) fp32 accumulation in L0C -- a
relative error ~K * 2^-24, negligible here -- and (b) rounding to fp16: once for a Cube result,
once per Vector instruction for the stream ops (a handful each). fp16's unit roundoff is
u = 2^-11 ~ 4.9e-4, so a normwise bound max|y - ref| <= 8u * max|ref| (4e-3) covers up to 8
rounding steps; the Cube ops are held to 2u per output plus the sqrt(K)-growth of fp32 sums.
"""
import numpy as np
import pytest

from edgeops import registry
from edgeops.ops import get_op
from edgeops.pipeline.targets import load_targets

load_targets()      # registers the ascend kernels

U = 2.0 ** -11
BOARDS = ("ascend-910b", "ascend-310b")


def f16(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float16).astype(np.float32)


def check(op, dom, inputs, attrs, board, steps):
    od = get_op(op, dom)
    a = od.parse_attrs(attrs)
    k = registry.find(registry.op_key(op, dom), "ascend")
    y = k.fn(inputs, a, board=board)[0]
    ref = od.reference(*[None if v is None else np.asarray(v, np.float64) for v in inputs], **a)
    assert y.shape == ref.shape and y.dtype == np.float32
    tol = steps * U * max(1.0, float(np.abs(ref).max()))
    err = float(np.abs(y - ref).max())
    assert err <= tol, f"{op}: max |err| {err:.3g} > {tol:.3g}"


@pytest.mark.parametrize("board", BOARDS)
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (37, 29, 53), (130, 67, 300), (17, 200, 9)])
def test_gemm(rng, board, m, n, k):
    ins = [f16(rng, m, k), f16(rng, k, n, scale=k ** -0.5), f16(rng, n)]
    check("Gemm", "", ins, {"beta": 0.5}, board, 4)


@pytest.mark.parametrize("board", BOARDS)
def test_gemm_transposed_scaled_full_c(rng, board):
    ins = [f16(rng, 53, 37), f16(rng, 29, 53, scale=0.2), f16(rng, 37, 29)]
    check("Gemm", "", ins, {"transA": 1, "transB": 1, "alpha": 2.0}, board, 6)


@pytest.mark.parametrize("board", BOARDS)
@pytest.mark.parametrize("a,b", [((2, 3, 17, 40), (2, 3, 40, 21)), ((3, 17, 40), (40, 21)),
                                 ((40,), (40, 21)), ((5, 40), (40,))])
def test_matmul(rng, board, a, b):
    check("MatMul", "", [f16(rng, *a), f16(rng, *b, scale=0.2)], {}, board, 4)


CONVS = [  # (x, w, attrs): ragged spatial sizes, strides, asymmetric pads, groups, depthwise
    ((1, 5, 13, 11), (12, 5, 3, 3), {"pads": (1, 0, 2, 1), "strides": (2, 1)}),
    ((2, 8, 9, 10), (8, 1, 3, 3), {"group": 8, "pads": (1, 1, 1, 1)}),
    ((1, 6, 12, 12), (9, 2, 3, 3), {"group": 3, "dilations": (2, 2), "pads": (2, 2, 2, 2)}),
    ((1, 3, 23, 21), (17, 3, 7, 7), {"strides": (2, 2), "pads": (3, 3, 3, 3)}),
]


@pytest.mark.parametrize("board", BOARDS)
@pytest.mark.parametrize("xs,ws,attrs", CONVS)
def test_conv(rng, board, xs, ws, attrs):
    fan = ws[1] * ws[2] * ws[3]
    ins = [f16(rng, *xs), f16(rng, *ws, scale=fan ** -0.5), f16(rng, ws[0])]
    check("Conv", "", ins, attrs, board, 4)


@pytest.mark.parametrize("board", BOARDS)
@pytest.mark.parametrize("act", ["relu", "relu6", "silu", "hardswish"])
def test_conv_bn_act(rng, board, act):
    """Relu/Relu6 on FixPipe; SiLU/HardSwish on the Vector unit (through GM on the 910B)."""
    ins = [f16(rng, 1, 6, 10, 9), f16(rng, 10, 6, 3, 3, scale=0.15), f16(rng, 10)]
    check("ConvBnAct", "ai.edgeops", ins, {"pads": (1, 1, 1, 1), "activation": act}, board, 6)


@pytest.mark.parametrize("board", BOARDS)
def test_norms_and_softmax(rng, board):
    x4 = f16(rng, 2, 12, 7, 5)
    check("GroupNormalization", "", [x4, f16(rng, 12), f16(rng, 12)], {"num_groups": 4}, board, 8)
    check("GroupNormAct", "ai.edgeops", [x4, f16(rng, 12), f16(rng, 12)],
          {"num_groups": 3, "activation": "silu"}, board, 8)
    x3 = f16(rng, 3, 7, 50)
    check("LayerNormalization", "", [x3, f16(rng, 50), f16(rng, 50)], {}, board, 8)
    check("LayerNormGelu", "ai.edgeops", [x3, f16(rng, 50), f16(rng, 50)], {}, board, 8)
    check("Softmax", "", [x3], {"axis": 1}, board, 8)


def test_groupnorm_rows_split_across_two_passes(rng):
    """A row longer than the UB tile is read twice (statistics, then normalise)."""
    from edgeops.targets.ascend.emulate import emulate_op
    r = emulate_op("groupnorm:N=1,C=32,H=40,W=41,groups=2,act=silu,dtype=fp16",
                   {"version": 1, "op": "groupnorm", "decomposition": "stream", "target": "ascend",
                    "levels": [{"name": "ub", "tile": {"r": 2, "d": 4096}, "order": ["r", "d"],
                                "buffers": {"in": 2, "out": 2}, "holds": {}}], "split": {}},
                   "ascend-910b")
    assert r["paths_agree"] and r["max_rel_error"] < 8 * U
    assert r["emulated"]["bytes"]["gm->ub"] == 2 * 32 * 40 * 41 * 2 + 2 * 32 * 2


@pytest.mark.parametrize("board", BOARDS)
def test_pooling(rng, board):
    x = f16(rng, 1, 3, 13, 11)
    check("MaxPool", "", [x], {"kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1)}, board, 1)
    check("AveragePool", "", [x], {"kernel_shape": (3, 2), "strides": (2, 2), "pads": (1, 0, 1, 0)}, board, 4)
    check("AveragePool", "", [x], {"kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1),
                                   "ceil_mode": 1, "count_include_pad": 1}, board, 4)
    check("GlobalAveragePool", "", [f16(rng, 2, 5, 7, 9)], {}, board, 4)


@pytest.mark.parametrize("board", BOARDS)
def test_elementwise(rng, board):
    for op, attrs in [("Relu", {}), ("Sigmoid", {}), ("Tanh", {}), ("Gelu", {}), ("HardSwish", {}),
                      ("LeakyRelu", {"alpha": 0.1}), ("HardSigmoid", {})]:
        check(op, "", [f16(rng, 3, 333)], attrs, board, 4)
    check("Clip", "", [f16(rng, 333), np.float32(-0.5), np.float32(0.7)], {}, board, 1)
    check("Add", "", [f16(rng, 4, 33), f16(rng, 33)], {}, board, 2)
    check("Div", "", [f16(rng, 4, 33), f16(rng, 4, 33) + 4], {}, board, 2)


@pytest.mark.parametrize("board", BOARDS)
def test_swiglu(rng, board):
    ins = [f16(rng, 2, 5, 40), f16(rng, 40, 33, scale=0.2), f16(rng, 40, 33, scale=0.2),
           f16(rng, 33), f16(rng, 33)]
    check("SwiGLU", "ai.edgeops", ins, {}, board, 8)


def test_kernels_are_registered_for_the_ascend_target():
    names = {k.name for k in registry.kernels(target="ascend")}
    for n in ("ascend.gemm", "ascend.matmul", "ascend.conv", "ascend.conv_bn_act", "ascend.groupnorm",
              "ascend.groupnorm_act", "ascend.layernorm", "ascend.softmax", "ascend.maxpool",
              "ascend.swiglu", "ascend.relu", "ascend.add"):
        assert n in names


def test_int8_gemm_is_exact(rng):
    """int8 x int8 on the Cube accumulates exactly in int32 (16 x 32 fractals)."""
    from edgeops.targets.ascend.emulate import emulate_op
    for act in ("none", "quant"):
        r = emulate_op(f"gemm:M=40,N=33,K=70,dtype=int8,act={act}", None, "ascend-910b")
        assert r["max_abs_error"] == 0 and r["paths_agree"]


def test_a_long_emulation_reports_its_progress():
    """Progress every few thousand instructions: MACs done out of the op's, never past it."""
    from edgeops.targets.ascend import emulate_op
    from edgeops.tiling.spaces import parse_spec
    spec = "gemm:M=96,N=80,K=200,dtype=fp16"
    seen = []
    r = emulate_op(spec, None, "ascend-910b",
                   progress=lambda done, total, what: seen.append((done, total, what)))
    total = parse_spec(spec).flops // 2
    assert seen and all(t == total for _d, t, _w in seen)
    done = [d for d, _t, _w in seen]
    assert done == sorted(done) and 0 <= done[-1] <= total
    assert seen[-1][2].endswith("instructions")
    assert r["max_rel_error"] < 2e-2
