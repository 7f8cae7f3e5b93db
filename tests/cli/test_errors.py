"""Bad input gives one clear line on stderr, exit code 2 and no traceback: through
``edgeops.cli.main`` and through the installed ``edgeops`` command."""
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from edgeops.cli import main


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    (d / "notes.txt").write_text("hello, this is not a model\n" * 20)
    (d / "empty.onnx").write_bytes(b"")
    # fails the checker: the node reads a tensor nothing defines
    g = helper.make_graph([helper.make_node("Relu", ["nowhere"], ["y"], name="relu")], "bad", [],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    onnx.save_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]), d / "unchecked.onnx")
    # symbolic batch
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "sym",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])])
    onnx.save_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]), d / "symbolic.onnx")
    return d


# (argv with {d} for the folder of bad files, a phrase the one line must contain)
CASES = {
    "missing file": (["inspect", "{d}/nosuch.onnx"], "does not exist"),
    "a folder": (["inspect", "{d}"], "is not a file"),
    "text file": (["inspect", "{d}/notes.txt"], "is not an ONNX model"),
    "empty file": (["inspect", "{d}/empty.onnx", "--json"], "is not an ONNX model"),
    "checker failure": (["inspect", "{d}/unchecked.onnx"], "fails the ONNX checker"),
    "unknown board": (["boards", "show", "nosuch"], "unknown board 'nosuch'"),
    "symbolic dims": (["inspect", "{d}/symbolic.onnx", "--json"], "--shapes 'x:Nx8'"),
    "shapes for a non-input": (["inspect", "{d}/symbolic.onnx", "--shapes", "y:1x8"], "not a graph input"),
    "bad --shapes syntax": (["inspect", "sample", "--shapes", "image=1x3x32x32"], "bad --shapes entry"),
    "wrong rank": (["inspect", "sample", "--shapes", "image:1x3x32"], "rank 4"),
    "unknown flag": (["inspect", "sample", "--frobnicate"], "unrecognized arguments: --frobnicate"),
    "missing argument": (["inspect"], "required: model"),
    "unknown command": (["frobnicate"], "invalid choice"),
}


def _argv(case, d):
    return [a.replace("{d}", str(d)) for a in CASES[case][0]]


def _check_one_line(err: str, phrase: str):
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("edgeops") and "error" in lines[0] and phrase in lines[0], lines[0]


@pytest.mark.parametrize("case", list(CASES))
def test_main(case, files, capsys):
    try:
        rc = main(_argv(case, files))
    except SystemExit as e:          # argparse's own errors exit from parse_args
        rc = e.code
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    _check_one_line(err, CASES[case][1])


EDGEOPS = Path(sys.executable).parent / "edgeops"


@pytest.mark.skipif(not EDGEOPS.exists(), reason="the edgeops command is not installed next to this Python")
@pytest.mark.parametrize("case", ["missing file", "text file", "checker failure", "unknown board",
                                  "symbolic dims", "bad --shapes syntax", "unknown flag"])
def test_command(case, files, tmp_path):
    p = subprocess.run([str(EDGEOPS), *_argv(case, files)], capture_output=True, text=True,
                       cwd=tmp_path, timeout=120)
    assert p.returncode == 2 and p.stdout == ""
    _check_one_line(p.stderr, CASES[case][1])
