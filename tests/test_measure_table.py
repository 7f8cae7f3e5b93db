"""The measured kernel table of ``host`` (edgeops.lower.measure): one file per machine and
versions, filled by ``edgeops tune --measure-table`` or the first compile, read by the policy;
and the whole-model check that keeps a package from being slower than ONNX Runtime."""
import json

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from edgeops import boards
from edgeops.errors import EdgeOpsError
from edgeops.lower import lower, measure

SHAPE = [3, 37, 29]


def _chain():
    """LayerNorm + exact GELU in its decomposed form: a fused chain the passes find."""
    from onnx import numpy_helper
    rng = np.random.default_rng(5)
    d = SHAPE[-1]
    inits = [numpy_helper.from_array(rng.uniform(.5, 1.5, d).astype(np.float32), "s"),
             numpy_helper.from_array(rng.uniform(-.5, .5, d).astype(np.float32), "b"),
             numpy_helper.from_array(np.array(2 ** -.5, np.float32), "r2"),
             numpy_helper.from_array(np.array(1, np.float32), "one"),
             numpy_helper.from_array(np.array(.5, np.float32), "half")]
    nodes = [helper.make_node("LayerNormalization", ["x", "s", "b"], ["ln"], name="ln", axis=-1),
             helper.make_node("Mul", ["ln", "r2"], ["t"], name="g.mul"),
             helper.make_node("Erf", ["t"], ["e"], name="g.erf"),
             helper.make_node("Add", ["e", "one"], ["e1"], name="g.add"),
             helper.make_node("Mul", ["ln", "e1"], ["m"], name="g.mul2"),
             helper.make_node("Mul", ["m", "half"], ["y"], name="g.half")]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, SHAPE)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)


class _Table:
    """A table whose figures the test chooses: every node wins alone; the whole model as given."""
    def __init__(self, whole):
        self.whole, self.asked = whole, []

    def get(self, node, kernel, originals, key):
        return (1e-6, 1e-3)

    def whole_model(self, source, lowered):
        self.asked.append(sum(n.domain == "ai.edgeops" for n in lowered.graph.node))
        return self.whole


def _check(lw, x):
    want = ort.InferenceSession(lw.source.SerializeToString()).run(None, {"x": x})[0]
    import edgeops.ort as eort
    got = eort.session(lw.model).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_nodes_that_win_alone_are_dropped_when_the_whole_model_loses():
    x = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)
    won = lower(_chain(), "host", measure=True, table=_Table((1e-4, 1e-3)))
    assert won.lowered and all("faster, measured on host: 0.001 ms vs ORT 1.000 ms" in p.reason
                               for p in won.lowered)
    t = _Table((2e-3, 1e-3))
    lost = lower(_chain(), "host", measure=True, table=t)
    assert not lost.lowered and t.asked == [len(won.lowered)]        # checked once, then none
    assert any("whole model measured on host: package 2.000 ms vs ORT 1.000 ms" in p.reason
               for p in lost.placements)
    assert not any(n.domain for n in lost.model.graph.node)
    _check(won, x)
    _check(lost, x)


def test_a_whole_model_measured_faster_keeps_its_nodes_lowered():
    """The nodes each cleared the per-node margin; the whole package need only be faster."""
    won = lower(_chain(), "host", measure=True, table=_Table((0.95e-3, 1e-3)))
    assert won.lowered
    lost = lower(_chain(), "host", measure=True, table=_Table((1.01e-3, 1e-3)))
    assert not lost.lowered


def test_margin_keeps_onnx_runtime_on_a_near_tie():
    class Tie(_Table):
        def get(self, *a):
            return (0.95e-3, 1e-3)
    lw = lower(_chain(), "host", measure=True, table=Tie(None))
    assert not lw.lowered
    assert any("ONNX Runtime kept, measured on host: 0.950 ms vs ORT 1.000 ms" in p.reason
               and "10% faster" in p.reason for p in lw.placements)


