"""Serve-time settings: the package manifest's ``runtime`` section, overridden by command-line
flags. Every key read here is listed in docs/serve.md.

``runtime.threads``            ONNX Runtime intra-op threads per worker (null: cores / workers)
``runtime.deadline_s``         per-request deadline of one attempt on a worker (default 10 s)
``runtime.fallback``           edgeops.ort's per-node rules (a failing kernel runs the reference)
``runtime.output_guard``       ``{"enabled": true, "fallback_precision": "fp32"}`` or
                               ``{"enabled": true, "fallback_package": "PATH"}``: outputs with
                               NaN/Inf switch the worker to that fallback (the request is re-run)
``runtime.target_rules``       ``[{"if": "device_memory_below", "bytes": N, "then": "cpu"}, ...]``
``runtime.batching``           ``{"max_batch_size": B, "max_queue_delay_ms": D}`` (compiled batch > 1)
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace

from edgeops.errors import EdgeOpsError

DEFAULT_DEADLINE_S = 10.0
DEFAULT_BATCH_DELAY_MS = 2.0
CONDITIONS = ("device_memory_below", "memory_available_below")
ACTIONS = ("cpu",)
PRECISIONS = ("fp32",)
_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


class RuleError(EdgeOpsError):
    """A runtime rule in the manifest or on the command line is malformed."""


@dataclass(frozen=True)
class TargetRule:
    condition: str
    bytes: int
    then: str = "cpu"

    def describe(self) -> str:
        return f"{self.condition} {self.bytes} -> {self.then}"


@dataclass(frozen=True)
class Settings:
    threads: int | None = None
    deadline_s: float = DEFAULT_DEADLINE_S
    fallback: dict | None = None                   # passed to edgeops.ort as it is
    guard: bool = False
    guard_precision: str | None = None
    guard_package: str | None = None
    target_rules: tuple[TargetRule, ...] = ()
    max_batch: int | None = None                   # None: no dynamic batching
    batch_delay_ms: float = DEFAULT_BATCH_DELAY_MS
    retries: int = 1                               # attempts on another worker after a crash
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "extra"}
        d["target_rules"] = [r.describe() for r in self.target_rules]
        return d


def from_manifest(manifest: dict, package_dir=None, **overrides) -> Settings:
    """Settings for a package; ``overrides`` (None values ignored) are the command line's."""
    rt = manifest.get("runtime") or {}
    where = "manifest runtime"
    s = Settings(threads=_opt_int(rt.get("threads"), f"{where}.threads"),
                 deadline_s=_pos_float(rt.get("deadline_s", DEFAULT_DEADLINE_S),
                                       f"{where}.deadline_s"),
                 fallback=rt.get("fallback"))
    g = rt.get("output_guard")
    if g is not None:
        s = replace(s, **_guard(g, f"{where}.output_guard", package_dir))
    if rt.get("target_rules") is not None:
        rules = rt["target_rules"]
        if not isinstance(rules, list):
            raise RuleError(f"{where}.target_rules must be a list of rules, got {rules!r}")
        s = replace(s, target_rules=tuple(_rule_doc(r, f"{where}.target_rules") for r in rules))
    b = rt.get("batching")
    if b is not None:
        if not isinstance(b, dict) or set(b) - {"max_batch_size", "max_queue_delay_ms"}:
            raise RuleError(f"{where}.batching {b!r}: keys are max_batch_size, max_queue_delay_ms")
        s = replace(s, max_batch=_opt_int(b.get("max_batch_size"), f"{where}.batching"),
                    batch_delay_ms=_pos_float(b.get("max_queue_delay_ms", DEFAULT_BATCH_DELAY_MS),
                                              f"{where}.batching", zero=True))
    over = {k: v for k, v in overrides.items() if v is not None}
    if "rules" in over:
        over["target_rules"] = tuple(parse_rule(r) for r in over.pop("rules"))
    if "guard" in over and isinstance(over["guard"], str):
        over.update(_guard_flag(over.pop("guard"), package_dir))
    return replace(s, **over)


