"""Jetson PTX: compile each registered cuda kernel for sm_87 without a GPU.

``compile_ptx(py_func, signature, cc=(8, 7))`` runs NVVM only (the nvrtc/nvvm wheels of
``numba-cuda[cu12]``); a CUDA 12.6 toolchain emits PTX ISA 8.5, which JetPack 6.1+ drivers load
(CUDA 13 emits 9.0, which they do not). Tiled kernels compile once per tile configuration.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

JETSON_CC = (8, 7)
EXPECTED_PTX_VERSION = "8.5"    # CUDA 12.6


@dataclass(frozen=True)
class Ptx:
    kernel: str       # registered kernel name
    variant: str      # tile configuration / block size
    text: str

    @property
    def target(self) -> str:
        m = re.search(r"^\.target\s+(\S+)", self.text, re.M)
        return m.group(1) if m else ""

    @property
    def version(self) -> str:
        m = re.search(r"^\.version\s+(\S+)", self.text, re.M)
        return m.group(1) if m else ""


def _variants(name: str):
    """[(variant, python function, signature)] of a registered cuda kernel name."""
    from edgeops.targets.cuda import conv, eltwise, gemm, norms
    from edgeops.targets.cuda.launch import CONFIGS, NORM_THREADS
    tiled = [(k, gemm.make_tiled_py(c), gemm.GEMM_SIG) for k, c in CONFIGS.items()]
    lay, grp, sm = norms.make_layernorm_py, norms.make_groupnorm_py, norms.make_softmax_py
    table = {
        "cuda.gemm_tiled": tiled,
        "cuda.matmul_tiled": tiled,
        "cuda.gemm_naive": [("naive", gemm._gemm_naive, gemm.GEMM_SIG)],
        "cuda.swiglu": [(k, gemm.make_swiglu_py(c), gemm.SWIGLU_SIG) for k, c in CONFIGS.items()],
        "cuda.conv_implicit_gemm": [(k, conv.make_conv_py(c), conv.CONV_SIG)
                                    for k, c in CONFIGS.items()],
        "cuda.layernorm": [(f"nt{t}", lay(t), norms.LN_SIG) for t in NORM_THREADS],
        "cuda.groupnorm": [(f"nt{t}", grp(t), norms.GN_SIG) for t in NORM_THREADS],
        "cuda.softmax": [(f"nt{t}", sm(t), norms.SM_SIG) for t in NORM_THREADS],
    }
    table["cuda.conv_bn_act_implicit_gemm"] = table["cuda.conv_implicit_gemm"]
    table["cuda.layernorm_gelu"] = table["cuda.layernorm"]
    table["cuda.groupnorm_act"] = table["cuda.groupnorm"]
    for op in ("relu", "sigmoid", "tanh", "hardswish", "leakyrelu", "gelu"):
        table[f"cuda.{op}"] = [("chain", eltwise._chain_kernel, eltwise.CHAIN_SIG)]
    if name not in table:
        from edgeops.errors import KernelNotFoundError
        raise KernelNotFoundError(f"no cuda kernel named {name!r}; known: "
                                  f"{', '.join(sorted(table))}")
    return table[name]


def kernel_names() -> list[str]:
    from edgeops.registry import kernels
    return sorted({k.name for k in kernels(target="cuda")})


def compile_kernel(name: str, variant: str | None = None, cc=JETSON_CC) -> list[Ptx]:
    """PTX of every compiled variant of ``name`` (or just ``variant``)."""
    from numba import cuda
    out = []
    for v, fn, sig in _variants(name):
        if variant is None or v == variant:
            text, _ = cuda.compile_ptx(fn, sig, cc=cc)
            p = Ptx(name, v, text)
            _loadable_on_jetson(p)
            out.append(p)
    if not out:
        raise ValueError(f"{name} has no variant {variant!r}; variants: "
                         f"{[v for v, _, _ in _variants(name)]}")
    return out


def _isa(version: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in version.split("."))
    except ValueError:
        return ()


def _loadable_on_jetson(p: Ptx) -> None:
    """Refuse PTX newer than JetPack 6's driver loads (a CUDA 13 toolchain's ISA 9.0): a
    package would compile here and fail on the board, so say so now, and how to fix it."""
    got, most = _isa(p.version), _isa(EXPECTED_PTX_VERSION)
    if not got or got > most:
        from edgeops.errors import EdgeOpsError
        raise EdgeOpsError(
            f"{p.kernel} [{p.variant}]: this CUDA toolchain emits PTX ISA {p.version or '?'}, "
            f"newer than the {EXPECTED_PTX_VERSION} that JetPack 6 drivers load; install the "
            f"CUDA 12.6 compilers (pip install 'nvidia-cuda-nvrtc-cu12==12.6.*' "
            f"'nvidia-cuda-nvcc-cu12==12.6.*')")


def toolchain_problem() -> str | None:
    """None when ``compile_ptx`` can run here, else why not (for skips and the CLI)."""
    try:
        from numba import cuda
        cuda.compile_ptx(lambda: None, "void()", cc=JETSON_CC)
    except Exception as e:  # noqa: BLE001 - any failure means "no toolchain", said precisely
        return (f"numba.cuda.compile_ptx unavailable ({type(e).__name__}: {str(e).strip()[:200]}); "
                f"install numba-cuda[cu12] and nvidia-cuda-nvrtc-cu12==12.6.*")
    return None
