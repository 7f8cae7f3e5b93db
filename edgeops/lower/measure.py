"""The measured kernel table of the machine edgeops runs on (board ``host``).

For a node, or a fused chain, and the kernel lowering would give it: the median time of that
kernel through ONNX Runtime's custom-op bridge, against ONNX Runtime's own execution of the
original node(s) — each a one-node session on this machine with the node's real weights and
shapes. Entries are cached in ``$EDGEOPS_CACHE_DIR/kernels/`` (default ``~/.cache/edgeops``) per
board file hash (for ``host`` that includes the measured figures) and edgeops version.

Why measure: every call through the bridge pays Python dispatch, the GIL and a copy of each
tensor each way — tens of microseconds here, far above the simulator's launch figure — so only a
measurement says whether a small node is worth lowering. Only the ``host`` board can be
measured; other boards would need a table measured on them.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

VERSION = 1


def cache_path(board) -> Path:
    root = os.environ.get("EDGEOPS_CACHE_DIR")
    base = Path(root) if root else Path.home() / ".cache" / "edgeops"
    return base / "kernels" / f"{board.name}-{(getattr(board, 'file_sha256', '') or 'nohash')[:16]}.json"


class KernelTable:
    """``get(node, kernel, originals, key) -> (edgeops s, ONNX Runtime s) | None``, measured on
    first use and cached."""

    def __init__(self, board, path: Path | None = None):
        from edgeops import __version__
        self.path = path or cache_path(board)
        self._version = __version__
        self.entries: dict[str, list] = {}
        try:
            doc = json.loads(self.path.read_text())
            if doc.get("version") == VERSION and doc.get("edgeops_version") == __version__:
                self.entries = doc["entries"]
        except (OSError, ValueError, KeyError, AttributeError):
            pass      # no table yet, or one from another edgeops: measure again

    def get(self, node, kernel, originals, key: str):
        hit = self.entries.get(key)
        if hit is None:
            hit = self.entries[key] = measure(node, kernel, originals)
            self._save()
        return None if hit is None or None in hit else tuple(hit)

    def _save(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps({"version": VERSION, "edgeops_version": self._version,
                                       "entries": self.entries}, indent=1, sort_keys=True))
            os.replace(tmp, self.path)
        except OSError:
            pass      # a read-only cache only costs measuring again


def measure(node, kernel, originals) -> list | None:
    """[edgeops s, ONNX Runtime s]; edgeops is inf when its kernel fails; None when the
    subgraph cannot be cut out (shapes or constants unknown) or ONNX Runtime refuses it."""
    from types import SimpleNamespace
    from edgeops.errors import EdgeOpsError
    from edgeops.lower.surgery import lowered
    ours = _proto(node)
    lowered(ours, node, SimpleNamespace(kernel=kernel.name, tiling=None),
            node.graph.opsets.get("", 0))
    theirs = [_proto(n) for n in originals] if originals else [_proto(node)]
    try:
        m_ours, feeds = _mini([ours], node.graph, node.outputs[0])
        m_theirs, _ = _mini(theirs, originals[0].graph if originals else node.graph,
                            node.outputs[0], feeds)
    except _CannotCut:
        return None
    try:
        t_theirs = _median(_ort_session(m_theirs), feeds)
    except Exception:  # noqa: BLE001  (ONNX Runtime's own errors have no common base)
        return None
    try:
        from edgeops.ort import session
        t_ours = _median(session(m_ours, target=kernel.target), feeds)
    except EdgeOpsError:
        t_ours = float("inf")
    return [t_ours, t_theirs]


class _CannotCut(Exception):
    pass


def _proto(n):
    import onnx
    p = onnx.NodeProto()
    p.CopyFrom(n.graph.model.graph.node[n.proto_index])
    return p


def _mini(protos, g, output: str, feeds: dict | None = None):
    """A model of just ``protos``: constants they read become initializers, other inputs graph
    inputs (random N(0, 1), or ``feeds``)."""
    import onnx
    from onnx import helper, numpy_helper
    from edgeops.dtypes import to_numpy
    rng = np.random.default_rng(0)
    produced = {o for p in protos for o in p.output if o}
    feeds = dict(feeds or {})
    inits, inputs = [], []
    for x in dict.fromkeys(i for p in protos for i in p.input if i and i not in produced):
        t = g.tensors.get(x)
        if t is None or not t.is_static or t.dtype is None:
            raise _CannotCut(x)
        if t.is_const:
            inits.append(numpy_helper.from_array(np.asarray(t.data), x))
            continue
        dt = to_numpy(t.dtype)
        elem = helper.np_dtype_to_tensor_dtype(dt)
        inputs.append(helper.make_tensor_value_info(x, elem, list(t.shape)))
        if x not in feeds:
            feeds[x] = (rng.standard_normal(t.shape).astype(dt) if dt.kind == "f"
                        else np.zeros(t.shape, dt))
    out = g.tensors.get(output)
    if out is None or out.dtype is None:
        raise _CannotCut(output)
    ovi = helper.make_tensor_value_info(output, helper.np_dtype_to_tensor_dtype(to_numpy(out.dtype)),
                                        list(out.shape) if out.is_static else None)
    m = helper.make_model(helper.make_graph(protos, "measure", inputs, [ovi], inits),
                          opset_imports=list(g.model.opset_import))
    m.ir_version = g.model.ir_version
    if not any(o.domain == "ai.edgeops" for o in m.opset_import):
        m.opset_import.append(helper.make_opsetid("ai.edgeops", 1))
    return onnx.ModelProto.FromString(m.SerializeToString()), {k: feeds[k] for k in
                                                                (i.name for i in inputs)}


def _ort_session(m):
    import onnxruntime as ort
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])


def _median(sess, feeds, budget_s: float = 0.03, runs: tuple[int, int] = (3, 30)) -> float:
    names = [o.name for o in sess.get_outputs()]
    for _ in range(2):                 # warm-up: Numba loads or compiles here
        sess.run(names, feeds)
    times: list[float] = []
    end = time.perf_counter() + budget_s
    while len(times) < runs[0] or (time.perf_counter() < end and len(times) < runs[1]):
        t0 = time.perf_counter()
        sess.run(names, feeds)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))
