"""No GPU: every registered cuda kernel falls back to neon / the reference, with one warning,
every call counted."""
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

from edgeops.errors import EdgeOpsWarning
from edgeops.ops.base import get_op
from edgeops.pipeline.targets import load_targets
from edgeops.registry import kernels
from edgeops.targets.cuda import device

load_targets()      # registers the cuda kernels


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setenv("EDGEOPS_CUDA_DISABLE", "1")
    device.reset_fallbacks()
    yield
    device.reset_fallbacks()


def test_fallback_warns_once_and_counts(no_gpu, rng):
    x = rng.standard_normal((3, 8)).astype(np.float32)
    relu = next(k for k in kernels("Relu", "cuda"))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for _ in range(3):
            y = relu.fn([x], {})[0]
    ours = [m for m in w if issubclass(m.category, EdgeOpsWarning)]
    assert len(ours) == 1 and "no CUDA device" in str(ours[0].message)
    assert "EDGEOPS_CUDA_DISABLE" in str(ours[0].message)
    assert device.fallback_count() == 3
    np.testing.assert_array_equal(y, np.maximum(x, 0))


CASES = [
    ("Gemm", "", lambda r: [r(7, 5), r(5, 3), r(3)], {"alpha": 0.5}),
    ("MatMul", "", lambda r: [r(2, 7, 5), r(5, 3)], {}),
    ("Conv", "", lambda r: [r(1, 3, 6, 5), r(4, 3, 3, 3), r(4)], {"pads": [1, 1, 1, 1]}),
    ("ConvBnAct", "ai.edgeops", lambda r: [r(1, 3, 6, 5), r(4, 3, 3, 3), r(4)],
     {"pads": [1, 1, 1, 1], "activation": "silu"}),
    ("SwiGLU", "ai.edgeops", lambda r: [r(4, 6), r(6, 5), r(6, 5)], {}),
    ("LayerNormGelu", "ai.edgeops", lambda r: [r(3, 9), r(9), r(9)], {}),
    ("GroupNormAct", "ai.edgeops", lambda r: [r(1, 4, 3, 3), r(4), r(4)],
     {"num_groups": 2, "activation": "silu"}),
    ("Softmax", "", lambda r: [r(3, 9)], {}),
    ("Gelu", "", lambda r: [r(3, 9)], {}),
]


@pytest.mark.parametrize("op,domain,make,attrs", CASES, ids=[c[0] for c in CASES])
def test_every_cuda_kernel_falls_back_correctly(no_gpu, rng, op, domain, make, attrs):
    def r(*s):
        return rng.standard_normal(s).astype(np.float32)
    ins = make(r)
    od = get_op(op, domain)
    ref = od.run([x.astype(np.float64) for x in ins], attrs)[0]
    key = f"{domain}::{op}" if domain else op
    ks = kernels(key, "cuda")
    assert ks, f"no cuda kernel registered for {key}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EdgeOpsWarning)
        for k in ks:
            y = k.fn(ins, od.parse_attrs(attrs))[0]
            np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
    assert device.fallback_count() == len(ks)


def test_no_driver_means_fallback_in_fresh_process():
    """Without EDGEOPS_CUDA_DISABLE: on a machine with no NVIDIA driver numba.cuda says no GPU."""
    code = ("import warnings, numpy as np, edgeops.targets.cuda as c\n"
            "from edgeops.pipeline.targets import load_targets\n"
            "from edgeops.registry import kernel_by_name\n"
            "load_targets()\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n"
            "    y = kernel_by_name('cuda.relu').fn([np.array([-1., 2.], np.float32)], {})[0]\n"
            "print(c.gpu_present(), c.fallback_count(), y.tolist(), len(w))\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("NUMBA_ENABLE_CUDASIM", "EDGEOPS_CUDA_DISABLE")}
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    present = p.stdout.split()[0] == "True"
    if present:
        pytest.skip("this machine has a usable NVIDIA GPU: nothing falls back")
    assert p.stdout.split()[1:] == ["1", "[0.0,", "2.0]", "1"], p.stdout
