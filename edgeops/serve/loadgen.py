"""A load generator for ``edgeops serve``, meant to run as a second process::

    python -m edgeops.serve.loadgen URL --model ORIGINAL.onnx [--model SHA=OTHER.onnx]
        [--clients 4] [--requests 50] [--rows 1] [--seed 0] [--json]

Each client (a thread with its own kept-alive connection) sends seeded random inputs and checks
every answer against ONNX Runtime on the original model here (the model whose package
``manifest_sha256`` the response names, when several are given), so a wrong answer is counted,
never averaged away. Prints throughput, latency percentiles, errors by kind and wrong answers."""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time

import numpy as np


def golden_session(path: str):
    """ONNX Runtime on the original model with dimension 0 left free, so requests of fewer
    rows than the compiled batch are checked without the server's padding."""
    import onnx
    import onnxruntime as ort
    m = onnx.load(path)
    for vi in [*m.graph.input, *m.graph.output]:
        dims = vi.type.tensor_type.shape.dim
        if dims:
            dims[0].dim_param = "batch"
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    inits = {t.name for t in m.graph.initializer}
    specs = [(i.name, [d.dim_value for d in i.type.tensor_type.shape.dim][1:])
             for i in m.graph.input if i.name not in inits]
    return sess, specs


def run(url: str, models: dict, *, clients: int = 4, requests: int = 50, rows: int = 1,
        seed: int = 0, rtol: float = 1e-4, priority: str = "normal",
        until_version: str | None = None, max_s: float = 120.0) -> dict:
    """``until_version``: each client goes on past ``requests`` until it is answered by that
    package version (at most ``max_s``): a reload is then checked under load however long
    it takes."""
    from edgeops.serve.client import Client
    from edgeops.serve.protocol import ServeError
    goldens = {k: golden_session(p) for k, p in models.items()}
    default = next(iter(goldens.values()))
    lock = threading.Lock()
    lat, wrong, errors, msgs, versions, regress = [], [], {}, [], {}, [0]
    order = {k: i for i, k in enumerate(models)}
    sent = [0]

    def client(ci: int):
        rng = np.random.default_rng(seed * 1000 + ci)
        last, i, end = -1, 0, time.monotonic() + max_s
        with Client(url) as c:
            while i < requests or (until_version and c.last_version != until_version
                                   and time.monotonic() < end):
                i += 1
                with lock:
                    sent[0] += 1
                sess, specs = default
                r = int(rng.integers(1, rows + 1))
                feeds = {n: rng.standard_normal([r, *s]).astype(np.float32) for n, s in specs}
                t0 = time.perf_counter()
                try:
                    got = c.infer(feeds, priority)
                except ServeError as e:
                    with lock:
                        errors[e.kind] = errors.get(e.kind, 0) + 1
                        if len(msgs) < 20:
                            msgs.append(str(e))
                    continue
                dt = time.perf_counter() - t0
                v = c.last_version
                sess, _ = goldens.get(v, default)
                want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
                bad = [n for n, w in want.items() if n not in got or got[n].shape != w.shape or
                       not np.max(np.abs(got[n].astype(np.float64) - w)) <=
                       rtol * max(1e-30, float(np.max(np.abs(w))))]
                with lock:
                    lat.append(dt)
                    versions[v] = versions.get(v, 0) + 1
                    if v in order:
                        if order[v] < last:
                            regress[0] += 1
                        last = max(last, order[v])
                    if bad:
                        wrong.append({"client": ci, "request": i, "outputs": bad, "version": v})

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    a = np.array(lat) * 1e3
    return {"url": url, "clients": clients, "requests": sent[0], "ok": len(lat) - len(wrong),
            "wrong": wrong, "errors": errors, "error_messages": msgs,
            "lost": sent[0] - len(lat) - sum(errors.values()),
            "throughput_rps": len(lat) / wall if wall > 0 else 0.0, "wall_s": wall,
            "latency_ms": {f"p{q}": float(np.percentile(a, q)) for q in (50, 90, 99)}
            if len(a) else {}, "versions": versions, "version_regressions": regress[0]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m edgeops.serve.loadgen")
    ap.add_argument("url")
    ap.add_argument("--model", action="append", required=True, metavar="[SHA=]ORIGINAL.onnx")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--requests", type=int, default=50, help="per client")
    ap.add_argument("--rows", type=int, default=1, help="rows per request: random 1..ROWS")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--priority", default="normal")
    ap.add_argument("--until-version", metavar="SHA", help="go on until answered by it")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    models = dict(m.split("=", 1) if "=" in m else (m, m) for m in a.model)
    doc = run(a.url, models, clients=a.clients, requests=a.requests, rows=a.rows, seed=a.seed,
              rtol=a.rtol, priority=a.priority, until_version=a.until_version)
    if a.json:
        json.dump(doc, sys.stdout)
        sys.stdout.write("\n")
    else:
        print(f"{doc['clients']} clients: {doc['throughput_rps']:.0f} req/s, p99 "
              f"{doc['latency_ms'].get('p99', float('nan')):.1f} ms, ok {doc['ok']}, wrong "
              f"{len(doc['wrong'])}, errors {doc['errors']}, lost {doc['lost']}")
    return 0 if not doc["wrong"] and not doc["lost"] else 1


if __name__ == "__main__":
    sys.exit(main())
