import pytest

from edgeops import boards
from edgeops.boards import host


def fake_measurement(info):
    """What host.measure returns, without running a benchmark (keeps the suite fast)."""
    plan, _ = host._copy_plan(info)
    return {"fp32_flops_per_s": 64e9, "matmul": "fake matmul", "dispatch_s": 5e-7,
            "copy": {k: {"bytes_per_s": 20e9, "array_bytes": v, "reps": 3} for k, v in plan.items()},
            "date": "2000-01-01", "seconds": 0.0, "fingerprint": info.fingerprint}


@pytest.fixture(autouse=True)
def isolated_host_cache(tmp_path, monkeypatch):
    """Each test gets its own host cache directory, a fake benchmark, and fresh board parsing."""
    monkeypatch.setenv(host.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(host, "measure", fake_measurement)
    boards._load_cached.cache_clear()
    yield tmp_path / "cache"
    boards._load_cached.cache_clear()
