"""The measured kernel table of the machine edgeops runs on (board ``host``).

For a node, or a fused chain, and the kernel lowering would give it: the median time of that
kernel through ONNX Runtime's custom-op bridge (a session as a package makes it: Python dispatch,
the GIL, a copy of each tensor each way), against ONNX Runtime's own execution of the original
node(s) (ORT_ENABLE_ALL, its own fusions included) — each a one-node session on this machine with
the node's real weights and shapes, timed in interleaved blocks so that load on shared cores hits
both alike. Like TensorRT's timing cache, an entry is keyed by what was timed: kernel id and the
op's exact signature (op, shapes, attributes — the shape class is the exact shape; a model with
other shapes is measured again), and the file by what makes the figures valid: the machine
(``edgeops.boards.host`` fingerprint: arch, CPU model, cores), edgeops, ONNX Runtime and Numba
versions, the neon kernels' sources and vector width (``EDGEOPS_VECTOR_BITS``), and the OpenMP
wait policy of the measuring process (``edgeops compile --omp-wait``). It lives in
``<edgeops cache>/kernels/host-<key>.json`` (``$EDGEOPS_CACHE_DIR``, else
``~/.cache/edgeops``), is filled at the first ``edgeops compile --board host`` that meets a node
(or ahead of time by ``edgeops tune MODEL --board host --measure-table``), and is read by the
lowering policy, whose placement reason then says "measured on host: x ms vs ORT y ms".

Thread count. Entries are also keyed by the threads both sides ran with (a package's
``runtime.threads``, default every core this process may use), ONNX Runtime's intra-op threads
and the kernel's Numba threads alike: which side wins moves with it (ONNX Runtime splits rows
over the cores, a passive Numba pool pays its wake-up; figures: docs/notes/kernel-table.md), so
a 1-thread package is decided on 1-thread figures.

Regions. A run of consecutive nodes that lowering would make one region (edgeops.ort.regions:
one bridge crossing, and one fused pass where kernels chain, such as norms feeding norms) is
also measured as one (:meth:`KernelTable.region`, keyed by its members' keys): the sum of its
nodes' figures misses both.

Why measure: every call through the bridge costs far more than the simulator's launch figure,
so only a measurement says whether a node is worth lowering. Only the
``host`` board can be measured; another board needs a table measured on it.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import time
from pathlib import Path

import numpy as np

from edgeops import cache

VERSION = 5     # 5: blocks warmed for WARM_S; regions above one thread timed in REGION_ROUNDS pairs
# lower only when edgeops is measured at least this much faster: one-node timings on a shared
# machine wobble by a few percent, and a wrong "faster" costs every run of the package
MARGIN = 0.9
# the whole package against ONNX Runtime's session: its nodes each cleared MARGIN already, and a
# whole model's timing (fresh session pairs) is steadier than a node's; asking 10% again threw
# away packages measured 8% faster (encoder_block at 2 threads: 11.18 vs 12.21 ms)
WHOLE_MARGIN = 1.0
MODEL_ROUNDS = 3     # fresh session pairs for the whole-model check (see measure_model)
REGION_ROUNDS = 3    # and for a region above one thread (see measure_region)


@functools.lru_cache(maxsize=1)
def _machine() -> str:
    return json.dumps(machine_uncached(), sort_keys=True)


def machine() -> dict:
    """What the table's figures depend on, besides the kernels themselves; with the process's
    OpenMP wait policy (edgeops.ort.wait_policy: whether Numba's workers are awake when a kernel
    starts moves every multi-thread figure), read each time: it is settled only once OpenMP
    starts."""
    from edgeops.ort import wait_policy
    return json.loads(_machine()) | {"omp_wait": wait_policy()}


def machine_uncached() -> dict:
    import onnxruntime
    from edgeops import __version__
    try:
        from edgeops.boards import host
        fp = host.detect().fingerprint
    except Exception:  # noqa: BLE001  (not Linux: the platform string is what there is)
        import platform
        fp = f"{platform.machine()}|{platform.processor()}|{os.cpu_count()}c"
    try:
        import numba
        nb = numba.__version__
    except ImportError:
        nb = None
    try:    # the kernels' own code and vector width: a table of other code would mislead
        from edgeops.targets.neon import _cache, _isa
        kernels = f"{_cache.sources_hash()[:16]}|{_isa.requested()}"
    except Exception:  # noqa: BLE001  (no neon target importable: nothing of it is measured)
        kernels = None
    return {"fingerprint": fp, "edgeops": __version__, "onnxruntime": onnxruntime.__version__,
            "numba": nb, "neon": kernels}


def cache_path(board) -> Path:
    """The table file of ``board`` on this machine (host: keyed by :func:`machine`; another
    board by its file hash, for a table measured on that board and copied here)."""
    key = json.dumps(machine(), sort_keys=True) if board.name == "host" else \
        (getattr(board, "file_sha256", "") or "nohash")
    return cache.root() / "kernels" / f"{board.name}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


def default_threads() -> int:
    """The threads a session without a thread count runs with: every core this process may use."""
    from edgeops.ort import _cores
    return _cores()


class KernelTable:
    """``get(node, kernel, originals, key) -> (edgeops s, ONNX Runtime s) | None``, measured on
    first use and cached; ``rows()`` for reports. ``threads``: what both sides run with (default:
    :func:`default_threads`); the table file holds every thread count, each entry keyed by its.
    ``remeasure``: forget this thread count's entries (the others are kept)."""

    def __init__(self, board, path: Path | None = None, remeasure: bool = False,
                 threads: int | None = None):
        self.board = board.name
        self.threads = int(threads) if threads else default_threads()
        self.path = path or cache_path(board)
        self.machine = machine()
        self.entries: dict[str, dict] = {}
        self.measured_now: list[str] = []
        self.used: list[str] = []           # keys read through get(), in order
        try:
            doc = json.loads(self.path.read_text())
            if doc.get("version") == VERSION and doc.get("machine") == self.machine:
                self.entries = doc["entries"]
        except (OSError, ValueError, KeyError, AttributeError):
            pass      # no table yet, or one from another machine or edgeops: measure again
        if remeasure:     # this thread count's figures only; the others stay
            self.entries = {k: v for k, v in self.entries.items() if not k.startswith(self._key(""))}

    def _key(self, key: str) -> str:
        return f"t{self.threads}|{key}"

    def get(self, node, kernel, originals, key: str):
        key = self._key(key)
        hit = self.entries.get(key)
        if key not in self.used:
            self.used.append(key)
        if hit is None:
            hit = self._fill(key, measure(node, kernel, originals, self.threads),
                             kernel=kernel.name, op=node.op_type if not node.domain else
                             f"{node.domain}::{node.op_type}",
                             chain=[n.op_type for n in originals] or [node.op_type],
                             signature=key.split("|", 2)[-1])
        e, o = hit.get("edgeops_s"), hit.get("ort_s")
        return None if e is None or o is None else (e, o)

    def kernel_s(self, key: str) -> float | None:
        """The kernel alone (its dispatch entry called from Python, no bridge crossing) of an
        entry :meth:`get` filled; what a node costs inside a region (edgeops.ort.regions)."""
        return (self.entries.get(self._key(key)) or {}).get("kernel_s")

    def region(self, nodes, kernels, originals, keys):
        """(edgeops s, ONNX Runtime s) of consecutive nodes as one region (:func:`measure_region`),
        measured at first use and cached under ``keys``, the members' own ("kernel|signature");
        None when the region cannot be measured."""
        sigs = list(keys)
        key = self._key("region|" + hashlib.sha256("\n".join(sigs).encode()).hexdigest()[:32])
        hit = self.entries.get(key)
        if key not in self.used:
            self.used.append(key)
        if hit is None:
            hit = self._fill(key, measure_region(nodes, kernels, originals, self.threads),
                             kernel="region", chain=[k.name for k in kernels],
                             signature=" ; ".join(s.split("|", 1)[1] for s in sigs))
        e, o = hit.get("edgeops_s"), hit.get("ort_s")
        return None if e is None or o is None else (e, o)

    def _fill(self, key: str, t, **fields) -> dict:
        """Store a measurement ([edgeops s, ONNX Runtime s, kernel s?] or None) under ``key``."""
        hit = self.entries[key] = {
            **fields, "threads": self.threads,
            "edgeops_s": None if t is None else t[0], "ort_s": None if t is None else t[1],
            "kernel_s": None if t is None or len(t) < 3 else t[2],
            "measured_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        self.measured_now.append(key)
        self._save()
        return hit

    def whole_model(self, source, lowered):
        """(package s, ONNX Runtime s) for the whole lowered model against the original, or None
        when either cannot run. A node measured alone misses what a custom node costs the rest
        of the graph: the session settings the bridge needs (no spinning, sequential) and the
        ONNX Runtime fusions and layout changes it interrupts."""
        key = self._key("model|" + hashlib.sha256(
            lowered.SerializeToString(deterministic=True)).hexdigest()[:32])
        hit = self.entries.get(key)
        if hit is None:
            t = measure_model(source, lowered, self.threads)
            hit = self.entries[key] = {"threads": self.threads,"edgeops_s": None if t is None else t[0],
                                       "ort_s": None if t is None else t[1],
                                       "measured_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            self._save()
        e, o = hit.get("edgeops_s"), hit.get("ort_s")
        return None if e is None or o is None else (e, o)

    def rows(self, keys=None) -> list[dict]:
        return [{"key": k, **self.entries[k]} for k in (keys if keys is not None else sorted(self.entries))
                if k in self.entries]

    def _save(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps({"version": VERSION, "board": self.board,
                                       "machine": self.machine, "margin": MARGIN,
                                       "how": "median per run: the edgeops kernel in a one-node "
                                              "session through the custom-op bridge vs ONNX "
                                              "Runtime (ORT_ENABLE_ALL) on the original node(s), "
                                              "interleaved blocks, both at the entry's threads "
                                              "(key prefix t<N>)",
                                       "entries": self.entries}, indent=1, sort_keys=True))
            os.replace(tmp, self.path)
        except OSError:
            pass      # a read-only cache only costs measuring again


def measure(node, kernel, originals, threads: int | None = None) -> list | None:
    """[edgeops s, ONNX Runtime s, kernel s]: the kernel through the bridge, ONNX Runtime on the
    original node(s), and the kernel's dispatch entry called from Python with the same inputs
    (no crossing: what the node costs inside a region). edgeops is inf when its kernel fails;
    None when the subgraph cannot be cut out (shapes or constants unknown) or ONNX Runtime
    refuses it. ``threads``: ONNX Runtime's intra-op threads and the kernel's (default: the
    cores)."""
    from edgeops.errors import EdgeOpsError
    try:
        m_ours, m_theirs, feeds = _cut([node], [kernel], [originals])
    except _CannotCut:
        return None
    try:
        theirs_s = _ort_session(m_theirs, threads)
        theirs_s.run(None, feeds)
    except Exception:  # noqa: BLE001  (ONNX Runtime's own errors have no common base)
        return None
    try:
        from edgeops.ort import session
        ours_s = session(m_ours, target=kernel.target, threads=threads)
        ours_s.run(None, feeds)     # Numba loads or compiles here; a failing kernel raises
        alone = _kernel_call(m_ours, kernel.target, feeds, threads)
    except EdgeOpsError:
        return [float("inf"), _medians([theirs_s], feeds)[0], float("inf")]
    return _medians([ours_s, theirs_s, alone], feeds)


def _cut(nodes, kernels, originals):
    """(the nodes lowered to ``kernels``, ONNX Runtime's original nodes, feeds) as two models of
    just those nodes, the last node's first output their output. ``originals``: per node, the
    source nodes a fused node replaced (empty: the node itself)."""
    from types import SimpleNamespace
    from edgeops.lower.surgery import lowered
    ours, theirs, g_theirs = [], [], nodes[0].graph
    for n, k, orig in zip(nodes, kernels, originals):
        p = _proto(n)
        lowered(p, n, SimpleNamespace(kernel=k.name, tiling=None), n.graph.opsets.get("", 0))
        ours.append(p)
        theirs += [_proto(o) for o in orig] if orig else [_proto(n)]
        if orig:
            g_theirs = orig[0].graph
    out = nodes[-1].outputs[0]
    m_ours, feeds = _mini(ours, nodes[0].graph, out)
    m_theirs, _ = _mini(theirs, g_theirs, out, feeds)
    return m_ours, m_theirs, feeds


def measure_region(nodes, kernels, originals, threads: int | None = None) -> list | None:
    """[edgeops s, ONNX Runtime s] for consecutive nodes run as ONE region through the bridge
    (edgeops.ort.regions: one crossing, and whatever the kernels do together, such as a fused
    chain pass), against ONNX Runtime on their original nodes; None when they cannot be cut out
    or either side fails. Only the last node's output leaves the measured region (a region whose
    intermediate tensors are also read outside copies those out as well). Above one thread, in
    ``REGION_ROUNDS`` fresh session pairs, their runs pooled (as :func:`measure_model`): one
    pair's ONNX Runtime session can draw a slow start or a slow phase and promote a region that
    then runs slower in a package (figures: docs/notes/kernel-table.md)."""
    try:
        m_ours, m_theirs, feeds = _cut(nodes, kernels, originals)
        from edgeops.ort import session
        runs: list[list[float]] = [[], []]
        for _ in range(REGION_ROUNDS if (threads or default_threads()) > 1 else 1):
            sides = [session(m_ours, target=kernels[0].target, threads=threads),
                     _ort_session(m_theirs, threads)]
            for s in sides:
                s.run(None, feeds)
            for acc, ts in zip(runs, _medians(sides, feeds, raw=True)):
                acc += ts
            del sides
        return [float(np.median(ts)) for ts in runs]
    except Exception:  # noqa: BLE001  (a region that cannot be measured is not promoted)
        return None


class _Call:
    """A session-like wrapper of one ai.edgeops node's dispatch entry: ``run`` calls the kernel
    as a region does (inputs as numpy arrays, held constants put back), without the bridge."""

    def __init__(self, m, target, feeds, threads=None):
        from edgeops.ort import DISPATCH_ATTR, prepare
        from edgeops.ort.dispatch import resolve
        holds: list[str] = []
        pm = prepare(m, target, regions=False, threads=threads, holds=holds)
        if holds:     # the node's weights go when this measurement does
            import weakref
            from edgeops.ort.consts import release
            weakref.finalize(self, release, holds)
        (n,) = [x for x in pm.graph.node if x.domain == "ai.edgeops"]
        self.entry = resolve(next(a.s.decode() for a in n.attribute if a.name == DISPATCH_ATTR))
        empty = np.zeros(0, np.float32)
        self.args = tuple(feeds.get(x, empty) for x in n.input)

    def get_outputs(self):
        return []

    def run(self, names, feeds):
        return self.entry.call(self.args)


def _kernel_call(m, target, feeds, threads=None) -> _Call:
    c = _Call(m, target, feeds, threads)
    c.run(None, feeds)
    return c


def measure_model(source, lowered, threads: int | None = None) -> list | None:
    """[package s, ONNX Runtime s] on seeded random inputs, the package as Package.session runs
    it, ONNX Runtime with its defaults; None when either fails (the package check reports it)."""
    from edgeops.ort import session
    from edgeops.package import random_inputs
    try:
        feeds = random_inputs(source)
        runs: list[list[float]] = [[], []]
        for _ in range(MODEL_ROUNDS):
            # fresh sessions each round: on shared cores a multi-threaded session's speed is set
            # when it is made, so one instance a side decides by luck (docs/notes/kernel-table.md)
            pair = [session(lowered, target="reference", threads=threads),
                    _ort_session(source, threads)]
            for acc, ts in zip(runs, _medians(pair, feeds, budget_s=0.5 / MODEL_ROUNDS, raw=True)):
                acc += ts
            del pair
        return [float(np.median(ts)) for ts in runs]
    except Exception:  # noqa: BLE001  (ONNX Runtime's and kernels' errors have no common base)
        return None


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
        src = _identity_of_const(g, x)
        if t.is_const or src is not None:     # TorchScript's GroupNorm reads Identity(constant)
            inits.append(numpy_helper.from_array(np.asarray((src or t).data), x))
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


def _identity_of_const(g, x: str):
    """The constant tensor ``x`` is an Identity of, or None: such an input is a weight, not an
    activation to feed (the other side's cut reads the constant itself)."""
    p = g.producer(x)
    if p is None or p.op_type != "Identity" or not p.inputs:
        return None
    t = g.tensors.get(p.inputs[0])
    return t if t is not None and t.is_const else None


def _ort_session(m, threads: int | None = None):
    import onnxruntime as ort
    so = ort.SessionOptions()
    if threads is not None:
        so.intra_op_num_threads = int(threads)
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])


