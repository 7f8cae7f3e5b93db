"""Kernel registry: registration rules, lookup errors that name what exists, dispatch reasons."""
from dataclasses import dataclass, field

import numpy as np
import pytest

from edgeops import registry
from edgeops.errors import KernelNotFoundError
from edgeops.ops import all_ops, get_op
from edgeops.pipeline.targets import load_targets

load_targets()      # the pipeline's loader fills the registry; core never imports a target


@dataclass
class FakeNode:
    op_type: str
    domain: str = ""
    attrs: dict = field(default_factory=dict)
    input_dtypes: list = field(default_factory=lambda: ["fp32"])
    input_shapes: list = field(default_factory=lambda: [(4, 4)])


@dataclass
class FakeBoard:
    name: str = "fake"
    targets: tuple = ("cuda", "neon")


@pytest.fixture
def throwaway():
    names = []

    def reg(*a, **kw):
        deco = registry.register_kernel(*a, **kw)

        def wrap(fn):
            deco(fn)
            names.append(kw.get("name") or f"{a[1]}.{fn.__name__}")
            return fn
        return wrap
    yield reg
    for n in names:
        registry.unregister_kernel(n)


def test_reference_target_covers_every_defined_op():
    m = registry.support_matrix()
    for od in all_ops():
        key = registry.op_key(od.name, od.domain)
        assert "fp32" in m[key]["reference"], key


def test_reference_kernel_runs_the_op_reference(rng):
    k = registry.find("Relu", "reference", "fp32")
    x = rng.standard_normal((3, 5)).astype(np.float32)
    (y,) = k.fn([x], {})
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    assert get_op("Relu").reference is not None


def test_duplicate_name_and_same_priority_are_errors(throwaway):
    throwaway("TestOnlyOp", "neon", name="neon.test_relu_a", priority=5)(lambda i, a, t=None: i)
    with pytest.raises(RuntimeError, match="registered twice"):
        registry.register_kernel("Relu", "cuda", name="neon.test_relu_a")(lambda i, a: i)
    with pytest.raises(RuntimeError, match="priority 5"):
        registry.register_kernel("TestOnlyOp", "neon", name="neon.test_relu_b", priority=5)(lambda i, a: i)


def test_unknown_target_is_rejected():
    with pytest.raises(ValueError, match="unknown target"):
        registry.register_kernel("Relu", "tpu")


def test_failed_lookup_names_what_exists_and_where_to_add(throwaway):
    throwaway("TestOnlyOp", "neon", name="neon.test_only", dtypes=("fp32", "int8"))(lambda i, a, t=None: i)
    throwaway("TestOnlyOp", "ascend", name="ascend.test_only", dtypes=("fp16",))(lambda i, a, t=None: i)
    with pytest.raises(KernelNotFoundError) as e:
        registry.find("TestOnlyOp", "cuda", "int8")
    msg = str(e.value)
    assert "no kernel for TestOnlyOp on target 'cuda' with dtype int8" in msg
    assert "available: ascend(fp16), neon(fp32,int8)" in msg and "targets/cuda/" in msg


def test_select_walks_targets_in_order_and_respects_dtype_and_predicate(throwaway):
    throwaway("TestOnlyOp", "neon", name="neon.test_relu", dtypes=("fp32",),
              predicate=lambda n: True if n.input_shapes[0][-1] % 4 == 0 else "last dim not /4")(
        lambda i, a, t=None: i)
    throwaway("TestOnlyOp", "cuda", name="cuda.test_relu", dtypes=("fp16",))(lambda i, a, t=None: i)
    s = registry.select(FakeNode("TestOnlyOp"), FakeBoard())
    assert s.kernel.name == "neon.test_relu" and s.target == "neon"
    assert "cuda.test_relu takes fp16" not in s.reason
    s = registry.select(FakeNode("TestOnlyOp", input_shapes=[(4, 5)]), FakeBoard())
    assert s.kernel is None and s.target == "onnxruntime"
    assert "last dim not /4" in s.reason and "cuda.test_relu takes fp16, node is fp32" in s.reason


def test_higher_priority_wins(throwaway):
    throwaway("TestOnlyOp", "neon", name="neon.test_low", priority=1)(lambda i, a, t=None: i)
    throwaway("TestOnlyOp", "neon", name="neon.test_high", priority=9)(lambda i, a, t=None: i)
    assert registry.select(FakeNode("TestOnlyOp"), FakeBoard(targets=("neon",))).kernel.name == "neon.test_high"


def test_node_without_any_kernel_stays_in_onnxruntime():
    s = registry.select(FakeNode("NonMaxSuppression"), FakeBoard())
    assert s.kernel is None and s.reason.startswith("stays in ONNX Runtime")
    assert "available: none" in s.reason


def test_registry_refuses_queries_before_the_targets_are_loaded():
    """A fresh process: the registry answers only once the pipeline's loader has run (an empty
    answer would silently keep every node in ONNX Runtime)."""
    import subprocess
    import sys
    code = ("from edgeops import registry\n"
            "try:\n    registry.kernels('Conv')\nexcept RuntimeError as e:\n    print('refused:', e)\n"
            "from edgeops.pipeline.targets import load_targets\nload_targets()\n"
            "print(len(registry.kernels('Conv')) > 0, registry.targets_loaded())\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.strip().splitlines()
    assert lines[0].startswith("refused:") and "load_targets" in lines[0]
    assert lines[1] == "True True"
