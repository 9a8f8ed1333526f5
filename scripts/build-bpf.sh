#!/usr/bin/env bash
# Builds the in-kernel holder scan (src/proc/bpf/holders.bpf.c) into the
# CO-RE object the binary carries (src/proc/bpf/holders.bpf.o), with clang
# alone: the kernel types it reads are declared in kernel.h and relocated to
# the running kernel's layout at load time from its BTF. A plain
# `cargo build` never runs this; the object is committed.
#
#   scripts/build-bpf.sh           rebuild the committed object
#   scripts/build-bpf.sh --check   fail when the committed object is not
#                                  what the source builds to (CI)
#
# Either way it fails where a program needs more stack than the kernel
# gives one (scripts/bpf-stack.py).
set -euo pipefail
scripts=$(cd "$(dirname "$0")" && pwd)
cd "$scripts/../src/proc/bpf"
CLANG=${CLANG:-clang}
STRIP=${LLVM_STRIP:-llvm-strip}
OBJDUMP=${LLVM_OBJDUMP:-llvm-objdump}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# -g: BTF and its relocation records (CO-RE needs them); the DWARF is
# stripped below. The prefix map keeps the checkout's path out of the object.
"$CLANG" -g -O2 -target bpf -ffile-prefix-map="$PWD"=. -c holders.bpf.c -o "$out/holders.bpf.o"
"$STRIP" -g "$out/holders.bpf.o"
python3 "$scripts/bpf-stack.py" "$out/holders.bpf.o" "$OBJDUMP"
case "${1:-}" in
--check)
    if ! cmp -s "$out/holders.bpf.o" holders.bpf.o; then
        echo "src/proc/bpf/holders.bpf.o is not what holders.bpf.c builds to with $("$CLANG" --version | head -1): run scripts/build-bpf.sh and commit it" >&2
        exit 1
    fi
    echo "src/proc/bpf/holders.bpf.o is current"
    ;;
"") cp "$out/holders.bpf.o" holders.bpf.o ;;
*) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac
