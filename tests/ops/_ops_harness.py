"""Single-node ONNX models, run in ONNX Runtime or onnx.reference, compared with edgeops' OpDefs.

Tolerances: fp32 paths compare with rtol=atol=1e-5 (the references accumulate in float64, the
peer in float32: a few ulps over sums of tens of terms of magnitude ~1); fp64 paths with
rtol=1e-10, atol=1e-12 (both sides in float64; only summation order differs).
"""
import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from edgeops.ops import EDGEOPS_DOMAIN, get_op

OPSET = 21
TOL = {np.float32: dict(rtol=1e-5, atol=1e-5), np.float64: dict(rtol=1e-10, atol=1e-12)}


def rand(rng, *shape, lo=None):
    """Standard normal (never zeros); with ``lo``, magnitudes in [lo, lo + 1.5] with random sign."""
    x = rng.standard_normal(shape)
    if lo is not None:
        x = np.sign(x + (x == 0)) * rng.uniform(lo, lo + 1.5, shape)
    return x


_T, _W = np.polynomial.legendre.leggauss(100)


def erf64(x):
    """An erf independent of math.erf, for float64 checks (onnx.reference's Erf rounds through
    float32 and ONNX Runtime has no double Erf): 2/sqrt(pi) * integral_0^x exp(-t^2) dt by
    100-point Gauss-Legendre, within a few ulps of the true value for |x| <= 20."""
    x = np.asarray(x, np.float64)[..., None]
    return (x[..., 0] / np.sqrt(np.pi) * (_W * np.exp(-(x * (_T + 1) / 2) ** 2)).sum(-1))


def graph_model(nodes, inputs, outputs, initializers=(), opset=OPSET):
    """inputs/outputs: list of (name, array-or-dtype, shape-or-None)."""
    def vi(name, dt, shape):
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dt)),
                                             shape)
    g = helper.make_graph(nodes, "g", [vi(*i) for i in inputs], [vi(*o) for o in outputs],
                          initializer=[numpy_helper.from_array(v, n) for n, v in initializers])
    imports = [helper.make_opsetid("", opset), helper.make_opsetid(EDGEOPS_DOMAIN, 1)]
    m = helper.make_model(g, opset_imports=imports)
    m.ir_version = 10
    return m


def node_model(op_type, arrays, attrs, n_out, const=(), out_dtype=None):
    """One node; ``arrays`` (None = omitted optional input) become graph inputs, except those
    indexed by ``const``, which become initializers (so shape inference sees their values)."""
    names = ["" if a is None else f"in{i}" for i, a in enumerate(arrays)]
    while names and names[-1] == "":
        names.pop()
    node = helper.make_node(op_type, names, [f"out{i}" for i in range(n_out)], **(attrs or {}))
    feeds = {n: a for i, (n, a) in enumerate(zip(names, arrays)) if n and i not in const}
    inits = [(n, arrays[i]) for i, n in enumerate(names) if n and i in const]
    dt = out_dtype or next(a.dtype for a in arrays if a is not None)
    m = graph_model([node], [(n, a.dtype, a.shape) for n, a in feeds.items()],
                    [(f"out{i}", dt, None) for i in range(n_out)], inits)
    return m, feeds


def run_model(model, feeds, engine):
    if engine == "ort":
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        # the literal graph: these tests check semantics, not ORT's rewrites
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        sess = ort.InferenceSession(model.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
        return sess.run(None, feeds)
    return [np.asarray(o) for o in ReferenceEvaluator(model).run(None, feeds)]


def node_attrs(model, index=0):
    """Attributes as a loaded model carries them (floats rounded to float32, strings as bytes)."""
    return {a.name: helper.get_attribute_value(a) for a in model.graph.node[index].attribute}


def inferred_shapes(model):
    m = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    out = []
    for o in m.graph.output:
        t = o.type.tensor_type
        out.append(tuple(d.dim_value for d in t.shape.dim) if t.HasField("shape") else None)
    return out


def check(op_type, arrays, attrs=None, *, const=(), n_out=1, fp32="ort", fp64="ref",
          shape_values=False, exact=False, shape_inference=True):
    """Compare ``get_op(op_type).run`` with the ONNX engine on float32 and float64 casts of
    ``arrays`` (float arrays not in ``const``), check output dtypes, and compare ``shape()``
    with ONNX shape inference. Engines: "ort", "ref", None (path skipped) or a function of the
    inputs returning the expected outputs (an independent formula where both engines fall short)."""
    od = get_op(op_type)
    for dt, engine in ((np.float32, fp32), (np.float64, fp64)):
        if engine is None:
            continue
        ins = [a if a is None or i in const or a.dtype.kind != "f" else a.astype(dt)
               for i, a in enumerate(arrays)]
        model, feeds = node_model(op_type, ins, attrs, n_out, const)
        want = engine(*ins) if callable(engine) else run_model(model, feeds, engine)
        got = od.run(ins, node_attrs(model))
        assert len(got) == len(want), (len(got), len(want))
        for g, w in zip(got, want):
            assert g.dtype == dt and g.shape == w.shape, (g.dtype, g.shape, w.shape)
            if exact:
                np.testing.assert_array_equal(g, w)
            else:
                np.testing.assert_allclose(g, w, **TOL[dt])
    parsed = od.parse_attrs(node_attrs(model))
    shapes = [None if a is None else a.shape for a in arrays]
    values = [a if i in const else None for i, a in enumerate(arrays)]
    kw = {"values": values} if shape_values else {}
    rule = [tuple(s) for s in od.shape(parsed, shapes, **kw)]
    assert rule == [w.shape for w in want]
    if shape_inference:  # else the caller says why ONNX shape inference cannot be the judge
        assert rule == inferred_shapes(model)
    return got
