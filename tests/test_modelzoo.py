"""edgeops.modelzoo: exporter-spelled benchmark models built without torch.

Numerics: ONNX Runtime against onnx.reference on the same inputs, max |error| / max |reference|
per output <= 1e-4 (fp32; the two differ only in summation order, ~1e-6 seen here). The compile
checks (``full``: 80 s here with a cold Numba cache, ~10 s warm) hold a host
package with every node it can lower to the same 1e-4 against ONNX Runtime on the original.
"""
from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx.reference import ReferenceEvaluator

from edgeops import modelzoo
from edgeops.pipeline.compile import compile_model
from edgeops.run import run_package
from edgeops.errors import EdgeOpsError

RTOL = 1e-4
SMALL = {"resnet18": 32, "mobilenetv2": 32, "yolo_neck": 16, "unet_block": 16,
         "encoder_block": 8, "swiglu_mlp": 8}
CASES = [(n, s) for n in SMALL for s in modelzoo.SPELLINGS]
DEFAULT_INPUTS = {"resnet18": [(1, 3, 224, 224)], "mobilenetv2": [(1, 3, 224, 224)],
                  "yolo_neck": [(1, 128, 80, 80), (1, 256, 40, 40), (1, 512, 20, 20)],
                  "unet_block": [(1, 64, 64, 64)], "encoder_block": [(1, 128, 768)],
                  "swiglu_mlp": [(1, 128, 768)]}
# what the architectures hold, whichever exporter wrote them ("silu": a Mul of x and Sigmoid(x);
# "group_norm": InstanceNormalization or GroupNormalization)
ARCH = {"resnet18": {"Conv": 20, "BatchNormalization": 20, "MaxPool": 1, "Add": 8, "Gemm": 1},
        "mobilenetv2": {"Conv": 52, "BatchNormalization": 52, "Clip": 35, "Gemm": 1},
        "yolo_neck": {"Conv": 20, "BatchNormalization": 20, "silu": 20, "MaxPool": 3, "Resize": 2,
                      "Concat": 9, "Split": 4},
        "unet_block": {"Conv": 10, "silu": 6, "group_norm": 6, "Resize": 1, "Concat": 1},
        "encoder_block": {"MatMul": 8, "Softmax": 1, "LayerNormalization": 2},
        "swiglu_mlp": {"MatMul": 3, "silu": 1}}


def shapes(values):
    return [tuple(d.dim_value for d in v.type.tensor_type.shape.dim) for v in values]


def counts(m: onnx.ModelProto) -> Counter:
    c = Counter(n.op_type for n in m.graph.node)
    made_by = {o: n for n in m.graph.node for o in n.output}
    c["silu"] = sum(1 for n in m.graph.node if n.op_type == "Mul" and any(
        made_by.get(i) is not None and made_by[i].op_type == "Sigmoid"
        and made_by[i].input[0] in n.input for i in n.input))
    c["group_norm"] = c["InstanceNormalization"] + c["GroupNormalization"]
    return c


@pytest.fixture(scope="module")
def small():
    cache = {}

    def get(name, spelling):
        if (name, spelling) not in cache:
            cache[name, spelling] = modelzoo.build(name, spelling, size=SMALL[name])
        return cache[name, spelling]
    return get


@pytest.mark.parametrize("name,spelling", CASES)
def test_default_size_checks_and_infers(name, spelling):
    m = modelzoo.build(name, spelling)
    onnx.checker.check_model(m, full_check=True)
    inferred = onnx.shape_inference.infer_shapes(m, check_type=True, strict_mode=True)
    assert shapes(m.graph.input) == DEFAULT_INPUTS[name]
    assert all(s and all(d > 0 for d in s) for s in shapes(inferred.graph.output))
    c = counts(m)
    assert {k: c[k] for k in ARCH[name]} == ARCH[name]


@pytest.mark.parametrize("name,spelling", CASES)
def test_onnxruntime_matches_the_reference(name, spelling, small):
    m = small(name, spelling)
    feeds = modelzoo.sample_inputs(m, seed=1)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    got = ort.InferenceSession(m.SerializeToString(), so,
                               providers=["CPUExecutionProvider"]).run(None, feeds)
    want = ReferenceEvaluator(m).run(None, feeds)
    for g, w in zip(got, want):
        assert g.shape == w.shape and np.std(w) > 0
        assert np.max(np.abs(g - w)) / np.max(np.abs(w)) <= RTOL


