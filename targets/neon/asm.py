"""NEON for real, without emulation: compile a kernel's LLVM IR for aarch64 (Cortex-A76, +neon)
with llvmlite and look at the hot loops' instructions.

How (and the pitfalls it avoids):

* Numba initialises only the host target: ``initialize_all_targets()`` and
  ``initialize_all_asmprinters()`` first.
* The IR is taken BEFORE Numba's host optimisation (``CPUCodeLibrary.add_ir_module`` is wrapped
  while a fresh, uncached copy of the kernel compiles): optimised host IR is already vectorised
  for AVX-512 and would show what x86 wants, not what aarch64 gets.
* The modules carry the x86 triple and datalayout: both are replaced with the aarch64 target
  machine's; any ``llvm.x86.*`` intrinsic (none are expected: the micro-kernels use target-neutral
  ``llvm.fmuladd`` and plain vector integer ops) makes the check fail with its name rather than
  abort LLVM.
* Then the aarch64 O3 pipeline runs and the target machine emits assembly.

``neon_report(name)`` gives counts of the NEON instructions the issue asks for: ``fmla v*.4s`` for
fp32, ``smlal``/``smlal2``/``sdot`` for int8.
"""
from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass

import llvmlite.binding as llb
import numpy as np

from edgeops.errors import EdgeOpsError

TRIPLE = "aarch64-unknown-linux-gnu"
CPU = "cortex-a76"
FEATURES = "+neon,+fp-armv8,+dotprod"

NEON_PATTERNS = {
    "fmla.4s": r"\bfmla\s+v\d+\.4s",
    "fmul.4s": r"\bfmul\s+v\d+\.4s",
    "smlal": r"\bsmlal2?\s+v\d+\.4s",
    "sdot": r"\bsdot\s+v\d+\.4s",
    "ld1/ldr q": r"\b(?:ld1\s+\{v\d+\.4s|ldr\s+q\d+|ldp\s+q\d+)",
}


@dataclass(frozen=True)
class AsmReport:
    kernel: str
    asm: str
    counts: dict

    def uses(self, key: str) -> bool:
        return self.counts.get(key, 0) > 0


def _target_machine():
    llb.initialize_all_targets()
    llb.initialize_all_asmprinters()
    return llb.Target.from_triple(TRIPLE).create_target_machine(cpu=CPU, features=FEATURES,
                                                                 opt=3)


@contextmanager
def _capture_ir():
    """Collect the textual IR of every module Numba adds to a code library (pre-optimisation)."""
    from numba.core import codegen
    captured: list[str] = []
    orig = codegen.CPUCodeLibrary.add_ir_module

    def add_ir_module(self, ir_module):
        captured.append(str(ir_module))
        return orig(self, ir_module)

    codegen.CPUCodeLibrary.add_ir_module = add_ir_module
    try:
        yield captured
    finally:
        codegen.CPUCodeLibrary.add_ir_module = orig


# The micro-kernel shapes a Cortex-A76 build uses (``_microkernel._SHAPES[4]``): 8 x 12 fp32
# (24 accumulators of 4 lanes), the SwiGLU 4 x 24 tile, and the "narrow" int8 form.
def _arm_globals() -> dict:
    from edgeops.targets.neon import _microkernel as mk
    from edgeops.targets.neon.depthwise import make_dw3_kernel
    mr, nv = mk._SHAPES[4]
    return {"MR": mr, "NR": 4 * nv, "QMR": mr, "QNR": 4 * nv, "VL": 4, "SMR": 4,
            "mk_f32": mk.make_f32_kernel(mr, 4, nv),
            "mk_f32_epi": mk.make_f32_epi_kernel(mr, 4, nv),
            "dw3_vec": make_dw3_kernel(4),
            "mk_f32_glu": mk.make_f32_kernel(4, 4, 2 * nv),
            "mk_i16": mk.make_i16pair_kernel(mr, 4, nv, "narrow")}


def kernel_ir(dispatcher, args, arm_shapes: bool = True) -> list[str]:
    """Unoptimised IR modules of a fresh (uncached) compile of ``dispatcher`` for ``args``.
    ``arm_shapes``: rebind the kernel's micro-kernel globals to the aarch64 shapes first, so the
    check sees the code a Cortex-A board builds (not the AVX-512 tile split into 4-lane parts)."""
    import types as pytypes

    from numba import njit, typeof
    opts = {k: v for k, v in dispatcher.targetoptions.items() if k not in ("cache", "nopython")}
    fn = dispatcher.py_func
    if arm_shapes:
        g = dict(fn.__globals__)
        g.update({k: v for k, v in _arm_globals().items() if k in fn.__code__.co_names})
        fn = pytypes.FunctionType(fn.__code__, g, fn.__name__, fn.__defaults__, fn.__closure__)
    fresh = njit(**opts)(fn)
    sig = tuple(typeof(a) for a in args)
    with _capture_ir() as mods:
        fresh.compile(sig)
    return mods


