"""NEON-target start-up: first-call compile time vs cached start (Numba ``cache=True``).

Runs a fresh interpreter twice against one empty NUMBA_CACHE_DIR: the first run compiles every
kernel a typical CNN/transformer model touches (GEMM, conv im2col/Winograd/depthwise, norms,
SwiGLU, int8 GEMM); the second loads them from the disk cache. Reports import time and the
first call of each kernel (target, issue 5: cached start under 2 s).

    python benchmarks/neon_startup.py [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

_CHILD = r"""
import json, time
t0 = time.perf_counter()
import numpy as np
import edgeops.targets.neon as neon
from edgeops.targets.neon import chooser, epilogue as ep, norms
from edgeops.targets.neon.conv import geom_from_attrs
from edgeops.targets.neon.gemm import gemm, matmul
from edgeops.targets.neon.qgemm import qgemm
from edgeops.targets.neon.swiglu import swiglu
t_import = time.perf_counter() - t0
r = np.random.default_rng(0)
f = lambda *s: r.standard_normal(s, dtype=np.float32)
x = f(1, 16, 20, 20)
calls = {
    "gemm": lambda: gemm(f(33, 40), f(40, 50), bias=f(50), act="relu"),
    "matmul": lambda: matmul(f(2, 9, 16), f(16, 7)),
    "conv_im2col": lambda: chooser.conv2d(x, f(8, 16, 3, 3), f(8), geom_from_attrs(
        x.shape, (8, 16, 3, 3), {"strides": (2, 2), "pads": (1,) * 4}), ep.activation("relu"),
        method="im2col"),
    "conv_winograd": lambda: chooser.conv2d(x, f(8, 16, 3, 3), f(8), geom_from_attrs(
        x.shape, (8, 16, 3, 3), {"pads": (1,) * 4}), ep.activation("silu"), method="winograd"),
    "conv_depthwise": lambda: chooser.conv2d(x, f(16, 1, 3, 3), f(16), geom_from_attrs(
        x.shape, (16, 1, 3, 3), {"pads": (1,) * 4, "group": 16}), ep.activation("relu6"),
        method="depthwise"),
    "layernorm_gelu": lambda: norms.layernorm(f(4, 64), f(64), f(64), act="gelu"),
    "groupnorm_silu": lambda: norms.groupnorm(f(1, 16, 8, 8), f(16), f(16), 4, act="silu"),
    "softmax": lambda: norms.softmax(f(4, 33)),
    "swiglu": lambda: swiglu(f(5, 32), f(32, 48), f(32, 48)),
    "int8_gemm": lambda: qgemm(r.integers(0, 255, (9, 20), dtype=np.uint8),
                               r.integers(-127, 127, (20, 11), dtype=np.int8), multiplier=[0.01],
                               y_zero_point=3),
}
out = {"import_s": t_import}
for k, fn in calls.items():
    t = time.perf_counter(); fn(); out[k] = time.perf_counter() - t
out["total_s"] = time.perf_counter() - t0
print(json.dumps(out))
"""


def _run(cache_dir: str) -> dict:
    env = {**os.environ, "NUMBA_CACHE_DIR": cache_dir}
    res = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True,
                         text=True, check=True)
    return json.loads(res.stdout)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        cold = _run(d)
        warm = _run(d)
    if args.json:
        print(json.dumps({"first_call": cold, "cached": warm}, indent=1))
        return 0
    print(f"{'':<16} {'first call s':>12} {'cached s':>9}", file=sys.stderr)
    for k in cold:
        print(f"{k:<16} {cold[k]:>12.3f} {warm[k]:>9.3f}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
