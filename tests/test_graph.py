"""Graph IR: loading (path, bytes, ModelProto, external data), --shapes overrides and their
errors, topological order, producers/consumers, constants, params, op histogram."""
import collections
import random

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgeops import graph
from edgeops.errors import ModelError, ShapeError
from edgeops.sample import build_sample_model


def _mlp(batch="N", opset=21):
    """x (batch, 3, 4, 4) -> Reshape -> Gemm(48->10) -> Relu, with a symbolic batch by default."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((10, 48)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.standard_normal(10).astype(np.float32), "b"),
             numpy_helper.from_array(np.array([0, -1], np.int64), "flat")]
    nodes = [helper.make_node("Reshape", ["x", "flat"], ["r"], name="flatten"),
             helper.make_node("Gemm", ["r", "W", "b"], ["g"], name="fc", transB=1),
             helper.make_node("Relu", ["g"], ["y"], name="relu")]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 10])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


@pytest.fixture(scope="module")
def sample():
    return build_sample_model()


@pytest.fixture(scope="module")
def sample_graph(sample):
    return graph.load(sample)


# ---- loading ------------------------------------------------------------------------------------

def test_path_bytes_and_modelproto_give_the_same_graph(tmp_path, sample, sample_graph):
    p = tmp_path / "m.onnx"
    onnx.save_model(sample, p)
    for g in (graph.load(p), graph.load(str(p)), graph.load(p.read_bytes()), sample_graph):
        assert [n.name for n in g.nodes] == [n.name for n in sample_graph.nodes]
        assert {k: t.shape for k, t in g.tensors.items()} == {k: t.shape for k, t in sample_graph.tensors.items()}
        assert g.total_macs == sample_graph.total_macs > 0
    assert graph.load(p).source == str(p)
    assert sample.graph.value_info == build_sample_model().graph.value_info   # input not mutated


def test_external_data(tmp_path, sample):
    p = tmp_path / "ext" / "model.onnx"
    p.parent.mkdir()
    m = onnx.ModelProto()
    m.CopyFrom(sample)       # save_model moves the copy's data out to the file
    onnx.save_model(m, p, save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=0)
    assert (p.parent / "weights.bin").stat().st_size > 100_000 and p.stat().st_size < 20_000
    g = graph.load(p)
    ref = {t.name: numpy_helper.to_array(t) for t in sample.graph.initializer}
    assert {t.name for t in g.initializers} == set(ref)
    for t in g.initializers:
        np.testing.assert_array_equal(t.data, ref[t.name])
    # shape operands stored externally still drive shape inference (Reshape to tokens)
    assert all(t.is_static for t in g.tensors.values())
    assert g.total_macs == graph.load(sample).total_macs
    # bytes of the same file: external data found through base_dir
    gb = graph.load(p.read_bytes(), base_dir=p.parent)
    np.testing.assert_array_equal(gb.tensors["head.fc.weight"].data, ref["head.fc.weight"])
    (p.parent / "weights.bin").unlink()
    with pytest.raises(ModelError, match="external data"):
        graph.load(p)


def test_initializer_data_of_a_path_model_is_lazy_and_right(tmp_path, sample_graph):
    t = sample_graph.tensors["stem.conv.weight"]
    assert t.kind == "initializer" and t.is_const and t.shape == (16, 3, 3, 3) and t.dtype == "fp32"
    assert t.data.shape == (16, 3, 3, 3) and np.isfinite(t.data).all()
    assert sample_graph.tensors["stem.conv"].data is None


# ---- --shapes ----------------------------------------------------------------------------------

def test_shapes_override_fixes_symbolic_batch():
    g = graph.load(_mlp(), shapes="x:2x3x4x4")
    assert g.inputs[0].shape == (2, 3, 4, 4)
    assert g.tensors["r"].shape == (2, 48) and g.outputs[0].shape == (2, 10)
    assert g.node("fc").macs == 2 * 10 * 48 and g.total_macs == 960
    assert graph.load(_mlp(), shapes={"x": (5, 3, 4, 4)}).total_macs == 5 * 480
    # a fixed dim restated with its own value is fine
    assert graph.load(_mlp(batch=2), shapes="x:2x3x4x4").total_macs == 960


def test_symbolic_input_without_shapes_names_input_and_axis():
    with pytest.raises(ShapeError, match=r"input 'x' has symbolic dim 'N' at axis 0.*--shapes 'x:Nx3x4x4'"):
        graph.load(_mlp())
    g = graph.load(_mlp(), require_static=False)     # allowed when asked for
    assert g.inputs[0].shape == ("N", 3, 4, 4) and g.node("fc").cost is None


@pytest.mark.parametrize("spec, match", [
    ("y:2x3x4x4", r"names 'y', which is not a graph input; inputs: \['x'\]"),
    ("W:10x48", "not a graph input"),                       # an initializer is not an input
    ("x:2x48", r"input 'x' has rank 4, --shapes gives 2 dims"),
    ("x:2x5x4x4", r"input 'x' has fixed dim 3 at axis 1, --shapes gives 5"),
    ("x2x3x4x4", "bad --shapes entry"),
    ("x:2xax4x4", "bad --shapes entry"),
    ("x:", "bad --shapes entry"),
    (":2x3", "bad --shapes entry"),
    ("x:0x3x4x4", "positive"),
    ("x:2x3x4x4;x:1x3x4x4", "twice"),
])
def test_bad_shapes(spec, match):
    with pytest.raises(ShapeError, match=match):
        graph.load(_mlp(), shapes=spec)


def test_parse_shapes_forms():
    assert graph.parse_shapes("x:1x3x224x224; mask:1,128") == {"x": (1, 3, 224, 224), "mask": (1, 128)}
    assert graph.parse_shapes("input_1:0:1x3") == {"input_1:0": (1, 3)}     # TensorFlow-style names
    assert graph.parse_shapes("gpu_0/data_0:1X3") == {"gpu_0/data_0": (1, 3)}
    assert graph.parse_shapes(None) == {} and graph.parse_shapes("") == {}


# ---- structure ---------------------------------------------------------------------------------

def _assert_topological(g):
    seen = {t.name for t in g.inputs} | {t.name for t in g.initializers}
    for i, n in enumerate(g.nodes):
        assert n.index == i
        assert all(x in seen for x in n.inputs if x), n.name
        seen.update(n.outputs)


def test_toposort_of_shuffled_nodes(sample):
    shuffled = onnx.ModelProto()
    shuffled.CopyFrom(sample)
    nodes = list(shuffled.graph.node)
    random.Random(1).shuffle(nodes)
    del shuffled.graph.node[:]
    shuffled.graph.node.extend(nodes)
    assert [n.name for n in shuffled.graph.node] != [n.name for n in sample.graph.node]
    g = graph.Graph(shuffled)
    _assert_topological(g)
    assert {n.name for n in g.nodes} == {n.name for n in sample.graph.node}
    assert all(shuffled.graph.node[n.proto_index].name == n.name for n in g.nodes)
    # load() too, once the checker (which insists on sorted nodes) is skipped
    _assert_topological(graph.load(shuffled, check=False))
    with pytest.raises(ModelError, match="fails the ONNX checker"):
        graph.load(shuffled)


def test_sorted_model_keeps_its_order(sample, sample_graph):
    assert [n.name for n in sample_graph.nodes] == [n.name for n in sample.graph.node]


def test_producers_and_consumers(sample_graph):
    g = sample_graph
    assert g.producer("image") is None and g.producer("stem.conv.weight") is None
    assert g.producer("stem.bn").name == "stem.bn"
    # GroupNorm output feeds both halves of SiLU
    assert sorted(c.name for c in g.consumers("down1.gn")) == ["down1.silu.mul", "down1.silu.sigmoid"]
    # the token stream is read by the first LayerNorm and by the residual Add
    assert sorted(c.name for c in g.consumers("tokens.transpose")) == ["block1.ln", "block1.residual"]
    assert [c.name for c in g.consumers("mlp.ln")] == ["mlp.gate", "mlp.up"]
    assert g.consumers("logits") == [] and g.outputs[0].name == "logits"
    for n in g.nodes:
        for o in n.outputs:
            assert g.producer(o) is n
            assert all(o in c.inputs for c in g.consumers(o))
    # a node reading one tensor twice is one consumer
    assert [c.name for c in g.consumers("block1.gelu.mul")] == ["block1.gelu.mul_half"]


def test_cycle_is_a_model_error():
    nodes = [helper.make_node("Add", ["x", "b"], ["a"], name="A"),
             helper.make_node("Relu", ["a"], ["b"], name="B"),
             helper.make_node("Relu", ["x"], ["y"], name="C")]
    g = helper.make_graph(nodes, "cyc", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    with pytest.raises(ModelError, match=r"cycle .* 2 node\(s\), e.g. \['A', 'B'\]"):
        graph.Graph(m, "cyc.onnx")
    with pytest.raises(ModelError):
        graph.load(m)           # the checker already refuses it


def test_subgraph_outer_scope_reads_order_the_owner_after_the_producer():
    then_g = helper.make_graph([helper.make_node("Relu", ["late"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])])
    else_g = helper.make_graph([helper.make_node("Neg", ["late"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2])])
    nodes = [helper.make_node("If", ["c"], ["y"], name="if", then_branch=then_g, else_branch=else_g),
             helper.make_node("Abs", ["x"], ["late"], name="producer")]
    g = helper.make_graph(nodes, "sub", [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                                         helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    assert [n.name for n in graph.Graph(m).nodes] == ["producer", "if"]


def test_unnamed_and_duplicate_node_names_become_unique():
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["b"], name="Relu_0"),
             helper.make_node("Relu", ["b"], ["c"], name="dup"), helper.make_node("Relu", ["c"], ["y"], name="dup")]
    g = helper.make_graph(nodes, "n", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    gr = graph.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]))
    names = [n.name for n in gr.nodes]
    assert len(set(names)) == 4 and names[1] == "Relu_0" and names[2] == "dup"
    assert gr.node(names[3]).outputs == ["y"]


# ---- summaries -----------------------------------------------------------------------------------

def test_op_histogram_matches_the_proto(sample, sample_graph):
    assert sample_graph.op_histogram() == dict(collections.Counter(n.op_type for n in sample.graph.node))
    assert list(sample_graph.op_histogram().values()) == sorted(sample_graph.op_histogram().values(), reverse=True)


def test_params(sample, sample_graph):
    arrays = [numpy_helper.to_array(t) for t in sample.graph.initializer]
    assert sample_graph.param_count == sum(a.size for a in arrays)
    assert sample_graph.param_bytes == sum(a.nbytes for a in arrays)
    conv = sample_graph.node("down1.conv")
    assert conv.param_count == 32 * 16 * 9 + 32 and conv.param_bytes == 4 * conv.param_count
    assert sample_graph.node("stem.relu").param_count == 0


def test_constant_nodes_count_as_parameters():
    """Weights held as Constant / ConstantOfShape nodes (the onnx light models do this)."""
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3) + 1, "wv")
    nodes = [helper.make_node("Constant", [], ["w"], name="cw", value=w),
             helper.make_node("ConstantOfShape", ["bshape"], ["b"], name="cb",
                              value=numpy_helper.from_array(np.array([0.5], np.float32))),
             helper.make_node("Gemm", ["x", "w", "b"], ["y"], name="fc")]
    g = helper.make_graph(nodes, "c", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
                          [numpy_helper.from_array(np.array([3], np.int64), "bshape")])
    gr = graph.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]))
    assert gr.tensors["w"].is_const and gr.tensors["b"].is_const and not gr.tensors["y"].is_const
    np.testing.assert_array_equal(gr.tensors["w"].data, numpy_helper.to_array(w))
    np.testing.assert_array_equal(gr.tensors["b"].data, np.full(3, 0.5, np.float32))
    # the shape operand of ConstantOfShape is not a parameter; the weights are
    assert {t.name for t in gr.params} == {"w", "b"} and gr.param_count == 15 and gr.param_bytes == 60
    assert gr.node("fc").param_count == 15 and gr.node("fc").macs == 2 * 3 * 4


def test_every_sample_tensor_has_a_static_shape(sample_graph):
    # ONNX inference leaves GroupNormalization-21 (a function op) unknown; the op definition fills it
    assert all(t.is_static and t.dtype == ("int64" if t.name in ("tokens.shape", "head.shape") else "fp32")
               for t in sample_graph.tensors.values()), \
        [t for t in sample_graph.tensors.values() if not t.is_static]
    assert sample_graph.tensors["down1.gn"].shape == (1, 32, 16, 16)
    assert all(n.cost is not None for n in sample_graph.nodes), [n.cost_error for n in sample_graph.nodes]


def test_custom_op_shapes_come_from_op_definitions():
    rng = np.random.default_rng(0)
    w1, w2 = (numpy_helper.from_array(rng.standard_normal((8, 12)).astype(np.float32), n) for n in ("w1", "w2"))
    nodes = [helper.make_node("SwiGLU", ["x", "w1", "w2"], ["h"], name="swiglu", domain="ai.edgeops"),
             helper.make_node("Relu", ["h"], ["y"], name="relu")]
    g = helper.make_graph(nodes, "c", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 5, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * 3)], [w1, w2])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("ai.edgeops", 1)])
    gr = graph.load(m)
    # the custom output is filled, and ONNX inference then carries it on through Relu
    assert gr.tensors["h"].shape == (1, 5, 12) and gr.outputs[0].shape == (1, 5, 12)
    assert gr.outputs[0].dtype == "fp32" and gr.node("swiglu").macs == 2 * 5 * 8 * 12


def test_old_opset_attribute_makes_cost_unknown_not_a_crash():
    """opset-6 BatchNormalization has is_test/spatial attributes today's definition does not know."""
    c = 3
    inits = [numpy_helper.from_array(np.ones(c, np.float32) * (i + 1), f"p{i}") for i in range(4)]
    n = helper.make_node("BatchNormalization", ["x", "p0", "p1", "p2", "p3"], ["y"], name="bn",
                         is_test=1, spatial=1)
    ins = [helper.make_tensor_value_info(t.name, TensorProto.FLOAT, [c]) for t in inits]  # IR 3 lists them
    g = helper.make_graph([n], "bn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 2, 2])] + ins,
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, 2, 2])], inits)
    gr = graph.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 6)], ir_version=3))
    node = gr.node("bn")
    assert [t.name for t in gr.inputs] == ["x"]        # IR 3 lists initializers as inputs too
    assert node.cost is None and "is_test" in node.cost_error and gr.total_macs == 0


@pytest.mark.parametrize("shape, check, match", [
    ([None, 4], True, r"input 'x' has an unknown dim at axis 0 .*--shapes 'x:Nx4'"),
    (None, False, r"input 'x' has no shape; pass --shapes"),     # the checker wants a shape
])
def test_unknown_dims_and_rank(shape, check, match):
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "n",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, None])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    with pytest.raises(ShapeError, match=match):
        graph.load(m, check=check)
    gr = graph.load(m, shapes="x:3x4", check=check)
    assert gr.inputs[0].shape == gr.outputs[0].shape == (3, 4)


def test_not_a_model():
    with pytest.raises(ModelError, match=r"<bytes> is not an ONNX model"):
        graph.load(b"hello, not a model")
    with pytest.raises(ModelError, match="cannot load a model from int"):
        graph.load(42)
