#!/usr/bin/env bash
# `cmake --install` into a scratch prefix, then build examples/simple.c against what was installed (the
# public header, libvlmspec.a, vlmspec.pc) exactly as a user would, and run the installed CLI.
# Usage: bash scripts/check_install.sh BUILD_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: check_install.sh BUILD_DIR}
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
for f in include/vlmspec.h bin/vlmspec; do
  [ -e "$prefix/$f" ] || { echo "check_install: $f was not installed" >&2; exit 1; }
done
pc=$(find "$prefix" -name vlmspec.pc | head -n 1)
lib=$(find "$prefix" -name libvlmspec.a | head -n 1)
[ -n "$pc" ] && [ -n "$lib" ] || { echo "check_install: vlmspec.pc or libvlmspec.a missing" >&2; exit 1; }
if command -v pkg-config >/dev/null; then
  flags=$(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --cflags --libs vlmspec)
else
  flags="-I$prefix/include $lib -lpcre2-8 -lopenblas -lm -lpthread"
fi
# shellcheck disable=SC2086
cc -std=c11 -Wall -Wextra -Werror -o "$prefix/simple" examples/simple.c $flags
"$prefix/bin/vlmspec" version >/dev/null
"$prefix/simple" 2>/dev/null && { echo "check_install: simple without arguments should fail" >&2; exit 1; }
echo "check_install: installed to a scratch prefix; examples/simple.c built against it with: $flags"
