"""The package manifest's schema: every key ``manifest.json`` may hold, with its type, whether it
is required and its range. :func:`validate` checks a manifest against it; ``edgeops.package``
calls it on load (so ``run``, ``deploy``, the board agent, ``doctor`` and ``serve`` all refuse a
malformed manifest the same way) and on write (a key the writer adds without declaring it here
is a bug, caught before the package exists).

This module is the one place a manifest key is declared. To add one, add a line to
:data:`KEYS`, e.g.::

    Key("quantization.scheme", "str", required=False, choices=("per_channel", "per_tensor")),

A path is dotted; ``[]`` stands for every element of a list and ``{}`` for every value of a
dict (``files{}.sha256``). An optional key's parents need not exist. Top-level keys not declared
here are refused; below the top level, undeclared keys pass (placement rows, ``verified``
details). A new required key, a changed type or a narrower range is a new format: bump
:data:`SCHEMA_VERSION` (``edgeops.package.FORMAT_VERSION`` is this number) so that older
packages are refused with "compile again" instead of failing a key check.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import PurePosixPath

from edgeops.dtypes import short_names
from edgeops.errors import PackageError

SCHEMA_VERSION = 1
HEX64 = "0123456789abcdef"


class ManifestError(PackageError):
    """A manifest's key is missing, of the wrong type or out of range."""


@dataclass(frozen=True)
class Key:
    path: str
    type: str                      # "|"-joined: str int num bool dict list null
    required: bool = True
    min: float | None = None       # numbers: value range; str/list/dict: length range
    max: float | None = None
    choices: tuple | None = None
    hex64: bool = False            # a sha256 hex digest
    finite: bool = True            # numbers: refuse inf and nan


_FALLBACK = ("kernel_error", "unknown_kernel", "nodes_without_kernel", "nan_guard")

KEYS: tuple[Key, ...] = (
    Key("format", "str", choices=("edgeops-package",)),
    Key("format_version", "int", min=1),
    Key("edgeops_version", "str", min=1, max=64),
    Key("created_utc", "str", max=64),
    Key("manifest_sha256", "str", hex64=True),
    Key("source", "dict"),
    Key("source.name", "str|null"),
    Key("source.sha256", "str", hex64=True),
    Key("board", "dict"),
    Key("board.name", "str", min=1, max=128),
    Key("board.kind", "str", min=1, max=32),
    Key("board.file_sha256", "str", max=64),
    Key("targets", "list", max=64),
    Key("targets[]", "str", min=1, max=64),
    Key("kernels", "list"),
    Key("kernels[]", "str", min=1, max=256),
    Key("lowering", "dict"),
    Key("inputs", "list", max=4096),
    Key("inputs[]", "dict"),
    Key("inputs[].name", "str", min=1),
    Key("inputs[].dtype", "str", choices=tuple(short_names())),
    Key("inputs[].shape", "list", max=32),
    Key("inputs[].shape[]", "int", min=1),     # compile needs static inputs
    Key("outputs", "list", min=1, max=4096),
    Key("outputs[]", "dict"),
    Key("outputs[].name", "str", min=1),
    Key("outputs[].dtype", "str", choices=tuple(short_names())),
    Key("outputs[].shape", "list", max=32),
    Key("outputs[].shape[]", "int|str", min=0),   # data-dependent dims stay symbolic
    Key("placement", "list"),
    Key("placement[]", "dict"),
    Key("placement[].node", "str"),
    Key("placement[].kernel", "str|null", required=False),
    Key("placement[].target", "str|null", required=False),
    Key("placement[].fused", "list|null", required=False),
    Key("predicted", "dict"),
    Key("predicted.latency_s", "num|null", min=0, finite=False),   # inf: unmodelled nodes
    Key("runtime", "dict"),
    Key("runtime.threads", "int|null", min=1, max=4096),
    Key("runtime.execution_mode", "str", required=False, choices=("sequential", "parallel")),
    Key("runtime.omp_wait_policy", "str|null", required=False, max=32),
    Key("runtime.fallback", "dict|null", required=False),
    Key("runtime.fallback.kernel_error", "str", required=False, choices=("reference", "raise")),
    Key("runtime.fallback.unknown_kernel", "str", required=False, choices=("refuse",)),
    Key("runtime.fallback.nodes_without_kernel", "str", required=False,
        choices=("onnxruntime",)),
    Key("runtime.fallback.nan_guard", "bool", required=False),
    # serving settings (edgeops.serve.rules checks their inner structure)
    Key("runtime.deadline_s", "num", required=False, min=1e-3, max=86400),
    Key("runtime.output_guard", "dict|null", required=False),
    Key("runtime.target_rules", "list|null", required=False, max=64),
    Key("runtime.batching", "dict|null", required=False),
    Key("reference", "dict"),
    Key("reference.file", "str", choices=("reference.npz",)),
    Key("reference.seed", "int", min=0, max=2**63 - 1),
    Key("reference.inputs", "dict"),
    Key("reference.inputs{}", "str"),
    Key("reference.outputs", "dict"),
    Key("reference.outputs{}", "str"),
    Key("reference.tolerance", "dict"),
    Key("reference.tolerance.rel", "num", min=0, max=1),
    Key("verified", "dict|null"),
    # a quantized package: its float source and its accuracy against it
    # (edgeops.pipeline.quantize.manifest_section)
    Key("quantization", "dict", required=False),
    Key("quantization.source", "dict"),
    Key("quantization.source.name", "str|null"),
    Key("quantization.source.sha256", "str", hex64=True),
    Key("quantization.method", "str", min=1, max=64),
    Key("quantization.activation_type", "str", min=1, max=16),
    Key("quantization.per_channel", "bool"),
    Key("quantization.bias_correction", "bool"),
    Key("quantization.accuracy", "dict"),
    Key("quantization.accuracy.sqnr_db", "num|null", finite=False),
    Key("quantization.accuracy.cosine", "num|null", min=-1, max=1),
    Key("quantization.accuracy.top1_agreement", "num|null", min=0, max=1),
    Key("files", "dict", min=2, max=4096),
    Key("files{}", "dict"),
    Key("files{}.sha256", "str", hex64=True),
    Key("files{}.bytes", "int", min=0),
)

