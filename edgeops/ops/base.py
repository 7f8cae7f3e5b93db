"""The semantic layer's machinery: attribute specs, the OpDef base class and its registry.

An OpDef is the contract every target must honour: which attributes exist (with defaults and
validation), the shape rule, a numpy reference (the oracle for every kernel) and the cost
(MACs/FLOPs) used by ``edgeops inspect`` and the simulator.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Sequence

import numpy as np

from edgeops.errors import OpDefinitionError

EDGEOPS_DOMAIN = "ai.edgeops"
_UNSET = object()


@dataclass(frozen=True)
class Attr:
    """One attribute: ``kind`` is int | float | ints | floats | str; ``default`` _UNSET = required."""
    kind: str
    default: Any = _UNSET
    choices: tuple | None = None
    check: Callable[[Any], bool] | None = None
    help: str = ""

    @property
    def required(self) -> bool:
        return self.default is _UNSET


def required(kind: str, **kw) -> Attr:
    return Attr(kind, _UNSET, **kw)


class OpDef:
    """Base of every operator definition. Subclasses set ``name`` (and ``domain`` for custom ops),
    ``attrs``, and implement ``shape`` and ``reference``; ``cost`` defaults to zero MACs and one
    FLOP per output element."""

    name: ClassVar[str]
    domain: ClassVar[str] = ""
    attrs: ClassVar[dict[str, Attr]] = {}
    min_inputs: ClassVar[int] = 1
    max_inputs: ClassVar[int] = 1
    flops_per_element: ClassVar[float] = 1.0

    @classmethod
    def qualname(cls) -> str:
        return f"{cls.domain}::{cls.name}" if cls.domain else cls.name

    # ---- attributes ----------------------------------------------------------------------
    @classmethod
    def parse_attrs(cls, given: dict[str, Any], where: str = "") -> dict[str, Any]:
        """Fill defaults and validate; raise OpDefinitionError naming the node and attribute."""
        at = f" in node {where!r}" if where else ""
        unknown = set(given) - set(cls.attrs)
        if unknown:
            raise OpDefinitionError(
                f"{cls.qualname()}{at}: unknown attribute(s) {sorted(unknown)}; "
                f"known: {sorted(cls.attrs) or 'none'}")
        out = {}
        for key, spec in cls.attrs.items():
            if key in given:
                val = given[key]
            elif spec.required:
                raise OpDefinitionError(f"{cls.qualname()}{at}: required attribute {key!r} is missing")
            else:
                val = spec.default
            if val is not None:
                val = _coerce(cls, key, spec, val, at)
            out[key] = val
        cls.validate(out, where)
        return out

    @classmethod
    def validate(cls, attrs: dict[str, Any], where: str = "") -> None:
        """Cross-attribute checks; subclasses raise OpDefinitionError."""

    # ---- semantics -------------------------------------------------------------------------
    @classmethod
    def shape(cls, attrs: dict[str, Any], shapes: Sequence[tuple[int, ...]]) -> list[tuple[int, ...]]:
        """Output shapes from input shapes (all concrete). Default: one output, like input 0."""
        return [tuple(shapes[0])]

    @classmethod
    def reference(cls, *inputs: np.ndarray, **attrs) -> np.ndarray | tuple[np.ndarray, ...]:
        raise NotImplementedError

    @classmethod
    def run(cls, inputs: Sequence[np.ndarray | None], attrs: dict[str, Any] | None = None,
            where: str = "") -> list[np.ndarray]:
        """Validate attributes and arity, run the reference, always return a list."""
        attrs = cls.parse_attrs(attrs or {}, where)
        n = len(inputs)
        if not cls.min_inputs <= n <= cls.max_inputs:
            raise OpDefinitionError(f"{cls.qualname()} takes {cls.min_inputs}..{cls.max_inputs} "
                                    f"inputs, got {n}")
        out = cls.reference(*inputs, **attrs)
        return list(out) if isinstance(out, tuple) else [out]

    # ---- cost --------------------------------------------------------------------------------
    @classmethod
    def cost(cls, attrs: dict[str, Any], in_shapes: Sequence[tuple[int, ...] | None],
             out_shapes: Sequence[tuple[int, ...] | None]) -> tuple[int, int]:
        """(MACs, FLOPs). Elementwise-style default: no MACs, ``flops_per_element`` per output."""
        n = sum(_numel(s) for s in out_shapes if s is not None)
        return 0, int(round(cls.flops_per_element * n))


def _numel(shape) -> int:
    return int(np.prod(shape, dtype=np.int64)) if shape is not None else 0


def _coerce(cls, key, spec: Attr, val, at):
    try:
        if spec.kind == "int":
            if isinstance(val, (float, np.floating)) and float(val) != int(val):
                raise ValueError
            val = int(val)
        elif spec.kind == "float":
            # ONNX float attributes are float32: a default like 0.01 must mean float32(0.01),
            # exactly what a model file (and ONNX Runtime) carries
            val = float(np.float32(val))
        elif spec.kind == "ints":
            val = tuple(int(v) for v in val)
        elif spec.kind == "floats":
            val = tuple(float(np.float32(v)) for v in val)
        elif spec.kind == "str":
            val = val.decode() if isinstance(val, bytes) else str(val)
    except (TypeError, ValueError):
        raise OpDefinitionError(f"{cls.qualname()}{at}: attribute {key!r} must be {spec.kind}, "
                                f"got {val!r}") from None
    if spec.choices is not None and val not in spec.choices:
        raise OpDefinitionError(f"{cls.qualname()}{at}: attribute {key!r}={val!r} is not one of "
                                f"{list(spec.choices)}")
    if spec.check is not None and not spec.check(val):
        raise OpDefinitionError(f"{cls.qualname()}{at}: attribute {key!r}={val!r} is invalid"
                                + (f" ({spec.help})" if spec.help else ""))
    return val


_OPS: dict[tuple[str, str], type[OpDef]] = {}


def define_op(cls: type[OpDef]) -> type[OpDef]:
    """Class decorator registering an OpDef; a second definition of the same op is an error."""
    key = (cls.domain, cls.name)
    if key in _OPS:
        raise RuntimeError(f"op {cls.qualname()} is defined twice: {_OPS[key].__module__} and "
                           f"{cls.__module__}")
    _OPS[key] = cls
    return cls


def get_op(op_type: str, domain: str = "") -> type[OpDef]:
    domain = "" if domain in ("", "ai.onnx") else domain
    try:
        return _OPS[(domain, op_type)]
    except KeyError:
        known = ", ".join(sorted(c.qualname() for c in _OPS.values()))
        name = f"{domain}::{op_type}" if domain else op_type
        raise OpDefinitionError(f"edgeops has no definition of op {name}; defined: {known}. "
                                f"Add one in edgeops/ops/ (one op per file).") from None


def has_op(op_type: str, domain: str = "") -> bool:
    return ("" if domain in ("", "ai.onnx") else domain, op_type) in _OPS


def all_ops() -> list[type[OpDef]]:
    return sorted(_OPS.values(), key=lambda c: (c.domain, c.name))
