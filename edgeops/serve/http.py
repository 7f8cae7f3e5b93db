"""HTTP on top of :class:`~edgeops.serve.service.Service`, with the standard library's
ThreadingHTTPServer (one thread per connection; the work itself happens in the workers).

    POST /v1/infer     JSON {"inputs": {name: {"dtype", "shape", "data": base64 | list}},
                       "priority": "high|normal|low"}, or an .npz body (inputs by name) or an
                       .npy body (one-input packages) with ?priority= or X-Priority.
                       Answers JSON {"outputs": {...}, "version", "worker", "latency_ms"}, or
                       .npz when the request says Accept: application/x-npz.
    GET  /health       200 when at least one worker is alive, else 503
    GET  /metrics      the metrics document (JSON)
    GET  /version      the package being served
    POST /reload       serve what the package path / board's ``current`` names now

Every error answer is JSON {"error": message, "kind": ...}: 4xx for the client's mistakes (400
malformed, 404 unknown path, 413 body too large, 415 content type), 503 + Retry-After when
overloaded, 500/504 when a worker failed or overran the deadline."""
from __future__ import annotations

import json
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import numpy as np

from edgeops.serve import protocol as P

DEFAULT_MAX_BODY = 64 << 20


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, service, host: str = "127.0.0.1", port: int = 0,
                 max_body: int = DEFAULT_MAX_BODY):
        self.service, self.max_body = service, max_body
        super().__init__((host, port), Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    def start_background(self) -> threading.Thread:
        t = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.2},
                             daemon=True, name="edgeops-serve-http")
        t.start()
        return t


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"       # keep-alive: a load of small requests reuses connections
    server_version = "edgeops-serve"
    disable_nagle_algorithm = True     # headers and body are two writes: no delayed-ACK stall

    def log_message(self, fmt, *args):   # access logs would swamp a board's journal
        pass

    # ---- routing ----------------------------------------------------------------------------
    def do_GET(self):
        self._guarded(self._get)

    def do_POST(self):
        self._guarded(self._post)

    def _get(self):
        path = urlsplit(self.path).path
        svc = self.server.service
        if path == "/health":
            doc = svc.health()
            return self._json(200 if doc["ok"] else 503, doc)
        if path == "/metrics":
            return self._json(200, svc.metrics_doc())
        if path == "/version":
            return self._json(200, {"version": svc.pool.version if svc.pool else None})
        raise P.ServeError(f"no such endpoint GET {path}; see /health, /metrics, /version, "
                           f"POST /v1/infer, POST /reload", status=404, kind="not_found")

    def _post(self):
        url = urlsplit(self.path)
        body = self._body()
        if url.path == "/reload":
            return self._json(200, self.server.service.reload("POST /reload", force=False))
        if url.path not in ("/v1/infer", "/infer"):
            raise P.ServeError(f"no such endpoint POST {url.path}; use /v1/infer or /reload",
                               status=404, kind="not_found")
        feeds, prio = self._request(body, parse_qs(url.query))
        t0 = time.monotonic()
        job = self.server.service.infer(feeds, prio)
        if job.error is not None:
            raise job.error
        extra = {"X-Edgeops-Version": job.version["manifest_sha256"] or "",
                 "X-Edgeops-Worker": str(job.worker)}
        if P.NPZ in (self.headers.get("Accept") or ""):
            return self._send(200, P.npz_bytes(job.outputs), P.NPZ, extra)
        self._json(200, {"outputs": {n: P.encode(v) for n, v in job.outputs.items()},
                         "version": job.version, "worker": job.worker,
                         "latency_ms": (time.monotonic() - t0) * 1e3}, extra)

    def _request(self, body: bytes, query: dict) -> tuple[dict, int]:
        ctype = (self.headers.get("Content-Type") or P.JSON).split(";")[0].strip().lower()
        prio = (query.get("priority") or [None])[0] or self.headers.get("X-Priority")
        if ctype == P.JSON:
            try:
                doc = json.loads(body)
            except (ValueError, UnicodeDecodeError) as e:
                raise P.BadRequest(f"body is not valid JSON ({e})") from None
            if not isinstance(doc, dict) or not isinstance(doc.get("inputs"), dict):
                raise P.BadRequest('JSON body must be an object {"inputs": {name: tensor}, '
                                   '"priority": ...}')
            feeds = {n: P.decode(n, t) for n, t in doc["inputs"].items()}
            prio = doc.get("priority", prio)
        elif ctype == P.NPZ:
            feeds = P.load_npz(body)
        elif ctype == P.NPY:
            specs = self.server.service.pool.pkg.manifest["inputs"]
            if len(specs) != 1:
                raise P.BadRequest(f"an .npy body carries one array; this package takes "
                                   f"{len(specs)} inputs: send an .npz or JSON")
            feeds = {specs[0]["name"]: P.load_npy(body)}
        else:
            raise P.ServeError(f"Content-Type {ctype!r} is not {P.JSON}, {P.NPZ} or {P.NPY}",
                               status=415, kind="bad_request")
        return feeds, P.priority(prio)

    # ---- plumbing ---------------------------------------------------------------------------
    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            raise P.ServeError("chunked bodies are not accepted; send Content-Length",
                               status=411, kind="bad_request")
        try:
            n = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            n = -1
        if n < 0:
            raise P.BadRequest("Content-Length is not a non-negative integer")
        if n > self.server.max_body:
            # read (and drop) a moderately large body so the client sees the answer rather than
            # a reset; past that, close: the unread rest must not be taken as a request
            if n <= 4 * self.server.max_body:
                left = n
                while left > 0:
                    left -= len(self.rfile.read(min(left, 1 << 20)) or b"x" * left)
            else:
                self.close_connection = True
            raise P.TooLarge(f"body of {n} bytes is over the limit of {self.server.max_body} "
                             f"(edgeops serve --max-body)")
        return self.rfile.read(n)

    def _guarded(self, fn):
        try:
            fn()
        except P.ServeError as e:
            extra = {}
            if e.retry_after is not None:
                extra["Retry-After"] = str(max(1, math.ceil(e.retry_after)))
            self._json(e.status, {"error": str(e), "kind": e.kind}, extra)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as e:  # noqa: BLE001  (a bug answers 500, the server lives on)
            from edgeops.errors import EdgeOpsError
            status = 400 if isinstance(e, EdgeOpsError) else 500
            self._json(status, {"error": f"{type(e).__name__}: {e}" if status == 500 else str(e),
                                "kind": "bad_request" if status == 400 else "internal"})

    def _json(self, status: int, doc, extra=None):
        self._send(status, json.dumps(doc, default=_jsonable).encode(), P.JSON, extra)

    def _send(self, status: int, body: bytes, ctype: str, extra=None):
        try:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


def _jsonable(o):
    if isinstance(o, (np.integer, np.floating)):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def serve(target, *, host: str = "127.0.0.1", port: int = 8080, max_body: int = DEFAULT_MAX_BODY,
          ready=None, **service_kw) -> None:
    """Run the service until interrupted. ``ready(server)`` is called once it listens."""
    from edgeops.serve.service import Service
    with Service(target, **service_kw) as svc:
        srv = Server(svc, host, port, max_body)
        try:
            if ready is not None:
                ready(srv)
            srv.serve_forever(poll_interval=0.2)
        finally:
            srv.server_close()
