"""The package half of ``edgeops doctor`` (checks 15-23: the deployed package); the
environment half and the runner are in :mod:`edgeops.deploy.doctor`, which imports this module
after its own checks so the order of the checklist is the order of definition."""
from __future__ import annotations

import os
from pathlib import Path

from edgeops.deploy.checks import CONSISTENCY_RTOL, FAIL, GROWTH_FAIL, GROWTH_WARN, OK, WARN, check


# ---- the deployed package -----------------------------------------------------------------------

@check("package-integrity")
def _integrity(ctx):
    p = ctx.package()
    signed = " (signed)" if (p.path / "manifest.sig").is_file() else ""
    return OK, f"{p.path.name}: {len(p.manifest['files'])} files match their sha256{signed}"


@check("ops-registered")
def _registered(ctx):
    from edgeops.ops import EDGEOPS_DOMAIN
    from edgeops.ort import bridge, opdef_for
    bridge.declare_ops()
    ops = sorted({n.op_type for n in ctx.package().model().graph.node
                  if n.domain == EDGEOPS_DOMAIN})
    missing = []
    for op in ops:
        opdef_for(op, EDGEOPS_DOMAIN)
        if f"{EDGEOPS_DOMAIN}::{op}" not in bridge._declared:
            missing.append(op)
    if missing:
        return FAIL, f"not declared to ONNX Runtime: {', '.join(missing)}"
    return OK, f"{len(ops)} ai.edgeops op type(s) declared: {', '.join(ops) or 'none'}"


def _lowered_rows(ctx):
    return [r for r in ctx.package().manifest["placement"] if r.get("kernel")]


@check("dispatch")
def _dispatch(ctx):
    ctx.run_once()
    wrong = []
    for r in _lowered_rows(ctx):
        seen = ctx.inputs.get(r["node"])
        if seen is None:
            wrong.append(f"{r['node']} never called")
            continue
        k = seen[0].kernel
        if k is None or k.name != r["kernel"] or k.target != r["target"]:
            wrong.append(f"{r['node']} -> {k.name if k else 'chosen per call'}, not {r['kernel']}")
    if wrong:
        return FAIL, "; ".join(wrong)
    return OK, f"{len(_lowered_rows(ctx))} node(s) ran on the kernel their placement names"


@check("kernel-consistency")
def _consistency(ctx):
    import dataclasses
    import numpy as np
    from edgeops.package import compare
    from edgeops.registry import REFERENCE, kernels, op_key
    ctx.run_once()
    inits = {t.name for t in ctx.package().model().graph.initializer}
    nodes = {n.name: n for n in ctx.package().model().graph.node}
    rng = np.random.default_rng(0)
    worst, bad = 0.0, []
    for r in _lowered_rows(ctx):
        if r["node"] not in ctx.inputs:
            continue
        d, xs = ctx.inputs[r["node"]]
        names = list(nodes[r["node"]].input) if r["node"] in nodes else []
        feeds = [x if x is None or (i < len(names) and names[i] in inits) or x.size == 0
                 else rng.standard_normal(x.shape).astype(x.dtype) for i, x in enumerate(xs)]
        ref = kernels(op_key(d.od.name, d.od.domain), REFERENCE)
        if not ref:
            continue
        want = dataclasses.replace(d, kernel=ref[0], tiling=None, board=None).call(feeds)
        got = d.call(feeds)
        want = want if isinstance(want, tuple) else (want,)
        got = got if isinstance(got, tuple) else (got,)
        err = max(e["max_rel"] for e in compare(dict(enumerate(got)), dict(enumerate(want))).values())
        worst = max(worst, err)
        if err > CONSISTENCY_RTOL.get(r.get("precision") or "fp32", 1e-5):
            bad.append(f"{r['node']} ({r['kernel']}): {err:.2e}")
    if bad:
        return FAIL, "above tolerance: " + "; ".join(bad)
    return OK, f"{len(ctx.inputs)} kernel(s) vs reference, worst rel error {worst:.1e}"


@check("numba-cache")
def _numba_cache(ctx):
    stats = ctx.run_once()[1]
    if stats["compiled"]:
        return WARN, (f"cold: the first run compiled {stats['compiled']} specialisation(s) "
                      f"(cached now; the next start loads them)")
    if not stats["loaded_from_cache"]:
        return OK, "no cached Numba kernels in this package"
    return OK, f"warm: {stats['loaded_from_cache']} specialisation(s) loaded from the cache"


def _rss() -> int:
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@check("memory-growth")
def _growth(ctx):
    import numpy as np
    ctx.run_once()
    ins, _ = ctx.package().reference()
    for _ in range(3):          # allocator pools settle first
        ctx._run(ins)
    rss = []
    for _ in range(ctx.runs):
        ctx._run(ins)
        rss.append(_rss())
    slope = float(np.polyfit(np.arange(len(rss)), np.asarray(rss, float), 1)[0])
    grow = slope * len(rss)
    st = FAIL if grow > GROWTH_FAIL else WARN if grow > GROWTH_WARN else OK
    return st, (f"RSS slope {slope / 1024:+.1f} KiB/run over {len(rss)} runs "
                f"({grow / 2**20:+.2f} MiB), RSS {rss[-1] / 2**20:.0f} MiB")


@check("fusion")
def _fusion(ctx):
    from edgeops.ort import session
    from edgeops.package import compare, unpinned
    p = ctx.package()
    fused = [r for r in p.manifest["placement"] if len(r.get("fused") or []) > 1]
    ins, want = p.reference()
    sess = session(unpinned(p.model()), target="reference")
    names = [o.name for o in sess.get_outputs()]
    got = dict(zip(names, sess.run(names, ins)))
    err = max(e["max_rel"] for e in compare(got, want).values())
    st = OK if err <= p.tolerance else FAIL
    return st, (f"{len(fused)} fused node(s) on reference kernels vs the unfused original: "
                f"max rel error {err:.1e} (tolerance {p.tolerance:.0e})")


@check("fallback-rules")
def _fallback(ctx):
    from edgeops.ops import EDGEOPS_DOMAIN
    from edgeops.registry import kernel_by_name
    ctx.run_once()
    p = ctx.package()
    rules = p.manifest["runtime"].get("fallback", {})
    problems = []
    for k in p.manifest.get("kernels", []):
        try:
            kernel_by_name(k)
        except Exception:  # noqa: BLE001
            problems.append(f"unknown kernel {k} was not refused")
    domain = {n.name: n.domain for n in p.model().graph.node}
    for r in p.manifest["placement"]:
        if r.get("target") is None and domain.get(r["node"]) == EDGEOPS_DOMAIN:
            problems.append(f"{r['node']} has no kernel but is an ai.edgeops node")
    if ctx.errors:
        problems.append(f"kernel errors in the runs: {ctx.errors[0][:200]}")
    if problems:
        return FAIL, "; ".join(problems)
    from edgeops.ort import fallback_counts
    fell = fallback_counts()    # kernel_error=reference: the runs went on, the nodes are named
    honoured = ", ".join(f"{k}={v}" for k, v in rules.items()) + ": honoured"
    if fell:
        return WARN, honoured + "; kernels fell back to reference: " + ", ".join(
            f"{n} x{c}" for n, c in sorted(fell.items()))
    return OK, honoured


@check("smoke")
def _smoke(ctx):
    from edgeops.package import compare
    outs = ctx.run_once()[0]
    p = ctx.package()
    err = max(e["max_rel"] for e in compare(outs, p.reference()[1]).values())
    st = OK if err <= p.tolerance else FAIL
    return st, f"reference outputs: max rel error {err:.1e} (tolerance {p.tolerance:.0e})"

