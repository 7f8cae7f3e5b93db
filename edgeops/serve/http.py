"""HTTP on top of :class:`~edgeops.serve.service.Service`, with the standard library's
ThreadingHTTPServer (one thread per connection; the work itself happens in the workers).

    POST /v1/infer     JSON {"inputs": {name: {"dtype", "shape", "data": base64 | list}},
                       "priority": "high|normal|low"}, or an .npz body (inputs by name) or an
                       .npy body (one-input packages) with ?priority= or X-Priority.
                       Answers JSON {"outputs": {...}, "version", "worker", "latency_ms"}, or
                       .npz when the request says Accept: application/x-npz.
    GET  /health       200 when at least one worker is alive, else 503
    GET  /metrics      the metrics document (JSON; Prometheus text with ?format=prometheus or
                       Accept: text/plain)
    GET  /version      the package being served
    POST /reload       serve what the package path / board's ``current`` names now

Every error answer is JSON {"error": message, "kind": ...}, whatever the method: 4xx for the
client's mistakes (400 malformed or nested too deep, 401 no token, 404 unknown path, 405 method,
408 too slow, 413 body or decompressed size too large, 415 content type), 503 + Retry-After when
overloaded or at the connection cap, 500/504 when a worker failed or overran the deadline.

Against hostile or careless clients: each connection's reads time out (``read_timeout_s``), at
most ``max_connections`` are served at once, an .npz/.npy body is checked against what the
package's inputs take before it is decompressed, and ``/reload`` and ``/metrics`` need
``Authorization: Bearer TOKEN`` when a token is set; :func:`serve` refuses a non-loopback
address without one. SIGTERM stops accepting and lets in-flight requests finish (``drain_s``)."""
from __future__ import annotations

import hmac
import ipaddress
import json
import math
import os
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import numpy as np

from edgeops.serve import protocol as P

DEFAULT_MAX_BODY = 64 << 20


