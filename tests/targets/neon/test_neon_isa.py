"""Vector width of the neon kernels on AVX-512 hosts (edgeops.targets.neon._isa): each setting
compiles code of that width, computes what numpy float64 computes, and keeps its own cache."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from edgeops.errors import EdgeOpsError

# a fresh interpreter: the width is fixed once Numba has built its code generator
_PROBE = textwrap.dedent("""
    import json, re, sys
    import numpy as np
    from numba.core import config
    if sys.argv[1] == "numba-first":
        import numba
        numba.njit(lambda v: v + 1)(1)
    import edgeops.targets.neon as neon
    from edgeops.targets.neon import _isa, norms
    rng = np.random.default_rng(7)
    x = rng.standard_normal((37, 203)).astype(np.float32)
    s, b = (rng.standard_normal(203).astype(np.float32) for _ in range(2))
    y = norms.layernorm(x, s, b, act="gelu")
    x64 = x.astype(np.float64)
    z = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5) * s + b
    from math import erf
    want = 0.5 * z * (1 + np.vectorize(erf)(z / np.sqrt(2)))
    f = norms._layernorm_serial
    asm = "".join(f.inspect_asm(sig) for sig in f.signatures) if f.signatures else ""
    print(json.dumps({"applied": _isa.vector_bits(), "features": config.CPU_FEATURES,
                      "zmm": len(re.findall(r"%zmm", asm)), "hits": sum(f.stats.cache_hits.values()),
                      "err": float(np.abs(y - want).max())}))
""")


def _probe(bits, mode="plain", tmp_path=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_CPU")}
    env["EDGEOPS_VECTOR_BITS"] = bits
    env["NUMBA_CACHE_DIR"] = str(tmp_path)     # a private cache: the asm can be inspected
    out = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True,
                         env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _host_avx512() -> bool:
    from numba.core.codegen import get_host_cpu_features
    return "+avx512f" in get_host_cpu_features().split(",")


def _llvm_prefers_256() -> bool:
    """Whether LLVM's tuning for this CPU prefers 256-bit vectors (Intel's AVX-512 parts since
    Skylake-SP do; AMD's Zen 4 and 5 do not, so there the default already is 512-bit)."""
    import llvmlite.binding as ll
    ll.initialize_native_target()
    return ll.get_host_cpu_name() not in ("znver4", "znver5")


def test_a_width_that_is_not_one_gets_a_clear_error(monkeypatch):
    from edgeops.targets.neon import _isa
    monkeypatch.setenv("EDGEOPS_VECTOR_BITS", "1024")
    with pytest.raises(EdgeOpsError, match="EDGEOPS_VECTOR_BITS='1024': use one of auto, 256, 512"):
        _isa.requested()


def test_each_width_compiles_its_own_code_and_matches_float64(tmp_path):
    if not _host_avx512():
        pytest.skip("this host has no AVX-512F: both settings compile LLVM's default code")
    wide = _probe("512", tmp_path=tmp_path / "a")
    narrow = _probe("256", tmp_path=tmp_path / "a")      # same cache dir: must not reuse 512's
    assert wide["applied"] == "512" and wide["features"].endswith(",-prefer-256-bit")
    assert narrow["applied"] == "default" and narrow["features"] is None
    assert wide["hits"] == narrow["hits"] == 0, "a width loaded the other's cached code"
    again = _probe("256", tmp_path=tmp_path / "a")    # while each width finds its own
    assert again["hits"] > 0 and again["err"] == narrow["err"]
    if _llvm_prefers_256():
        assert wide["zmm"] > 10 * max(narrow["zmm"], 1), (wide["zmm"], narrow["zmm"])
    else:       # LLVM's own tuning for this CPU already uses 512-bit vectors: the same code
        assert wide["zmm"] >= narrow["zmm"] > 0, (wide["zmm"], narrow["zmm"])
    assert wide["err"] < 2e-5 and narrow["err"] < 2e-5
    # once Numba has compiled anything the width cannot change: nothing is claimed
    late = _probe("512", "numba-first", tmp_path=tmp_path / "b")
    assert late["applied"] == "default" and late["features"] is None and late["err"] < 2e-5
