"""The ``host`` board: the machine edgeops runs on, detected and measured rather than written down.

``host.toml`` gives its figures as ``"detect"`` or ``"measure"``; the loader asks the resolver
from :func:`resolver` for each. Cores, caches, ISA and clock are read from Linux's ``/sys`` and
``/proc`` every time (cheap); the peak fp32 rate and the copy bandwidths are measured once, in a
subprocess pinned to one BLAS thread, and cached as JSON keyed by a machine fingerprint in
``$EDGEOPS_CACHE_DIR`` (else ``$XDG_CACHE_HOME/edgeops``, else ``~/.cache/edgeops``). Every source
string says whether a figure was detected, measured (when, how) or is an estimate.

Off Linux, or where ``/sys`` says nothing, the figures fall back to ``os.cpu_count()`` and typical
cache sizes and say "estimate".
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
import subprocess
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from edgeops import cache
from edgeops.cache import ENV as CACHE_ENV
from edgeops.errors import EdgeOpsWarning

METHOD_VERSION = 1          # bump when the measurement changes; old cache entries are re-measured
SYS_CPU = "/sys/devices/system/cpu"
PROC_CPUINFO = "/proc/cpuinfo"
PROC_MEMINFO = "/proc/meminfo"

# ISA features worth knowing for kernels (x86 /proc/cpuinfo "flags", arm64 "Features")
_FEATURES = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
             "avx512_vnni", "avx_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_int8",
             "asimd", "fphp", "asimdhp", "asimddp", "i8mm", "bf16", "sve", "sve2", "sme")
_KINDS = {"isa": "detect", "memory": "detect", "path": "measure", "clock.hz": "detect",
          "core[0].count": "detect", "unit[0].flops_per_cycle": "measure",
          "launch.overhead_s": "measure"}


@dataclass
class CacheLevel:
    name: str           # l1d, l2, l3 ...
    level: int
    size_bytes: int     # per instance of the memory level in the board (per core for scope cpu)
    scope: str          # "chip" or "cpu"
    line_bytes: int
    source: str


@dataclass
class HostInfo:
    system: str
    machine: str
    cpu_model: str
    logical: list[int]
    physical_cores: int
    count_source: str
    clock_hz: float
    clock_source: str
    isa: list[str]
    isa_source: str
    caches: list[CacheLevel]         # outermost first
    mem_bytes: int
    mem_source: str
    features: set[str] = field(default_factory=set)

    @property
    def fingerprint(self) -> str:
        return f"{self.machine}|{self.cpu_model}|{self.physical_cores}c|m{METHOD_VERSION}"


# ------------------------------------------------------------------------------------------
# detection

def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _cpulist(text: str) -> set[int]:
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if "-" in part:
            a, b = part.split("-")
            out.update(range(int(a), int(b) + 1))
        elif part:
            out.add(int(part))
    return out


def _size(text: str) -> int:
    t = text.strip().upper()
    mult = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(t[-1:], 1)
    return int(t.rstrip("KMGB") or 0) * mult


def _cpuinfo(path: str) -> dict[str, str]:
    info: dict[str, str] = {}
    try:
        text = Path(path).read_text()
    except OSError:
        return info
    for line in text.splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            info.setdefault(k.strip().lower(), v.strip())   # first CPU's entry
            if k.strip().lower() == "cpu mhz":               # keep the highest clock seen
                try:
                    info["cpu mhz"] = str(max(float(v), float(info["cpu mhz"])))
                except ValueError:
                    pass
    return info


def detect(sys_cpu: str = SYS_CPU, cpuinfo: str = PROC_CPUINFO, meminfo: str = PROC_MEMINFO,
           affinity: set[int] | None = None) -> HostInfo:
    """What this machine is, without running any benchmark. Paths are parameters for tests."""
    sysdir = Path(sys_cpu)
    if affinity is None:
        try:
            affinity = set(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            affinity = set(range(os.cpu_count() or 1))
    cpus = sorted(affinity)
    ci = _cpuinfo(cpuinfo)
    model = (ci.get("model name") or ci.get("hardware") or ci.get("cpu part")
             or platform.processor() or platform.machine() or "unknown cpu")
    if "model name" not in ci and "cpu part" in ci:   # arm64: name the core by its part number
        model = f"{ci.get('cpu implementer', '?')}:{ci['cpu part']}"

    # physical cores: distinct (package, core_id) among the CPUs we may run on
    phys = set()
    for c in cpus:
        core = _read(sysdir / f"cpu{c}/topology/core_id")
        pkg = _read(sysdir / f"cpu{c}/topology/physical_package_id") or "0"
        phys.add((pkg, core if core is not None else f"cpu{c}"))
    has_topo = _read(sysdir / f"cpu{cpus[0]}/topology/core_id") is not None
    if has_topo:
        n_phys = len(phys)
        count_src = (f"detected from os.sched_getaffinity ({len(cpus)} logical CPUs) and "
                     f"{sysdir}/cpu*/topology ({n_phys} physical cores)")
    else:
        n_phys = len(cpus)
        count_src = (f"estimate: {len(cpus)} logical CPUs from os.cpu_count/sched_getaffinity; "
                     f"no topology in {sysdir} to tell SMT siblings apart")

    clock, clock_src = _clock(sysdir, cpus, ci, model)
    flags = set((ci.get("flags") or ci.get("features") or "").split())
    feats = [f for f in _FEATURES if f in flags]
    isa = [platform.machine() or "unknown"] + feats
    isa_src = (f"detected from {cpuinfo} ({'flags' if 'flags' in ci else 'Features'})" if flags
               else f"estimate: {cpuinfo} lists no ISA features; only platform.machine() known")
    caches = _caches(sysdir, cpus, phys_of={c: _phys_id(sysdir, c) for c in cpus},
                     all_phys=n_phys)
    mem, mem_src = _memory(meminfo)
    return HostInfo(system=platform.system(), machine=platform.machine(), cpu_model=model,
                    logical=cpus, physical_cores=n_phys, count_source=count_src,
                    clock_hz=clock, clock_source=clock_src, isa=isa, isa_source=isa_src,
                    caches=caches, mem_bytes=mem, mem_source=mem_src, features=set(feats))


def _phys_id(sysdir: Path, c: int):
    return (_read(sysdir / f"cpu{c}/topology/physical_package_id") or "0",
            _read(sysdir / f"cpu{c}/topology/core_id") or f"cpu{c}")


def _clock(sysdir: Path, cpus: list[int], ci: dict, model: str) -> tuple[float, str]:
    khz = [int(v) for c in cpus
           if (v := _read(sysdir / f"cpu{c}/cpufreq/cpuinfo_max_freq")) and v.isdigit()]
    if khz:
        return max(khz) * 1e3, f"detected from {sysdir}/cpu*/cpufreq/cpuinfo_max_freq (highest core)"
    if "cpu mhz" in ci:
        try:
            return float(ci["cpu mhz"]) * 1e6, ("detected from /proc/cpuinfo 'cpu MHz' (no cpufreq "
                                                 "in /sys: the reported, not the boost, clock)")
        except ValueError:
            pass
    m = re.search(r"@\s*([\d.]+)\s*GHz", model)
    if m:
        return float(m.group(1)) * 1e9, "detected from the CPU model name in /proc/cpuinfo"
    return 2.0e9, ("estimate: the OS exposes no clock; 2 GHz assumed (peak FLOP/s stays right: "
                   "flops_per_cycle is derived from the measured rate with this same clock)")


def _caches(sysdir: Path, cpus: list[int], phys_of: dict, all_phys: int) -> list[CacheLevel]:
    base = sysdir / f"cpu{cpus[0]}/cache"
    found = []
    for idx in sorted(base.glob("index*")) if base.is_dir() else []:
        ctype = _read(idx / "type")
        level, size = _read(idx / "level"), _read(idx / "size")
        if ctype not in ("Data", "Unified") or not level or not size:
            continue
        shared = _cpulist(_read(idx / "shared_cpu_list") or str(cpus[0])) & set(cpus)
        sharing_phys = len({phys_of[c] for c in shared}) or 1
        inst = _size(size)
        line = int(_read(idx / "coherency_line_size") or 64)
        lv = int(level)
        name = "l1d" if lv == 1 else f"l{lv}"
        where = (f"detected from {idx} (level {lv}, {ctype}, {size}, shared_cpu_list "
                 f"{_read(idx / 'shared_cpu_list')})")
        if sharing_phys >= all_phys and all_phys > 1:
            found.append(CacheLevel(name, lv, inst, "chip", line, where))
        elif sharing_phys > 1:
            found.append(CacheLevel(name, lv, inst // sharing_phys, "cpu", line,
                                    where + f"; shared by {sharing_phys} cores, per-core share"))
        else:
            found.append(CacheLevel(name, lv, inst, "cpu", line, where))
    if not found:
        est = f"estimate: no cache information in {sysdir}; typical per-core sizes"
        found = [CacheLevel("l2", 2, 1024 * 1024, "cpu", 64, est),
                 CacheLevel("l1d", 1, 32 * 1024, "cpu", 64, est)]
    # one entry per level (the first data/unified cache of that level), outermost first
    by_level = {}
    for c in found:
        by_level.setdefault(c.level, c)
    return [by_level[k] for k in sorted(by_level, reverse=True)]


def _memory(meminfo: str) -> tuple[int, str]:
    try:
        for line in Path(meminfo).read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024, f"detected from {meminfo} MemTotal"
    except (OSError, ValueError, IndexError):
        pass
    try:
        return (os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"),
                "detected from os.sysconf(SC_PHYS_PAGES * SC_PAGE_SIZE)")
    except (AttributeError, ValueError, OSError):
        return 8 * 1024 ** 3, "estimate: the OS does not report its memory size; 8 GiB assumed"


# ------------------------------------------------------------------------------------------
# measurement (once per machine, cached)

_PROBE = r"""
import json, sys, time
import numpy as np
cfg = json.loads(sys.argv[1])
out = {}

