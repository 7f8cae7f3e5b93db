import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import tiling_test_boards as _b  # noqa: E402


@pytest.fixture(scope="session")
def board_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("boards")


@pytest.fixture(scope="session")
def two_level(board_dir):
    return _b.write(board_dir, "two-level", _b.TWO_LEVEL)


@pytest.fixture(scope="session")
def mini_npu(board_dir):
    return _b.write(board_dir, "mini-npu", _b.MINI_NPU)


@pytest.fixture(scope="session")
def pipe(board_dir):
    return _b.write(board_dir, "pipe", _b.pipe_board())


@pytest.fixture(scope="session")
def mini_cpu(board_dir):
    return _b.write(board_dir, "mini-cpu", _b.MINI_CPU)
