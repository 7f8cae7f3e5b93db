"""The one-namespace layout survives a real, non-editable install."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAPPING = {"edgeops": "edgeops", "edgeops.tiling": "tiling", "edgeops.simulator": "simulator",
           "edgeops.targets": "targets", "edgeops.quantize": "quantize", "edgeops.boards": "boards"}


def _declared_packages():
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib
    doc = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return doc["tool"]["setuptools"]["packages"], doc["tool"]["setuptools"]["package-dir"]


def test_every_python_folder_is_a_declared_package():
    declared, pkg_dir = _declared_packages()
    assert pkg_dir == MAPPING
    found = set()
    for top_pkg, folder in MAPPING.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join([top_pkg, *rel.parts]) if rel.parts else top_pkg)
    # a nested mapped folder (edgeops.tiling inside edgeops/) would appear twice; there is none
    assert sorted(found) == sorted(declared), "pyproject [tool.setuptools] packages is out of date"


@pytest.mark.slow
def test_non_editable_install_has_imports_boards_and_console_script(tmp_path):
    target = tmp_path / "site"
    # build isolation fetches the pinned setuptools, as a user's `pip install .` would
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                        str(target), str(ROOT)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert not (target / "tiling").exists(), "a top-level 'tiling' package leaked into site-packages"
    assert not (target / "boards").exists()
    code = ("import edgeops, edgeops.tiling, edgeops.simulator, edgeops.targets, edgeops.quantize, "
            "edgeops.boards as b; assert 'site' in edgeops.__file__, edgeops.__file__; "
            "print(sorted(b.names()))")
    env = dict(os.environ, PYTHONPATH=str(target))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    names = eval(r.stdout)
    assert "rpi5" in names and "ascend-910b" in names
    exe = target / "bin" / "edgeops"
    assert exe.exists()
    r = subprocess.run([sys.executable, str(exe), "--version"], capture_output=True, text=True, env=env,
                       cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.startswith("edgeops "), r.stderr

