"""``edgeops serve PKG_OR_BOARD_DIR [--host 127.0.0.1] [--port N] [--workers K] ...``: run a
package as a long-lived HTTP service (see docs/serve.md). Given a board directory (``edgeops
deploy PKG --to local:DIR``) it serves ``DIR/current`` and hot-reloads when a deploy switches
it. Flags override the package manifest's ``runtime`` settings. :func:`serve` is the same in
Python (:func:`edgeops.serve.http.serve`)."""
from __future__ import annotations

import sys

from edgeops.cli.common import float_in, int_in, port, threads

from edgeops.serve.http import (DEFAULT_DRAIN_S, DEFAULT_MAX_BODY, DEFAULT_MAX_CONNECTIONS,
                                DEFAULT_READ_TIMEOUT_S, serve)


def add(sub):
    p = sub.add_parser("serve", help="serve a package (or a board directory's current one) "
                                     "over HTTP with isolated worker processes")
    p.add_argument("target", metavar="PKG_OR_BOARD_DIR")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default loopback)")
    p.add_argument("--port", type=port, default=8080, help="0 picks a free port")
    p.add_argument("--workers", type=int_in(1, 256, "a worker count"), help="executor processes (default: min(2, cores))")
    p.add_argument("--threads", type=threads, help="ONNX Runtime threads per worker")
    p.add_argument("--deadline", type=float_in(1e-3, 86400, "a deadline in seconds"), metavar="S", help="per-request deadline of one "
                   "attempt; a worker past it is killed and restarted")
    p.add_argument("--retries", type=int_in(0, 16, "a retry count"), help="retries on another worker after a crash or "
                   "deadline (default 1; 0: fail the request at once)")
    p.add_argument("--max-queue", type=int_in(1, 1_000_000, "a queue length"), default=64, help="queued requests before 503")
    p.add_argument("--max-body", type=int_in(1, 1 << 40, "a body size in bytes"), default=DEFAULT_MAX_BODY, help="bytes; larger -> 413")
    p.add_argument("--max-batch", type=int_in(0, 1_000_000, "a batch size"), help="dynamic batching: rows per batch (0: off; "
                   "default: the compiled batch)")
    p.add_argument("--batch-delay-ms", type=float_in(0, 60_000, "a delay in ms"), help="wait this long for a batch to fill")
    p.add_argument("--output-guard", metavar="fp32|PKG|off", help="NaN/Inf outputs switch the "
                   "worker to fp32 reference kernels or to package PKG")
    p.add_argument("--rule", action="append", metavar="COND=SIZE:cpu", help="target condition, "
                   "e.g. device_memory_below=512M:cpu (repeatable; replaces the manifest's)")
    p.add_argument("--no-watch", action="store_true", help="do not reload when the package changes")
    p.add_argument("--token", help="required as Authorization: Bearer TOKEN by /reload and "
                   "/metrics, and to listen beyond loopback (default: $EDGEOPS_SERVE_TOKEN)")
    p.add_argument("--read-timeout", type=float_in(0.01, 3600, "a read timeout in seconds"),
                   default=DEFAULT_READ_TIMEOUT_S, metavar="S",
                   help="close a connection whose request does not arrive within S seconds")
    p.add_argument("--max-connections", type=int_in(1, 65536, "a connection count"),
                   default=DEFAULT_MAX_CONNECTIONS, help="connections served at once; "
                   "more are answered 503")
    p.add_argument("--drain", type=float_in(0, 3600, "a drain time in seconds"),
                   default=DEFAULT_DRAIN_S, metavar="S",
                   help="on SIGTERM, let in-flight requests finish for up to S seconds")
    p.set_defaults(func=run)


def run(args) -> int:
    def ready(srv):
        print(f"edgeops serve: {srv.service.pool.version['path']} on {srv.url} "
              f"({srv.service.workers} workers)", file=sys.stderr, flush=True)
    serve(args.target, host=args.host, port=args.port, max_body=args.max_body, ready=ready,
          workers=args.workers, max_queue=args.max_queue, watch=not args.no_watch,
          threads=args.threads, deadline_s=args.deadline, retries=args.retries,
          max_batch=args.max_batch, batch_delay_ms=args.batch_delay_ms,
          guard=args.output_guard, rules=args.rule, token=args.token,
          read_timeout_s=args.read_timeout, max_connections=args.max_connections,
          drain_s=args.drain)
    return 0
