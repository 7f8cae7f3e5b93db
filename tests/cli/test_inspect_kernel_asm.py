"""`edgeops inspect-kernel NAME --target neon --asm`: the kernel cross-compiled for Cortex-A76."""
import json

from edgeops.cli import main


def test_neon_asm_shows_fmla_on_4s_vectors(capsys):
    assert main(["inspect-kernel", "neon.gemm_packed", "--target", "neon", "--asm", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["asm"]["cpu"] == "cortex-a76" and doc["asm"]["counts"]["fmla.4s"] > 0
    assert "fmla\tv" in doc["asm"]["text"] or "fmla v" in doc["asm"]["text"]


def test_asm_on_a_non_neon_kernel_is_a_one_line_error(capsys):
    assert main(["inspect-kernel", "reference.Relu", "--asm"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--asm is for neon kernels" in err
