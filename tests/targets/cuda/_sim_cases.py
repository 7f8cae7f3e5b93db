"""CUDA-simulator cases: every cuda kernel against the float64 numpy reference.

Not collected directly (the name does not match test_*.py): ``test_sim.py`` runs this file in a
subprocess with ``NUMBA_ENABLE_CUDASIM=1``, which must be set before ``numba.cuda`` is first
imported. Shapes are small and ragged (not multiples of any tile), block sizes small enough that
several blocks run: the simulator runs every thread as a Python thread.
"""
import os

import numpy as np
import pytest

if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
    pytest.skip("needs NUMBA_ENABLE_CUDASIM=1 set before numba.cuda is imported; run through "
                "tests/targets/cuda/test_sim.py", allow_module_level=True)

from edgeops.ops.base import get_op  # noqa: E402
from edgeops.pipeline.targets import load_targets  # noqa: E402
from edgeops.registry import kernel_by_name  # noqa: E402
from edgeops.targets.cuda import conv, device, eltwise, gemm, norms  # noqa: E402
from edgeops.targets.cuda.launch import CONFIGS  # noqa: E402

load_targets()      # registers the cuda kernels

FULL = pytest.mark.full


def _ref(op, inputs, attrs=None, domain=""):
    od = get_op(op, domain)
    wide = [None if x is None else x.astype(np.float64) for x in inputs]
    return od.run(wide, attrs or {})[0]


def _kernel(name, op, inputs, attrs=None, domain="", tiling=None):
    k = kernel_by_name(name)
    return k.fn(inputs, get_op(op, domain).parse_attrs(attrs or {}), tiling=tiling)[0]


def _close(y, ref, tol=2e-5):
    assert y.shape == ref.shape and y.dtype == np.float32
    np.testing.assert_allclose(y, ref, rtol=tol, atol=tol * max(1.0, float(np.abs(ref).max())))