# above how long ONNX Runtime's intra-op workers spin after a run (docs/notes/kernel-table.md)
SETTLE_TIMEOUT_S = 0.1


def _runnable_threads() -> int | None:
    """How many of this process's other threads are running or runnable (Linux), else None."""
    me = str(os.getpid())
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    n = 0
    for t in tasks:
        if t == me:
            continue
        try:
            with open(f"/proc/self/task/{t}/stat") as f:
                stat = f.read()
        except OSError:    # the thread ended
            continue
        n += stat[stat.rindex(")") + 2] == "R"
    return n


def settle(timeout_s: float = SETTLE_TIMEOUT_S, poll_s: float = 0.0005) -> bool:
    """Wait until no other thread of this process is running: ONNX Runtime's intra-op workers
    spin-wait tens of milliseconds after each run and OpenMP's workers may too,
    and a block timed while they still hold a core measures the contention, not the session: a
    two-thread edgeops kernel timed right after ONNX Runtime's block shares its cores with ONNX
    Runtime's spinner. True once they are parked, False after ``timeout_s`` (or where threads
    cannot be read: not Linux, after sleeping ``timeout_s / 2``)."""
    end = time.perf_counter() + timeout_s
    while True:
        n = _runnable_threads()
        if n is None:
            time.sleep(timeout_s / 2)
            return False
        if n == 0:
            return True
        if time.perf_counter() >= end:
            return False
        time.sleep(poll_s)


