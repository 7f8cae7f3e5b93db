"""Native plans: a kernel call prepared once, for fixed shapes, as native code plus data.

The contract between targets and the runtime (``edgeops.ort``), which knows no target: a kernel
whose registry entry has a :attr:`~edgeops.registry.Kernel.native` hook turns a node's inputs
(held constants as arrays, runtime inputs by shape), attributes and thread count into a
:class:`NativeStep`: the address of one compiled entry with the C signature ::

    int32_t entry(void *const *args, void *const *arrays, const int64_t *values, void *scratch)

(``args``: the step's runtime inputs' then outputs' data; ``arrays``, ``values``: what it was
prepared with; ``scratch``: ``scratch`` bytes, 64-byte aligned; 0 when it ran), and the data it
runs with. Everything the entry needs is in ``arrays`` and ``values`` (packed weights, tiling,
thread count), not in Python objects, so a step is described by :meth:`NativeStep.describe`
alone: the same entries compiled ahead of time into one shared library could run a plan
written out as data, without Python.

The runtime strings steps into a program (a region's nodes one after another, intermediates in
a scratch arena) and its C bridge runs them without Python or the GIL. Python can run a step
too (:meth:`NativeStep.run`): the same compiled code, so the same bits.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# ONNX TensorProto element types of the dtypes a step's arguments may have
ELEMENT_TYPES = {"float32": 1, "uint8": 2, "int8": 3, "int32": 6}
ALIGN = 64


@dataclass(eq=False)
class NativeStep:
    entry: str                      # the entry's stable name, e.g. "neon.binary"
    address: int                    # where it is compiled in this process
    reads: tuple[int, ...]          # the node's input positions its input args come from
    inputs: tuple[tuple[str, tuple[int, ...]], ...]    # (dtype, shape) per input arg
    outputs: tuple[tuple[str, tuple[int, ...]], ...]   # (dtype, shape) per output arg
    arrays: tuple[np.ndarray, ...] = ()
    values: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))
    scratch: int = 0                # bytes the entry needs besides its arguments
    threads: int = 1                # the thread team it runs on (fixed when prepared)
    keep: Any = None                # objects the arrays' memory belongs to

    def __post_init__(self):
        for a in self.arrays:
            if not (isinstance(a, np.ndarray) and a.flags.c_contiguous):
                raise ValueError(f"native step {self.entry}: its arrays must be C-contiguous "
                                 f"numpy arrays")
        self.values = np.ascontiguousarray(self.values, np.int64)
        if self.values.size == 0:
            self.values = np.zeros(1, np.int64)
        self.pointers = np.array([a.ctypes.data for a in self.arrays] or [0], np.uintp)
        for dt, _ in (*self.inputs, *self.outputs):
            if dt not in ELEMENT_TYPES:
                raise ValueError(f"native step {self.entry}: dtype {dt} is not one of "
                                 f"{sorted(ELEMENT_TYPES)}")

    def describe(self) -> dict:
        """The step as data: entry name, argument types and shapes, values, the arrays' dtypes
        and shapes, scratch and threads (what an ahead-of-time runtime would load)."""
        return {"entry": self.entry, "reads": list(self.reads),
                "inputs": [[d, list(s)] for d, s in self.inputs],
                "outputs": [[d, list(s)] for d, s in self.outputs],
                "values": self.values.tolist(),
                "arrays": [[str(a.dtype), list(a.shape)] for a in self.arrays],
                "scratch": self.scratch, "threads": self.threads}

    def run(self, *inputs: np.ndarray) -> list[np.ndarray]:
        """Run the step from Python (the debug path): the same compiled entry the bridge calls."""
        if len(inputs) != len(self.inputs):
            raise ValueError(f"native step {self.entry}: {len(inputs)} inputs for "
                             f"{len(self.inputs)}")
        xs = []
        for x, (dt, shape) in zip(inputs, self.inputs):
            x = np.ascontiguousarray(x, dt)
            if x.shape != tuple(shape):
                raise ValueError(f"native step {self.entry}: input of shape {x.shape}, prepared "
                                 f"for {tuple(shape)}")
            xs.append(x)
        ys = [np.empty(shape, dt) for dt, shape in self.outputs]
        scratch = np.empty(self.scratch + ALIGN, np.uint8)
        s0 = scratch.ctypes.data
        s0 += (-s0) % ALIGN
        args = np.array([a.ctypes.data for a in (*xs, *ys)] or [0], np.uintp)
        import numba     # the team, as the runtime sets it around the step
        before = numba.get_num_threads()
        if self.threads and self.threads != before:
            numba.set_num_threads(self.threads)
        try:
            rc = _entry(self.address)(args.ctypes.data, self.pointers.ctypes.data,
                                      self.values.ctypes.data, s0)
        finally:
            if self.threads and self.threads != before:
                numba.set_num_threads(before)
        if rc != 0:
            raise RuntimeError(f"native step {self.entry} returned {rc}")
        return ys


ENTRY = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                         ctypes.c_void_p)
_entries: dict[int, Any] = {}


def _entry(address: int):
    f = _entries.get(address)
    if f is None:
        f = _entries[address] = ENTRY(address)
    return f


def entry_signature():
    """The entries' signature as Numba types (for targets' ``cfunc``)."""
    from numba import types
    return types.int32(types.CPointer(types.voidptr), types.CPointer(types.voidptr),
                       types.CPointer(types.int64), types.voidptr)


def prepare_numba() -> None:
    """Start Numba's threading layer before a cached entry is loaded: an entry that calls
    parallel kernels, loaded from Numba's disk cache before the layer has registered its symbols
    with LLVM, fails to link (``Symbol not found: allocate_sched``) or crashes."""
    from numba.np.ufunc import parallel
    parallel._launch_threads()
