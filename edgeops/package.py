"""Compiled packages: a directory a board can run with ONNX Runtime and edgeops' custom ops.

Layout (format :data:`FORMAT_VERSION`)::

    PKG/model.onnx       the lowered model: ai.edgeops (v1) nodes carry ``kernel`` and ``tiling``
    PKG/reference.npz    seeded random inputs and ONNX Runtime's outputs on the ORIGINAL model
    PKG/manifest.json    versions, board, targets, inputs/outputs, placement table, predicted
                         latency, runtime settings, tolerance, sha256 of every other file

:func:`write` builds the directory beside its destination and renames it into place (a reader
never sees half a package). :func:`load` refuses, naming the file: a missing or modified file
(sha256), an unlisted file, a listed name that leaves the package (``../x``, absolute) or a
symlink that points outside it, a manifest that was edited (it carries its own checksum), a
format newer than this edgeops reads, a manifest that does not follow the schema
(:mod:`edgeops.manifest`: missing keys, wrong types, out-of-range figures), a model whose
external data is not a file of the package, and kernel ids this edgeops does not have.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgeops.errors import PackageError
from edgeops.manifest import SCHEMA_VERSION, ManifestError, safe_name, validate

FORMAT = "edgeops-package"
FORMAT_VERSION = SCHEMA_VERSION     # the manifest schema's version (edgeops/manifest.py)
MODEL, MANIFEST, REFERENCE = "model.onnx", "manifest.json", "reference.npz"
OPTIONAL = ("manifest.sig",)        # a detached signature (deploy's --sign) may sit beside it
FP32_RTOL, FP16_RTOL = 1e-4, 2e-2   # max |error| / max |reference|, per output
# what the runtime does when a kernel misbehaves: Package.session hands kernel_error and
# nan_guard to edgeops.ort (see edgeops/ort/fallback.py); the other two hold by construction
FALLBACK = {"kernel_error": "reference", "unknown_kernel": "refuse",
            "nodes_without_kernel": "onnxruntime", "nan_guard": False}


@dataclass
class Package:
    path: Path
    manifest: dict

    @property
    def model_path(self) -> Path:
        return self.path / MODEL

    def model(self):
        import onnx
        return onnx.load(str(self.model_path))

    def reference(self) -> tuple[dict, dict]:
        """(inputs, outputs) by tensor name."""
        ref = self.manifest["reference"]
        with np.load(self.path / REFERENCE) as z:
            return ({n: z[k] for k, n in ref["inputs"].items()},
                    {n: z[k] for k, n in ref["outputs"].items()})

    @property
    def tolerance(self) -> float:
        return float(self.manifest["reference"]["tolerance"]["rel"])

    def session(self, threads: int | None = None):
        """An ONNX Runtime session with edgeops' ops registered (every lowered node names its
        kernel, so no default target is involved) that follows the manifest's fallback rules
        (a failing kernel runs the op's reference, counted in edgeops.ort.fallback_counts())."""
        from edgeops.ort import session
        rt = self.manifest["runtime"]
        t = threads if threads is not None else rt["threads"]
        self.apply_wait_policy()
        return session(self.model_path, target="reference", threads=t, fallback=rt.get("fallback"),
                       prepare_programs=True,
                       model_sha256=self.manifest["files"][MODEL]["sha256"])

    def apply_wait_policy(self) -> str:
        """Run this process's OpenMP with the wait policy the package was measured with
        (``runtime.omp_wait_policy``) when nothing started OpenMP yet; else, if it differs, warn
        once: the package runs correctly, but not at the speed its lowering measured. Returns
        the policy the process runs with."""
        from edgeops.ort import OrtIntegrationError, WAIT_POLICIES, use_wait_policy, wait_policy
        want = str(self.manifest["runtime"].get("omp_wait_policy", "")).lower()
        if want not in WAIT_POLICIES:     # the user's own setting at compile time: keep theirs
            return use_wait_policy(None, "")
        try:
            return use_wait_policy(want, f"package {self.path}")
        except OrtIntegrationError as e:
            if (want, wait_policy()) not in _warned_policies:
                _warned_policies.add((want, wait_policy()))
                import warnings
                from edgeops.errors import EdgeOpsWarning
                warnings.warn(EdgeOpsWarning(f"{e}. It runs, at other speeds than its lowering "
                                             "measured"), stacklevel=3)
            return wait_policy()


_warned_policies: set = set()


# ---- running and comparing -----------------------------------------------------------------

def check_memory(model, what: str = "the reference run") -> int:
    """Refuse, before anything is allocated, a run of ``model`` (static shapes, e.g. after a
    huge ``--shapes``) whose inputs, outputs and largest tensor cannot fit the memory this machine
    has available; the estimate in bytes otherwise. Rough on purpose: feeds and expected outputs
    are held twice (arrays, then the compressed npz), plus the largest tensor ONNX Runtime
    materialises and its input."""
    from edgeops.env import memory_available
    from edgeops.graph import Graph
    g = model if isinstance(model, Graph) else Graph(model)
    sizes = {t.name: _nbytes(t) for t in g.tensors.values() if t.kind != "initializer"}
    io = sum(sizes.get(t.name, 0) for t in [*g.inputs, *g.outputs])
    largest = max(sizes.values(), default=0)
    need = 2 * io + 2 * largest
    have = memory_available()
    if have is not None and need > have:
        big = max(sizes, key=sizes.get)
        raise PackageError(f"{what} needs about {need / 2**30:.1f} GiB (tensor {big!r} alone is "
                           f"{sizes[big] / 2**30:.1f} GiB), more than the {have / 2**30:.1f} GiB "
                           f"of memory available here; give smaller --shapes")
    return need


def _nbytes(t) -> int:
    """Bytes of a static tensor in Python integers (numpy's int64 product would wrap)."""
    import math
    from edgeops.dtypes import itemsize
    if not t.is_static or t.dtype is None:
        return 0
    return math.prod(int(d) for d in t.shape) * itemsize(t.dtype)


def random_inputs(model, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs for every graph input of ``model`` (static shapes): N(0, 1) floats, small
    non-negative integers (they are often indices), random booleans."""
    from onnx import helper
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for i in model.graph.input:
        if i.name in inits:
            continue
        tt = i.type.tensor_type
        shape = [d.dim_value for d in tt.shape.dim]
        if any(d <= 0 for d in shape):
            raise PackageError(f"input {i.name!r} has shape {shape}; pass --shapes to fix it")
        dt = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
        if dt.kind == "f":
            feeds[i.name] = rng.standard_normal(shape).astype(dt)
        elif dt.kind == "b":
            feeds[i.name] = rng.random(shape) < 0.5
        else:
            feeds[i.name] = rng.integers(0, 4, shape).astype(dt)
    return feeds


def ort_outputs(model, feeds: dict) -> dict[str, np.ndarray]:
    """ONNX Runtime (default graph optimisations, CPU, exact int8: see
    :data:`edgeops.ort.EXACT_INT8`) on a standard ONNX model."""
    import onnxruntime as ort
    from edgeops.errors import ModelError
    from edgeops.ort import exact_int8
    try:
        sess = ort.InferenceSession(model.SerializeToString(), exact_int8(ort.SessionOptions()),
                                    providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001  (ORT's own exception types: Fail, InvalidGraph, ...)
        if not type(e).__module__.startswith("onnxruntime"):
            raise
        why = " ".join(str(e).split())
        why = re.sub(r"/onnxruntime_src/\S+:\d+ [^()]*\([^)]*\)\s*", "", why)  # C++ location
        raise ModelError(f"ONNX Runtime cannot load the model, so edgeops cannot compute its "
                         f"reference outputs: {why[:300]}") from None
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))


def compare(got: dict, want: dict) -> dict[str, dict]:
    """Per output: max abs error and max abs error / max |want| (relative to the output's
    scale, not per element: elementwise ratios explode where the reference crosses zero)."""
    out = {}
    for name, w in want.items():
        g = got.get(name)
        if g is None or np.shape(g) != np.shape(w):
            out[name] = {"max_abs": float("inf"), "max_rel": float("inf"),
                         "error": f"shape {None if g is None else np.shape(g)} vs {np.shape(w)}"}
            continue
        g64, w64 = np.asarray(g, np.float64), np.asarray(w, np.float64)
        err = float(np.max(np.abs(g64 - w64))) if w64.size else 0.0
        if not np.isfinite(g64).all() and np.isfinite(w64).all():
            err = float("inf")
        scale = float(np.max(np.abs(w64))) if w64.size else 0.0
        out[name] = {"max_abs": err, "max_rel": err / scale if scale > 0 else err}
    return out


def timed_runs(sess, feeds: dict, runs: int = 5) -> tuple[dict, list[float]]:
    """Outputs of the first run and the wall time of each of ``runs`` runs (after one warm-up,
    which is also where Numba compiles or loads its cache)."""
    names = [o.name for o in sess.get_outputs()]
    outs = dict(zip(names, sess.run(names, feeds)))
    times = []
    for _ in range(max(1, runs)):
        t0 = time.perf_counter()
        sess.run(names, feeds)
        times.append(time.perf_counter() - t0)
    return outs, times


# ---- writing -------------------------------------------------------------------------------

def write(lowering, out, *, force: bool = False, seed: int = 0, verify: bool = True,
          threads: int | None = None, source: str | None = None,
          omp_wait: str | None = None, check=None, extra: dict | None = None) -> Package:
    """Write the package of ``lowering`` (an ``edgeops.lower.Lowering``) to directory ``out``.

    Reference outputs come from ONNX Runtime on the original model with seeded random inputs.
    ``verify``: also run the lowered model here and record its error (a kernel that fails
    raises before anything is written). ``force``: replace an existing package (never a
    directory that is not one). ``omp_wait``: the OpenMP wait policy to name in the manifest
    (default: this process's, which measured the lowering; edgeops.ort.wait_policy).
    ``check(lowering, feeds, errors) -> dict``: judges the run instead of the fp32 tolerance (a
    QDQ source: :func:`edgeops.pipeline.quantize.check_int8`); its ``ok`` and details go into
    ``verified``, its ``tolerance`` ({rel, why}) into the manifest. ``extra``: more manifest
    sections (a quantized package's ``quantization``)."""
    from edgeops import __version__
    from edgeops.ort import wait_policy
    out = Path(out)
    _check_destination(out, force)
    src, model = lowering.source, lowering.model
    check_memory(src)
    feeds = random_inputs(src, seed)
    expected = ort_outputs(src, feeds)
    fp16 = any(p.precision == "fp16" for p in lowering.lowered)
    rtol = FP16_RTOL if fp16 else FP32_RTOL
    tol = {"rel": rtol, "why": "fp16 Cube kernels" if fp16 else "fp32 kernels"}
    verified = None
    if verify:
        from edgeops.ort import session
        got = session(model, target="reference", threads=threads).run(None, feeds)
        names = [o.name for o in model.graph.output]
        errs = compare(dict(zip(names, got)), expected)
        worst = max((e["max_rel"] for e in errs.values()), default=0.0)
        verified = {"outputs": errs, "max_rel": worst, "ok": worst <= rtol}
        if check is not None:
            verified.update(check(lowering, feeds, errs))
            tol = verified.pop("tolerance", tol)
    blobs = {MODEL: _serialise(model), REFERENCE: _npz(feeds, expected)}
    doc = _manifest(lowering, feeds, expected, blobs, seed, tol, verified, threads, source,
                    __version__, omp_wait or wait_policy()) | json.loads(json.dumps(extra or {}))
    _install(out, blobs, doc)
    return load(out, check_kernels=False)


def check_destination(out, force: bool) -> None:
    """Refuse, before any work, a destination that exists (unless ``force`` and it is a package)
    or whose nearest existing folder is not a writable directory."""
    out = Path(out)
    _check_destination(out, force)
    up = out.parent
    while not (up.exists() or up.is_symlink()):
        up = up.parent
    if not up.is_dir() or not os.access(up, os.W_OK | os.X_OK):
        raise PackageError(f"cannot write the package {out}: {up} is not a writable directory")


def _check_destination(out: Path, force: bool) -> None:
    if not (out.exists() or out.is_symlink()):
        return
    if not force:
        raise PackageError(f"{out} already exists; edgeops will not overwrite it (use --force "
                           f"to replace a package, or choose another path)")
    if not out.is_dir() or out.is_symlink() or not (
            (out / MANIFEST).is_file() or not any(out.iterdir())):
        raise PackageError(f"{out} exists and is not an edgeops package; --force only replaces "
                           f"a package (or an empty directory)")


def _serialise(model) -> bytes:
    try:
        return model.SerializeToString()
    except ValueError as e:   # protobuf's 2 GB limit
        raise PackageError(f"the lowered model cannot be serialised in one file ({e}); models "
                           f"over 2 GB are not packaged yet") from None


def _npz(feeds: dict, expected: dict) -> bytes:
    import io
    buf = io.BytesIO()
    arrays = {f"input_{i}": v for i, v in enumerate(feeds.values())}
    arrays.update({f"output_{i}": v for i, v in enumerate(expected.values())})
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


def _io(model) -> tuple[list, list]:
    from onnx import helper
    inits = {t.name for t in model.graph.initializer}

    def spec(vi):
        tt = vi.type.tensor_type
        from edgeops.dtypes import to_short
        dt = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
        return {"name": vi.name, "dtype": to_short(dt),
                "shape": [d.dim_value if d.HasField("dim_value") else d.dim_param
                          for d in tt.shape.dim]}
    return ([spec(i) for i in model.graph.input if i.name not in inits],
            [spec(o) for o in model.graph.output])


def _manifest(lowering, feeds, expected, blobs, seed, tol, verified, threads, source, version,
              omp_wait):
    import onnxruntime
    lw = lowering.to_dict()
    ins, outs = _io(lowering.model)
    ort_rows = any(p.target is None for p in lowering.placements)
    doc = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "edgeops_version": version,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "source": {"name": source, "sha256": hashlib.sha256(
            lowering.source.SerializeToString(deterministic=True)).hexdigest()},
        "board": {"name": lowering.board.name, "kind": lowering.board.kind,
                  "file_sha256": getattr(lowering.board, "file_sha256", "")},
        "targets": lw["used_targets"] + (["onnxruntime"] if ort_rows else []),
        "kernels": sorted({p.kernel for p in lowering.lowered}),
        "lowering": {k: lw[k] for k in ("mode", "targets", "precision")}
        | {"passes": {k: lw["passes"].get(k) for k in ("nodes_before", "nodes_after")}},
        "inputs": ins, "outputs": outs,
        "placement": lw["placement"],
        "predicted": {"latency_s": lw["predicted_latency_s"], "unmodelled": lw["unmodelled"],
                      "how": "sum of per-node predictions: the edgeops kernel's simulated "
                             "latency, or ONNX Runtime's (edgeops.simulator.peer); no overlap"},
        "runtime": {"threads": threads, "execution_mode": "sequential",
                    "ort_allow_spinning": False, "omp_wait_policy": omp_wait,
                    "regions": "consecutive ai.edgeops nodes run as one "
                    "ONNX Runtime node (one bridge crossing; edgeops.ort.regions)",
                    "onnxruntime_compiled_with": onnxruntime.__version__,
                    "needs": "Python with edgeops in the ONNX Runtime process",
                    "fallback": dict(FALLBACK)},
        "reference": {"file": REFERENCE, "seed": seed,
                      "computed_by": f"onnxruntime {onnxruntime.__version__} on the original model",
                      "inputs": {f"input_{i}": n for i, n in enumerate(feeds)},
                      "outputs": {f"output_{i}": n for i, n in enumerate(expected)},
                      "tolerance": {"rel": tol["rel"],
                                    "of": "max |error| / max |reference| per output",
                                    "why": tol["why"]}},
        "verified": verified,
        "files": {name: {"sha256": hashlib.sha256(b).hexdigest(), "bytes": len(b)}
                  for name, b in sorted(blobs.items())},
    }
    doc = json.loads(json.dumps(doc, default=_jsonable))   # plain JSON types before the checksum
    try:
        validate(doc | {"manifest_sha256": "0" * 64}, "the manifest being written")
    except ManifestError as e:   # the writer and the schema disagree: a bug, not a user error
        raise AssertionError(str(e)) from None
    return doc


def _jsonable(o):
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, float):
        return o
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _canonical(doc: dict) -> bytes:
    return (json.dumps(doc, indent=1, sort_keys=True, allow_nan=True) + "\n").encode()


def _install(out: Path, blobs: dict, doc: dict) -> None:
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    except OSError as e:
        raise PackageError(f"cannot write the package {out}: {e.strerror or e}") from None
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)    # mkdtemp makes it private; a package is an ordinary dir
    try:
        doc["manifest_sha256"] = hashlib.sha256(_canonical(doc)).hexdigest()
        for name, data in [*blobs.items(), (MANIFEST, _canonical(doc))]:
            with open(tmp / name, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        old = None
        if out.exists():
            old = out.with_name(f".{out.name}.old-{os.getpid()}")
            os.rename(out, old)
        os.rename(tmp, out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


# ---- loading -------------------------------------------------------------------------------

def load(path, *, check_kernels: bool = True) -> Package:
    """Open a package after checking it; :class:`PackageError` names the file at fault."""
    root = Path(path)
    if not root.is_dir():
        raise PackageError(f"{root} is not a package directory")
    root = root.resolve()
    mpath = root / MANIFEST
    if not mpath.is_file():
        raise PackageError(f"{root} has no {MANIFEST}: not an edgeops package")
    _inside(root, mpath, MANIFEST)
    doc = _read_manifest(mpath)
    files = doc.get("files")
    if not isinstance(files, dict) or MODEL not in files or REFERENCE not in files:
        raise PackageError(f"{MANIFEST} does not list {MODEL} and {REFERENCE}")
    for name, meta in files.items():
        p = root / _safe(name)
        if not p.is_file():
            raise PackageError(f"{name} is missing from the package {root}")
        _inside(root, p, name)
        data = p.read_bytes()
        if len(data) != meta.get("bytes") or hashlib.sha256(data).hexdigest() != meta.get("sha256"):
            raise PackageError(f"{name} does not match its sha256 in {MANIFEST}: the package is "
                               f"corrupted or was modified; compile it again")
    _no_strays(root, set(files) | {MANIFEST, *OPTIONAL})
    _external_data(root, set(files), files[MODEL]["sha256"])
    if check_kernels:
        _check_kernels(doc)
    return Package(root, doc)


def _read_manifest(mpath: Path) -> dict:
    raw = mpath.read_bytes()
    try:
        doc = json.loads(raw)
    except ValueError as e:
        raise PackageError(f"{MANIFEST} is corrupted (not JSON: {e})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise PackageError(f"{MANIFEST} is not an edgeops package manifest")
    body = {k: v for k, v in doc.items() if k != "manifest_sha256"}
    if doc.get("manifest_sha256") != hashlib.sha256(_canonical(body)).hexdigest() \
            or _canonical(doc) != raw:
        raise PackageError(f"{MANIFEST} was modified after packaging (its checksum does not "
                           f"match); compile the package again")
    v = doc.get("format_version")
    if v != FORMAT_VERSION:
        raise PackageError(f"{MANIFEST}: package format {v} (edgeops {doc.get('edgeops_version')})"
                           f" is not the format {FORMAT_VERSION} this edgeops reads; compile it "
                           f"with this edgeops or install the one that made it")
    return validate(doc, str(mpath))


def _safe(name: str) -> str:
    return safe_name(name, MANIFEST)


def _inside(root: Path, p: Path, name: str) -> None:
    if p.is_symlink() and not p.resolve().is_relative_to(root):
        raise PackageError(f"{name} is a symlink to {os.readlink(p)}, outside the package; refused")


def _no_strays(root: Path, allowed: set) -> None:
    for dirpath, dirs, fnames in os.walk(root):
        for d in dirs:
            _inside(root, Path(dirpath) / d, os.path.relpath(Path(dirpath) / d, root))
        for f in fnames:
            rel = Path(os.path.relpath(Path(dirpath) / f, root)).as_posix()
            _inside(root, root / rel, rel)
            if rel not in allowed:
                raise PackageError(f"{rel} is in the package but not in its {MANIFEST}: the "
                                   f"package was modified; refused")


def _external_data(root: Path, files: set, model_sha256: str | None = None) -> None:
    """Every tensor of model.onnx whose data is external must name a file of the package (so
    its checksum was verified above); one that points elsewhere is refused before ONNX Runtime
    or onnx's checker would read it. The verdict depends only on the model's bytes (their
    ``model_sha256``, verified) and the package's file names, so a pass is remembered in the
    cache: a package session then starts without importing onnx (0.7 s and more)."""
    mark = None
    from edgeops.env import switch
    if model_sha256 is not None and switch("EDGEOPS_PREPARED_CACHE", True):
        from edgeops import cache
        h = hashlib.sha256(f"{model_sha256}|{sorted(files)}".encode()).hexdigest()[:24]
        mark = cache.root() / "verified" / f"external-data-{h}"
        if mark.is_file():
            return
    import onnx
    m = onnx.ModelProto()
    try:
        m.ParseFromString((root / MODEL).read_bytes())
    except Exception as e:  # noqa: BLE001  (protobuf's DecodeError and friends)
        raise PackageError(f"{root / MODEL} is not an ONNX model ({type(e).__name__}); compile "
                           f"the package again") from None
    for t in _tensors(m.graph):
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        loc = {e.key: e.value for e in t.external_data}.get("location", "")
        if not loc or loc not in files or _posix_escape(loc):
            raise PackageError(f"{root / MODEL}: tensor {t.name!r} keeps its data in {loc!r}, "
                               f"which is not a file of the package; refused")
    if mark is not None:
        try:
            mark.parent.mkdir(parents=True, exist_ok=True)
            mark.touch()
        except OSError:       # an unwritable cache: checked again next time
            pass


def _posix_escape(name: str) -> bool:
    try:
        _safe(name)
    except PackageError:
        return True
    return False


def _tensors(g):
    """Every TensorProto of a graph: initializers (sparse ones too) and node attributes,
    subgraphs included."""
    yield from g.initializer
    for s in g.sparse_initializer:
        yield s.values
        yield s.indices
    for n in g.node:
        for a in n.attribute:
            if a.HasField("t"):
                yield a.t
            yield from a.tensors
            if a.HasField("g"):
                yield from _tensors(a.g)
            for sub in a.graphs:
                yield from _tensors(sub)


def _check_kernels(doc: dict) -> None:
    from edgeops.errors import EdgeOpsError
    from edgeops.pipeline.targets import load_targets
    from edgeops.registry import kernel_by_name
    # the package's own targets only (a kernel of another one loads the rest, and a missing
    # one is reported below as missing kernels)
    load_targets(only=[t for t in doc.get("targets", []) if t != "onnxruntime"])
    missing = []
    for k in doc.get("kernels", []):
        try:
            kernel_by_name(k)
        except EdgeOpsError:
            missing.append(k)
    if missing:
        raise PackageError(f"{MANIFEST}: kernels {missing} are not in this edgeops "
                           f"({__import__('edgeops').__version__}); the package was compiled by "
                           f"edgeops {doc.get('edgeops_version')}: install that or compile again")


def unpinned(m):
    """The package's model with every node on the numpy reference kernels (no kernel/tiling)."""
    import onnx
    c = onnx.ModelProto()
    c.CopyFrom(m)
    for node in c.graph.node:
        keep = [a for a in node.attribute if a.name not in ("kernel", "tiling")]
        del node.attribute[:]
        node.attribute.extend(keep)
    return c
