"""Generated bad inputs for the ``edgeops`` command line, from a seed and a budget.

Every case is an argv that is wrong by construction (a flag out of range or not a number, an op
spec with a zero, negative, huge or missing size, --shapes that cannot be, a board file whose
figure is -1, inf, nan, 1e30 or of the wrong type, a sweep file with a bad key, a package whose
manifest is malformed but whose checksums are valid, read-only system paths where a file of
ours is expected, bad calibration data). Each must end with exit status 2 and one line on stderr,
no traceback, within a time cap: in-process (``edgeops.cli.main``, fast) and, for a sample, as a
separate process whose peak RSS (``os.wait4``'s, measured, not an rlimit) must stay under a cap.

Calibration files (:func:`calib_cases`) come in two kinds, judged differently:

- quantize's calibration DATA (``quantize --calib/--eval``, ``compile --quantize``: a damaged,
  truncated or garbage .npz or .npy, wrong names, rank, shape or dtype, NaN/inf, no samples, a
  header declaring terabytes, junk or a decompression bomb named .png, a folder where a file is
  expected and back) is the user's input: refused in one line, exit 2, as everything above. So
  are ``calibrate --output`` paths nothing can be written to: refused before the grid is measured.
- the cost-model calibration ``edgeops calibrate`` leaves in the cache
  (``$EDGEOPS_CACHE_DIR/calibration/<board>.json``, read by simulate, tune and compile) is not
  the user's input but edgeops' own cache. Like a stale one, a damaged one (truncated, not JSON,
  a field of the wrong type, NaN) must not stop a prediction: it is ignored with a warning
  (an ``EdgeOpsWarning`` naming the file and what to do) and the command goes on without it, as
  ONNX Runtime or TVM treat a bad cache entry. Such a case (``expect="tolerated"``) is clean when
  it exits 0 having warned (``warn``; an integer format version other than the current one is
  stale, not damaged, and needs no warning) or is refused in one line; a traceback, a hang, another
  status or a silent exit 0 are findings. No subcommand takes a calibration file as an argument
  (benchmarks/predict_vs_host.py's ``--calibration`` is a script's), so there is none to refuse.

Each such case has a cache root of its own (``Case.env``; its other contents linked to the run's
cache), applied around the in-process call and given to the process.

``python tests/fuzz/fuzz_cli.py --seed 0 --budget 400 [--subprocess 40]`` prints the table the
closing note quotes: per subcommand, tried / clean / traceback / accepted / hang (and not one line).
Nothing is written outside the working directory it is given; the paths probed are read-only.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

CAP_S = 60.0                  # per case, in-process (a compile with --shapes loads the targets)
CAP_RSS = 1536 << 20          # per case, as a process: edgeops imports take ~120 MB
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Case:
    cmd: str
    argv: list
    why: str
    env: dict | None = None       # set for the case's run only (e.g. its own EDGEOPS_CACHE_DIR)
    expect: str = "refused"       # refused: exit 2 in one line | tolerated: see the docstring
    warn: bool = False            # tolerated and exit 0: a warning must say what was ignored


@dataclass
class Outcome:
    case: Case
    kind: str                 # clean | traceback | accepted | hang | not-one-line | rss
    rc: int | None
    err: str
    seconds: float
    rss: int | None = None
    extra: dict = field(default_factory=dict)


# ---- the world the cases run in ---------------------------------------------------------------

@dataclass
class World:
    """Files the cases name: a good package, a board with it current, a model with a symbolic
    dim, and a scratch folder; built once per run in ``work``."""
    work: Path
    pkg: Path
    board: Path
    sym: Path

    @classmethod
    def build(cls, work: Path, pkg: Path | None = None) -> "World":
        work.mkdir(parents=True, exist_ok=True)
        if pkg is None:
            from edgeops.pipeline.compile import compile_model
            pkg = work / "pkg"
            if not pkg.exists():
                compile_model("sample", "host", pkg, mode="none", verify=False)
        board = work / "board"
        if not (board / "current").is_symlink():
            from edgeops.deploy import deploy
            deploy(pkg, f"local:{board}", progress=False)
        sym = work / "sym.onnx"
        if not sym.exists():
            import onnx
            from onnx import TensorProto, helper
            g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 64])])
            onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(sym))
        _bad_models(work)
        return cls(work, Path(pkg), board, sym)

    def model(self, name: str) -> str:
        return str(self.work / f"bad-{name}.onnx")

    def scratch(self, name: str) -> Path:
        d = self.work / "cases"
        d.mkdir(exist_ok=True)
        return d / name


def _bad_models(work: Path) -> None:
    """Models that load and inspect, but that no reference run can take: an op of an unknown
    domain, opset 999, an input of 2^31 float32 elements (8 GiB)."""
    import onnx
    from onnx import TensorProto, helper

    def save(name, node, opsets, dims):
        g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)])
        onnx.save(helper.make_model(g, opset_imports=opsets), str(work / f"bad-{name}.onnx"))
    std = helper.make_opsetid("", 17)
    save("domain", helper.make_node("Frob", ["x"], ["y"], domain="com.unknown"),
         [std, helper.make_opsetid("com.unknown", 1)], [2, 4])
    save("opset", helper.make_node("Relu", ["x"], ["y"]), [helper.make_opsetid("", 999)], [2, 4])
    save("big", helper.make_node("Relu", ["x"], ["y"]), [std], [2**31])


# ---- generators ---------------------------------------------------------------------------------

def _bad_int(rng, lo, hi) -> str:
    pool = ["abc", "", "1.5", "nan", "inf", "1e3", "0x10", "4 4", "--", str(2**64),
            str(10 ** rng.randint(20, 60)), str(-(10 ** rng.randint(1, 30)))]
    if lo is not None:
        pool.append(str(lo - 1 - rng.randint(0, 5)))
    if hi is not None:
        pool.append(str(hi + 1 + rng.randint(0, 10**6)))
    return rng.choice(pool)


def _bad_float(rng, lo, hi) -> str:
    pool = ["abc", "", "nan", "inf", "-inf", "1e400", "0x1p3", "1,5"]
    if lo is not None:
        pool.append(repr(lo - 1 - rng.random() * 100))
    if hi is not None:
        pool.append(repr(hi * (2 + rng.random() * 1000)))
    return rng.choice(pool)


def flag_cases(w: World, rng, n: int) -> list[Case]:
    out = str(w.scratch("never-written"))
    op = ["--op", "gemm:M=64,N=64,K=64", "--board", "host"]
    to = f"local:{w.board}"
    flags = [  # (argv before the flag, flag, int|float, lo, hi)
        (["run", str(w.pkg)], "--runs", int, 1, 10**6),
        (["run", str(w.pkg)], "--threads", int, 1, 4096),
        (["compile", "sample", "--board", "host", "-o", out], "--seed", int, 0, 2**63 - 1),
        (["compile", "sample", "--board", "host", "-o", out], "--threads", int, 1, 4096),
        (["serve", str(w.pkg)], "--port", int, 0, 65535),
        (["serve", str(w.pkg)], "--workers", int, 1, 256),
        (["serve", str(w.pkg)], "--threads", int, 1, 4096),
        (["serve", str(w.pkg)], "--deadline", float, 1e-3, 86400),
        (["serve", str(w.pkg)], "--retries", int, 0, 16),
        (["serve", str(w.pkg)], "--max-queue", int, 1, 10**6),
        (["serve", str(w.pkg)], "--max-body", int, 1, 1 << 40),
        (["serve", str(w.pkg)], "--max-batch", int, 0, 10**6),
        (["serve", str(w.pkg)], "--batch-delay-ms", float, 0, 60000),
        (["doctor", "--to", to], "--runs", int, 1, 10**6),
        (["bench", str(w.pkg), "--to", to], "--runs", int, 1, 10**6),
        (["bench", str(w.pkg), "--to", to], "--profile-runs", int, 1, 10**6),
        (["tune", *op], "--budget", int, 1, 10**8),
        (["tune", *op], "--top", int, 1, 10**4),
        (["simulate", *op], "--budget", int, 1, 10**8),
        (["sweep", str(w.scratch("none.json"))], "--workers", int, 0, 4096),
        (["deploy", str(w.pkg), "--to", to], "--wait", float, 0, 86400),
        (["deploy", "--rollback", "--to", to], "--wait", float, 0, 86400),
    ]
    cases = []
    for _ in range(n):
        pre, flag, kind, lo, hi = rng.choice(flags)
        v = _bad_int(rng, lo, hi) if kind is int else _bad_float(rng, lo, hi)
        cases.append(Case(pre[0], [*pre, flag, v], f"{flag} {v!r}"))
    for _ in range(max(1, n // 10)):
        v = rng.choice(["abc", "0", "-3", "", "1.5", str(10**30)])
        cmd = rng.choice([["compile", "sample", "--board", "host", "-o", out, "--quantize"],
                          ["quantize", "sample", "-o", out + ".onnx", "--calib"]])
        cases.append(Case(cmd[0], [*cmd, f"random:{v}"], f"random:{v!r}"))
    return cases


def opspec_cases(w: World, rng, n: int) -> list[Case]:
    from edgeops.tiling.spaces import KINDS
    cases = []
    for _ in range(n):
        kind = rng.choice(sorted(KINDS))
        req = list(KINDS[kind][0])
        params = {k: "8" for k in req}
        m = rng.choice(["zero", "negative", "garbage", "float", "huge", "product", "missing",
                        "unknown", "duplicate", "kind", "nocolon", "empty"])
        k = rng.choice(req)
        if m == "zero" and k != "numel":
            params[k] = "0"
        elif m == "negative":
            params[k] = str(-rng.randint(1, 10**9))
        elif m == "garbage":
            params[k] = rng.choice(["abc", "nan", "inf", "8x8", "0x8", "--", "8=8"])
        elif m == "float":
            params[k] = rng.choice(["1.5", "8.25", "1e3.5"])
        elif m == "huge":
            params[k] = str(rng.choice([2**31, 2**63, 10**rng.randint(12, 40)]))
        elif m == "product":
            params = {q: str(2**30) for q in req}
            if len(req) < 3:
                params[req[0]] = str(2**31 + 5)     # one dim over the extent cap instead
        elif m == "missing":
            params.pop(k)
        elif m == "unknown":
            params["QQ"] = "4"
        body = ",".join(f"{a}={b}" for a, b in params.items())
        if m == "duplicate":
            body += f",{k}=8"
        spec = {"kind": f"{kind}x:{body}", "nocolon": f"{kind}{body}", "empty": ""}.get(
            m, f"{kind}:{body}")
        if m == "zero" and k == "numel":
            spec = f"{kind}:numel=0"
        cmd = rng.choice(["tune", "simulate"])
        cases.append(Case(cmd, [cmd, "--op", spec, "--board", "host"], f"--op {m} {spec!r}"[:90]))
    return cases


def shape_cases(w: World, rng, n: int) -> list[Case]:
    bad = ["x:0x64", "x:-1x64", "x:abcx64", "x:", ":4x64", "x:4x64x3", "x:4x65", "x 4x64",
           f"x:{2**64}x64", f"x:{10**30}x64", "x:4x64;x:4x64", "x:" + "1x" * 40 + "64", "x:4.5x64"]
    cases = []
    for _ in range(n):
        s = rng.choice(bad)
        cmd = rng.choice(["inspect", "inspect", "simulate", "tune"])
        argv = [cmd, str(w.sym), "--shapes", s]
        if cmd != "inspect":
            argv += ["--board", "host"]
        cases.append(Case(cmd, argv, f"--shapes {s!r}"[:90]))
    # beyond memory: refused before anything is allocated (compile loads the targets: a few)
    for s in ("x:4000000000x64", "x:99999999999x64")[:max(1, n // 20)]:
        cases.append(Case("compile", ["compile", str(w.sym), "--board", "host", "-o",
                                      str(w.scratch("huge")), "--shapes", s], f"--shapes {s}"))
    return cases


_FIGURE = re.compile(r"^([a-z_]+) = ([0-9][0-9.eE+-]*)(\s*#.*)?$", re.M)


def board_cases(w: World, rng, n: int) -> list[Case]:
    cases = []
    for i in range(n):
        name = rng.choice(["rpi5", "rk3588", "jetson-orin-nano", "ascend-310b"])
        text = (ROOT / "boards" / f"{name}.toml").read_text()
        figs = list(_FIGURE.finditer(text))
        f = rng.choice(figs)
        v = rng.choice(["inf", "nan", "-1", "-inf", '"abc"', "1e30", "true", "[]", "{}"])
        text = text[:f.start(2)] + v + text[f.end(2):]
        d = w.scratch(f"board{i}")
        d.mkdir(exist_ok=True)
        p = d / f"{name}.toml"
        p.write_text(text)
        op = "gemm:M=64,N=64,K=64,dtype=fp16"
        cmd = rng.choice(["simulate", "tune", "boards"])
        argv = ["boards", str(p)] if cmd == "boards" else [cmd, "--op", op, "--board", str(p)]
        cases.append(Case(cmd, argv, f"board {name} {f.group(1)} = {v}"))
    return cases


def sweep_cases(w: World, rng, n: int) -> list[Case]:
    op = "gemm:M=64,N=64,K=64"
    docs = [
        [{"op": op, "board": "host", "budget": "abc"}],
        [{"op": op, "board": "host", "budget": -5}],
        [{"op": op, "board": "host", "budget": 1e30}],
        [{"op": op, "board": "host", "tiling": 42}],
        [{"op": op, "board": "host", "tiling": "fast"}],
        [{"op": op, "board": "host", "objective": "speed"}],
        [{"op": 7, "board": "host"}],
        [{"op": op, "board": ["host"]}],
        [{"op": op}],
        [{"op": op, "model": "sample", "board": "host"}],
        {"points": "x"},
        {"grid": {"ops": op, "boards": ["host"]}},
        {"grid": {"ops": [op] * 1000, "boards": ["host"] * 1000, "tilings": ["auto"] * 70}},
        {"grid": {"ops": [op], "boards": []}},
        {"grid": [1, 2]},
        {"nope": 1},
        [],
        "just a string",
        [None],
    ]
    cases = []
    for i in range(n):
        doc = rng.choice(docs)
        p = w.scratch(f"sweep{i}.json")
        p.write_text(json.dumps(doc) if rng.random() < 0.9 else json.dumps(doc)[:-1])
        cases.append(Case("sweep", ["sweep", str(p), "--workers", "0"], json.dumps(doc)[:80]))
    return cases


# manifest keys and values that break them (written here, not taken from the schema)
_MANIFEST_BREAKS = [
    ("board", ["drop", "host", ["host"], None, 3]),
    ("board.name", ["drop", 7, None, "", ["host"]]),
    ("runtime", ["drop", "fast", [], None]),
    ("runtime.threads", ["four", 0, -2, 1.5, True, 10**30]),
    ("runtime.fallback", ["ignore", 3]),
    ("runtime.fallback.kernel_error", ["ignore", 1]),
    ("inputs", ["drop", "garbage", {}, None, [1, 2], [[[]]]]),
    ("inputs.0", ["drop-name", "x", 5]),
    ("inputs.0.shape", ["1x3", None, {}]),
    ("inputs.0.shape.1", [-3, 1.5, "?" * 3000, None]),
    ("inputs.0.dtype", ["fp7", 1, None]),
    ("outputs", ["drop", [], "y"]),
    ("reference", ["drop", "ref.npz"]),
    ("reference.tolerance.rel", [-1, "tight", None, 1e300]),
    ("reference.inputs", [["image"], {"input_0": "nope"}]),
    ("reference.seed", [-1, "zero"]),
    ("files.model.onnx.bytes", ["many", -1, None]),
    ("kernels", ["neon.gemm", {}]),
    ("targets", ["neon", [1]]),
    ("predicted.latency_s", ["fast", -1]),
    ("format_version", [1.0, "1"]),
    ("quantization", [{"scheme": "per_tensor"}]),     # undeclared top-level key
]


def _edit(doc, path: str, value):
    parts = path.split(".")
    if parts[0] == "files":                           # a file name holds a dot
        parts = ["files", "model.onnx", *parts[3:]]
    *parents, last = parts
    for p in parents:
        doc = doc[int(p)] if isinstance(doc, list) else doc[p]
    if value == "drop":
        del doc[int(last) if isinstance(doc, list) else last]
    elif value == "drop-name":
        del doc[int(last)]["name"]
    elif isinstance(doc, list):
        doc[int(last)] = value
    else:
        doc[last] = value


def bad_package(w: World, rng, i: int) -> tuple[Path, str]:
    """A copy of the good package with one manifest key broken and every checksum valid."""
    from edgeops import package
    path, values = rng.choice(_MANIFEST_BREAKS)
    value = rng.choice(values)
    d = w.scratch(f"pkg{i}")
    if d.exists():
        shutil.rmtree(d)
    shutil.copytree(w.pkg, d)
    m = d / package.MANIFEST
    doc = json.loads(m.read_bytes())
    _edit(doc, path, value)
    doc.pop("manifest_sha256")
    doc["manifest_sha256"] = hashlib.sha256(package._canonical(doc)).hexdigest()
    m.write_bytes(package._canonical(doc))
    return d, f"{path} = {json.dumps(value)[:40]}"


def manifest_cases(w: World, rng, n: int, slow: bool) -> list[Case]:
    """run, deploy and serve start on packages with a broken manifest; with ``slow``, doctor too
    (its board gets the broken package as current by hand: deploy refuses it)."""
    cases = []
    for i in range(n):
        d, why = bad_package(w, rng, i)
        cmds = [["run", str(d)], ["deploy", str(d), "--to", f"local:{w.scratch(f'b{i}')}"],
                ["serve", str(d), "--port", "0"], ["run", str(d), "--to", f"local:{w.board}"]]
        argv = rng.choice(cmds)
        cases.append(Case(argv[0], argv, why))
    if slow:
        d, why = bad_package(w, rng, n)
        b = w.scratch("doctor-board")
        if b.exists():
            shutil.rmtree(b)
        shutil.copytree(w.board, b, symlinks=True)
        cur = os.readlink(b / "current")
        shutil.rmtree(b / cur)
        shutil.copytree(d, b / cur)
        cases.append(Case("doctor", ["doctor", "--to", f"local:{b}"], f"current: {why}"))
    return cases


def path_cases(w: World, rng, n: int) -> list[Case]:
    """Read-only system paths and files of the wrong kind where edgeops expects its own."""
    op = ["--op", "gemm:M=64,N=64,K=64"]
    pool = [
        ["run", "/proc/self"], ["run", "/"], ["run", "/dev/null"], ["inspect", "/dev/null"],
        ["inspect", "/proc/self/status"], ["inspect", "/"], ["simulate", *op, "--board", "/proc/cpuinfo"],
        ["simulate", *op, "--board", "/dev/null"], ["tune", *op, "--board", "/"],
        ["boards", "/proc/self/status"], ["sweep", "/dev/null"], ["sweep", "/"],
        ["run", str(w.pkg), "--inputs", "/dev/null"], ["run", str(w.pkg), "--inputs", "/proc/self/status"],
        ["run", str(w.pkg), "--model", "/dev/null"],
        ["deploy", str(w.pkg), "--to", "local:/proc/self/fdinfo", "--wait", "0"],
        ["deploy", str(w.pkg), "--to", "ftp://x/y"], ["deploy", str(w.pkg), "--to", "local:"],
        ["deploy", str(w.pkg), "--to", "ssh://"], ["deploy", str(w.pkg), "--to", "qemu-arm64:rel/x"],
        ["deploy", str(w.pkg), "--to", f"local:{w.board}", "--verify-key", "/proc/self/status"],
        ["deploy", str(w.pkg), "--to", f"local:{w.board}", "--verify-key", "/dev/null"],
        ["deploy", "--status", "--to", "local:/nonexistent/edgeops-fuzz"],
        ["doctor", "--to", "local:/nonexistent/edgeops-fuzz"],
        ["compile", "/dev/null", "--board", "host", "-o", str(w.scratch("x"))],
        ["compile", "sample", "--board", "host", "-o", "/proc/self/edgeops-pkg"],
        ["simulate", "/proc/self/status", "--board", "host"],
        *[["compile", w.model(m), "--board", "host", "-o", str(w.scratch(f"m-{m}"))]
          for m in ("domain", "opset", "big")],
        # estimated before anything runs: minutes of emulation
        ["simulate", "--op", "gemm:M=4096,N=4096,K=4096,dtype=fp16", "--board", "ascend-310b",
         "--emulate"],
        ["simulate", "--op", "conv2d:N=8,C=256,H=224,W=224,K=256,R=3,S=3,pad=1,dtype=fp16",
         "--board", "ascend-910b", "--emulate"],
    ]
    return [Case(a[0], a, " ".join(a[1:])[:90]) for a in rng.sample(pool, min(n, len(pool)))]


# ---- calibration files: quantize's data, the cost model's calibration ---------------------------

def _npy_bytes(a=None, shape=None, descr="<f4", data=b"") -> bytes:
    """An .npy file: ``a`` saved, or a bare header declaring ``shape``/``descr`` before ``data``."""
    import numpy as np
    buf = io.BytesIO()
    if a is not None:
        np.save(buf, a, allow_pickle=True)
    else:
        np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False,
                                                   "shape": shape})
        buf.write(data)
    return buf.getvalue()


def _png_chunk(kind: bytes, body: bytes) -> bytes:
    import struct
    import zlib
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _bomb_png() -> bytes:
    """A valid PNG header declaring 100000 x 100000 pixels (Pillow's decompression-bomb guard)."""
    import struct
    import zlib
    ihdr = struct.pack(">IIBBBBB", 100000, 100000, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr)
            + _png_chunk(b"IDAT", zlib.compress(b"\0" * 16)) + _png_chunk(b"IEND", b""))


