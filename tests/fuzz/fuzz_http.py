"""Generated bad HTTP requests for ``edgeops serve``, from a seed and a budget: malformed request
lines and headers, bad Content-Length, unknown methods, and /v1/infer bodies that are wrong by
construction (JSON, .npz and .npy: wrong names, dtypes, shapes, base64, pickled objects, bombs).
Each must get a JSON answer with a 4xx status (or 503/408 and a closed connection), never a 500,
an accepted request or a hang, and the server must stay healthy."""
from __future__ import annotations

import base64
import io
import json
import random
import socket
import time
import zipfile
from dataclasses import dataclass

import numpy as np

CAP_S = 10.0


@dataclass
class HttpCase:
    raw: bytes
    why: str


def _req(path, body=b"", ctype="application/json", method="POST", extra=b""):
    head = (f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n").encode() + extra + b"\r\n"
    return head + body


def _npz(arrays, compress=True) -> bytes:
    buf = io.BytesIO()
    (np.savez_compressed if compress else np.savez)(buf, **arrays)
    return buf.getvalue()


def generate(name: str, shape: list, seed: int, budget: int) -> list[HttpCase]:
    """``name``, ``shape``: the served package's one float32 input."""
    rng = random.Random(seed)
    good = np.zeros(shape, np.float32)

    def tensor(**kw):
        t = {"dtype": "float32", "shape": shape,
             "data": base64.b64encode(good.tobytes()).decode()}
        t.update(kw)
        return t
    wrong_shape = [d + rng.randint(1, 3) for d in shape]
    json_bodies = [
        ("not an object", [1, 2]), ("no inputs", {"x": 1}), ("inputs a list", {"inputs": []}),
        ("unknown input", {"inputs": {"nope": tensor()}}),
        ("extra input", {"inputs": {name: tensor(), "extra": tensor()}}),
        ("object dtype", {"inputs": {name: tensor(dtype="object")}}),
        ("string dtype", {"inputs": {name: tensor(dtype="U8")}}),
        ("complex dtype", {"inputs": {name: tensor(dtype="complex64")}}),
        ("unknown dtype", {"inputs": {name: tensor(dtype="float7")}}),
        ("wrong dtype", {"inputs": {name: tensor(dtype="float64",
                                                 data=base64.b64encode(good.astype(np.float64)
                                                                       .tobytes()).decode())}}),
        ("wrong shape", {"inputs": {name: tensor(shape=wrong_shape)}}),
        ("negative shape", {"inputs": {name: tensor(shape=[-1] + shape[1:])}}),
        ("shape a string", {"inputs": {name: tensor(shape="1x3")}}),
        ("huge declared shape", {"inputs": {name: tensor(shape=[2**40] * len(shape))}}),
        ("bad base64", {"inputs": {name: tensor(data="!!!notbase64")}}),
        ("short data", {"inputs": {name: tensor(data=base64.b64encode(b"\0" * 8).decode())}}),
        ("ragged list", {"inputs": {name: tensor(data=[[1, 2], [3]])}}),
        ("list of strings", {"inputs": {name: tensor(data=[["a"] * 3])}}),
        ("data an object", {"inputs": {name: tensor(data={"a": 1})}}),
        ("bad priority", {"inputs": {name: tensor()}, "priority": "urgent"}),
        ("priority 99", {"inputs": {name: tensor()}, "priority": 99}),
    ]
    zb = io.BytesIO()
    with zipfile.ZipFile(zb, "w") as z:
        z.writestr(f"{name}.npy", b"\x93NUMPY garbage")
    obj = io.BytesIO()
    np.save(obj, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    npz_bodies = [
        ("npz not a zip", b"PK\x03\x04 not really"),
        ("npz garbage member", zb.getvalue()),
        ("npz bomb", _npz({name: np.zeros((256 << 20) // 4, np.float32)})),
        ("npz many arrays", _npz({f"a{i}": np.zeros(1, np.float32) for i in range(40)})),
        ("npz wrong name", _npz({"nope": good})),
        ("npz wrong dtype", _npz({name: good.astype(np.float64)})),
        ("npz wrong shape", _npz({name: np.zeros(wrong_shape, np.float32)})),
        ("npz pickled object", _npz({name: np.array([{"a": 1}], dtype=object)}, compress=False)),
    ]
    npy_bodies = [
        ("npy pickled object", obj.getvalue()),
        ("npy garbage", b"\x93NUMPY\x01\x00" + b"x" * 50),
        ("npy empty", b""),
        ("npy wrong shape", _npy(np.zeros(wrong_shape, np.float32))),
        ("npy declared huge", _npy_header((1 << 22, 1 << 22)) + b"\0" * 16),
    ]
    raw = [
        ("garbage line", b"GARBAGE\r\n\r\n"),
        ("binary line", bytes(rng.randrange(256) for _ in range(64)) + b"\r\n\r\n"),
        ("long url", b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("HTTP/2.0", b"GET /health HTTP/2.0\r\nHost: x\r\n\r\n"),
        ("HTTP/9.9", b"GET /health HTTP/9.9\r\n\r\n"),
        ("header flood", b"GET /health HTTP/1.1\r\n" + b"X-A: b\r\n" * 200 + b"\r\n"),
        ("long header", b"GET /health HTTP/1.1\r\nX-A: " + b"b" * 70_000 + b"\r\n\r\n"),
        ("unknown method", b"FROB /v1/infer HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
        ("PUT", _req("/v1/infer", method="PUT")), ("DELETE", _req("/reload", method="DELETE")),
        ("PATCH", _req("/metrics", method="PATCH")),
        ("GET unknown path", _req("/etc/passwd", method="GET")),
        ("POST unknown path", _req("/../../x")),
        ("negative length", b"POST /v1/infer HTTP/1.1\r\nContent-Length: -5\r\nConnection: close\r\n\r\n"),
        ("length not a number", b"POST /v1/infer HTTP/1.1\r\nContent-Length: abc\r\nConnection: close\r\n\r\n"),
        ("huge length", b"POST /v1/infer HTTP/1.1\r\nContent-Length: 99999999999999\r\n\r\n{}"),
        ("chunked", b"POST /v1/infer HTTP/1.1\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n"),
        ("unknown content type", _req("/v1/infer", b"{}", ctype="text/html")),
        ("no content type", b"POST /v1/infer HTTP/1.1\r\nContent-Length: 2\r\nConnection: close\r\n\r\n[]"),
        ("deep JSON", _req("/v1/infer", b"[" * 100_000)),
        ("deep JSON data", _req("/v1/infer", b'{"inputs": {"' + name.encode() +
                                b'": {"data": ' + b"[" * 30_000 + b"]" * 30_000 + b"}}}")),
        ("invalid JSON", _req("/v1/infer", b'{"inputs": ')),
        ("invalid UTF-8", _req("/v1/infer", b'{"inputs": "\xff\xfe"}')),
        ("NaN literal", _req("/v1/infer", b'{"inputs": NaN}')),
    ]
    pool = ([(w, _req("/v1/infer", json.dumps(b).encode())) for w, b in json_bodies]
            + [(w, _req("/v1/infer", b, "application/x-npz")) for w, b in npz_bodies]
            + [(w, _req("/v1/infer", b, "application/x-npy")) for w, b in npy_bodies] + raw)
    cases = [HttpCase(r, w) for w, r in pool]               # every kind once
    while len(cases) < budget:                              # then random mutations of them
        w, r = rng.choice(pool)
        cases.append(HttpCase(r, w))
    return cases[:max(budget, len(pool))]


def _npy(a) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


def _npy_header(shape) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False,
                                               "shape": tuple(shape)})
    return buf.getvalue()


def send(addr, case: HttpCase) -> tuple[str, str]:
    """(kind, detail): clean | internal | accepted | not-json | hang."""
    t0 = time.monotonic()
    with socket.create_connection(addr, timeout=CAP_S) as s:
        try:
            s.sendall(case.raw)
        except OSError:
            pass                 # the server may close on a huge header before reading it all
        data = b""
        try:
            while chunk := s.recv(65536):
                data += chunk
                if time.monotonic() - t0 > CAP_S:
                    return "hang", "answer never ended"
        except (TimeoutError, socket.timeout):
            return "hang", data[:200].decode("latin-1")
        except ConnectionResetError:
            pass
    head, _, body = data.partition(b"\r\n\r\n")
    line = head.split(b"\r\n")[0].decode("latin-1")
    if not line:
        return "clean", "closed"           # e.g. a reset after a flood: nothing accepted
    status = int(line.split()[1]) if len(line.split()) > 1 and line.split()[1].isdigit() else 0
    try:
        doc = json.loads(body)
    except ValueError:
        return "not-json", line
    if status in (500, 502, 504):       # 501/505: protocol answers; 503: shed load
        return "internal", f"{line}: {doc}"
    if 200 <= status < 300:
        return "accepted", line
    if not (isinstance(doc, dict) and doc.get("error")):
        return "not-json", line
    return "clean", line