def test_table_file_is_per_machine_and_versions(monkeypatch):
    host = boards.load("host")
    here = measure.cache_path(host)
    assert here.parent.name == "kernels" and here.name.startswith("host-")
    other = {**measure.machine(), "onnxruntime": "0.0.0"}
    monkeypatch.setattr(measure, "_machine", lambda: json.dumps(other, sort_keys=True))
    assert measure.cache_path(host) != here
    # the kernels' code and vector width are part of what the figures are valid for
    from edgeops.targets.neon import _cache
    keys = {}
    for bits in ("256", "512"):
        monkeypatch.setenv("EDGEOPS_VECTOR_BITS", bits)
        keys[bits] = measure.machine_uncached()["neon"]
    assert keys["256"] != keys["512"] and all(_cache.sources_hash()[:16] in k for k in keys.values())


def test_tune_measure_table_fills_the_file_the_policy_reads(monkeypatch):
    from edgeops.pipeline.measure import measure_table
    doc = measure_table(_chain(), "host", remeasure=True)
    assert doc["measured_now"] >= 1 and doc["entries"]
    for e in doc["entries"]:
        assert e["edgeops_s"] > 0 and e["ort_s"] > 0 and e["chain"] and e["kernel"]
    saved = json.loads(open(doc["table"]).read())
    assert saved["machine"] == measure.machine() and set(saved["entries"]) >= {e["key"] for e in doc["entries"]}
    # compile reads it: nothing is measured again, the reasons quote the figures
    monkeypatch.setattr(measure, "measure", lambda *a: pytest.fail("measured again"))
    lw = lower(_chain(), "host")
    rows = [p for p in lw.placements if p.measured_s is not None]
    t = measure.default_threads()
    assert rows and all(f"measured on host at {t} thread" in p.reason and " ms vs ORT " in p.reason
                        for p in rows)
    again = measure_table(_chain(), "host")
    assert again["measured_now"] == 0 and again["cached"] == len(again["entries"])
    with pytest.raises(EdgeOpsError, match="only 'host' can be measured"):
        measure_table(_chain(), "rpi5")


def test_entries_are_per_thread_count(monkeypatch):
    """A package's thread count picks its own figures: entries measured at one count are not
    read at another, and both live in the one table file."""
    from edgeops.pipeline.measure import measure_table
    one = measure_table(_chain(), "host", threads=1)
    assert one["threads"] == 1 and one["entries"]
    assert all(e["key"].startswith("t1|") and e["threads"] == 1 for e in one["entries"])
    seen = []
    real = measure.measure

    def spy(node, kernel, originals, threads=None):
        seen.append(threads)
        return real(node, kernel, originals, threads)
    monkeypatch.setattr(measure, "measure", spy)
    three = measure_table(_chain(), "host", threads=3, remeasure=True)   # measured at 3
    assert three["measured_now"] >= 1 and set(seen) == {3}
    assert all(e["key"].startswith("t3|") for e in three["entries"])
    seen.clear()
    lw = lower(_chain(), "host", threads=1)                # cached at 1: nothing measured
    assert seen == [] and all("at 1 thread:" in p.reason for p in lw.placements
                              if p.measured_s is not None)
    saved = json.loads(open(one["table"]).read())["entries"]
    assert {e["key"] for e in one["entries"] + three["entries"]} <= set(saved)
    with pytest.raises(EdgeOpsError, match="positive number of threads"):
        lower(_chain(), "host", threads=0)


def _two_blocks():
    """Two LayerNorm + Gelu blocks and a Relu between (three lowerable nodes in a row)."""
    from onnx import numpy_helper
    rng = np.random.default_rng(7)
    d = SHAPE[-1]
    inits, nodes, x = [], [], "x"
    for i in range(2):
        inits += [numpy_helper.from_array(rng.uniform(.5, 1.5, d).astype(np.float32), f"s{i}"),
                  numpy_helper.from_array(rng.uniform(-.5, .5, d).astype(np.float32), f"b{i}")]
        nodes += [helper.make_node("LayerNormalization", [x, f"s{i}", f"b{i}"], [f"ln{i}"],
                                   name=f"ln{i}", axis=-1),
                  helper.make_node("Gelu", [f"ln{i}"], [f"g{i}"], name=f"gelu{i}")]
        x = f"g{i}"
        if i == 0:
            nodes.append(helper.make_node("Relu", [x], ["r"], name="relu"))
            x = "r"
    nodes[-1].output[0] = "y"
    g = helper.make_graph(nodes, "blocks", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, SHAPE)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


