"""The emulator rejects what the hardware cannot do, naming the instruction and the numbers."""
import numpy as np
import pytest

from edgeops import tiling as T
from edgeops.errors import EdgeOpsError, TilingError
from edgeops.targets.ascend import EmulatorError, machine
from edgeops.targets.ascend.emulate import execute
from edgeops.targets.ascend.emulator import Emulator
from edgeops.targets.ascend.isa import (Barrier, Copy, Fixpipe, GmRef, InitBuffer, Load2D, Mmad,
                                        Ref, SetFlag, WaitFlag)
from edgeops.targets.ascend.lower import lower
from edgeops.targets.ascend.reference import inputs_and_reference

B910 = "ascend-910b"


def run(code, core="aic", gm=None, outputs=()):
    m = machine(B910)
    gm = gm if gm is not None else {"A": np.ones((32, 32), np.float16)}
    emu = Emulator(m, gm, outputs)
    emu.run(code, core)
    return emu


def test_emulator_error_is_an_edgeops_error():
    assert issubclass(EmulatorError, EdgeOpsError)


def test_buffer_one_block_past_ub_capacity_is_rejected_with_the_numbers():
    cap = machine(B910).capacity["ub"]
    with pytest.raises(EmulatorError, match=rf"instruction #0 .*UB queue 'x' needs 1 x {cap + 32:,} B"
                                            rf".*> capacity {cap:,} B"):
        run([InitBuffer("ub", "x", 0, cap + 32, 1)], core="aiv")
    run([InitBuffer("ub", "x", 0, cap, 1)], core="aiv")        # exactly full is fine


def _eltwise_tiling(t):
    lv = {"name": "ub", "tile": {"e": t}, "order": ["e"], "buffers": {"in": 2, "out": 2},
          "holds": {"in": "ub", "out": "ub", "A": "ub", "B": "ub", "C": "ub"}}
    return T.Tiling.from_dict({"version": 1, "op": "eltwise", "decomposition": "stream",
                               "target": "ascend", "levels": [lv], "split": {}})


def test_ub_tile_one_block_too_large_is_rejected_by_emulator_and_by_legality():
    """2 in + 2 out fp16 buffers of t elements fill the 192 KiB UB exactly at t = 24576; the next
    legal size (one more 32-byte block per buffer) overflows it -- the emulator refuses the
    program on its own, and the tiling check refuses the tiling."""
    spec = "eltwise:numel=100000,inputs=1,ops=1,dtype=fp16"
    sp = T.parse_spec(spec)
    full, over = _eltwise_tiling(24576), _eltwise_tiling(24576 + 16)
    gm, _ = inputs_and_reference(sp, np.random.default_rng(0))
    execute(sp, full, B910, gm)
    gm, _ = inputs_and_reference(sp, np.random.default_rng(0))
    with pytest.raises(EmulatorError, match=r"UB queue 'out' needs 2 x 49,184 B .*ending at "
                                            r"196,736 B > capacity 196,608 B"):
        execute(sp, over, B910, gm)
    with pytest.raises(TilingError, match="UB"):
        T.check(T.problem_for(spec, B910), over)


def test_l0a_buffer_not_512_byte_aligned_is_rejected():
    # 20 rows x 16 fp16 = 640 B: not a whole number of 512-byte fractals
    with pytest.raises(EmulatorError, match=r"L0A queue 'a0': buffers of 640 B at 0 are not 512 B aligned"):
        run([InitBuffer("l0a", "a0", 0, 640, 2)])


def test_l0a_tile_not_whole_fractals_is_rejected():
    code = [InitBuffer("l1", "a1", 0, 1024, 1), InitBuffer("l0a", "a0", 0, 1024, 1),
            Copy("MTE2", GmRef("A", (slice(0, 16), slice(0, 32))), Ref("l1", 0, (16, 32), np.float16),
                 path="gm->l1"),
            SetFlag("MTE2", "MTE1", 0), WaitFlag("MTE1", "MTE2", 0),
            Load2D(Ref("l1", 0, (16, 32), np.float16), 0, 0, 16, 20, Ref("l0a", 0, (16, 20), np.float16), "A")]
    with pytest.raises(EmulatorError, match=r"instruction #5 \(Load2D on MTE1\).*L0A tile of 16 x 20 "
                                            r"float16 is not whole 16 x 16 fractals \(512 B\)"):
        run(code)


def test_l0a_tile_at_misaligned_address_is_rejected():
    code = [InitBuffer("l0a", "a0", 0, 2048, 1),
            Mmad(Ref("l0c", 0, (16, 16), np.float32), Ref("l0a", 256, (16, 16), np.float16),
                 Ref("l0b", 0, (16, 16), np.float16), True)]
    with pytest.raises(EmulatorError, match=r"L0A address 256 is not 512 B aligned"):
        run(code)


