"""``edgeops tune`` and ``edgeops simulate``: the --json documents, the files they write, and bad
input as one line on stderr with exit code 2."""
import json

import pytest

from edgeops.cli import main

CONV1 = "conv2d:N=1,C=3,H=224,W=224,K=64,R=7,S=7,stride=2,pad=3,dtype=fp16"
GEMM = "gemm:M=200,N=136,K=72,dtype=fp16"
PNG = b"\x89PNG\r\n\x1a\n"


def run_json(capsys, argv):
    rc = main(argv)
    out = capsys.readouterr()
    assert rc == 0, out.err
    return json.loads(out.out)


def test_tune_op_json(capsys):
    d = run_json(capsys, ["tune", "--op", GEMM, "--board", "ascend-910b", "--top", "3", "--json"])
    for k in ("tiling", "offchip_bytes", "latency_s", "bound"):
        assert k in d["best"]
    for k in ("compulsory_bytes", "lower_bound_bytes", "candidates_evaluated", "seconds"):
        assert k in d
    assert d["best"]["offchip_bytes"] >= d["compulsory_bytes"] > 0
    assert d["lower_bound_bytes"] is not None and len(d["top"]) <= 3
    assert d["best"]["tiling"]["version"] == 1


def test_tune_model_json(capsys):
    d = run_json(capsys, ["tune", "sample", "--board", "ascend-910b", "--json"])
    assert d["board"] == "ascend-910b" and d["nodes"]
    tuned = [n for n in d["nodes"] if "best" in n]
    assert tuned and len(tuned) + d["totals"]["untiled"] == len(d["nodes"])
    for n in tuned:
        for k in ("tiling", "offchip_bytes", "latency_s", "bound"):
            assert k in n["best"]
        for k in ("compulsory_bytes", "lower_bound_bytes", "candidates_evaluated", "seconds"):
            assert k in n
    untiled = {n["node"]: n["reason"] for n in d["nodes"] if "best" not in n}
    assert "tokens.transpose" in untiled and untiled["tokens.transpose"]
    for k in ("latency_s", "offchip_bytes", "candidates_evaluated", "seconds"):
        assert k in d["totals"]


def test_simulate_op_json(capsys):
    d = run_json(capsys, ["simulate", "--op", CONV1, "--board", "ascend-910b", "--tiling", "naive",
                          "--json"])
    (row,) = d["nodes"]
    for k in ("offchip_bytes", "latency_s", "bound"):
        assert k in row
    assert d["total_latency_s"] == row["latency_s"] and d["peak_memory_bytes"] > 0
    assert d["tiling"] == "naive"


def test_simulate_model_json_trace_and_plot(capsys, tmp_path):
    trace, png = tmp_path / "t.json", tmp_path / "roof.png"
    d = run_json(capsys, ["simulate", "sample", "--board", "rk3588", "--json", "--trace", str(trace),
                          "--plot", str(png)])
    assert d["nodes"] and d["total_latency_s"] > 0 and d["peak_memory_bytes"] > 0
    for r in d["nodes"]:
        for k in ("offchip_bytes", "latency_s", "bound", "model"):
            assert k in r
    ev = json.loads(trace.read_text())["traceEvents"]
    assert any(e["ph"] == "X" for e in ev)
    assert png.read_bytes()[:8] == PNG


def test_simulate_human_output(capsys):
    assert main(["simulate", "sample", "--board", "ascend-910b", "--unfused", "--tiling",
                 "naive"]) == 0
    out = capsys.readouterr().out
    assert "GroupNormAct" not in out and "peak activation memory" in out


