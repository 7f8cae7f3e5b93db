"""``edgeops bench PKG --to URI [--runs N] [--profile-runs N] [--json]``: benchmark the package a
board runs (edgeops deploy first): cold start in a fresh process (Numba compiles or cache loads
counted), latency p50/p90/p99, throughput, peak RSS, and ONNX Runtime's per-node profile mapped
onto the placement table next to the simulator's prediction. :func:`edgeops.deploy.bench.bench` is the
same in Python."""
from __future__ import annotations

from edgeops.cli.common import runs

from edgeops.cli.common import console, fmt_s, print_json


def add(sub):
    p = sub.add_parser("bench", help="benchmark the package a board runs (per node vs predicted)")
    p.add_argument("package", metavar="PKG", help="the package deployed on the board")
    p.add_argument("--to", required=True, metavar="URI", help="the board (as for edgeops deploy)")
    p.add_argument("--runs", type=runs, default=20, help="timed warm runs (default 20)")
    p.add_argument("--profile-runs", type=runs, default=3,
                   help="runs under ONNX Runtime's profiler for per-node times (default 3)")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.set_defaults(func=run)


def run(args) -> int:
    from edgeops.deploy.bench import bench
    from edgeops.errors import EdgeOpsError
    if args.runs < 1 or args.profile_runs < 1:
        raise EdgeOpsError("--runs and --profile-runs must be at least 1")
    doc = bench(args.package, args.to, runs=args.runs, profile_runs=args.profile_runs)
    if args.json:
        print_json(doc)
    else:
        print_report(doc)
    return 0


def print_report(doc: dict) -> None:
    from rich.markup import escape
    from rich.table import Table
    c = console()
    t = Table(title=f"{doc['installed_as']} on {doc['to']} (compiled for {doc['board']}), "
                    f"per node: ONNX Runtime profiler, median of {doc['profile_runs']} runs")
    for col in ("node", "op", "runs on", "measured", "predicted", "measured/predicted"):
        t.add_column(col, justify="right" if col[0] in "mp" else "left")
    for r in doc["nodes"]:
        ratio = r["measured_over_predicted"]
        t.add_row(escape(r["node"]), escape(r["op"]), r["where"], fmt_s(r["measured_s"]),
                  fmt_s(r["predicted_s"]), "-" if ratio is None else f"{ratio:.2f}x")
    for r in doc["unmapped_nodes"]:
        t.add_row(escape(r["node"]), escape(r["op"]), "[dim]ONNX Runtime (own node)[/dim]",
                  fmt_s(r["measured_s"]), "-", "-")
    c.print(t)
    lat, cold, th = doc["latency_s"], doc["cold_start"], doc["throughput"]
    nb = cold["numba"]
    c.print(f"latency over {doc['runs']} runs: p50 {fmt_s(lat['p50'])}, p90 {fmt_s(lat['p90'])}, "
            f"p99 {fmt_s(lat['p99'])} (predicted {fmt_s(doc['predicted_latency_s'])}); "
            f"throughput {th['samples_per_s']:.1f} samples/s")
    c.print(f"cold start {fmt_s(cold['since_process_start_s'])} from process start (first run "
            f"{fmt_s(cold['first_run_s'])}; Numba: {nb['compiled']} compiled, "
            f"{nb['loaded_from_cache']} from cache); peak RSS "
            f"{doc['peak_rss_bytes'] / 2**20:.0f} MiB" +
            (" (includes qemu's own)" if doc["under_qemu"] else ""))
