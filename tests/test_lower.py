"""edgeops.lower: where each node runs, why, and a lowered model that computes what the original
does (ONNX Runtime on the original is the reference, random inputs)."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import edgeops.ort as eort
from edgeops.errors import EdgeOpsError, ShapeError
from edgeops.lower import LoweringError, lower
from edgeops.ops import EDGEOPS_DOMAIN
from edgeops.registry import register_kernel, unregister_kernel
from edgeops.sample import INPUT_SHAPE, build_sample_model


def _ort(m, feeds):
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _same_as_original(lw, feeds, rel=1e-4):
    want = _ort(lw.source, feeds)
    got = eort.session(lw.model).run(None, feeds)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        assert np.max(np.abs(g - w)) <= rel * np.max(np.abs(w)), np.max(np.abs(g - w))


def _image(rng):
    return {"image": rng.standard_normal(INPUT_SHAPE).astype(np.float32)}


def _model(nodes, inputs, outputs, inits=(), opset=20):
    g = helper.make_graph(nodes, "g", inputs, outputs, [numpy_helper.from_array(v, k) for k, v in inits])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


def _vi(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape) if shape else shape)


def test_all_lowers_every_supported_node(rng):
    lw = lower(build_sample_model(), "rpi5", mode="all")
    rows = {p.node: p for p in lw.placements}
    assert all(p.reason for p in lw.placements)
    fused = {p.op for p in lw.lowered if p.op.startswith("ai.edgeops::")}
    assert fused == {"ai.edgeops::ConvBnAct", "ai.edgeops::GroupNormAct",
                     "ai.edgeops::LayerNormGelu", "ai.edgeops::SwiGLU"}
    assert {p.op for p in lw.placements if not p.target} == {"Reshape", "Transpose", "Flatten"}
    assert rows["mlp.gate"].fused == ("mlp.gate", "mlp.silu.sigmoid", "mlp.silu.mul", "mlp.up",
                                      "mlp.gate_up")
    assert all(p.plan and p.latency_s > 0 and p.bound for p in lw.lowered)
    for n in lw.model.graph.node:       # the model says what the table says
        p = rows[n.name]
        kernel = {a.name: a.s.decode() for a in n.attribute}.get("kernel")
        assert (n.domain == EDGEOPS_DOMAIN) == bool(p.target) and kernel == p.kernel
    _same_as_original(lw, _image(rng))


def test_none_keeps_the_original_graph(rng):
    m = build_sample_model()
    lw = lower(m, "rpi5", mode="none")
    assert not lw.lowered and len(lw.model.graph.node) == len(m.graph.node)
    assert all(n.domain == "" for n in lw.model.graph.node)
    assert {p.reason for p in lw.placements} == {"--lower none"}
    _same_as_original(lw, _image(rng), rel=0)


def test_auto_follows_predictions_and_a_measured_table(rng):
    m = build_sample_model()
    # no calibration anywhere (the tests' private cache): uncalibrated predictions carry the
    # default bands, which no predicted gain on the sample clears, and each row says so
    lw = lower(m, "rpi5")
    assert not lw.lowered
    judged = [p for p in lw.placements if "not above the bands" in p.reason and p.latency_s]
    assert judged and all(p.band is not None and p.peer_band is not None for p in judged)
    _same_as_original(lw, _image(rng))
    # a measured table overrides the prediction, both ways
    every = {p.op: p for p in lower(m, "rpi5", mode="all").lowered}
    won, lost = every["ai.edgeops::GroupNormAct"], every["MatMul"]
    lw2 = lower(m, "rpi5", measured={(won.kernel, won.signature): (2e-3, 1e-3),
                                     (lost.kernel, lost.signature): (1e-6, 1e-3)})
    rows = {p.node: p for p in lw2.placements}
    assert all(rows[a].target is None for a in won.fused)          # the chain is back in its parts
    assert "measured on rpi5" in rows[sorted(won.fused)[0]].reason or any(
        "measured on rpi5" in rows[a].reason for a in won.fused)
    assert rows[lost.node].target == "neon" and rows[lost.node].measured_s == 1e-6
    _same_as_original(lw2, _image(rng))


def test_npu_lowers_every_supported_node_in_fp16(rng):
    lw = lower(build_sample_model(), "ascend-910b")
    assert lw.mode == "auto" and {p.target for p in lw.lowered} == {"ascend"}
    assert all(p.precision == "fp16" and p.reason.startswith("NPU") for p in lw.lowered)
    assert "fp16" in lw.precision["ascend"] and lw.precision["boundary"] == "fp32"
    assert all(p.latency_s is None for p in lw.placements if not p.target)  # host CPU, unmodelled
    _same_as_original(lw, _image(rng), rel=2e-2)


def test_a_fused_chain_that_stays_goes_back_to_its_nodes(rng):
    """LayerNorm + GELU fuse, ONNX Runtime is faster (a measured table says so): the original
    nodes come back, including the Dropout in front that the passes had removed."""
    d = 12
    nodes = [helper.make_node("Dropout", ["x"], ["xd"], name="drop"),
             helper.make_node("LayerNormalization", ["xd", "s", "b"], ["h"], name="ln"),
             helper.make_node("Gelu", ["h"], ["y"], name="gelu")]
    m = _model(nodes, [_vi("x", (2, 5, d))], [_vi("y", (2, 5, d))],
               [("s", rng.uniform(0.5, 1.5, d).astype(np.float32)),
                ("b", rng.normal(0, 0.1, d).astype(np.float32))])
    fused = lower(m, "rpi5", mode="all").placements[0]
    assert fused.op == "ai.edgeops::LayerNormGelu" and fused.fused == ("ln", "gelu")
    lw = lower(m, "rpi5", measured={(fused.kernel, fused.signature): (1.0, 1e-6)})
    assert not lw.lowered and {p.node for p in lw.placements} == {"drop", "ln", "gelu"}
    assert all(n.domain == "" for n in lw.model.graph.node)
    x = rng.standard_normal((2, 5, d)).astype(np.float32)
    np.testing.assert_allclose(_ort(lw.model, {"x": x})[0], _ort(m, {"x": x})[0], rtol=1e-6)


@pytest.mark.parametrize("opset,axis,lowered", [(11, 1, False), (11, 2, True), (13, 1, True)])
def test_softmax_semantics_of_older_opsets_are_guarded(rng, opset, axis, lowered):
    m = _model([helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=axis)],
               [_vi("x", (2, 3, 4))], [_vi("y", (2, 3, 4))], opset=opset)
    lw = lower(m, "rpi5", mode="all", targets=["reference"])
    assert bool(lw.lowered) == lowered, lw.placements[0].reason
    if not lowered:
        assert "2-D coercion" in lw.placements[0].reason
    _same_as_original(lw, {"x": rng.standard_normal((2, 3, 4)).astype(np.float32)})


def test_nodes_the_bridge_cannot_take_stay(rng):
    d = 6
    nodes = [helper.make_node("LayerNormalization", ["x", "s"], ["y", "mean"], name="ln"),
             helper.make_node("Add", ["xi", "xi"], ["z"], name="intadd")]
    m = _model(nodes, [_vi("x", (3, d)), helper.make_tensor_value_info("xi", TensorProto.INT32, [3])],
               [_vi("y", (3, d)), _vi("mean", (3, 1)),
                helper.make_tensor_value_info("z", TensorProto.INT32, [3])],
               [("s", np.ones(d, np.float32))])
    lw = lower(m, "rpi5", mode="all")
    rows = {p.node: p.reason for p in lw.placements}
    assert "optional output" in rows["ln"] and "fp32" in rows["intadd"] and not lw.lowered


@pytest.fixture
def tiled_relu():
    """A throwaway 'cuda' Relu kernel (above the real ones) that takes a tiling."""
    seen = {}

    @register_kernel("Relu", "cuda", name="test.relu_tiled", priority=99)
    def relu(inputs, attrs, tiling=None):
        seen["tiling"] = tiling
        return [np.maximum(inputs[0], 0)]
    yield seen
    unregister_kernel("test.relu_tiled")


def test_tiling_goes_on_the_node_only_when_the_target_reads_it(rng, tiled_relu, monkeypatch):
    from edgeops.tiling import Tiling
    m = _model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [_vi("x", (64, 96))],
               [_vi("y", (64, 96))])
    import edgeops.targets.cuda as cuda
    kw = dict(mode="all", targets=["cuda"])
    monkeypatch.delattr(cuda, "accepts_tiling", raising=False)
    p = lower(m, "jetson-orin-nano", **kw).placements[0]
    assert p.kernel == "test.relu_tiled" and p.plan and p.tiling is None   # no hook: not attached
    monkeypatch.setattr(cuda, "accepts_tiling", lambda kernel, tiling: tiling.target == "cuda",
                        raising=False)
    lw = lower(m, "jetson-orin-nano", **kw)
    t = Tiling.from_json(lw.placements[0].tiling)
    assert t.target == "cuda" and t.op == "eltwise"
    attrs = {a.name: a.s.decode() for a in lw.model.graph.node[0].attribute}
    assert Tiling.from_json(attrs["tiling"]) == t
    _same_as_original(lw, {"x": rng.standard_normal((64, 96)).astype(np.float32)}, rel=0)
    assert tiled_relu["tiling"] == t                     # it reached the kernel


def test_host_is_measured_once_and_cached(rng, monkeypatch):
    from edgeops.lower import measure
    lw = lower(build_sample_model(), "host")
    rows = [p for p in lw.placements if p.measured_s is not None]
    assert rows and all(p.measured_peer_s > 0 for p in rows)
    assert all(("measured on host" in p.reason) for p in rows)
    assert measure.cache_path(lw.board).is_file()
    monkeypatch.setattr(measure, "measure", lambda *a: pytest.fail("measured again"))
    again = lower(build_sample_model(), "host")
    assert [p.where for p in again.placements] == [p.where for p in lw.placements]
    _same_as_original(again, _image(rng))


def test_errors_name_what_to_do():
    with pytest.raises(LoweringError, match="unknown lowering mode"):
        lower(build_sample_model(), "rpi5", mode="fast")
    with pytest.raises(LoweringError, match="unknown target 'tpu'"):
        lower(build_sample_model(), "rpi5", targets=["tpu"])
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", ("N", 4))], [_vi("y", ("N", 4))])
    with pytest.raises(ShapeError, match="--shapes"):
        lower(m, "rpi5")
    lw = lower(m, "rpi5", mode="all", shapes="x:3x4")
    assert lw.lowered and [d.dim_value for d in lw.model.graph.input[0].type.tensor_type.shape.dim] == [3, 4]
    with pytest.raises(EdgeOpsError, match="unknown board"):
        lower(m, "nosuchboard")
