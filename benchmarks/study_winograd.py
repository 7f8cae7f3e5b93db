"""Study (d): Winograd F(2x2, 3x3) versus im2col (and, for reference, implicit GEMM and direct
convolution) for 3x3 and 7x7 kernels: executed FLOPs, off-chip bytes and predicted latency on a
CPU board (rk3588, fp32) and on the NPU (ascend-910b, fp16). Each decomposition gets its own
searched tiling.

F(2x2, 3x3) exists for 3x3 stride-1 kernels only. For the 7x7 layer the study composes an
estimate: the kernel zero-padded to 9x9 is nine 3x3 sub-kernels on shifted inputs; one pass
writes the nine shifted input transforms, one batched GEMM (16 x [T x 9C] @ [9C x K]) sums the
nine products in the transform domain, one pass does the output transform. The GEMM is searched
like any matmul; the two passes are the simulator's streaming passes.

    python benchmarks/study_winograd.py [--json] [--plot DIR]

Writes winograd.png into DIR.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from study_common import emit, mb, parser, plot_path, us  # noqa: E402

LAYERS = {"3x3 64ch 56x56": "conv2d:N=1,C=64,H=56,W=56,K=64,R=3,S=3,pad=1",
          "3x3 256ch 14x14": "conv2d:N=1,C=256,H=14,W=14,K=256,R=3,S=3,pad=1",
          "7x7 64ch 56x56": "conv2d:N=1,C=64,H=56,W=56,K=64,R=7,S=7,pad=3"}
BOARDS = {"rk3588": "fp32", "ascend-910b": "fp16"}


def executed_flops(p) -> int:
    """FLOPs the decomposition executes: its GEMM plus its fixed passes (transforms)."""
    if p.gemm_dims:
        M, N, K, B = p.gemm_dims
        return 2 * M * N * K * B + sum(f.flops for f in p.fixed)
    return p.space.flops


def winograd_7x7(op: str, board: str) -> dict:
    """The composed nine-sub-kernel Winograd estimate (module docstring)."""
    from edgeops import boards
    from edgeops import tiling as T
    from edgeops.simulator.hardware import ELEM_BYTES, from_board
    from edgeops.simulator.passes import stream_pass
    sp = T.parse_spec(op)
    hw = from_board(boards.load(board))
    e = ELEM_BYTES[sp.dtype]
    N, C, H, W, K = (sp[k] for k in ("N", "C", "H", "W", "K"))
    OH, OW = sp.conv_out
    T_ = N * math.ceil(OH / 2) * math.ceil(OW / 2)
    subs = math.ceil(sp["R"] / 3) * math.ceil(sp["S"] / 3)
    tin = stream_pass(hw, "input transforms", N * C * H * W * e, subs * 16 * T_ * C * e,
                      subs * 32 * T_ * C, sp.dtype)
    gemm = T.search(f"matmul:B=16,M={T_},N={K},K={subs * C},dtype={sp.dtype}", board)
    tout = stream_pass(hw, "output transform", 16 * T_ * K * e, N * K * OH * OW * e, 24 * T_ * K,
                       sp.dtype)
    off = hw.offchip.name
    offchip = lambda r: sum(v for k, v in r.hop_bytes.items() if off in k.split("->"))
    g = gemm.best.prediction
    return {"decomposition": f"winograd ({subs} 3x3 sub-kernels)",
            "flops": 2 * 16 * T_ * K * subs * C + tin.flops + tout.flops,
            "offchip_bytes": offchip(tin) + g.offchip_bytes + offchip(tout),
            "latency_s": tin.latency_s + g.latency_s + tout.latency_s,
            "bound": g.bound + " (GEMM)", "launches": 3, "composed": True}


def main(argv=None) -> int:
    args = parser(__doc__).parse_args(argv)
    from edgeops import tiling as T
    rows, doc_rows = [], []
    for board, dt in BOARDS.items():
        for label, base in LAYERS.items():
            op = f"{base},dtype={dt}"
            sp = T.parse_spec(op)
            results = []
            for d in T.decompositions(op, board):
                r = T.search(op, board, decomposition=d)
                p = T.problem_for(op, board, d)
                pr = r.best.prediction
                results.append({"decomposition": d, "flops": executed_flops(p),
                                "offchip_bytes": pr.offchip_bytes, "latency_s": pr.latency_s,
                                "bound": pr.bound, "launches": 1 + len(p.fixed),
                                "tiling": r.best.tiling.describe()})
            if sp["R"] != 3:
                results.append(winograd_7x7(op, board))
            for x in results:
                x.update({"board": board, "layer": label, "op": sp.signature,
                          "useful_flops": sp.flops})
                doc_rows.append(x)
                rows.append([board, label, x["decomposition"], f"{x['flops'] / 1e6:.0f}",
                             f"{x['flops'] / sp.flops:.2f}", mb(x["offchip_bytes"]),
                             us(x["latency_s"]), x["bound"]])
    doc = {"rows": doc_rows, "figures": []}
    f = plot_path(args, "winograd.png")
    if f:
        from edgeops.simulator.plot import bars
        groups = {}
        for x in doc_rows:
            name = "winograd" if x["decomposition"].startswith("winograd") else x["decomposition"]
            groups.setdefault(f"{x['board']}\n{x['layer']}", {})[name] = x["latency_s"] * 1e6
        bars(groups, f, ylabel="predicted latency (us, log)", log=True,
             title="Winograd F(2x2,3x3) vs im2col (and implicit GEMM, direct) per layer and board")
        doc["figures"].append(f)
    emit(args, doc, [("convolution decompositions (each with its searched tiling)",
                      ["board", "layer", "decomposition", "MFLOP run", "x useful", "off-chip",
                       "latency", "bound"], rows)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
