"""What travels over HTTP: errors with their status codes, priorities, and tensors as JSON
(base64 or nested lists), ``.npy`` (one input) or ``.npz`` (inputs by name) bodies, checked
against the package's declared inputs before anything reaches a worker."""
from __future__ import annotations

import base64
import io
import math
import threading

import numpy as np

from edgeops.errors import EdgeOpsError

PRIORITIES = {"high": 0, "normal": 1, "low": 2}     # smaller is served first
NAMES = {v: k for k, v in PRIORITIES.items()}
NPY, NPZ, JSON = "application/x-npy", "application/x-npz", "application/json"
# numeric kinds only: np.load/np.dtype would otherwise accept object arrays from a client
_KINDS = "fiub"


class ServeError(EdgeOpsError):
    """A request the service could not answer; ``status`` is its HTTP status."""
    status = 500
    kind = "internal"

    def __init__(self, message: str, *, kind: str | None = None, status: int | None = None,
                 retry_after: float | None = None):
        super().__init__(message)
        if kind is not None:
            self.kind = kind
        if status is not None:
            self.status = status
        self.retry_after = retry_after


class BadRequest(ServeError):
    status, kind = 400, "bad_request"


class TooLarge(ServeError):
    status, kind = 413, "too_large"


class Overloaded(ServeError):
    status, kind = 503, "overloaded"


def priority(value) -> int:
    """``high``/``normal``/``low`` or 0/1/2 -> queue index."""
    if value is None or value == "":
        return PRIORITIES["normal"]
    if isinstance(value, str) and value.lower() in PRIORITIES:
        return PRIORITIES[value.lower()]
    try:
        p = int(value)
    except (TypeError, ValueError):
        p = -1
    if p not in NAMES:
        raise BadRequest(f"priority {value!r} is not one of {', '.join(PRIORITIES)} (or 0..2)")
    return p


# ---- arrays ---------------------------------------------------------------------------------

def encode(a: np.ndarray) -> dict:
    a = np.ascontiguousarray(a)
    return {"dtype": a.dtype.name, "shape": list(a.shape),
            "data": base64.b64encode(a.tobytes()).decode("ascii")}


def decode(name: str, doc) -> np.ndarray:
    """One tensor of a JSON body: ``{"dtype", "shape", "data": base64 | nested list}``."""
    if not isinstance(doc, dict) or "data" not in doc:
        raise BadRequest(f"input {name!r}: expected an object with dtype, shape and data "
                         f"(base64 of the raw little-endian bytes, or a nested list)")
    dt = _dtype(name, doc.get("dtype", "float32"))
    data = doc["data"]
    if isinstance(data, (list, int, float)):
        try:
            a = np.asarray(data, dtype=dt)
        except (ValueError, TypeError, OverflowError) as e:
            raise BadRequest(f"input {name!r}: data is not a rectangular list of numbers "
                             f"({e})") from None
        if "shape" in doc and list(a.shape) != _shape(name, doc["shape"]):
            raise BadRequest(f"input {name!r}: data has shape {list(a.shape)}, the request says "
                             f"{doc['shape']}")
        return a
    if not isinstance(data, str):
        raise BadRequest(f"input {name!r}: data must be base64 text or a list")
    shape = _shape(name, doc.get("shape"))
    try:
        raw = base64.b64decode(data, validate=True)
    except ValueError as e:
        raise BadRequest(f"input {name!r}: data is not valid base64 ({e})") from None
    want = math.prod(shape) * dt.itemsize
    if len(raw) != want:
        raise BadRequest(f"input {name!r}: {len(raw)} bytes of data for shape {shape} "
                         f"{dt.name} ({want} bytes)")
    return np.frombuffer(raw, dtype=dt.newbyteorder("<")).reshape(shape).astype(dt, copy=False)


def _dtype(name, value) -> np.dtype:
    try:
        dt = np.dtype(value)
    except TypeError:
        dt = None
    if dt is None or dt.kind not in _KINDS:
        raise BadRequest(f"input {name!r}: dtype {value!r} is not a numeric numpy dtype name "
                         f"(float32, int64, ...)")
    return dt


def _shape(name, value) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(d, int) and not isinstance(d, bool)
                                              and d >= 0 for d in value):
        raise BadRequest(f"input {name!r}: shape {value!r} is not a list of non-negative ints")
    return value


# numpy parses every .npy header with ast.literal_eval, and CPython 3.11 keeps the AST
# constructor's recursion depth in interpreter-wide state: two threads parsing at once can raise
# "SystemError: AST constructor recursion depth mismatch" (python/cpython#106905). Handler and
# client threads load concurrently, so loads take turns (1 request in ~1600 failed under load
# in tests/serve/test_serve_reload.py before this lock).
_NPY_LOCK = threading.Lock()


