"""Package signatures: ed25519 over ``manifest.json`` (which holds the sha256 of every other file,
so one signature covers the whole package), through the ``cryptography`` package (extra
``sign``).

``edgeops keygen KEY`` writes a key pair (``KEY``: PKCS#8 PEM private key, mode 0600;
``KEY.pub``: SubjectPublicKeyInfo PEM). OpenSSL makes the same files::

    openssl genpkey -algorithm ed25519 -out key.pem
    openssl pkey -in key.pem -pubout -out key.pem.pub

and OpenSSH ed25519 keys (``ssh-keygen -t ed25519``) are accepted as well. ``edgeops compile
--sign KEY`` writes ``PKG/manifest.sig`` (JSON: algorithm, key id, manifest sha256, base64
signature); ``edgeops deploy --verify-key KEY.pub`` refuses an unsigned package, one signed by
another key, and one whose manifest changed after signing.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path

from edgeops.errors import EdgeOpsError, PackageError

SIG = "manifest.sig"
ALG = "ed25519"


def _crypto():
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise EdgeOpsError("signing needs the cryptography package: pip install "
                           "'edgeops[sign]' (or pip install cryptography)") from None
    return serialization, ed25519


def _raw_public(pub) -> bytes:
    serialization, _ = _crypto()
    return pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id(pub) -> str:
    return hashlib.sha256(_raw_public(pub)).hexdigest()[:16]


def load_private_key(path):
    """An ed25519 private key from a PEM (PKCS#8, unencrypted) or OpenSSH file."""
    serialization, ed25519 = _crypto()
    data = _read(path, "private key")
    for loader in (serialization.load_pem_private_key, serialization.load_ssh_private_key):
        try:
            key = loader(data, password=None)
        except (ValueError, TypeError):
            continue
        if isinstance(key, ed25519.Ed25519PrivateKey):
            return key
        raise EdgeOpsError(f"{path} is a {type(key).__name__}, not an ed25519 key; make one with "
                           f"edgeops keygen")
    raise EdgeOpsError(f"{path} is not an unencrypted ed25519 private key (PEM or OpenSSH); make "
                       f"one with edgeops keygen KEY")


def load_public_key(path):
    """An ed25519 public key from a PEM or OpenSSH (``ssh-ed25519 ...``) file."""
    serialization, ed25519 = _crypto()
    data = _read(path, "public key")
    for loader in (serialization.load_pem_public_key, serialization.load_ssh_public_key):
        try:
            key = loader(data)
        except Exception:  # noqa: BLE001  (each loader raises its own kinds)
            continue
        if isinstance(key, ed25519.Ed25519PublicKey):
            return key
    raise EdgeOpsError(f"{path} is not an ed25519 public key (PEM or ssh-ed25519); give the "
                       f".pub file edgeops keygen wrote")


def _read(path, what) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise EdgeOpsError(f"cannot read the {what} {path}: {e.strerror}") from None


def keygen(out, *, force: bool = False) -> dict:
    """Write ``out`` (private, 0600) and ``out.pub``; refuses to overwrite unless ``force``."""
    serialization, ed25519 = _crypto()
    out, pub_path = Path(out), Path(f"{out}.pub")
    for p in (out, pub_path):
        if p.exists() and not force:
            raise EdgeOpsError(f"{p} already exists; edgeops will not overwrite a key (use "
                               f"--force, or another name)")
    key = ed25519.Ed25519PrivateKey.generate()
    priv = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())
    pub = key.public_key().public_bytes(serialization.Encoding.PEM,
                                        serialization.PublicFormat.SubjectPublicKeyInfo)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(priv)
    os.chmod(out, 0o600)
    pub_path.write_bytes(pub)
    return {"private_key": str(out), "public_key": str(pub_path),
            "key_id": key_id(key.public_key())}


def sign(pkg_dir, key) -> dict:
    """Sign the package at ``pkg_dir`` (its checksums are verified first) with ``key`` (a path or
    a loaded private key); writes ``manifest.sig``. The signature document."""
    from edgeops import package
    p = package.load(pkg_dir, check_kernels=False)
    if not hasattr(key, "sign"):
        key = load_private_key(key)
    manifest = (p.path / package.MANIFEST).read_bytes()
    doc = {"algorithm": ALG, "key_id": key_id(key.public_key()),
           "manifest_sha256": hashlib.sha256(manifest).hexdigest(),
           "signature": base64.b64encode(key.sign(manifest)).decode()}
    tmp = p.path / f".{SIG}.tmp-{os.getpid()}"
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, p.path / SIG)
    return doc


def verify(pkg_dir, pub) -> dict:
    """Check ``manifest.sig`` of the package at ``pkg_dir`` against public key ``pub`` (path or
    key); :class:`PackageError` when it is missing, from another key or does not match."""
    from edgeops import package
    _crypto()                 # without the cryptography package: a clear error, not an import
    from cryptography.exceptions import InvalidSignature
    if not hasattr(pub, "verify"):
        pub = load_public_key(pub)
    root = Path(pkg_dir)
    sig = root / SIG
    if not sig.is_file():
        raise PackageError(f"{root} is not signed (no {SIG}) and a verification key was given; "
                           f"sign it with edgeops compile --sign KEY")
    try:
        doc = json.loads(sig.read_text())
        raw = base64.b64decode(doc["signature"], validate=True)
    except (ValueError, KeyError, TypeError):
        raise PackageError(f"{sig} is not a signature edgeops wrote; sign the package "
                           f"again") from None
    if doc.get("algorithm") != ALG:
        raise PackageError(f"{sig}: algorithm {doc.get('algorithm')!r}, expected {ALG}")
    if doc.get("key_id") != key_id(pub):
        raise PackageError(f"{root} was signed by key {doc.get('key_id')}, not by the given key "
                           f"{key_id(pub)}; refused")
    manifest = (root / package.MANIFEST).read_bytes()
    try:
        pub.verify(raw, manifest)
    except InvalidSignature:
        raise PackageError(f"the signature of {root} does not match its {package.MANIFEST}: the "
                           f"package was modified after signing; refused") from None
    return {"key_id": doc["key_id"], "algorithm": ALG, "ok": True}
