#!/usr/bin/env bash
# The PID-reuse harness at scale: 10,000 trials (a third per window: the
# scan between the fd table and the identity read, between plan and signal,
# an exec between plan and signal) in a PID namespace of its own, then the
# counts; wrong_kills and wrong_listings must be 0. Builds nothing: it runs
# an existing build with the test hooks (the `test-hooks` feature: the
# driver pauses gpufree with GPUFREE_TEST_PAUSE), release if there is one,
# else debug (as `cargo test` leaves it), or $GPUFREE.
# Needs root (unshare --pid, /proc/sys/kernel/ns_last_pid).
#   scripts/pid-reuse-trials.sh [TRIALS] [driver.py flags...]
set -euo pipefail
cd "$(dirname "$0")/.."

trials=${1:-10000}
shift || true
target=${CARGO_TARGET_DIR:-target}
gpufree=${GPUFREE:-}
if [ -z "$gpufree" ]; then
    for b in "$target/release/gpufree" "$target/debug/gpufree"; do
        if [ -x "$b" ] && LC_ALL=C grep -q -a GPUFREE_TEST_PAUSE "$b"; then
            gpufree=$b
            break
        fi
    done
fi
if [ -z "$gpufree" ]; then
    echo "no gpufree build with the test hooks under $target: cargo build -p gpufree --features test-hooks [--release] first (cargo test leaves one in debug), or set GPUFREE" >&2
    exit 2
fi
lib="$("$gpufree" sim lib)/libnvidia-ml.so.1"
if [ ! -e "$lib" ]; then
    echo "no simulated NVML library at $lib: build the workspace (cargo build --workspace)" >&2
    exit 2
fi

echo "gpufree: $gpufree; $trials trials" >&2
start=$(date +%s)
status=0
unshare --pid --fork --mount-proc python3 tests/reuse/driver.py \
    --gpufree "$(realpath "$gpufree")" --lib "$(realpath "$lib")" \
    --trials "$trials" --window all "$@" || status=$?
echo "wall: $(($(date +%s) - start)) s" >&2
exit "$status"