class _Crossing(_Table):
    """Every node loses alone (1.5 ms vs ORT 1 ms) only by its crossing: the kernel alone takes
    ``alone`` ms."""
    def __init__(self, whole, alone):
        super().__init__(whole)
        self.alone = alone

    def get(self, node, kernel, originals, key):
        return (1.5e-3, 1e-3)

    def kernel_s(self, key):
        return self.alone * 1e-3


def test_nodes_losing_only_by_the_crossing_are_lowered_as_one_region():
    x = np.random.default_rng(2).standard_normal(SHAPE).astype(np.float32)
    # three nodes: kernels 3 x 0.3 ms + one crossing 1.2 ms = 2.1 ms; ORT 3 ms (x 0.9 = 2.7)
    lw = lower(_two_blocks(), "host", measure=True, table=_Crossing((1e-3, 2e-3), 0.3))
    assert [p.node for p in lw.lowered] == ["ln0", "relu", "ln1"]
    assert all("in a region of 3 nodes measured on host" in p.reason for p in lw.lowered)
    import edgeops.ort as eort
    pm = eort.prepare(lw.model)
    assert sum(n.op_type.startswith("Region_") for n in pm.graph.node) == 1
    _check(lw, x)
    # kernels 3 x 0.6 + 0.9 crossing = 2.7 ms: not 10% under ORT's 3 ms, so none is lowered
    kept = lower(_two_blocks(), "host", measure=True, table=_Crossing((1e-3, 2e-3), 0.6))
    assert not kept.lowered
    # the region wins on paper but the whole model loses: measured again without regions
    t = _Crossing((3e-3, 2e-3), 0.3)
    lost = lower(_two_blocks(), "host", measure=True, table=t)
    assert not lost.lowered and t.asked == [3]
    # and the table says so on the nodes the region held (fused ones through their originals)
    said = {p.node: p.reason for p in lost.placements}
    assert {"ln0", "gelu0", "relu", "ln1", "gelu1"} <= set(said)
    for n in ("ln0", "gelu0", "relu", "ln1", "gelu1"):
        assert "whole package measured 3.000 ms vs ORT 2.000 ms" in said[n], (n, said[n])
    _check(lost, x)


class _Regions(_Crossing):
    """As _Crossing, and a region of nodes is timed as one: ``region`` ms vs ORT 3 ms."""
    def __init__(self, whole, alone, region):
        super().__init__(whole, alone)
        self.region_ms, self.regions = region, []

    def region(self, nodes, kernels, originals, keys):
        self.regions.append(([n.name for n in nodes], [k.name for k in kernels], keys))
        return (self.region_ms * 1e-3, 3e-3)


def test_a_run_measured_as_one_region_overrides_the_estimate():
    """Where the table times a whole region (one crossing, chained kernels), that figure and not
    the kernels-plus-one-crossing estimate decides the promotion, both ways."""
    # the estimate loses (3 x 0.6 + 0.9 = 2.7 ms, not under 2.7) but the region measures 1 ms
    t = _Regions((1e-3, 2e-3), 0.6, 1.0)
    lw = lower(_two_blocks(), "host", measure=True, table=t)
    assert [p.node for p in lw.lowered] == ["ln0", "relu", "ln1"]
    assert all("in a region of 3 nodes measured as one on host" in p.reason and
               "1.000 ms vs ORT 3.000 ms" in p.reason for p in lw.lowered)
    ((names, kernels, keys),) = t.regions
    assert names == ["ln0", "relu", "ln1"] and len(kernels) == len(keys) == 3
    assert all(k.startswith(n + "|") for k, n in zip(keys, kernels))
    _check(lw, np.random.default_rng(3).standard_normal(SHAPE).astype(np.float32))
    # the estimate wins (2.1 ms) but the region measures 2.8 ms: nothing is promoted
    t = _Regions((1e-3, 2e-3), 0.3, 2.8)
    kept = lower(_two_blocks(), "host", measure=True, table=t)
    assert not kept.lowered and len(t.regions) == 1
    # every node it would have held says what the region measured
    assert all("in a region of 3 nodes measured as one on host: 2.800 ms vs ORT 3.000 ms, not"
               in p.reason for p in kept.placements), [p.reason for p in kept.placements]


