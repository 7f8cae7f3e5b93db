"""The pass registry: every pass is a small class with a ``name`` and a ``priority``, registered
with :func:`register_pass`, which refuses a second pass of the same name or priority (the order
passes run in must be written down, not left to import order)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from edgeops.errors import EdgeOpsError

if TYPE_CHECKING:
    from edgeops.passes.rewrite import WorkingGraph


class PassError(EdgeOpsError):
    """A pass was asked for by a name that does not exist, or a pass cannot run on the model."""


@dataclass(frozen=True)
class Fusion:
    """One rewrite: which pass replaced which nodes by which new node(s)."""
    pass_name: str
    result: str                  # what the nodes became: "ai.edgeops::SwiGLU", "removed", ...
    new_nodes: tuple[str, ...]   # names of the nodes that replace them (empty when removed)
    fused: tuple[str, ...]       # "name (OpType)" of every node taken out

    def as_dict(self) -> dict:
        return {"pass": self.pass_name, "result": self.result, "new_nodes": list(self.new_nodes),
                "fused": list(self.fused)}


def label(node) -> str:
    """How a report names a node: "name (OpType)"."""
    return f"{node.name or '<unnamed>'} ({node.op_type})"


class Pass:
    """Base of every pass. ``run`` rewrites the working graph in place and returns what it did.

    A pass must leave the graph computing the same outputs (within fp32 rounding); a pattern
    whose intermediates are read elsewhere, are graph outputs, or whose constants are not
    constants is left alone.
    """
    name: ClassVar[str]
    priority: ClassVar[int]      # lower runs first: clean-ups < 100 <= fusions into ai.edgeops

    def run(self, wg: "WorkingGraph") -> list[Fusion]:
        raise NotImplementedError


_PASSES: dict[str, type[Pass]] = {}


def register_pass(cls: type[Pass]) -> type[Pass]:
    """Class decorator. Two passes with one name, or at one priority, is a programming error."""
    if cls.name in _PASSES:
        raise RuntimeError(f"pass {cls.name!r} is registered twice ({_PASSES[cls.name].__module__} "
                           f"and {cls.__module__})")
    same = [p for p in _PASSES.values() if p.priority == cls.priority]
    if same:
        raise RuntimeError(f"passes {same[0].name!r} and {cls.name!r} both have priority "
                           f"{cls.priority}; give each its own so that the order is explicit")
    _PASSES[cls.name] = cls
    return cls


def all_passes() -> list[type[Pass]]:
    """Registered passes in the order they run."""
    return sorted(_PASSES.values(), key=lambda p: p.priority)


def get_pass(name: str) -> type[Pass]:
    try:
        return _PASSES[name]
    except KeyError:
        raise PassError(f"no pass named {name!r}; passes: {', '.join(p.name for p in all_passes())}. "
                        f"Add one in edgeops/passes/ (one pass per file) and import it in "
                        f"edgeops/passes/__init__.py") from None
