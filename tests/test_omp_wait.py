"""OpenMP wait policy of a process and of a package (edgeops.ort.WAIT_POLICIES), and the
measurement harness's wait for other threads to park (edgeops.lower.measure.settle).

OpenMP reads its policy once, when it starts, so every check that needs a fresh process runs
one (a subprocess with this repository's Python)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from edgeops.lower import measure

ROOT = Path(__file__).resolve().parents[1]


CLEAN = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "EDGEOPS_OMP_WAIT", "EDGEOPS_OMP_WAIT_SET")


def _fresh(code: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if k not in CLEAN}
    e.update(env or {})
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e,
                       cwd=ROOT, timeout=300)
    if check:
        assert r.returncode == 0, r.stderr[-3000:]
    return r


PARALLEL = """
import numpy as np
from numba import njit, prange
@njit(parallel=True)
def _k(x):
    for i in prange(x.shape[0]):
        x[i] += 1
_k(np.zeros(1 << 12))
"""


def test_policy_is_set_before_openmp_starts_and_refused_after():
    r = _fresh(f"""
import os, json
import edgeops.ort as eort
from edgeops import threads as _threads
out = {{}}
eort.configure_openmp()                      # what register does: passive
out["first"] = eort.wait_policy()
_threads.choice(("k", 1)).record(2, False, 1e-3)   # a choice being timed before the switch
out["switched"] = eort.use_wait_policy("spin", "test")   # nothing started OpenMP: it may change
out["timed_again"] = ("k", 1) not in _threads._CHOICES   # the pool costs otherwise now
out["env"] = {{k: os.environ.get(k) for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}}
out["started_before"] = eort.openmp_started()
{PARALLEL}
out["started_after"] = eort.openmp_started()
try:
    eort.use_wait_policy("passive", "a test package")
    out["refused"] = None
except eort.OrtIntegrationError as e:
    out["refused"] = str(e)
out["same"] = eort.use_wait_policy("spin", "test")
try:
    eort.use_wait_policy("sometimes", "test")
except eort.OrtIntegrationError as e:
    out["bad"] = str(e)
print(json.dumps(out))
""")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["first"] == "passive" and out["switched"] == "spin"
    assert out["env"] == {"OMP_WAIT_POLICY": None, "GOMP_SPINCOUNT": str(__import__(
        "edgeops.ort", fromlist=["SPIN_COUNT"]).SPIN_COUNT)}
    assert not out["started_before"] and out["started_after"] and out["timed_again"]
    assert "a test package needs OpenMP wait policy 'passive'" in out["refused"]
    assert "runs 'spin'" in out["refused"] and "OpenMP already started" in out["refused"]
    assert out["same"] == "spin"
    assert "unknown OpenMP wait policy 'sometimes'" in out["bad"] and "passive, spin" in out["bad"]


INHERITED = {"OMP_WAIT_POLICY": "PASSIVE", "EDGEOPS_OMP_WAIT_SET": "OMP_WAIT_POLICY=PASSIVE"}


@pytest.mark.parametrize("env,policy", [({"OMP_WAIT_POLICY": "ACTIVE"}, "OMP_WAIT_POLICY=ACTIVE"),
                                        ({"GOMP_SPINCOUNT": "0"}, "passive"),
                                        ({"OMP_WAIT_POLICY": "PASSIVE"}, "passive"),
                                        ({"EDGEOPS_OMP_WAIT": "spin"}, "spin"),
                                        # a child of a process whose default edgeops set
                                        (INHERITED, "passive"),
                                        ({}, "passive")])
def test_the_users_environment_decides(env, policy):
    r = _fresh("""
import edgeops.ort as eort
eort.configure_openmp()
print(eort.wait_policy())
try:
    eort.use_wait_policy("passive" if eort.wait_policy() != "passive" else "spin", "t")
    print("changed")
except eort.OrtIntegrationError as e:
    print("kept:", e)
