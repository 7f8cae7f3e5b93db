"""The pipeline: what composes the layers below it into edgeops' jobs.

- :mod:`edgeops.pipeline.targets`: the one place that loads kernel targets (the registry is filled
  on import of a target; nothing else imports a target by name).
- :mod:`edgeops.pipeline.models`: what a model argument may name (a path, bytes, a ModelProto or
  ``"sample"``, the bundled model).
- :mod:`edgeops.pipeline.compile`: fuse, lower, package, check, repair (``edgeops compile``).
- :mod:`edgeops.pipeline.quantize`: INT8 before compiling, and the simulator's latency cost that
  :func:`edgeops.quantize.quantize_model` takes as a callable.

Importing this package imports none of them.
"""
