"""Calibration data readers.

A reader is anything with ``get_next() -> dict[input name, np.ndarray] | None`` (the same
protocol as ``onnxruntime.quantization.CalibrationDataReader``, so one reader feeds both
edgeops and the peer). ``rewind()`` is optional; the readers here have it so that one reader
can be consumed more than once (calibration, then accuracy analysis).
"""
from __future__ import annotations

import math
import os
import warnings
import zipfile
import zlib
from pathlib import Path
from typing import Iterable, Protocol, runtime_checkable

import numpy as np

from edgeops.errors import EdgeOpsError, EdgeOpsWarning

IMAGE_EXTS = (".png", ".jpg", ".jpeg", ".bmp", ".ppm", ".pgm", ".tif", ".tiff", ".webp")


class CalibrationError(EdgeOpsError):
    """Calibration data is missing, empty, or does not fit the model's inputs."""


@runtime_checkable
class CalibrationReader(Protocol):
    def get_next(self) -> dict[str, np.ndarray] | None: ...


class ListReader:
    """Batches held in memory (a list of {input: array})."""

    def __init__(self, batches: Iterable[dict[str, np.ndarray]]):
        self.batches = [dict(b) for b in batches]
        self._i = 0

    def get_next(self):
        if self._i >= len(self.batches):
            return None
        self._i += 1
        return self.batches[self._i - 1]

    def rewind(self):
        self._i = 0

    def __len__(self):
        return len(self.batches)


def npz_reader(path, input_names: list[str], shapes: dict | None = None) -> ListReader:
    """An ``.npz``: keys are input names (a single-input model also takes an npz whose only key
    is another name, ``arr_0`` from ``np.savez``). An array with one axis more than the model's
    input holds whole batches along its first axis; one of the input's rank holds samples,
    grouped into batches of the input's static batch size (``shapes``: {input: shape}; 1 when
    the batch is dynamic or not given)."""
    where = os.fspath(path)
    arrays = {}
    try:
        with zipfile.ZipFile(where) as z:
            for info in z.infolist():
                if info.is_dir():
                    continue
                if not info.filename.endswith(".npy"):
                    raise CalibrationError(f"{where}: member {info.filename!r} is not an array; "
                                           f"an .npz holds .npy arrays named after the model's "
                                           f"inputs (np.savez(path, {input_names[0]}=batches))")
                with z.open(info) as f:
                    arrays[info.filename[:-4]] = _read_npy(f, info.file_size,
                                                           f"{where}: {info.filename}")
    except CalibrationError:
        raise
    except zipfile.BadZipFile as e:
        raise CalibrationError(f"calibration file {where!r} is not an .npz archive ({e}); save "
                               f"it with np.savez, or give a folder of .npy files") from None
    except _READ_ERRORS as e:
        raise CalibrationError(f"cannot read calibration file {where!r}: {e}; it is damaged or "
                               f"truncated: save it again") from None
    keys = list(arrays)
    if len(input_names) == 1 and len(keys) == 1 and keys[0] not in input_names:
        arrays = {input_names[0]: arrays[keys[0]]}
    return ListReader(_split(arrays, shapes or {}, where))


# what reading a damaged archive or array raises besides our own checks
_READ_ERRORS = (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error, NotImplementedError,
                RuntimeError)


