"""The pass registry, the manager and its report, and the bundled sample model end to end."""
import json

import numpy as np
import pytest

from _passes_harness import ops, run_ort
import edgeops.ort as eort
from edgeops.passes import Pass, PassError, all_passes, register_pass, run_passes
from edgeops.passes.base import _PASSES
from edgeops.sample import INPUT_SHAPE, build_sample_model


def test_passes_run_in_priority_order_cleanups_first():
    names = [p.name for p in all_passes()]
    assert names == ["drop_dropout", "fold_batchnorm", "fuse_groupnorm_act", "fuse_qdq", "fuse_conv_act",
                     "fuse_layernorm_gelu", "fuse_swiglu", "merge_qkv"]
    prios = [p.priority for p in all_passes()]
    assert prios == sorted(prios) and len(set(prios)) == len(prios)


@pytest.mark.parametrize("name,priority,match", [("drop_dropout", 999, "registered twice"),
                                                 ("brand_new", 10, "both have priority 10")])
def test_register_refuses_duplicates(name, priority, match):
    cls = type("Dup", (Pass,), {"name": name, "priority": priority})
    with pytest.raises(RuntimeError, match=match):
        register_pass(cls)
    assert _PASSES.get(name) is not cls


def test_unknown_pass_name_lists_the_passes():
    with pytest.raises(PassError, match="no pass named 'fuse_everything'.*fuse_swiglu"):
        run_passes(build_sample_model(), ["fuse_everything"])


def test_run_passes_wants_a_model_proto():
    with pytest.raises(PassError, match="onnx.ModelProto"):
        run_passes("model.onnx")


def test_sample_model_end_to_end(rng):
    m = build_sample_model()
    out, rep = run_passes(m)
    got_ops = ops(out)
    for op in ("ConvBnAct", "SwiGLU", "LayerNormGelu", "GroupNormAct"):
        assert got_ops[f"ai.edgeops::{op}"] >= 1, rep.summary()
    assert got_ops["ai.edgeops::LayerNormGelu"] == 2      # the erf and the tanh block
    for gone in ("Dropout", "BatchNormalization", "Erf", "Gelu", "Sigmoid", "GroupNormalization"):
        assert gone not in got_ops, rep.summary()
    assert rep.nodes_before == len(m.graph.node) and rep.nodes_after == len(out.graph.node)
    assert rep.nodes_after < rep.nodes_before
    assert {o.domain: o.version for o in out.opset_import}["ai.edgeops"] == 1
    json.dumps(rep.as_dict())
    assert "fuse_swiglu" in rep.summary()
    x = rng.standard_normal(INPUT_SHAPE).astype(np.float32)
    want = run_ort(m, {"image": x})[0]
    got = eort.session(out).run(None, {"image": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


def test_exclude_skips_a_pass():
    out, rep = run_passes(build_sample_model(), exclude=["drop_dropout"])
    assert ops(out)["Dropout"] == 1 and "drop_dropout" not in rep.passes


def test_a_fused_node_the_op_definition_refuses_is_not_made(rng):
    from onnx import helper
    from edgeops.passes.rewrite import WorkingGraph
    wg = WorkingGraph(build_sample_model())
    good = helper.make_node("GroupNormAct", ["down1.conv", "down1.gn.scale", "down1.gn.bias"],
                            ["y"], domain="ai.edgeops", num_groups=8)
    assert wg.supported(good)
    for bad in (dict(num_groups=5),                      # does not divide C = 32
                dict(num_groups=8, activation="gelu"),   # not an activation GroupNormAct has
                dict(num_groups=8, alpha=1.0)):          # not an attribute it has
        node = helper.make_node("GroupNormAct", list(good.input), ["y"], domain="ai.edgeops", **bad)
        assert not wg.supported(node), bad
