"""Cross-compile check without emulation: kernels' pre-optimisation LLVM IR compiled by llvmlite
for aarch64 Cortex-A76 (+neon) uses NEON in the hot loops: ``fmla v*.4s`` for fp32, ``smlal``
for int8. Each check compiles a fresh, uncached kernel (~5-10 s)."""
import re

import pytest

from edgeops.errors import EdgeOpsError
from edgeops.targets.neon import asm


def _loop_blocks(text: str):
    blocks, cur = [], []
    for line in text.splitlines():
        if line and not line.startswith("\t") and line.endswith(":"):
            blocks.append(cur)
            cur = [line]
        else:
            cur.append(line)
    return blocks + [cur]


def _hot_block(report, mnemonic):
    """The call-free basic block with the most ``mnemonic`` instructions: the micro-kernel's K
    loop (epilogue blocks with polynomial activations also use fmla, but call the runtime)."""
    blocks = [b for b in _loop_blocks(report.asm) if not any(ln.startswith("\tbl\t") for ln in b)]
    return max(blocks, key=lambda b: sum(mnemonic in ln for ln in b))


def test_fp32_gemm_microkernel_is_fmla_4s_without_spills():
    r = asm.neon_report("neon.gemm_packed")
    assert r.uses("fmla.4s")
    # the micro-kernel multiplies by a broadcast A element: fmla vD.4s, vB.4s, vA.s[lane]
    # (the epilogue's polynomial activations use plain vector fmla)
    hot = _hot_block(r, ".s[")
    # the 8 x 12 tile: 24 vector FMAs per K step, accumulators never leave registers
    assert sum("fmla" in ln and ".4s" in ln for ln in hot) >= 24
    assert not any(ln.strip().startswith(("str", "stp", "st1")) for ln in hot)


def test_fused_epilogue_store_stays_vector():
    """The last-K-block micro-kernel (bias + Relu/Clip in registers) stores whole q registers:
    no scalar stores of the C tile (``str s``) in the kernel."""
    r = asm.neon_report("neon.gemm_packed")
    assert r.counts["fmla.4s"] >= 48          # both micro-kernel variants are in the code
    # the clamp: a vector compare + bit select per stored register (8 x 3 registers, 2 bounds)
    assert len(re.findall(r"\bfcmgt\s+v\d+\.4s", r.asm)) >= 2 * 24, "no vector clamp"


def test_depthwise_3x3_rows_are_fmla_4s():
    """The direct 3x3 depthwise row kernel: nine vector FMAs per 4 outputs, and stride 2
    de-interleaves with uzp1/uzp2 (or ld2) instead of scalar loads."""
    r = asm.neon_report("neon.conv_depthwise_3x3")
    hot = _hot_block(r, "fmla")
    assert sum("fmla" in ln and ".4s" in ln for ln in hot) >= 9
    assert any(op in r.asm for op in ("uzp1", "uzp2", "ld2\t", "ld2 ")), "stride 2 is not vector"


def test_int8_microkernel_is_smlal():
    r = asm.neon_report("neon.qlinearmatmul")
    assert r.uses("smlal")
    hot = _hot_block(r, "smlal")
    assert sum("smlal" in ln for ln in hot) >= 48     # 8 x 12 x (k even, k odd) / 4 lanes
    assert not any(ln.strip().startswith(("str", "stp", "st1")) for ln in hot)


@pytest.mark.full
@pytest.mark.parametrize("name", [k for k in asm.kernels()
                                  if k not in ("neon.gemm_packed", "neon.qlinearmatmul",
                                               "neon.conv_depthwise_3x3")])
def test_every_inspectable_kernel_vectorises_for_neon(name):
    r = asm.neon_report(name)
    assert r.uses("fmla.4s") or r.uses("fmul.4s") or r.uses("ld1/ldr q"), r.counts


def test_unknown_kernel_names_what_exists():
    with pytest.raises(EdgeOpsError, match="neon.gemm_packed"):
        asm.neon_report("neon.nope")


def test_x86_intrinsics_are_refused():
    tm = asm._target_machine()
    with pytest.raises(EdgeOpsError, match="x86-only"):
        asm.retarget("declare void @llvm.x86.sse2.pause()\n", tm)
