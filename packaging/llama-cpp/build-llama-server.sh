#!/usr/bin/env bash
# Builds llama.cpp's own llama-server, the benchmarks' peer (`hearth bench` B2, B8, B9, B13, B14),
# from the llama.cpp vendored in the same llama-cpp-python sdist Hearth's wheel is built from:
#   packaging/llama-cpp/build-llama-server.sh [PYTHON]   (make llama-server)
#   -> build/llama-server/llama-server, whose path it prints on its last line
# Upstream's defaults and none of Hearth's patches (they are switched by environment variables
# and off by default anyway): a Release build tuned for this CPU (GGML_NATIVE=ON: a peer for
# benchmarks on this machine, not a binary to ship), one static binary, and nothing fetched
# while building (no HTTPS, no prebuilt web UI: the server answers its API, without its web page).
# Built once per sdist and flags (build/llama-server/KEY); ~15 min on 2 cores.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PYTHON=${1:-python3}
# The sdist the wheel uses: its version and checksum, read from build-wheel.sh.
VERSION=$(sed -n 's/^VERSION=//p' "$HERE/build-wheel.sh")
SHA256=$(sed -n 's/^SHA256=//p' "$HERE/build-wheel.sh")
FLAGS=(-DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF -DLLAMA_OPENSSL=OFF
       -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF)
KEY=$(echo "$VERSION $SHA256 ${FLAGS[*]}" | sha256sum | cut -c1-12)
OUT="$ROOT/build/llama-server"
BIN="$OUT/llama-server"
if [ -x "$BIN" ] && [ "$(cat "$OUT/KEY" 2>/dev/null)" = "$KEY" ]; then echo "$BIN"; exit 0; fi

SDIST_DIR="$ROOT/.wheels/sdist"
SDIST="$SDIST_DIR/llama_cpp_python-$VERSION.tar.gz"
mkdir -p "$SDIST_DIR" "$OUT"
if [ ! -f "$SDIST" ] || ! echo "$SHA256  $SDIST" | sha256sum -c --quiet - 2>/dev/null; then
    rm -f "$SDIST"
    "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$SDIST_DIR" >&2
    echo "$SHA256  $SDIST" | sha256sum -c --quiet - >&2
fi
SRC="$OUT/src-$KEY"
if [ ! -f "$SRC/.unpacked" ]; then
    rm -rf "$SRC" && mkdir -p "$SRC"
    tar xzf "$SDIST" -C "$SRC" --strip-components=3 "llama_cpp_python-$VERSION/vendor/llama.cpp"
    touch "$SRC/.unpacked"
fi
GEN=()
if command -v ninja >/dev/null; then GEN=(-G Ninja); fi
JOBS=$(nproc 2>/dev/null || echo 2)
echo "building llama-server (llama.cpp of llama-cpp-python $VERSION, key $KEY) with: ${FLAGS[*]}" >&2
nice cmake -S "$SRC" -B "$OUT/cmake-$KEY" "${GEN[@]}" "${FLAGS[@]}" >&2
nice cmake --build "$OUT/cmake-$KEY" --target llama-server -j"$JOBS" >&2
cp "$OUT/cmake-$KEY/bin/llama-server" "$BIN.partial"
mv "$BIN.partial" "$BIN"
echo "$KEY" > "$OUT/KEY"
"$BIN" --version >&2 || true
echo "$BIN"
