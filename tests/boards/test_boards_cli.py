"""`edgeops boards [--json]` and `edgeops boards show NAME|FILE [--json]`."""
import json

from edgeops import boards
from edgeops.cli import main


def test_boards_json_lists_seven_cited_boards(capsys):
    assert main(["boards", "--json"]) == 0
    out = capsys.readouterr().out
    doc = json.loads(out)                      # stdout is one JSON document and nothing else
    listed = {b["name"]: b for b in doc["boards"]}
    assert sorted(listed) == boards.names() and len(listed) == 7
    for name, b in listed.items():
        assert b["sources"] and all(isinstance(s, str) and s.strip() for s in b["sources"].values()), name
        assert b["peak_flops"]["fp32"] > 0 or b["kind"] == "npu"
        assert b["offchip_bandwidth_bytes_per_s"] > 0 and b["targets"]
    assert listed["ascend-910b"]["architecture"] == "separated"
    assert listed["ascend-310b"]["architecture"] == "combined"
    assert listed["jetson-orin-nano"]["cores"] == {"sm": 8, "cpu": 6}


def test_boards_show_json(capsys):
    assert main(["boards", "show", "ascend-910b", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["name"] == "ascend-910b" and d["architecture"] == "separated"
    assert [c["name"] for c in d["cores"]] == ["aic", "aiv"]
    assert {m["name"] for m in d["memories"]} == {"gm", "l2", "l1", "l0a", "l0b", "l0c", "ub"}
    assert d["file"].endswith("ascend-910b.toml") and d["sources"]["memory[3].alignment_bytes"]


def test_boards_show_human(capsys):
    assert main(["boards", "show", "jetson-orin-nano"]) == 0
    out = capsys.readouterr().out
    assert "jetson-orin-nano" in out and "core[1].hz" in out and "DS-11105" in out


def test_boards_show_host_and_list(capsys):
    assert main(["boards", "show", "host"]) == 0
    assert "measured on this host" in capsys.readouterr().out
    assert main(["boards"]) == 0
    out = capsys.readouterr().out
    assert "rpi5" in out and "rk3588" in out and "GFLOP/s" in out


def test_boards_show_a_file(capsys):
    path = str(boards.BOARD_DIR / "rk3588.toml")
    assert main(["boards", "show", path, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "rk3588"


def test_boards_show_unknown(capsys):
    assert main(["boards", "show", "nosuch"]) == 2
    cap = capsys.readouterr()
    assert cap.out == ""
    lines = cap.err.strip().splitlines()
    assert len(lines) == 1 and "nosuch" in lines[0] and "rpi5" in lines[0]
    assert "Traceback" not in cap.err


def test_boards_show_needs_a_name(capsys):
    assert main(["boards", "show"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