def test_out_of_bounds_access_is_rejected():
    code = [InitBuffer("l1", "a1", 0, 512, 1),
            Copy("MTE2", GmRef("A", (slice(0, 16), slice(0, 32))), Ref("l1", 0, (16, 32), np.float16),
                 path="gm->l1")]
    with pytest.raises(EmulatorError, match=r"L1 bytes \[0, 1024\) lie outside every buffer "
                                            r"\(buffers: a1 \[0, 512\)\)"):
        run(code)


def test_read_of_never_written_buffer_is_rejected():
    code = [InitBuffer("l1", "a1", 0, 1024, 1), InitBuffer("l0a", "a0", 0, 512, 1),
            Load2D(Ref("l1", 0, (16, 16), np.float16), 0, 0, 16, 16, Ref("l0a", 0, (16, 16), np.float16), "A")]
    with pytest.raises(EmulatorError, match=r"reads 256 element\(s\) of l1@0\[16, 16\]:float16 that "
                                            r"nothing has written"):
        run(code)


def test_missing_flag_between_pipes_is_a_race():
    code = [InitBuffer("l1", "a1", 0, 1024, 1), InitBuffer("l0a", "a0", 0, 512, 1),
            Copy("MTE2", GmRef("A", (slice(0, 16), slice(0, 16))), Ref("l1", 0, (16, 16), np.float16),
                 path="gm->l1"),
            Load2D(Ref("l1", 0, (16, 16), np.float16), 0, 0, 16, 16, Ref("l0a", 0, (16, 16), np.float16), "A")]
    with pytest.raises(EmulatorError, match=r"race: MTE1 reads the L1 buffer @0 that MTE2 wrote "
                                            r"\(instruction #2\)"):
        run(code)


def test_wait_without_set_would_deadlock():
    with pytest.raises(EmulatorError, match=r"WaitFlag\(MTE2->MTE1, event 3\) has no SetFlag"):
        run([WaitFlag("MTE1", "MTE2", 3)])


def test_flag_set_but_never_waited_is_reported():
    with pytest.raises(EmulatorError, match="flags set but never waited"):
        run([SetFlag("MTE2", "MTE1", 0), Barrier()])


def test_fixpipe_cannot_apply_silu():
    code = [InitBuffer("l0c", "c", 0, 1024, 1), InitBuffer("l0a", "a", 0, 512, 1),
            InitBuffer("l0b", "b", 0, 512, 1)]
    gm = {"P": np.ones((16, 16), np.float32), "Y": np.zeros((16, 16), np.float16)}
    # partial sums straight into L0C (no Cube needed to have something to store)
    code += [Copy("FIX", GmRef("P", (slice(0, 16), slice(0, 16))), Ref("l0c", 0, (16, 16), np.float32),
                  path="gm->l0c"),
             Fixpipe(Ref("l0c", 0, (16, 16), np.float32), 16, 16, GmRef("Y", (slice(0, 16), slice(0, 16))),
                     np.float16, act="silu", path="l0c->gm")]
    with pytest.raises(EmulatorError, match="FixPipe applies bias, Relu, Relu6, Clip and quantisation; "
                                            "'silu' needs the Vector unit"):
        run(code, gm=gm, outputs=("Y",))


def test_dma_does_not_convert_dtypes():
    code = [InitBuffer("l1", "a1", 0, 2048, 1),
            Copy("MTE2", GmRef("A", (slice(0, 16), slice(0, 16))), Ref("l1", 0, (16, 16), np.float32),
                 path="gm->l1")]
    with pytest.raises(EmulatorError, match="a DMA moves bytes: it cannot convert float16 to float32"):
        run(code)


def test_overlapping_buffers_are_rejected():
    with pytest.raises(EmulatorError, match=r"L1 queue 'b' \[512, 1536\) overlaps 'a' \[0, 1024\)"):
        run([InitBuffer("l1", "a", 0, 512, 2), InitBuffer("l1", "b", 512, 512, 2)])


def test_board_without_npu_is_rejected():
    with pytest.raises(EmulatorError, match="not an Ascend-style NPU"):
        machine("rpi5")


def test_gemm_program_uses_board_capacity_exactly(rng):
    """A tiling that the legality check accepts always fits the emulator's buffers (they are
    sized from the same board file, independently)."""
    from edgeops.targets.ascend.sweep import random_tilings
    spec = "gemm:M=200,N=150,K=300,dtype=fp16"
    sp = T.parse_spec(spec)
    for til in random_tilings(spec, B910, 6, seed=5):
        gm, _ = inputs_and_reference(sp, rng)
        low = lower(sp, til, machine(B910), gm)
        for launch in low.launches:
            emu = Emulator(machine(B910), gm, launch.outputs)
            for core, code in launch.programs:
                emu.run(code, core)
