"""Operators as iteration spaces: the :class:`Space` value and the op spec strings that name one.

A space is the operator's problem, independent of any board: its kind, its dims and the dtype.
How the space becomes a loop nest (and which decompositions exist) is in ``problem.py``.

Spec strings, as on the command line (``KIND:KEY=VALUE,...``)::

    gemm:M=1024,N=1024,K=1024,dtype=fp16[,act=relu,bias=1]
    matmul:B=8,M=128,N=64,K=64[,bshared=1]          batched; bshared: one B for every batch
    conv2d:N=1,C=3,H=224,W=224,K=64,R=7,S=7,stride=2,pad=3[,dilation=1,groups=1,act=relu]
    groupnorm:N=1,C=64,H=56,W=56,groups=32[,act=silu]
    layernorm:M=128,D=768[,act=gelu]      softmax:M=128,D=1024
    eltwise:numel=1000000,inputs=2,ops=1  pool:N=1,C=64,H=112,W=112,R=3,S=3,stride=2,pad=1,mode=max
    swiglu:M=128,D=768,F=2048

Every kind also takes ``dtype`` (fp32 default, fp16, int8). Int8 GEMMs and convolutions
accumulate in int32 and, unless quantised by a fused epilogue, write int32.
"""
from __future__ import annotations

import math

from dataclasses import dataclass

from edgeops.errors import OpSpecError

DTYPES = ("fp32", "fp16", "int8")
ACTS = ("none", "relu", "relu6", "clip", "silu", "gelu", "hardswish", "sigmoid", "tanh", "quant")
# flops per element of each activation (as edgeops.ops counts them)
ACT_FLOPS = {"none": 0, "relu": 1, "relu6": 2, "clip": 2, "silu": 5, "gelu": 8, "hardswish": 5,
             "sigmoid": 4, "tanh": 4, "quant": 3}
_S = {"dtype": ("fp32", DTYPES), "act": ("none", ACTS)}
# kind -> (required keys, optional keys with (default, allowed values or None for a positive int))
KINDS: dict[str, tuple[tuple[str, ...], dict]] = {
    "gemm": (("M", "N", "K"), {**_S, "bias": (0, (0, 1))}),
    "matmul": (("M", "N", "K"), {"B": (1, None), "bshared": (0, (0, 1)), "dtype": _S["dtype"]}),
    "conv2d": (("N", "C", "H", "W", "K", "R", "S"),
               {"stride": (1, None), "pad": (0, "nonneg"), "pad_end": (-1, "nonneg"),
                "dilation": (1, None), "groups": (1, None), **_S}),
    "groupnorm": (("N", "C", "H", "W", "groups"), dict(_S)),
    "layernorm": (("M", "D"), dict(_S)),
    "softmax": (("M", "D"), {"dtype": _S["dtype"]}),
    "eltwise": (("numel",), {"inputs": (1, None), "ops": (1, "nonneg"), "dtype": _S["dtype"]}),
    "pool": (("N", "C", "H", "W", "R", "S"),
             {"stride": (1, None), "pad": (0, "nonneg"), "mode": ("max", ("max", "avg")),
              "dtype": _S["dtype"]}),
    "swiglu": (("M", "D", "F"), {"dtype": _S["dtype"]}),
}


