"""Run-time fallback rules of a package (manifest ``runtime.fallback``): a failing kernel runs the
op's reference (warned once per node, counted), or the run fails; the NaN guard. Outputs are
compared with ONNX Runtime on the original model (the package's reference outputs)."""
import dataclasses
import warnings

import numpy as np
import pytest

import edgeops.ort as eort
from edgeops import package, registry
from edgeops.errors import EdgeOpsWarning
from edgeops.lower import lower
from edgeops.ort import dispatch, fallback
from edgeops.sample import build_sample_model

NODE, KERNEL = "mlp.gate", "neon.swiglu_fused"


@pytest.fixture(scope="module")
def pkg(tmp_path_factory):
    lw = lower(build_sample_model(), "rpi5", mode="all")
    row = {p.node: p for p in lw.placements}[NODE]
    assert row.kernel == KERNEL
    return package.write(lw, tmp_path_factory.mktemp("fb") / "pkg", seed=3)


@pytest.fixture
def patch_kernel(monkeypatch):
    """Replace a registered kernel's function (a fresh dispatch cache, so sessions see it)."""
    monkeypatch.setattr(dispatch, "_cache", {})
    monkeypatch.setattr(fallback, "_warned", set())
    eort.reset_fallback_counts()

    def patch(fn):     # the kernel is fn alone: no native entry runs the real one instead
        k = registry.kernel_by_name(KERNEL)
        monkeypatch.setitem(registry._BY_NAME, KERNEL, dataclasses.replace(k, fn=fn, native=None))
    yield patch
    eort.reset_fallback_counts()


def _raise(inputs, attrs, tiling=None, **kw):   # the package's node carries a tiling
    raise ValueError("deliberate kernel failure")


def _ours(w):
    return [x for x in w if issubclass(x.category, EdgeOpsWarning) and NODE in str(x.message)]


def test_failing_kernel_runs_the_reference_counted_and_warned_once(pkg, patch_kernel):
    assert pkg.manifest["runtime"]["fallback"]["kernel_error"] == "reference"
    patch_kernel(_raise)
    feeds, want = pkg.reference()
    sess = pkg.session()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for run in (1, 2, 3):
            got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
            errs = package.compare(got, want)
            assert max(e["max_rel"] for e in errs.values()) < pkg.tolerance
            assert eort.fallback_counts() == {NODE: run}       # once per run, only that node
    assert len(_ours(w)) == 1 and "deliberate kernel failure" in str(_ours(w)[0].message)
    eort.reset_fallback_counts()
    assert eort.fallback_counts() == {}


def test_rule_error_raises_after_the_run(pkg, patch_kernel):
    patch_kernel(_raise)
    feeds, _ = pkg.reference()
    for rules in ({"kernel_error": "error"}, None):      # explicit, and a session of one's own
        s = eort.session(pkg.model_path, fallback=rules)
        with pytest.raises(eort.KernelRuntimeError, match=f"node '{NODE}'.*deliberate"):
            s.run(None, feeds)
    assert eort.fallback_counts() == {}


def test_nan_guard_recomputes_non_finite_outputs(pkg, patch_kernel):
    real = registry.kernel_by_name(KERNEL).fn

    def poisoned(inputs, attrs, tiling=None, **kw):
        out = [np.array(o, copy=True) for o in real(inputs, attrs, tiling=tiling, **kw)]
        out[0].reshape(-1)[::7] = np.nan
        return out
    patch_kernel(poisoned)
    feeds, want = pkg.reference()
    rules = dict(pkg.manifest["runtime"]["fallback"])
    off = eort.session(pkg.model_path, fallback=rules).run(None, feeds)[0]
    assert np.isnan(off).any() and eort.fallback_counts() == {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EdgeOpsWarning)
        on = eort.session(pkg.model_path, fallback={**rules, "nan_guard": True}).run(None, feeds)[0]
    name = pkg.model().graph.output[0].name
    assert package.compare({name: on}, want)[name]["max_rel"] < pkg.tolerance
    assert eort.fallback_counts() == {NODE: 1}


@pytest.mark.parametrize("rules, match", [
    ({"kernel_error": "ignore"}, "kernel_error='ignore'"),
    ({"nan_guard": "yes"}, "nan_guard='yes'"),
    ({"unknown_kernel": "load"}, "unknown_kernel='load'"),
    ({"kernel_eror": "reference"}, "unknown fallback rule"),
])
def test_rules_this_edgeops_cannot_follow_are_refused(pkg, rules, match):
    with pytest.raises(eort.OrtIntegrationError, match=match):
        eort.session(pkg.model_path, fallback=rules)


def test_edgeops_run_reports_fallbacks(pkg, patch_kernel):
    from edgeops.run import run_package
    patch_kernel(_raise)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EdgeOpsWarning)
        doc = run_package(pkg, runs=2)
    assert doc["ok"] and doc["fallbacks"] == {NODE: 3}      # warm-up + 2 timed runs