# one bad array for the sample model's input "image" (1x3x32x32 float32) per fault: ``n``
# samples (an .npz's array is split into batches; a folder's .npy is one batch of 1)
def _bad_array(fault: str, g, n: int = 2):
    import numpy as np
    x = g.standard_normal((n, 3, 32, 32)).astype(np.float32)
    return {"rank0": np.float32(1.5), "rank6": x.reshape(1, 1, n, 3, 32, 32),
            "rank1": x.reshape(-1), "shape": x[:, :, :16, :],
            "int": x.astype(np.int32), "complex": x.astype(np.complex64),
            "object": np.array([x[0], "a"], dtype=object), "str": np.full(x.shape, "x"),
            "float64": x.astype(np.float64), "nan": np.where(x > 1, np.nan, x),
            "inf": np.where(x > 1, np.inf, x), "zero": x[:0]}[fault]


_ARRAY_FAULTS = ["rank0", "rank6", "rank1", "shape", "int", "complex", "object", "str", "float64",
                 "nan", "inf", "zero", "huge", "truncated", "garbage"]
_DATA_FAULTS = ([f"npz-{f}" for f in _ARRAY_FAULTS] + ["npz-names", "npz-empty", "npz-zipjunk",
                "npz-is-npy", "npz-is-dir"] + [f"dir-{f}" for f in _ARRAY_FAULTS]
                + ["dir-empty", "dir-junk-images", "dir-bomb-png", "dir-truncated-png",
                   "dir-npy-subdirs", "file-npy", "file-png-bomb", "folder-named-png", "/dev/null",
                   "/proc/self/status", "/proc/self"])


