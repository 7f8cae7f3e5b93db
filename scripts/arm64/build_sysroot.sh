#!/usr/bin/env bash
# Build an arm64 (aarch64) Debian bookworm sysroot with Python 3.11 and the aarch64 wheels the
# NEON kernels need, for running `-m arm64` tests under qemu-user (see scripts/arm64/run_tests.sh).
#
#   scripts/arm64/build_sysroot.sh [SYSROOT]      (default: $EDGEOPS_ARM64_SYSROOT or
#                                                  ~/.cache/edgeops/arm64-sysroot)
#
# Idempotent: a finished sysroot carries a stamp with the recipe's hash and is reused, so CI on
# the same machine pays the ~1 minute build once. Needs: qemu-user-static and debootstrap
# (installed with apt-get when missing and running as root), network access to a Debian mirror
# and to PyPI.
set -euo pipefail

SYSROOT=${1:-${EDGEOPS_ARM64_SYSROOT:-$HOME/.cache/edgeops/arm64-sysroot}}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SITE=$SYSROOT/opt/edgeops/site
# aarch64 wheels for the sysroot's CPython 3.11. Several manylinux tags: with manylinux2014
# alone pip settles on years-old releases.
WHEELS=(numpy "numba>=0.59" llvmlite "onnx>=1.16" "onnxruntime>=1.17" "onnxruntime-extensions>=0.12"
        rich pytest "hypothesis>=6.100" pytest-timeout)
RECIPE_HASH=$(printf '%s\n' "$MIRROR" "${WHEELS[@]}" "$(sed -n '1,200p' "$0")" | sha256sum | cut -c1-16)
STAMP=$SYSROOT/.edgeops-sysroot-$RECIPE_HASH

if [ -f "$STAMP" ]; then
  echo "arm64 sysroot ready: $SYSROOT" >&2
  exit 0
fi

need=""
command -v qemu-aarch64-static >/dev/null 2>&1 || need="$need qemu-user-static"
command -v debootstrap >/dev/null 2>&1 || need="$need debootstrap"
if [ -n "$need" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >/dev/null
  else
    echo "build_sysroot: missing$need; install them (apt-get install$need) and rerun" >&2
    exit 2
  fi
fi

rm -rf "$SYSROOT"
mkdir -p "$SYSROOT"
echo "debootstrap (first stage) into $SYSROOT ..." >&2
# --foreign: download and unpack the base only (the second stage would need to run arm64
# binaries as root); the extra packages' .debs are unpacked by hand below.
debootstrap --foreign --arch=arm64 --variant=minbase \
  --include=python3,python3.11,libpython3.11-stdlib,libstdc++6,libgomp1,zlib1g \
  bookworm "$SYSROOT" "$MIRROR" >/dev/null
for deb in "$SYSROOT"/var/cache/apt/archives/*.deb; do
  dpkg-deb -x "$deb" "$SYSROOT"
done

# Numba/llvmlite read /proc/cpuinfo for the host CPU; qemu-user resolves paths inside the -L
# prefix first, so this file is what the emulated process sees (a Cortex-A76, as QEMU_CPU).
mkdir -p "$SYSROOT/proc"
cat > "$SYSROOT/proc/cpuinfo" <<'EOF'
processor	: 0
BogoMIPS	: 108.00
Features	: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp
CPU implementer	: 0x41
CPU architecture: 8
CPU variant	: 0x4
CPU part	: 0xd0b
CPU revision	: 1
EOF

echo "aarch64 wheels into $SITE ..." >&2
python3 -m pip install -q --target "$SITE" --only-binary=:all: --python-version 3.11 \
  --implementation cp --platform manylinux_2_28_aarch64 --platform manylinux_2_27_aarch64 \
  --platform manylinux2014_aarch64 --platform manylinux_2_17_aarch64 "${WHEELS[@]}"

touch "$STAMP"
echo "arm64 sysroot ready: $SYSROOT" >&2
