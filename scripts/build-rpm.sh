#!/usr/bin/env bash
# Builds gpufree's RPM with rpmbuild (Debian's and RHEL's `rpm` package):
# the same files as the .deb, taken from its asset list in Cargo.toml
# (scripts/rpm-spec.py writes the spec from it), the zsh completion where
# RHEL's packages put theirs. The package lands in target/rpm/.
#   scripts/build-rpm.sh        the release build
#   scripts/build-rpm.sh --ci   the debug build already there (CI)
# rpmbuild rather than cargo-generate-rpm: the RPM tools are installed
# anyway to check the package, and `cargo install cargo-generate-rpm
# --locked` (0.21.1) took 2 min 49 s on this project's 2-core machines,
# out of CI's 15 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(scripts/package-assets.sh "$@")
top=$PWD/target/rpmbuild
rm -rf "$top"
mkdir -p "$top" target/rpm
cargo metadata --no-deps --format-version 1 --offline | scripts/rpm-spec.py "$bin" >"$top/gpufree.spec"
rpmbuild -bb --quiet \
    --define "_topdir $top" \
    --define "_rpmdir $PWD/target/rpm" \
    --define '_build_name_fmt %%{NAME}-%%{VERSION}-%%{RELEASE}.%%{ARCH}.rpm' \
    "$top/gpufree.spec"
find target/rpm -name 'gpufree-*.rpm' -newer "$top/gpufree.spec"
