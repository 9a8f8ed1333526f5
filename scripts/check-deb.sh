#!/usr/bin/env bash
# CI, after scripts/build-deb.sh: the .deb holds what package-assets.sh
# generates and every contrib file not named below as left out, and it
# installs into a scratch root (enabling gpufree-prepare.service there) where
# the installed gpufree runs its demo;
# its binary holds no test hook (no GPUFREE_TEST_* name: the test-hooks
# feature was off).
# scripts/check-rpm.sh then holds the RPM to this package, file for file.
set -euo pipefail
cd "$(dirname "$0")/.."
fail() { echo "check-deb: $*" >&2; exit 1; }
# The newest package, should several be there (file names of our own).
# shellcheck disable=SC2012
deb=$(ls -t target/debian/gpufree_*.deb | head -n 1)
list=$(dpkg-deb -c "$deb" | awk '{ print substr($6, 2) }')
# Made from the binary (scripts/package-assets.sh), so not in the checkout
# to be listed: the binary, a man page of its own and of a subcommand, and
# the completions.
for f in /usr/bin/gpufree /usr/share/man/man1/gpufree.1.gz /usr/share/man/man1/gpufree-check.1.gz \
    /usr/share/bash-completion/completions/gpufree /usr/share/zsh/vendor-completions/_gpufree \
    /usr/share/fish/vendor_completions.d/gpufree.fish; do
    grep -qx "$f" <<<"$list" || fail "$deb lacks $f"
done
# Every contrib file is installed under /usr/share/gpufree, or is named
# here as not shipped (cluster-wide Kubernetes manifests, applied from the
# checkout: the alert rules, gpufree's DaemonSet, the scrape configs), so a
# new contrib file is in the packages or is left out on purpose.
not_shipped=(contrib/k8s/alerts.yaml contrib/k8s/daemonset.yaml
    contrib/k8s/prometheus-scrape.yaml contrib/k8s/servicemonitor.yaml)
while IFS= read -r f; do
    [[ " ${not_shipped[*]} " == *" $f "* ]] && continue
    grep -qx "/usr/share/gpufree/${f#contrib/}" <<<"$list" ||
        fail "$f is not in $deb: add it to [package.metadata.deb] assets in Cargo.toml (the RPM takes that list too), or to not_shipped in $0"
done < <(find contrib -type f | sort)

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates"
: >"$root/var/lib/dpkg/status"
# Only the package itself goes in: its dependency (libc6) is the host's.
if ! out=$(dpkg --root="$root" --force-depends --force-not-root --force-script-chrootless -i "$deb" 2>&1); then
    fail "dpkg could not install $deb into $root: $out"
fi
dpkg-query --admindir="$root/var/lib/dpkg" -W -f='${Package} ${Status}\n' gpufree | grep -q "install ok installed"
# gpufree prepare runs at boot: its unit is in the unit directory and the
# package's postinst enabled it (deb-systemd-helper, inside DPKG_ROOT).
unit=/usr/lib/systemd/system/gpufree-prepare.service
grep -qx "$unit" <<<"$list" || fail "$deb lacks $unit"
[ "$(readlink "$root/etc/systemd/system/multi-user.target.wants/gpufree-prepare.service")" = "$unit" ] ||
    fail "installing $deb did not enable gpufree-prepare.service"
# A second look, not the proof: an optimised build may keep a short name
# only as compared bytes, so the proof is that the package is built without
# the test-hooks feature (src/test_hooks/on.rs not compiled at all).
hooks=$(LC_ALL=C grep -a -o 'GPUFREE_TEST_[A-Z_]*' "$root/usr/bin/gpufree" | sort -u | tr '\n' ' ' || true)
[ -z "$hooks" ] || fail "the packaged gpufree holds test hooks (built with the test-hooks feature): $hooks"
# The installed binary alone: its version, and the demo on the simulated
# NVML library it carries.
env -i HOME="$root/home" "$root/usr/bin/gpufree" --version
env -i HOME="$root/home" timeout 60 "$root/usr/bin/gpufree" demo >"$root/demo.out" 2>&1 ||
    fail "the installed gpufree demo failed: $(tail -n 20 "$root/demo.out")"
grep -q 'All 8 GPUs are free again' "$root/demo.out" ||
    fail "the installed gpufree demo did not free the GPUs: $(tail -n 20 "$root/demo.out")"
echo "check-deb: $(basename "$deb") lists $(wc -l <<<"$list") entries, every contrib file but ${#not_shipped[@]} left out, installs into a scratch root and runs its demo, no test hook's name in its binary"
