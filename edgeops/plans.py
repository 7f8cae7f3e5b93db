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


# How a step with a Split runs (native.c's RUN_*): as prepared, cut on ONNX Runtime's intra-op
# pool, or timed both ways on its first calls (while the session is made) and fixed to the faster
PREPARED, ORT_POOL, TRIAL = 0, 1, 2


@dataclass(eq=False)
class Split:
    """How the runtime may cut a step into chunks for ONNX Runtime's intra-op pool
    (``KernelContext_ParallelFor``) instead of the kernel's own Numba team: ``units`` (elements,
    rows) in chunks of whole ``grain``s, each one entry call with ``values`` (word
    ``count_word`` set to the chunk's units) and every arg advanced ``strides[k]`` bytes a unit.
    ``key``: what the per-machine choice between the ways is kept under
    (:mod:`edgeops.threads`); ``mode``: one of PREPARED, ORT_POOL, TRIAL."""
    units: int
    count_word: int
    grain: int
    strides: tuple[int, ...]
    values: np.ndarray
    key: str
    chunks: int = 1
    mode: int = TRIAL

    def __post_init__(self):
        self.values = np.ascontiguousarray(self.values, np.int64)
        if not 0 <= self.count_word < self.values.size:
            raise ValueError("a split's count word must be one of its values")

    def chunk_values(self):
        """(first unit, values) of each chunk, as native.c's split_chunk cuts them."""
        per = -(-self.units // self.chunks)
        per = -(-per // self.grain) * self.grain
        for start in range(0, self.units, per):
            v = self.values.copy()
            v[self.count_word] = min(per, self.units - start)
            yield start, v

    def describe(self) -> dict:
        return {"units": self.units, "count_word": self.count_word, "grain": self.grain,
                "strides": list(self.strides), "values": self.values.tolist(),
                "chunks": self.chunks, "mode": self.mode}


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
    split: Split | None = None      # how it may run on ONNX Runtime's pool instead

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
                "scratch": self.scratch, "threads": self.threads,
                "split": None if self.split is None else self.split.describe()}

    def run(self, *inputs: np.ndarray, split: bool = False) -> list[np.ndarray]:
        """Run the step from Python (the debug path): the same compiled entry the bridge calls;
        ``split``: cut as the runtime cuts it for ONNX Runtime's pool (its chunks one after
        another, on a one-thread team, as each of the pool's threads runs one)."""
        if len(inputs) != len(self.inputs):
            raise ValueError(f"native step {self.entry}: {len(inputs)} inputs for "
                             f"{len(self.inputs)}")
        if split and self.split is None:
            raise ValueError(f"native step {self.entry} cannot be cut")
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
        base = [a.ctypes.data for a in (*xs, *ys)]
        calls = [(base, self.values, self.threads)]
        if split:
            calls = [([p + start * st for p, st in zip(base, self.split.strides)], v, 1)
                     for start, v in self.split.chunk_values()]
        import numba     # the team, as the runtime sets it around the step
        before = numba.get_num_threads()
        for ptrs, values, team in calls:
            args = np.array(ptrs or [0], np.uintp)
            if team and team != numba.get_num_threads():
                numba.set_num_threads(team)
            try:
                rc = _entry(self.address)(args.ctypes.data, self.pointers.ctypes.data,
                                          values.ctypes.data, 0 if split else s0)
            finally:
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
    with LLVM, fails to link (``Symbol not found: allocate_sched``) or crashes. The layer is the
    one edgeops.threads pinned (OpenMP or TBB: safe under concurrent launches)."""
    from numba.np.ufunc import parallel
    from edgeops.threads import pin_layer
    pin_layer()
    parallel._launch_threads()
