"""Faults in the executors: a custom op that raises (the node falls back to the reference
kernel, counted), one that exits the process, segfaults or hangs past the deadline on a trigger
input, and workers SIGKILLed at random times during a load from a second process. Every request
either succeeds with the right answer or fails with a message that says what happened; the
service keeps answering."""
import os
import random
import signal
import threading
import time

import numpy as np
import pytest

from _serve_harness import (CRASH, HANG, RAISE, SEGV, feeds, finish, golden, hooked,
                            load_from_second_process)
from edgeops.serve.client import Client
from edgeops.serve.http import Server
from edgeops.serve.protocol import ServeError
from edgeops.serve.service import Service

CLEAR = {"worker_crashed", "deadline", "queue_timeout"}     # error kinds that say what happened


@pytest.fixture(scope="module")
def server(pkgs):
    mp = hooked()      # for the module's life: restarted workers load the faults again
    svc = Service(pkgs["b1"].path, workers=2, deadline_s=3.0, retries=1).start()
    srv = Server(svc)
    srv.start_background()
    yield srv
    srv.shutdown()
    srv.server_close()
    svc.close()
    mp.undo()


@pytest.fixture(scope="module")
def model(pkgs):
    return str(pkgs["b1"].path) + ".onnx"


def _metrics(srv):
    return Client(srv.url).get("/metrics")


def _still_answers(srv, model, rng):
    x = feeds(rng, 1)["x"]
    np.testing.assert_allclose(Client(srv.url).infer({"x": x})["y"], golden(model, x),
                               rtol=0, atol=1e-5)


def test_kernel_exception_falls_back_to_reference_and_is_counted(server, model, rng):
    x = feeds(rng, 1, RAISE)["x"]
    got = Client(server.url).infer({"x": x})["y"]
    np.testing.assert_allclose(got, golden(model, x), rtol=1e-5, atol=1e-6)
    assert _metrics(server)["fallbacks"].get("mm1", 0) >= 1


@pytest.mark.parametrize("trigger, why", [(CRASH, r"died \(exit code 13\)"),
                                          (SEGV, r"died \(signal 11\)"),
                                          (HANG, "no answer within the deadline of 3 s")])
def test_crash_or_hang_fails_that_request_clearly_and_workers_restart(server, model, rng,
                                                                      trigger, why):
    import re
    before = _metrics(server)["restarts"]
    with pytest.raises(ServeError) as e:
        Client(server.url).infer({"x": feeds(rng, 1, trigger)["x"]})
    assert e.value.status == (504 if trigger == HANG else 500)
    assert re.search(why, str(e.value)) and "attempt 2 of 2" in str(e.value), str(e.value)
    m = _metrics(server)
    assert m["restarts"] == before + 2        # the first try and the retry each cost a worker
    assert sum(w["alive"] for w in m["workers"]) == 2
    _still_answers(server, model, rng)


def test_sigkill_during_load_loses_nothing(server, model, rng):
    """Workers killed at random times while 4 clients in another process send 240 requests:
    each kill is retried on another worker, so every request succeeds and is right."""
    before = _metrics(server)["restarts"]
    p = load_from_second_process(server.url, [model], clients=4, requests=60, wait=False)
    kills, r = 0, random.Random(7)
    while p.poll() is None and kills < 4:
        time.sleep(r.uniform(0.2, 0.8))
        pids = [w["pid"] for w in _metrics(server)["workers"] if w["alive"]]
        if pids:
            try:
                os.kill(r.choice(pids), signal.SIGKILL)
                kills += 1
            except ProcessLookupError:
                pass
    doc = finish(p)
    assert doc["wrong"] == [] and doc["lost"] == 0, doc
    # a request fails only when both its tries hit a killed worker (or, on a loaded machine,
    # while both workers restart it waits past the deadline): it says so, it is never wrong
    assert set(doc["errors"]) <= CLEAR, doc
    assert doc["ok"] + sum(doc["errors"].values()) == doc["requests"] == 240
    assert _metrics(server)["restarts"] >= before + 1
    _still_answers(server, model, rng)


def test_poison_requests_among_good_ones(server, model, rng):
    """Crash triggers sent while normal traffic flows: only the poison requests fail."""
    results = []

    def poison():
        for _ in range(2):
            try:
                Client(server.url).infer({"x": feeds(np.random.default_rng(1), 1, CRASH)["x"]})
                results.append("ok?!")
            except ServeError as e:
                results.append(e.kind)
    t = threading.Thread(target=poison)
    t.start()
    doc = load_from_second_process(server.url, [model], clients=2, requests=40, seed=3)
    t.join()
    assert results == ["worker_crashed", "worker_crashed"]
    assert doc["wrong"] == [] and doc["lost"] == 0
    assert set(doc["errors"]) <= CLEAR, doc
