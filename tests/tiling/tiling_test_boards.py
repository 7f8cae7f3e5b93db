"""Board files written by the tests themselves, so the tests do not depend on the bundled
figures. ``two_level`` is the bar's board: DRAM plus one on-chip buffer of S = 2**16 fp32 words
that holds all three GEMM operands."""
from __future__ import annotations

from pathlib import Path

import edgeops.boards

TWO_LEVEL = """
schema = 1
name = "two-level"
description = "test: DRAM + one 256 KiB on-chip buffer (2**16 fp32 words), one core"
kind = "npu"
targets = ["ascend"]
architecture = "combined"
[clock]
hz = 1.0e9
source = "test figure"
[launch]
overhead_s = 1.0e-6
source = "test figure"
[[core]]
name = "pe"
count = 1
source = "test figure"
[[unit]]
name = "mac"
core = "pe"
per_core = 1
flops_per_cycle = { fp32 = 64, fp16 = 128, int8 = 256 }
source = "test figure"
[[memory]]
name = "dram"
size_bytes = 1073741824
scope = "chip"
offchip = true
alignment_bytes = 4
source = "test figure"
[[memory]]
name = "buf"
size_bytes = 262144
scope = "pe"
offchip = false
alignment_bytes = 4
source = "test figure"
[[path]]
src = "dram"
dst = "buf"
engine = "dma_in"
bandwidth_bytes_per_s = 1.0e10
setup_latency_s = 1.0e-8
burst_bytes = 4
shared = true
source = "test figure"
[[path]]
src = "buf"
dst = "dram"
engine = "dma_out"
bandwidth_bytes_per_s = 1.0e10
setup_latency_s = 1.0e-8
burst_bytes = 4
shared = true
source = "test figure"
"""

# an Ascend-like NPU with small buffers (so that exhaustive enumeration stays small)
MINI_NPU = """
schema = 1
name = "mini-npu"
description = "test: a small separated Ascend-style NPU (2 AIC, 4 AIV)"
kind = "npu"
targets = ["ascend"]
architecture = "separated"
[clock]
hz = 1.0e9
source = "test figure"
[launch]
overhead_s = 2.0e-6
source = "test figure"
[[core]]
name = "aic"
count = 2
source = "test figure"
[[core]]
name = "aiv"
count = 4
source = "test figure"
[[unit]]
name = "cube"
core = "aic"
per_core = 1
flops_per_cycle = { fp16 = 8192, int8 = 16384, fp32 = 2048 }
source = "test figure"
[[unit]]
name = "vector"
core = "aiv"
per_core = 1
flops_per_cycle = { fp16 = 128, fp32 = 64 }
source = "test figure"
""" + "".join(f"""
[[memory]]
name = "{n}"
size_bytes = {s}
scope = "{sc}"
offchip = {str(o).lower()}
alignment_bytes = {a}
source = "test figure"
""" for n, s, sc, o, a in [("gm", 1 << 30, "chip", True, 32), ("l1", 32768, "aic", False, 32),
                           ("l0a", 4096, "aic", False, 512), ("l0b", 4096, "aic", False, 512),
                           ("l0c", 8192, "aic", False, 64), ("ub", 16384, "aiv", False, 32)]) + "".join(f"""
[[path]]
src = "{s}"
dst = "{d}"
engine = "{e}"
bandwidth_bytes_per_s = {bw}
setup_latency_s = {lat}
burst_bytes = {bu}
shared = {str(sh).lower()}
source = "test figure"
""" for s, d, e, bw, lat, bu, sh in [("gm", "l1", "mte2", 1e11, 1e-7, 64, True),
                                     ("l1", "l0a", "mte1", 5e11, 1e-8, 512, False),
                                     ("l1", "l0b", "mte1", 2.5e11, 1e-8, 512, False),
                                     ("l0c", "gm", "fixpipe", 1e11, 1e-7, 64, True),
                                     ("gm", "ub", "mte2", 1e11, 1e-7, 64, True),
                                     ("ub", "gm", "mte3", 1e11, 1e-7, 64, True)])


def write(tmp: Path, name: str, text: str):
    path = Path(tmp) / f"{name}.toml"
    path.write_text(text)
    return edgeops.boards.load(str(path))


def pipe_board(setup_s: float = 0.0) -> str:
    """One core, one 64 KiB buffer, copy-in = compute = copy-out for a 1-op fp16 stream."""
    return f"""
schema = 1
name = "pipe"
description = "test: equal copy-in / compute / copy-out stages"
kind = "npu"
targets = ["ascend"]
architecture = "combined"
[clock]
hz = 1.0e9
source = "test figure"
[launch]
overhead_s = 0.0
source = "test figure"
[[core]]
name = "pe"
count = 1
source = "test figure"
[[unit]]
name = "vec"
core = "pe"
per_core = 1
flops_per_cycle = {{ fp16 = 1.0, fp32 = 1.0 }}
source = "test figure"
[[memory]]
name = "dram"
size_bytes = 1073741824
scope = "chip"
offchip = true
alignment_bytes = 2
source = "test figure"
[[memory]]
name = "buf"
size_bytes = 65536
scope = "pe"
offchip = false
alignment_bytes = 2
source = "test figure"
[[path]]
src = "dram"
dst = "buf"
engine = "in"
bandwidth_bytes_per_s = 2.0e9
setup_latency_s = {setup_s}
burst_bytes = 2
shared = false
source = "test figure"
[[path]]
src = "buf"
dst = "dram"
engine = "out"
bandwidth_bytes_per_s = 2.0e9
setup_latency_s = {setup_s}
burst_bytes = 2
shared = false
source = "test figure"
"""

MINI_CPU = """
schema = 1
name = "mini-cpu"
description = "test: 2 cores, 256 KiB L2 and 32 KiB L1D per core"
kind = "cpu"
targets = ["neon"]
isa = ["armv8.2-a", "asimd"]
[clock]
hz = 2.0e9
source = "test figure"
[launch]
overhead_s = 5.0e-6
source = "test figure"
[[core]]
name = "cpu"
count = 2
source = "test figure"
[[unit]]
name = "simd"
core = "cpu"
per_core = 1
flops_per_cycle = { fp32 = 16, fp16 = 32, int8 = 64 }
source = "test figure"
[[memory]]
name = "dram"
size_bytes = 1073741824
scope = "chip"
offchip = true
alignment_bytes = 64
source = "test figure"
[[memory]]
name = "l2"
size_bytes = 262144
scope = "cpu"
offchip = false
alignment_bytes = 64
source = "test figure"
[[memory]]
name = "l1d"
size_bytes = 32768
scope = "cpu"
offchip = false
alignment_bytes = 64
source = "test figure"
[[path]]
src = "dram"
dst = "l2"
engine = "cache"
bandwidth_bytes_per_s = 2.0e10
setup_latency_s = 1.0e-7
burst_bytes = 64
shared = true
source = "test figure"
[[path]]
src = "l2"
dst = "l1d"
engine = "cache"
bandwidth_bytes_per_s = 6.4e10
setup_latency_s = 5.0e-9
burst_bytes = 64
shared = false
source = "test figure"
[peer]
gemm_efficiency = 0.6
stream_efficiency = 0.6
op_overhead_s = 5e-6
source = "test figure"
"""
