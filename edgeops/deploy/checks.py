"""The doctor's checklist registry: each check is ``fn(ctx) -> (status, detail)``, registered in
order with :func:`check` (:mod:`edgeops.deploy.doctor` the environment and board state,
:mod:`edgeops.deploy.doctor_package` the deployed package), and the thresholds they share."""
from __future__ import annotations

OK, WARN, FAIL = "ok", "warn", "fail"
CONSISTENCY_RTOL = {"fp32": 1e-5, "fp16": 2e-2}
GROWTH_FAIL, GROWTH_WARN = 8 << 20, 1 << 20     # bytes over the measured runs

CHECKS: list = []


def check(name):
    def deco(fn):
        CHECKS.append((name, fn))
        return fn
    return deco


class NoPackage(Exception):
    """The board has no current package: the package checks are not run (warn)."""
