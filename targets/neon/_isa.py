"""Vector width of the kernels' machine code on x86 hosts with AVX-512.

LLVM tunes Skylake-SP and its successors (Ice Lake, Sapphire/Emerald Rapids) to *prefer* 256-bit
vectors (the ``prefer-256-bit`` tuning flag) even where 512-bit ones exist, because 512-bit code
lowered the clock of the first AVX-512 parts; Numba inherits that, so its loops vectorise to ymm
registers on a machine with zmm. On later parts the clock penalty is small and the kernels here
are compute-heavy per byte (erf/exp polynomials in LayerNorm+GELU, GroupNorm+SiLU, softmax) or
register-blocked GEMMs, so edgeops lets LLVM use the full width: ``EDGEOPS_VECTOR_BITS``

* ``auto`` (default): 512 where the host has AVX-512F, else whatever LLVM picks.
* ``512``: the same, said explicitly; ``256``: LLVM's default tuning (ymm on AVX-512 hosts).

512 bits speeds up the fused norm chains and depthwise conv; the GEMM-based kernels (explicit
register tiles) do not change (figures: docs/notes/neon-kernels.md).

This must run before Numba builds its CPU code generator (the first compilation or cache load in
the process): it sets ``numba.core.config.CPU_FEATURES`` (the host's features with
``-prefer-256-bit``), which Numba reads then and also folds into its disk-cache keys, so code
compiled at either width is never loaded for the other. It does nothing when the user set
``NUMBA_CPU_NAME``/``NUMBA_CPU_FEATURES`` or when Numba's code generator already exists (code
compiled by then keeps its width). The environment is left alone: a child process (an arm64
Python under qemu, say) must not inherit x86 features.
"""
from __future__ import annotations

import os
import platform

ENV = "EDGEOPS_VECTOR_BITS"
CHOICES = ("auto", "256", "512")
_applied: str | None = None


def requested() -> str:
    v = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if v not in CHOICES:
        from edgeops.errors import EdgeOpsError
        raise EdgeOpsError(f"{ENV}={v!r}: use one of {', '.join(CHOICES)}")
    return v


def vector_bits() -> str:
    """What the kernels were compiled for: "512" (full-width AVX-512), "default" (LLVM's
    choice for the host) or "user" (NUMBA_CPU_NAME/NUMBA_CPU_FEATURES decide)."""
    return _applied or "default"


def apply() -> str:
    """Set Numba's target features for the requested width (see the module docstring)."""
    global _applied
    if _applied is not None:
        return _applied
    from numba.core import config
    from numba.core.registry import cpu_target
    want = requested()
    if config.CPU_NAME is not None or config.CPU_FEATURES is not None:
        _applied = "user"
    elif want == "256" or platform.machine().lower() not in ("x86_64", "amd64"):
        _applied = "default"
    elif "_toplevel_target_context" in vars(cpu_target):   # codegen built: too late to change
        _applied = "default"
    else:
        from numba.core.codegen import get_host_cpu_features
        feats = get_host_cpu_features()
        if "+avx512f" in feats.split(","):
            config.CPU_FEATURES = feats + ",-prefer-256-bit"
            _applied = "512"
        else:
            _applied = "default"
    return _applied
