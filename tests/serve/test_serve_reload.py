"""Hot reload of a served board directory: the board agent switches ``current`` (what
``edgeops deploy`` does on the board) while 4 clients in another process keep sending; no
request fails and answers move to the new version for good. A package that fails its smoke
test is not switched to."""
import shutil
import time

import numpy as np
import pytest

from _serve_harness import edit_manifest, load_from_second_process
from edgeops.deploy import board
from edgeops.serve.client import Client
from edgeops.serve.http import Server
from edgeops.serve.service import Service


def _install(root, pkg_dir, name):
    """Upload + activate, as edgeops deploy drives the board agent."""
    shutil.copytree(pkg_dir, root / f"staging-{name}")
    board.activate(root, f"staging-{name}")


@pytest.fixture(scope="module")
def served(pkgs, tmp_path_factory):
    root = tmp_path_factory.mktemp("board")
    _install(root, pkgs["b4"].path, "a")
    svc = Service(root, workers=2).start()
    srv = Server(svc)
    srv.start_background()
    yield root, srv
    srv.shutdown()
    srv.server_close()
    svc.close()


def _version(srv):
    return Client(srv.url).get("/version")["version"]["manifest_sha256"]


def test_deploy_under_load_switches_with_no_failed_request(served, pkgs):
    root, srv = served
    v1, v2 = (pkgs[k].manifest["manifest_sha256"] for k in ("b4", "v2"))
    assert _version(srv) == v1
    models = [f"{v1}={pkgs['b4'].path}.onnx", f"{v2}={pkgs['v2'].path}.onnx"]
    p = load_from_second_process(srv.url, models, clients=4, requests=80, rows=2, wait=False,
                                 until_version=v2)
    time.sleep(1.0)
    _install(root, pkgs["v2"].path, "b")
    from _serve_harness import finish
    doc = finish(p)
    # the messages first: pytest shortens a long dict, and a rare failure needs its reason
    assert doc["errors"] == {}, (doc["errors"], doc["error_messages"])
    assert doc["wrong"] == [] and doc["lost"] == 0, doc
    assert doc["version_regressions"] == 0, doc
    assert _version(srv) == v2
    assert set(doc["versions"]) == {v1, v2}, doc
    m = Client(srv.url).get("/metrics")
    last = m["reloads"][-1]
    assert last["switched"] and last["version"]["manifest_sha256"] == v2, [(r["reason"], r["switched"], r["version"]["manifest_sha256"][:8]) for r in m["reloads"]]
    assert [w["alive"] for w in m["workers"]] == [True, True]


def test_package_failing_its_smoke_test_is_not_switched_to(served, pkgs, tmp_path):
    root, srv = served
    before = _version(srv)
    bad = tmp_path / "bad"
    shutil.copytree(pkgs["b4"].path, bad)
    ref = dict(np.load(bad / "reference.npz"))
    ref["output_0"] = ref["output_0"] + 0.5          # reference outputs no kernel reproduces
    np.savez_compressed(bad / "reference.npz", **ref)
    edit_manifest(bad, lambda d: d.update(created_utc="2026-11-30T00:00:00Z"))
    _install(root, bad, "bad")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        last = Client(srv.url).get("/metrics")["reloads"][-1]
        if not last["switched"]:
            break
        time.sleep(0.2)
    assert not last["switched"] and "smoke test" in last["error"], last
    assert _version(srv) == before
    x = np.random.default_rng(0).standard_normal((1, 16)).astype(np.float32)
    assert Client(srv.url).infer({"x": x})["y"].shape == (1, 8)


def test_post_reload_and_rollback(served, pkgs):
    root, srv = served
    board.rollback(root)            # current -> the package before the bad one (v2)
    c = Client(srv.url)
    doc = c.reload()                 # explicit reload (the watcher may already have done it)
    assert doc["version"]["manifest_sha256"] == pkgs["v2"].manifest["manifest_sha256"]
    assert _version(srv) == pkgs["v2"].manifest["manifest_sha256"]
