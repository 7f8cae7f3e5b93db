import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "tiling"))
import tiling_test_boards as _b  # noqa: E402


@pytest.fixture(scope="session")
def mini_npu(tmp_path_factory):
    return _b.write(tmp_path_factory.mktemp("simboards"), "mini-npu", _b.MINI_NPU)
