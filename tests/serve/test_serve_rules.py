"""Runtime rules (manifest ``runtime`` keys and their command-line overrides) and the priority
queue, on services driven from Python with one worker."""
import threading
import time

import numpy as np
import pytest

from _serve_harness import NAN, SLOW, feeds, golden, hooked, make_pkg
from edgeops.serve import rules
from edgeops.serve.protocol import Overloaded
from edgeops.serve.service import Service


def test_manifest_keys_and_overrides(tmp_path):
    m = {"runtime": {"threads": 2, "deadline_s": 3, "fallback": {"kernel_error": "reference"},
                     "output_guard": {"enabled": True, "fallback_package": "../fp32"},
                     "target_rules": [{"if": "device_memory_below", "bytes": 1 << 30,
                                       "then": "cpu"}],
                     "batching": {"max_batch_size": 2, "max_queue_delay_ms": 5}}}
    s = rules.from_manifest(m, tmp_path / "pkg")
    assert (s.threads, s.deadline_s, s.guard, s.max_batch, s.batch_delay_ms) == (2, 3.0, True, 2, 5.0)
    assert s.guard_package == str(tmp_path / "fp32")
    assert s.target_rules == (rules.TargetRule("device_memory_below", 1 << 30, "cpu"),)
    o = rules.from_manifest(m, tmp_path, threads=1, deadline_s=0.5, guard="fp32",
                            rules=["memory_available_below=1.5G:cpu"])
    assert (o.threads, o.deadline_s, o.guard_precision, o.guard_package) == (1, 0.5, "fp32", None)
    assert o.target_rules == (rules.TargetRule("memory_available_below", int(1.5 * 2**30)),)


@pytest.mark.parametrize("runtime, match", [
    ({"deadline_s": -1}, "deadline_s -1"),
    ({"threads": 0}, "threads 0"),
    ({"output_guard": {"enabled": True, "fallback_precision": "int4"}}, "'int4'"),
    ({"target_rules": [{"if": "gpu_hot", "bytes": 1, "then": "cpu"}]}, "'gpu_hot'"),
    ({"target_rules": [{"if": "device_memory_below", "bytes": 1, "then": "npu"}]}, "'npu'"),
    ({"batching": {"max_batch": 4}}, "max_batch_size"),
])
def test_malformed_rules_are_refused_with_the_key_named(runtime, match):
    with pytest.raises(rules.RuleError, match=match):
        rules.from_manifest({"runtime": runtime})


def test_bad_rule_flag():
    with pytest.raises(rules.RuleError, match="CONDITION=SIZE:ACTION"):
        rules.parse_rule("memory<1G")


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    return make_pkg(tmp_path_factory.mktemp("g") / "g", 1, 2, runtime={
        "output_guard": {"enabled": True, "fallback_precision": "fp32"}, "deadline_s": 20})


def test_output_guard_switches_to_fp32_and_reports_it(guarded, rng):
    mp = hooked()
    try:
        with Service(guarded.path, workers=1, watch=False) as svc:
            x = feeds(rng, 1, NAN)["x"]
            j = svc.infer({"x": x})
            assert j.error is None
            np.testing.assert_allclose(j.outputs["y"], golden(str(guarded.path) + ".onnx", x),
                                       rtol=1e-5, atol=1e-6)
            m = svc.metrics_doc()
            assert m["guard_trips"] == 1 and "fp32" in m["workers"][0]["mode"]
            j = svc.infer(feeds(rng, 1, NAN))        # switched: the faulty kernel is out
            assert j.error is None and svc.metrics_doc()["guard_trips"] == 1
    finally:
        mp.undo()


def test_without_the_guard_nan_outputs_are_not_replaced(guarded, rng):
    mp = hooked()
    try:
        with Service(guarded.path, workers=1, watch=False, guard="off") as svc:
            j = svc.infer(feeds(rng, 1, NAN))
            assert j.error is None and np.isnan(j.outputs["y"]).all()
    finally:
        mp.undo()


@pytest.mark.parametrize("limit, cpu", [("1024T", True), ("0", False)])
def test_target_rule_moves_the_package_to_cpu(pkgs, rng, limit, cpu):
    with Service(pkgs["b1"].path, workers=1, watch=False, threads=1,
                 rules=[f"device_memory_below={limit}:cpu"]) as svc:
        mode = svc.metrics_doc()["workers"][0]["mode"]
        assert mode.startswith("cpu (rule device_memory_below") == cpu, mode
        assert svc.metrics_doc()["settings"]["threads"] == 1
        x = feeds(rng, 1)["x"]
        np.testing.assert_allclose(svc.infer({"x": x}).outputs["y"],
                                   golden(str(pkgs["b1"].path) + ".onnx", x), atol=1e-5)


def test_priorities_order_and_shedding(pkgs, rng):
    """One worker held by a slow request; the queue (4 places) is then served high first, a
    high request sheds the newest low one when full, and a low one is refused."""
    mp = hooked()
    try:
        with Service(pkgs["b1"].path, workers=1, watch=False, max_queue=4) as svc:
            slow = threading.Thread(target=svc.infer, args=(feeds(rng, 1, SLOW), 1))
            slow.start()
            time.sleep(0.5)                     # the worker is now inside the slow request
            order, lock = [], threading.Lock()
            jobs = {}
            for name, p in [("low1", 2), ("low2", 2), ("normal", 1), ("low3", 2)]:
                jobs[name] = svc.submit(feeds(rng, 1), p)
            jobs["high"] = svc.submit(feeds(rng, 1), 0)           # full: sheds low3
            with pytest.raises(Overloaded, match="queue is full") as e:
                svc.submit(feeds(rng, 1), 2)
            assert e.value.retry_after == 1.0 and e.value.status == 503

            def wait(n, j):
                j.wait(30)
                with lock:
                    order.append(n)
            ws = [threading.Thread(target=wait, args=kv) for kv in jobs.items()]
            for t in ws:
                t.start()
            for t in ws:
                t.join()
            slow.join()
            assert isinstance(jobs["low3"].error, Overloaded) and "shed" in str(jobs["low3"].error)
            done = [n for n in sorted(jobs, key=lambda n: jobs[n].finished_at)
                    if jobs[n].error is None]
            assert done == ["high", "normal", "low1", "low2"]
            assert svc.metrics_doc()["queue"]["shed"] == {"high": 0, "normal": 0, "low": 2}
    finally:
        mp.undo()
