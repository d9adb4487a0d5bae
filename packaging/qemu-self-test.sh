#!/usr/bin/env bash
# The bundle's self-test on older x86-64 CPUs, emulated (qemu-x86_64 user mode):
#   Haswell — AVX2, no AVX-512: llama.cpp must pick its haswell CPU backend;
#   Nehalem — SSE4.2 only:      llama.cpp must pick its sse42 CPU backend.
# A bundle whose llama.cpp (or anything else in it) was compiled for the build machine's CPU
# dies here with SIGILL. `make package-qemu`; part of `make package-test`. ~3-4 min per CPU.
#
# Under qemu-user only the process qemu starts is emulated: a program it executes runs on the
# real CPU. PyInstaller's bootloader restarts itself as a child with LD_LIBRARY_PATH set (and
# the _PYI_* variables below), so the script starts the bundle as that child directly, and the
# whole app runs emulated: model load, turn, save, restore. The children the app starts (the
# crash probe, the template worker) run on the real CPU, and /proc/cpuinfo is the real CPU's.
set -euo pipefail
BUNDLE=$(realpath "${1:-dist/Hearth/hearth}")
INTERNAL=$(dirname "$BUNDLE")/_internal
test -x "$BUNDLE" || { echo "qemu-self-test: no bundle at $BUNDLE (make package)"; exit 2; }
command -v qemu-x86_64 >/dev/null || { apt-get update -qq && apt-get install -y -qq qemu-user >/dev/null; }
for pair in Haswell:haswell Nehalem:sse42; do
    cpu=${pair%%:*} variant=${pair##*:}
    cache=$(mktemp -d)
    start=$(date +%s)
    # env -i: no OPENBLAS_CORETYPE & co. from this machine (they name kernels the emulated CPU lacks)
    if ! out=$(env -i PATH=/usr/bin:/bin HOME="$HOME" XDG_CACHE_HOME="$cache" HF_HUB_OFFLINE=1 \
            _PYI_ARCHIVE_FILE="$BUNDLE" _PYI_PARENT_PROCESS_LEVEL=-1 LD_LIBRARY_PATH="$INTERNAL" \
            timeout 1200 qemu-x86_64 -cpu "$cpu" "$BUNDLE" --self-test 2>&1); then
        echo "qemu-self-test: FAIL on -cpu $cpu:"; echo "$out" | tail -20; rm -rf "$cache"; exit 1
    fi
    rm -rf "$cache"
    line=$(echo "$out" | grep "^hearth self-test:" || true)
    case "$line" in
        "hearth self-test: PASS"*"loaded: libggml-cpu-$variant.so"*) ;;
        *) echo "qemu-self-test: FAIL on -cpu $cpu (expected PASS with libggml-cpu-$variant.so):"; echo "$out" | tail -20; exit 1 ;;
    esac
    echo "qemu-self-test: -cpu $cpu: PASS with libggml-cpu-$variant.so in $(( $(date +%s) - start )) s"
done
