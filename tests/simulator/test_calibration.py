"""The calibration model (edgeops.simulator.calibration): fitting, bands, files, borrowing and the
default band, against figures computed here from the board files and numpy."""
import json
import math

import numpy as np
import pytest

from edgeops import boards, graph
from edgeops.sample import build_sample_model
from edgeops.simulator import calibration as C


def test_relative_nnls_recovers_known_costs(rng):
    true = np.array([4e-6, 1.6, 2.5, 7.0])       # call s, 1/comp_eff, 1/bw_eff, 1/weight_bw_eff
    x = np.column_stack([np.ones(40), *rng.uniform(1e-7, 1e-3, (3, 40))])
    assert np.allclose(C.nnls_rel(x, x @ true), true, rtol=1e-6)
    # a cost the data do not have comes out zero, never negative
    y = x[:, 1] * 2.0 + 1e-5
    c = C.nnls_rel(x, y)
    assert c.min() >= 0 and np.allclose(x @ c, y, rtol=1e-6)
    assert c[2] == pytest.approx(0, abs=1e-9) and c[3] == pytest.approx(0, abs=1e-9)


def test_a_negligible_rate_term_is_dropped_not_reported_as_a_huge_efficiency(rng):
    x = np.column_stack([np.ones(30), *rng.uniform(1e-6, 1e-3, (3, 30))])
    c = np.array([5e-6, 1e-12, 2.0, 3e-9])        # compute and weights are leftovers
    got = C.drop_negligible(x, c)
    assert got[0] == c[0] and got[2] == c[2] and got[1] == 0 and got[3] == 0
    keep = np.array([5e-6, 0.5, 2.0, 1.0])        # every term matters somewhere
    np.testing.assert_array_equal(C.drop_negligible(x, keep), keep)
    rows = [{"side": "ort", "family": "Split", "op": "Split", "dtype": "fp32", "threads": 1,
             "x": xi.tolist(), "seconds": float(xi @ c)} for xi in x]
    e = C.fit(rows)["ort|Split|fp32|t1"]
    assert e["comp_eff"] is None and e["weight_bw_eff"] is None
    assert e["bw_eff"] == pytest.approx(0.5, rel=1e-3)


def test_band_is_the_90th_percentile_of_relative_error(rng):
    pred = rng.uniform(1e-5, 1e-3, 200)
    meas = pred * rng.lognormal(0, 0.2, 200)
    want = float(np.quantile(np.abs(meas / pred - 1), 0.9))
    assert C.band_of(pred, meas) == pytest.approx(want)
    assert C.band_of(pred, pred) == C.BAND_FLOOR       # never tighter than two equal sessions


def _sample_nodes():
    g = graph.load(build_sample_model())
    return [n for n in g.nodes if n.op_type in ("Conv", "MatMul", "Relu", "Sigmoid", "Add", "Mul")]


def _rows(board, threads, coef, rng, noise=0.0):
    """Rows of every sample node per side, timed as ``coef`` (per side) says."""
    rows = []
    for n in _sample_nodes():
        for side in C.SIDES:
            x = C.features(n, side, board, threads)
            y = float(np.dot(coef[side], x)) * (1 + noise * rng.standard_normal())
            rows.append({"side": side, "family": n.op_type, "dtype": "fp32", "threads": threads,
                         "x": x.tolist(), "seconds": y, "model": "s:1", "node": n.name})
    return rows


def _doc(board, entries, kernels="k1", machine="m1"):
    return {"format": C.FORMAT, "board": board.name, "entries": entries, "rows": [],
            "provenance": {"board": C.descriptor(board), "kernels_key": kernels,
                           "machine_key": machine, "date": "2026-12-03T00:00:00Z"}}


COEF = {"edgeops": [2e-5, 2.0, 1.5, 9.0], "kernel": [5e-6, 2.0, 1.2, 9.0],
        "ort": [3e-6, 1.25, 1.4, 0.5]}


