"""The executor process: one ONNX Runtime session of the package with edgeops' ops, fed over a
pipe by the scheduler. Started with the spawn context (ONNX Runtime's and Numba's thread pools do
not survive a fork); a crash or hang here costs this process only.

Protocol on the pipe (pickled tuples)::

    worker -> ("ready", info) | ("failed", message)      once, after loading and the smoke test
    sched  -> ("run", job_id, feeds) | ("stop",)
    worker -> ("ok", job_id, outputs, stats) | ("error", job_id, kind, message, stats)

Tests only: ``EDGEOPS_SERVE_TEST_HOOK=/path/file.py`` runs that file in the worker before the
session is made (tests/serve/faults.py swaps kernels for ones that crash, hang or raise on a
trigger input). Nothing else reads it.
"""
from __future__ import annotations

import os
import sys
import time

TEST_HOOK_ENV = "EDGEOPS_SERVE_TEST_HOOK"


def main(conn, pkg_path: str, settings, worker_id: int, smoke: bool = True) -> None:
    try:
        runner = Runner(pkg_path, settings, worker_id)
        info = runner.start(smoke)
    except BaseException as e:  # noqa: BLE001  (reported to the scheduler, which decides)
        msg = str(e) if _user_error(e) else f"{type(e).__name__}: {e}"
        try:
            conn.send(("failed", msg))
        finally:
            return
    conn.send(("ready", info))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):    # the scheduler went away
            return
        if msg[0] == "stop":
            return
        _, job_id, feeds = msg
        try:
            outs = runner.run(feeds)
            conn.send(("ok", job_id, outs, runner.stats()))
        except Exception as e:  # noqa: BLE001  (one request's failure; the worker lives on)
            kind = getattr(e, "kind", "kernel" if _user_error(e) else "internal")
            conn.send(("error", job_id, kind, str(e) if _user_error(e) else
                       f"{type(e).__name__}: {e}", runner.stats()))


def _user_error(e) -> bool:
    from edgeops.errors import EdgeOpsError
    return isinstance(e, EdgeOpsError)


class Runner:
    """The package's session plus the rules that may replace it: target conditions at start,
    and the output guard (NaN/Inf outputs switch to a fallback precision or package)."""

    def __init__(self, pkg_path: str, settings, worker_id: int):
        self.path, self.s, self.id = pkg_path, settings, worker_id
        self.mode = "package"           # or "cpu (rule ...)", "fp32 (output guard)", "package PATH"
        self.guard_trips = 0

    def start(self, smoke: bool) -> dict:
        from edgeops import package
        hook = os.environ.get(TEST_HOOK_ENV)
        if hook:
            import runpy
            runpy.run_path(hook, run_name="edgeops_serve_test_hook")
        self.pkg = package.load(self.path)
        self.pkg.apply_wait_policy()     # a fresh worker process: nothing started OpenMP yet
        self.names = [o["name"] for o in self.pkg.manifest["outputs"]]
        from edgeops.serve.rules import triggered
        rule = triggered(self.s.target_rules, self.pkg.manifest.get("targets", []))
        if rule is not None:
            self.sess = self._retargeted(self.pkg, "neon")
            self.mode = f"cpu (rule {rule.describe()})"
        else:
            # the verified model's sha256: the prepared model is kept for the next worker
            self.sess = self._session(self.pkg.model_path,
                                      model_sha256=self.pkg.manifest["files"]["model.onnx"]["sha256"])
        self.fallback_sess = None
        t0 = time.perf_counter()
        ins, want = self.pkg.reference()
        got = self.run(dict(ins))        # warm-up: Numba compiles or loads its cache here
        worst = None
        if smoke:
            errs = package.compare(got, want)
            worst = max((e["max_rel"] for e in errs.values()), default=0.0)
            if not worst <= self.pkg.tolerance:
                from edgeops.errors import PackageError
                raise PackageError(f"smoke test of {self.path} failed: max relative error "
                                   f"{worst:.3g} on its reference inputs, tolerance "
                                   f"{self.pkg.tolerance:g}")
        return {"pid": os.getpid(), "mode": self.mode, "smoke_max_rel": worst,
                "warmup_s": time.perf_counter() - t0, "version": version_of(self.pkg)}

    # ---- sessions ----------------------------------------------------------------------------
    def _session(self, model, target: str = "reference", model_sha256: str | None = None):
        from edgeops import ort as eort
        kw = {"fallback": self.s.fallback} if self.s.fallback else {}
        return eort.session(model, target=target, threads=self.s.threads,
                            model_sha256=model_sha256, **kw)

    def _retargeted(self, pkg, target: str):
        """The package with every node's kernel choice dropped: ``target``'s best kernel for
        each node, else the numpy reference (fp32)."""
        from edgeops.package import unpinned
        return self._session(unpinned(pkg.model()), target)

    def _guard_fallback(self):
        if self.s.guard_package:
            from edgeops import package
            p = package.load(self.s.guard_package)
            return self._session(p.model_path), f"package {p.path}"
        return self._retargeted(self.pkg, "reference"), "fp32 (numpy reference kernels)"

    # ---- running -----------------------------------------------------------------------------
    def run(self, feeds: dict) -> dict:
        outs = self._run(self.sess, feeds)
        if self.s.guard and not _finite(outs):
            self.guard_trips += 1
            if self.fallback_sess is None:
                self.fallback_sess, how = self._guard_fallback()
                print(f"edgeops serve worker {self.id}: outputs had NaN/Inf; switching to "
                      f"{how}", file=sys.stderr)
                self.sess, self.mode = self.fallback_sess, f"{how} (output guard)"
            outs = self._run(self.sess, feeds)
        if not _finite(outs) and self.s.guard:
            from edgeops.serve.protocol import ServeError
            raise ServeError("outputs contain NaN/Inf on the fallback too", kind="nan_outputs")
        return outs

    def _run(self, sess, feeds) -> dict:
        import numpy as np
        # a raising kernel is handled inside the session by edgeops.ort's per-node fallback
        # (the manifest's kernel_error rule); what still raises here is a real failure
        vals = sess.run(self.names, feeds)
        return {n: np.asarray(v) for n, v in zip(self.names, vals)}

    def stats(self) -> dict:
        from edgeops import ort as eort
        return {"fallbacks": eort.fallback_counts(), "guard_trips": self.guard_trips,
                "mode": self.mode}


def _finite(outs: dict) -> bool:
    import numpy as np
    return all(np.isfinite(v).all() for v in outs.values() if v.dtype.kind == "f")


def version_of(pkg) -> dict:
    m = pkg.manifest
    return {"path": str(pkg.path), "name": pkg.path.name,
            "manifest_sha256": m.get("manifest_sha256"), "created_utc": m.get("created_utc"),
            "source": (m.get("source") or {}).get("name"), "board": m["board"]["name"],
            "edgeops_version": m.get("edgeops_version")}