def best(fn, budget, reps_max):
    fn(); ts = []; t_end = time.perf_counter() + budget
    while len(ts) < reps_max and (not ts or time.perf_counter() < t_end):
        t0 = time.perf_counter(); fn(); ts.append(time.perf_counter() - t0)
    return min(ts), len(ts)

rng = np.random.default_rng(0)
n = cfg["n"]
a = rng.standard_normal((n, n), dtype=np.float32); b = rng.standard_normal((n, n), dtype=np.float32)
c = np.empty((n, n), np.float32)
t, reps = best(lambda: np.matmul(a, b, out=c), 1.0, 5)
out["fp32_flops_per_s"] = 2.0 * n ** 3 / t
out["matmul"] = f"best of {reps} single-thread float32 {n}x{n}x{n} matmuls (numpy "\
    f"{np.__version__}, BLAS threads pinned to 1)"

tiny = np.ones(1, np.float32); tout = np.empty(1, np.float32)
ts = []
for _ in range(2000):
    t0 = time.perf_counter(); np.add(tiny, tiny, out=tout); ts.append(time.perf_counter() - t0)
ts.sort(); overhead = ts[len(ts) // 2]
out["dispatch_s"] = overhead

out["copy"] = {}
for name, nbytes in cfg["copy"].items():
    src = np.ones(nbytes // 4, np.float32); dst = np.zeros_like(src)
    inner = max(1, int(cfg["copy_inner"].get(name, 1)))
    def run():
        for _ in range(inner):
            np.copyto(dst, src)
    t, reps = best(run, 0.25, 50)
    per = max(t / inner - overhead, 1e-9)
    out["copy"][name] = {"bytes_per_s": 2.0 * src.nbytes / per, "array_bytes": src.nbytes,
                         "reps": reps}
print(json.dumps(out))
"""


def cache_dir() -> Path:
    return cache.root()


def cache_file() -> Path:
    return cache_dir() / "host.json"


def _copy_plan(info: HostInfo) -> tuple[dict[str, int], dict[str, int]]:
    """Array sizes for the copy benchmarks: per cache level beyond L1 the working set (source +
    destination) is half the level, and for DRAM far beyond the last-level cache."""
    plan, inner = {}, {}
    for c in info.caches:
        if c.level >= 2:
            nbytes = max(c.size_bytes // 4, 4096)
            plan[c.name] = nbytes
            inner[c.name] = max(1, (8 << 20) // nbytes)   # ~8 MiB per timed run
    llc = max((c.size_bytes for c in info.caches), default=1 << 20)
    avail = info.mem_bytes // 8 if info.mem_bytes else 256 << 20
    plan["dram"] = int(min(max(64 << 20, 8 * llc), 256 << 20, avail))
    return plan, inner


def measure(info: HostInfo) -> dict:
    """Run the benchmarks in a fresh interpreter with one BLAS thread; a few seconds at most."""
    plan, inner = _copy_plan(info)
    n = 1024 if info.clock_hz >= 1.5e9 else 512
    env = dict(os.environ)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS"):
        env[var] = "1"
    t0 = _dt.datetime.now()
    proc = subprocess.run([sys.executable, "-c", _PROBE,
                           json.dumps({"n": n, "copy": plan, "copy_inner": inner})],
                          capture_output=True, text=True, env=env, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"host probe failed: {proc.stderr.strip()[-500:]}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    res["date"] = t0.date().isoformat()
    res["seconds"] = round((_dt.datetime.now() - t0).total_seconds(), 2)
    res["fingerprint"] = info.fingerprint
    return res


def measured(info: HostInfo) -> dict:
    """The cached measurement for this machine, measuring (and caching) it on first use."""
    path = cache_file()
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        doc = {}
    hosts = doc.get("hosts", {}) if isinstance(doc, dict) else {}
    hosts = hosts if isinstance(hosts, dict) else {}
    hit = hosts.get(info.fingerprint)
    plan, _ = _copy_plan(info)
    if (isinstance(hit, dict) and {"fp32_flops_per_s", "dispatch_s", "copy", "date"} <= set(hit)
            and set(plan) <= set(hit["copy"])):
        return hit
    try:
        res = measure(info)
    except Exception as e:  # a failed probe must not make every board unusable
        return {"failed": f"{type(e).__name__}: {e}"}
    hosts[info.fingerprint] = res
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps({"version": 1, "hosts": hosts}, indent=2))
        os.replace(tmp, path)
    except OSError as e:
        warnings.warn(f"could not cache the host measurement in {path} ({e}); it will be "
                      f"measured again next time (set {CACHE_ENV} to a writable directory)",
                      EdgeOpsWarning, stacklevel=2)
    return res


# ------------------------------------------------------------------------------------------
# the resolver the loader calls

class _Resolver:
    def __init__(self, info: HostInfo):
        self.info = info
        self._m: dict | None = None

    @property
    def m(self) -> dict:
        if self._m is None:
            self._m = measured(self.info)
        return self._m

    def _measured_src(self, what: str) -> str:
        return (f"measured on this host ({self.info.cpu_model}) by edgeops.boards.host on "
                f"{self.m['date']}: {what}")

    def __call__(self, key: str, kind: str):
        want = _KINDS.get(key)
        if want is None:
            raise KeyError(f"edgeops.boards.host cannot {kind} this figure; give a number and "
                           f"its source (it can: {', '.join(sorted(_KINDS))})")
        if kind != want:
            done = {"detect": "detected", "measure": "measured"}
            raise KeyError(f"this figure is {done[want]}, not {done.get(kind, kind)}: write {want!r}")
        return getattr(self, "_" + key.replace("[0]", "").replace(".", "_"))()

    # ---- detected
    def _isa(self):
        return list(self.info.isa), self.info.isa_source

    def _clock_hz(self):
        return self.info.clock_hz, self.info.clock_source

    def _core_count(self):
        return self.info.physical_cores, self.info.count_source

    def _memory(self):
        i = self.info
        mems = [{"name": "dram", "size_bytes": i.mem_bytes, "scope": "chip", "offchip": True,
                 "alignment_bytes": i.caches[0].line_bytes,
                 "source": {"size_bytes": i.mem_source,
                            "alignment_bytes": f"{i.caches[0].source}: one cache line"}}]
        for c in i.caches:
            mems.append({"name": c.name, "size_bytes": c.size_bytes, "scope": c.scope,
                         "offchip": False, "alignment_bytes": c.line_bytes,
                         "source": {"size_bytes": c.source,
                                    "alignment_bytes": f"{c.source}: coherency_line_size"}})
        return mems, None

    # ---- measured
    def _path(self):
        i, m = self.info, self.m
        levels = ["dram"] + [c.name for c in i.caches]
        lat_cycles = {1: 4, 2: 14, 3: 45}
        paths = []
        for k, (src, dst) in enumerate(zip(levels, levels[1:])):
            inner = i.caches[k]
            outer = None if src == "dram" else i.caches[k - 1]
            if "failed" in m:
                bw = 8 * i.clock_hz if src != "dram" else 10e9
                bw_src = f"estimate: the host measurement failed ({m['failed']})"
            else:
                c = m["copy"][src]
                bw = c["bytes_per_s"]
                bw_src = self._measured_src(
                    f"single-thread numpy copy of a {c['array_bytes'] >> 10} KiB array "
                    f"(working set in {src}), best of {c['reps']}, read+write bytes counted, "
                    f"per-call dispatch subtracted")
            if src == "dram":
                lat, lat_src = 100e-9, "estimate: typical DRAM load-to-use latency (~100 ns)"
            else:
                cyc = lat_cycles.get(outer.level, 60)
                lat = cyc / i.clock_hz
                lat_src = f"estimate: typical L{outer.level} load-to-use latency (~{cyc} cycles)"
            line = inner.line_bytes
            paths.append({"src": src, "dst": dst, "engine": "cache", "bandwidth_bytes_per_s": bw,
                          "setup_latency_s": lat, "burst_bytes": line, "shared": src == "dram",
                          "source": {"bandwidth_bytes_per_s": bw_src, "setup_latency_s": lat_src,
                                     "burst_bytes": f"{inner.source}: one cache line"}})
        return paths, None

    def _unit_flops_per_cycle(self):
        i, m = self.info, self.m
        if "failed" in m:
            fp32 = 8.0
            head = f"estimate: the host measurement failed ({m['failed']}); 8 FLOP/cycle assumed"
        else:
            fp32 = round(m["fp32_flops_per_s"] / i.clock_hz, 3)
            head = self._measured_src(
                f"fp32 = {m['matmul']} = {m['fp32_flops_per_s'] / 1e9:.1f} GFLOP/s / "
                f"{i.clock_hz / 1e9:.2f} GHz")
        f = i.features
        if {"asimdhp", "avx512_fp16"} & f:
            fp16, why16 = 2 * fp32, "native fp16 arithmetic (asimdhp/avx512_fp16): 2x the fp32 lanes"
        else:
            fp16, why16 = fp32, "no native fp16 arithmetic: computed in fp32"
        if {"asimddp", "avx512_vnni", "avx_vnni", "i8mm", "amx_int8"} & f:
            i8, why8 = 4 * fp32, "int8 dot-product instructions (sdot/vnni): 4 MACs per 32-bit lane"
        else:
            i8, why8 = 2 * fp32, "no int8 dot product: widening multiply-add, ~2x the fp32 rate"
        return ({"fp32": fp32, "fp16": fp16, "int8": i8},
                f"{head}; fp16 and int8 are estimates from the ISA: {why16}; {why8}")

    def _launch_overhead_s(self):
        m = self.m
        if "failed" in m:
            return 5e-6, f"estimate: the host measurement failed ({m['failed']}); 5 us assumed"
        return m["dispatch_s"], self._measured_src(
            "median of 2000 one-element numpy ufunc calls, a lower bound on per-op Python dispatch")


def resolver():
    """``fn(key, kind) -> (value, source)`` for the ``"detect"``/``"measure"`` figures of host.toml.

    Unknown keys or a wrong kind raise ``KeyError`` with the reason (the loader turns it into a
    ``BoardError`` naming the file and key).
    """
    return _Resolver(detect())