""", env)
    lines = r.stdout.strip().splitlines()
    assert lines[0] == policy
    # a policy the user set in the environment is theirs: edgeops does not override it; one an
    # edgeops parent process set by default is not the user's
    if not env or "EDGEOPS_OMP_WAIT" in env or env is INHERITED:
        assert lines[1] == "changed"
    else:
        assert lines[1].startswith("kept:") and "the environment sets" in lines[1]


def test_kernel_table_is_keyed_by_the_wait_policy(monkeypatch):
    from edgeops import boards
    host = boards.load("host")
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    passive = measure.cache_path(host)
    assert measure.machine()["omp_wait"] == "passive"
    monkeypatch.delenv("OMP_WAIT_POLICY")
    monkeypatch.setenv("GOMP_SPINCOUNT", "30000")
    assert measure.machine()["omp_wait"] == "spin"
    assert measure.cache_path(host) != passive


def test_package_names_its_policy_and_a_fresh_process_runs_with_it(tmp_path):
    pkg = tmp_path / "pkg"
    r = subprocess.run([sys.executable, "-m", "edgeops", "compile", "sample", "--board", "rpi5",
                        "-o", str(pkg), "--omp-wait", "spin", "--json"], capture_output=True,
                       text=True, cwd=ROOT, timeout=600,
                       env={k: v for k, v in os.environ.items() if k not in CLEAN})
    assert r.returncode == 0, r.stderr[-3000:]
    manifest = json.loads((pkg / "manifest.json").read_text())
    assert manifest["runtime"]["omp_wait_policy"] == "spin"
    run = f"""
import warnings, numpy as np
warnings.simplefilter("error")
from edgeops import package
import edgeops.ort as eort
p = package.load({str(pkg)!r})
s = p.session()
feeds, want = p.reference()
got = s.run(list(want), feeds)
for g, (k, w) in zip(got, want.items()):
    assert np.abs(g - w).max() <= p.tolerance * max(np.abs(w).max(), 1e-30), k
print(eort.wait_policy())
"""
    assert _fresh(run).stdout.strip().splitlines()[-1] == "spin"
    # a process whose OpenMP already runs passive runs it too, and says it is not as measured
    r = _fresh("import edgeops.ort as eort\neort.configure_openmp()\n" + PARALLEL
               + run.replace('warnings.simplefilter("error")', 'warnings.simplefilter("always")'),
               check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().splitlines()[-1] == "passive"
    assert "needs OpenMP wait policy 'spin'" in r.stderr and "other speeds" in r.stderr


def test_cli_refuses_a_policy_the_environment_contradicts(tmp_path):
    r = subprocess.run([sys.executable, "-m", "edgeops", "compile", "sample", "--board", "host",
                        "-o", str(tmp_path / "p"), "--omp-wait", "spin"], capture_output=True,
                       text=True, cwd=ROOT, timeout=600,
                       env={k: v for k, v in os.environ.items() if k not in CLEAN}
                       | {"OMP_WAIT_POLICY": "PASSIVE"})     # the user's own: no edgeops marker
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "needs OpenMP wait policy 'spin'" in r.stderr + r.stdout
    assert not (tmp_path / "p").exists()


def test_settle_waits_for_a_running_thread_to_stop():
    from numba import njit

    @njit(nogil=True, cache=False)
    def busy(n):      # an LCG: its loop cannot be folded away, and it runs without the GIL
        x = np.uint64(1)
        for _ in range(n):
            x = x * np.uint64(6364136223846793005) + np.uint64(1442695040888963407)
        return x

    busy(10)
    t0 = time.perf_counter()
    busy(1_000_000)
    n = int(1_000_000 * 0.5 / max(time.perf_counter() - t0, 1e-6))    # ~0.5 s of spinning
    t = threading.Thread(target=busy, args=(n,))
    t.start()
    try:
        deadline = time.time() + 5
        while measure._runnable_threads() == 0 and time.time() < deadline:
            time.sleep(0.001)             # until the thread is on a core
        assert measure._runnable_threads() >= 1
        assert measure.settle(timeout_s=0.05) is False   # it runs on: not settled
    finally:
        t.join()
    assert measure.settle(timeout_s=2.0) is True
