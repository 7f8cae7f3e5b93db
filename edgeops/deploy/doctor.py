"""``edgeops doctor``: a health checklist of a board, run on the board by its agent
(``python -m edgeops.deploy.board doctor ROOT``); :func:`doctor` here, :func:`checks_here` there.

One line per check, status ``ok``, ``warn`` or ``fail``; the CLI exits 1 when any fails. The 23
checks, in order (the field checklist: environment, board state, then the deployed package)::

     1 python                  Python >= 3.10
     2 numpy                   installed and >= the version edgeops requires (pyproject.toml)
     3 numba                     "
     4 onnxruntime               "
     5 onnxruntime-extensions    " ; and which bridge packages use: native (prebuilt or built
                               here) or onnxruntime-extensions' as the fallback (warn, with why)
     6 onnx                      "
     7 edgeops                 the board's edgeops is the deploying host's version
     8 cpu-features            asimd (NEON) on aarch64, AVX/AVX2 on x86-64, and every SIMD feature
                               the package's board file names, from /proc/cpuinfo
     9 board-match             this machine's architecture is the one the package was compiled for
    10 cuda                    on Jetson (gpu) boards: a CUDA GPU is visible to numba.cuda
    11 cuda-fallbacks          cuda-kernel calls that ran on the CPU fallback during these runs
    12 disk                    free disk at the board root (room for another package)
    13 memory                  available memory
    14 board-layout            current/previous links resolve; no staging left by dead deploys
    15 package-integrity       the current package's checksums and kernel ids (package.load)
    16 ops-registered          every ai.edgeops op of the model is declared to ONNX Runtime
    17 dispatch                every lowered node dispatches to the kernel and target the
                               placement table names
    18 kernel-consistency      per lowered node, its target kernel vs the op's reference kernel on
                               random inputs of the node's shapes (< 1e-5 rel fp32, 2e-2 fp16)
    19 numba-cache             the first run of this fresh process compiled nothing (warm cache)
    20 memory-growth           RSS slope over N runs (no leak per run)
    21 fusion                  the fused graph on reference kernels vs the unfused original's
                               ONNX Runtime outputs (the package's reference outputs)
    22 fallback-rules          the manifest's fallback rules hold: unknown kernels refused, nodes
                               without a kernel left to ONNX Runtime, no kernel error in the runs
    23 smoke                   the package's reference inputs reproduce its reference outputs
"""
from __future__ import annotations

import platform
import shutil
import sys
import time
from pathlib import Path

from edgeops.deploy.checks import CHECKS, FAIL, OK, WARN, NoPackage, check
from edgeops.deploy.layout import (NEEDS, PYTHON_MIN, REQUIRES, BoardError, current_dir,
                                   mem_available, status, vtuple)
from edgeops.errors import DeployError

SIMD = {"asimd", "fphp", "asimdhp", "asimddp", "sve", "sse4_2", "avx", "avx2", "fma", "f16c",
        "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16"}


def doctor(to, *, runs: int = 20) -> dict:
    """Run the checklist on the board at ``to``; the ``--json`` document (``ok``: no fail)."""
    from edgeops._version import __version__
    from edgeops.deploy.transports import open_transport
    from edgeops.deploy.push import require_root
    t = open_transport(to)
    require_root(t)
    rc, doc, err = t.board("doctor", t.root, "--expect-version", __version__, "--runs",
                           str(runs), check=False)
    if doc is None:
        last = err.strip().splitlines()[-1] if err.strip() else f"exit status {rc}"
        raise DeployError(f"the doctor could not run on {t.uri}: {last}; edgeops deploy pushes "
                          f"edgeops to the board and names what else it lacks")
    return doc | {"to": t.uri}


