"""Study (a): ResNet-18 conv1 (1x3x224x224, 64 filters 7x7, stride 2, pad 3, fp16) on ascend-910b --
the naive ("untiled") tiling against the searched one, and the [1,16,16,16] tiling of a field
report (N=1, K=16 output channels, a 16x16 output block), with off-chip bytes, latency, bound and
how many times each operand is read from HBM.

    python benchmarks/study_conv1.py [--json] [--plot DIR]

Writes conv1_bars.png (bytes and latency per tiling) and conv1_heatmap.png (off-chip bytes over
the L1 output block oh x ow around the searched tiling) into DIR.
"""
from __future__ import annotations

import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from study_common import emit, mb, parser, plot_path, role_traffic, us  # noqa: E402

OP = "conv2d:N=1,C=3,H=224,W=224,K=64,R=7,S=7,stride=2,pad=3,dtype=fp16"
BOARD = "ascend-910b"


def field_tiling(best: dict, buffers: int, cores: bool) -> dict:
    """[1,16,16,16]: one image, 16 output channels, a 16x16 output block per L1 tile (the 3 input
    channels padded to one 16-channel fractal), the Cube tile the whole 256-pixel block."""
    t = copy.deepcopy(best)
    t["levels"][0]["tile"].update(g=1, n=1, k=16, c=16, oh=16, ow=16)
    t["levels"][0]["order"] = ["g", "n", "oh", "ow", "k", "c"]
    t["levels"][1]["tile"].update(m=256, n=16, k=16)
    for lv in t["levels"]:
        lv["buffers"] = {r: buffers for r in lv["buffers"]}
    t["split"] = {"oh": 7} if cores else {}       # 112 / 16 = 7 blocks of output rows
    return t


def main(argv=None) -> int:
    args = parser(__doc__).parse_args(argv)
    from edgeops import tiling as T
    from edgeops.tiling.bounds import compulsory_bytes
    sp = T.parse_spec(OP)
    e = 2
    sizes = {"A": 3 * 224 * 224 * e, "B": 64 * 3 * 7 * 7 * e, "C": 64 * 112 * 112 * e}
    best = T.search(OP, BOARD)
    traffic = T.search(OP, BOARD, objective="traffic")
    cases = [("naive (untiled)", T.naive(OP, BOARD))]
    nv1 = T.naive(OP, BOARD).to_dict()
    nv1["split"] = {}
    cases.append(("naive, one core", T.Tiling.from_dict(nv1)))
    for d in ("direct", "im2col"):
        cases.append((f"naive {d}", T.naive(OP, BOARD, d)))
    bd = best.best.tiling.to_dict()
    cases.append(("[1,16,16,16], 1 buffer, 1 core", T.Tiling.from_dict(field_tiling(bd, 1, False))))
    cases.append(("[1,16,16,16], 1 buffer, 7 cores", T.Tiling.from_dict(field_tiling(bd, 1, True))))
    cases.append(("[1,16,16,16], 2 buffers, 7 cores", T.Tiling.from_dict(field_tiling(bd, 2, True))))
    cases.append(("searched (latency)", best.best.tiling))
    cases.append(("searched (traffic)", traffic.best.tiling))
    rows, doc_rows = [], []
    for name, t in cases:
        p = T.predict(OP, BOARD, t).prediction
        roles = role_traffic(OP, BOARD, t) if t.decomposition == "implicit_gemm" else {}
        reread = {r: roles[r] / sizes[r] for r in ("A", "B") if r in roles}
        doc_rows.append({"tiling": name, "decomposition": t.decomposition, "describe": t.describe(),
                         "offchip_bytes": p.offchip_bytes, "latency_s": p.latency_s, "bound": p.bound,
                         "cube_utilisation": p.utilisation.get("cube"), "reads_per_input": reread.get("A"),
                         "reads_per_weight": reread.get("B"), "tiling_json": t.to_dict()})
        rows.append([name, t.decomposition, mb(p.offchip_bytes), us(p.latency_s), p.bound,
                     f"{reread['A']:.1f}x" if "A" in reread else "-",
                     f"{reread['B']:.1f}x" if "B" in reread else "-"])
    doc = {"op": sp.signature, "board": BOARD, "flops": sp.flops,
           "compulsory_bytes": compulsory_bytes(sp), "operand_bytes": sizes,
           "search": {"candidates_evaluated": best.candidates_evaluated, "seconds": best.seconds,
                      "alternatives": best.alternatives},
           "field_report": {"untiled_ms": 23.7, "tiled_ms": 8.2, "tiling": "[1,16,16,16]"},
           "rows": doc_rows, "figures": []}
    base = doc_rows[0]
    doc["naive_over_searched"] = {"bytes": base["offchip_bytes"] / doc_rows[-2]["offchip_bytes"],
                                  "latency": base["latency_s"] / doc_rows[-2]["latency_s"]}
    f = plot_path(args, "conv1_bars.png")
    if f:
        from edgeops.simulator.plot import bars
        bars({r["tiling"].replace(", ", "\n").replace(" (", "\n("): {"off-chip MB": r["offchip_bytes"] / 1e6,
                                                "latency us": r["latency_s"] * 1e6}
              for r in doc_rows}, f, ylabel="MB / us (log)", log=True,
             title=f"ResNet-18 conv1 on {BOARD}: off-chip bytes and latency per tiling")
        doc["figures"].append(f)
    f = plot_path(args, "conv1_heatmap.png")
    if f:
        from edgeops import boards
        from edgeops.simulator.plot import heatmap
        from edgeops.tiling.grid import tile_grid
        g = tile_grid(OP, boards.load(BOARD), best.best.tiling)
        heatmap(g, f, title=f"conv1 on {BOARD}: off-chip bytes over the L1 output block "
                            f"(star: searched tiling)")
        doc["figures"].append(f)
    emit(args, doc, [(f"{sp.signature} on {BOARD}: {sp.flops / 1e6:.0f} MFLOP, compulsory "
                      f"{mb(doc['compulsory_bytes'])}",
                      ["tiling", "decomposition", "off-chip", "latency", "bound", "input reads",
                       "weight reads"], rows)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
