"""Regions: consecutive ai.edgeops nodes of a prepared model run as ONE ONNX Runtime node.

Every custom node costs a crossing of onnxruntime-extensions' bridge: its inputs copied into new
numpy arrays, a Python call under the GIL, its outputs copied back into ONNX Runtime's buffers.
For a memory-bound chain that crossing is much of the node (figures: docs/notes/ort-bridge.md),
so a chain of four pays it four times where one would do.
Like the subgraphs TensorRT's execution provider takes over from ONNX Runtime, :func:`collapse`
(called by :func:`edgeops.ort.prepare`) replaces each run of consecutive ai.edgeops nodes (in the
graph's topological order, so a run is convex: no path leaves it and comes back) by one
``ai.edgeops::Region_<i>x<o>`` node whose dispatch attribute lists the inner nodes' own dispatch
specs and their wiring. Intermediate tensors stay numpy arrays in Python; each inner node runs
exactly as it would alone (its kernel, tiling, held constants, fallback rules, error recording).

Why numbered op names: the bridge declares one fixed input and output count per op name for the
whole process, every input required, so regions come in declared sizes (``IN_SIZES`` x
``OUT_SIZES``); a region's unused inputs are fed the empty placeholder, and a run that would
need more inputs or outputs than the largest size is cut into several regions.

Package files are not changed: ``model.onnx`` keeps one node per placement row (what the
manifest describes and tools display); regions exist only in the prepared, in-memory model.
``prepare(..., regions=False)`` keeps one ONNX Runtime node per ai.edgeops node (per-node
profiling, debugging).

Chains. Inside a region, consecutive inner nodes whose kernels are stages of one fused pass
(:attr:`edgeops.registry.Kernel.stage`: norms over the same rows or groups, each node reading
the previous one's only output) run as that one pass, each row taken through every stage in
turn: one fork/join of the kernel's thread team for the chain instead of one per node (a
passive OpenMP pool wakes its workers with a futex at each), and the intermediate
row still in L1 when the next stage reads it. A chain that cannot be formed for the inputs at
hand, or whose pass fails, runs node by node instead (each node's own kernel and fallback
rules), and so does every region while a profiler collects per-node times.
"""
from __future__ import annotations

import json
import time

import numpy as np

from edgeops.ort import consts
from edgeops.ort.calls import op_function
from edgeops.ort.dispatch import forget as drop
from edgeops.ort.dispatch import resolve as resolve_node
from edgeops.ort.errors import OrtIntegrationError, record_error
from edgeops.threads import capped

IN_SIZES = (1, 2, 3, 4, 6, 8, 12, 16)
OUT_SIZES = (1, 2, 3, 4)
PREFIX = "Region_"
FORMAT = 1
_EMPTY = np.zeros(0, np.float32)

# {inner node name: [seconds, ...]} while a profiler collects (edgeops bench), else None
timing: dict | None = None


def op_name(n_in: int, n_out: int) -> str:
    i = next(s for s in IN_SIZES if s >= n_in)
    o = next(s for s in OUT_SIZES if s >= n_out)
    return f"{PREFIX}{i}x{o}"


def sizes(op_type: str) -> tuple[int, int]:
    i, o = op_type[len(PREFIX):].split("x")
    return int(i), int(o)


def all_sizes() -> list[tuple[int, int]]:
    return [(i, o) for i in IN_SIZES for o in OUT_SIZES]


def is_region(op_type: str) -> bool:
    return op_type.startswith(PREFIX)


def collapse(graph, placeholder: str | None, dispatch_attr: str, domain: str) -> int:
    """Replace runs of >= 2 consecutive prepared ``domain`` nodes of ``graph`` (in place) by region
    nodes; returns how many regions were made. ``placeholder``: the name of the graph's empty
    fp32 initializer that pads unused region inputs (the caller adds it)."""
    from onnx import helper
    nodes = list(graph.node)
    outside_reads = _reads_by_node(graph)
    graph_outputs = {o.name for o in graph.output}
    out_nodes, made, run = [], 0, []

    def flush():
        nonlocal made
        if len(run) >= 2:
            out_nodes.append(_region_node(run, graph_outputs, outside_reads, placeholder,
                                          dispatch_attr, domain, helper))
            made += 1
        else:
            out_nodes.extend(run)
        run.clear()

    for k, n in enumerate(nodes):
        if n.domain == domain and not is_region(n.op_type) and _spec(n, dispatch_attr) is not None:
            if run and not _fits(run + [n], graph_outputs, outside_reads, placeholder):
                flush()
            run.append(n)
        else:
            flush()
            out_nodes.append(n)
    flush()
    if made:
        inside = _internal_names(out_nodes, domain, dispatch_attr)
        keep = [v for v in graph.value_info if v.name not in inside]
        del graph.value_info[:]
        graph.value_info.extend(keep)
        del graph.node[:]
        graph.node.extend(out_nodes)
    return made


