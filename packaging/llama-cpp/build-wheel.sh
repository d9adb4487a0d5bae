#!/usr/bin/env bash
# Builds llama-cpp-python's wheel the way Hearth runs it, once per set of flags and patches:
#   packaging/llama-cpp/build-wheel.sh PYTHON   -> prints the wheel's path on its last line
# The wheel goes to .wheels/llama-cpp-python-<version>-<key>/, where <key> hashes the sdist,
# cmake-args and patches/ — so a change of flags builds a new wheel and never reuses an old one
# (pip's own wheel cache is keyed by the sdist's version alone). See docs/llama-cpp-build.md.
set -euo pipefail
VERSION=0.3.36
SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PYTHON=${1:-python3}
KEY=$( (echo "$VERSION $SHA256"; cat "$HERE/cmake-args" "$HERE"/patches/*.patch) | sha256sum | cut -c1-12)
OUT="$ROOT/.wheels/llama-cpp-python-$VERSION-$KEY"
wheel() { find "$OUT" -maxdepth 1 -name "llama_cpp_python-$VERSION-*.whl" 2>/dev/null | head -n1; }
if [ -n "$(wheel)" ]; then wheel; exit 0; fi
mkdir -p "$ROOT/.wheels"
exec 9>"$ROOT/.wheels/.lock"
flock 9  # one build at a time (make run and make test started together); then look again
if [ -n "$(wheel)" ]; then wheel; exit 0; fi

SDIST_DIR="$ROOT/.wheels/sdist"
SDIST="$SDIST_DIR/llama_cpp_python-$VERSION.tar.gz"
mkdir -p "$SDIST_DIR"
if [ ! -f "$SDIST" ] || ! echo "$SHA256  $SDIST" | sha256sum -c --quiet - 2>/dev/null; then
    rm -f "$SDIST"
    "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$SDIST_DIR" >&2
    echo "$SHA256  $SDIST" | sha256sum -c --quiet - >&2
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/hearth-llama-build.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
tar xzf "$SDIST" -C "$WORK"
SRC="$WORK/llama_cpp_python-$VERSION"
for p in "$HERE"/patches/*.patch; do
    patch --quiet -p1 -d "$SRC" < "$p" >&2
done
CMAKE_ARGS=$(tr '\n' ' ' < "$HERE/cmake-args")
echo "building llama-cpp-python $VERSION (key $KEY) with: $CMAKE_ARGS" >&2
mkdir -p "$OUT.partial"
CMAKE_ARGS="$CMAKE_ARGS" "$PYTHON" -m pip wheel --quiet --no-deps --no-cache-dir -w "$OUT.partial" "$SRC" >&2
rm -rf "$OUT" && mv "$OUT.partial" "$OUT"
wheel
