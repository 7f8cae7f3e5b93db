"""Regions (edgeops.ort.regions): runs of consecutive ai.edgeops nodes become one ONNX Runtime node
with one bridge crossing. Checked against ONNX Runtime on the original model (random inputs,
ragged shapes), and against the same model prepared without regions."""
import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import edgeops.ort as eort
from edgeops.lower import lower
from edgeops.ort import regions


def _model(nodes, inits, inputs, outputs, opset=21):
    g = helper.make_graph(nodes, "regions",
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, inputs[0][1]) for n in outputs],
                          [numpy_helper.from_array(a, n) for n, a in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def _ln_chain(rng, n=3, shape=(3, 5, 37), side_output=True):
    c = shape[-1]
    nodes, inits, x = [], {}, "x"
    for i in range(n):
        inits[f"s{i}"] = rng.uniform(0.5, 1.5, c).astype(np.float32)
        inits[f"b{i}"] = rng.uniform(-.5, .5, c).astype(np.float32)
        nodes += [helper.make_node("LayerNormalization", [x, f"s{i}", f"b{i}"], [f"ln{i}"],
                                   name=f"ln{i}", axis=-1, epsilon=1e-5),
                  helper.make_node("Gelu", [f"ln{i}"], [f"g{i}"], name=f"gelu{i}")]
        x = f"g{i}"
    outs = [x] + (["ln0"] if side_output else [])
    return _model(nodes, inits, [("x", list(shape))], outs)


def _ort(m, feeds):
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))


def _run(m, feeds, **prep):
    s = eort.session(m, "neon", **prep) if not prep else None
    if s is None:
        so = eort.register(None, "neon")
        s = ort.InferenceSession(eort.prepare(m, "neon", **prep).SerializeToString(), so,
                                 providers=["CPUExecutionProvider"])
    out = dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))
    eort.raise_errors()
    return out


def _close(got, want, rtol=1e-4):
    for k, v in want.items():
        np.testing.assert_allclose(got[k], v, rtol=rtol, atol=rtol * float(np.abs(v).max()), err_msg=k)


def _region_nodes(pm):
    return [n for n in pm.graph.node if regions.is_region(n.op_type)]


def test_a_chain_becomes_one_region_with_a_side_output(rng):
    m = _ln_chain(rng)
    lw = lower(m, "rpi5", mode="all")
    pm = eort.prepare(lw.model, "neon")
    rs = _region_nodes(pm)
    assert len(rs) == 1, [n.op_type for n in pm.graph.node]
    spec = json.loads(next(a.s for a in rs[0].attribute if a.name == eort.DISPATCH_ATTR))
    assert [x["name"] for x in spec["nodes"]] == [n.name for n in lw.model.graph.node]
    assert sorted(rs[0].output) == sorted(["g2", "ln0"])     # the side output leaves the region
    feeds = {"x": rng.standard_normal((3, 5, 37)).astype(np.float32) * 3}
    want = _ort(m, feeds)
    got = _run(lw.model, feeds)
    _close(got, want)
    # the same kernels one ONNX Runtime node each: the same numbers
    per_node = _run(lw.model, feeds, regions=False)
    for k in want:
        np.testing.assert_array_equal(got[k], per_node[k])


def test_an_onnx_runtime_node_between_cuts_the_run_and_keeps_the_graph_acyclic(rng):
    # a -> (Reshape in ORT) -> c, and a -> c directly: a and c must not share a region (a region
    # {a, c} would both feed and read the Reshape)
    c_ = 24
    w = rng.standard_normal((c_, c_)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["a"], name="a"),
             helper.make_node("Relu", ["a"], ["r"], name="r"),
             helper.make_node("Reshape", ["r", "shp"], ["t"], name="reshape"),
             helper.make_node("Add", ["t", "a"], ["y0"], name="c"),
             helper.make_node("Sigmoid", ["y0"], ["y"], name="d")]
    m = _model(nodes, {"w": w}, [("x", [5, c_])], ["y"], opset=17)
    m.graph.initializer.append(numpy_helper.from_array(np.array([5, c_], np.int64), "shp"))
    lw = lower(m, "rpi5", mode="all")
    pm = eort.prepare(lw.model, "neon")
    onnx.checker.check_model(pm)
    kinds = [n.op_type for n in pm.graph.node]
    assert kinds.index("Reshape") < len(kinds) - 1 and len(_region_nodes(pm)) == 2, kinds
    feeds = {"x": rng.standard_normal((5, c_)).astype(np.float32)}
    _close(_run(lw.model, feeds), _ort(m, feeds))


