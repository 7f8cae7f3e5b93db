"""The onnxruntime-extensions bridge: declaring ai.edgeops ops to it once per process, the fast
return hook, and the op functions that never raise (a Python exception inside a custom op
aborts the process) but record their failures for :func:`raise_errors`."""
from __future__ import annotations

import json
import sys
import threading
from typing import Any

import numpy as np

from edgeops.errors import EdgeOpsError
from edgeops.ort.dispatch import DISPATCH_ATTR, KernelRuntimeError, resolve

_lock = threading.Lock()
_declared: dict[str, Any] = {}          # "ai.edgeops::Name" -> onnxruntime_extensions Opdef
_own: dict[int, Any] = {}               # the bridge's id of each of those -> its function
_errors = threading.local()


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
    record_error(f"{od.qualname()} node {node!r}: {what}")
    try:
        xs = resolve(spec).inputs(inputs)     # held constants back in place of placeholders
        shapes = od.shape(od.parse_attrs(d["attrs"]), [None if x is None else x.shape for x in xs])
    except Exception:  # noqa: BLE001  (best effort: a NaN tensor shaped like the input)
        shapes = [inputs[0].shape] * getattr(od, "num_outputs", 1)
    outs = tuple(np.full(s, np.nan, np.float32) for s in shapes)
    return outs if len(outs) > 1 else outs[0]


def record_error(msg: str) -> None:
    """Keep a kernel failure for :func:`raise_errors` (per thread: ONNX Runtime's sequential
    executor runs each node on the thread calling run) and say it on stderr."""
    _errors.__dict__.setdefault("items", []).append(msg)
    print(f"edgeops: {msg} (outputs set to NaN)", file=sys.stderr)


def take_errors() -> list[str]:
    """Kernel failures recorded on this thread since the last call (and forget them)."""
    items = getattr(_errors, "items", [])
    _errors.items = []
    return items


def raise_errors() -> None:
    """Raise :class:`KernelRuntimeError` if a kernel failed on this thread since the last check."""
    items = take_errors()
    if items:
        raise KernelRuntimeError("; ".join(items) + "; its outputs were NaN")


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
                out = super().run(output_names, input_feed, run_options)
                raise_errors()
                return out

        _session_cls = EdgeOpsSession
    return _session_cls
