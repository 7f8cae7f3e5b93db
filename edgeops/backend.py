"""An ``onnx.backend.base.Backend`` for edgeops, so that ONNX's own backend test suite
(``onnx.backend.test.BackendTest``) checks lowered models against its reference outputs.

``prepare`` compiles: ``edgeops.lower.lower(model, board, mode="all", targets=[target])`` (every
node a kernel of ``target`` supports goes to it, the rest stays standard ONNX); ``run`` executes
the lowered model in ONNX Runtime through the custom-op path (``edgeops.ort``). One backend class
per target::

    from edgeops.backend import backend_for
    Neon = backend_for("neon")                 # board "host"; ascend: "ascend-910b"
    rep = Neon.prepare(model)
    outputs = rep.run([x])
    rep.placement                              # which node ran where, and why

A model whose input shapes are symbolic is lowered again for each new set of input shapes at run
time (lowering, tilings and the simulator need static shapes).
"""
from __future__ import annotations

from onnx.backend.base import Backend, BackendRep

from edgeops.errors import ShapeError

DEFAULT_BOARDS = {"reference": "host", "neon": "host", "cuda": "jetson-orin-nano",
                  "ascend": "ascend-910b"}


class EdgeOpsRep(BackendRep):
    def __init__(self, model, backend):
        self._model, self._backend = model, backend
        self._sessions: dict = {}
        self.lowering = None
        inits = {t.name for t in model.graph.initializer}
        self._inputs = [i.name for i in model.graph.input if i.name not in inits]
        try:
            self._compile(None)
        except ShapeError:      # symbolic dims: lowered per input shapes in run
            pass

    @property
    def placement(self) -> list:
        return self.lowering.placements if self.lowering else []

    def _compile(self, shapes):
        from edgeops.lower import lower
        from edgeops.ort import session
        b = self._backend
        self.lowering = lower(self._model, b.board, mode="all", targets=[b.target], shapes=shapes,
                              plan=b.plan)
        sess = session(self.lowering.model, target=b.target)
        self._sessions[None if shapes is None else tuple(sorted(shapes.items()))] = sess
        return sess

    def run(self, inputs, **kwargs):
        import numpy as np
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            inputs = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
            feeds = dict(zip(self._inputs, inputs))
        feeds = {k: np.asarray(v) for k, v in feeds.items()}   # ORT refuses numpy scalars
        sess = self._sessions.get(None)
        if sess is None:
            shapes = {k: tuple(np.shape(v)) for k, v in feeds.items()}
            sess = self._sessions.get(tuple(sorted(shapes.items()))) or self._compile(shapes)
        return sess.run(None, feeds)


class EdgeOpsBackend(Backend):
    """The ``reference`` target on the ``host`` board; :func:`backend_for` makes the others."""
    target = "reference"
    board = "host"
    plan = False     # conformance checks results; tilings only change how fast kernels run

    @classmethod
    def prepare(cls, model, device: str = "CPU", **kwargs):
        super().prepare(model, device, **kwargs)     # onnx.checker
        return EdgeOpsRep(model, cls)

    @classmethod
    def run_model(cls, model, inputs, device: str = "CPU", **kwargs):
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        # kernels run inside ONNX Runtime's CPU execution provider (the Python bridge); the
        # CUDA target, when it lands, is reached from there too
        return device == "CPU"


def backend_for(target: str, board: str | None = None, *, plan: bool = False) -> type[EdgeOpsBackend]:
    """A Backend class that lowers onto ``target`` (on ``board``, default per target)."""
    from edgeops.registry import KNOWN_TARGETS
    from edgeops.lower import LoweringError
    if target not in KNOWN_TARGETS:
        raise LoweringError(f"unknown target {target!r}; known: {', '.join(KNOWN_TARGETS)}")
    return type(f"EdgeOpsBackend_{target}", (EdgeOpsBackend,),
                {"target": target, "board": board or DEFAULT_BOARDS[target], "plan": plan})


prepare = EdgeOpsBackend.prepare
run_model = EdgeOpsBackend.run_model
supports_device = EdgeOpsBackend.supports_device
