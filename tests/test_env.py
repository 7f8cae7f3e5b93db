"""One env-switch parser and one cache root, used by every part that has a switch or a cache."""
import pytest

from edgeops import cache
from edgeops.env import switch
from edgeops.errors import EdgeOpsError


@pytest.mark.parametrize("raw, default, want", [
    (None, True, True), (None, False, False), ("", True, True), ("  ", False, False),
    ("1", False, True), ("ON", False, True), ("true", False, True), (" Yes ", False, True),
    ("0", True, False), ("off", True, False), ("FALSE", True, False), ("no", True, False),
])
def test_switch_values(monkeypatch, raw, default, want):
    if raw is None:
        monkeypatch.delenv("EDGEOPS_T_SWITCH", raising=False)
    else:
        monkeypatch.setenv("EDGEOPS_T_SWITCH", raw)
    assert switch("EDGEOPS_T_SWITCH", default) is want


def test_switch_refuses_a_typo(monkeypatch):
    monkeypatch.setenv("EDGEOPS_T_SWITCH", "maybe")
    with pytest.raises(EdgeOpsError, match=r"EDGEOPS_T_SWITCH='maybe'.*1/on/true/yes"):
        switch("EDGEOPS_T_SWITCH", True)


def test_cuda_disable_false_keeps_cuda(monkeypatch):
    """EDGEOPS_CUDA_DISABLE=false used to disable CUDA (anything but 0 did)."""
    monkeypatch.setenv("EDGEOPS_CUDA_DISABLE", "false")
    assert switch("EDGEOPS_CUDA_DISABLE", False) is False


def test_one_cache_root(monkeypatch, tmp_path):
    from edgeops.boards import host
    from edgeops.tiling import cache as tuning
    monkeypatch.delenv("EDGEOPS_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.root() == tmp_path / "xdg" / "edgeops"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.root() == tmp_path / "home" / ".cache" / "edgeops"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("EDGEOPS_CACHE_DIR", str(tmp_path / "mine"))
    assert cache.root() == tmp_path / "mine"
    # the tuning cache and the host figures live below it, whatever the variables say
    assert tuning.cache_dir().parent == cache.root() and host.cache_dir() == cache.root()
    monkeypatch.delenv("EDGEOPS_CACHE_DIR")
    assert tuning.cache_dir().parent == tmp_path / "xdg" / "edgeops" == host.cache_dir()
