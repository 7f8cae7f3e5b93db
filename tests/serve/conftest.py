"""Fixtures of the serve tests (helpers in _serve_harness.py)."""
import pytest

from _serve_harness import make_pkg


@pytest.fixture(scope="session")
def pkgs(tmp_path_factory):
    d = tmp_path_factory.mktemp("serve-pkgs")
    return {"b4": make_pkg(d / "b4", 4, 0), "b1": make_pkg(d / "b1", 1, 0),
            "v2": make_pkg(d / "v2", 4, 5)}
