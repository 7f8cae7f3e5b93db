"""Jetson code generation: every registered cuda kernel compiles to PTX for sm_87 with the
CUDA 12.6 toolchain (PTX ISA 8.5, loadable by JetPack 6.1+ drivers). No GPU needed."""
import pytest

from edgeops.pipeline.targets import load_targets
from edgeops.registry import kernels
from edgeops.targets.cuda import ptx

load_targets()      # registers the cuda kernels
NAMES = sorted({k.name for k in kernels(target="cuda")})
# one compile per distinct kernel body in CI; every tile configuration in the full suite
DISTINCT = ["cuda.gemm_tiled", "cuda.gemm_naive", "cuda.swiglu", "cuda.conv_implicit_gemm",
            "cuda.layernorm", "cuda.groupnorm", "cuda.softmax", "cuda.relu"]


@pytest.fixture(scope="module", autouse=True)
def toolchain(unavailable):
    why = ptx.toolchain_problem()
    if why:
        unavailable(why)


def _check(p):
    assert p.target == "sm_87", p.text[:400]
    assert p.version == ptx.EXPECTED_PTX_VERSION, (
        f"PTX ISA {p.version}, expected {ptx.EXPECTED_PTX_VERSION} (CUDA 12.6 nvrtc/nvvm): JetPack 6 "
        f"drivers cannot load newer PTX; pin nvidia-cuda-nvrtc-cu12==12.6.*")
    assert ".entry" in p.text


def test_catalogue_covers_every_registered_kernel():
    for name in NAMES:
        assert ptx._variants(name), name
    assert set(DISTINCT) <= set(NAMES)


@pytest.mark.parametrize("name", DISTINCT)
def test_ptx_sm87_first_variant(name):
    first = ptx._variants(name)[0][0]
    for p in ptx.compile_kernel(name, first):
        _check(p)


@pytest.mark.full
@pytest.mark.parametrize("name", NAMES)
def test_ptx_sm87_all_variants(name):
    for p in ptx.compile_kernel(name):
        _check(p)


def test_tiled_ptx_uses_shared_memory_and_barriers():
    p = ptx.compile_kernel("cuda.gemm_tiled", "t32")[0]
    assert ".shared" in p.text and "bar.sync" in p.text


def test_cli_inspect_kernel_ptx(capsys):
    import argparse
    import json

    from edgeops.cli import inspect_kernel as ik
    from edgeops.pipeline.inspect import inspect_kernel
    doc = inspect_kernel("cuda.softmax", "cuda", ptx=True, variant="nt32")
    assert doc["op"] == "Softmax" and doc["ptx"][0]["target"] == "sm_87"
    parser = argparse.ArgumentParser()
    ik.add(parser.add_subparsers())
    args = parser.parse_args(["inspect-kernel", "cuda.relu", "--target", "cuda", "--ptx", "--json"])
    assert args.func(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ptx"][0]["version"] == ptx.EXPECTED_PTX_VERSION


def test_cli_inspect_kernel_wrong_target():
    from edgeops.pipeline.inspect import inspect_kernel
    from edgeops.errors import EdgeOpsError
    with pytest.raises(EdgeOpsError, match="cuda kernel, not neon"):
        inspect_kernel("cuda.relu", "neon")


def test_ptx_newer_than_jetpack_loads_is_refused_with_the_fix(monkeypatch):
    """A CUDA 13 toolchain emits PTX ISA 9.0, which JetPack 6 drivers refuse: a clean error
    naming the toolchain to install, never PTX that fails on the board."""
    from numba import cuda

    from edgeops.errors import EdgeOpsError
    real = cuda.compile_ptx

    def newer(fn, sig, cc):
        text, rt = real(fn, sig, cc=cc)
        return text.replace(f".version {ptx.EXPECTED_PTX_VERSION}", ".version 9.0"), rt

    monkeypatch.setattr(cuda, "compile_ptx", newer)
    with pytest.raises(EdgeOpsError, match=r"PTX ISA 9\.0.*12\.6"):
        ptx.compile_kernel("cuda.relu")
