#!/usr/bin/env bash
# Builds gpufree's Debian package with cargo-deb (`cargo install cargo-deb`):
# the binary, its man pages and shell completions (generated from the
# binary), and the integration files. The package lands in target/debian/.
#   scripts/build-deb.sh        the release build
#   scripts/build-deb.sh --ci   the debug build already there (CI)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --ci ]; then
    bin=target/debug/gpufree
    profile=(--profile dev)
else
    cargo build --release -p gpufree
    bin=target/release/gpufree
    profile=()
fi
assets=target/deb-assets
rm -rf "$assets"
mkdir -p "$assets/man" "$assets/completions"
"$bin" man --dir "$assets/man" >/dev/null
"$bin" completions bash >"$assets/completions/gpufree.bash"
"$bin" completions zsh >"$assets/completions/_gpufree"
"$bin" completions fish >"$assets/completions/gpufree.fish"
cargo deb --no-build --no-strip "${profile[@]}" --output target/debian/
