"""Where each node runs: the bridge's limits, the registry's kernel, the planner's tiling and
prediction, and the policy (``all``, NPU, or edgeops only where measured/predicted faster than
ONNX Runtime)."""
from __future__ import annotations

import inspect
from types import SimpleNamespace

from edgeops.errors import EdgeOpsError, OpDefinitionError
from edgeops.lower import Placement


def place(n, ctx, fused=()) -> Placement:
    from edgeops.registry import op_key
    op = op_key(n.op_type, n.domain)
    theirs_est = _estimate(n, "ort", _peer(n, ctx.board), ctx)
    peer = theirs_est.seconds if theirs_est is not None else None

    def stay(reason, measured=(None, None)):
        return Placement(n.name, op, None, None, reason, peer, None, peer, fused=tuple(fused),
                         measured_s=measured[0], measured_peer_s=measured[1],
                         band=_band(theirs_est), peer_band=_band(theirs_est),
                         calibration=theirs_est.source if theirs_est is not None else None)
    if ctx.mode == "none":
        return stay("--lower none")
    if n.name in ctx.exclude:
        return stay(ctx.exclude[n.name])
    why = _blocker(n, ctx)
    if why:
        return stay(why)
    k, precision, why = _select(n, ctx)
    if k is None:
        return stay(why)
    tiling, pred, why_plan = _plan(n, k, precision, ctx)
    lat = pred.latency_s if pred else None
    copies = 0.0
    if lat is not None:     # what the kernel pays to cross ONNX Runtime's Python bridge
        from edgeops.simulator.graph import bridge_copies
        copies = bridge_copies(n, ctx.board, k.target)[0]
        lat += copies
    sig = _signature(n)
    ours_est = _estimate(n, "edgeops", lat, ctx, k.name)
    if ours_est is not None:
        lat = ours_est.seconds
    p = Placement(n.name, op, k.target, k.name, why, lat, pred.bound if pred else None, peer,
                  tiling.to_json() if tiling is not None and _accepts_tiling(k, tiling) is True
                  else None, tiling.describe() if tiling is not None else None, precision,
                  tuple(fused), sig, prediction=pred, planned=tiling, band=_band(ours_est),
                  peer_band=_band(theirs_est),
                  calibration=ours_est.source if ours_est is not None else None)
    if ctx.mode == "all":
        p.reason = f"--lower all: {why}"
    elif ctx.board.kind == "npu":
        p.reason = f"NPU: every supported node is lowered; {why}"
    else:
        ours, theirs, src, alone = _compare(n, k, sig, lat, peer, fused, ctx)
        if src == "measured":
            from edgeops.lower.measure import MARGIN
            p.measured_s, p.measured_peer_s = ours, theirs
            said = f"measured on {_where(ctx)}: {_ms(ours)} vs ORT {_ms(theirs)}"
            regional = getattr(ctx, "regional", None)
            if ours < theirs * MARGIN:
                p.reason = f"{k.name} faster, {said}"
                if regional is not None:
                    regional[n.name] = Regional(p, alone if alone is not None else ours, ours, theirs)
                return p
            q = stay(f"ONNX Runtime kept, {said}" + (
                f" ({k.name} is not {1 - MARGIN:.0%} faster)" if ours < theirs else ""),
                (ours, theirs))
            q.signature = sig
            if regional is not None and alone is not None and (
                    alone < theirs * MARGIN or k.stage is not None):
                # slower alone only by its bridge crossing: a region may pay that once for many;
                # or a chain stage, which costs less inside a chain than alone (one fused pass)
                regional[n.name] = Regional(p, alone, ours, theirs, candidate=True)
            return q
        if ours_est is not None and theirs_est is not None:
            from edgeops.simulator.calibration import gain_exceeds_band
            wins, gain, band = gain_exceeds_band(ours_est, theirs_est)
            said = (f"{_us(ours)} ±{ours_est.band:.0%} vs ONNX Runtime {_us(theirs)} "
                    f"±{theirs_est.band:.0%} ({ours_est.source})")
            if wins:
                p.reason = f"{k.name} predicted faster by more than the bands: {said}"
                return p
            what = ("ONNX Runtime is predicted faster" if gain <= 0 else
                    f"predicted gain {_us(gain)}")
            q = stay(f"ONNX Runtime kept: {what}, not above the bands' {_us(band)}: "
                     f"{k.name} {said}", (p.measured_s, p.measured_peer_s))
            q.signature = sig
            return q
        q = stay(f"{k.name} has no prediction to compare with ONNX Runtime "
                 f"({why_plan or 'no peer model'}); the original node stays",
                 (p.measured_s, p.measured_peer_s))
        q.signature = sig
        return q
    return p


