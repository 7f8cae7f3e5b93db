"""How long a package session takes to start, and its first run, with a warm and a cold cache.

A zoo model compiled for ``host`` with ``--lower all`` (default ResNet-18) is opened in fresh
interpreters: ``warm`` with the caches as they are after one earlier open (Numba's disk cache of
the kernels and their native entries, the native bridge library), ``cold`` with an empty Numba
cache directory (every kernel and entry compiled; the bridge library is kept, it is built once
per machine). Each child reports the seconds to import edgeops, to make the session
(:meth:`edgeops.package.Package.session`: targets loaded, native entries loaded) and of the
first and second runs (the first run through Python prepares each node's native program).
Medians over ``--rounds`` fresh processes.

``--compare`` runs, interleaved in each round, the session with the prepared-model cache off
(``EDGEOPS_PREPARED_CACHE=0``: the model prepared with onnx, as before that cache) and on,
twice (the A/A pair: how far two identical configurations differ on a loaded machine).
``--package DIR`` times an already compiled package instead of compiling one.

    python benchmarks/session_start.py [--model zoo:resnet18] [--rounds 3] [--no-cold] [--json]
        [--quick] [--compare] [--package DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np
from edgeops import package
t1 = time.perf_counter()
pkg = package.load(sys.argv[1])
t_load = time.perf_counter()
s = pkg.session(threads=1)
t2 = time.perf_counter()
feeds = {i.name: np.random.default_rng(0).standard_normal(i.shape).astype(np.float32)
         for i in s.get_inputs()}
s.run(None, feeds)
t3 = time.perf_counter()
s.run(None, feeds)
t4 = time.perf_counter()
from edgeops.ort import native
print(json.dumps({"import": t1 - t0, "session": t2 - t1, "load": t_load - t1,
                  "first_run": t3 - t2, "second_run": t4 - t3,
                  "programs": native.counters()["programs"], "onnx": "onnx" in sys.modules}))
"""


def _child(pkg: str, env: dict) -> dict:
    r = subprocess.run([sys.executable, "-c", _CHILD, pkg], capture_output=True, text=True,
                       env=env, timeout=1800)
    if r.returncode != 0:
        raise SystemExit(f"child failed: {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="zoo:resnet18")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-cold", action="store_true", help="skip the cold-cache rounds")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--quick", action="store_true",
                    help="a small SwiGLU MLP, one warm round (smoke test)")
    ap.add_argument("--compare", action="store_true",
                    help="prepared-model cache off vs on (twice, the A/A pair), interleaved")
    ap.add_argument("--package", help="time this compiled package (skips compiling one)")
    a = ap.parse_args(argv)
    if a.quick:
        a.model, a.rounds, a.no_cold = "zoo:swiglu_mlp:16", 1, True
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        pkg = a.package or _compile(a.model, tmp)
        env = dict(os.environ)
        _child(pkg, env)                   # fills the caches
        if a.compare:
            off = dict(env, EDGEOPS_PREPARED_CACHE="0")
            for name in ("off", "on", "on again"):
                rows[name] = []
            for _ in range(a.rounds):
                rows["off"].append(_child(pkg, off))
                rows["on"].append(_child(pkg, env))
                rows["on again"].append(_child(pkg, env))
        else:
            rows["warm"] = [_child(pkg, env) for _ in range(a.rounds)]
        if not a.no_cold:
            cold = []
            for i in range(a.rounds):
                d = os.path.join(tmp, f"numba{i}")
                cold.append(_child(pkg, dict(env, NUMBA_CACHE_DIR=d)))
            rows["cold"] = cold
    med = {k: {p: statistics.median(r[p] for r in v) for p in v[0]} for k, v in rows.items()}
    if a.json:
        print(json.dumps({"model": a.model, "rounds": a.rounds, "median": med}, indent=1))
        return 0
    print(f"{a.model} package (host, --lower all), 1 thread; median seconds of {a.rounds} "
          f"fresh processes")
    print(f"{'cache':9} {'import':>7} {'load':>6} {'session':>8} {'1st run':>8} {'2nd run':>8} "
          f"{'programs':>8} {'onnx':>5}")
    for k, m in med.items():
        print(f"{k:9} {m['import']:7.2f} {m['load']:6.2f} {m['session']:8.2f} "
              f"{m['first_run']:8.2f} {m['second_run']:8.3f} {m['programs']:8.0f} "
              f"{'yes' if m['onnx'] else 'no':>5}")
    if a.compare:
        r = lambda x, y: med[x]["session"] / med[y]["session"]   # noqa: E731
        print(f"session off/on {r('off', 'on'):.2f}x, A/A on/on again {r('on', 'on again'):.2f}")
    return 0


def _compile(model: str, tmp: str) -> str:
    from edgeops import modelzoo
    from edgeops.pipeline.compile import compile_model
    if not model.startswith("zoo:"):
        raise SystemExit("--model takes zoo:NAME[@SPELLING][:SIZE]")
    name, spelling, size = modelzoo.parse(model[len("zoo:"):])
    built = modelzoo.build(name, spelling=spelling, size=size)
    pkg = os.path.join(tmp, "pkg")
    compile_model(built, "host", pkg, mode="all", threads=1, verify=False)
    return pkg


if __name__ == "__main__":
    sys.exit(main())
