"""Packages and boards shared by the deploy tests: the bundled sample compiled for ``host``."""
import hashlib
import json

import numpy as np
import pytest

from edgeops import package


@pytest.fixture(scope="session")
def pkgs(tmp_path_factory):
    """Two different packages of the sample (different reference seeds), compiled once."""
    from edgeops.cli.compile import compile_model
    d = tmp_path_factory.mktemp("pkgs")
    for name, seed in (("a", 0), ("b", 1)):
        compile_model("sample", "host", d / name, mode="all", seed=seed)
    return d / "a", d / "b"


@pytest.fixture
def reseal():
    return _reseal


@pytest.fixture
def current_ok():
    return _current_ok


def _reseal(pkg_dir):
    """Recompute the manifest's checksums after a test edited the package on purpose."""
    m = pkg_dir / package.MANIFEST
    doc = json.loads(m.read_bytes())
    for name, meta in doc["files"].items():
        p = pkg_dir / name
        if p.is_file() and not p.is_symlink():
            data = p.read_bytes()
            meta.update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
    doc.pop("manifest_sha256")
    doc["manifest_sha256"] = hashlib.sha256(package._canonical(doc)).hexdigest()
    m.write_bytes(package._canonical(doc))


def _current_ok(root) -> str:
    """The board's current package loads, verifies and reproduces its reference outputs (here,
    in-process: the fault trials are many); its name."""
    cur = root / "current"
    assert cur.is_symlink(), "no current package on the board"
    p = package.load(cur)
    ins, want = p.reference()
    sess = p.session()
    names = [o.name for o in sess.get_outputs()]
    got = dict(zip(names, sess.run(names, ins)))
    for n, w in want.items():
        np.testing.assert_allclose(got[n], w, rtol=0, atol=p.tolerance * np.abs(w).max())
    return str(cur.readlink())
