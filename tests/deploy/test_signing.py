"""Signed packages: compile --sign, deploy --verify-key refuses unsigned, foreign-key and
tampered packages; keygen refuses to overwrite a key."""
import json
import shutil
import sys

import pytest

from edgeops.cli import main

pytest.importorskip("cryptography", reason="signing needs the 'sign' extra (cryptography)")


def _run(capsys, argv, rc=0):
    got = main(argv)
    out, err = capsys.readouterr()
    assert got == rc, err
    return out, err


def test_sign_and_verify(capsys, pkgs, tmp_path, reseal):
    from edgeops.deploy.signing import SIG
    key, other = tmp_path / "k", tmp_path / "other"
    doc = json.loads(_run(capsys, ["keygen", str(key), "--json"])[0])
    assert (key.stat().st_mode & 0o777) == 0o600 and doc["key_id"]
    _run(capsys, ["keygen", str(other)])
    _, err = _run(capsys, ["keygen", str(key)], rc=2)
    assert "already exists" in err

    signed = tmp_path / "signed"
    out, _ = _run(capsys, ["compile", "sample", "--board", "host", "-o", str(signed), "--lower",
                           "all", "--sign", str(key), "--json"])
    assert json.loads(out)["signature"]["key_id"] == doc["key_id"]
    board = f"local:{tmp_path / 'board'}"
    d = json.loads(_run(capsys, ["deploy", str(signed), "--to", board, "--verify-key",
                                 f"{key}.pub", "--json"])[0])
    assert d["signature"]["ok"] and (tmp_path / "board" / "current" / SIG).is_file()

    refusals = []
    refusals.append((pkgs[0], "is not signed"))                       # unsigned
    refusals.append((signed, "signed by key"))                        # verified with another key
    tampered = tmp_path / "tampered"                                  # resealed after an edit
    shutil.copytree(signed, tampered)
    (tampered / "reference.npz").write_bytes((tampered / "reference.npz").read_bytes() + b"\0")
    reseal(tampered)
    refusals.append((tampered, "modified after signing"))
    for i, (pkg, msg) in enumerate(refusals):
        pub = f"{other}.pub" if msg == "signed by key" else f"{key}.pub"
        _, err = _run(capsys, ["deploy", str(pkg), "--to", board, "--verify-key", pub], rc=2)
        assert msg in err and len(err.strip().splitlines()) == 1, err
    assert json.loads(_run(capsys, ["deploy", "--status", "--to", board, "--json"])[0])[
        "current"] == d["installed_as"]
    # a key that is not ed25519 / not a key at all
    (tmp_path / "junk").write_text("not a key")
    _, err = _run(capsys, ["deploy", str(signed), "--to", board, "--verify-key",
                           str(tmp_path / "junk")], rc=2)
    assert "not an ed25519 public key" in err


def test_openssl_made_keys_work(pkgs, tmp_path):
    """Keys as `openssl genpkey -algorithm ed25519` writes them (PKCS#8 PEM)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519
    from edgeops.deploy import signing
    k = ed25519.Ed25519PrivateKey.generate()
    (tmp_path / "k.pem").write_bytes(k.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    (tmp_path / "k.pub").write_bytes(k.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH))   # ssh-ed25519 form
    pkg = tmp_path / "p"
    shutil.copytree(pkgs[0], pkg)
    signing.sign(pkg, tmp_path / "k.pem")
    assert signing.verify(pkg, tmp_path / "k.pub")["ok"]


def test_verify_without_cryptography_is_a_clear_error(monkeypatch, tmp_path):
    """deploy --verify-key where the sign extra is missing: one EdgeOpsError, no
    ModuleNotFoundError (sys.modules[name] = None makes the import fail as if absent)."""
    from edgeops.deploy import signing
    from edgeops.errors import EdgeOpsError
    for name in [m for m in sys.modules if m == "cryptography" or m.startswith("cryptography.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "cryptography", None)
    with pytest.raises(EdgeOpsError, match=r"needs the cryptography package: pip install"):
        signing.verify(tmp_path, tmp_path / "key.pub")
