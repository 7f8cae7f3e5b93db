"""Memory-bound kernels (norms, softmax, pooling, elementwise chains) and the vector math they
use, against the float64 op references."""
import math

import numba
import numpy as np
import pytest
from numba import njit

from edgeops.errors import EdgeOpsError
from edgeops.ops.averagepool import AveragePool
from edgeops.ops.binary import Add, Mul
from edgeops.ops.gelu import Gelu
from edgeops.ops.global_averagepool import GlobalAveragePool
from edgeops.ops.groupnorm_act import GroupNormAct
from edgeops.ops.layernorm_gelu import LayerNormGelu
from edgeops.ops.layernorm import LayerNormalization
from edgeops.ops.maxpool import MaxPool
from edgeops.ops.softmax import Softmax
from edgeops import threads as _threads
from edgeops.targets.neon import _vmath as vm, eltwise, norms, pool

TOL = dict(rtol=2e-5, atol=2e-5)


@njit(error_model="numpy")
def _map(fn_id, x, y):
    for i in range(x.size):
        v = x[i]
        y[i] = (vm.exp32(v) if fn_id == 0 else vm.erf32(v) if fn_id == 1 else vm.tanh32(v)
                if fn_id == 2 else vm.silu32(v))


@njit(error_model="numpy", fastmath={"contract"})
def _map_exp_nonpos(x, y):
    # as the softmax kernels compile it: its one-constant reduction relies on the FMA
    for i in range(x.size):
        y[i] = vm.exp_nonpos32(x[i])


@njit(error_model="numpy", fastmath={"contract"})
def _rows(x, n, y, m):
    return vm.row_sum(x, n), vm.row_max(x, n), vm.exp_sum(x, y, n, m)


@pytest.mark.parametrize("n", [1, 5, 31, 32, 33, 100, 1000])
def test_row_intrinsics_against_float64(rng, n):
    """The softmax's row intrinsics (IR loops over 32 lanes, then a tail): sum and max of the
    first n floats only, exp_sum's stores equal to exp_nonpos32 element for element (the same
    operations), its sum their sum."""
    x = (rng.standard_normal(n + 7) * 4).astype(np.float32)
    x[n:] = 1e6                              # past n: must not be read into any result
    y = np.full(n + 7, -1.0, np.float32)
    m = np.float32(x[:n].max())
    s, mx, es = _rows(x, n, y, m)
    assert abs(s - x[:n].astype(np.float64).sum()) <= 1e-6 * np.abs(x[:n]).sum()
    assert mx == x[:n].max()
    one = np.empty(n, np.float32)
    _map_exp_nonpos(x[:n] - m, one)
    np.testing.assert_array_equal(y[:n], one)
    assert (y[n:] == -1.0).all()
    assert abs(es - one.astype(np.float64).sum()) <= 1e-6 * one.sum()


def test_vector_math_accuracy():
    x = np.linspace(-87, 88, 200_001, dtype=np.float32)
    y = np.empty_like(x)
    _map(0, x, y)
    ref = np.exp(x.astype(np.float64))
    assert np.max(np.abs(y - ref) / ref) < 2.5e-7                     # ~2 ulp
    xs = np.linspace(-8, 8, 20_001, dtype=np.float32)
    ys = np.empty_like(xs)
    _map(1, xs, ys)
    assert np.max(np.abs(ys - np.array([math.erf(v) for v in xs.astype(float)]))) < 5e-7
    _map(2, xs, ys)
    assert np.max(np.abs(ys - np.tanh(xs.astype(np.float64)))) < 3e-7
    _map(3, np.array([-200.0, -90.0, 0.0, 90.0], np.float32), ys[:4])
    np.testing.assert_allclose(ys[:4], [0.0, 0.0, 0.0, 90.0], atol=1e-30)


