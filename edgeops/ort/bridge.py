"""The onnxruntime-extensions bridge: declaring ai.edgeops ops to it once per process (the op
functions: :mod:`edgeops.ort.calls`), the fast return hook, and the session class whose ``run``
raises the kernel failures of that run."""
from __future__ import annotations

import threading
from typing import Any

from edgeops.ort.calls import op_function
from edgeops.ort.dispatch import DISPATCH_ATTR
from edgeops.ort.errors import raise_errors, take_errors

_lock = threading.Lock()
_declared: dict[str, Any] = {}          # "ai.edgeops::Name" -> onnxruntime_extensions Opdef
_own: dict[int, Any] = {}               # the bridge's id of each of those -> its function


def install_fast_hook(enabled: bool = True) -> None:
    """Route every Python custom op's outputs back as numpy arrays (``enabled``) or through the
    stock ``.tolist()`` path. The bridge copies whatever it gets into ONNX Runtime's buffer with
    ``numpy.ascontiguousarray``, so arrays are exact and lists keep working for foreign ops."""
    from onnxruntime_extensions import _ocos
    _ocos.PyCustomOpDef.install_hooker(_fast_invocation if enabled else _ocos._on_pyop_invocation)


def _fast_invocation(k_id, feed, attributes):
    own = _own.get(k_id)
    if own is not None:    # edgeops' ops take one string attribute: no casting needed
        rv = own(*feed, **attributes)
    else:
        from onnxruntime_extensions import _ocos
        op = _ocos.Opdef._odlist[k_id]
        rv = op.body(*feed, **op.cast_attributes(attributes))
    outs = rv if isinstance(rv, tuple) else (rv,)
    res: list = [k_id]
    for r in outs:   # string tensors (other libraries' ops) keep the stock flat-list form
        res += [r.shape, r.flatten().tolist() if r.dtype.kind in "OSU" else r]
    return tuple(res)


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
                            attrs={DISPATCH_ATTR: PyOp.dt_string})(fn)
            _declared[key] = opdef
            _own[opdef._nativedef.obj_id] = opdef.body




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
