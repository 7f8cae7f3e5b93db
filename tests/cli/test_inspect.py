"""``edgeops inspect`` on models no one here wrote: op histograms and MAC totals against an
independent count.

The independent count uses neither edgeops nor ONNX shape inference: the model runs in ONNX
Runtime with every Conv/Gemm/MatMul input and output added as a graph output, and MACs follow
from the real shapes (Conv: numel(out) * Cin/group * kh * kw from the weight; Gemm/MatMul:
numel(out) * K).
"""
import collections
import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgeops.cli import main
from edgeops.pipeline.inspect import inspect_model
from edgeops.sample import build_sample_model
from edgeops.zoo import randomise_weights

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
# a representative few by default (grouped conv + channel shuffle, fire modules, inception
# branches + LRN, bottlenecks + BN); the rest with `make test-full`
DEFAULT = ["squeezenet", "shufflenet", "inception_v1", "resnet50"]
FULL = ["bvlc_alexnet", "zfnet512", "vgg19", "inception_v2", "densenet121"]
MAC_OPS = ("Conv", "Gemm", "MatMul")


def _randomised(model: onnx.ModelProto, rng) -> onnx.ModelProto:
    return randomise_weights(model, rng)


def ort_macs(model: onnx.ModelProto, feeds: dict) -> dict[str, int]:
    """{node output name: MACs} for Conv/Gemm/MatMul, from shapes ONNX Runtime produces."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    inits = {t.name: tuple(t.dims) for t in m.graph.initializer}
    have = {o.name for o in m.graph.output}
    nodes = [n for n in m.graph.node if n.op_type in MAC_OPS]
    want = []
    for n in nodes:
        for x in [n.output[0], *n.input[:2]]:
            if x not in inits and x not in feeds and x not in have and x not in want:
                want.append(x)
    m.graph.output.extend(helper.make_tensor_value_info(x, TensorProto.FLOAT, None) for x in want)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    shapes = dict(inits)
    shapes.update({k: v.shape for k, v in feeds.items()})
    for name, value in zip(names, sess.run(names, feeds)):
        assert np.isfinite(value).all(), name
        shapes[name] = value.shape
    out = {}
    for n in nodes:
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        y, a, w = shapes[n.output[0]], shapes[n.input[0]], shapes[n.input[1]]
        if n.op_type == "Conv":
            k = int(np.prod(w[1:]))                    # Cin/group * kh * kw
        elif n.op_type == "Gemm":
            k = a[0] if attrs.get("transA", 0) else a[1]
        else:
            k = a[-1]
        out[n.output[0]] = int(np.prod(y)) * int(k)
    return out


def _feeds(model, rng, shapes=None):
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for i in model.graph.input:
        if i.name not in inits:
            shape = (shapes or {}).get(i.name) or [d.dim_value for d in i.type.tensor_type.shape.dim]
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def _check_against_independent_count(path_or_model, model, rng, shapes=None):
    doc = inspect_model(path_or_model, shapes=shapes)
    assert doc["op_histogram"] == dict(collections.Counter(n.op_type for n in model.graph.node))
    r = _randomised(model, rng)
    expected = ort_macs(r, _feeds(r, rng, shapes))
    by_output = {n["outputs"][0]: n for n in doc["nodes"]}
    for out, macs in expected.items():
        assert by_output[out]["macs"] == macs, (by_output[out]["name"], by_output[out]["op"])
    assert doc["macs"] == sum(expected.values())
    assert all(n["macs"] in (0, None) for n in doc["nodes"] if n["op"] not in MAC_OPS)
    return doc


def _light(name, rng):
    path = LIGHT / f"light_{name}.onnx"
    return _check_against_independent_count(path, onnx.load(path), rng)


@pytest.mark.parametrize("name", DEFAULT)
def test_light_models(name, rng):
    doc = _light(name, rng)
    assert doc["macs"] > 100e6 and doc["params"]["count"] > 1e6 and doc["flops"] >= 2 * doc["macs"]


@pytest.mark.full
@pytest.mark.parametrize("name", FULL)
def test_light_models_full(name, rng):
    _light(name, rng)


def test_known_totals():
    """Published figures (ResNet-50: 4.1 GMACs, 25.6 M params) as a sanity anchor."""
    doc = inspect_model(LIGHT / "light_resnet50.onnx")
    assert doc["macs"] == pytest.approx(4.1e9, rel=0.02)
    assert doc["params"]["count"] == pytest.approx(25.6e6, rel=0.01)


# ---- a torchvision-style MobileNetV2 export, built here --------------------------------------

def _mobilenet_v2_like(rng) -> onnx.ModelProto:
    """Stem conv + Clip(0, 6), two inverted residuals (1x1 expand, depthwise 3x3, 1x1 project,
    residual Add on the stride-1 one), GlobalAveragePool, Flatten, Gemm. Symbolic batch."""
    nodes, inits = [], []

    def w(name, shape):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name))
        return name

    def conv(x, name, cin, cout, k, stride=1, group=1, act=True):
        nodes.append(helper.make_node("Conv", [x, w(f"{name}.w", (cout, cin // group, k, k)), w(f"{name}.b", (cout,))],
                                      [name], name=name, kernel_shape=[k, k], strides=[stride] * 2,
                                      pads=[k // 2] * 4, group=group))
        if not act:
            return name
        nodes.append(helper.make_node("Clip", [name, "zero", "six"], [f"{name}.relu6"], name=f"{name}.relu6"))
        return f"{name}.relu6"

    inits += [numpy_helper.from_array(np.float32(0), "zero"), numpy_helper.from_array(np.float32(6), "six")]
    x = conv("input", "stem", 3, 16, 3, stride=2)
    # block 1: stride 1, 16 -> 16, expand 6 -> residual
    h = conv(x, "b1.expand", 16, 96, 1)
    h = conv(h, "b1.dw", 96, 96, 3, group=96)
    h = conv(h, "b1.project", 96, 16, 1, act=False)
    nodes.append(helper.make_node("Add", [x, h], ["b1.add"], name="b1.add"))
    # block 2: stride 2, 16 -> 24, no residual
    h = conv("b1.add", "b2.expand", 16, 96, 1)
    h = conv(h, "b2.dw", 96, 96, 3, stride=2, group=96)
    h = conv(h, "b2.project", 96, 24, 1, act=False)
    nodes.append(helper.make_node("GlobalAveragePool", [h], ["pool"], name="pool"))
    nodes.append(helper.make_node("Flatten", ["pool"], ["flat"], name="flatten", axis=1))
    nodes.append(helper.make_node("Gemm", ["flat", w("fc.w", (10, 24)), w("fc.b", (10,))], ["logits"],
                                  name="fc", transB=1))
    g = helper.make_graph(nodes, "mobilenet_v2_like",
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, 50, 50])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="pytorch")


def test_mobilenet_v2_style_export(tmp_path, rng):
    model = _mobilenet_v2_like(rng)
    p = tmp_path / "mobilenet.onnx"
    onnx.save_model(model, p)
    doc = _check_against_independent_count(p, model, rng, shapes={"input": (2, 3, 50, 50)})
    assert doc["inputs"][0]["shape"] == [2, 3, 50, 50] and doc["outputs"][0]["shape"] == [2, 10]
    dw = next(n for n in doc["nodes"] if n["name"] == "b1.dw")
    assert dw["macs"] == 2 * 96 * 25 * 25 * 9 and dw["output_shapes"] == [[2, 96, 25, 25]]
    assert doc["params"]["count"] == sum(numpy_helper.to_array(t).size for t in model.graph.initializer)


# ---- the document and the command --------------------------------------------------------------

def test_document_of_the_sample(capsys):
    doc = inspect_model("sample")
    assert doc["model"].startswith("sample")
    assert doc["inputs"] == [{"name": "image", "shape": [1, 3, 32, 32], "dtype": "fp32"}]
    assert doc["tensors"]["total"] == doc["tensors"]["initializer"] + doc["tensors"]["input"] \
        + doc["tensors"]["activation"] + doc["tensors"]["output"] + doc["tensors"]["constant"]
    # fp32 weights plus the two int64 Reshape targets (3 and 4 values)
    assert doc["params"]["bytes"] == 4 * (doc["params"]["count"] - 7) + 8 * 7
    assert doc["nodes_count"] == len(doc["nodes"]) == sum(doc["op_histogram"].values())
    assert doc["macs"] == sum(n["macs"] for n in doc["nodes"]) == sum(doc["macs_by_op"].values())
    assert doc["flops"] == sum(n["flops"] for n in doc["nodes"])
    assert doc["uncosted"] == {}
    conv = next(n for n in doc["nodes"] if n["name"] == "stem.conv")
    assert conv["macs"] == 16 * 32 * 32 * 3 * 9 and conv["params"] == 16 * 3 * 9
    # coverage: every op on every board has a target, and per-node placements agree with it
    assert set(doc["coverage"]) == set(doc["op_histogram"])
    for op, row in doc["coverage"].items():
        assert set(row) == set(doc["boards"])
        for b, cell in row.items():
            assert cell["target"] in cell["nodes"] and cell["reason"]
            assert sum(cell["nodes"].values()) == doc["op_histogram"][op]
    for n in doc["nodes"]:
        assert set(n["targets"]) == set(doc["boards"])
    json.dumps(doc)   # JSON-able as it is


def test_coverage_uses_the_registry_per_board():
    from edgeops import boards, graph
    from edgeops.registry import select
    names = boards.names()      # inspect_model below loads the targets select reads
    assert names, "the bundled board files are missing"
    doc = inspect_model("sample")
    g = graph.load(build_sample_model())
    b = boards.load(names[0])
    for n in g.nodes:
        assert doc["coverage"][n.op_type][b.name]["nodes"].get(select(n, b).target, 0) >= 1


def test_cli_json_is_one_document_on_stdout(capsys):
    assert main(["inspect", "sample", "--json"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["macs"] == inspect_model("sample")["macs"] and err == ""


def test_cli_human_report(capsys):
    assert main(["inspect", "sample"]) == 0
    out = capsys.readouterr().out
    for s in ("image", "logits", "MMACs", "GroupNormalization", "stem.conv", "params"):
        assert s in out, s


def test_cli_shapes_flag(tmp_path, capsys, rng):
    p = tmp_path / "m.onnx"
    onnx.save_model(_mobilenet_v2_like(rng), p)
    assert main(["inspect", str(p), "--shapes", "input:3x3x50x50", "--json"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert main(["inspect", str(p), "--shapes", "input:1x3x50x50", "--json"]) == 0
    assert one["macs"] == 3 * json.loads(capsys.readouterr().out)["macs"]
