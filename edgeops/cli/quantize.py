"""``edgeops quantize MODEL --calib DATA -o OUT.onnx [--method minmax|percentile|entropy|mse]
[--per-channel|--per-tensor] [--activation-type int8|uint8] [--weight-method minmax|mse]
[--quantize-outputs] [--no-bias-correction] [--target-sqnr DB] [--eval DATA] [--report FILE.json]
[--plot PNG] [--board NAME] [--json]``: INT8 post-training quantization to a QDQ ONNX model,
with per-layer accuracy analysis and, given ``--target-sqnr``, automatic mixed precision.

``--calib`` takes an ``.npz``, a folder of ``.npy`` files or images, or ``random[:N]`` (noise:
accuracy figures are then meaningless); the formats are in docs/calibration.md. :func:`edgeops.quantize.quantize_model` is the same.
"""
from __future__ import annotations

from edgeops.cli.common import calib_data

import json
import math
import os
import warnings

from edgeops.cli.common import console, print_json
from edgeops.errors import EdgeOpsError


def add(sub):
    p = sub.add_parser("quantize", help="INT8 post-training quantization (QDQ ONNX) with accuracy "
                       "analysis and automatic mixed precision")
    p.add_argument("model", help="path to a float .onnx model, or 'sample' for the bundled one")
    p.add_argument("--calib", required=True, metavar="DATA", type=calib_data,
                   help=".npz, folder of .npy files or images, or 'random[:N]' (noise)")
    p.add_argument("-o", "--out", required=True, metavar="OUT.onnx", help="where to write the QDQ model")
    p.add_argument("--method", default="minmax", choices=["minmax", "percentile", "entropy", "mse"])
    p.add_argument("--per-channel", dest="per_channel", action="store_true", default=True,
                   help="weights per output channel (the default, the INT8 convention)")
    p.add_argument("--per-tensor", dest="per_channel", action="store_false",
                   help="one weight scale per tensor")
    p.add_argument("--activation-type", default="int8", choices=["int8", "uint8"])
    p.add_argument("--weight-method", default="minmax", choices=["minmax", "mse"],
                   help="per-channel weight scales: max|w|/127, or clipped for least error")
    p.add_argument("--quantize-outputs", action="store_true",
                   help="Q/DQ on the quantized nodes' outputs too (full QDQ units, which ONNX "
                   "Runtime runs as int8 kernels)")
    p.add_argument("--no-bias-correction", dest="bias_correction", action="store_false",
                   help="keep the float biases as they are (by default each quantized node's mean "
                   "output error on the calibration set is subtracted from its bias)")
    p.add_argument("--target-sqnr", type=float, metavar="DB",
                   help="keep the least tolerant layers in float until end-to-end SQNR >= DB")
    p.add_argument("--eval", metavar="DATA", type=calib_data, help="held-out data for the accuracy analysis "
                   "(default: the calibration set)")
    p.add_argument("--mean", default="0", help="image mean per channel, comma-separated")
    p.add_argument("--std", default="1", help="image std per channel, comma-separated")
    p.add_argument("--layout", default="NCHW", choices=["NCHW", "NHWC"], help="image layout")
    p.add_argument("--resize", default="stretch", choices=["stretch", "crop"],
                   help="images to the input's size: stretch, or shorter side then centre crop")
    p.add_argument("--report", metavar="FILE.json", help="write the full report")
    p.add_argument("--plot", metavar="PNG", help="per-layer SQNR bars")
    p.add_argument("--board", help="cost the float, int8 and mixed-precision models in compile's "
                   "predicted latency on this board")
    p.add_argument("--force", action="store_true", help="overwrite OUT / report / plot")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.set_defaults(func=run)


def _floats(s: str, flag: str):
    try:
        return tuple(float(x) for x in s.split(","))
    except ValueError:
        raise EdgeOpsError(f"{flag} takes comma-separated numbers, not {s!r}") from None


