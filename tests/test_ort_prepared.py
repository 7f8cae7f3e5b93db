"""Prepared package models in the cache (edgeops.ort.prepared): a package's second session
starts from its prepared model (no protobuf work, no onnx, no onnxruntime-extensions when every
node is native) with the outputs of the first; a damaged or stale entry is prepared again."""
from __future__ import annotations

import numpy as np
import pytest

import edgeops.ort as eort
from edgeops import package
from edgeops.lower import lower
from edgeops.ort import prepared
from edgeops.sample import build_sample_model


@pytest.fixture(scope="module")
def pkg_dir(tmp_path_factory):
    lw = lower(build_sample_model(), "rpi5", mode="all")
    return package.write(lw, tmp_path_factory.mktemp("prep") / "pkg", seed=3).path


def _run(pkg):
    s = pkg.session(threads=1)
    ins, want = pkg.reference()
    outs = s.run(None, ins)
    names = [o.name for o in s.get_outputs()]
    for n, y in zip(names, outs):
        ref = want[n]
        assert np.max(np.abs(y - ref)) <= pkg.tolerance * max(np.max(np.abs(ref)), 1e-30)
    return outs


def _no_preparing(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("the model was parsed or prepared again")
    monkeypatch.setattr(eort, "_load", refuse)
    monkeypatch.setattr(eort, "prepare", refuse)


def test_a_second_session_starts_from_the_prepared_model(pkg_dir, monkeypatch):
    pkg = package.load(pkg_dir)
    first = _run(pkg)
    _no_preparing(monkeypatch)
    from edgeops.ort import native
    if native.library() is not None:      # every node native: no onnxruntime-extensions either
        import onnxruntime_extensions

        def no_extensions():
            raise AssertionError("onnxruntime-extensions registered")
        monkeypatch.setattr(onnxruntime_extensions, "get_library_path", no_extensions)
    again = _run(package.load(pkg_dir))
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)


def test_other_threads_are_another_entry_and_off_means_off(pkg_dir, monkeypatch):
    pkg = package.load(pkg_dir)
    sha = pkg.manifest["files"][package.MODEL]["sha256"]
    k1 = prepared.key(sha, target="reference", threads=1, fallback=None, native=True)
    assert k1 != prepared.key(sha, target="reference", threads=2, fallback=None, native=True)
    assert k1 != prepared.key(sha, target="reference", threads=1, fallback=None, native=False)
    monkeypatch.setenv(prepared.ENV, "0")
    calls = []
    real = eort.prepare
    monkeypatch.setattr(eort, "prepare", lambda *a, **k: calls.append(1) or real(*a, **k))
    _run(pkg)
    assert calls, "EDGEOPS_PREPARED_CACHE=0 still used the cache"


def test_a_damaged_entry_is_prepared_again(pkg_dir):
    pkg = package.load(pkg_dir)
    _run(pkg)
    from edgeops import cache
    entries = list((cache.root() / "prepared").iterdir())
    assert entries
    for d in entries:
        body = (d / "model.onnx").read_bytes()
        (d / "model.onnx").write_bytes(body[:-7])     # its sha256 no longer matches
        assert prepared.load(d.name) is None
    _run(pkg)
    # this package's entry is written whole again (the cache may hold other tests' entries)
    assert any(prepared.load(d.name) is not None for d in entries), entries


def test_the_external_data_verdict_is_remembered_per_model(pkg_dir, monkeypatch):
    package.load(pkg_dir)

    def refuse(g):
        raise AssertionError("the model was parsed again")
    monkeypatch.setattr(package, "_tensors", refuse)
    package.load(pkg_dir)                      # the same bytes: the verdict holds
    with pytest.raises(AssertionError, match="parsed again"):
        package._external_data(pkg_dir, {"model.onnx", "other"}, "0" * 64)


_CHILD = r'''
import sys
from edgeops import package
s = package.load(sys.argv[1]).session(threads=1)
ins, _ = package.load(sys.argv[1]).reference()
s.run(None, ins)
print(sorted(m for m in ("onnx", "onnxruntime_extensions", "edgeops.targets.ascend",
                         "edgeops.targets.cuda") if m in sys.modules))
'''


def test_a_warm_package_session_imports_neither_onnx_nor_other_targets(pkg_dir):
    """A fresh process, the second time: onnx (0.7 s and more to import), onnxruntime-extensions
    and the targets the package does not use stay unimported."""
    import subprocess
    import sys
    from edgeops.ort import native
    runs = [subprocess.run([sys.executable, "-c", _CHILD, str(pkg_dir)], capture_output=True,
                           text=True, timeout=600) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr[-2000:]
    last = runs[1].stdout.strip().splitlines()[-1]
    if native.library() is not None:
        assert last == "[]", last
    else:                                   # the onnxruntime-extensions bridge imports onnx
        assert "edgeops.targets.ascend" not in last, last