# each block's untimed warm-up, at least: after settle() the other threads have slept, and a
# pool's first two or so regions then run slow, which one warm run left in a block's timed runs;
# a session run back to back is past it (figures: docs/notes/kernel-table.md)
WARM_S = 0.005


def _medians(sessions, feeds, budget_s: float = 0.06, blocks: int = 6,
             runs: tuple[int, int] = (3, 60), raw: bool = False) -> list:
    """Median seconds per run of each session, timed in alternating blocks (each side warm and
    back to back within a block after ``WARM_S`` of untimed runs, the drift of a shared machine
    spread over all of them; before each block the other sessions' spinning threads are let
    park: :func:`settle`);
    ``raw``: every run's seconds instead."""
    names = [[o.name for o in s.get_outputs()] for s in sessions]
    for s, n in zip(sessions, names):
        s.run(n, feeds)
    t0 = time.perf_counter()
    sessions[0].run(names[0], feeds)
    one = max(time.perf_counter() - t0, 1e-6)
    per = int(min(max(runs[0], budget_s / (one * len(sessions) * blocks)), runs[1] // blocks + 1))
    times: list[list[float]] = [[] for _ in sessions]
    for _ in range(blocks):
        for s, n, ts in zip(sessions, names, times):
            settle()
            warm = time.perf_counter() + WARM_S
            s.run(n, feeds)           # warm after the other side ran
            while time.perf_counter() < warm:
                s.run(n, feeds)
            for _ in range(per):
                t = time.perf_counter()
                s.run(n, feeds)
                ts.append(time.perf_counter() - t)
    return times if raw else [float(np.median(ts)) for ts in times]
