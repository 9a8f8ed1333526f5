#!/usr/bin/env bash
# The step the .deb and the RPM share (scripts/build-deb.sh, build-rpm.sh):
# picks the binary, writes its man pages and shell completions (generated
# from the binary) into target/package-assets, where both packages' asset lists
# ([package.metadata.deb] in Cargo.toml) take them, and prints the binary's
# path on stdout. The binary must hold no test hook (the `test-hooks`
# feature, src/test_hooks/): one that does is refused.
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
    # cargo test leaves its own binary there, built with the test hooks;
    # cargo build puts back the one it built without them (already built
    # and fresh: cargo links it again, it compiles nothing).
    cargo build -p gpufree --bin gpufree --quiet >&2
else
    cargo build --release -p gpufree >&2
    bin=target/release/gpufree
fi
if LC_ALL=C grep -q -a GPUFREE_TEST_ "$bin"; then
    echo "package-assets: $bin holds test hooks (GPUFREE_TEST_*): it was built with the test-hooks feature; build it with cargo build" >&2
    exit 1
fi
assets=target/package-assets
rm -rf "$assets"
mkdir -p "$assets/man" "$assets/completions"
"$bin" man --dir "$assets/man" >/dev/null
"$bin" completions bash >"$assets/completions/gpufree.bash"
"$bin" completions zsh >"$assets/completions/_gpufree"
"$bin" completions fish >"$assets/completions/gpufree.fish"
echo "$bin"