def _read_npy(f, size: int, where: str) -> np.ndarray:
    """One array from the .npy stream ``f`` of ``size`` bytes, its header checked before any
    data is read: plain numbers (no pickled objects), and no more data declared than the file
    holds (truncated, damaged) or than this machine has memory for."""
    from edgeops.env import memory_available
    fmt = np.lib.format
    try:
        version = fmt.read_magic(f)
        shape, fortran, dtype = (fmt.read_array_header_1_0(f) if version == (1, 0)
                                 else fmt.read_array_header_2_0(f))
    except _READ_ERRORS as e:
        raise CalibrationError(f"{where} is not a .npy array ({e}); save it with np.save") from None
    if dtype.hasobject:
        raise CalibrationError(f"{where} holds Python objects (dtype {dtype}), not numbers; save "
                               f"plain numeric arrays (e.g. float32)")
    need = math.prod(shape) * dtype.itemsize
    have = size - f.tell()
    if need > have:
        raise CalibrationError(f"{where} declares shape {_fmt(shape)} {dtype} ({need} bytes) but "
                               f"holds {max(have, 0)} bytes: truncated or damaged; save it again")
    avail = memory_available()
    if avail is not None and need > avail:
        raise CalibrationError(f"{where} holds {need / 2**30:.1f} GiB ({_fmt(shape)} {dtype}), "
                               f"more than the {avail / 2**30:.1f} GiB of memory available here; "
                               f"give fewer samples")
    data = f.read(need)
    if len(data) != need:
        raise CalibrationError(f"{where} ends after {len(data)} of its {need} bytes of data: "
                               f"truncated; save it again")
    a = np.frombuffer(bytearray(data), dtype=dtype)
    return a.reshape(shape[::-1]).T if fortran else a.reshape(shape)


def _load_npy(path) -> np.ndarray:
    where = os.fspath(path)
    try:
        with open(where, "rb") as f:
            return _read_npy(f, os.fstat(f.fileno()).st_size, where)
    except CalibrationError:
        raise
    except _READ_ERRORS as e:
        raise CalibrationError(f"cannot read calibration file {where!r}: {e}") from None


def _split(arrays: dict[str, np.ndarray], shapes: dict, where: str) -> list[dict]:
    per = {}
    for k, v in arrays.items():
        shape = shapes.get(k)
        if v.ndim == 0:
            raise CalibrationError(f"{where}: {k!r} is a single number, not an array of samples "
                                   f"(expected {_fmt(shape)} per sample)")
        if shape is not None and v.ndim == len(shape) + 1:     # already batches
            per[k] = list(v)
            continue
        b = shape[0] if shape and isinstance(shape[0], int) and shape[0] > 0 else 1
        if len(v) % b:
            raise CalibrationError(f"{where}: {k!r} holds {len(v)} samples, which do not fill "
                                   f"batches of {b} (the model's static batch); give a multiple "
                                   f"of {b}, or an array of whole batches ({len(v) // b or 1}x"
                                   f"{'x'.join(map(str, shape))})")
        per[k] = [v[i:i + b] for i in range(0, len(v), b)]
    n = {k: len(v) for k, v in per.items()}
    if len(set(n.values())) > 1:
        raise CalibrationError(f"calibration arrays disagree on the number of batches: {n}")
    count = next(iter(n.values()), 0)
    return [{k: v[i] for k, v in per.items()} for i in range(count)]


def npy_folder_reader(folder, input_names: list[str]) -> ListReader:
    """A folder of ``.npy`` files, one batch each (sorted by name). A multi-input model needs
    files named ``<input>_<anything>.npy`` or sub-folders named after the inputs."""
    folder = Path(folder)
    files = sorted(folder.glob("*.npy"))
    if len(input_names) == 1 and files:
        return ListReader({input_names[0]: _load_npy(f)} for f in files)
    per = {}
    for name in input_names:
        sub = folder / name
        fs = sorted(sub.glob("*.npy")) if sub.is_dir() else sorted(folder.glob(f"{name}_*.npy"))
        per[name] = fs
    counts = {k: len(v) for k, v in per.items()}
    if not files and not any(counts.values()):
        raise CalibrationError(f"no .npy files in {os.fspath(folder)!r}")
    if len(set(counts.values())) != 1:
        raise CalibrationError(f"calibration folder {os.fspath(folder)!r}: inputs have different "
                               f"numbers of .npy files {counts}")
    n = next(iter(counts.values()))
    return ListReader({k: _load_npy(per[k][i]) for k in input_names} for i in range(n))


RESIZE = ("stretch", "crop")