def run(args) -> int:
    from edgeops.cli.tune import check_out, progress_bar
    for path in (args.out, args.report, args.plot):
        check_out(path, args.force)
    if args.target_sqnr is not None and not math.isfinite(args.target_sqnr):
        raise EdgeOpsError("--target-sqnr must be a finite number of dB")
    with progress_bar(not args.json, "calibration batches") as bar, \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model, report = quantize_cli(args, bar)
    for w in caught:
        if "random" in str(w.message) or not args.json:
            console(stderr=True).print(f"warning: {w.message}")
    _write_model(model, args.out)
    report["out"] = args.out
    if args.report:
        _write_text(args.report, json.dumps(report, indent=2) + "\n")
    if args.plot:
        from edgeops.quantize.analysis import plot_layers
        plot_layers(report["layers"], args.plot, f"{args.model}: {args.method}, per-layer SQNR")
    if args.json:
        print_json(report)
    else:
        print_report(report)
    return 0


def quantize_cli(args, progress):
    import functools
    from edgeops.pipeline.models import load_onnx
    from edgeops.pipeline.quantize import latency_cost
    from edgeops.quantize.api import quantize_model
    calib = args.calib
    cost = functools.partial(latency_cost, board=args.board) if args.board else None
    return quantize_model(load_onnx(args.model), calib, method=args.method,
                          per_channel=args.per_channel,
                          activation_type=args.activation_type,
                          weight_method=args.weight_method,
                          quantize_outputs=args.quantize_outputs,
                          bias_correction=args.bias_correction,
                          target_sqnr=args.target_sqnr,
                          eval_data=args.eval, latency_cost=cost, progress=progress,
                          mean=_floats(args.mean, "--mean"), std=_floats(args.std, "--std"),
                          layout=args.layout, resize=args.resize)


def _write_model(model, path):
    tmp = f"{path}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(model.SerializeToString())
        os.replace(tmp, path)
    except OSError as e:
        raise EdgeOpsError(f"cannot write {path}: {e.strerror}") from None


def _write_text(path, text):
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as e:
        raise EdgeOpsError(f"cannot write {path}: {e.strerror}") from None


def print_report(r: dict) -> None:
    from rich.table import Table

    from edgeops.quantize.analysis import fmt_db
    c = console()
    e = r["end_to_end"]
    c.print(f"[bold]{r['method']}[/], weights {'per channel' if r['per_channel'] else 'per tensor'}, "
            f"activations {r['activation_type']}; {r['calibration_batches']} calibration batches, "
            f"analysis on the {r['eval_set']} set ({r['eval_batches']} batches)")
    t = Table(title="per-layer SQNR vs float, worst first")
    for col in ("node", "op", "isolated dB", "cumulative dB", "cosine"):
        t.add_column(col, justify="left" if col in ("node", "op") else "right")
    for row in r["layers"]:
        t.add_row(row["node"], row["op"], fmt_db(row["isolated_sqnr_db"]),
                  fmt_db(row["cumulative_sqnr_db"]), f"{row['cosine']:.5f}")
    c.print(t)
    top1 = "" if e.get("top1_agreement") is None else \
        f", top-1 agreement {e['top1_agreement']:.1%}"
    c.print(f"end-to-end: SQNR {fmt_db(e['sqnr_db'])} dB, cosine {e['cosine']:.5f}{top1}")
    mp = r.get("mixed_precision")
    if mp:
        kept = ", ".join(mp["kept_float"]) or "none"
        c.print(f"mixed precision: target {mp['target_sqnr_db']:.1f} dB "
                f"{'reached' if mp['reached'] else 'NOT reached'} at {fmt_db(mp['sqnr_db'])} dB; "
                f"kept in float: {kept}")
    lat = r.get("latency")
    if lat:
        c.print(f"predicted latency on {lat['board']} (compile's predictor): float "
                f"{lat['float_s'] * 1e3:.3f} ms, all int8 {lat['int8_s'] * 1e3:.3f} ms, as written "
                f"{lat['written_s'] * 1e3:.3f} ms (float layers cost {lat['cost_s'] * 1e3:+.3f} ms)")
        for which, nodes in lat["unmodelled"].items():
            if nodes:
                c.print(f"  {which}: {len(nodes)} node(s) not modelled (not in the figure)")
    c.print(f"wrote {r['out']}")
