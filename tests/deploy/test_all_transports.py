"""The demo model and a torchvision-style CNN deployed to every transport (local, ssh, emulated
arm64), run on other inputs, benched and doctored; the board's outputs match ONNX Runtime on the
original model here. The full matrix is `make test-full`; CI covers the demo on each transport in
test_local.py, test_ssh.py and test_qemu.py."""
import getpass
import sys

import numpy as np
import pytest

from edgeops import deploy as dep
from edgeops import package
from edgeops.deploy.bench import bench
from edgeops.deploy.doctor import doctor

pytestmark = pytest.mark.full


@pytest.fixture(scope="module")
def models(resnet):
    from edgeops.sample import build_sample_model
    return {"demo": (build_sample_model(), "image", (1, 3, 32, 32)),
            "resnet": (resnet, "input", (1, 3, 48, 48))}


@pytest.fixture(scope="module")
def compiled(models, tmp_path_factory):
    from edgeops.pipeline.compile import compile_model
    out = {}
    d = tmp_path_factory.mktemp("all")
    for name, (m, _, _) in models.items():
        for board in ("host", "rpi5"):
            compile_model(m, board, d / f"{name}-{board}", mode="all")
            out[name, board] = d / f"{name}-{board}"
    return out


def _round_trip(to, pkg, model, inp, shape, rng):
    doc = dep.deploy(pkg, to, progress=False)
    assert doc["smoke"]["ok"]
    x = rng.standard_normal(shape).astype(np.float32)
    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as d:
        np.savez(Path(d) / "in.npz", **{inp: x})
        _, outs = dep.run_remote(to, pkg=pkg, inputs=Path(d) / "in.npz")
    want = package.ort_outputs(model, {inp: x})
    for k, w in want.items():
        assert np.abs(outs[k] - w).max() <= package.load(pkg).tolerance * np.abs(w).max(), k
    b = bench(pkg, to, runs=3, profile_runs=1)
    assert any(r["measured_s"] for r in b["nodes"] if r["kernel"])
    d = doctor(to, runs=5)
    assert len(d["checks"]) == 23 and d["ok"], [r for r in d["checks"] if r["status"] == "fail"]
    return d


@pytest.mark.parametrize("name", ["demo", "resnet"])
def test_local(name, models, compiled, tmp_path, rng):
    m, inp, shape = models[name]
    _round_trip(f"local:{tmp_path / 'board'}", compiled[name, "host"], m, inp, shape, rng)


@pytest.mark.parametrize("name", ["demo", "resnet"])
def test_ssh(name, models, compiled, sshd, tmp_path, monkeypatch, rng):
    monkeypatch.setenv("EDGEOPS_SSH_OPTIONS", sshd["opts"])
    to = (f"ssh://{getpass.getuser()}@127.0.0.1:{sshd['port']}{tmp_path / 'board'}"
          f"?python={sys.executable}")
    m, inp, shape = models[name]
    _round_trip(to, compiled[name, "host"], m, inp, shape, rng)


@pytest.mark.arm64
@pytest.mark.parametrize("name", ["demo", "resnet"])
def test_qemu(name, models, compiled, qemu_board, rng):
    m, inp, shape = models[name]
    d = _round_trip(qemu_board, compiled[name, "rpi5"], m, inp, shape, rng)
    assert d["machine"] == "aarch64"