class _Ctx:
    def __init__(self, root, expect_version, runs):
        self.root, self.expect, self.runs = Path(root), expect_version, max(5, runs)
        self.pkg = self.sess = self.first = None
        self.errors: list[str] = []
        self.inputs: dict = {}

    def package(self):
        if self.pkg is None:
            from edgeops import package
            try:
                cur = current_dir(self.root)
            except BoardError as e:
                raise NoPackage(str(e)) from None
            self.pkg = package.load(cur)
        return self.pkg

    def run_once(self):
        """The first run in this process: its Numba figures and every lowered node's inputs."""
        if self.first is None:
            from edgeops.deploy.bench import numba_stats
            from edgeops.ort import dispatch
            p = self.package()
            ins, _ = p.reference()
            seen = self.inputs
            orig = dispatch._Dispatch.call

            def call(d, inputs):
                seen.setdefault(d.node, (d, [None if x is None else x.copy() for x in inputs]))
                return orig(d, inputs)
            dispatch._Dispatch.call = call
            try:
                # from the session's making on: a static session's nodes run through Python
                # once there (edgeops.ort.native.prepare_programs), then from native programs
                self.sess = p.session()
                outs = self._run(ins)
            finally:
                dispatch._Dispatch.call = orig
            self.first = (outs, numba_stats())
        return self.first

    def _run(self, feeds):
        from edgeops.ort import KernelRuntimeError
        names = [o.name for o in self.sess.get_outputs()]
        try:
            return dict(zip(names, self.sess.run(names, feeds)))
        except KernelRuntimeError as e:
            self.errors.append(str(e))
            raise


def checks_here(root, *, expect_version=None, runs: int = 20) -> dict:
    """On the board: every check's ``{name, status, detail}``, in order. A board root that does
    not exist, or a current package whose manifest does not follow the schema, is refused (the
    agent's exit 2) rather than reported as failed checks."""
    from edgeops.deploy.layout import require_root
    from edgeops.manifest import ManifestError
    ctx = _Ctx(require_root(root), expect_version, runs)
    try:
        ctx.package()
    except NoPackage:
        pass
    except ManifestError as e:
        raise BoardError(str(e)) from None
    except Exception:  # noqa: BLE001  (reported by the package-integrity check below)
        ctx.pkg = None
    rows = []
    for name, fn in CHECKS:
        t0 = time.perf_counter()
        try:
            status, detail = fn(ctx)
        except NoPackage as e:
            status, detail = WARN, f"no package to check ({e})"
        except Exception as e:  # noqa: BLE001  (a check that cannot run is a failed check)
            status, detail = FAIL, f"{type(e).__name__}: {' '.join(str(e).split())}"[:400]
        rows.append({"name": name, "status": status, "detail": detail,
                     "seconds": round(time.perf_counter() - t0, 3)})
    counts = {s: sum(r["status"] == s for r in rows) for s in (OK, WARN, FAIL)}
    return {"root": str(root), "machine": platform.machine(), "checks": rows, "counts": counts,
            "ok": counts[FAIL] == 0, "installed_as": ctx.pkg.path.name if ctx.pkg else None}


# ---- environment ------------------------------------------------------------------------------

@check("python")
def _python(ctx):
    v = platform.python_version()
    need = ".".join(map(str, PYTHON_MIN))
    return (OK if sys.version_info[:2] >= PYTHON_MIN else FAIL), f"{v} (needs >= {need})"


def _module_check(mod):
    def fn(ctx):
        import importlib
        dist, vmin = REQUIRES[mod]
        try:
            v = getattr(importlib.import_module(mod), "__version__", "0")
        except Exception as e:  # noqa: BLE001  (a broken install is a finding)
            return FAIL, f"cannot import {mod} ({type(e).__name__}: {e}); {NEEDS[mod]}"
        if vtuple(v) < vtuple(vmin):
            return FAIL, f"{v} is older than {vmin}; {NEEDS[mod]}"
        return OK, f"{v} (needs >= {vmin})"
    return fn


def _extensions_check():
    """onnxruntime-extensions' version, and which bridge packages use: the native one
    (prebuilt or built here) or onnxruntime-extensions' as the fallback, and why (warn)."""
    base = _module_check("onnxruntime_extensions")

    def fn(ctx):
        st, detail = base(ctx)
        try:
            from edgeops.ort import native
            line, used = native.describe(), native.status()["used"]
        except Exception as e:  # noqa: BLE001  (a broken bridge is a finding)
            line, used = f"native bridge: {type(e).__name__}: {e}", False
        return (WARN if st == OK and not used else st), f"{detail}; {line}"
    return fn


for _m, _label in (("numpy", "numpy"), ("numba", "numba"), ("onnxruntime", "onnxruntime"),
                   ("onnxruntime_extensions", "onnxruntime-extensions"), ("onnx", "onnx")):
    check(_label)(_extensions_check() if _m == "onnxruntime_extensions" else _module_check(_m))


@check("edgeops")
def _edgeops(ctx):
    import edgeops
    from edgeops._version import __version__
    where = str(Path(edgeops.__file__).parent)
    if ctx.expect and ctx.expect != __version__:
        return FAIL, (f"board has {__version__}, host has {ctx.expect}; edgeops deploy pushes "
                      f"the host's")
    return OK, f"{__version__} from {where}"


