"""The activation memory planner against a brute-force liveness walk on random DAGs."""
import pytest

from edgeops.simulator.memplan import Step, plan_memory


def random_dag(rng, n_nodes):
    """Steps in topological order over tensors t0.. with random sizes; some ops element-wise
    (output the size of their first input), some views, the rest anything."""
    sizes = {"in0": int(rng.integers(1, 64)) * 16}
    inputs = ["in0"]
    if rng.random() < 0.5:
        sizes["in1"] = int(rng.integers(1, 64)) * 16
        inputs.append("in1")
    avail = list(inputs)
    steps = []
    for i in range(n_nodes):
        k = int(rng.integers(1, min(3, len(avail)) + 1))
        ins = list(rng.choice(avail, size=k, replace=False))
        kind = str(rng.choice(["other", "inplace", "inplace", "view"]))
        out = f"t{i}"
        if kind in ("inplace", "view") or rng.random() < 0.3:
            sizes[out] = sizes[ins[0]]
        else:
            sizes[out] = int(rng.integers(1, 64)) * 16
        if kind == "view":
            ins = ins[:1]
        steps.append(Step(f"n{i}", tuple(ins), (out,), kind))
        avail.append(out)
    consumed = {t for s in steps for t in s.inputs}
    outputs = [t for t in avail if t not in consumed and t not in inputs] or [avail[-1]]
    if rng.random() < 0.5:      # an intermediate that is also a graph output
        outputs.append(str(rng.choice(avail[len(inputs):])))
    return steps, sizes, inputs, sorted(set(outputs))


def brute_force_peak(steps, sizes, inputs, outputs, inplace=True):
    """Walk the schedule with reference counts; the same reuse rules stated independently:
    a view shares its input's storage; an element-wise op writes into an input's storage when
    that storage is not a graph input's or output's, is as large as the output, and no tensor
    in it has a reader after this step. Peak = most bytes held at any step (inputs and outputs
    of the running step included)."""
    readers = {}
    for i, s in enumerate(steps):
        for t in s.inputs:
            readers.setdefault(t, []).append(i)
    storage, members, size_of, pinned = {}, {}, {}, set()
    next_id = [0]

    def alloc(t):
        sid = next_id[0]
        next_id[0] += 1
        storage[t], members[sid], size_of[sid] = sid, [t], sizes[t]
        return sid

    for t in inputs:
        pinned.add(alloc(t))
    live = set(storage.values())
    peak = sum(size_of[s] for s in live)

    def still_read(sid, after):
        return any(r > after for t in members[sid] for r in readers.get(t, []))

    for i, s in enumerate(steps):
        out = s.outputs[0]
        sid = None
        if s.kind == "view" and sizes[out] <= size_of[storage[s.inputs[0]]]:
            sid = storage[s.inputs[0]]
        elif s.kind == "inplace" and inplace:
            for t in s.inputs:
                c = storage[t]
                if c not in pinned and size_of[c] == sizes[out] and not still_read(c, i):
                    sid = c
                    break
        if sid is None:
            sid = alloc(out)
            live.add(sid)
        else:
            storage[out] = sid
            members[sid].append(out)
        if out in outputs:
            pinned.add(sid)
        peak = max(peak, sum(size_of[x] for x in live))
        for x in list(live):     # free storage nobody reads any more
            if x not in pinned and not still_read(x, i):
                live.discard(x)
        # graph outputs stay; inputs stay only while read (they are pinned against reuse, not
        # freed by the caller -- count them for their readers only)
        for t in inputs:
            x = storage[t]
            if x in live and not still_read(x, i) and not any(m in outputs for m in members[x]):
                live.discard(x)
    return peak


@pytest.mark.parametrize("seed", range(40))
def test_peak_matches_brute_force_on_random_dags(seed):
    import numpy as np
    rng = np.random.default_rng(seed)
    steps, sizes, inputs, outputs = random_dag(rng, int(rng.integers(1, 18)))
    for inplace in (True, False):
        plan = plan_memory(steps, sizes, inputs, outputs, inplace=inplace)
        assert plan.peak_bytes == brute_force_peak(steps, sizes, inputs, outputs, inplace)
        assert plan.arena_bytes >= plan.peak_bytes
        # buffers alive at the same time never share arena bytes
        bs = plan.buffers
        for a in bs:
            for b in bs:
                if a.id < b.id and a.overlaps(b):
                    assert a.offset + a.size <= b.offset or b.offset + b.size <= a.offset
    assert plan_memory(steps, sizes, inputs, outputs).peak_bytes <= \
        plan_memory(steps, sizes, inputs, outputs, inplace=False).peak_bytes


def test_elementwise_chain_runs_in_one_buffer():
    # x -> conv -> a -> relu -> b -> sigmoid -> c -> out: relu and sigmoid reuse a's buffer
    steps = [Step("conv", ("x",), ("a",)), Step("relu", ("a",), ("b",), "inplace"),
             Step("sig", ("b",), ("c",), "inplace"), Step("head", ("c",), ("y",))]
    sizes = {"x": 100, "a": 400, "b": 400, "c": 400, "y": 10}
    plan = plan_memory(steps, sizes, ["x"], ["y"])
    assert plan.peak_bytes == 500
    assert [(s, i) for s, i, _ in plan.inplace] == [("relu", "a"), ("sig", "b")]
    assert plan_memory(steps, sizes, ["x"], ["y"], inplace=False).peak_bytes == 800


def test_no_inplace_into_a_buffer_read_later():
    # a feeds relu and, later, add: relu must not overwrite it
    steps = [Step("conv", ("x",), ("a",)), Step("relu", ("a",), ("b",), "inplace"),
             Step("add", ("a", "b"), ("c",), "inplace")]
    sizes = {"x": 8, "a": 64, "b": 64, "c": 64}
    plan = plan_memory(steps, sizes, ["x"], ["c"])
    assert ("relu", "a", "b") not in plan.inplace
    assert plan.inplace and plan.inplace[0][0] == "add"


def test_preconditions():
    with pytest.raises(ValueError, match="kind"):
        plan_memory([Step("a", ("x",), ("y",), "fused")], {"x": 1, "y": 1}, ["x"], ["y"])
    with pytest.raises(ValueError, match="before any step produces it"):
        plan_memory([Step("a", ("z",), ("y",))], {"z": 1, "y": 1}, [], ["y"])
