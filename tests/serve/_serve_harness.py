"""Packages, inputs and the second-process load generator shared by the serve tests. A tiny MLP (MatMul,
Relu, MatMul, Sigmoid) lowered for ``host`` onto the neon kernels: a worker starts in about a
second, so each module shares one service."""
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from edgeops import package

HERE = Path(__file__).resolve().parent
FAULTS = HERE / "faults.py"
# trigger values tests/serve/faults.py looks for anywhere in the input of node mm1
CRASH, SEGV, HANG, RAISE, NAN, SLOW = 7777.0, 7778.0, 8888.0, 9999.0, 6666.0, 5555.0


def tiny_model(batch: int, seed: int):
    rng = np.random.default_rng(seed)
    w1 = numpy_helper.from_array((rng.standard_normal((16, 24)) * 0.3).astype(np.float32), "w1")
    w2 = numpy_helper.from_array((rng.standard_normal((24, 8)) * 0.3).astype(np.float32), "w2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w2"], ["m"], name="mm2"),
             helper.make_node("Sigmoid", ["m"], ["y"], name="sig")]
    g = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                        [batch, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 8])],
                          [w1, w2])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def make_pkg(out: Path, batch: int = 4, seed: int = 0, runtime: dict | None = None):
    """The package and its original model (saved beside it as ``<out>.onnx``)."""
    from edgeops.lower import lower
    m = tiny_model(batch, seed)
    onnx.save(m, str(out) + ".onnx")
    lw = lower(m, "host", mode="all", plan=False)
    assert {p.kernel for p in lw.placements} >= {"neon.matmul_packed"}
    p = package.write(lw, out, seed=seed)
    if runtime:
        edit_manifest(out, lambda d: d["runtime"].update(runtime))
        p = package.load(out)
    return p


def edit_manifest(pkg_dir: Path, edit) -> None:
    """Edit a package's manifest and seal it again (what the package writer would have made)."""
    m = Path(pkg_dir) / package.MANIFEST
    doc = json.loads(m.read_bytes())
    edit(doc)
    for name, meta in doc["files"].items():
        data = (Path(pkg_dir) / name).read_bytes()
        meta.update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
    doc.pop("manifest_sha256")
    doc["manifest_sha256"] = hashlib.sha256(package._canonical(doc)).hexdigest()
    m.write_bytes(package._canonical(doc))


def feeds(rng, rows: int, value: float | None = None) -> dict:
    x = rng.standard_normal((rows, 16)).astype(np.float32)
    if value is not None:
        x[0, 3] = value
    return {"x": x}


def golden(model_path, x):
    """ONNX Runtime on the original model, any number of rows."""
    from edgeops.serve.loadgen import golden_session
    sess, _ = golden_session(str(model_path))
    return sess.run(None, {"x": x})[0]


def load_from_second_process(url, models, clients, requests, rows=1, seed=0, wait=True,
                             until_version=None):
    """edgeops.serve.loadgen in its own process; its JSON document (or the Popen)."""
    args = [sys.executable, "-m", "edgeops.serve.loadgen", url, "--clients", str(clients),
            "--requests", str(requests), "--rows", str(rows), "--seed", str(seed), "--json"]
    for m in models:
        args += ["--model", m]
    if until_version:
        args += ["--until-version", until_version]
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    return finish(p) if wait else p


def finish(p, timeout=300):
    out, err = p.communicate(timeout=timeout)
    assert out, f"load generator failed (exit {p.returncode}): {err[-2000:]}"
    return json.loads(out)


def hooked():
    """Environment in which serve workers load tests/serve/faults.py (set while starting them)."""
    import pytest
    mp = pytest.MonkeyPatch()
    mp.setenv("EDGEOPS_SERVE_TEST_HOOK", str(FAULTS))
    return mp
