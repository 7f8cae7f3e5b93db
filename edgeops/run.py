"""Run a package here and compare it with a golden answer: what ``edgeops run`` and the board
agent's ``run`` do (:func:`run_package`).

Golden answers: the package's reference outputs (ONNX Runtime on the original model at compile
time) for its reference inputs; ONNX Runtime on ``model`` for other inputs (or always, when
given). ``layers`` compares every intermediate tensor the package shares with the golden graph
(``model`` under ONNX Runtime, else the package itself on the numpy reference kernels), to find
the layer where the error appears. With ``model`` a QDQ model (what ``compile --quantize``
compiled), the verdict is compile's int8 check: every edgeops node against ONNX Runtime on that
model, fed the same inputs, within its quantization steps.
"""
from __future__ import annotations

import numpy as np


def run_package(pkg, *, inputs=None, model=None, layers: bool = False, runs: int = 5,
                threads=None) -> dict:
    """Run package ``pkg`` (path or Package); the ``--json`` document. ``ok`` is None when there
    is nothing to compare with (``inputs`` without ``model``)."""
    from edgeops import package
    from edgeops.errors import EdgeOpsError
    p = pkg if isinstance(pkg, package.Package) else package.load(pkg)
    ref_in, ref_out = p.reference()
    feeds, source = (ref_in, "reference") if inputs is None else (read_inputs(inputs, p), str(inputs))
    golden_model = None
    if model is not None:
        import onnx
        try:
            golden_model = onnx.load(str(model))
        except Exception as e:  # noqa: BLE001  (protobuf / file errors)
            raise EdgeOpsError(f"--model {model}: cannot load it ({e})") from None
        try:
            golden = package.ort_outputs(golden_model, feeds)
        except Exception as e:  # noqa: BLE001
            if not type(e).__module__.startswith("onnxruntime"):
                raise
            why = " ".join(str(e).split())[:300]
            raise EdgeOpsError(f"--model {model}: ONNX Runtime cannot run it on these inputs "
                               f"({why})") from None
        gname = f"ONNX Runtime on {model}"
    elif inputs is None:
        golden, gname = ref_out, "package reference outputs (ONNX Runtime on the original model)"
    else:
        golden, gname = None, None
    from edgeops.ort import fallback_counts, reset_fallback_counts
    reset_fallback_counts()
    outs, times = package.timed_runs(p.session(threads), feeds, runs)
    fallbacks = fallback_counts()
    errs = package.compare(outs, golden) if golden is not None else {}
    worst = max((e["max_rel"] for e in errs.values()), default=None)
    int8 = None
    from edgeops.pipeline.quantize import check_int8, is_quantized
    if golden_model is not None and is_quantized(golden_model):
        # a QDQ golden: node by node in quantization steps, as compile checks it (end to end,
        # flipped roundings compound past any fixed tolerance on inputs other than compile's)
        import types
        int8 = check_int8(types.SimpleNamespace(model=p.model(), source=golden_model), feeds,
                          threads=threads)["int8"]
    doc = {"package": str(p.path), "board": p.manifest["board"]["name"], "inputs": source,
           "golden": gname, "tolerance": p.tolerance, "outputs": {
               n: {"shape": list(np.shape(v)), **errs.get(n, {})} for n, v in outs.items()},
           "max_rel": worst, "ok": None if worst is None else (
               not int8["failed"] if int8 is not None else bool(worst <= p.tolerance)),
           "int8": int8,
           "latency_s": {"median": float(np.median(times)), "min": float(min(times)),
                         "runs": len(times)},
           "predicted_latency_s": p.manifest["predicted"]["latency_s"],
           # {node: calls that ran the op's reference because its kernel failed} (manifest rules)
           "fallbacks": fallbacks}
    if layers:
        doc["layers"] = layer_errors(p, feeds, golden_model)
        doc["layers_golden"] = (f"ONNX Runtime on {model}" if golden_model is not None else
                                "the package on edgeops' numpy reference kernels")
    return doc


def read_inputs(path, p) -> dict:
    """Package ``p``'s inputs from the .npz at ``path``, checked against its manifest."""
    from edgeops.errors import EdgeOpsError
    import zipfile
    from edgeops.dtypes import to_numpy
    try:
        with np.load(path) as z:
            feeds = {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise EdgeOpsError(f"--inputs {path}: not a readable .npz ({e or type(e).__name__})") \
            from None
    except AttributeError:       # np.load gave a single array (.npy), not an archive
        raise EdgeOpsError(f"--inputs {path}: a .npy array, not a .npz of arrays by input "
                           f"name") from None
    for spec in p.manifest["inputs"]:
        x = feeds.get(spec["name"])
        if x is None:
            raise EdgeOpsError(f"--inputs {path} has no array {spec['name']!r}; it has "
                               f"{sorted(feeds)}")
        if list(x.shape) != spec["shape"]:
            raise EdgeOpsError(f"--inputs {path}: {spec['name']!r} is {list(x.shape)}, the "
                               f"package was compiled for {spec['shape']}")
        if x.dtype != to_numpy(spec["dtype"]):
            raise EdgeOpsError(f"--inputs {path}: {spec['name']!r} is {x.dtype}, the package "
                               f"takes {spec['dtype']}")
    return {s["name"]: feeds[s["name"]] for s in p.manifest["inputs"]}


def layer_errors(p, feeds: dict, golden_model=None) -> list[dict]:
    """Per intermediate float tensor present in both graphs, in the package's order."""
    from edgeops import package
    from edgeops.ort import session
    pm = p.model()
    want = _float_tensors(pm)
    if golden_model is not None:   # edgeops' inference also types what ONNX's leaves unknown
        from edgeops import graph
        gm = graph.load(golden_model, check=False, require_static=False).model
        names = [n for n in want if n in _float_tensors(gm)]
        golden = package.ort_outputs(_expose(gm, names), feeds)
    else:
        names = list(want)
        golden = _run(session(_expose(package.unpinned(pm), names), target="reference"), feeds)
    got = _run(session(_expose(pm, names), target="reference"), feeds)
    where = {r["node"]: r for r in p.manifest["placement"]}
    errs = package.compare({n: got[n] for n in names}, {n: golden[n] for n in names})
    rows = []
    for n in names:
        node = want[n]
        row = where.get(node.name, {})
        rows.append({"tensor": n, "node": node.name, "op": row.get("op", node.op_type),
                     "where": row.get("where", "ONNX Runtime"), **errs[n]})
    return rows


def _float_tensors(m) -> dict:
    """{tensor: producing node} for node outputs whose type says float32, leaving out those
    computed from constants alone (a weight's DequantizeLinear; no layer's output)."""
    from edgeops.pipeline.quantize import constant_tensors
    vi = {v.name: v for v in [*m.graph.value_info, *m.graph.output]}
    const = constant_tensors(m)
    out = {}
    for node in m.graph.node:
        for o in node.output:
            if o not in const and o in vi and vi[o].type.tensor_type.elem_type == onnx_float():
                out[o] = node
    return out


def onnx_float() -> int:
    from onnx import TensorProto
    return TensorProto.FLOAT


def _expose(m, names):
    import onnx
    c = onnx.ModelProto()
    c.CopyFrom(m)
    have = {o.name for o in c.graph.output}
    vi = {v.name: v for v in c.graph.value_info}
    c.graph.output.extend(vi[n] for n in names if n not in have and n in vi)
    return c


def _run(sess, feeds) -> dict:
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))