def test_softmax_exp_accuracy_and_nan():
    """exp_nonpos32 (softmax's exp: degree 5, one-constant reduction) against float64: relative
    error grows with |x| as documented; NaNs stay NaN whatever their payload; below the floor it
    returns exp(-87.3) (normal, tiny)."""
    for lo, bound in ((-10, 2e-7), (-87, 4e-7)):
        x = np.linspace(lo, 0, 200_001, dtype=np.float32)
        y = np.empty_like(x)
        _map_exp_nonpos(x, y)
        ref = np.exp(x.astype(np.float64))
        assert np.max(np.abs(y - ref) / ref) < bound
    special = np.array([0x7FC00000, 0x7FC00001, 0x7FFFFFFF, 0xFFC00123, 0x7F800001],
                       np.uint32).view(np.float32)
    y = np.empty_like(special)
    _map_exp_nonpos(special, y)
    assert np.isnan(y).all()
    x = np.array([-np.inf, -1e30, -90.0, -0.0], np.float32)
    _map_exp_nonpos(x, y[:4])
    assert 0 < y[0] == y[1] == y[2] < 1.3e-38 and y[3] == 1.0


@pytest.mark.parametrize("shape,axis", [((3, 7, 33), -1), ((2, 5, 4, 9), 2), ((128, 768), -1)])
@pytest.mark.parametrize("approx", [None, "none", "tanh"])
def test_layernorm_gelu(rng, shape, axis, approx):
    x = rng.standard_normal(shape, dtype=np.float32) * 3 + 1
    tail = shape[axis:]
    scale = rng.standard_normal(tail, dtype=np.float32)
    bias = rng.standard_normal(tail[-1:], dtype=np.float32)   # broadcasts over the tail
    act = None if approx is None else ("gelu" if approx == "none" else "gelu_tanh")
    y = norms.layernorm(x, scale, bias, axis=axis, epsilon=1e-5, act=act)
    xs = [x.astype(np.float64), scale.astype(np.float64), bias.astype(np.float64)]
    if approx is None:
        ref = LayerNormalization.reference(*xs, axis=axis, epsilon=1e-5)
    else:
        ref = LayerNormGelu.reference(*xs, axis=axis, epsilon=1e-5, approximate=approx)
    np.testing.assert_allclose(y, ref, **TOL)


_ACTS64 = {"none": lambda v: v, "relu": lambda v: np.maximum(v, 0),
           "silu": lambda v: v / (1 + np.exp(-v)),
           "leakyrelu": lambda v: np.where(v < 0, 0.01 * v, v),
           "gelu": lambda v: Gelu.reference(v),
           "gelu_tanh": lambda v: Gelu.reference(v, approximate="tanh")}


@pytest.mark.parametrize("rows", [1, 2, 5, 8])
@pytest.mark.parametrize("parallel", [False, True])
def test_layernorm_every_activation(rng, monkeypatch, rows, parallel):
    """Every activation branch of the LayerNorm pass (the kernel takes any epilogue
    activation; the fused ops use GELU and none), odd and even row counts, alone and on the
    pool, against float64."""
    if parallel and numba.get_num_threads() < 2:
        pytest.skip("the parallel kernel needs a pool of 2+ threads; this process has 1")
    monkeypatch.setattr(_threads, "SMALL_ELEMENTS", 0)
    monkeypatch.setattr(norms.ThreadChoice, "parallel", lambda self, threads: parallel)
    x = rng.standard_normal((rows, 45), dtype=np.float32) * 2 + 0.5
    scale = rng.standard_normal(45, dtype=np.float32)
    bias = rng.standard_normal(45, dtype=np.float32)
    ln = LayerNormalization.reference(x.astype(np.float64), scale.astype(np.float64),
                                      bias.astype(np.float64), axis=-1, epsilon=1e-5)
    for act, ref in _ACTS64.items():
        y = norms.layernorm(x, scale, bias, axis=-1, epsilon=1e-5, act=act)
        np.testing.assert_allclose(y, ref(ln), **TOL, err_msg=act)


@pytest.mark.parametrize("shape,groups", [((2, 6, 5, 7), 3), ((1, 64, 56, 56), 32),
                                          ((3, 8, 11), 8)])