def _band(est) -> float | None:
    return None if est is None else est.band


def _estimate(n, side, uncalibrated, ctx, kernel=None):
    """The node's cost on ``side`` ("edgeops" or "ort") with its band: the board's calibration
    (its own or borrowed, edgeops.simulator.calibration), else the uncalibrated prediction
    with the default band; None when neither exists."""
    from edgeops.simulator.calibration import default_estimate
    cal = getattr(ctx, "calibration", None)
    if cal is not None and cal.available:
        try:
            est = cal.estimate(n, side, getattr(ctx, "threads", None), kernel)
        except Exception:  # noqa: BLE001  (a node the model cannot describe: uncalibrated)
            est = None
        if est is not None:
            return est
    return default_estimate(uncalibrated, side)


def kernels_key() -> str:
    """What calibrated figures depend on in edgeops' own code: the neon kernels' sources, the
    runtime's (edgeops/ort, the native plans, the thread team) and edgeops' version."""
    import hashlib
    from pathlib import Path
    from edgeops import __version__
    h = hashlib.sha256(__version__.encode())
    try:
        from edgeops.targets.neon import _cache
        h.update(_cache.sources_hash().encode())
    except Exception:  # noqa: BLE001  (no neon target: nothing of it is measured)
        h.update(b"no-neon")
    import edgeops.ort as ort_pkg
    pkg = Path(ort_pkg.__file__).parent
    for f in sorted(pkg.glob("*")) + [pkg.parent / "plans.py", pkg.parent / "threads.py"]:
        if f.suffix in (".py", ".c") and f.is_file():
            h.update(f.name.encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:20]


def machine_key() -> str:
    """This machine and the measuring process's settings (edgeops.lower.measure.machine)."""
    import hashlib
    import json
    from edgeops.lower.measure import machine
    return hashlib.sha256(json.dumps(machine(), sort_keys=True).encode()).hexdigest()[:20]


def calibration_for(board):
    """The calibration ``board`` predicts with here (its own, borrowed, or none)."""
    from edgeops.simulator import calibration
    if board.kind == "npu" or board.peer is None:
        return calibration.Calibration(board, None, why=f"{board.kind} boards are not calibrated")
    return calibration.load(board, kernels=kernels_key(), machine=machine_key())


def _where(ctx) -> str:
    """The board, and the thread count a measured table's figures were taken at."""
    t = getattr(ctx.table, "threads", None)
    return ctx.board.name if t is None else f"{ctx.board.name} at {t} thread{'s' * (t != 1)}"


def _compare(n, k, sig, lat, peer, fused, ctx):
    """(edgeops s, ONNX Runtime s, where the figures come from, the kernel alone s or None): a
    measured kernel table wins over the simulator's prediction. "The kernel alone" is its time
    without the bridge crossing (what it costs inside a region), where the table has it."""
    key = f"{k.name}|{sig}"
    m = ctx.measured.get((k.name, sig))
    alone = m[2] if m is not None and len(m) > 2 else None
    if m is None and ctx.table is not None:
        m = ctx.table.get(n, k, [ctx.src_nodes[s] for s in fused], key)
        read = getattr(ctx.table, "kernel_s", None)
        alone = read(key) if read is not None else None
    if m is not None:
        return m[0], m[1], "measured", alone
    return lat, peer, "predicted", None


