"""Runs ``_sim_cases.py`` on Numba's CUDA simulator in a fresh interpreter.

``NUMBA_ENABLE_CUDASIM`` is read when ``numba.cuda`` is first imported, and other tests in this
process may already have imported it for real (PTX compilation), so the simulator cases always
run in a subprocess with the variable set. ``EDGEOPS_TEST_FULL`` passes through (full subset).
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent


@pytest.mark.cuda_sim
def test_kernels_on_cuda_simulator(unavailable):
    try:
        import numba.cuda  # noqa: F401
    except ImportError:
        unavailable("numba.cuda not importable (pip install 'edgeops[cuda]')")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    env.pop("EDGEOPS_CUDA_DISABLE", None)
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        str(HERE / "_sim_cases.py"), "-rfE"],
                       env=env, capture_output=True, text=True, timeout=900, cwd=HERE.parents[2])
    tail = (p.stdout + p.stderr)[-6000:]
    assert p.returncode == 0, f"CUDA simulator cases failed:\n{tail}"
    assert " passed" in p.stdout and "error" not in p.stdout.lower().split("passed")[-1], tail
