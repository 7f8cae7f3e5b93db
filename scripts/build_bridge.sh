#!/usr/bin/env bash
# Build the native ONNX Runtime bridge (edgeops/ort/native.c) for x86_64 and aarch64 into
# edgeops/ort/_prebuilt/<machine>/edgeops_native.so, the wheel's package data: boards without a
# C compiler use it. Each library embeds the sha256 of the native.c it was built from
# (edgeops_native_source); edgeops loads a prebuilt library only when that matches.
#
#   scripts/build_bridge.sh [--install]     (--install: apt-get the cross compiler when missing)
#
# CC_X86_64 and CC_AARCH64 pick the compilers (defaults: cc on an x86_64 host, else
# x86_64-linux-gnu-gcc; aarch64-linux-gnu-gcc, Debian's gcc-aarch64-linux-gnu).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SRC=$ROOT/edgeops/ort/native.c
OUT=$ROOT/edgeops/ort/_prebuilt
HASH=$(sha256sum "$SRC" | cut -d' ' -f1)
host=$(uname -m)
CC_X86_64=${CC_X86_64:-$([ "$host" = x86_64 ] && echo cc || echo x86_64-linux-gnu-gcc)}
CC_AARCH64=${CC_AARCH64:-$([ "$host" = aarch64 ] && echo cc || echo aarch64-linux-gnu-gcc)}

if [ "${1:-}" = --install ] && ! command -v "$CC_AARCH64" >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc-aarch64-linux-gnu >/dev/null
fi

build() {   # machine compiler
  local dir=$OUT/$1 cc=$2
  if ! command -v "$cc" >/dev/null 2>&1; then
    echo "build_bridge: $cc not found, $1 not built (apt-get install gcc-aarch64-linux-gnu, or --install)" >&2
    return 1
  fi
  mkdir -p "$dir"
  # -ffile-prefix-map: no build path in the library, so rebuilds elsewhere give the same bytes
  "$cc" -O2 -shared -fPIC -Wall -Wextra -ffile-prefix-map="$ROOT"=. \
    -DEDGEOPS_SOURCE_HASH="\"$HASH\"" -o "$dir/edgeops_native.so.tmp" "$SRC" -lpthread
  strip --strip-unneeded "$dir/edgeops_native.so.tmp" 2>/dev/null \
    || "${cc%gcc}strip" --strip-unneeded "$dir/edgeops_native.so.tmp" 2>/dev/null || true
  mv "$dir/edgeops_native.so.tmp" "$dir/edgeops_native.so"
  echo "$1: $dir/edgeops_native.so ($(stat -c %s "$dir/edgeops_native.so") bytes, source $HASH)"
}

rc=0
build x86_64 "$CC_X86_64" || rc=1
build aarch64 "$CC_AARCH64" || rc=1
exit $rc
