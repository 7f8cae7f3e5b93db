"""Packages and boards shared by the deploy tests: the bundled sample compiled for ``host``."""
import getpass
import hashlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import time

import numpy as np
import pytest

from edgeops import package


@pytest.fixture(scope="session")
def pkgs(tmp_path_factory):
    """Two different packages of the sample (different reference seeds), compiled once."""
    from edgeops.pipeline.compile import compile_model
    d = tmp_path_factory.mktemp("pkgs")
    for name, seed in (("a", 0), ("b", 1)):
        compile_model("sample", "host", d / name, mode="all", seed=seed)
    return d / "a", d / "b"


@pytest.fixture
def reseal():
    return _reseal


@pytest.fixture
def current_ok():
    return _current_ok


def _reseal(pkg_dir):
    """Recompute the manifest's checksums after a test edited the package on purpose."""
    m = pkg_dir / package.MANIFEST
    doc = json.loads(m.read_bytes())
    for name, meta in doc["files"].items():
        p = pkg_dir / name
        if p.is_file() and not p.is_symlink():
            data = p.read_bytes()
            meta.update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
    doc.pop("manifest_sha256")
    doc["manifest_sha256"] = hashlib.sha256(package._canonical(doc)).hexdigest()
    m.write_bytes(package._canonical(doc))


def _current_ok(root) -> str:
    """The board's current package loads, verifies and reproduces its reference outputs (here,
    in-process: the fault trials are many); its name."""
    cur = root / "current"
    assert cur.is_symlink(), "no current package on the board"
    p = package.load(cur)
    ins, want = p.reference()
    sess = p.session()
    names = [o.name for o in sess.get_outputs()]
    got = dict(zip(names, sess.run(names, ins)))
    for n, w in want.items():
        np.testing.assert_allclose(got[n], w, rtol=0, atol=p.tolerance * np.abs(w).max())
    return str(cur.readlink())


@pytest.fixture(scope="session")
def demo_rpi5(tmp_path_factory):
    """The demo (sample) model compiled for rpi5 (a Cortex-A76 board), every supported node on
    NEON kernels: what the emulated arm64 board runs."""
    from edgeops.pipeline.compile import compile_model
    out = tmp_path_factory.mktemp("rpi5") / "demo"
    compile_model("sample", "rpi5", out, mode="all")
    return out


@pytest.fixture(scope="session")
def qemu_board(unavailable):
    """An emulated Cortex-A76 board in the arm64 sysroot (scripts/arm64/build_sysroot.sh). Its
    directory persists across sessions, as a real board's disk does: the pushed edgeops keeps its
    Numba cache there, so only the first session (or a change to the NEON kernels) pays the
    compile under emulation (~4-5 min here). Packages from earlier sessions are removed first."""
    import shutil
    from pathlib import Path
    from edgeops.deploy.transports import QEMU, QEMU_PYTHON, QemuTransport, default_sysroot
    sysroot = Path(default_sysroot())
    if shutil.which(QEMU) is None:
        unavailable(f"{QEMU} is not installed (apt-get install qemu-user-static)")
    if not (sysroot / QEMU_PYTHON).is_file():
        unavailable(f"no arm64 sysroot at {sysroot}: run scripts/arm64/build_sysroot.sh")
    root = sysroot / "opt" / "edgeops" / "test-board"
    if root.is_dir():
        for p in root.iterdir():
            if p.name != ".edgeops":
                shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    return QemuTransport(sysroot, root)


