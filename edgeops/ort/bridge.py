"""The onnxruntime-extensions bridge: declaring ai.edgeops ops to it once per process (the op
functions: :mod:`edgeops.ort.calls`), their outputs handed back as arrays through the bridge's
public path, and the session class whose ``run`` raises the kernel failures of that run."""
from __future__ import annotations

import threading
from typing import Any

import numpy as np

from edgeops.ort.calls import op_function
from edgeops.ort.dispatch import DISPATCH_ATTR
from edgeops.ort.errors import raise_errors, take_errors

_lock = threading.Lock()
_declared: dict[str, Any] = {}          # "ai.edgeops::Name" -> onnxruntime_extensions Opdef


class _Flat(np.ndarray):
    """An op's output as onnxruntime-extensions' stock invocation reads it: its ``shape``, then
    ``flatten().tolist()``. Here ``flatten()`` keeps the data (a view of a C-contiguous array)
    and ``tolist()`` hands that array over instead of building a Python list (~75 ms per 1M
    floats), which the bridge copies into ONNX Runtime's buffer as it copies a list. Only the
    bridge sees these: the wrapped op functions below are not called from anywhere else."""

    def flatten(self, order="C"):
        return self.reshape(-1)

    def tolist(self):
        return np.ascontiguousarray(self.view(np.ndarray))


def _flat(r):
    return np.ascontiguousarray(r).view(_Flat)


def _for_bridge(fn):
    """``fn`` returning its outputs as :class:`_Flat`, so the stock invocation passes arrays:
    no hook of edgeops' replaces onnxruntime-extensions' own (other libraries' Python ops in
    the process run as they would without edgeops)."""
    def op(*inputs, **attrs):
        rv = fn(*inputs, **attrs)
        return tuple(_flat(r) for r in rv) if isinstance(rv, tuple) else _flat(rv)
    op.__name__ = getattr(fn, "__name__", "edgeops_op")
    op.__wrapped__ = fn
    return op


def op_table() -> list[tuple[str, int, int, Any]]:
    """(op type, inputs, outputs, Python function) of every op edgeops declares to ONNX Runtime:
    the ai.edgeops custom ops, the standard ops lowered onto edgeops kernels ("ai.edgeops::Conv")
    and the regions' sizes. Every input and output is fp32; each function takes the inputs and
    the ``edgeops_dispatch`` keyword and never raises."""
    from edgeops.ops import EDGEOPS_DOMAIN, all_ops
    from edgeops.ort import regions
    from edgeops.ort.dispatch import LOWERABLE_STANDARD_OPS
    out, seen = [], set()
    for od in all_ops():
        lowered = od.domain == "" and od.name in LOWERABLE_STANDARD_OPS
        if (od.domain != EDGEOPS_DOMAIN and not lowered) or od.name in seen:
            continue
        seen.add(od.name)
        out.append((od.name, od.max_inputs, getattr(od, "num_outputs", 1), op_function(od)))
    for n_in, n_out in regions.all_sizes():
        out.append((f"{regions.PREFIX}{n_in}x{n_out}", n_in, n_out,
                    regions.region_function(n_out)))
    return out


def declare_ops() -> None:
    """Declare every ai.edgeops op to the bridge once per process (it keeps them forever; a
    second declaration of a name would break every later session)."""
    from onnxruntime_extensions import PyOp, onnx_op
    from edgeops.ops import EDGEOPS_DOMAIN
    with _lock:
        for name, n_in, n_out, fn in op_table():
            key = f"{EDGEOPS_DOMAIN}::{name}"
            if key in _declared:
                continue
            opdef = onnx_op(op_type=key, inputs=[PyOp.dt_float] * n_in,
                            outputs=[PyOp.dt_float] * n_out,
                            attrs={DISPATCH_ATTR: PyOp.dt_string})(_for_bridge(fn))
            _declared[key] = opdef




_session_cls = None


def session_class():
    """onnxruntime.InferenceSession whose run raises the kernel failures of that run (made on
    first use: importing edgeops.ort does not import onnxruntime)."""
    global _session_cls
    if _session_cls is None:
        import onnxruntime as ort

        class EdgeOpsSession(ort.InferenceSession):
            def run(self, output_names, input_feed, run_options=None):
                take_errors()
                try:
                    out = super().run(output_names, input_feed, run_options)
                except Exception as e:  # noqa: BLE001  (a failing kernel may stop the run)
                    raise_errors(e)
                    raise
                raise_errors()
                return out

        _session_cls = EdgeOpsSession
    return _session_cls
