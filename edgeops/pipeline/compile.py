"""The compile driver: fuse, lower for a board, write the package, check it, repair.

A kernel that fails the package's check run has its node moved to ONNX Runtime and the model is
lowered again (at most :data:`MAX_REPAIRS` times), so a target's bug costs speed, not a broken
package; the failures come structured from :class:`edgeops.ort.KernelRuntimeError`.
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Callable

MAX_REPAIRS = 3     # compile again at most this often, moving failed kernels' nodes to ORT


def compile_model(model, board, out, *, mode: str = "auto", shapes=None, targets=None,
                  force: bool = False, verify: bool = True, seed: int = 0, threads=None,
                  plan: bool = True, show: Callable[[dict], None] | None = None,
                  say: Callable[[str], None] | None = None, omp_wait: str | None = None,
                  quantization: dict | None = None) -> dict:
    """Lower ``model`` (path, "sample", bytes or ModelProto) for ``board`` and write the
    package ``out``; ``show(doc)`` is called with the placement before the package is built,
    ``say(line)`` when failed kernels make it compile again. ``omp_wait``: OpenMP wait policy
    (edgeops.ort.WAIT_POLICIES) to measure with and name in the manifest; this process must not
    run OpenMP with another (None: the process's, passive unless the environment chose).
    ``quantization``: ``model`` is the QDQ model of this float model
    (:func:`edgeops.pipeline.quantize.manifest_section`): recorded in the manifest, whose
    source it names.
    Returns the ``edgeops compile --json`` document."""
    from edgeops import package
    from edgeops.errors import PackageError
    from edgeops.lower import lower
    from edgeops.ort import KernelRuntimeError, use_wait_policy
    from edgeops.pipeline.models import resolve
    from edgeops.pipeline.quantize import is_quantized
    src, name = resolve(model)
    if quantization is not None:
        name = f"{quantization['source']['name']} (int8 QDQ)"
    if not force and (Path(out).exists() or Path(out).is_symlink()):   # fail before the work
        raise PackageError(f"{out} already exists; edgeops will not overwrite it (use --force)")
    package.check_destination(out, force)
    use_wait_policy(omp_wait, f"compiling with --omp-wait {omp_wait}")   # before anything measures
    exclude: dict[str, str] = {}
    for attempt in range(MAX_REPAIRS + 1):
        lw = lower(src, board, mode=mode, targets=targets, shapes=shapes, plan=plan,
                   exclude=exclude, threads=threads)
        doc = {"model": name, "package": str(out), **lw.to_dict()}
        if show is not None:
            show(doc)
        # a QDQ model is checked node by node in quantization steps, not to the fp32 tolerance;
        # a node off by more is repaired like a kernel that failed (but the last attempt)
        check = functools.partial(_int8_check, threads=threads, repair=attempt < MAX_REPAIRS) \
            if is_quantized(lw.source) else None
        try:
            pkg = package.write(lw, out, force=force, seed=seed, verify=verify, threads=threads,
                                source=name, omp_wait=omp_wait, check=check,
                                extra={"quantization": quantization} if quantization else None)
            break
        except KernelRuntimeError as e:
            failed = {n: f"its kernel failed the check at compile time: {why}"
                      for n, why in e.failures.items()}
            if not failed or attempt == MAX_REPAIRS:
                raise
            exclude.update(failed)
            if say is not None:
                say(f"kernel(s) failed the check here; compiling again with "
                    f"{', '.join(sorted(failed))} in ONNX Runtime")
    doc["repaired"] = exclude
    doc["verified"] = pkg.manifest["verified"]
    doc["tolerance"] = pkg.manifest["reference"]["tolerance"]
    doc["files"] = pkg.manifest["files"]
    return doc


def _int8_check(lowering, feeds, errors, *, threads, repair: bool) -> dict:
    """:func:`edgeops.pipeline.quantize.check_int8`; with ``repair``, nodes off ONNX Runtime
    on the QDQ model by more than their quantization steps allow raise as failed kernels."""
    from edgeops.ort import KernelRuntimeError
    from edgeops.pipeline.quantize import check_int8
    doc = check_int8(lowering, feeds, errors, threads=threads)
    bad = doc["int8"]["failed"]
    if repair and bad:
        rows = doc["int8"]["tensors"].values()
        raise KernelRuntimeError(
            f"int8 check failed at {', '.join(bad)}",
            {n: f"{max(r['max_steps'] for r in rows if r['node'] == n):.1f} quantization steps "
                f"off ONNX Runtime on the QDQ model" for n in bad})
    return doc