def resnet_like(seed: int = 0):
    """A torchvision-style ResNet (as torch.onnx.export writes resnet18, scaled down): 7x7/2 stem
    conv + BatchNormalization + Relu + MaxPool, a BasicBlock with identity shortcut, one with a
    strided 1x1 conv + BN downsample, GlobalAveragePool, Flatten, Gemm. Opset 13, 1x3x48x48."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def w(name, shape, scale=None):
        a = rng.standard_normal(shape) * (scale or np.sqrt(2.0 / np.prod(shape[1:])))
        inits.append(numpy_helper.from_array(a.astype(np.float32), name))
        return name

    def bn(x, name, c):
        for k, v in (("scale", rng.uniform(0.5, 1.5, c)), ("bias", rng.standard_normal(c) * 0.1),
                     ("mean", rng.standard_normal(c) * 0.1), ("var", rng.uniform(0.5, 1.5, c))):
            inits.append(numpy_helper.from_array(v.astype(np.float32), f"{name}.{k}"))
        nodes.append(helper.make_node("BatchNormalization", [x] + [f"{name}.{k}" for k in
                                      ("scale", "bias", "mean", "var")], [name], name=name))
        return name

    def conv(x, name, cin, cout, k, stride=1, relu=True):
        nodes.append(helper.make_node("Conv", [x, w(f"{name}.w", (cout, cin, k, k))], [name],
                                      name=name, kernel_shape=[k, k], strides=[stride] * 2,
                                      pads=[k // 2] * 4))
        y = bn(name, f"{name}.bn", cout)
        if relu:
            nodes.append(helper.make_node("Relu", [y], [f"{name}.relu"], name=f"{name}.relu"))
            return f"{name}.relu"
        return y

    def block(x, name, cin, cout, stride):
        h = conv(x, f"{name}.conv1", cin, cout, 3, stride)
        h = conv(h, f"{name}.conv2", cout, cout, 3, relu=False)
        sc = x if stride == 1 and cin == cout else conv(x, f"{name}.down", cin, cout, 1, stride,
                                                         relu=False)
        nodes.append(helper.make_node("Add", [h, sc], [f"{name}.add"], name=f"{name}.add"))
        nodes.append(helper.make_node("Relu", [f"{name}.add"], [f"{name}.out"], name=f"{name}.out"))
        return f"{name}.out"

    x = conv("input", "conv1", 3, 8, 7, 2)
    nodes.append(helper.make_node("MaxPool", [x], ["maxpool"], name="maxpool", kernel_shape=[3, 3],
                                  strides=[2, 2], pads=[1, 1, 1, 1]))
    x = block("maxpool", "layer1", 8, 8, 1)
    x = block(x, "layer2", 8, 16, 2)
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["avgpool"], name="avgpool"))
    nodes.append(helper.make_node("Flatten", ["avgpool"], ["flat"], name="flatten", axis=1))
    nodes.append(helper.make_node("Gemm", ["flat", w("fc.w", (10, 16)), w("fc.b", (10,), 0.1)],
                                  ["logits"], name="fc", transB=1))
    g = helper.make_graph(nodes, "resnet_like",
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 48, 48])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="pytorch")


SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def sshd(tmp_path_factory, unavailable):
    if not os.path.exists(SSHD):
        unavailable(f"{SSHD} is not installed (Debian: apt-get install -y openssh-server)")
    if shutil.which("ssh") is None or shutil.which("scp") is None:
        unavailable("the OpenSSH client (ssh, scp) is not installed")
    d = tmp_path_factory.mktemp("sshd")
    for key in ("host_key", "id"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / key)],
                       check=True)
    shutil.copyfile(d / "id.pub", d / "authorized_keys")
    port = _free_port()
    (d / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d / 'host_key'}\n"
        f"AuthorizedKeysFile {d / 'authorized_keys'}\nStrictModes no\nUsePAM no\n"
        f"PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        f"PermitRootLogin prohibit-password\nPidFile {d / 'sshd.pid'}\n"
        f"Subsystem sftp internal-sftp\nSetEnv EDGEOPS_CACHE_DIR={d / 'cache'}\n")
    host_pub = (d / "host_key.pub").read_text().split()
    (d / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}\n")
    try:
        os.makedirs("/run/sshd", exist_ok=True)      # privilege separation dir Debian's sshd wants
    except OSError:
        pass
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(d / "sshd_config")],
                            stderr=open(d / "sshd.log", "wb"))
    opts = (f"-F /dev/null -i {d / 'id'} -o IdentitiesOnly=yes -o StrictHostKeyChecking=yes "
            f"-o UserKnownHostsFile={d / 'known_hosts'} -o ConnectTimeout=5")
    try:
        for _ in range(100):
            if proc.poll() is not None:
                unavailable(f"sshd exited at start: {(d / 'sshd.log').read_text()[-300:]}")
            r = subprocess.run(["ssh", "-o", "BatchMode=yes", "-p", str(port), *shlex.split(opts),
                                f"{getpass.getuser()}@127.0.0.1", "true"],
                               capture_output=True, text=True)
            if r.returncode == 0:
                break
            time.sleep(0.1)
        else:
            unavailable(f"sshd on 127.0.0.1:{port} did not accept the test key: {r.stderr[-300:]}")
        yield {"port": port, "opts": opts, "dir": d}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="session")
def resnet():
    return resnet_like()
