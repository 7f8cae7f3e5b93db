"""Calling a running ``edgeops serve`` from Python::

    from edgeops.serve.client import infer
    outputs = infer("http://127.0.0.1:8080", {"image": x}, priority="high")

:class:`Client` keeps one HTTP/1.1 connection open (what a load generator wants); :func:`infer`
is one call. Arrays travel as an .npz body both ways; a failure raises
:class:`~edgeops.serve.protocol.ServeError` with the server's message, HTTP status and, for
503, the Retry-After it advised."""
from __future__ import annotations

import http.client
import json
from urllib.parse import urlsplit

import numpy as np

from edgeops.serve import protocol as P


class Client:
    def __init__(self, url: str, timeout: float = 120.0):
        u = urlsplit(url if "://" in url else f"http://{url}")
        if u.scheme != "http" or not u.hostname:
            raise P.ServeError(f"{url!r} is not an http://HOST:PORT address", kind="bad_url",
                               status=0)
        self.host, self.port, self.timeout = u.hostname, u.port or 80, timeout
        self._conn: http.client.HTTPConnection | None = None
        self.last_version: str | None = None
        self.last_worker: str | None = None

    def _request(self, method: str, path: str, body: bytes | None = None, headers=None):
        while True:
            reused = self._conn is not None
            if self._conn is None:
                self._conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                self._conn.request(method, path, body=body, headers=headers or {})
                r = self._conn.getresponse()
                data = r.read()
            except (ConnectionError, http.client.HTTPException) as e:
                self.close()
                if reused:     # the server closed an idle kept-alive connection: once more, fresh
                    continue
                raise P.ServeError(f"{method} {path} on {self.host}:{self.port} failed: {e}",
                                   kind="connection", status=0) from None
            except OSError as e:
                self.close()
                raise P.ServeError(f"cannot reach edgeops serve at {self.host}:{self.port}: "
                                   f"{e}", kind="connection", status=0) from None
            if (r.getheader("Connection") or "").lower() == "close":
                self.close()
            return r, data

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def infer(self, inputs: dict, priority="normal") -> dict[str, np.ndarray]:
        body = P.npz_bytes({k: np.asarray(v) for k, v in inputs.items()})
        r, data = self._request("POST", "/v1/infer", body, {
            "Content-Type": P.NPZ, "Accept": P.NPZ, "X-Priority": str(priority)})
        if r.status != 200:
            raise _error(r, data)
        self.last_version = r.getheader("X-Edgeops-Version")
        self.last_worker = r.getheader("X-Edgeops-Worker")
        return P.load_npz(data)

    def get(self, path: str) -> dict:
        r, data = self._request("GET", path)
        doc = json.loads(data)
        if r.status != 200 and path != "/health":
            raise _error(r, data)
        return doc

    def reload(self) -> dict:
        r, data = self._request("POST", "/reload", b"")
        if r.status != 200:
            raise _error(r, data)
        return json.loads(data)


def _error(r, data) -> P.ServeError:
    try:
        doc = json.loads(data)
        msg, kind = doc.get("error", ""), doc.get("kind", "error")
    except ValueError:
        msg, kind = data[:200].decode(errors="replace"), "error"
    ra = r.getheader("Retry-After")
    return P.ServeError(f"HTTP {r.status}: {msg}", kind=kind, status=r.status,
                        retry_after=float(ra) if ra else None)


def infer(url: str, inputs: dict, priority="normal", timeout: float = 120.0) -> dict:
    """Outputs by name for ``inputs`` (name -> array) from the service at ``url``."""
    with Client(url, timeout) as c:
        return c.infer(inputs, priority)


def metrics(url: str) -> dict:
    with Client(url) as c:
        return c.get("/metrics")
