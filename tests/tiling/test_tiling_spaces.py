"""Op spec strings -> iteration spaces; every malformed spec is one OpSpecError naming the key."""
import pytest

from edgeops.errors import OpSpecError
from edgeops.tiling import make_space, parse_spec


@pytest.mark.parametrize("spec,flops", [
    ("gemm:M=1024,N=1024,K=1024,dtype=fp16", 2 * 1024 ** 3),
    ("conv2d:N=1,C=3,H=224,W=224,K=64,R=7,S=7,stride=2,pad=3", 2 * 64 * 112 * 112 * 3 * 49),
    ("conv2d:N=1,C=32,H=56,W=56,K=32,R=3,S=3,pad=1,groups=32", 2 * 32 * 56 * 56 * 9),
    ("groupnorm:N=1,C=64,H=56,W=56,groups=32", 8 * 64 * 56 * 56),
    ("softmax:M=128,D=1000", 5 * 128 * 1000),
    ("eltwise:numel=1000,inputs=2,ops=3", 3000),
    ("swiglu:M=4,D=8,F=16", 4 * 4 * 8 * 16 + 6 * 4 * 16),
    ("matmul:B=2,M=3,N=4,K=5", 2 * 2 * 3 * 4 * 5),
])
def test_spec_parses_and_counts_flops(spec, flops):
    sp = parse_spec(spec)
    assert sp.flops == flops
    assert parse_spec(sp.signature) == sp        # the signature is a canonical spec


def test_conv_geometry_and_defaults():
    sp = parse_spec("conv2d:N=1,C=3,H=224,W=224,K=64,R=7,S=7,stride=2,pad=3")
    assert sp.conv_out == (112, 112)
    assert sp["dilation"] == 1 and sp["groups"] == 1 and sp["pad_end"] == 3 and sp.dtype == "fp32"


@pytest.mark.parametrize("spec,match", [
    ("gemm:M=64,N=64", "missing key 'K'"),
    ("gemm:M=64,N=64,K=64,Q=1", "unknown key 'Q'; allowed keys: M, N, K"),
    ("gemm:M=0,N=64,K=64", "M=0 must be a positive integer"),
    ("gemm:M=-3,N=64,K=64", "M=-3"),
    ("gemm:M=six,N=64,K=64", "M='six' must be an integer"),
    ("gemm:M=64,N=64,K=64,dtype=bf16", "dtype='bf16' is not allowed; use one of fp32, fp16, int8"),
    ("conv2d:N=1,C=3,H=4,W=4,K=8,R=7,S=7", "does not fit"),
    ("conv2d:N=1,C=6,H=8,W=8,K=8,R=3,S=3,groups=4", "groups=4 must divide"),
    ("groupnorm:N=1,C=10,H=2,W=2,groups=4", "must divide C"),
    ("fft:N=8", "unknown op kind 'fft'"),
    ("gemm", "must look like KIND:KEY=VALUE"),
    ("gemm:M=1,M=2,N=1,K=1", "given twice"),
    ("gemm:M", "is not KEY=VALUE"),
])
def test_bad_specs_raise_one_clear_error(spec, match):
    with pytest.raises(OpSpecError, match=match):
        parse_spec(spec)


def test_make_space_is_the_python_form():
    assert make_space("gemm", M=8, N=8, K=8) == parse_spec("gemm:M=8,N=8,K=8")