def _spec(n, dispatch_attr):
    for a in n.attribute:
        if a.name == dispatch_attr:
            return a.s.decode()
    return None


def _reads_by_node(graph) -> dict[int, set]:
    """{id(node): names the node or its subgraphs read}."""
    return {id(n): _reads_node(n) for n in graph.node}


def _boundary(run, graph_outputs, outside_reads, placeholder):
    members = {id(n) for n in run}
    produced = [o for n in run for o in n.output if o]
    made = set(produced)
    ins = list(dict.fromkeys(x for n in run for x in n.input
                             if x and x not in made and x != placeholder))
    read_outside = set().union(*(r for i, r in outside_reads.items() if i not in members))
    outs = [o for o in produced if o in read_outside or o in graph_outputs]
    return ins, outs


def _fits(run, graph_outputs, outside_reads, placeholder) -> bool:
    ins, outs = _boundary(run, graph_outputs, outside_reads, placeholder)
    return len(ins) <= IN_SIZES[-1] and 1 <= len(outs) <= OUT_SIZES[-1]


def _region_node(run, graph_outputs, outside_reads, placeholder, dispatch_attr, domain, helper):
    ins, outs = _boundary(run, graph_outputs, outside_reads, placeholder)
    name = f"edgeops.region[{run[0].name}..{run[-1].name}]"
    spec = {"format": FORMAT, "region": name, "inputs": ins, "outputs": outs,
            "nodes": [{"name": n.name, "op": n.op_type, "spec": _spec(n, dispatch_attr),
                       "inputs": [x if x and x != placeholder else None for x in n.input],
                       "outputs": list(n.output)} for n in run]}
    op = op_name(len(ins), len(outs))
    n_in, _ = sizes(op)
    pad = [placeholder] * (n_in - len(ins))
    if pad and placeholder is None:
        raise ValueError("a region needs the placeholder initializer")
    node = helper.make_node(op, ins + pad, outs, name=name, domain=domain)
    node.attribute.append(helper.make_attribute(dispatch_attr, json.dumps(spec, sort_keys=True)))
    return node


def _internal_names(nodes, domain, dispatch_attr) -> set:
    """Tensor names that only exist inside regions now."""
    visible = {x for n in nodes for x in [*n.input, *n.output]}
    inner = set()
    for n in nodes:
        if n.domain == domain and is_region(n.op_type):
            for a in n.attribute:
                if a.name != dispatch_attr:
                    continue
                for m in json.loads(a.s.decode())["nodes"]:
                    inner.update(o for o in m["outputs"] if o)
    return inner - visible


# ---- run time --------------------------------------------------------------------------------

