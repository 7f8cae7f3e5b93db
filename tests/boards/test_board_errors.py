"""Malformed board files fail loudly: a BoardError naming the file and the key, never a default."""
import pytest

from edgeops import boards
from edgeops.errors import BoardError

TINY = '''
schema = 1
name = "tiny"
description = "a minimal valid board"
kind = "cpu"
targets = ["neon"]

[clock]
hz = 1.0e9
source = "test"

[launch]
overhead_s = 1e-6
source = "test"

[[core]]
name = "cpu"
count = 2
source = "test"

[[unit]]
name = "simd"
core = "cpu"
per_core = 1
flops_per_cycle = { fp32 = 8 }
source = "test"

[[memory]]
name = "dram"
size_bytes = 1048576
scope = "chip"
offchip = true
alignment_bytes = 64
source = "test"

[[memory]]
name = "l1d"
size_bytes = 32768
scope = "cpu"
offchip = false
alignment_bytes = 64
source = "test"

[[path]]
src = "dram"
dst = "l1d"
engine = "cache"
bandwidth_bytes_per_s = 1e10
setup_latency_s = 1e-7
burst_bytes = 64
shared = true
source = "test"

[peer]
gemm_efficiency = 0.5
stream_efficiency = 0.5
op_overhead_s = 1e-6
source = "test"
'''


def write(tmp_path, text, fname="tiny.toml"):
    p = tmp_path / fname
    p.write_text(text)
    return p


def test_the_template_is_valid(tmp_path):
    b = boards.load(write(tmp_path, TINY))
    assert b.name == "tiny" and b.peak_flops("fp32") == 8 * 2 * 1e9
    assert b.core_hz("cpu") == b.clock_hz


CASES = [
    # (what, old, new, words the message must contain)
    ("unknown key", "hz = 1.0e9\n", "hz = 1.0e9\nturbo = true\n", ["clock", "turbo", "unknown"]),
    ("unknown top-level key", "kind = \"cpu\"\n", "kind = \"cpu\"\nvendor = \"x\"\n", ["(top level)", "vendor"]),
    ("missing figure", "size_bytes = 32768\n", "", ["memory[1]", "size_bytes", "missing"]),
    ("missing source", "count = 2\nsource = \"test\"\n", "count = 2\n", ["core[0]", "source"]),
    ("empty source", "count = 2\nsource = \"test\"\n", "count = 2\nsource = \" \"\n", ["core[0].source"]),
    ("per-figure source misses one", "count = 2\nsource = \"test\"\n",
     "count = 2\nhz = 2e9\nsource = { count = \"x\" }\n", ["core[0].hz", "no source"]),
    ("per-figure source names a non-figure", "count = 2\nsource = \"test\"\n",
     "count = 2\nsource = { count = \"x\", size = \"y\" }\n", ["core[0].source", "size"]),
    ("wrong type", "hz = 1.0e9", "hz = \"fast\"", ["clock.hz", "number"]),
    ("bool for a number", "count = 2\n", "count = true\n", ["core[0].count", "integer"]),
    ("negative figure", "bandwidth_bytes_per_s = 1e10", "bandwidth_bytes_per_s = -1e10",
     ["path[0].bandwidth_bytes_per_s", ">= 0"]),
    ("bad kind", "kind = \"cpu\"", "kind = \"fpga\"", ["kind", "fpga"]),
    ("unknown target", "targets = [\"neon\"]", "targets = [\"tpu\"]", ["targets", "tpu"]),
    ("unknown dtype", "{ fp32 = 8 }", "{ fp64 = 8 }", ["unit[0].flops_per_cycle", "fp64"]),
    ("unit on an undeclared core", "core = \"cpu\"", "core = \"gpu\"", ["unit[0].core", "gpu"]),
    ("path to an undeclared level", "dst = \"l1d\"", "dst = \"l2\"", ["path[0].dst", "l2"]),
    ("two offchip levels", "offchip = false", "offchip = true", ["memory", "offchip"]),
    ("detect outside host.toml", "count = 2\n", "count = \"detect\"\n", ["core[0].count", "host.toml"]),
    ("architecture on a cpu board", "kind = \"cpu\"\n", "kind = \"cpu\"\narchitecture = \"combined\"\n",
     ["architecture", "npu"]),
    ("gpu table on a cpu board", "[peer]", "[gpu]\nwarp_size = 32\nsource = \"x\"\n\n[peer]", ["gpu"]),
    ("wrong schema version", "schema = 1", "schema = 2", ["schema", "must be 1"]),
    ("schema true", "schema = 1", "schema = true", ["schema", "must be 1"]),
    ("not TOML", "[clock]", "[clock", ["not valid TOML"]),
    # zero, infinite and absurd figures: refused at load, not NaN latencies later
    ("zero clock", "hz = 1.0e9", "hz = 0.0", ["clock.hz", "plausible"]),
    ("infinite clock", "hz = 1.0e9", "hz = inf", ["clock.hz", "finite"]),
    ("nan clock", "hz = 1.0e9", "hz = nan", ["clock.hz", "finite"]),
    ("clock in GHz", "hz = 1.0e9", "hz = 1.0", ["clock.hz", "plausible", "unit"]),
    ("zero bandwidth", "bandwidth_bytes_per_s = 1e10", "bandwidth_bytes_per_s = 0",
     ["path[0].bandwidth_bytes_per_s", "plausible"]),
    ("infinite bandwidth", "bandwidth_bytes_per_s = 1e10", "bandwidth_bytes_per_s = inf",
     ["path[0].bandwidth_bytes_per_s", "finite"]),
    ("zero cores", "count = 2\n", "count = 0\n", ["core[0].count", "plausible"]),
    ("zero flops", "{ fp32 = 8 }", "{ fp32 = 0 }", ["unit[0].flops_per_cycle.fp32", "plausible"]),
    ("zero memory", "size_bytes = 32768", "size_bytes = 0", ["memory[1].size_bytes", "plausible"]),
    ("efficiency above 1", "gemm_efficiency = 0.5", "gemm_efficiency = 50",
     ["peer.gemm_efficiency", "plausible"]),
    ("a 10 s launch", "overhead_s = 1e-6\nsource", "overhead_s = 10.0\nsource",
     ["launch.overhead_s", "plausible"]),
]


