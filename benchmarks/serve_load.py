"""edgeops serve under load: throughput and p99 latency at 1, 4 and 16 concurrent clients
(a second process, every answer checked against ONNX Runtime on the original model), then the
workers' RSS slope over many requests. Peer: ONNX Runtime in-process on the same model (no
HTTP, no isolation), so the ratio is the cost of the service.

    python benchmarks/serve_load.py [--model sample|tiny] [--workers 2] [--requests 400]
                                    [--rss-requests 10000] [--quick] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def build(kind: str, d: Path):
    """(package dir, original model path)."""
    import onnx
    from edgeops import package
    from edgeops.lower import lower
    if kind == "sample":
        from edgeops.sample import build_sample_model
        m = build_sample_model()
    else:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "serve"))
        from _serve_harness import tiny_model
        m = tiny_model(4, 0)
    onnx.save(m, str(d / "model.onnx"))
    package.write(lower(m, "host", mode="all", plan=False), d / "pkg")
    return d / "pkg", d / "model.onnx"


def ort_peer(model: Path, runs: int) -> float:
    from edgeops.serve.loadgen import golden_session
    sess, specs = golden_session(str(model))
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal([1, *s]).astype(np.float32) for n, s in specs}
    sess.run(None, feeds)
    t0 = time.perf_counter()
    for _ in range(runs):
        sess.run(None, feeds)
    return runs / (time.perf_counter() - t0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tiny", choices=("tiny", "sample"))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--requests", type=int, default=400, help="per client count")
    ap.add_argument("--rss-requests", type=int, default=10_000)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if a.quick:
        a.requests, a.rss_requests = 48, 400
    from edgeops.serve.client import Client
    from edgeops.serve.http import Server
    from edgeops.serve.service import Service
    with tempfile.TemporaryDirectory() as tmp:
        pkg, model = build(a.model, Path(tmp))
        svc = Service(pkg, workers=a.workers, max_queue=1024, watch=False).start()
        srv = Server(svc)
        srv.start_background()
        rows = []
        try:
            for clients in (1, 4, 16):
                per = max(1, a.requests // clients)
                r = subprocess.run([sys.executable, "-m", "edgeops.serve.loadgen", srv.url,
                                    "--model", str(model), "--clients", str(clients),
                                    "--requests", str(per), "--json"], capture_output=True,
                                   text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
                doc = json.loads(r.stdout)
                rows.append({k: doc[k] for k in ("clients", "requests", "ok", "errors", "lost",
                                                 "throughput_rps", "latency_ms")}
                            | {"wrong": len(doc["wrong"])})
                if not a.json:
                    print(f"{clients:3d} clients: {doc['throughput_rps']:7.0f} req/s  p50 "
                          f"{doc['latency_ms']['p50']:6.2f} ms  p99 {doc['latency_ms']['p99']:6.2f}"
                          f" ms  ok {doc['ok']}/{doc['requests']} wrong {len(doc['wrong'])} "
                          f"errors {doc['errors']}", file=sys.stderr)
            c = Client(srv.url)
            spec = svc.pool.pkg.manifest["inputs"][0]
            x = {spec["name"]: np.random.default_rng(1).standard_normal(
                [1, *spec["shape"][1:]]).astype(np.float32)}
            samples, step = [], max(1, a.rss_requests // 50)
            for i in range(a.rss_requests):
                c.infer(x)
                if i % step == 0:
                    samples.append((i, sum(w["rss_bytes"] for w in c.get("/metrics")["workers"])))
            s = np.array(samples, float)
            tail = s[len(s) // 5:]              # after the allocator's warm-up
            slope = float(np.polyfit(tail[:, 0], tail[:, 1], 1)[0])
            peer = ort_peer(model, 2000 if not a.quick else 200)
        finally:
            srv.shutdown()
            svc.close()
    doc = {"model": a.model, "workers": a.workers, "load": rows,
           "ort_in_process_rps": peer,
           "rss": {"requests": a.rss_requests, "slope_bytes_per_request": slope,
                   "start_bytes": samples[0][1], "end_bytes": samples[-1][1]}}
    if a.json:
        json.dump(doc, sys.stdout)
        print()
    else:
        print(f"ONNX Runtime in-process (1 thread, batch of the package): {peer:.0f} runs/s; "
              f"service/ORT at 1 client: {rows[0]['throughput_rps'] / peer:.2f}", file=sys.stderr)
        print(f"RSS over {a.rss_requests} requests: slope {slope:.1f} bytes/request "
              f"({samples[0][1] / 2**20:.1f} -> {samples[-1][1] / 2**20:.1f} MiB, "
              f"{a.workers} workers)", file=sys.stderr)
    return 0 if all(r["wrong"] == 0 and r["lost"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
