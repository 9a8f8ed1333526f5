#!/usr/bin/env bash
# Builds gpufree's Debian package with cargo-deb (`cargo install cargo-deb`):
# the binary, its man pages and shell completions (generated from the
# binary), and the integration files. The package lands in target/debian/.
#   scripts/build-deb.sh        the release build
#   scripts/build-deb.sh --ci   the debug build already there (CI)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/package-assets.sh "$@" >/dev/null
profile=()
if [ "${1:-}" = --ci ]; then
    profile=(--profile dev)
fi
cargo deb --no-build --no-strip "${profile[@]}" --output target/debian/
