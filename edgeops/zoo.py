"""Models no one here wrote, for tests and benchmarks: the ``light_*.onnx`` models that ship
inside the onnx package (ResNet-50, SqueezeNet, ShuffleNet, Inception, DenseNet, VGG, ...).

They hold every weight as a ``ConstantOfShape`` of one value, so their outputs are the same for any
input: :func:`randomise_weights` turns those into random initializers before any numerical use.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from edgeops.errors import EdgeOpsError


def light_dir() -> Path:
    import onnx
    return Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def light_names() -> list[str]:
    return sorted(p.stem[len("light_"):] for p in light_dir().glob("light_*.onnx"))


def light_path(name: str) -> Path:
    p = light_dir() / f"light_{name}.onnx"
    if not p.is_file():
        raise EdgeOpsError(f"no light model {name!r} in the installed onnx package; "
                           f"have: {', '.join(light_names())}")
    return p


def randomise_weights(model, rng: np.random.Generator, *, scale: str = "fan_in"):
    """A copy of ``model`` whose ConstantOfShape-held weights are random initializers (``fan_in``:
    N(0, 1/fan_in), ``he``: N(0, 2/fan_in); 1-D ones U(0.5, 1.5), positive like BN variances), whose
    float initializers are U(0.5, 1.5), and whose initializers are no longer graph inputs (IR >= 4),
    so passes and ONNX Runtime treat them as constants."""
    import onnx
    from onnx import numpy_helper
    if scale not in ("fan_in", "he"):
        raise EdgeOpsError(f"scale must be 'fan_in' or 'he', got {scale!r}")
    gain = 2.0 if scale == "he" else 1.0
    m = onnx.ModelProto()
    m.CopyFrom(model)
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    keep, new = [], []
    for n in m.graph.node:
        if n.op_type == "ConstantOfShape" and n.input[0] in inits:
            shape = tuple(int(d) for d in inits[n.input[0]])
            a = (rng.standard_normal(shape) * np.sqrt(gain / np.prod(shape[1:])) if len(shape) >= 2
                 else rng.uniform(0.5, 1.5, shape))
            new.append(numpy_helper.from_array(a.astype(np.float32), n.output[0]))
        else:
            keep.append(n)
    for t in m.graph.initializer:
        a = numpy_helper.to_array(t)
        if a.dtype == np.float32:
            t.CopyFrom(numpy_helper.from_array(rng.uniform(0.5, 1.5, a.shape).astype(np.float32),
                                               t.name))
    del m.graph.node[:]
    m.graph.node.extend(keep)
    m.graph.initializer.extend(new)
    names = {t.name for t in m.graph.initializer}       # old IRs list these as inputs too
    ins = [i for i in m.graph.input if i.name not in names]
    del m.graph.input[:]
    m.graph.input.extend(ins)
    used = {i for n in m.graph.node for i in n.input}   # drops the removed nodes' shape inputs
    kept = [t for t in m.graph.initializer if t.name in used]
    del m.graph.initializer[:]
    m.graph.initializer.extend(kept)
    m.ir_version = max(m.ir_version, 4)
    return m


def light_model(name: str, seed: int = 0, *, scale: str = "fan_in"):
    """The light model ``name`` with random weights (see :func:`randomise_weights`)."""
    import onnx
    return randomise_weights(onnx.load(str(light_path(name))), np.random.default_rng(seed),
                             scale=scale)