@pytest.mark.parametrize("name", SMALL)
def test_torchscript_spelling(name, small):
    m, c = small(name, "torchscript"), counts(small(name, "torchscript"))
    assert m.opset_import[0].version == 17
    assert c["GroupNormalization"] == 0 and c["Gelu"] == 0
    assert c["InstanceNormalization"] == ARCH[name].get("group_norm", 0)
    if name in ("mobilenetv2", "yolo_neck", "unet_block", "encoder_block"):
        assert c["Constant"] > 0                   # scalars and shapes as Constant nodes
    if name == "unet_block":                       # Reshape/InstanceNorm/Reshape/Mul/Add
        assert c["Reshape"] == 2 * c["InstanceNormalization"] and c["Identity"] > 0
        ident = {n.output[0]: n.input[0] for n in m.graph.node if n.op_type == "Identity"}
        assert set(ident.values()) <= {t.name for t in m.graph.initializer}
    if name == "encoder_block":                    # exact GELU as Div/Erf/Add/Mul/Mul
        assert c["Erf"] == 1 and c["LayerNormalization"] == 2


@pytest.mark.parametrize("name", SMALL)
def test_dynamo_spelling(name, small):
    m, c = small(name, "dynamo"), counts(small(name, "dynamo"))
    assert m.opset_import[0].version >= 18
    assert c["Constant"] == 0 and c["Identity"] == 0 and c["InstanceNormalization"] == 0
    assert c["GroupNormalization"] == ARCH[name].get("group_norm", 0)
    if name == "encoder_block":
        assert c["LayerNormalization"] == 2 and c["Gelu"] == 1 and c["Erf"] == 0


def test_same_seed_same_bytes_other_seed_other_weights():
    a = modelzoo.build("unet_block", "torchscript", size=8, seed=3)
    assert a.SerializeToString() == modelzoo.build("unet_block", "torchscript", size=8,
                                                   seed=3).SerializeToString()
    b = modelzoo.build("unet_block", "torchscript", size=8, seed=4)
    assert [n.op_type for n in a.graph.node] == [n.op_type for n in b.graph.node]
    wa, wb = ({t.name: onnx.numpy_helper.to_array(t) for t in m.graph.initializer} for m in (a, b))
    assert wa.keys() == wb.keys()
    assert not np.array_equal(wa["down_blocks.0.resnets.0.conv1.weight"], wb["down_blocks.0.resnets.0.conv1.weight"])


def test_sample_inputs_are_seeded_and_fit():
    m = modelzoo.build("yolo_neck", size=8)
    x, y = modelzoo.sample_inputs(m, 5), modelzoo.sample_inputs(m, 5)
    assert [v.shape for v in x.values()] == shapes(m.graph.input)
    assert all(v.dtype == np.float32 and np.array_equal(v, y[k]) for k, v in x.items())
    assert not np.array_equal(x["p3"], modelzoo.sample_inputs(m, 6)["p3"])


def test_batch_size_and_bad_arguments():
    m = modelzoo.build("encoder_block", "dynamo", batch=2, size=4)
    assert shapes(m.graph.input) == [(2, 4, 768)] and shapes(m.graph.output) == [(2, 4, 768)]
    assert modelzoo.parse("unet_block@dynamo:32") == ("unet_block", "dynamo", 32)
    assert modelzoo.parse("resnet18") == ("resnet18", "torchscript", None)
    with pytest.raises(EdgeOpsError, match="have: resnet18"):
        modelzoo.build("resnet19")
    with pytest.raises(EdgeOpsError, match="spelling"):
        modelzoo.build("resnet18", "onnxscript")
    with pytest.raises(EdgeOpsError, match="multiple of 8"):
        modelzoo.build("yolo_neck", size=20)


@pytest.mark.full
@pytest.mark.parametrize("name,spelling", CASES)
def test_host_package_with_everything_lowered_matches(name, spelling, small, tmp_path):
    pkg = tmp_path / "pkg"
    doc = compile_model(small(name, spelling), "host", pkg, mode="all", verify=False, plan=False)
    res = run_package(pkg, runs=1)
    assert res["ok"] and res["max_rel"] <= RTOL, res["outputs"]
    assert any(r["target"] for r in doc["placement"])
