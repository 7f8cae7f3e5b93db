"""The manifest schema (edgeops/manifest.py): a malformed manifest whose checksums are valid is
refused on load by a ManifestError naming the file and the key; so are a model whose external
data leaves the package and a writer that adds an undeclared key."""
import copy
import hashlib
import json
import shutil

import pytest

from edgeops import manifest, package
from edgeops.errors import PackageError
from edgeops.manifest import Key, ManifestError, validate


@pytest.fixture(scope="module")
def pkg(tmp_path_factory):
    from edgeops.pipeline.compile import compile_model
    out = tmp_path_factory.mktemp("m") / "p"
    compile_model("sample", "host", out, mode="none", verify=False)
    return out


def _reseal(d, edit):
    """Apply ``edit`` to the manifest and make every checksum valid again (a careful forger)."""
    m = d / package.MANIFEST
    doc = json.loads(m.read_bytes())
    edit(doc)
    if isinstance(doc, dict):
        doc.pop("manifest_sha256", None)
        doc["manifest_sha256"] = hashlib.sha256(package._canonical(doc)).hexdigest()
        m.write_bytes(package._canonical(doc))
    else:
        m.write_text(json.dumps(doc))


def _drop(path):
    *parents, last = path.split(".")

    def edit(doc):
        for p in parents:
            doc = doc[int(p)] if isinstance(doc, list) else doc[p]
        del doc[last]
    return edit


def _set(path, value):
    *parents, last = path.split(".")

    def edit(doc):
        for p in parents:
            doc = doc[int(p)] if isinstance(doc, list) else doc[p]
        if isinstance(doc, list):
            doc[int(last)] = value
        else:
            doc[last] = value
    return edit


# (edit, the key the message must name)
CASES = {
    "missing board": (_drop("board"), "'board'"),
    "missing runtime": (_drop("runtime"), "'runtime'"),
    "missing board.name": (_drop("board.name"), "'board.name'"),
    "inputs garbage": (_set("inputs", "garbage"), "'inputs'"),
    "inputs of numbers": (_set("inputs", [1, 2]), "'inputs[0]'"),
    "input without a name": (_drop("inputs.0.name"), "'inputs[0].name'"),
    "input dtype unknown": (_set("inputs.0.dtype", "fp8"), "'inputs[0].dtype'"),
    "negative dim": (_set("inputs.0.shape", [1, -3, 32, 32]), "'inputs[0].shape[1]'"),
    "shape a string": (_set("inputs.0.shape", "1x3"), "'inputs[0].shape'"),
    "board a list": (_set("board", ["host"]), "'board'"),
    "board name a number": (_set("board.name", 7), "'board.name'"),
    "threads a string": (_set("runtime.threads", "four"), "'runtime.threads'"),
    "threads zero": (_set("runtime.threads", 0), "'runtime.threads'"),
    "threads a bool": (_set("runtime.threads", True), "'runtime.threads'"),
    "threads huge": (_set("runtime.threads", 10**30), "'runtime.threads'"),
    "tolerance negative": (_set("reference.tolerance.rel", -1), "'reference.tolerance.rel'"),
    "tolerance nan": (_set("reference.tolerance.rel", float("nan")), "'reference.tolerance.rel'"),
    "tolerance inf": (_set("reference.tolerance.rel", float("inf")), "'reference.tolerance.rel'"),
    "seed negative": (_set("reference.seed", -1), "'reference.seed'"),
    "fallback unknown": (_set("runtime.fallback.kernel_error", "ignore"),
                         "'runtime.fallback.kernel_error'"),
    "deadline zero": (_set("runtime.deadline_s", 0), "'runtime.deadline_s'"),
    "undeclared top-level key": (_set("calibrated_with", {}), "'calibrated_with'"),
    "quantization without its source": (_set("quantization", {}), "'quantization.source'"),
    "no outputs": (_set("outputs", []), "'outputs'"),
    "reference names an unknown input": (_set("reference.inputs", {"input_0": "nope"}),
                                         "'reference.inputs'"),
    "kernels a dict": (_set("kernels", {}), "'kernels'"),
    "file bytes a string": (lambda d: d["files"]["model.onnx"].__setitem__("bytes", "many"),
                            "files['model.onnx'].bytes"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_manifest_is_refused_naming_file_and_key(pkg, tmp_path, case):
    edit, key = CASES[case]
    d = tmp_path / "p"
    shutil.copytree(pkg, d)
    _reseal(d, edit)
    with pytest.raises(ManifestError) as e:
        package.load(d, check_kernels=False)
    msg = str(e.value)
    assert key in msg and str(d.resolve() / package.MANIFEST) in msg and "\n" not in msg, msg


def test_the_writer_follows_the_schema_and_a_new_key_is_one_line(pkg, monkeypatch):
    doc = json.loads((pkg / package.MANIFEST).read_bytes())
    assert validate(doc) is doc
    # an undeclared key is refused; declaring it is one Key(...) line
    doc2 = copy.deepcopy(doc) | {"sparsity": {"scheme": "2:4"}}
    with pytest.raises(ManifestError, match="'sparsity' is not in the manifest schema"):
        validate(doc2)
    monkeypatch.setattr(manifest, "KEYS", manifest.KEYS + (
        Key("sparsity", "dict", required=False),
        Key("sparsity.scheme", "str", required=False, choices=("2:4",))))
    assert validate(doc2) is doc2 and validate(doc) is doc    # optional: old manifests pass
    doc2["sparsity"]["scheme"] = "4:8"
    with pytest.raises(ManifestError, match="'sparsity.scheme' is '4:8'"):
        validate(doc2)


def test_not_an_object(pkg, tmp_path):
    d = tmp_path / "p"
    shutil.copytree(pkg, d)
    (d / package.MANIFEST).write_text("[1, 2]")
    with pytest.raises(PackageError, match="not an edgeops package manifest"):
        package.load(d)


def test_external_data_outside_the_package_is_refused(pkg, tmp_path):
    """A model whose initializer keeps its data in a file outside the package (valid checksums
    otherwise) is refused on load, naming the model file and the location."""
    import onnx
    from onnx import TensorProto
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"\0" * 64)
    for loc in (str(secret), "../secret.bin", "unlisted.bin"):
        d = tmp_path / f"p{abs(hash(loc))}"
        shutil.copytree(pkg, d)
        m = onnx.load(str(d / package.MODEL))
        t = m.graph.initializer[0]
        t.ClearField("raw_data")
        del t.float_data[:]
        t.data_location = TensorProto.EXTERNAL
        t.external_data.add(key="location", value=loc)
        data = m.SerializeToString()
        (d / package.MODEL).write_bytes(data)
        _reseal(d, lambda doc: doc["files"]["model.onnx"].update(
            sha256=hashlib.sha256(data).hexdigest(), bytes=len(data)))
        with pytest.raises(PackageError) as e:
            package.load(d, check_kernels=False)
        msg = str(e.value)
        assert str(d.resolve() / package.MODEL) in msg and repr(loc) in msg \
            and "not a file of the package" in msg, msg