def test_estimate_applies_the_fit_with_the_boards_own_rates(rng, tmp_path):
    host = boards.load("rpi5")        # any CPU board with figures in its file
    doc = _doc(host, C.fit(_rows(host, 2, COEF, rng)))
    p = C.path_for("rpi5", tmp_path)
    p.write_text(json.dumps(doc))
    cal = C.load(host, kernels="k1", root=tmp_path)
    assert cal.available and cal.borrowed_from is None
    # the sample's Conv at 2 threads of rpi5: 2 x 16 fp32 flop/cycle x 2.4 GHz, 17.07 GB/s
    conv = next(n for n in _sample_nodes() if n.op_type == "Conv")
    peak, bw = 2 * 16 * 2.4e9, 17.07e9
    act = sum(t.nbytes for t in conv.input_tensors if t is not None and not t.is_const) \
        + conv.output_tensors[0].nbytes
    weights = sum(t.nbytes for t in conv.input_tensors if t is not None and t.is_const)
    want = 2e-5 + 2.0 * conv.flops / peak + 1.5 * 2 * act / bw + 9.0 * weights / bw
    est = cal.estimate(conv, "edgeops", 2)
    assert est.seconds == pytest.approx(want, rel=1e-6) and est.band == C.BAND_FLOOR


def test_a_stale_or_foreign_file_is_ignored_with_the_reason(tmp_path):
    b = boards.load("rpi5")
    C.path_for("rpi5", tmp_path).write_text(json.dumps(_doc(b, {"x": {}}, kernels="old")))
    cal = C.load(b, kernels="new", root=tmp_path)
    assert not cal.available and "other kernels" in cal.why
    C.path_for("rpi5", tmp_path).write_text("{not json")
    assert "not JSON" in C.load(b, kernels="new", root=tmp_path).why


def test_a_board_without_its_own_borrows_the_nearest_with_a_wider_band(rng, tmp_path):
    rk, rpi = boards.load("rk3588"), boards.load("rpi5")
    C.path_for("rk3588", tmp_path).write_text(json.dumps(_doc(rk, C.fit(_rows(rk, 2, COEF, rng,
                                                                          0.1)))))
    cal = C.load(rpi, kernels="k1", root=tmp_path)
    assert cal.borrowed_from == "rk3588"
    # the two boards differ only in off-chip bandwidth (33.8 vs 17.07 GB/s), same ISA, clock,
    # big cores: the transfer factor is 1 + |ln(33.8 / 17.07)|
    assert cal.factor == pytest.approx(1 + abs(math.log(33.8e9 / 17.07e9)))
    conv = next(n for n in _sample_nodes() if n.op_type == "Conv")
    own = C.Calibration(rk, cal.doc).estimate(conv, "ort", 2)
    est = cal.estimate(conv, "ort", 2)
    assert est.band == pytest.approx(min(own.band * cal.factor, C.BAND_CAP))
    assert "borrowed" in est.source


def test_npu_and_uncalibrated_boards_fall_back_to_the_default_band(tmp_path):
    npu = boards.load("ascend-310b")
    assert not C.load(npu, root=tmp_path).available
    est = C.default_estimate(1e-3, "edgeops")
    assert est.band == C.DEFAULT_BAND["edgeops"] and C.default_estimate(None, "ort") is None


def test_the_gain_must_clear_both_bands_in_quadrature():
    ours, theirs = C.Estimate(1e-3, 0.2, ""), C.Estimate(1.5e-3, 0.2, "")
    ok, gain, band = C.gain_exceeds_band(ours, theirs)
    assert gain == pytest.approx(0.5e-3) and band == pytest.approx(math.hypot(0.2e-3, 0.3e-3))
    assert ok
    assert not C.gain_exceeds_band(ours, C.Estimate(1.2e-3, 0.2, ""))[0]


def test_in_model_factors_and_their_use(rng, tmp_path):
    """Whole models that cost f_o (ONNX Runtime) and f_e (edgeops) times their nodes' one-node
    figures less the session's own run give back those factors; estimates carry them."""
    b = boards.load("rpi5")
    rows = []
    for m in ("a:1", "b:1", "c:1"):
        rows += [dict(r, model=m) for r in _rows(b, 1, COEF, rng)]
    entries = C.fit(rows)
    ov, f_o, f_e = 5e-6, 1.4, 2.2
    wholes = []
    for m in ("a:1", "b:1", "c:1"):
        mine = [r for r in rows if r["model"] == m]
        node = lambda side: {r["node"]: float(np.dot(COEF[side], r["x"]))      # noqa: E731
                             for r in mine if r["side"] == side}
        e, o = node("edgeops"), node("ort")
        low = sorted(e)[:2]
        pkg = ov + f_e * sum(e[n] - ov for n in low) + f_o * sum(o[n] - ov for n in o if n not in low)
        wholes.append({"model": m, "threads": 1, "lowered": low, "package_s": pkg,
                       "ort_s": ov + f_o * sum(v - ov for v in o.values())})
    got = C.in_model_factors(rows, wholes, entries, {"1": ov}, b)["t1"]
    # no row reads anything cold inside its model here: no cold term, one factor per side
    assert got["ort"] == pytest.approx([f_o, f_o, 0.0], rel=1e-6, abs=1e-9)
    assert got["edgeops"] == pytest.approx([f_e, f_e, 0.0], rel=1e-6, abs=1e-9)
    doc = _doc(b, entries) | {"in_model": {"t1": got},
                              "provenance": _doc(b, entries)["provenance"] | {
                                  "session_overhead_s": {"1": ov}}}
    conv = next(n for n in _sample_nodes() if n.op_type == "Conv")
    raw = float(np.dot(COEF["ort"], C.features(conv, "ort", b, 1)))
    assert C.Calibration(b, doc).estimate(conv, "ort", 1).seconds == pytest.approx(
        f_o * (raw - ov), rel=1e-6)


