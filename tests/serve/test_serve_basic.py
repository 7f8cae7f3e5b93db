"""edgeops serve over HTTP on a batched package: load from a second process at 1, 4 and 16
clients (every answer checked against ONNX Runtime on the original model), the request formats,
bad requests (4xx, no worker harmed), metrics, the infer CLI and worker RSS over many requests."""
import base64
import http.client
import json

import numpy as np
import pytest

from _serve_harness import feeds, golden, load_from_second_process
from edgeops.cli import main as cli
from edgeops.serve.client import Client, infer
from edgeops.serve.http import Server
from edgeops.serve.service import Service


@pytest.fixture(scope="module")
def server(pkgs):
    svc = Service(pkgs["b4"].path, workers=2, max_queue=256).start()
    srv = Server(svc, max_body=1 << 20)
    srv.start_background()
    yield srv
    srv.shutdown()
    srv.server_close()
    svc.close()


def _pids(url):
    return sorted(w["pid"] for w in Client(url).get("/metrics")["workers"])


@pytest.mark.parametrize("clients", [1, 4, 16])
def test_load_from_a_second_process(server, pkgs, clients):
    doc = load_from_second_process(server.url, [str(pkgs["b4"].path) + ".onnx"], clients,
                                   requests=160 // clients, rows=3, seed=clients)
    assert doc["wrong"] == [] and doc["errors"] == {} and doc["lost"] == 0, doc
    assert doc["ok"] == clients * (160 // clients)


def test_requests_were_batched_and_padded(server):
    m = Client(server.url).get("/metrics")
    assert m["batching"] == {"compiled_batch": 4, "max_rows": 4}
    # every request went through a batch of the compiled size; under 16 clients several shared one
    assert m["batches"] >= 1 and m["batched_rows"] > m["batches"]


def test_json_base64_list_and_npy_bodies(server, pkgs, rng):
    x = feeds(rng, 2)["x"]
    want = golden(str(pkgs["b4"].path) + ".onnx", x)
    c = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=60)
    for tensor in ({"dtype": "float32", "shape": [2, 16],
                    "data": base64.b64encode(x.tobytes()).decode()},
                   {"dtype": "float32", "data": x.tolist()}):
        c.request("POST", "/v1/infer", json.dumps({"inputs": {"x": tensor}, "priority": "high"}),
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        doc = json.loads(r.read())
        assert r.status == 200, doc
        y = doc["outputs"]["y"]
        got = np.frombuffer(base64.b64decode(y["data"]), y["dtype"]).reshape(y["shape"])
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
        assert doc["version"]["manifest_sha256"] == pkgs["b4"].manifest["manifest_sha256"]
    import io
    buf = io.BytesIO()
    np.save(buf, x)
    c.request("POST", "/v1/infer?priority=low", buf.getvalue(),
              {"Content-Type": "application/x-npy", "Accept": "application/x-npz"})
    r = c.getresponse()
    with np.load(io.BytesIO(r.read())) as z:
        np.testing.assert_allclose(z["y"], want, rtol=0, atol=1e-5)
    np.testing.assert_allclose(infer(server.url, {"x": x}, priority="low")["y"], want,
                               rtol=0, atol=1e-5)


def _raw(server, method, path, body=b"", ctype="application/json", headers=None):
    c = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=60)
    c.request(method, path, body, {"Content-Type": ctype, **(headers or {})})
    r = c.getresponse()
    return r.status, json.loads(r.read())


def _json_x(a, dtype="float32", name="x"):
    return json.dumps({"inputs": {name: {"dtype": dtype, "shape": list(a.shape),
                                         "data": base64.b64encode(a.tobytes()).decode()}}})


@pytest.mark.parametrize("case, status, match", [
    ("wrong name", 400, r"do not match the package's \['x'\]; unknown: \['image'\]"),
    ("wrong shape", 400, r"has shape \[2, 15\]; the package takes \[b, 16\] with b in 1..4"),
    ("too many rows", 400, r"b in 1..4"),
    ("wrong dtype", 400, "is float64, the package takes float32"),
    ("short data", 400, "bytes of data for shape"),
    ("malformed json", 400, "not valid JSON"),
    ("not an object", 400, "must be an object"),
    ("object dtype", 400, "not a numeric numpy dtype"),
    ("bad priority", 400, "priority 'urgent'"),
    ("oversized", 413, "over the limit of 1048576"),
    ("bad npz", 400, "not a readable .npz"),
    ("content type", 415, "is not application/json"),
    ("unknown path", 404, "no such endpoint"),
])
def test_bad_requests_get_4xx_and_no_worker_dies(server, rng, case, status, match):
    import re
    before = _pids(server.url)
    x = rng.standard_normal((2, 16)).astype(np.float32)
    req = {
        "wrong name": lambda: _raw(server, "POST", "/v1/infer", _json_x(x, name="image")),
        "wrong shape": lambda: _raw(server, "POST", "/v1/infer", _json_x(x[:, :15].copy())),
        "too many rows": lambda: _raw(server, "POST", "/v1/infer",
                                      _json_x(np.zeros((5, 16), np.float32))),
        "wrong dtype": lambda: _raw(server, "POST", "/v1/infer", _json_x(x.astype(np.float64),
                                                                         "float64")),
        "short data": lambda: _raw(server, "POST", "/v1/infer", json.dumps(
            {"inputs": {"x": {"dtype": "float32", "shape": [2, 16], "data": "AAAA"}}})),
        "malformed json": lambda: _raw(server, "POST", "/v1/infer", b'{"inputs": {"x": '),
        "not an object": lambda: _raw(server, "POST", "/v1/infer", b"[1, 2]"),
        "object dtype": lambda: _raw(server, "POST", "/v1/infer", json.dumps(
            {"inputs": {"x": {"dtype": "object", "data": [1]}}})),
        "bad priority": lambda: _raw(server, "POST", "/v1/infer?priority=urgent", _json_x(x)),
        "oversized": lambda: _raw(server, "POST", "/v1/infer", b" " * (2 << 20)),
        "bad npz": lambda: _raw(server, "POST", "/v1/infer", b"PK\x03\x04garbage",
                                "application/x-npz"),
        "content type": lambda: _raw(server, "POST", "/v1/infer", b"x", "text/plain"),
        "unknown path": lambda: _raw(server, "GET", "/v2/everything"),
    }[case]
    got_status, doc = req()
    assert got_status == status and re.search(match, doc["error"]), doc
    assert _pids(server.url) == before
    np.testing.assert_allclose(Client(server.url).infer({"x": x})["y"].shape, (2, 8))


def test_metrics_health_version(server, pkgs):
    c = Client(server.url)
    h = c.get("/health")
    assert h["ok"] and h["workers_alive"] == 2
    assert c.get("/version")["version"]["manifest_sha256"] == pkgs["b4"].manifest["manifest_sha256"]
    m = c.get("/metrics")
    assert m["requests"]["normal"] >= 160 * 3 and m["errors"].get("bad_request", 0) == 0
    lat = m["latency"]["normal"]
    assert lat["count"] > 0 and 0 < lat["p50_ms"] <= lat["p90_ms"] <= lat["p99_ms"]
    assert all(w["alive"] and w["rss_bytes"] > 10 << 20 for w in m["workers"])
    assert m["restarts"] == 0 and m["queue"]["length"] == 0 and m["fallbacks"] == {}


def test_infer_cli(server, pkgs, tmp_path, rng, capsys):
    x = feeds(rng, 3)["x"]
    np.savez(tmp_path / "in.npz", x=x)
    assert cli(["infer", "--url", server.url, "--inputs", str(tmp_path / "in.npz"), "--json",
                "--out", str(tmp_path / "out.npz")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["version"] == pkgs["b4"].manifest["manifest_sha256"]
    with np.load(tmp_path / "out.npz") as z:
        np.testing.assert_allclose(z["y"], golden(str(pkgs["b4"].path) + ".onnx", x), atol=1e-5)
    assert cli(["infer", "--url", server.url, "--inputs", str(tmp_path / "in.npz"),
                "--out", str(tmp_path / "out.npz")]) == 2            # no overwrite
    assert "already exists" in capsys.readouterr().err
    np.savez(tmp_path / "bad.npz", image=x)
    assert cli(["infer", "--url", server.url, "--inputs", str(tmp_path / "bad.npz")]) == 2
    assert "HTTP 400" in capsys.readouterr().err


@pytest.mark.parametrize("n", [
    pytest.param(10_000, marks=pytest.mark.full), 800])
def test_worker_rss_does_not_grow(server, rng, n):
    """RSS of the workers sampled every n/20 requests after a warm-up; the least-squares slope
    over n requests must stay under 4 MiB in total (a leak of one 1 KiB buffer per request
    would be 10 MiB over the full 10,000)."""
    c = Client(server.url)
    x = feeds(rng, 4)["x"]
    for _ in range(100):
        c.infer({"x": x})
    samples = []
    step = n // 20
    for i in range(n):
        c.infer({"x": x})
        if i % step == 0:
            samples.append([i, sum(w["rss_bytes"] for w in c.get("/metrics")["workers"])])
    a = np.array(samples, float)
    slope = np.polyfit(a[:, 0], a[:, 1], 1)[0]
    print(f"RSS slope over {n} requests: {slope:.1f} bytes/request "
          f"({slope * n / 2**20:.2f} MiB total)")
    assert slope * n < 4 << 20, samples
