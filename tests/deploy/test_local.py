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
    to = f"local:{tmp_path / 'board'}"
    for argv, msg in ((["deploy", str(a), "--board", "rpi5", "--to", to], "compiled for board 'host'"),
                      (["deploy", "--rollback", "--to", to], "no previous package"),
                      (["deploy", str(a), "--to", "ftp://x/y"], "unknown transport"),
                      (["run", str(a), "--to", to], "no current package")):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and msg in err, err


def test_board_info_names_what_is_installed(tmp_path):
    from edgeops.transports import LocalTransport
    doc = LocalTransport(tmp_path).board("info", str(tmp_path))[1]
    assert doc["edgeops"] and doc["python"] and doc["disk_free_bytes"] > 0
    assert set(doc["modules"]) >= {"numpy", "numba", "onnxruntime", "onnxruntime_extensions"}
    assert all(m["version"] or m["install"].startswith("pip install") for m in doc["modules"].values())
