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
    PIL = pytest.importorskip(
        "PIL.Image", reason="image folders need the images extra (Pillow); make test installs it")
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


SEQ = [("x", (2, 5, 7), np.dtype(np.float32))]     # a static batch of 2


def test_npz_any_static_batch(tmp_path):
    """Samples are grouped into the model's batch; whole batches are taken as they are."""
    a = np.random.default_rng(2).standard_normal((6, 5, 7)).astype(np.float32)
    np.savez(tmp_path / "s.npz", x=a)
    bs = validated_batches(open_reader(str(tmp_path / "s.npz"), SEQ), SEQ)
    assert len(bs) == 3
    for i, b in enumerate(bs):
        np.testing.assert_array_equal(b["x"], a[2 * i:2 * i + 2])
    np.savez(tmp_path / "b.npz", x=a.reshape(3, 2, 5, 7))
    bs2 = validated_batches(open_reader(str(tmp_path / "b.npz"), SEQ), SEQ)
    assert all(np.array_equal(p["x"], q["x"]) for p, q in zip(bs, bs2, strict=True))
    np.savez(tmp_path / "odd.npz", x=a[:5])
    with pytest.raises(CalibrationError, match=r"5 samples.*batches of 2.*multiple of 2"):
        open_reader(str(tmp_path / "odd.npz"), SEQ)


def test_quantize_model_with_batch_2_from_npz(tmp_path):
    """The issue's case: a sequence model with a static batch of 2 calibrated from an npz."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((7, 4)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "seq",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 7])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5, 4])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    np.savez(tmp_path / "c.npz", x=rng.standard_normal((8, 5, 7)).astype(np.float32))
    _, rep = quantize_model(m, str(tmp_path / "c.npz"))
    assert rep["calibration_batches"] == 4


def test_images_crop_and_batches(tmp_path):
    PIL = pytest.importorskip(
        "PIL.Image", reason="image folders need the images extra (Pillow); make test installs it")
    rng = np.random.default_rng(4)
    pics = [rng.integers(0, 256, (12, 20, 3), dtype=np.uint8) for _ in range(5)]   # H 12, W 20
    for i, px in enumerate(pics):
        PIL.fromarray(px).save(tmp_path / f"{i}.png")
    with pytest.warns(EdgeOpsWarning, match="1 image"):
        r = open_reader(str(tmp_path), [("x", (2, 3, 12, 12), np.dtype(np.float32))],
                        resize="crop", mean=(0.5,), std=(0.25,))
    bs = validated_batches(r, [("x", (2, 3, 12, 12), np.dtype(np.float32))])
    assert len(bs) == 2
    # the shorter side already fits: no resampling, the centre 12 columns of 20
    want = ((pics[3][:, 4:16] / 255.0 - 0.5) / 0.25).transpose(2, 0, 1)
    np.testing.assert_allclose(bs[1]["x"][1], want, rtol=1e-5, atol=1e-5)
    with pytest.raises(CalibrationError, match="mean has 2 values"):
        image_reader([tmp_path / "0.png"], "x", (1, 3, 12, 12), mean=(0.1, 0.2))
    with pytest.raises(CalibrationError, match="resize must be"):
        image_reader([tmp_path / "0.png"], "x", (1, 3, 12, 12), resize="pad")
