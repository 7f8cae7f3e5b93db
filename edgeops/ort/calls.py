"""The op functions ONNX Runtime calls: one per op, resolving the node's dispatch string to its
kernel. They never raise (a Python exception inside a custom op aborts the process): a failure is
recorded (:mod:`edgeops.ort.errors`) and the outputs are NaN."""
from __future__ import annotations

import json

import numpy as np

from edgeops.errors import EdgeOpsError
from edgeops.ort.dispatch import DISPATCH_ATTR, resolve
from edgeops.ort.errors import record_error

_functions: dict = {}


def op_function(od):
    """The bridge function of op ``od`` (one per op: regions call the same one per inner node)."""
    fn = _functions.get(od.qualname())
    if fn is None:
        fn = _functions[od.qualname()] = _op_function(od)
    return fn


def _op_function(od):
    def run(*inputs, **attrs):
        spec = attrs.get(DISPATCH_ATTR, "")
        try:
            return resolve(spec).call(inputs)
        except BaseException as e:  # noqa: BLE001  (raising here would abort the process)
            try:
                return _failed(od, spec, inputs, e)
            except BaseException:  # noqa: BLE001  (same reason; the error is recorded first)
                return np.full((0,), np.nan, np.float32)
    run.__name__ = f"edgeops_{od.name}"
    return run


def _failed(od, spec, inputs, exc):
    """Record the error and return NaN outputs shaped as the op's shape rule says."""
    try:
        d = json.loads(spec)
        node = d["node"]
    except (ValueError, KeyError, TypeError):
        d, node = None, "?"
    what = str(exc) if isinstance(exc, EdgeOpsError) else f"kernel raised {type(exc).__name__}: {exc}"
    record_error(f"{od.qualname()} node {node!r}: {what}", node=node, reason=what)
    try:
        resolve(spec).fell_back = True      # no native program for it: calls keep failing here
    except Exception:  # noqa: BLE001  (a spec that does not even parse has no program either)
        pass
    try:
        xs = resolve(spec).inputs(inputs)     # held constants back in place of placeholders
        shapes = od.shape(od.parse_attrs(d["attrs"]), [None if x is None else x.shape for x in xs])
    except Exception:  # noqa: BLE001  (best effort: a NaN tensor shaped like the input)
        shapes = [inputs[0].shape] * getattr(od, "num_outputs", 1)
    outs = tuple(np.full(s, np.nan, np.float32) for s in shapes)
    return outs if len(outs) > 1 else outs[0]