def test_tune_out_then_simulate_with_the_file(capsys, tmp_path):
    out = tmp_path / "best.json"
    d = run_json(capsys, ["tune", "--op", GEMM, "--board", "ascend-910b", "--out", str(out), "--json"])
    saved = out.read_text()
    assert json.loads(saved) == d["best"]["tiling"]
    # refuses to overwrite, leaves the file alone
    assert main(["tune", "--op", GEMM, "--board", "ascend-910b", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already exists" in err and "--force" in err
    assert out.read_text() == saved
    assert main(["tune", "--op", GEMM, "--board", "ascend-910b", "--out", str(out), "--force",
                 "--objective", "traffic", "--json"]) == 0
    capsys.readouterr()
    s = run_json(capsys, ["simulate", "--op", GEMM, "--board", "ascend-910b", "--tiling", str(out),
                          "--json"])
    assert s["nodes"][0]["tiling"] == json.loads(out.read_text())


def test_model_plan_round_trip(capsys, tmp_path):
    plan = tmp_path / "plan.json"
    t = run_json(capsys, ["tune", "sample", "--board", "ascend-910b", "--out", str(plan), "--json"])
    s = run_json(capsys, ["simulate", "sample", "--board", "ascend-910b", "--unfused",
                          "--tiling", str(plan), "--json"])
    assert s["tiling"] == "plan"
    tuned = {n["node"]: n["best"] for n in t["nodes"] if "best" in n}
    for r in s["nodes"]:
        if r["node"] in tuned:
            assert r["tiling"] == tuned[r["node"]]["tiling"]
            assert r["latency_s"] == pytest.approx(tuned[r["node"]]["latency_s"])


def test_tune_plot_heatmap(capsys, tmp_path):
    png = tmp_path / "heat.png"
    run_json(capsys, ["tune", "--op", GEMM, "--board", "ascend-910b", "--plot", str(png), "--json"])
    assert png.read_bytes()[:8] == PNG


@pytest.fixture(scope="module")
def tilings(tmp_path_factory):
    from edgeops import tiling as T
    d = tmp_path_factory.mktemp("tilings")
    best = T.search(GEMM, "ascend-910b").best.tiling.to_dict()
    (d / "gemm.json").write_text(json.dumps(best))
    big = json.loads(json.dumps(best))
    big["levels"][0]["tile"].update(m=1008, n=1008, k=512)
    big["levels"][0]["buffers"] = {"A": 2, "B": 2}
    big["split"] = {}
    (d / "big.json").write_text(json.dumps(big))
    (d / "other.json").write_text(json.dumps(T.naive(CONV1, "ascend-910b").to_dict()))
    (d / "junk.json").write_text("{not json")
    return d


BAD = {
    "unknown spec key": (["simulate", "--op", "gemm:M=8,N=8,Q=8", "--board", "rk3588"], "unknown key 'Q'"),
    "zero dim": (["simulate", "--op", "gemm:M=0,N=8,K=8", "--board", "rk3588"], "M=0"),
    "negative dim (tune)": (["tune", "--op", "conv2d:N=1,C=-3,H=8,W=8,K=4,R=3,S=3", "--board",
                             "rk3588", "--json"], "C=-3"),
    "no subject": (["simulate", "--board", "rk3588"], "exactly one"),
    "both subjects": (["tune", "sample", "--op", GEMM, "--board", "rk3588"], "exactly one"),
    "unknown board": (["simulate", "--op", GEMM, "--board", "nosuch"], "unknown board"),
    "tiling of another op": (["simulate", "--op", CONV1, "--board", "ascend-910b", "--tiling",
                              "{d}/gemm.json"], "tiling.op"),
    "tiling over a buffer": (["simulate", "--op", "gemm:M=1000,N=1000,K=1000,dtype=fp16", "--board",
                              "ascend-910b", "--tiling", "{d}/big.json"], "L1"),
    "tiling for another target": (["simulate", "--op", "gemm:M=200,N=136,K=72", "--board", "rk3588",
                                   "--tiling", "{d}/gemm.json"], "tiling.target"),
    "tiling not JSON": (["simulate", "--op", GEMM, "--board", "ascend-910b", "--tiling",
                         "{d}/junk.json"], "not valid JSON"),
    "tiling file missing": (["simulate", "--op", GEMM, "--board", "ascend-910b", "--tiling",
                             "{d}/nosuch.json"], "cannot read"),
    "single tiling for a model": (["simulate", "sample", "--board", "ascend-910b", "--unfused",
                                   "--tiling", "{d}/gemm.json"], "nodes"),
    "tilings of a compiled model": (["simulate", "sample", "--board", "ascend-910b", "--tiling",
                                     "naive"], "--unfused"),
    "emulate a model": (["simulate", "sample", "--board", "ascend-910b", "--emulate"], "--op"),
    "emulate on a CPU": (["simulate", "--op", GEMM, "--board", "rk3588", "--emulate"], "Ascend board"),
    "bad --top": (["tune", "--op", GEMM, "--board", "ascend-910b", "--top", "0"], "--top"),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_input_exits_2_with_one_line(case, capsys, tilings):
    argv, phrase = BAD[case]
    rc = main([a.replace("{d}", str(tilings)) for a in argv])
    out = capsys.readouterr()
    assert rc == 2
    assert out.err.count("\n") == 1 and "Traceback" not in out.err
    assert phrase in out.err
    assert out.out == ""


def test_buffer_error_names_the_limit(capsys, tilings):
    main(["simulate", "--op", "gemm:M=1000,N=1000,K=1000,dtype=fp16", "--board", "ascend-910b",
          "--tiling", str(tilings / "big.json")])
    err = capsys.readouterr().err
    assert "524,288" in err            # the 910B's 512 KiB L1


def test_emulate_hook(capsys):
    from edgeops.cli.simulate import emulator
    from edgeops.errors import EdgeOpsError
    try:
        emulator()
    except EdgeOpsError as e:
        assert "emulator is not available" in str(e)
        return
    d = run_json(capsys, ["simulate", "--op", "gemm:M=32,N=32,K=32,dtype=fp16", "--board",
                          "ascend-910b", "--emulate", "--json"])
    assert "emulated" in d and d["emulated"]["emulated"]["offchip_bytes"] > 0


def test_tune_fp32_gemm_on_jetson_uses_cuda_cores(capsys):
    """fp32 has no tensor-core rate: the search costs the GEMM on the CUDA cores (board figures
    read from the TOML here); fp16 stays on the tensor cores."""
    import tomllib
    from pathlib import Path
    b = tomllib.loads((Path(__file__).parents[2] / "boards" / "jetson-orin-nano.toml").read_text())
    sms = next(c["count"] for c in b["core"] if c["name"] == "sm")
    unit = {u["name"]: u for u in b["unit"]}
    flops = 2 * 512 ** 3
    for dtype, name in (("fp32", "cuda_core"), ("fp16", "tensor_core")):
        d = run_json(capsys, ["tune", "--op", f"gemm:M=512,N=512,K=512,dtype={dtype}",
                              "--board", "jetson-orin-nano", "--json"])
        cyc = d["best"]["cycles"]
        assert set(cyc) == {name}
        per_sm = unit[name]["per_core"] * unit[name]["flops_per_cycle"][dtype]
        ideal = flops / sms / per_sm            # every SM busy, no padding
        assert cyc[name] >= ideal * (1 - 1e-9)
        assert d["best"]["latency_s"] >= ideal / b["clock"]["hz"] * (1 - 1e-9)
        if dtype == "fp16":   # faster than the CUDA cores could ever be
            cc = unit["cuda_core"]["per_core"] * unit["cuda_core"]["flops_per_cycle"]["fp16"]
            assert cyc[name] < flops / sms / cc


@pytest.mark.parametrize("board", ["rk3588", "ascend-910b", "jetson-orin-nano"])
def test_simulate_predicts_what_compile_builds(board, capsys, tmp_path):
    """simulate MODEL and compile MODEL share one predictor: the same nodes, the same per-node
    latency, and a total that is compile's plus what it leaves unmodelled."""
    c = run_json(capsys, ["compile", "sample", "--board", board, "-o", str(tmp_path / "p"),
                          "--no-verify", "--json"])
    s = run_json(capsys, ["simulate", "sample", "--board", board, "--json"])
    assert s["view"] == "compiled" and s["mode"] == "auto"
    placed = {r["node"]: r for r in c["placement"]}
    rows = {r["node"]: r for r in s["nodes"] if r["node"] in placed}
    assert set(rows) == set(placed)
    for name, p in placed.items():
        assert rows[name]["where"] == p["where"]
        if p["latency_s"] is not None:
            assert rows[name]["latency_s"] == pytest.approx(p["latency_s"], rel=1e-9)
    unmodelled = sum(rows[n]["latency_s"] for n in c["unmodelled"])
    assert s["total_latency_s"] == pytest.approx(c["predicted_latency_s"] + unmodelled, rel=1e-9)
    assert s["compile_predicted_latency_s"] == pytest.approx(c["predicted_latency_s"], rel=1e-12)
    # the fused graph, not the unfused one: fewer nodes than the tiling study of the same model
    # (under --lower all: auto may keep every node in ONNX Runtime, docs/notes/calibration.md)
    s = run_json(capsys, ["simulate", "sample", "--board", board, "--lower", "all", "--json"])
    u = run_json(capsys, ["simulate", "sample", "--board", board, "--unfused", "--json"])
    assert len([r for r in s["nodes"] if r["model"] != "view"]) < \
        len([r for r in u["nodes"] if r["model"] != "view"])