class Regional:
    """A measured node as a region member: its lowered placement, the kernel alone, through the
    bridge, ONNX Runtime; ``candidate``: kept in ONNX Runtime alone, lowered only in a region."""

    def __init__(self, p, alone, ours, theirs, candidate=False):
        self.p, self.alone, self.ours, self.theirs, self.candidate = p, alone, ours, theirs, candidate

    @property
    def crossing(self) -> float:
        return max(self.ours - self.alone, 0.0)


def promote_regions(first, ctx) -> int:
    """Lower the candidates (nodes slower than ONNX Runtime alone only by the bridge crossing)
    of each run of consecutive lowered-or-candidate nodes that is measured faster than ONNX
    Runtime on all of them: :func:`edgeops.ort.prepare` runs such a run as one region
    (edgeops.ort.regions). Where the kernel table can time a region (``region``), the run is
    measured as one, through the bridge as a package runs it (one crossing, and a fused pass
    where its kernels chain); otherwise it is estimated as its kernels alone plus one crossing,
    its members' largest (they share the boundary's tensor sizes), an upper bound when kernels
    chain. ``first``: [(node, Placement or None)] in graph order, updated in place; returns how
    many nodes were promoted."""
    from edgeops.lower.measure import MARGIN
    info = getattr(ctx, "regional", None) or {}
    promoted, run = 0, []
    nodes = {q.node: n for n, q in first if q is not None}

    def close():
        nonlocal promoted
        members = [info[i] for i in run]
        if len(members) >= 2 and any(r.candidate for r in members):
            whole = _region_measured(run, members, nodes, ctx)
            if whole is not None:
                cost, ort_s = whole
                said = (f"in a region of {len(members)} nodes measured as one on {_where(ctx)}: "
                        f"{_ms(cost)} vs ORT {_ms(ort_s)}")
            else:
                cost = sum(r.alone for r in members) + max(r.crossing for r in members)
                ort_s = sum(r.theirs for r in members)
                said = (f"in a region of {len(members)} nodes measured on {_where(ctx)}: "
                        f"kernels {_ms(sum(r.alone for r in members))} + one crossing "
                        f"{_ms(max(r.crossing for r in members))} vs ORT {_ms(ort_s)}")
            won = cost < ort_s * MARGIN
            for k, (n, q) in enumerate(first):
                r = info.get(q.node) if q is not None else None
                if r is None or not r.candidate or q.node not in run:
                    continue
                if won:
                    r.p.reason = f"{r.p.kernel} {said} (alone {_ms(r.ours)} vs {_ms(r.theirs)})"
                    r.p.measured_s, r.p.measured_peer_s = r.ours, r.theirs
                    first[k] = (n, r.p)
                    promoted += 1
                else:       # say why the region did not help either
                    q.reason += f"; {said}, not {1 - MARGIN:.0%} faster"
        run.clear()

    for n, q in first:
        if q is None:       # Constant nodes: held or dropped by prepare, they cut no region
            continue
        if q.node in info:
            run.append(q.node)
        else:
            close()
    close()
    return promoted


def _region_measured(run, members, nodes, ctx):
    """(edgeops s, ONNX Runtime s) of the run measured as one region by the kernel table, or
    None (no table that can, or the run could not be measured)."""
    measure = getattr(ctx.table, "region", None)
    if measure is None:
        return None
    from edgeops.registry import kernel_by_name
    ks = [kernel_by_name(r.p.kernel) for r in members]
    return measure([nodes[i] for i in run], ks,
                   [[ctx.src_nodes[s] for s in r.p.fused] for r in members],
                   [f"{k.name}|{r.p.signature}" for k, r in zip(ks, members)])