def retarget(ir_text: str, tm) -> str:
    bad = sorted(set(re.findall(r"@llvm\.x86\.[\w.]+", ir_text)))
    if bad:
        raise EdgeOpsError(f"kernel IR uses x86-only intrinsics {bad}; it cannot be compiled "
                           f"for aarch64 as is")
    ir_text = re.sub(r'^target triple = ".*"$', f'target triple = "{TRIPLE}"', ir_text,
                     flags=re.M)
    ir_text = re.sub(r'^target datalayout = ".*"$', f'target datalayout = "{tm.target_data}"',
                     ir_text, flags=re.M)
    # host CPU attributes would pin x86 features onto aarch64 functions
    ir_text = re.sub(r'"target-(?:cpu|features)"="[^"]*"', "", ir_text)
    return ir_text


def aarch64_asm(dispatcher, args, name: str = "") -> AsmReport:
    tm = _target_machine()
    mods = kernel_ir(dispatcher, args)
    if not mods:
        raise EdgeOpsError(f"no IR captured for {name or dispatcher.py_func.__name__}")
    merged = None
    for text in mods:
        m = llb.parse_assembly(retarget(text, tm))
        m.triple = TRIPLE
        if merged is None:
            merged = m
        else:
            merged.link_in(m, preserve=False)
    merged.verify()
    pto = llb.create_pipeline_tuning_options(speed_level=3)
    pb = llb.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(merged, pb)
    asm = tm.emit_assembly(merged)
    counts = {k: len(re.findall(p, asm)) for k, p in NEON_PATTERNS.items()}
    return AsmReport(name or dispatcher.py_func.__name__, asm, counts)


# ---- the kernels worth inspecting, with small example arguments (types are what matter) ----

def _examples():
    from edgeops.targets.neon import depthwise, gemm, norms, qgemm, swiglu, winograd
    from edgeops.targets.neon._microkernel import MR, NR
    f32 = lambda n: np.zeros(n, np.float32)  # noqa: E731
    z = np.zeros(1, np.int64)
    e = np.zeros(1, np.float32)
    return {
        "neon.gemm_packed": (gemm._gemm_block,
                             (0, MR, 0, NR, 8, f32(64 * 64), 0, 64, 1, f32(64 * 64), 0, 64, 1,
                              e, False, f32(64 * 64), 0, 64, np.float32(1), False, e, 0, 0, 0, 0.0, 0.0,
                              MR, NR, 8)),
        "neon.qlinearmatmul": (qgemm._qgemm_block,
                               (0, MR, 0, NR, 8, np.zeros(64, np.uint8), 0, 8, 1, 0,
                                np.zeros(64 * NR, np.int8), 0, NR, 1, 0,
                                np.zeros(64 * NR, np.int32), 0, NR, MR, NR, 8)),
        "neon.layernorm_gelu": (norms._layernorm_kernel,
                                (f32(64), f32(16), f32(16), 4, 16, 1e-5, f32(64), 6, 0.0, 0.0)),
        "neon.groupnorm_act": (norms._groupnorm_kernel,
                               (f32(64), f32(4), f32(4), 1, 4, 16, 2, 1e-5, f32(64), 3, 0.0, 0.0)),
        "neon.conv_depthwise": (depthwise._dw_kernel,
                                (f32(64), f32(9), f32(1), True, f32(64), 1, 1, 8, 8, 1, 3, 3, 8, 8,
                                 1, 1, 1, 1, 1, 1, 1, 0.0, 0.0)),
        "neon.conv_depthwise_3x3": (depthwise._dw3_kernel,
                                    (f32(64), f32(9), f32(1), True, f32(64), 1, 1, 8, 8, 1, 8, 8,
                                     1, 1, 1, 1, 1, 1, 0.0, 0.0)),
        "neon.conv_winograd": (winograd._input_transform,
                               (f32(64), 0, 1, 1, 8, 8, 4, 4, 1, 1, f32(16 * 16))),
        "neon.swiglu_fused": (swiglu._swiglu_kernel,
                              (f32(64), 4, 16, 16, f32(4096), e, e, False, False, f32(64), 4, 1,
                               16)),
        "_z": (None, z),
    }


def kernels() -> list[str]:
    return [k for k in _examples() if not k.startswith("_")]


def neon_report(name: str) -> AsmReport:
    """Compile the registry kernel ``name`` (see ``kernels()``) for aarch64 Cortex-A76."""
    table = _examples()
    if name not in table or name.startswith("_"):
        raise EdgeOpsError(f"no aarch64 inspection entry for kernel {name!r}; available: "
                           f"{', '.join(kernels())} (add one in targets/neon/asm.py)")
    disp, args = table[name]
    return aarch64_asm(disp, args, name)