@dataclass(frozen=True)
class Space:
    """An operator's iteration space: ``kind`` and its parameters (``params`` in spec key order)."""
    kind: str
    params: tuple[tuple[str, object], ...]

    def __getitem__(self, key):
        return dict(self.params)[key]

    def get(self, key, default=None):
        return dict(self.params).get(key, default)

    @property
    def dtype(self) -> str:
        return self["dtype"]

    @property
    def signature(self) -> str:
        """Canonical spec string: the op's identity in the tuning cache."""
        return f"{self.kind}:" + ",".join(f"{k}={v}" for k, v in self.params)

    def __str__(self) -> str:
        return self.signature

    # ---- derived geometry --------------------------------------------------------------------
    @property
    def conv_out(self) -> tuple[int, int]:
        """(OH, OW) of conv2d / pool."""
        d = self.get("dilation", 1)
        pb, pe = self["pad"], self.get("pad_end", self["pad"])
        oh = (self["H"] + pb + pe - ((self["R"] - 1) * d + 1)) // self["stride"] + 1
        ow = (self["W"] + pb + pe - ((self["S"] - 1) * d + 1)) // self["stride"] + 1
        return oh, ow

    @property
    def flops(self) -> int:
        """Useful floating-point (or integer) operations of the operator."""
        k, g = self.kind, self.get
        act = ACT_FLOPS.get(g("act", "none"), 0)
        if k == "gemm":
            mn = self["M"] * self["N"]
            return 2 * mn * self["K"] + mn * (act + g("bias", 0))
        if k == "matmul":
            return 2 * self["B"] * self["M"] * self["N"] * self["K"]
        if k == "conv2d":
            oh, ow = self.conv_out
            out = self["N"] * self["K"] * oh * ow
            return 2 * out * (self["C"] // self["groups"]) * self["R"] * self["S"] + out * act
        if k == "swiglu":
            return 4 * self["M"] * self["D"] * self["F"] + 6 * self["M"] * self["F"]
        if k == "pool":
            oh, ow = self.conv_out
            return self["N"] * self["C"] * oh * ow * self["R"] * self["S"]
        if k == "eltwise":
            return self["numel"] * self["ops"]
        per = {"softmax": 5, "layernorm": 8, "groupnorm": 8}[k]
        return self.numel * (per + act)

    @property
    def numel(self) -> int:
        if self.kind in ("layernorm", "softmax"):
            return self["M"] * self["D"]
        if self.kind == "groupnorm":
            return self["N"] * self["C"] * self["H"] * self["W"]
        return self.get("numel", 0)


MAX_EXTENT = 2**31 - 1      # one dimension (ONNX Runtime and the kernels index with int32 here)
MAX_POINTS = 2**60          # the product of an op's extents: traffic/flop counts stay in int64


def make_space(kind: str, **params) -> Space:
    """Validate ``params`` for ``kind`` and fill defaults (the Python form of a spec string)."""
    if kind not in KINDS:
        raise OpSpecError(f"unknown op kind {kind!r}; known: {', '.join(KINDS)}")
    req, opt = KINDS[kind]
    allowed = list(req) + list(opt)
    unknown = [k for k in params if k not in allowed]
    if unknown:
        raise OpSpecError(f"{kind}: unknown key {unknown[0]!r}; allowed keys: {', '.join(allowed)}")
    missing = [k for k in req if k not in params]
    if missing:
        raise OpSpecError(f"{kind}: missing key {missing[0]!r} (required: {', '.join(req)})")
    out = []
    for k in allowed:
        if k in req:
            out.append((k, _posint(kind, k, params[k])))
            continue
        default, rule = opt[k]
        v = params.get(k, default)
        if isinstance(rule, tuple):
            v = _choice(kind, k, v, rule)
        elif k == "pad_end" and v == -1:
            v = dict(out).get("pad", 0)
        else:
            v = _posint(kind, k, v, allow_zero=rule == "nonneg")
        out.append((k, v))
    sp = Space(kind, tuple(out))
    _check(sp)
    points = math.prod(sp[k] for k in req)
    if points > MAX_POINTS:
        raise OpSpecError(f"{kind}: {'x'.join(str(sp[k]) for k in req)} is {points:.3g} points, "
                          f"above the {MAX_POINTS:.3g} that 64-bit tiling arithmetic holds")
    return sp


def parse_spec(spec: str) -> Space:
    """``"gemm:M=64,N=64,K=64,dtype=fp16"`` -> :class:`Space` (OpSpecError on any problem)."""
    if not isinstance(spec, str) or ":" not in spec:
        raise OpSpecError(f"op spec {spec!r} must look like KIND:KEY=VALUE,... e.g. "
                          f"gemm:M=1024,N=1024,K=1024,dtype=fp16; kinds: {', '.join(KINDS)}")
    kind, _, body = spec.partition(":")
    kind = kind.strip().lower()
    params = {}
    for part in filter(None, (p.strip() for p in body.split(","))):
        key, eq, val = part.partition("=")
        if not eq or not key.strip() or not val.strip():
            raise OpSpecError(f"{kind}: {part!r} is not KEY=VALUE")
        key = key.strip()
        if key in params:
            raise OpSpecError(f"{kind}: key {key!r} given twice")
        params[key] = val.strip()
    return make_space(kind, **params)


def _posint(kind, key, v, allow_zero=False) -> int:
    try:
        iv = int(v)
        if isinstance(v, float) and v != iv or isinstance(v, bool):
            raise ValueError
    except (TypeError, ValueError):
        raise OpSpecError(f"{kind}: {key}={v!r} must be an integer") from None
    if iv < (0 if allow_zero else 1):
        raise OpSpecError(f"{kind}: {key}={iv} must be {'>= 0' if allow_zero else 'a positive integer'}")
    if iv > MAX_EXTENT:
        raise OpSpecError(f"{kind}: {key}={iv} is above {MAX_EXTENT} (2^31 - 1), the largest "
                          f"extent edgeops models")
    return iv


def _choice(kind, key, v, allowed):
    if isinstance(allowed[0], int):
        v = _posint(kind, key, v, allow_zero=True)
    if v not in allowed:
        raise OpSpecError(f"{kind}: {key}={v!r} is not allowed; use one of {', '.join(map(str, allowed))}")
    return v


def _check(sp: Space) -> None:
    k = sp.kind
    if k in ("conv2d", "pool"):
        d = sp.get("dilation", 1)
        if (sp["R"] - 1) * d + 1 > sp["H"] + sp["pad"] + sp.get("pad_end", sp["pad"]) or \
           (sp["S"] - 1) * d + 1 > sp["W"] + sp["pad"] + sp.get("pad_end", sp["pad"]):
            raise OpSpecError(f"{k}: the {sp['R']}x{sp['S']} window (dilation {d}) does not fit the "
                              f"padded {sp['H']}x{sp['W']} input")
    if k == "conv2d":
        g = sp["groups"]
        if sp["C"] % g or sp["K"] % g:
            raise OpSpecError(f"conv2d: groups={g} must divide C={sp['C']} and K={sp['K']}")
    if k == "groupnorm" and sp["C"] % sp["groups"]:
        raise OpSpecError(f"groupnorm: groups={sp['groups']} must divide C={sp['C']}")
