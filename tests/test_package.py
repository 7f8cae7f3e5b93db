"""edgeops.package: what a package holds, and every way a damaged or foreign one is refused with
the file named."""
import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest

from edgeops import package
from edgeops.errors import EdgeOpsError, PackageError
from edgeops.lower import lower
from edgeops.sample import build_sample_model


@pytest.fixture(scope="module")
def lowering():
    return lower(build_sample_model(), "rpi5", mode="all")


@pytest.fixture
def pkg(lowering, tmp_path):
    return package.write(lowering, tmp_path / "pkg", seed=7)


def _reseal(path: Path, edit) -> None:
    """Edit the manifest and give it a valid checksum again (what a careful tamperer does)."""
    doc = json.loads((path / package.MANIFEST).read_text())
    edit(doc)
    doc.pop("manifest_sha256")
    doc["manifest_sha256"] = hashlib.sha256(package._canonical(doc)).hexdigest()
    (path / package.MANIFEST).write_bytes(package._canonical(doc))


def test_contents(pkg, lowering):
    m = pkg.manifest
    assert sorted(os.listdir(pkg.path)) == ["manifest.json", "model.onnx", "reference.npz"]
    assert m["format_version"] == package.FORMAT_VERSION and m["board"]["name"] == "rpi5"
    assert m["targets"] == ["neon", "onnxruntime"] and "neon.swiglu_fused" in m["kernels"]
    assert m["inputs"] == [{"name": "image", "dtype": "fp32", "shape": [1, 3, 32, 32]}]
    assert m["outputs"] == [{"name": "logits", "dtype": "fp32", "shape": [1, 10]}]
    assert len(m["placement"]) == len(lowering.placements)
    assert m["predicted"]["latency_s"] == pytest.approx(lowering.predicted_latency_s)
    assert m["runtime"]["fallback"]["kernel_error"] == "reference"
    assert m["verified"]["ok"] and m["reference"]["tolerance"]["rel"] == 1e-4
    assert pkg.model().graph.node[0].domain == "ai.edgeops"
    # reference data: seeded inputs and ONNX Runtime's outputs on the ORIGINAL model
    ins, outs = pkg.reference()
    assert np.array_equal(ins["image"], package.random_inputs(lowering.source, 7)["image"])
    want = package.ort_outputs(build_sample_model(), ins)
    np.testing.assert_array_equal(outs["logits"], want["logits"])
    got = pkg.session().run(None, ins)[0]
    assert package.compare({"logits": got}, outs)["logits"]["max_rel"] < 1e-4


def test_permissions_and_no_leftovers(pkg):
    assert oct(pkg.path.stat().st_mode & 0o777) == oct(0o777 & ~_umask())
    assert [p.name for p in pkg.path.parent.iterdir()] == ["pkg"]


def _umask():
    u = os.umask(0)
    os.umask(u)
    return u


@pytest.mark.parametrize("name", ["model.onnx", "reference.npz", "manifest.json"])
def test_one_changed_byte_is_refused_with_the_file_named(pkg, name):
    p = pkg.path / name
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0x01
    p.write_bytes(bytes(data))
    with pytest.raises(PackageError, match=name.replace(".", r"\.")):
        package.load(pkg.path)


def test_structural_tampering_is_refused(pkg, tmp_path):
    (pkg.path / "extra.py").write_text("print('hi')")
    with pytest.raises(PackageError, match="extra.py is in the package but not in its manifest"):
        package.load(pkg.path)
    (pkg.path / "extra.py").unlink()
    (pkg.path / "manifest.sig").write_bytes(b"sig")            # deploy's signature may sit there
    package.load(pkg.path)
    (pkg.path / "reference.npz").unlink()
    with pytest.raises(PackageError, match="reference.npz is missing"):
        package.load(pkg.path)


def test_path_traversal_and_escaping_symlinks_are_refused(lowering, tmp_path):
    outside = tmp_path / "secret"
    outside.write_bytes(b"x")
    for bad in ("../secret", "/etc/passwd", "a/../../secret"):
        p = package.write(lowering, tmp_path / f"p{abs(hash(bad))}", verify=False)
        _reseal(p.path, lambda d: d["files"].__setitem__(bad, {"sha256": "0", "bytes": 1}))
        with pytest.raises(PackageError, match="leaves the package"):
            package.load(p.path)
    p = package.write(lowering, tmp_path / "link", verify=False)
    (p.path / "reference.npz").unlink()
    (p.path / "reference.npz").symlink_to(outside)
    with pytest.raises(PackageError, match="reference.npz is a symlink .* outside the package"):
        package.load(p.path)
    p2 = package.write(lowering, tmp_path / "link2", verify=False)
    (p2.path / "sub").symlink_to(tmp_path)
    with pytest.raises(PackageError, match="sub is a symlink"):
        package.load(p2.path)


def test_incompatible_packages_are_refused(pkg):
    _reseal(pkg.path, lambda d: d.__setitem__("format_version", 2))
    with pytest.raises(PackageError, match="package format 2 .* is not the format 1"):
        package.load(pkg.path)
    _reseal(pkg.path, lambda d: (d.__setitem__("format_version", 1),
                                 d.__setitem__("kernels", ["neon.gone"])))
    with pytest.raises(PackageError, match=r"kernels \['neon.gone'\] are not in this edgeops"):
        package.load(pkg.path)
    (pkg.path / "manifest.json").write_text("{}")
    with pytest.raises(PackageError, match="not an edgeops package manifest"):
        package.load(pkg.path)
    with pytest.raises(PackageError, match="not a package directory"):
        package.load(pkg.path / "model.onnx")


def test_overwrite_rules(lowering, tmp_path):
    out = tmp_path / "pkg"
    first = package.write(lowering, out, verify=False)
    with pytest.raises(PackageError, match="already exists"):
        package.write(lowering, out, verify=False)
    again = package.write(lowering, out, force=True, verify=False)
    assert again.manifest["files"] == first.manifest["files"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pkg"]     # no temp or old dirs
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(PackageError, match="not an edgeops package"):
        package.write(lowering, tmp_path / "mine", force=True, verify=False)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_a_failing_kernel_leaves_nothing_behind(tmp_path):
    from edgeops.registry import register_kernel, unregister_kernel

    @register_kernel("Gemm", "reference", name="test.gemm_broken", priority=99)
    def broken(inputs, attrs):
        raise ValueError("deliberate")
    try:
        lw = lower(build_sample_model(), "rpi5", mode="all", targets=["reference"])
        with pytest.raises(EdgeOpsError, match="deliberate"):
            package.write(lw, tmp_path / "pkg")
    finally:
        unregister_kernel("test.gemm_broken")
    assert list(tmp_path.iterdir()) == []
