"""The host board: detection from /sys and /proc (fake trees here), measurement cached per
machine, and honest sources."""
import functools
import json
import pytest

from edgeops import boards
from edgeops.boards import host
from edgeops.errors import BoardError, EdgeOpsWarning

REAL_MEASURE = host.measure     # taken at import, before the autouse fixture swaps in a fake

A76_CPUINFO = """processor\t: 0
BogoMIPS\t: 108.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp
CPU implementer\t: 0x41
CPU part\t: 0xd0b
"""


def fake_sys(root, ncpu, caches, core_of=lambda c: c, khz=None):
    """A /sys/devices/system/cpu tree. caches: (index, level, type, size, shared_cpu_list(cpu))."""
    for c in range(ncpu):
        d = root / f"cpu{c}"
        (d / "topology").mkdir(parents=True)
        (d / "topology/core_id").write_text(f"{core_of(c)}\n")
        (d / "topology/physical_package_id").write_text("0\n")
        if khz:
            (d / "cpufreq").mkdir()
            (d / "cpufreq/cpuinfo_max_freq").write_text(f"{khz}\n")
        for idx, level, ctype, size, shared in caches:
            i = d / f"cache/index{idx}"
            i.mkdir(parents=True)
            for k, v in dict(level=level, type=ctype, size=size, shared_cpu_list=shared(c),
                             coherency_line_size=64).items():
                (i / k).write_text(f"{v}\n")
    return root


@pytest.fixture
def pi5_like(tmp_path):
    sysdir = fake_sys(tmp_path / "cpu", 4, [
        (0, 1, "Data", "64K", lambda c: str(c)),
        (1, 1, "Instruction", "64K", lambda c: str(c)),
        (2, 2, "Unified", "512K", lambda c: str(c)),
        (3, 3, "Unified", "2048K", lambda c: "0-3")], khz=2400000)
    (tmp_path / "cpuinfo").write_text(A76_CPUINFO)
    (tmp_path / "meminfo").write_text("MemTotal:        8000000 kB\n")
    return dict(sys_cpu=str(sysdir), cpuinfo=str(tmp_path / "cpuinfo"),
                meminfo=str(tmp_path / "meminfo"), affinity={0, 1, 2, 3})


def test_detect_an_a76_like_machine(pi5_like):
    info = host.detect(**pi5_like)
    assert info.physical_cores == 4 and info.clock_hz == 2.4e9
    assert "cpuinfo_max_freq" in info.clock_source
    assert [(c.name, c.size_bytes, c.scope) for c in info.caches] == \
        [("l3", 2 << 20, "chip"), ("l2", 512 << 10, "cpu"), ("l1d", 64 << 10, "cpu")]
    assert info.caches[0].source.startswith("detected from ")
    assert {"asimd", "asimdhp", "asimddp"} <= set(info.isa)
    assert info.mem_bytes == 8000000 * 1024
    assert info.cpu_model == "0x41:0xd0b" and info.fingerprint.endswith("|4c|m1")


def test_smt_siblings_and_cluster_shared_caches(tmp_path):
    # 8 logical CPUs on 4 cores (cpu i and i+4 are siblings); L2 shared by pairs of cores
    sysdir = fake_sys(tmp_path, 8, [
        (0, 1, "Data", "48K", lambda c: f"{c % 4},{c % 4 + 4}"),
        (2, 2, "Unified", "2048K", lambda c: "0-1,4-5" if c % 4 < 2 else "2-3,6-7"),
        (3, 3, "Unified", "16384K", lambda c: "0-7")], core_of=lambda c: c % 4)
    info = host.detect(sys_cpu=str(sysdir), cpuinfo=str(tmp_path / "none"),
                       meminfo=str(tmp_path / "none"), affinity=set(range(8)))
    assert info.physical_cores == 4
    got = {c.name: (c.size_bytes, c.scope) for c in info.caches}
    assert got == {"l3": (16 << 20, "chip"), "l2": (1 << 20, "cpu"), "l1d": (48 << 10, "cpu")}
    assert "per-core share" in info.caches[1].source
    # two cores of a four-core L3 are all we may use: for us it is a chip-wide level
    info2 = host.detect(sys_cpu=str(sysdir), cpuinfo=str(tmp_path / "none"),
                        meminfo=str(tmp_path / "none"), affinity={0, 1})
    assert info2.physical_cores == 2 and info2.caches[0].scope == "chip"


def test_without_sys_everything_is_an_estimate(tmp_path):
    info = host.detect(sys_cpu=str(tmp_path / "nothing"), cpuinfo=str(tmp_path / "nothing"),
                       meminfo=str(tmp_path / "nothing"), affinity={0, 1, 2})
    assert info.physical_cores == 3 and "estimate" in info.count_source
    assert info.clock_hz == 2e9 and "estimate" in info.clock_source
    assert all("estimate" in c.source for c in info.caches)
    assert [c.name for c in info.caches] == ["l2", "l1d"]


