#!/usr/bin/env bash
# Builds gpufree's Debian package with cargo-deb (`cargo install cargo-deb`):
# the binary, its man pages and shell completions (generated from the
# binary), and the integration files. The package lands in target/debian/.
#   scripts/build-deb.sh        the release build
#   scripts/build-deb.sh --ci   the debug build already there (CI)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(scripts/package-assets.sh "$@")
# cargo-deb takes the binary from its profile's directory: the one
# package-assets.sh chose.
# The CI's debug binary is 220 MB: compressed fast (a larger file, the
# same contents), not with xz's minutes.
profile=()
if [[ $bin == target/debug/* ]]; then
    profile=(--profile dev --fast)
fi
cargo deb --no-build --no-strip "${profile[@]}" --output target/debian/