class _Region:
    def __init__(self, d: dict):
        self.name = d["region"]
        slot = {x: i for i, x in enumerate(d["inputs"])}
        self.n_in = len(d["inputs"])
        steps, entries = [], []
        self.threads = None
        for m in d["nodes"]:
            inner = resolve_node(m["spec"])   # every check now, before ONNX Runtime holds the node
            od = inner.od
            if inner.threads is not None:   # prepared together: one session's thread count
                self.threads = inner.threads
            refs = []
            for x in m["inputs"]:
                if x is None:
                    refs.append(None)
                else:
                    if x not in slot:
                        slot[x] = len(slot)
                    refs.append(slot[x])
            outs = []
            for o in m["outputs"]:
                if o and o not in slot:
                    slot[o] = len(slot)
                outs.append(slot[o] if o else None)
            steps.append((m["name"], op_function(od), m["spec"], tuple(refs), tuple(outs)))
            entries.append(inner)
        self.steps = steps
        self.entries = entries
        self.sample = None    # native planning: a callable handed each Python call's slots
        self.n_slots = len(slot)
        self.outputs = tuple(slot[o] for o in d["outputs"])
        self.chains = _chains(steps, entries)     # {first step: (end step, entries)}
        self.keep = {i: _kept(steps, i, end, self.outputs)   # {first step: flag per stage}
                     for i, (end, _e) in self.chains.items()}
        self._made: dict = {}                     # (first step, X shape) -> a chain's pass
        self.chain_errors: dict = {}              # first step -> why its chain was dropped

    def __call__(self, inputs):
        if self.threads is not None:     # once for the region, not once per inner node
            return capped(self.threads, self._run, inputs)
        return self._run(inputs)

    def _run(self, inputs):
        env = list(inputs[:self.n_in]) + [None] * (self.n_slots - self.n_in)
        clock = timing
        skip = 0
        for i, (name, fn, spec, refs, outs) in enumerate(self.steps):
            if i < skip:
                continue
            if i in self.chains and clock is None:
                skip = self._chain(i, env)
                if skip:
                    continue
            args = [_EMPTY if r is None else env[r] for r in refs]
            if clock is not None:
                t = time.perf_counter()
            rv = fn(*args, edgeops_dispatch=spec)
            if clock is not None:
                clock.setdefault(name, []).append(time.perf_counter() - t)
            rv = rv if isinstance(rv, tuple) else (rv,)
            for o, v in zip(outs, rv):
                if o is not None:
                    env[o] = v
        if self.sample is not None:
            self.sample(env)
        res = tuple(env[o] for o in self.outputs)
        return res if len(res) > 1 else res[0]

    def _chain(self, i, env) -> int:
        """Run the chain that starts at step ``i`` as one pass, its outputs into ``env``; the
        step after it, or 0 (nothing written) when it cannot, and then it is not tried again
        (sessions on other threads may share this region: nothing here assumes it is alone)."""
        chain = self.chains.get(i)
        if chain is None:
            return 0
        end, entries = chain
        steps = self.steps[i:end]
        x = env[steps[0][3][0]]
        try:
            key = (i, x.shape)
            run = self._made.get(key)
            if run is None:
                stages, held = [], True
                for (_n, _f, _s, refs, _o), e in zip(steps, entries):
                    xs = e.inputs([_EMPTY if r is None else env[r] for r in refs])
                    xs[0] = None
                    held = held and all(j in e.held for j in range(1, len(xs)) if xs[j] is not None)
                    stages.append(e.kernel.stage(xs, e.attrs, x.shape))
                run = stages[0].chain(stages)
                if held:     # parameters are the held, read-only constants: the same every call
                    self._made[key] = run
            ys = run(x, self.keep[i])
        except Exception as e:  # noqa: BLE001  (node by node instead: each node's own rules apply)
            self.chain_errors[i] = f"{type(e).__name__}: {e}"
            self.chains.pop(i, None)
            return 0
        for (_n, _f, _s, _r, outs), y in zip(steps, ys):
            env[outs[0]] = y     # None: an intermediate only the next stage read
        return end


    def warm_native(self) -> None:
        """Compile (or load) the native entries its nodes' kernels have (their
        :attr:`~edgeops.registry.Kernel.plans`): while the session is made, not inside a run."""
        warm = {e.kernel.plans for e in self.entries
                if e.kernel is not None and e.kernel.plans is not None}
        for fn in warm:
            fn()

    def native_steps(self, env):
        """The region as native steps for the slots ``env`` of a call that just ran through
        Python: [(step, input slots, output slots)] in order, its chains as one step each; None
        while some step cannot say yet (a thread choice still timing, a chain not made), a
        string when the region will never have them (which node, and why)."""
        if timing is not None:
            return None
        out, skip = [], 0
        for i, (name, _fn, _spec, refs, outs) in enumerate(self.steps):
            if i < skip:
                continue
            if i in self.chains:
                end = self.chains[i][0]
                x = env[refs[0]]
                run = self._made.get((i, tuple(x.shape)))
                if run is None:
                    return None
                step_of = getattr(run, "native_step", None)
                if step_of is None:
                    return f"{name}: its chain has no native entry"
                from edgeops.threads import num_threads
                threads = num_threads() if self.threads is None else min(self.threads,
                                                                         num_threads())
                step = step_of(self.keep[i], threads, x)
                if step is None or isinstance(step, str):
                    return step if step is None else f"{name}: {step}"
                out.append((step, (refs[0],), (self.steps[end - 1][4][0],)))
                skip = end
                continue
            args = [_EMPTY if r is None else env[r] for r in refs]
            step = self.entries[i].native_step(args)
            if step is None or isinstance(step, str):
                return step if step is None else f"{name}: {step}"
            if any(refs[p] is None for p in step.reads) or len(step.outputs) != len(outs):
                return f"{name}: its step reads an absent input or writes other outputs"
            out.append((step, tuple(refs[p] for p in step.reads), tuple(outs)))
        return out