def test_runs_wider_than_the_largest_region_are_cut(rng, monkeypatch):
    monkeypatch.setattr(regions, "OUT_SIZES", (1, 2))       # a side output per node: must cut
    m = _ln_chain(rng, n=4, shape=(2, 9, 17), side_output=False)
    for i in range(3):
        m.graph.output.append(helper.make_tensor_value_info(f"ln{i}", TensorProto.FLOAT, [2, 9, 17]))
    lw = lower(m, "rpi5", mode="all")
    pm = eort.prepare(lw.model, "neon")
    rs = _region_nodes(pm)
    assert len(rs) >= 2 and all(len(r.output) <= 2 for r in rs)
    inner = [x["name"] for r in rs for x in
             json.loads(next(a.s for a in r.attribute if a.name == eort.DISPATCH_ATTR))["nodes"]]
    singles = [n.name for n in pm.graph.node if not regions.is_region(n.op_type)]
    assert sorted(inner + singles) == sorted(n.name for n in lw.model.graph.node)
    feeds = {"x": rng.standard_normal((2, 9, 17)).astype(np.float32)}
    _close(_run(lw.model, feeds), _ort(m, feeds))


def test_preparing_twice_keeps_the_regions(rng):
    lw = lower(_ln_chain(rng), "rpi5", mode="all")
    p = eort.prepare(lw.model, "neon")
    assert eort.prepare(p, "neon").SerializeToString() == p.SerializeToString()


def test_a_region_spec_that_is_not_ours_is_refused():
    with pytest.raises(eort.OrtIntegrationError, match="prepare the model"):
        regions.resolve('{"format": 1, "region": "r"}')
    with pytest.raises(eort.OrtIntegrationError, match="format 7"):
        regions.resolve('{"format": 7}')


def test_profiling_times_each_inner_node(rng, monkeypatch):
    lw = lower(_ln_chain(rng, side_output=False), "rpi5", mode="all")
    s = eort.session(lw.model, "neon")
    feeds = {"x": rng.standard_normal((3, 5, 37)).astype(np.float32)}
    monkeypatch.setattr(regions, "timing", {})
    s.run(None, feeds)
    assert set(regions.timing) == {n.name for n in lw.model.graph.node}
    assert all(len(v) == 1 and v[0] > 0 for v in regions.timing.values())


def _gn_chain(rng, n=3, shape=(2, 12, 5, 7), groups=4):
    c = shape[1]
    nodes, inits, x = [], {}, "x"
    for i in range(n):
        inits[f"s{i}"] = rng.uniform(0.5, 1.5, c).astype(np.float32)
        inits[f"b{i}"] = rng.uniform(-.5, .5, c).astype(np.float32)
        nodes += [helper.make_node("GroupNormalization", [x, f"s{i}", f"b{i}"], [f"gn{i}"],
                                   name=f"gn{i}", num_groups=groups, epsilon=1e-5),
                  helper.make_node("Sigmoid", [f"gn{i}"], [f"sg{i}"], name=f"sig{i}"),
                  helper.make_node("Mul", [f"gn{i}", f"sg{i}"], [f"y{i}"], name=f"mul{i}")]
        x = f"y{i}"
    return _model(nodes, inits, [("x", list(shape))], [x])


def _prepared_session(m):
    pm = eort.prepare(m, "neon")
    s = ort.InferenceSession(pm.SerializeToString(), eort.register(None, "neon"),
                             providers=["CPUExecutionProvider"])
    (r,) = _region_nodes(pm)
    return s, regions.resolve(next(a.s.decode() for a in r.attribute
                                   if a.name == eort.DISPATCH_ATTR))


def _counting_chains(monkeypatch):
    from edgeops.targets.neon import norms
    calls = []
    real = norms.Chain.__call__

    def counted(self, x, keep=None):
        calls.append(self.k)
        return real(self, x, keep)
    monkeypatch.setattr(norms.Chain, "__call__", counted)
    return calls


