"""INT8 post-training quantization: edgeops vs onnxruntime.quantization.quantize_static.

For each model (the bundled sample; a light_* model from the onnx package with randomised
weights) and each calibration method: end-to-end output SQNR of edgeops' and ORT's QDQ models
against the float model (same calibration batches, same op types Conv/MatMul/Gemm, per-channel
weights), on the calibration set and on a held-out set; then the latency of the float model
and both QDQ models in ONNX Runtime (default optimisations, 1 thread and all threads), as
ratios to float. "+outputs" is edgeops with --quantize-outputs (Q/DQ on the Conv/MatMul/Gemm
outputs as well, the full QDQ units ORT turns into int8 kernels; ORT's quantizer does that).

    python benchmarks/quantize_vs_ort.py [--light squeezenet] [--calib 8] [--json]

``--speed``: instead, the wall time of ``quantize_model`` (calibration, bias correction and
analysis, ``--quantize-outputs`` too with ``--outputs``) against ``quantize_static`` on the same
model (a zoo model, default ResNet-18 at 224) and calibration batches, interleaved over
``--reps`` rounds in rotating order; medians, their ratio, and the A/A spread of two ORT runs
per round (what the noise alone gives).

    python benchmarks/quantize_vs_ort.py --speed [--zoo resnet18] [--calib 8] [--reps 5]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from edgeops.zoo import randomise_weights
from edgeops.quantize import quantize_model
from edgeops.quantize.analysis import sqnr_db
from edgeops.quantize.peer import ort_quantize
from edgeops.quantize.qdq import model_inputs, prepare

METHODS = ["minmax", "entropy", "percentile", "mse"]
LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
MEAN, STD = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])


def randomised(model, rng):
    return randomise_weights(model, rng, scale="he")


def natural_images(shape, n, seed):
    """Image-like inputs: smooth random fields (a few octaves of upsampled noise) in [0, 1],
    normalised with the ImageNet mean/std, NCHW."""
    rng = np.random.default_rng(seed)
    _, c, h, w = shape
    out = []
    for _ in range(n):
        img = np.zeros((c, h, w))
        for k, amp in ((4, 1.0), (16, 0.5), (64, 0.25)):
            coarse = rng.uniform(size=(c, k, k))
            img += amp * np.kron(coarse, np.ones((-(-h // k), -(-w // k))))[:, :h, :w]
        img = (img - img.min()) / (img.max() - img.min())
        chans = min(c, 3)
        img[:chans] = (img[:chans] - MEAN[:chans, None, None]) / STD[:chans, None, None]
        out.append(img[None].astype(np.float32))
    return out


def _session(model, threads, optimize=True):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.log_severity_level = 3
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def outputs_of(model, batches):
    s = _session(model, 0, optimize=False)
    return np.concatenate([s.run(None, b)[0].ravel() for b in batches])


def latency(model, feed, threads, reps=20):
    try:
        s = _session(model, threads)
    except Exception as e:  # noqa: BLE001  (ORT refusing a QDQ model is itself a finding)
        return f"ORT cannot load it: {str(e).splitlines()[0][:120]}"
    for _ in range(3):
        s.run(None, feed)
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        s.run(None, feed)
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def bench_model(name, model, calib, held, threads_all):
    m = prepare(model)
    ref_c, ref_h = outputs_of(m, calib), outputs_of(m, held)
    rows = []
    qdq = {}
    for method in METHODS:
        t = time.perf_counter()
        ours, rep = quantize_model(m, calib, method=method)
        t_ours = time.perf_counter() - t
        t = time.perf_counter()
        peer = ort_quantize(m, calib, method)
        t_peer = time.perf_counter() - t
        full, _ = quantize_model(m, calib, method=method, quantize_outputs=True)
        row = {"model": name, "method": method,
               "edgeops_full_qdq_sqnr_db": sqnr_db(ref_c, outputs_of(full, calib)),
               "edgeops_sqnr_db": sqnr_db(ref_c, outputs_of(ours, calib)),
               "edgeops_heldout_sqnr_db": sqnr_db(ref_h, outputs_of(ours, held)),
               "edgeops_s": t_ours, "ort_sqnr_db": None, "ort_heldout_sqnr_db": None, "ort_s": None}
        if peer is not None:
            row.update(ort_sqnr_db=sqnr_db(ref_c, outputs_of(peer, calib)),
                       ort_heldout_sqnr_db=sqnr_db(ref_h, outputs_of(peer, held)), ort_s=t_peer)
        rows.append(row)
        qdq[method] = (ours, full, peer)
    ours, full, peer = qdq["minmax"]
    lat = {"model": name}
    for threads, key in ((1, "1 thread"), (threads_all, f"{threads_all} threads")):
        f = latency(m, calib[0], threads)
        o = latency(ours, calib[0], threads)
        of = latency(full, calib[0], threads)
        p = latency(peer, calib[0], threads)
        lat[key] = {"float_s": f, "edgeops_qdq_s": o, "edgeops_full_qdq_s": of, "ort_qdq_s": p,
                    "edgeops_qdq_over_float": o / f if isinstance(o, float) else None,
                    "edgeops_full_qdq_over_float": of / f if isinstance(of, float) else None,
                    "ort_qdq_over_float": p / f if isinstance(p, float) else None}
    return rows, lat


def _db(x):
    return "  -  " if x is None else f"{x:6.2f}"


def _lat(x):
    return f"{x * 1e3:8.3f} ms" if isinstance(x, float) else x


def speed(zoo: str, n: int, reps: int, outputs: bool) -> dict:
    from edgeops import modelzoo
    name, spelling, size = modelzoo.parse(zoo)
    m = prepare(modelzoo.build(name, spelling, size=size))
    (inp, shape, _), = model_inputs(m)
    calib = [{inp: x} for x in natural_images(tuple(shape), n, 0)]
    runs = {"edgeops": lambda: quantize_model(m, calib, quantize_outputs=outputs),
            "ort": lambda: ort_quantize(m, calib, "minmax"),
            "ort_again": lambda: ort_quantize(m, calib, "minmax")}
    runs["edgeops"]()      # warm-up: imports, first sessions
    times = {k: [] for k in runs}
    order = list(runs)
    for r in range(reps):
        for k in order[r % 3:] + order[:r % 3]:
            t = time.perf_counter()
            runs[k]()
            times[k].append(time.perf_counter() - t)
    med = {k: float(np.median(v)) for k, v in times.items()}
    per = [e / o for e, o in zip(times["edgeops"], times["ort"])]
    aa = [b / a for a, b in zip(times["ort"], times["ort_again"])]
    return {"model": zoo, "calibration_batches": n, "reps": reps, "quantize_outputs": outputs,
            "seconds": times, "median_s": med, "ratio_of_medians": med["edgeops"] / med["ort"],
            "ratio_per_round": {"min": min(per), "median": float(np.median(per)), "max": max(per)},
            "aa_ort_over_ort": {"min": min(aa), "median": float(np.median(aa)), "max": max(aa)},
            "ort_version": ort.__version__}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--speed", action="store_true", help="time quantize_model vs quantize_static")
    ap.add_argument("--zoo", default="resnet18", help="with --speed: the zoo model (modelzoo spec)")
    ap.add_argument("--reps", type=int, default=5, help="with --speed: interleaved rounds")
    ap.add_argument("--outputs", action="store_true", help="with --speed: --quantize-outputs")
    ap.add_argument("--light", default="squeezenet", help="light_* models, comma-separated "
                    "(default squeezenet; 'none' for none)")
    ap.add_argument("--calib", type=int, default=8, help="calibration batches (held-out: as many)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if a.speed:
        doc = speed(a.zoo, a.calib, a.reps, a.outputs)
        if a.json:
            json.dump(doc, sys.stdout, indent=2)
            print()
        else:
            md, r, aa = doc["median_s"], doc["ratio_per_round"], doc["aa_ort_over_ort"]
            print(f"{a.zoo}, {a.calib} calibration batches, {a.reps} interleaved rounds"
                  f"{', --quantize-outputs' if a.outputs else ''}: edgeops {md['edgeops']:.2f} s, "
                  f"ORT quantize_static {md['ort']:.2f} s (medians); edgeops / ORT "
                  f"{doc['ratio_of_medians']:.2f} (per round {r['min']:.2f}-{r['max']:.2f}); "
                  f"A/A ORT / ORT {aa['median']:.2f} ({aa['min']:.2f}-{aa['max']:.2f})")
        return 0
    threads_all = os.cpu_count() or 1
    from edgeops.sample import INPUT_SHAPE, build_sample_model
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "quantize"))
    from conftest import small_convnet    # the small CNN of the quantize tests
    models = [("sample", build_sample_model(), INPUT_SHAPE),
              ("small convnet", small_convnet(), (1, 3, 19, 17))]
    for name in [x for x in a.light.split(",") if x and x != "none"]:
        lm = randomised(onnx.load(str(LIGHT / f"light_{name}.onnx")), np.random.default_rng(0))
        (iname, ishape, _), = model_inputs(lm)
        models.append((f"light_{name} (random weights)", lm, tuple(ishape)))
    rows, lats = [], []
    for name, model, shape in models:
        inp = model_inputs(model)[0][0]
        calib = [{inp: x} for x in natural_images(shape, a.calib, 0)]
        held = [{inp: x} for x in natural_images(shape, a.calib, 1)]
        r, lat = bench_model(name, model, calib, held, threads_all)
        rows += r
        lats.append(lat)
    doc = {"sqnr": rows, "latency": lats, "ort_version": ort.__version__,
           "note": "SQNR in dB of the model output vs the float model; per-channel int8 weights, "
                   "int8 activations, Conv/MatMul/Gemm quantized by both; latency: ORT default "
                   "optimisations, median of 20 runs, minmax QDQ models"}
    if a.json:
        json.dump(doc, sys.stdout, indent=2)
        print()
        return 0
    print(f"{'model':36s} {'method':10s} {'edgeops dB':>10s} {'+outputs':>8s} {'ORT dB':>8s} "
          f"{'diff':>6s}  {'held-out: edgeops':>17s} {'ORT':>6s}")
    for r in rows:
        d = None if r["ort_sqnr_db"] is None else r["edgeops_sqnr_db"] - r["ort_sqnr_db"]
        print(f"{r['model']:36s} {r['method']:10s} {_db(r['edgeops_sqnr_db']):>10s} "
              f"{_db(r['edgeops_full_qdq_sqnr_db']):>8s} {_db(r['ort_sqnr_db']):>8s} {_db(d):>6s}  {_db(r['edgeops_heldout_sqnr_db']):>17s} "
              f"{_db(r['ort_heldout_sqnr_db']):>6s}")
    print()
    for lat in lats:
        for key, v in lat.items():
            if key == "model":
                continue
            ro, rf, rp = (v["edgeops_qdq_over_float"], v["edgeops_full_qdq_over_float"],
                          v["ort_qdq_over_float"])
            print(f"{lat['model']:36s} {key:10s} float {_lat(v['float_s'])}  edgeops QDQ "
                  f"{_lat(v['edgeops_qdq_s'])}" + (f" (x{ro:.2f})" if ro else "")
                  + f"  +outputs {_lat(v['edgeops_full_qdq_s'])}" + (f" (x{rf:.2f})" if rf else "")
                  + f"  ORT QDQ {_lat(v['ort_qdq_s'])}" + (f" (x{rp:.2f})" if rp else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
