"""edgeops serve against hostile or careless clients: decompression bombs and arrays declared
huge (refused before decompressing; the HTTP process's peak RSS stays under 2x idle), too many
arrays, deep JSON nesting, every method and malformed request lines answered in JSON, slow
clients timed out, a connection cap, the token on /reload and /metrics, Prometheus text, flags
that would start a server answering nothing, and SIGTERM draining an in-flight request."""
import http.client
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
import zipfile

import numpy as np
import pytest

from _serve_harness import FAULTS, SLOW, feeds
from edgeops.errors import EdgeOpsError
from edgeops.serve.http import Server, serve
from edgeops.serve.service import Service

TOKEN = "s3cret-token"


@pytest.fixture(scope="module")
def server(pkgs):
    svc = Service(pkgs["b1"].path, workers=1, max_queue=16).start()
    srv = Server(svc, max_body=8 << 20, token=TOKEN, read_timeout_s=1.0, max_connections=8)
    srv.start_background()
    yield srv
    srv.shutdown()
    srv.server_close()
    svc.close()


def _request(srv, method, path, body=None, headers=None):
    c = http.client.HTTPConnection(*srv.server_address[:2], timeout=30)
    c.request(method, path, body=body, headers=headers or {})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, r.getheader("Content-Type"), data


def _bomb(n_bytes: int, name="x") -> bytes:
    """An .npz whose one float32 array of zeros is ``n_bytes`` decompressed (a few hundred KB
    compressed)."""
    buf = io.BytesIO()
    np.savez_compressed(buf, **{name: np.zeros(n_bytes // 4, np.float32)})
    return buf.getvalue()


def _declares(shape) -> bytes:
    """An .npy whose header declares ``shape`` float32 but which carries 16 bytes of data."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False,
                                               "shape": tuple(shape)})
    return buf.getvalue() + b"\0" * 16


def test_decompression_bomb_and_declared_sizes_are_refused_first(server):
    body = _bomb(512 << 20)
    assert len(body) < 1 << 20
    st, ctype, data = _request(server, "POST", "/v1/infer", body,
                               {"Content-Type": "application/x-npz"})
    assert st == 413 and ctype == "application/json" and "decompress" in json.loads(data)["error"]
    st, _, data = _request(server, "POST", "/v1/infer", _declares((1 << 20, 1 << 20)),
                           {"Content-Type": "application/x-npy"})
    assert st == 413, data
    zbuf = io.BytesIO()                      # an .npz member whose header lies about its size
    with zipfile.ZipFile(zbuf, "w") as z:
        z.writestr("x.npy", _declares((1 << 16, 1 << 16)))
    st, _, data = _request(server, "POST", "/v1/infer", zbuf.getvalue(),
                           {"Content-Type": "application/x-npz"})
    assert st == 413, data
    many = io.BytesIO()
    np.savez(many, **{f"a{i}": np.zeros(1, np.float32) for i in range(50)})
    st, _, data = _request(server, "POST", "/v1/infer", many.getvalue(),
                           {"Content-Type": "application/x-npz"})
    assert st == 400 and "50 arrays" in json.loads(data)["error"]
    # a well-formed one still works
    good = io.BytesIO()
    np.savez_compressed(good, x=feeds(np.random.default_rng(3), 1)["x"])
    st, _, data = _request(server, "POST", "/v1/infer", good.getvalue(),
                           {"Content-Type": "application/x-npz"})
    assert st == 200, data


def test_json_errors_for_nesting_methods_and_malformed_requests(server):
    st, ctype, data = _request(server, "POST", "/v1/infer", b"[" * 200_000,
                               {"Content-Type": "application/json"})
    assert st == 400 and ctype == "application/json" and "nested" in json.loads(data)["error"]
    deep = '{"inputs": {"x": {"dtype": "float32", "data": ' + "[" * 50_000 + "]" * 50_000 + "}}}"
    st, _, data = _request(server, "POST", "/v1/infer", deep.encode(),
                           {"Content-Type": "application/json"})
    assert st == 400, data
    for method in ("PUT", "DELETE", "PATCH", "OPTIONS"):
        st, ctype, data = _request(server, method, "/v1/infer", b"")
        assert st == 405 and ctype == "application/json" and json.loads(data)["error"]
    st, ctype, data = _request(server, "FROB", "/v1/infer")
    assert st == 501 and ctype == "application/json"
    with socket.create_connection(server.server_address[:2], timeout=10) as s:
        s.sendall(b"GARBAGE\r\n\r\n")
        head, _, body = _recv_all(s).partition(b"\r\n\r\n")
    assert b" 400 " in head.split(b"\r\n")[0] and json.loads(body)["kind"] == "bad_request"


def _recv_all(s) -> bytes:
    out = b""
    while chunk := s.recv(65536):
        out += chunk
    return out


def test_slow_clients_are_timed_out_and_connections_capped(server):
    held = []
    for i in range(6):          # half-sent requests: headers only, or part of a body
        s = socket.create_connection(server.server_address[:2], timeout=10)
        s.sendall(b"POST /v1/infer HTTP/1.1\r\nContent-Length: 100\r\n\r\nabc" if i % 2 else
                  b"GET /health HTTP/1.1\r\nHost: x\r\n")
        held.append(s)
    # the cap (8): two more are served, the next is answered 503 at once
    extra = [socket.create_connection(server.server_address[:2], timeout=10) for _ in range(2)]
    time.sleep(0.3)
    with socket.create_connection(server.server_address[:2], timeout=10) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert b" 503 " in _recv_all(s).split(b"\r\n")[0]
    time.sleep(2.5)             # past the 1 s read timeout: the server closed every one
    still, answers = 0, []
    for s in held + extra:
        s.settimeout(2)
        try:
            answers.append(_recv_all(s).split(b"\r\n")[0])
        except (TimeoutError, socket.timeout):
            still += 1
        s.close()
    assert still == 0
    assert answers[1::2][:3] == [b"HTTP/1.1 408 Request Timeout"] * 3   # the half-sent bodies
    st, _, _ = _request(server, "GET", "/health")
    assert st == 200


def test_token_guards_reload_and_metrics_and_prometheus_text(server):
    assert _request(server, "GET", "/metrics")[0] == 401
    assert _request(server, "POST", "/reload", b"")[0] == 401
    assert _request(server, "GET", "/metrics", headers={"Authorization": "Bearer nope"})[0] == 401
    auth = {"Authorization": f"Bearer {TOKEN}"}
    st, ctype, data = _request(server, "GET", "/metrics", headers=auth)
    assert st == 200 and ctype == "application/json" and "requests" in json.loads(data)
    st, ctype, data = _request(server, "GET", "/metrics?format=prometheus", headers=auth)
    assert st == 200 and ctype.startswith("text/plain")
    samples = [ln for ln in data.decode().splitlines() if ln and not ln.startswith("#")]
    assert any(ln.startswith("edgeops_uptime_seconds ") for ln in samples)
    for ln in samples:          # name{labels} value, the value a number
        float(ln.rsplit(" ", 1)[1])
    assert _request(server, "GET", "/health")[0] == 200     # health stays open


@pytest.mark.parametrize("kw,words", [
    ({"host": "0.0.0.0"}, "without a token"),
    ({"workers": -1}, "workers"), ({"max_queue": 0}, "max_queue"),
    ({"deadline_s": 0}, "deadline"), ({"max_body": -1}, "max_body"),
    ({"port": 70000}, "port"), ({"read_timeout_s": 0}, "read_timeout_s"),
])
def test_settings_that_would_answer_nothing_are_refused(pkgs, kw, words):
    with pytest.raises(EdgeOpsError, match=words):
        serve(pkgs["b1"].path, **{"port": 0, **kw})


def test_sigterm_drains_an_in_flight_request(pkgs, tmp_path):
    env = dict(os.environ, EDGEOPS_SERVE_TEST_HOOK=str(FAULTS))
    p = subprocess.Popen([sys.executable, "-m", "edgeops", "serve", str(pkgs["b1"].path),
                          "--port", "0", "--workers", "1", "--no-watch"],
                         stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = p.stderr.readline()
        url = line.rsplit(" on ", 1)[1].split(" ")[0]
        host, port = url.removeprefix("http://").split(":")
        x = feeds(np.random.default_rng(4), 1, SLOW)["x"]    # the worker takes 1.5 s on it
        c = http.client.HTTPConnection(host, int(port), timeout=60)
        c.request("POST", "/v1/infer", body=json.dumps({"inputs": {"x": {
            "dtype": "float32", "shape": list(x.shape), "data": x.tolist()}}}),
            headers={"Content-Type": "application/json"})
        time.sleep(0.5)
        p.send_signal(signal.SIGTERM)
        r = c.getresponse()
        assert r.status == 200, r.read()
        assert p.wait(60) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