def test_host_board_from_a_fake_machine(pi5_like, monkeypatch, isolated_host_cache):
    monkeypatch.setattr(host, "detect", functools.partial(host.detect, **pi5_like))
    b = boards.load("host")
    assert [m.name for m in b.memories] == ["dram", "l3", "l2", "l1d"]
    assert [(p.src, p.dst) for p in b.paths] == [("dram", "l3"), ("l3", "l2"), ("l2", "l1d")]
    assert b.core("cpu").count == 4 and b.clock_hz == 2.4e9
    fpc = b.unit("simd").flops_per_cycle
    assert fpc["fp32"] == pytest.approx(64e9 / 2.4e9, rel=1e-3)      # the fake measurement
    assert fpc["fp16"] == pytest.approx(2 * fpc["fp32"]) and fpc["int8"] == pytest.approx(4 * fpc["fp32"])
    s = b.sources
    assert s["unit[0].flops_per_cycle"].startswith("measured on this host (0x41:0xd0b) by "
                                                   "edgeops.boards.host on 2000-01-01")
    assert "estimate" in s["unit[0].flops_per_cycle"]           # fp16/int8 are derived from the ISA
    assert s["path[0].bandwidth_bytes_per_s"].startswith("measured on this host")
    assert s["path[0].setup_latency_s"].startswith("estimate")
    assert s["memory[1].size_bytes"].startswith("detected from ") and "index3" in s["memory[1].size_bytes"]
    assert s["clock.hz"].startswith("detected from") and s["core[0].count"].startswith("detected from")
    assert s["launch.overhead_s"].startswith("measured on this host")
    assert b.isa[0] and "asimddp" in b.isa


def test_measured_once_then_read_from_the_cache(monkeypatch, isolated_host_cache):
    fake_measurement = host.measure   # the autouse fixture's fake benchmark
    calls = []
    monkeypatch.setattr(host, "measure", lambda info: calls.append(info) or fake_measurement(info))
    first = boards.load("host")
    assert len(calls) == 1
    cache = host.cache_file()
    assert cache == isolated_host_cache / "host.json" and cache.is_file()
    fp = calls[0].fingerprint
    assert fp in json.loads(cache.read_text())["hosts"]

    def no_benchmark(info):
        raise AssertionError("measured again although the cache holds this machine")
    monkeypatch.setattr(host, "measure", no_benchmark)
    boards._load_cached.cache_clear()
    second = boards.load("host")
    assert second == first and second.sources == first.sources
    assert second.file_sha256 == first.file_sha256


def test_cache_is_keyed_by_machine(monkeypatch, pi5_like, isolated_host_cache):
    boards.load("host")                                   # this machine
    monkeypatch.setattr(host, "detect", functools.partial(host.detect, **pi5_like))
    boards._load_cached.cache_clear()
    boards.load("host")                                   # another one
    hosts = json.loads(host.cache_file().read_text())["hosts"]
    assert len(hosts) == 2 and any(k.startswith(host.detect().machine) for k in hosts)


def test_failed_measurement_falls_back_to_estimates_and_is_not_cached(monkeypatch, isolated_host_cache):
    def broken(info):
        raise RuntimeError("no numpy here")
    monkeypatch.setattr(host, "measure", broken)
    b = boards.load("host")
    assert "estimate: the host measurement failed (RuntimeError: no numpy here)" in \
        b.sources["unit[0].flops_per_cycle"]
    assert b.peak_flops("fp32") > 0 and not host.cache_file().exists()


def test_unwritable_cache_warns_and_still_loads(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(host.CACHE_ENV, str(blocker / "sub"))
    with pytest.warns(EdgeOpsWarning, match="could not cache"):
        b = boards.load("host")
    assert b.sources["clock.hz"]


def test_cache_location(tmp_path, monkeypatch):
    assert host.cache_file() == host.cache_dir() / "host.json"
    monkeypatch.delenv(host.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert host.cache_file() == tmp_path / "xdg/edgeops/host.json"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert host.cache_file() == tmp_path / "home/.cache/edgeops/host.json"


HOSTLIKE = (boards.BOARD_DIR / "host.toml").read_text()


@pytest.mark.parametrize("old,new,words", [
    ('hz = "detect"', 'hz = "measure"', ["clock.hz", "detected, not measured"]),
    ('gemm_efficiency = 0.7', 'gemm_efficiency = "measure"', ["peer.gemm_efficiency", "cannot measure"]),
    ('per_core = 1', 'per_core = "detect"', ["unit[0].per_core", "cannot detect"]),
])
def test_host_resolver_refuses_what_it_cannot_do(tmp_path, old, new, words):
    p = tmp_path / "host.toml"
    p.write_text(HOSTLIKE.replace(old, new, 1))
    with pytest.raises(BoardError) as e:
        boards.load(p)
    for w in words + [str(p.resolve())]:
        assert w in str(e.value)


def test_real_measurement_is_sane():
    """The actual benchmark, once (a couple of seconds); no timing asserts, only plausibility."""
    info = host.detect()
    m = REAL_MEASURE(info)
    fpc = m["fp32_flops_per_s"] / info.clock_hz
    assert 0.25 < fpc < 512, fpc
    for name, c in m["copy"].items():
        assert 1e8 < c["bytes_per_s"] < 1e13, (name, c)
    assert 0 < m["dispatch_s"] < 1e-3
    assert set(m["copy"]) == {"dram"} | {c.name for c in info.caches if c.level >= 2}
    assert m["fingerprint"] == info.fingerprint and m["date"]


def test_a_corrupt_cache_entry_is_measured_again(monkeypatch, isolated_host_cache):
    info = host.detect()
    isolated_host_cache.mkdir(parents=True)
    host.cache_file().write_text(json.dumps({"version": 1, "hosts": {info.fingerprint: {"date": "x"}}}))
    b = boards.load("host")
    assert "2000-01-01" in b.sources["unit[0].flops_per_cycle"]          # the (fake) fresh measurement
    assert json.loads(host.cache_file().read_text())["hosts"][info.fingerprint]["date"] == "2000-01-01"
