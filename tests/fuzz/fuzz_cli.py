"""Generated bad inputs for the ``edgeops`` command line, from a seed and a budget.

Every case is an argv that is wrong by construction (a flag out of range or not a number, an op
spec with a zero, negative, huge or missing size, --shapes that cannot be, a board file whose
figure is -1, inf, nan, 1e30 or of the wrong type, a sweep file with a bad key, a package whose
manifest is malformed but whose checksums are valid, read-only system paths where a file of
ours is expected). Each must end with exit status 2 and one line on stderr, no traceback, within
a time cap: in-process (``edgeops.cli.main``, fast) and, for a sample, as a separate process whose
peak RSS (``os.wait4``'s, measured, not an rlimit) must stay under a cap.

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


def generate(w: World, seed: int, budget: int, slow: bool = False) -> list[Case]:
    """About ``budget`` cases, the same ones for the same seed."""
    rng = random.Random(seed)
    share = max(1, budget // 8)
    cases = (flag_cases(w, rng, share) + opspec_cases(w, rng, share) + shape_cases(w, rng, share)
             + board_cases(w, rng, share) + sweep_cases(w, rng, share)
             + manifest_cases(w, rng, share, slow) + path_cases(w, rng, share))
    rng.shuffle(cases)
    return cases


# ---- running ------------------------------------------------------------------------------------

class _Hang(Exception):
    pass


def _judge(case, rc, err, seconds, rss=None, raised=None) -> Outcome:
    if raised is not None or "Traceback (most recent call last)" in err:
        kind = "traceback"
    elif seconds > CAP_S:
        kind = "hang"
    elif rc != 2:
        kind = "accepted"
    elif len(err.strip().splitlines()) != 1 or not err.startswith("edgeops"):
        kind = "not-one-line"
    elif rss is not None and rss > CAP_RSS:
        kind = "rss"
    else:
        kind = "clean"
    return Outcome(case, kind, rc, (raised or err)[-600:], seconds, rss)


def run_inprocess(case: Case) -> Outcome:
    from edgeops.cli import main
    out, err = io.StringIO(), io.StringIO()

    def alarm(*_):
        raise _Hang()
    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, CAP_S + 5)
    t0 = time.perf_counter()
    raised = None
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
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
    return _judge(case, rc, err.getvalue(), time.perf_counter() - t0, raised=raised)


def run_process(case: Case, cwd: Path) -> Outcome:
    """As a process: its own peak RSS (wait4), killed past the cap."""
    t0 = time.perf_counter()
    with open(cwd / "stderr.txt", "w+") as ferr:
        p = subprocess.Popen([sys.executable, "-m", "edgeops", *case.argv], cwd=cwd,
                             stdout=subprocess.DEVNULL, stderr=ferr)
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