@pytest.mark.parametrize("what,old,new,words", CASES, ids=[c[0] for c in CASES])
def test_malformed_file_names_file_and_key(tmp_path, what, old, new, words):
    assert old in TINY, what
    p = write(tmp_path, TINY.replace(old, new, 1))
    with pytest.raises(BoardError) as e:
        boards.load(p)
    msg = str(e.value)
    assert str(p.resolve()) in msg, msg
    for w in words:
        assert w in msg, f"{what}: {w!r} not in {msg!r}"


def test_whole_array_detect_only_in_host_toml(tmp_path):
    text = TINY[:TINY.index("[[path]]")] + TINY[TINY.index("[peer]"):]
    text = text.replace('targets = ["neon"]\n', 'targets = ["neon"]\npath = "measure"\n')
    with pytest.raises(BoardError) as e:
        boards.load(write(tmp_path, text))
    assert "path:" in str(e.value) and "host.toml" in str(e.value)


def test_npu_board_must_say_its_architecture(tmp_path):
    text = TINY.replace('kind = "cpu"', 'kind = "npu"').replace('targets = ["neon"]', 'targets = ["ascend"]')
    text = text[:text.index("[peer]")]
    with pytest.raises(BoardError, match="architecture.*combined.*separated"):
        boards.load(write(tmp_path, text))
    b = boards.load(write(tmp_path, text.replace('kind = "npu"', 'kind = "npu"\narchitecture = "combined"')))
    assert b.architecture == "combined" and b.peer is None


def test_core_with_its_own_clock(tmp_path):
    text = TINY.replace('count = 2\nsource = "test"\n', 'count = 2\nhz = 2.5e9\nsource = "test"\n')
    b = boards.load(write(tmp_path, text))
    assert b.core("cpu").hz == 2.5e9 and b.core_hz("cpu") == 2.5e9
    assert b.peak_flops("fp32") == 8 * 2 * 2.5e9 and "core[0].hz" in b.sources


def test_name_must_match_file_name_in_the_board_directory(tmp_path, monkeypatch):
    monkeypatch.setattr(boards, "BOARD_DIR", tmp_path)
    write(tmp_path, TINY, "tiny2.toml")
    assert "tiny2" in boards.names()
    with pytest.raises(BoardError) as e:
        boards.load("tiny2")
    assert "tiny2.toml" in str(e.value) and "name" in str(e.value) and "'tiny'" in str(e.value)


def test_unknown_board_lists_the_known_ones():
    with pytest.raises(BoardError) as e:
        boards.load("nosuch")
    msg = str(e.value)
    assert "nosuch" in msg
    for n in boards.names():
        assert n in msg


def test_missing_board_file():
    with pytest.raises(BoardError, match="does not exist"):
        boards.load("no/such/board.toml")


def test_a_path_works_wherever_a_name_does(tmp_path):
    import shutil
    by_name = boards.load("rpi5")
    assert boards.load(str(boards.BOARD_DIR / "rpi5.toml")) == by_name
    copy = tmp_path / "my-pi.toml"            # outside boards/: the file name need not match
    shutil.copy(boards.BOARD_DIR / "rpi5.toml", copy)
    b = boards.load(copy)
    assert b == by_name and b.path_on_disk == str(copy.resolve())
    assert b.file_sha256 == by_name.file_sha256
    assert boards.load(b) is b
