"""INT8 QConvBnAct / QMatMul on the emulated NPU (the Cube's int8 x int8 -> int32 path):
bit-exact against the ops' integer references (int64 window sums, then ONNX QuantizeLinear in
float32), which ARE the INT8 convention; and ``compile --quantize --board ascend-310b`` lowers
every QDQ unit there, the package matching ONNX Runtime on the QDQ model."""
import numpy as np
import pytest

from edgeops import registry
from edgeops.ops import get_op
from edgeops.pipeline.targets import load_targets

load_targets()      # registers the ascend kernels

QDOM = "ai.edgeops"


def _run(op, inputs, attrs, board):
    od = get_op(op, QDOM)
    a = od.parse_attrs(attrs)
    k = registry.find(registry.op_key(op, QDOM), "ascend")
    assert k.name == {"QConvBnAct": "ascend.qconv_bn_act_int8",
                      "QMatMul": "ascend.qmatmul_int8"}[op]
    y = k.fn(inputs, a, board=board)[0]
    ref = od.reference(*inputs, **a)
    assert y.dtype == np.float32 and y.shape == ref.shape
    np.testing.assert_array_equal(y, ref)
    return y


def _qparams(rng, xt, prefix, quant_out):
    lo, hi = (0, 255) if xt == "uint8" else (-128, 127)
    p = {f"{prefix}_scale": 0.03, f"{prefix}_zero_point": int(rng.integers(lo, hi + 1)),
         f"{prefix}_type": xt}
    if quant_out:
        p.update(y_scale=float(rng.uniform(0.05, 0.3)), y_zero_point=int(rng.integers(-20, 20)),
                 y_type="int8")
    return p


CONV_CASES = [  # (N, C, H, W, K, R, S, conv attributes)
    (1, 3, 19, 17, 12, 3, 3, {"pads": [1, 1, 1, 1]}),
    (2, 12, 9, 11, 20, 3, 3, {"pads": [1, 0, 2, 1], "strides": [2, 1]}),
    (1, 20, 10, 9, 24, 1, 1, {}),
    (1, 6, 8, 13, 10, 3, 2, {"group": 2, "dilations": [2, 1], "pads": [2, 1, 0, 0]}),
]


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"{c[1]}x{c[2]}x{c[3]}k{c[4]}r{c[5]}")
@pytest.mark.parametrize("xt,act,quant_out", [("uint8", "relu", False), ("int8", "none", True),
                                              ("uint8", "relu", True)])
def test_qconv_bit_exact(rng, case, xt, act, quant_out):
    N, C, H, W, K, R, S, conv = case
    G = conv.get("group", 1)
    x = rng.standard_normal((N, C, H, W)).astype(np.float32) * 2
    w = rng.integers(-127, 128, (K, C // G, R, S)).astype(np.float32)
    ws = rng.uniform(1e-3, 1e-2, K).astype(np.float32)
    b = rng.integers(-3000, 3000, K).astype(np.float32)
    attrs = {"activation": act, **conv, **_qparams(rng, xt, "x", quant_out)}
    _run("QConvBnAct", [x, w, ws, b], attrs, "ascend-310b")


def test_qconv_zero_point_padding_without_bias(rng):
    """A zero point the Cube cannot pad with (zp != the type's shift): the host pads; no bias."""
    x = rng.standard_normal((1, 5, 7, 6)).astype(np.float32)
    w = rng.integers(-127, 128, (9, 5, 3, 3)).astype(np.float32)
    ws = rng.uniform(1e-3, 1e-2, 9).astype(np.float32)
    for zp, xt in ((201, "uint8"), (-90, "int8"), (128, "uint8")):
        attrs = {"pads": [1, 1, 1, 1], "x_scale": 0.02, "x_zero_point": zp, "x_type": xt}
        _run("QConvBnAct", [x, w, ws], attrs, "ascend-310b")


@pytest.mark.parametrize("board", ["ascend-310b", "ascend-910b"])
@pytest.mark.parametrize("shape,k,n", [((1, 24), 24, 7), ((3, 5, 37), 37, 19), ((70,), 70, 33)])
@pytest.mark.parametrize("xt,quant_out", [("uint8", False), ("int8", True)])
def test_qmatmul_bit_exact(rng, board, shape, k, n, xt, quant_out):
    a = rng.standard_normal(shape).astype(np.float32) * 2
    b = rng.integers(-128, 128, (k, n)).astype(np.float32)
    bs = rng.uniform(1e-3, 1e-2, n).astype(np.float32)
    bias = rng.integers(-5000, 5000, n).astype(np.float32)
    attrs = {"activation": "relu", **_qparams(rng, xt, "a", quant_out)}
    _run("QMatMul", [a, b, bs, bias], attrs, board)


def test_compile_quantize_for_ascend_310b(tmp_path):
    """Every QDQ unit of the small CNN lands on the Ascend int8 kernels; the package's output is
    within one quantisation step of ONNX Runtime on the QDQ model: at most a_scale * sum_k
    |B[k, n]| * B_scale[n] for the last unit's input (the fp16 pooling before it and float vs
    integer arithmetic may move each of its quantized inputs by one step)."""
    import importlib.util
    from pathlib import Path

    import onnxruntime as ort
    from onnx import numpy_helper
    # the quantize tests' small CNN (their conftest is not importable by name from here)
    spec = importlib.util.spec_from_file_location(
        "quantize_conftest", Path(__file__).resolve().parents[2] / "quantize" / "conftest.py")
    qconf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(qconf)

    from edgeops import package
    from edgeops.pipeline.compile import compile_model
    from edgeops.pipeline.quantize import quantize_for_compile
    calib = [{"x": rng_x} for rng_x in (np.random.default_rng(s).standard_normal((1, 3, 19, 17))
                                        .astype(np.float32) for s in range(4))]
    qdq, _ = quantize_for_compile(qconf.small_convnet(), calib)
    doc = compile_model(qdq, "ascend-310b", str(tmp_path / "pkg"), plan=False)
    q = {p["node"]: p["kernel"] for p in doc["placement"]
         if p["op"] in ("ai.edgeops::QConvBnAct", "ai.edgeops::QMatMul")}
    assert q == {"c1": "ascend.qconv_bn_act_int8", "c2": "ascend.qconv_bn_act_int8",
                 "c3": "ascend.qconv_bn_act_int8", "fc": "ascend.qmatmul_int8"}
    feed = {"x": np.random.default_rng(9).standard_normal((1, 3, 19, 17)).astype(np.float32)}
    y = package.load(str(tmp_path / "pkg")).session().run(None, feed)[0]
    y_ort = ort.InferenceSession(qdq.SerializeToString(),
                                 providers=["CPUExecutionProvider"]).run(None, feed)[0]
    init = {t.name: numpy_helper.to_array(t) for t in qdq.graph.initializer}
    fc = next(n for n in qdq.graph.node if n.name == "fc")
    dq = {n.output[0]: n for n in qdq.graph.node if n.op_type == "DequantizeLinear"}
    a_scale = float(init[dq[fc.input[0]].input[1]])
    wdq = dq[fc.input[1]]
    w = init[wdq.input[0]].astype(np.float64) * init[wdq.input[1]].reshape(-1, 1)   # (N, K)
    tol = a_scale * np.abs(w).sum(axis=1).max()
    err = float(np.abs(y - y_ort).max())
    assert err <= tol, f"max |package - ORT QDQ| {err:.3g} > one input step {tol:.3g}"