def test_a_region_is_measured_through_the_bridge_against_its_original_nodes():
    """measure_region on real nodes: both sides run and are timed (figures > 0), and the
    region's output is ONNX Runtime's (a cut that dropped a node would not be)."""
    from edgeops import graph
    from edgeops.passes import run_passes
    from edgeops.pipeline.targets import load_targets
    from edgeops.registry import kernel_by_name
    load_targets()
    src = graph.load(_two_blocks())
    fused = graph.load(run_passes(src.model)[0], check=False)
    run = [n for n in fused.nodes if n.name in ("relu", "ln1")]
    assert [n.op_type for n in run] == ["Relu", "LayerNormGelu"], [n.op_type for n in fused.nodes]
    ks = [kernel_by_name("neon.relu" if n.op_type == "Relu" else "neon.layernorm_gelu")
          for n in run]
    src_nodes = {n.name: n for n in src.nodes}
    originals = [[], [src_nodes["ln1"], src_nodes["gelu1"]]]
    t = measure.measure_region(run, ks, originals, threads=1)
    assert t is not None and all(v > 0 for v in t)
    m_ours, m_theirs, feeds = measure._cut(run, ks, originals)
    import edgeops.ort as eort
    got = eort.session(m_ours).run(None, feeds)[0]
    want = ort.InferenceSession(m_theirs.SerializeToString()).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    assert {n.op_type for n in m_theirs.graph.node} == {"Relu", "LayerNormalization", "Gelu"}


def test_each_block_is_warmed_for_a_while_before_it_is_timed(monkeypatch):
    """Every block of the interleaved timing runs its session untimed for at least WARM_S
    first (a pool's first regions after the pause between blocks run slow), then times the
    block's runs; only those are returned."""
    calls = {"a": 0, "b": 0}

    class S:
        def __init__(self, name):
            self.name = name

        def get_outputs(self):
            return []

        def run(self, names, feeds):
            calls[self.name] += 1

    monkeypatch.setattr(measure, "settle", lambda *a, **k: True)
    monkeypatch.setattr(measure, "WARM_S", 0.02)
    raw = measure._medians([S("a"), S("b")], {}, blocks=3, runs=(4, 11), raw=True)
    assert [len(r) for r in raw] == [4 * 3, 4 * 3]
    # 2 untimed runs before the blocks; each block's warm-up runs far more than once in 20 ms
    assert all(n > 2 + 3 * (4 + 10) for n in calls.values())


def test_a_region_above_one_thread_is_timed_in_fresh_session_pairs(monkeypatch):
    """Above one thread a region is timed in REGION_ROUNDS fresh (edgeops, ONNX Runtime)
    session pairs and each side's runs pooled, so one pair's slow start does not decide; one
    pair on one thread."""
    import edgeops.ort as eort
    made, timed = [], []

    class S:
        def __init__(self, side):
            self.side = side
            made.append(side)

        def run(self, names, feeds):
            return None

    monkeypatch.setattr(measure, "_cut", lambda *a: ("ours", "theirs", {}))
    monkeypatch.setattr(eort, "session", lambda m, **k: S("ours"))
    monkeypatch.setattr(measure, "_ort_session", lambda m, threads=None: S("theirs"))
    # the second pair's ONNX Runtime session is slow: the pooled median must not follow it
    figures = iter([([1.0, 1.0], [2.0, 2.0]), ([1.0, 1.0], [9.0, 9.0]), ([1.0, 1.0], [2.0, 2.0])])

    def fake(sessions, feeds, raw=False, **kw):
        timed.append(tuple(sessions))
        return [list(x) for x in next(figures)]
    monkeypatch.setattr(measure, "_medians", fake)
    from types import SimpleNamespace
    k = [SimpleNamespace(target="neon")]
    assert measure.measure_region([], k, [], threads=2) == [1.0, 2.0]
    assert made == ["ours", "theirs"] * measure.REGION_ROUNDS
    assert len({id(s) for pair in timed for s in pair}) == 2 * measure.REGION_ROUNDS
    made.clear()
    figures = iter([([1.0], [9.0])])
    assert measure.measure_region([], k, [], threads=1) == [1.0, 9.0]
    assert made == ["ours", "theirs"]