def _cpu_flags() -> set:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        key = line.split(":", 1)[0].strip().lower()
        if key in ("flags", "features"):
            return set(line.split(":", 1)[1].split())
    return set()


def _board(ctx):
    from edgeops import boards
    try:
        return boards.load(ctx.package().manifest["board"]["name"])
    except NoPackage:
        return None


@check("cpu-features")
def _cpu(ctx):
    flags, m = _cpu_flags(), platform.machine()
    need = {"aarch64": {"asimd"}, "arm64": {"asimd"}, "x86_64": {"avx"}}.get(m, set())
    b = _board(ctx)
    if b is not None and b.name != "host":
        need |= set(b.isa) & SIMD
    missing = sorted(need - flags)
    have = sorted(flags & SIMD)
    if not flags:
        return WARN, "no /proc/cpuinfo to read CPU features from"
    if missing:
        return FAIL, f"{m} lacks {', '.join(missing)} (has {', '.join(have) or 'no SIMD'})"
    if m == "x86_64" and "avx2" not in flags:
        return WARN, "AVX without AVX2: Numba kernels run, slower"
    return OK, f"{m}: {', '.join(have)}"


@check("board-match")
def _board_match(ctx):
    b = _board(ctx)
    if b is None:
        raise NoPackage("no current package")
    m = platform.machine()
    isa = set(b.isa)
    want = ("aarch64" if isa & {"asimd", "armv8.2-a"} else "x86_64" if isa & {"avx", "avx2"}
            else None)
    if b.kind == "npu":
        return WARN, f"package compiled for NPU board {b.name}: its kernels run emulated here ({m})"
    if want is None or want == m or (want == "aarch64" and m == "arm64"):
        return OK, f"package for {b.name} ({b.kind}) on {m}"
    return WARN, f"package compiled for {b.name} ({want}) runs on {m}: predictions do not apply"


@check("cuda")
def _cuda(ctx):
    b = _board(ctx)
    if b is None or b.kind != "gpu":
        return OK, "not a CUDA board (nothing to check)"
    from edgeops.targets.cuda import device
    if device.gpu_present():
        return OK, "numba.cuda sees a GPU"
    return FAIL, f"no CUDA GPU visible: {device.why_absent()}; cuda kernels fall back to the CPU"


@check("cuda-fallbacks")
def _cuda_fallbacks(ctx):
    ctx.run_once()
    import sys as _sys
    dev = _sys.modules.get("edgeops.targets.cuda.device")
    n = dev.fallback_count() if dev is not None else 0
    b = _board(ctx)
    if n and b is not None and b.kind == "gpu":
        return FAIL, f"{n} cuda-kernel call(s) ran on the CPU fallback"
    return (WARN if n else OK), f"{n} CUDA->CPU fallback call(s) in the first run"


@check("disk")
def _disk(ctx):
    root = ctx.root if ctx.root.is_dir() else Path.cwd()
    free = shutil.disk_usage(root).free
    try:
        size = sum(f.stat().st_size for f in ctx.package().path.iterdir())
    except NoPackage:
        size = 0
    detail = f"{free / 2**20:.0f} MiB free at {root} (package {size / 2**20:.1f} MiB)"
    if free < size + (16 << 20):
        return FAIL, detail + ": no room for another package"
    return (OK if free >= 2 * size + (256 << 20) else WARN), detail


@check("memory")
def _memory(ctx):
    m = mem_available()
    if m is None:
        return WARN, "MemAvailable unknown (no /proc/meminfo)"
    st = OK if m >= 256 << 20 else WARN if m >= 64 << 20 else FAIL
    return st, f"{m / 2**20:.0f} MiB available"


@check("board-layout")
def _layout(ctx):
    s = status(ctx.root)
    bad = [n for n in ("current", "previous") if s[n] and not (ctx.root / s[n]).is_dir()]
    if bad:
        return FAIL, f"{' and '.join(bad)} point(s) at a missing package; edgeops deploy --rollback"
    if s["staging"]:
        return WARN, (f"{len(s['staging'])} staging dir(s) left by failed deploys; "
                      f"edgeops deploy --clean removes them")
    return OK, f"current {s['current']}, previous {s['previous']}"


from edgeops.deploy import doctor_package  # noqa: E402,F401  (registers checks 15-23)

assert len(CHECKS) == 23, len(CHECKS)
