"""The prebuilt native bridge libraries (edgeops/ort/_prebuilt, scripts/build_bridge.sh): built
from this native.c, loaded only when they are, and working in ONNX Runtime as they are
shipped: the x86_64 one here, the aarch64 one under qemu-user in the arm64 sysroot's
interpreter (the same check, in plain ctypes without edgeops, so it needs no Numba)."""
from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from edgeops.ort import native

SYSROOT = Path(os.environ.get("EDGEOPS_ARM64_SYSROOT",
                              Path.home() / ".cache" / "edgeops" / "arm64-sysroot"))


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_each_prebuilt_library_embeds_the_hash_of_this_native_c(machine):
    p = native.prebuilt_path(machine)
    assert p.is_file(), f"{p} is missing: run scripts/build_bridge.sh"
    assert native.source_hash().encode() in p.read_bytes(), (
        f"{p} was built from another native.c: run scripts/build_bridge.sh and commit it")


def test_a_prebuilt_library_of_another_source_is_not_used(tmp_path, monkeypatch):
    src = tmp_path / "native.c"
    src.write_bytes(native._SOURCE.read_bytes() + b"\n/* changed */\n")
    monkeypatch.setattr(native, "_SOURCE", src)
    if native.prebuilt_path().is_file():
        assert native._prebuilt() is None
        assert "another native.c" in native._skipped
    monkeypatch.setattr(native, "PREBUILT", tmp_path / "none")
    assert native._prebuilt() is None and native._skipped.startswith("none for")
    monkeypatch.setenv(native.PREBUILT_ENV, "0")
    assert native._prebuilt() is None and "turned off" in native._skipped


def test_doctor_says_which_bridge_packages_use(bridge):
    line = native.describe()
    st = native.status()
    assert line.startswith(f"native bridge {st['how']}: {st['library']}")
    if native.prebuilt_path().is_file():
        assert st["how"] == "prebuilt"     # the shipped one fits this machine and source


# A custom op "Twice" (y = 2x) through the library with a ctypes compute, and one that fails:
# the run must raise with the kernel's message where the runtime has the status compute.
_ABI_CHECK = r'''
import ctypes, sys
import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper
path = sys.argv[1]
lib = ctypes.CDLL(path)
assert lib.edgeops_native_abi() == int(sys.argv[2]), lib.edgeops_native_abi()
lib.edgeops_native_source.restype = ctypes.c_char_p
lib.edgeops_native_declare.argtypes = [ctypes.c_char_p, ctypes.c_int64, ctypes.c_int64]
lib.edgeops_native_declare.restype = ctypes.c_int64
lib.edgeops_native_output.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                                      ctypes.c_int64]
lib.edgeops_native_output.restype = ctypes.c_void_p
lib.edgeops_native_fail.argtypes = [ctypes.c_char_p]
CREATE = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64, ctypes.c_char_p, ctypes.c_int64)
COMPUTE = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p,
                           ctypes.c_void_p)
specs = []
def create(op, spec, n):
    specs.append(spec.decode())
    return len(specs) - 1
def compute(handle, context, desc, kernel):
    d = (ctypes.c_int64 * 64).from_address(desc)
    n, addr, et, rank = d[0], d[2], d[3], d[4]
    dims = [d[5 + i] for i in range(rank)]
    x = np.ctypeslib.as_array((ctypes.c_float * int(np.prod(dims))).from_address(addr))
    if specs[handle] == "fail" or x[0] > 100:
        lib.edgeops_native_fail(b"twice: deliberate failure")
        return 1
    out = np.array(dims, np.int64)
    dst = lib.edgeops_native_output(context, 0, out.ctypes.data, rank)
    ctypes.memmove(dst, (2 * x).astype(np.float32).ctypes.data, x.size * 4)
    return 0
cbs = (CREATE(create), COMPUTE(compute))
lib.edgeops_native_callbacks(*cbs)
assert lib.edgeops_native_declare(b"Twice", 1, 1) >= 0
node = helper.make_node("Twice", ["x"], ["y"], domain="ai.edgeops.native", name="twice",
                        edgeops_dispatch="ok")
g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5])])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                        helper.make_opsetid("ai.edgeops.native", 1)],
                      ir_version=9)
so = ort.SessionOptions()
so.register_custom_ops_library(path)
s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
x = np.arange(5, dtype=np.float32)
assert np.array_equal(s.run(None, {"x": x})[0], 2 * x)
status = lib.edgeops_native_status_compute()
try:
    s.run(None, {"x": x + 1000})
    failed = ""
except Exception as e:
    failed = str(e)
assert np.array_equal(s.run(None, {"x": x})[0], 2 * x)
print("status" if status else "v1", "raised" if "twice: deliberate failure" in failed else "-")
'''


def _abi_check(cmd: list[str], path: Path, env=None) -> str:
    r = subprocess.run([*cmd, "-c", _ABI_CHECK, str(path), str(native.ABI)], capture_output=True,
                       text=True,
                       timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout.strip().splitlines()[-1]


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the x86_64 library runs on x86_64")
def test_the_x86_64_library_runs_a_custom_op_and_fails_a_run_with_its_message():
    p = native.prebuilt_path("x86_64")
    assert _abi_check([sys.executable], p) == "status raised"
    env = dict(os.environ, EDGEOPS_NATIVE_STATUS="0")      # an older runtime's path
    assert _abi_check([sys.executable], p, env) == "v1 -"


@pytest.mark.arm64
def test_the_aarch64_library_runs_in_onnx_runtime_under_qemu(unavailable):
    qemu = shutil.which("qemu-aarch64-static")
    py = SYSROOT / "usr" / "bin" / "python3.11"
    if qemu is None:
        unavailable("qemu-aarch64-static is not installed (apt-get install qemu-user-static)")
    if not py.is_file():
        unavailable(f"no arm64 sysroot at {SYSROOT} (scripts/arm64/build_sysroot.sh)")
    env = dict(os.environ, PYTHONPATH=str(SYSROOT / "opt" / "edgeops" / "site"),
               QEMU_CPU="cortex-a76")
    env.pop("PYTHONHOME", None)
    assert _abi_check([qemu, "-L", str(SYSROOT), str(py)], native.prebuilt_path("aarch64"),
                      env) == "status raised"


def test_the_doctor_line_names_the_bridge(bridge):
    from edgeops.deploy.doctor import CHECKS
    from edgeops.deploy.checks import OK
    fn = dict(CHECKS)["onnxruntime-extensions"]
    status, detail = fn(None)
    assert status == OK and f"native bridge {native.status()['how']}" in detail


def test_the_doctor_warns_when_packages_fall_back(monkeypatch):
    from edgeops.deploy.doctor import CHECKS
    from edgeops.deploy.checks import WARN
    monkeypatch.setattr(native, "status", lambda: {"used": False, "how": None, "library": None,
                                                   "why": "no C compiler", "prebuilt": "none"})
    status, detail = dict(CHECKS)["onnxruntime-extensions"](None)
    assert status == WARN and "no C compiler" in detail and "onnxruntime-extensions" in detail
