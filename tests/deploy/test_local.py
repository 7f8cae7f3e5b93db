"""edgeops deploy / run --to / deploy --rollback end to end over the local transport."""
import json

import numpy as np

from edgeops.cli import main
from edgeops import package


def _json(capsys, argv, rc=0):
    got = main(argv)
    out, err = capsys.readouterr()
    assert got == rc, err
    return json.loads(out) if out.strip() else None, err


def test_deploy_run_rollback(capsys, pkgs, tmp_path, rng, current_ok):
    a, b = pkgs
    board = tmp_path / "board"
    to = f"local:{board}"
    doc, _ = _json(capsys, ["deploy", str(a), "--board", "host", "--to", to, "--json"])
    assert doc["smoke"]["ok"] and doc["previous"] is None
    first = doc["installed_as"]
    assert current_ok(board) == first and not list(board.glob("staging-*"))

    doc, _ = _json(capsys, ["deploy", str(b), "--board", "host", "--to", to, "--json"])
    assert doc["previous"] == first and doc["installed_as"] != first
    second = doc["installed_as"]

    # run on the board with other inputs: outputs come back and match this host's run
    x = tmp_path / "in.npz"
    img = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.savez(x, image=img)
    out = tmp_path / "out.npz"
    doc, _ = _json(capsys, ["run", str(b), "--to", to, "--inputs", str(x), "--out", str(out),
                            "--json", "--runs", "1"])
    assert doc["installed_as"] == second and doc["ok"] is None
    p = package.load(b)
    want = p.session().run(None, {"image": img})[0]
    with np.load(out) as z:
        np.testing.assert_allclose(z["logits"], want, rtol=1e-6, atol=1e-6)
    # the board runs b, not a: run refuses to pretend otherwise
    assert main(["run", str(a), "--to", to, "--runs", "1"]) == 2
    assert "deploy it first" in capsys.readouterr().err

    doc, _ = _json(capsys, ["deploy", "--rollback", "--to", to, "--json"])
    assert doc["current"] == first and doc["previous"] == second
    doc, _ = _json(capsys, ["run", str(a), "--to", to, "--json", "--runs", "1"])
    assert doc["ok"] and doc["installed_as"] == first
    doc, _ = _json(capsys, ["deploy", "--rollback", "--to", to, "--json"])
    assert doc["current"] == second
    # a third deploy drops the oldest package: only current and previous are kept
    _json(capsys, ["deploy", str(a), "--to", to, "--json"])
    assert len(list(board.glob("pkg-*"))) == 2


def test_refusals(capsys, pkgs, tmp_path):
    a, _ = pkgs
    (tmp_path / "board").mkdir()    # an empty board (a missing one: test_lock.py)
    to = f"local:{tmp_path / 'board'}"
    for argv, msg in ((["deploy", str(a), "--board", "rpi5", "--to", to], "compiled for board 'host'"),
                      (["deploy", "--rollback", "--to", to], "no previous package"),
                      (["deploy", str(a), "--to", "ftp://x/y"], "unknown transport"),
                      (["run", str(a), "--to", to], "no current package")):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and msg in err, err


def test_board_info_names_what_is_installed(tmp_path):
    from edgeops.deploy.transports import LocalTransport
    doc = LocalTransport(tmp_path).board("info", str(tmp_path))[1]
    assert doc["edgeops"] and doc["python"] and doc["disk_free_bytes"] > 0
    assert set(doc["modules"]) >= {"numpy", "numba", "onnxruntime", "onnxruntime_extensions"}
    assert all(m["version"] or m["install"].startswith("pip install") for m in doc["modules"].values())


def test_bench_and_doctor_on_a_local_board(capsys, pkgs, tmp_path):
    a, b = pkgs
    to = f"local:{tmp_path / 'board'}"
    _json(capsys, ["deploy", str(a), "--to", to, "--json"])
    doc, _ = _json(capsys, ["bench", str(a), "--to", to, "--runs", "5", "--profile-runs", "2",
                            "--json"])
    lat = doc["latency_s"]
    assert lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]
    assert doc["throughput"]["samples_per_s"] > 0 and doc["peak_rss_bytes"] > 0
    assert doc["cold_start"]["since_process_start_s"] >= doc["cold_start"]["first_run_s"] > 0
    placement = package.load(a).manifest["placement"]
    assert [r["node"] for r in doc["nodes"]] == [r["node"] for r in placement]
    lowered = [r for r in doc["nodes"] if r["kernel"]]
    assert lowered and all(r["measured_s"] > 0 and r["predicted_s"] > 0 for r in lowered)
    assert main(["bench", str(b), "--to", to]) == 2            # not the package the board runs
    assert "deploy it first" in capsys.readouterr().err

    doc, _ = _json(capsys, ["doctor", "--to", to, "--runs", "5", "--json"])
    checks = {r["name"]: r["status"] for r in doc["checks"]}
    assert len(checks) == 23 and doc["ok"] and doc["counts"]["fail"] == 0
    for name in ("edgeops", "package-integrity", "dispatch", "kernel-consistency", "fusion",
                 "fallback-rules", "smoke"):
        assert checks[name] == "ok", (name, doc["checks"])
    assert main(["doctor", "--to", to, "--runs", "5"]) == 0
    out = capsys.readouterr().out
    assert len([ln for ln in out.splitlines() if ln.split()[:1] in (["ok"], ["warn"], ["fail"])]) == 23


def test_doctor_fails_a_corrupted_package(capsys, pkgs, tmp_path):
    board = tmp_path / "board"
    to = f"local:{board}"
    _json(capsys, ["deploy", str(pkgs[0]), "--to", to, "--json"])
    f = board / "current" / "reference.npz"
    f.write_bytes(f.read_bytes()[:-1] + bytes([f.read_bytes()[-1] ^ 1]))
    doc, _ = _json(capsys, ["doctor", "--to", to, "--runs", "5", "--json"], rc=1)
    row = next(r for r in doc["checks"] if r["name"] == "package-integrity")
    assert row["status"] == "fail" and "reference.npz does not match its sha256" in row["detail"]


def test_push_decision_and_uri():
    from edgeops.deploy import push_reason
    from edgeops.deploy.transports import QemuTransport, open_transport
    assert push_reason({"edgeops": None, "why": "ModuleNotFoundError"}, "1.0", "s") is not None
    assert push_reason({"edgeops": "0.9", "private": False}, "1.0", None) is not None
    assert push_reason({"edgeops": "1.0", "private": False}, "1.0", None) is None
    assert push_reason({"edgeops": "1.0", "private": True, "lib_sha256": "s"}, "1.0", "s") is None
    assert push_reason({"edgeops": "1.0", "private": True, "lib_sha256": "t"}, "1.0", "s")
    t = open_transport("qemu-arm64:/opt/sysroot:/srv/board")
    assert isinstance(t, QemuTransport) and (t.sysroot, t.root) == ("/opt/sysroot", "/srv/board")
    assert open_transport("qemu-arm64:/opt/sysroot").root == "/opt/sysroot/opt/edgeops/board"
    env = t._env()
    assert env["QEMU_CPU"] == "cortex-a76" and env["PYTHONPATH"].startswith("/srv/board/.edgeops/lib")
    import pytest
    from edgeops.errors import DeployError
    with pytest.raises(DeployError, match="absolute path"):
        open_transport("qemu-arm64:relative/sysroot")