_TYPES = {"str": str, "dict": dict, "list": list, "bool": bool, "null": type(None)}


def validate(doc, where: str = "manifest.json", version: int | None = None) -> dict:
    """``doc`` if it follows the schema; else :class:`ManifestError` naming ``where`` (the file)
    and the first key at fault."""
    if not isinstance(doc, dict):
        raise ManifestError(f"{where}: the manifest is a JSON {type(doc).__name__}, not an object")
    known = {k.path.split(".")[0].split("[")[0].split("{")[0] for k in KEYS}
    extra = sorted(set(doc) - known)
    if extra:
        raise ManifestError(f"{where}: key {extra[0]!r} is not in the manifest schema "
                            f"(version {SCHEMA_VERSION}); declare it in edgeops/manifest.py")
    if isinstance(doc.get("files"), dict):
        for name in doc["files"]:       # before the keys: the refusal says what matters most
            safe_name(name, where)
    for key in KEYS:
        for path, value, present in _values(doc, key.path):
            if not present:
                if key.required:
                    raise ManifestError(f"{where}: required key {path!r} is missing; the "
                                        f"package is malformed, compile it again")
                continue
            problem = _check(key, value)
            if problem:
                raise ManifestError(f"{where}: key {path!r} {problem}; the package is "
                                    f"malformed, compile it again")
    _cross(doc, where)
    return doc


def safe_name(name, where: str = "manifest.json") -> str:
    """A file name the manifest lists, if it stays inside the package (relative, POSIX, no
    ``..``); else :class:`PackageError`."""
    p = PurePosixPath(name) if isinstance(name, str) else None
    if (p is None or not name or "\\" in name or "\0" in name or p.is_absolute()
            or any(part in ("..", "") for part in name.split("/"))):
        raise PackageError(f"{where} lists {name!r}, a path that leaves the package; refused")
    return name


def _values(doc, path: str):
    """(concrete path, value, present) for every place ``path`` names; a missing parent of an
    optional key yields nothing (the parent's own key reports it when it is required)."""
    out = [("", doc, True)]
    for part in _split(path):
        nxt = []
        for p, v, present in out:
            if not present:
                continue
            if part == "[]":
                if isinstance(v, list):
                    nxt += [(f"{p}[{i}]", x, True) for i, x in enumerate(v)]
            elif part == "{}":
                if isinstance(v, dict):
                    nxt += [(f"{p}[{k!r}]", x, True) for k, x in v.items()]
            elif isinstance(v, dict):
                q = f"{p}.{part}" if p else part
                nxt.append((q, v.get(part), part in v))
        out = nxt
    return out


def _split(path: str) -> list[str]:
    parts = []
    for dotted in path.split("."):
        name = dotted.replace("[]", "").replace("{}", "")
        if name:
            parts.append(name)
        parts += [dotted[i:i + 2] for i in range(len(name), len(dotted), 2)]
    return parts


def _check(key: Key, v) -> str | None:
    kinds = key.type.split("|")
    if v is None:
        return None if "null" in kinds else f"is null, expected {_say(kinds)}"
    ok = False
    for k in kinds:
        if k == "int":
            ok |= isinstance(v, int) and not isinstance(v, bool)
        elif k == "num":
            ok |= isinstance(v, (int, float)) and not isinstance(v, bool)
        else:
            ok |= isinstance(v, _TYPES[k]) and not (k != "bool" and isinstance(v, bool))
    if not ok:
        return f"is {_show(v)} (a {type(v).__name__}), expected {_say(kinds)}"
    if isinstance(v, float) and math.isnan(v) or key.finite and isinstance(v, float) \
            and not math.isfinite(v):
        return f"is {v}, expected a finite number"
    if key.choices is not None and v not in key.choices:
        return f"is {_show(v)}, expected one of {', '.join(map(str, key.choices))}"
    if key.hex64 and not (isinstance(v, str) and len(v) == 64 and set(v) <= set(HEX64)):
        return f"is {_show(v)}, expected a sha256 (64 lowercase hex digits)"
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        size, what = v, "value"
    elif isinstance(v, (str, list, dict)):
        size, what = len(v), "length"
    else:
        return None
    if key.min is not None and size < key.min:
        return f"has {what} {size}, below the minimum {key.min:g}"
    if key.max is not None and size > key.max:
        return f"has {what} {size}, above the maximum {key.max:g}"
    return None


def _cross(doc: dict, where: str) -> None:
    """What single keys cannot say: names that must refer to each other."""
    for side in ("inputs", "outputs"):
        names = [s["name"] for s in doc[side]]
        if len(set(names)) != len(names):
            raise ManifestError(f"{where}: key {side!r} names a tensor twice; the package is "
                                f"malformed, compile it again")
        unknown = sorted(set(doc["reference"][side].values()) - set(names))
        if unknown:
            raise ManifestError(f"{where}: key 'reference.{side}' names {unknown[0]!r}, which is "
                                f"not in {side!r}; the package is malformed, compile it again")


def _say(kinds) -> str:
    words = {"str": "a string", "int": "an integer", "num": "a number", "bool": "true or false",
             "dict": "an object", "list": "a list", "null": "null"}
    return " or ".join(words[k] for k in kinds)


def _show(v) -> str:
    s = repr(v)
    return s if len(s) <= 40 else s[:37] + "..."
