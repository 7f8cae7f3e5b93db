"""``edgeops serve``: the board-side runtime. A scheduler process (HTTP, priority queue, hot
reload, metrics) and executor processes, started with spawn, that run the package in ONNX
Runtime with edgeops' ops. See docs/serve.md.

    edgeops.serve.service.Service   the runtime, driven from Python or through HTTP
    edgeops.serve.http.serve        HTTP on top of it (ThreadingHTTPServer)
    edgeops.serve.client.infer      call a running service
"""
from edgeops.serve.protocol import BadRequest, Overloaded, ServeError

__all__ = ["BadRequest", "Overloaded", "ServeError"]
