"""Ascend emulator speed: multiply-accumulates emulated per second, and whether a whole ResNet-18
runs in simulation mode in under a minute.

The emulator executes every instruction of the lowered program (DMA byte counting, buffer
checks, pipe synchronisation, per-fractal-block Cube math in numpy) and replays the trace; its
rate is reported for a 512 x 512 x 512 fp16 GEMM with the searched tiling, next to numpy's own
fp32 matmul of the same size (the peer: the bare arithmetic). The ResNet-18 figure divides the
MACs of its convolutions (+ the classifier) by that rate; ``--measure`` emulates every conv
layer shape instead and adds up the times. Planning (the tiling search) is not counted: a
compiled package carries its tilings.

    python benchmarks/ascend_emulator.py [--board ascend-910b] [--repeats 3] [--measure] [--json]
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

# (spec, how many such layers ResNet-18 has at 224 x 224)
RESNET18 = [
    ("conv2d:N=1,C=3,H=224,W=224,K=64,R=7,S=7,stride=2,pad=3", 1),
    ("conv2d:N=1,C=64,H=56,W=56,K=64,R=3,S=3,stride=1,pad=1", 4),
    ("conv2d:N=1,C=64,H=56,W=56,K=128,R=3,S=3,stride=2,pad=1", 1),
    ("conv2d:N=1,C=128,H=28,W=28,K=128,R=3,S=3,stride=1,pad=1", 3),
    ("conv2d:N=1,C=64,H=56,W=56,K=128,R=1,S=1,stride=2,pad=0", 1),
    ("conv2d:N=1,C=128,H=28,W=28,K=256,R=3,S=3,stride=2,pad=1", 1),
    ("conv2d:N=1,C=256,H=14,W=14,K=256,R=3,S=3,stride=1,pad=1", 3),
    ("conv2d:N=1,C=128,H=28,W=28,K=256,R=1,S=1,stride=2,pad=0", 1),
    ("conv2d:N=1,C=256,H=14,W=14,K=512,R=3,S=3,stride=2,pad=1", 1),
    ("conv2d:N=1,C=512,H=7,W=7,K=512,R=3,S=3,stride=1,pad=1", 3),
    ("conv2d:N=1,C=256,H=14,W=14,K=512,R=1,S=1,stride=2,pad=0", 1),
    ("gemm:M=1,N=1000,K=512", 1),
]


def _run(spec, board, repeats):
    from edgeops import tiling as T
    from edgeops.targets.ascend.emulate import execute, resolve_tiling
    from edgeops.targets.ascend.reference import inputs_and_reference
    sp = T.parse_spec(spec)
    til = resolve_tiling(sp, board, None)
    best, res = float("inf"), None
    for i in range(repeats):
        gm, _ = inputs_and_reference(sp, np.random.default_rng(i))
        t0 = time.perf_counter()
        res = execute(sp, til, board, gm)
        best = min(best, time.perf_counter() - t0)
    return best, res, til


def _macs(spec) -> int:
    from edgeops import tiling as T
    return T.parse_spec(spec).flops // 2


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--board", default="ascend-910b")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--measure", action="store_true", help="emulate every ResNet-18 layer shape")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    log = (lambda *x: print(*x, file=sys.stderr)) if a.json else print

    spec = "gemm:M=512,N=512,K=512,dtype=fp16"
    secs, res, til = _run(spec, a.board, a.repeats)
    x = np.random.default_rng(0).standard_normal((512, 512), dtype=np.float32)
    t0 = time.perf_counter()
    for _ in range(a.repeats):
        x @ x
    peer = (time.perf_counter() - t0) / a.repeats
    rate = res.macs / secs
    out = {"board": a.board,
           "gemm_512": {"tiling": til.describe(), "macs": res.macs, "seconds": secs,
                        "macs_per_s": rate, "instructions": res.instructions,
                        "instructions_per_s": res.instructions / secs,
                        "numpy_fp32_seconds": peer, "slowdown_vs_numpy": secs / peer}}
    log(f"512^3 fp16 GEMM on {a.board} ({til.describe()}): {res.macs / 1e6:.0f} M MACs in "
        f"{secs * 1e3:.0f} ms = {rate / 1e6:.0f} M MAC/s ({res.instructions} instructions); "
        f"numpy fp32 matmul {peer * 1e3:.2f} ms -> emulator {secs / peer:.0f}x slower")

    total = sum(_macs(s + ",dtype=fp16") * n for s, n in RESNET18)
    est = total / rate
    r18 = {"macs": total, "estimated_s": est, "under_a_minute": est < 60}
    log(f"ResNet-18 (224x224): {total / 1e9:.2f} G MACs / {rate / 1e6:.0f} M MAC/s = {est:.1f} s "
        f"(estimate) -> {'under' if est < 60 else 'OVER'} a minute")
    if a.measure:
        measured = 0.0
        for s, n in RESNET18:
            t, _, tl = _run(s + ",dtype=fp16", a.board, 1)
            measured += n * t
            log(f"  {s:58s} x{n}: {t * 1e3:7.0f} ms  ({tl.describe()})")
        r18.update(measured_s=measured, under_a_minute=measured < 60)
        log(f"ResNet-18 measured: {measured:.1f} s -> {'under' if measured < 60 else 'OVER'} a minute")
    out["resnet18"] = r18
    if a.json:
        print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
