import os
import zlib

import numpy as np
import pytest

from edgeops.env import switch

FULL = switch("EDGEOPS_TEST_FULL", False)


@pytest.fixture(autouse=True, scope="session")
def _private_cache_dir(tmp_path_factory):
    """Tests never read or write the user's ~/.cache/edgeops (tuning cache, host figures)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("EDGEOPS_CACHE_DIR", str(tmp_path_factory.mktemp("edgeops-cache")))
    yield
    mp.undo()


@pytest.fixture(scope="session")
def unavailable():
    """Skip a test whose optional tool (sshd, qemu, the CUDA toolchain) is missing here; in CI,
    where .ci/run installs every one of them, a missing tool is a failure, not a skip."""
    def _missing(reason: str):
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason} -- .ci/run installs it, so in CI this is a failure")
        pytest.skip(reason)
    return _missing


def pytest_collection_modifyitems(config, items):
    skip_full = pytest.mark.skip(reason="part of the full suite only: run `make test-full` "
                                        "(EDGEOPS_TEST_FULL=1); CI runs a representative subset")
    for item in items:
        if "full" in item.keywords and not FULL:
            item.add_marker(skip_full)


@pytest.fixture
def rng(request):
    # a different but reproducible stream per test
    seed = zlib.crc32(request.node.nodeid.encode())
    return np.random.default_rng(seed)


@pytest.fixture
def bridge(unavailable):
    """The native library (built and self-tested once per test session's cache)."""
    import shutil
    from edgeops.ort import native
    if (shutil.which("cc") is None and shutil.which("gcc") is None
            and not native.prebuilt_path().is_file()):
        unavailable("no C compiler and no prebuilt library for this machine: the native "
                    "bridge is built with cc")
    st = native.status()
    assert st["used"], f"native bridge not used: {st['why']}"
    return native