def image_reader(paths, input_name: str, input_shape, *, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0),
                 layout: str = "NCHW", scale: float = 1 / 255.0, resize: str = "stretch") -> ListReader:
    """Images as the model's input: resized (``stretch``: to the input's height x width;
    ``crop``: the shorter side to the input's, then the centre cut out), ``(pixel * scale -
    mean) / std`` per channel, in ``layout``, grouped into batches of the input's static batch
    size (images beyond the last full batch are left out, with a warning). Needs Pillow
    (``pip install 'edgeops[images]'``)."""
    try:
        from PIL import Image
    except ImportError:
        raise CalibrationError("reading images needs Pillow: pip install 'edgeops[images]' (or "
                               "give the calibration data as .npz / a folder of .npy)") from None
    layout = layout.upper()
    if layout not in ("NCHW", "NHWC"):
        raise CalibrationError(f"layout must be NCHW or NHWC, not {layout!r}")
    if resize not in RESIZE:
        raise CalibrationError(f"resize must be one of {', '.join(RESIZE)}, not {resize!r}")
    if input_shape is None or len(input_shape) != 4 or not all(isinstance(d, int) for d in input_shape[1:]):
        raise CalibrationError(f"input {input_name!r} needs a static 4-D shape to read images into, "
                               f"has {input_shape}")
    h, w, c = (input_shape[2], input_shape[3], input_shape[1]) if layout == "NCHW" else \
        (input_shape[1], input_shape[2], input_shape[3])
    if c not in (1, 3):
        raise CalibrationError(f"input {input_name!r} has {c} channels in {layout}; images give 1 "
                               f"or 3 (is --layout right?)")
    mean = np.asarray(mean, np.float32).reshape(-1)
    std = np.asarray(std, np.float32).reshape(-1)
    for name, v in (("mean", mean), ("std", std)):
        if v.size not in (1, c):
            raise CalibrationError(f"{name} has {v.size} values; input {input_name!r} has {c} "
                                   f"channels: give 1 or {c}")
    if (std == 0).any():
        raise CalibrationError("std must not be 0")
    b = input_shape[0] if isinstance(input_shape[0], int) and input_shape[0] > 0 else 1
    samples = []
    for p in paths:
        try:
            im = Image.open(p).convert("L" if c == 1 else "RGB")
            if resize == "crop":
                k = max(h / im.height, w / im.width)
                im = im.resize((max(w, round(im.width * k)), max(h, round(im.height * k))),
                               Image.BILINEAR)
                left, top = (im.width - w) // 2, (im.height - h) // 2
                im = im.crop((left, top, left + w, top + h))
            else:
                im = im.resize((w, h), Image.BILINEAR)
        except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
            # Pillow's guard against a header declaring billions of pixels is no OSError
            raise CalibrationError(f"cannot read image {os.fspath(p)!r}: {e}") from None
        a = np.asarray(im, np.float32).reshape(h, w, c) * scale
        a = (a - mean) / std
        samples.append(a.transpose(2, 0, 1) if layout == "NCHW" else a)
    if len(samples) % b:
        warnings.warn(f"{len(samples) % b} image(s) left out: they do not fill a batch of {b} "
                      f"(the model's static batch)", EdgeOpsWarning, stacklevel=2)
    return ListReader({input_name: np.stack(samples[i:i + b]).astype(np.float32)}
                      for i in range(0, len(samples) - b + 1, b))


def random_reader(inputs: list[tuple[str, tuple, np.dtype]], count: int = 8, seed: int = 0) -> ListReader:
    """Random standard-normal inputs: only when asked, since accuracy figures on it mean nothing."""
    warnings.warn("calibrating on random data: the ranges, and every accuracy figure, are "
                  "meaningless for real inputs", EdgeOpsWarning, stacklevel=2)
    rng = np.random.default_rng(seed)
    return ListReader({n: rng.standard_normal(tuple(d if isinstance(d, int) else 1 for d in s)).astype(dt)
                       for n, s, dt in inputs} for _ in range(count))


