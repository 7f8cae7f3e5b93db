"""edgeops' numba.cuda kernels on a real NVIDIA GPU: naive vs shared-memory tiled vs the library
(PyTorch: cuBLAS / cuDNN / its own fused kernels) when PyTorch is installed.

Needs only a CUDA machine with numba-cuda (``pip install 'edgeops[cuda]'``) and, for the library
columns, PyTorch. Every kernel's result is checked against PyTorch (or numpy on the host). Kernel
times are CUDA-event medians of ``--repeats`` launches after a warm-up launch (which also JIT
compiles), operands already on the device; one extra row times a registered kernel as the ONNX
Runtime bridge calls it (host arrays in and out, so host<->device copies included). TF32 is
disabled in PyTorch so cuBLAS/cuDNN run true fp32, like edgeops' kernels.

Targets (issue 9, measured on the GPU, not asserted): tiled GEMM >= 3x naive at 2048^3 fp32,
>= 25% of cuBLAS fp32; fused SwiGLU faster than the separate library calls.

    python benchmarks/cuda_device.py [--repeats 5] [--small] [--json]

``--small`` uses tiny sizes (a smoke test; also runs on NUMBA_ENABLE_CUDASIM=1). Finishes in
well under 5 minutes on a Jetson Orin Nano; about 30 s on a datacenter GPU.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np


def _torch():
    try:
        import torch
        if not torch.cuda.is_available():
            return None
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        return torch
    except Exception:  # noqa: BLE001 - no PyTorch: library columns stay empty
        return None


def _time_numba(launch, repeats: int) -> float:
    from numba import cuda
    launch()
    cuda.synchronize()
    ts = []
    for _ in range(repeats):
        s, e = cuda.event(), cuda.event()
        t = time.perf_counter()
        s.record()
        launch()
        e.record()
        e.synchronize()
        ms = s.elapsed_time(e)   # the simulator records no time (-1): use the host clock there
        ts.append(ms / 1e3 if ms > 0 else time.perf_counter() - t)
    return statistics.median(ts)


def _time_torch(torch, fn, repeats: int) -> float:
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(repeats):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e) / 1e3)
    return statistics.median(ts)


def _time_host(fn, repeats: int) -> float:
    fn()
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def _check(name, got, want, tol):
    err = float(np.max(np.abs(got - want)) / max(1.0, float(np.max(np.abs(want)))))
    if err > tol:
        raise SystemExit(f"{name}: result differs from the reference (max rel err {err:.2e} > {tol})")
    return err


def run(repeats: int, small: bool) -> list[dict]:
    from numba import cuda

    from edgeops.targets.cuda import conv, eltwise, gemm, norms
    from edgeops.targets.cuda.launch import CONFIGS, norm_threads
    torch = _torch()
    rng = np.random.default_rng(0)
    rows: list[dict] = []

    def r(*s):
        return rng.standard_normal(s).astype(np.float32)

    def row(kernel, variant, seconds, *, flops=0.0, nbytes=0.0, lib=None, err=None, note=""):
        d = {"kernel": kernel, "variant": variant, "ms": seconds * 1e3,
             "gflops": flops / seconds / 1e9 if flops else None,
             "gbytes_s": nbytes / seconds / 1e9 if nbytes else None,
             "vs_library": (lib / seconds) if lib else None, "max_rel_err": err, "note": note}
        rows.append(d)
        return d

    def dev(x):
        return cuda.to_device(np.ascontiguousarray(x, np.float32))

    # ---- GEMM 2048^3 -------------------------------------------------------------------
    n = 40 if small else 2048
    a, b = r(n, n), r(n, n)
    da, db, dc = dev(a[None]), dev(b[None]), cuda.device_array((1, n, n), np.float32)
    bias = dev(np.zeros(1, np.float32))
    args = (da, db, dc, n, n, n, np.float32(1.0), bias, 0, 0, np.float32(0), np.float32(0))
    flops = 2.0 * n ** 3
    if torch is not None:
        ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
        want = torch.matmul(ta, tb).cpu().numpy()
        t_lib = _time_torch(torch, lambda: torch.matmul(ta, tb), repeats)
        row("gemm", "cuBLAS (torch.matmul, no TF32)", t_lib, flops=flops, lib=t_lib)
    else:
        want, t_lib = a.astype(np.float64) @ b, None
    t_naive = _time_numba(lambda: gemm.naive_kernel[(-(-n // 16), -(-n // 16), 1), (16, 16)](*args),
                          repeats)
    row("gemm", "naive 16x16", t_naive, flops=flops, lib=t_lib,
        err=_check("gemm naive", dc.copy_to_host()[0], want, 1e-4))
    for name in ("t32", "t64", "t128"):
        cfg = CONFIGS[name]
        k = gemm.tiled_kernel(cfg)
        grid = (-(-n // cfg.bn), -(-n // cfg.bm), 1)
        t = _time_numba(lambda: k[grid, cfg.threads](*args), repeats)
        row("gemm", f"tiled {name} {cfg.bm}x{cfg.bn}x{cfg.bk}", t, flops=flops, lib=t_lib,
            err=_check(f"gemm {name}", dc.copy_to_host()[0], want, 1e-4),
            note=f"{t_naive / t:.1f}x naive")
    # as the ORT bridge runs it: host arrays in and out
    t_host = _time_host(lambda: gemm.gemm(a, b, cfg=CONFIGS["t64"]), max(3, repeats // 2))
    row("gemm", "tiled t64 + host<->device copies", t_host, flops=flops, lib=t_lib)

    # ---- fused SwiGLU --------------------------------------------------------------------
    m, d_, f = (24, 20, 40) if small else (2048, 1024, 2816)
    x, w1, w2, b1, b2 = r(m, d_), r(d_, f), r(d_, f), r(f), r(f)
    dx, dw1, dw2, db1, db2 = dev(x), dev(w1), dev(w2), dev(b1), dev(b2)
    dy = cuda.device_array((m, f), np.float32)
    flops = 4.0 * m * d_ * f
    t_lib = None
    if torch is not None:
        tx, tw1, tw2, tb1, tb2 = (torch.from_numpy(v).cuda() for v in (x, w1, w2, b1, b2))
        lib = lambda: torch.nn.functional.silu(torch.addmm(tb1, tx, tw1)) * torch.addmm(tb2, tx, tw2)  # noqa: E731
        want = lib().cpu().numpy()
        t_lib = _time_torch(torch, lib, repeats)
        row("swiglu", "torch: 2x addmm + silu + mul", t_lib, flops=flops, lib=t_lib)
    else:
        g = x.astype(np.float64) @ w1 + b1
        want = g / (1 + np.exp(-g)) * (x.astype(np.float64) @ w2 + b2)
    for name in ("t32", "t64"):
        cfg = CONFIGS[name]
        k = gemm.swiglu_kernel(cfg)
        grid = (-(-f // cfg.bn), -(-m // cfg.bm))
        t = _time_numba(lambda: k[grid, cfg.threads](dx, dw1, dw2, db1, db2, dy, m, d_, f), repeats)
        row("swiglu", f"fused tiled {name}", t, flops=flops, lib=t_lib,
            err=_check(f"swiglu {name}", dy.copy_to_host(), want, 2e-4))

    # ---- Conv 3x3 as implicit GEMM (ResNet stage-1 shape) + SiLU epilogue ---------------------
    shape = (1, 4, 8, 8, 8) if small else (8, 64, 56, 56, 64)
    N, C, H, W, K = shape
    xc, wc, bc = r(N, C, H, W), r(K, C, 3, 3), r(K)
    gm = conv.geom(xc.shape, wc.shape, {"pads": [1, 1, 1, 1]})
    dxc, dwc, dbc = dev(xc), dev(wc.reshape(K, -1)), dev(bc)
    dyc = cuda.device_array((N, K, H, W), np.float32)
    gv = cuda.to_device(gm.vector())
    flops = 2.0 * N * K * H * W * C * 9
    t_lib = None
    if torch is not None:
        txc, twc, tbc = (torch.from_numpy(v).cuda() for v in (xc, wc, bc))
        lib = lambda: torch.nn.functional.silu(torch.nn.functional.conv2d(txc, twc, tbc, padding=1))  # noqa: E731
        want = lib().cpu().numpy()
        t_lib = _time_torch(torch, lib, repeats)
        row("conv3x3+silu", "cuDNN conv2d + silu (no TF32)", t_lib, flops=flops, lib=t_lib)
    else:
        from edgeops.ops.conv_bn_act import ConvBnAct
        want = ConvBnAct.run([xc, wc, bc], {"pads": [1, 1, 1, 1], "activation": "silu"})[0]
    for name in ("t32", "t64"):
        cfg = CONFIGS[name]
        k = conv.conv_kernel(cfg)
        grid = (-(-(N * H * W) // cfg.bn), -(-K // cfg.bm), 1)
        t = _time_numba(lambda: k[grid, cfg.threads](dxc, dwc, dbc, dyc, gv, eltwise.SILU,
                                                     np.float32(0), np.float32(0)), repeats)
        row("conv3x3+silu", f"implicit GEMM {name}", t, flops=flops, lib=t_lib,
            err=_check(f"conv {name}", dyc.copy_to_host(), want, 2e-4))

    # ---- memory-bound: LayerNorm+GELU, GroupNorm+SiLU, Softmax, eltwise chain ------------------
    rws, cols = (16, 100) if small else (8192, 1024)
    xl, sl, bl = r(rws, cols), r(cols), r(cols)
    dxl, dsl, dbl, dyl = dev(xl), dev(sl), dev(bl), cuda.device_array((rws, cols), np.float32)
    nbytes = 2.0 * xl.nbytes
    nt = norm_threads(cols)
    ln = norms.kernel("layernorm", nt)
    sm = norms.kernel("softmax", nt)
    cases = [("layernorm+gelu", lambda: ln[rws, nt](dxl, dsl, dbl, dyl, cols, np.float32(1e-5),
                                                      eltwise.GELU)),
             ("softmax", lambda: sm[rws, nt](dxl, dyl, cols))]
    libs = {}
    if torch is not None:
        txl, tsl, tbl = (torch.from_numpy(v).cuda() for v in (xl, sl, bl))
        F = torch.nn.functional
        libs = {"layernorm+gelu": lambda: F.gelu(F.layer_norm(txl, (cols,), tsl, tbl, 1e-5)),
                "softmax": lambda: torch.softmax(txl, -1)}
    for name, launch in cases:
        t_lib = None
        if name in libs:
            t_lib = _time_torch(torch, libs[name], repeats)
            row(name, "torch", t_lib, nbytes=nbytes, lib=t_lib)
        t = _time_numba(launch, repeats)
        want = (libs[name]().cpu().numpy() if name in libs else None)
        err = _check(name, dyl.copy_to_host(), want, 1e-4) if want is not None else None
        row(name, f"block reduction nt{nt}", t, nbytes=nbytes, lib=t_lib, err=err)

    shape = (1, 16, 8, 8) if small else (2, 320, 64, 64)
    xg, sg, bg = r(*shape), r(shape[1]), r(shape[1])
    groups = 4 if small else 32
    t = _time_host(lambda: norms.groupnorm(xg, sg, bg, num_groups=groups, code=eltwise.SILU), 3)
    t_lib = None
    if torch is not None:
        txg, tsg, tbg = (torch.from_numpy(v).cuda() for v in (xg, sg, bg))
        lib = lambda: torch.nn.functional.silu(torch.nn.functional.group_norm(txg, groups, tsg, tbg))  # noqa: E731
        want = lib().cpu().numpy()
        _check("groupnorm+silu", norms.groupnorm(xg, sg, bg, num_groups=groups, code=eltwise.SILU),
               want, 1e-4)
        t_lib = _time_host(lambda: (lib(), torch.cuda.synchronize()), 3)
    row("groupnorm+silu", "incl. host<->device copies", t, nbytes=2.0 * xg.nbytes, lib=t_lib,
        note="library time also host-timed (device-resident operands)")

    ne = 1 << (10 if small else 24)
    xe = r(ne)
    dxe, dye = dev(xe), cuda.device_array(ne, np.float32)
    codes = cuda.to_device(np.array([eltwise.GELU, eltwise.CLIP], np.int32))
    los, his = dev(np.array([0, -1], np.float32)), dev(np.array([0, 1], np.float32))
    blocks = min(-(-ne // 256), 4096)
    t = _time_numba(lambda: eltwise.chain_kernel[blocks, 256](dxe, dye, ne, codes, los, his, 2),
                    repeats)
    t_lib = None
    if torch is not None:
        txe = torch.from_numpy(xe).cuda()
        t_lib = _time_torch(torch, lambda: torch.clamp(torch.nn.functional.gelu(txe), -1, 1), repeats)
        row("eltwise gelu->clip", "torch (2 kernels)", t_lib, nbytes=2.0 * xe.nbytes, lib=t_lib)
    row("eltwise gelu->clip", "grid-stride chain", t, nbytes=2.0 * xe.nbytes, lib=t_lib)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--small", action="store_true", help="tiny sizes (smoke test / simulator)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    from numba import cuda
    if not cuda.is_available():
        print("cuda_device.py: no CUDA GPU visible to numba.cuda (driver missing, or numba-cuda "
              "not installed: pip install 'edgeops[cuda]'); nothing measured", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    rows = run(args.repeats, args.small)
    gpu = getattr(cuda.get_current_device(), "name", "CUDA simulator")
    gpu = gpu.decode() if isinstance(gpu, bytes) else str(gpu)
    doc = {"device": gpu, "torch": _torch() is not None, "rows": rows,
           "seconds": time.perf_counter() - t0}
    if args.json:
        print(json.dumps(doc, indent=1))
        return 0
    print(f"device: {gpu}   library: {'PyTorch' if doc['torch'] else 'none (PyTorch not found)'}",
          file=sys.stderr)
    print(f"{'kernel':20} {'variant':36} {'ms':>9} {'GFLOP/s':>9} {'GB/s':>8} {'x lib':>7}  "
          f"{'err':>8}  note")
    for d in rows:
        f = lambda v, fmt: (fmt % v) if v is not None else "-"  # noqa: E731
        print(f"{d['kernel']:20} {d['variant']:36} {d['ms']:9.3f} {f(d['gflops'], '%9.1f'):>9} "
              f"{f(d['gbytes_s'], '%8.1f'):>8} {f(d['vs_library'], '%7.2f'):>7}  "
              f"{f(d['max_rel_err'], '%8.1e'):>8}  {d['note']}")
    print(f"({doc['seconds']:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
