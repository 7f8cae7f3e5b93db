"""LayerNormalization + GELU -> ai.edgeops::LayerNormGelu.

GELU as the opset-20 ``Gelu`` op (approximate none or tanh) or decomposed in any exporter
ordering: ``0.5 * x * (1 + Erf(x / sqrt 2))`` (-> approximate "none") or
``0.5 * x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))`` (-> "tanh"); the spellings are
recognised by value (see :mod:`edgeops.passes.eltwise`). The LayerNormalization's Mean and
InvStdDev outputs must be unread, and its stash_type the default (fp32 statistics).
"""
from __future__ import annotations

from edgeops.ops import EDGEOPS_DOMAIN
from edgeops.passes.base import Fusion, Pass, label, register_pass
from edgeops.passes.eltwise import find_activation
from edgeops.passes.rewrite import WorkingGraph, attrs_of

APPROXIMATE = {"gelu_erf": "none", "gelu_tanh": "tanh"}


@register_pass
class FuseLayerNormGelu(Pass):
    name = "fuse_layernorm_gelu"
    priority = 120

    def run(self, wg: WorkingGraph) -> list[Fusion]:
        done = []
        for ln in list(wg.nodes):
            if ln.op_type != "LayerNormalization" or ln.domain not in ("", "ai.onnx"):
                continue
            a = attrs_of(ln)
            if (a.get("stash_type", 1) != 1 or not wg.is_float32(ln.input[0])
                    or any(o and (wg.users(o) or o in wg.graph_outputs) for o in ln.output[1:])):
                continue
            found = find_activation(wg, ln.output[0], list(APPROXIMATE))
            if found is None:
                continue
            fn, chain, out = found
            inputs = list(ln.input)
            while not inputs[-1]:     # an omitted trailing Bias
                inputs.pop()
            new = wg.node("LayerNormGelu", inputs, [out], ln.name, EDGEOPS_DOMAIN,
                          axis=int(a.get("axis", -1)), epsilon=float(a.get("epsilon", 1e-5)),
                          approximate=APPROXIMATE[fn])
            if not wg.supported(new):
                continue
            wg.replace([ln, *chain], [new])
            done.append(Fusion(self.name, f"{EDGEOPS_DOMAIN}::LayerNormGelu", (new.name,),
                               tuple(map(label, [ln, *chain]))))
        return done
