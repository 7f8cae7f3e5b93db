"""Graph passes: standard-ONNX clean-ups, then fusions into ai.edgeops ops.

``run_passes(model) -> (new_model, report)`` applies every registered pass in priority order.
One pass per file, each registered with ``@register_pass``; this module imports them explicitly
(no directory scanning), so adding a pass means adding its file here.

Priorities: clean-ups below 100 (drop_dropout 10, fold_batchnorm 20); fusions from 100
(fuse_groupnorm_act 100, fuse_qdq 105, fuse_conv_act 110, fuse_layernorm_gelu 120, fuse_swiglu 130,
merge_qkv 140: after SwiGLU, which also has two MatMuls on one input).
"""
from edgeops.passes.base import Fusion, Pass, PassError, all_passes, get_pass, register_pass

from edgeops.passes import (  # noqa: F401,E402  (each registers its pass)
    drop_dropout, fold_batchnorm, fuse_groupnorm_act, fuse_conv_act, fuse_layernorm_gelu,
    fuse_swiglu, merge_qkv, fuse_qdq,
)
from edgeops.passes.manager import PassReport, run_passes  # noqa: E402

__all__ = ["Fusion", "Pass", "PassError", "PassReport", "all_passes", "get_pass", "register_pass",
           "run_passes"]