def unfuse(p: Placement, originals, ctx) -> list:
    """The original nodes of a fused chain that stays off edgeops kernels. Under ``auto`` the
    chain was judged as a whole (ONNX Runtime fuses parts of it too), so they all stay in ONNX
    Runtime with the chain's prediction on the first; under ``all`` and on NPUs each is lowered
    if it can be."""
    out = []
    for i, sn in enumerate(sorted(originals, key=lambda x: x.index)):
        if ctx.mode == "auto" and ctx.board.kind != "npu":
            q = Placement(sn.name, sn.op_type, None, None, "", p.peer_latency_s if i == 0 else 0.0,
                          None, p.peer_latency_s if i == 0 else 0.0,
                          signature=p.signature if i == 0 else None,
                          measured_s=p.measured_s if i == 0 else None,
                          measured_peer_s=p.measured_peer_s if i == 0 else None,
                          band=p.peer_band if i == 0 else None,
                          peer_band=p.peer_band if i == 0 else None,
                          calibration=p.calibration if i == 0 and p.target is None else None)
        else:
            q = place(sn, ctx)
        q.reason = f"unfused from {p.op} {p.node!r} ({p.reason})" + (f"; {q.reason}" if q.reason else "")
        out.append((sn, q))
    return out


def _blocker(n, ctx) -> str | None:
    """Why a node cannot go through the ONNX Runtime bridge, or None."""
    from edgeops.ops import EDGEOPS_DOMAIN
    from edgeops.ort import LOWERABLE_STANDARD_OPS
    if n.domain not in ("", EDGEOPS_DOMAIN):
        return f"domain {n.domain!r} is not edgeops'"
    if n.opdef is None:
        return f"edgeops has no definition of {n.op_type}"
    if n.domain == "" and n.op_type not in LOWERABLE_STANDARD_OPS:
        return (f"{n.op_type} stays in ONNX Runtime (shape/index inputs or a variable number of "
                f"inputs/outputs, which the custom-op bridge cannot declare)")
    dts = [d or "?" for x, d in zip(n.inputs, n.input_dtypes) if x]
    if any(d != "fp32" for d in dts):
        return f"inputs are {dts}; edgeops kernels take fp32 at the ONNX Runtime boundary"
    shapes = [s for x, s in zip(n.inputs + n.outputs[:1], n.input_shapes + n.output_shapes[:1]) if x]
    if not all(s is not None and all(isinstance(d, int) and d > 0 for d in s) for s in shapes):
        return f"shapes {shapes} are not static and non-empty; pass --shapes"
    if not n.output_shapes[0]:
        return "0-d output: the bridge hands back arrays of rank >= 1"
    used = [o for o in n.outputs[1:] if o and (n.graph.consumers(o) or o in _graph_outputs(n))]
    if used:
        return f"its optional output(s) {used} are used; edgeops kernels produce only the first"
    try:
        attrs = n.attrs
    except OpDefinitionError as e:
        return f"attributes edgeops does not implement: {e}"
    return _opset_blocker(n, attrs, ctx.opset)


def _opset_blocker(n, attrs, opset) -> str | None:
    """edgeops' op definitions follow the opsets their docstrings name; older semantics that
    differ and still parse are caught here."""
    if n.domain:
        return None
    if n.op_type == "Softmax" and opset < 13:
        rank = len(n.input_shapes[0])
        if n.raw_attrs.get("axis", 1) % rank != rank - 1:   # flatten-to-2-D semantics before 13
            return (f"Softmax-{opset} over axes [{n.raw_attrs.get('axis', 1)}:] (2-D coercion) "
                    f"is not lowered")
    if n.op_type == "BatchNormalization" and attrs.get("training_mode"):
        return "BatchNormalization in training mode"
    return None


def _select(n, ctx):
    """(kernel, precision, reason): the registry's choice over ``ctx.targets``; on an NPU a
    node with no fp32 kernel is offered again as fp16 (the Cube's precision)."""
    from edgeops.registry import select
    sel = select(n, SimpleNamespace(targets=ctx.targets))
    if sel.kernel is not None:
        npu16 = ctx.board.kind == "npu" and "fp16" in sel.kernel.dtypes
        return sel.kernel, "fp16" if npu16 else "fp32", sel.reason
    if ctx.board.kind == "npu":
        half = select(_AsDtype(n, "fp16"), SimpleNamespace(targets=ctx.targets))
        if half.kernel is not None:
            return half.kernel, "fp16", half.reason + " (fp16 compute)"
    return None, "fp32", sel.reason