def test_miss_and_in_model_cold_bytes():
    assert C.miss(10, 20) == 0 and C.miss(40, 20) == pytest.approx(0.5)
    # alone: a 30-byte footprint in a 20-byte cache reads a third of its 24 bytes cold (8);
    # inside: the weight (16 B) a whole run of 100 B ago (80% cold), the input (8 B) just made
    ru = {"F": 30.0, "reads": [[16.0, 100.0], [8.0, 8.0]]}
    assert C.in_model_cold(ru, 20.0) == pytest.approx(16 * 0.8 - 24 / 3)
    assert C.in_model_cold({"F": 1.0, "reads": []}, 20.0) == 0.0


def test_in_model_cold_term_is_fitted(rng):
    """Whole models whose nodes also pay k per byte they read cold inside the model give back
    k (the cache share does not matter when the distances dwarf every cache tried)."""
    b = boards.load("rpi5")
    bw = C.rates(b, "fp32", 1)[2]
    rows, wholes = [], []
    ov, f_o, f_e, k_o, k_e = 5e-6, 1.2, 1.8, 3.0, 12.0
    for i, m in enumerate(("a:1", "b:1", "c:1", "d:1")):
        base = _rows(b, 1, COEF, rng)
        idx = {n: j for j, n in enumerate(dict.fromkeys(r["node"] for r in base))}
        mine = [dict(r, model=m, reuse={"F": 1.0, "reads": [[2e6 * (i + 1) * (idx[r["node"]] % 3),
                                                             1e15]]}) for r in base]
        rows += mine
        node = lambda side: {r["node"]: (float(np.dot(COEF[side], r["x"])) - ov,      # noqa: E731
                                         r["reuse"]["reads"][0][0] / bw)
                             for r in mine if r["side"] == side}
        e, o = node("edgeops"), node("ort")
        low = sorted(e)[:3 + i % 2]
        pkg = ov + sum(f_e * e[n][0] + k_e * e[n][1] for n in low) + \
            sum(f_o * s + k_o * c for n, (s, c) in o.items() if n not in low)
        wholes.append({"model": m, "threads": 1, "lowered": low, "package_s": pkg,
                       "ort_s": ov + sum(f_o * s + k_o * c for s, c in o.values())})
    got = C.in_model_factors(rows, wholes, C.fit(rows), {"1": ov}, b)["t1"]
    assert got["ort"] == pytest.approx([f_o, f_o, k_o], rel=1e-3)
    assert got["edgeops"] == pytest.approx([f_e, f_e, k_e], rel=1e-3)


def test_its_own_board_keeps_the_rates_it_was_fitted_against(rng):
    """host's peak and bandwidth are measured figures, cached apart: a calibration predicts with
    the rates its rows were computed with, not figures measured again since; a board borrowing
    it uses its own."""
    b = boards.load("rpi5")
    entries = C.fit(_rows(b, 1, COEF, rng))
    conv = next(n for n in _sample_nodes() if n.op_type == "Conv")
    gemm, stream, bw, _ = C.rates(b, "fp32", 1)
    doc = _doc(b, entries)
    doc["provenance"]["rates"] = {"fp32|t1": [gemm / 2, stream / 2, bw / 2]}
    own = C.Calibration(b, doc).estimate(conv, "ort", 1).seconds
    e = C.Calibration(b, doc)._entry("ort", C.ort_family(conv), "fp32", 1, "Conv")[0]
    want = C.apply(e, C.features(conv, "ort", b, 1, doc["provenance"]["rates"]))
    assert own == pytest.approx(want, rel=1e-9)
    assert own > C.Calibration(b, _doc(b, entries)).estimate(conv, "ort", 1).seconds
    lent = C.Calibration(boards.load("rk3588"), doc, borrowed_from="rpi5", factor=2.0)
    assert lent.fixed is None