def _chains(steps, entries) -> dict:
    """{first step: (end step, the steps' dispatch entries)} for each run of >= 2 consecutive
    steps whose kernels are chain stages (fixed kernel, one output, no NaN guard), each reading
    the previous step's output as its first input."""
    def stage(k):
        e = entries[k]
        return (e.kernel is not None and e.kernel.stage is not None and not e.nan_guard
                and len(steps[k][4]) == 1 and steps[k][3] and steps[k][3][0] is not None)
    out, k = {}, 0
    while k < len(steps):
        j = k + 1
        if stage(k):
            while j < len(steps) and stage(j) and steps[j][3][0] == steps[j - 1][4][0]:
                j += 1
        if j - k >= 2:
            out[k] = (j, entries[k:j])
        k = j
    return out


def _kept(steps, i, end, outputs) -> tuple:
    """For the chain of steps [i, end): whether each stage's output is needed beyond the chain
    (a region output, or read by any step but the next stage); the last stage's always is.
    The others never leave the kernel's scratch rows."""
    flags = []
    for j in range(i, end):
        o = steps[j][4][0]
        readers = {k for k, st in enumerate(steps) if o in st[3]}
        flags.append(j == end - 1 or o in outputs or not readers <= {j + 1})
    return tuple(flags)


_cache: dict[str, _Region] = {}


def resolve(spec: str) -> _Region:
    r = _cache.get(spec)
    if r is None:
        try:
            d = json.loads(spec)
            if d.get("format") != FORMAT:
                raise OrtIntegrationError(f"region format {d.get('format')} is not {FORMAT}; "
                                          f"prepare the model with this edgeops")
            r = _cache[spec] = _Region(d)
        except (ValueError, KeyError, TypeError) as e:
            raise OrtIntegrationError(f"region dispatch attribute is not what edgeops.ort.prepare "
                                      f"writes ({type(e).__name__}: {e}); prepare the model "
                                      f"again") from None
    return r


def forget(digests) -> None:
    """Drop the cached regions whose inner nodes hold any of these constants."""
    drop(digests, _cache)


def region_function(n_out: int):
    """The bridge function of a region op with ``n_out`` outputs (never raises: the inner nodes
    record their own failures; a region that cannot even start records it and returns NaNs)."""
    def run(*inputs, **attrs):
        spec = attrs.get("edgeops_dispatch", "")
        try:
            return resolve(spec)(inputs)
        except BaseException as e:  # noqa: BLE001  (raising here would abort the process)
            record_error(f"ai.edgeops region: {type(e).__name__}: {e}")
            outs = tuple(np.full((0,), np.nan, np.float32) for _ in range(n_out))
            return outs if n_out > 1 else outs[0]
    run.__name__ = f"edgeops_region_{n_out}"
    return run


def members(spec: str) -> list[str]:
    """The inner node names of a region's dispatch attribute."""
    try:
        return [m["name"] for m in json.loads(spec)["nodes"]]
    except (ValueError, KeyError, TypeError):
        return []


def _reads(g) -> set[str]:
    """Every tensor name a node of ``g`` or of its subgraphs reads."""
    out: set[str] = set()
    for n in g.node:
        out |= _reads_node(n)
    return out


def _reads_node(n) -> set[str]:
    """Every tensor name node ``n`` or its subgraphs read."""
    out = set(n.input)
    for a in n.attribute:
        for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
            out |= _reads(sub)
    return out


consts.on_release(forget)     # held constants dropped: regions built on them go too
