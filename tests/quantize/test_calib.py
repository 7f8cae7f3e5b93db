"""Calibration readers, and bad calibration data refused with a clear message."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from edgeops.errors import EdgeOpsWarning
from edgeops.quantize import quantize_model
from edgeops.quantize.calib import (CalibrationError, ListReader, image_reader, npy_folder_reader,
                                    npz_reader, open_reader, validated_batches)

INPUTS = [("x", (1, 3, 19, 17), np.dtype(np.float32))]


def test_npz_and_npy_folder(tmp_path):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 3, 19, 17)).astype(np.float32)
    np.savez(tmp_path / "c.npz", x=a)
    bs = validated_batches(npz_reader(tmp_path / "c.npz", ["x"]), INPUTS)
    assert len(bs) == 4 and all(b["x"].shape == (1, 3, 19, 17) for b in bs)
    np.testing.assert_array_equal(bs[2]["x"][0], a[2])
    d = tmp_path / "npy"
    d.mkdir()
    for i in range(3):
        np.save(d / f"{i}.npy", a[i:i + 1])
    r = open_reader(str(d), INPUTS)
    bs = validated_batches(r, INPUTS)
    assert len(bs) == 3
    np.testing.assert_array_equal(bs[1]["x"], a[1:2])
    r.rewind()
    assert r.get_next() is not None      # reusable: calibration, then analysis
    assert len(validated_batches(npy_folder_reader(d, ["x"]), INPUTS)) == 3


def test_images_mean_std_layout(tmp_path):
    PIL = pytest.importorskip("PIL.Image")
    rng = np.random.default_rng(1)
    px = rng.integers(0, 256, (17, 19, 3), dtype=np.uint8)   # H x W x C
    PIL.fromarray(px).save(tmp_path / "a.png")
    mean, std = (0.4, 0.5, 0.6), (0.2, 0.25, 0.3)
    nchw = image_reader([tmp_path / "a.png"], "x", (1, 3, 17, 19), mean=mean, std=std).get_next()["x"]
    want = ((px / 255.0 - np.array(mean)) / np.array(std)).astype(np.float32)
    np.testing.assert_allclose(nchw[0], want.transpose(2, 0, 1), rtol=1e-5, atol=1e-5)
    nhwc = image_reader([tmp_path / "a.png"], "x", (1, 17, 19, 3), mean=mean, std=std,
                        layout="NHWC").get_next()["x"]
    np.testing.assert_allclose(nhwc[0], want, rtol=1e-5, atol=1e-5)


def test_images_without_pillow(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "PIL", None)
    with pytest.raises(CalibrationError, match="Pillow"):
        image_reader([tmp_path / "a.png"], "x", (1, 3, 8, 8))


def test_random_only_when_asked_and_warns():
    with pytest.warns(EdgeOpsWarning, match="meaningless"):
        r = open_reader("random:3", INPUTS)
    assert len(validated_batches(r, INPUTS)) == 3


def _good(n=2):
    rng = np.random.default_rng(2)
    return [{"x": rng.standard_normal((1, 3, 19, 17)).astype(np.float32)} for _ in range(n)]


@pytest.mark.parametrize("batches,match", [
    ([{"image": np.zeros((1, 3, 19, 17), np.float32)}], r"'image'.*model inputs: \['x'\]"),
    ([{"x": np.zeros((1, 3, 19, 16), np.float32)}], r"'x': shape 1x3x19x16, expected 1x3x19x17"),
    ([{"x": np.zeros((1, 3, 19, 17), np.float64)}], r"'x': dtype float64, expected float32"),
    ([], r"empty.*x 1x3x19x17 float32"),
    ([{}], r"lacks input 'x'"),
])
def test_bad_calibration_refused(batches, match):
    with pytest.raises(CalibrationError, match=match):
        validated_batches(ListReader(batches), INPUTS)


def test_bad_calibration_refused_by_quantize_model(convnet, tmp_path):
    with pytest.raises(CalibrationError, match="shape"):
        quantize_model(convnet, [{"x": np.zeros((1, 3, 8, 8), np.float32)}])
    with pytest.raises(CalibrationError, match="does not exist"):
        quantize_model(convnet, str(tmp_path / "nope.npz"))