def _npy_fault(fault: str, g, n: int = 2) -> bytes:
    if fault == "huge":         # declares 2^40 float32 (4 TiB), holds 64 bytes
        return _npy_bytes(shape=(2**40, 3, 32, 32), data=b"\0" * 64)
    if fault == "truncated":
        b = _npy_bytes(_bad_array("inf", g).clip(-1, 1))
        return b[:len(b) // 2]
    if fault == "garbage":
        return bytes(g.integers(0, 256, 4096, dtype="uint8"))
    return _npy_bytes(_bad_array(fault, g, n))


def bad_calib_data(w: World, fault: str, d: Path, g) -> str:
    """Write the calibration DATA of ``fault`` into the fresh folder ``d``; its path."""
    import zipfile

    import numpy as np
    if fault.startswith("/"):
        return fault
    d.mkdir(parents=True, exist_ok=True)
    if fault.startswith("npz-"):
        f = fault[4:]
        p = d / "calib.npz"
        if f == "names":
            x = g.standard_normal((2, 3, 32, 32)).astype(np.float32)
            np.savez(p, img=x, label=np.zeros(2, np.int64))
        elif f == "empty":
            np.savez(p)
        elif f == "zipjunk":
            with zipfile.ZipFile(p, "w") as z:
                z.writestr("image.txt", "not an array\n")
        elif f == "is-npy":
            p.write_bytes(_npy_bytes(g.standard_normal((2, 3, 32, 32)).astype(np.float32)))
        elif f == "is-dir":
            p.mkdir()
            (p / "junk.txt").write_text("x")
        elif f in ("huge", "garbage") and g.random() < 0.5 or f == "truncated":
            if f == "truncated":            # a valid archive cut short
                np.savez(p, image=g.standard_normal((4, 3, 32, 32)).astype(np.float32))
                b = p.read_bytes()
                p.write_bytes(b[:int(len(b) * g.uniform(0.1, 0.95))])
            elif f == "garbage":
                p.write_bytes(bytes(g.integers(0, 256, 2048, dtype="uint8")))
            else:
                with zipfile.ZipFile(p, "w") as z:
                    z.writestr("image.npy", _npy_fault("huge", g))
        else:
            with zipfile.ZipFile(p, "w") as z:
                z.writestr("image.npy", _npy_fault(f, g))
        return str(p)
    if fault.startswith("dir-"):
        f = fault[4:]
        if f == "empty":
            return str(d)
        if f == "junk-images":
            for k in range(3):
                (d / f"img{k}.{'png' if k % 2 else 'jpg'}").write_bytes(
                    bytes(g.integers(0, 256, 512, dtype="uint8")))
        elif f == "bomb-png":
            (d / "big.png").write_bytes(_bomb_png())
        elif f == "truncated-png":
            from PIL import Image
            Image.fromarray(g.integers(0, 256, (64, 64, 3), dtype="uint8")).save(d / "a.png")
            b = (d / "a.png").read_bytes()
            (d / "a.png").write_bytes(b[:len(b) // 2])
        elif f == "npy-subdirs":
            (d / "image").mkdir()
            inner = g.choice(["garbage", "huge", "rank0"])
            (d / "image" / "0.npy").write_bytes(_npy_fault(inner, g))
        else:
            for k in range(2):
                (d / f"b{k}.npy").write_bytes(_npy_fault(f, g, 1))
        return str(d)
    if fault == "file-npy":
        p = d / "calib.npy"
        p.write_bytes(_npy_bytes(g.standard_normal((1, 3, 32, 32)).astype(np.float32)))
        return str(p)
    if fault == "file-png-bomb":
        p = d / "big.png"
        p.write_bytes(_bomb_png())
        return str(p)
    if fault == "folder-named-png":
        p = d / "folder.png"
        p.mkdir()
        return str(p)
    raise ValueError(fault)


def _good_calibration(board: str) -> dict:
    """A plausible format-current calibration of ``board`` with this machine's and kernels'
    keys, so that the damage below is what the reader meets, not staleness."""
    from edgeops import boards
    from edgeops.lower.policy import kernels_key, machine_key
    from edgeops.simulator.calibration import FORMAT, descriptor
    entries = {f"{side}|{level}|fp32|t{t}": {"call_s": 5e-6, "comp_eff": 0.5, "bw_eff": 0.4,
                                              "weight_bw_eff": 0.3, "rows": 12, "band": 0.2}
               for side in ("edgeops", "kernel", "ort") for level in ("*", "class:stream", "Relu")
               for t in (1, 2)}
    prov = {"kernels_key": kernels_key(), "machine_key": machine_key(),
            "board": descriptor(boards.load(board)), "grid": "tiny", "threads": [1, 2],
            "wall_s": 1.0, "date": "2026-12-03", "session_overhead_s": {"1": 7e-6, "2": 8e-6},
            "rates": {f"fp32|t{t}": [1e11, 5e10, 2e10] for t in (1, 2)}}
    in_model = {f"t{t}": {"ort": [1.1, 1.1, 0.5], "edgeops": [1.5, 1.5, 0.5], "cache": 1e7,
                          "cache_share": 0.5, "models": 2} for t in (1, 2)}
    return {"format": FORMAT, "board": board, "provenance": prov, "entries": entries,
            "rows": [], "wholes": [], "in_model": in_model}


NAN = float("nan")
# (where, values): a key path into the document (see _edit) and what replaces it there
_CALIBRATION_BREAKS = [
    ("format", [3, "2", None, 2.5, "drop"]),
    ("entries", ["abc", [], None, 7, "drop"]),
    ("entries.edgeops|*|fp32|t1", ["x", [], None]),
    ("entries.edgeops|*|fp32|t1.call_s", ["fast", NAN, -1, float("inf"), None, "drop"]),
    ("entries.edgeops|*|fp32|t1.comp_eff", ["x", NAN, -0.5, 0, [1]]),
    ("entries.ort|*|fp32|t1.band", [NAN, "wide", None, -1, "drop"]),
    ("provenance", ["x", [], None, 3]),
    ("provenance.board", ["host", [], {}, None]),
    ("provenance.board.clock_hz", [NAN, "fast", -1, None]),
    ("provenance.board.cores", ["two", NAN, None]),
    ("provenance.board.kind", [3, None, ["cpu"]]),
    ("provenance.rates", ["x", [], {"fp32|t1": [1, 2]}, {"fp32|t1": "fast"},
                          {"fp32|t1": [NAN, 1, 1]}, {"fp32|t1": [0, 0, 0]}]),
    ("provenance.session_overhead_s", ["x", [], {"x": 1}, {"1": "fast"}, {"1": NAN}]),
    ("provenance.kernels_key", [5, None, ["k"]]),
    ("in_model", ["x", [], {"tx": {}}, {"t1": "f"}, {"t1": {"ort": "a"}}, {"t1": {"ort": [1, 2]}},
                  {"t1": {"ort": [NAN, 1, 1]}}, {"t1": {"edgeops": None}}]),
    ("in_model.t1.cache_share", ["x", NAN, -1, None]),
    ("in_model.t1.cache", ["x", NAN, None]),
]


def _nan_fill(doc):
    if isinstance(doc, dict):
        return {k: _nan_fill(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_nan_fill(v) for v in doc]
    return NAN if isinstance(doc, (int, float)) and not isinstance(doc, bool) and doc != 2 else doc


def _dict_edit(doc, path: str, value):
    *parents, last = path.split(".")
    for p in parents:
        doc = doc[p]
    if value == "drop":
        del doc[last]
    else:
        doc[last] = value


def bad_calibration_file(w: World, rng, root: Path, board: str, own: str) -> tuple[str, bool]:
    """Write a damaged calibration of ``board`` as ``<root>/calibration/<own>.json``; (why, whether
    the reader must say it ignored it: an older format is stale, not damaged)."""
    d = root / "calibration"
    d.mkdir(parents=True, exist_ok=True)
    p = d / f"{own}.json"
    doc = _good_calibration(board)
    m = rng.choice(["edit"] * 6 + ["truncated", "garbage", "empty", "scalar", "nan-fill", "old",
                                   "dir"])
    if m == "edit":
        path, values = rng.choice(_CALIBRATION_BREAKS)
        value = rng.choice(values)
        _dict_edit(doc, path, value)
        p.write_text(json.dumps(doc))
        # another format version (an integer) is stale, like an older file, not damaged
        return f"{path} = {json.dumps(value)[:40]}", not (path == "format" and type(value) is int)
    text = json.dumps(doc)
    if m == "truncated":
        p.write_text(text[:rng.randint(1, len(text) - 1)])
    elif m == "garbage":
        p.write_bytes(bytes(rng.randrange(256) for _ in range(512)))
    elif m == "empty":
        p.write_text("")
    elif m == "scalar":
        p.write_text(rng.choice(["null", "[]", '"calibration"', "42", "[{}]"]))
    elif m == "nan-fill":
        p.write_text(json.dumps(_nan_fill(doc)))
    elif m == "old":
        doc["format"] = 1
        p.write_text(json.dumps(doc))
        return "format 1 (an older edgeops)", False
    elif m == "dir":
        p.mkdir()
    return m, True


def _case_cache(w: World, name: str) -> Path:
    """A cache root of its own for one case: the run's cache (host figures, tunings, the bridge)
    linked in, all but its calibrations."""
    from edgeops import cache
    shared = cache.root()
    root = w.scratch(name)
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    if shared.is_dir():
        for e in shared.iterdir():
            if e.name != "calibration":
                (root / e.name).symlink_to(e.resolve())
    return root


def calib_cases(w: World, rng, n: int) -> list[Case]:
    """Bad calibration data for quantize / compile --quantize (refused in one line), damaged
    cost-model calibrations in the cache (tolerated: ignored with a warning), and calibrate
    --output where nothing can be written (refused before the grid is measured)."""
    import numpy as np
    cases = []
    nq, nc = max(1, n * 11 // 20), max(1, n * 6 // 20)
    for i in range(nq):
        fault = rng.choice(_DATA_FAULTS)
        d = w.scratch(f"cal{i}")
        if d.exists():
            shutil.rmtree(d)
        data = bad_calib_data(w, fault, d, np.random.default_rng(rng.randrange(2**32)))
        how = rng.choice(["quantize", "quantize", "compile", "eval"])
        if how == "compile":
            argv = ["compile", "sample", "--board", "host", "-o", str(d / "pkg"), "--quantize",
                    data]
        elif how == "eval":
            argv = ["quantize", "sample", "--calib", "random:2", "--eval", data, "-o",
                    str(d / "q.onnx")]
        else:
            argv = ["quantize", "sample", "--calib", data, "-o", str(d / "q.onnx")]
        cases.append(Case(argv[0], argv, f"{how} {fault}"))
    for i in range(nc):
        root = _case_cache(w, f"calcache{i}")
        own = rng.random() < 0.5            # host's own file, or one host borrows from
        why, warn = bad_calibration_file(w, rng, root, "host" if own else "rpi5",
                                         "host" if own else "rpi5")
        cmd = rng.choice(["simulate", "tune", "compile"])
        argv = [cmd, str(w.sym), "--shapes", "x:4x64", "--board", "host"]
        if cmd == "compile":
            argv += ["-o", str(w.scratch(f"calcache{i}-pkg")), "--no-verify", "--force"]
        cases.append(Case(cmd, argv, f"{'own' if own else 'borrowed'} calibration: {why}",
                          env={"EDGEOPS_CACHE_DIR": str(root)}, expect="tolerated", warn=warn))
    existing = w.scratch("calib-existing.json")
    existing.write_text("{}")
    outs = [([str(w.work)], "a directory"), ([str(w.work), "--force"], "a directory, --force"),
            (["/proc/version"], "read-only"), (["/proc/version", "--force"], "read-only, --force"),
            (["/proc/self/edgeops-calib.json"], "in /proc"), ([str(existing)], "existing file"),
            (["/nonexistent-edgeops/x.json"], "no such directory"), ([""], "empty"),
            ([str(w.work / "cases")], "a directory"),
            ([str(w.pkg / "manifest.json") + "/x"], "below a file")]
    for argv, why in rng.sample(outs, min(len(outs), max(1, n - nq - nc))):
        cases.append(Case("calibrate", ["calibrate", "--threads", "1", "--json", "--output", *argv],
                          f"--output {why}", env={"EDGEOPS_CALIBRATE_GRID": "tiny"}))
    return cases


def generate(w: World, seed: int, budget: int, slow: bool = False) -> list[Case]:
    """About ``budget`` cases, the same ones for the same seed."""
    rng = random.Random(seed)
    share = max(1, budget // 9)
    cases = (flag_cases(w, rng, share) + opspec_cases(w, rng, share) + shape_cases(w, rng, share)
             + board_cases(w, rng, share) + sweep_cases(w, rng, share)
             + manifest_cases(w, rng, share, slow) + path_cases(w, rng, share)
             + calib_cases(w, rng, share))
    rng.shuffle(cases)
    return cases


# ---- running ------------------------------------------------------------------------------------

class _Hang(Exception):
    pass


def _judge(case, rc, err, seconds, rss=None, raised=None, warned=False) -> Outcome:
    if raised is not None or "Traceback (most recent call last)" in err:
        kind = "traceback"
    elif seconds > CAP_S:
        kind = "hang"
    elif case.expect == "tolerated" and rc == 0:
        # a damaged cache file: ignored, and said so (unless it is merely stale)
        kind = "accepted" if case.warn and not (warned or "EdgeOpsWarning" in err) else "clean"
    elif rc != 2:
        kind = "accepted"
    elif len(err.strip().splitlines()) != 1 or not err.startswith("edgeops"):
        kind = "not-one-line"
    else:
        kind = "clean"
    if kind == "clean" and rss is not None and rss > CAP_RSS:
        kind = "rss"
    return Outcome(case, kind, rc, (raised or err)[-600:], seconds, rss)


@contextlib.contextmanager
def _env(env: dict | None):
    """``env`` set in os.environ for the block, the old values back after it."""
    old = {k: os.environ.get(k) for k in env or {}}
    os.environ.update(env or {})
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_inprocess(case: Case) -> Outcome:
    from edgeops.cli import main
    out, err = io.StringIO(), io.StringIO()

    def alarm(*_):
        raise _Hang()
    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, CAP_S + 5)
    t0 = time.perf_counter()
    raised = None
    import warnings
    caught = []
    try:
        # warnings recorded here, not printed: under pytest they would never reach stderr
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), _env(case.env), \
                warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                rc = main(case.argv)
            except SystemExit as e:             # argparse
                rc = e.code if isinstance(e.code, int) else 2
    except _Hang:
        rc, raised = None, None
        return Outcome(case, "hang", None, err.getvalue()[-600:], time.perf_counter() - t0)
    except BaseException as e:  # noqa: BLE001  (the finding: it escaped the CLI)
        import traceback
        rc, raised = None, "".join(traceback.format_exception(e))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    from edgeops.errors import EdgeOpsWarning
    warned = any(issubclass(w.category, EdgeOpsWarning) for w in caught)
    return _judge(case, rc, err.getvalue(), time.perf_counter() - t0, raised=raised, warned=warned)


def run_process(case: Case, cwd: Path) -> Outcome:
    """As a process: its own peak RSS (wait4), killed past the cap."""
    t0 = time.perf_counter()
    with open(cwd / "stderr.txt", "w+") as ferr:
        p = subprocess.Popen([sys.executable, "-m", "edgeops", *case.argv], cwd=cwd,
                             stdout=subprocess.DEVNULL, stderr=ferr,
                             env={**os.environ, **(case.env or {})})
        deadline = t0 + CAP_S + 30
        while True:
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                p.kill()
                _, status, usage = os.wait4(p.pid, 0)
                return Outcome(case, "hang", None, "", time.perf_counter() - t0,
                               usage.ru_maxrss * 1024)
            time.sleep(0.02)
        p.returncode = os.waitstatus_to_exitcode(status)
        ferr.seek(0)
        err = ferr.read()
    return _judge(case, p.returncode, err, time.perf_counter() - t0, usage.ru_maxrss * 1024)


def table(outcomes: list[Outcome]) -> str:
    kinds = ["clean", "traceback", "accepted", "hang", "not-one-line", "rss"]
    rows = {}
    for o in outcomes:
        r = rows.setdefault(o.case.cmd, dict.fromkeys(kinds, 0))
        r[o.kind] += 1
    lines = [f"{'subcommand':12} {'tried':>5} " + " ".join(f"{k:>12}" for k in kinds)]
    for cmd in sorted(rows):
        r = rows[cmd]
        lines.append(f"{cmd:12} {sum(r.values()):5} " + " ".join(f"{r[k]:12}" for k in kinds))
    tot = {k: sum(r[k] for r in rows.values()) for k in kinds}
    lines.append(f"{'all':12} {sum(tot.values()):5} " + " ".join(f"{tot[k]:12}" for k in kinds))
    return "\n".join(lines)


def main(argv=None) -> int:
    import argparse
    import tempfile
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget", type=int, default=400)
    ap.add_argument("--subprocess", type=int, default=20, help="cases also run as a process")
    ap.add_argument("--work", help="working folder (default: a temporary one)")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(a.work or tmp)
        os.environ.setdefault("EDGEOPS_CACHE_DIR", str(work / "cache"))
        w = World.build(work)
        cases = generate(w, a.seed, a.budget, slow=True)
        t0 = time.perf_counter()
        outs = [run_inprocess(c) for c in cases]
        rng = random.Random(a.seed)
        procs = [run_process(c, work) for c in rng.sample(cases, min(a.subprocess, len(cases)))]
        print(f"in-process: {len(outs)} cases in {time.perf_counter() - t0:.0f} s")
        print(table(outs))
        if procs:
            print(f"\nas processes ({len(procs)}; peak RSS max "
                  f"{max(o.rss or 0 for o in procs) / 2**20:.0f} MiB):")
            print(table(procs))
        for o in [*outs, *procs]:
            if o.kind != "clean":
                print(f"\n[{o.kind}] {' '.join(o.case.argv)[:200]}\n  {o.err.strip()[-400:]}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