def _npy_bytes(f, what: str) -> int:
    """Bytes the .npy at ``f`` declares (its header; numpy allocates that much before reading
    the data, so a short body may not declare a huge array)."""
    from numpy.lib import format as F
    try:
        version = F.read_magic(f)
        shape, _, dtype = (F.read_array_header_1_0(f) if version == (1, 0) else
                           F.read_array_header_2_0(f))
    except Exception as e:  # noqa: BLE001  (numpy raises several kinds on a bad header)
        raise BadRequest(f"{what} is not a readable .npy array ({e})") from None
    if dtype.kind not in _KINDS:
        raise BadRequest(f"{what}: dtype {dtype} is not numeric")
    return math.prod(shape) * dtype.itemsize


def load_npy(body: bytes, max_bytes: int | None = None) -> np.ndarray:
    if max_bytes is not None and _npy_bytes(io.BytesIO(body), "body") > max_bytes:
        raise TooLarge(f"the .npy body declares more than the {max_bytes} bytes this package's "
                       f"inputs take")
    try:
        with _NPY_LOCK:
            return np.load(io.BytesIO(body), allow_pickle=False)
    except Exception as e:  # noqa: BLE001  (numpy raises several kinds on a bad file)
        raise BadRequest(f"body is not a readable .npy file ({e})") from None


def load_npz(body: bytes, max_bytes: int | None = None,
             max_arrays: int | None = None) -> dict[str, np.ndarray]:
    """The arrays of an .npz body. ``max_arrays``, ``max_bytes``: checked on the archive's
    directory and each member's .npy header before anything is decompressed (a few MB of
    zeros would otherwise decompress to gigabytes)."""
    import zipfile
    if max_bytes is not None or max_arrays is not None:
        try:
            with zipfile.ZipFile(io.BytesIO(body)) as zf:
                infos = zf.infolist()
                if max_arrays is not None and len(infos) > max_arrays:
                    raise BadRequest(f".npz body holds {len(infos)} arrays; this package takes "
                                     f"{max_arrays}")
                total = sum(i.file_size for i in infos)
                if max_bytes is not None and total <= max_bytes:
                    total = 0
                    for i in infos:
                        with zf.open(i) as f:
                            total += _npy_bytes(f, f"array {i.filename!r}")
        except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
            raise BadRequest(f"body is not a readable .npz file ({e})") from None
        if max_bytes is not None and total > max_bytes:
            raise TooLarge(f".npz body would decompress to {total} bytes, more than the "
                           f"{max_bytes} this package's inputs take")
    try:
        with _NPY_LOCK, np.load(io.BytesIO(body), allow_pickle=False) as z:
            if not hasattr(z, "files"):
                raise ValueError("a single .npy array, not an .npz archive")
            return {k: z[k] for k in z.files}
    except BadRequest:
        raise
    except Exception as e:  # noqa: BLE001
        raise BadRequest(f"body is not a readable .npz file ({e})") from None


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


# ---- checking inputs against the package -----------------------------------------------------

def check_feeds(feeds: dict, specs: list[dict], batch: int | None) -> int:
    """Raise BadRequest unless ``feeds`` has exactly the package's inputs with its dtypes and
    shapes; returns the request's batch rows. ``batch``: the compiled batch when dynamic
    batching is on (then the leading dimension may be 1..batch, the same for every input)."""
    from edgeops.dtypes import to_numpy
    want = [s["name"] for s in specs]
    unknown = sorted(set(feeds) - set(want))
    missing = [n for n in want if n not in feeds]
    if unknown or missing:
        raise BadRequest(f"inputs {sorted(feeds)} do not match the package's {want}" +
                         (f"; unknown: {unknown}" if unknown else "") +
                         (f"; missing: {missing}" if missing else ""))
    rows = None
    for s in specs:
        x, name = feeds[s["name"]], s["name"]
        dt = to_numpy(s["dtype"])
        if x.dtype != dt:
            raise BadRequest(f"input {name!r} is {x.dtype.name}, the package takes {dt.name}")
        shape = list(s["shape"])
        if batch is None:
            if list(x.shape) != shape:
                raise BadRequest(f"input {name!r} has shape {list(x.shape)}, the package was "
                                 f"compiled for {shape}")
            continue
        if x.ndim != len(shape) or list(x.shape[1:]) != shape[1:] or not 1 <= x.shape[0] <= batch:
            raise BadRequest(f"input {name!r} has shape {list(x.shape)}; the package takes "
                             f"[b, {', '.join(map(str, shape[1:]))}] with b in 1..{batch} "
                             f"(compiled batch {shape[0]})")
        if rows is not None and x.shape[0] != rows:
            raise BadRequest(f"inputs have different batch sizes ({rows} and {x.shape[0]})")
        rows = x.shape[0]
    return rows if rows is not None else 1
