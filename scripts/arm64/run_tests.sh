#!/usr/bin/env bash
# Run the `-m arm64` NEON kernel tests on an emulated Cortex-A76: the sysroot's aarch64
# CPython 3.11 under qemu-user, with this checkout installed as a pure-Python wheel.
#
#   scripts/arm64/run_tests.sh [pytest args...]
#
# EDGEOPS_ARM64_SYSROOT picks the sysroot (built by build_sysroot.sh when missing). The Numba
# cache lives in the sysroot, so a second run does not recompile under emulation.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SYSROOT=${EDGEOPS_ARM64_SYSROOT:-$HOME/.cache/edgeops/arm64-sysroot}
HOSTPY=${PYTHON:-$( [ -x "$ROOT/.venv/bin/python" ] && echo "$ROOT/.venv/bin/python" || echo python3 )}

"$ROOT/scripts/arm64/build_sysroot.sh" "$SYSROOT"

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# edgeops is pure Python: build its wheel on the host, install it for the emulated interpreter
"$HOSTPY" -m pip wheel -q --no-deps -w "$WORK" "$ROOT" >/dev/null
"$HOSTPY" -m pip install -q --no-deps --target "$WORK/pkg" "$WORK"/edgeops-*.whl
# sync into the sysroot copying only files whose CONTENT changed: Numba keys its disk cache on
# source mtimes, and recompiling everything under emulation takes minutes
PKG=$SYSROOT/opt/edgeops/pkg
"$HOSTPY" - "$WORK/pkg" "$PKG" <<'PY'
import filecmp, shutil, sys
from pathlib import Path
src, dst = Path(sys.argv[1]), Path(sys.argv[2])
for f in src.rglob("*"):
    if f.is_file() and "__pycache__" not in f.parts:
        t = dst / f.relative_to(src)
        if not t.exists() or not filecmp.cmp(f, t, shallow=False):
            t.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, t)
for t in list(dst.rglob("*.py")):
    if not (src / t.relative_to(dst)).exists():
        t.unlink()
PY

export QEMU_CPU=${QEMU_CPU:-cortex-a76}
export PYTHONPATH=$PKG:$SYSROOT/opt/edgeops/site
export NUMBA_CACHE_DIR=$SYSROOT/opt/edgeops/numba-cache
export EDGEOPS_UNDER_QEMU=1
# run from outside the checkout: `python -m` puts the cwd first on sys.path, and the source
# tree's edgeops/ (without the package-dir mapping) would shadow the installed package
cd "$WORK"
qemu-aarch64-static -L "$SYSROOT" "$SYSROOT/usr/bin/python3.11" -m pytest -q -m arm64 \
  -p no:cacheprovider --rootdir "$ROOT" "$ROOT/tests/targets/neon" "$@"