@pytest.mark.parametrize("make,shape", [(_ln_chain, (3, 5, 37)), (_gn_chain, (2, 12, 5, 7))])
def test_consecutive_norms_run_as_one_pass(rng, monkeypatch, make, shape):
    """LayerNorm+GELU and GroupNorm+SiLU nodes feeding each other inside a region run as ONE
    fused pass (the kernels' chain stages), with the numbers of the nodes run one by one."""
    calls = _counting_chains(monkeypatch)
    m = make(rng, n=4, shape=shape) if make is _gn_chain else make(rng, n=4, shape=shape,
                                                                     side_output=False)
    lw = lower(m, "rpi5", mode="all")
    assert len(lw.model.graph.node) == 4, [n.op_type for n in lw.model.graph.node]
    s, region = _prepared_session(lw.model)
    assert list(region.chains) == [0] and region.chains[0][0] == 4
    feeds = {"x": (rng.standard_normal(shape) * 3).astype(np.float32)}
    got = dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))
    eort.raise_errors()
    assert calls == [4] and region.chain_errors == {}, region.chain_errors
    _close(got, _ort(m, feeds))
    per_node = _run(lw.model, feeds, regions=False)
    for k in got:
        np.testing.assert_array_equal(got[k], per_node[k])
    s.run(None, feeds)      # the chain's stacked parameters are made once (held constants)
    # (lone norm nodes run as one-stage chains: their native steps' Python path)
    assert [k for k in calls if k > 1] == [4, 4] and len(region._made) == 1


def test_a_chain_keeps_only_the_intermediates_read_outside_it(rng, monkeypatch):
    """Inside a chain, a stage's output that nothing but the next stage reads never leaves the
    kernel (its rows stay in scratch); one that is also a graph output, or read by a node after
    the chain, is kept, with the numbers of ONNX Runtime on the original model."""
    calls = _counting_chains(monkeypatch)
    shape = (3, 5, 37)
    m = _ln_chain(rng, n=4, shape=shape, side_output=False)
    m.graph.output.append(helper.make_tensor_value_info("g1", TensorProto.FLOAT, list(shape)))
    m.graph.node.append(helper.make_node("Add", ["g0", "g3"], ["res"], name="residual"))
    m.graph.output.append(helper.make_tensor_value_info("res", TensorProto.FLOAT, list(shape)))
    lw = lower(m, "rpi5", mode="all")
    s, region = _prepared_session(lw.model)
    (first, (end, _entries)), = region.chains.items()
    assert end - first == 4 and region.keep[first] == (True, True, False, True)
    feeds = {"x": (rng.standard_normal(shape) * 3).astype(np.float32)}
    got = dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))
    eort.raise_errors()
    assert calls == [4] and region.chain_errors == {}, region.chain_errors
    _close(got, _ort(m, feeds))


def test_a_chain_after_a_side_output_and_its_failure_fall_back_to_nodes(rng, monkeypatch):
    """ln0's output leaves the region, so LayerNorm 0 and its Gelu stay separate nodes and the
    chain starts after them; a chain whose pass fails runs node by node from then on, with the
    same numbers and nothing recorded as an error."""
    from edgeops.errors import EdgeOpsError
    from edgeops.targets.neon import norms
    m = _ln_chain(rng, n=4, shape=(2, 3, 29))
    lw = lower(m, "rpi5", mode="all")
    s, region = _prepared_session(lw.model)
    ops = [n.op_type for n in lw.model.graph.node]
    assert list(region.chains) == [2] and region.chains[2][0] == len(ops), ops

    real = norms.Chain.__call__

    def broken(self, x, keep=None):   # a fused pass fails; a lone node's one-stage chain works
        if self.k > 1:
            raise EdgeOpsError("no")
        return real(self, x, keep)
    monkeypatch.setattr(norms.Chain, "__call__", broken)
    feeds = {"x": rng.standard_normal((2, 3, 29)).astype(np.float32)}
    got = dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))
    eort.raise_errors()
    _close(got, _ort(m, feeds))
    assert region.chains == {} and region.chain_errors == {2: "EdgeOpsError: no"}


def test_a_chained_region_serves_sessions_on_several_threads(rng):
    """Sessions of one model share its regions (cached per dispatch spec): runs from several
    threads at once give every thread the single-threaded answer."""
    from concurrent.futures import ThreadPoolExecutor
    m = _ln_chain(rng, n=4, shape=(4, 6, 40), side_output=False)
    lw = lower(m, "rpi5", mode="all")
    sessions = [eort.session(lw.model, "neon") for _ in range(2)]
    feeds = [{"x": rng.standard_normal((4, 6, 40)).astype(np.float32)} for _ in range(4)]
    want = [sessions[0].run(None, f)[0] for f in feeds]

    def work(k):
        s = sessions[k % 2]
        return [[s.run(None, f)[0] for f in feeds] for _ in range(10)]
    with ThreadPoolExecutor(4) as ex:
        for rounds in ex.map(work, range(4)):
            for got in rounds:
                for g, w in zip(got, want):
                    np.testing.assert_array_equal(g, w)