class _AsDtype:
    """A node seen with fp32 inputs as another dtype (for kernel predicates and dtypes)."""
    def __init__(self, node, dtype):
        self._n, self._dt = node, dtype

    def __getattr__(self, k):
        return getattr(self._n, k)

    @property
    def input_dtypes(self):
        return [self._dt if d == "fp32" else d for d in self._n.input_dtypes]


def _plan(n, k, precision, ctx):
    """(Tiling or None, Prediction or None, why none) for kernel ``k`` on the board."""
    from edgeops.registry import REFERENCE
    from edgeops.tiling import Tiling, space_from_node, tune
    from edgeops.tiling.spaces import Space
    if not ctx.plan:
        return None, None, "planning off"
    if k.target == REFERENCE:
        return None, None, "reference kernels are not tiled or modelled"
    sp = space_from_node(n)
    if isinstance(sp, str):
        return None, None, sp
    dt = "fp32" if precision == "fp32" else "fp16"
    sp = Space(sp.kind, tuple((key, dt if key == "dtype" else v) for key, v in sp.params))
    try:
        entry, _ = tune(sp, ctx.board, target=k.target, budget=ctx.budget, cache=ctx.cache)
    except EdgeOpsError as e:
        return None, None, str(e)
    from edgeops.simulator.evaluate import Prediction
    return Tiling.from_dict(entry["tiling"]), Prediction.from_dict(entry["prediction"]), None


def _peer(n, board) -> float | None:
    """ONNX Runtime's predicted latency for ``n`` (edgeops.simulator.peer); None on NPU boards
    (ORT runs on the host CPU there, which the board file does not model)."""
    if board.peer is None:
        return None
    from edgeops.simulator.peer import peer_latency
    try:
        return float(peer_latency(n, board).latency_s)
    except EdgeOpsError:
        return None


def _signature(n) -> str:
    """The op's iteration-space signature (what tuning and measured tables key on), or, for an
    op without one, its type, input shapes and attributes."""
    from edgeops.tiling import space_from_node
    sp = space_from_node(n)
    if not isinstance(sp, str):
        return sp.signature
    return f"{n.op_type}:{n.input_shapes}:{sorted(n.raw_attrs.items())}"


def _accepts_tiling(k, tiling) -> bool | str:
    """Whether the node should carry the planner's tiling for kernel ``k``.

    ADAPTER: a tiling only helps a kernel that reads that decomposition's tile sizes, and a
    kernel handed one it cannot read fails at run time. A target says which it reads with
    ``edgeops.targets.<target>.accepts_tiling(kernel_name, tiling) -> True | reason`` (neon:
    GEMM/MatMul/SwiGLU and im2col/Winograd conv, through ``blocking.from_tiling``; cuda). Where
    a target declines, the tiling is only recorded in the placement table (it is what the
    prediction assumed) and the kernel uses its own blocking."""
    from edgeops.pipeline.targets import target_module
    try:
        if "tiling" not in inspect.signature(k.fn).parameters:
            return f"{k.name} takes no tiling"
    except (TypeError, ValueError):
        return f"{k.name} takes no tiling"
    hook = getattr(target_module(k.target), "accepts_tiling", None)
    if hook is None:
        return f"target {k.target} does not say which tilings its kernels read"
    return hook(k.name, tiling)


def _us(s: float) -> str:
    return f"{s * 1e6:.1f} us"


def _ms(s: float) -> str:
    return "failed" if s == float("inf") else f"{s * 1e3:.3f} ms"


def _graph_outputs(n) -> set:
    return {t.name for t in n.graph.outputs}
