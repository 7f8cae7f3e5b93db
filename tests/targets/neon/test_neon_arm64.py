"""The ``arm64`` subset: NEON kernels running as aarch64 code.

On an aarch64 machine (a board, or the emulated Cortex-A76 of ``scripts/arm64/run_tests.sh``)
the ``on_arm`` tests run the kernels natively and look at the host code Numba generated. On x86
they are skipped, and ``test_subset_under_qemu`` drives the emulated run instead (it needs the
sysroot; building one downloads ~150 MB, so without a cached sysroot it runs only in the full
suite).
"""
import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

ON_ARM = platform.machine().lower() in ("aarch64", "arm64")
ROOT = Path(__file__).resolve().parents[3]
SYSROOT = Path(os.environ.get("EDGEOPS_ARM64_SYSROOT",
                              Path.home() / ".cache" / "edgeops" / "arm64-sysroot"))

on_arm = pytest.mark.skipif(not ON_ARM, reason="runs on aarch64 (x86 CI runs it under qemu "
                                               "through test_subset_under_qemu)")
pytestmark = pytest.mark.arm64


@on_arm
def test_gemm_on_arm_matches_reference_and_uses_fmla(rng):
    from edgeops.targets.neon import gemm as G
    from edgeops.targets.neon._microkernel import MR, NR, VL
    assert VL == 4
    a = rng.standard_normal((MR + 3, 37), dtype=np.float32)
    b = rng.standard_normal((37, NR + 5), dtype=np.float32)
    y = G.gemm(a, b, bias=np.ones(NR + 5, np.float32), act="relu")
    ref = np.maximum(a.astype(np.float64) @ b + 1, 0)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
    # On a second run the kernel comes from Numba's disk cache as object code, which has no
    # assembly to show: compile it once more in this process, caches bypassed, and read that.
    from numba.core.caching import NullCache
    for disp in (G._gemm_block, G._gemm_par):
        disp._cache = NullCache()
    G._gemm_block.recompile()       # a one-item GEMM runs the block itself (no parallel region)
    sig = G._gemm_block.signatures[0]
    asm = G._gemm_block.inspect_asm(sig)
    assert "fmla" in asm and ".4s" in asm


@on_arm
def test_int8_gemm_on_arm_is_exact(rng):
    from edgeops.targets.neon.qgemm import qgemm
    a = rng.integers(0, 256, (11, 29), dtype=np.uint8)
    b = rng.integers(-127, 128, (29, 14), dtype=np.int8)
    ref = (a.astype(np.int64) - 9) @ b.astype(np.int64)
    np.testing.assert_array_equal(qgemm(a, b, a_zero_point=9), ref)


@on_arm
@pytest.mark.parametrize("shape", [(5, 40), (48, 700)])    # the serial twin; the prange kernel
def test_layernorm_gelu_on_arm(rng, shape):
    from edgeops.ops.layernorm_gelu import LayerNormGelu
    from edgeops.targets.neon import norms
    x = rng.standard_normal(shape, dtype=np.float32)
    d = shape[-1]
    s, b = rng.standard_normal(d, dtype=np.float32), rng.standard_normal(d, dtype=np.float32)
    ref = LayerNormGelu.reference(x.astype(np.float64), s.astype(np.float64),
                                  b.astype(np.float64), axis=-1, epsilon=1e-5, approximate="none")
    np.testing.assert_allclose(norms.layernorm(x, s, b, act="gelu"), ref, rtol=3e-5, atol=3e-5)


@on_arm
def test_pooling_on_arm(rng):
    """The padded-row pooling kernel as aarch64 code: 3x3 stride 2 max with pads, 3x3 stride 1
    average counting the pads, 2x2 stride 2 max with ceil_mode."""
    from edgeops.ops.averagepool import AveragePool
    from edgeops.ops.maxpool import MaxPool
    from edgeops.targets.neon import pool
    x = rng.standard_normal((1, 4, 11, 10), dtype=np.float32)
    base = {"auto_pad": "NOTSET", "dilations": None, "ceil_mode": 0}
    for kind, attrs in [("max", {"kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1)}),
                        ("avg", {"kernel_shape": (3, 3), "strides": (1, 1), "pads": (1, 1, 1, 1),
                                 "count_include_pad": 1}),
                        ("max", {"kernel_shape": (2, 2), "strides": (2, 2), "pads": None,
                                 "ceil_mode": 1})]:
        full = {**base, **attrs}
        if kind == "max":
            ref = MaxPool.reference(x, **full, storage_order=0)
        else:
            ref = AveragePool.reference(x.astype(np.float64), **full)
        np.testing.assert_allclose(pool.pool_from_attrs(x, kind, dict(attrs)), ref, rtol=2e-5,
                                   atol=2e-5, err_msg=f"{kind} {attrs}")


@on_arm
@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_3x3_rows_on_arm(rng, stride):
    """The vector 3x3 depthwise rows (4 lanes here: ragged widths hit the overlapping last
    vector and the scalar edges) with the Clip fused into the store."""
    from edgeops.targets.neon import epilogue as ep
    from edgeops.targets.neon.conv import geom_from_attrs
    from edgeops.targets.neon.depthwise import conv2d_depthwise, uses_dw3
    c, h, w = 3, 9, 23
    x = rng.standard_normal((1, c, h, w), dtype=np.float32)
    wt = rng.standard_normal((c, 1, 3, 3), dtype=np.float32)
    b = rng.standard_normal(c, dtype=np.float32)
    g = geom_from_attrs(x.shape, wt.shape, {"group": c, "strides": (stride, stride),
                                            "pads": (1, 1, 0, 1)})
    assert uses_dw3(g)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 0), (1, 1)))
    ref = np.empty((1, c, g.oh, g.ow))
    for i in range(g.oh):
        for j in range(g.ow):
            win = xp[0, :, i * stride:i * stride + 3, j * stride:j * stride + 3]
            ref[0, :, i, j] = (win * wt[:, 0]).sum(axis=(1, 2)) + b
    y = conv2d_depthwise(x, wt, b, g, ep.activation("clip", -0.5, 1.5))
    np.testing.assert_allclose(y, np.clip(ref, -0.5, 1.5), rtol=1e-5, atol=1e-5)


def _sysroot_ready() -> bool:
    return any(SYSROOT.glob(".edgeops-sysroot-*"))


@pytest.mark.skipif(ON_ARM, reason="already on aarch64: the on_arm tests run natively")
def test_subset_under_qemu(unavailable):
    if shutil.which("qemu-aarch64-static") is None:
        unavailable("qemu-user-static is not installed (apt-get install qemu-user-static)")
    if not _sysroot_ready() and os.environ.get("EDGEOPS_TEST_FULL") != "1":
        unavailable(f"no arm64 sysroot at {SYSROOT}; build it with "
                    f"scripts/arm64/build_sysroot.sh (or run `make test-full`)")
    env = {**os.environ, "EDGEOPS_ARM64_SYSROOT": str(SYSROOT)}
    run = subprocess.run([str(ROOT / "scripts" / "arm64" / "run_tests.sh"), "-x"], env=env,
                         capture_output=True, text=True, timeout=3600)
    tail = (run.stdout + run.stderr)[-3000:]
    assert run.returncode == 0, tail
    passed = re.search(r"(\d+) passed", run.stdout)
    assert passed and int(passed.group(1)) >= 7, tail   # every on_arm test ran, none skipped