def _r(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def test_simulator_is_active():
    from numba import cuda
    assert cuda.is_available() and device.gpu_present()
    assert "simulator" in type(cuda.to_device(np.zeros(1))).__module__


# ---- GEMM ---------------------------------------------------------------------------------

@pytest.mark.parametrize("cfg", ["t8", "t16", pytest.param("t32", marks=FULL),
                                 pytest.param("t64", marks=FULL)])
def test_gemm_tiled_configs_ragged(rng, cfg):
    a, b = _r(rng, 19, 23), _r(rng, 23, 13)
    _close(gemm.gemm(a, b, cfg=CONFIGS[cfg]), a.astype(np.float64) @ b)


@pytest.mark.parametrize("block", [(4, 4), (8, 2)])
def test_gemm_naive_blocks(rng, block):
    a, b = _r(rng, 11, 9), _r(rng, 9, 7)
    _close(gemm.launch_gemm(a[None], b[None], naive=True, naive_block=block)[0],
           a.astype(np.float64) @ b)


@pytest.mark.parametrize("name", ["cuda.gemm_tiled", "cuda.gemm_naive"])
@pytest.mark.parametrize("c_shape,ta,tb", [((7,), 0, 0), ((10, 1), 1, 0), ((10, 7), 0, 1)])
def test_gemm_registered_bias_transposes(rng, name, c_shape, ta, tb):
    a = _r(rng, 13, 10) if ta else _r(rng, 10, 13)
    b = _r(rng, 7, 13) if tb else _r(rng, 13, 7)
    c = _r(rng, *c_shape)
    attrs = {"alpha": 0.5, "beta": 1.5, "transA": ta, "transB": tb}
    _close(_kernel(name, "Gemm", [a, b, c], attrs), _ref("Gemm", [a, b, c], attrs))


def test_gemm_epilogue_activation(rng):
    a, b = _r(rng, 9, 17), _r(rng, 17, 6)
    y = gemm.gemm(a, b, epilogue=eltwise.activation("relu"), cfg=CONFIGS["t8"])
    _close(y, np.maximum(a.astype(np.float64) @ b, 0))


@pytest.mark.parametrize("sa,sb", [((2, 5, 9), (9, 6)), ((3, 1, 4, 7), (2, 7, 5)), ((7,), (7, 3))])
def test_matmul_batched(rng, sa, sb):
    a, b = _r(rng, *sa), _r(rng, *sb)
    _close(_kernel("cuda.matmul_tiled", "MatMul", [a, b]), _ref("MatMul", [a, b]))


def test_tile_config_from_tiling_runs(rng):
    from edgeops.tiling import LevelTiling, Tiling
    lv = LevelTiling("smem", (("m", 16), ("n", 16), ("k", 16)), ("m", "n", "k"), (), ())
    t = Tiling("gemm", "gemm", "cuda", (lv,))
    a, b = _r(rng, 21, 5), _r(rng, 5, 18)
    attrs = {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0}
    _close(_kernel("cuda.gemm_tiled", "Gemm", [a, b], attrs, tiling=t), a.astype(np.float64) @ b)


# ---- SwiGLU ----------------------------------------------------------------------------------

@pytest.mark.parametrize("cfg,bias", [("t8", True), ("t8", False), pytest.param("t16", True, marks=FULL)])
def test_swiglu(rng, cfg, bias):
    x, w1, w2 = _r(rng, 2, 5, 19), _r(rng, 19, 11), _r(rng, 19, 11)
    ins = [x, w1, w2] + ([_r(rng, 11), _r(rng, 11)] if bias else [])
    _close(gemm.swiglu(*ins, cfg=CONFIGS[cfg]), _ref("SwiGLU", ins, domain="ai.edgeops"), 5e-5)


def test_swiglu_registered(rng):
    ins = [_r(rng, 6, 9), _r(rng, 9, 10), _r(rng, 9, 10), _r(rng, 10), _r(rng, 10)]
    _close(_kernel("cuda.swiglu", "SwiGLU", ins, domain="ai.edgeops"),
           _ref("SwiGLU", ins, domain="ai.edgeops"), 5e-5)


# ---- Conv / ConvBnAct ------------------------------------------------------------------------

CONV_CASES = [
    ((1, 3, 7, 6), (5, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 4, 6, 7), (6, 2, 3, 2), {"pads": [1, 0, 2, 1], "strides": [2, 1], "group": 2}),
    ((1, 4, 5, 5), (4, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 4, "dilations": [1, 1]}),
    ((1, 2, 9, 8), (3, 2, 3, 3), {"dilations": [2, 2], "strides": [2, 2]}),
]


@pytest.mark.parametrize("xs,ws,attrs", CONV_CASES[:2] + [pytest.param(*c, marks=FULL)
                                                          for c in CONV_CASES[2:]])
def test_conv_implicit_gemm(rng, xs, ws, attrs):
    x, w, b = _r(rng, *xs), _r(rng, *ws), _r(rng, ws[0])
    _close(_kernel("cuda.conv_implicit_gemm", "Conv", [x, w, b], attrs),
           _ref("Conv", [x, w, b], attrs))


@pytest.mark.parametrize("act", ["relu", "silu", pytest.param("hardswish", marks=FULL),
                                 pytest.param("relu6", marks=FULL), pytest.param("clip", marks=FULL)])
def test_conv_bn_act_epilogue(rng, act):
    x, w, b = _r(rng, 1, 3, 6, 5), _r(rng, 4, 3, 3, 3), _r(rng, 4)
    attrs = {"pads": [1, 1, 1, 1], "activation": act, "clip_min": -0.5, "clip_max": 0.7}
    _close(_kernel("cuda.conv_bn_act_implicit_gemm", "ConvBnAct", [x, w, b], attrs, "ai.edgeops"),
           _ref("ConvBnAct", [x, w, b], attrs, "ai.edgeops"))


def test_conv_tile_configs_multi_block(rng):
    x, w, b = _r(rng, 1, 3, 7, 6), _r(rng, 10, 3, 3, 3), _r(rng, 10)
    g = conv.geom(x.shape, w.shape, {"pads": [1, 1, 1, 1]})
    ref = _ref("Conv", [x, w, b], {"pads": [1, 1, 1, 1]})
    _close(conv.conv2d(x, w, b, g, cfg=CONFIGS["t8"]), ref)   # 6 x 2 blocks


# ---- norms, softmax ---------------------------------------------------------------------

@pytest.mark.parametrize("threads", [32, pytest.param(64, marks=FULL)])
@pytest.mark.parametrize("shape,axis", [((3, 45), -1), ((2, 3, 7, 5), 2)])
def test_layernorm(rng, threads, shape, axis):
    x = _r(rng, *shape) * 3 + 1
    tail = shape[axis % len(shape):]
    s, b = _r(rng, *tail), _r(rng, *tail)
    _close(norms.layernorm(x, s, b, axis=axis, threads=threads),
           _ref("LayerNormalization", [x, s, b], {"axis": axis}), 5e-5)


@pytest.mark.parametrize("approx", ["none", "tanh"])
def test_layernorm_gelu(rng, approx):
    x, s, b = _r(rng, 4, 37), _r(rng, 37), _r(rng, 37)
    attrs = {"approximate": approx}
    _close(_kernel("cuda.layernorm_gelu", "LayerNormGelu", [x, s, b], attrs, "ai.edgeops"),
           _ref("LayerNormGelu", [x, s, b], attrs, "ai.edgeops"), 5e-5)


@pytest.mark.parametrize("act", ["none", "silu"])
def test_groupnorm_act(rng, act):
    x, s, b = _r(rng, 2, 6, 5, 3), _r(rng, 6), _r(rng, 6)
    attrs = {"num_groups": 3, "activation": act}
    _close(_kernel("cuda.groupnorm_act", "GroupNormAct", [x, s, b], attrs, "ai.edgeops"),
           _ref("GroupNormAct", [x, s, b], attrs, "ai.edgeops"), 5e-5)


@pytest.mark.full
def test_groupnorm_per_group_params(rng):
    x, s, b = _r(rng, 1, 8, 3, 3), _r(rng, 2), _r(rng, 2)
    attrs = {"num_groups": 2}
    _close(_kernel("cuda.groupnorm", "GroupNormalization", [x, s, b], attrs),
           _ref("GroupNormalization", [x, s, b], attrs), 5e-5)


@pytest.mark.parametrize("shape,axis,threads", [((3, 50), -1, 32), ((2, 7, 4), 1, 32),
                                                pytest.param((2, 300), -1, None, marks=FULL)])
def test_softmax(rng, shape, axis, threads):
    x = _r(rng, *shape) * 4
    _close(norms.softmax(x, axis=axis, threads=threads), _ref("Softmax", [x], {"axis": axis}))


def test_softmax_registered(rng):
    x = _r(rng, 5, 33)
    _close(_kernel("cuda.softmax", "Softmax", [x], {"axis": -1}), _ref("Softmax", [x]))


# ---- elementwise ------------------------------------------------------------------------

@pytest.mark.parametrize("op,attrs", [("Relu", {}), ("Sigmoid", {}), ("Tanh", {}),
                                      ("HardSwish", {}), ("LeakyRelu", {"alpha": 0.2}),
                                      ("Gelu", {}), ("Gelu", {"approximate": "tanh"})])
def test_unary(rng, op, attrs):
    x = _r(rng, 3, 41) * 3
    _close(_kernel(f"cuda.{op.lower()}", op, [x], attrs), _ref(op, [x], attrs))


@pytest.mark.parametrize("threads,blocks", [(32, 1), (32, 3), (64, None)])
def test_chain_grid_stride(rng, threads, blocks):
    x = _r(rng, 301) * 4
    ops = [eltwise.activation("leaky_relu", 0.1), eltwise.activation("clip", -1.0, 2.5),
           eltwise.activation("tanh")]
    ref = np.tanh(np.clip(np.where(x >= 0, x, 0.1 * x.astype(np.float64)), -1.0, 2.5))
    _close(eltwise.chain(x, ops, threads=threads, blocks=blocks), ref)


def test_no_fallback_in_simulator(rng):
    before = device.fallback_count()
    _kernel("cuda.relu", "Relu", [_r(rng, 5)])
    assert device.fallback_count() == before