DEFAULT_READ_TIMEOUT_S = 30.0
DEFAULT_MAX_CONNECTIONS = 64
DEFAULT_DRAIN_S = 30.0
TOKEN_ENV = "EDGEOPS_SERVE_TOKEN"
_BUSY_BODY = b'{"error": "too many connections; try again", "kind": "overloaded"}'
_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
         b"Retry-After: 1\r\nConnection: close\r\nContent-Length: "
         + str(len(_BUSY_BODY)).encode() + b"\r\n\r\n" + _BUSY_BODY)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, service, host: str = "127.0.0.1", port: int = 0,
                 max_body: int = DEFAULT_MAX_BODY, *, token: str | None = None,
                 read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
                 max_connections: int = DEFAULT_MAX_CONNECTIONS):
        self.service, self.max_body = service, max_body
        self.token, self.read_timeout_s = token or None, read_timeout_s
        self._slots = threading.BoundedSemaphore(max_connections)
        self._inflight = 0
        self._inflight_lock = threading.Lock()
        super().__init__((host, port), Handler)

    # a connection past the cap is answered 503 at once rather than given a thread
    def process_request(self, request, client_address):
        if not self._slots.acquire(blocking=False):
            try:
                request.sendall(_BUSY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def inflight(self, delta: int = 0) -> int:
        with self._inflight_lock:
            self._inflight += delta
            return self._inflight

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

    def setup(self):
        self.timeout = self.server.read_timeout_s     # every read of this connection
        super().setup()

    def send_error(self, code, message=None, explain=None):
        """The standard library's own errors (bad request line, unknown method, headers too
        long, timeouts) as JSON too."""
        self.close_connection = True
        if getattr(self, "request_version", "HTTP/0.9") == "HTTP/0.9":
            self.request_version = "HTTP/1.1"    # an unparsable line: answer with a status line
        kind = {408: "timeout", 413: "too_large"}.get(code, "bad_request")
        self._json(code, {"error": message or explain or "bad request", "kind": kind})

    # ---- routing ----------------------------------------------------------------------------
    def do_GET(self):
        self._guarded(self._get)

    def do_POST(self):
        self._guarded(self._post)

    def _method_not_allowed(self):
        self._guarded(lambda: (_ for _ in ()).throw(P.ServeError(
            f"method {self.command} is not allowed; GET /health, /metrics, /version or POST "
            f"/v1/infer, /reload", status=405, kind="bad_request")))

    do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = do_TRACE = do_CONNECT = \
        _method_not_allowed

    def _authorize(self, what: str) -> None:
        token = self.server.token
        if token is None:
            return
        got = self.headers.get("Authorization") or ""
        if not hmac.compare_digest(got.encode(), f"Bearer {token}".encode()):
            raise P.ServeError(f"{what} needs Authorization: Bearer <token> (edgeops serve "
                               f"--token)", status=401, kind="unauthorized")

    def _get(self):
        url = urlsplit(self.path)
        path = url.path
        svc = self.server.service
        if path == "/health":
            doc = svc.health()
            return self._json(200 if doc["ok"] else 503, doc)
        if path == "/metrics":
            self._authorize("GET /metrics")
            fmt = (parse_qs(url.query).get("format") or [""])[0]
            if fmt == "prometheus" or "text/plain" in (self.headers.get("Accept") or ""):
                return self._send(200, prometheus(svc.metrics_doc()).encode(),
                                  "text/plain; version=0.0.4")
            return self._json(200, svc.metrics_doc())
        if path == "/version":
            return self._json(200, {"version": svc.pool.version if svc.pool else None})
        raise P.ServeError(f"no such endpoint GET {path}; see /health, /metrics, /version, "
                           f"POST /v1/infer, POST /reload", status=404, kind="not_found")

    def _post(self):
        url = urlsplit(self.path)
        body = self._body()
        if url.path == "/reload":
            self._authorize("POST /reload")
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
                if not isinstance(doc, dict) or not isinstance(doc.get("inputs"), dict):
                    raise P.BadRequest('JSON body must be an object {"inputs": {name: tensor}, '
                                       '"priority": ...}')
                feeds = {n: P.decode(n, t) for n, t in doc["inputs"].items()}
            except (ValueError, UnicodeDecodeError) as e:
                raise P.BadRequest(f"body is not valid JSON ({e})") from None
            except RecursionError:
                raise P.BadRequest("body is nested too deeply") from None
            prio = doc.get("priority", prio)
        elif ctype == P.NPZ:
            specs = self.server.service.pool.pkg.manifest["inputs"]
            feeds = P.load_npz(body, _input_bytes(specs), len(specs))
        elif ctype == P.NPY:
            specs = self.server.service.pool.pkg.manifest["inputs"]
            if len(specs) != 1:
                raise P.BadRequest(f"an .npy body carries one array; this package takes "
                                   f"{len(specs)} inputs: send an .npz or JSON")
            feeds = {specs[0]["name"]: P.load_npy(body, _input_bytes(specs))}
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
        self.server.inflight(+1)
        try:
            fn()
        except P.ServeError as e:
            extra = {}
            if e.retry_after is not None:
                extra["Retry-After"] = str(max(1, math.ceil(e.retry_after)))
            self._json(e.status, {"error": str(e), "kind": e.kind}, extra)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except TimeoutError:                # a client that stopped sending its body
            self.close_connection = True
            self._json(408, {"error": f"the body did not arrive within "
                             f"{self.server.read_timeout_s:g} s", "kind": "timeout"})
        except Exception as e:  # noqa: BLE001  (a bug answers 500, the server lives on)
            from edgeops.errors import EdgeOpsError
            status = 400 if isinstance(e, EdgeOpsError) else 500
            self._json(status, {"error": f"{type(e).__name__}: {e}" if status == 500 else str(e),
                                "kind": "bad_request" if status == 400 else "internal"})
        finally:
            self.server.inflight(-1)

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
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            self.close_connection = True


def _input_bytes(specs) -> int:
    """What one request's arrays may hold: the package's inputs (static shapes) plus room for
    the .npy headers; a dynamic leading dim counts at most the compiled batch."""
    from edgeops.dtypes import itemsize
    return sum(math.prod(d if isinstance(d, int) and d > 0 else 1 for d in s["shape"])
               * itemsize(s["dtype"]) for s in specs) + 4096 * len(specs)


def prometheus(doc: dict) -> str:
    """The metrics document in Prometheus' text exposition format (counters and gauges)."""
    lines = []

    def metric(name, kind, help_, samples):
        lines.append(f"# HELP edgeops_{name} {help_}")
        lines.append(f"# TYPE edgeops_{name} {kind}")
        for labels, v in samples:
            lab = ",".join(f'{k}="{str(x).replace(chr(34), "")}"' for k, x in labels.items())
            lines.append(f"edgeops_{name}{{{lab}}} {float(v):g}" if lab else
                         f"edgeops_{name} {float(v):g}")

    metric("uptime_seconds", "gauge", "seconds since the service started",
           [({}, doc.get("uptime_s", 0))])
    for key, help_ in (("requests", "requests by priority"), ("ok", "answered requests")):
        metric(f"{key}_total", "counter", help_,
               [({"priority": p}, n) for p, n in sorted((doc.get(key) or {}).items())])
    metric("errors_total", "counter", "failed requests by kind",
           [({"kind": k}, n) for k, n in sorted((doc.get("errors") or {}).items())])
    q = []
    for p, d in sorted((doc.get("latency") or {}).items()):
        q += [({"priority": p, "quantile": f"0.{k[1:-3]}"}, d[k] / 1e3)
              for k in ("p50_ms", "p90_ms", "p99_ms") if k in d]
    metric("latency_seconds", "gauge", "latency quantiles over the recent window", q)
    for key in ("restarts", "retries", "batches", "batched_rows", "guard_trips"):
        if isinstance(doc.get(key), (int, float)):
            metric(f"{key}_total", "counter", key.replace("_", " "), [({}, doc[key])])
    return "\n".join(lines) + "\n"


def _jsonable(o):
    if isinstance(o, (np.integer, np.floating)):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:          # a host name: it may resolve anywhere
        return False


def check_settings(host, port, max_body, token, read_timeout_s, max_connections, drain_s,
                   service_kw) -> None:
    """Refuse what would start a server that answers nothing or exposes it (EdgeOpsError)."""
    from edgeops.errors import EdgeOpsError

    def need(ok, what):
        if not ok:
            raise EdgeOpsError(f"serve: {what}")
    num = (int, float)
    need(isinstance(port, int) and 0 <= port <= 65535, f"port {port!r} is not 0..65535")
    need(isinstance(max_body, int) and max_body >= 1, f"max_body {max_body!r} must be >= 1")
    need(isinstance(read_timeout_s, num) and 0 < read_timeout_s <= 3600,
         f"read_timeout_s {read_timeout_s!r} must be in (0, 3600]")
    need(isinstance(max_connections, int) and 1 <= max_connections <= 65536,
         f"max_connections {max_connections!r} must be 1..65536")
    need(isinstance(drain_s, num) and 0 <= drain_s <= 3600, f"drain_s {drain_s!r}: 0..3600")
    w = service_kw.get("workers")
    need(w is None or isinstance(w, int) and 1 <= w <= 256, f"workers {w!r} must be 1..256")
    q = service_kw.get("max_queue", 64)
    need(isinstance(q, int) and q >= 1, f"max_queue {q!r} must be >= 1")
    d = service_kw.get("deadline_s")
    need(d is None or isinstance(d, num) and 0 < d <= 86400,
         f"deadline {d!r} must be in (0, 86400] seconds")
    if not is_loopback(host) and not token:
        raise EdgeOpsError(f"serve: refusing to listen on {host} without a token: /reload and "
                           f"/metrics (file paths, worker PIDs) would be open to the network; "
                           f"pass --token or set {TOKEN_ENV}")


def serve(target, *, host: str = "127.0.0.1", port: int = 8080, max_body: int = DEFAULT_MAX_BODY,
          ready=None, token: str | None = None, read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
          max_connections: int = DEFAULT_MAX_CONNECTIONS, drain_s: float = DEFAULT_DRAIN_S,
          **service_kw) -> None:
    """Run the service until interrupted or sent SIGTERM (then in-flight requests get up to
    ``drain_s`` to finish). ``ready(server)`` is called once it listens. ``token``: required by
    /reload and /metrics (default: $EDGEOPS_SERVE_TOKEN); needed to listen beyond loopback."""
    from edgeops.serve.service import Service
    token = token or os.environ.get(TOKEN_ENV) or None
    check_settings(host, port, max_body, token, read_timeout_s, max_connections, drain_s,
                   service_kw)
    with Service(target, **service_kw) as svc:
        srv = Server(svc, host, port, max_body, token=token, read_timeout_s=read_timeout_s,
                     max_connections=max_connections)
        old = None
        if threading.current_thread() is threading.main_thread():
            # shutdown() waits for serve_forever, which runs on this thread: ask from another
            old = signal.signal(signal.SIGTERM, lambda *_: threading.Thread(
                target=srv.shutdown, daemon=True).start())
        try:
            if ready is not None:
                ready(srv)
            srv.serve_forever(poll_interval=0.2)
            end = time.monotonic() + drain_s      # stopped accepting: let in-flight finish
            while srv.inflight() > 0 and time.monotonic() < end:
                time.sleep(0.05)
        finally:
            srv.server_close()
            if old is not None:
                signal.signal(signal.SIGTERM, old)