def open_reader(data, inputs: list[tuple[str, tuple, np.dtype]], *, mean=(0.0,), std=(1.0,),
                layout="NCHW", resize: str = "stretch", count: int = 8):
    """A reader from what the user named: a reader object, a list of batches, ``"random"``,
    ``random:N``, an ``.npz``, a folder of ``.npy`` or of images, or a list of image paths."""
    names = [n for n, _, _ in inputs]
    if hasattr(data, "get_next"):
        return data
    if isinstance(data, (list, tuple)) and data and isinstance(data[0], dict):
        return ListReader(data)
    if isinstance(data, str) and (data == "random" or data.startswith("random:")):
        return random_reader(inputs, int(data.split(":", 1)[1]) if ":" in data else count)
    if isinstance(data, (list, tuple)):
        return image_reader(list(data), names[0], inputs[0][1], mean=mean, std=std, layout=layout,
                            resize=resize)
    p = Path(data)
    if not p.exists():
        raise CalibrationError(f"calibration data {os.fspath(p)!r} does not exist (give an .npz, a "
                               f"folder of .npy files or images, or 'random' to calibrate on noise)")
    if p.is_file() and p.suffix == ".npz":
        return npz_reader(p, names, {n: s for n, s, _ in inputs})
    if p.is_file() and p.suffix.lower() in IMAGE_EXTS:
        return image_reader([p], names[0], inputs[0][1], mean=mean, std=std, layout=layout,
                            resize=resize)
    if p.is_dir():
        if list(p.glob("*.npy")) or any((p / n).is_dir() for n in names):
            return npy_folder_reader(p, names)
        imgs = sorted(f for f in p.iterdir() if f.suffix.lower() in IMAGE_EXTS)
        if imgs:
            return image_reader(imgs, names[0], inputs[0][1], mean=mean, std=std, layout=layout,
                            resize=resize)
        raise CalibrationError(f"no .npy files or images in {os.fspath(p)!r}")
    raise CalibrationError(f"cannot use {os.fspath(p)!r} as calibration data (expected .npz, a "
                           f"folder of .npy files or images)")


def validated_batches(reader, inputs: list[tuple[str, tuple, np.dtype]]) -> list[dict[str, np.ndarray]]:
    """Drain ``reader`` into a list, checking every batch against the model's inputs."""
    want = {n: (s, np.dtype(dt)) for n, s, dt in inputs}
    out = []
    while True:
        b = reader.get_next()
        if b is None:
            break
        i = len(out)
        unknown = sorted(set(b) - set(want))
        if unknown:
            raise CalibrationError(f"calibration batch {i} has input {unknown[0]!r}, which the model "
                                   f"does not have; model inputs: {sorted(want)}")
        missing = sorted(set(want) - set(b))
        if missing:
            raise CalibrationError(f"calibration batch {i} lacks input {missing[0]!r} "
                                   f"(expected shape {_fmt(want[missing[0]][0])}, {want[missing[0]][1]})")
        for n, a in b.items():
            a = np.asarray(a)
            shape, dt = want[n]
            if a.dtype != dt:
                raise CalibrationError(f"calibration batch {i}, input {n!r}: dtype {a.dtype}, "
                                       f"expected {dt}")
            if shape is not None and (len(a.shape) != len(shape) or any(
                    isinstance(d, int) and d != x for d, x in zip(shape, a.shape))):
                raise CalibrationError(f"calibration batch {i}, input {n!r}: shape "
                                       f"{_fmt(a.shape)}, expected {_fmt(shape)}")
            if not np.isfinite(a).all() if a.dtype.kind == "f" else False:
                raise CalibrationError(f"calibration batch {i}, input {n!r} holds NaN or Inf")
        out.append({n: np.asarray(a) for n, a in b.items()})
    if not out:
        raise CalibrationError("the calibration set is empty: the reader gave no batch; expected "
                               f"batches of {', '.join(f'{n} {_fmt(s)} {d}' for n, (s, d) in want.items())}")
    return out


def _fmt(shape) -> str:
    if shape is not None and len(shape) == 0:
        return "() (a single number)"
    return "x".join(str(d) if d is not None else "?" for d in shape) if shape is not None else "?"
