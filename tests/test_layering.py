"""The import direction of docs/architecture.md, enforced.

Every module of the ``edgeops`` namespace is found through pyproject's package-dir mapping (so
``tiling/`` is ``edgeops.tiling``), and every import in it, function-level ones included, is read
with ``ast``. A module may import its own layer and the layers below it; ``quantize`` only the
core; nothing forms a circle; edgeops/ort imports no target. Imports of a module's own parent packages are not edges: Python runs
them first anyway, and ``from . import x`` is how a package's modules see each other.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Lowest first. A module belongs to the longest prefix listed; the layer of docs/architecture.md.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("core", ("edgeops", "edgeops._version", "edgeops.errors", "edgeops.env", "edgeops.dtypes",
              "edgeops.cache", "edgeops.threads", "edgeops.ops", "edgeops.graph",
              "edgeops.registry", "edgeops.reference_kernels", "edgeops.plans",
              "edgeops.manifest")),
    ("boards", ("edgeops.boards",)),
    ("simulator", ("edgeops.simulator",)),
    ("tiling", ("edgeops.tiling",)),
    ("targets", ("edgeops.targets",)),
    ("quantize", ("edgeops.quantize",)),
    # the pipeline, bottom up
    ("models", ("edgeops.sample", "edgeops.zoo", "edgeops.modelzoo")),
    ("passes", ("edgeops.passes",)),
    ("target loader", ("edgeops.pipeline.targets",)),
    ("ort", ("edgeops.ort",)),
    ("package", ("edgeops.package",)),
    ("lower", ("edgeops.lower", "edgeops.backend")),
    ("pipeline", ("edgeops.pipeline",)),
    ("run", ("edgeops.run",)),
    ("deploy", ("edgeops.deploy",)),
    ("serve", ("edgeops.serve",)),
    ("cli", ("edgeops.cli", "edgeops.__main__")),
]
RANK = {name: i for i, (name, _) in enumerate(LAYERS)}
# quantize needs only core (compile chaining and latency costing are the pipeline's)
ONLY_CORE = {"quantize"}

def package_dirs() -> dict[str, Path]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib
    doc = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return {pkg: ROOT / d for pkg, d in doc["tool"]["setuptools"]["package-dir"].items()}


def modules() -> dict[str, tuple[Path, bool]]:
    """{dotted name: (file, is a package __init__)} through the package-dir mapping."""
    dirs = package_dirs()
    mapped = {d.resolve() for p, d in dirs.items() if p != "edgeops"}
    out = {}
    for pkg, d in dirs.items():
        for f in sorted(d.rglob("*.py")):
            rel = f.relative_to(d)
            if any(parent.resolve() in mapped for parent in f.parents
                   if parent != d and d in parent.parents):
                continue    # a folder mapped on its own (none nest today)
            parts = list(rel.parts[:-1])
            if not (f.parent / "__init__.py").exists():
                continue    # not in a package: scripts, data
            is_pkg = f.name == "__init__.py"
            name = ".".join([pkg, *parts] + ([] if is_pkg else [f.stem]))
            out[name] = (f, is_pkg)
    return out


def imports(mods: dict[str, tuple[Path, bool]]) -> dict[str, set[tuple[str, int]]]:
    """{module: {(imported module, line)}}, every import statement anywhere in the file."""
    def known(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[tuple[str, int]]] = {m: set() for m in mods}
    for name, (path, is_pkg) in mods.items():
        here = name if is_pkg else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            found: list[str] = []
            if isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = here.split(".")[: len(here.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                for a in node.names:      # a submodule, else an attribute of ``base``
                    sub = f"{base}.{a.name}"
                    found.append(sub if sub in mods else base)
            for f in found:
                target = known(f)
                if target and target != name and not name.startswith(target + "."):
                    edges[name].add((target, node.lineno))
    return edges


def layer(module: str) -> str:
    best, best_len = None, -1
    for lname, prefixes in LAYERS:
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best_len:
                best, best_len = lname, len(p)
    if best is None:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS and docs/architecture.md")
    return best


def cycles(edges: dict[str, set[tuple[str, int]]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    graph = {m: sorted({t for t, _ in es}) for m, es in edges.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out = []
    for root in graph:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = len(index)
                stack.append(v)
                on.add(v)
            nxt = graph.get(v, [])
            if i < len(nxt):
                work.append((v, i + 1))
                w = nxt[i]
                if w not in index:
                    work.append((w, 0))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    return out


@pytest.fixture(scope="module")
def graph():
    mods = modules()
    return mods, imports(mods)


def test_scanner_sees_the_mapping_and_function_level_imports(graph):
    mods, edges = graph
    # folders mapped into the namespace are found under their dotted names
    assert {"edgeops.tiling.search", "edgeops.boards.schema", "edgeops.targets.neon.gemm",
            "edgeops.quantize.api", "edgeops.simulator.graph"} <= set(mods)
    # an import inside a function body is an edge: edgeops.cli.demo imports its helpers lazily
    assert any(t == "edgeops.pipeline.compile" for t, _ in edges["edgeops.cli.demo"])


def test_every_module_has_a_layer(graph):
    mods, _ = graph
    for m in mods:
        layer(m)


def test_imports_follow_the_layers(graph):
    mods, edges = graph
    bad = []
    for m, es in sorted(edges.items()):
        lm = layer(m)
        for t, line in sorted(es):
            lt = layer(t)
            if lm in ONLY_CORE and lt not in ("core", lm):
                bad.append(f"{mods[m][0].relative_to(ROOT)}:{line}: {m} ({lm}) imports {t} ({lt}); "
                           f"{lm} may import only core")
            elif RANK[lt] > RANK[lm]:
                bad.append(f"{mods[m][0].relative_to(ROOT)}:{line}: {m} ({lm}) imports {t} "
                           f"({lt}), a layer above it")
    assert not bad, "imports against docs/architecture.md's direction:\n" + "\n".join(bad)


def test_no_module_circles(graph):
    _, edges = graph
    found = cycles(edges)
    assert not found, "module circles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_only_the_target_loader_imports_targets_by_name(graph):
    """String imports (importlib) of targets happen in edgeops.pipeline.targets only."""
    mods, _ = graph
    bad = []
    for m, (path, _) in mods.items():
        if m.startswith("edgeops.targets") or m == "edgeops.pipeline.targets":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "import_module"
                    and "edgeops.targets" in ast.unparse(node)):
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert not bad, "\n".join(bad)


def test_ort_imports_no_target(graph):
    """The runtime knows no target: edgeops/ort reaches kernels through the registry (and the
    target loader), never by importing a target."""
    _, edges = graph
    found = sorted((m, t) for m, es in edges.items() if m.startswith("edgeops.ort")
                   for t, _ in es if t.startswith("edgeops.targets"))
    assert not found, f"edgeops/ort imports a target: {found}"


def test_a_planted_upward_import_and_circle_are_found(tmp_path):
    """The checks can fail: an upward edge and a two-module circle on a fake graph."""
    edges = {"edgeops.graph": {("edgeops.cli.run", 3)}, "edgeops.cli.run": {("edgeops.graph", 1)},
             "edgeops.tiling.api": set()}
    assert cycles(edges) == [["edgeops.cli.run", "edgeops.graph"]]
    assert RANK[layer("edgeops.cli.run")] > RANK[layer("edgeops.graph")]
    assert layer("edgeops.pipeline.targets") == "target loader"
    assert layer("edgeops.pipeline.compile") == "pipeline"
