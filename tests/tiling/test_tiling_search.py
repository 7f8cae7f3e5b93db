"""Search: equals the exhaustive optimum on small spaces, meets the two-level bar, returns
consistent top-k / Pareto / JSON, and its best prediction is what ``predict`` says."""
import json

import pytest

from edgeops.errors import TilingError
from edgeops.tiling import exhaustive, naive, predict, search, smith_bound_words

SMALL = [
    ("mini", "gemm:M=48,N=40,K=24,dtype=fp16", None),
    ("mini", "gemm:M=50,N=33,K=40,dtype=int8", None),
    ("flat", "gemm:M=23,N=17,K=30", None),
    ("mini", "conv2d:N=1,C=16,H=6,W=6,K=16,R=3,S=3,pad=1,dtype=fp16", "implicit_gemm"),
    ("flat", "conv2d:N=1,C=4,H=7,W=7,K=5,R=3,S=3,pad=1", "implicit_gemm"),
    ("mini", "softmax:M=10,D=100,dtype=fp16", None),
    ("mini", "pool:N=1,C=4,H=9,W=9,R=3,S=3,stride=2,pad=1,dtype=fp16", None),
]


@pytest.mark.parametrize("objective", ["latency", "traffic"])
@pytest.mark.parametrize("board,spec,dec", SMALL)
def test_search_equals_exhaustive_optimum(board, spec, dec, objective, mini_npu, two_level):
    b = mini_npu if board == "mini" else two_level
    r = search(spec, b, objective=objective, decomposition=dec)
    best, n = exhaustive(spec, b, objective=objective, decomposition=r.decomposition)
    key = (lambda e: e.prediction.latency_s) if objective == "latency" else \
        (lambda e: e.prediction.offchip_bytes)
    assert key(r.best) == pytest.approx(key(best), rel=1e-12)
    assert n >= r.candidates_evaluated > 0


def test_two_level_board_gemm_2048_within_1_2_of_smith_bound(two_level):
    r = search("gemm:M=2048,N=2048,K=2048", two_level, objective="traffic")
    bound_bytes = 4 * smith_bound_words(2048, 2048, 2048, 2 ** 16)
    ratio = r.best.prediction.offchip_bytes / bound_bytes
    assert 1.0 <= ratio <= 1.2, (ratio, r.best.tiling.describe())
    assert r.lower_bound_bytes == int(bound_bytes)


def test_result_shape_and_json(mini_npu):
    calls = []
    r = search("gemm:M=200,N=120,K=96,dtype=fp16", mini_npu, top=4,
               progress=lambda done, total: calls.append((done, total)))
    d = json.loads(json.dumps(r.to_dict()))
    for key in ("best", "compulsory_bytes", "lower_bound_bytes", "candidates_evaluated", "seconds"):
        assert key in d
    for key in ("tiling", "offchip_bytes", "latency_s", "bound"):
        assert key in d["best"]
    assert d["best"]["bound"] in ("compute", "dma", "launch")
    lats = [e.prediction.latency_s for e in r.top]
    assert lats == sorted(lats) and r.top[0] == r.best and len(r.top) <= 4
    front = [(e.prediction.offchip_bytes, e.prediction.latency_s) for e in r.pareto]
    for a in front:   # no point of the front dominates another
        assert not any(b[0] <= a[0] and b[1] <= a[1] and b != a for b in front)
    assert calls and calls[-1][0] == calls[-1][1]
    assert r.best.prediction.offchip_bytes >= r.compulsory_bytes


def test_best_prediction_is_what_predict_says(mini_npu):
    for spec in ("gemm:M=200,N=120,K=96,dtype=fp16",
                 "conv2d:N=1,C=24,H=14,W=14,K=32,R=3,S=3,pad=1,dtype=fp16"):
        r = search(spec, mini_npu, budget=20_000)       # large enough space to go level by level
        again = predict(spec, mini_npu, r.best.tiling).prediction
        assert again == r.best.prediction


def test_search_beats_naive(mini_npu):
    spec = "gemm:M=256,N=256,K=256,dtype=fp16"
    r = search(spec, mini_npu)
    slow = predict(spec, mini_npu, naive(spec, mini_npu)).prediction
    assert r.best.prediction.latency_s < slow.latency_s
    assert r.best.prediction.offchip_bytes < slow.offchip_bytes


def test_chooser_picks_among_decompositions(mini_npu):
    r = search("conv2d:N=1,C=16,H=10,W=10,K=16,R=3,S=3,pad=1,dtype=fp16", mini_npu, budget=20_000)
    assert set(r.alternatives) == {"implicit_gemm", "direct", "im2col", "winograd"}
    assert r.alternatives[r.decomposition] == min(r.alternatives.values())


def test_search_preconditions(mini_npu):
    with pytest.raises(TilingError, match="objective must be one of"):
        search("gemm:M=16,N=16,K=16,dtype=fp16", mini_npu, objective="energy")
    with pytest.raises(TilingError, match="no decomposition 'winograd'"):
        search("gemm:M=16,N=16,K=16,dtype=fp16", mini_npu, decomposition="winograd")
    with pytest.raises(TilingError, match="too large to enumerate"):
        exhaustive("gemm:M=2048,N=2048,K=2048,dtype=fp16", mini_npu, limit=1000)


ALL_KINDS = ["gemm:M=200,N=96,K=130,dtype=fp16,act=gelu", "matmul:B=4,M=64,N=64,K=64,dtype=fp16",
             "conv2d:N=1,C=32,H=28,W=28,K=64,R=3,S=3,pad=1,dtype=fp16,act=silu",
             "conv2d:N=2,C=32,H=28,W=28,K=32,R=3,S=3,pad=1,groups=32,dtype=fp16",
             "conv2d:N=1,C=16,H=20,W=20,K=16,R=3,S=3,pad=2,dilation=2,stride=2,dtype=int8",
             "groupnorm:N=1,C=64,H=28,W=28,groups=32,dtype=fp16,act=silu",
             "layernorm:M=64,D=768,dtype=fp16,act=gelu", "softmax:M=64,D=1000,dtype=fp16",
             "eltwise:numel=100000,inputs=2,ops=1,dtype=fp16",
             "pool:N=1,C=32,H=28,W=28,R=3,S=3,stride=2,pad=1,dtype=fp16",
             "swiglu:M=64,D=256,F=512,dtype=fp16", "gemm:M=100,N=100,K=100,dtype=int8"]


@pytest.mark.parametrize("board", ["mini_npu", "mini_cpu", "ascend-910b", "jetson-orin-nano"])
def test_every_kind_on_every_target_family(board, request):
    import edgeops.boards
    if board.startswith("mini"):
        b = request.getfixturevalue(board)
    elif board in edgeops.boards.names():
        b = edgeops.boards.load(board)
    else:
        pytest.skip(f"bundled board {board} not present")
    from edgeops.tiling import decompositions
    for spec in ALL_KINDS:
        r = search(spec, b, budget=15_000, top=2)
        assert predict(spec, b, r.best.tiling).prediction == r.best.prediction
        assert r.best.prediction.offchip_bytes >= r.compulsory_bytes
        for dec in decompositions(spec, b):
            predict(spec, b, naive(spec, b, dec))
