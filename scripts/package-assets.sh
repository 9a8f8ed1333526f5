#!/usr/bin/env bash
# The step the .deb and the RPM share (scripts/build-deb.sh, build-rpm.sh):
# picks the binary, writes its man pages and shell completions (generated
# from the binary) into target/package-assets, where both packages' asset lists
# ([package.metadata.deb] in Cargo.toml) take them, and prints the binary's
# path on stdout.
#   scripts/package-assets.sh        the release build (built here)
#   scripts/package-assets.sh --ci   the debug build already there (CI)
set -euo pipefail
cd "$(dirname "$0")/.."
# The asset lists name target/: a binary built elsewhere would be missed,
# or an older one in target/ packaged.
if [ -n "${CARGO_TARGET_DIR:-}" ] && [ "$(realpath -m "$CARGO_TARGET_DIR")" != "$(realpath -m target)" ]; then
    echo "package-assets: CARGO_TARGET_DIR=$CARGO_TARGET_DIR: the packages are made from target/; unset it" >&2
    exit 2
fi
if [ "${1:-}" = --ci ]; then
    bin=target/debug/gpufree
    [ -x "$bin" ] || { echo "package-assets: no $bin: run cargo build first" >&2; exit 1; }
else
    cargo build --release -p gpufree >&2
    bin=target/release/gpufree
fi
assets=target/package-assets
rm -rf "$assets"
mkdir -p "$assets/man" "$assets/completions"
"$bin" man --dir "$assets/man" >/dev/null
"$bin" completions bash >"$assets/completions/gpufree.bash"
"$bin" completions zsh >"$assets/completions/_gpufree"
"$bin" completions fish >"$assets/completions/gpufree.fish"
echo "$bin"