@pytest.mark.parametrize("act", ["none", "silu"])
def test_groupnorm_act(rng, shape, groups, act):
    x = rng.standard_normal(shape, dtype=np.float32) * 2 - 0.5
    c = shape[1]
    scale, bias = rng.standard_normal(c, dtype=np.float32), rng.standard_normal(c, dtype=np.float32)
    y = norms.groupnorm(x, scale, bias, groups, 1e-5, act=act)
    ref = GroupNormAct.reference(*(t.astype(np.float64) for t in (x, scale, bias)),
                                 num_groups=groups, epsilon=1e-5, activation=act)
    np.testing.assert_allclose(y, ref, **TOL)


def test_norm_statistics_survive_offset_data(rng):
    """One-pass shifted statistics (reassociating float32 sums): data with |mean| >> std, and an
    outlier as the shift sample, must keep its variance to 1e-4 against float64."""
    x = (rng.standard_normal((4, 512), dtype=np.float32) * 0.01 + 1000).astype(np.float32)
    x[:, 0] = 900  # an outlier as the shift sample
    s, b = np.ones(512, np.float32), np.zeros(512, np.float32)
    ref = LayerNormalization.reference(x.astype(np.float64), s.astype(np.float64),
                                       b.astype(np.float64), axis=-1, epsilon=1e-5)
    np.testing.assert_allclose(norms.layernorm(x, s, b), ref, rtol=1e-4, atol=1e-4)
    xg = x.reshape(1, 4, 512)
    ref_g = GroupNormAct.reference(xg.astype(np.float64), s[:4].astype(np.float64),
                                   b[:4].astype(np.float64), num_groups=2, epsilon=1e-5,
                                   activation="none")
    np.testing.assert_allclose(norms.groupnorm(xg, s[:4], b[:4], 2), ref_g, rtol=1e-4, atol=1e-4)


def test_groupnorm_per_group_params(rng):
    from edgeops.ops.groupnorm import GroupNormalization
    x = rng.standard_normal((2, 6, 4, 3), dtype=np.float32)
    s, b = rng.standard_normal(3, dtype=np.float32), rng.standard_normal(3, dtype=np.float32)
    ref = GroupNormalization.reference(x.astype(np.float64), s.astype(np.float64),
                                       b.astype(np.float64), num_groups=3, epsilon=1e-5)
    np.testing.assert_allclose(norms.groupnorm(x, s, b, 3), ref, **TOL)


@pytest.mark.parametrize("shape,axis", [((4, 1000), -1), ((2, 7, 5), 1), ((3, 4, 5, 6), 0),
                                        ((1, 12, 17, 17), -1), ((5, 3), -1), ((6, 8), -1),
                                        ((2, 3, 129), -1)])