def _guard(g, where, package_dir) -> dict:
    if not isinstance(g, dict) or set(g) - {"enabled", "fallback_precision", "fallback_package"}:
        raise RuleError(f"{where} {g!r}: keys are enabled, fallback_precision, fallback_package")
    prec, pkg = g.get("fallback_precision"), g.get("fallback_package")
    if prec is not None and prec not in PRECISIONS:
        raise RuleError(f"{where}.fallback_precision {prec!r}: one of {', '.join(PRECISIONS)}")
    if prec is not None and pkg is not None:
        raise RuleError(f"{where}: give fallback_precision or fallback_package, not both")
    return {"guard": bool(g.get("enabled", True)), "guard_precision": prec,
            "guard_package": _pkg_path(pkg, package_dir)}


def _guard_flag(value: str, package_dir) -> dict:
    """``--output-guard fp32 | PATH | off``."""
    if value == "off":
        return {"guard": False}
    if value in PRECISIONS:
        return {"guard": True, "guard_precision": value, "guard_package": None}
    return {"guard": True, "guard_precision": None, "guard_package": os.path.abspath(value)}


def _pkg_path(p, package_dir):
    if p is None:
        return None
    if not isinstance(p, str):
        raise RuleError(f"output_guard.fallback_package {p!r} is not a path")
    # relative to the package, so a board directory can carry both side by side
    return os.path.normpath(os.path.join(str(package_dir or "."), p))


def parse_rule(text: str) -> TargetRule:
    """``device_memory_below=512M:cpu`` (the command line's form)."""
    m = re.fullmatch(r"(\w+)=([0-9.]+)([kKmMgGtT]?)(?:i?[bB])?:(\w+)", text.strip())
    if not m:
        raise RuleError(f"--rule {text!r}: write CONDITION=SIZE:ACTION, e.g. "
                        f"device_memory_below=512M:cpu")
    return _rule(m.group(1), float(m.group(2)) * _UNITS[m.group(3).lower()], m.group(4),
                 f"--rule {text!r}")


def _rule_doc(d, where) -> TargetRule:
    if not isinstance(d, dict) or set(d) != {"if", "bytes", "then"}:
        raise RuleError(f"{where}: rule {d!r} needs exactly the keys if, bytes, then")
    return _rule(d["if"], d["bytes"], d["then"], where)


def _rule(cond, n, then, where) -> TargetRule:
    if cond not in CONDITIONS:
        raise RuleError(f"{where}: condition {cond!r} is not one of {', '.join(CONDITIONS)}")
    if then not in ACTIONS:
        raise RuleError(f"{where}: action {then!r} is not one of {', '.join(ACTIONS)}")
    if not isinstance(n, (int, float)) or n < 0:
        raise RuleError(f"{where}: bytes {n!r} is not a non-negative number")
    return TargetRule(cond, int(n), then)


def _opt_int(v, where):
    if v is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise RuleError(f"{where} {v!r} is not a positive integer")
    return v


def _pos_float(v, where, zero=False):
    if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0 or (v == 0 and not zero):
        raise RuleError(f"{where} {v!r} is not a positive number of seconds/milliseconds")
    return float(v)


# ---- target conditions, evaluated in the worker when it starts --------------------------------

def memory_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def device_memory_free(targets) -> int | None:
    """Free accelerator memory: CUDA's when the package has cuda kernels and a GPU is here;
    otherwise the host's available memory (Jetsons and NPU SoCs share it with the CPU)."""
    if "cuda" in targets:
        try:
            from numba import cuda
            if cuda.is_available():
                return int(cuda.current_context().get_memory_info()[0])
        except Exception:  # noqa: BLE001  (no driver: fall through to the shared figure)
            pass
    return memory_available()


def triggered(rules, targets) -> TargetRule | None:
    """The first rule whose condition holds now."""
    for r in rules:
        free = device_memory_free(targets) if r.condition == "device_memory_below" \
            else memory_available()
        if free is not None and free < r.bytes:
            return r
    return None