def test_softmax(rng, shape, axis):
    x = rng.standard_normal(shape, dtype=np.float32) * 8
    ref = Softmax.reference(x.astype(np.float64), axis=axis)
    np.testing.assert_allclose(norms.softmax(x, axis), ref, rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("shape,axis", [((1, 3, 37, 53), -1), ((1, 3, 37, 53), 2),
                                        ((2, 300), -1), ((4, 17), -1), ((3, 1), -1)])
def test_softmax_extremes(rng, shape, axis):
    """Ragged rows (not whole vectors), spreads up to +-80, -inf masking and NaNs: rows
    without NaN match float64 within the usual tolerance (a masked entry gives at most
    exp(-87.3) of the row); a NaN anywhere in a row makes the whole row NaN, as in ONNX Runtime."""
    x = (rng.uniform(-80, 80, shape)).astype(np.float32)
    x[..., 0] = 80.0                       # a large max in some rows (and the exact bound)
    mask = rng.random(shape) < 0.1
    x[mask] = -np.inf
    ax = axis % len(shape)
    first = (slice(None),) * ax + (0,)
    x[first] = np.where(np.isinf(x[first]), np.float32(1.0), x[first])  # no all -inf row
    nan_at = tuple(int(rng.integers(d)) for d in shape)
    x[nan_at] = np.nan
    y = norms.softmax(x, axis)
    row_nan = np.isnan(x).any(axis=axis, keepdims=True)
    assert np.isnan(np.where(row_nan, y, np.nan)).all()
    ref = Softmax.reference(np.where(row_nan, 0.0, x.astype(np.float64)), axis=axis)
    np.testing.assert_allclose(np.where(row_nan, 0.0, y), np.where(row_nan, 0.0, ref),
                               rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("n", [37, 5000, 40_000])
def test_sigmoid_and_tanh_chains(rng, n):
    """Sigmoid and Tanh run in loops of their own (eltwise._act_copy): against float64, in a
    chain alone, after a binary op, and inside a longer chain (the per-element path)."""
    x = (rng.standard_normal(n) * 6).astype(np.float32)
    x[:4] = [-100.0, 100.0, 0.0, np.nan]
    xd = x.astype(np.float64)
    sig = 1 / (1 + np.exp(-xd))
    for got, want in ((eltwise.chain(x, ["sigmoid"]), sig),
                      (eltwise.chain(x, ["tanh"]), np.tanh(xd)),
                      (eltwise.binary(x, np.float32(0.5), "Mul", ["sigmoid"]),
                       1 / (1 + np.exp(-xd * 0.5))),
                      (eltwise.chain(x, ["sigmoid", "relu"]), sig)):
        np.testing.assert_allclose(got, want, rtol=0, atol=5e-7)
        assert np.isnan(got[3])


POOLS = [
    ({"kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1)}, (2, 3, 11, 10)),
    ({"kernel_shape": (2, 3), "strides": (2, 1), "ceil_mode": 1}, (1, 2, 9, 8)),
    ({"kernel_shape": (3, 2), "dilations": (2, 1), "pads": (2, 0, 1, 1)}, (2, 2, 12, 7)),
    ({"kernel_shape": (3, 3), "auto_pad": "SAME_UPPER", "strides": (2, 2)}, (1, 3, 7, 9)),
    ({"kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1), "ceil_mode": 1},
     (1, 2, 10, 10)),
    # a column stride other than 1 and 2 (the kernel's general path), with dilation and pads
    ({"kernel_shape": (2, 3), "strides": (1, 3), "dilations": (1, 2), "pads": (1, 2, 0, 1)},
     (2, 3, 9, 23)),
    # rows wider than a vector body, many planes (both threads' shares)
    ({"kernel_shape": (3, 3), "strides": (2, 2)}, (1, 40, 15, 71)),
    # more than three valid rows (a pass per extra row), five taps (the general column path)
    ({"kernel_shape": (5, 5), "pads": (2, 2, 2, 2)}, (1, 3, 9, 12)),
    # 2x2 stride 2 (its own column loop), ragged width, ceil_mode overhang
    ({"kernel_shape": (2, 2), "strides": (2, 2), "ceil_mode": 1}, (2, 3, 9, 13)),
    # pads at the top and left only (a first row and column with one valid tap)
    ({"kernel_shape": (2, 2), "strides": (2, 2), "pads": (1, 1, 0, 0)}, (1, 2, 5, 6)),
]


@pytest.mark.parametrize("attrs,shape", POOLS)
@pytest.mark.parametrize("kind,cip", [("max", 0), ("avg", 0), ("avg", 1)])
def test_pooling(rng, attrs, shape, kind, cip):
    x = rng.standard_normal(shape, dtype=np.float32)
    full = {"auto_pad": "NOTSET", "strides": None, "dilations": None, "pads": None,
            "ceil_mode": 0, **attrs}
    if kind == "max":
        ref = MaxPool.reference(x, **full, storage_order=0)
    else:
        ref = AveragePool.reference(x.astype(np.float64), **full, count_include_pad=cip)
    y = pool.pool_from_attrs(x, kind, {**attrs, "count_include_pad": cip})
    np.testing.assert_allclose(y, ref, **TOL)


@pytest.mark.parametrize("act", ["relu", "silu"])
def test_pooling_with_a_fused_activation(rng, act):
    x = rng.standard_normal((2, 3, 13, 11), dtype=np.float32)
    attrs = {"kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1)}
    full = {"auto_pad": "NOTSET", "dilations": None, "ceil_mode": 0, **attrs}
    ref = MaxPool.reference(x.astype(np.float64), **full, storage_order=0)
    ref = np.maximum(ref, 0) if act == "relu" else ref / (1 + np.exp(-ref))
    np.testing.assert_allclose(pool.pool_from_attrs(x, "max", attrs, act=act), ref, **TOL)


def test_global_avgpool(rng):
    x = rng.standard_normal((2, 5, 7, 9), dtype=np.float32)
    np.testing.assert_allclose(pool.global_avgpool(x),
                               GlobalAveragePool.reference(x.astype(np.float64)), **TOL)


def test_activation_chain_and_binary(rng):
    x = rng.standard_normal((3, 4, 50), dtype=np.float32) * 4
    y = eltwise.chain(x, ["relu", ("clip", 0.0, 6.0), "hardswish"])
    from edgeops.ops.hard_swish import hard_swish
    np.testing.assert_allclose(y, hard_swish(np.clip(x.astype(np.float64), 0, 6)), **TOL)
    gl = eltwise.chain(x, ["gelu"])
    np.testing.assert_allclose(gl, Gelu.reference(x.astype(np.float64)), **TOL)
    for b in (rng.standard_normal((4, 1), dtype=np.float32),
              rng.standard_normal((50,), dtype=np.float32),
              rng.standard_normal((3, 1, 50), dtype=np.float32), np.float32(1.5)):
        np.testing.assert_allclose(eltwise.binary(x, b, "Add"), Add.reference(x, np.asarray(b)),
                                   **TOL)
        np.testing.assert_allclose(eltwise.binary(x, b, "Mul", ["silu"]),
                                   vm_silu(Mul.reference(x, np.asarray(b))), **TOL)


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
def test_binary_layouts_across_blocks(rng, op):
    """Every operand layout the kernel runs without index arithmetic (same shape, scalar,
    trailing axes, per-channel, a middle block) on a tensor of several 16K-element blocks whose
    b-runs cross block edges: plain ops give numpy's float32 bits exactly; with a chain, the
    float64 reference within TOL."""
    x = rng.standard_normal((3, 7, 1301), dtype=np.float32) * 3
    f = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}[op]
    for b in (rng.standard_normal(x.shape, dtype=np.float32),
              np.float32(-1.75),
              rng.standard_normal((1301,), dtype=np.float32),
              rng.standard_normal((7, 1), dtype=np.float32),
              rng.standard_normal((3, 7, 1), dtype=np.float32),
              rng.standard_normal((3, 1, 1), dtype=np.float32)):
        b = np.where(np.abs(b) < 0.1, np.float32(0.5), b).astype(np.float32)   # Div: no blow-up
        np.testing.assert_array_equal(eltwise.binary(x, b, op), f(x, b))
        want = np.clip(np.maximum(f(x.astype(np.float64), np.asarray(b, np.float64)), 0), 0, 6)
        np.testing.assert_allclose(eltwise.binary(x, b, op, ["relu", ("clip", 0.0, 6.0)]), want,
                                   **TOL)


def vm_silu(v):
    v = v.astype(np.float64)
    return v / (1 + np.exp(-v))


@pytest.mark.parametrize("keep", [None, (False, True, False, False), (False,) * 4])
@pytest.mark.parametrize("parallel", [False, True])
def test_norm_chains_match_the_references(rng, monkeypatch, parallel, keep):
    """Norms chained in one pass (each row or group through every stage in turn) against the
    float64 references applied one after the other; serial and parallel loops both. With
    ``keep``, the stages not kept (intermediates left in the kernel's scratch rows) come back
    as None and the kept ones, the last always among them, still match."""
    if parallel and numba.get_num_threads() < 2:
        pytest.skip("the parallel chain needs a pool of 2+ threads; this process has 1")
    monkeypatch.setattr(_threads, "SMALL_ELEMENTS", 0)
    monkeypatch.setattr(norms.ThreadChoice, "parallel", lambda self, threads: parallel)
    x = rng.standard_normal((3, 7, 33), dtype=np.float32) * 3 + 1
    acts = [("gelu", "none"), (None, None), ("gelu_tanh", "tanh"), ("gelu", "none")]
    params = [(rng.standard_normal(33, dtype=np.float32), rng.standard_normal(33, dtype=np.float32))
              for _ in acts]
    stages = [norms.layernorm_stage(x.shape, s, b, -1, 1e-5, a) for (s, b), (a, _) in zip(params, acts)]
    ys = norms.Chain(stages)(x, keep)
    want = [True] * 4 if keep is None else list(keep[:-1]) + [True]
    assert [y is not None for y in ys] == want
    ref = x.astype(np.float64)
    for y, (s, b), (_a, approx) in zip(ys, params, acts):
        xs = [ref, s.astype(np.float64), b.astype(np.float64)]
        ref = (LayerNormalization.reference(*xs, axis=-1, epsilon=1e-5) if approx is None else
               LayerNormGelu.reference(*xs, axis=-1, epsilon=1e-5, approximate=approx))
        if y is not None:
            np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
    xg = rng.standard_normal((2, 12, 5, 7), dtype=np.float32) * 2 - 0.5
    gp = [(rng.standard_normal(12, dtype=np.float32), rng.standard_normal(n, dtype=np.float32))
          for n in (12, 4, 12)]     # per-channel and per-group bias
    gkeep = None if keep is None else keep[1:]
    ys = norms.Chain([norms.groupnorm_stage(xg.shape, s, b, 4, 1e-5, a)
                      for (s, b), a in zip(gp, ("silu", "none", "silu"))])(xg, gkeep)
    assert [y is not None for y in ys] == ([True] * 3 if keep is None else want[1:])
    ref = xg.astype(np.float64)
    for y, (s, b), a in zip(ys, gp, ("silu", "none", "silu")):
        ref = GroupNormAct.reference(ref, s.astype(np.float64), np.repeat(b, 12 // b.size).astype(np.float64),
                                     num_groups=4, epsilon=1e-5, activation=a)
        if y is not None:
            np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


def test_launch_runs_large_alone_calls_on_a_one_thread_team():
    """A kernel compiled twice runs its serial twin for a small call, its prange loop on a
    one-thread team for a larger call that runs alone (its body is compiled with noalias
    arrays), and on the whole pool when told; the pool's size is put back afterwards."""
    n = numba.get_num_threads()
    seen = []
    par = lambda tag: seen.append((tag, "parallel", _threads.num_threads()))   # noqa: E731
    ser = lambda tag: seen.append((tag, "serial", _threads.num_threads()))     # noqa: E731
    _threads.launch(par, ser, False, _threads.SMALL_ELEMENTS - 1, "small")
    _threads.launch(par, ser, False, _threads.SMALL_ELEMENTS, "alone")
    _threads.launch(par, ser, True, _threads.SMALL_ELEMENTS, "pool")
    assert seen == [("small", "serial", n), ("alone", "parallel", 1), ("pool", "parallel", n)]
    assert _threads.num_threads() == n


def test_capped_lowers_the_count_for_the_call_and_puts_it_back():
    """capped(n, fn, *args) returns fn's result with at most n threads inside (never more than
    the caller had), and restores the caller's count after, also when fn raises."""
    n = numba.get_num_threads()
    seen = lambda *a: (a, _threads.num_threads())    # noqa: E731
    assert _threads.capped(1, seen, "x", 2) == (("x", 2), 1)
    assert _threads.capped(n + 3, seen) == ((), n)
    assert _threads.num_threads() == n

    def boom():
        assert _threads.num_threads() == 1
        raise KeyError("inside")
    with pytest.raises(KeyError, match="inside"):
        _threads.capped(1, boom)
    assert _threads.num_threads() == n


def test_thread_choice_times_both_ways_in_blocks_then_keeps_the_faster():
    """ThreadChoice runs blocks of ``block`` calls alone, then on the pool, in turn, until each
    way has ``trials`` timings (a block's first call, which pays the switch, not counted), then
    keeps the way with the lower median, per pool size."""
    from edgeops.threads import ThreadChoice
    for pool_s, serial_s, want in ((1.0, 2.0, True), (3.0, 2.0, False)):
        tc = ThreadChoice(trials=4, block=3)
        assert tc.calls_to_decide() == 12
        seen = []
        for i in range(12):
            par = tc.parallel(2)
            seen.append(par)
            assert tc.decided(2) is None
            # each block's first call is slow the other way round: it must not count
            first = i % 3 == 0
            tc.record(2, par, (serial_s if par else pool_s) * 10 if first else
                      (pool_s if par else serial_s))
        assert seen == ([False] * 3 + [True] * 3) * 2 and tc.decided(2) is want
        assert all(tc.parallel(2) is want for _ in range(3))
        assert tc.decided(4) is None and tc.parallel(4) is False    # another pool: its own


def test_thread_choice_revisits_its_choice():
    """After a choice made by timing calls as they come (the Python path outside a session's
    steps), every ``revisit`` calls ``trials + 1`` run the other way (the first not counted)
    and the choice is made again against the chosen way's latest timings: a start timed while
    something else held the cores does not fix the slower way for good."""
    from edgeops.threads import ThreadChoice
    tc = ThreadChoice(trials=2, block=2, revisit=10)
    cost = {True: 5.0, False: 2.0}           # the pool is slow while the choice is first timed

    def calls(n):
        ways = []
        for _ in range(n):
            par = tc.parallel(2)
            ways.append(par)
            tc.record(2, par, cost[par])
        return ways
    assert calls(tc.calls_to_decide()) == [False, False, True, True] * 2
    assert tc.decided(2) is False
    cost[True] = 1.0                          # the cores are free again
    assert calls(10) == [False] * 10          # the choice holds until the revisit
    assert calls(3) == [True] * 3             # trials + 1 the other way
    assert tc.decided(2) is True
    cost[True] = 9.0
    assert calls(10) == [True] * 10
    assert calls(3) == [False] * 3 and tc.decided(2) is False   # and back when it pays
    cost[True] = 1.0
    assert calls(10) == [False] * 10
    # a revisit that finds the other way no faster keeps the choice
    cost[True] = 1.9
    assert calls(3) == [True] * 3 and tc.decided(2) is False


def test_a_settled_or_recorded_choice_is_never_timed_again():
    """What a session fixed while it was made (settle) or read from the machine's record (fix)
    holds for every later call: no revisit, timings ignored."""
    from edgeops.threads import ThreadChoice
    tc = ThreadChoice(trials=2, block=2, revisit=10)
    cost = {True: 5.0, False: 2.0}

    def trial():
        par = tc.parallel(2)
        tc.record(2, par, cost[par])
    assert tc.settle(2, trial) is False
    cost[True] = 0.1                          # the pool would now win a revisit
    for _ in range(50):
        par = tc.parallel(2)
        assert par is False
        tc.record(2, par, cost[par])
    assert tc.decided(2) is False
    tc.fix(4, True)
    assert tc.decided(4) is True and all(tc.parallel(4) for _ in range(30))


def test_alone_or_pool_times_both_ways_then_keeps_one_way_per_call(rng):
    """A call above SMALL_ELEMENTS runs alone, then on the pool, in blocks, until its choice is
    made, then the chosen way; another shape is timed on its own; a small call always
    runs alone. Results are the same every way (an elementwise chain, checked against numpy)."""
    from edgeops import threads as T
    if numba.get_num_threads() < 2:
        pytest.skip("choosing the pool needs a pool of 2+ threads; this process has 1")
    pool = numba.get_num_threads()
    seen = []
    key = ("test", rng.integers(1 << 30))
    tc = T.ThreadChoice()
    n, b = tc.calls_to_decide(), tc.block
    for _ in range(n + 3):
        with T.alone_or_pool(key, T.SMALL_ELEMENTS):
            seen.append(T.num_threads())
    made = T.choice(key).decided(pool)
    assert made in (True, False)
    assert seen[:n] == ([1] * b + [pool] * b) * (n // (2 * b))
    assert set(seen[n:]) == {pool if made else 1}
    assert T.choice(key + (1,)).decided(pool) is None
    with T.alone_or_pool(key + (2,), T.SMALL_ELEMENTS - 1):
        assert T.num_threads() == 1
    x = rng.standard_normal(T.SMALL_ELEMENTS + 77).astype(np.float32)
    for _ in range(n + 2):
        np.testing.assert_allclose(eltwise.chain(x, ["relu", ("clip", 0.0, 0.5)]),
                                   np.clip(x, 0, 0.5), rtol=0, atol=0)


def test_a_recurring_chain_settles_on_one_way_with_the_same_numbers(rng, monkeypatch):
    """A Chain called again and again (as a region keeps it) times itself alone and on the
    pool, then keeps one; every call, whichever way it ran, gives the same numbers."""
    if numba.get_num_threads() < 2:
        pytest.skip("choosing the pool needs a pool of 2+ threads; this process has 1")
    monkeypatch.setattr(_threads, "SMALL_ELEMENTS", 0)
    x = rng.standard_normal((5, 4, 31), dtype=np.float32)
    ch = norms.Chain([norms.layernorm_stage(x.shape, rng.standard_normal(31, dtype=np.float32),
                                            None, -1, 1e-5, "gelu") for _ in range(3)])
    first = ch(x, (False, False, True))[-1]
    runs = ch.threads.calls_to_decide() + 2
    for _ in range(runs):
        np.testing.assert_array_equal(ch(x, (False, False, True))[-1], first)
    assert ch.threads.decided(numba.get_num_threads()) in (True, False)


def test_norm_chains_refuse_stages_that_do_not_chain(rng):
    s = np.ones(8, np.float32)
    ln = norms.layernorm_stage((4, 8), s, None)
    with pytest.raises(EdgeOpsError, match="do not chain"):
        norms.Chain([ln, norms.layernorm_stage((2, 16), np.ones(16, np.float32), None)])
    with pytest.raises(EdgeOpsError, match="do not chain"):
        norms.Chain([ln, norms.groupnorm_stage((4, 8), s, s, 2)])
    with pytest.raises(EdgeOpsError, match="made for"):
        norms.run_chain(np.ones((8, 4), np.float32), [ln, ln])
    with pytest.raises(EdgeOpsError, match="2 flags for 3 stages"):
        norms.Chain([ln, ln, ln])(np.ones((4, 8), np.float32), keep=(True, False))
    with pytest.raises(EdgeOpsError, match="divide"):
        norms.groupnorm_stage((2, 6, 4), np.ones(6, np.float32), np.ones(6, np.float32), 4)


def test_memory_bound_bad_inputs(rng):
    x = rng.standard_normal((2, 6, 4), dtype=np.float32)
    with pytest.raises(EdgeOpsError, match="divide"):
        norms.groupnorm(x, np.ones(6, np.float32), np.ones(6, np.float32), 4)
    with pytest.raises(EdgeOpsError, match="float32"):
        norms.layernorm(x.astype(np.float64), np.ones(4, np.float32))
    with pytest.raises(EdgeOpsError, match="axis"):
        norms.softmax(x, 3)
    with pytest.raises(EdgeOpsError, match="unknown binary"):
        eltwise.binary(x, x, "Pow")
    with pytest.raises(EdgeOpsError, match="not supported"):
        eltwise.chain(x, ["mish"])


